//! `sfb bench` training scenarios: paired comparisons of whole training runs (SFB full and
//! partial broadcast, FMS) measured in one invocation. Every arm is an `sfb run` command
//! line; see [`super::experiment`] for how curves, targets and times are measured.

use std::path::PathBuf;

use anyhow::{Result, bail};
use sfb_core::metrics::ClockRecord;
use sfb_plot::{self as plot, BarChart, LineChart, Series};

use super::bench::BenchArgs;
use super::experiment::{ArmReport, ArmSpec, Report, Runner, arm_report, human_bytes, target_at};

/// The training scenarios.
pub const SCENARIOS: &[&str] = &[
    "fms-vs-sfb",
    "q-sweep",
    "staleness",
    "scaling",
    "model-size",
];

/// A synthetic MLR problem of `j` classes and `d` features and its run options: batch
/// `K=16`, a low-rank teacher so generating the data stays cheap at large sizes, and a
/// learning rate `0.3·(256/d)^0.4`, fitted to short in-memory runs at J = D = 256…4096
/// (256: 0.3, 1024: 0.17, 4096: 0.1; larger rates diverged at 4096).
pub(crate) fn mlr(j: usize, d: usize, samples: usize, test: usize) -> Vec<String> {
    let lr = 0.3 * (256.0 / d as f64).powf(0.4);
    let lr = format!("{lr:.3}");
    [
        "--model".to_string(),
        "mlr".into(),
        "--synthetic".into(),
        format!("classes={j},features={d},samples={samples},test={test},rank=16"),
        "--batch".into(),
        "16".into(),
        "--lr".into(),
        lr,
        "--seed".into(),
        "2016".into(),
    ]
    .into()
}

/// Runs `name`, writing into `args.out` (default `sfb-bench/`).
pub fn run(name: &str, args: &BenchArgs) -> Result<()> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("sfb-bench"));
    let runner = Runner::new();
    let mut report = match name {
        "fms-vs-sfb" => fms_vs_sfb(args, &runner)?,
        "q-sweep" => q_sweep(args, &runner)?,
        "staleness" => staleness(args, &runner)?,
        "scaling" => scaling(args, &runner)?,
        "model-size" => model_size(args, &runner)?,
        other => bail!("unknown training scenario {other:?}"),
    };
    report.notes.push(
        "All peers (and the FMS server) share this machine's cores; the bandwidth budget is per node (--bandwidth, token bucket on each node's sends). Compute-bound parts are therefore slower than on a cluster with a machine per peer, communication-bound parts are not."
            .into(),
    );
    let written = report.write(&out)?;
    report.print();
    println!("\nwrote {} files in {}/", written.len(), out.display());
    Ok(())
}

/// Common arm options: transport, bandwidth budget, clocks, evaluation cadence.
fn common(args: &BenchArgs, clocks: u64, eval_every: u64) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "--clocks".into(),
        clocks.to_string(),
        "--eval-every".into(),
        eval_every.to_string(),
        "--transport".into(),
        args.transport.clone(),
    ];
    let bw = args.bandwidth();
    if args.transport == "libp2p" && !bw.is_empty() && bw != "none" {
        v.extend(["--bandwidth".into(), bw.to_string()]);
    }
    v
}

/// Runs `arms`, takes the target from `reference` (an index into `arms`) at `frac` of its
/// clocks, and builds the report; returns every arm's per-clock records.
pub(crate) fn run_arms(
    runner: &Runner,
    report: &mut Report,
    arms: &[ArmSpec],
    reference: usize,
    frac: f64,
) -> Result<Vec<Vec<ClockRecord>>> {
    let mut runs = Vec::new();
    for (i, a) in arms.iter().enumerate() {
        runner.say(&format!(
            "[{}/{}] {}: {}",
            i + 1,
            arms.len(),
            a.name,
            a.command()
        ));
        runs.push(runner.run(a)?);
    }
    let ref_curve = super::experiment::curve(&runs[reference].1, runs[reference].0.peers);
    let target = target_at(&ref_curve, runs[reference].0.clocks, frac);
    if let Some((t, clock)) = target {
        report.target_objective = Some(t);
        report.target_rule = format!(
            "the held-out objective arm \"{}\" reached at clock {clock}, the first evaluation at or after {:.0}% of its {} clocks",
            arms[reference].name,
            frac * 100.0,
            runs[reference].0.clocks
        );
    }
    let mut all = Vec::new();
    for (spec, (summary, records)) in arms.iter().zip(runs) {
        report
            .arms
            .push(arm_report(spec, summary, &records, target.map(|t| t.0)));
        all.push(records);
    }
    Ok(all)
}

