//! The apply kernel against its baselines: for each stacked rank `R`, the median time of
//! [`Replica::apply`] over `R` seeded dense pairs (in up to 4 batches, as from 4 peers), of a
//! plain faer GEMM of the same shape on all threads, and of the naive per-pair loop; and the
//! machine's copy and read-modify-write bandwidth over a buffer the size of W.
//!
//! # Example
//! ```
//! use sfb_lab::bench::kernel::{Config, measure};
//! let cfg = Config { j: 64, d: 64, rs: vec![1, 8], reps: 1, ..Config::default() };
//! let report = measure(&cfg, |_| {})?;
//! assert_eq!(report.rows.len(), 2);
//! assert!(report.rows.iter().all(|r| r.kernel_s > 0.0 && r.speedup_vs_naive.is_finite()));
//! # Ok::<(), sfb_lab::bench::Error>(())
//! ```

use std::path::Path;

use faer::linalg::matmul::matmul;
use faer::{Accum, Par};
use faer_ext::IntoFaer;
use ndarray::Array2;
use rayon::prelude::*;
use serde::Serialize;
use sfb_core::Replica;
use sfb_core::replica::{apply_naive, seeded_batches, seeded_w};

use super::{ArmKeys, Error, Result, median_time};

/// What to measure.
#[derive(Debug, Clone)]
pub struct Config {
    /// Rows J of W. Default 4096.
    pub j: usize,
    /// Columns D of W. Default 4096.
    pub d: usize,
    /// Stacked pair counts R. Default 1, 8, 64, 256.
    pub rs: Vec<usize>,
    /// Timed repetitions per measurement (median reported). Default 5.
    pub reps: usize,
    /// Seed of W and the factors. Default 2016.
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            j: 4096,
            d: 4096,
            rs: vec![1, 8, 64, 256],
            reps: 5,
            seed: 2016,
        }
    }
}

/// Batches the `R` pairs arrive in: up to 4, as from 4 peers.
pub fn batches_for(r: usize) -> usize {
    r.clamp(1, 4)
}

/// One rank `R`.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Stacked pairs.
    pub r: usize,
    /// Batches they arrived in.
    pub batches: usize,
    /// Median seconds of `Replica::apply`.
    pub kernel_s: f64,
    /// Median seconds of the plain GEMM `W += A·B` (A J×R, B R×D).
    pub gemm_s: f64,
    /// Median seconds of `apply_naive`.
    pub naive_s: f64,
    /// `2·J·D·R / kernel_s`, GFLOP/s.
    pub kernel_gflops: f64,
    /// `2·J·D·R / gemm_s`, GFLOP/s.
    pub gemm_gflops: f64,
    /// W read and written once per apply, GB/s.
    pub kernel_rmw_gb_s: f64,
    /// `gemm_s / kernel_s`.
    pub kernel_vs_gemm: f64,
    /// `kernel_rmw_gb_s / rmw_gb_s`.
    pub kernel_vs_rmw_bandwidth: f64,
    /// `naive_s / kernel_s`.
    pub speedup_vs_naive: f64,
}

/// A `bench` arm: one timing.
#[derive(Debug, Clone, Serialize)]
pub struct Arm {
    /// DESIGN.md's keys.
    #[serde(flatten)]
    pub keys: ArmKeys,
    /// Median seconds.
    pub time_s: f64,
}

/// Everything measured; serializes to `kernel.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `kernel`.
    pub scenario: &'static str,
    /// Rows of W.
    pub j: usize,
    /// Columns of W.
    pub d: usize,
    /// Rayon threads.
    pub threads: usize,
    /// Copy bandwidth over a buffer the size of W (read + write), GB/s.
    pub copy_gb_s: f64,
    /// Read-modify-write bandwidth over the same buffer, GB/s.
    pub rmw_gb_s: f64,
    /// One row per R.
    pub rows: Vec<Row>,
    /// Kernel, GEMM and naive arm per R.
    pub arms: Vec<Arm>,
    /// Aggregated apply against the stacked kernel ([`sfb_core::aggregate`]): measured,
    /// and as the cost model estimates it.
    pub aggregation: Vec<AggRow>,
    /// Targets missed (≥ 70% of GEMM for R ≥ 64, ≥ 70% of RMW bandwidth at R = 1, ≥ 10×
    /// naive for R ≥ 8), in words; empty when all are met.
    #[serde(skip)]
    pub missed: Vec<String>,
}

