//! `sfb bench`: measured comparisons, each a paired comparison inside one run.

use anyhow::{Context, Result, bail};
use sfb_harness::preflight;
use sfb_lab::bench::kernel;

use super::bench_args::BenchArgs;
use super::train::cli_error;

pub fn run(args: &BenchArgs) -> Result<()> {
    if let Some(f) = args.target_frac
        && !(f > 0.0 && f <= 1.0)
    {
        bail!("--target-frac must be in (0, 1], got {f}");
    }
    preflight::seconds("--budget-secs", args.budget_secs, false).map_err(cli_error)?;
    let name = args.scenario.as_str();
    let training = super::bench_train::SCENARIOS.contains(&name);
    // The output folder is checked before the first measurement, not after the last arm
    // (training scenarios and budget-check check it once their options are read; link
    // writes only with -o).
    match name {
        "kernel" | "all" => super::bench_args::check_out_dir(args)?,
        "link" if args.out.is_some() => super::bench_args::check_out_dir(args)?,
        _ => {}
    }
    match name {
        "kernel" => kernel(args),
        "link" => super::bench_link::run(args),
        super::bench_netns::NAME => super::bench_netns::run(args),
        "paper" => super::bench_train::paper(args),
        "all" => {
            kernel(args)?;
            for s in super::bench_train::SCENARIOS {
                super::bench_train::run(s, args)?;
            }
            Ok(())
        }
        s if training => super::bench_train::run(s, args),
        other => bail!(
            "unknown scenario {other:?}; available: kernel, link, {}, paper, {}, all",
            super::bench_train::SCENARIOS.join(", "),
            super::bench_netns::NAME
        ),
    }
}

/// `--scenario kernel`: [`kernel::measure`], printed as it goes, then its files and PNG.
fn kernel(args: &BenchArgs) -> Result<()> {
    let rs = (args.r.split(','))
        .map(|x| x.trim().parse().with_context(|| format!("--r entry {x:?}")))
        .collect::<Result<_>>()?;
    let cfg = kernel::Config {
        j: args.rows,
        d: args.cols,
        rs,
        reps: args.reps,
        ..kernel::Config::default()
    };
    let (j, d) = (cfg.j, cfg.d);
    let report = kernel::measure(&cfg, |p| out!("{}", p.text(j, d)))?;
    if report.missed.is_empty() {
        outln!(
            "targets (≥70% GEMM for R≥64, ≥70% RMW bandwidth for R=1, ≥10× naive for R≥8): all met"
        );
    }
    for f in &report.missed {
        outln!("target missed: {f}");
    }
    let dir = super::bench_args::out_dir(args);
    let machine = sfb_lab::experiment::Machine::this().line();
    report.write_files(&dir, &sfb_lab::experiment::invocation(), &machine)?;
    let series = |name: &str, f: fn(&kernel::Row) -> f64| {
        (
            name.into(),
            report.rows.iter().map(|r| f(r) * 1e3).collect(),
        )
    };
    sfb_plot::bar_chart(
        &dir.join("kernel.png"),
        &sfb_plot::BarChart {
            title: format!("kernel: W({j}×{d}) −= U·Vᵀ, {} threads", report.threads),
            y_label: "ms per apply (median)".into(),
            categories: report.rows.iter().map(|r| format!("R={}", r.r)).collect(),
            stacks: vec![
                series("sfb kernel", |r| r.kernel_s),
                series("plain faer GEMM", |r| r.gemm_s),
                series("naive loop", |r| r.naive_s),
            ],
            stacked: false,
            log_y: true,
        },
    )?;
    outln!(
        "wrote {}/kernel.json, kernel.csv, kernel.md and kernel.png",
        dir.display()
    );
    Ok(())
}
