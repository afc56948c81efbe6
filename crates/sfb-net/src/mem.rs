//! The in-memory cluster: P engines on threads, joined by bounded channels.
//!
//! Every peer owns one bounded inbox. A peer that finds a destination's inbox full keeps
//! the frame in its own outbox and, until it can send, keeps draining its inbox (so two
//! peers sending to each other can never deadlock) but does not compute: a slow receiver
//! slows its senders. Every wait is bounded by [`Options::timeout`]; a peer that waits
//! longer fails with [`Error::Timeout`] naming whom it was waiting on, and a failing peer
//! tells the others to stop.

use std::collections::VecDeque;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select, Sender, TrySendError, bounded};
use sfb_core::metrics::ClockRecord;
use sfb_core::wire::Message;
use sfb_core::{Engine, Event, Model, Output, PeerId, Progress, StateMachine, Stragglers};

use crate::clock::WallClock;

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
    pub progress: Option<crate::p2p::ProgressFn>,
    /// Injected slowness: real delay after the slow nodes' compute. Default: none.
    pub stragglers: Stragglers,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("capacity", &self.capacity)
            .field("timeout", &self.timeout)
            .field("progress", &self.progress.is_some())
            .field("stragglers", &self.stragglers)
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            capacity: 64,
            timeout: Duration::from_secs(30),
            progress: None,
            stragglers: Stragglers::None,
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
    Abort(PeerId),
}

/// Runs `engines` (peer `i` at index `i`) to completion.
///
/// # Errors
/// The first peer error (engine errors, timeouts); peers stopped because of it are not
/// reported separately.
pub fn run<M: Model>(engines: Vec<Engine<M>>, opts: &Options) -> Result<Vec<PeerRun<M>>> {
    let p = engines.len();
    for (i, e) in engines.iter().enumerate() {
        if e.config().id.index() != i || e.config().peers != p {
            return Err(Error::Config(format!(
                "engine at index {i} is {} of {} peers",
                e.config().id,
                e.config().peers
            )));
        }
    }
    let (txs, rxs): (Vec<Sender<Envelope>>, Vec<Receiver<Envelope>>) =
        (0..p).map(|_| bounded(opts.capacity.max(1))).unzip();
    let results: Vec<Result<PeerRun<M>>> = thread::scope(|s| {
        let handles: Vec<_> = engines
            .into_iter()
            .zip(rxs)
            .map(|(engine, rx)| {
                let txs = txs.clone();
                s.spawn(move || drive(engine, rx, txs, peer_slot, opts))
            })
            .collect();
        drop(txs);
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .expect("peer thread panicked")
                    .map(|(engine, records)| PeerRun { engine, records })
            })
            .collect()
    });
    first_error(results)
}

/// Where frames for a node go: the index of its inbox.
pub(crate) type Slot = fn(PeerId, usize) -> usize;

/// Peer `i`'s inbox is `txs[i]`.
pub(crate) fn peer_slot(id: PeerId, _nodes: usize) -> usize {
    id.index()
}

/// Drives one node on its thread until it is done or fails; on failure tells every other
/// node to stop. `txs[slot(id, txs.len())]` is node `id`'s inbox.
pub(crate) fn drive<N: StateMachine>(
    mut node: N,
    rx: Receiver<Envelope>,
    txs: Vec<Sender<Envelope>>,
    slot: Slot,
    opts: &Options,
) -> Result<(N, Vec<ClockRecord>)> {
    let me = node.id();
    let mine = slot(me, txs.len());
    let mut records = Vec::new();
    let mut time = WallClock::new(Instant::now(), opts.stragglers);
    let r = drive_inner(&mut node, &rx, &txs, slot, opts, &mut records, &mut time);
    if let Err(e) = &r
        && !matches!(e, Error::Aborted { .. })
    {
        for (i, tx) in txs.iter().enumerate() {
            if i != mine {
                let _ = tx.try_send(Envelope::Abort(me));
            }
        }
    }
    r?;
    node.finish(&mut time);
    drain_events(&mut node, &mut records, opts);
    Ok((node, records))
}

