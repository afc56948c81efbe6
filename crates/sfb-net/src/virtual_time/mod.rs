//! A deterministic virtual-time driver: P sans-IO nodes on one thread, joined by seeded
//! FIFO links, with a virtual clock instead of a wall clock (raft-rs's test-network
//! pattern). No threads, no sleeps, no wall clock: the same seed and nodes give bitwise
//! the same run, records and virtual times included.
//!
//! # The model
//! - **Nodes** are any [`StateMachine`] (an SFB [`Engine`](sfb_core::Engine), or an FMS
//!   server and clients as [`FmsNode`]). Each node has its own virtual clock, a
//!   [`VirtualClock`] the driver passes to every call: it reads the node's current
//!   virtual time and, on [`TimeSource::after`], advances it by the modelled cost of the
//!   work ([`Costs`]) plus any [`Stragglers`] delay on compute. So the nodes' own metrics
//!   (`compute_s`, `apply_s`, `wait_s`, `wall_s`) are in virtual seconds.
//! - **Links** are directed and FIFO. A frame sent at virtual time `t` on `p → q` arrives
//!   at `max(t + δ, previous arrival on p → q)`, with `δ` drawn from [`Latency`] by the
//!   link's own ChaCha8 stream (seeded from `(seed, p, q)`): delays are random, yet a
//!   later frame never overtakes an earlier one.
//! - **Events** are frame arrivals and node wake-ups in one priority queue ordered by
//!   `(virtual time, sequence number)`; ties go to the event scheduled first.
//! - **A node's step** is a turn of the same driver loop the threaded transports run
//!   ([`crate::driver::NodeLoop`]: its delivery, its membership view, its outbox, its
//!   records), on the node's virtual clock. When a node wakes at `t` (its clock moves to
//!   `max(own, t)`), the driver hands the loop every frame that has arrived
//!   ([`NodeLoop::take`]), takes one turn (one tick) and sends the outputs stamped with
//!   the node's clock after the tick. [`Turn::Again`] (a step) schedules its next wake-up
//!   at that time, so frames arriving while it computed are delivered before its next
//!   step; [`Turn::Wait`] leaves it idle until a frame arrives; [`Turn::Done`] means the
//!   loop called [`finish`](StateMachine::finish). Membership news (a crash detected, a
//!   cut, a return) is handed to the node's loop ([`NodeLoop::told_lost`],
//!   [`NodeLoop::on_news`]), which decides by the node's [`sfb_core::Membership`] as on
//!   every transport.
//! - **Pauses** ([`Pause`]): a paused node starts no step and takes no frames; they queue
//!   and are handed over when the pause ends. A step under way when a pause starts
//!   completes (pauses act between steps).
//! - **Slow links** ([`Slow`]): over a span, a node's frames (sent or received) take a
//!   multiple of the link delay and of the sender's NIC time.
//! - **Losses** ([`Loss`]): lost frames are never delivered; see [`Loss`] for what the
//!   nodes then do.
//! - **Crashes** ([`Crash`]): a crashed node stops for good; [`Config::detect_after`]
//!   later every running node is told it is lost, and rewired by the
//!   [`repair`](Network::repair) function if one is given. A node that the loss leaves
//!   without a majority (or whose policy is to fail) stops there: its
//!   [`NodeRun::failed`] says why, and the others go on.
//! - **Restarts** ([`Network::restart`]): a crashed node comes back a while after its crash
//!   as a fresh node waiting to rejoin ([`StateMachine::rejoining`]). Every running node
//!   learns it is back ([`sfb_core::wire::Notice::Joined`]); those that send to it again
//!   hand it their state over their link ([`sfb_core::wire::Message::State`], its bytes
//!   costed like any frame); it adopts the first ([`NodeRun::rejoined`]). Frames of its
//!   former life still on the way, to it or from it, are dropped.
//! - **No hang.** When no event is pending and some node is not done, every such node is
//!   blocked and nothing can change: the run fails with [`Error::Stalled`], naming each
//!   blocked node and whom it waits on. The number of events is capped
//!   ([`Config::max_events`]).
//!
//! # Example: three least-squares peers, BSP, random delays, a slow peer
//! ```
//! use std::time::Duration;
//! use ndarray::{Array2, ArrayView2};
//! use sfb_core::{Config, Engine, Model, ModelError, PeerId, Shard, Stragglers, SvList};
//! use sfb_net::virtual_time::{Latency, Network};
//!
//! /// Least squares with J = 1: u = w·x − y, v = x.
//! struct Ls;
//! impl Model for Ls {
//!     type Sample = (Vec<f32>, f32);
//!     fn compute_sv(&mut self, w: ArrayView2<'_, f32>, batch: &[&Self::Sample], sv: &mut SvList)
//!         -> Result<(), ModelError> {
//!         for (x, y) in batch {
//!             let pred: f32 = w.row(0).iter().zip(x).map(|(a, b)| a * b).sum();
//!             sv.push_dense(&[pred - y], x)?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let data = |p: usize| Shard::new(vec![(vec![1.0, p as f32], 1.0); 4], p as u64);
//! let engines: Vec<_> = (0..3)
//!     .map(|p| {
//!         let mut cfg = Config::full_broadcast(PeerId(p as u32), 3);
//!         cfg.clocks = 5;
//!         Engine::new(cfg, Ls, Array2::zeros((1, 2)), data(p)).unwrap()
//!     })
//!     .collect();
//! let slow = Duration::from_millis(10);
//! let run = Network::new(engines)
//!     .seed(7)
//!     .latency(Latency::uniform(Duration::from_micros(10), Duration::from_millis(2)))
//!     .stragglers(Stragglers::Fixed { peer: PeerId(2), delay: slow })
//!     .run()?;
//! // BSP with full broadcast: every replica is bitwise the same, whatever the delays.
//! let sums: Vec<String> = run.nodes.iter().map(|n| n.node.replica().checksum()).collect();
//! assert!(sums.iter().all(|s| *s == sums[0]));
//! // The run took at least 5 slow steps of virtual time, and the fast peers waited
//! // (virtual seconds) for the slow one.
//! assert!(run.end >= 5 * slow);
//! assert!(run.nodes[0].node.metrics().wait_s > 0.03);
//! assert_eq!(run.nodes[0].records.len(), 6); // one per clock and a final one
//! # Ok::<(), sfb_net::virtual_time::Error>(())
//! ```
//!
//! # Bandwidth, and `sfb sim`
//! With a [`Nic`] model ([`Config::nic`]) every node has one egress and one ingress
//! queue at given rates, and a frame's exact encoded size decides how long it occupies
//! them (see [`Nic`]); the link delay is added in between. This is what `sfb sim` runs:
//! - *Scale*: memory is O(nodes + links in use + frames in flight) (links are created on
//!   first use; records can be left to an [`Observer`] with
//!   [`Config::keep_records`] off); each event costs O(log events in flight).
//! - *Cost model*: [`Costs::of`] maps each [`Work`] to a duration; `sfb sim` fills it from
//!   flop and byte counts at given machine rates, or from a calibration on this machine.
//! - *Faults*: pauses, slow links, losses, crashes and partitions are data in [`Config`], restarts
//!   nodes given to [`Network::restart`].
//! - *Observation*: an [`Observer`] sees every delivery, tick and record (for streaming
//!   metrics or checking invariants) without the driver keeping anything.

mod config;
mod error;
mod fms;
mod host;

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sfb_core::metrics::ClockRecord;
use sfb_core::wire::Message;
use sfb_core::{NodeState, Output, PeerId, Progress, StateMachine, Stragglers, TimeSource, Work};

use crate::driver::{DriveOptions, Egress, Incoming, Links, Log, NodeLoop, Sent, Turn, Wake};

