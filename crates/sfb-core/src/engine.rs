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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ndarray::{Array2, ArrayView2};

use crate::checkpoint::{NodeState, Role};
use crate::error::ConfigError;
use crate::metrics::{ClockRecord, PeerMetrics};
use crate::time::{TimeSource, Work, secs};
use crate::wire::{self, Message};
use crate::worker::{Inbound, Plan, Side, Worker, WorkerParts};
use crate::{
    Consistency, Error, Evaluation, Evaluator, FactorBatch, Model, Optimizer, PeerId, Replica,
    Result, Shard, ShardSource, Stepper,
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
    /// Low-rank re-compression of the peer's own batches before they are applied and
    /// sent ([`crate::compress`]): at most this many pairs per batch, the rest kept back
    /// and sent later (error feedback). Default: none.
    pub compress: Option<usize>,
    /// Prioritization under a send budget ([`crate::prioritize`]): at most the budget's
    /// pairs per clock, in the policy's order, the rest carried over. Not with
    /// [`compress`](Self::compress). Default: none.
    pub prioritize: Option<crate::Prioritize>,
    /// Flow control of the models without a staleness bound (async and custom barriers):
    /// the peer does not start clock `t` while an in-neighbour has delivered fewer than
    /// `t − max_drift` clocks. This bounds what can be in flight on every edge (and so a
    /// peer's memory) to about `max_drift` batches per in-neighbour, whatever the speed
    /// difference: a fast peer slows to stay within `max_drift` clocks of the slowest
    /// peer upstream of it, as SSP's bound does. BSP and SSP ignore it. Default:
    /// [`DEFAULT_MAX_DRIFT`].
    pub max_drift: u64,
    /// How the updates this peer applies become steps on its replica (method, schedule);
    /// every peer of a run must use the same. Default: plain SGD.
    pub optimizer: Optimizer,
    /// What the peer does when a neighbour is lost ([`Engine::peer_lost`]). Default:
    /// [`PeerLoss::Fail`].
    pub on_peer_loss: PeerLoss,
    /// With [`PeerLoss::Continue`]: train on only while the peers this one has not lost
    /// (itself included) are a strict majority of [`peers`](Self::peers), and stop with
    /// [`Error::Minority`] otherwise, so that the two sides of a partition cannot both go
    /// on and both report success (at most one side holds a majority). `false` lets any
    /// side train on alone (availability over consistency). Default: `true`.
    pub quorum: bool,
    /// Take the peer's state ([`Event::Checkpoint`]) every this many clocks; 0: never.
    /// Those clocks are barriers (see [`checkpoint`](crate::checkpoint)). Default: 0.
    pub checkpoint_every: u64,
    /// Relay ([`crate::relay`]): forward other peers' batches along their shortest-path
    /// trees in this topology, so every replica applies every batch. The topology's
    /// out-neighbours of this peer must be [`out_neighbors`](Self::out_neighbors). Not
    /// with [`PeerLoss::Continue`] or checkpoints. Default: none.
    pub relay: Option<Arc<crate::Routes>>,
    /// With [`relay`](Self::relay): re-compress every batch this peer forwards to at most
    /// this many pairs ([`crate::compress`], without error feedback: what is cut is the
    /// origin's, and lost), so peers beyond an origin's out-neighbours apply an
    /// approximation of its updates (gossip with compression). The peer itself applies
    /// the batches as received. Default: none.
    pub relay_compress: Option<usize>,
    /// Aggregated apply ([`crate::aggregate`]): apply at most this many pairs per clock
    /// whenever re-compressing what is applied is cheaper than applying it, the rest kept
    /// back for the next clock. Plain SGD and the factored optimizer only; no checkpoints.
    /// Default: none.
    pub aggregate: Option<usize>,
    /// Partial broadcast that converges ([`crate::gossip`]): the peer's batches and its
    /// in-neighbours' are applied with the configured weights and the replicas are pulled
    /// together by compressed consensus messages. `None`: the paper's mode (each replica
    /// applies its own and its in-neighbours' batches, nothing more), or full broadcast.
    /// Not with relay or rejoin. Default: none.
    pub gossip: Option<crate::gossip::Config>,
    /// Partial broadcast by an aggregation tree ([`crate::tree`]): every replica applies
    /// the same compressed sum of every peer's batch. The out- and in-neighbours must be
    /// the tree's ([`crate::tree::Config::neighbors`]); with [`PeerLoss::Continue`] a
    /// loss lays it out again over the survivors ([`crate::tree`]'s peer loss). Not with
    /// relay, gossip, `compress`, `prioritize`, `aggregate` or SAGA. Default: none.
    pub tree: Option<crate::tree::Config>,
    /// Timing only (`sfb sim --timing-only`): the node runs its whole protocol (clocks,
    /// barriers, sends, relays, records) but does no arithmetic: `compute_sv` becomes
    /// [`Model::timing_sv`] (factors of the right shapes and sizes, zeros), applies touch
    /// nothing, there is no evaluation, and the replica holds W's shape only (no J × D
    /// storage), so a simulator can run more nodes than real replicas would fit in
    /// memory. What a run then reports is its traffic and, under a cost model, its
    /// times; not learning. Not with `compress`, `prioritize`, `aggregate` or checkpoints
    /// (what they send or keep depends on the values). Default: off.
    pub timing_only: bool,
    /// Stop rules ([`crate::stop`]): end the run, at the same clock on every peer, once a
    /// peer's evaluation meets one. Every peer of a run must have the same. Default: none
    /// (the run ends at [`clocks`](Self::clocks)).
    pub until: Option<crate::stop::Until>,
    /// The step bound ([`crate::bound`]): a batch (direct or relayed) whose step size is
    /// more than this many times the largest accepted in the last clocks is refused, and
    /// its sender shut out. `None`: no bound (the ratios are still measured). Default:
    /// [`crate::bound::DEFAULT_STEP_BOUND`].
    pub step_bound: Option<f32>,
    /// Compute each clock's mini-batch in this many parts and send each part as soon as
    /// it is computed ([`Message::Part`](wire::Message::Part)), so the links carry part
    /// `i` while part `i + 1` is computed (Bösen's communication during the clock). Every
    /// replica still takes the clock as one batch of all its parts' pairs, in order, so
    /// the replicas stay alike and the run is that of one part: bitwise, when the model
    /// computes a sample's pair the same way whatever the part's size (a matrix product
    /// over a part of one or two samples may round otherwise). Between parts
    /// a peer also applies what has arrived that it may already apply (under SSP and
    /// async: late batches of earlier clocks), unless it checkpoints. Needs a model whose
    /// batches are separable ([`Model::separable`]); not with relay, the gossip or tree
    /// modes, `compress` or `aggregate`. With `prioritize` the clock's budget (at most K
    /// pairs) is shared out evenly over its parts, and each part sends its share of its
    /// own and the backlog's pairs in the policy's order as soon as it is computed
    /// (Bösen's managed communication: within a budget, during the clock, most important
    /// first). Every peer of a run must use the same. Default: 1 (the whole clock at its
    /// end).
    pub send_parts: usize,
}

/// Default [`Config::max_drift`]: 64 clocks, room for a straggler several times slower than
/// the rest to fall well behind before anyone waits, while a peer holds at most 64
/// batches per in-neighbour.
pub const DEFAULT_MAX_DRIFT: u64 = 64;

impl Config {
    /// Peer `id` of `peers` with full broadcast (every other peer in and out) and defaults.
    pub fn full_broadcast(id: PeerId, peers: usize) -> Self {
        let others: Vec<PeerId> = (0..peers as u32).map(PeerId).filter(|&p| p != id).collect();
        Self::new(id, peers, others.clone(), others)
    }

    /// Peer `id` of `peers` sending to `out_neighbors` and waiting for `in_neighbors`, with
    /// the defaults (O(Q) to build, whatever `peers` is).
    pub fn new(
        id: PeerId,
        peers: usize,
        out_neighbors: Vec<PeerId>,
        in_neighbors: Vec<PeerId>,
    ) -> Self {
        Self {
            id,
            peers,
            out_neighbors,
            in_neighbors,
            consistency: Consistency::Bsp,
            clocks: 100,
            batch_size: 16,
            lr: 0.1,
            eval_every: 10,
            wire: wire::Dtype::F32,
            compress: None,
            prioritize: None,
            max_drift: DEFAULT_MAX_DRIFT,
            optimizer: Optimizer::default(),
            on_peer_loss: PeerLoss::Fail,
            quorum: true,
            checkpoint_every: 0,
            relay: None,
            relay_compress: None,
            aggregate: None,
            gossip: None,
            tree: None,
            timing_only: false,
            until: None,
            step_bound: Some(crate::bound::DEFAULT_STEP_BOUND),
            send_parts: 1,
        }
    }

    /// Checks the configuration before anything runs.
    ///
    /// # Errors
    /// [`Error::Config`] naming the problem.
    pub fn validate(&self) -> Result<()> {
        let peers = self.peers;
        if peers == 0 {
            return Err(ConfigError::NoPeers.into());
        }
        if self.id.index() >= peers {
            return Err(ConfigError::IdOutOfRange { id: self.id, peers }.into());
        }
        for (direction, list) in [("out", &self.out_neighbors), ("in", &self.in_neighbors)] {
            let mut sorted: Vec<PeerId> = list.clone();
            sorted.sort_unstable();
            for (i, &peer) in sorted.iter().enumerate() {
                if peer.index() >= peers {
                    return Err(ConfigError::NeighbourOutOfRange {
                        direction,
                        peer,
                        peers,
                    }
                    .into());
                }
                if peer == self.id {
                    return Err(ConfigError::SelfNeighbour { direction, peer }.into());
                }
                if i > 0 && sorted[i - 1] == peer {
                    return Err(ConfigError::DuplicateNeighbour { direction, peer }.into());
                }
            }
        }
        check_step(self.batch_size, self.lr)?;
        if let Some(routes) = &self.relay {
            self.check_relay(routes)?;
        }
        match (self.relay_compress, &self.relay) {
            (Some(0), _) => {
                return Err(ConfigError::Relay(
                    "re-compressing forwarded batches to rank 0 would forward nothing".into(),
                )
                .into());
            }
            (Some(_), None) => {
                return Err(ConfigError::Relay(
                    "re-compressing forwarded batches needs relay (nothing is forwarded)".into(),
                )
                .into());
            }
            _ => {}
        }
        if let Some(g) = &self.gossip {
            let bad = |why: String| -> Result<()> { Err(ConfigError::Sending(why).into()) };
            if let Err(why) = g.check(peers) {
                return bad(why);
            }
            if self.relay.is_some() {
                return bad(
                    "--relay carries every batch to every replica; the gossip mode mixes \
                     replicas instead: pick one (--partial gossip|paper without --relay)"
                        .into(),
                );
            }
        }
        if let Some(t) = &self.tree {
            self.check_tree(t)?;
        }
        if let Some(rank) = self.aggregate {
            let bad = |why: String| -> Result<()> { Err(ConfigError::Sending(why).into()) };
            if rank == 0 {
                return bad("--aggregate rank:0 would apply nothing".into());
            }
            if !matches!(
                self.optimizer.method,
                crate::Method::Sgd | crate::Method::Factored
            ) {
                return bad(format!(
                    "--aggregate re-compresses the pairs the SGD and factored steps apply; \
                     {} applies dense updates",
                    self.optimizer.method
                ));
            }
            if self.checkpoint_every > 0 {
                return bad(
                    "--aggregate keeps a residual that checkpoints do not hold yet: no \
                     checkpoints with it"
                        .into(),
                );
            }
        }
        if self.timing_only {
            let cut = [
                (self.compress.is_some(), "--compress"),
                (self.prioritize.is_some(), "--prioritize"),
                (self.aggregate.is_some(), "--aggregate"),
                (self.checkpoint_every > 0, "checkpoints"),
            ];
            if let Some((_, what)) = cut.iter().find(|c| c.0) {
                return Err(ConfigError::Sending(format!(
                    "timing-only runs do no arithmetic, and what {what} sends or keeps \
                     depends on the values: run it with real arithmetic"
                ))
                .into());
            }
        }
        self.check_parts()?;
        if let Some(p) = &self.prioritize {
            if self.compress.is_some() {
                return Err(ConfigError::Sending(
                    "--prioritize and --compress are two ways to send less: pick one (a \
                     compressed batch is already ordered by importance, its singular values)"
                        .into(),
                )
                .into());
            }
            check_prioritize(p)?;
        }
        self.optimizer.validate(self.lr)
    }

