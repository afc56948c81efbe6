//! `sfb bench`'s options, shared by its scenarios' modules.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use sfb_harness::preflight;

use super::train::cli_error;

/// `sfb bench` options.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Scenario to run: kernel, link, fms-vs-sfb, q-sweep, staleness, scaling, model-size,
    /// optimizers, adarevision, saga, compression, prioritization, scale and stragglers
    /// (both simulated: sfb sim at up to 1024 and 256 peers), essp, batch, paper (the SFB
    /// paper's Figs. 5–9 for MLR, L2-MLR, DML and SC), budget-check (root only:
    /// token bucket vs kernel tbf shaping; skipped elsewhere), or `all` (kernel and the
    /// training scenarios, in that order).
    #[arg(long, default_value = "kernel")]
    pub scenario: String,
    /// Directory for JSON/CSV/Markdown/PNG results (training scenarios default to
    /// `sfb-bench`).
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
    /// Transport of the training scenarios' arms (mem has no bandwidth budget; sim runs
    /// every arm on the simulator, with the network and machine of the sim flags below,
    /// --bandwidth as the NIC rate). The scale scenario is always simulated.
    #[arg(long, default_value = "libp2p", value_parser = ["libp2p", "mem", "sim"])]
    pub transport: String,
    /// Training scenarios: peers (default per scenario: fms-vs-sfb 8, q-sweep 12,
    /// staleness 4, scaling up to 8, model-size 4, optimizers 4, adarevision 4).
    #[arg(long)]
    pub peers: Option<usize>,
    /// Training scenarios: J = D of the MLR model (default: fms-vs-sfb 4096, others 1024;
    /// optimizers: of its cost-per-clock arms).
    #[arg(long)]
    pub size: Option<usize>,
    /// fms-vs-sfb, compression, model-size: the partial-broadcast arms train on this
    /// topology file (TOML, JSON or DOT, as `sfb topology` writes), with its P and Q.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// q-sweep, scale: the partial-broadcast arms' mode (gossip, tree or paper; default
    /// gossip).
    #[arg(long, value_name = "MODE")]
    pub partial: Option<sfb_harness::PartialSpec>,
    /// The paper's figures (model-size, batch, scaling, staleness, q-sweep): the model
    /// they train, at a matrix of about n × n (mlr, l2mlr, dml or sc; default mlr). The
    /// paper scenario runs all four.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<sfb_lab::experiment::PaperModel>,
    /// Fewer arms, clocks and evaluations (about six a run): the paper scenario in
    /// minutes (n = 256; model-size n ∈ {128, 256}, batch K ∈ {4, 16, 64}, scaling up to
    /// P=8, staleness s ∈ {0, 2, 8} with a rotating straggler, q-sweep at P=8 with
    /// Q ∈ {1, 2, 4, 7}).
    #[arg(long)]
    pub quick: bool,
    /// model-size: comma-separated J = D values (default 256,512,1024,2048).
    #[arg(long)]
    pub sizes: Option<String>,
    /// Training scenarios: clocks per arm (scaling: clocks at P=1; P peers run clocks/P).
    #[arg(long)]
    pub clocks: Option<u64>,
    /// Training scenarios: the target is the reference arm's held-out objective at this
    /// fraction of its clocks.
    #[arg(long)]
    pub target_frac: Option<f64>,
    /// Training scenarios: evaluate every N clocks instead of the scenario's cadence (0:
    /// only at the end, for timing the training alone; no time to target then).
    #[arg(long, value_name = "N")]
    pub eval_every: Option<u64>,
    /// staleness, adarevision, saga: the straggler's extra milliseconds per step (default
    /// 40; adarevision 20; saga 10).
    #[arg(long)]
    pub straggler_ms: Option<u64>,
    /// Rows J of W (kernel scenario).
    #[arg(long, default_value_t = 4096)]
    pub rows: usize,
    /// Columns D of W (kernel scenario).
    #[arg(long, default_value_t = 4096)]
    pub cols: usize,
    /// Comma-separated stacked pair counts R (kernel scenario).
    #[arg(long, default_value = "1,8,64,256")]
    pub r: String,
    /// Timed repetitions per measurement (median reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// MiB per arm per round (link scenario).
    #[arg(long, default_value_t = 256)]
    pub mib: usize,
    /// Measured rounds per arm, after a warm-up (link scenario).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bandwidth budget per node: the training scenarios' `--bandwidth` (libp2p), and the
    /// headline budget the link scenario checks; `none` for no budget. budget-check
    /// defaults to 200mbit instead, so that both backends are link-bound.
    /// Default: 1gbit.
    #[arg(long)]
    pub bandwidth: Option<String>,
    /// More budgets, comma-separated, to show the bucket tracks (link scenario).
    #[arg(long, default_value = "100mbit,500mbit")]
    pub rates: String,
    /// Burst of the bandwidth budget, bytes (link scenario; budget-check: of both the
    /// token bucket and tbf).
    #[arg(long, default_value_t = 256 * 1024)]
    pub burst: usize,
    /// Seconds of traffic per budget run (link scenario; at most one year).
    #[arg(long, default_value_t = 2.0)]
    pub budget_secs: f64,
    /// The simulated network and machine (--transport sim, and the scale scenario).
    #[command(flatten)]
    pub sim: super::sim::SimFlags,
}

impl BenchArgs {
    /// `--bandwidth`, or `default` when not given.
    pub fn bandwidth_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.bandwidth.as_deref().unwrap_or(default)
    }

    /// `--bandwidth`, or 1gbit.
    pub fn bandwidth(&self) -> &str {
        self.bandwidth_or("1gbit")
    }
}

/// Refuses an output folder (`-o`, default `sfb-bench`) that cannot be written, making it
/// when missing.
pub fn check_out_dir(args: &BenchArgs) -> Result<()> {
    let dir = out_dir(args);
    preflight::output_dir("-o", &dir).map_err(cli_error)
}

/// `args.out`, or `sfb-bench`.
pub fn out_dir(args: &BenchArgs) -> PathBuf {
    args.out
        .clone()
        .unwrap_or_else(|| PathBuf::from("sfb-bench"))
}
