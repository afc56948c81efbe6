//! The in-memory cluster: P engines on threads, joined by bounded channels.
//!
//! Every peer owns one bounded inbox. A peer that finds a destination's inbox full keeps
//! the frame in its own outbox and, until it can send, keeps draining its inbox (so two
//! peers sending to each other can never deadlock) but does not compute: a slow receiver
//! slows its senders. Every wait is bounded by [`Options::timeout`]; a peer that waits
//! longer fails with [`Error::Timeout`] naming whom it was waiting on, and a failing peer
//! tells the others to stop. The loop is the crate's one [`driver::drive`]; this module
//! supplies its links (crossbeam channels).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select, Sender, TryRecvError, TrySendError};
use sfb_core::metrics::ClockRecord;
use sfb_core::wire::Message;
use sfb_core::{Engine, Model, Output, PeerId, StateMachine, Stragglers};

use crate::clock::{Stop, WallClock};
use crate::driver::{
    self, CheckpointFn, DriveOptions, Incoming, Keep, Links, ProgressFn, Sent, Wake,
};
use crate::{Error, Result};

/// Options of an in-memory run.
#[derive(Clone)]
pub struct Options {
    /// Frames each peer's inbox holds before senders block. Default: 64.
    pub capacity: usize,
    /// Longest a peer may wait without receiving anything. Default: 30 s.
    pub timeout: Duration,
    /// Called on the peer's thread with each record as the peer emits it (e.g. to show
    /// progress).
    pub progress: Option<ProgressFn>,
    /// Injected slowness: real delay after the slow nodes' compute. Default: none.
    pub stragglers: Stragglers,
    /// Which per-clock records each [`PeerRun`] keeps (every one reaches `progress`).
    /// Default: all.
    pub keep: Keep,
    /// Where every node's checkpoint states go (called on the node's thread). Default:
    /// none (states are dropped).
    pub checkpoint: Option<CheckpointFn>,
    /// A coordinated stop, as [`DriveOptions::stop_at`](crate::driver::DriveOptions): set
    /// it to a clock no node has passed (e.g. on a failed output write) and every node
    /// ends its run there, checkpointing if it checkpoints. Default: none.
    pub stop_at: Option<Arc<AtomicU64>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("capacity", &self.capacity)
            .field("timeout", &self.timeout)
            .field("progress", &self.progress.is_some())
            .field("stragglers", &self.stragglers)
            .field("keep", &self.keep)
            .field("checkpoint", &self.checkpoint.is_some())
            .field("stop_at", &self.stop_at)
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            capacity: 64,
            timeout: Duration::from_secs(30),
            progress: None,
            checkpoint: None,
            stragglers: Stragglers::None,
            keep: Keep::All,
            stop_at: None,
        }
    }
}

/// One peer after its run.
#[derive(Debug)]
pub struct PeerRun<M: Model> {
    /// The engine, with its final replica and metrics.
    pub engine: Engine<M>,
    /// Per-clock records, in order (the last one after the final evaluation).
    pub records: Vec<ClockRecord>,
}

#[derive(Debug)]
pub(crate) enum Envelope {
    Frame(PeerId, Message),
    /// The sender failed: stop.
    Abort(PeerId),
    /// The sender's thread panicked: it is lost (the receiver's peer-loss policy decides).
    Crashed(PeerId),
}

/// Runs `engines` (peer `i` at index `i`) to completion. A peer whose thread panics is
/// a crashed peer: the others lose it, and under a continue policy
/// ([`sfb_core::PeerLoss::Continue`]) they finish without it and it is left out of the
/// result (each run says which peer it is); otherwise the panic is the run's error.
///
/// # Errors
/// [`Error::EngineMismatch`] if an engine is not at its index or belongs to another cluster
/// size; otherwise the first peer error (engine errors, timeouts); peers stopped because of it are not
/// reported separately.
pub fn run<M: Model>(engines: Vec<Engine<M>>, opts: &Options) -> Result<Vec<PeerRun<M>>> {
    let p = engines.len();
    for (i, e) in engines.iter().enumerate() {
        if e.config().id.index() != i || e.config().peers != p {
            return Err(Error::EngineMismatch {
                index: i,
                id: e.config().id,
                peers: e.config().peers,
                expected: p,
            });
        }
    }
    let (txs, rxs) = inboxes(p, opts);
    let stop = &Stop::default();
    if p == 1 {
        // A lone peer runs on the calling thread, so its kernels use the caller's pool
        // (a calibration gives each of its co-located runs a pool of its own).
        let (engine, rx) = engines.into_iter().zip(rxs).next().expect("one peer");
        return drive(engine, rx, txs, peer_slot, opts, stop)
            .map(|(engine, records)| vec![PeerRun { engine, records }]);
    }
    let results: Vec<Result<PeerRun<M>>> = thread::scope(|s| {
        let handles: Vec<_> = engines
            .into_iter()
            .zip(rxs)
            .map(|(engine, rx)| {
                let txs = txs.clone();
                s.spawn(move || drive(engine, rx, txs, peer_slot, opts, stop))
            })
            .collect();
        drop(txs);
        handles
            .into_iter()
            .map(|h| {
                // `drive` catches the node's panics.
                h.join()
                    .expect("a peer thread outside its node panicked")
                    .map(|(engine, records)| PeerRun { engine, records })
            })
            .collect()
    });
    first_error(results)
}

