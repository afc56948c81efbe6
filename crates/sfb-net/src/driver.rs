//! The one driver loop: how a node's messages move, whatever moves them.
//!
//! A transport implements [`Links`] (receive without waiting, send without waiting, wait
//! for either for a while); [`NodeLoop`] is the loop's body, one turn at a time, and
//! [`drive`] runs it on a thread of its own (the in-memory and libp2p transports). The
//! virtual-time driver runs the same [`NodeLoop`] for each of its nodes from its event
//! queue. Every deadline of the loop (the progress timeout, stall reports, the rejoin
//! timeout) is a time of the node's [`TimeSource`]: wall time on the threaded transports,
//! virtual time on the simulator. The loop's discipline, the same for every transport:
//! 1. deliver every frame that has arrived, and hand membership news (a node gone, a
//!    neighbour's notice, a state for this rejoining node) to the node's [`Membership`],
//!    which decides; carry out what it says on the links;
//! 2. send queued outputs in order until one destination's link is full;
//! 3. if an output is still queued, do **not** compute: wait until its link has room or a
//!    frame arrives (draining the inbox while blocked on a send means two nodes sending to
//!    each other cannot deadlock, and a slow receiver slows its senders);
//! 4. otherwise tick the node: on a step queue its outputs, send what the links take, and
//!    report its records ([`Turn::Again`]); when it is blocked, wait for a frame
//!    ([`Turn::Wait`]); when it is done, finish it ([`Turn::Done`]);
//! 5. while it waits, a node with a [`DriveOptions::timeout`] that goes that long without
//!    progress (no frame received, no output sent, no step) fails with [`Error::Timeout`]
//!    naming what it was waiting for; one with [`DriveOptions::stall_report`] logs whom it
//!    waits for each time it has waited that long more since its last step, and a line when
//!    it steps again.
//!
//! Progress is not liveness: whether the nodes it waits for are alive is the links'
//! business (news of a node gone, or an `Err` from the links that names a lost peer,
//! [`Error::lost_peer`]). The in-memory transport, threads of one process, keeps a hard
//! progress timeout; the libp2p transport sets none and relies on its heartbeats instead,
//! so a peer paused for a while is waited for, not declared dead.
//!
//! Outputs leave in the order the node produced them: the loop never reorders or drops
//! one, and [`Links::try_send`] must not either.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sfb_core::metrics::ClockRecord;
use sfb_core::wire::{Message, Notice};
use sfb_core::{
    Action, Event, Membership, News, NodeState, Output, PeerId, Progress, StateMachine, TimeSource,
};

use crate::error::Awaiting;
use crate::{Error, Result};

/// A per-clock progress callback.
pub type ProgressFn = Arc<dyn Fn(&ClockRecord) + Send + Sync>;

pub use sfb_core::membership::RepairFn;

/// Where a node's checkpoint states go (the harness writes them to disk); `Err` names
/// why one could not be kept.
pub type CheckpointFn =
    Arc<dyn Fn(&NodeState, Checkpoint) -> std::result::Result<(), String> + Send + Sync>;

/// Why [`CheckpointFn`] is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkpoint {
    /// A checkpoint clock of the run (every N clocks, or a requested stop).
    Scheduled,
    /// The node failed: its latest cut ([`StateMachine::final_state`]). It is not one of
    /// the run's checkpoint clocks, so it must not push any of those out.
    Final,
}

/// The outcome of [`Links::try_send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// The output is on its way.
    Yes,
    /// The destination's link is full: nothing was sent; try again later.
    Full,
}

/// What a node's links took in.
#[derive(Debug)]
pub enum Incoming {
    /// A frame from `.0`.
    Frame(PeerId, Message),
    /// News of membership, as the links saw it (a node gone, a neighbour's notice, a state
    /// for this rejoining node): facts, which the node's [`Membership`] decides on.
    News(News),
}

/// Why [`Links::wait`] returned.
#[derive(Debug)]
pub enum Wake {
    /// A frame or news arrived.
    In(Incoming),
    /// The awaited link may have room (a send may still find it full; the loop retries).
    Room,
    /// The time given passed.
    TimedOut,
}

/// A node's links to the rest of the cluster, as the driver loop sees them.
///
/// A fatal condition (another node's failure, a closed inbox) is an `Err` from any method;
/// the loop stops with it. An `Err` that names a lost peer ([`Error::lost_peer`]: a broken
/// stream, a refused handshake, a bad frame) is taken as that peer gone.
pub trait Links {
    /// The next frame or news that has arrived, without waiting; `None` if there is none
    /// now.
    ///
    /// # Errors
    /// A fatal condition the transport noticed.
    fn try_recv(&mut self) -> Result<Option<Incoming>>;

    /// Sends `out` to `out.to` if its link has room, without waiting. On [`Sent::Full`]
    /// nothing was sent: the loop keeps `out` and offers it again. Sends to one destination
    /// must arrive in the order they are accepted.
    ///
    /// # Errors
    /// The destination's link is closed or unknown.
    fn try_send(&mut self, out: &Output) -> Result<Sent>;

    /// Waits until a frame or news arrives, or (if `room_on` is given) the link to
    /// `room_on` may have room, or `timeout` passes (the loop computes it from its
    /// deadlines on the node's [`TimeSource`]).
    ///
    /// # Errors
    /// A fatal condition, or every inbound link closed.
    fn wait(&mut self, room_on: Option<PeerId>, timeout: Duration) -> Result<Wake>;

    /// The node goes on without `peer` (lost): stop sending to it and do not report it
    /// again. Default: nothing to do.
    fn forget(&mut self, peer: PeerId) {
        let _ = peer;
    }

    /// Tells every out-neighbour `notice` (a node lost, left on request, or back); they
    /// forward it once, so every survivor learns the same set of lost nodes. Default:
    /// nothing to do.
    fn announce(&mut self, notice: Notice) {
        let _ = notice;
    }

    /// Tells every out-neighbour, after this node's last frames, that it leaves the run on
    /// request (a planned leave; `notice` names its life, [`Membership::leaving`]).
    /// Default: nothing to do.
    fn announce_leaving(&mut self, notice: Notice) {
        let _ = notice;
    }

    /// Sends this node's `state` to `to`, a node rejoining the run. Default: nothing to do.
    fn send_state(&mut self, to: PeerId, state: &NodeState) {
        let _ = (to, state);
    }

    /// Opens a link to `to`, a new out-neighbour after a topology repair. Default: nothing
    /// to do (links to every node already exist).
    fn connect(&mut self, to: PeerId) {
        let _ = to;
    }

    /// The topology was repaired: the node now sends to `out` and awaits `inn`. Default:
    /// [`connect`](Self::connect) to each of `out`.
    fn rewired(&mut self, out: &[PeerId], inn: &[PeerId]) {
        let _ = inn;
        for &to in out {
            self.connect(to);
        }
    }