/// Aggregated apply at one shape and pair count.
#[derive(Debug, Clone, Serialize)]
pub struct AggRow {
    /// Rows of W.
    pub j: usize,
    /// Columns of W.
    pub d: usize,
    /// Dense pairs to apply.
    pub pairs: usize,
    /// Pairs the aggregation applies ([`AGG_RANK`]).
    pub rank: usize,
    /// Median seconds of the stacked kernel on all the pairs.
    pub direct_s: f64,
    /// Median seconds of re-compressing them to `rank` pairs and applying those.
    pub aggregated_s: f64,
    /// The cost model's estimate of `direct_s`.
    pub model_direct_s: f64,
    /// The cost model's estimate of `aggregated_s`.
    pub model_aggregated_s: f64,
}

impl AggRow {
    /// Whether the model picks what was measured faster.
    pub fn model_agrees(&self) -> bool {
        (self.aggregated_s < self.direct_s) == (self.model_aggregated_s < self.model_direct_s)
    }
}

/// The rank the aggregation rows re-compress to.
pub const AGG_RANK: usize = 16;

/// Measures [`AggRow`]s: W of `j × d`, every pair count of `pairs`.
fn aggregation_rows(
    j: usize,
    d: usize,
    pairs: &[usize],
    seed: u64,
    reps: usize,
) -> Result<Vec<AggRow>> {
    let w0 = seeded_w(seed, j, d);
    let mut rows = Vec::new();
    for (i, &r) in pairs.iter().enumerate() {
        let batches = seeded_batches(seed.wrapping_add(100 + i as u64), j, d, r, 8.min(r), None);
        let refs: Vec<_> = batches.iter().collect();
        let mut rep = Replica::new(w0.clone())?;
        let direct_s = median_time(reps, || {
            rep.apply(&refs).expect("seeded batches are valid");
        });
        let mut rep = Replica::new(w0.clone())?;
        let aggregated_s = median_time(reps, || {
            // A fresh aggregation each time: no residual, as at a run's first clock.
            sfb_core::aggregate::Aggregator::new(AGG_RANK)
                .apply_to(&mut rep, &refs)
                .expect("seeded batches are valid");
        });
        let (model_direct_s, model_aggregated_s) =
            sfb_core::aggregate::Aggregator::new(AGG_RANK).costs(r, j, d);
        rows.push(AggRow {
            j,
            d,
            pairs: r,
            rank: AGG_RANK,
            direct_s,
            aggregated_s,
            model_direct_s,
            model_aggregated_s,
        });
    }
    Ok(rows)
}

/// What [`measure`] has just measured, for a caller that prints as it goes.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Progress<'a> {
    /// The machine's bandwidth, measured first.
    Bandwidth {
        /// Rayon threads.
        threads: usize,
        /// Copy bandwidth, GB/s.
        copy_gb_s: f64,
        /// Read-modify-write bandwidth, GB/s.
        rmw_gb_s: f64,
    },
    /// One rank `R`.
    Row(&'a Row),
}

impl Progress<'_> {
    /// The console lines of this step of a `j × d` run (what `sfb bench --scenario kernel`
    /// prints as it goes): the bandwidth and the table header, or one table row.
    pub fn text(&self, j: usize, d: usize) -> String {
        match self {
            Progress::Bandwidth {
                threads,
                copy_gb_s,
                rmw_gb_s,
            } => format!(
                "kernel bench: W {j}×{d} f32 ({:.0} MiB), {threads} threads; copy {copy_gb_s:.1} GB/s, read-modify-write {rmw_gb_s:.1} GB/s\n{:>5} {:>7} {:>11} {:>11} {:>11} {:>10} {:>10} {:>9} {:>10}\n",
                (j * d * 4) as f64 / (1 << 20) as f64,
                "R",
                "batches",
                "kernel ms",
                "gemm ms",
                "naive ms",
                "k/gemm",
                "k GB/s",
                "k/rmw",
                "k×naive"
            ),
            Progress::Row(r) => format!(
                "{:>5} {:>7} {:>11.3} {:>11.3} {:>11.3} {:>9.0}% {:>10.1} {:>8.0}% {:>9.1}×\n",
                r.r,
                r.batches,
                r.kernel_s * 1e3,
                r.gemm_s * 1e3,
                r.naive_s * 1e3,
                r.kernel_vs_gemm * 100.0,
                r.kernel_rmw_gb_s,
                r.kernel_vs_rmw_bandwidth * 100.0,
                r.speedup_vs_naive
            ),
        }
    }
}

