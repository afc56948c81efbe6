//! One reader per accepted stream: check the sender, handshake, validate every frame,
//! and watch that the sender is alive (frames or heartbeats keep coming).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::{AsyncRead, AsyncWrite, AsyncWriteExt, StreamExt};
use libp2p::PeerId as Libp2pId;
use sfb_core::PeerId;
use sfb_core::wire::{self, Expect};
use tokio::sync::mpsc;
use tracing::warn;

use super::{Inbound, NetStats, NodeName};
use crate::Error;
use crate::frame::{self, Ack, Hello};

/// Accepts inbound streams and reads each in its own task.
pub(super) struct Readers {
    pub(super) me: usize,
    pub(super) ids: Vec<Libp2pId>,
    /// How errors name each node (`peer 3`, `the server`).
    pub(super) names: Vec<NodeName>,
    pub(super) in_neighbors: Vec<usize>,
    pub(super) core_ids: Vec<PeerId>,
    pub(super) hello: Hello,
    pub(super) expect: Expect,
    pub(super) max_frame: usize,
    pub(super) clocks: u64,
    pub(super) inbox: mpsc::Sender<Inbound>,
    pub(super) stats: Arc<NetStats>,
    pub(super) handshake_timeout: Duration,
    /// Silence (no frame, no heartbeat) after which an in-neighbour is lost.
    pub(super) liveness_timeout: Duration,
    /// The writers' heartbeat interval (the stream is checked twice per interval).
    pub(super) heartbeat: Duration,
    /// Per node: whether a stream from it is being read (its handshake was taken): a
    /// second session from the same identity meanwhile is a duplicate, refused.
    pub(super) live: std::sync::Mutex<Vec<bool>>,
}

impl Readers {
    /// Reads every accepted stream until the run ends.
    pub(super) async fn accept(self, mut incoming: libp2p_stream::IncomingStreams) {
        let this = Arc::new(self);
        while let Some((peer, stream)) = incoming.next().await {
            tokio::spawn(Arc::clone(&this).read(peer, stream));
        }
    }

    /// Takes a session from node `from` unless one is live: then the reason to refuse it
    /// (the first session of an identity wins).
    fn admit(&self, from: usize) -> Option<String> {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if live[from] {
            return Some(format!(
                "duplicate: {} already has a live session with {} (is a second process \
                 running as --id {from}?)",
                self.names[from], self.names[self.me]
            ));
        }
        live[from] = true;
        None
    }