    /// What the links have sent so far and how long they were busy ([`Egress`]), if the
    /// transport measures it. The loop hands the node the difference each turn
    /// ([`StateMachine::observe_egress`]). Default: not measured.
    fn egress(&self) -> Option<Egress> {
        None
    }

    /// A line of the node's membership decisions for the log. Default: `tracing` at the
    /// line's level.
    fn log(&mut self, line: Log) {
        match line {
            Log::Warn(l) => tracing::warn!("{l}"),
            Log::Info(l) => tracing::info!("{l}"),
            Log::Debug(l) => tracing::debug!("{l}"),
        }
    }
}

/// What a node's links have sent so far, as the transport measured it
/// ([`Links::egress`]): the bytes written and the time some write was under way (waiting
/// on the link: a full socket, the token bucket, the simulator's NIC). Their ratio over
/// a span is the rate the link actually carried, whatever its configured rate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Egress {
    /// Bytes written.
    pub bytes: u64,
    /// Time some frame was being written.
    pub busy: Duration,
}

/// A line of a node's membership decisions ([`Links::log`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Log {
    /// At warning level (a loss, a return).
    Warn(String),
    /// At info level (a repaired topology).
    Info(String),
    /// At debug level.
    Debug(String),
}

impl<L: Links + ?Sized> Links for &mut L {
    fn try_recv(&mut self) -> Result<Option<Incoming>> {
        (**self).try_recv()
    }
    fn try_send(&mut self, out: &Output) -> Result<Sent> {
        (**self).try_send(out)
    }
    fn wait(&mut self, room_on: Option<PeerId>, timeout: Duration) -> Result<Wake> {
        (**self).wait(room_on, timeout)
    }
    fn forget(&mut self, peer: PeerId) {
        (**self).forget(peer);
    }
    fn announce(&mut self, notice: Notice) {
        (**self).announce(notice);
    }
    fn connect(&mut self, to: PeerId) {
        (**self).connect(to);
    }
    fn announce_leaving(&mut self, notice: Notice) {
        (**self).announce_leaving(notice);
    }
    fn send_state(&mut self, to: PeerId, state: &NodeState) {
        (**self).send_state(to, state);
    }
    fn rewired(&mut self, out: &[PeerId], inn: &[PeerId]) {
        (**self).rewired(out, inn);
    }
    fn egress(&self) -> Option<Egress> {
        (**self).egress()
    }
    fn log(&mut self, line: Log) {
        (**self).log(line);
    }
}

/// Which of a node's per-clock records [`drive`] keeps. Every record reaches
/// [`DriveOptions::progress`] first, so a caller that streams them (to a metrics file, a
/// progress bar) needs only the last, and memory then does not grow with the clocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Keep {
    /// Every record (one per clock and a final one: O(clocks) memory).
    #[default]
    All,
    /// Only the latest record.
    Last,
}

/// Options of [`drive`] and [`NodeLoop`].
#[derive(Clone, Default)]
pub struct DriveOptions {
    /// Longest the node may go without progress before it fails with [`Error::Timeout`];
    /// `None`: no limit, wait as long as the links say the awaited nodes are alive.
    pub timeout: Option<Duration>,
    /// While the node cannot step, log (a `tracing` warning) whom it waits for every time
    /// it has waited this long more since its last step (e.g. `p2 waits at clock 13 for
    /// p5 (delivered 12 clocks) — 10 s so far`), and a line when it steps again; `None`:
    /// no reports.
    pub stall_report: Option<Duration>,
    /// Called with each record as the node emits it, the final one included.
    pub progress: Option<ProgressFn>,
    /// A coordinated stop: when set to a clock (not `u64::MAX`), the node ends its run there
    /// ([`StateMachine::stop_at`]), checkpointing if it checkpoints. Every node of the run
    /// must be given the same clock.
    pub stop_at: Option<Arc<AtomicU64>>,
    /// How the node's neighbours change when nodes are lost (partial broadcast); `None`:
    /// the node only drops the lost ones.
    pub repair: Option<RepairFn>,
    /// Called with the node's state at each of its checkpoint clocks (on the node's
    /// thread, before the clock's frames are sent); an `Err` (e.g. the disk is full) stops
    /// the node with [`Error::Checkpoint`].
    pub checkpoint: Option<CheckpointFn>,
    /// Which records `drive` appends to its `records`.
    pub keep: Keep,
    /// Longest a rejoining node ([`StateMachine::rejoining`]) waits for a neighbour's
    /// state before it fails with [`Error::NotTakenBack`] (the run may have ended while it
    /// was away); `None`: no limit.
    pub rejoin_timeout: Option<Duration>,
}

impl std::fmt::Debug for DriveOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriveOptions")
            .field("timeout", &self.timeout)
            .field("stall_report", &self.stall_report)
            .field("progress", &self.progress.is_some())
            .field("keep", &self.keep)
            .field("rejoin_timeout", &self.rejoin_timeout)
            .finish()
    }
}

/// Drives `node` over `links` until it is done (then calls
/// [`finish`](StateMachine::finish)) or fails: [`NodeLoop`]'s turns, and between them
/// [`Links::wait`] until the loop's next deadline. Every record the node emits is passed
/// to [`DriveOptions::progress`] and appended to `records` (with [`Keep::Last`],
/// replacing what is there). A node held back by flow control ([`Event::Drift`]) is
/// reported with a warning at most every [`DRIFT_WARN_EVERY`]; a node that cannot step
/// for [`DriveOptions::stall_report`] says whom it waits for, again after each such
/// interval.
///
/// # Arguments
/// - `time`: the node's clock (for [`StateMachine::on_message`], `on_tick` and `finish`),
///   and the clock of the loop's deadlines.
///
/// # Errors
/// The node's errors ([`Error::Peer`]); the links' errors; [`Error::Timeout`] after
/// [`DriveOptions::timeout`] (when set) without progress, naming whom the node waits on or
/// the full link. A node that fails and checkpoints first saves its latest cut
/// ([`StateMachine::final_state`], [`Checkpoint::Final`]).
pub fn drive<N, L>(
    node: &mut N,
    links: &mut L,
    time: &mut dyn TimeSource,
    opts: &DriveOptions,
    records: &mut Vec<ClockRecord>,
) -> Result<()>
where
    N: StateMachine + ?Sized,
    L: Links + ?Sized,
{
    let r = drive_until_done(node, links, time, opts, records);
    if let Err(e) = &r
        && !matches!(e, Error::Checkpoint { .. })
        && let Some(save) = &opts.checkpoint
        && let Some(state) = node.final_state()
    {
        match save(&state, Checkpoint::Final) {
            Ok(()) => tracing::warn!(
                "{} failed at clock {}; its state at clock {} is checkpointed (every update \
                 of the clocks before it applied)",
                node.id(),
                node.clock(),
                state.clock
            ),
            Err(reason) => tracing::warn!("{}: no final checkpoint: {reason}", node.id()),
        }
    }
    r
}

