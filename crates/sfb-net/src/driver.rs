//! The one driver loop: how a node's messages move, whatever moves them.
//!
//! A transport implements [`Links`] (receive without waiting, send without waiting, wait
//! for either until a deadline); [`drive`] runs a [`StateMachine`] over them. The loop's
//! discipline, the same for every transport:
//! 1. deliver every frame that has arrived;
//! 2. send queued outputs in order until one destination's link is full;
//! 3. if an output is still queued, do **not** compute: wait until its link has room or a
//!    frame arrives (draining the inbox while blocked on a send means two nodes sending to
//!    each other cannot deadlock, and a slow receiver slows its senders);
//! 4. otherwise tick the node: on a step queue its outputs and report its records; when it
//!    is blocked, wait for a frame; when it is done, finish it and return;
//! 5. while it waits, a node with a [`DriveOptions::timeout`] that goes that long without
//!    progress (no frame received, no output sent, no step) fails with [`Error::Timeout`]
//!    naming what it was waiting for; one with [`DriveOptions::stall_report`] logs whom it
//!    waits for each time it has waited that long more since its last step, and a line when
//!    it steps again.
//!
//! Progress is not liveness: whether the nodes it waits for are alive is the links'
//! business (an `Err` from [`Links::wait`]). The in-memory transport, threads of one
//! process, keeps a hard progress timeout; the libp2p transport sets none and relies on its
//! heartbeats instead, so a peer paused for a while is waited for, not declared dead.
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

/// Why [`Links::wait`] returned.
#[derive(Debug)]
pub enum Wake {
    /// A frame from `.0` arrived.
    Frame(PeerId, Message),
    /// The awaited link may have room (a send may still find it full; the loop retries).
    Room,
    /// The deadline passed.
    TimedOut,
}

/// A node's links to the rest of the cluster, as the driver loop sees them.
///
/// A fatal condition (a broken stream, a bad frame, another node's failure) is an `Err`
/// from any method; the loop stops with it.
pub trait Links {
    /// The next frame that has arrived, without waiting; `None` if there is none now.
    ///
    /// # Errors
    /// A fatal condition the transport noticed.
    fn try_recv(&mut self) -> Result<Option<(PeerId, Message)>>;

    /// Sends `out` to `out.to` if its link has room, without waiting. On [`Sent::Full`]
    /// nothing was sent: the loop keeps `out` and offers it again. Sends to one destination
    /// must arrive in the order they are accepted.
    ///
    /// # Errors
    /// The destination's link is closed or unknown.
    fn try_send(&mut self, out: &Output) -> Result<Sent>;

    /// Waits until a frame arrives, or (if `room_on` is given) the link to `room_on` may
    /// have room, or `deadline` passes.
    ///
    /// # Errors
    /// A fatal condition, or every inbound link closed.
    fn wait(&mut self, room_on: Option<PeerId>, deadline: Instant) -> Result<Wake>;

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
}

