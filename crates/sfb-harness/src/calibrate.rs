//! Timing the engine's own work on this machine for the simulator's calibrated cost model
//! ([`CostModel::Calibrate`](crate::sim::CostModel::Calibrate)): a short one-peer run of
//! the spec itself.

use crate::Result;
use crate::sim::SimOptions;

/// What [`calibrate_compute`] measured, in seconds of one core (per-core equivalents for
/// co-located nodes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InSitu {
    /// `compute_sv` per sample.
    pub per_sample: f64,
    /// One evaluation on the held-out data.
    pub per_eval: f64,
    /// One call of the engine's apply path (the kernel, the optimizer's and the prox's
    /// passes over W, bookkeeping) at `apply_pairs` pairs.
    pub per_apply: f64,
    /// Pairs per apply call in the run (the batch).
    pub apply_pairs: usize,
}

impl InSitu {
    /// Puts the figures in `sim` where it has none of its own.
    pub fn fill(&self, sim: &mut SimOptions) {
        sim.compute_per_sample_s.get_or_insert(self.per_sample);
        sim.evaluate_s.get_or_insert(self.per_eval);
        sim.measured_apply = Some((self.per_apply, self.apply_pairs));
    }
}

/// Clocks of [`calibrate_compute`]'s one-peer run.
const CALIBRATION_CLOCKS: u64 = 90;

/// Times the engine's own work on this machine: a one-peer in-memory run of `spec` (90
/// clocks, evaluating every 30), giving seconds per sample of `compute_sv`, per
/// evaluation and per apply call (the whole apply path, not only the kernel: a node's
/// apply also runs the optimizer's and the prox's passes over W).
///
/// # Errors
/// The run's.
pub fn calibrate_compute(spec: &crate::RunSpec) -> Result<InSitu> {
    let workers = crate::sim::calibration_workers(spec.sim.colocate);
    if workers > 1 {
        return calibrate_compute_colocated(spec, workers);
    }
    calibrate_compute_alone(spec)
}

/// [`calibrate_compute`] for `workers` co-located nodes: that many one-peer runs at once
/// (started together; the median of their figures), returned as per-core equivalents
/// (divided by the share, which the cost model multiplies back). Each run has its own
/// kernel pool of the threads the launcher would give it (`max(1, cores / workers)`), as
/// co-located processes have: on a shared pool at most a core's worth of runs would
/// compute at once and keep the caches to themselves, where `workers` processes take
/// turns on the cores and evict each other's working sets (an MLR evaluation at
/// J = D = 1024, 12 processes on 2 cores here: 460 ms each, 6.4 times the fair share of
/// its 12 ms alone). A run that has its figures keeps running (untimed) until every run
/// has them, so every timing saw `workers` runs at once.
fn calibrate_compute_colocated(spec: &crate::RunSpec, workers: usize) -> Result<InSitu> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let start = std::sync::Barrier::new(workers);
    let done = AtomicUsize::new(0);
    let here = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = (here / workers).max(1);
    let worker = || {
        let first = calibrate_compute_alone(spec);
        done.fetch_add(1, Ordering::SeqCst);
        // Keep the host as busy until every run has its figures (untimed), so no
        // timing ends with fewer runs at once than `workers`; a failure stops at once.
        if first.is_ok() {
            while done.load(Ordering::SeqCst) < workers {
                if calibrate_compute_alone(spec).is_err() {
                    break;
                }
            }
        }
        first
    };
    let runs: Vec<Result<InSitu>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
                    start.wait();
                    match pool {
                        Ok(pool) => pool.install(worker),
                        Err(_) => worker(),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let runs = runs.into_iter().collect::<Result<Vec<InSitu>>>()?;
    let median = |f: fn(&InSitu) -> f64| {
        let mut xs: Vec<f64> = runs.iter().map(f).collect();
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let share = spec.sim.share();
    Ok(InSitu {
        per_sample: median(|r| r.per_sample) / share,
        per_eval: median(|r| r.per_eval) / share,
        per_apply: median(|r| r.per_apply) / share,
        apply_pairs: runs[0].apply_pairs,
    })
}

/// One one-peer run, alone (module docs of [`calibrate_compute`]).
fn calibrate_compute_alone(spec: &crate::RunSpec) -> Result<InSitu> {
    let mut one = spec.clone();
    one.peers = 1;
    one.transport = crate::Transport::Mem;
    one.backend = crate::Backend::Sfb;
    one.sim = SimOptions::default();
    one.topology = crate::TopologyOptions::default();
    one.net = crate::NetOptions::default();
    one.output = crate::OutputOptions::default();
    one.fault = crate::FaultOptions::default();
    one.train.clocks = CALIBRATION_CLOCKS;
    one.train.eval_every = CALIBRATION_CLOCKS / 3;
    one.train.straggler = None;
    one.output.keep_records = true;
    let out = crate::Cluster::from_spec(&one)?.run_mem()?.into_outcome();
    let s = &out.summary;
    let evaluations = out
        .records
        .iter()
        .filter(|r| r.objective.is_some())
        .count()
        .max(1);
    let clocks = one.train.clocks as f64;
    let per_sample = s.compute_s / (clocks * one.train.batch as f64);
    let per_eval = s.eval_s / evaluations as f64;
    // One apply call a clock: the peer's own batch.
    let per_apply = s.apply_s / clocks;
    tracing::info!(
        "calibrated here: compute_sv {:.3} µs per sample, evaluation {:.3} ms, apply {:.3} \
         ms per call of {} pairs",
        per_sample * 1e6,
        per_eval * 1e3,
        per_apply * 1e3,
        one.train.batch
    );
    // A zero (a clock too coarse) would be refused as a cost: keep it positive.
    Ok(InSitu {
        per_sample: per_sample.max(1e-12),
        per_eval: per_eval.max(1e-12),
        per_apply: per_apply.max(1e-12),
        apply_pairs: one.train.batch,
    })
}