pub use config::{Config, Costs, Crash, CrashAt, Latency, Loss, Nic, Partition, Pause, Slow};
pub use error::{Blocked, Error};
pub use fms::FmsNode;
pub use host::Hosts;
use host::{Calendar, Seat};

/// Result alias of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A node's virtual clock: reads its current virtual time and charges each piece of work
/// its modelled cost ([`Costs::of`]) plus, after compute, the [`Stragglers`] delay.
#[derive(Debug, Clone)]
pub struct VirtualClock {
    now: Duration,
    costs: Costs,
    stragglers: Stragglers,
    /// The node's host, when nodes share hosts ([`Hosts`]).
    seat: Option<Seat>,
}

impl VirtualClock {
    /// A clock at virtual zero.
    pub fn new(costs: Costs, stragglers: Stragglers) -> Self {
        Self {
            now: Duration::ZERO,
            costs,
            stragglers,
            seat: None,
        }
    }

    /// The clock of a node on a shared host.
    fn on_host(mut self, seat: Seat) -> Self {
        self.seat = Some(seat);
        self
    }

    /// Spends `cost` of CPU (at one core's speed) from now: on the node's host's free
    /// cores when it shares a host, else exactly `cost`.
    fn spend(&mut self, cost: Duration) {
        self.now = match &self.seat {
            Some(seat) => seat.run(self.now, cost),
            None => self.now + cost,
        };
    }

    /// Moves the clock forward to `t` (never backwards).
    pub fn advance_to(&mut self, t: Duration) {
        self.now = self.now.max(t);
    }

    /// The current virtual time.
    pub fn time(&self) -> Duration {
        self.now
    }
}

impl TimeSource for VirtualClock {
    fn now(&mut self) -> Duration {
        self.now
    }

    fn after(&mut self, work: Work) -> Duration {
        let cost = self.costs.of(work);
        self.spend(cost);
        if let Work::Compute { peer, clock, .. } = work {
            // A straggler is slow, not busy: its delay holds no core.
            self.now += self.stragglers.delay(peer, clock, cost);
        }
        self.now
    }
}

/// Sees a run as it happens (to check invariants or stream metrics). Every method
/// defaults to doing nothing; `()` observes nothing.
pub trait Observer<N> {
    /// A frame from `from` is about to be handed to `to` at `to`'s virtual time `at`.
    fn on_deliver(&mut self, at: Duration, from: PeerId, to: PeerId, msg: &Message) {
        let _ = (at, from, to, msg);
    }

    /// `nodes[index]` ticked with `progress`; `at` is its virtual time after the tick
    /// (for [`Progress::Stepped`]: when the step it started completed).
    ///
    /// Every node's state can be read from `nodes`, as processed: the driver runs a step
    /// when it starts, so another node's state (its `clock()`, say) may already include a
    /// step that ends after `at` in virtual time. To compare nodes in virtual time, record
    /// the `at` of their ticks.
    fn on_tick(&mut self, at: Duration, index: usize, progress: Progress, nodes: &[N]) {
        let _ = (at, index, progress, nodes);
    }

    /// A node emitted a record.
    fn on_record(&mut self, record: &ClockRecord) {
        let _ = record;
    }

    /// Asked after each record: `true` stops the whole run at once, every node that has
    /// not finished at the same clock, one past the furthest node's
    /// ([`StateMachine::stop_at`]; e.g. when the records can no longer be written).
    fn stop_requested(&mut self) -> bool {
        false
    }
}

impl<N> Observer<N> for () {}

/// How a node found itself cut off from the run ([`NodeRun::cut_off`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutOff {
    /// The peers it still reached were no majority of the run's.
    Minority,
    /// It never reached any peer.
    Isolated,
}

/// One node after the run.
#[derive(Debug)]
pub struct NodeRun<N> {
    /// The node, with its final state and metrics.
    pub node: N,
    /// Its records, in order (empty with [`Config::keep_records`] off).
    pub records: Vec<ClockRecord>,
    /// Virtual time when it finished (after its final record), crashed or stopped.
    pub finished_at: Duration,
    /// It crashed ([`Crash`]).
    pub crashed: bool,
    /// Why it stopped before its end when told of a crash (no majority left, or a
    /// policy to fail).
    pub failed: Option<String>,
    /// It stopped cut off from the run: the peers it still reached were no majority of
    /// the run's ([`sfb_core::Error::Minority`]: the minority side of a partition), or it
    /// never reached any ([`sfb_core::Error::Isolated`]).
    pub cut_off: Option<CutOff>,
    /// The crashed nodes it was told of while it ran, in order (a node back is taken off).
    pub told: Vec<PeerId>,
    /// When it came back after a crash ([`Network::restart`]), or after the partition
    /// that left it a minority healed ([`Network::rejoin_when_healed`]), if it did.
    pub restarted_at: Option<Duration>,
    /// When it stopped cut off as the minority of a partition before it came back when
    /// the partition healed ([`Network::rejoin_when_healed`]), if it did.
    pub paused_cut_off: Option<Duration>,
    /// The state it rejoined with, if it restarted and was taken back.
    pub rejoined: Option<Rejoined>,
    /// Its membership view at the end (lives, the nodes out and how it learned of each).
    pub view: sfb_core::View,
}

/// How a restarted node was taken back ([`NodeRun::rejoined`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Rejoined {
    /// The neighbour whose state it adopted.
    pub from: PeerId,
    /// The clock of that state: the node went on from it.
    pub clock: u64,
    /// When it adopted it.
    pub at: Duration,
    /// Whether its state right after adopting equals the one it was sent (its W bitwise).
    pub equal: bool,
}

/// How a node's neighbours change when nodes are lost: for the node at `index` and the
/// lost nodes so far, its out- and in-neighbours and an identifier of the repaired
/// topology (every survivor computes the same graph); `None` keeps its neighbours.
pub type RepairFn = Box<RepairOf>;

/// The function a [`RepairFn`] holds.
pub type RepairOf =
    dyn Fn(usize, &[PeerId]) -> Option<(Vec<PeerId>, Vec<PeerId>, String)> + Send + Sync;

/// Counts of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames handed to their receivers.
    pub delivered: u64,
    /// Frames lost ([`Loss`]).
    pub dropped: u64,
    /// Events processed (arrivals and wake-ups).
    pub events: u64,
    /// `on_tick` calls.
    pub ticks: u64,
}

/// A completed run.
#[derive(Debug)]
pub struct Outcome<N> {
    /// The nodes, in the order given.
    pub nodes: Vec<NodeRun<N>>,
    /// Virtual time when the last node finished.
    pub end: Duration,
    /// Counts.
    pub stats: Stats,
}

/// P nodes and the [`Config`] of their virtual network; a builder for one run. See the
/// [module docs](self).
pub struct Network<N> {
    nodes: Vec<N>,
    cfg: Config,
    repair: Option<RepairFn>,
    /// Nodes that come back a while after their crash, as `(id, after, node)`.
    restarts: Vec<(PeerId, Duration, N)>,
    /// Nodes that rejoin when the partition that left them a minority heals, if within
    /// the time given.
    heals: Vec<(PeerId, Duration, N)>,
}

