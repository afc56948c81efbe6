//! `sfb sim`: a whole cluster on the discrete-event simulator.

use anyhow::{Result, bail};
use clap::Args;
use sfb_harness::sim::{self, CostModel, Ingress, SimOptions};

use super::run::{RunArgs, Transport};

/// `sfb sim` options: every `sfb run` option, plus the simulated network and machine.
#[derive(Debug, Args)]
pub struct SimArgs {
    #[command(flatten)]
    pub sim: SimFlags,
    #[command(flatten)]
    pub run: RunArgs,
}

/// The simulated network and machine (`sfb sim`, and `sfb bench --transport sim`).
#[derive(Debug, Clone, Args)]
pub struct SimFlags {
    /// Every node's NIC egress rate (e.g. 10gbit, 1.25e9 bytes/s). Default: --bandwidth
    /// if given, else 10gbit.
    #[arg(long, value_name = "RATE")]
    pub egress: Option<sfb_net::bandwidth::Rate>,
    /// Every node's NIC ingress rate: same (as egress), unlimited, or a rate.
    #[arg(long, default_value = "same")]
    pub ingress: Ingress,
    /// One-way link delay (s, ms or us suffix; a bare number is seconds).
    #[arg(long, default_value = "50us", value_parser = sim::seconds)]
    pub latency: f64,
    /// Each frame's delay is uniform in latency ± jitter, seeded per link.
    #[arg(long, default_value = "0", value_parser = sim::seconds)]
    pub jitter: f64,
    /// How work is priced: model (flop and byte counts at --flops and --mem-bw;
    /// deterministic) or calibrate (measure this machine's rates first, at the run's
    /// shapes; the summary's sim block names them, so passing them back replays the run).
    #[arg(long, default_value = "model", value_parser = sim::cost_model)]
    pub costs: CostModel,
    /// The modelled machine's GEMM rate, flop/s. Default: 5.7e10 (one core of this
    /// project's development machine; sfb bench --scenario scale: 16 of them).
    #[arg(long)]
    pub flops: Option<f64>,
    /// The modelled machine's memory bandwidth, bytes/s. Default: 8.3e10.
    #[arg(long)]
    pub mem_bw: Option<f64>,
    /// Seconds of compute_sv per sample (replaces the cost model's and the
    /// calibration's figure; a calibrated run's summary names the figure it measured).
    #[arg(long, value_name = "SECONDS", value_parser = sim::seconds)]
    pub compute_per_sample: Option<f64>,
    /// Seconds of one evaluation on the held-out data (likewise).
    #[arg(long, value_name = "SECONDS", value_parser = sim::seconds)]
    pub evaluate_cost: Option<f64>,
    /// Seconds of one apply call beyond its pairs: the engine's whole apply path (the
    /// optimizer's and the prox's passes over W), replacing the cost model's one pass
    /// over W (a calibrated run measures it in a one-peer run; its summary names it).
    #[arg(long, value_name = "SECONDS", value_parser = sim::seconds)]
    pub apply_per_call: Option<f64>,
    /// NODES:CORES: that many nodes share one host of that many cores: each node's work
    /// (compute, applies, transport CPU) runs on the host's free cores, so NODES nodes
    /// working at once take NODES/CORES times as long and a node waiting on the network
    /// leaves its core to the others (for comparing with processes on one machine, e.g.
    /// P:2 here; FMS P+1:2). With --costs calibrate the rates are then measured with that
    /// many kernels running at once on this host (caches and memory bus shared, as
    /// co-located processes share them). Default: a host per node.
    #[arg(long, value_name = "NODES:CORES", value_parser = sim::colocate)]
    pub colocate: Option<(usize, usize)>,
    /// CPU the transport spends per byte at each end (encryption, framing, decoding), as
    /// a rate of one core, e.g. 360MB (what sfb bench --scenario link's framed arm
    /// measures for libp2p on this machine). Default: free.
    #[arg(long, value_name = "RATE")]
    pub transport_cpu: Option<sfb_net::bandwidth::Rate>,
    /// CPU the transport spends per frame at each end beyond its bytes (wake-ups, system
    /// calls, hand-offs between tasks), e.g. 20us (what scripts/frame_cpu.sh measures
    /// with real processes). Default: free.
    #[arg(long, value_name = "SECONDS", value_parser = sim::seconds)]
    pub frame_cpu: Option<f64>,
    /// Timing only: nodes send frames of their real sizes but do no arithmetic (no
    /// compute_sv, applies or evaluation) and hold no replica, for P where real replicas
    /// do not fit or take too long; times from the cost model, no objective. SFB with
    /// MLR only.
    #[arg(long)]
    pub timing_only: bool,
    /// Peer PEER crashes right after completing CLOCK (repeatable); the others learn of
    /// it --peer-timeout later and repair the topology. Needs --on-peer-loss continue.
    /// The summary's lost_peers lists each crash.
    #[arg(long = "crash", value_name = "PEER@CLOCK", value_parser = sim::crash)]
    pub crashes: Vec<(usize, u64)>,
    /// This share of the peers (drawn with --seed) crash, each after a random clock of the
    /// run, e.g. 0.05.
    #[arg(long, value_name = "FRACTION")]
    pub crash_fraction: Option<f64>,
    /// This share of the crashed peers (drawn with --seed) come back --restart-after their
    /// crash as a fresh process that rejoins the run: a neighbour hands it its state and it
    /// trains on. The summary's sim block lists each restart and whom it rejoined from.
    #[arg(long, value_name = "FRACTION")]
    pub restart_fraction: Option<f64>,
    /// Simulated seconds from a crash to its restart (more than --peer-timeout; default
    /// twice it).
    #[arg(long, value_name = "SECONDS")]
    pub restart_after: Option<f64>,
    /// PEERS@FROM..UNTIL: a network partition cuts PEERS (comma-separated) off from the
    /// others from FROM until UNTIL simulated seconds (repeatable; e.g. 3@1..71). A cut
    /// that lasts --peer-timeout makes each side count the other lost: then only a side
    /// holding a strict majority of the run's peers trains on (the other stops and says
    /// so), unless --on-peer-loss continue-alone. The summary's sim block lists each fault.
    #[arg(long = "partition", value_name = "PEERS@FROM..UNTIL")]
    pub partitions: Vec<sim::Window>,
    /// PEERS@FROM..UNTIL: PEERS stop (take no step and no frame) from FROM until UNTIL
    /// simulated seconds, as SIGSTOP stops a process (repeatable).
    #[arg(long = "pause", value_name = "PEERS@FROM..UNTIL")]
    pub pauses: Vec<sim::Window>,
    /// PEERS@FROM..UNTIL:FACTOR: the links of PEERS carry their frames FACTOR times slower
    /// (link delay and NIC time) from FROM until UNTIL simulated seconds (repeatable; e.g.
    /// 3@1..5:10): a degraded or congested link, not a cut.
    #[arg(long = "slow", value_name = "PEERS@FROM..UNTIL:FACTOR")]
    pub slow: Vec<sim::Slowdown>,
}