impl<L: Links + ?Sized> Links for &mut L {
    fn try_recv(&mut self) -> Result<Option<(PeerId, Message)>> {
        (**self).try_recv()
    }
    fn try_send(&mut self, out: &Output) -> Result<Sent> {
        (**self).try_send(out)
    }
    fn wait(&mut self, room_on: Option<PeerId>, deadline: Instant) -> Result<Wake> {
        (**self).wait(room_on, deadline)
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

/// Options of [`drive`].
#[derive(Clone)]
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
/// [`finish`](StateMachine::finish)) or fails. Every record the node emits is passed to
/// [`DriveOptions::progress`] and appended to `records` (with [`Keep::Last`], replacing
/// what is there). A node held back by flow control ([`Event::Drift`]) is reported with a
/// warning at most every [`DRIFT_WARN_EVERY`]; a node that cannot step for
/// [`DriveOptions::stall_report`] says whom it waits for, again after each such interval.
///
/// # Arguments
/// - `time`: the node's clock (for [`StateMachine::on_message`], `on_tick` and `finish`);
///   the progress timeout and stall reports are measured in real time.
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
    let me = node.id();
    let peer_err = |source| Error::Peer { peer: me, source };
    let mut outbox: VecDeque<Output> = VecDeque::new();
    let mut last_progress = Instant::now();
    // Stall reports count from the last step; `reported`: the clock this stall was
    // reported at.
    let mut last_step = last_progress;
    let mut next_report = opts.stall_report.map(|every| last_step + every);
    let mut reported = None;
    // Who is in the run, as this node sees it.
    let mut membership = Membership::new(opts.repair.clone());
    let mut stopping = false;
    // Stopped alone (`stop_at` 0: now), not with the whole run: a planned leave.
    let mut leaving = false;
    // A rejoining node gives up when no neighbour takes it back in time.
    let started = Instant::now();
    let rejoin_deadline = opts.rejoin_timeout.map(|t| started + t);
    loop {
        if !stopping
            && let Some(t) = opts.stop_at.as_ref().map(|a| a.load(Ordering::Relaxed))
            && t != u64::MAX
        {
            if node.rejoining() {
                return Err(Error::NotTakenBack {
                    peer: me,
                    waited: started.elapsed(),
                    why: "it was told to stop (a signal, or the launcher's stop) before a \
                          neighbour sent it the run's state",
                });
            }
            stopping = true;
            leaving = t == 0;
            let at = node.stop_at(t);
            tracing::warn!("{me} stops at clock {at} (asked to stop at {t})");
        }
        if node.rejoining()
            && let Some(d) = rejoin_deadline
            && Instant::now() >= d
        {
            return Err(Error::NotTakenBack {
                peer: me,
                waited: started.elapsed(),
                why: "no neighbour sent it the run's state: the run may have ended while it \
                      was away, or every peer that sends to it is gone",
            });
        }
        loop {
            match links.try_recv() {
                // A frame of a node already lost was in flight when a neighbour's notice
                // overtook it: the node went on without it.
                Ok(Some((from, _))) if membership.is_lost(from) => {}
                Ok(Some((from, msg))) => {
                    node.on_message(from, msg, time).map_err(peer_err)?;
                    last_progress = Instant::now();
                }
                Ok(None) => break,
                Err(e) => go_on_without(node, links, &mut outbox, &mut membership, e)?,
            }
        }
        while let Some(out) = outbox.front() {
            match links.try_send(out) {
                Ok(Sent::Yes) => {
                    outbox.pop_front();
                    last_progress = Instant::now();
                }
                Ok(Sent::Full) => break,
                Err(e) => go_on_without(node, links, &mut outbox, &mut membership, e)?,
            }
        }
        let room_on = outbox.front().map(|o| o.to);
        if room_on.is_none() {
            match node.on_tick(time).map_err(peer_err)? {
                Progress::Stepped => {
                    last_progress = Instant::now();
                    if let Some(clock) = reported.take() {
                        tracing::warn!(
                            "{me} carries on after waiting {:.1} s at clock {clock}",
                            last_progress.duration_since(last_step).as_secs_f64()
                        );
                    }
                    last_step = last_progress;
                    next_report = opts.stall_report.map(|every| last_step + every);
                    outbox.extend(std::iter::from_fn(|| node.poll_output()));
                    drain_events(node, opts, records)?;
                    continue;
                }
                Progress::Done => {
                    // Frames queued by the last tick (a relaying peer's last forwards) go
                    // out first; the next tick reports Done again.
                    outbox.extend(std::iter::from_fn(|| node.poll_output()));
                    if !outbox.is_empty() {
                        continue;
                    }
                    if leaving {
                        links.announce_leaving(membership.leaving(me));
                    }
                    node.finish(time);
                    drain_events(node, opts, records)?;
                    return Ok(());
                }
                Progress::Blocked => {
                    drain_events(node, opts, records)?;
                    // A blocked node may still have frames to pass on (a relaying peer
                    // forwards while it waits for the end of the run).
                    let before = outbox.len();
                    outbox.extend(std::iter::from_fn(|| node.poll_output()));
                    if outbox.len() > before {
                        last_progress = Instant::now();
                        continue;
                    }
                }
            }
        }
        // Wake at the progress deadline or the next stall report, whichever comes first; a
        // `TimedOut` wake means that moment came (the links' contract).
        let deadline = opts.timeout.map(|t| last_progress + t);
        let (mut wake_at, mut due) = match (deadline, next_report) {
            (Some(d), Some(r)) if r < d => (r, Due::Report),
            (Some(d), _) => (d, Due::Timeout),
            (None, Some(r)) => (r, Due::Report),
            (None, None) => (Instant::now() + IDLE_WAIT, Due::Nothing),
        };
        if node.rejoining()
            && let Some(d) = rejoin_deadline
            && d < wake_at
        {
            // Checked at the top of the loop.
            (wake_at, due) = (d, Due::Nothing);
        }
        let woke = match links.wait(room_on, wake_at) {
            Ok(w) => w,
            Err(e) => {
                go_on_without(node, links, &mut outbox, &mut membership, e)?;
                continue;
            }
        };
        match woke {
            Wake::Frame(from, _) if membership.is_lost(from) => {}
            Wake::Frame(from, msg) => {
                node.on_message(from, msg, time).map_err(peer_err)?;
                last_progress = Instant::now();
            }
            Wake::Room => {}
            Wake::TimedOut => {
                let waiting_on = || match room_on {
                    Some(to) => Awaiting::Room { to },
                    None => Awaiting::Peers(node.waiting_on()),
                };
                match due {
                    Due::Timeout => {
                        return Err(Error::Timeout {
                            peer: me,
                            clock: node.clock(),
                            waited: last_progress.elapsed(),
                            waiting_on: waiting_on(),
                        });
                    }
                    Due::Report => {
                        // A late wake (this process was stopped, or busy) counts in full,
                        // and the next report is one interval from now: no bursts.
                        let now = wake_at.max(Instant::now());
                        if node.rejoining() {
                            tracing::warn!(
                                "{me} waits for a neighbour to take it back into the run — \
                                 {:.0} s so far",
                                now.saturating_duration_since(started).as_secs_f64()
                            );
                            next_report = opts.stall_report.map(|every| now + every);
                            continue;
                        }
                        let stall = Stall {
                            peer: me,
                            clock: node.clock(),
                            waiting_on: waiting_on(),
                            waited: now.saturating_duration_since(last_step),
                        };
                        tracing::warn!("{stall}");
                        reported = Some(stall.clock);
                        next_report = opts.stall_report.map(|every| now + every);
                    }
                    Due::Nothing => {}
                }
            }
        }
    }
}

/// Handles an error of the links: news of membership ([`Error::lost_peer`], a neighbour's
/// notice or state) goes to the node's [`Membership`], which decides; this carries out
/// what it says on the links and the outbox and returns `Ok`. Any other error, or the
/// node's refusal to go on, is returned.
fn go_on_without<N, L>(
    node: &mut N,
    links: &mut L,
    outbox: &mut VecDeque<Output>,
    membership: &mut Membership,
    e: Error,
) -> Result<()>
where
    N: StateMachine + ?Sized,
    L: Links + ?Sized,
{
    // The links' error, kept to be returned if the node refuses to go on (it says best
    // what happened); none for a state or a return.
    let (news, e) = match e {
        Error::RejoinState { state, .. } => (News::State(state), None),
        Error::Joined {
            joined, life: None, ..
        } => (News::Up { peer: joined }, None),
        Error::Joined {
            joined,
            life: Some(life),
            ..
        } => (
            News::Notice(Notice::Joined {
                peer: joined.0,
                life,
            }),
            None,
        ),
        e => {
            let news = match &e {
                Error::LostNotice {
                    from, lost, life, ..
                } => News::Told {
                    from: *from,
                    notice: Notice::Lost {
                        peer: lost.0,
                        life: *life,
                    },
                },
                Error::Left {
                    from, left, life, ..
                } => News::Told {
                    from: *from,
                    notice: Notice::Left {
                        peer: left.0,
                        life: *life,
                    },
                },
                other => match other.lost_peer() {
                    Some(peer) => News::Down {
                        peer,
                        why: other.to_string(),
                    },
                    None => return Err(e),
                },
            };
            (news, Some(e))
        }
    };
    let mut actions = Vec::new();
    let r = membership.on_news(node, news, &mut actions);
    for a in actions {
        match a {
            Action::Forget(peer) => {
                outbox.retain(|o| o.to != peer);
                links.forget(peer);
            }
            Action::Announce(notice) => links.announce(notice),
            Action::Rewired { out, .. } => {
                for to in out {
                    links.connect(to);
                }
            }
            Action::Connect(peer) => links.connect(peer),
            Action::SendState(to, state) => links.send_state(to, &state),
            Action::Warn(line) => tracing::warn!("{line}"),
            Action::Info(line) => tracing::info!("{line}"),
            Action::Debug(line) => tracing::debug!("{line}"),
        }
    }
    match r {
        Ok(()) => Ok(()),
        // Cut off from a majority, or from everyone from the start, or a state that does
        // not fit: the engine's error says what happened.
        Err(source @ (sfb_core::Error::Minority { .. } | sfb_core::Error::Isolated { .. })) => {
            Err(Error::Peer {
                peer: node.id(),
                source,
            })
        }
        // The node's policy is to stop: the transport's error says best what happened.
        Err(source) => Err(e.unwrap_or(Error::Peer {
            peer: node.id(),
            source,
        })),
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
        /// The deadline of every wait.
        deadlines: Vec<Instant>,
    }

    impl Links for FakeLinks {
        fn try_recv(&mut self) -> Result<Option<(PeerId, Message)>> {
            if !self.eager {
                return Ok(None);
            }
            self.inbox.pop_front().transpose()
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
        fn wait(&mut self, room_on: Option<PeerId>, deadline: Instant) -> Result<Wake> {
            assert!(deadline > Instant::now() - Duration::from_secs(3600));
            self.waits += 1;
            self.deadlines.push(deadline);
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
                Some(Ok((from, msg))) => Ok(Wake::Frame(from, msg)),
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
    fn gaps(d: &[Instant]) -> Vec<Duration> {
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
}
