//! The protocol skeleton every computing node shares, whatever it syncs with.
//!
//! A [`Worker`] draws mini-batches, runs the model's `compute_sv`, validates the factors,
//! evaluates, keeps the counters and per-clock records, keeps the status table of the
//! nodes it waits for ([`Inbound`]) and asks the [`Consistency`] model whether it may start
//! its next clock. What differs between an SFB peer and an FMS client — where W lives, how
//! received updates reach it, where the factors go — is a [`Side`]. One step
//! ([`Worker::step`]) is the same for both:
//!
//! 1. after the last clock: once every awaited node has delivered everything, absorb the
//!    rest and finish;
//! 2. otherwise the consistency model must allow clock `t` (else [`Progress::Blocked`]);
//! 3. the side absorbs what may be used for clock `t` (SFB: applies the ready batches);
//! 4. `compute_sv` on a mini-batch; the side emits the factors;
//! 5. `t += 1`, evaluate if due, emit the clock's record.
//!
//! Every duration is a difference of two readings of the caller's [`TimeSource`].

use std::collections::VecDeque;
use std::time::Duration;

use ndarray::ArrayView2;

use crate::checkpoint::{NodeState, Role};
use crate::engine::{Event, Output, Progress};
use crate::metrics::{ClockRecord, PeerMetrics};
use crate::time::{TimeSource, Work, secs};
use crate::wire::Message;
use crate::{
    Consistency, Error, Evaluation, Evaluator, FactorBatch, Model, ModelError, PeerId, PeerStatus,
    Result, Shard, StatusView, SvList,
};

/// What a node runs: shared by the SFB engine's and the FMS configurations.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) consistency: Consistency,
    pub(crate) clocks: u64,
    pub(crate) batch_size: usize,
    pub(crate) lr: f32,
    /// The optimizer as displayed (`sgd`, `factored`, …): named when the model diverges.
    pub(crate) optimizer: String,
    pub(crate) eval_every: u64,
    /// The flow-control bound of the models without a staleness bound (see
    /// [`Config::max_drift`](crate::Config::max_drift)).
    pub(crate) max_drift: u64,
    /// Take the node's state every this many clocks (0: never); see
    /// [`checkpoint`](crate::checkpoint).
    pub(crate) checkpoint_every: u64,
    /// No arithmetic ([`Config::timing_only`](crate::Config::timing_only)).
    pub(crate) timing_only: bool,
    /// Stop rules ([`crate::stop`]).
    pub(crate) until: Option<crate::stop::Until>,
    /// Parts a clock is computed and sent in ([`Config::send_parts`](crate::Config::send_parts)).
    pub(crate) parts: usize,
}

/// A clock being computed in parts ([`Plan::parts`]).
struct InClock {
    /// The shard indices of the clock's mini-batch, drawn at its start.
    batch: Vec<usize>,
    /// Parts computed so far.
    done: usize,
    /// The scale of the whole mini-batch, shared by its parts.
    scale: f32,
    /// What the clock's start applied up to (between parts the same limit holds).
    limit: u64,
}

/// What the nodes a worker waits for have delivered (SFB: its in-neighbours; an FMS
/// client: the server, whose W of clock `c` counts as `c` clocks delivered).
#[derive(Debug, Clone)]
pub(crate) struct Inbound {
    /// In configuration order.
    peers: Vec<PeerId>,
    /// `(peer, position)` sorted by peer, for lookups in O(log Q).
    index: Vec<(PeerId, usize)>,
    delivered: Vec<u64>,
    mean_iter_s: Vec<f64>,
    /// Awaited since a topology repair and nothing received yet: its first frame may be of
    /// any clock (it starts sending from where it is). It does not hold this node's
    /// barrier until then: two nodes the repaired graph newly joins would otherwise each
    /// wait for the other's first frame, which each sends only after its next clock (a
    /// deadlock the virtual-time crash property found), nor the end of the run (it may
    /// have sent its last clock before the repair). Checkpoint cuts still wait for it.
    fresh: Vec<bool>,
    /// A fresh node that holds the barrier all the same, at what it counts as delivered:
    /// a rejoining node's in-neighbours (they are near the clock it adopted; letting them
    /// not hold it would let it train alone, far ahead, until their first frames come).
    holds: Vec<bool>,
    /// Added by a repair: its clocks may skip forward once. Frames it sent under an
    /// earlier graph may be held here through a repair that dropped the arc and taken
    /// after one that restored it (as its first frames); what it sent under the graph in
    /// between went to other nodes, so its next frame here skips those clocks.
    repaired: Vec<bool>,
    /// Number of nodes of the cluster (for error messages).
    cluster: usize,
}

impl Inbound {
    pub(crate) fn new(peers: &[PeerId], cluster: usize) -> Self {
        let mut inbound = Self {
            peers: peers.to_vec(),
            index: Vec::new(),
            delivered: vec![0; peers.len()],
            mean_iter_s: vec![0.0; peers.len()],
            fresh: vec![false; peers.len()],
            holds: vec![false; peers.len()],
            repaired: vec![false; peers.len()],
            cluster,
        };
        inbound.reindex();
        inbound
    }