impl SimFlags {
    /// The simulator's options these flags give.
    pub fn options(&self) -> SimOptions {
        let d = SimOptions::default();
        SimOptions {
            egress: self.egress,
            ingress: self.ingress,
            latency_s: self.latency,
            jitter_s: self.jitter,
            costs: self.costs,
            flops: self.flops.unwrap_or(d.flops),
            mem_bw: self.mem_bw.unwrap_or(d.mem_bw),
            compute_per_sample_s: self.compute_per_sample,
            evaluate_s: self.evaluate_cost,
            apply_per_call_s: self.apply_per_call,
            measured_apply: None,
            colocate: self.colocate,
            transport_cpu: self.transport_cpu,
            transport_cpu_frame_s: self.frame_cpu,
            timing_only: self.timing_only,
            crashes: self.crashes.clone(),
            crash_fraction: self.crash_fraction,
            restart_fraction: self.restart_fraction,
            restart_after_s: self.restart_after,
            partitions: self.partitions.clone(),
            pauses: self.pauses.clone(),
            slow: self.slow.clone(),
        }
    }
}

pub fn run(args: &SimArgs, app: &crate::App) -> Result<()> {
    if args.run.transport != Transport::Mem || args.run.spec.is_some() {
        bail!(
            "sfb sim runs every node on the simulator: give no --transport or --spec (use \
             sfb run --spec with \"transport\": \"sim\" to run a spec file)"
        );
    }
    let mut spec = args.run.to_spec();
    spec.transport = sfb_harness::Transport::Sim;
    spec.sim = args.sim.options();
    super::run::run_spec(&spec, args.run.print_spec, app)
}
