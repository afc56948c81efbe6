//! `sfb bench --scenario budget-check` ([`sfb_lab::experiment::budget_check`]): the
//! token bucket against the kernel's tbf. Needs root and iproute2; elsewhere it says why
//! and does nothing.

use anyhow::{Result, bail};
use sfb_lab::experiment::{self, BudgetCheck};

use super::bench_args::BenchArgs;

/// The scenario's name.
pub const NAME: &str = experiment::BUDGET_CHECK;

/// Runs the scenario, writing into `args.out` (default `sfb-bench/`); prints
/// `budget-check skipped: <reason>` and writes nothing where namespaces are unavailable.
pub fn run(args: &BenchArgs) -> Result<()> {
    if let Err(why) = super::netns::available() {
        outln!("{NAME} skipped: {why}");
        return Ok(());
    }
    if args.transport != "libp2p" {
        bail!(
            "{NAME} compares libp2p links; drop --transport {}",
            args.transport
        );
    }
    super::bench_args::check_out_dir(args)?;
    let rate = args
        .bandwidth_or("200mbit")
        .parse()
        .map_err(|e: String| anyhow::anyhow!("{NAME} needs a --bandwidth rate: {e}"))?;
    let opts = BudgetCheck {
        peers: args.peers,
        size: args.size,
        clocks: args.clocks,
        target_frac: args.target_frac,
        rate,
        burst: args.burst,
        tbf_latency_ms: super::netns::TBF_LATENCY_MS,
    };
    let mut report = experiment::budget_check(&opts, &super::experiment::runner())?;
    super::experiment::finish(&mut report, &super::bench_args::out_dir(args))
}