    /// Rebuilds the sorted `(peer, position)` index after `peers` changed.
    fn reindex(&mut self) {
        self.index = self
            .peers
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, i))
            .collect();
        self.index.sort_unstable();
    }

    fn position(&self, q: PeerId) -> Option<usize> {
        self.index
            .binary_search_by_key(&q, |&(p, _)| p)
            .ok()
            .map(|i| self.index[i].1)
    }

    /// Checks that `clock` of `origin`, received from `from`, is the next clock expected
    /// of an awaited node and within the run's `clocks`; returns the node's position for
    /// [`deliver`](Self::deliver). Changes nothing.
    ///
    /// # Errors
    /// [`Error::BadClock`] (relayed, duplicate, out of order, beyond the run);
    /// [`Error::UnknownPeer`].
    pub(crate) fn check(
        &self,
        from: PeerId,
        origin: PeerId,
        clock: u64,
        clocks: u64,
    ) -> Result<usize> {
        if origin != from {
            return Err(Error::BadClock {
                origin,
                clock,
                reason: "relayed updates are not enabled: origin differs from sender",
            });
        }
        let Some(i) = self.position(origin) else {
            if origin.index() < self.cluster {
                return Err(Error::NotAnInNeighbour {
                    from: origin,
                    reason: "this node does not await its frames (for an SFB peer: not \
                             after a topology repair either, or more frames came than are \
                             held until one)",
                });
            }
            return Err(Error::UnknownPeer {
                origin,
                peers: self.cluster,
            });
        };
        let expected = self.delivered[i];
        if self.fresh[i] || (self.repaired[i] && clock > expected) {
            if clock >= clocks {
                return Err(Error::BadClock {
                    origin,
                    clock,
                    reason: "beyond the run's last clock",
                });
            }
            return Ok(i);
        }
        if clock != expected {
            return Err(Error::BadClock {
                origin,
                clock,
                reason: if clock < expected {
                    "duplicate (already delivered)"
                } else {
                    "out of order (an earlier clock is missing)"
                },
            });
        }
        if clock >= clocks {
            return Err(Error::BadClock {
                origin,
                clock,
                reason: "beyond the run's last clock",
            });
        }
        Ok(i)
    }

    /// Stops awaiting `q` (a lost node); whether it was awaited.
    pub(crate) fn remove(&mut self, q: PeerId) -> bool {
        let Some(i) = self.position(q) else {
            return false;
        };
        self.peers.remove(i);
        self.delivered.remove(i);
        self.mean_iter_s.remove(i);
        self.fresh.remove(i);
        self.holds.remove(i);
        self.repaired.remove(i);
        self.reindex();
        true
    }

    /// Whether `q` is awaited.
    pub(crate) fn awaits(&self, q: PeerId) -> bool {
        self.position(q).is_some()
    }

    /// What `q` has delivered, if it is awaited.
    pub(crate) fn delivered_by(&self, q: PeerId) -> Option<u64> {
        self.position(q).map(|i| self.delivered[i])
    }

    /// Awaits `q` from now on, a new in-neighbour after a topology repair: until its first
    /// frame it counts as having delivered `clock` clocks (this node's own), then as what
    /// it sends. No-op if `q` is awaited.
    pub(crate) fn add_fresh(&mut self, q: PeerId, clock: u64) {
        if self.position(q).is_some() {
            return;
        }
        self.peers.push(q);
        self.delivered.push(clock);
        self.mean_iter_s.push(0.0);
        self.fresh.push(true);
        self.holds.push(false);
        self.repaired.push(true);
        self.reindex();
    }

    /// Awaits `q` (added if it is not) as having delivered `delivered` clocks, holding
    /// the barrier from now on: the tree mode's parent, whose clocks are the down messages
    /// this node holds, whoever brought them.
    pub(crate) fn hold_at(&mut self, q: PeerId, delivered: u64) {
        self.add_fresh(q, delivered);
        if let Some(i) = self.position(q) {
            self.settle(i, delivered);
        }
    }

    /// `q`, if awaited and fresh (nothing received since it was added), sends this node
    /// its clocks from `clock` on: it counts as having delivered `clock` clocks and holds
    /// the barrier from there. A clock at or below what it counts already changes nothing.
    pub(crate) fn starts_at(&mut self, q: PeerId, clock: u64) {
        let Some(i) = self.position(q) else {
            return;
        };
        if self.fresh[i] && clock > self.delivered[i] {
            self.settle(i, clock);
        }
    }

    /// `q`, if awaited, has finished the run and sends nothing more: it counts as having
    /// delivered `clocks` (every clock of the run), whatever it did deliver.
    pub(crate) fn finished(&mut self, q: PeerId, clocks: u64) {
        if let Some(i) = self.position(q) {
            let at = self.delivered[i].max(clocks);
            self.settle(i, at);
        }
    }

    /// The node at position `i` counts as having delivered `delivered` clocks, its next
    /// frame being of that clock.
    fn settle(&mut self, i: usize, delivered: u64) {
        self.fresh[i] = false;
        self.repaired[i] = false;
        self.holds[i] = false;
        self.delivered[i] = delivered;
    }

    /// Whether `q` is awaited and has sent nothing since a repair added it.
    pub(crate) fn is_fresh(&self, q: PeerId) -> bool {
        self.position(q).is_some_and(|i| self.fresh[i])
    }

    /// The awaited nodes.
    pub(crate) fn peers(&self) -> &[PeerId] {
        &self.peers
    }

    /// Records `clock` of the node at position `i` as delivered (its next clock, or a
    /// fresh in-neighbour's first).
    pub(crate) fn deliver_clock(&mut self, i: usize, clock: u64, mean_iter_us: u32) {
        if self.fresh[i] {
            self.fresh[i] = false;
            self.delivered[i] = clock;
        } else if self.repaired[i] && clock > self.delivered[i] {
            // Its one skip (see `repaired`).
            self.repaired[i] = false;
            self.delivered[i] = clock;
        }
        self.deliver(i, mean_iter_us);
    }

    /// Records the next clock of the node at position `i` as delivered.
    pub(crate) fn deliver(&mut self, i: usize, mean_iter_us: u32) {
        self.delivered[i] += 1;
        self.mean_iter_s[i] = f64::from(mean_iter_us) * 1e-6;
    }

    /// Sets what the node at position `i` has delivered (an FMS client's W clock).
    pub(crate) fn set_delivered(&mut self, i: usize, delivered: u64) {
        self.delivered[i] = delivered;
    }

    /// What the node at position `i` has delivered.
    pub(crate) fn delivered(&self, i: usize) -> u64 {
        self.delivered[i]
    }

    /// Whether every awaited node has delivered at least `n` clocks.
    pub(crate) fn all_delivered(&self, n: u64) -> bool {
        self.delivered.iter().all(|&d| d >= n)
    }

    /// Whether every awaited node that has sent since the last repair has delivered at
    /// least `n` clocks (the barrier's view: fresh nodes do not hold it).
    fn all_delivered_but_fresh(&self, n: u64) -> bool {
        self.delivered
            .iter()
            .zip(&self.fresh)
            .all(|(&d, &fresh)| fresh || d >= n)
    }

    /// Every fresh node holds the barrier at what it counts as delivered
    /// ([`holds`](Self::holds)).
    fn hold_fresh(&mut self) {
        for (h, &f) in self.holds.iter_mut().zip(&self.fresh) {
            *h = f;
        }
    }

    /// The status table of a node about to start `clock` (a fresh node counts as ready,
    /// having delivered as much as this node: it does not hold the barrier, unless it
    /// [`holds`](Self::holds) it).
    fn statuses(&self, clock: u64) -> Vec<PeerStatus> {
        self.peers
            .iter()
            .zip(self.delivered.iter().zip(&self.mean_iter_s))
            .zip(self.fresh.iter().zip(&self.holds))
            .map(|((&peer, (&delivered, &mean_iter_s)), (&fresh, &holds))| {
                let lenient = fresh && !holds;
                PeerStatus {
                    peer,
                    delivered: if lenient {
                        delivered.max(clock)
                    } else {
                        delivered
                    },
                    mean_iter_s,
                    ready: lenient || delivered >= clock,
                }
            })
            .collect()
    }

    /// Awaited nodes that have delivered fewer than `need` clocks, with what each has.
    fn short_of(&self, need: u64) -> Vec<(PeerId, u64)> {
        self.peers
            .iter()
            .zip(&self.delivered)
            .filter(|&(_, &d)| d < need)
            .map(|(&p, &d)| (p, d))
            .collect()
    }
}