impl<N> std::fmt::Debug for Network<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("nodes", &self.nodes.len())
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl<N: StateMachine> Network<N> {
    /// `nodes` (any order; ids must be distinct) with the default [`Config`].
    pub fn new(nodes: Vec<N>) -> Self {
        Self::with_config(nodes, Config::default())
    }

    /// `nodes` with `cfg`.
    pub fn with_config(nodes: Vec<N>, cfg: Config) -> Self {
        Self {
            nodes,
            cfg,
            repair: None,
            restarts: Vec::new(),
            heals: Vec::new(),
        }
    }

    /// The crashed node `node` comes back `after` its crash as `fresh`, a node of the same
    /// id waiting to rejoin (see the [module docs](self)). `after` must exceed
    /// [`Config::detect_after`] (the others count it lost first), and `node` must crash.
    pub fn restart(mut self, node: PeerId, after: Duration, fresh: N) -> Self {
        self.restarts.push((node, after, fresh));
        self
    }

    /// If `node` stops cut off as the minority of a partition ([`CutOff::Minority`]) that
    /// heals at most `within` later, it comes back as `fresh` (a node of the same id
    /// waiting to rejoin) when the partition heals, and rejoins by state transfer as a
    /// restarted node does: the minority pauses and rejoins (a libp2p peer's
    /// `--heal-timeout`), where without this it stays stopped.
    pub fn rejoin_when_healed(mut self, node: PeerId, within: Duration, fresh: N) -> Self {
        self.heals.push((node, within, fresh));
        self
    }

    /// How the survivors of a [`Crash`] are rewired ([`RepairFn`]).
    pub fn repair(mut self, f: RepairFn) -> Self {
        self.repair = Some(f);
        self
    }

    /// Sets [`Config::detect_after`].
    pub fn detect_after(mut self, after: Duration) -> Self {
        self.cfg.detect_after = after;
        self
    }

    /// Adds a [`Crash`] of `node` at `at`.
    pub fn crash(mut self, node: PeerId, at: Duration) -> Self {
        self.cfg.crashes.push(Crash {
            node,
            at: CrashAt::Time(at),
        });
        self
    }

    /// Adds a [`Crash`] of `node` right after it completes `clock`.
    pub fn crash_after_clock(mut self, node: PeerId, clock: u64) -> Self {
        self.cfg.crashes.push(Crash {
            node,
            at: CrashAt::Clock(clock),
        });
        self
    }

    /// The configuration so far.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Sets [`Config::seed`].
    pub fn seed(mut self, seed: u64) -> Self {
        self.cfg.seed = seed;
        self
    }

    /// Sets [`Config::latency`].
    pub fn latency(mut self, latency: Latency) -> Self {
        self.cfg.latency = latency;
        self
    }

    /// Sets [`Config::nic`].
    pub fn nic(mut self, nic: Nic) -> Self {
        self.cfg.nic = nic;
        self
    }

    /// Sets [`Config::costs`].
    pub fn costs(mut self, costs: Costs) -> Self {
        self.cfg.costs = costs;
        self
    }

    /// Sets [`Config::stragglers`].
    pub fn stragglers(mut self, stragglers: Stragglers) -> Self {
        self.cfg.stragglers = stragglers;
        self
    }

    /// Adds a [`Partition`]: `side` and the other nodes cannot reach each other from
    /// `from` until `until`.
    pub fn partition(mut self, side: Vec<PeerId>, from: Duration, until: Duration) -> Self {
        self.cfg.partitions.push(Partition { side, from, until });
        self
    }

    /// Makes `node`'s links `factor` times slower from `from` until `until` ([`Slow`]).
    pub fn slow(mut self, node: PeerId, from: Duration, until: Duration, factor: f64) -> Self {
        self.cfg.slow.push(Slow {
            node,
            from,
            until,
            factor,
        });
        self
    }

    /// Adds a [`Pause`] of `node` from `from` until `until`.
    pub fn pause(mut self, node: PeerId, from: Duration, until: Duration) -> Self {
        self.cfg.pauses.push(Pause { node, from, until });
        self
    }

    /// Adds a [`Loss`] of frames `frames` on `from → to`.
    pub fn lose(mut self, from: PeerId, to: PeerId, frames: std::ops::Range<u64>) -> Self {
        self.cfg.losses.push(Loss { from, to, frames });
        self
    }

    /// Sets [`Config::hosts`].
    pub fn with_hosts(mut self, hosts: Hosts) -> Self {
        self.cfg.hosts = Some(hosts);
        self
    }

    /// Sets [`Config::max_events`].
    pub fn max_events(mut self, max_events: u64) -> Self {
        self.cfg.max_events = max_events;
        self
    }

    /// Sets [`Config::keep_records`].
    pub fn keep_records(mut self, keep: bool) -> Self {
        self.cfg.keep_records = keep;
        self
    }

    /// Runs every node to completion.
    ///
    /// # Errors
    /// See [`run_with`](Self::run_with).
    pub fn run(self) -> Result<Outcome<N>> {
        self.run_with(&mut ())
    }

    /// Runs every node to completion, showing everything to `observer`.
    ///
    /// # Errors
    /// Configuration errors ([`Config::validate`], [`Error::NoNodes`],
    /// [`Error::DuplicateNode`], [`Error::UnknownNode`]) before anything runs; then the
    /// first [`Error::Node`] or [`Error::UnknownDestination`], [`Error::Stalled`] when
    /// nothing can happen any more, or [`Error::EventLimit`].
    ///
    /// # Complexity
    /// O(E log E) for E events (about one per frame and one per step).
    pub fn run_with<O: Observer<N>>(self, observer: &mut O) -> Result<Outcome<N>> {
        let mut sim = Sim::new(self.nodes, self.cfg, observer)?;
        sim.repair = self.repair.map(std::sync::Arc::from);
        sim.loops = (0..sim.nodes.len()).map(|k| sim.node_loop(k)).collect();
        // A spare for `node`: its index, once `fresh` is checked to be a node of its id
        // waiting to rejoin.
        let spare = |sim: &Sim<'_, N, O>, node: PeerId, fresh: &N, what: &'static str| {
            let Some(&i) = sim.index.get(&node) else {
                return Err(Error::UnknownNode { node, what });
            };
            let why = if fresh.id() != node {
                format!("is given a node of id {}", fresh.id())
            } else if !fresh.rejoining() {
                "is given a node that is not waiting to rejoin".into()
            } else {
                return Ok(i);
            };
            Err(Error::BadRestart { node, why })
        };
        for (node, after, fresh) in self.restarts {
            let bad = |why: &str| Error::BadRestart {
                node,
                why: why.into(),
            };
            let i = spare(&sim, node, &fresh, "restart")?;
            if !sim.cfg.crashes.iter().any(|c| c.node == node) {
                return Err(bad("comes after no crash of it"));
            }
            if after <= sim.cfg.detect_after {
                return Err(bad(&format!(
                    "after {after:?} comes before the others count it lost ({:?})",
                    sim.cfg.detect_after
                )));
            }
            if sim.spares.insert(i, (after, fresh)).is_some() {
                return Err(bad("is given twice"));
            }
        }
        for (node, within, fresh) in self.heals {
            let i = spare(&sim, node, &fresh, "rejoin when healed")?;
            if sim.heal_spares.insert(i, (within, fresh)).is_some() {
                return Err(Error::BadRestart {
                    node,
                    why: "is given twice to rejoin when healed".into(),
                });
            }
        }
        sim.run()
    }
}

/// What the event queue holds.
#[derive(Debug)]
enum Kind {
    /// The node at this index should step.
    Wake,
    /// The head frame of the link from the node at this index arrives.
    Arrive { from: usize },
    /// The first bit of a frame of `bytes` from `from` reaches this node's ingress NIC,
    /// whose last bit cannot arrive before `tail` (the sender's serialization): the
    /// ingress queue takes frames in the order their heads arrive, as a switch port does.
    Head {
        from: usize,
        bytes: usize,
        tail: Duration,
    },
    /// The receiver's transport has done its CPU work on a frame from `from`
    /// ([`Nic::cpu`]): the node may take it.
    Taken {
        from: usize,
        msg: Message,
        lives: Lives,
    },
    /// This node crashes ([`Crash`]).
    Crash,
    /// The others learn that this node is lost: it crashed, or it stopped and its
    /// streams ended while a node waited for it.
    Detect,
    /// Partition `k` ([`Config::partitions`]) has lasted `detect_after`: each side learns
    /// that the other is lost.
    Cut(usize),
    /// This crashed node comes back ([`Network::restart`]).
    Restart,
    /// The node at index `by` shut this one out (it refused a frame of it, the sender's
    /// fault) in the lives given: this node's stream from it has ended, and it learns so
    /// `detect_after` later, as a transport's closed link tells it.
    ShutOut {
        /// The node that shut this one out.
        by: usize,
        /// Both ends' lives then.
        lives: Lives,
    },
}

