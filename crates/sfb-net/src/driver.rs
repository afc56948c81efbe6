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
//! 5. a node that goes [`DriveOptions::timeout`] without progress (no frame received, no
//!    output sent, no step) fails with [`Error::Timeout`] naming what it was waiting for.
//!
//! Outputs leave in the order the node produced them: the loop never reorders or drops
//! one, and [`Links::try_send`] must not either.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sfb_core::metrics::ClockRecord;
use sfb_core::wire::Message;
use sfb_core::{Event, Output, PeerId, Progress, StateMachine, TimeSource};

use crate::error::Awaiting;
use crate::{Error, Result};

/// A per-clock progress callback.
pub type ProgressFn = Arc<dyn Fn(&ClockRecord) + Send + Sync>;

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
    /// Longest the node may go without progress before it fails with [`Error::Timeout`].
    pub timeout: Duration,
    /// Called with each record as the node emits it, the final one included.
    pub progress: Option<ProgressFn>,
    /// Which records `drive` appends to its `records`.
    pub keep: Keep,
}

impl std::fmt::Debug for DriveOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriveOptions")
            .field("timeout", &self.timeout)
            .field("progress", &self.progress.is_some())
            .field("keep", &self.keep)
            .finish()
    }
}

/// Drives `node` over `links` until it is done (then calls
/// [`finish`](StateMachine::finish)) or fails. Every record the node emits is passed to
/// [`DriveOptions::progress`] and appended to `records` (with [`Keep::Last`], replacing
/// what is there). A node held back by flow control ([`Event::Drift`]) is reported with a
/// warning at most every [`DRIFT_WARN_EVERY`].
///
/// # Arguments
/// - `time`: the node's clock (for [`StateMachine::on_message`], `on_tick` and `finish`);
///   the progress timeout is measured in real time.
///
/// # Errors
/// The node's errors ([`Error::Peer`]); the links' errors; [`Error::Timeout`] after
/// [`DriveOptions::timeout`] without progress, naming whom the node waits on or the full
/// link.
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
    let me = node.id();
    let peer_err = |source| Error::Peer { peer: me, source };
    let mut outbox: VecDeque<Output> = VecDeque::new();
    let mut last_progress = Instant::now();
    loop {
        while let Some((from, msg)) = links.try_recv()? {
            node.on_message(from, msg, time).map_err(peer_err)?;
            last_progress = Instant::now();
        }
        while let Some(out) = outbox.front() {
            match links.try_send(out)? {
                Sent::Yes => {
                    outbox.pop_front();
                    last_progress = Instant::now();
                }
                Sent::Full => break,
            }
        }
        let room_on = outbox.front().map(|o| o.to);
        if room_on.is_none() {
            match node.on_tick(time).map_err(peer_err)? {
                Progress::Stepped => {
                    last_progress = Instant::now();
                    outbox.extend(std::iter::from_fn(|| node.poll_output()));
                    drain_events(node, opts, records);
                    continue;
                }
                Progress::Done => {
                    node.finish(time);
                    drain_events(node, opts, records);
                    return Ok(());
                }
                Progress::Blocked => drain_events(node, opts, records),
            }
        }
        match links.wait(room_on, last_progress + opts.timeout)? {
            Wake::Frame(from, msg) => {
                node.on_message(from, msg, time).map_err(peer_err)?;
                last_progress = Instant::now();
            }
            Wake::Room => {}
            Wake::TimedOut => {
                let waiting_on = match room_on {
                    Some(to) => Awaiting::Room { to },
                    None => Awaiting::Peers(node.waiting_on()),
                };
                return Err(Error::Timeout {
                    peer: me,
                    clock: node.clock(),
                    waited: last_progress.elapsed(),
                    waiting_on,
                });
            }
        }
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
) {
    while let Some(ev) = node.poll_event() {
        match ev {
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
            _ => {}
        }
    }
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
            if let Some(dests) = self.steps.pop_front() {
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
            timeout: Duration::from_secs(3600),
            progress: None,
            keep: Keep::All,
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
}
