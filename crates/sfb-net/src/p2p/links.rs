//! The engine thread's [`Links`]: bounded queues to the writers, the readers' inbox.
//!
//! The engine thread is a blocking thread; it waits on the tokio runtime through its
//! handle. Frames are encoded here, on the send side, once per shared payload: a factor
//! batch (or the FMS server's W) addressed to several out-neighbours is encoded for the
//! first and the bytes are shared with the rest.

use std::sync::Arc;
use std::time::Duration;

use sfb_core::wire::{self, Message};
use sfb_core::{News, Output, PeerId};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::{TryRecvError, TrySendError};

use super::{Inbound, NetStats};
use crate::driver::{Egress, Incoming, Links, Sent, Wake};
use crate::{Error, Result};

/// A node's libp2p links as the driver loop sees them.
pub(super) struct QueueLinks {
    me: PeerId,
    /// sfb-core id of every node index.
    nodes: Vec<PeerId>,
    /// Bounded queue to each out-neighbour's writer, by node index.
    queues: Vec<Option<mpsc::Sender<Arc<Vec<u8>>>>>,
    inbox: mpsc::Receiver<Inbound>,
    handle: tokio::runtime::Handle,
    dtype: wire::Dtype,
    /// The last message encoded and its bytes. Holding the message keeps its payload
    /// alive, so a payload address seen here cannot be reused by another payload.
    cache: Option<(Message, Arc<Vec<u8>>)>,
    /// Nodes the engine went on without ([`Links::forget`]).
    forgotten: Vec<PeerId>,
    /// Opens a writer to a node index (a new out-neighbour), returning its queue.
    spawner: Option<Spawner>,
    /// By node index: the send of a notice that found the queue full, still under way.
    /// Frames to that node wait for it, so that a notice is never overtaken by a frame
    /// sent after it (a neighbour must learn of a loss before the frames of the topology
    /// repaired for it).
    behind: Vec<Option<tokio::task::JoinHandle<()>>>,
    /// The writers' counters, whose [`NetStats::egress`] is the links' egress.
    stats: Option<Arc<NetStats>>,
}

/// Starts a writer to a node index and returns its queue.
pub(super) type Spawner = Box<dyn Fn(usize) -> mpsc::Sender<Arc<Vec<u8>>> + Send>;

impl QueueLinks {
    pub(super) fn new(
        me: PeerId,
        nodes: Vec<PeerId>,
        queues: Vec<Option<mpsc::Sender<Arc<Vec<u8>>>>>,
        inbox: mpsc::Receiver<Inbound>,
        handle: tokio::runtime::Handle,
        dtype: wire::Dtype,
    ) -> Self {
        let n = nodes.len();
        Self {
            me,
            nodes,
            queues,
            inbox,
            handle,
            dtype,
            cache: None,
            forgotten: Vec::new(),
            spawner: None,
            behind: (0..n).map(|_| None).collect(),
            stats: None,
        }
    }

    /// Reports the writers' egress ([`Links::egress`]) from `stats`.
    pub(super) fn with_stats(mut self, stats: Arc<NetStats>) -> Self {
        self.stats = Some(stats);
        self
    }

    /// Queues the notice `notice` for every out-neighbour, in order with the frames to it:
    /// at once where the queue has room; otherwise off the engine thread (a full queue
    /// must not hold the engine), and frames to that node then wait until it is sent
    /// ([`QueueLinks::behind`]).
    fn notify_all(&mut self, notice: wire::Notice) {
        let frame = Arc::new(self.notice(notice));
        for (i, q) in self.queues.iter().enumerate() {
            let Some(q) = q else { continue };
            let prev = self.behind[i].take().filter(|h| !h.is_finished());
            let f = if prev.is_none() {
                match q.try_send(Arc::clone(&frame)) {
                    Ok(()) | Err(TrySendError::Closed(_)) => continue,
                    Err(TrySendError::Full(f)) => f,
                }
            } else {
                Arc::clone(&frame)
            };
            let q = q.clone();
            self.behind[i] = Some(self.handle.spawn(async move {
                if let Some(prev) = prev {
                    let _ = prev.await;
                }
                let _ = q.send(f).await;
            }));
        }
    }

