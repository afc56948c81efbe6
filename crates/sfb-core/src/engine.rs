//! The per-peer engine: a sans-IO state machine.
//!
//! Drive it with [`Engine::on_message`] (a frame arrived) and [`Engine::on_tick`] (try to
//! make progress), and drain [`Engine::poll_output`] (frames to send) and
//! [`Engine::poll_event`] (per-clock records). It never blocks, sleeps or touches IO, so
//! the in-memory cluster, the libp2p runner and simulators all drive the same code.
//!
//! One step at clock `t`:
//! 1. the consistency model must allow clock `t` (else [`Progress::Blocked`]);
//! 2. every received batch that may be applied (clock `< t`; any clock under Async) is
//!    applied in `(clock, origin)` order in **one** kernel call, then the model's `prox`;
//! 3. `compute_sv` on a mini-batch of the peer's shard; the factors are committed into a
//!    batch for clock `t`, queued for every out-neighbour and kept for the peer itself;
//! 4. `t += 1`.
//!
//! After the last clock the engine waits for every in-neighbour's remaining batches,
//! applies them and reports [`Progress::Done`]. Under BSP with full broadcast every
//! replica then holds bitwise the same W.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use ndarray::Array2;

use crate::metrics::{ClockRecord, PeerMetrics};
use crate::wire::{self, Message};
use crate::worker::Worker;
use crate::{
    Consistency, Error, Evaluation, Evaluator, FactorBatch, Model, PeerId, PeerStatus, Replica,
    Result, Shard, StatusView,
};

/// Configuration of one peer's engine.
#[derive(Debug, Clone)]
pub struct Config {
    /// This peer.
    pub id: PeerId,
    /// Peers in the cluster (`P`).
    pub peers: usize,
    /// Where this peer's batches go.
    pub out_neighbors: Vec<PeerId>,
    /// Whose batches this peer receives and waits for.
    pub in_neighbors: Vec<PeerId>,
    /// When to wait. Default: BSP.
    pub consistency: Consistency,
    /// Clocks to run. Default: 100.
    pub clocks: u64,
    /// Mini-batch size `K` per peer and clock. Default: 16.
    pub batch_size: usize,
    /// Learning rate handed to [`Model::scale`]. Default: 0.1.
    pub lr: f32,
    /// Evaluate every this many clocks (the last clock always). 0: only at the end.
    /// Default: 10.
    pub eval_every: u64,
    /// How factor values travel on the wire. With [`wire::Dtype::F16`] the engine rounds
    /// its own batches to half precision before applying and sending them, so every
    /// replica applies the same values. Default: f32.
    pub wire: wire::Dtype,
}

impl Config {
    /// Peer `id` of `peers` with full broadcast (every other peer in and out) and defaults.
    pub fn full_broadcast(id: PeerId, peers: usize) -> Self {
        let others: Vec<PeerId> = (0..peers as u32).map(PeerId).filter(|&p| p != id).collect();
        Self {
            id,
            peers,
            out_neighbors: others.clone(),
            in_neighbors: others,
            consistency: Consistency::Bsp,
            clocks: 100,
            batch_size: 16,
            lr: 0.1,
            eval_every: 10,
            wire: wire::Dtype::F32,
        }
    }

    /// Checks the configuration before anything runs.
    ///
    /// # Errors
    /// [`Error::Config`] naming the problem.
    pub fn validate(&self) -> Result<()> {
        let fail = |m: String| Err(Error::Config(m));
        if self.peers == 0 {
            return fail("peers must be at least 1".into());
        }
        if self.id.index() >= self.peers {
            return fail(format!(
                "peer id {} is not below peers = {}",
                self.id, self.peers
            ));
        }
        for (name, list) in [("out", &self.out_neighbors), ("in", &self.in_neighbors)] {
            let mut seen = vec![false; self.peers];
            for &p in list {
                if p.index() >= self.peers {
                    return fail(format!(
                        "{name}-neighbour {p} is not below peers = {}",
                        self.peers
                    ));
                }
                if p == self.id {
                    return fail(format!("{name}-neighbours of {} include itself", self.id));
                }
                if std::mem::replace(&mut seen[p.index()], true) {
                    return fail(format!("{name}-neighbour {p} listed twice"));
                }
            }
        }
        if self.batch_size == 0 {
            return fail("batch size must be at least 1".into());
        }
        if !self.lr.is_finite() {
            return fail(format!("learning rate {} is not finite", self.lr));
        }
        Ok(())
    }
}