/// One bounded inbox per node.
pub(crate) fn inboxes(
    nodes: usize,
    opts: &Options,
) -> (Vec<Sender<Envelope>>, Vec<Receiver<Envelope>>) {
    (0..nodes)
        .map(|_| crossbeam_channel::bounded(opts.capacity.max(1)))
        .unzip()
}

/// Where frames for a node go: the index of its inbox.
pub(crate) type Slot = fn(PeerId, usize) -> usize;

/// Peer `i`'s inbox is `txs[i]`.
pub(crate) fn peer_slot(id: PeerId, _nodes: usize) -> usize {
    id.index()
}

/// A node's links in memory: its own bounded inbox and every node's inbox sender.
struct ChannelLinks<'a> {
    me: PeerId,
    rx: Receiver<Envelope>,
    txs: &'a [Sender<Envelope>],
    slot: Slot,
}

impl ChannelLinks<'_> {
    fn inbox(&self, to: PeerId) -> &Sender<Envelope> {
        &self.txs[(self.slot)(to, self.txs.len())]
    }

    fn open(&self, env: Envelope) -> Result<Incoming> {
        match env {
            Envelope::Frame(from, msg) => Ok(Incoming::Frame(from, msg)),
            Envelope::Abort(by) => Err(Error::Aborted { peer: self.me, by }),
            // A link event (`Error::lost_peer`): the node's membership decides what it
            // means, and under a policy to fail the run's error names the crash.
            Envelope::Crashed(crashed) => Err(Error::Crashed {
                peer: self.me,
                crashed,
            }),
        }
    }
}

impl Links for ChannelLinks<'_> {
    fn try_recv(&mut self) -> Result<Option<Incoming>> {
        match self.rx.try_recv() {
            Ok(env) => self.open(env).map(Some),
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => Ok(None),
        }
    }

    fn try_send(&mut self, out: &Output) -> Result<Sent> {
        match self
            .inbox(out.to)
            .try_send(Envelope::Frame(self.me, out.msg.clone()))
        {
            Ok(()) => Ok(Sent::Yes),
            Err(TrySendError::Full(_)) => Ok(Sent::Full),
            Err(TrySendError::Disconnected(_)) => Err(Error::Disconnected {
                peer: self.me,
                to: out.to,
            }),
        }
    }

    fn wait(&mut self, room_on: Option<PeerId>, timeout: Duration) -> Result<Wake> {
        // A timeout too long for an `Instant` is no deadline.
        let deadline = Instant::now().checked_add(timeout);
        let closed = || Error::InboxClosed { peer: self.me };
        let Some(to) = room_on else {
            let got = match deadline {
                Some(d) => self.rx.recv_deadline(d),
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            return match got {
                Ok(env) => self.open(env).map(Wake::In),
                Err(RecvTimeoutError::Timeout) => Ok(Wake::TimedOut),
                Err(RecvTimeoutError::Disconnected) => Err(closed()),
            };
        };
        let mut sel = Select::new();
        let r = sel.recv(&self.rx);
        sel.send(self.inbox(to));
        let ready = match deadline {
            Some(d) => sel.ready_deadline(d),
            None => Ok(sel.ready()),
        };
        match ready {
            Ok(i) if i == r => match self.rx.try_recv() {
                Ok(env) => self.open(env).map(Wake::In),
                // Taken by nobody else, so only a race with the ready signal: look again.
                Err(TryRecvError::Empty) => Ok(Wake::Room),
                Err(TryRecvError::Disconnected) => Err(closed()),
            },
            Ok(_) => Ok(Wake::Room),
            Err(_) => Ok(Wake::TimedOut),
        }
    }
}