    /// Whether a notice to node index `i` is still under way.
    fn is_behind(&self, i: usize) -> bool {
        self.behind[i].as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Waits until the notices to node index `i` under way are sent.
    fn catch_up(&mut self, i: usize) {
        if let Some(h) = self.behind[i].take() {
            let _ = self.handle.block_on(h);
        }
    }

    /// Links that can open writers to new out-neighbours ([`Links::connect`]).
    pub(super) fn with_spawner(mut self, spawner: Spawner) -> Self {
        self.spawner = Some(spawner);
        self
    }

    /// The nodes the engine went on without, by node index (their writers' failures are
    /// not the run's).
    pub(super) fn forgotten(&self) -> Vec<usize> {
        self.forgotten
            .iter()
            .filter_map(|p| self.nodes.iter().position(|n| n == p))
            .collect()
    }

    fn queue(&self, to: PeerId) -> Result<&mpsc::Sender<Arc<Vec<u8>>>> {
        self.nodes
            .iter()
            .position(|&n| n == to)
            .and_then(|i| self.queues[i].as_ref())
            .ok_or(Error::UnknownDestination { peer: self.me, to })
    }

    /// `msg`'s bytes, from the cache when `msg` shares the cached message's payload.
    fn encode(&mut self, msg: &Message) -> Arc<Vec<u8>> {
        if let Some((m, b)) = &self.cache
            && same_frame(m, msg)
        {
            return Arc::clone(b);
        }
        let b = Arc::new(wire::encode_with(msg, self.dtype));
        self.cache = Some((msg.clone(), Arc::clone(&b)));
        b
    }

    /// A frame of membership news from this node.
    fn notice(&self, notice: wire::Notice) -> Vec<u8> {
        wire::encode(&Message::Notice {
            origin: self.me,
            notice,
        })
    }

    /// What the readers brought: a frame, or news for the node's membership (the links
    /// report facts; the membership decides).
    fn open(&self, x: Inbound) -> Result<Incoming> {
        match x {
            Inbound::Frame(from, msg) => Ok(Incoming::Frame(from, msg)),
            Inbound::Fatal(e) => Err(e),
            Inbound::WriterFailed(to) => Err(Error::Disconnected {
                peer: self.me,
                to: self.nodes[to],
            }),
            Inbound::Lost { from, lost, life } => Ok(Incoming::News(News::Told {
                from,
                notice: wire::Notice::Lost { peer: lost.0, life },
            })),
            // A stream opened by a node counted out: it is back, in its next life (the
            // membership counts it).
            Inbound::Joined(joined, None) => Ok(Incoming::News(News::Up { peer: joined })),
            Inbound::Joined(joined, Some(life)) => {
                Ok(Incoming::News(News::Notice(wire::Notice::Joined {
                    peer: joined.0,
                    life,
                })))
            }
            Inbound::State(state) => Ok(Incoming::News(News::State(state))),
            Inbound::Left { from, left, life } => Ok(Incoming::News(News::Told {
                from,
                notice: wire::Notice::Left { peer: left.0, life },
            })),
        }
    }
}

/// Whether `a` and `b` encode to the same bytes because they share their payload (and
/// agree on the fields outside it).
fn same_frame(a: &Message, b: &Message) -> bool {
    match (a, b) {
        (
            Message::Factors {
                batch: x,
                mean_iter_us: i,
            },
            Message::Factors {
                batch: y,
                mean_iter_us: j,
            },
        ) => Arc::ptr_eq(x, y) && i == j,
        (
            Message::Relayed {
                carrier: c,
                batch: x,
            },
            Message::Relayed {
                carrier: d,
                batch: y,
            },
        ) => Arc::ptr_eq(x, y) && c == d,
        (Message::Params { clock: c, w: x }, Message::Params { clock: d, w: y }) => {
            Arc::ptr_eq(x, y) && c == d
        }
        (
            Message::Delta {
                origin: o,
                clock: c,
                mean_iter_us: i,
                delta: x,
            },
            Message::Delta {
                origin: p,
                clock: d,
                mean_iter_us: j,
                delta: y,
            },
        ) => Arc::ptr_eq(x, y) && o == p && c == d && i == j,
        _ => false,
    }
}

impl Links for QueueLinks {
    fn egress(&self) -> Option<Egress> {
        self.stats.as_ref().map(|s| s.egress())
    }
    fn try_recv(&mut self) -> Result<Option<Incoming>> {
        match self.inbox.try_recv() {
            Ok(x) => self.open(x).map(Some),
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => Ok(None),
        }
    }