    /// Node `from`'s session ended: a new one may be taken (a rejoin).
    fn release(&self, from: usize) {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)[from] = false;
    }

    fn refuse(&self, why: String) {
        self.stats.refused_streams.fetch_add(1, Ordering::Relaxed);
        warn!(peer = self.me, "refusing stream: {why}");
    }

    async fn read(self: Arc<Self>, peer: Libp2pId, mut stream: libp2p::Stream) {
        let me = self.me;
        let Some(from) = self.ids.iter().position(|x| *x == peer) else {
            self.refuse(format!("{peer} is not in the cluster file"));
            return;
        };
        // Any member of the cluster may become an in-neighbour when the topology is
        // repaired after a loss; the engine refuses frames from a node it does not await.
        if !self.in_neighbors.contains(&from) {
            tracing::debug!("peer {me}: a stream from peer {from}, not an in-neighbour at start");
        }
        let hello = match tokio::time::timeout(
            self.handshake_timeout,
            frame::read_frame(&mut stream, 64 * 1024),
        )
        .await
        {
            Ok(Ok(Some(b))) => frame::decode::<Hello>(&b),
            // A stream that ended before saying anything is no mismatch: its writer gave up
            // on it (an open attempt it timed out and asked again) and retries on another.
            Ok(Ok(None)) => {
                tracing::debug!("peer {me}: a stream from peer {from} closed before its handshake");
                return;
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no handshake in time".into()),
        };
        let mut problem = match &hello {
            Err(e) => Some(format!("bad handshake: {e}")),
            Ok(h) if h.peer as usize != from => Some(format!(
                "handshake claims peer {} but the connection's key is peer {from}'s",
                h.peer
            )),
            Ok(h) => h.mismatch(&self.hello),
        };
        // The first session of an identity wins: a second one while it is read is another
        // process with the same key (a copy of the cluster file run with the same --id).
        let mut duplicate = false;
        if problem.is_none() {
            problem = self.admit(from);
            duplicate = problem.is_some();
        }
        let ack = Ack {
            ok: problem.is_none(),
            reason: problem.clone().unwrap_or_default(),
        };
        let _ = frame::write_frame(&mut stream, &frame::encode(&ack)).await;
        let _ = stream.flush().await;
        if let Some(why) = problem {
            self.refuse(format!("peer {from}: {why}"));
            let _ = stream.close().await;
            if !duplicate {
                // That node is shut out (a loss, under the run's peer-loss policy); a
                // duplicate is refused alone, and the first session goes on.
                let _ = self
                    .inbox
                    .send(Inbound::Fatal(Error::Handshake {
                        peer: self.core_ids[from],
                        reason: why,
                    }))
                    .await;
            }
            return;
        }
        // A node that opens a stream may be one that was lost and came back (`--rejoin`).
        let _ = self
            .inbox
            .send(Inbound::Joined(self.core_ids[from], None))
            .await;
        let end = self.follow(from, stream).await;
        self.release(from);
        if let Some(fatal) = end {
            let _ = self.inbox.send(Inbound::Fatal(fatal)).await;
        }
    }

    /// How often a stream's silence is checked: twice per heartbeat interval, and at least
    /// four times per liveness timeout.
    fn check_every(&self) -> Duration {
        (self.heartbeat / 2)
            .min(self.liveness_timeout / 4)
            .max(Duration::from_millis(1))
    }

    /// Reads in-neighbour `from`'s stream after the handshake until it ends, while
    /// watching its silence. Returns the fatal condition for the run, if any: a bad frame,
    /// an early end, a broken stream, or [`Error::NoHeartbeat`] after
    /// [`liveness_timeout`](Self::liveness_timeout) without a byte.
    pub(super) async fn follow<S>(&self, from: usize, stream: S) -> Option<Error>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let signs = Signs::default();
        let mut stream = Heard {
            inner: stream,
            heard: &signs.heard,
        };
        tokio::select! {
            end = self.frames(from, &mut stream, &signs) => end,
            silent = watch(&signs, self.liveness_timeout, self.check_every()) => {
                Some(Error::NoHeartbeat {
                    from: self.names[from],
                    to: self.names[self.me],
                    silent,
                    timeout: self.liveness_timeout,
                    frames: signs.frames.load(Ordering::Relaxed),
                    clocks: self.clocks,
                })
            }
        }
    }

    /// Reads frames until the stream ends: validates each and hands it to the engine,
    /// counts heartbeats. Returns the fatal condition, if any.
    async fn frames<S>(&self, from: usize, stream: &mut S, signs: &Signs) -> Option<Error>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let me = self.me;
        loop {
            match frame::read_frame(stream, self.max_frame).await {
                Ok(Some(buf)) if frame::is_heartbeat(&buf) => {
                    self.stats
                        .heartbeats_received
                        .fetch_add(1, Ordering::Relaxed);
                }
                Ok(Some(buf)) => {
                    let n = buf.len() as u64 + 4;
                    // Through the link: the writer's acknowledgement (it measures the
                    // link by them). One that cannot be written fails nothing here: the
                    // writer learns of a broken stream from its own writes.
                    let _ = async {
                        stream.write_all(&[frame::FRAME_ACK]).await?;
                        stream.flush().await
                    }
                    .await;
                    match wire::decode(&buf, &self.expect) {
                        // Membership news and rejoin states are the sender's own; they
                        // are not counted as the stream's frames (of clocks).
                        Ok(wire::Message::Notice { origin, notice })
                            if origin == self.core_ids[from] =>
                        {
                            let (about, life) = (notice.about(), notice.life());
                            let x = match notice {
                                wire::Notice::Lost { .. } => Inbound::Lost {
                                    from: origin,
                                    lost: about,
                                    life,
                                },
                                wire::Notice::Joined { .. } => Inbound::Joined(about, Some(life)),
                                wire::Notice::Left { .. } => Inbound::Left {
                                    from: origin,
                                    left: about,
                                    life,
                                },
                            };
                            if self.inbox.send(x).await.is_err() {
                                return None;
                            }
                        }
                        Ok(wire::Message::State { origin, state })
                            if origin == self.core_ids[from] =>
                        {
                            let state = Arc::unwrap_or_clone(state);
                            if self
                                .inbox
                                .send(Inbound::State(Box::new(state)))
                                .await
                                .is_err()
                            {
                                return None;
                            }
                        }
                        // A relayed batch is another origin's, forwarded by the sender (the
                        // engine checks it against the relay trees); so is a tree's down
                        // message, the root's (the engine checks the sender is the parent).
                        Ok(msg)
                            if msg.origin() == self.core_ids[from]
                                || matches!(
                                    msg,
                                    wire::Message::Relayed { .. }
                                        | wire::Message::Sum { down: true, .. }
                                ) =>
                        {
                            self.stats.received[from].fetch_add(n, Ordering::Relaxed);
                            signs.frames.fetch_add(1, Ordering::Relaxed);
                            // Not reading while the engine's inbox is full: that silence
                            // is ours, not the sender's.
                            signs.busy.store(true, Ordering::Relaxed);
                            let sent = self
                                .inbox
                                .send(Inbound::Frame(self.core_ids[from], msg))
                                .await;
                            signs.busy.store(false, Ordering::Relaxed);
                            if sent.is_err() {
                                return None; // the run is over
                            }
                        }
                        other => {
                            let why = match other {
                                Ok(msg) => format!(
                                    "frame claims origin {} on peer {from}'s stream",
                                    msg.origin()
                                ),
                                Err(e) => e.to_string(),
                            };
                            self.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
                            warn!(
                                peer = me,
                                from, "dropping bad frame and closing the stream: {why}"
                            );
                            let _ = stream.close().await;
                            return Some(Error::BadFrame {
                                peer: self.core_ids[from],
                                reason: why,
                            });
                        }
                    }
                }
                Ok(None) => {
                    let frames = signs.frames.load(Ordering::Relaxed);
                    let _ = stream.close().await;
                    return (frames < self.clocks).then(|| Error::StreamClosed {
                        from: self.names[from],
                        to: self.names[me],
                        frames,
                        clocks: self.clocks,
                    });
                }
                Err(e) => {
                    return Some(Error::StreamBroken {
                        from: self.names[from],
                        to: self.names[me],
                        frames: signs.frames.load(Ordering::Relaxed),
                        clocks: self.clocks,
                        reason: e,
                    });
                }
            }
        }
    }
}

