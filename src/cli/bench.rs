//! `sfb bench`: measured comparisons, each a paired comparison inside one run.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use faer::linalg::matmul::matmul;
use faer::{Accum, Par};
use faer_ext::IntoFaer;
use ndarray::Array2;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::Serialize;
use sfb_core::replica::apply_naive;
use sfb_core::{FactorBatch, PeerId, Replica, VFactors};

/// `sfb bench` options.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Scenario to run: kernel, link, fms-vs-sfb, q-sweep, staleness, scaling, model-size,
    /// budget-check (root only: token bucket vs kernel tbf shaping; skipped elsewhere), or
    /// `all` (kernel and the training scenarios, in that order).
    #[arg(long, default_value = "kernel")]
    pub scenario: String,
    /// Directory for JSON/CSV/Markdown/PNG results (training scenarios default to
    /// `sfb-bench`).
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
    /// Transport of the training scenarios' arms (mem has no bandwidth budget).
    #[arg(long, default_value = "libp2p", value_parser = ["libp2p", "mem"])]
    pub transport: String,
    /// Training scenarios: peers (default per scenario: fms-vs-sfb 8, q-sweep 12,
    /// staleness 4, scaling up to 8, model-size 4).
    #[arg(long)]
    pub peers: Option<usize>,
    /// Training scenarios: J = D of the MLR model (default: fms-vs-sfb 4096, others 1024).
    #[arg(long)]
    pub size: Option<usize>,
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
    /// staleness: the straggler's extra milliseconds per step (default 40).
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
    /// Seconds of traffic per budget run (link scenario).
    #[arg(long, default_value_t = 2.0)]
    pub budget_secs: f64,
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

pub fn run(args: &BenchArgs) -> Result<()> {
    if let Some(f) = args.target_frac
        && !(f > 0.0 && f <= 1.0)
    {
        bail!("--target-frac must be in (0, 1], got {f}");
    }
    match args.scenario.as_str() {
        "kernel" => kernel(args),
        "link" => super::bench_link::run(args),
        super::bench_netns::NAME => super::bench_netns::run(args),
        "all" => {
            kernel(args)?;
            for s in super::bench_train::SCENARIOS {
                super::bench_train::run(s, args)?;
            }
            Ok(())
        }
        s if super::bench_train::SCENARIOS.contains(&s) => super::bench_train::run(s, args),
        other => bail!(
            "unknown scenario {other:?}; available: kernel, link, {}, {}, all",
            super::bench_train::SCENARIOS.join(", "),
            super::bench_netns::NAME
        ),
    }
}