    /// [`validate`](Self::validate)'s checks of [`send_parts`](Self::send_parts).
    fn check_parts(&self) -> Result<()> {
        let n = self.send_parts;
        let bad = |why: String| -> Result<()> { Err(ConfigError::Sending(why).into()) };
        if n == 0 {
            return bad("--send-parts 0: a clock needs at least one part".into());
        }
        if n > self.batch_size {
            return bad(format!(
                "--send-parts {n} is more parts than the mini-batch's {} samples",
                self.batch_size
            ));
        }
        if n == 1 {
            return Ok(());
        }
        let others = [
            (self.relay.is_some(), "--relay"),
            (self.gossip.is_some(), "the gossip mode (--partial gossip)"),
            (self.tree.is_some(), "the tree mode (--partial tree)"),
            (self.compress.is_some(), "--compress"),
            (self.aggregate.is_some(), "--aggregate"),
        ];
        match others.iter().find(|c| c.0) {
            Some((_, what)) => bad(format!(
                "--send-parts {n} sends a clock's pairs as they are computed; {what} decides \
                 what a clock sends from all of its pairs: use one part with it"
            )),
            None => Ok(()),
        }
    }

    /// [`validate`](Self::validate)'s checks of [`tree`](Self::tree).
    fn check_tree(&self, t: &crate::tree::Config) -> Result<()> {
        let bad = |why: String| -> Result<()> { Err(ConfigError::Sending(why).into()) };
        if let Err(why) = t.check(self.peers) {
            return bad(why);
        }
        let others = [
            (self.relay.is_some(), "--relay"),
            (self.gossip.is_some(), "the gossip mode"),
            (
                self.compress.is_some(),
                "--compress (the tree compresses already)",
            ),
            (self.prioritize.is_some(), "--prioritize"),
            (self.aggregate.is_some(), "--aggregate"),
            (
                self.optimizer.method == crate::Method::Saga,
                "SAGA (its table needs every origin's own factors)",
            ),
        ];
        if let Some((_, what)) = others.iter().find(|o| o.0) {
            return bad(format!(
                "--partial tree does not work with {what}: use --partial gossip for it"
            ));
        }
        let mut want = t.neighbors(self.id, self.peers);
        want.sort_unstable();
        for (direction, list) in [("out", &self.out_neighbors), ("in", &self.in_neighbors)] {
            let mut got = list.clone();
            got.sort_unstable();
            if got != want {
                return bad(format!(
                    "--partial tree: {}'s {direction}-neighbours are {got:?}, but its \
                     neighbours in the tree of fan-out {} are {want:?}",
                    self.id, t.fanout
                ));
            }
        }
        Ok(())
    }

    /// [`validate`](Self::validate)'s checks of [`relay`](Self::relay).
    fn check_relay(&self, routes: &crate::Routes) -> Result<()> {
        let bad = |why: String| -> Result<()> { Err(ConfigError::Relay(why).into()) };
        if routes.peers() != self.peers {
            return bad(format!(
                "the relay routes are of a topology of {} peers, the run has {}",
                routes.peers(),
                self.peers
            ));
        }
        let mut out = self.out_neighbors.clone();
        out.sort_unstable();
        if out != routes.out_neighbors(self.id) {
            return bad(format!(
                "{}'s out-neighbours {:?} are not those of the relay topology {:?}",
                self.id,
                out,
                routes.out_neighbors(self.id)
            ));
        }
        let mut inn = self.in_neighbors.clone();
        inn.sort_unstable();
        let expected: Vec<PeerId> = (0..self.peers as u32)
            .map(PeerId)
            .filter(|&p| routes.out_neighbors(p).contains(&self.id))
            .collect();
        if inn != expected {
            return bad(format!(
                "{}'s in-neighbours {inn:?} are not those of the relay topology {expected:?}",
                self.id
            ));
        }
        Ok(())
    }

    /// What the worker runs.
    pub(crate) fn plan(&self) -> Plan {
        Plan {
            consistency: self.consistency.clone(),
            clocks: self.clocks,
            batch_size: self.batch_size,
            lr: self.lr,
            optimizer: self.optimizer.to_string(),
            eval_every: self.eval_every,
            max_drift: self.max_drift,
            checkpoint_every: self.checkpoint_every,
            timing_only: self.timing_only,
            until: self.until.clone(),
            parts: self.send_parts,
        }
    }
}

/// What a peer does when a neighbour is lost (its process died, its machine is gone, or it
/// left).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PeerLoss {
    /// Stop with [`Error::PeerLost`] (a run that must not silently change: BSP's default).
    #[default]
    Fail,
    /// Stop waiting for it and stop sending to it; train on with the others (the default
    /// of SSP and async). Updates already received from it stay applied.
    Continue,
}

impl std::fmt::Display for PeerLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PeerLoss::Fail => "fail",
            PeerLoss::Continue => "continue",
        })
    }
}

impl std::str::FromStr for PeerLoss {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "fail" => Ok(PeerLoss::Fail),
            "continue" => Ok(PeerLoss::Continue),
            other => Err(format!(
                "unknown peer-loss policy {other:?}: expected fail or continue"
            )),
        }
    }
}

/// The checks an SFB peer and an FMS configuration share.
pub(crate) fn check_step(batch_size: usize, lr: f32) -> Result<()> {
    if batch_size == 0 {
        return Err(ConfigError::ZeroBatch.into());
    }
    if !lr.is_finite() {
        return Err(ConfigError::NonFiniteLr { lr }.into());
    }
    Ok(())
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
    /// The node could not start `clock` because awaited nodes are more than `bound`
    /// clocks behind ([`Config::max_drift`]); emitted once per clock it is held at.
    Drift {
        /// The clock the node waits to start.
        clock: u64,
        /// The drift bound.
        bound: u64,
        /// The awaited nodes too far behind, with the clocks each has delivered.
        behind: Vec<(PeerId, u64)>,
    },
    /// The node's state at a clock boundary, to be written where a resumed run will find
    /// it (see [`checkpoint`](crate::checkpoint)). Emitted every
    /// [`Config::checkpoint_every`] clocks.
    Checkpoint(Box<NodeState>),
    /// The held-out objective is not finite, or has grown past
    /// [`DIVERGENCE_FACTOR`](crate::DIVERGENCE_FACTOR) times its first value: training is
    /// diverging (usually a step size too large). Emitted once per node.
    Diverging {
        /// Clocks completed when it was seen.
        clock: u64,
        /// The first objective evaluated.
        first: f64,
        /// The objective now.
        now: f64,
    },
    /// The node took a stop ([`crate::stop`]): its own proposal, or a better one it
    /// received. The run ends at `stop.at`.
    Stop {
        /// The stop.
        stop: crate::stop::Stop,
        /// Its rule, as written (`gap<=1e-6`).
        rule: String,
    },
}

/// The SFB side of a peer: its replica, the received batches not yet applied, and its
/// out-neighbours.
struct PeerSide {
    replica: Replica,
    stepper: Stepper,
    /// Received batches not yet applied, by `(due, origin, clock)`: applied before clock
    /// `due + 1` (`due` is the batch's clock, or for a relayed batch the clock of the
    /// transmission that carried it), with whether it was forwarded (relay).
    pending: BTreeMap<(u64, PeerId, u64), (Arc<FactorBatch>, bool)>,
    out_neighbors: Vec<PeerId>,
    wire: wire::Dtype,
    compressor: Option<crate::compress::Compressor>,
    /// What sends the peer's pairs first under a budget, if anything.
    prioritizer: Option<crate::Prioritizer>,
    /// The peer's compute and apply seconds when it last sent a clock (a measured
    /// budget's clock work is the difference).
    work_seen: f64,
    /// Relay trees and what this peer expects of them, if it relays.
    relay: Option<Relay>,
    /// The bound on the steps taken from others ([`crate::bound`]).
    steps: crate::bound::StepBound,
    /// The gossip mode's consensus state ([`crate::gossip`]), if it gossips (and computes).
    mixer: Option<crate::gossip::Mixer>,
    /// The gossip mode's pairs per consensus message (0: no gossip).
    gossip_rank: usize,
    /// Timing only, gossip mode: consensus pairs received and not yet charged as folded.
    timing_folds: usize,
    /// The clock whose consensus step and message are due (done in a step of their own
    /// after the clock's factors went out, while they are on the wire).
    gossip_due: Option<u64>,
    /// The clock of the last consensus step (it changes W and the public copy after that
    /// clock's cut).
    last_gossip: Option<u64>,
    /// Gossip mode: out-neighbours that have no copy of this peer's public copy (gained by
    /// a repair, or all of them after a rejoin); sent it ahead of the next clock's factors.
    copy_due: BTreeSet<PeerId>,
    /// The tree mode's sums ([`crate::tree`]), if the run uses it.
    tree: Option<crate::tree::Summer>,
    /// Tree mode: the optimizer statistics of each pending down message, by clock.
    tree_stats: BTreeMap<(u64, PeerId), Arc<[f32]>>,
    /// Own batches sent so far: where a frame queued now sits in this peer's stream (a
    /// relayed batch's carrier).
    sent_own: u64,
    /// The parts of the clock in progress sent so far ([`Config::send_parts`]), as one
    /// batch: what this peer applies once the clock's last part is computed.
    own_parts: Option<FactorBatch>,
    /// The parts received of each in-neighbour's clock in progress, as one batch, with
    /// how many parts they were.
    parts_in: BTreeMap<PeerId, (FactorBatch, usize)>,
    /// A prioritizing peer's clock in progress sent in parts: its budget and how much of
    /// it the parts so far were given.
    part_budget: Option<PartBudget>,
}

/// The budget of a clock sent in parts under `--prioritize` (`--send-parts`): the clock's
/// budget `B` (at most its K pairs, so that the parts' pairs fit the clock the receivers
/// expect) shared out evenly, part `i` of `n` allowed `⌊(i+1)B/n⌋ − ⌊iB/n⌋` pairs of its
/// own and the backlog's, chosen as they are computed.
#[derive(Debug, Clone, Copy)]
struct PartBudget {
    budget: usize,
    cap: usize,
    parts: usize,
    done: usize,
}

impl PartBudget {
    /// The budget of a clock of `k` pairs in `parts` parts, started now (the link's meter
    /// closes the last clock).
    fn begin(p: &mut crate::Prioritizer, k: usize, parts: usize) -> Self {
        let allowed = p.begin_clock(k);
        Self {
            budget: allowed.min(k),
            cap: k.max(allowed),
            parts: parts.max(1),
            done: 0,
        }
    }

    /// The next part's pairs, chosen from it and the backlog.
    fn select(
        &mut self,
        p: &mut crate::Prioritizer,
        fb: FactorBatch,
        w: ArrayView2<'_, f32>,
    ) -> (FactorBatch, crate::prioritize::PriorityStats) {
        let share = |i: usize| i * self.budget / self.parts;
        let allow = share(self.done + 1) - share(self.done);
        self.done += 1;
        let (out, mut stats) = p.select_part(fb, w, allow, self.cap);
        stats.allowed = self.budget;
        (out, stats)
    }
}

/// Checks a prioritization's budget (SFB peers and FMS clients).
pub(crate) fn check_prioritize(p: &crate::Prioritize) -> Result<()> {
    match p.budget {
        crate::Budget::Fraction(f) if !(f > 0.0 && f <= 1.0) => Err(ConfigError::Sending(format!(
            "--prioritize budget {f} is not a fraction in (0, 1]"
        ))
        .into()),
        crate::Budget::Pairs(0) => Err(ConfigError::Sending(
            "--prioritize budget of 0 pairs: nothing would ever be sent".into(),
        )
        .into()),
        _ => Ok(()),
    }
}

/// Records a prioritizer's choice of one batch or part in the peer's (or client's)
/// metrics.
pub(crate) fn note_priority<M: Model>(
    worker: &mut Worker<M>,
    p: &crate::Prioritizer,
    stats: &crate::prioritize::PriorityStats,
    took_s: f64,
) {
    if p.spec().budget == crate::Budget::Measured {
        worker.metrics.send_budget = Some(stats.allowed as u64);
        worker.metrics.link_bytes_per_s = p.link_rate();
    }
    worker.metrics.compress_s += took_s;
    worker.metrics.held_back_pairs = stats.backlog as u64;
    worker.metrics.lost_sq += stats.lost_sq;
    worker.metrics.computed_sq += stats.computed_sq;
    worker.metrics.top_sq += stats.top_sq;
}