fn frac(args: &BenchArgs, default: f64) -> f64 {
    args.target_frac.unwrap_or(default)
}

fn fms_vs_sfb(args: &BenchArgs, runner: &Runner) -> Result<Report> {
    let p = args.peers.unwrap_or(8);
    let n = args.size.unwrap_or(4096);
    let clocks = args.clocks.unwrap_or(40);
    let mut report = Report::new(
        "fms-vs-sfb",
        &format!(
            "P={p}, MLR J=D={n}, K=16, BSP, {} per node: SFB full vs SFB partial (Q={}) vs FMS",
            args.bandwidth(),
            3.min(p.saturating_sub(2)).max(1)
        ),
    );
    let base: Vec<String> = mlr(n, n, 8192, 256)
        .into_iter()
        .chain(common(args, clocks, 4))
        .chain(["--peers".into(), p.to_string()])
        .collect();
    let full = format!("SFB full (Q={})", p - 1);
    let q = 3.min(p.saturating_sub(2)).max(1);
    let arms = vec![
        ArmSpec::new(&full, base.clone()),
        ArmSpec::new(format!("SFB partial (Q={q})"), base.clone())
            .with(["--out-degree".to_string(), q.to_string()]),
        ArmSpec::new("FMS", base).with(["--backend", "fms"]),
    ];
    run_arms(runner, &mut report, &arms, 0, frac(args, 0.3))?;
    let sfb = report.arm(&full).and_then(|a| a.time_to_target_s);
    let fms = report.arm("FMS").and_then(|a| a.time_to_target_s);
    report.speedup = match (sfb, fms) {
        (Some(s), Some(f)) if s > 0.0 => Some(f / s),
        _ => None,
    };
    report.sections.push((
        "Where the time goes".into(),
        breakdown(&report, n, n, p, 16),
    ));
    match report.speedup {
        Some(s) if s >= 5.0 => report.notes.push(format!(
            "SFB full broadcast reached the target {s:.2}× sooner than FMS (goal ≥ 5×; the paper reports 4.4× on 28 machines)."
        )),
        Some(s) => report.notes.push(format!(
            "SFB full broadcast reached the target only {s:.2}× sooner than FMS (goal ≥ 5×); see the breakdown."
        )),
        None => report
            .notes
            .push("an arm did not reach the target: no speedup measured".into()),
    }
    Ok(report)
}

