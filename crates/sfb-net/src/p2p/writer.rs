//! One writer per out-edge: stream, handshake, then the engine's frames under the
//! bandwidth budget, and heartbeats while there are none.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::{Multiaddr, PeerId as Libp2pId};
use sfb_core::PeerId;
use tokio::sync::{mpsc, watch};
use tracing::debug;

use super::{Inbound, NetStats, NodeName, protocol};
use crate::bandwidth::Bucket;
use crate::error::ConnectProblem;
use crate::frame::{self, Ack};
use crate::{Error, Result};

/// The peers a node has connections to, with how many (the swarm task's view).
#[derive(Debug, Default, Clone)]
pub(super) struct Connected(HashMap<Libp2pId, u32>);

impl Connected {
    /// Records that the node now has `n` connections to `peer`.
    pub(super) fn set(&mut self, peer: Libp2pId, n: u32) {
        if n == 0 {
            self.0.remove(&peer);
        } else {
            self.0.insert(peer, n);
        }
    }

    /// Whether the node has a connection to `peer`.
    pub(super) fn has(&self, peer: &Libp2pId) -> bool {
        self.0.contains_key(peer)
    }
}

/// How often a writer re-dials an out-neighbour it has no connection to.
const REDIAL_EVERY: Duration = Duration::from_millis(250);

/// The first open attempt's time limit once connected; each later attempt gets twice the
/// one before (up to the start-up deadline).
const FIRST_OPEN_LIMIT: Duration = Duration::from_secs(4);

/// Writes one out-edge: opens the stream, handshakes, then writes the engine's frames.
pub(super) struct Writer {
    pub(super) me: NodeName,
    pub(super) to: usize,
    pub(super) to_name: NodeName,
    pub(super) to_core: PeerId,
    pub(super) to_id: Libp2pId,
    pub(super) addr: Multiaddr,
    pub(super) control: libp2p_stream::Control,
    pub(super) dial: mpsc::Sender<Multiaddr>,
    /// Which peers the swarm has connections to.
    pub(super) connected: watch::Receiver<Connected>,
    pub(super) hello: Vec<u8>,
    pub(super) bucket: Option<Arc<Bucket>>,
    pub(super) stats: Arc<NetStats>,
    pub(super) fatal: mpsc::Sender<Inbound>,
    pub(super) deadline: Instant,
    pub(super) ack_timeout: Duration,
    /// Write a heartbeat after this long without writing anything.
    pub(super) heartbeat: Duration,
}

const CHUNK: usize = 64 * 1024;

impl Writer {
    /// Runs until the engine drops the queue and the receiver has read everything, or
    /// fails; a failure also tells the engine thread (whose driver loop then stops with
    /// [`Error::Disconnected`], which [`Node::run`](super::Node::run) replaces with this
    /// task's error).
    pub(super) async fn run(self, rx: mpsc::Receiver<Arc<Vec<u8>>>) -> Result<()> {
        let r = self.run_inner(rx).await;
        match &r {
            // Refused by the other end: it is shut out with the reason it gave (a loss
            // under the run's policy, whose message then says why).
            Err(Error::Handshake { peer, reason }) => {
                let _ = self.fatal.try_send(Inbound::Fatal(Error::Handshake {
                    peer: *peer,
                    reason: reason.clone(),
                }));
            }
            Err(_) => {
                let _ = self.fatal.try_send(Inbound::WriterFailed(self.to));
            }
            Ok(()) => {}
        }
        r
    }

