//! `sfb bench --scenario link`: [`sfb_lab::bench::link`] (one libp2p stream per arm:
//! bare copy loop vs framing vs framing + validation, and the bandwidth budget), printed and
//! written as `link.json`, `link.csv` and `link.md`.

use std::time::Duration;

use anyhow::{Context, Result};
use sfb_lab::bench::link::{self, D, J, K};

use super::bench_args::BenchArgs;

/// From `sfb bench` options: `--mib`, `--rounds`, `--bandwidth`, `--rates`, `--burst`,
/// `--budget-secs`.
pub fn config(args: &BenchArgs) -> Result<link::Config> {
    let cfg = link::Config {
        mib: args.mib,
        rounds: args.rounds,
        rates: link::parse_rates(args.bandwidth(), &args.rates)?,
        burst: args.burst,
        budget_secs: args.budget_secs,
    };
    cfg.validate().context("sfb bench --scenario link")?;
    Ok(cfg)
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let cfg = config(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    outln!(
        "link bench: one libp2p stream (TCP+noise+yamux, 127.0.0.1) per arm; factor frames K={K} J={J} D={D} ({} B); {} MiB per arm per round, {} rounds after a warm-up, arms alternating; medians",
        sfb_core::wire::encode(&link::frame_message()).len() + 4,
        cfg.mib,
        cfg.rounds
    );
    let report = rt.block_on(link::measure(&cfg))?;
    rt.shutdown_timeout(Duration::from_secs(1));
    out!("{}", report.text());
    if let Some(dir) = &args.out {
        report.write_files(dir)?;
        outln!(
            "wrote {0}/link.json, {0}/link.csv and {0}/link.md",
            dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_parses_rates() {
        use clap::Parser;
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(flatten)]
            b: BenchArgs,
        }
        let c = Cli::parse_from(["x", "--scenario", "link", "--rates", "100mbit, 1gbit,,"]);
        let cfg = config(&c.b).unwrap();
        let labels: Vec<&str> = cfg.rates.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["1gbit", "100mbit"]);
        assert_eq!(cfg.rates[0].1.0, 125e6);
        let bad = Cli::parse_from(["x", "--bandwidth", "fast"]);
        assert!(config(&bad.b).is_err());
        let zero = Cli::parse_from(["x", "--mib", "0"]);
        assert!(config(&zero.b).is_err());
    }
}