/// Per clock and peer: where the time goes, and what the budget alone would cost.
fn breakdown(report: &Report, j: usize, d: usize, p: usize, k: usize) -> String {
    let mut m = String::from(
        "| arm | ms per clock | compute | apply | wait | other | eval (excluded) | bytes sent per clock by the busiest node | at the budget |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let rate = report_bandwidth(report)
        .parse::<sfb_net::bandwidth::Rate>()
        .ok()
        .map(|r| r.0);
    for a in &report.arms {
        let s = &a.summary;
        let c = s.clocks.max(1) as f64;
        let [comp, app, wait, other] = a.split_per_clock();
        // The busiest sender: the FMS server sends W to every client; an SFB peer sends its
        // factors to Q peers.
        let busiest = if s.backend == "fms" {
            (p * j * d * 4) as f64
        } else {
            (s.out_degree * k * (j + d) * 4) as f64
        };
        let _ = std::fmt::Write::write_fmt(
            &mut m,
            format_args!(
                "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} |\n",
                a.name,
                a.train_s / c * 1e3,
                comp * 1e3,
                app * 1e3,
                wait * 1e3,
                other * 1e3,
                s.eval_s / c * 1e3,
                human_bytes(busiest),
                rate.map_or("-".into(), |r| format!("{:.0} ms", busiest / r * 1e3)),
            ),
        );
    }
    m += "\ncompute/apply/wait/other are means over peers (FMS: over clients); `other` is training time not in the three (framing, queues, decoding W on FMS clients). \"at the budget\" is the busiest node's bytes per clock divided by the bandwidth budget: a lower bound on a clock's duration set by the network alone.\n";
    m
}

fn report_bandwidth(report: &Report) -> String {
    report
        .arms
        .first()
        .and_then(|a| {
            let mut it = a.command.split_whitespace();
            it.position(|w| w == "--bandwidth")?;
            it.next().map(str::to_string)
        })
        .unwrap_or_default()
}

fn q_sweep(args: &BenchArgs, runner: &Runner) -> Result<Report> {
    let p = args.peers.unwrap_or(12);
    let n = args.size.unwrap_or(1024);
    let clocks = args.clocks.unwrap_or(60);
    let mut report = Report::new(
        "q-sweep",
        &format!(
            "P={p}, Q=1..{}, MLR J=D={n}, K=16, BSP, {} per peer",
            p - 1,
            args.bandwidth()
        ),
    );
    let base: Vec<String> = mlr(n, n, 24000, 500)
        .into_iter()
        .chain(common(args, clocks, 5))
        .chain(["--peers".into(), p.to_string()])
        .collect();
    // Full broadcast first: it is the reference.
    let arms: Vec<ArmSpec> = (1..p)
        .rev()
        .map(|q| {
            ArmSpec::new(format!("Q={q}"), base.clone())
                .with(["--out-degree".into(), q.to_string()])
        })
        .collect();
    run_arms(runner, &mut report, &arms, 0, frac(args, 0.25))?;
    report.arms.reverse();
    let qs: Vec<f64> = report
        .arms
        .iter()
        .map(|a| a.summary.out_degree as f64)
        .collect();
    let pts = |f: &dyn Fn(&ArmReport) -> Option<f64>| -> Vec<(f64, f64)> {
        qs.iter()
            .zip(&report.arms)
            .filter_map(|(&q, a)| f(a).map(|y| (q, y)))
            .collect()
    };
    let ttt_points = pts(&|a| a.time_to_target_s);
    let final_points = pts(&|a| a.final_objective);
    let dir = out_dir(args);
    std::fs::create_dir_all(&dir)?;
    plot::line_chart(
        &dir.join("q-sweep-time-to-target.png"),
        &LineChart {
            title: format!("q-sweep: time to target vs out-degree Q (P={p})"),
            x_label: "out-degree Q".into(),
            y_label: "time to target (s)".into(),
            series: vec![Series {
                name: "time to target".into(),
                points: ttt_points,
            }],
            log_x: false,
            log_y: false,
            hline: None,
            markers: true,
        },
    )?;
    report.add_plot("q-sweep-time-to-target.png", "time to target vs Q");
    plot::line_chart(
        &dir.join("q-sweep-final-objective.png"),
        &LineChart {
            title: format!("q-sweep: final held-out objective vs Q (P={p}, {clocks} clocks)"),
            x_label: "out-degree Q".into(),
            y_label: "final held-out objective".into(),
            series: vec![Series {
                name: "final objective (mean over peers)".into(),
                points: final_points,
            }],
            log_x: false,
            log_y: false,
            hline: report
                .target_objective
                .map(|t| (t, format!("target {t:.4}"))),
            markers: true,
        },
    )?;
    report.add_plot("q-sweep-final-objective.png", "final objective vs Q");
    let full = report.arms.last().and_then(|a| a.final_objective);
    if let Some(f) = full {
        let close: Vec<String> = report
            .arms
            .iter()
            .filter(|a| {
                a.final_objective
                    .is_some_and(|o| (o - f).abs() <= 0.01 * f.abs())
            })
            .map(|a| a.name.clone())
            .collect();
        report.notes.push(format!(
            "final objective within 1% of full broadcast: {}",
            close.join(", ")
        ));
    }
    report.notes.push("Partial broadcast does not relay: each replica applies its own updates and its in-neighbours' only, so replicas drift apart (max divergence in the JSON) and the objective is the mean over peers.".into());
    Ok(report)
}

fn staleness(args: &BenchArgs, runner: &Runner) -> Result<Report> {
    let p = args.peers.unwrap_or(4);
    let n = args.size.unwrap_or(1024);
    let clocks = args.clocks.unwrap_or(80);
    let delay = args.straggler_ms.unwrap_or(40);
    let mut report = Report::new(
        "staleness",
        &format!(
            "P={p}, MLR J=D={n}, K=16, {} per node, one straggling peer (+{delay} ms per step): SSP staleness s ∈ {{0,1,2,4,8}}, SFB full vs FMS",
            args.bandwidth()
        ),
    );
    let base: Vec<String> = mlr(n, n, 24000, 500)
        .into_iter()
        .chain(common(args, clocks, 5))
        .chain(["--peers".into(), p.to_string()])
        .collect();
    let ss = [0u64, 1, 2, 4, 8];
    let mut arms = Vec::new();
    // Rotating: one peer per clock is slow, a different (seeded) one each clock.
    // Fixed: the last peer is slow at every clock.
    for (mode, straggler) in [
        ("rotating", format!("rotate:{delay}")),
        ("fixed", format!("{}:{delay}", p - 1)),
    ] {
        for backend in ["sfb", "fms"] {
            for s in ss {
                let name = format!("{} s={s} {mode}", backend.to_uppercase());
                let cons = if s == 0 {
                    "bsp".to_string()
                } else {
                    format!("ssp:{s}")
                };
                arms.push(ArmSpec::new(name, base.clone()).with([
                    "--backend".to_string(),
                    backend.into(),
                    "--consistency".into(),
                    cons,
                    "--straggler".into(),
                    straggler.clone(),
                ]));
            }
        }
    }
    run_arms(runner, &mut report, &arms, 0, frac(args, 0.5))?;
    let dir = out_dir(args);
    std::fs::create_dir_all(&dir)?;
    let series = |f: &dyn Fn(&ArmReport) -> Option<f64>| -> Vec<Series> {
        ["SFB", "FMS"]
            .iter()
            .flat_map(|b| ["rotating", "fixed"].map(|m| (b, m)))
            .map(|(b, m)| Series {
                name: format!("{b}, {m} straggler"),
                points: report
                    .arms
                    .iter()
                    .filter(|a| a.name.starts_with(b) && a.name.ends_with(m))
                    .filter_map(|a| {
                        let s: f64 = a.name.split("s=").nth(1)?.split(' ').next()?.parse().ok()?;
                        f(a).map(|y| (s, y))
                    })
                    .collect(),
            })
            .collect()
    };
    plot::line_chart(
        &dir.join("staleness-time-to-target.png"),
        &LineChart {
            title: "staleness: time to target vs staleness bound s".into(),
            x_label: "staleness bound s (clocks)".into(),
            y_label: "time to target (s)".into(),
            series: series(&|a| a.time_to_target_s),
            log_x: false,
            log_y: false,
            hline: None,
            markers: true,
        },
    )?;
    report.add_plot("staleness-time-to-target.png", "time to target vs s");
    let c = |a: &ArmReport| a.summary.clocks.max(1) as f64;
    plot::bar_chart(
        &dir.join("staleness-compute-vs-wait.png"),
        &BarChart {
            title: "staleness: compute vs wait per clock (mean peer)".into(),
            y_label: "ms per clock".into(),
            categories: report.arms.iter().map(|a| a.name.clone()).collect(),
            stacks: vec![
                (
                    "compute + apply".into(),
                    report
                        .arms
                        .iter()
                        .map(|a| (a.summary.compute_s + a.summary.apply_s) / c(a) * 1e3)
                        .collect(),
                ),
                (
                    "wait".into(),
                    report
                        .arms
                        .iter()
                        .map(|a| (a.summary.wait_s + a.summary.flush_s) / c(a) * 1e3)
                        .collect(),
                ),
            ],
            stacked: true,
            log_y: false,
        },
    )?;
    report.add_plot("staleness-compute-vs-wait.png", "compute vs wait per clock");
    for b in ["SFB", "FMS"] {
        for m in ["rotating", "fixed"] {
            let group: Vec<&ArmReport> = report
                .arms
                .iter()
                .filter(|a| a.name.starts_with(b) && a.name.ends_with(m))
                .collect();
            let wait = |a: &ArmReport| (a.summary.wait_s + a.summary.flush_s) / c(a) * 1e3;
            let (Some(bsp), Some(best)) = (
                group.first(),
                group
                    .iter()
                    .filter(|a| a.time_to_target_s.is_some())
                    .min_by(|x, y| {
                        x.time_to_target_s
                            .partial_cmp(&y.time_to_target_s)
                            .unwrap_or(std::cmp::Ordering::Equal)
                    }),
            ) else {
                continue;
            };
            report.notes.push(format!(
                "{b}, {m} straggler: BSP waits {:.1} ms per clock and reaches the target in {}; the best bound, {}, waits {:.1} ms and reaches it in {}.",
                wait(bsp),
                bsp.time_to_target_s.map_or("-".into(), |t| format!("{t:.2} s")),
                best.name.split(' ').nth(1).unwrap_or("?"),
                wait(best),
                best.time_to_target_s.map_or("-".into(), |t| format!("{t:.2} s")),
            ));
        }
    }
    Ok(report)
}

fn scaling(args: &BenchArgs, runner: &Runner) -> Result<Report> {
    let n = args.size.unwrap_or(1024);
    let max_p = args.peers.unwrap_or(8);
    let ps: Vec<usize> = [1, 2, 4, 8, 16]
        .into_iter()
        .filter(|&x| x <= max_p)
        .collect();
    // Equal samples for every arm: P peers run (clocks at P=1) / P clocks.
    let clocks1 = args.clocks.unwrap_or(640);
    let mut report = Report::new(
        "scaling",
        &format!(
            "SFB full broadcast, P ∈ {ps:?}, MLR J=D={n}, K=16, BSP, {} per peer, equal samples per arm",
            args.bandwidth()
        ),
    );
    let arms: Vec<ArmSpec> = ps
        .iter()
        .map(|&p| {
            let clocks = (clocks1 / p as u64).max(1);
            let mut argv: Vec<String> = mlr(n, n, 24000, 500)
                .into_iter()
                .chain(common(args, clocks, (clocks / 10).max(1)))
                .chain(["--peers".into(), p.to_string()])
                .collect();
            if p == 1 {
                // One peer sends nothing; the libp2p launcher needs a cluster of two.
                if let Some(i) = argv.iter().position(|a| a == "--transport") {
                    argv[i + 1] = "mem".into();
                }
                if let Some(i) = argv.iter().position(|a| a == "--bandwidth") {
                    argv.drain(i..i + 2);
                }
            }
            // One core per peer, as on a cluster of single-core machines.
            ArmSpec::new(format!("P={p}"), argv).with_env("RAYON_NUM_THREADS", "1")
        })
        .collect();
    run_arms(runner, &mut report, &arms, 0, frac(args, 0.5))?;
    let base_tps = report.arms.first().map(|a| a.samples_per_s);
    let base_ttt = report.arms.first().and_then(|a| a.time_to_target_s);
    let mut table = String::from(
        "| P | samples/s | throughput speedup | time to target (s) | time-to-target speedup |\n|---:|---:|---:|---:|---:|\n",
    );
    let mut thr = Vec::new();
    let mut ttt = Vec::new();
    for a in &report.arms {
        let p = a.summary.peers as f64;
        let s1 = base_tps.map(|b| a.samples_per_s / b);
        let s2 = match (base_ttt, a.time_to_target_s) {
            (Some(b), Some(t)) if t > 0.0 => Some(b / t),
            _ => None,
        };
        if let Some(s) = s1 {
            thr.push((p, s));
        }
        if let Some(s) = s2 {
            ttt.push((p, s));
        }
        table += &format!(
            "| {} | {:.0} | {} | {} | {} |\n",
            a.summary.peers,
            a.samples_per_s,
            s1.map_or("-".into(), |s| format!("{s:.2}×")),
            a.time_to_target_s
                .map_or("not reached".into(), |t| format!("{t:.2}")),
            s2.map_or("-".into(), |s| format!("{s:.2}×")),
        );
    }
    report.sections.push(("Speedup over P=1".into(), table));
    let dir = out_dir(args);
    std::fs::create_dir_all(&dir)?;
    plot::line_chart(
        &dir.join("scaling-speedup.png"),
        &LineChart {
            title: "scaling: speedup over P=1".into(),
            x_label: "peers P".into(),
            y_label: "speedup over P=1 (×)".into(),
            series: vec![
                Series {
                    name: "throughput (samples/s)".into(),
                    points: thr,
                },
                Series {
                    name: "time to target".into(),
                    points: ttt,
                },
                Series {
                    name: "linear".into(),
                    points: ps.iter().map(|&p| (p as f64, p as f64)).collect(),
                },
            ],
            log_x: true,
            log_y: true,
            hline: None,
            markers: true,
        },
    )?;
    report.add_plot("scaling-speedup.png", "speedup over P=1");
    report.notes.push(format!(
        "Every peer runs its kernels on one thread (RAYON_NUM_THREADS=1), as on a cluster of single-core machines; P=1 runs in-memory (a single peer sends nothing). This machine has {} cores: peers beyond that share cores, so compute cannot scale past it here, and every SFB peer applies all P·K updates per clock, so per-peer apply work grows with P.",
        report.machine.cores
    ));
    Ok(report)
}

fn model_size(args: &BenchArgs, runner: &Runner) -> Result<Report> {
    let p = args.peers.unwrap_or(4);
    let q = 1usize.max(p / 2);
    let clocks = args.clocks.unwrap_or(40);
    let sizes: Vec<usize> = match &args.sizes {
        Some(s) => s
            .split(',')
            .map(|x| x.trim().parse())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("--sizes {s:?}: {e}"))?,
        None => vec![256, 512, 1024, 2048],
    };
    let k = 16usize;
    let mut report = Report::new(
        "model-size",
        &format!(
            "P={p}, MLR J=D ∈ {sizes:?}, K=16, BSP, {} per node: SFB full vs SFB partial (Q={q}) vs FMS",
            args.bandwidth()
        ),
    );
    let mut rules = Vec::new();
    let mut formula_rows = String::from(
        "| J=D | arm | measured bytes/clock | formula | measured ÷ formula |\n|---:|---|---:|---:|---:|\n",
    );
    let mut measured = Vec::new();
    let mut formula = Vec::new();
    let mut cats = Vec::new();
    for &n in &sizes {
        let base: Vec<String> = mlr(n, n, 8192, 256)
            .into_iter()
            .chain(common(args, clocks, 4))
            .chain(["--peers".into(), p.to_string()])
            .collect();
        let arms = vec![
            ArmSpec::new(format!("{n}² SFB full"), base.clone()),
            ArmSpec::new(format!("{n}² SFB Q={q}"), base.clone())
                .with(["--out-degree".into(), q.to_string()]),
            ArmSpec::new(format!("{n}² FMS"), base).with(["--backend", "fms"]),
        ];
        let mut sub = Report::new("model-size", "");
        run_arms(runner, &mut sub, &arms, 0, frac(args, 0.4))?;
        rules.push(format!(
            "J=D={n}: target {:.4}",
            sub.target_objective.unwrap_or(f64::NAN)
        ));
        for a in &sub.arms {
            let f = (n + n) as f64 * k as f64 * 4.0 * p as f64;
            let expect = if a.name.ends_with("FMS") {
                f + (p * n * n * 4) as f64
            } else if a.name.ends_with("full") {
                f * (p - 1) as f64
            } else {
                f * q as f64
            };
            formula_rows += &format!(
                "| {n} | {} | {} | {} | {:.3} |\n",
                a.name,
                human_bytes(a.bytes_per_clock),
                human_bytes(expect),
                a.bytes_per_clock / expect
            );
            measured.push(a.bytes_per_clock);
            formula.push(expect);
            cats.push(a.name.clone());
        }
        report.arms.extend(sub.arms);
    }
    let mut speed = String::from(
        "| J=D | SFB full time to target (s) | FMS time to target (s) | FMS ÷ SFB |\n|---:|---:|---:|---:|\n",
    );
    for &n in &sizes {
        let t = |kind: &str| {
            report
                .arm(&format!("{n}² {kind}"))
                .and_then(|a| a.time_to_target_s)
        };
        let (s, f) = (t("SFB full"), t("FMS"));
        speed += &format!(
            "| {n} | {} | {} | {} |\n",
            s.map_or("-".into(), |x| format!("{x:.2}")),
            f.map_or("-".into(), |x| format!("{x:.2}")),
            match (s, f) {
                (Some(s), Some(f)) if s > 0.0 => format!("{:.1}×", f / s),
                _ => "-".into(),
            }
        );
    }
    report
        .sections
        .push(("SFB vs FMS by model size".into(), speed));
    report.target_rule = format!(
        "one target per size: the held-out objective SFB full reached at the first evaluation at or after {:.0}% of its clocks ({})",
        frac(args, 0.4) * 100.0,
        rules.join("; ")
    );
    report.sections.push((
        "Bytes per clock vs the cost formulas".into(),
        formula_rows
            + "\nFormulas (4-byte floats): SFB full P(P−1)·K(J+D), SFB partial P·Q·K(J+D), FMS P·K(J+D) up + P·J·D down. Measured bytes include framing (headers, length prefixes) and every frame the run sent.\n",
    ));
    let dir = out_dir(args);
    std::fs::create_dir_all(&dir)?;
    plot::bar_chart(
        &dir.join("model-size-bytes-vs-formula.png"),
        &BarChart {
            title: "model-size: bytes per clock, measured vs formula".into(),
            y_label: "bytes per clock".into(),
            categories: cats,
            stacks: vec![("measured".into(), measured), ("formula".into(), formula)],
            stacked: false,
            log_y: true,
        },
    )?;
    report.add_plot(
        "model-size-bytes-vs-formula.png",
        "bytes per clock vs formula",
    );
    let series: Vec<Series> = ["SFB full", &format!("SFB Q={q}"), "FMS"]
        .iter()
        .map(|kind| Series {
            name: kind.to_string(),
            points: report
                .arms
                .iter()
                .filter(|a| a.name.ends_with(kind))
                .filter_map(|a| {
                    let n: f64 = a.name.split('²').next()?.parse().ok()?;
                    a.time_to_target_s.map(|t| (n * n, t))
                })
                .collect(),
        })
        .collect();
    plot::line_chart(
        &dir.join("model-size-time-to-target.png"),
        &LineChart {
            title: format!("model-size: time to target vs J·D (P={p})"),
            x_label: "parameters J·D".into(),
            y_label: "time to target (s)".into(),
            series,
            log_x: true,
            log_y: true,
            hline: None,
            markers: true,
        },
    )?;
    report.add_plot(
        "model-size-time-to-target.png",
        "time to target vs model size",
    );
    Ok(report)
}

fn out_dir(args: &BenchArgs) -> PathBuf {
    args.out
        .clone()
        .unwrap_or_else(|| PathBuf::from("sfb-bench"))
}