    /// Opens the stream and completes the handshake, retrying until the start-up deadline
    /// when the stream fails before the reply (the remote may not be up yet, or may have
    /// dropped the inbound stream under load: libp2p-stream drops streams an acceptor is
    /// too slow to take). A refused handshake is final.
    ///
    /// A stream is only asked for once the swarm reports a connection to the remote:
    /// libp2p-stream's `open_stream`, called in the instant between a new connection's
    /// handler being built and the swarm noting the connection, parks the request where no
    /// connection ever takes it, and it never completes (seen as a relay run that hung at
    /// start-up). Each attempt also has a time limit (4 s, then doubling), so that a
    /// request lost any other way is asked again rather than waited on until the deadline.
    async fn connect(&self) -> Result<libp2p::Stream> {
        let (me, to) = (self.me, self.to_name);
        let mut control = self.control.clone();
        let mut connected = self.connected.clone();
        let mut last_problem = ConnectProblem::NoAttempt;
        let mut open_limit = FIRST_OPEN_LIMIT;
        loop {
            let remaining = self.deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(Error::Connect {
                    peer: me,
                    to,
                    addr: self.addr.clone(),
                    last_problem,
                });
            }
            let wait = remaining.min(REDIAL_EVERY);
            let up = async { connected.wait_for(|c| c.has(&self.to_id)).await.map(|_| ()) };
            match tokio::time::timeout(wait, up).await {
                Ok(Ok(_)) => {}
                // The swarm task stopped: nothing will connect.
                Ok(Err(_)) => {
                    return Err(Error::Connect {
                        peer: me,
                        to,
                        addr: self.addr.clone(),
                        last_problem: ConnectProblem::SwarmStopped,
                    });
                }
                Err(_) => {
                    if matches!(last_problem, ConnectProblem::NoAttempt) {
                        last_problem = ConnectProblem::NotConnected;
                    }
                    let _ = self.dial.send(self.addr.clone()).await;
                    continue;
                }
            }
            let limit = remaining.min(open_limit);
            let mut stream = match tokio::time::timeout(
                limit,
                control.open_stream(self.to_id, protocol()),
            )
            .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    debug!(peer = %me, to = %to, %e, "open_stream failed; re-dialing");
                    last_problem = ConnectProblem::OpenStream(e);
                    let _ = self.dial.send(self.addr.clone()).await;
                    // Back off before re-dialing a peer that is not up yet.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(_) => {
                    debug!(peer = %me, to = %to, ?limit, "open_stream did not complete; asking again");
                    last_problem = ConnectProblem::OpenTimedOut(limit);
                    open_limit = open_limit.saturating_mul(2);
                    continue;
                }
            };
            let attempt = async {
                frame::write_frame(&mut stream, &self.hello).await?;
                stream.flush().await?;
                frame::read_frame(&mut stream, 64 * 1024).await
            };
            let remaining = self
                .deadline
                .saturating_duration_since(Instant::now())
                .max(self.ack_timeout);
            let reply = match tokio::time::timeout(remaining, attempt).await {
                Ok(Ok(Some(reply))) => reply,
                Ok(Ok(None)) => {
                    last_problem = ConnectProblem::ClosedBeforeReply;
                    debug!(peer = %me, to = %to, "{last_problem}; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Ok(Err(e)) => {
                    last_problem = ConnectProblem::Handshake(e);
                    debug!(peer = %me, to = %to, "{last_problem}; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(_) => {
                    return Err(Error::NoAck {
                        peer: me,
                        to,
                        waited: remaining,
                    });
                }
            };
            let ack: Ack = frame::decode(&reply).map_err(|reason| Error::BadAck {
                peer: me,
                to,
                reason,
            })?;
            if !ack.ok {
                return Err(Error::Handshake {
                    peer: self.to_core,
                    reason: ack.reason,
                });
            }
            return Ok(stream);
        }
    }

    async fn run_inner(&self, rx: mpsc::Receiver<Arc<Vec<u8>>>) -> Result<()> {
        let stream = self.connect().await?;
        debug!(peer = self.me.index, to = self.to, "stream open");
        self.send(stream, rx).await
    }

    /// Writes the engine's frames from `rx` as they come, and a [`frame::HEARTBEAT`]
    /// whenever nothing was written for [`heartbeat`](Self::heartbeat) (outside the
    /// bandwidth budget and the byte counters: 4 bytes each, counted apart); when `rx`
    /// closes, closes the stream and waits for the receiver to finish reading.
    ///
    /// Meanwhile it reads the receiver's [`frame::FRAME_ACK`]s and measures the link for
    /// [`NetStats::egress`]: with a token bucket, the bytes the bucket held back over the
    /// time it held them; without one (the kernel shapes the link, `--netns`), each frame's
    /// bytes over the time from its first write to its acknowledgement. So bytes that sit
    /// in a socket buffer count until they are through, and a burst that waits for nothing
    /// is not read as bandwidth.
    ///
    /// A heartbeat that cannot be written stops the heartbeats and fails nothing by
    /// itself: the next frame, or the close, meets the broken stream and reports it, as
    /// without heartbeats (a receiver that finished and left early is no loss).
    pub(super) async fn send<S>(&self, stream: S, rx: mpsc::Receiver<Arc<Vec<u8>>>) -> Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (mut acks, mut stream) = stream.split();
        // Frames written and not yet acknowledged: when their first write began, and
        // their bytes (kept only when the acknowledgements measure the link).
        let unacked = std::sync::Mutex::new(std::collections::VecDeque::new());
        let measure = self.bucket.is_none();
        let read_acks = async {
            let mut buf = [0u8; 256];
            let mut last = None::<Instant>;
            loop {
                match acks.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let now = Instant::now();
                        let mut q = unacked
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        for _ in buf[..n].iter().filter(|&&b| b == frame::FRAME_ACK) {
                            let Some((started, bytes)) = q.pop_front() else {
                                break;
                            };
                            // In flight from its first write, or from the last ack if it
                            // was written before that (the link was busy with the one
                            // before it).
                            let from = last.map_or(started, |l: Instant| l.max(started));
                            self.stats.carried(from, now, bytes);
                        }
                        last = Some(now);
                    }
                }
            }
        };
        let write = self.write_frames(&mut stream, rx, measure.then_some(&unacked));
        tokio::pin!(read_acks, write);
        let mut acks_ended = false;
        let written = loop {
            tokio::select! {
                r = &mut write => break r,
                () = &mut read_acks, if !acks_ended => acks_ended = true,
            }
        };
        written?;
        // Wait for the receiver to close its side: it has read everything.
        if !acks_ended {
            let _ = tokio::time::timeout(self.ack_timeout, read_acks).await;
        }
        Ok(())
    }

    /// [`send`](Self::send)'s writing: frames and heartbeats until `rx` closes, then the
    /// close; each frame's first write and bytes go into `unacked` when it is given.
    async fn write_frames<W>(
        &self,
        stream: &mut W,
        mut rx: mpsc::Receiver<Arc<Vec<u8>>>,
        unacked: Option<&std::sync::Mutex<std::collections::VecDeque<(Instant, u64)>>>,
    ) -> Result<()>
    where
        W: AsyncWrite + Unpin,
    {
        let to = self.to;
        let mut frames = 0u64;
        let io = |frames, reason| Error::Send {
            peer: self.me,
            to: self.to_name,
            frames,
            reason,
        };
        let mut last_write = tokio::time::Instant::now();
        let mut beating = true;
        loop {
            let buf = tokio::select! {
                biased;
                buf = rx.recv() => match buf {
                    Some(buf) => buf,
                    None => break,
                },
                () = tokio::time::sleep_until(last_write + self.heartbeat), if beating => {
                    let beat = async {
                        stream.write_all(&frame::HEARTBEAT).await?;
                        stream.flush().await
                    };
                    match beat.await {
                        Ok(()) => {
                            self.stats.heartbeats_sent.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            debug!(peer = self.me.index, to, %e, "heartbeat failed; stopping them");
                            beating = false;
                        }
                    }
                    last_write = tokio::time::Instant::now();
                    continue;
                }
            };
            let started = Instant::now();
            let bytes = buf.len() as u64 + 4;
            if let Some(q) = unacked {
                q.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push_back((started, bytes));
            }
            let len = (buf.len() as u32).to_le_bytes();
            let mut pieces: Vec<&[u8]> = vec![&len];
            pieces.extend(buf.chunks(CHUNK));
            let written = async {
                for piece in pieces {
                    if let Some(b) = &self.bucket {
                        let t0 = Instant::now();
                        let (wait, held) = b.reserve_held(piece.len());
                        if !wait.is_zero() {
                            tokio::time::sleep(wait).await;
                        }
                        stream.write_all(piece).await?;
                        // The bucket is the link: the bytes beyond its tokens were held
                        // back this long.
                        if held > 0 {
                            self.stats.carried(t0, Instant::now(), held as u64);
                        }
                    } else {
                        stream.write_all(piece).await?;
                    }
                }
                stream.flush().await
            }
            .await;
            written.map_err(|e| io(frames, e))?;
            last_write = tokio::time::Instant::now();
            frames += 1;
            self.stats.sent[to].fetch_add(bytes, Ordering::Relaxed);
            self.stats.mark_write(started);
        }
        stream.close().await.map_err(|e| io(frames, e))
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::task::{Context, Poll};

    use super::*;
    use crate::driver::Egress;
    use crate::p2p::NetStats;

    /// A stream that keeps what is written (or refuses every write when `broken`) and
    /// whose reads end at once (the receiver has read everything).
    #[derive(Clone, Default)]
    struct Sink {
        written: Arc<Mutex<Vec<u8>>>,
        attempts: Arc<std::sync::atomic::AtomicUsize>,
        broken: bool,
        /// Reads give a [`frame::FRAME_ACK`] for every frame written whole, as a reader
        /// does, and end once the stream is closed (otherwise they end at once).
        acks: bool,
        acked: Arc<std::sync::atomic::AtomicUsize>,
        closed: Arc<std::sync::atomic::AtomicBool>,
        reader: Arc<Mutex<Option<std::task::Waker>>>,
    }

    impl Sink {
        /// Frames (not heartbeats) written whole so far.
        fn whole_frames(&self) -> usize {
            let written = self.written.lock().unwrap();
            let mut rest = &written[..];
            let mut n = 0;
            while rest.len() >= 4 {
                let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
                if rest.len() < 4 + len {
                    break;
                }
                n += usize::from(len > 0);
                rest = &rest[4 + len..];
            }
            n
        }

        fn wake_reader(&self) {
            if let Some(w) = self.reader.lock().unwrap().take() {
                w.wake();
            }
        }
    }

    impl AsyncWrite for Sink {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            b: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.attempts.fetch_add(1, Ordering::Relaxed);
            if self.broken {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
            self.written.lock().unwrap().extend_from_slice(b);
            self.wake_reader();
            Poll::Ready(Ok(b.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.closed.store(true, Ordering::Relaxed);
            self.wake_reader();
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncRead for Sink {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            out: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            if !self.acks {
                return Poll::Ready(Ok(0));
            }
            *self.reader.lock().unwrap() = Some(cx.waker().clone());
            let due = self.whole_frames() - self.acked.load(Ordering::Relaxed);
            if due > 0 {
                let n = due.min(out.len());
                out[..n].fill(frame::FRAME_ACK);
                self.acked.fetch_add(n, Ordering::Relaxed);
                return Poll::Ready(Ok(n));
            }
            if self.closed.load(Ordering::Relaxed) {
                return Poll::Ready(Ok(0));
            }
            Poll::Pending
        }
    }

    /// Node 0's writer to node 1, heartbeat every `heartbeat`.
    fn writer(heartbeat: Duration) -> Writer {
        let name = |index| NodeName {
            index,
            server: false,
        };
        Writer {
            me: name(0),
            to: 1,
            to_name: name(1),
            to_core: PeerId(1),
            to_id: Libp2pId::random(),
            addr: "/ip4/127.0.0.1/tcp/1".parse().unwrap(),
            control: libp2p_stream::Behaviour::new().new_control(),
            dial: mpsc::channel(1).0,
            connected: watch::channel(Connected::default()).1,
            hello: Vec::new(),
            bucket: None,
            stats: Arc::new(NetStats::new(2)),
            fatal: mpsc::channel(1).0,
            deadline: Instant::now(),
            ack_timeout: Duration::from_secs(1),
            heartbeat,
        }
    }

    /// Polls `cond` every millisecond; panics after 10 s.
    async fn eventually(what: &str, cond: impl Fn() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "not within 10 s: {what}"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The frames in `bytes` (heartbeats are the empty ones).
    fn frames(mut bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
            out.push(bytes[4..4 + len].to_vec());
            bytes = &bytes[4 + len..];
        }
        out
    }

    #[tokio::test]
    async fn an_idle_writer_sends_heartbeats_outside_the_byte_counters() {
        let w = Arc::new(writer(Duration::from_millis(10)));
        let sink = Sink::default();
        let (tx, rx) = mpsc::channel(4);
        let task = {
            let (w, sink) = (Arc::clone(&w), sink.clone());
            tokio::spawn(async move { w.send(sink, rx).await })
        };
        tx.send(Arc::new(vec![1, 2, 3])).await.unwrap();
        eventually("three heartbeats", || {
            w.stats.heartbeats_sent.load(Ordering::Relaxed) >= 3
        })
        .await;
        tx.send(Arc::new(vec![4])).await.unwrap();
        drop(tx);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the writer ends")
            .unwrap()
            .unwrap();
        let got = frames(&sink.written.lock().unwrap());
        let beats = got.iter().filter(|f| f.is_empty()).count();
        assert!(beats >= 3, "{got:?}");
        assert_eq!(got.first(), Some(&vec![1, 2, 3]));
        assert_eq!(got.last(), Some(&vec![4]));
        assert_eq!(got.len(), beats + 2);
        assert_eq!(
            w.stats.heartbeats_sent.load(Ordering::Relaxed),
            beats as u64
        );
        // The byte counter holds the two frames alone.
        assert_eq!(w.stats.sent[1].load(Ordering::Relaxed), (3 + 4) + (1 + 4));
    }

    /// Writes `frames` frames of `len` bytes through `w` to `sink`, waiting until they are
    /// all through; returns what the link meter read for them.
    async fn metered(w: &Arc<Writer>, sink: &Sink, frames: usize, len: usize) -> Egress {
        let before = w.stats.egress();
        let sent = w.stats.sent[1].load(Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(frames);
        let task = {
            let (w, sink) = (Arc::clone(w), sink.clone());
            tokio::spawn(async move { w.send(sink, rx).await })
        };
        for _ in 0..frames {
            tx.send(Arc::new(vec![7; len])).await.unwrap();
        }
        drop(tx);
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("the writer ends")
            .unwrap()
            .unwrap();
        let total = (frames * (len + 4)) as u64;
        assert_eq!(w.stats.sent[1].load(Ordering::Relaxed) - sent, total);
        let after = w.stats.egress();
        Egress {
            bytes: after.bytes - before.bytes,
            busy: after.busy - before.busy,
        }
    }

    /// The link's meter (`--prioritize POLICY:auto`): without a token bucket, each frame's
    /// bytes from its first write to the receiver's acknowledgement (a stream that never
    /// acknowledges measures nothing); with one, only the bytes the bucket held back, so
    /// its burst measures nothing and past it the bucket's waits measure its rate, not
    /// more.
    #[tokio::test]
    async fn the_link_meter_counts_acknowledged_frames_or_the_buckets_waits() {
        let w = Arc::new(writer(Duration::from_secs(60)));
        let silent = metered(&w, &Sink::default(), 3, 100_000).await;
        assert_eq!(silent, Egress::default(), "nothing acknowledged");
        let acking = Sink {
            acks: true,
            ..Sink::default()
        };
        let acked = metered(&w, &acking, 3, 100_000).await;
        assert_eq!(acked.bytes, 3 * (100_000 + 4), "{acked:?}");
        assert_eq!(acking.acked.load(Ordering::Relaxed), 3);

        let rate = 4e6;
        let mut paced = writer(Duration::from_secs(60));
        paced.bucket = Some(Arc::new(Bucket::new(crate::bandwidth::Rate(rate), 1 << 20)));
        let paced = Arc::new(paced);
        // Within the bucket's burst of 1 MiB: through at once, nothing measured (the
        // bucket is the link; acknowledgements are not counted with it).
        let burst = metered(&paced, &acking, 3, 256 * 1024).await;
        assert_eq!(burst, Egress::default(), "the burst is not bandwidth");
        // Past it the bytes beyond the tokens wait: the rate, not more (a waiting task
        // that is late only lowers it).
        let past = metered(&paced, &Sink::default(), 6, 256 * 1024).await;
        let measured = past.bytes as f64 / past.busy.as_secs_f64();
        assert!(past.bytes >= 4 * 256 * 1024, "{past:?}");
        assert!(measured < 1.05 * rate, "{measured} B/s against {rate}");
    }

    #[tokio::test]
    async fn a_failed_heartbeat_fails_nothing_until_a_frame_needs_the_stream() {
        let w = Arc::new(writer(Duration::from_millis(5)));
        let sink = Sink {
            broken: true,
            ..Sink::default()
        };
        let (tx, rx) = mpsc::channel(4);
        let task = {
            let (w, sink) = (Arc::clone(&w), sink.clone());
            tokio::spawn(async move { w.send(sink, rx).await })
        };
        eventually("a heartbeat tried", || {
            sink.attempts.load(Ordering::Relaxed) >= 1
        })
        .await;
        assert!(!task.is_finished(), "a failed heartbeat ended the writer");
        // No more heartbeats are tried on the broken stream.
        let tried = sink.attempts.load(Ordering::Relaxed);
        tx.send(Arc::new(vec![7])).await.unwrap();
        let err = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the writer ends")
            .unwrap()
            .unwrap_err();
        assert_eq!(sink.attempts.load(Ordering::Relaxed), tried + 1);
        assert!(
            err.to_string()
                .starts_with("lost peer 1: the stream from peer 0 to it broke after 0 frames"),
            "{err}"
        );
        assert_eq!(w.stats.heartbeats_sent.load(Ordering::Relaxed), 0);
    }

    /// Node 0's writer to node 1 with a start-up deadline `deadline` from now, the swarm's
    /// view of connections behind `connected`, and its re-dial requests kept in `dial`.
    fn connecting(
        deadline: Duration,
        connected: watch::Receiver<Connected>,
        dial: mpsc::Sender<Multiaddr>,
    ) -> Writer {
        Writer {
            deadline: Instant::now() + deadline,
            connected,
            dial,
            ..writer(Duration::from_secs(1))
        }
    }

    /// What `w.connect()` names as its last problem when it gives up (within 10 s).
    async fn connect_problem(w: &Writer) -> ConnectProblem {
        let err = tokio::time::timeout(Duration::from_secs(10), w.connect())
            .await
            .expect("connect gives up at its deadline")
            .unwrap_err();
        match err {
            Error::Connect { last_problem, .. } => last_problem,
            other => panic!("not a connect error: {other}"),
        }
    }

    #[tokio::test]
    async fn a_writer_asks_for_no_stream_until_the_swarm_reports_a_connection() {
        let (_up, connected) = watch::channel(Connected::default());
        let (dial, mut dials) = mpsc::channel(64);
        let w = connecting(Duration::from_millis(700), connected, dial);
        let problem = connect_problem(&w).await;
        assert!(matches!(problem, ConnectProblem::NotConnected), "{problem}");
        assert_eq!(problem.to_string(), "no connection to it came up");
        // It re-dialed while it waited.
        let mut redials = 0;
        while dials.try_recv().is_ok() {
            redials += 1;
        }
        assert!(redials >= 2, "{redials} re-dials in 700 ms");
    }

    #[tokio::test]
    async fn an_open_attempt_that_never_completes_is_given_up_and_named() {
        // Connected as far as the swarm's view goes, but the control belongs to no swarm:
        // libp2p-stream parks the request and `open_stream` never completes, as in the
        // race the wait for a connection avoids.
        let (up, connected) = watch::channel(Connected::default());
        let w = connecting(Duration::from_millis(500), connected, mpsc::channel(64).0);
        up.send_modify(|c| c.set(w.to_id, 1));
        let problem = connect_problem(&w).await;
        assert!(
            matches!(problem, ConnectProblem::OpenTimedOut(_)),
            "{problem}"
        );
        assert!(
            problem.to_string().contains("did not complete within"),
            "{problem}"
        );
        drop(up);
    }

    #[test]
    fn connections_are_counted_per_peer() {
        let (a, b) = (Libp2pId::random(), Libp2pId::random());
        let mut c = Connected::default();
        c.set(a, 2);
        assert!(c.has(&a) && !c.has(&b));
        c.set(a, 1);
        assert!(c.has(&a));
        c.set(a, 0);
        assert!(!c.has(&a));
    }
}