/// The part of a node that differs between an SFB peer and an FMS client.
pub(crate) trait Side<M: Model> {
    /// The W factors are computed on.
    fn w(&self) -> ArrayView2<'_, f32>;

    /// Brings into W what may be used before computing the worker's next clock: received
    /// updates of clocks before `limit` (`u64::MAX`: all, as at the end of the run).
    fn absorb(
        &mut self,
        worker: &mut Worker<M>,
        limit: u64,
        time: &mut dyn TimeSource,
    ) -> Result<()>;

    /// Sends clock `fb.clock`'s factors where they go (and keeps what the node keeps).
    fn emit(
        &mut self,
        worker: &mut Worker<M>,
        fb: FactorBatch,
        time: &mut dyn TimeSource,
    ) -> Result<()>;

    /// Sends an early part of clock `fb.clock`'s factors ([`Plan::parts`]) and keeps it
    /// for the clock's [`emit`](Self::emit), which completes it. Default: refused (a side
    /// whose clocks are never computed in parts).
    ///
    /// # Errors
    /// [`Error::BadPart`] by default.
    fn emit_part(
        &mut self,
        worker: &mut Worker<M>,
        fb: FactorBatch,
        time: &mut dyn TimeSource,
    ) -> Result<()> {
        let _ = (worker, time);
        Err(Error::BadPart {
            origin: fb.origin,
            clock: fb.clock,
            reason: "this node sends its clocks whole".into(),
        })
    }

    /// After the last clock, before waiting for what is still to come: passes on what
    /// others wait for (a relaying peer's forwards). Default: nothing.
    fn drain(&mut self, worker: &mut Worker<M>) {
        let _ = worker;
    }

    /// Whether everything the side waits for besides the awaited nodes' own clocks has
    /// arrived (a relaying peer's relayed batches). Default: yes.
    fn settled(&self, worker: &Worker<M>) -> bool {
        let _ = worker;
        true
    }

    /// Work of the side's own between clocks (the gossip mode's consensus step, done
    /// while the clock's factors are on the wire); whether there was any (the step then
    /// ends there, its outputs go out). Default: none.
    ///
    /// # Errors
    /// The side's own.
    fn deferred(&mut self, worker: &mut Worker<M>, time: &mut dyn TimeSource) -> Result<bool> {
        let _ = (worker, time);
        Ok(false)
    }