/// A relaying peer's view of the trees ([`crate::relay`]).
struct Relay {
    /// The run's topology's trees, before any loss.
    base: Arc<crate::Routes>,
    /// The trees of the peers not lost ([`crate::Routes::without`]).
    routes: Arc<crate::Routes>,
    me: PeerId,
    /// `next[o]`: the clock of origin `o` expected next by relay (origins whose batches
    /// come from themselves or are this peer's own are not counted here).
    next: Vec<u64>,
    /// Origins not lost whose batches reach this peer by relay.
    relayed: Vec<PeerId>,
    /// Re-compress forwarded batches to at most this many pairs.
    compress: Option<usize>,
    /// Other origins' batches applied in the last `keep` clocks, by (origin, clock): what
    /// this peer hands a peer that becomes its child in an origin's tree after a loss, and
    /// its children on resume (kept only when the run continues after losses or
    /// checkpoints).
    log: Option<BTreeMap<(PeerId, u64), Arc<FactorBatch>>>,
    /// How many clocks of batches `log` keeps.
    keep: u64,
    /// Since a repair left some survivor unable to reach another: the lost peers then
    /// known, which pair, and the clock it was found at. It may be a peer dead but not yet
    /// known lost; if it lasts past `keep` clocks (or to the run's end), the peer stops
    /// ([`Error::RelayCut`]).
    cut: Option<(String, String, u64)>,
    /// After a repair or a resume: copies of batches this peer already has are dropped,
    /// and a batch may come from an in-neighbour that is no longer its origin's parent
    /// here (it sent before it learned of the loss); see [`Relay::check`].
    settling: bool,
}

/// What to do with a relayed batch that passed [`Relay::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// The origin's next clock: applied.
    Next,
    /// Clocks `missed` before it will never come (a repair's parent did not hold them):
    /// applied, and the missed ones counted.
    After { missed: u64 },
    /// A copy of one already received, or one its parent here will send: dropped.
    Copy,
}

impl Relay {
    fn new(
        routes: Arc<crate::Routes>,
        me: PeerId,
        compress: Option<usize>,
        keep: Option<u64>,
    ) -> Self {
        let mut r = Self {
            next: vec![0; routes.peers()],
            base: Arc::clone(&routes),
            routes,
            me,
            relayed: Vec::new(),
            compress,
            log: keep.map(|_| BTreeMap::new()),
            keep: keep.unwrap_or(0),
            cut: None,
            settling: false,
        };
        r.relayed = r.relayed_origins(&BTreeSet::new());
        r
    }

    fn relayed_origins(&self, gone: &BTreeSet<PeerId>) -> Vec<PeerId> {
        (0..self.routes.peers() as u32)
            .map(PeerId)
            .filter(|&o| o != self.me && !gone.contains(&o))
            .filter(|&o| self.routes.parent(o, self.me).is_some_and(|p| p != o))
            .collect()
    }

    /// Keeps `batch` (applied by this peer, of another origin) for a later repair.
    fn remember(&mut self, batch: &Arc<FactorBatch>, clock: u64) {
        let keep = self.keep;
        if let Some(log) = &mut self.log {
            log.insert((batch.origin, batch.clock), Arc::clone(batch));
            log.retain(|k, _| k.1 + keep >= clock);
        }
    }