/// What a stream's watch sees of its reader.
#[derive(Debug, Default)]
struct Signs {
    /// Bytes arrived since the last check.
    heard: AtomicBool,
    /// The reader is handing a frame to the engine (so not reading).
    busy: AtomicBool,
    /// Frames received.
    frames: AtomicU64,
}

/// A stream that notes in `heard` every time bytes arrive (a frame's first bytes are a
/// sign of life too: a large frame on a slow link takes a while).
struct Heard<'a, S> {
    inner: S,
    heard: &'a AtomicBool,
}

impl<S: AsyncRead + Unpin> AsyncRead for Heard<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.heard.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Heard<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// Checks `signs` every `every` until the stream has been silent for `timeout`; returns
/// the silence measured.
async fn watch(signs: &Signs, timeout: Duration, every: Duration) -> Duration {
    // The runtime's clock (the real one, or a test's paused one), as a std `Instant`.
    let now = || tokio::time::Instant::now().into_std();
    let mut silence = Silence::new(timeout, every, now());
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let heard = signs.heard.swap(false, Ordering::Relaxed) | signs.busy.load(Ordering::Relaxed);
        if let Some(silent) = silence.check(now(), heard) {
            return silent;
        }
    }
}

/// The liveness rule of one stream, without IO: how long the sender has been silent,
/// measured in this process's own running time.
///
/// Checks come every `every`; one that comes later than twice that after the previous one
/// adds only twice that: this process was itself not running (stopped, or starved), and
/// what the sender wrote meanwhile may still be in its buffers. So a receiver that was
/// paused does not blame its senders for its own pause.
#[derive(Debug, Clone)]
pub(super) struct Silence {
    timeout: Duration,
    cap: Duration,
    silent: Duration,
    last: Instant,
}

impl Silence {
    /// A stream heard from at `now`, checked every `every`, lost after `timeout` of
    /// silence.
    pub(super) fn new(timeout: Duration, every: Duration, now: Instant) -> Self {
        Self {
            timeout,
            cap: every * 2,
            silent: Duration::ZERO,
            last: now,
        }
    }

    /// A check at `now`; `heard`: whether anything arrived since the previous check (or
    /// the reader was not reading). Returns the silence so far once it reaches the
    /// timeout.
    pub(super) fn check(&mut self, now: Instant, heard: bool) -> Option<Duration> {
        let step = now.saturating_duration_since(self.last).min(self.cap);
        self.last = now;
        if heard {
            self.silent = Duration::ZERO;
            return None;
        }
        self.silent += step;
        (self.silent >= self.timeout).then_some(self.silent)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sfb_core::wire::{self, Expect, Message};
    use sfb_core::{FactorBatch, VFactors};

    use super::*;

    /// The reading end of an in-memory stream: yields what the test pushes, then the end
    /// of the stream once the test drops its sender; writes go nowhere.
    struct Pipe {
        rx: mpsc::Receiver<Vec<u8>>,
        buf: Vec<u8>,
    }

    fn pipe() -> (mpsc::Sender<Vec<u8>>, Pipe) {
        let (tx, rx) = mpsc::channel(64);
        (
            tx,
            Pipe {
                rx,
                buf: Vec::new(),
            },
        )
    }

    impl AsyncRead for Pipe {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            out: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            while self.buf.is_empty() {
                match std::task::ready!(self.rx.poll_recv(cx)) {
                    Some(b) => self.buf = b,
                    None => return Poll::Ready(Ok(0)),
                }
            }
            let n = out.len().min(self.buf.len());
            out[..n].copy_from_slice(&self.buf[..n]);
            self.buf.drain(..n);
            Poll::Ready(Ok(n))
        }
    }