    /// Whether the side holds what a cut (checkpoint) at clock `t` needs besides the
    /// awaited nodes' batches of the clocks `< t`. Default: yes.
    fn cut_ready(&self, t: u64) -> bool {
        let _ = t;
        true
    }

    /// Where a stop ([`crate::stop`]) goes: the nodes the side sends its factors to.
    fn stop_destinations(&self) -> Vec<PeerId>;

    /// What kind of node this side makes.
    fn role(&self) -> Role;

    /// Adds the side's part (W, optimizer state) to the worker's part of a checkpoint.
    fn snapshot(&self, state: &mut NodeState);
}

/// The model, its data, the protocol state shared by every computing node, and its
/// bookkeeping; no W (the [`Side`] owns it).
pub(crate) struct Worker<M: Model> {
    pub(crate) id: PeerId,
    pub(crate) model: M,
    pub(crate) shard: Shard<M::Sample>,
    sv: SvList,
    evaluator: Option<Box<dyn Evaluator>>,
    pub(crate) plan: Plan,
    pub(crate) inbound: Inbound,
    /// The next clock to compute (= clocks completed).
    pub(crate) clock: u64,
    pub(crate) done: bool,
    pub(crate) outputs: VecDeque<Output>,
    pub(crate) last_eval: Option<Evaluation>,
    /// The first held-out objective, and whether [`Event::Diverging`] was emitted.
    first_objective: Option<f64>,
    diverging_reported: bool,
    pub(crate) metrics: PeerMetrics,
    started: Option<Duration>,
    last_step_end: Option<Duration>,
    events: VecDeque<Event>,
    /// The last clock an [`Event::Drift`] was emitted for (one per clock at most).
    drift_reported: u64,
    /// Seconds of the run before this process (a resumed run's).
    wall_offset_s: f64,
    /// The clock of the last state taken or restored.
    last_checkpoint: Option<u64>,
    /// The worker's part of its state at the start of the current clock when that start
    /// was a cut (every update of the clocks before it applied, nothing later) newer than
    /// its last checkpoint: what a node that fails before its next clock saves
    /// ([`Engine::final_state`](crate::Engine::final_state)). Kept only when it
    /// checkpoints.
    pub(crate) cut: Option<NodeState>,
    /// The run was cut short by [`stop_at`](Self::stop_at).
    stopped_early: bool,
    /// Stop rules, the objectives seen and the stop agreed ([`crate::stop`]).
    pub(crate) watch: crate::stop::Watch,
    /// The clock in progress when clocks are computed in parts (between two of its parts).
    in_clock: Option<InClock>,
}

/// A worker's model, data and evaluator, to rebuild it for another protocol.
pub(crate) type WorkerParts<M> = (M, Shard<<M as Model>::Sample>, Option<Box<dyn Evaluator>>);

