//! What every computing node does, whatever it syncs with: draw a mini-batch, run the
//! model's `compute_sv`, commit and validate the factors, evaluate, keep the counters and
//! emit per-clock records. Shared by the SFB [`Engine`](crate::Engine) and the FMS
//! [`Client`](crate::fms::Client), so both measure the same things the same way.

use std::collections::VecDeque;
use std::time::Instant;

use ndarray::ArrayView2;

use crate::engine::Event;
use crate::metrics::{ClockRecord, PeerMetrics};
use crate::{Error, Evaluation, Evaluator, FactorBatch, Model, PeerId, Result, Shard, SvList};

/// The model, its data and its bookkeeping; no W (the owner passes a view of its own).
pub(crate) struct Worker<M: Model> {
    pub(crate) id: PeerId,
    pub(crate) model: M,
    shard: Shard<M::Sample>,
    sv: SvList,
    evaluator: Option<Box<dyn Evaluator>>,
    pub(crate) last_eval: Option<Evaluation>,
    pub(crate) metrics: PeerMetrics,
    pub(crate) started: Option<Instant>,
    last_step_end: Option<Instant>,
    events: VecDeque<Event>,
}

impl<M: Model> Worker<M> {
    pub(crate) fn new(id: PeerId, model: M, shard: Shard<M::Sample>, j: usize, d: usize) -> Self {
        Self {
            id,
            model,
            shard,
            sv: SvList::new(j, d),
            evaluator: None,
            last_eval: None,
            metrics: PeerMetrics::default(),
            started: None,
            last_step_end: None,
            events: VecDeque::new(),
        }
    }

    pub(crate) fn set_evaluator(&mut self, evaluator: Box<dyn Evaluator>) {
        self.evaluator = Some(evaluator);
    }

    /// Starts the wall clock on the first tick; returns `(started, end of the last step)`.
    pub(crate) fn tick_times(&mut self, now: Instant) -> (Instant, Instant) {
        let started = *self.started.get_or_insert(now);
        (started, self.last_step_end.unwrap_or(started))
    }

    /// Marks the end of a step (or of the run's final flush).
    pub(crate) fn mark_step_end(&mut self) -> Instant {
        let end = Instant::now();
        self.last_step_end = Some(end);
        end
    }

    /// Computes clock `clock`'s factors on `w`: draws `batch_size` samples, runs
    /// `compute_sv`, commits with the model's scale and validates the batch (timed as
    /// `compute_s`; counts `samples`).
    ///
    /// # Errors
    /// [`Error::Model`] if `compute_sv` fails or its factors are invalid.
    pub(crate) fn compute(
        &mut self,
        w: ArrayView2<'_, f32>,
        clock: u64,
        batch_size: usize,
        lr: f32,
    ) -> Result<FactorBatch> {
        let t0 = Instant::now();
        let batch = self.shard.next_batch(batch_size);
        self.sv.clear();
        self.model
            .compute_sv(w, &batch, &mut self.sv)
            .map_err(|source| Error::Model { clock, source })?;
        let pairs = self.sv.len();
        let scale = self.model.scale(clock, lr, pairs);
        let fb = self.sv.commit(self.id, clock, scale);
        let (j, d) = w.dim();
        fb.validate(j, d).map_err(|e| Error::Model {
            clock,
            source: e.into(),
        })?;
        self.metrics.compute_s += t0.elapsed().as_secs_f64();
        self.metrics.samples += batch.len() as u64;
        Ok(fb)
    }

    /// Mean seconds of compute and apply per step over `steps` steps, in microseconds
    /// (what a peer reports to others for custom barriers).
    pub(crate) fn mean_iter_us(&self, steps: u64) -> u32 {
        ((self.metrics.compute_s + self.metrics.apply_s) / steps.max(1) as f64 * 1e6)
            .min(f64::from(u32::MAX)) as u32
    }

    /// After a step that brought the node to `clock` clocks completed: evaluates on `w` if
    /// due (every `eval_every` clocks, not at the last, which `finish` evaluates) and emits
    /// the clock's record.
    pub(crate) fn end_step(
        &mut self,
        w: ArrayView2<'_, f32>,
        clock: u64,
        clocks: u64,
        eval_every: u64,
    ) {
        self.metrics.clocks = clock;
        let eval_due = eval_every > 0 && clock.is_multiple_of(eval_every);
        let evaluation = if eval_due && clock < clocks {
            self.evaluate(w)
        } else {
            None
        };
        let end = self.mark_step_end();
        let started = self.started.unwrap_or(end);
        self.push_record(
            clock,
            end.saturating_duration_since(started).as_secs_f64(),
            evaluation,
        );
    }

    /// Runs the evaluator on `w` (timed as `eval_s`).
    pub(crate) fn evaluate(&mut self, w: ArrayView2<'_, f32>) -> Option<Evaluation> {
        let ev = self.evaluator.as_mut()?;
        let t0 = Instant::now();
        let e = ev.evaluate(w);
        self.metrics.eval_s += t0.elapsed().as_secs_f64();
        self.last_eval = Some(e);
        Some(e)
    }

    /// Evaluates the final `w` and emits the final record.
    pub(crate) fn finish(&mut self, w: ArrayView2<'_, f32>, clock: u64) -> Option<Evaluation> {
        let e = self.evaluate(w);
        let wall = self.started.map_or(0.0, |s| s.elapsed().as_secs_f64());
        self.push_record(clock, wall, e);
        e
    }

    pub(crate) fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn push_record(&mut self, clock: u64, wall_s: f64, evaluation: Option<Evaluation>) {
        self.events.push_back(Event::Clock(record(
            self.id,
            &self.metrics,
            clock,
            wall_s,
            evaluation,
        )));
    }
}

/// A [`ClockRecord`] of node `id` from its counters.
pub(crate) fn record(
    id: PeerId,
    m: &PeerMetrics,
    clock: u64,
    wall_s: f64,
    evaluation: Option<Evaluation>,
) -> ClockRecord {
    ClockRecord {
        peer: id.0,
        clock,
        wall_s,
        objective: evaluation.map(|e| e.objective),
        test_accuracy: evaluation.and_then(|e| e.accuracy),
        samples: m.samples,
        samples_per_s: if wall_s > 0.0 {
            m.samples as f64 / wall_s
        } else {
            0.0
        },
        bytes_sent: m.bytes_sent,
        bytes_received: m.bytes_received,
        compute_s: m.compute_s,
        apply_s: m.apply_s,
        wait_s: m.wait_s,
        eval_s: m.eval_s,
        max_staleness: m.max_staleness,
    }
}