#[derive(Debug)]
struct Scheduled {
    at: Duration,
    seq: u64,
    node: usize,
    kind: Kind,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The lives (restarts so far) of a frame's sender and receiver when it was sent: a frame
/// between lives that have ended is dropped.
type Lives = (u32, u32);

/// One directed link.
struct Link {
    rng: ChaCha8Rng,
    /// Frames sent so far (lost ones included): the next frame's number.
    sent: u64,
    /// Arrival time of the latest frame put on the link.
    last_arrival: Duration,
    /// Frames in flight, in order, with the lives they were sent between.
    queue: VecDeque<(Lives, Message)>,
    /// Frames put on the link that the receiver has not taken or dropped yet (in flight,
    /// held on a cut, in its NIC or its inbox): the stream of a sender that has finished
    /// ends only after them.
    unread: u64,
    /// Frame numbers to lose.
    lost: Vec<std::ops::Range<u64>>,
}

impl Link {
    fn new(seed: u64, from: PeerId, to: PeerId, lost: Vec<std::ops::Range<u64>>) -> Self {
        let key = mix(mix(seed, u64::from(from.0)), u64::from(to.0));
        Self {
            rng: ChaCha8Rng::seed_from_u64(key),
            sent: 0,
            last_arrival: Duration::ZERO,
            queue: VecDeque::new(),
            unread: 0,
            lost,
        }
    }

    /// A fresh delay for the next frame, from the link's own stream.
    fn delay(&mut self, latency: Latency) -> Duration {
        let (lo, hi) = (nanos(latency.min), nanos(latency.max));
        Duration::from_nanos(if lo == hi {
            lo
        } else {
            self.rng.random_range(lo..=hi)
        })
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// SplitMix64 step of `(a, b)`.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b
        .wrapping_add(0x9e37_79b9_7f4a_7c15)
        .wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The driver's view of one node.
struct Slot {
    id: PeerId,
    clock: VirtualClock,
    /// Frames that arrived and wait to be handed over, with their senders.
    inbox: VecDeque<(PeerId, Message)>,
    /// A wake-up is queued (the node is stepping or paused); arrivals just queue.
    wake_pending: bool,
    done: bool,
    /// It crashed; `detected`: the others have been told.
    crashed: bool,
    detected: bool,
    failed: Option<String>,
    cut_off: Option<CutOff>,
    told: Vec<PeerId>,
    /// `(from, until)`, sorted.
    pauses: Vec<(Duration, Duration)>,
    records: Vec<ClockRecord>,
    finished_at: Duration,
    /// When the node's egress NIC has sent everything queued on it ([`Nic`]).
    egress_free: Duration,
    /// The bytes its egress NIC was given and the time it spends serializing them
    /// ([`Links::egress`]).
    egress: Egress,
    /// When its ingress NIC has taken in everything headed its way.
    ingress_free: Duration,
    /// When its transport has done the CPU work of every frame given to it ([`Nic::cpu`]).
    transport_free: Duration,
    /// Restarts so far.
    life: u32,
    restarted_at: Option<Duration>,
    paused_cut_off: Option<Duration>,
    rejoined: Option<Rejoined>,
}

impl Slot {
    /// The end of the pause covering `t`, if any.
    fn paused_until(&self, t: Duration) -> Option<Duration> {
        self.pauses
            .iter()
            .find(|&&(from, until)| from <= t && t < until)
            .map(|&(_, until)| until)
    }
}

struct Sim<'o, N, O> {
    nodes: Vec<N>,
    slots: Vec<Slot>,
    index: BTreeMap<PeerId, usize>,
    links: BTreeMap<(usize, usize), Link>,
    losses: BTreeMap<(usize, usize), Vec<std::ops::Range<u64>>>,
    queue: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    now: Duration,
    /// The hosts' calendars ([`Hosts`]; empty without).
    calendars: Vec<std::sync::Arc<std::sync::Mutex<Calendar>>>,
    cfg: Config,
    stats: Stats,
    observer: &'o mut O,
    /// A stop the observer asked for, once set ([`Observer::stop_requested`]).
    stopped: bool,
    /// Each node's driver loop, the one of every transport (its membership view among
    /// it).
    loops: Vec<NodeLoop>,
    repair: Option<std::sync::Arc<RepairOf>>,
    /// Nodes to bring back after their crash, by index: `(after, node)`.
    spares: BTreeMap<usize, (Duration, N)>,
    /// Nodes that rejoin when the partition that left them a minority heals
    /// ([`Network::rejoin_when_healed`]).
    heal_spares: BTreeMap<usize, (Duration, N)>,
    /// Crashed nodes the others were told of, in that order.
    lost: Vec<PeerId>,
    /// Nodes that crash right after completing a clock ([`CrashAt::Clock`]).
    crash_clocks: BTreeMap<usize, u64>,
}

impl<'o, N: StateMachine, O: Observer<N>> Sim<'o, N, O> {
    fn new(nodes: Vec<N>, cfg: Config, observer: &'o mut O) -> Result<Self> {
        cfg.validate()?;
        if nodes.is_empty() {
            return Err(Error::NoNodes);
        }
        let mut index = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if index.insert(n.id(), i).is_some() {
                return Err(Error::DuplicateNode { node: n.id() });
            }
        }
        let find = |node: PeerId, what| {
            index
                .get(&node)
                .copied()
                .ok_or(Error::UnknownNode { node, what })
        };
        let calendars: Vec<_> = cfg.hosts.map_or_else(Vec::new, |h| {
            (0..nodes.len().div_ceil(h.nodes_per_host))
                .map(|_| std::sync::Arc::new(std::sync::Mutex::new(Calendar::new(h.cores))))
                .collect()
        });
        let clock = |i: usize| {
            let c = VirtualClock::new(cfg.costs, cfg.stragglers);
            match cfg.hosts {
                Some(h) => c.on_host(Seat {
                    calendar: std::sync::Arc::clone(&calendars[i / h.nodes_per_host]),
                    threads: h.threads,
                }),
                None => c,
            }
        };
        let mut slots: Vec<Slot> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Slot {
                id: n.id(),
                clock: clock(i),
                inbox: VecDeque::new(),
                wake_pending: false,
                done: false,
                crashed: false,
                detected: false,
                failed: None,
                cut_off: None,
                told: Vec::new(),
                pauses: Vec::new(),
                records: Vec::new(),
                finished_at: Duration::ZERO,
                egress_free: Duration::ZERO,
                egress: Egress::default(),
                ingress_free: Duration::ZERO,
                transport_free: Duration::ZERO,
                life: 0,
                restarted_at: None,
                paused_cut_off: None,
                rejoined: None,
            })
            .collect();
        for p in &cfg.pauses {
            slots[find(p.node, "pause")?].pauses.push((p.from, p.until));
        }
        for w in &cfg.slow {
            find(w.node, "slow link")?;
        }
        for s in &mut slots {
            s.pauses.sort_unstable();
        }
        let mut losses: BTreeMap<(usize, usize), Vec<_>> = BTreeMap::new();
        for l in &cfg.losses {
            let key = (find(l.from, "loss")?, find(l.to, "loss")?);
            losses.entry(key).or_default().push(l.frames.clone());
        }
        for p in &cfg.partitions {
            for node in &p.side {
                find(*node, "partition")?;
            }
        }
        let crashes = cfg
            .crashes
            .iter()
            .map(|c| Ok((c.at, find(c.node, "crash")?)))
            .collect::<Result<Vec<_>>>()?;
        let crash_clocks: BTreeMap<usize, u64> = crashes
            .iter()
            .filter_map(|&(at, i)| match at {
                CrashAt::Clock(c) => Some((i, c)),
                CrashAt::Time(_) => None,
            })
            .collect();
        let mut sim = Self {
            nodes,
            slots,
            index,
            links: BTreeMap::new(),
            losses,
            queue: BinaryHeap::new(),
            seq: 0,
            now: Duration::ZERO,
            calendars,
            cfg,
            stats: Stats::default(),
            observer,
            stopped: false,
            loops: Vec::new(),
            repair: None,
            spares: BTreeMap::new(),
            heal_spares: BTreeMap::new(),
            lost: Vec::new(),
            crash_clocks,
        };
        let cuts: Vec<(usize, Duration)> = sim
            .cfg
            .partitions
            .iter()
            .enumerate()
            .map(|(k, p)| (k, p.from + sim.cfg.detect_after, p.until))
            .filter(|&(_, told, until)| told < until)
            .map(|(k, told, _)| (k, told))
            .collect();
        for (k, told) in cuts {
            sim.schedule(told, 0, Kind::Cut(k));
        }
        for (at, i) in crashes {
            if let CrashAt::Time(at) = at {
                sim.schedule(at, i, Kind::Crash);
            }
        }
        for i in 0..sim.nodes.len() {
            sim.wake(i, Duration::ZERO);
        }
        Ok(sim)
    }