impl<M: Model> Worker<M> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: PeerId,
        model: M,
        shard: Shard<M::Sample>,
        evaluator: Option<Box<dyn Evaluator>>,
        (j, d): (usize, usize),
        plan: Plan,
        inbound: Inbound,
    ) -> Self {
        let watch = crate::stop::Watch::new(plan.until.clone());
        Self {
            id,
            model,
            shard,
            sv: SvList::new(j, d),
            evaluator,
            plan,
            inbound,
            clock: 0,
            done: false,
            outputs: VecDeque::new(),
            last_eval: None,
            first_objective: None,
            diverging_reported: false,
            metrics: PeerMetrics::default(),
            started: None,
            last_step_end: None,
            events: VecDeque::new(),
            drift_reported: 0,
            wall_offset_s: 0.0,
            last_checkpoint: None,
            cut: None,
            stopped_early: false,
            watch,
            in_clock: None,
        }
    }

    /// A rejoining node starts at `clock`: every awaited node becomes fresh (awaited from its
    /// next frame, of whatever clock).
    pub(crate) fn rejoin_at(&mut self, clock: u64) {
        self.cut = None;
        self.in_clock = None;
        self.clock = clock;
        self.metrics.clocks = clock;
        self.drift_reported = clock;
        let peers: Vec<PeerId> = self.inbound.peers().to_vec();
        for p in peers {
            self.inbound.remove(p);
            self.inbound.add_fresh(p, clock);
        }
        self.inbound.hold_fresh();
    }

    /// Ends the run at clock `t` instead of the last (every node of the run must be told
    /// the same `t`): the worker computes no clock `≥ t`, waits for every awaited node's
    /// clocks `< t`, applies them and is done, with a checkpoint of clock `t` if it
    /// checkpoints. Returns the clock it stops at: `t`, or its own clock if it is already
    /// past `t` (the request then comes too late for it), or the last clock.
    pub(crate) fn stop_at(&mut self, t: u64) -> u64 {
        if self.done {
            return self.clock;
        }
        let t = t.max(self.started_clocks());
        if t < self.plan.clocks {
            self.plan.clocks = t;
            self.stopped_early = true;
        }
        self.plan.clocks
    }

    /// Replaces the shard's samples ([`Shard::reassign`]). A clock in progress computes its
    /// remaining parts on samples drawn from the new set (the indices drawn at its start
    /// are of the old one).
    pub(crate) fn reassign_shard(&mut self, samples: Vec<M::Sample>) {
        self.shard.reassign(samples);
        if let Some(ic) = &mut self.in_clock {
            let n = self.plan.parts;
            let from = ic.done * ic.batch.len() / n;
            let fresh = self.shard.next_batch_indexed(ic.batch.len() - from);
            ic.batch.truncate(from);
            ic.batch.extend(fresh.into_iter().map(|(i, _)| i));
        }
    }

    /// Clocks started: the clocks completed, and a clock in progress (computed in parts,
    /// some of them sent).
    fn started_clocks(&self) -> u64 {
        self.clock + u64::from(self.in_clock.is_some())
    }

    /// Takes a stop ([`crate::stop`]) proposed by this node or received from `from`:
    /// if it is better than the one held, the run ends at its clock, it is recorded in the
    /// metrics and, when `forward`, queued for the node's destinations ahead of its next
    /// batch. Returns whether it was taken.
    ///
    /// # Errors
    /// [`Error::BadClock`] if the stop is at a clock this node has already passed (the
    /// lead was too short for the topology); nothing changes then.
    pub(crate) fn offer_stop(
        &mut self,
        stop: crate::stop::Stop,
        from: PeerId,
        forward: bool,
    ) -> Result<bool> {
        if stop.at < self.started_clocks() && stop.at < self.plan.clocks {
            return Err(Error::BadClock {
                origin: from,
                clock: stop.at,
                reason: "a stop (--until) at a clock this node has already passed: the stop \
                         lead is too short for the topology (was it repaired after a loss?)",
            });
        }
        if !self.watch.offer(stop) {
            return Ok(false);
        }
        if !forward {
            self.watch.to_send = None;
        }
        if !self.done {
            self.stop_at(stop.at);
        }
        self.metrics.stop = Some(stop);
        self.events.push_back(Event::Stop {
            stop,
            rule: self.watch.rule_text(&stop),
        });
        Ok(true)
    }

    /// After an evaluation made after `clock` clocks: records it for the stop rules and,
    /// when one is met (and no stop is held), proposes a stop.
    fn watch_evaluation(&mut self, clock: u64, e: &Evaluation) {
        if let Some(stop) = self.watch.observe(self.id, clock, e) {
            // Its own proposal is after its own clock: never too late.
            let _ = self.offer_stop(stop, self.id, true);
        }
    }

    /// The worker's part of a checkpoint at its current clock (the side adds W and the
    /// optimizer's state).
    pub(crate) fn state(&self, role: Role, now: Duration) -> NodeState {
        let mut awaited = self.inbound.peers.clone();
        awaited.sort_unstable();
        NodeState {
            role,
            id: self.id,
            clock: self.clock,
            w: None,
            optimizer: Vec::new(),
            model: self.model.save_state(),
            compressor: Vec::new(),
            mixer: Vec::new(),
            relay: Vec::new(),
            sampler: Some(self.shard.sampler_state()),
            awaited,
            view: Vec::new(),
            metrics: self.metrics.clone(),
            wall_s: self.wall_offset_s + self.started.map_or(0.0, |s| secs(s, now)),
            first_objective: self.first_objective,
        }
    }

    /// Puts a fresh worker where `state` (checked by the caller) says: clock, counters,
    /// model state, sampler; every awaited node counts as having delivered `delivered`
    /// clocks. On an error nothing the run depends on has changed.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] if the model's state or the sampler does not fit.
    pub(crate) fn restore(&mut self, state: &NodeState, delivered: u64) -> Result<()> {
        if self.has_run() {
            return Err(Error::Checkpoint {
                reason: format!("cannot be restored into {} after it has run", self.id),
            });
        }
        let sampler = state.sampler.ok_or_else(|| Error::Checkpoint {
            reason: "holds no sampler state".into(),
        })?;
        if sampler.len != self.shard.len() || sampler.pos > sampler.len {
            // Refused (with the reason, changing nothing) before the model is touched.
            return self.shard.restore_sampler(sampler);
        }
        self.model
            .restore_state(&state.model)
            .map_err(|e| Error::Checkpoint {
                reason: format!("model state: {e}"),
            })?;
        self.shard.restore_sampler(sampler)?;
        for i in 0..self.inbound.peers.len() {
            self.inbound.set_delivered(i, delivered);
        }
        self.clock = state.clock;
        self.metrics = state.metrics.clone();
        self.wall_offset_s = state.wall_s;
        self.first_objective = state.first_objective;
        self.drift_reported = state.clock;
        self.last_checkpoint = Some(state.clock);
        Ok(())
    }

    /// Whether the node takes its state when it starts clock `t`.
    fn checkpoint_due(&self, t: u64) -> bool {
        let every = self.plan.checkpoint_every;
        every > 0
            && t > 0
            && t.is_multiple_of(every)
            && t < self.plan.clocks
            && self.last_checkpoint != Some(t)
    }

    /// Stops waiting for `peer` (lost) and drops what was queued for it; records the loss
    /// (peer, the clock this node was at) in the metrics. Whether `peer` was a neighbour
    /// (awaited, or in `out`).
    pub(crate) fn forget(&mut self, peer: PeerId, out: &mut Vec<PeerId>) -> bool {
        let awaited = self.inbound.remove(peer);
        let len = out.len();
        out.retain(|&p| p != peer);
        let sent_to = out.len() != len;
        self.outputs.retain(|o| o.to != peer);
        self.record_loss(peer);
        awaited || sent_to
    }

    /// Records `peer`'s loss (peer, the clock this node was at) once.
    pub(crate) fn record_loss(&mut self, peer: PeerId) {
        if !self.metrics.lost_peers.iter().any(|&(p, _)| p == peer.0) {
            self.metrics.lost_peers.push((peer.0, self.clock));
        }
    }

    /// Whether awaited node `peer` has delivered every clock of the run (its stream may then
    /// end without it being lost).
    pub(crate) fn finished_by(&self, peer: PeerId) -> bool {
        self.inbound
            .delivered_by(peer)
            .is_some_and(|d| d >= self.plan.clocks)
    }

    /// Whether the worker has stepped (a fresh worker can be rebuilt for another protocol).
    pub(crate) fn has_run(&self) -> bool {
        self.clock > 0 || self.started.is_some()
    }

    pub(crate) fn into_parts(self) -> WorkerParts<M> {
        (self.model, self.shard, self.evaluator)
    }

    pub(crate) fn set_evaluator(&mut self, evaluator: Box<dyn Evaluator>) {
        self.evaluator = Some(evaluator);
    }

    /// One step; see the [module docs](self).
    ///
    /// # Errors
    /// [`Error::Model`] if `compute_sv` fails or its factors are invalid; the side's errors.
    pub(crate) fn step<S: Side<M>>(
        &mut self,
        side: &mut S,
        time: &mut dyn TimeSource,
    ) -> Result<Progress> {
        if self.done {
            return Ok(Progress::Done);
        }
        if side.deferred(self, time)? {
            // Its own step: not waiting, and its outputs go out before the next clock's.
            self.last_step_end = Some(time.now());
            return Ok(Progress::Stepped);
        }
        if self.in_clock.is_some() {
            return self.next_part(side, time);
        }
        let now = time.now();
        let started = *self.started.get_or_insert(now);
        let since = self.last_step_end.unwrap_or(started);
        if self.clock >= self.plan.clocks {
            side.drain(self);
            // A fresh in-neighbour that has sent nothing since the repair may have sent its
            // last clock before it (it has nothing more for this node): not awaited.
            if !self.inbound.all_delivered_but_fresh(self.plan.clocks) || !side.settled(self) {
                return Ok(Progress::Blocked);
            }
            self.metrics.flush_s += secs(since, now);
            // Everything of the run's clocks (a node past a requested stop keeps its later
            // clocks out).
            side.absorb(self, self.plan.clocks, time)?;
            if self.stopped_early && self.plan.checkpoint_every > 0 {
                // Stopped at clock t by request: W holds exactly the clocks < t of every
                // awaited node, the cut of a checkpoint at t.
                let mut state = self.state(side.role(), time.now());
                side.snapshot(&mut state);
                self.last_checkpoint = Some(self.clock);
                self.events.push_back(Event::Checkpoint(Box::new(state)));
            }
            self.done = true;
            self.last_step_end = Some(time.now());
            return Ok(Progress::Done);
        }
        if self.clock == 0 && self.first_objective.is_none() && self.plan.eval_every > 0 {
            // The untrained objective: the baseline divergence is judged against.
            if let Some(e) = self.evaluate(side.w(), time) {
                self.watch_evaluation(0, &e);
            }
        }
        let checkpoint = self.checkpoint_due(self.clock);
        if checkpoint && !(self.inbound.all_delivered(self.clock) && side.cut_ready(self.clock)) {
            // The cut of a checkpoint: every update of clocks < t applied (module docs of
            // `checkpoint`).
            return Ok(Progress::Blocked);
        }
        if !self.may_start() {
            if !self.within_drift() && self.drift_reported < self.clock {
                self.drift_reported = self.clock;
                self.metrics.drift_waits += 1;
                let behind = self.inbound.short_of(self.drift_need());
                self.events.push_back(Event::Drift {
                    clock: self.clock,
                    bound: self.plan.max_drift,
                    behind,
                });
            }
            return Ok(Progress::Blocked);
        }
        self.metrics.wait_s += secs(since, now);
        let limit = if self.plan.consistency.applies_future() && !checkpoint {
            u64::MAX
        } else {
            self.clock
        };
        side.absorb(self, limit, time)?;
        let t = self.clock;
        // W changes only here: the state of a cut stays valid until the next clock starts.
        // A checkpoint clock is one too (a failure during it saves it again: the same
        // state, and a line that says where the node can resume).
        self.cut = (self.plan.checkpoint_every > 0
            && limit == t
            && t > 0
            && (checkpoint || self.inbound.all_delivered(t)))
        .then(|| self.state(side.role(), time.now()));
        if checkpoint {
            let mut state = self.cut.clone().expect("a checkpoint clock is a cut");
            side.snapshot(&mut state);
            self.last_checkpoint = Some(t);
            self.events.push_back(Event::Checkpoint(Box::new(state)));
        }
        if self.plan.parts > 1 {
            // The clock's mini-batch, drawn now, computed and sent a part a step.
            let batch = self.draw();
            let scale = self.model.scale(t, self.plan.lr, batch.len());
            self.in_clock = Some(InClock {
                batch,
                done: 0,
                scale,
                limit,
            });
            self.send_stop(side);
            return self.next_part(side, time);
        }
        let fb = self.compute(side.w(), t, time)?;
        self.send_stop(side);
        side.emit(self, fb, time)?;
        self.clock = t + 1;
        self.end_step(side.w(), time);
        Ok(Progress::Stepped)
    }

    /// Queues a stop this node has to pass on, ahead of its next factors (see
    /// `crate::stop`: a node learns of a stop before the clock it bounds).
    fn send_stop<S: Side<M>>(&mut self, side: &S) {
        if let Some(stop) = self.watch.to_send.take() {
            // Ahead of the batch: a node learns of a stop before the clock it bounds (see
            // `crate::stop`).
            let msg = Message::Stop {
                origin: self.id,
                stop,
            };
            let len = crate::wire::encoded_len(&msg) as u64;
            for to in side.stop_destinations() {
                self.metrics.bytes_sent += len;
                self.outputs.push_back(Output {
                    to,
                    msg: msg.clone(),
                });
            }
        }
    }

    /// Computes and sends the next part of the clock in progress
    /// ([`Plan::parts`]); the last part completes the clock. Between parts, the side
    /// applies what has arrived under the clock's limit, unless the node checkpoints (a
    /// cut's W is the clock's start's).
    fn next_part<S: Side<M>>(
        &mut self,
        side: &mut S,
        time: &mut dyn TimeSource,
    ) -> Result<Progress> {
        let Some(ic) = self.in_clock.take() else {
            return Ok(Progress::Stepped);
        };
        let t = self.clock;
        let now = time.now();
        if ic.done > 0 {
            // Between parts: the links' time (a full queue held the node back).
            self.metrics.wait_s += secs(self.last_step_end.unwrap_or(now), now);
            if self.plan.checkpoint_every == 0 {
                side.absorb(self, ic.limit, time)?;
            }
        }
        let n = self.plan.parts;
        let k = ic.batch.len();
        let (a, b) = (ic.done * k / n, (ic.done + 1) * k / n);
        let fb = self.compute_part(side.w(), t, &ic.batch[a..b], Some(ic.scale), time)?;
        if ic.done + 1 < n {
            side.emit_part(self, fb, time)?;
            self.in_clock = Some(InClock {
                done: ic.done + 1,
                ..ic
            });
            self.last_step_end = Some(time.now());
            return Ok(Progress::Stepped);
        }
        side.emit(self, fb, time)?;
        self.clock = t + 1;
        self.end_step(side.w(), time);
        Ok(Progress::Stepped)
    }

    /// Whether the consistency model lets the worker start its next clock, and (under
    /// the models without a staleness bound) no awaited node is more than
    /// [`Plan::max_drift`] clocks behind.
    fn may_start(&self) -> bool {
        let peers = self.inbound.statuses(self.clock);
        self.plan.consistency.may_start(&StatusView {
            me: self.id,
            clock: self.clock,
            peers: &peers,
        }) && self.within_drift()
    }

    /// The clocks every awaited node must have delivered before the next clock starts
    /// under flow control: `clock − max_drift` for async and custom barriers (the bounded
    /// models already wait for more).
    fn drift_need(&self) -> u64 {
        match self.plan.consistency.staleness_bound() {
            Some(_) => 0,
            None => self.clock.saturating_sub(self.plan.max_drift),
        }
    }

    fn within_drift(&self) -> bool {
        self.inbound.all_delivered_but_fresh(self.drift_need())
    }

    /// Awaited nodes the worker is blocked on, with the clocks each has delivered; empty
    /// when it is not blocked.
    pub(crate) fn waiting_on(&self) -> Vec<(PeerId, u64)> {
        if self.done {
            return Vec::new();
        }
        if self.clock >= self.plan.clocks {
            return self.inbound.short_of(self.plan.clocks);
        }
        if self.checkpoint_due(self.clock) && !self.inbound.all_delivered(self.clock) {
            return self.inbound.short_of(self.clock);
        }
        if self.may_start() {
            return Vec::new();
        }
        let need = match self.plan.consistency.staleness_bound() {
            Some(s) => self.clock.saturating_sub(s),
            // Held back by flow control: name whoever is too far behind.
            None if !self.within_drift() => self.drift_need(),
            // A custom barrier: name everyone not ready for this clock.
            None => self.clock,
        };
        self.inbound.short_of(need)
    }

    /// Computes clock `clock`'s factors on `w`: draws a mini-batch and computes it whole
    /// ([`compute_part`](Self::compute_part) with the model's scale for the pairs it wrote).
    fn compute(
        &mut self,
        w: ArrayView2<'_, f32>,
        clock: u64,
        time: &mut dyn TimeSource,
    ) -> Result<FactorBatch> {
        let batch = self.draw();
        self.compute_part(w, clock, &batch, None, time)
    }

    /// The next mini-batch's shard indices.
    fn draw(&mut self) -> Vec<usize> {
        self.shard
            .next_batch_indexed(self.plan.batch_size)
            .into_iter()
            .map(|(i, _)| i)
            .collect()
    }

    /// Computes (part of) clock `clock` on `w`: `compute_sv` on the samples at `indices`
    /// of the shard, committed with `scale` (a part's: the whole mini-batch's; `None`: the
    /// model's for the pairs written) and validated (timed as `compute_s`; counts
    /// `samples`). A part must hold one pair per sample.
    fn compute_part(
        &mut self,
        w: ArrayView2<'_, f32>,
        clock: u64,
        indices: &[usize],
        scale: Option<f32>,
        time: &mut dyn TimeSource,
    ) -> Result<FactorBatch> {
        let t0 = time.now();
        let samples = self.shard.samples();
        let batch: Vec<(usize, &M::Sample)> = indices.iter().map(|&i| (i, &samples[i])).collect();
        self.sv.clear();
        let (j, d) = (self.sv.j(), self.sv.d());
        if self.plan.timing_only {
            let samples: Vec<&M::Sample> = batch.iter().map(|&(_, s)| s).collect();
            self.model.timing_sv((j, d), &samples, &mut self.sv)
        } else {
            self.model.compute_sv_indexed(w, &batch, &mut self.sv)
        }
        .map_err(|source| Error::Model { clock, source })?;
        let pairs = self.sv.len();
        if scale.is_some() && pairs != batch.len() {
            return Err(Error::Model {
                clock,
                source: ModelError::msg(format!(
                    "the model says its batches are separable (one pair per sample), but it \
                     wrote {pairs} pairs for {} samples: computing a clock in parts \
                     (--send-parts) needs one pair per sample",
                    batch.len()
                )),
            });
        }
        let scale = scale.unwrap_or_else(|| self.model.scale(clock, self.plan.lr, pairs));
        let fb = self.sv.commit(self.id, clock, scale);
        check_factors(&self.plan, &fb, clock, j, d)?;
        let t1 = time.after(Work::Compute {
            peer: self.id,
            clock,
            samples: batch.len(),
            started: t0,
        });
        self.metrics.compute_s += secs(t0, t1);
        self.metrics.samples += batch.len() as u64;
        Ok(fb)
    }

    /// Mean microseconds of compute and apply per step so far (what a node reports to
    /// others for custom barriers), counting the step being completed.
    pub(crate) fn mean_iter_us(&self) -> u32 {
        ((self.metrics.compute_s + self.metrics.apply_s) / (self.clock + 1) as f64 * 1e6)
            .min(f64::from(u32::MAX)) as u32
    }

    /// After a step that brought the node to `self.clock` clocks: evaluates on `w` if due
    /// (every `eval_every` clocks, not at the last, which `finish` evaluates) and emits the
    /// clock's record.
    fn end_step(&mut self, w: ArrayView2<'_, f32>, time: &mut dyn TimeSource) {
        let clock = self.clock;
        self.metrics.clocks = clock;
        let every = self.plan.eval_every;
        let evaluation = if every > 0 && clock.is_multiple_of(every) && clock < self.plan.clocks {
            self.evaluate(w, time)
        } else {
            None
        };
        if let Some(e) = &evaluation {
            self.watch_evaluation(clock, e);
        }
        let end = time.now();
        self.last_step_end = Some(end);
        let wall = self.wall_offset_s + secs(self.started.unwrap_or(end), end);
        self.push_record(clock, wall, evaluation);
    }

    /// Runs the evaluator on `w` (timed as `eval_s`).
    pub(crate) fn evaluate(
        &mut self,
        w: ArrayView2<'_, f32>,
        time: &mut dyn TimeSource,
    ) -> Option<Evaluation> {
        if self.plan.timing_only {
            return None;
        }
        let ev = self.evaluator.as_mut()?;
        let t0 = time.now();
        let e = ev.evaluate(w);
        self.metrics.eval_s += secs(t0, time.after(Work::Evaluate));
        self.check_divergence(e.objective);
        self.last_eval = Some(e.clone());
        Some(e)
    }

    /// Evaluates the final `w` and emits the final record.
    pub(crate) fn finish(
        &mut self,
        w: ArrayView2<'_, f32>,
        time: &mut dyn TimeSource,
    ) -> Option<Evaluation> {
        let e = self.evaluate(w, time);
        let now = time.now();
        let wall = self.wall_offset_s + secs(self.started.unwrap_or(now), now);
        self.push_record(self.clock, wall, e.clone());
        e
    }

    /// Emits [`Event::Diverging`] (once) when the held-out objective is not finite or has
    /// grown past [`DIVERGENCE_FACTOR`] times its first value.
    fn check_divergence(&mut self, objective: f64) {
        let first = *self.first_objective.get_or_insert(objective);
        let diverging = !objective.is_finite()
            || (first.is_finite() && objective > DIVERGENCE_FACTOR * first.abs().max(1e-12));
        if diverging && !self.diverging_reported {
            self.diverging_reported = true;
            self.events.push_back(Event::Diverging {
                clock: self.clock,
                first,
                now: objective,
            });
        }
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
            evaluation.as_ref(),
        )));
    }
}

/// How many times its first value the held-out objective may grow before the node reports
/// [`Event::Diverging`].
pub const DIVERGENCE_FACTOR: f64 = 10.0;

/// Validates a committed batch of a node's model, naming divergence as the likely cause
/// of non-finite values.
fn check_factors(plan: &Plan, fb: &FactorBatch, clock: u64, j: usize, d: usize) -> Result<()> {
    fb.validate(j, d).map_err(|e| Error::Model {
        clock,
        source: match e {
            // The commonest cause by far: a step too large for the data.
            Error::NonFinite { .. } => ModelError::msg(format!(
                "{e}: the model diverged; its step was {} at lr {}: try a smaller step \
                 (--lr, Builder::lr) or the adaptive one (--optimizer factored, \
                 Builder::optimizer)",
                plan.optimizer, plan.lr
            )),
            other => other.into(),
        },
    })
}

/// A [`ClockRecord`] of node `id` from its counters.
pub(crate) fn record(
    id: PeerId,
    m: &PeerMetrics,
    clock: u64,
    wall_s: f64,
    evaluation: Option<&Evaluation>,
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
        send_budget: m.send_budget,
        link_bytes_per_s: m.link_bytes_per_s,
    }
}