/// What [`Engine::on_tick`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A clock was computed; outputs may be queued. Tick again.
    Stepped,
    /// Waiting for in-neighbours; tick again when a message arrives.
    Blocked,
    /// All clocks computed and all in-neighbours' batches applied.
    Done,
}

/// A frame the engine wants sent.
#[derive(Debug, Clone)]
pub struct Output {
    /// Destination peer.
    pub to: PeerId,
    /// The message (cheap to clone: batches are shared).
    pub msg: Message,
}

/// Something the driver may want to log.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// A clock completed.
    Clock(ClockRecord),
}

#[derive(Debug, Clone, Copy)]
struct InStatus {
    delivered: u64,
    mean_iter_s: f64,
}

/// One peer's engine; see the [module docs](self).
pub struct Engine<M: Model> {
    cfg: Config,
    worker: Worker<M>,
    replica: Replica,
    clock: u64,
    status: Vec<Option<InStatus>>,
    pending: BTreeMap<(u64, PeerId), Arc<FactorBatch>>,
    outputs: VecDeque<Output>,
    done: bool,
}

impl<M: Model> std::fmt::Debug for Engine<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("id", &self.cfg.id)
            .field("clock", &self.clock)
            .field("pending", &self.pending.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<M: Model> Engine<M> {
    /// An engine for `cfg`, starting from `w0` (the same on every peer), training `model`
    /// on `shard`.
    ///
    /// # Errors
    /// [`Error::Config`] from [`Config::validate`]; [`Error::NonFinite`] for a bad `w0`.
    pub fn new(cfg: Config, model: M, w0: Array2<f32>, shard: Shard<M::Sample>) -> Result<Self> {
        cfg.validate()?;
        let replica = Replica::new(w0)?;
        let (j, d) = replica.dim();
        let mut status = vec![None; cfg.peers];
        for &q in &cfg.in_neighbors {
            status[q.index()] = Some(InStatus {
                delivered: 0,
                mean_iter_s: 0.0,
            });
        }
        Ok(Self {
            worker: Worker::new(cfg.id, model, shard, j, d),
            cfg,
            replica,
            clock: 0,
            status,
            pending: BTreeMap::new(),
            outputs: VecDeque::new(),
            done: false,
        })
    }

    /// Evaluates with `evaluator` every `eval_every` clocks and at the end.
    pub fn with_evaluator(mut self, evaluator: Box<dyn Evaluator>) -> Self {
        self.worker.set_evaluator(evaluator);
        self
    }

    /// Takes a fresh engine apart (for [`fms::Client::from_engine`](crate::fms::Client)):
    /// its configuration, worker (model, shard, evaluator) and initial replica.
    ///
    /// # Errors
    /// [`Error::Config`] if the engine has already stepped or received anything.
    pub(crate) fn into_parts(self) -> Result<(Config, Worker<M>, Replica)> {
        if self.clock > 0 || !self.pending.is_empty() || self.worker.started.is_some() {
            return Err(Error::Config(format!(
                "engine of {} has already run (clock {}); only a fresh engine can be converted",
                self.cfg.id, self.clock
            )));
        }
        Ok((self.cfg, self.worker, self.replica))
    }

    /// Sends (and applies) factor values as `dtype`; see [`Config::wire`].
    pub fn with_wire(mut self, dtype: wire::Dtype) -> Self {
        self.cfg.wire = dtype;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The next clock to compute (= clocks completed).
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// The local replica.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// The model.
    pub fn model(&self) -> &M {
        &self.worker.model
    }

    /// Counters so far.
    pub fn metrics(&self) -> &PeerMetrics {
        &self.worker.metrics
    }

    /// The latest evaluation, if any.
    pub fn last_evaluation(&self) -> Option<Evaluation> {
        self.worker.last_eval
    }

    /// Whether the run is complete.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// In-neighbours this peer is waiting on, with the clocks each has delivered; empty
    /// when it is not blocked. For error messages on timeouts.
    pub fn waiting_on(&self) -> Vec<(PeerId, u64)> {
        if self.done {
            return Vec::new();
        }
        let need = if self.clock >= self.cfg.clocks {
            self.cfg.clocks
        } else {
            self.clock
                .saturating_sub(self.cfg.consistency.staleness_bound().unwrap_or(self.clock))
        };
        self.cfg
            .in_neighbors
            .iter()
            .filter_map(|&q| {
                let d = self.status[q.index()].map_or(0, |s| s.delivered);
                (d < need).then_some((q, d))
            })
            .collect()
    }

    /// Takes a message received from peer `from`.
    ///
    /// The batch must come from an in-neighbour, be its next clock (links are FIFO), fit
    /// the replica's shape and hold finite values. A refused message changes nothing.
    ///
    /// # Errors
    /// [`Error::UnexpectedMessage`] for anything but [`Message::Factors`] (the FMS
    /// messages), [`Error::UnknownPeer`], [`Error::BadClock`], and the validation errors
    /// of [`FactorBatch::validate`].
    pub fn on_message(&mut self, from: PeerId, msg: Message) -> Result<()> {
        let Message::Factors {
            batch,
            mean_iter_us,
        } = &msg
        else {
            return Err(Error::UnexpectedMessage {
                from,
                kind: msg.kind(),
                role: "SFB peer",
            });
        };
        let origin = batch.origin;
        if origin != from {
            return Err(Error::BadClock {
                origin,
                clock: batch.clock,
                reason: "relayed batches are not enabled: origin differs from sender",
            });
        }
        let Some(st) = self.status.get(origin.index()).copied().flatten() else {
            return Err(Error::UnknownPeer {
                origin,
                peers: self.cfg.peers,
            });
        };
        if batch.clock != st.delivered {
            return Err(Error::BadClock {
                origin,
                clock: batch.clock,
                reason: if batch.clock < st.delivered {
                    "duplicate (already delivered)"
                } else {
                    "out of order (an earlier clock is missing)"
                },
            });
        }
        if batch.clock >= self.cfg.clocks {
            return Err(Error::BadClock {
                origin,
                clock: batch.clock,
                reason: "beyond the run's last clock",
            });
        }
        let (j, d) = self.replica.dim();
        batch.validate(j, d)?;
        self.worker.metrics.bytes_received += wire::encoded_len_with(&msg, self.cfg.wire) as u64;
        self.status[origin.index()] = Some(InStatus {
            delivered: st.delivered + 1,
            mean_iter_s: f64::from(*mean_iter_us) * 1e-6,
        });
        self.pending
            .insert((batch.clock, origin), Arc::clone(batch));
        Ok(())
    }

    /// The next frame to send, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.worker.poll_event()
    }

    fn may_start(&self) -> bool {
        let peers: Vec<PeerStatus> = self
            .cfg
            .in_neighbors
            .iter()
            .map(|&q| {
                let s = self.status[q.index()].expect("in-neighbour status");
                PeerStatus {
                    peer: q,
                    delivered: s.delivered,
                    mean_iter_s: s.mean_iter_s,
                    ready: s.delivered >= self.clock,
                }
            })
            .collect();
        self.cfg.consistency.may_start(&StatusView {
            me: self.cfg.id,
            clock: self.clock,
            peers: &peers,
        })
    }

    fn all_delivered(&self) -> bool {
        self.cfg
            .in_neighbors
            .iter()
            .all(|q| self.status[q.index()].is_some_and(|s| s.delivered >= self.cfg.clocks))
    }

    /// Applies every pending batch with clock `< limit`, in (clock, origin) order, in one
    /// kernel call, then `prox`.
    fn apply_ready(&mut self, limit: u64) -> Result<()> {
        let keys: Vec<(u64, PeerId)> = self
            .pending
            .range(..(limit, PeerId(0)))
            .map(|(k, _)| *k)
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let t0 = Instant::now();
        let batches: Vec<Arc<FactorBatch>> = keys.iter().map(|k| self.pending[k].clone()).collect();
        let refs: Vec<&FactorBatch> = batches.iter().map(|b| b.as_ref()).collect();
        self.replica.apply(&refs)?;
        for k in &keys {
            self.pending.remove(k);
            let late = self.clock.saturating_sub(1).saturating_sub(k.0);
            self.worker.metrics.record_staleness(late);
        }
        self.worker.model.prox(self.replica.w_mut());
        self.worker.metrics.apply_s += t0.elapsed().as_secs_f64();
        Ok(())
    }

    /// Tries to make progress at time `now`.
    ///
    /// # Errors
    /// [`Error::Model`] if `compute_sv` fails or produces invalid factors; kernel errors
    /// (which cannot happen for validated batches). After an error the engine should be
    /// dropped.
    pub fn on_tick(&mut self, now: Instant) -> Result<Progress> {
        if self.done {
            return Ok(Progress::Done);
        }
        let (_, since) = self.worker.tick_times(now);
        if self.clock >= self.cfg.clocks {
            if !self.all_delivered() {
                return Ok(Progress::Blocked);
            }
            self.worker.metrics.flush_s += now.saturating_duration_since(since).as_secs_f64();
            self.apply_ready(u64::MAX)?;
            self.done = true;
            self.worker.mark_step_end();
            return Ok(Progress::Done);
        }
        if !self.may_start() {
            return Ok(Progress::Blocked);
        }
        self.worker.metrics.wait_s += now.saturating_duration_since(since).as_secs_f64();
        let limit = if self.cfg.consistency.applies_future() {
            u64::MAX
        } else {
            self.clock
        };
        self.apply_ready(limit)?;

        let t = self.clock;
        let fb = self
            .worker
            .compute(self.replica.w(), t, self.cfg.batch_size, self.cfg.lr)?;
        let fb = if self.cfg.wire == wire::Dtype::F16 {
            let mut fb = fb;
            wire::round_to_f16(&mut fb);
            fb
        } else {
            fb
        };
        let fb = Arc::new(fb);
        let msg = Message::Factors {
            batch: Arc::clone(&fb),
            mean_iter_us: self.worker.mean_iter_us(t + 1),
        };
        if !self.cfg.out_neighbors.is_empty() {
            let len = wire::encoded_len_with(&msg, self.cfg.wire) as u64;
            for &to in &self.cfg.out_neighbors {
                self.worker.metrics.bytes_sent += len;
                self.outputs.push_back(Output {
                    to,
                    msg: msg.clone(),
                });
            }
        }
        self.pending.insert((t, self.cfg.id), fb);
        self.clock += 1;
        self.worker.end_step(
            self.replica.w(),
            self.clock,
            self.cfg.clocks,
            self.cfg.eval_every,
        );
        Ok(Progress::Stepped)
    }

    /// Runs the evaluator on the current replica (timed as `eval_s`).
    pub fn evaluate(&mut self) -> Option<Evaluation> {
        self.worker.evaluate(self.replica.w())
    }

    /// After [`Progress::Done`]: evaluates the final replica and emits the final record.
    pub fn finish(&mut self) -> Option<Evaluation> {
        self.worker.finish(self.replica.w(), self.clock)
    }
}