/// Runs the measurements; `progress` sees each result as soon as it is measured.
///
/// # Errors
/// [`Error::Invalid`] for an empty shape, no R or an R of 0.
pub fn measure(cfg: &Config, mut progress: impl FnMut(Progress<'_>)) -> Result<Report> {
    let (j, d) = (cfg.j, cfg.d);
    if j == 0 || d == 0 {
        return Err(Error::Invalid {
            field: "J and D",
            expected: "positive",
        });
    }
    if cfg.rs.is_empty() || cfg.rs.contains(&0) {
        return Err(Error::Invalid {
            field: "R",
            expected: "a non-empty list of positive pair counts",
        });
    }
    let threads = rayon::current_num_threads();
    let w0 = seeded_w(cfg.seed, j, d);
    let bytes_w = (j * d * 4) as f64;
    let (copy_gb_s, rmw_gb_s) = bandwidth(&w0, cfg.reps);
    progress(Progress::Bandwidth {
        threads,
        copy_gb_s,
        rmw_gb_s,
    });
    let rmw_s = 2.0 * bytes_w / (rmw_gb_s * 1e9);
    let mut rows = Vec::new();
    let mut arms = Vec::new();
    let mut missed = Vec::new();
    for (i, &r) in cfg.rs.iter().enumerate() {
        let nb = batches_for(r);
        let seed = cfg.seed.wrapping_add(1 + i as u64);
        let batches = seeded_batches(seed, j, d, r, nb, None);
        let refs: Vec<_> = batches.iter().collect();
        let mut rep = Replica::new(w0.clone())?;
        let kernel_s = median_time(cfg.reps, || {
            rep.apply(&refs).expect("seeded batches are valid");
        });
        let gemm_s = gemm_time(&w0, r, seed, cfg.reps);
        let mut wn = w0.clone();
        let naive_reps = if r >= 64 { 1 } else { cfg.reps.min(3) };
        let naive_s = median_time(naive_reps, || {
            apply_naive(&mut wn, &refs).expect("seeded batches are valid");
        });
        let flops = 2.0 * (j * d * r) as f64;
        let row = Row {
            r,
            batches: nb,
            kernel_s,
            gemm_s,
            naive_s,
            kernel_gflops: flops / kernel_s / 1e9,
            gemm_gflops: flops / gemm_s / 1e9,
            kernel_rmw_gb_s: 2.0 * bytes_w / kernel_s / 1e9,
            kernel_vs_gemm: gemm_s / kernel_s,
            kernel_vs_rmw_bandwidth: rmw_s / kernel_s,
            speedup_vs_naive: naive_s / kernel_s,
        };
        progress(Progress::Row(&row));
        if r >= 64 && row.kernel_vs_gemm < 0.7 {
            missed.push(format!(
                "R={r}: kernel at {:.0}% of plain GEMM (target ≥ 70%)",
                row.kernel_vs_gemm * 100.0
            ));
        }
        if r == 1 && row.kernel_vs_rmw_bandwidth < 0.7 {
            missed.push(format!(
                "R=1: kernel at {:.0}% of read-modify-write bandwidth (target ≥ 70%)",
                row.kernel_vs_rmw_bandwidth * 100.0
            ));
        }
        if r >= 8 && row.speedup_vs_naive < 10.0 {
            missed.push(format!(
                "R={r}: kernel {:.1}× the naive loop (target ≥ 10×)",
                row.speedup_vs_naive
            ));
        }
        for (name, time_s) in [("kernel", kernel_s), ("gemm", gemm_s), ("naive", naive_s)] {
            arms.push(Arm {
                keys: ArmKeys::named(format!("{name} R={r}")),
                time_s,
            });
        }
        rows.push(row);
    }
    let mut aggregation = Vec::new();
    let mut shapes = vec![(256, 256), (1024, 1024), (j, d)];
    shapes.dedup();
    for (sj, sd) in shapes {
        if sj <= j && sd <= d {
            aggregation.extend(aggregation_rows(
                sj,
                sd,
                &[32, 64, 128, 256],
                cfg.seed,
                cfg.reps,
            )?);
        }
    }
    Ok(Report {
        scenario: "kernel",
        j,
        d,
        threads,
        copy_gb_s,
        rmw_gb_s,
        rows,
        arms,
        aggregation,
        missed,
    })
}

/// Copy and read-modify-write bandwidth (GB/s, read + write) over a buffer like `w`, on all
/// rayon threads, medians of `reps`.
pub fn bandwidth(w: &Array2<f32>, reps: usize) -> (f64, f64) {
    let src: Vec<f32> = w.iter().copied().collect();
    let bytes = (src.len() * 4) as f64;
    let mut dst = vec![0f32; src.len()];
    let chunk = 1 << 16;
    let copy_s = median_time(reps, || {
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(a, b)| a.copy_from_slice(b));
    });
    let mut buf = src.clone();
    let rmw_s = median_time(reps, || {
        buf.par_chunks_mut(chunk).for_each(|c| {
            for x in c {
                *x = *x * 0.999 + 1e-3;
            }
        });
    });
    (2.0 * bytes / copy_s / 1e9, 2.0 * bytes / rmw_s / 1e9)
}