fn drive_until_done<N, L>(
    node: &mut N,
    links: &mut L,
    time: &mut dyn TimeSource,
    opts: &DriveOptions,
    records: &mut Vec<ClockRecord>,
) -> Result<()>
where
    N: StateMachine + ?Sized,
    L: Links + ?Sized,
{
    let mut run = NodeLoop::new(node.id(), opts, time);
    loop {
        match run.turn(node, links, time, opts, records)? {
            Turn::Again => {}
            Turn::Done => return Ok(()),
            Turn::Wait { room_on, until } => {
                let timeout = until.map_or(IDLE_WAIT, |u| u.saturating_sub(time.now()));
                match links.wait(room_on, timeout) {
                    Ok(Wake::In(incoming)) => run.take(node, links, time, incoming)?,
                    Ok(Wake::Room) => {}
                    Ok(Wake::TimedOut) => run.timed_out(node, room_on, time)?,
                    Err(e) => run.link_error(node, links, e)?,
                }
            }
        }
    }
}

/// What one [`NodeLoop::turn`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// The node stepped, or has more to do now: turn again (on virtual time, at the node's
    /// clock, so that what arrived while it computed is delivered first).
    Again,
    /// Nothing to do until a frame or news arrives, the link to `room_on` has room, or
    /// `until` (a time of the node's [`TimeSource`]; `None`: no deadline) passes: then
    /// [`NodeLoop::take`], nothing, or [`NodeLoop::timed_out`].
    Wait {
        /// The link an output waits on, if one does.
        room_on: Option<PeerId>,
        /// The loop's next deadline.
        until: Option<Duration>,
    },
    /// The node finished its run ([`StateMachine::finish`] was called).
    Done,
}

/// A node's rejoin by a neighbour's state ([`NodeLoop::adopted`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Adopted {
    /// The neighbour whose state it took.
    pub from: PeerId,
    /// The clock of the state.
    pub clock: u64,
    /// Whether the node's W after adopting is bitwise the state's.
    pub equal: bool,
}

/// The driver loop of one node, a turn at a time, on any transport (see the
/// [module docs](self)): its outbox, its membership view, and its deadlines on the node's
/// [`TimeSource`]. [`drive`] runs it on a thread; the virtual-time driver calls
/// [`turn`](Self::turn) when the node wakes and hands it frames and news as its events
/// come.
pub struct NodeLoop {
    me: PeerId,
    outbox: VecDeque<Output>,
    /// Who is in the run, as this node sees it.
    membership: Membership,
    last_progress: Duration,
    /// Stall reports count from the last step; `reported`: the clock this stall was
    /// reported at.
    last_step: Duration,
    next_report: Option<Duration>,
    report_every: Option<Duration>,
    reported: Option<u64>,
    stopping: bool,
    /// Stopped alone (`stop_at` 0: now), not with the whole run: a planned leave.
    leaving: bool,
    started: Duration,
    /// A rejoining node gives up when no neighbour takes it back by then.
    rejoin_deadline: Option<Duration>,
    /// What the deadline of the last [`Turn::Wait`] stands for.
    due: Due,
    /// A send found its link full since the last wait: the next try comes after one.
    full: bool,
    /// The node's progress at the last tick of the last turn, if it ticked.
    ticked: Option<Progress>,
    adopted: Option<Adopted>,
    /// The links' [`Egress`] when the node was last told it.
    egress: Egress,
}

impl std::fmt::Debug for NodeLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeLoop")
            .field("me", &self.me)
            .field("outbox", &self.outbox.len())
            .field("membership", &self.membership)
            .finish_non_exhaustive()
    }
}

impl NodeLoop {
    /// The loop of node `me`, starting at `time`'s now.
    pub fn new(me: PeerId, opts: &DriveOptions, time: &mut dyn TimeSource) -> Self {
        let now = time.now();
        Self {
            me,
            outbox: VecDeque::new(),
            membership: Membership::new(opts.repair.clone()),
            last_progress: now,
            last_step: now,
            next_report: opts.stall_report.map(|every| now + every),
            report_every: opts.stall_report,
            reported: None,
            stopping: false,
            leaving: false,
            started: now,
            rejoin_deadline: opts.rejoin_timeout.map(|t| now + t),
            due: Due::Nothing,
            full: false,
            ticked: None,
            adopted: None,
            egress: Egress::default(),
        }
    }

    /// The node's view of who is in the run.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// The node's progress at the tick of the last turn, if the turn ticked it.
    pub fn ticked(&self) -> Option<Progress> {
        self.ticked
    }

    /// The rejoin this node made by a neighbour's state, once it has.
    pub fn adopted(&self) -> Option<&Adopted> {
        self.adopted.as_ref()
    }

    /// One turn of the loop (steps 1–4 of the [module docs](self)).
    ///
    /// # Errors
    /// As [`drive`].
    pub fn turn<N, L>(
        &mut self,
        node: &mut N,
        links: &mut L,
        time: &mut dyn TimeSource,
        opts: &DriveOptions,
        records: &mut Vec<ClockRecord>,
    ) -> Result<Turn>
    where
        N: StateMachine + ?Sized,
        L: Links + ?Sized,
    {
        let me = self.me;
        self.ticked = None;
        if !self.stopping
            && let Some(t) = opts.stop_at.as_ref().map(|a| a.load(Ordering::Relaxed))
            && t != u64::MAX
        {
            if node.rejoining() {
                return Err(Error::NotTakenBack {
                    peer: me,
                    waited: time.now().saturating_sub(self.started),
                    why: "it was told to stop (a signal, or the launcher's stop) before a \
                          neighbour sent it the run's state",
                });
            }
            self.stopping = true;
            self.leaving = t == 0;
            let at = node.stop_at(t);
            tracing::warn!("{me} stops at clock {at} (asked to stop at {t})");
        }
        if node.rejoining()
            && let Some(d) = self.rejoin_deadline
            && time.now() >= d
        {
            return Err(Error::NotTakenBack {
                peer: me,
                waited: time.now().saturating_sub(self.started),
                why: "no neighbour sent it the run's state: the run may have ended while it \
                      was away, or every peer that sends to it is gone",
            });
        }
        loop {
            match links.try_recv() {
                Ok(Some(incoming)) => self.take(node, links, time, incoming)?,
                Ok(None) => break,
                Err(e) => self.link_error(node, links, e)?,
            }
        }
        if !self.full {
            self.flush(node, links, time)?;
        }
        if self.outbox.is_empty() {
            if let Some(e) = links.egress()
                && e != self.egress
            {
                node.observe_egress(
                    e.bytes.saturating_sub(self.egress.bytes),
                    e.busy.saturating_sub(self.egress.busy),
                );
                self.egress = e;
            }
            let progress = node
                .on_tick(time)
                .map_err(|source| Error::Peer { peer: me, source })?;
            self.ticked = Some(progress);
            match progress {
                Progress::Stepped => {
                    self.last_progress = time.now();
                    if let Some(clock) = self.reported.take() {
                        tracing::warn!(
                            "{me} carries on after waiting {:.1} s at clock {clock}",
                            self.last_progress
                                .saturating_sub(self.last_step)
                                .as_secs_f64()
                        );
                    }
                    self.last_step = self.last_progress;
                    self.next_report = opts.stall_report.map(|every| self.last_step + every);
                    drain_events(node, opts, records)?;
                    self.outbox
                        .extend(std::iter::from_fn(|| node.poll_output()));
                    self.flush(node, links, time)?;
                    return Ok(Turn::Again);
                }
                Progress::Done => {
                    // Frames queued by the last tick (a relaying peer's last forwards) go
                    // out first; the next turn's tick reports Done again.
                    self.outbox
                        .extend(std::iter::from_fn(|| node.poll_output()));
                    self.flush(node, links, time)?;
                    if !self.outbox.is_empty() {
                        return Ok(Turn::Again);
                    }
                    if self.leaving {
                        links.announce_leaving(self.membership.leaving(self.me));
                    }
                    node.finish(time);
                    drain_events(node, opts, records)?;
                    return Ok(Turn::Done);
                }
                Progress::Blocked => {
                    drain_events(node, opts, records)?;
                    // A blocked node may still have frames to pass on (a relaying peer
                    // forwards while it waits for the end of the run).
                    let before = self.outbox.len();
                    self.outbox
                        .extend(std::iter::from_fn(|| node.poll_output()));
                    if self.outbox.len() > before {
                        self.last_progress = time.now();
                        self.flush(node, links, time)?;
                    }
                }
            }
        }
        Ok(self.wait(node, opts))
    }