    /// The trees after the losses `gone`; for each peer that became this peer's child in
    /// some origin's tree, the batches of that origin this peer holds, oldest first.
    fn reroute(&mut self, gone: &BTreeSet<PeerId>, clock: u64) -> Vec<(PeerId, Arc<FactorBatch>)> {
        let lost: Vec<PeerId> = gone.iter().copied().collect();
        let (routes, cut) = self.base.without(&lost);
        let routes = Arc::new(routes);
        let names = || {
            lost.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        self.cut = match (cut, self.cut.take()) {
            (None, _) => None,
            // Still cut: since the first time.
            (Some(e), Some((_, _, since))) => Some((names(), e.to_string(), since)),
            (Some(e), None) => Some((names(), e.to_string(), clock)),
        };
        let mut hand = Vec::new();
        for o in (0..routes.peers() as u32).map(PeerId) {
            if o == self.me {
                continue;
            }
            let before = self.routes.children(o, self.me);
            for &c in routes.children(o, self.me) {
                if before.contains(&c) {
                    continue;
                }
                if let Some(log) = &self.log {
                    hand.extend(
                        log.range((o, 0)..=(o, u64::MAX))
                            .map(|(_, b)| (c, Arc::clone(b))),
                    );
                }
            }
        }
        self.routes = routes;
        self.relayed = self.relayed_origins(gone);
        self.settling = true;
        hand
    }

    /// [`Error::RelayCut`] when a cut has lasted past `keep` clocks, or to the run's end
    /// (`clock` ≥ `clocks`).
    fn check_cut(&self, me: PeerId, clock: u64, clocks: u64) -> Result<()> {
        match &self.cut {
            Some((lost, reason, since)) if clock > since + self.keep || clock >= clocks => {
                Err(Error::RelayCut {
                    me,
                    lost: lost.clone(),
                    clock,
                    reason: reason.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// What a checkpoint holds ([`NodeState::relay`]): per origin the clock expected next
    /// *applied* (a batch received but still `pending` at the cut is not in W: it comes
    /// again from its parent on resume), and the kept batches, each a wire frame.
    fn save_state(
        &self,
        pending: &BTreeMap<(u64, PeerId, u64), (Arc<FactorBatch>, bool)>,
    ) -> Vec<u8> {
        let mut next = self.next.clone();
        for &(_, origin, clock) in pending.keys() {
            if origin != self.me
                && let Some(n) = next.get_mut(origin.index())
            {
                *n = (*n).min(clock);
            }
        }
        let mut out = Vec::new();
        out.extend_from_slice(&(next.len() as u64).to_le_bytes());
        for n in next {
            out.extend_from_slice(&n.to_le_bytes());
        }
        let log: Vec<&Arc<FactorBatch>> = self.log.iter().flat_map(|l| l.values()).collect();
        out.extend_from_slice(&(log.len() as u64).to_le_bytes());
        for b in log {
            let frame = wire::encode(&Message::Relayed {
                carrier: 0,
                batch: Arc::clone(b),
            });
            out.extend_from_slice(&(frame.len() as u64).to_le_bytes());
            out.extend_from_slice(&frame);
        }
        out
    }

    /// Back to [`save_state`](Self::save_state)'s bytes, for a `j × d` W.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] for bytes that are not relay's state of this run.
    fn restore_state(&mut self, bytes: &[u8], j: usize, d: usize) -> Result<()> {
        let bad = |why: String| Error::Checkpoint {
            reason: format!("relay's state: {why}"),
        };
        let mut r = bytes;
        let u64_of = |r: &mut &[u8], what: &str| -> Result<u64> {
            let (head, rest) = r
                .split_at_checked(8)
                .ok_or_else(|| bad(format!("truncated in {what}")))?;
            *r = rest;
            Ok(u64::from_le_bytes(head.try_into().expect("8 bytes")))
        };
        let peers = self.routes.peers();
        if u64_of(&mut r, "its peer count")? != peers as u64 {
            return Err(bad(format!("not of a run of {peers} peers")));
        }
        let mut next = Vec::with_capacity(peers);
        for _ in 0..peers {
            next.push(u64_of(&mut r, "the next clocks")?);
        }
        let n = u64_of(&mut r, "its batch count")?;
        let expect = wire::Expect { j, d, peers };
        let mut log = BTreeMap::new();
        for k in 0..n {
            let len = u64_of(&mut r, "a batch's length")?;
            let len = usize::try_from(len).map_err(|_| bad(format!("batch {k} too long")))?;
            let (frame, rest) = r
                .split_at_checked(len)
                .ok_or_else(|| bad(format!("truncated in batch {k}")))?;
            r = rest;
            let Message::Relayed { batch, .. } =
                wire::decode(frame, &expect).map_err(|e| bad(format!("batch {k}: {e}")))?
            else {
                return Err(bad(format!("batch {k} is not a relayed batch")));
            };
            log.insert((batch.origin, batch.clock), batch);
        }
        if !r.is_empty() {
            return Err(bad(format!("{} bytes after its batches", r.len())));
        }
        self.next = next;
        if let Some(l) = &mut self.log {
            *l = log;
        }
        self.settling = true;
        Ok(())
    }

    /// Every batch held, for this peer's children in its origin's tree (on resume).
    fn held_for_children(&self) -> Vec<(PeerId, Arc<FactorBatch>)> {
        let Some(log) = &self.log else {
            return Vec::new();
        };
        log.values()
            .flat_map(|b| {
                self.routes
                    .children(b.origin, self.me)
                    .iter()
                    .map(move |&c| (c, Arc::clone(b)))
            })
            .collect()
    }

    /// Checks a relayed batch of `origin`'s clock `clock`, carried by `from`'s clock
    /// `carrier` after `delivered` of its own batches, in a run of `clocks` clocks.
    ///
    /// It must come from this peer's parent in the origin's tree and be the origin's next
    /// clock. While settling after a repair or a resume: a copy of a clock already
    /// received is dropped; one from an in-neighbour that is no longer the parent is
    /// taken only if it is the next clock (else dropped: the parent sends it); a later
    /// clock from the parent is taken, the ones before it counted as missed.
    fn check(
        &self,
        from: PeerId,
        carrier: u64,
        batch: &FactorBatch,
        delivered: u64,
        clocks: u64,
    ) -> Result<Take> {
        let (origin, clock) = (batch.origin, batch.clock);
        let refuse = |reason: String| {
            Err(Error::BadRelay {
                from,
                origin,
                clock,
                reason,
            })
        };
        if origin.index() >= self.routes.peers() || origin == self.me {
            return refuse(format!("{origin} is not another peer of the run"));
        }
        if clock >= clocks {
            return refuse("beyond the run's last clock".into());
        }
        if carrier.min(clocks) != delivered {
            return refuse(format!(
                "out of place in {from}'s stream: carried by its clock {carrier}, received \
                 after {delivered} of its own batches"
            ));
        }
        let expected = self.next[origin.index()];
        let parent = self.routes.parent(origin, self.me);
        match parent {
            Some(p) if p == from && p != origin => {}
            Some(p) if p == origin => {
                // Its batches come from itself (a repair removes arcs, adds none: it did
                // before too); a copy on a tree of before the repair is dropped.
                if self.settling {
                    return Ok(Take::Copy);
                }
                return refuse(format!(
                    "{origin} sends to this peer itself: its batches are never relayed here"
                ));
            }
            _ if self.settling => {
                // Sent on a tree of before the repair (or one a cut left without a path
                // here).
                return Ok(if clock == expected {
                    Take::Next
                } else {
                    Take::Copy
                });
            }
            Some(p) => {
                return refuse(format!(
                    "{from} is not this peer's parent in {origin}'s relay tree ({p} is)"
                ));
            }
            None => return refuse("no relay tree leads here".into()),
        }
        match clock.cmp(&expected) {
            std::cmp::Ordering::Equal => Ok(Take::Next),
            std::cmp::Ordering::Less if self.settling => Ok(Take::Copy),
            std::cmp::Ordering::Greater if self.settling => Ok(Take::After {
                missed: clock - expected,
            }),
            std::cmp::Ordering::Less => refuse("duplicate (already received)".into()),
            std::cmp::Ordering::Greater => {
                refuse(format!("out of order (clock {expected} is missing)"))
            }
        }
    }

    /// Whether every relayed origin's batches of the `clocks` clocks have arrived.
    fn settled(&self, clocks: u64) -> bool {
        self.relayed.iter().all(|o| self.next[o.index()] >= clocks)
    }

    /// Relayed origins still short of `clocks`, as (their parent here, clocks received).
    fn short_of(&self, clocks: u64) -> Vec<(PeerId, u64)> {
        self.relayed
            .iter()
            .filter(|o| self.next[o.index()] < clocks)
            .filter_map(|&o| Some((self.routes.parent(o, self.me)?, self.next[o.index()])))
            .collect()
    }
}

impl PeerSide {
    /// Queues `msg` for every out-neighbour, counting its bytes.
    fn to_out_neighbors<M: Model>(&self, worker: &mut Worker<M>, msg: &Message) {
        if self.out_neighbors.is_empty() {
            return;
        }
        let len = wire::encoded_len_with(msg, self.wire) as u64;
        for &to in &self.out_neighbors {
            worker.metrics.bytes_sent += len;
            worker.outputs.push_back(Output {
                to,
                msg: msg.clone(),
            });
        }
    }

    /// Forwards `batch` (of another origin) to this peer's children in its origin's tree,
    /// in the transmission of clock `carrier`.
    fn forward<M: Model>(&self, worker: &mut Worker<M>, batch: &Arc<FactorBatch>, carrier: u64) {
        let Some(relay) = &self.relay else {
            return;
        };
        if batch.origin == relay.me {
            return;
        }
        let children = relay.routes.children(batch.origin, relay.me);
        if children.is_empty() {
            return;
        }
        let batch = match relay.compress {
            Some(rank) if batch.len() > rank => {
                // A fresh compressor: the residual is the origin's to keep, not ours.
                let (out, _) = crate::compress::Compressor::new(rank).compress((**batch).clone());
                worker.metrics.relay_compressed += 1;
                Arc::new(out)
            }
            _ => Arc::clone(batch),
        };
        let msg = Message::Relayed { carrier, batch };
        let len = wire::encoded_len_with(&msg, self.wire) as u64;
        for &to in children {
            worker.metrics.bytes_sent += len;
            worker.metrics.relayed_sent += 1;
            worker.outputs.push_back(Output {
                to,
                msg: msg.clone(),
            });
        }
    }
}

impl PeerSide {
    /// The gossip mode's part of clock `clock`, in a step of its own after the clock's
    /// factors went out (so it runs while they are on the wire): the consensus step on the
    /// replica, then the consensus message to every out-neighbour. The message follows the
    /// clock's factors on each link and comes before the next clock's, so a receiver folds
    /// it one clock after the clock's batches ([`Mixer::fold`](crate::gossip::Mixer::fold)
    /// with `limit − 1`): by then it has arrived, on every run alike.
    fn gossip<M: Model>(
        &mut self,
        worker: &mut Worker<M>,
        clock: u64,
        time: &mut dyn TimeSource,
    ) -> Result<()> {
        if self.gossip_rank == 0 {
            return Ok(());
        }
        let t0 = time.now();
        let (j, d) = self.replica.dim();
        let copies = match &self.mixer {
            Some(m) => m.mixed_with().count(),
            None => worker.inbound.peers().len(),
        };
        let batch = match &mut self.mixer {
            Some(m) => {
                m.mix(self.replica.w_mut());
                m.compress(self.replica.w(), clock)?
            }
            // Timing only: a message of the right size, no arithmetic.
            None => FactorBatch {
                origin: worker.id,
                clock,
                scale: 1.0,
                j,
                d,
                u: vec![0.0; self.gossip_rank * j],
                v: crate::VFactors::Dense(vec![0.0; self.gossip_rank * d]),
            },
        };
        // What that cost (for a simulator's clock; real clocks have moved already): the
        // consensus step reads every copy and the public copy, forming E one more pass;
        // the power iteration is two products with E (2R pairs' flops) and the public
        // copy gains R pairs.
        time.after(Work::Dense {
            matrices: copies + 2,
            j,
            d,
        });
        let t1 = time.after(Work::Apply {
            pairs: 3 * self.gossip_rank,
            j,
            d,
        });
        worker.metrics.compress_s += secs(t0, t1);
        worker.metrics.mix_pairs += batch.len() as u64;
        let msg = Message::Mix {
            batch: Arc::new(batch),
        };
        let len = wire::encoded_len(&msg) as u64;
        for &to in &self.out_neighbors {
            worker.metrics.bytes_sent += len;
            worker.outputs.push_back(Output {
                to,
                msg: msg.clone(),
            });
        }
        Ok(())
    }
}

impl PeerSide {
    /// Gossip mode: this peer's public copy to every out-neighbour that lacks one, ahead of
    /// the factors of clock `clock` (and so of every consensus message it lacks).
    fn send_copies<M: Model>(&mut self, worker: &mut Worker<M>, clock: u64) {
        if self.copy_due.is_empty() {
            return;
        }
        let due = std::mem::take(&mut self.copy_due);
        let (next, w) = match &self.mixer {
            Some(m) => m.public_copy(),
            // Timing only: a copy of the right size.
            None => (clock, Array2::zeros(self.replica.dim())),
        };
        let msg = Message::Copy {
            origin: worker.id,
            clock: next,
            w: Arc::new(w),
        };
        let len = wire::encoded_len(&msg) as u64;
        for to in due.into_iter().filter(|p| self.out_neighbors.contains(p)) {
            worker.metrics.bytes_sent += len;
            worker.outputs.push_back(Output {
                to,
                msg: msg.clone(),
            });
        }
    }
}

impl PeerSide {
    /// Tree mode ([`crate::tree`]): sends on every clock whose sum is complete, up to the
    /// parent or, at the root, down as the clock's update; whether it sent any.
    fn tree_push<M: Model>(
        &mut self,
        worker: &mut Worker<M>,
        time: &mut dyn TimeSource,
    ) -> Result<bool> {
        let (j, d) = self.replica.dim();
        let mut sent = false;
        while let Some(tree) = self.tree.as_mut().filter(|t| t.ready()) {
            let t0 = time.now();
            let combined = tree.combine(worker.plan.timing_only);
            // What the decomposition costs (for a simulator's clock): two thin QRs of
            // `(J + D) × n`, about `2 (J + D) n²` flops, priced as that many pairs'
            // apply (`2 J D` flops each).
            let n = combined.pairs_in;
            let pairs = (n * n * (j + d)).div_ceil((j * d).max(1));
            let t1 = time.after(Work::Apply { pairs, j, d });
            worker.metrics.compress_s += secs(t0, t1);
            let part = combined.part;
            match tree.parent() {
                Some(parent) => {
                    let msg = Message::Sum {
                        down: false,
                        batch: part.batch,
                        stats: part.stats,
                    };
                    worker.metrics.bytes_sent += wire::encoded_len(&msg) as u64;
                    worker.outputs.push_back(Output { to: parent, msg });
                }
                None => self.tree_down(worker, part, None),
            }
            sent = true;
        }
        Ok(sent)
    }

    /// Tree mode: the down message `part` (made here at the root, or received from
    /// `from`), if this peer did not hold it: to every neighbour but `from`, and pending
    /// here (see [`crate::tree`]: a copy changes nothing).
    fn tree_down<M: Model>(
        &mut self,
        worker: &mut Worker<M>,
        part: crate::tree::Part,
        from: Option<PeerId>,
    ) {
        let Some(tree) = &mut self.tree else {
            return;
        };
        if !tree.take_down(&part) {
            return;
        }
        let msg = Message::Sum {
            down: true,
            batch: Arc::clone(&part.batch),
            stats: Arc::clone(&part.stats),
        };
        let len = wire::encoded_len(&msg) as u64;
        for to in tree.neighbors() {
            if Some(to) == from {
                continue;
            }
            worker.metrics.bytes_sent += len;
            worker.outputs.push_back(Output {
                to,
                msg: msg.clone(),
            });
        }
        // The barrier waits for the down messages, whoever brings them: as the parent's
        // clocks, or at a root laid out by a repair as its own (see `Engine::retree`).
        match tree.parent() {
            Some(parent) => worker.inbound.hold_at(parent, tree.downs_next()),
            None if worker.inbound.awaits(worker.id) => {
                worker.inbound.hold_at(worker.id, tree.downs_next());
            }
            None => {}
        }
        let key = (part.batch.clock, part.batch.origin);
        if !part.stats.is_empty() {
            self.tree_stats.insert(key, part.stats);
        }
        self.pending
            .insert((key.0, key.1, key.0), (part.batch, true));
    }

    /// Tree mode: the optimizer statistics of the pending down messages of `clocks`
    /// (removed), summed; `None` when the messages carry none.
    fn take_tree_stats(&mut self, keys: impl Iterator<Item = (u64, PeerId)>) -> Option<Vec<f64>> {
        let mut sum: Option<Vec<f64>> = None;
        for key in keys {
            if let Some(s) = self.tree_stats.remove(&key) {
                let acc = sum.get_or_insert_with(|| vec![0.0; s.len()]);
                for (a, &x) in acc.iter_mut().zip(s.iter()) {
                    *a += f64::from(x);
                }
            }
        }
        sum
    }
}

impl<M: Model> Side<M> for PeerSide {
    fn w(&self) -> ArrayView2<'_, f32> {
        self.replica.w()
    }

    /// Applies every pending batch with clock `< limit`, in (clock, origin) order, in one
    /// kernel call, then `prox` (timed as `apply_s`).
    fn absorb(
        &mut self,
        worker: &mut Worker<M>,
        limit: u64,
        time: &mut dyn TimeSource,
    ) -> Result<()> {
        let clocks = worker.plan.clocks;
        if let Some(relay) = &self.relay {
            relay.check_cut(worker.id, worker.clock, clocks)?;
        }
        // Consensus pairs folded into the copies of the in-neighbours' replicas, a clock
        // after the batches (see `gossip`): charged with the clock's apply (timing only: as
        // many as were received).
        let folded = match &mut self.mixer {
            Some(m) => m.fold((worker.clock < clocks).then_some(limit.saturating_sub(1)))?,
            None => std::mem::take(&mut self.timing_folds),
        };
        worker.metrics.mix_pairs += folded as u64;
        let keys: Vec<(u64, PeerId, u64)> = if worker.clock >= clocks {
            // The end of the run: every batch of its clocks, however it came.
            self.pending
                .keys()
                .filter(|k| k.2 < clocks)
                .copied()
                .collect()
        } else {
            self.pending
                .range(..(limit, PeerId(0), 0))
                .map(|(k, _)| *k)
                .collect()
        };
        if keys.is_empty() {
            return Ok(());
        }
        let t0 = time.now();
        let batches: Vec<(Arc<FactorBatch>, bool)> =
            keys.iter().map(|k| self.pending[k].clone()).collect();
        let refs: Vec<&FactorBatch> = batches.iter().map(|b| b.0.as_ref()).collect();
        let given = self.take_tree_stats(keys.iter().map(|k| (k.0, k.1)));
        let stats = if worker.plan.timing_only {
            crate::replica::ApplyStats::counted(&refs)
        } else {
            self.stepper
                .apply_with(&mut self.replica, &refs, worker.clock, given.as_deref())?
        };
        if stats.aggregated_from > 0 {
            worker.metrics.aggregated_applies += 1;
        }
        for (k, (batch, forwarded)) in keys.iter().zip(&batches) {
            self.pending.remove(k);
            let late = worker.clock.saturating_sub(1).saturating_sub(k.2);
            worker.metrics.record_staleness(late);
            if let Some(tree) = &self.tree
                && !batch.is_empty()
            {
                // A down message holds every peer's batch of its clock.
                worker.metrics.batches_applied += tree.peers() as u64 - 1;
            }
            if !forwarded {
                // Forwarded when applied: in the transmission of the clock it is applied
                // before, the same on every run under BSP.
                self.forward(worker, batch, worker.clock);
            }
            if let Some(relay) = &mut self.relay
                && batch.origin != worker.id
            {
                relay.remember(batch, worker.clock);
            }
        }
        if !worker.plan.timing_only {
            worker.model.prox(self.replica.w_mut());
        }
        let (j, d) = self.replica.dim();
        let t1 = time.after(Work::Apply {
            pairs: stats.pairs() + folded,
            j,
            d,
        });
        worker.metrics.apply_s += secs(t0, t1);
        Ok(())
    }

    /// Rounds the batch for the wire if needed, queues it for every out-neighbour and
    /// keeps it for the peer itself.
    fn emit(
        &mut self,
        worker: &mut Worker<M>,
        mut fb: FactorBatch,
        time: &mut dyn TimeSource,
    ) -> Result<()> {
        if let Some(tree) = &mut self.tree {
            // Applied only as part of the clock's sum, as every other replica applies it.
            let stats = match tree.stats_len() {
                0 => Vec::new(),
                n if worker.plan.timing_only => vec![0.0; n],
                _ => crate::tree::factored_stats(&fb, worker.plan.lr),
            };
            tree.own(fb, stats);
            self.tree_push(worker, time)?;
            return Ok(());
        }
        self.send_copies(worker, fb.clock);
        if let Some(c) = &mut self.compressor {
            let t0 = time.now();
            let (out, _) = c.compress(fb);
            fb = out;
            worker.metrics.compress_s += secs(t0, time.now());
        }
        let work = worker.metrics.compute_s + worker.metrics.apply_s;
        let clock_work = work - std::mem::replace(&mut self.work_seen, work);
        if let Some(p) = &mut self.prioritizer {
            let t0 = time.now();
            let (out, stats) = match self.part_budget.take() {
                // The clock's last part; the clock's work sizes the next clock's budget.
                Some(mut pb) => {
                    let chosen = pb.select(p, fb, self.replica.w());
                    p.set_work(clock_work);
                    chosen
                }
                None => {
                    p.set_work(clock_work);
                    p.select(fb, self.replica.w())
                }
            };
            fb = out;
            note_priority(worker, p, &stats, secs(t0, time.now()));
        }
        if self.wire == wire::Dtype::F16 {
            wire::round_to_f16(&mut fb);
        }
        let t = fb.clock;
        // Not after the last clock: nothing would fold it.
        if self.gossip_rank > 0 && t + 1 < worker.plan.clocks {
            self.gossip_due = Some(t);
        }
        let sent = Arc::new(fb);
        // The clock's whole batch: its earlier parts, if it was sent in parts, and this.
        let fb = match self.own_parts.take() {
            None => Arc::clone(&sent),
            Some(mut all) => {
                all.append(&sent)?;
                Arc::new(all)
            }
        };
        self.sent_own = t + 1;
        self.steps.accept(t, fb.step_norm());
        let pairs = sent.len();
        let msg = Message::Factors {
            batch: sent,
            mean_iter_us: worker.mean_iter_us(),
        };
        let before = worker.metrics.bytes_sent;
        self.to_out_neighbors(worker, &msg);
        if let Some(p) = &mut self.prioritizer {
            p.sent(worker.metrics.bytes_sent - before, pairs);
        }
        self.pending.insert((t, worker.id, t), (fb, true));
        Ok(())
    }

    /// Chooses the part's pairs under the clock's budget if the peer prioritizes, rounds
    /// the part for the wire if needed, queues it for every out-neighbour and keeps it
    /// with the clock's earlier parts.
    fn emit_part(
        &mut self,
        worker: &mut Worker<M>,
        mut fb: FactorBatch,
        time: &mut dyn TimeSource,
    ) -> Result<()> {
        if let Some(p) = &mut self.prioritizer {
            let t0 = time.now();
            let pb = self.part_budget.get_or_insert_with(|| {
                PartBudget::begin(p, worker.plan.batch_size, worker.plan.parts)
            });
            let (out, stats) = pb.select(p, fb, self.replica.w());
            fb = out;
            note_priority(worker, p, &stats, secs(t0, time.now()));
        }
        if self.wire == wire::Dtype::F16 {
            wire::round_to_f16(&mut fb);
        }
        let fb = Arc::new(fb);
        let msg = Message::Part {
            batch: Arc::clone(&fb),
        };
        let before = worker.metrics.bytes_sent;
        self.to_out_neighbors(worker, &msg);
        if let Some(p) = &mut self.prioritizer {
            p.sent(worker.metrics.bytes_sent - before, fb.len());
        }
        match &mut self.own_parts {
            Some(all) => all.append(&fb)?,
            None => self.own_parts = Some(Arc::unwrap_or_clone(fb)),
        }
        Ok(())
    }

    /// After the last clock: forwards at once what has not been forwarded (the batches of
    /// every clock are then applied together at the end, so when they are forwarded no
    /// longer matters).
    fn drain(&mut self, worker: &mut Worker<M>) {
        if self.relay.is_none() {
            return;
        }
        let clocks = worker.plan.clocks;
        let todo: Vec<Arc<FactorBatch>> = self
            .pending
            .iter_mut()
            .filter(|(k, (_, forwarded))| !forwarded && k.2 < clocks)
            .map(|(_, (batch, forwarded))| {
                *forwarded = true;
                Arc::clone(batch)
            })
            .collect();
        for batch in &todo {
            self.forward(worker, batch, worker.clock);
        }
    }

    fn settled(&self, worker: &Worker<M>) -> bool {
        self.relay
            .as_ref()
            .is_none_or(|r| r.settled(worker.plan.clocks))
            && self
                .tree
                .as_ref()
                .is_none_or(|t| t.sent() >= worker.plan.clocks)
    }

    /// The gossip mode's consensus step of the clock just emitted, if due (and the run
    /// still goes past that clock: a stop may have come since).
    fn deferred(&mut self, worker: &mut Worker<M>, time: &mut dyn TimeSource) -> Result<bool> {
        if self.tree.is_some() {
            // A sum completed by a child's part since the clock's own batch.
            return self.tree_push(worker, time);
        }
        let Some(t) = self.gossip_due.take() else {
            return Ok(false);
        };
        if t + 1 >= worker.plan.clocks {
            return Ok(false);
        }
        self.gossip(worker, t, time)?;
        self.last_gossip = Some(t);
        Ok(true)
    }

    /// A cut at `t` also needs every in-neighbour's consensus message of clock `t − 1`
    /// (held in the checkpoint, folded at `t + 1`).
    fn cut_ready(&self, t: u64) -> bool {
        match &self.mixer {
            Some(m) if t > 0 => m.has_all(t - 1),
            _ => true,
        }
    }

    fn stop_destinations(&self) -> Vec<PeerId> {
        self.out_neighbors.clone()
    }

    fn role(&self) -> Role {
        Role::Peer
    }

    fn snapshot(&self, state: &mut NodeState) {
        state.w = Some(self.replica.w().to_owned());
        state.optimizer = self.stepper.save_state();
        state.compressor = match (&self.compressor, &self.prioritizer, &self.tree) {
            (Some(c), _, _) => c.save_state(),
            (None, Some(p), _) => p.save_state(),
            (None, None, Some(t)) => t.save_state(),
            (None, None, None) => Vec::new(),
        };
        state.mixer = self
            .mixer
            .as_ref()
            .map_or_else(Vec::new, |m| m.save_state(state.clock));
        state.relay = self
            .relay
            .as_ref()
            .map_or_else(Vec::new, |r| r.save_state(&self.pending));
    }
}

/// One peer's engine; see the [module docs](self).
pub struct Engine<M: Model> {
    cfg: Config,
    worker: Worker<M>,
    side: PeerSide,
    /// Rejoining a run under way: no step until [`Engine::adopt`] gives it the cluster's
    /// W and clock.
    rejoining: bool,
    /// Where the shard comes from when peers are lost ([`Engine::with_takeover`]).
    takeover: Option<TakeOver<M::Sample>>,
    /// In-neighbours a topology change dropped: their frames still in flight are ignored.
    former: BTreeSet<PeerId>,
    /// Frames from peers that are not (yet) in-neighbours: a sender that repaired the
    /// topology after a loss before this peer did. Replayed, in order, when a repair makes
    /// the sender an in-neighbour; at most [`EARLY_FRAMES`] per sender.
    early: BTreeMap<PeerId, Vec<Message>>,
    /// The run's peers this one knows lost (by its own links or others' notices) and not
    /// back: what [`Config::quorum`] counts.
    gone: BTreeSet<PeerId>,
}

/// How many frames [`Engine::on_message`] holds for a sender that is not an in-neighbour
/// yet, before it refuses the next as coming from an unknown arc. A sender cannot be more
/// than its staleness bound ahead of its own in-neighbours; the notice of the loss that
/// made it this peer's in-neighbour arrives within a few frames of its first one.
pub const EARLY_FRAMES: usize = 64;

/// The shard source of [`Engine::with_takeover`] and the peers it currently covers.
struct TakeOver<S> {
    source: ShardSource<S>,
    lost: BTreeSet<PeerId>,
    own: usize,
}

impl<M: Model> std::fmt::Debug for Engine<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("id", &self.cfg.id)
            .field("clock", &self.worker.clock)
            .field("pending", &self.side.pending.len())
            .field("done", &self.worker.done)
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
        if cfg.send_parts > 1 && !model.separable() {
            return Err(ConfigError::Sending(format!(
                "--send-parts {}: this model's batches are not separable (Model::separable: \
                 one pair per sample, each from W and its sample alone), so a clock cannot \
                 be computed in parts; use one part",
                cfg.send_parts
            ))
            .into());
        }
        let w0_dim = w0.dim();
        let mixer = match &cfg.gossip {
            Some(g) if !cfg.timing_only => Some(crate::gossip::Mixer::new(
                cfg.id,
                &cfg.in_neighbors,
                &w0,
                g,
            )?),
            _ => None,
        };
        let replica = if cfg.timing_only {
            let (j, d) = w0.dim();
            Replica::shape_only(j, d)
        } else {
            Replica::new(w0)?
        };
        let worker = Worker::new(
            cfg.id,
            model,
            shard,
            None,
            replica.dim(),
            cfg.plan(),
            Inbound::new(&cfg.in_neighbors, cfg.peers),
        );
        Ok(Self {
            side: PeerSide {
                stepper: {
                    // A timing-only node never steps: no optimizer state the size of W.
                    let dim = if cfg.timing_only {
                        (0, 0)
                    } else {
                        replica.dim()
                    };
                    let mut s = Stepper::new(cfg.optimizer.clone(), cfg.lr, cfg.clocks, dim)?;
                    if let Some(g) = &cfg.gossip {
                        s = s.with_weights(Arc::clone(&g.weights));
                    }
                    match cfg.aggregate {
                        Some(rank) => s.with_aggregate(rank),
                        None => s,
                    }
                },
                replica,
                pending: BTreeMap::new(),
                out_neighbors: cfg.out_neighbors.clone(),
                wire: cfg.wire,
                compressor: cfg.compress.map(crate::compress::Compressor::new),
                prioritizer: cfg.prioritize.map(crate::Prioritizer::new),
                work_seen: 0.0,
                relay: cfg.relay.clone().map(|r| {
                    // What a repair or a resume may need to hand on: the batches of the
                    // clocks still travelling the trees (their height), and as many more as
                    // peers may be apart.
                    let slack = cfg.consistency.staleness_bound().unwrap_or(cfg.max_drift);
                    let keep = (cfg.on_peer_loss == PeerLoss::Continue || cfg.checkpoint_every > 0)
                        .then(|| u64::from(r.height()) + slack + 4);
                    Relay::new(r, cfg.id, cfg.relay_compress, keep)
                }),
                mixer,
                gossip_rank: cfg
                    .gossip
                    .as_ref()
                    .map_or(0, |g| g.rank_for(w0_dim.0, w0_dim.1)),
                timing_folds: 0,
                gossip_due: None,
                last_gossip: None,
                copy_due: BTreeSet::new(),
                tree: cfg.tree.as_ref().map(|t| {
                    let stats = if cfg.optimizer.method == crate::Method::Factored {
                        w0_dim.0 + w0_dim.1
                    } else {
                        0
                    };
                    // Peers that wait for each other are at most the staleness bound and
                    // a few clocks apart; the others, flow control's drift.
                    let apart = cfg
                        .consistency
                        .staleness_bound()
                        .map_or(cfg.max_drift, |s| s + 4);
                    crate::tree::Summer::new(cfg.id, cfg.peers, t, stats, apart)
                }),
                tree_stats: BTreeMap::new(),
                sent_own: 0,
                steps: crate::bound::StepBound::new(cfg.step_bound),
                own_parts: None,
                parts_in: BTreeMap::new(),
                part_budget: None,
            },
            worker,
            cfg,
            rejoining: false,
            takeover: None,
            former: BTreeSet::new(),
            early: BTreeMap::new(),
            gone: BTreeSet::new(),
        })
    }

    /// Lost peers' shards are taken over: whenever the set of lost peers changes (a loss
    /// the engine is told of, neighbour or not, or a rejoin) the shard becomes
    /// `source(lost)` and the sampler starts a new epoch over it ([`Shard::reassign`]).
    /// Every survivor computes its part from the same set, so together they train on the
    /// whole data again. Only for models whose state does not follow sample indices
    /// (not SDCA's duals or SAGA's table: their indices would change meaning).
    pub fn with_takeover(mut self, source: ShardSource<M::Sample>) -> Self {
        self.takeover = Some(TakeOver {
            source,
            lost: BTreeSet::new(),
            own: self.worker.shard.len(),
        });
        self
    }

    /// Recomputes the shard after the set of lost peers changed (`gone`: lost, else back).
    fn retake(&mut self, peer: PeerId, gone: bool) {
        let Some(t) = &mut self.takeover else {
            return;
        };
        let changed = if gone {
            t.lost.insert(peer)
        } else {
            t.lost.remove(&peer)
        };
        if !changed {
            return;
        }
        let samples = (t.source)(&t.lost);
        self.worker.metrics.taken_over_samples = samples.len().saturating_sub(t.own) as u64;
        self.worker.reassign_shard(samples);
    }

    /// A peer restarted into a run under way (`--rejoin`): it computes nothing until a
    /// neighbour's state arrives ([`adopt`](Self::adopt)).
    pub fn rejoining(mut self) -> Self {
        self.rejoining = true;
        self
    }

    /// Gossip mode: the in-neighbours whose public copy this peer holds and mixes with
    /// (empty outside the gossip mode).
    pub fn mixed_with(&self) -> Vec<PeerId> {
        self.side
            .mixer
            .as_ref()
            .map_or_else(Vec::new, |m| m.mixed_with().collect())
    }

    /// Whether the engine waits for a neighbour's state ([`rejoining`](Self::rejoining)).
    pub fn is_rejoining(&self) -> bool {
        self.rejoining
    }

    /// A rejoining peer takes a neighbour's W, optimizer state and clock (`state`, taken
    /// by the neighbour at its clock boundary) and goes on from that clock: every
    /// in-neighbour is awaited from its next frame, of whatever clock. Its own model state
    /// and sampler are its own (they are not transferred).
    ///
    /// A state that comes when the engine no longer rejoins (a second neighbour's) is not
    /// adopted, but it says where its sender's frames to this node start: the sender took
    /// it at its clock `c` when it learned of the return, and sends this node its clocks
    /// from `c` on (those before went to the others). A sender still awaited as fresh
    /// then counts as having delivered `c` clocks. Without that, a sender that was ahead
    /// and had already computed its last clock sends nothing more, and the two wait for
    /// each other. Returns `false`.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] for a state of another shape or optimizer, or a non-finite W
    /// (nothing changes).
    pub fn adopt(&mut self, mut state: NodeState) -> Result<bool> {
        if !self.rejoining {
            self.worker.inbound.starts_at(state.id, state.clock);
            return Ok(false);
        }
        let w = state.w.take().ok_or_else(|| Error::Checkpoint {
            reason: "a rejoin state without W".into(),
        })?;
        if w.dim() != self.side.replica.dim() {
            return Err(Error::Checkpoint {
                reason: format!(
                    "a rejoin state of another model shape ({}×{})",
                    w.nrows(),
                    w.ncols()
                ),
            });
        }
        let replica = Replica::new(w)?;
        self.side.stepper.restore_state(&state.optimizer)?;
        if let Some(m) = &mut self.side.mixer {
            // Its copies of the neighbours' public copies come from them; its own public
            // copy starts over from the adopted W, sent whole to its out-neighbours.
            m.reset(&replica.w().to_owned())?;
        }
        if self.side.gossip_rank > 0 {
            self.side.copy_due = self.side.out_neighbors.iter().copied().collect();
            self.side.gossip_due = None;
        }
        self.side.replica = replica;
        self.side.pending.clear();
        self.worker.rejoin_at(state.clock);
        self.rejoining = false;
        Ok(true)
    }

    /// The transport sent `bytes` and was busy `busy` sending since it last said: what a
    /// measured send budget (`--prioritize POLICY:auto`) sizes the next clocks by.
    pub fn observe_egress(&mut self, bytes: u64, busy: std::time::Duration) {
        if let Some(p) = &mut self.side.prioritizer {
            p.observe_link(bytes, busy.as_secs_f64());
        }
    }

    /// Peer `peer`, lost earlier, is back (restarted with `--rejoin`): the caller gives
    /// the engine its neighbours again ([`set_neighbors`](Self::set_neighbors)); this
    /// records the return in the metrics.
    pub fn peer_rejoined(&mut self, peer: PeerId) {
        self.gone.remove(&peer);
        if self.side.gossip_rank > 0 {
            // It came back with nothing: whatever copy it was sent before is gone.
            self.side.copy_due.insert(peer);
        }
        self.worker
            .metrics
            .rejoined_peers
            .push((peer.0, self.worker.clock));
        self.retake(peer, false);
    }

    /// An engine for `cfg` continuing from `state` (taken by this peer in a run with the
    /// same topology, model shape, optimizer and data): it computes clock `state.clock`
    /// next, with every awaited node counted as having delivered the clocks before it
    /// (whatever they had sent beyond is recomputed by them; see
    /// [`checkpoint`](crate::checkpoint)).
    ///
    /// # Errors
    /// [`Error::Config`] from [`Config::validate`]; [`Error::Checkpoint`] naming what does
    /// not fit (role, peer, topology, shape, clock past the run, optimizer, model state,
    /// shard).
    pub fn resume(
        cfg: Config,
        model: M,
        shard: Shard<M::Sample>,
        mut state: NodeState,
    ) -> Result<Self> {
        let w = state.w.take().ok_or_else(|| Error::Checkpoint {
            reason: "holds no replica".into(),
        })?;
        let mut engine = Self::new(cfg, model, w.clone(), shard)?;
        state.w = Some(w);
        engine.restore(state)?;
        Ok(engine)
    }

    /// Puts a fresh engine where `state` says (see [`resume`](Self::resume), which is
    /// `new` then this).
    ///
    /// # Errors
    /// As [`resume`](Self::resume); after an error drop the engine.
    pub fn restore(&mut self, mut state: NodeState) -> Result<()> {
        let w = state.w.take().ok_or_else(|| Error::Checkpoint {
            reason: "holds no replica".into(),
        })?;
        let cfg = &self.cfg;
        let dim = self.side.replica.dim();
        state.w = Some(w);
        state.check(Role::Peer, cfg.id, &cfg.in_neighbors, dim, cfg.clocks)?;
        let w = state.w.take().expect("just put back");
        if self.worker.has_run() || !self.side.pending.is_empty() {
            return Err(Error::Checkpoint {
                reason: format!("cannot be restored into {} after it has run", cfg.id),
            });
        }
        self.side.replica = Replica::new(w)?;
        self.side.stepper.restore_state(&state.optimizer)?;
        match (
            &mut self.side.compressor,
            &mut self.side.prioritizer,
            &mut self.side.tree,
        ) {
            (Some(c), _, _) => c.restore_state(&state.compressor, dim.0, dim.1)?,
            (None, Some(p), _) => p.restore_state(&state.compressor, dim.0, dim.1)?,
            (None, None, Some(t)) => {
                t.restore_state(&state.compressor, dim.0, dim.1, state.clock)?;
            }
            (None, None, None) if !state.compressor.is_empty() => {
                return Err(Error::Checkpoint {
                    reason: "written by a run with --compress, --prioritize or --partial \
                             tree (what it held back would be lost); this run does none"
                        .into(),
                });
            }
            (None, None, None) => {}
        }
        match &mut self.side.mixer {
            Some(_) if state.mixer.is_empty() => {
                return Err(Error::Checkpoint {
                    reason: "written by a run outside the gossip mode (no copies of the \
                             neighbours' replicas); this run gossips (--partial paper \
                             resumes it)"
                        .into(),
                });
            }
            Some(m) => m.restore_state(&state.mixer)?,
            None if !state.mixer.is_empty() && !self.cfg.timing_only => {
                return Err(Error::Checkpoint {
                    reason: "written by a run in the gossip mode; this run does not gossip \
                             (its copies of the neighbours' replicas would be lost)"
                        .into(),
                });
            }
            None => {}
        }
        match &mut self.side.relay {
            Some(_) if state.relay.is_empty() && !self.cfg.timing_only => {
                return Err(Error::Checkpoint {
                    reason: "written by a run without --relay (no batches kept for the relay \
                             trees); this run relays"
                        .into(),
                });
            }
            Some(r) if !state.relay.is_empty() => {
                r.restore_state(&state.relay, dim.0, dim.1)?;
                // The kept batches go to the children again, ahead of this peer's clock t
                // (they drop those they have): what was in flight at the cut.
                let carrier = state.clock;
                for (to, batch) in r.held_for_children() {
                    let msg = Message::Relayed { carrier, batch };
                    self.worker.metrics.bytes_sent +=
                        wire::encoded_len_with(&msg, self.side.wire) as u64;
                    self.worker.outputs.push_back(Output { to, msg });
                }
            }
            None if !state.relay.is_empty() => {
                return Err(Error::Checkpoint {
                    reason: "written by a run with --relay; this run does not relay (the \
                             batches still travelling its trees would be lost)"
                        .into(),
                });
            }
            _ => {}
        }
        self.side.sent_own = state.clock;
        self.worker.restore(&state, state.clock)
    }

    /// The peer's state now, as [`Event::Checkpoint`] would carry it (for tests and tools;
    /// a running peer's state is only a consistent cut at its checkpoint clocks).
    pub fn state(&self) -> NodeState {
        let mut state = self.worker.state(Role::Peer, Default::default());
        Side::<M>::snapshot(&self.side, &mut state);
        state
    }

    /// Evaluates with `evaluator` every `eval_every` clocks and at the end.
    pub fn with_evaluator(mut self, evaluator: Box<dyn Evaluator>) -> Self {
        self.worker.set_evaluator(evaluator);
        self
    }

    /// Takes a fresh engine apart (for [`fms::Client::from_engine`](crate::fms::Client)):
    /// its configuration, model, shard, evaluator and initial replica.
    ///
    /// # Errors
    /// [`ConfigError::AlreadyRan`] if the engine has already stepped or received anything.
    pub(crate) fn into_parts(self) -> Result<(Config, WorkerParts<M>, Replica)> {
        if self.worker.has_run() || !self.side.pending.is_empty() {
            return Err(ConfigError::AlreadyRan {
                id: self.cfg.id,
                clock: self.worker.clock,
            }
            .into());
        }
        Ok((self.cfg, self.worker.into_parts(), self.side.replica))
    }

    /// Sends (and applies) factor values as `dtype`; see [`Config::wire`].
    pub fn with_wire(mut self, dtype: wire::Dtype) -> Self {
        self.cfg.wire = dtype;
        self.side.wire = dtype;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The next clock to compute (= clocks completed).
    pub fn clock(&self) -> u64 {
        self.worker.clock
    }

    /// The local replica.
    pub fn replica(&self) -> &Replica {
        &self.side.replica
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
    pub fn last_evaluation(&self) -> Option<&Evaluation> {
        self.worker.last_eval.as_ref()
    }

    /// Whether the run is complete.
    pub fn is_done(&self) -> bool {
        self.worker.done
    }

    /// In-neighbours this peer is waiting on, with the clocks each has delivered; empty
    /// when it is not blocked. For error messages on timeouts.
    pub fn waiting_on(&self) -> Vec<(PeerId, u64)> {
        let mut waits = self.worker.waiting_on();
        if let Some(relay) = &self.side.relay
            && waits.is_empty()
            && !self.worker.done
            && self.worker.clock >= self.worker.plan.clocks
        {
            // Every in-neighbour's own batches are in: relayed ones are missing, named by
            // the peer that relays them and how many clocks of them it has delivered.
            waits = relay.short_of(self.worker.plan.clocks);
        }
        waits
    }

    /// The state to save when the node fails before its next clock (a lost neighbour under
    /// [`PeerLoss::Fail`], a timeout): its state at the start of its current clock `t` when
    /// that start was a cut — every update of the clocks `< t` applied and nothing later
    /// (always under BSP; under SSP when every awaited node had delivered them) — and it
    /// checkpoints (if `t` was a checkpoint clock, the same state again). W and the
    /// optimizer state have not changed since (updates are applied when a clock starts),
    /// so the state is exactly the one a checkpoint at `t` holds. In the gossip mode, none
    /// once the clock's consensus step has changed W (or before the consensus messages a
    /// cut needs are in): the last checkpoint stands.
    pub fn final_state(&self) -> Option<NodeState> {
        if self.rejoining || self.worker.done {
            return None;
        }
        let mut state = self.worker.cut.clone()?;
        // The gossip mode's consensus step of the cut's clock changes W after the cut, and
        // the cut needs the consensus messages of the clock before it.
        if self.side.last_gossip == Some(state.clock)
            || !Side::<M>::cut_ready(&self.side, state.clock)
        {
            return None;
        }
        Side::<M>::snapshot(&self.side, &mut state);
        Some(state)
    }

    /// Peer `peer` is gone. With [`PeerLoss::Continue`] the engine stops waiting for it
    /// and stops sending to it (frames queued for it are dropped; batches received from it
    /// stay and are applied) and records the loss in its metrics; returns whether `peer`
    /// was a neighbour. The caller gives the engine new neighbours, if any, with
    /// [`set_out_neighbors`](Self::set_out_neighbors).
    ///
    /// # Errors
    /// [`Error::PeerLost`] with [`PeerLoss::Fail`] when `peer` is a neighbour (nothing
    /// changes).
    pub fn peer_lost(&mut self, peer: PeerId) -> Result<bool> {
        let neighbour = self.worker.inbound.awaits(peer) || self.side.out_neighbors.contains(&peer);
        // A neighbour that delivered every clock has finished, not died (its stream ends).
        if self.worker.done || self.worker.finished_by(peer) || peer == self.cfg.id {
            return Ok(false);
        }
        if !neighbour {
            // A stream of a node this peer no longer waits for ended: not a loss it can
            // tell (the node's own neighbours report real ones: `loss_reported`).
            return Ok(false);
        }
        if self.cfg.on_peer_loss == PeerLoss::Fail {
            return Err(Error::PeerLost {
                me: self.cfg.id,
                peer,
                clock: self.worker.clock,
                why: "the run's policy is to fail (BSP; give --on-peer-loss continue to train \
                      on without it)",
            });
        }
        self.check_quorum(peer)?;
        self.side.parts_in.remove(&peer);
        self.worker.forget(peer, &mut self.side.out_neighbors);
        self.cfg.in_neighbors.retain(|&p| p != peer);
        self.cfg.out_neighbors.retain(|&p| p != peer);
        if let Some(m) = &mut self.side.mixer {
            m.forget(peer);
        }
        self.retake(peer, true);
        self.retree();
        self.reroute();
        Ok(true)
    }

    /// Peer `peer` finished the run and sends nothing more (see
    /// [`StateMachine::peer_finished`](crate::StateMachine::peer_finished)): if it is
    /// awaited, it counts as having delivered every clock, so this node neither waits for
    /// it nor counts it lost. Clocks it sent while this node was out of its topology (this
    /// node was away, or a repair had parted them) are not applied here.
    pub fn peer_finished(&mut self, peer: PeerId) {
        self.worker.inbound.finished(peer, self.worker.plan.clocks);
    }

    /// Tree mode: lays the tree out again over the peers not lost ([`crate::tree`]'s
    /// peer loss): stops waiting for the neighbours it no longer has, awaits the new ones,
    /// hands them the down messages it holds, makes a new root's empty ones, and takes the
    /// frames new neighbours sent before this peer knew of the loss.
    fn retree(&mut self) {
        let (j, d) = self.side.replica.dim();
        let Some(tree) = &mut self.side.tree else {
            return;
        };
        let r = tree.retree(&self.gone, j, d);
        let near = tree.neighbors();
        let held = tree.held_downs();
        let parent = tree.parent();
        let children = tree.children().to_vec();
        let downs_next = tree.downs_next();
        for &p in &r.dropped {
            self.worker.inbound.remove(p);
            self.former.insert(p);
        }
        // The barrier waits for the down messages: the parent's, or at the root its own
        // (its adopted children, awaited from their first frame, do not hold it).
        let me = self.cfg.id;
        self.worker
            .inbound
            .hold_at(parent.unwrap_or(me), downs_next);
        for c in children {
            self.worker.inbound.add_fresh(c, self.worker.clock);
        }
        for p in &near {
            self.former.remove(p);
        }
        self.side.out_neighbors.clone_from(&near);
        self.cfg.out_neighbors.clone_from(&near);
        self.cfg.in_neighbors.clone_from(&near);
        for &to in &r.new_neighbors {
            for part in &held {
                let msg = Message::Sum {
                    down: true,
                    batch: Arc::clone(&part.batch),
                    stats: Arc::clone(&part.stats),
                };
                self.worker.metrics.bytes_sent += wire::encoded_len(&msg) as u64;
                self.worker.outputs.push_back(Output { to, msg });
            }
        }
        if let Some((to, part)) = r.status {
            let msg = Message::Sum {
                down: false,
                batch: part.batch,
                stats: part.stats,
            };
            self.worker.metrics.bytes_sent += wire::encoded_len(&msg) as u64;
            self.worker.outputs.push_back(Output { to, msg });
        }
        for part in r.fillers {
            self.side.tree_down(&mut self.worker, part, None);
        }
        for p in near {
            for msg in self.early.remove(&p).unwrap_or_default() {
                // Refused now: one the sender should not have sent (as if it came after).
                let _ = self.receive(p, msg);
            }
        }
    }

    /// Relay: computes every origin's tree again without the lost peers
    /// ([`crate::Routes::without`]) and hands each peer that became this peer's child in an
    /// origin's tree the batches of that origin it holds (the receiver drops those it has).
    ///
    /// The arcs left may not connect the survivors (if only for a peer dead but not yet
    /// known lost): [`Relay::check_cut`] stops the peer if that lasts.
    fn reroute(&mut self) {
        let Some(relay) = &mut self.side.relay else {
            return;
        };
        let hand = relay.reroute(&self.gone, self.worker.clock);
        // In this peer's stream after the own batches it has sent, as a forward of now.
        let carrier = self.side.sent_own;
        for (to, batch) in hand {
            let msg = Message::Relayed { carrier, batch };
            self.worker.metrics.bytes_sent += wire::encoded_len_with(&msg, self.side.wire) as u64;
            self.worker.metrics.relayed_sent += 1;
            self.worker.outputs.push_back(Output { to, msg });
        }
    }

    /// The peers this one counts in (itself included) and the run's peers, as the
    /// majority rule ([`Config::quorum`]) counts them.
    pub fn counted_in(&self) -> (usize, usize) {
        let peers = self.cfg.peers;
        (peers.saturating_sub(self.gone.len()), peers)
    }

    /// Counts `peer` lost and refuses to go on when the peers left (this one included)
    /// are no strict majority of the run's ([`Config::quorum`]), or, whatever the quorum
    /// rule, when this peer is left alone having never received a frame from anyone
    /// ([`Error::Isolated`]).
    fn check_quorum(&mut self, peer: PeerId) -> Result<()> {
        self.gone.insert(peer);
        let peers = self.cfg.peers;
        let alive = peers.saturating_sub(self.gone.len());
        if alive <= 1 && peers > 1 && self.worker.metrics.bytes_received == 0 {
            return Err(Error::Isolated {
                me: self.cfg.id,
                others: peers - 1,
                clock: self.worker.clock,
            });
        }
        if !self.cfg.quorum || 2 * alive > peers {
            return Ok(());
        }
        Err(Error::Minority {
            me: self.cfg.id,
            peers,
            lost: self.gone.len(),
            names: self
                .gone
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            clock: self.worker.clock,
        })
    }

    /// Another node reports `peer` lost (or `peer` announced it leaves): as
    /// [`peer_lost`](Self::peer_lost) when it is a neighbour; otherwise nothing to stop
    /// waiting for, but the loss is recorded and the peer's shard may be this peer's to
    /// take over ([`with_takeover`](Self::with_takeover)).
    ///
    /// # Errors
    /// As [`peer_lost`](Self::peer_lost).
    pub fn loss_reported(&mut self, peer: PeerId) -> Result<bool> {
        let neighbour = self.worker.inbound.awaits(peer) || self.side.out_neighbors.contains(&peer);
        if neighbour {
            return self.peer_lost(peer);
        }
        if !self.worker.done && peer != self.cfg.id && self.cfg.on_peer_loss == PeerLoss::Continue {
            self.check_quorum(peer)?;
            if self.side.tree.is_some() {
                // Every loss reshapes the tree.
                self.worker.record_loss(peer);
                self.retree();
            }
            if self.side.relay.is_some() {
                // Every loss may cut some origin's tree.
                self.worker.record_loss(peer);
                self.reroute();
            }
        }
        if !self.worker.done
            && peer != self.cfg.id
            && self.cfg.on_peer_loss == PeerLoss::Continue
            && self.takeover.is_some()
        {
            self.worker.record_loss(peer);
            self.retake(peer, true);
        }
        Ok(false)
    }

    /// Ends the run at clock `t` (a coordinated stop: every node of the run gets the same
    /// `t`) with a checkpoint of clock `t` if the peer checkpoints, so that `--resume`
    /// continues from there; returns the clock it stops at (its own, if it is already past
    /// `t`). Frames of clocks `≥ t` are then refused as beyond the run.
    pub fn stop_at(&mut self, t: u64) -> u64 {
        self.worker.stop_at(t)
    }

    /// New neighbours after a topology repair (the transport computed them from the set
    /// of lost peers, the same on every survivor): batches go to `out` from the next clock
    /// on; a new in-neighbour is awaited from its first frame (of whatever clock it has
    /// reached); an in-neighbour no longer in `inn` is no longer awaited. `topology`
    /// identifies the repaired graph (recorded in the metrics, so runs can check that every
    /// survivor used the same).
    ///
    /// In the tree mode the engine lays the tree out itself when it learns of a loss
    /// ([`crate::tree::Config::repaired`] gives a transport the same lists): this records
    /// `topology` only.
    pub fn set_neighbors(&mut self, out: Vec<PeerId>, inn: Vec<PeerId>, topology: String) {
        if self.side.tree.is_some() || self.side.relay.is_some() {
            self.worker.metrics.topology = Some(topology);
            return;
        }
        let me = self.cfg.id;
        let out: Vec<PeerId> = out.into_iter().filter(|&p| p != me).collect();
        let inn: Vec<PeerId> = inn.into_iter().filter(|&p| p != me).collect();
        let gone: Vec<PeerId> = self
            .worker
            .inbound
            .peers()
            .iter()
            .copied()
            .filter(|p| !inn.contains(p))
            .collect();
        for p in gone {
            self.worker.inbound.remove(p);
            self.former.insert(p);
            if let Some(m) = &mut self.side.mixer {
                // Its copy would get no more consensus messages.
                m.forget(p);
            }
        }
        for &p in &inn {
            self.worker.inbound.add_fresh(p, self.worker.clock);
            self.former.remove(&p);
        }
        if self.side.gossip_rank > 0 {
            let new = out.iter().filter(|p| !self.side.out_neighbors.contains(p));
            self.side.copy_due.extend(new);
        }
        self.side.out_neighbors.clone_from(&out);
        self.cfg.out_neighbors = out;
        self.cfg.in_neighbors = inn.clone();
        self.worker.metrics.topology = Some(topology);
        // Frames that arrived before this peer repaired: the sender is awaited now.
        for p in inn {
            for msg in self.early.remove(&p).unwrap_or_default() {
                // A frame refused now is one the sender should not have sent (it would
                // have been refused had it come after the repair): dropped, as then.
                let _ = self.receive(p, msg);
            }
        }
    }

    /// Takes a message received from peer `from`.
    ///
    /// The batch must come from an in-neighbour, be its next clock (links are FIFO), fit
    /// the replica's shape and hold finite values. A refused message changes nothing.
    /// Receiving takes no time of its own (`time` is for the trait's other nodes).
    ///
    /// # Errors
    /// [`Error::UnexpectedMessage`] for anything but [`Message::Factors`] (the FMS
    /// messages), [`Error::UnknownPeer`], [`Error::BadClock`], and the validation errors
    /// of [`FactorBatch::validate`].
    pub fn on_message(
        &mut self,
        from: PeerId,
        msg: Message,
        time: &mut dyn TimeSource,
    ) -> Result<()> {
        let _ = time;
        if self.rejoining {
            // Before the state it rejoins with, nothing is expected: each in-neighbour is
            // awaited from its first frame after it.
            return Ok(());
        }
        let down = matches!(msg, Message::Sum { down: true, .. });
        let near = self
            .side
            .tree
            .as_ref()
            .is_some_and(|t| t.neighbors().contains(&from));
        if down && (near || self.former.contains(&from)) {
            // The tree mode's down messages: taken from a neighbour or a former one alike.
            return self.receive(from, msg);
        }
        if self.gone.contains(&from) && !self.worker.inbound.awaits(from) {
            // Sent before the sender was lost (its last frames in flight): dropped, as
            // every frame of a lost peer after its loss is.
            return Ok(());
        }
        if self.former.contains(&from) && !self.worker.inbound.awaits(from) {
            // Sent before the sender learned of a topology change that dropped this arc
            // (it was an in-neighbour): nothing to apply, nothing wrong.
            return Ok(());
        }
        if !self.worker.inbound.awaits(from)
            && from != self.cfg.id
            && from.index() < self.cfg.peers
            && match &msg {
                Message::Factors { batch, .. } | Message::Part { batch } => batch.origin == from,
                Message::Copy { origin, .. } => *origin == from,
                Message::Sum {
                    down: false, batch, ..
                } => batch.origin == from,
                Message::Sum { down: true, .. } => true,
                _ => false,
            }
        {
            // Not an in-neighbour (yet): a sender that repaired the topology after a loss
            // before this peer heard of it. Held until this peer's repair says whether
            // the arc is real.
            let held = self.early.entry(from).or_default();
            if held.len() < EARLY_FRAMES {
                held.push(msg);
                return Ok(());
            }
        }
        self.receive(from, msg)
    }

    /// An early part of an in-neighbour's clock ([`Message::Part`]): checked as its clock's
    /// batch would be (next clock of an awaited node, shape, finite values) and kept with
    /// the clock's earlier parts until the last comes.
    fn receive_part(
        &mut self,
        from: PeerId,
        batch: &Arc<FactorBatch>,
        msg: &Message,
    ) -> Result<()> {
        let n = self.cfg.send_parts;
        if n < 2 {
            return Err(Error::UnexpectedMessage {
                from,
                kind: msg.kind(),
                role: "SFB peer of a run that sends its clocks whole (--send-parts 1)",
            });
        }
        self.worker
            .inbound
            .check(from, batch.origin, batch.clock, self.cfg.clocks)?;
        let (j, d) = self.side.replica.dim();
        batch.validate(j, d)?;
        let parts = self.side.parts_in.get(&from).map_or(0, |held| held.1);
        if parts + 1 >= n {
            return Err(Error::BadPart {
                origin: from,
                clock: batch.clock,
                reason: format!(
                    "part {} of a clock this run sends in {n} (--send-parts): the last part is \
                     sent as the clock's factors",
                    parts + 1
                ),
            });
        }
        let joined = self.join_part(from, batch)?;
        self.worker.metrics.bytes_received += wire::encoded_len_with(msg, self.cfg.wire) as u64;
        self.side.parts_in.insert(from, joined);
        Ok(())
    }

    /// `from`'s parts of its clock in progress with `part` appended, and how many parts
    /// that makes; on an error what was held stays held.
    fn join_part(&mut self, from: PeerId, part: &FactorBatch) -> Result<(FactorBatch, usize)> {
        let (mut all, n) = self
            .side
            .parts_in
            .remove(&from)
            .unwrap_or_else(|| (FactorBatch::empty_like(part), 0));
        match self
            .check_part_len(&all, part)
            .and_then(|()| all.append(part))
        {
            Ok(()) => Ok((all, n + 1)),
            Err(e) => {
                if n > 0 {
                    self.side.parts_in.insert(from, (all, n));
                }
                Err(e)
            }
        }
    }

    /// Refuses a part that would give its clock more pairs than a mini-batch has samples
    /// (a separable model writes one pair per sample).
    fn check_part_len(&self, held: &FactorBatch, part: &FactorBatch) -> Result<()> {
        let k = self.cfg.batch_size;
        if held.len() + part.len() > k {
            return Err(Error::BadPart {
                origin: part.origin,
                clock: part.clock,
                reason: format!(
                    "its parts hold {} pairs, more than the mini-batch's {k} samples",
                    held.len() + part.len()
                ),
            });
        }
        Ok(())
    }

    /// [`on_message`](Self::on_message) past the topology checks.
    fn receive(&mut self, from: PeerId, msg: Message) -> Result<()> {
        if let Message::Stop { origin, stop } = &msg {
            if *origin != from || !self.worker.inbound.awaits(from) {
                return Err(Error::NotAnInNeighbour {
                    from,
                    reason: "a stop (--until) comes from an in-neighbour",
                });
            }
            self.worker.metrics.bytes_received += wire::encoded_len(&msg) as u64;
            self.worker.offer_stop(*stop, from, true)?;
            return Ok(());
        }
        if let Message::Relayed { carrier, batch } = &msg {
            return self.receive_relayed(from, *carrier, batch, &msg);
        }
        if let Message::Sum { down, batch, stats } = &msg {
            return self.receive_sum(from, *down, batch, stats, &msg);
        }
        if let Message::Copy { origin, clock, w } = &msg {
            if self.side.gossip_rank == 0 || *origin != from {
                return Err(Error::UnexpectedMessage {
                    from,
                    kind: msg.kind(),
                    role: "SFB peer outside the gossip mode, or not from the copy's owner",
                });
            }
            if !self.worker.inbound.awaits(from) {
                // Not an in-neighbour any more: nothing to mix with.
                return Ok(());
            }
            if let Some(m) = &mut self.side.mixer {
                m.install(from, *clock, w.as_ref().clone())?;
            }
            self.worker.metrics.bytes_received += wire::encoded_len(&msg) as u64;
            return Ok(());
        }
        if let Message::Mix { batch } = &msg {
            if self.side.gossip_rank == 0 {
                return Err(Error::UnexpectedMessage {
                    from,
                    kind: msg.kind(),
                    role: "SFB peer outside the gossip mode",
                });
            }
            match &mut self.side.mixer {
                Some(m) => m.receive(from, Arc::clone(batch))?,
                None => self.side.timing_folds += batch.len(),
            }
            self.worker.metrics.bytes_received += wire::encoded_len(&msg) as u64;
            return Ok(());
        }
        if let Message::Part { batch } = &msg {
            return self.receive_part(from, batch, &msg);
        }
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
        let i = self
            .worker
            .inbound
            .check(from, batch.origin, batch.clock, self.cfg.clocks)?;
        let (j, d) = self.side.replica.dim();
        batch.validate(j, d)?;
        let whole;
        let batch = if self.cfg.send_parts > 1 {
            // The clock's last part: the clock is its earlier parts' pairs and these.
            let n = self.side.parts_in.get(&from).map_or(0, |held| held.1);
            if n + 1 != self.cfg.send_parts {
                return Err(Error::BadPart {
                    origin: from,
                    clock: batch.clock,
                    reason: format!(
                        "the clock's last part came after {n} earlier parts; this run sends \
                         a clock in {} (--send-parts)",
                        self.cfg.send_parts
                    ),
                });
            }
            whole = Arc::new(self.join_part(from, batch)?.0);
            &whole
        } else {
            batch
        };
        self.side.steps.check(from, batch)?;
        self.worker.metrics.max_step_ratio = self.side.steps.max_ratio();
        self.worker.metrics.bytes_received += wire::encoded_len_with(&msg, self.cfg.wire) as u64;
        self.worker
            .inbound
            .deliver_clock(i, batch.clock, *mean_iter_us);
        self.side.pending.insert(
            (batch.clock, batch.origin, batch.clock),
            (Arc::clone(batch), false),
        );
        Ok(())
    }

    /// [`receive`](Self::receive) of a [`Message::Sum`] (tree mode, [`crate::tree`]).
    fn receive_sum(
        &mut self,
        from: PeerId,
        down: bool,
        batch: &Arc<FactorBatch>,
        stats: &Arc<[f32]>,
        msg: &Message,
    ) -> Result<()> {
        let Some(tree) = &self.side.tree else {
            return Err(Error::UnexpectedMessage {
                from,
                kind: msg.kind(),
                role: "SFB peer outside the tree mode",
            });
        };
        let refuse = |reason: String| Error::BadTree {
            from,
            clock: batch.clock,
            reason,
        };
        let (j, d) = self.side.replica.dim();
        if down {
            // From a neighbour, or one that was before a repair (what it had sent then): a
            // copy changes nothing, and one this peer lacked is the same for every peer.
            if !tree.neighbors().contains(&from) && !self.former.contains(&from) {
                return Err(refuse(format!(
                    "a down message comes from a neighbour in the tree ({:?})",
                    tree.neighbors()
                )));
            }
            if batch.origin.index() >= self.cfg.peers {
                return Err(refuse(format!(
                    "its origin {} is no peer of the run",
                    batch.origin
                )));
            }
            if batch.clock >= self.cfg.clocks {
                return Err(refuse(format!(
                    "beyond the run's {} clocks",
                    self.cfg.clocks
                )));
            }
            tree.check_stats(stats).map_err(refuse)?;
            batch.validate(j, d)?;
            self.worker.metrics.bytes_received += wire::encoded_len(msg) as u64;
            let part = crate::tree::Part {
                batch: Arc::clone(batch),
                stats: Arc::clone(stats),
            };
            self.side.tree_down(&mut self.worker, part, Some(from));
            return Ok(());
        }
        if batch.is_empty()
            && !self.worker.inbound.is_fresh(from)
            && self
                .worker
                .inbound
                .delivered_by(from)
                .is_some_and(|n| batch.clock < n)
        {
            // A child's word of where it is after a repair (`tree::Retree::status`), to a
            // parent that never stopped awaiting it: nothing new.
            return Ok(());
        }
        let i = self
            .worker
            .inbound
            .check(from, from, batch.clock, self.cfg.clocks)?;
        batch.validate(j, d)?;
        let part = crate::tree::Part {
            batch: Arc::clone(batch),
            stats: Arc::clone(stats),
        };
        if let Some(tree) = &mut self.side.tree {
            tree.up(from, part)?;
        }
        self.worker.metrics.bytes_received += wire::encoded_len(msg) as u64;
        self.worker.inbound.deliver_clock(i, batch.clock, 0);
        Ok(())
    }

    /// [`receive`](Self::receive) of a [`Message::Relayed`].
    fn receive_relayed(
        &mut self,
        from: PeerId,
        carrier: u64,
        batch: &Arc<FactorBatch>,
        msg: &Message,
    ) -> Result<()> {
        let refuse = |reason: &str| Error::BadRelay {
            from,
            origin: batch.origin,
            clock: batch.clock,
            reason: reason.into(),
        };
        let Some(relay) = &self.side.relay else {
            return Err(refuse(
                "this peer does not relay (the run is without --relay)",
            ));
        };
        let delivered = self
            .worker
            .inbound
            .delivered_by(from)
            .ok_or_else(|| refuse("the sender is not an in-neighbour of this peer"))?;
        let take = relay.check(from, carrier, batch, delivered, self.worker.plan.clocks)?;
        if take == Take::Copy {
            self.worker.metrics.bytes_received += wire::encoded_len_with(msg, self.cfg.wire) as u64;
            return Ok(());
        }
        let (j, d) = self.side.replica.dim();
        batch.validate(j, d)?;
        self.side.steps.check(from, batch)?;
        self.worker.metrics.max_step_ratio = self.side.steps.max_ratio();
        self.worker.metrics.bytes_received += wire::encoded_len_with(msg, self.cfg.wire) as u64;
        self.worker.metrics.relayed_received += 1;
        if let Some(relay) = &mut self.side.relay {
            if let Take::After { missed } = take {
                self.worker.metrics.relay_missed += missed;
            }
            relay.next[batch.origin.index()] = batch.clock + 1;
        }
        self.side.pending.insert(
            (carrier, batch.origin, batch.clock),
            (Arc::clone(batch), false),
        );
        Ok(())
    }

    /// The next frame to send, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.worker.outputs.pop_front()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.worker.poll_event()
    }

    /// Tries to make progress; every duration it records is read from `time`.
    ///
    /// # Errors
    /// [`Error::Model`] if `compute_sv` fails or produces invalid factors; kernel errors
    /// (which cannot happen for validated batches). After an error the engine should be
    /// dropped.
    pub fn on_tick(&mut self, time: &mut dyn TimeSource) -> Result<Progress> {
        if self.rejoining {
            return Ok(Progress::Blocked);
        }
        self.worker.step(&mut self.side, time)
    }

    /// Runs the evaluator on the current replica (timed as `eval_s`).
    pub fn evaluate(&mut self, time: &mut dyn TimeSource) -> Option<Evaluation> {
        self.worker.evaluate(self.side.replica.w(), time)
    }

    /// After [`Progress::Done`]: evaluates the final replica and emits the final record.
    pub fn finish(&mut self, time: &mut dyn TimeSource) -> Option<Evaluation> {
        self.worker.finish(self.side.replica.w(), time)
    }
}