    fn schedule(&mut self, at: Duration, node: usize, kind: Kind) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at,
            seq: self.seq,
            node,
            kind,
        }));
    }

    /// Node `k`'s driver loop, fresh (its view of who is in the run among it), starting
    /// at its clock.
    fn node_loop(&mut self, k: usize) -> NodeLoop {
        let repair = self.repair.clone().map(|r| {
            let f: sfb_core::membership::RepairFn =
                std::sync::Arc::new(move |lost: &[PeerId]| r(k, lost));
            f
        });
        let opts = DriveOptions {
            repair,
            ..DriveOptions::default()
        };
        NodeLoop::new(self.slots[k].id, &opts, &mut self.slots[k].clock)
    }

    /// Puts a frame from the node at index `from`, sent between `lives`, in node `j`'s
    /// inbox at `at`.
    fn hand_over(&mut self, from: usize, j: usize, msg: Message, at: Duration, lives: Lives) {
        // A crashed node takes nothing; a lost one's frames still on the way are dropped
        // with its links, as are those of or to a life that has ended.
        let sender = self.slots[from].id;
        if self.slots[j].crashed
            || self.slots[from].detected
            || self.slots[j].told.contains(&sender)
            || lives != (self.slots[from].life, self.slots[j].life)
        {
            self.stats.dropped += 1;
            self.read(from, j);
            return;
        }
        if let Some(heals) = self.cut_until(from, j, at) {
            // Held on the cut link, as a transport holds what it cannot deliver yet, and
            // handed over when it heals (unless the receiver has counted the sender lost
            // by then).
            self.schedule(heals, j, Kind::Taken { from, msg, lives });
            return;
        }
        self.slots[j].inbox.push_back((sender, msg));
        self.wake(j, at);
    }

    /// The transport CPU of a frame of `bytes` at node `i`'s end ([`Nic::cpu`]), from `at`
    /// on its transport's thread: after the frames before it there, on the host's free
    /// cores when the node shares a host. Returns when it is done.
    fn transport(&mut self, i: usize, at: Duration, bytes: usize) -> Duration {
        let cost = self.cfg.nic.transport_cost(bytes);
        let slot = &mut self.slots[i];
        let start = at.max(slot.transport_free);
        let end = match &slot.clock.seat {
            Some(seat) => seat.run_one(start, cost),
            None => start + cost,
        };
        slot.transport_free = end;
        end
    }

    /// Node `to` has taken (or dropped) a frame of the link from node `from`.
    fn read(&mut self, from: usize, to: usize) {
        if let Some(l) = self.links.get_mut(&(from, to)) {
            l.unread = l.unread.saturating_sub(1);
        }
    }

    /// Node `i` drops what its inbox holds (it crashed, or a new life starts).
    fn drop_inbox(&mut self, i: usize) {
        let held: Vec<PeerId> = self.slots[i].inbox.drain(..).map(|(p, _)| p).collect();
        for p in held {
            if let Some(&f) = self.index.get(&p) {
                self.read(f, i);
            }
        }
    }

    /// Whether node `from` has finished its run (not crashed, not stopped by a refusal)
    /// and every frame it sent to node `to` has been taken: its stream to `to` has ended.
    fn finished_towards(&self, from: usize, to: usize) -> bool {
        let s = &self.slots[from];
        s.done
            && !s.crashed
            && s.failed.is_none()
            && self.links.get(&(from, to)).is_none_or(|l| l.unread == 0)
    }

    /// Queues a wake-up of node `i` at `at` unless one is queued.
    fn wake(&mut self, i: usize, at: Duration) {
        if !self.slots[i].wake_pending {
            self.slots[i].wake_pending = true;
            self.schedule(at, i, Kind::Wake);
        }
    }

    fn run(mut self) -> Result<Outcome<N>> {
        loop {
            self.run_events()?;
            if !self.streams_end() {
                break;
            }
        }
        self.outcome()
    }

    /// A node that waits for one that has stopped (finished its run, or stopped by its
    /// own rule) without being counted lost: the stopped node's streams end, as a process's
    /// do when it exits, and after [`Config::detect_after`] the others learn it is gone
    /// (each node's membership decides what that means to it: nothing to one that got all
    /// its clocks). Whether any was found (the run then goes on).
    fn streams_end(&mut self) -> bool {
        // Nothing is left to happen: a node back after a crash that nobody took back never
        // will be (those that send to it have finished); it gives up, as a process does
        // after its rejoin timeout.
        for (n, s) in self.nodes.iter().zip(&mut self.slots) {
            if !s.done && s.restarted_at.is_some() && n.rejoining() {
                s.done = true;
                s.failed = Some("restarted, and no node took it back (the run had ended)".into());
                s.finished_at = s.clock.time();
            }
        }
        let mut ended = Vec::new();
        let mut finished = Vec::new();
        for k in (0..self.nodes.len()).filter(|&k| !self.slots[k].done) {
            for (p, _) in self.nodes[k].waiting_on() {
                let Some(&d) = self.index.get(&p) else {
                    continue;
                };
                if self.finished_towards(d, k) {
                    // It finished the run: its stream to `k` ends with its last frame.
                    finished.push((k, p));
                } else if self.slots[d].done && !self.slots[d].crashed && !self.lost.contains(&p) {
                    ended.push(d);
                }
            }
        }
        let woken = !finished.is_empty();
        for (k, p) in finished {
            let at = self.now.max(self.slots[k].clock.time());
            self.slots[k].clock.advance_to(at);
            if let Err(e) = self.nodes[k].peer_finished(p) {
                self.stop_failed(k, &e);
                continue;
            }
            self.wake(k, at);
        }
        ended.sort_unstable();
        ended.dedup();
        for &d in &ended {
            let at = self.now.max(self.slots[d].finished_at) + self.cfg.detect_after;
            self.schedule(at, d, Kind::Detect);
        }
        woken || !ended.is_empty()
    }

    fn run_events(&mut self) -> Result<()> {
        while let Some(Reverse(ev)) = self.queue.pop() {
            self.stats.events += 1;
            self.now = ev.at;
            if self.stats.events.is_multiple_of(1024) {
                // No work starts before the earliest pending event: forget the past.
                for c in &self.calendars {
                    c.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .forget_before(ev.at);
                }
            }
            if self.stats.events > self.cfg.max_events {
                return Err(Error::EventLimit {
                    limit: self.cfg.max_events,
                    at: ev.at,
                });
            }
            match ev.kind {
                Kind::Arrive { from } => {
                    let (lives, msg) = self
                        .links
                        .get_mut(&(from, ev.node))
                        .and_then(|l| l.queue.pop_front())
                        .expect("an arrival event for every frame on the link");
                    let nic = self.cfg.nic;
                    if nic.transport_charged() {
                        // The receiver's transport decodes it before the node sees it.
                        let bytes = sfb_core::wire::encoded_len_with(&msg, nic.dtype);
                        let ready = self.transport(ev.node, ev.at, bytes);
                        self.schedule(ready, ev.node, Kind::Taken { from, msg, lives });
                    } else {
                        self.hand_over(from, ev.node, msg, ev.at, lives);
                    }
                }
                Kind::Taken { from, msg, lives } => {
                    self.hand_over(from, ev.node, msg, ev.at, lives);
                }
                Kind::Head { from, bytes, tail } => {
                    let j = ev.node;
                    let nic = self.cfg.nic;
                    let rx_start = ev.at.max(self.slots[j].ingress_free);
                    let rx_end = (rx_start + Nic::serialize(bytes, nic.ingress)).max(tail);
                    self.slots[j].ingress_free = rx_end;
                    let link = self
                        .links
                        .get_mut(&(from, j))
                        .expect("a link for every frame's head");
                    // FIFO per link: never before the previous frame.
                    link.last_arrival = link.last_arrival.max(rx_end);
                    let arrival = link.last_arrival;
                    self.schedule(arrival, j, Kind::Arrive { from });
                }
                Kind::Wake => {
                    self.slots[ev.node].wake_pending = false;
                    self.step(ev.node, ev.at)?;
                }
                Kind::Crash => self.crash(ev.node, ev.at),
                Kind::Detect => self.detect(ev.node, ev.at),
                Kind::Cut(k) => self.detect_cut(k, ev.at),
                Kind::Restart => self.restart(ev.node, ev.at)?,
                Kind::ShutOut { by, lives } => {
                    let (me, them) = (&self.slots[ev.node], &self.slots[by]);
                    if !me.done && lives == (me.life, them.life) && !me.told.contains(&them.id) {
                        let gone = [them.id];
                        self.tell(ev.node, &gone, ev.at);
                    }
                }
            }
        }
        Ok(())
    }

    /// The run's outcome once nothing is left to happen (`streams_end` has given up the
    /// nodes back that nobody took back), or the stall.
    fn outcome(self) -> Result<Outcome<N>> {
        if self.slots.iter().any(|s| !s.done) {
            let blocked = self
                .nodes
                .iter()
                .zip(&self.slots)
                .filter(|(_, s)| !s.done)
                .map(|(n, s)| Blocked {
                    node: s.id,
                    clock: n.clock(),
                    waiting_on: n.waiting_on(),
                })
                .collect();
            return Err(Error::Stalled {
                at: self.now,
                blocked,
            });
        }
        let end = self
            .slots
            .iter()
            .map(|s| s.finished_at)
            .max()
            .unwrap_or_default();
        let nodes = self
            .nodes
            .into_iter()
            .zip(self.slots)
            .zip(self.loops)
            .map(|((node, s), m)| NodeRun {
                node,
                records: s.records,
                finished_at: s.finished_at,
                crashed: s.crashed,
                failed: s.failed,
                cut_off: s.cut_off,
                told: s.told,
                restarted_at: s.restarted_at,
                paused_cut_off: s.paused_cut_off,
                rejoined: s.rejoined,
                view: m.membership().view().clone(),
            })
            .collect();
        Ok(Outcome {
            nodes,
            end,
            stats: self.stats,
        })
    }

    /// Node `i` crashes at `at` (unless it has finished): it stops for good, what waits
    /// for it is dropped, and the others are told [`Config::detect_after`] later.
    fn crash(&mut self, i: usize, at: Duration) {
        let slot = &mut self.slots[i];
        if slot.done {
            return;
        }
        slot.done = true;
        slot.crashed = true;
        slot.finished_at = at;
        self.drop_inbox(i);
        let detect = at + self.cfg.detect_after;
        self.schedule(detect, i, Kind::Detect);
        if let Some(&(after, _)) = self.spares.get(&i) {
            self.schedule(at + after, i, Kind::Restart);
        }
    }

    /// Crashed node `i` comes back at `at` as its spare, waiting to rejoin; every running
    /// node learns it is back, and those that send to it again hand it their state.
    fn restart(&mut self, i: usize, at: Duration) -> Result<()> {
        let Some((_, fresh)) = self.spares.remove(&i) else {
            return Ok(());
        };
        self.nodes[i] = fresh;
        self.slots[i].clock.advance_to(at);
        self.loops[i] = self.node_loop(i);
        let slot = &mut self.slots[i];
        slot.life += 1;
        slot.clock.advance_to(at);
        slot.done = false;
        slot.crashed = false;
        slot.detected = false;
        slot.failed = None;
        slot.cut_off = None;
        slot.told.clear();
        slot.restarted_at = Some(at);
        let id = slot.id;
        self.drop_inbox(i);
        // Back in the run: if it stops again, its streams end again (`streams_end`).
        self.lost.retain(|&p| p != id);
        for k in 0..self.nodes.len() {
            if k == i || self.slots[k].done {
                continue;
            }
            self.slots[k].clock.advance_to(at);
            self.slots[k].told.retain(|&p| p != id);
            let mut links = SimLinks::default();
            let (peer, life) = (id.0, self.slots[i].life);
            let news = sfb_core::News::Notice(sfb_core::wire::Notice::Joined { peer, life });
            let r = self.loops[k].on_news(&mut self.nodes[k], &mut links, id, news);
            if let Err(e) = r {
                self.stop_failed(k, &e);
                continue;
            }
            if !self.carry_out(k, links)? {
                continue;
            }
            let now = self.slots[k].clock.time();
            self.wake(k, now);
        }
        self.wake(i, at);
        Ok(())
    }

    /// Carries out what node `k`'s loop did on its links (its membership's decisions:
    /// news reaches every node directly here, so announcements are not passed on), in
    /// order; whether `k` still runs.
    fn carry_out(&mut self, k: usize, links: SimLinks) -> Result<bool> {
        for a in links.did {
            match a {
                Did::Rewired(inn) => {
                    // An in-neighbour that has stopped sends nothing more: once its frames
                    // are taken its streams have ended, as a transport would report. One
                    // that finished the run is no loss (the engine counts it as having
                    // delivered every clock); one that stopped refusing to go on is.
                    let mut ended = Vec::new();
                    for p in inn {
                        let Some(&j) = self.index.get(&p) else {
                            continue;
                        };
                        let s = &self.slots[j];
                        if self.finished_towards(j, k) {
                            ended.push((p, true));
                        } else if s.done && !s.crashed && s.failed.is_some() {
                            ended.push((p, false));
                        }
                    }
                    for (p, finished) in ended {
                        let r = if finished {
                            self.nodes[k].peer_finished(p)
                        } else {
                            self.nodes[k].peer_lost(p)
                        };
                        if let Err(e) = r {
                            self.stop_failed(k, &e);
                            return Ok(false);
                        }
                    }
                }
                Did::SendState(to, state) => {
                    let msg = Message::State {
                        origin: self.slots[k].id,
                        state: std::sync::Arc::new(*state),
                    };
                    let at = self.slots[k].clock.time();
                    self.send(k, to, msg, at)?;
                }
                Did::Forget(p) => {
                    if !self.slots[k].told.contains(&p) {
                        self.slots[k].told.push(p);
                    }
                }
                Did::Send(out) => {
                    let at = self.slots[k].clock.time();
                    self.send(k, out.to, out.msg, at)?;
                }
            }
        }
        Ok(true)
    }

    /// Every running node learns that the crashed node `c` is lost, at `at`
    /// ([`tell`](Self::tell)).
    fn detect(&mut self, c: usize, at: Duration) {
        self.slots[c].detected = true;
        let gone = self.slots[c].id;
        self.lost.push(gone);
        for k in 0..self.nodes.len() {
            if !self.slots[k].done {
                self.tell(k, &[gone], at);
            }
        }
    }

    /// When the partitions that separate the nodes at indices `a` and `b` at `at` heal,
    /// if any does.
    fn cut_until(&self, a: usize, b: usize, at: Duration) -> Option<Duration> {
        let (a, b) = (self.slots[a].id, self.slots[b].id);
        self.cfg
            .partitions
            .iter()
            .filter(|p| p.from <= at && at < p.until && p.side.contains(&a) != p.side.contains(&b))
            .map(|p| p.until)
            .max()
    }

    /// Partition `c` has lasted [`Config::detect_after`]: every running node learns that
    /// the nodes across it are lost, each side its own view ([`tell`](Self::tell)).
    fn detect_cut(&mut self, c: usize, at: Duration) {
        let side = self.cfg.partitions[c].side.clone();
        for k in 0..self.nodes.len() {
            if self.slots[k].done {
                continue;
            }
            let mine = side.contains(&self.slots[k].id);
            let far: Vec<PeerId> = (0..self.nodes.len())
                .map(|j| self.slots[j].id)
                .filter(|id| side.contains(id) != mine && !self.slots[k].told.contains(id))
                .collect();
            if !far.is_empty() {
                self.tell(k, &far, at);
            }
        }
    }

    /// Running node `k` learns at `at` that `gone` are lost: a node the losses leave
    /// without a majority (or whose policy is to fail) stops; otherwise it is rewired by
    /// what it has been told (each node's own view) and woken.
    fn tell(&mut self, k: usize, gone: &[PeerId], at: Duration) {
        self.slots[k].clock.advance_to(at);
        // The node's membership decides, as on every transport; the news reaches every
        // node directly here, so announcements are not passed on.
        let mut links = SimLinks::default();
        let r = self.loops[k].told_lost(&mut self.nodes[k], &mut links, gone);
        if let Err(e) = r {
            // Told up to the loss it refused.
            let me = self.slots[k].id;
            let upto = gone
                .iter()
                .position(|&g| g != me && !self.loops[k].membership().is_lost(g))
                .map_or(gone.len(), |i| i + 1);
            self.slots[k].told.extend_from_slice(&gone[..upto]);
            self.stop_failed(k, &e);
            return;
        }
        self.slots[k].told.extend_from_slice(gone);
        match self.carry_out(k, links) {
            Ok(true) => {}
            Ok(false) => return,
            Err(_) => unreachable!("a loss sends no state"),
        }
        let now = self.slots[k].clock.time();
        self.wake(k, now);
    }

    /// Node `i` takes a state from `from` (a neighbour's, while it rejoins); whether it
    /// still runs.
    fn take_state(
        &mut self,
        i: usize,
        from: PeerId,
        state: std::sync::Arc<NodeState>,
    ) -> Result<bool> {
        let waiting = self.nodes[i].rejoining();
        let mut links = SimLinks::default();
        let news = sfb_core::News::State(Box::new(std::sync::Arc::unwrap_or_clone(state)));
        let r = self.loops[i].on_news(&mut self.nodes[i], &mut links, from, news);
        if let Err(e) = r {
            self.stop_failed(i, &e);
            return Ok(false);
        }
        if waiting && let Some(a) = self.loops[i].adopted() {
            self.slots[i].rejoined = Some(Rejoined {
                from: a.from,
                clock: a.clock,
                at: self.slots[i].clock.time(),
                equal: a.equal,
            });
        }
        self.carry_out(i, links)
    }

    /// Node `k` stops where it is, having refused to go on (`why`).
    fn stop_failed(&mut self, k: usize, why: &sfb_core::Error) {
        let slot = &mut self.slots[k];
        slot.done = true;
        slot.failed = Some(why.to_string());
        slot.cut_off = match why {
            sfb_core::Error::Minority { .. } => Some(CutOff::Minority),
            sfb_core::Error::Isolated { .. } => Some(CutOff::Isolated),
            _ => None,
        };
        slot.finished_at = slot.clock.time();
        let now = slot.finished_at;
        if slot.cut_off == Some(CutOff::Minority)
            && let Some(heals) = self.heals_at(k, now)
            && self
                .heal_spares
                .get(&k)
                .is_some_and(|(within, _)| heals <= now + *within)
            && let Some((_, fresh)) = self.heal_spares.remove(&k)
        {
            // It pauses, and comes back to rejoin when the cut heals.
            self.slots[k].paused_cut_off = Some(now);
            self.spares.insert(k, (Duration::ZERO, fresh));
            self.schedule(heals, k, Kind::Restart);
        }
    }

    /// When every partition that separates node `k` from some other node at `at` has
    /// healed, if one does.
    fn heals_at(&self, k: usize, at: Duration) -> Option<Duration> {
        (0..self.slots.len())
            .filter(|&j| j != k)
            .filter_map(|j| self.cut_until(k, j, at))
            .max()
    }

    /// Node `i` wakes at `t`: unless paused, takes what has arrived and takes one turn of
    /// its driver loop (a tick).
    fn step(&mut self, i: usize, t: Duration) -> Result<()> {
        let slot = &mut self.slots[i];
        slot.clock.advance_to(t);
        let now = slot.clock.time();
        if let Some(until) = slot.paused_until(now) {
            self.wake(i, until);
            return Ok(());
        }
        let id = slot.id;
        let failed = |at, e| match e {
            crate::Error::Peer { source, .. } => Error::Node {
                node: id,
                at,
                source,
            },
            e => Error::Loop {
                node: id,
                at,
                source: Box::new(e),
            },
        };
        while let Some((from, msg)) = self.slots[i].inbox.pop_front() {
            if let Some(&f) = self.index.get(&from) {
                self.read(f, i);
            }
            let slot = &mut self.slots[i];
            self.observer.on_deliver(slot.clock.time(), from, id, &msg);
            self.stats.delivered += 1;
            if let Message::State { state, .. } = msg {
                if !self.take_state(i, from, state)? {
                    return Ok(());
                }
                continue;
            }
            let mut links = SimLinks::default();
            let incoming = Incoming::Frame(from, msg);
            let slot = &mut self.slots[i];
            let taken =
                self.loops[i].take(&mut self.nodes[i], &mut links, &mut slot.clock, incoming);
            if links
                .did
                .iter()
                .any(|d| matches!(d, Did::Forget(p) if *p == from))
                && let Some(&f) = self.index.get(&from)
            {
                // Shut out for a frame it sent: its link from this node closes.
                let lives = (self.slots[f].life, self.slots[i].life);
                let at = self.slots[i].clock.time() + self.cfg.detect_after;
                self.schedule(at, f, Kind::ShutOut { by: i, lives });
            }
            if let Err(e) = taken {
                match e {
                    // The node refuses to go on without the sender it shut out (its policy,
                    // or no majority left): it stops, as a process exits.
                    crate::Error::Peer { source, .. }
                        if source.blames_sender() == Some(from)
                            || matches!(
                                source,
                                sfb_core::Error::PeerLost { .. }
                                    | sfb_core::Error::Minority { .. }
                                    | sfb_core::Error::Isolated { .. }
                            ) =>
                    {
                        self.stop_failed(i, &source);
                        return Ok(());
                    }
                    e => return Err(failed(self.slots[i].clock.time(), e)),
                }
            }
            if !self.carry_out(i, links)? {
                return Ok(());
            }
        }
        if self.slots[i].done {
            // Frames after the end were handed over (a node may refuse them); nothing
            // more to do.
            return Ok(());
        }
        let mut links = SimLinks {
            did: Vec::new(),
            egress: self
                .cfg
                .nic
                .egress
                .is_some()
                .then_some(self.slots[i].egress),
        };
        let mut records = Vec::new();
        let slot = &mut self.slots[i];
        let turn = match self.loops[i].turn(
            &mut self.nodes[i],
            &mut links,
            &mut slot.clock,
            &DriveOptions::default(),
            &mut records,
        ) {
            Ok(turn) => turn,
            // A node's own refusal to go on after losses (relay cut apart): it stops, the
            // others go on.
            Err(crate::Error::Peer {
                source: e @ sfb_core::Error::RelayCut { .. },
                ..
            }) => {
                // As a process that exits: the others learn it is gone.
                self.stop_failed(i, &e);
                let at = self.slots[i].clock.time() + self.cfg.detect_after;
                self.schedule(at, i, Kind::Detect);
                return Ok(());
            }
            Err(e) => return Err(failed(slot.clock.time(), e)),
        };
        if let Some(progress) = self.loops[i].ticked() {
            self.stats.ticks += 1;
            let at = self.slots[i].clock.time();
            self.observer.on_tick(at, i, progress, &self.nodes);
        }
        if !self.carry_out(i, links)? {
            return Ok(());
        }
        match turn {
            Turn::Again => {
                let at = self.slots[i].clock.time();
                self.wake(i, at);
            }
            Turn::Wait { .. } => {}
            Turn::Done => {
                let slot = &mut self.slots[i];
                slot.done = true;
                slot.finished_at = slot.clock.time();
            }
        }
        self.records(i, records);
        Ok(())
    }

    /// The records node `i`'s last turn emitted: shown to the observer, kept if asked,
    /// and a crash after a clock carried out.
    fn records(&mut self, i: usize, records: Vec<ClockRecord>) {
        for r in records {
            let crash_now = self.crash_clocks.get(&i) == Some(&r.clock);
            self.observer.on_record(&r);
            if self.cfg.keep_records {
                self.slots[i].records.push(r);
            }
            if crash_now {
                // Before its next step: the batch of this clock is its last.
                self.crash_clocks.remove(&i);
                let at = self.slots[i].clock.time();
                self.crash(i, at);
                return;
            }
        }
        if !self.stopped && self.observer.stop_requested() {
            self.stopped = true;
            let live = |k: &usize| !self.slots[*k].done;
            let t = (0..self.nodes.len())
                .filter(live)
                .map(|k| self.nodes[k].clock())
                .max()
                .unwrap_or(0)
                + 1;
            for k in 0..self.nodes.len() {
                if !self.slots[k].done {
                    self.nodes[k].stop_at(t);
                }
            }
        }
    }

    /// Puts a frame from node `i` on its link to `to`, sent at `at`.
    fn send(&mut self, i: usize, to: PeerId, msg: Message, at: Duration) -> Result<()> {
        let from = self.slots[i].id;
        let Some(&j) = self.index.get(&to) else {
            return Err(Error::UnknownDestination { from, to, at });
        };
        let (seed, latency) = (self.cfg.seed, self.cfg.latency);
        let losses = &mut self.losses;
        let link = self.links.entry((i, j)).or_insert_with(|| {
            Link::new(seed, from, to, losses.remove(&(i, j)).unwrap_or_default())
        });
        let number = link.sent;
        link.sent += 1;
        if link.lost.iter().any(|r| r.contains(&number)) {
            self.stats.dropped += 1;
            return Ok(());
        }
        link.unread += 1;
        let delay = link.delay(latency);
        // Slow links of either end over the span covering the send.
        let slow = self
            .cfg
            .slow
            .iter()
            .filter(|w| (w.node == from || w.node == to) && w.from <= at && at < w.until)
            .map(|w| w.factor)
            .fold(1.0, f64::max);
        let delay = delay.mul_f64(slow);
        let nic = self.cfg.nic;
        let bytes = if nic.limited() {
            sfb_core::wire::encoded_len_with(&msg, nic.dtype)
        } else {
            0
        };
        // The sender's transport encodes it before it leaves, beside the node's work.
        let at = if nic.transport_charged() {
            self.transport(i, at, bytes)
        } else {
            at
        };
        // The NIC model (see [`Nic`]); without rates it reduces to `at + delay`.
        let start = at.max(self.slots[i].egress_free);
        let out = start + Nic::serialize(bytes, nic.egress).mul_f64(slow);
        self.slots[i].egress_free = out;
        self.slots[i].egress.bytes += bytes as u64;
        self.slots[i].egress.busy += out - start;
        let lives = (self.slots[i].life, self.slots[j].life);
        let link = self.links.get_mut(&(i, j)).expect("made above");
        link.queue.push_back((lives, msg));
        if nic.ingress.is_some() {
            // The receiver's ingress is reserved when the head gets there, in the order
            // heads arrive (not the order frames were sent).
            let tail = out + delay;
            self.schedule(
                start + delay,
                j,
                Kind::Head {
                    from: i,
                    bytes,
                    tail,
                },
            );
            return Ok(());
        }
        // FIFO per link: never before the previous frame.
        link.last_arrival = link.last_arrival.max(out + delay);
        let arrival = link.last_arrival;
        self.schedule(arrival, j, Kind::Arrive { from: i });
        Ok(())
    }
}