    /// Sends queued outputs in order until a link is full.
    fn flush<N, L>(&mut self, node: &mut N, links: &mut L, time: &mut dyn TimeSource) -> Result<()>
    where
        N: StateMachine + ?Sized,
        L: Links + ?Sized,
    {
        while let Some(out) = self.outbox.front() {
            match links.try_send(out) {
                Ok(Sent::Yes) => {
                    self.outbox.pop_front();
                    self.last_progress = time.now();
                }
                Ok(Sent::Full) => {
                    self.full = true;
                    break;
                }
                Err(e) => self.link_error(node, links, e)?,
            }
        }
        Ok(())
    }

    /// The wait that ends a turn: until the progress deadline, the next stall report or
    /// the rejoin deadline, whichever comes first.
    fn wait<N: StateMachine + ?Sized>(&mut self, node: &N, opts: &DriveOptions) -> Turn {
        let room_on = self.outbox.front().map(|o| o.to);
        let deadline = opts.timeout.map(|t| self.last_progress + t);
        let (mut until, mut due) = match (deadline, self.next_report) {
            (Some(d), Some(r)) if r < d => (Some(r), Due::Report),
            (Some(d), _) => (Some(d), Due::Timeout),
            (None, Some(r)) => (Some(r), Due::Report),
            (None, None) => (None, Due::Nothing),
        };
        if node.rejoining()
            && let Some(d) = self.rejoin_deadline
            && until.is_none_or(|u| d < u)
        {
            // Checked at the top of the next turn.
            (until, due) = (Some(d), Due::Nothing);
        }
        self.due = due;
        // The caller waits now, for room among other things.
        self.full = false;
        Turn::Wait { room_on, until }
    }

    /// Takes in what the links brought: a frame goes to the node (one from a node this
    /// one went on without is dropped: it was in flight when a notice overtook it; a
    /// state goes to the membership), news to the node's membership.
    ///
    /// # Errors
    /// The node's refusal of the frame ([`Error::Peer`]); as
    /// [`link_error`](Self::link_error) for news.
    pub fn take<N, L>(
        &mut self,
        node: &mut N,
        links: &mut L,
        time: &mut dyn TimeSource,
        incoming: Incoming,
    ) -> Result<()>
    where
        N: StateMachine + ?Sized,
        L: Links + ?Sized,
    {
        match incoming {
            Incoming::Frame(from, _) if self.membership.is_lost(from) => Ok(()),
            Incoming::Frame(from, Message::State { state, .. }) => {
                let state = Box::new(Arc::unwrap_or_clone(state));
                self.news(node, links, from, News::State(state), None)
            }
            Incoming::Frame(from, msg) => {
                match node.on_message(from, msg, time) {
                    Ok(()) => {}
                    // A frame refused as its sender's fault (a step far too large): the
                    // sender is shut out, as a bad frame's is, and the membership decides.
                    Err(source) if source.blames_sender() == Some(from) => {
                        let why = format!("refused its frame: {source}");
                        let cause = Error::Peer {
                            peer: self.me,
                            source,
                        };
                        let news = News::Down { peer: from, why };
                        return self.news(node, links, self.me, news, Some(cause));
                    }
                    Err(source) => {
                        return Err(Error::Peer {
                            peer: self.me,
                            source,
                        });
                    }
                }
                self.last_progress = time.now();
                Ok(())
            }
            Incoming::News(news) => {
                let from = match &news {
                    News::Told { from, .. } => *from,
                    _ => self.me,
                };
                self.news(node, links, from, news, None)
            }
        }
    }

    /// The deadline of the last [`Turn::Wait`] passed with nothing arriving: the node
    /// fails on its progress timeout, or reports its stall.
    ///
    /// # Errors
    /// [`Error::Timeout`], naming whom the node waits on or the full link.
    pub fn timed_out<N: StateMachine + ?Sized>(
        &mut self,
        node: &N,
        room_on: Option<PeerId>,
        time: &mut dyn TimeSource,
    ) -> Result<()> {
        let me = self.me;
        let waiting_on = || match room_on {
            Some(to) => Awaiting::Room { to },
            None => Awaiting::Peers(node.waiting_on()),
        };
        match self.due {
            Due::Timeout => Err(Error::Timeout {
                peer: me,
                clock: node.clock(),
                waited: time.now().saturating_sub(self.last_progress),
                waiting_on: waiting_on(),
            }),
            Due::Report => {
                // The moment came (the links' contract); a late wake (this process was
                // stopped, or busy) counts in full, and the next report is one interval
                // from now: no bursts.
                let now = self.next_report.unwrap_or_default().max(time.now());
                if node.rejoining() {
                    tracing::warn!(
                        "{me} waits for a neighbour to take it back into the run — {:.0} s so \
                         far",
                        now.saturating_sub(self.started).as_secs_f64()
                    );
                } else {
                    let stall = Stall {
                        peer: me,
                        clock: node.clock(),
                        waiting_on: waiting_on(),
                        waited: now.saturating_sub(self.last_step),
                    };
                    tracing::warn!("{stall}");
                    self.reported = Some(stall.clock);
                }
                self.next_report = self.report_every.map(|every| now + every);
                Ok(())
            }
            Due::Nothing => Ok(()),
        }
    }

