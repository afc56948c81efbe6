//! `sfb bench --scenario link`: [`sfb_harness::bench::link`] (one libp2p stream per arm:
//! bare copy loop vs framing vs framing + validation, and the bandwidth budget), printed and
//! written as `link.json`, `link.csv` and `link.md`.

use std::time::Duration;

use anyhow::{Context, Result};
use sfb_harness::bench::link::{self, D, J, K, Report, met};

use super::bench::BenchArgs;

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
    println!(
        "link bench: one libp2p stream (TCP+noise+yamux, 127.0.0.1) per arm; factor frames K={K} J={J} D={D} ({} B); {} MiB per arm per round, {} rounds after a warm-up, arms alternating; medians",
        sfb_core::wire::encode(&link::frame_message()).len() + 4,
        cfg.mib,
        cfg.rounds
    );
    let report = rt.block_on(link::measure(&cfg))?;
    rt.shutdown_timeout(Duration::from_secs(1));
    print_report(&report);
    if let Some(dir) = &args.out {
        report.write_files(dir)?;
        println!(
            "wrote {0}/link.json, {0}/link.csv and {0}/link.md",
            dir.display()
        );
    }
    Ok(())
}

fn print_report(r: &Report) {
    println!(
        "{:<13} {:>12} {:>26}",
        "arm", "median MB/s", "per round MB/s"
    );
    for (arm, m) in [
        ("bare", r.bare_mb_per_s),
        ("framing-only", r.framing_only_mb_per_s),
        ("framed", r.framed_mb_per_s),
    ] {
        println!("{arm:<13} {m:>12.1}   {}", r.per_round(arm));
    }
    println!(
        "framing overhead (write_frame → read_frame): {:.1}% of bare throughput — target < {:.0}%: {}",
        r.framing_only_overhead_pct,
        r.overhead_target_pct,
        met(r.overhead_target_met)
    );
    let per_round: Vec<_> = r
        .overhead_pct_per_round
        .iter()
        .map(|x| format!("{x:.1}%"))
        .collect();
    println!(
        "framing + wire::decode with full validation: {:.1}% of bare throughput (per round: {}); not held to the {:.0}% target (it also checks every value)",
        r.overhead_pct,
        per_round.join(", "),
        r.overhead_target_pct,
    );
    let c = &r.cpu;
    println!(
        "receiver CPU per unit, from memory: read_exact 1 MiB {:.0} µs; read_frame {:.0} µs + wire::decode {:.0} µs (of which FactorBatch::validate {:.0} µs); sender wire::encode {:.0} µs, once per batch",
        c.bare_read_us, c.read_frame_us, c.decode_us, c.validate_us, c.encode_us
    );
    println!(
        "bandwidth budget (token bucket, burst {} B, 64 KiB chunks), {} × {:.1} s per rate, median:",
        r.burst_bytes, r.rounds, r.budget_secs
    );
    println!(
        "{:<10} {:>12} {:>14} {:>10}   {:>22}",
        "rate", "budget MB/s", "achieved MB/s", "deviation", "per round MB/s"
    );
    for b in &r.budget {
        println!(
            "{:<10} {:>12.2} {:>14.2} {:>9.2}%   {}",
            b.rate,
            b.budget_bytes_per_s / 1e6,
            b.achieved_bytes_per_s / 1e6,
            b.deviation_pct,
            r.per_round(&format!("budget {}", b.rate))
        );
    }
    println!(
        "budget deviation target (within ±{:.0}% at every rate): {}",
        r.deviation_target_pct,
        met(r.deviation_target_met)
    );
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