    fn try_send(&mut self, out: &Output) -> Result<Sent> {
        let q = self.queue(out.to)?.clone();
        if let Some(i) = self.nodes.iter().position(|&n| n == out.to)
            && self.is_behind(i)
        {
            // After the notice under way.
            return Ok(Sent::Full);
        }
        let buf = self.encode(&out.msg);
        match q.try_send(buf) {
            Ok(()) => Ok(Sent::Yes),
            Err(TrySendError::Full(_)) => Ok(Sent::Full),
            Err(TrySendError::Closed(_)) => Err(Error::Disconnected {
                peer: self.me,
                to: out.to,
            }),
        }
    }

    fn wait(&mut self, room_on: Option<PeerId>, remaining: Duration) -> Result<Wake> {
        let me = self.me;
        let q = room_on.map(|to| self.queue(to).cloned()).transpose()?;
        let i = room_on.and_then(|to| self.nodes.iter().position(|&n| n == to));
        let mut notice = i
            .filter(|&i| self.is_behind(i))
            .and_then(|i| self.behind[i].take());
        let inbox = &mut self.inbox;
        let got = self.handle.block_on(async {
            match (q, notice.as_mut()) {
                (Some(_), Some(h)) => tokio::select! {
                    _ = h => Got::Room(true),
                    x = inbox.recv() => Got::Inbound(x),
                    _ = tokio::time::sleep(remaining) => Got::TimedOut,
                },
                (Some(q), None) => tokio::select! {
                    permit = q.reserve() => Got::Room(permit.is_ok()),
                    x = inbox.recv() => Got::Inbound(x),
                    _ = tokio::time::sleep(remaining) => Got::TimedOut,
                },
                (None, _) => match tokio::time::timeout(remaining, inbox.recv()).await {
                    Ok(x) => Got::Inbound(x),
                    Err(_) => Got::TimedOut,
                },
            }
        });
        if let (Some(i), Some(h)) = (i, notice)
            && !matches!(got, Got::Room(true))
        {
            // Still under way (a JoinHandle is not polled again once it has finished).
            self.behind[i] = Some(h);
        }
        match got {
            Got::Room(true) => Ok(Wake::Room),
            Got::Room(false) => Err(Error::Disconnected {
                peer: me,
                to: room_on.expect("waited for room"),
            }),
            Got::Inbound(Some(x)) => self.open(x).map(Wake::In),
            Got::Inbound(None) => Err(Error::InboxClosed { peer: me }),
            Got::TimedOut => Ok(Wake::TimedOut),
        }
    }

    fn announce(&mut self, notice: wire::Notice) {
        self.notify_all(notice);
    }

    fn announce_leaving(&mut self, notice: wire::Notice) {
        // Not `notify_all`: in order after this node's last frames, and before it exits.
        for i in 0..self.behind.len() {
            self.catch_up(i);
        }
        let frame = Arc::new(self.notice(notice));
        for q in self.queues.iter().flatten() {
            // In order after this node's last frames: the queue is FIFO.
            let _ = self.handle.block_on(q.send(Arc::clone(&frame)));
        }
    }

    fn send_state(&mut self, to: PeerId, state: &sfb_core::NodeState) {
        let Some(i) = self.nodes.iter().position(|&n| n == to) else {
            return;
        };
        self.catch_up(i);
        if let Some(q) = &self.queues[i] {
            // Queued now, ahead of any frame the node sends it next: it takes the state
            // before it accepts frames.
            let f = Arc::new(wire::encode(&Message::State {
                origin: self.me,
                state: Arc::new(state.clone()),
            }));
            let _ = self.handle.block_on(q.send(f));
        }
    }

    fn connect(&mut self, to: PeerId) {
        // A node that comes back is linked again.
        self.forgotten.retain(|&p| p != to);
        let Some(i) = self.nodes.iter().position(|&n| n == to) else {
            return;
        };
        if self.queues[i].is_some() || self.forgotten.contains(&to) {
            return;
        }
        if let Some(spawn) = &self.spawner {
            self.queues[i] = Some(spawn(i));
        }
    }

    fn forget(&mut self, peer: PeerId) {
        if let Some(i) = self.nodes.iter().position(|&n| n == peer) {
            // Closing the queue ends the writer to it.
            self.queues[i] = None;
            self.behind[i] = None;
        }
        self.forgotten.push(peer);
    }
}

enum Got {
    Room(bool),
    Inbound(Option<Inbound>),
    TimedOut,
}