/// Drives one node on its thread until it is done or fails; on failure tells every other
/// node to stop. `txs[slot(id, txs.len())]` is node `id`'s inbox.
pub(crate) fn drive<N: StateMachine>(
    mut node: N,
    rx: Receiver<Envelope>,
    txs: Vec<Sender<Envelope>>,
    slot: Slot,
    opts: &Options,
    stop: &Stop,
) -> Result<(N, Vec<ClockRecord>)> {
    let me = node.id();
    let mine = slot(me, txs.len());
    let mut records = Vec::new();
    let mut time = WallClock::new(Instant::now(), opts.stragglers).with_stop(stop.clone());
    let mut links = ChannelLinks {
        me,
        rx,
        txs: &txs,
        slot,
    };
    let drive_opts = DriveOptions {
        timeout: Some(opts.timeout),
        stall_report: None,
        progress: opts.progress.clone(),
        keep: opts.keep,
        rejoin_timeout: None,
        checkpoint: opts.checkpoint.clone(),
        stop_at: opts.stop_at.clone(),
        repair: None,
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        driver::drive(&mut node, &mut links, &mut time, &drive_opts, &mut records)
    }));
    let r = match r {
        Ok(r) => r,
        Err(panic) => {
            // A crash, as a process's: the others lose this node. Its inbox closes first,
            // so that none stays blocked sending to it while it tells them.
            let clock = records.last().map_or(0, |r| r.clock);
            drop(links);
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message")
                .to_string();
            tracing::warn!("{me}'s thread panicked after clock {clock}: {why}");
            for (i, tx) in txs.iter().enumerate() {
                if i != mine {
                    let _ = tx.send_timeout(Envelope::Crashed(me), opts.timeout);
                }
            }
            return Err(Error::Panicked {
                peer: me,
                clock,
                why,
            });
        }
    };
    if let Err(e) = &r
        && !matches!(e, Error::Aborted { .. })
    {
        // Cut every injected delay short, then tell every node to stop.
        stop.stop();
        for (i, tx) in txs.iter().enumerate() {
            if i != mine {
                let _ = tx.try_send(Envelope::Abort(me));
            }
        }
    }
    r.map(|()| (node, records))
}

/// Splits per-node results: the first real error wins over the `Aborted` and `Crashed`
/// errors it caused, and a panic over the failures it caused (among them a link found
/// closed: a panicking node drops its links before it tells the others, so a node that
/// sends to it then may see the closed link first). Nodes whose thread panicked while
/// every other one finished are left out: the others went on without them.
pub(crate) fn first_error<T>(results: Vec<Result<T>>) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(results.len());
    let (mut first_consequence, mut first_panic) = (None, None);
    for r in results {
        match r {
            Ok(x) => out.push(x),
            Err(
                e @ (Error::Aborted { .. } | Error::Crashed { .. } | Error::Disconnected { .. }),
            ) => {
                first_consequence.get_or_insert(e);
            }
            Err(e @ Error::Panicked { .. }) => {
                first_panic.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    match (first_panic, first_consequence) {
        (Some(e), Some(_)) | (None, Some(e)) => Err(e),
        (Some(e), None) if out.is_empty() => Err(e),
        _ => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panicking node drops its links before it tells the others: a node that finds
    /// the link closed first fails with `Disconnected`, and the panic still wins (it
    /// failed once in CI under load: `peer p1: link to p2 closed before the run
    /// completed`). A closed link with no panic behind it is the run's error.
    #[test]
    fn a_panic_wins_over_the_closed_links_it_caused() {
        let closed = || -> Result<()> {
            Err(Error::Disconnected {
                peer: PeerId(1),
                to: PeerId(2),
            })
        };
        let panicked = || -> Result<()> {
            Err(Error::Panicked {
                peer: PeerId(2),
                clock: 9,
                why: "injected crash".into(),
            })
        };
        let e = first_error(vec![Ok(()), closed(), panicked(), Ok(())]).unwrap_err();
        assert!(matches!(e, Error::Panicked { .. }), "{e}");
        let e = first_error(vec![Ok(()), closed(), Ok(())]).unwrap_err();
        assert!(matches!(e, Error::Disconnected { .. }), "{e}");
    }
}