fn drain_events<N: StateMachine>(node: &mut N, records: &mut Vec<ClockRecord>, opts: &Options) {
    while let Some(ev) = node.poll_event() {
        if let Event::Clock(r) = ev {
            if let Some(f) = &opts.progress {
                f(&r);
            }
            records.push(r);
        }
    }
}

fn receive<N: StateMachine>(node: &mut N, env: Envelope, time: &mut WallClock) -> Result<()> {
    let me = node.id();
    match env {
        Envelope::Frame(from, msg) => node
            .on_message(from, msg, time)
            .map_err(|source| Error::Peer { peer: me, source }),
        Envelope::Abort(by) => Err(Error::Aborted { peer: me, by }),
    }
}

fn drive_inner<N: StateMachine>(
    node: &mut N,
    rx: &Receiver<Envelope>,
    txs: &[Sender<Envelope>],
    slot: Slot,
    opts: &Options,
    records: &mut Vec<ClockRecord>,
    time: &mut WallClock,
) -> Result<()> {
    let me = node.id();
    let inbox = |to: PeerId| &txs[slot(to, txs.len())];
    let mut outbox: VecDeque<Output> = VecDeque::new();
    let mut last_progress = Instant::now();
    loop {
        while let Ok(env) = rx.try_recv() {
            receive(node, env, time)?;
            last_progress = Instant::now();
        }
        while let Some(o) = outbox.pop_front() {
            match inbox(o.to).try_send(Envelope::Frame(me, o.msg)) {
                Ok(()) => last_progress = Instant::now(),
                Err(TrySendError::Full(Envelope::Frame(_, msg))) => {
                    outbox.push_front(Output { to: o.to, msg });
                    break;
                }
                Err(_) => return Err(Error::Disconnected { peer: me, to: o.to }),
            }
        }
        if let Some(head) = outbox.front() {
            // Blocked on a full inbox: wait until it has room or a frame arrives for us.
            let remaining = opts.timeout.saturating_sub(last_progress.elapsed());
            let mut sel = Select::new();
            let r = sel.recv(rx);
            sel.send(inbox(head.to));
            match sel.ready_timeout(remaining) {
                Ok(i) if i == r => {
                    if let Ok(env) = rx.try_recv() {
                        receive(node, env, time)?;
                        last_progress = Instant::now();
                    }
                }
                Ok(_) => {}
                Err(_) => return Err(timeout(node, last_progress.elapsed())),
            }
            continue;
        }
        match node
            .on_tick(time)
            .map_err(|source| Error::Peer { peer: me, source })?
        {
            Progress::Stepped => {
                last_progress = Instant::now();
                while let Some(o) = node.poll_output() {
                    outbox.push_back(o);
                }
                drain_events(node, records, opts);
            }
            Progress::Done => return Ok(()),
            Progress::Blocked => {
                let remaining = opts.timeout.saturating_sub(last_progress.elapsed());
                match rx.recv_timeout(remaining) {
                    Ok(env) => {
                        receive(node, env, time)?;
                        last_progress = Instant::now();
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        return Err(timeout(node, last_progress.elapsed()));
                    }
                    Err(RecvTimeoutError::Disconnected) => {
                        return Err(Error::Disconnected { peer: me, to: me });
                    }
                }
            }
        }
    }
}

fn timeout<N: StateMachine>(node: &N, waited: Duration) -> Error {
    let waiting_on = node
        .waiting_on()
        .iter()
        .map(|(q, d)| format!("{q} (delivered {d} clocks)"))
        .collect::<Vec<_>>()
        .join(", ");
    Error::Timeout {
        peer: node.id(),
        clock: node.clock(),
        waited,
        waiting_on: if waiting_on.is_empty() {
            "a full outbound link".into()
        } else {
            waiting_on
        },
    }
}

/// Splits per-node results: the first real error wins over `Aborted` errors it caused.
pub(crate) fn first_error<T>(results: Vec<Result<T>>) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(results.len());
    let mut first_abort = None;
    for r in results {
        match r {
            Ok(x) => out.push(x),
            Err(e @ Error::Aborted { .. }) => {
                first_abort.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    match first_abort {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
