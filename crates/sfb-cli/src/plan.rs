//! `sfb plan`: the predicted time per clock of SFB full and partial broadcast, FMS and a
//! ring allreduce, from the simulator's cost and network model.

use anyhow::{Result, bail};
use clap::Args;
use sfb_harness::sim::{CostModel, Ingress, SimOptions};
use sfb_lab::plan::Setup;
use sfb_net::bandwidth::Rate;

use sfb_harness::sim::{colocate, seconds};

/// `sfb plan` options.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Nodes P (SFB peers, FMS clients, ring members).
    #[arg(long, short = 'P')]
    pub peers: usize,
    /// Rows J of W (for MLR: classes).
    #[arg(long, visible_alias = "classes", value_name = "J")]
    pub rows: Option<usize>,
    /// Columns D of W (for MLR: features).
    #[arg(long, visible_alias = "features", value_name = "D")]
    pub cols: Option<usize>,
    /// J = D = N (instead of --rows and --cols).
    #[arg(long, value_name = "N", conflicts_with_all = ["rows", "cols"])]
    pub size: Option<usize>,
    /// Mini-batch K per node per clock.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Every node's NIC egress rate (e.g. 10gbit, 1.25e9 bytes/s).
    #[arg(
        long,
        visible_alias = "link",
        value_name = "RATE",
        default_value = "10gbit"
    )]
    pub bandwidth: Rate,
    /// Every node's NIC ingress rate: same (as egress), unlimited, or a rate.
    #[arg(long, default_value = "same")]
    pub ingress: Ingress,
    /// One-way link delay (s, ms or us suffix; a bare number is seconds).
    #[arg(long, default_value = "50us", value_parser = seconds)]
    pub latency: f64,
    /// The machine's GEMM rate, flop/s (ignored with --calibrate).
    #[arg(long, default_value_t = sfb_harness::sim::DEFAULT_FLOPS)]
    pub flops: f64,
    /// The machine's memory bandwidth, bytes/s (ignored with --calibrate).
    #[arg(long, default_value_t = sfb_harness::sim::DEFAULT_MEM_BW)]
    pub mem_bw: f64,
    /// Measure this machine first (replacing --flops and --mem-bw): sfb's apply kernel
    /// on one thread at rank P·K, the copy rate of W, and MLR's compute_sv per sample (a
    /// one-peer run on synthetic data of these shapes; unless --compute-per-sample is
    /// given). A few seconds at J = D = 4096. With --colocate each is timed with as many
    /// kernels running at once as the co-located nodes (alone a kernel has the caches and
    /// memory bus to itself, which underprices them). The plan prints the rates: pass them
    /// to sfb sim as --flops, --mem-bw, --compute-per-sample (with the same --colocate)
    /// to simulate the same machine.
    #[arg(long)]
    pub calibrate: bool,
    /// Seconds of compute_sv per sample (replaces the cost model's and the
    /// calibration's figure).
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub compute_per_sample: Option<f64>,
    /// NODES:CORES: that many nodes share one host of that many cores, so every node's
    /// work takes max(1, NODES/CORES) times as long (as sfb sim; with --calibrate, see
    /// there).
    #[arg(long, value_name = "NODES:CORES", value_parser = colocate)]
    pub colocate: Option<(usize, usize)>,
    /// CPU the transport spends per byte at each end, as a rate of one core (e.g. 360MB,
    /// libp2p's framed link on this machine). Default: free.
    #[arg(long, value_name = "RATE")]
    pub transport_cpu: Option<Rate>,
    /// CPU the transport spends per frame at each end beyond its bytes, e.g. 20us.
    /// Default: free.
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub frame_cpu: Option<f64>,
    /// Out-degrees Q to price besides the best one (comma-separated, each in 1..P-1).
    #[arg(long, value_delimiter = ',', value_name = "Q,…")]
    pub q: Vec<usize>,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
}

impl PlanArgs {
    /// The setup these flags describe (without measuring anything).
    fn setup(&self) -> Result<Setup> {
        let (j, d) = match (self.size, self.rows, self.cols) {
            (Some(n), _, _) => (n, n),
            (None, Some(j), Some(d)) => (j, d),
            _ => bail!("give --rows J and --cols D, or --size N for J = D = N"),
        };
        for (flag, v) in [
            ("--peers", self.peers),
            ("--rows/--size", j),
            ("--cols/--size", d),
            ("--batch", self.batch),
        ] {
            if v == 0 {
                bail!("{flag} must be at least 1, got 0");
            }
        }
        if let Some(&q) = self.q.iter().find(|&&q| q == 0 || q >= self.peers) {
            bail!(
                "--q {q}: each Q must be in 1..={}",
                self.peers.saturating_sub(1)
            );
        }
        for (flag, v) in [("--flops", self.flops), ("--mem-bw", self.mem_bw)] {
            if !(v.is_finite() && v > 0.0) {
                bail!("{flag} must be a positive number, got {v}");
            }
        }
        Ok(Setup {
            peers: self.peers,
            j,
            d,
            batch: self.batch,
            sim: SimOptions {
                egress: Some(self.bandwidth),
                ingress: self.ingress,
                latency_s: self.latency,
                costs: CostModel::Model,
                flops: self.flops,
                mem_bw: self.mem_bw,
                compute_per_sample_s: self.compute_per_sample,
                colocate: self.colocate,
                transport_cpu: self.transport_cpu,
                transport_cpu_frame_s: self.frame_cpu,
                ..SimOptions::default()
            },
            qs: self.q.clone(),
            calibrated: false,
            calibration_workers: 0,
        })
    }
}

pub fn run(args: &PlanArgs) -> Result<()> {
    let mut setup = args.setup()?;
    if args.calibrate {
        sfb_lab::plan::calibrate(&mut setup)?;
    }
    let plan = sfb_lab::plan::plan(&setup)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        out!("{plan}");
    }
    Ok(())
}
