//! `sfb sim`: a whole cluster on the discrete-event simulator.

use anyhow::{Result, bail};
use clap::Args;
use sfb_harness::sim::{CostModel, Ingress, SimOptions};

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
    #[arg(long, default_value = "50us", value_parser = seconds)]
    pub latency: f64,
    /// Each frame's delay is uniform in latency ± jitter, seeded per link.
    #[arg(long, default_value = "0", value_parser = seconds)]
    pub jitter: f64,
    /// How work is priced: model (flop and byte counts at --flops and --mem-bw;
    /// deterministic) or calibrate (measure this machine's rates first, at the run's
    /// shapes; the summary's sim block names them, so passing them back replays the run).
    #[arg(long, default_value = "model", value_parser = cost_model)]
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
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub compute_per_sample: Option<f64>,
    /// Seconds of one evaluation on the held-out data (likewise).
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub evaluate_cost: Option<f64>,
    /// NODES:CORES: that many nodes share one host of that many cores, so every node's
    /// work takes max(1, NODES/CORES) times as long (a crude fair share; for comparing
    /// with processes on one machine, e.g. P:2 here). Default: a host per node.
    #[arg(long, value_name = "NODES:CORES", value_parser = colocate)]
    pub colocate: Option<(usize, usize)>,
    /// CPU the transport spends per byte at each end (encryption, framing, decoding), as
    /// a rate of one core, e.g. 360MB (what sfb bench --scenario link's framed arm
    /// measures for libp2p on this machine). Default: free.
    #[arg(long, value_name = "RATE")]
    pub transport_cpu: Option<sfb_net::bandwidth::Rate>,
    /// Timing only: nodes send frames of their real sizes but do no arithmetic (no
    /// compute_sv, applies or evaluation) and hold no replica, for P where real replicas
    /// do not fit or take too long; times from the cost model, no objective. SFB with
    /// MLR only.
    #[arg(long)]
    pub timing_only: bool,
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
            colocate: self.colocate,
            transport_cpu: self.transport_cpu,
            timing_only: self.timing_only,
        }
    }
}

pub(crate) fn seconds(s: &str) -> Result<f64, String> {
    // Divided (not multiplied by 1e-6), so that 50us is exactly the f64 nearest 50e-6.
    let (num, per_second) = if let Some(n) = s.strip_suffix("us") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        (s, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v / per_second),
        _ => Err(format!(
            "{s:?}: expected a non-negative duration such as 50us, 2ms or 0.001"
        )),
    }
}

pub(crate) fn colocate(s: &str) -> Result<(usize, usize), String> {
    let parsed = s
        .split_once(':')
        .and_then(|(n, c)| Some((n.parse().ok()?, c.parse().ok()?)));
    match parsed {
        Some((n, c)) if n > 0 && c > 0 => Ok((n, c)),
        _ => Err(format!(
            "{s:?}: expected NODES:CORES, both at least 1 (e.g. 8:2)"
        )),
    }
}

fn cost_model(s: &str) -> Result<CostModel, String> {
    match s {
        "model" => Ok(CostModel::Model),
        "calibrate" => Ok(CostModel::Calibrate),
        _ => Err(format!("{s:?}: expected model or calibrate")),
    }
}

pub fn run(args: &SimArgs) -> Result<()> {
    if args.run.transport != Transport::Mem || args.run.spec.is_some() {
        bail!(
            "sfb sim runs every node on the simulator: give no --transport or --spec (use \
             sfb run --spec with \"transport\": \"sim\" to run a spec file)"
        );
    }
    let mut spec = args.run.to_spec();
    spec.transport = sfb_harness::Transport::Sim;
    spec.sim = args.sim.options();
    super::run::run_spec(&spec, args.run.print_spec)
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_take_units() {
        assert_eq!(super::seconds("50us").unwrap(), 50e-6);
        assert_eq!(super::seconds("2ms").unwrap(), 2e-3);
        assert_eq!(super::seconds("0.5").unwrap(), 0.5);
        assert!(super::seconds("-1ms").unwrap_err().contains("non-negative"));
    }
}