    impl AsyncWrite for Pipe {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            b: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(b.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Node 0's readers, in-neighbour node 1, runs of `clocks` clocks; the engine's inbox
    /// holds `inbox` frames.
    fn readers(
        clocks: u64,
        inbox: usize,
        liveness: Duration,
        heartbeat: Duration,
    ) -> (Readers, mpsc::Receiver<Inbound>) {
        let (tx, rx) = mpsc::channel(inbox);
        let names = (0..2)
            .map(|index| NodeName {
                index,
                server: false,
            })
            .collect();
        let r = Readers {
            me: 0,
            ids: vec![Libp2pId::random(), Libp2pId::random()],
            names,
            in_neighbors: vec![1],
            core_ids: vec![PeerId(0), PeerId(1)],
            hello: Hello {
                version: frame::PROTOCOL_VERSION,
                wire_version: wire::WIRE_VERSION,
                peer: 0,
                j: 1,
                d: 1,
                batch: 1,
                clocks,
                start: 0,
                topology_hash: 0,
                dtype: "f32".into(),
                agreement: Vec::new(),
            },
            expect: Expect {
                j: 1,
                d: 1,
                peers: 2,
            },
            max_frame: wire::max_frame_len(1, 1, 1, false),
            clocks,
            inbox: tx,
            stats: Arc::new(NetStats::new(2)),
            handshake_timeout: Duration::from_secs(1),
            liveness_timeout: liveness,
            heartbeat,
            live: std::sync::Mutex::new(vec![false; 2]),
        };
        (r, rx)
    }

    /// Node 1's factor batch of `clock`, framed.
    fn framed(clock: u64) -> Vec<u8> {
        let body = wire::encode(&Message::Factors {
            batch: Arc::new(FactorBatch {
                origin: PeerId(1),
                clock,
                scale: 1.0,
                j: 1,
                d: 1,
                u: vec![0.5],
                v: VFactors::Dense(vec![2.0]),
            }),
            mean_iter_us: 0,
        });
        let mut v = (body.len() as u32).to_le_bytes().to_vec();
        v.extend(body);
        v
    }

    /// `follow`, bounded: a reader that neither ends nor declares a loss fails the test.
    async fn follow(r: &Readers, stream: Pipe) -> Option<Error> {
        tokio::time::timeout(Duration::from_secs(20), r.follow(1, stream))
            .await
            .expect("the reader ends")
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_second_session_of_a_live_identity_is_refused_and_the_first_goes_on() {
        let (r, _rx) = readers(5, 4, Duration::from_secs(1), Duration::from_millis(100));
        assert_eq!(r.admit(1), None, "the first session is taken");
        let why = r
            .admit(1)
            .expect("a second one while the first is read is refused");
        assert!(
            why.starts_with("duplicate: peer 1 already has a live session with peer 0")
                && why.contains("--id 1"),
            "{why}"
        );
        // The first session ended (its node was lost, or the run): a rejoin is taken.
        r.release(1);
        assert_eq!(r.admit(1), None);
    }

    #[tokio::test]
    async fn heartbeats_keep_a_quiet_stream_alive_and_never_reach_the_engine() {
        let (r, mut inbox) = readers(1, 8, 300 * MS, 20 * MS);
        let (tx, stream) = pipe();
        // 40 heartbeats 20 ms apart: silent of frames for 800 ms, well past the 300 ms
        // liveness timeout; then the one frame of the run, then the end.
        let feeder = tokio::spawn(async move {
            for _ in 0..40 {
                tx.send(frame::HEARTBEAT.to_vec()).await.unwrap();
                tokio::time::sleep(20 * MS).await;
            }
            tx.send(framed(0)).await.unwrap();
        });
        let end = follow(&r, stream).await;
        assert!(end.is_none(), "{end:?}");
        feeder.await.unwrap();
        match inbox.try_recv() {
            Ok(Inbound::Frame(from, msg)) => assert_eq!((from, msg.clock()), (PeerId(1), 0)),
            _ => panic!("the frame reaches the engine"),
        }
        assert!(
            inbox.try_recv().is_err(),
            "only the frame reaches the engine"
        );
        // The byte counters hold the frame alone; heartbeats are counted apart.
        let frame_bytes = framed(0).len() as u64;
        assert_eq!(r.stats.received[1].load(Ordering::Relaxed), frame_bytes);
        assert_eq!(r.stats.heartbeats_received.load(Ordering::Relaxed), 40);
    }

    // Paused time: the runtime's clock moves only when every task waits, so the times
    // below are exact.
    #[tokio::test(start_paused = true)]
    async fn a_silent_open_stream_is_lost_after_the_liveness_timeout() {
        let (r, _inbox) = readers(3, 8, 200 * MS, 20 * MS);
        let (tx, stream) = pipe();
        tx.send(framed(0)).await.unwrap();
        let start = tokio::time::Instant::now();
        let end = follow(&r, stream).await;
        let took = start.elapsed();
        drop(tx); // open until here
        let e = end.expect("a loss");
        assert!(
            matches!(&e, Error::NoHeartbeat { frames: 1, silent, .. } if *silent >= 200 * MS),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("lost peer 1: no heartbeat for 0.2 s on its stream to peer 0 ")
                && text.ends_with("(liveness timeout 0.2 s; 1 of 3 clocks received)"),
            "{text}"
        );
        // Lost at the first check after 0.2 s of silence (checks every 10 ms).
        assert!(took >= 200 * MS && took <= 210 * MS, "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_stream_is_lost_at_once_not_after_the_liveness_timeout() {
        let (r, _inbox) = readers(3, 8, Duration::from_secs(60), Duration::from_secs(1));
        let (tx, stream) = pipe();
        tx.send(framed(0)).await.unwrap();
        drop(tx);
        let start = tokio::time::Instant::now();
        let end = follow(&r, stream).await;
        assert!(
            matches!(end, Some(Error::StreamClosed { frames: 1, .. })),
            "{end:?}"
        );
        // No time passed: the end of the stream, not the 60 s liveness timeout.
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_reader_held_back_by_the_engine_does_not_blame_the_sender() {
        // The engine's inbox holds one frame and the engine does not drain it for 600 ms
        // (three liveness timeouts): the reader sits on the second frame, reading nothing.
        let (r, mut inbox) = readers(2, 1, 200 * MS, 20 * MS);
        let (tx, stream) = pipe();
        tx.send([framed(0), framed(1)].concat()).await.unwrap();
        drop(tx);
        let engine = async {
            tokio::time::sleep(600 * MS).await;
            let mut got = Vec::new();
            while got.len() < 2 {
                match tokio::time::timeout(Duration::from_secs(5), inbox.recv()).await {
                    Ok(Some(Inbound::Frame(_, m))) => got.push(m.clock()),
                    Ok(_) => panic!("not a frame"),
                    Err(_) => break, // the reader gave up on the second frame
                }
            }
            got
        };
        let (end, got) = tokio::join!(follow(&r, stream), engine);
        assert!(end.is_none(), "{end:?}");
        assert_eq!(got, [0, 1]);
    }

    #[test]
    fn silence_adds_up_between_checks_and_resets_on_any_sign_of_life() {
        let s = Duration::from_secs(1);
        let t0 = Instant::now();
        let mut silence = Silence::new(4 * s, s, t0);
        assert_eq!(silence.check(t0 + s, false), None);
        assert_eq!(silence.check(t0 + 2 * s, true), None);
        for k in 3..6 {
            assert_eq!(silence.check(t0 + k * s, false), None, "{k}");
        }
        assert_eq!(silence.check(t0 + 6 * s, false), Some(4 * s));
    }

    #[test]
    fn a_late_check_counts_at_most_two_intervals_so_a_paused_reader_blames_nobody() {
        // The reader's own process stopped 30 s between two checks (liveness 10 s): what
        // the sender wrote meanwhile is in the buffers, read right after.
        let s = Duration::from_secs(1);
        let t0 = Instant::now();
        let mut silence = Silence::new(10 * s, s, t0);
        assert_eq!(silence.check(t0 + 30 * s, false), None);
        assert_eq!(silence.check(t0 + 31 * s, true), None);
        // A sender silent while the reader runs is still lost after 10 s.
        let lost = (32..60).find_map(|k| silence.check(t0 + k * s, false));
        assert_eq!(lost, Some(10 * s));
    }
}