fn median_time(reps: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    let mut t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

#[derive(Debug, Serialize)]
struct KernelRow {
    r: usize,
    batches: usize,
    kernel_s: f64,
    gemm_s: f64,
    naive_s: f64,
    kernel_gflops: f64,
    gemm_gflops: f64,
    kernel_rmw_gb_s: f64,
    kernel_vs_gemm: f64,
    kernel_vs_rmw_bandwidth: f64,
    speedup_vs_naive: f64,
}

#[derive(Debug, Serialize)]
struct Arm {
    name: String,
    time_to_target_s: Option<f64>,
    samples_per_s: Option<f64>,
    bytes_per_clock: Option<f64>,
    final_objective: Option<f64>,
    time_s: f64,
}

#[derive(Debug, Serialize)]
struct KernelReport {
    scenario: &'static str,
    j: usize,
    d: usize,
    threads: usize,
    copy_gb_s: f64,
    rmw_gb_s: f64,
    rows: Vec<KernelRow>,
    arms: Vec<Arm>,
}

fn kernel(args: &BenchArgs) -> Result<()> {
    let (j, d) = (args.rows, args.cols);
    let rs: Vec<usize> = args
        .r
        .split(',')
        .map(|x| x.trim().parse().with_context(|| format!("--r entry {x:?}")))
        .collect::<Result<_>>()?;
    let threads = rayon::current_num_threads();
    let mut rng = ChaCha8Rng::seed_from_u64(2016);
    let w0 = Array2::from_shape_fn((j, d), |_| rng.random_range(-1.0f32..1.0));
    let bytes_w = (j * d * 4) as f64;

    // Machine bandwidth over a buffer the size of W, on all threads.
    let src = w0.as_slice().expect("standard").to_vec();
    let mut dst = vec![0f32; j * d];
    let chunk = 1 << 16;
    let copy_s = median_time(args.reps, || {
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(a, b)| a.copy_from_slice(b));
    });
    let copy_gb_s = 2.0 * bytes_w / copy_s / 1e9;
    let mut buf = src.clone();
    let rmw_s = median_time(args.reps, || {
        buf.par_chunks_mut(chunk).for_each(|c| {
            for x in c {
                *x = *x * 0.999 + 1e-3;
            }
        });
    });
    let rmw_gb_s = 2.0 * bytes_w / rmw_s / 1e9;
    drop((src, dst, buf));
    println!(
        "kernel bench: W {j}×{d} f32 ({:.0} MiB), {threads} threads; copy {copy_gb_s:.1} GB/s, read-modify-write {rmw_gb_s:.1} GB/s",
        bytes_w / (1 << 20) as f64
    );
    println!(
        "{:>5} {:>7} {:>11} {:>11} {:>11} {:>10} {:>10} {:>9} {:>10}",
        "R", "batches", "kernel ms", "gemm ms", "naive ms", "k/gemm", "k GB/s", "k/rmw", "k×naive"
    );
    let mut rows = Vec::new();
    let mut arms = Vec::new();
    let mut failures = Vec::new();
    for &r in &rs {
        // R pairs arrive as up to 4 batches (as from 4 peers), stacked by the kernel.
        let nb = r.clamp(1, 4);
        let batches: Vec<FactorBatch> = (0..nb)
            .map(|b| {
                let k = r / nb + usize::from(b < r % nb);
                FactorBatch {
                    origin: PeerId(b as u32),
                    clock: 0,
                    scale: -1e-3,
                    j,
                    d,
                    u: (0..k * j).map(|_| rng.random_range(-1.0..1.0)).collect(),
                    v: VFactors::Dense((0..k * d).map(|_| rng.random_range(-1.0..1.0)).collect()),
                }
            })
            .collect();
        let refs: Vec<&FactorBatch> = batches.iter().collect();
        let mut rep = Replica::new(w0.clone())?;
        let kernel_s = median_time(args.reps, || {
            rep.apply(&refs).expect("valid batches");
        });
        // Plain faer GEMM of the same shape: W (J×D) += A (J×R) · B (R×D), all threads.
        let a = Array2::from_shape_fn((j, r), |_| rng.random_range(-1.0f32..1.0));
        let bm = Array2::from_shape_fn((r, d), |_| rng.random_range(-1.0f32..1.0));
        let mut wg = w0.clone();
        let gemm_s = median_time(args.reps, || {
            matmul(
                wg.view_mut().into_faer(),
                Accum::Add,
                a.view().into_faer(),
                bm.view().into_faer(),
                -1e-3f32,
                Par::rayon(0),
            );
        });
        let mut wn = w0.clone();
        let naive_reps = if r >= 64 { 1 } else { args.reps.min(3) };
        let naive_s = median_time(naive_reps, || {
            apply_naive(&mut wn, &refs).expect("valid batches");
        });
        let flops = 2.0 * (j * d * r) as f64;
        let row = KernelRow {
            r,
            batches: nb,
            kernel_s,
            gemm_s,
            naive_s,
            kernel_gflops: flops / kernel_s / 1e9,
            gemm_gflops: flops / gemm_s / 1e9,
            kernel_rmw_gb_s: 2.0 * bytes_w / kernel_s / 1e9,
            kernel_vs_gemm: gemm_s / kernel_s,
            kernel_vs_rmw_bandwidth: (2.0 * bytes_w / kernel_s) / (2.0 * bytes_w / rmw_s),
            speedup_vs_naive: naive_s / kernel_s,
        };
        println!(
            "{:>5} {:>7} {:>11.3} {:>11.3} {:>11.3} {:>9.0}% {:>10.1} {:>8.0}% {:>9.1}×",
            r,
            nb,
            kernel_s * 1e3,
            gemm_s * 1e3,
            naive_s * 1e3,
            row.kernel_vs_gemm * 100.0,
            row.kernel_rmw_gb_s,
            row.kernel_vs_rmw_bandwidth * 100.0,
            row.speedup_vs_naive
        );
        if r >= 64 && row.kernel_vs_gemm < 0.7 {
            failures.push(format!(
                "R={r}: kernel at {:.0}% of plain GEMM (target ≥ 70%)",
                row.kernel_vs_gemm * 100.0
            ));
        }
        if r == 1 && row.kernel_vs_rmw_bandwidth < 0.7 {
            failures.push(format!(
                "R=1: kernel at {:.0}% of read-modify-write bandwidth (target ≥ 70%)",
                row.kernel_vs_rmw_bandwidth * 100.0
            ));
        }
        if r >= 8 && row.speedup_vs_naive < 10.0 {
            failures.push(format!(
                "R={r}: kernel {:.1}× the naive loop (target ≥ 10×)",
                row.speedup_vs_naive
            ));
        }
        for (name, t) in [("kernel", kernel_s), ("gemm", gemm_s), ("naive", naive_s)] {
            arms.push(Arm {
                name: format!("{name} R={r}"),
                time_to_target_s: None,
                samples_per_s: None,
                bytes_per_clock: None,
                final_objective: None,
                time_s: t,
            });
        }
        rows.push(row);
    }
    if failures.is_empty() {
        println!(
            "targets (≥70% GEMM for R≥64, ≥70% RMW bandwidth for R=1, ≥10× naive for R≥8): all met"
        );
    } else {
        for f in &failures {
            println!("target missed: {f}");
        }
    }
    {
        let dir = &args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("sfb-bench"));
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let report = KernelReport {
            scenario: "kernel",
            j,
            d,
            threads,
            copy_gb_s,
            rmw_gb_s,
            rows,
            arms,
        };
        std::fs::write(
            dir.join("kernel.json"),
            serde_json::to_string_pretty(&report)? + "\n",
        )?;
        let mut csv = String::from(
            "r,batches,kernel_s,gemm_s,naive_s,kernel_vs_gemm,kernel_vs_rmw_bandwidth,speedup_vs_naive\n",
        );
        for r in &report.rows {
            csv += &format!(
                "{},{},{},{},{},{},{},{}\n",
                r.r,
                r.batches,
                r.kernel_s,
                r.gemm_s,
                r.naive_s,
                r.kernel_vs_gemm,
                r.kernel_vs_rmw_bandwidth,
                r.speedup_vs_naive
            );
        }
        std::fs::write(dir.join("kernel.csv"), csv)?;
        let machine = sfb_harness::experiment::Machine::this();
        let cats: Vec<String> = report.rows.iter().map(|r| format!("R={}", r.r)).collect();
        sfb_plot::bar_chart(
            &dir.join("kernel.png"),
            &sfb_plot::BarChart {
                title: format!("kernel: W({j}×{d}) −= U·Vᵀ, {threads} threads"),
                y_label: "ms per apply (median)".into(),
                categories: cats,
                stacks: vec![
                    (
                        "sfb kernel".into(),
                        report.rows.iter().map(|r| r.kernel_s * 1e3).collect(),
                    ),
                    (
                        "plain faer GEMM".into(),
                        report.rows.iter().map(|r| r.gemm_s * 1e3).collect(),
                    ),
                    (
                        "naive loop".into(),
                        report.rows.iter().map(|r| r.naive_s * 1e3).collect(),
                    ),
                ],
                stacked: false,
                log_y: true,
            },
        )?;
        let mut md = format!(
            "## `kernel` — the apply kernel vs plain GEMM, the naive loop and memory bandwidth

Command: `{}`  \nMachine: {}\n\nW {j}×{d} f32, {threads} threads; copy {copy_gb_s:.1} GB/s, read-modify-write {rmw_gb_s:.1} GB/s (same buffer size, all threads).\n\n| R | kernel ms | GEMM ms | naive ms | kernel ÷ GEMM speed | kernel ÷ RMW bandwidth | × naive |\n|---:|---:|---:|---:|---:|---:|---:|\n",
            sfb_harness::experiment::invocation(),
            machine.line()
        );
        for r in &report.rows {
            md += &format!(
                "| {} | {:.3} | {:.3} | {:.3} | {:.0}% | {:.0}% | {:.1}× |\n",
                r.r,
                r.kernel_s * 1e3,
                r.gemm_s * 1e3,
                r.naive_s * 1e3,
                r.kernel_vs_gemm * 100.0,
                r.kernel_vs_rmw_bandwidth * 100.0,
                r.speedup_vs_naive
            );
        }
        md += &if failures.is_empty() {
            "\nTargets (≥ 70% of GEMM for R ≥ 64, ≥ 70% of RMW bandwidth at R = 1, ≥ 10× naive for R ≥ 8): all met.\n".to_string()
        } else {
            format!("\nTargets missed: {}\n", failures.join("; "))
        };
        md += "\n![kernel vs GEMM vs naive](kernel.png)\n";
        std::fs::write(dir.join("kernel.md"), md)?;
        println!(
            "wrote {}/kernel.json, kernel.csv, kernel.md and kernel.png",
            dir.display()
        );
    }
    Ok(())
}