/// Median seconds of a plain faer GEMM `W (J×D) += −1e-3 · A (J×R) · B (R×D)` on all
/// threads: the rate the kernel is compared with.
pub fn gemm_time(w: &Array2<f32>, r: usize, seed: u64, reps: usize) -> f64 {
    let (j, d) = w.dim();
    let a = seeded_w(seed ^ 0xa, j, r);
    let b = seeded_w(seed ^ 0xb, r, d);
    let mut wg = w.clone();
    median_time(reps, || {
        matmul(
            wg.view_mut().into_faer(),
            Accum::Add,
            a.view().into_faer(),
            b.view().into_faer(),
            -1e-3f32,
            Par::rayon(0),
        );
    })
}

impl Report {
    /// `kernel.csv`: one line per R.
    pub fn csv(&self) -> String {
        let mut csv = String::from(
            "r,batches,kernel_s,gemm_s,naive_s,kernel_vs_gemm,kernel_vs_rmw_bandwidth,speedup_vs_naive\n",
        );
        for r in &self.rows {
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
        csv
    }

    /// `kernel.md`, naming the command and the machine it ran on.
    pub fn markdown(&self, command: &str, machine: &str) -> String {
        let (j, d, threads) = (self.j, self.d, self.threads);
        let mut md = format!(
            "## `kernel` — the apply kernel vs plain GEMM, the naive loop and memory bandwidth

Command: `{command}`  \nMachine: {machine}\n\nW {j}×{d} f32, {threads} threads; copy {:.1} GB/s, read-modify-write {:.1} GB/s (same buffer size, all threads).\n\n| R | kernel ms | GEMM ms | naive ms | kernel ÷ GEMM speed | kernel ÷ RMW bandwidth | × naive |\n|---:|---:|---:|---:|---:|---:|---:|\n",
            self.copy_gb_s, self.rmw_gb_s
        );
        for r in &self.rows {
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
        if !self.aggregation.is_empty() {
            md += &format!(
                "\n### Aggregated apply (`--aggregate rank:{AGG_RANK}`): re-compress, or apply every pair?\n\n| W | pairs | direct ms | aggregated ms | faster | model: direct ms | model: aggregated ms | model picks |\n|---|---:|---:|---:|---|---:|---:|---|\n"
            );
            let pick = |agg: bool| if agg { "aggregated" } else { "direct" };
            for a in &self.aggregation {
                md += &format!(
                    "| {}×{} | {} | {:.2} | {:.2} | {} | {:.2} | {:.2} | {}{} |\n",
                    a.j,
                    a.d,
                    a.pairs,
                    a.direct_s * 1e3,
                    a.aggregated_s * 1e3,
                    pick(a.aggregated_s < a.direct_s),
                    a.model_direct_s * 1e3,
                    a.model_aggregated_s * 1e3,
                    pick(a.model_aggregated_s < a.model_direct_s),
                    if a.model_agrees() { "" } else { " (wrong)" }
                );
            }
            let right = self.aggregation.iter().filter(|a| a.model_agrees()).count();
            md += &format!(
                "\nThe cost model (`sfb_core::aggregate`, constants fixed in the code so that every replica makes the same choice) picks the faster way in {right} of {} cases. Aggregation is two f64 Gram products of the stacked pairs, small n×n work (Cholesky, one SVD) and a rank-{AGG_RANK} apply, with no residual waiting (a run's residual adds up to {AGG_RANK} pairs).\n",
                self.aggregation.len()
            );
        }
        md += &if self.missed.is_empty() {
            "\nTargets (≥ 70% of GEMM for R ≥ 64, ≥ 70% of RMW bandwidth at R = 1, ≥ 10× naive for R ≥ 8): all met.\n".to_string()
        } else {
            format!("\nTargets missed: {}\n", self.missed.join("; "))
        };
        md + "\n![kernel vs GEMM vs naive](kernel.png)\n"
    }

    /// Writes `kernel.json`, `kernel.csv` and `kernel.md` into `dir` (created if needed).
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be written.
    pub fn write_files(&self, dir: &Path, command: &str, machine: &str) -> Result<()> {
        let json = serde_json::to_string_pretty(self).expect("plain data") + "\n";
        super::write_all(
            dir,
            &[
                ("kernel.json", json),
                ("kernel.csv", self.csv()),
                ("kernel.md", self.markdown(command, machine)),
            ],
        )
    }
}
