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
use sfb_core::{Engine, Event, Model, Output, PeerId, Progress};

use crate::{Error, Result};

/// Options of an in-memory run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Frames each peer's inbox holds before senders block. Default: 64.
    pub capacity: usize,
    /// Longest a peer may wait without receiving anything. Default: 30 s.
    pub timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            capacity: 64,
            timeout: Duration::from_secs(30),
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
enum Envelope {
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
                s.spawn(move || drive(engine, rx, txs, opts))
            })
            .collect();
        drop(txs);
        handles
            .into_iter()
            .map(|h| h.join().expect("peer thread panicked"))
            .collect()
    });
    let mut out = Vec::with_capacity(p);
    let mut first_abort = None;
    for r in results {
        match r {
            Ok(run) => out.push(run),
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

fn drive<M: Model>(
    mut engine: Engine<M>,
    rx: Receiver<Envelope>,
    txs: Vec<Sender<Envelope>>,
    opts: &Options,
) -> Result<PeerRun<M>> {
    let me = engine.config().id;
    let mut records = Vec::new();
    let r = drive_inner(&mut engine, &rx, &txs, opts, &mut records);
    if let Err(e) = &r
        && !matches!(e, Error::Aborted { .. })
    {
        for (i, tx) in txs.iter().enumerate() {
            if i != me.index() {
                let _ = tx.try_send(Envelope::Abort(me));
            }
        }
    }
    r?;
    engine.finish();
    drain_events(&mut engine, &mut records);
    Ok(PeerRun { engine, records })
}

fn drain_events<M: Model>(engine: &mut Engine<M>, records: &mut Vec<ClockRecord>) {
    while let Some(ev) = engine.poll_event() {
        if let Event::Clock(r) = ev {
            records.push(r);
        }
    }
}

fn receive<M: Model>(engine: &mut Engine<M>, env: Envelope) -> Result<()> {
    let me = engine.config().id;
    match env {
        Envelope::Frame(from, msg) => engine
            .on_message(from, msg)
            .map_err(|source| Error::Peer { peer: me, source }),
        Envelope::Abort(by) => Err(Error::Aborted { peer: me, by }),
    }
}

fn drive_inner<M: Model>(
    engine: &mut Engine<M>,
    rx: &Receiver<Envelope>,
    txs: &[Sender<Envelope>],
    opts: &Options,
    records: &mut Vec<ClockRecord>,
) -> Result<()> {
    let me = engine.config().id;
    let mut outbox: VecDeque<Output> = VecDeque::new();
    let mut last_progress = Instant::now();
    loop {
        while let Ok(env) = rx.try_recv() {
            receive(engine, env)?;
            last_progress = Instant::now();
        }
        while let Some(o) = outbox.pop_front() {
            match txs[o.to.index()].try_send(Envelope::Frame(me, o.msg)) {
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
            sel.send(&txs[head.to.index()]);
            match sel.ready_timeout(remaining) {
                Ok(i) if i == r => {
                    if let Ok(env) = rx.try_recv() {
                        receive(engine, env)?;
                        last_progress = Instant::now();
                    }
                }
                Ok(_) => {}
                Err(_) => return Err(timeout(engine, last_progress.elapsed())),
            }
            continue;
        }
        match engine
            .on_tick(Instant::now())
            .map_err(|source| Error::Peer { peer: me, source })?
        {
            Progress::Stepped => {
                last_progress = Instant::now();
                while let Some(o) = engine.poll_output() {
                    outbox.push_back(o);
                }
                drain_events(engine, records);
            }
            Progress::Done => return Ok(()),
            Progress::Blocked => {
                let remaining = opts.timeout.saturating_sub(last_progress.elapsed());
                match rx.recv_timeout(remaining) {
                    Ok(env) => {
                        receive(engine, env)?;
                        last_progress = Instant::now();
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        return Err(timeout(engine, last_progress.elapsed()));
                    }
                    Err(RecvTimeoutError::Disconnected) => {
                        return Err(Error::Disconnected { peer: me, to: me });
                    }
                }
            }
        }
    }
}

fn timeout<M: Model>(engine: &Engine<M>, waited: Duration) -> Error {
    let waiting_on = engine
        .waiting_on()
        .iter()
        .map(|(q, d)| format!("{q} (delivered {d} clocks)"))
        .collect::<Vec<_>>()
        .join(", ");
    Error::Timeout {
        peer: engine.config().id,
        clock: engine.clock(),
        waited,
        waiting_on: if waiting_on.is_empty() {
            "a full outbound link".into()
        } else {
            waiting_on
        },
    }
}