    /// An error of the links: one that names a lost peer ([`Error::lost_peer`]) is that
    /// peer gone, for the node's membership to decide on; any other is returned.
    ///
    /// # Errors
    /// `e` itself when it is not news, or when the node refuses to go on without the peer
    /// under its policy (the links' error says best what happened); [`Error::Peer`] with
    /// the membership's refusal when the node is cut off ([`sfb_core::Error::Minority`],
    /// [`sfb_core::Error::Isolated`]).
    pub fn link_error<N, L>(&mut self, node: &mut N, links: &mut L, e: Error) -> Result<()>
    where
        N: StateMachine + ?Sized,
        L: Links + ?Sized,
    {
        let Some(peer) = e.lost_peer() else {
            return Err(e);
        };
        let why = e.to_string();
        self.news(node, links, self.me, News::Down { peer, why }, Some(e))
    }

    /// Hands `news` (from `from`, this node for its own links' news) to the membership
    /// and carries out what it decides on `links`; `cause`: the links' error it came as.
    fn news<N, L>(
        &mut self,
        node: &mut N,
        links: &mut L,
        from: PeerId,
        news: News,
        cause: Option<Error>,
    ) -> Result<()>
    where
        N: StateMachine + ?Sized,
        L: Links + ?Sized,
    {
        let r = self.on_news(node, links, from, news);
        match r {
            Ok(()) => Ok(()),
            // Cut off from a majority, or from everyone from the start, or a state that does
            // not fit: the engine's error says what happened.
            Err(source @ (sfb_core::Error::Minority { .. } | sfb_core::Error::Isolated { .. })) => {
                Err(Error::Peer {
                    peer: self.me,
                    source,
                })
            }
            // The node's policy is to stop: the transport's error says best what happened.
            Err(source) => Err(cause.unwrap_or(Error::Peer {
                peer: self.me,
                source,
            })),
        }
    }

    /// Hands `news` to the node's membership and carries out what it decides on `links`
    /// (the virtual-time driver tells its nodes directly); `from`: the neighbour whose
    /// state it is, for [`adopted`](Self::adopted).
    ///
    /// # Errors
    /// The node's refusal to go on (its policy, no majority, a state that does not fit).
    pub fn on_news<N, L>(
        &mut self,
        node: &mut N,
        links: &mut L,
        from: PeerId,
        news: News,
    ) -> sfb_core::Result<()>
    where
        N: StateMachine + ?Sized,
        L: Links + ?Sized,
    {
        let waiting = node.rejoining();
        let sent = match &news {
            News::State(state) if waiting => Some((state.clock, state.w.clone())),
            _ => None,
        };
        let mut actions = Vec::new();
        let r = self.membership.on_news(node, news, &mut actions);
        self.carry_out(links, actions);
        if let Some((clock, w)) = sent
            && !node.rejoining()
        {
            let now = node.rejoin_state().and_then(|s| s.w);
            self.adopted = Some(Adopted {
                from,
                clock,
                equal: now.is_some() && now == w,
            });
        }
        r
    }

    /// Takes in at once that `peers` are lost, as told by others, rewiring once
    /// ([`Membership::told_lost`]), and carries out what it decides on `links`.
    ///
    /// # Errors
    /// As [`on_news`](Self::on_news).
    pub fn told_lost<N, L>(
        &mut self,
        node: &mut N,
        links: &mut L,
        peers: &[PeerId],
    ) -> sfb_core::Result<()>
    where
        N: StateMachine + ?Sized,
        L: Links + ?Sized,
    {
        let mut actions = Vec::new();
        let r = self.membership.told_lost(node, peers, &mut actions);
        self.carry_out(links, actions);
        r
    }

    /// Carries out the membership's `actions` on the links and the outbox, in order.
    fn carry_out<L: Links + ?Sized>(&mut self, links: &mut L, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Forget(peer) => {
                    self.outbox.retain(|o| o.to != peer);
                    links.forget(peer);
                }
                Action::Announce(notice) => links.announce(notice),
                Action::Rewired { out, inn } => links.rewired(&out, &inn),
                Action::Connect(peer) => links.connect(peer),
                Action::SendState(to, state) => links.send_state(to, &state),
                Action::Warn(line) => links.log(Log::Warn(line)),
                Action::Info(line) => links.log(Log::Info(line)),
                Action::Debug(line) => links.log(Log::Debug(line)),
            }
        }
    }
}

/// Longest single wait of a node that has neither a progress timeout nor stall reports
/// (it then waits again: only the links end such a wait).
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// What the moment a wait of [`drive`] is bounded by stands for.
#[derive(Debug, Clone, Copy)]
enum Due {
    /// The progress timeout: the node fails.
    Timeout,
    /// The next stall report.
    Report,
    /// Nothing: wait again.
    Nothing,
}

/// A node that has not stepped for a while, as its stall report describes it.
#[derive(Debug)]
struct Stall {
    peer: PeerId,
    clock: u64,
    waiting_on: Awaiting,
    waited: Duration,
}

impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} waits at clock {} for {} — {:.0} s so far",
            self.peer,
            self.clock,
            self.waiting_on,
            self.waited.as_secs_f64()
        )
    }
}

/// Shortest interval between two flow-control warnings of one node.
pub const DRIFT_WARN_EVERY: Duration = Duration::from_secs(10);

/// Rate-limits flow-control warnings across every node of the process (an in-memory run
/// drives thousands): the first at once, then at most one per [`DRIFT_WARN_EVERY`],
/// saying how many clocks were held since the last.
static DRIFT_WARNINGS: std::sync::Mutex<DriftWarnings> = std::sync::Mutex::new(DriftWarnings {
    last: None,
    held: 0,
});

/// Whether a node of this process has reported divergence (reported once per process).
static DIVERGING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[derive(Debug)]
struct DriftWarnings {
    last: Option<Instant>,
    held: u64,
}

fn note_drift(me: PeerId, clock: u64, bound: u64, behind: &[(PeerId, u64)]) {
    let mut w = DRIFT_WARNINGS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    w.held += 1;
    if w.last.is_some_and(|t| t.elapsed() < DRIFT_WARN_EVERY) {
        return;
    }
    let who: Vec<String> = behind
        .iter()
        .take(4)
        .map(|(p, d)| format!("{p} has delivered {d}"))
        .collect();
    let more = match behind.len().saturating_sub(4) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    tracing::warn!(
        "flow control: {me} waits to start clock {clock}, more than max_drift = {bound} \
         clocks ahead ({}{more}); {} clock(s) held in this process since the last warning",
        who.join(", "),
        w.held,
    );
    w.held = 0;
    w.last = Some(Instant::now());
}

