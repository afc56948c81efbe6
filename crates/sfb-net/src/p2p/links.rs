//! The engine thread's [`Links`]: bounded queues to the writers, the readers' inbox.
//!
//! The engine thread is a blocking thread; it waits on the tokio runtime through its
//! handle. Frames are encoded here, on the send side, once per shared payload: a factor
//! batch (or the FMS server's W) addressed to several out-neighbours is encoded for the
//! first and the bytes are shared with the rest.

use std::sync::Arc;
use std::time::Instant;

use sfb_core::wire::{self, Message};
use sfb_core::{Output, PeerId};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::{TryRecvError, TrySendError};

use super::Inbound;
use crate::driver::{Links, Sent, Wake};
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
        }
    }

    /// Queues the notice `notice` for every out-neighbour, off the engine thread: a full
    /// queue must not hold the engine, and a notice may overtake frames.
    fn notify_all(&self, notice: wire::Notice) {
        let frame = Arc::new(self.notice(notice));
        for q in self.queues.iter().flatten() {
            let (q, f) = (q.clone(), Arc::clone(&frame));
            self.handle.spawn(async move {
                let _ = q.send(f).await;
            });
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

    fn open(&self, x: Inbound) -> Result<(PeerId, Message)> {
        match x {
            Inbound::Frame(from, msg) => Ok((from, msg)),
            Inbound::Fatal(e) => Err(e),
            Inbound::WriterFailed(to) => Err(Error::Disconnected {
                peer: self.me,
                to: self.nodes[to],
            }),
            Inbound::Lost { from, lost, life } => Err(Error::LostNotice {
                peer: self.me,
                from,
                lost,
                life,
            }),
            Inbound::Joined(joined, life) => Err(Error::Joined {
                peer: self.me,
                joined,
                life,
            }),
            Inbound::State(state) => Err(Error::RejoinState {
                peer: self.me,
                state,
            }),
            Inbound::Left { from, left, life } => Err(Error::Left {
                peer: self.me,
                from,
                left,
                life,
            }),
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
    fn try_recv(&mut self) -> Result<Option<(PeerId, Message)>> {
        match self.inbox.try_recv() {
            Ok(x) => self.open(x).map(Some),
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => Ok(None),
        }
    }

    fn try_send(&mut self, out: &Output) -> Result<Sent> {
        let q = self.queue(out.to)?.clone();
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

    fn wait(&mut self, room_on: Option<PeerId>, deadline: Instant) -> Result<Wake> {
        let me = self.me;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let q = room_on.map(|to| self.queue(to).cloned()).transpose()?;
        let inbox = &mut self.inbox;
        let got = self.handle.block_on(async {
            match q {
                Some(q) => tokio::select! {
                    permit = q.reserve() => Got::Room(permit.is_ok()),
                    x = inbox.recv() => Got::Inbound(x),
                    _ = tokio::time::sleep(remaining) => Got::TimedOut,
                },
                None => match tokio::time::timeout(remaining, inbox.recv()).await {
                    Ok(x) => Got::Inbound(x),
                    Err(_) => Got::TimedOut,
                },
            }
        });
        match got {
            Got::Room(true) => Ok(Wake::Room),
            Got::Room(false) => Err(Error::Disconnected {
                peer: me,
                to: room_on.expect("waited for room"),
            }),
            Got::Inbound(Some(x)) => self.open(x).map(|(from, msg)| Wake::Frame(from, msg)),
            Got::Inbound(None) => Err(Error::InboxClosed { peer: me }),
            Got::TimedOut => Ok(Wake::TimedOut),
        }
    }

    fn announce(&mut self, notice: wire::Notice) {
        self.notify_all(notice);
    }

    fn announce_leaving(&mut self, notice: wire::Notice) {
        // Not `notify_all`: in order after this node's last frames, and before it exits.
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
        }
        self.forgotten.push(peer);
    }
}

enum Got {
    Room(bool),
    Inbound(Option<Inbound>),
    TimedOut,
}