/// What a node's loop did on its links in one call, carried out by the simulator in
/// order afterwards ([`Sim::carry_out`]).
#[derive(Debug)]
enum Did {
    /// An output sent.
    Send(Output),
    /// A state sent to a node rejoining.
    SendState(PeerId, Box<NodeState>),
    /// The node goes on without the peer.
    Forget(PeerId),
    /// The topology was repaired: the node now awaits these in-neighbours.
    Rewired(Vec<PeerId>),
}

/// A node's links on the simulator, for one call of its loop: what arrives is handed
/// over by the event queue ([`NodeLoop::take`]), so there is nothing to receive; every
/// link has room (the [`Nic`] model holds frames back instead); what the loop does is
/// recorded for [`Sim::carry_out`]. Membership lines go to the log at debug level: a
/// simulated run of thousands of nodes would print one per node per loss.
#[derive(Debug, Default)]
struct SimLinks {
    did: Vec<Did>,
    /// The node's egress so far, when its NIC has a rate.
    egress: Option<Egress>,
}

impl Links for SimLinks {
    fn try_recv(&mut self) -> crate::Result<Option<Incoming>> {
        Ok(None)
    }
    fn try_send(&mut self, out: &Output) -> crate::Result<Sent> {
        self.did.push(Did::Send(out.clone()));
        Ok(Sent::Yes)
    }
    fn wait(&mut self, _: Option<PeerId>, _: Duration) -> crate::Result<Wake> {
        // The event queue waits for the simulator's nodes.
        Ok(Wake::TimedOut)
    }
    fn forget(&mut self, peer: PeerId) {
        self.did.push(Did::Forget(peer));
    }
    fn send_state(&mut self, to: PeerId, state: &NodeState) {
        self.did.push(Did::SendState(to, Box::new(state.clone())));
    }
    fn rewired(&mut self, _out: &[PeerId], inn: &[PeerId]) {
        self.did.push(Did::Rewired(inn.to_vec()));
    }
    fn log(&mut self, line: Log) {
        let (Log::Warn(l) | Log::Info(l) | Log::Debug(l)) = line;
        tracing::debug!("{l}");
    }
    fn egress(&self) -> Option<Egress> {
        self.egress
    }
}

#[cfg(test)]
mod tests;