fn drain_events<N: StateMachine + ?Sized>(
    node: &mut N,
    opts: &DriveOptions,
    records: &mut Vec<ClockRecord>,
) -> Result<()> {
    while let Some(ev) = node.poll_event() {
        match ev {
            Event::Checkpoint(state) => {
                if let Some(save) = &opts.checkpoint {
                    save(&state, Checkpoint::Scheduled).map_err(|reason| Error::Checkpoint {
                        peer: node.id(),
                        clock: state.clock,
                        reason,
                    })?;
                }
            }
            Event::Clock(r) => {
                if let Some(f) = &opts.progress {
                    f(&r);
                }
                if opts.keep == Keep::Last {
                    records.clear();
                }
                records.push(r);
            }
            Event::Drift {
                clock,
                bound,
                behind,
            } => note_drift(node.id(), clock, bound, &behind),
            Event::Diverging { clock, first, now }
                if !DIVERGING.swap(true, std::sync::atomic::Ordering::Relaxed) =>
            {
                tracing::warn!(
                    "{}: the held-out objective went from {first:.4} to {now:.4e} by clock \
                     {clock}: training is diverging; try a smaller step size (--lr)",
                    node.id()
                );
            }
            // Logged by the node whose evaluation met the rule, once.
            Event::Stop { stop, rule } if stop.by == node.id().0 => {
                tracing::info!(
                    "{}: {rule} met after clock {} (value {:.6e}): every node stops at \
                     clock {}",
                    node.id(),
                    stop.clock,
                    stop.value,
                    stop.at
                );
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;
    use sfb_core::{FactorBatch, ManualTime, VFactors};

    /// A scripted node: at each step it emits the frames of its script's next entry; it is
    /// done after its last entry once it has received `need` frames, and blocked before.
    struct Scripted {
        id: PeerId,
        steps: VecDeque<Vec<PeerId>>,
        need: usize,
        received: Vec<(PeerId, u64)>,
        out: VecDeque<Output>,
        clock: u64,
        waits_on: Vec<(PeerId, u64)>,
        finished: bool,
        /// Set by the links while a send was refused and not yet retried successfully.
        link_full: Rc<Cell<bool>>,
        /// Frames it needs before its first step (blocked until then).
        gate: usize,
    }

    impl Scripted {
        fn new(id: u32, steps: Vec<Vec<u32>>, need: usize) -> Self {
            Self {
                id: PeerId(id),
                steps: steps
                    .into_iter()
                    .map(|s| s.into_iter().map(PeerId).collect())
                    .collect(),
                need,
                received: Vec::new(),
                out: VecDeque::new(),
                clock: 0,
                waits_on: vec![(PeerId(7), 3)],
                finished: false,
                link_full: Rc::default(),
                gate: 0,
            }
        }
    }

    fn msg(origin: PeerId, clock: u64) -> Message {
        Message::Factors {
            batch: Arc::new(FactorBatch {
                origin,
                clock,
                scale: 1.0,
                j: 1,
                d: 1,
                u: vec![1.0],
                v: VFactors::Dense(vec![1.0]),
            }),
            mean_iter_us: 0,
        }
    }

    impl StateMachine for Scripted {
        fn id(&self) -> PeerId {
            self.id
        }
        fn clock(&self) -> u64 {
            self.clock
        }
        fn on_message(
            &mut self,
            from: PeerId,
            msg: Message,
            _time: &mut dyn TimeSource,
        ) -> sfb_core::Result<()> {
            self.received.push((from, msg.clock()));
            Ok(())
        }
        fn on_tick(&mut self, _time: &mut dyn TimeSource) -> sfb_core::Result<Progress> {
            assert!(!self.link_full.get(), "ticked while an output was refused");
            if self.received.len() < self.gate {
                Ok(Progress::Blocked)
            } else if let Some(dests) = self.steps.pop_front() {
                for to in dests {
                    self.out.push_back(Output {
                        to,
                        msg: msg(self.id, self.clock),
                    });
                }
                self.clock += 1;
                Ok(Progress::Stepped)
            } else if self.received.len() >= self.need {
                Ok(Progress::Done)
            } else {
                Ok(Progress::Blocked)
            }
        }
        fn poll_output(&mut self) -> Option<Output> {
            self.out.pop_front()
        }
        fn poll_event(&mut self) -> Option<Event> {
            None
        }
        fn waiting_on(&self) -> Vec<(PeerId, u64)> {
            self.waits_on.clone()
        }
        fn finish(&mut self, _time: &mut dyn TimeSource) {
            self.finished = true;
        }
        fn peer_lost(&mut self, _peer: PeerId) -> sfb_core::Result<bool> {
            Ok(false)
        }
        fn stop_at(&mut self, _t: u64) -> u64 {
            self.clock
        }
    }

    /// In-memory links driven by a script: `inbox` frames become available one per call
    /// of `wait` (or all at once to `try_recv` if `eager`); the link to each destination
    /// holds `room` frames and frees one slot per `wait` call with `room_on` set.
    #[derive(Default)]
    struct FakeLinks {
        inbox: VecDeque<std::result::Result<(PeerId, Message), Error>>,
        eager: bool,
        room: usize,
        queued: std::collections::BTreeMap<u32, usize>,
        sent: Vec<(PeerId, u64)>,
        fulls: usize,
        waits: usize,
        link_full: Rc<Cell<bool>>,
        /// Waits left before `wait` reports a timeout instead of waking.
        waits_before_timeout: Option<usize>,
        /// The first this many waits report that their deadline passed.
        timeouts_first: usize,
        /// The timeout of every wait.
        deadlines: Vec<Duration>,
    }

    impl Links for FakeLinks {
        fn try_recv(&mut self) -> Result<Option<Incoming>> {
            if !self.eager {
                return Ok(None);
            }
            self.inbox
                .pop_front()
                .transpose()
                .map(|f| f.map(|(from, msg)| Incoming::Frame(from, msg)))
        }
        fn try_send(&mut self, out: &Output) -> Result<Sent> {
            let q = self.queued.entry(out.to.0).or_insert(0);
            if *q >= self.room {
                self.fulls += 1;
                self.link_full.set(true);
                return Ok(Sent::Full);
            }
            *q += 1;
            self.link_full.set(false);
            self.sent.push((out.to, out.msg.clock()));
            Ok(Sent::Yes)
        }
        fn wait(&mut self, room_on: Option<PeerId>, timeout: Duration) -> Result<Wake> {
            self.waits += 1;
            self.deadlines.push(timeout);
            if self.timeouts_first > 0 {
                self.timeouts_first -= 1;
                return Ok(Wake::TimedOut);
            }
            if let Some(n) = &mut self.waits_before_timeout {
                if *n == 0 {
                    return Ok(Wake::TimedOut);
                }
                *n -= 1;
            }
            if let Some(to) = room_on {
                let q = self.queued.get_mut(&to.0).expect("a send was tried");
                *q = q.saturating_sub(1);
                return Ok(Wake::Room);
            }
            match self.inbox.pop_front() {
                Some(Ok((from, msg))) => Ok(Wake::In(Incoming::Frame(from, msg))),
                Some(Err(e)) => Err(e),
                None => Ok(Wake::TimedOut),
            }
        }
    }

    fn opts() -> DriveOptions {
        DriveOptions {
            timeout: Some(Duration::from_secs(3600)),
            stall_report: None,
            progress: None,
            keep: Keep::All,
            rejoin_timeout: None,
            checkpoint: None,
            stop_at: None,
            repair: None,
        }
    }

    #[test]
    fn a_full_link_holds_the_node_back_and_loses_or_reorders_nothing() {
        // Three steps, each to peers 1 and 2; each link holds one frame at a time.
        let mut node = Scripted::new(0, vec![vec![1, 2], vec![2, 1], vec![1, 2]], 0);
        let mut links = FakeLinks {
            room: 1,
            ..Default::default()
        };
        links.link_full = Rc::clone(&node.link_full);
        let mut time = ManualTime::default();
        drive(&mut node, &mut links, &mut time, &opts(), &mut Vec::new()).unwrap();
        assert!(node.finished);
        assert!(links.fulls > 0, "the link was never full");
        let to = |p: u32| -> Vec<u64> {
            links
                .sent
                .iter()
                .filter(|(to, _)| to.0 == p)
                .map(|(_, c)| *c)
                .collect()
        };
        assert_eq!(to(1), vec![0, 1, 2]);
        assert_eq!(to(2), vec![0, 1, 2]);
        assert_eq!(links.sent.len(), 6);
    }

    #[test]
    fn the_node_never_steps_while_an_output_is_refused() {
        // A link that holds one frame: each refused send is retried after a wait for room,
        // and the node (which asserts it) is not ticked in between.
        let mut node = Scripted::new(0, vec![vec![1, 1], vec![1]], 0);
        let mut links = FakeLinks {
            room: 1,
            ..Default::default()
        };
        links.link_full = Rc::clone(&node.link_full);
        let mut time = ManualTime::default();
        drive(&mut node, &mut links, &mut time, &opts(), &mut Vec::new()).unwrap();
        assert_eq!(
            links.sent,
            vec![(PeerId(1), 0), (PeerId(1), 0), (PeerId(1), 1)]
        );
        // Refused: the second frame of step 0, then step 1's frame; one wait for each.
        assert_eq!((links.fulls, links.waits), (2, 2));
        assert!(node.finished);
    }

    #[test]
    fn a_blocked_node_times_out_naming_whom_it_waits_on() {
        let mut node = Scripted::new(3, vec![], 1);
        let mut links = FakeLinks::default();
        let mut time = ManualTime::default();
        let err = drive(&mut node, &mut links, &mut time, &opts(), &mut Vec::new()).unwrap_err();
        match &err {
            Error::Timeout {
                peer,
                clock,
                waiting_on,
                ..
            } => {
                assert_eq!(*peer, PeerId(3));
                assert_eq!(*clock, 0);
                assert_eq!(*waiting_on, Awaiting::Peers(vec![(PeerId(7), 3)]));
            }
            other => panic!("{other}"),
        }
        let text = err.to_string();
        assert!(text.contains("p7 (delivered 3 clocks)"), "{text}");
        assert!(!node.finished);
    }

    #[test]
    fn a_node_stuck_on_a_full_link_times_out_naming_the_link() {
        let mut node = Scripted::new(0, vec![vec![2, 2]], 0);
        let mut links = FakeLinks {
            room: 1,
            waits_before_timeout: Some(0),
            ..Default::default()
        };
        let mut time = ManualTime::default();
        let err = drive(&mut node, &mut links, &mut time, &opts(), &mut Vec::new()).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Timeout {
                    waiting_on: Awaiting::Room { to: PeerId(2) },
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("room on the link to p2"), "{err}");
    }

    #[test]
    fn frames_are_delivered_while_waiting_and_while_blocked_on_a_link() {
        // The node needs two frames; one arrives through try_recv, one through wait.
        let mut node = Scripted::new(0, vec![vec![1]], 2);
        let mut links = FakeLinks {
            room: 1,
            inbox: [Ok((PeerId(1), msg(PeerId(1), 0)))].into(),
            eager: true,
            ..Default::default()
        };
        let mut time = ManualTime::default();
        drive(&mut node, &mut links, &mut time, &opts(), &mut Vec::new()).unwrap_err();
        // Not enough frames: a timeout, after delivering the one it had.
        assert_eq!(node.received, vec![(PeerId(1), 0)]);

        let mut node = Scripted::new(0, vec![vec![1]], 2);
        let mut links = FakeLinks {
            room: 1,
            inbox: [
                Ok((PeerId(1), msg(PeerId(1), 0))),
                Ok((PeerId(2), msg(PeerId(2), 0))),
            ]
            .into(),
            ..Default::default()
        };
        drive(&mut node, &mut links, &mut time, &opts(), &mut Vec::new()).unwrap();
        assert_eq!(node.received, vec![(PeerId(1), 0), (PeerId(2), 0)]);
        assert!(node.finished);
    }

    #[test]
    fn a_fatal_inbound_error_stops_the_node() {
        let mut node = Scripted::new(0, vec![], 5);
        let mut links = FakeLinks {
            inbox: [
                Ok((PeerId(1), msg(PeerId(1), 0))),
                Err(Error::Aborted {
                    peer: PeerId(0),
                    by: PeerId(4),
                }),
            ]
            .into(),
            ..Default::default()
        };
        let mut time = ManualTime::default();
        let err = drive(&mut node, &mut links, &mut time, &opts(), &mut Vec::new()).unwrap_err();
        assert!(matches!(err, Error::Aborted { by: PeerId(4), .. }), "{err}");
        assert_eq!(node.received.len(), 1);
        assert!(!node.finished);
    }

    /// The messages of the `tracing` events of this thread while it is the default.
    #[derive(Clone, Default)]
    struct Lines(Arc<std::sync::Mutex<Vec<String>>>);

    impl Lines {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    impl tracing::Subscriber for Lines {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            struct Message(String);
            impl tracing::field::Visit for Message {
                fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                    if f.name() == "message" {
                        self.0 = format!("{v:?}");
                    }
                }
            }
            let mut m = Message(String::new());
            event.record(&mut m);
            self.0.lock().unwrap().push(m.0);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// Drives `node` over `links` with `opts`; returns the result and the lines logged.
    fn drive_logged(
        node: &mut Scripted,
        links: &mut FakeLinks,
        opts: &DriveOptions,
    ) -> (Result<()>, Vec<String>) {
        let lines = Lines::default();
        let r = tracing::subscriber::with_default(lines.clone(), || {
            drive(
                node,
                links,
                &mut ManualTime::default(),
                opts,
                &mut Vec::new(),
            )
        });
        (r, lines.take())
    }

    /// The gaps between consecutive wait deadlines.
    fn gaps(d: &[Duration]) -> Vec<Duration> {
        d.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[test]
    fn a_blocked_node_without_a_timeout_reports_whom_it_waits_for_and_carries_on() {
        // Blocked until one frame arrives; the first two waits pass their deadline.
        let mut node = Scripted::new(3, vec![vec![]], 0);
        node.gate = 1;
        let mut links = FakeLinks {
            inbox: [Ok((PeerId(7), msg(PeerId(7), 3)))].into(),
            timeouts_first: 2,
            ..Default::default()
        };
        let opts = DriveOptions {
            timeout: None,
            stall_report: Some(Duration::from_secs(5)),
            ..opts()
        };
        let (r, lines) = drive_logged(&mut node, &mut links, &opts);
        r.unwrap();
        assert!(node.finished);
        assert_eq!(
            lines[..2],
            [
                "p3 waits at clock 0 for p7 (delivered 3 clocks) — 5 s so far",
                "p3 waits at clock 0 for p7 (delivered 3 clocks) — 10 s so far",
            ]
        );
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[2].starts_with("p3 carries on after waiting ")
                && lines[2].ends_with(" at clock 0"),
            "{lines:?}"
        );
        // It woke for each report, 5 s apart, then waited for the frame.
        assert_eq!(links.deadlines.len(), 3);
        assert_eq!(gaps(&links.deadlines), [Duration::from_secs(5); 2]);
    }

    #[test]
    fn a_stall_on_a_full_link_names_the_link() {
        let mut node = Scripted::new(0, vec![vec![2, 2]], 0);
        let mut links = FakeLinks {
            room: 1,
            timeouts_first: 1,
            ..Default::default()
        };
        let opts = DriveOptions {
            timeout: None,
            stall_report: Some(Duration::from_secs(5)),
            ..opts()
        };
        let (r, lines) = drive_logged(&mut node, &mut links, &opts);
        r.unwrap();
        assert_eq!(
            lines,
            ["p0 waits at clock 1 for room on the link to p2 — 5 s so far"]
        );
        assert_eq!(links.sent, vec![(PeerId(2), 0), (PeerId(2), 0)]);
    }

    #[test]
    fn a_progress_timeout_still_ends_the_stall_reports() {
        let mut node = Scripted::new(3, vec![], 1);
        let mut links = FakeLinks {
            timeouts_first: 3,
            ..Default::default()
        };
        let opts = DriveOptions {
            timeout: Some(Duration::from_secs(12)),
            stall_report: Some(Duration::from_secs(5)),
            ..opts()
        };
        let (r, lines) = drive_logged(&mut node, &mut links, &opts);
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[1].ends_with("10 s so far"), "{lines:?}");
        // Reports at 5 and 10 s, the timeout at 12 s.
        assert_eq!(
            gaps(&links.deadlines),
            [Duration::from_secs(5), Duration::from_secs(2)]
        );
    }

    #[test]
    fn without_timeout_or_reports_a_node_waits_silently_until_the_frame() {
        let mut node = Scripted::new(3, vec![], 1);
        let mut links = FakeLinks {
            inbox: [Ok((PeerId(7), msg(PeerId(7), 0)))].into(),
            timeouts_first: 4,
            ..Default::default()
        };
        let opts = DriveOptions {
            timeout: None,
            ..opts()
        };
        let (r, lines) = drive_logged(&mut node, &mut links, &opts);
        r.unwrap();
        assert!(node.finished);
        assert!(lines.is_empty(), "{lines:?}");
        assert_eq!(links.waits, 5);
    }

    /// Links that hand over scripted frames and news, and record what the node's
    /// membership has them do.
    #[derive(Default)]
    struct NewsLinks {
        inbox: VecDeque<Incoming>,
        announced: Vec<Notice>,
        forgotten: Vec<PeerId>,
    }

    impl Links for NewsLinks {
        fn try_recv(&mut self) -> Result<Option<Incoming>> {
            Ok(self.inbox.pop_front())
        }
        fn try_send(&mut self, _: &Output) -> Result<Sent> {
            Ok(Sent::Yes)
        }
        fn wait(&mut self, _: Option<PeerId>, _: Duration) -> Result<Wake> {
            Ok(Wake::TimedOut)
        }
        fn forget(&mut self, peer: PeerId) {
            self.forgotten.push(peer);
        }
        fn announce(&mut self, notice: Notice) {
            self.announced.push(notice);
        }
    }

    #[test]
    fn the_loops_deadlines_are_times_of_the_nodes_time_source() {
        // Blocked for good: stall reports every 4 s, a progress timeout of 10 s, all read
        // on the node's own clock (here a manual one at 100 s, as on virtual time).
        let mut node = Scripted::new(0, vec![], 1);
        let mut links = NewsLinks::default();
        let mut time = ManualTime::at(Duration::from_secs(100));
        let opts = DriveOptions {
            timeout: Some(Duration::from_secs(10)),
            stall_report: Some(Duration::from_secs(4)),
            ..opts()
        };
        let mut run = NodeLoop::new(node.id(), &opts, &mut time);
        let mut records = Vec::new();
        let mut turn = |run: &mut NodeLoop, node: &mut Scripted, time: &mut ManualTime| {
            run.turn(node, &mut links, time, &opts, &mut records)
                .unwrap()
        };
        let until = |s| Turn::Wait {
            room_on: None,
            until: Some(Duration::from_secs(s)),
        };
        assert_eq!(turn(&mut run, &mut node, &mut time), until(104));
        time.set(Duration::from_secs(104));
        run.timed_out(&node, None, &mut time).unwrap();
        assert_eq!(turn(&mut run, &mut node, &mut time), until(108));
        time.set(Duration::from_secs(108));
        run.timed_out(&node, None, &mut time).unwrap();
        // The next report (112 s) comes after the progress deadline.
        assert_eq!(turn(&mut run, &mut node, &mut time), until(110));
        time.set(Duration::from_secs(110));
        match run.timed_out(&node, None, &mut time).unwrap_err() {
            Error::Timeout { waited, clock, .. } => {
                assert_eq!((waited, clock), (Duration::from_secs(10), 0));
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn news_the_links_bring_is_decided_by_the_nodes_membership() {
        // A neighbour's notice is news for the membership (not an error of the links): the
        // node goes on without the peer, passes the news on once and forgets it.
        let mut node = Scripted::new(0, vec![vec![]], 0);
        let told = |about| {
            Incoming::News(News::Told {
                from: PeerId(1),
                notice: Notice::Lost {
                    peer: about,
                    life: 0,
                },
            })
        };
        let mut links = NewsLinks {
            inbox: [
                told(3),
                told(3),
                Incoming::Frame(PeerId(3), msg(PeerId(3), 0)),
            ]
            .into(),
            ..Default::default()
        };
        let mut time = ManualTime::default();
        let opts = opts();
        let mut run = NodeLoop::new(node.id(), &opts, &mut time);
        let turn = run
            .turn(&mut node, &mut links, &mut time, &opts, &mut Vec::new())
            .unwrap();
        assert_eq!(turn, Turn::Again);
        assert_eq!(run.membership().lost(), [PeerId(3)]);
        assert_eq!(links.announced, [Notice::Lost { peer: 3, life: 0 }]);
        assert_eq!(links.forgotten, [PeerId(3)]);
        // The lost peer's frame, still in flight when the notice overtook it, is dropped.
        assert!(node.received.is_empty());
    }
}
