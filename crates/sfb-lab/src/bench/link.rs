//! One libp2p stream, measured two ways inside one run.
//!
//! 1. **Framing overhead.** Two swarms in this process (TCP + noise + yamux from
//!    [`sfb_net::p2p::build_swarm`], 127.0.0.1, port 0, each allowing only the other's key)
//!    hold two long-lived streams ([`Link::connect`]). On one, a *bare* copy loop:
//!    `write_all` of 1 MiB buffers, `read_exact` into one reused buffer. On the other,
//!    sfb's path: [`frame::write_frame`] (+ flush, as the peer's writer does) of an encoded
//!    factor batch of ≈ 1 MiB ([`frame_message`]: K = 16, J + D = 16384), and on the
//!    receiver [`frame::read_frame`] + [`wire::decode`] (full validation), or framing only.
//!    The arms alternate for several rounds after a warm-up; medians are reported, and the
//!    overhead is `1 − framed / bare` of the median throughputs.
//! 2. **Bandwidth budget.** The framed path again, the sender pacing through a fresh
//!    [`Bucket`] exactly like `p2p.rs`'s writer (length prefix, then 64 KiB chunks, reserve
//!    before each write, sleep for the returned duration, flush per frame). The achieved
//!    rate is bytes over the time from the first write to the last byte read.
//!
//! Every measurement's clock starts at the sender's first write and stops when the receiver
//! has read (and, framed, decoded) the last byte; both ends are in this process, so one
//! `Instant` clock serves both. Encoding happens once, before the clock starts, as in a run
//! (the engine encodes each batch once for all its out-neighbours).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{AsyncReadExt, AsyncWriteExt, FutureExt, StreamExt};
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId as Libp2pId, StreamProtocol};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use sfb_core::PeerId;
use sfb_core::replica::seeded_batches;
use sfb_core::wire::{self, Expect, Message};
use sfb_net::bandwidth::{Bucket, Rate};
use sfb_net::frame;
use sfb_net::p2p::{RunShape, build_swarm};
use tokio::sync::{mpsc, oneshot};

use super::{ArmKeys, Error, Result, median};

/// Pairs per factor batch frame.
pub const K: usize = 16;
/// Rows of W: with [`D`], K·(J+D)·4 = 1 MiB of factors per frame.
pub const J: usize = 1024;
/// Columns of W.
pub const D: usize = 15360;
/// Bytes per bare buffer.
pub const MIB: usize = 1 << 20;
/// Pacing chunk of `sfb_net::p2p`'s writer (a private constant there).
const CHUNK: usize = 64 * 1024;
/// Bound on swarm set-up steps (listen, connect, open streams).
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);

const PROTO_BARE: &str = "/sfb/bench-link/bare/1";
const PROTO_FRAMED: &str = "/sfb/bench-link/framed/1";

/// What the scenario runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// MiB per arm per round (throughput comparison).
    pub mib: usize,
    /// Measured rounds per arm (after one warm-up round).
    pub rounds: usize,
    /// Budgets to check, with the label they were given as; the first is the headline.
    pub rates: Vec<(String, Rate)>,
    /// Burst of the token bucket, bytes.
    pub burst: usize,
    /// Seconds of traffic per budget run.
    pub budget_secs: f64,
}

impl Config {
    /// Checks the numbers.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the first bad field.
    pub fn validate(&self) -> Result<()> {
        let bad = |field, expected| Err(Error::Invalid { field, expected });
        if self.mib == 0 {
            return bad("mib", "positive");
        }
        if self.rounds == 0 {
            return bad("rounds", "positive");
        }
        if self.burst == 0 {
            return bad("burst", "positive");
        }
        if !(self.budget_secs.is_finite() && self.budget_secs > 0.0) {
            return bad("budget_secs", "a positive number of seconds");
        }
        Ok(())
    }
}

/// Parses the budgets: `headline` first, then each comma-separated entry of `more`;
/// blanks and repeats are skipped.
///
/// # Errors
/// [`Error::Rate`] for an entry that is not a rate (`100mbit`, `1gbit`, …).
pub fn parse_rates(headline: &str, more: &str) -> Result<Vec<(String, Rate)>> {
    let mut rates: Vec<(String, Rate)> = Vec::new();
    for s in std::iter::once(headline).chain(more.split(',')) {
        let s = s.trim();
        if s.is_empty() || rates.iter().any(|(l, _)| l == s) {
            continue;
        }
        let r: Rate = s.parse().map_err(|reason| Error::Rate {
            text: s.to_string(),
            reason,
        })?;
        rates.push((s.to_string(), r));
    }
    Ok(rates)
}

/// One timed transfer.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// `bare`, `framed`, `framing-only` or `budget <rate>`.
    pub arm: String,
    /// Measured round (1-based).
    pub round: usize,
    /// Units sent (1 MiB buffers or frames).
    pub units: usize,
    /// Bytes on the stream (framed: including the 4-byte length prefixes).
    pub bytes: u64,
    /// First write → last byte read.
    pub seconds: f64,
    /// `bytes / seconds / 1e6`.
    pub mb_per_s: f64,
    /// CPU seconds this process spent meanwhile, both ends together (Linux: every
    /// thread's `/proc/self/task/*/schedstat`; absent elsewhere).
    pub cpu_s: Option<f64>,
}

/// CPU seconds this process has run so far, all its threads (Linux `schedstat`, in
/// nanoseconds); `None` where it cannot be read.
pub fn process_cpu_s() -> Option<f64> {
    Some(thread_cpu_ns()?.values().sum::<u64>() as f64 / 1e9)
}

/// Each live thread's CPU nanoseconds so far, by thread id (Linux `schedstat`).
fn thread_cpu_ns() -> Option<std::collections::BTreeMap<String, u64>> {
    let mut by = std::collections::BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        // A thread that ended since the listing is skipped.
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let ns = text.split_whitespace().next()?.parse::<u64>().ok()?;
        by.insert(task.file_name().to_string_lossy().into_owned(), ns);
    }
    Some(by)
}

/// CPU seconds the process's threads ran since `before` ([`thread_cpu_ns`]): each thread's
/// own increase, so a thread that ended in between (another test's, in a test binary)
/// takes nothing away; one started since counts from zero.
fn cpu_since(before: &std::collections::BTreeMap<String, u64>) -> Option<f64> {
    let now = thread_cpu_ns()?;
    let ns: u64 = now
        .iter()
        .map(|(tid, &n)| n.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum();
    Some(ns as f64 / 1e9)
}

/// The budget result at one rate.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetRow {
    /// The rate as given (`1gbit`, …).
    pub rate: String,
    /// Budget in bytes/s.
    pub budget_bytes_per_s: f64,
    /// Median achieved rate over the rounds.
    pub achieved_bytes_per_s: f64,
    /// `(achieved − budget) / budget · 100`.
    pub deviation_pct: f64,
    /// Smallest and largest achieved rate over the rounds.
    pub achieved_min_bytes_per_s: f64,
    /// See `achieved_min_bytes_per_s`.
    pub achieved_max_bytes_per_s: f64,
    /// Frames per run.
    pub frames: usize,
}

/// A bench arm in DESIGN.md's `bench` JSON shape plus this scenario's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Arm {
    /// DESIGN.md's keys.
    #[serde(flatten)]
    pub keys: ArmKeys,
    /// Median MB/s.
    pub mb_per_s: f64,
    /// Overhead against the bare arm, %.
    pub overhead_pct: Option<f64>,
    /// Budget arms: the budget.
    pub budget_bytes_per_s: Option<f64>,
    /// Budget arms: the median achieved rate.
    pub achieved_bytes_per_s: Option<f64>,
    /// Budget arms: deviation from the budget, %.
    pub deviation_pct: Option<f64>,
}

impl Arm {
    fn new(name: &str, mb_per_s: f64) -> Self {
        Self {
            keys: ArmKeys::named(name.into()),
            mb_per_s,
            overhead_pct: None,
            budget_bytes_per_s: None,
            achieved_bytes_per_s: None,
            deviation_pct: None,
        }
    }
}

/// Receiver CPU per unit, measured from memory (no network): where the framed path's
/// extra time can come from.
#[derive(Debug, Clone, Serialize)]
pub struct CpuCost {
    /// `read_exact` of 1 MiB into a reused buffer, µs.
    pub bare_read_us: f64,
    /// `frame::read_frame` of one frame (allocation + copy), µs.
    pub read_frame_us: f64,
    /// `wire::decode` of one frame (copy out + validation), µs.
    pub decode_us: f64,
    /// Of which `FactorBatch::validate` (shape and finite-value checks), µs.
    pub validate_us: f64,
    /// `wire::encode` of one frame (sender side, once per batch in a run), µs.
    pub encode_us: f64,
}

/// Everything the scenario measured; serializes to `link.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `link`.
    pub scenario: &'static str,
    /// The transport, in words.
    pub transport: &'static str,
    /// Pairs per frame.
    pub k: usize,
    /// Rows of W.
    pub j: usize,
    /// Columns of W.
    pub d: usize,
    /// Bytes per frame with its length prefix.
    pub frame_bytes: usize,
    /// Bytes per bare buffer.
    pub bare_buffer_bytes: usize,
    /// Units per arm per round.
    pub mib_per_arm_per_round: usize,
    /// Measured rounds.
    pub rounds: usize,
    /// Median MB/s of the bare copy loop.
    pub bare_mb_per_s: f64,
    /// Median MB/s of the framed + validated path.
    pub framed_mb_per_s: f64,
    /// `(1 − framed / bare) · 100` of the medians (framing plus decode and validation).
    pub overhead_pct: f64,
    /// The framed path's CPU per byte at each end, as a rate of one core (bytes/s): the
    /// median over rounds of bytes over half the process's CPU seconds (both ends run in
    /// this process). What `sfb sim --transport-cpu` takes. Absent where the CPU time
    /// cannot be read.
    pub transport_cpu_bytes_per_s: Option<f64>,
    /// Median MB/s of framing alone (`write_frame` → `read_frame`, no decode).
    pub framing_only_mb_per_s: f64,
    /// `(1 − framing_only / bare) · 100` of the medians.
    pub framing_only_overhead_pct: f64,
    /// The same per round (pairs measured back to back).
    pub overhead_pct_per_round: Vec<f64>,
    /// Target for the framing-only overhead, %.
    pub overhead_target_pct: f64,
    /// Whether the framing-only overhead is under its target.
    pub overhead_target_met: bool,
    /// Burst of the token bucket, bytes.
    pub burst_bytes: usize,
    /// Seconds of traffic per budget run.
    pub budget_secs: f64,
    /// One row per rate; the first is the headline `--bandwidth`.
    pub budget: Vec<BudgetRow>,
    /// Target for the budget deviation, ±%.
    pub deviation_target_pct: f64,
    /// Whether every budget is within its target.
    pub deviation_target_met: bool,
    /// Receiver CPU split, from memory.
    pub cpu: CpuCost,
    /// Every timed transfer.
    pub samples: Vec<Sample>,
    /// DESIGN.md's bench arms.
    pub arms: Vec<Arm>,
}

/// The bench's factor batch frame: `K` seeded dense pairs for a `J × D` replica from peer
/// 0 at clock 7 (seed 2016).
pub fn frame_message() -> Message {
    let mut batch = seeded_batches(2016, J, D, K, 1, None)
        .pop()
        .expect("one batch");
    batch.clock = 7;
    Message::Factors {
        batch: Arc::new(batch),
        mean_iter_us: 1234,
    }
}

/// What the receiver of [`frame_message`] expects.
pub fn expect() -> Expect {
    Expect {
        j: J,
        d: D,
        peers: 2,
    }
}

/// The frame length limit of a run with the bench frame's shape.
pub fn max_frame() -> usize {
    RunShape {
        j: J,
        d: D,
        batch: K,
        clocks: 1,
        full_w: false,
        dtype: sfb_core::wire::Dtype::F32,
        agreement: Vec::new(),
    }
    .max_frame()
}

fn seeded_key(seed: u64) -> Result<Keypair> {
    let mut bytes = [0u8; 32];
    ChaCha8Rng::seed_from_u64(seed).fill(&mut bytes);
    Keypair::ed25519_from_bytes(bytes).map_err(|e| Error::Libp2p {
        what: "ed25519 key",
        reason: e.to_string(),
    })
}

fn broken(what: impl Into<String>) -> Error {
    Error::Broken(what.into())
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// A job for a stream's sender: `units` buffers or frames, optionally paced.
struct SendJob {
    units: usize,
    bucket: Option<Arc<Bucket>>,
    done: oneshot::Sender<Result<Instant>>,
}

/// A job for a stream's receiver: read (and, framed, decode) `units`.
struct RecvJob {
    units: usize,
    /// Framed lane: decode and validate every frame (`false`: framing only).
    decode: bool,
    done: oneshot::Sender<Result<(Instant, u64)>>,
}

/// One direction of one stream: where to send jobs.
#[derive(Debug)]
struct Lane {
    send: mpsc::Sender<SendJob>,
    recv: mpsc::Sender<RecvJob>,
}

/// Which stream and receiver work a [`Link::transfer`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lanes {
    /// 1 MiB buffers, `write_all` → `read_exact`.
    Bare,
    /// Frames, `write_frame` → `read_frame` + `wire::decode` (full validation).
    Framed,
    /// Frames, `write_frame` → `read_frame` only.
    FramingOnly,
}

/// Two swarms in this process, connected over 127.0.0.1, with a bare and a framed stream
/// from the first to the second and their sender and receiver tasks running on the
/// current tokio runtime. Dropping it stops the tasks.
#[derive(Debug)]
pub struct Link {
    bare: Lane,
    framed: Lane,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Link {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn within<T>(
    limit: Duration,
    what: &str,
    f: impl std::future::Future<Output = T>,
) -> Result<T> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| Error::Timeout {
            what: what.into(),
            limit,
        })
}

impl Link {
    /// Connects the two swarms and opens both streams; the framed lane sends `payload`
    /// (an encoded message such as [`frame_message`]'s) as each frame.
    ///
    /// # Errors
    /// [`Error::Libp2p`], [`Error::Timeout`] (each set-up step is bounded by 20 s) or
    /// [`Error::Broken`] when the set-up fails.
    pub async fn connect(payload: Arc<Vec<u8>>) -> Result<Self> {
        let p2p = |what: &'static str| {
            move |e: &dyn std::fmt::Display| Error::Libp2p {
                what,
                reason: e.to_string(),
            }
        };
        let (key_a, key_b) = (seeded_key(1)?, seeded_key(2)?);
        let (id_a, id_b) = (key_a.public().to_peer_id(), key_b.public().to_peer_id());
        let mut swarm_a = build_swarm(key_a, &[id_b]).map_err(|e| p2p("swarm")(&e))?;
        let mut swarm_b = build_swarm(key_b, &[id_a]).map_err(|e| p2p("swarm")(&e))?;
        let mut tasks = Vec::new();
        let mut control_a = swarm_a.behaviour().stream.new_control();
        let mut control_b = swarm_b.behaviour().stream.new_control();
        let mut in_bare = control_b
            .accept(StreamProtocol::new(PROTO_BARE))
            .map_err(|e| p2p("accept")(&e))?;
        let mut in_framed = control_b
            .accept(StreamProtocol::new(PROTO_FRAMED))
            .map_err(|e| p2p("accept")(&e))?;

        let any: Multiaddr = "/ip4/127.0.0.1/tcp/0".parse().expect("valid multiaddr");
        swarm_b.listen_on(any).map_err(|e| p2p("listen")(&e))?;
        let listen: Multiaddr = within(SETUP_TIMEOUT, "listening on 127.0.0.1", async {
            loop {
                if let SwarmEvent::NewListenAddr { address, .. } = swarm_b.select_next_some().await
                {
                    return address;
                }
            }
        })
        .await?;
        tasks.push(tokio::spawn(async move {
            loop {
                let _ = swarm_b.select_next_some().await;
            }
        }));
        swarm_a
            .dial(listen.clone().with(Protocol::P2p(id_b)))
            .map_err(|e| p2p("dial")(&e))?;
        let (up_tx, up_rx) = oneshot::channel::<std::result::Result<Libp2pId, String>>();
        tasks.push(tokio::spawn(async move {
            let mut up = Some(up_tx);
            loop {
                match swarm_a.select_next_some().await {
                    SwarmEvent::ConnectionEstablished { peer_id, .. } => {
                        if let Some(tx) = up.take() {
                            let _ = tx.send(Ok(peer_id));
                        }
                    }
                    SwarmEvent::OutgoingConnectionError { error, .. } => {
                        if let Some(tx) = up.take() {
                            let _ = tx.send(Err(error.to_string()));
                        }
                    }
                    _ => {}
                }
            }
        }));
        let lanes = async {
            let peer = within(SETUP_TIMEOUT, "connecting the two swarms", up_rx)
                .await?
                .map_err(|_| broken("swarm task ended"))?
                .map_err(|e| p2p("dial")(&format!("{listen}: {e}")))?;
            if peer != id_b {
                return Err(broken(format!("connected to {peer}, expected {id_b}")));
            }
            let mut lanes = Vec::new();
            for (proto, incoming, framed) in [
                (PROTO_BARE, &mut in_bare, false),
                (PROTO_FRAMED, &mut in_framed, true),
            ] {
                let (out, inc) = within(SETUP_TIMEOUT, "opening a stream", async {
                    tokio::join!(
                        control_a.open_stream(id_b, StreamProtocol::new(proto)),
                        incoming.next()
                    )
                })
                .await?;
                let out = out.map_err(|e| p2p("open_stream")(&e))?;
                let (from, inc) =
                    inc.ok_or_else(|| broken(format!("no incoming {proto} stream")))?;
                if from != id_a {
                    return Err(broken(format!(
                        "{proto} stream from {from}, expected {id_a}"
                    )));
                }
                let (send_tx, send_rx) = mpsc::channel(1);
                let (recv_tx, recv_rx) = mpsc::channel(1);
                let p = Arc::clone(&payload);
                lanes.push((
                    Lane {
                        send: send_tx,
                        recv: recv_tx,
                    },
                    tokio::spawn(sender(out, p, framed, send_rx)),
                    tokio::spawn(receiver(inc, framed, recv_rx)),
                ));
            }
            Ok(lanes)
        }
        .await;
        let lanes = match lanes {
            Ok(l) => l,
            Err(e) => {
                for t in &tasks {
                    t.abort();
                }
                return Err(e);
            }
        };
        let mut found = Vec::new();
        for (lane, s, r) in lanes {
            tasks.push(s);
            tasks.push(r);
            found.push(lane);
        }
        let framed = found.pop().expect("two lanes");
        let bare = found.pop().expect("two lanes");
        Ok(Self {
            bare,
            framed,
            tasks,
        })
    }

    /// One timed transfer of `units` (1 MiB buffers or frames) on `lanes`, paced by
    /// `bucket` if given (framed lanes only): the receiver is armed first, then the sender
    /// starts. Returns the bytes on the stream and the seconds from the first write to the
    /// last byte read (and decoded).
    ///
    /// # Errors
    /// [`Error::Timeout`] when the transfer takes longer than `limit`; the stream's or the
    /// decoder's error otherwise.
    pub async fn transfer(
        &self,
        lanes: Lanes,
        units: usize,
        bucket: Option<Arc<Bucket>>,
        limit: Duration,
    ) -> Result<(u64, f64)> {
        let (lane, decode) = match lanes {
            Lanes::Bare => (&self.bare, false),
            Lanes::Framed => (&self.framed, true),
            Lanes::FramingOnly => (&self.framed, false),
        };
        let (rtx, rrx) = oneshot::channel();
        let (stx, srx) = oneshot::channel();
        let gone = |who: &str| broken(format!("{who} task gone"));
        lane.recv
            .send(RecvJob {
                units,
                decode,
                done: rtx,
            })
            .await
            .map_err(|_| gone("receiver"))?;
        lane.send
            .send(SendJob {
                units,
                bucket,
                done: stx,
            })
            .await
            .map_err(|_| gone("sender"))?;
        let deadline = tokio::time::Instant::now() + limit;
        let late = |who: &str| Error::Timeout {
            what: format!("transfer of {units} units: {who}"),
            limit,
        };
        let start = tokio::time::timeout_at(deadline, srx)
            .await
            .map_err(|_| late("sender"))?
            .map_err(|_| gone("sender"))??;
        let (end, bytes) = tokio::time::timeout_at(deadline, rrx)
            .await
            .map_err(|_| late("receiver"))?
            .map_err(|_| gone("receiver"))??;
        let secs = end.saturating_duration_since(start).as_secs_f64();
        if secs <= 0.0 {
            return Err(broken("transfer took no measurable time"));
        }
        Ok((bytes, secs))
    }
}

/// `p2p.rs`'s writer, frame by frame: the length prefix, then 64 KiB chunks, each after a
/// reservation on the bucket (sleeping for the returned debt), then a flush.
async fn write_paced(
    stream: &mut libp2p::Stream,
    payload: &[u8],
    bucket: &Bucket,
) -> std::io::Result<()> {
    let len = (payload.len() as u32).to_le_bytes();
    let mut pieces: Vec<&[u8]> = vec![&len];
    pieces.extend(payload.chunks(CHUNK));
    for piece in pieces {
        let wait = bucket.reserve(piece.len());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        stream.write_all(piece).await?;
    }
    stream.flush().await
}

async fn sender(
    mut stream: libp2p::Stream,
    payload: Arc<Vec<u8>>,
    framed: bool,
    mut jobs: mpsc::Receiver<SendJob>,
) {
    let bare = if framed {
        Vec::new()
    } else {
        let mut b = vec![0u8; MIB];
        ChaCha8Rng::seed_from_u64(99).fill(&mut b[..]);
        b
    };
    while let Some(job) = jobs.recv().await {
        let r = async {
            let start = Instant::now();
            for _ in 0..job.units {
                match (&job.bucket, framed) {
                    (_, false) => stream.write_all(&bare).await?,
                    (None, true) => {
                        frame::write_frame(&mut stream, &payload).await?;
                        stream.flush().await?;
                    }
                    (Some(b), true) => write_paced(&mut stream, &payload, b).await?,
                }
            }
            stream.flush().await?;
            Ok::<_, std::io::Error>(start)
        }
        .await;
        let failed = r.is_err();
        let _ = job.done.send(r.map_err(io("sending")));
        if failed {
            return;
        }
    }
    let _ = stream.close().await;
}

async fn receiver(mut stream: libp2p::Stream, framed: bool, mut jobs: mpsc::Receiver<RecvJob>) {
    let mut buf = if framed { Vec::new() } else { vec![0u8; MIB] };
    let (expect, max) = (expect(), max_frame());
    while let Some(job) = jobs.recv().await {
        let r = async {
            let mut bytes = 0u64;
            for i in 0..job.units {
                if framed {
                    let f = frame::read_frame(&mut stream, max)
                        .await
                        .map_err(io("receiving"))?
                        .ok_or_else(|| broken(format!("stream ended before frame {i}")))?;
                    bytes += f.len() as u64 + 4;
                    if job.decode {
                        let msg = wire::decode(&f, &expect)?;
                        if msg.origin() != PeerId(0) {
                            return Err(broken(format!("frame from {}", msg.origin())));
                        }
                        std::hint::black_box(msg);
                    } else {
                        std::hint::black_box(f);
                    }
                } else {
                    stream.read_exact(&mut buf).await.map_err(io("receiving"))?;
                    bytes += buf.len() as u64;
                }
            }
            Ok((Instant::now(), bytes))
        }
        .await;
        let failed = r.is_err();
        let _ = job.done.send(r);
        if failed {
            return;
        }
    }
}

/// Median µs per call of `f` over `n` calls, repeated 5 times.
fn cpu_us(n: usize, mut f: impl FnMut()) -> f64 {
    let mut t = Vec::new();
    for _ in 0..5 {
        let s = Instant::now();
        for _ in 0..n {
            f();
        }
        t.push(s.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    median(&t)
}

/// Receiver CPU per unit with the stream replaced by memory (reads complete at once), for
/// `payload` = the encoded [`frame_message`].
pub fn cpu_cost(payload: &[u8]) -> CpuCost {
    let n = 32;
    let mut framed = Vec::with_capacity(payload.len() + 4);
    framed.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    framed.extend_from_slice(payload);
    let bare_src = vec![7u8; MIB];
    let mut buf = vec![0u8; MIB];
    let (expect, max) = (expect(), max_frame());
    let msg = frame_message();
    let bare_read_us = cpu_us(n, || {
        let mut c = futures::io::Cursor::new(&bare_src[..]);
        c.read_exact(&mut buf)
            .now_or_never()
            .expect("memory reads complete at once")
            .expect("in memory");
        std::hint::black_box(&buf);
    });
    let read_frame_us = cpu_us(n, || {
        let mut c = futures::io::Cursor::new(&framed[..]);
        let f = frame::read_frame(&mut c, max)
            .now_or_never()
            .expect("memory reads complete at once")
            .expect("in memory");
        std::hint::black_box(f);
    });
    let decode_us = cpu_us(n, || {
        std::hint::black_box(wire::decode(payload, &expect).expect("valid frame"));
    });
    let decoded = wire::decode(payload, &expect).expect("valid frame");
    let Message::Factors { batch, .. } = &decoded else {
        unreachable!("the bench frame is a factor batch")
    };
    let validate_us = cpu_us(n, || {
        batch.validate(J, D).expect("valid batch");
    });
    let encode_us = cpu_us(n, || {
        std::hint::black_box(wire::encode(&msg));
    });
    CpuCost {
        bare_read_us,
        read_frame_us,
        decode_us,
        validate_us,
        encode_us,
    }
}

/// Runs the scenario on the current tokio runtime: throughput pairs, then the budget at
/// each rate.
///
/// # Errors
/// [`Error::Invalid`] for a bad [`Config`]; set-up and transfer errors as
/// [`Link::connect`] and [`Link::transfer`].
pub async fn measure(cfg: &Config) -> Result<Report> {
    cfg.validate()?;
    let payload = Arc::new(wire::encode(&frame_message()));
    let frame_bytes = payload.len() + 4;
    if payload.len() > max_frame() {
        return Err(broken("bench frame over the limit"));
    }
    // Check the frame once outside the timed path, so a failure is named clearly.
    wire::decode(&payload, &expect())?;
    let cpu = cpu_cost(&payload);
    let link = Link::connect(Arc::clone(&payload)).await?;

    let units = cfg.mib;
    // Generous bound: 30 s + the transfer at 5 MB/s.
    let limit = Duration::from_secs_f64(30.0 + (units * frame_bytes) as f64 / 5e6);
    let mut samples = Vec::new();
    let warm = units.min(32);
    for round in 0..=cfg.rounds {
        let order = if round % 2 == 0 {
            [Lanes::Bare, Lanes::Framed, Lanes::FramingOnly]
        } else {
            [Lanes::FramingOnly, Lanes::Framed, Lanes::Bare]
        };
        for lanes in order {
            let name = match lanes {
                Lanes::Bare => "bare",
                Lanes::Framed => "framed",
                Lanes::FramingOnly => "framing-only",
            };
            let n = if round == 0 { warm } else { units };
            let cpu0 = thread_cpu_ns();
            let (bytes, secs) = link.transfer(lanes, n, None, limit).await?;
            let cpu_s = cpu0.as_ref().and_then(cpu_since);
            if round > 0 {
                samples.push(Sample {
                    arm: name.into(),
                    round,
                    units: n,
                    bytes,
                    seconds: secs,
                    mb_per_s: bytes as f64 / secs / 1e6,
                    cpu_s,
                });
            }
        }
    }
    let of = |arm: &str| -> Vec<f64> {
        samples
            .iter()
            .filter(|s| s.arm == arm)
            .map(|s| s.mb_per_s)
            .collect()
    };
    let (bare_all, framed_all) = (of("bare"), of("framed"));
    let bare_mb_per_s = median(&bare_all);
    let framed_mb_per_s = median(&framed_all);
    let overhead_pct = (1.0 - framed_mb_per_s / bare_mb_per_s) * 100.0;
    // Both ends' CPU, split evenly between them, as `sfb sim --transport-cpu` charges it.
    let per_end: Vec<f64> = samples
        .iter()
        .filter(|s| s.arm == "framed")
        .filter_map(|s| {
            s.cpu_s
                .filter(|c| *c > 0.0)
                .map(|c| s.bytes as f64 / (c / 2.0))
        })
        .collect();
    let transport_cpu_bytes_per_s = (!per_end.is_empty()).then(|| median(&per_end));
    let framing_only_mb_per_s = median(&of("framing-only"));
    let framing_only_overhead_pct = (1.0 - framing_only_mb_per_s / bare_mb_per_s) * 100.0;
    let overhead_pct_per_round: Vec<f64> = bare_all
        .iter()
        .zip(&framed_all)
        .map(|(b, f)| (1.0 - f / b) * 100.0)
        .collect();

    let mut budget = Vec::new();
    for (label, rate) in &cfg.rates {
        let frames = ((rate.0 * cfg.budget_secs / frame_bytes as f64).ceil() as usize).max(1);
        let expected = (frames * frame_bytes) as f64 / rate.0;
        let limit = Duration::from_secs_f64(30.0 + 3.0 * expected);
        let name = format!("budget {label}");
        let mut got = Vec::new();
        for round in 1..=cfg.rounds {
            let bucket = Arc::new(Bucket::new(*rate, cfg.burst));
            let (bytes, secs) = link
                .transfer(Lanes::Framed, frames, Some(bucket), limit)
                .await?;
            let bps = bytes as f64 / secs;
            got.push(bps);
            samples.push(Sample {
                arm: name.clone(),
                round,
                units: frames,
                bytes,
                seconds: secs,
                mb_per_s: bps / 1e6,
                cpu_s: None,
            });
        }
        let achieved = median(&got);
        budget.push(BudgetRow {
            rate: label.clone(),
            budget_bytes_per_s: rate.0,
            achieved_bytes_per_s: achieved,
            deviation_pct: (achieved / rate.0 - 1.0) * 100.0,
            achieved_min_bytes_per_s: got.iter().copied().fold(f64::INFINITY, f64::min),
            achieved_max_bytes_per_s: got.iter().copied().fold(0.0, f64::max),
            frames,
        });
    }
    drop(link);

    let mut arms = vec![
        Arm::new("bare", bare_mb_per_s),
        Arm {
            overhead_pct: Some(overhead_pct),
            ..Arm::new("framed", framed_mb_per_s)
        },
        Arm {
            overhead_pct: Some(framing_only_overhead_pct),
            ..Arm::new("framing-only", framing_only_mb_per_s)
        },
    ];
    for b in &budget {
        arms.push(Arm {
            budget_bytes_per_s: Some(b.budget_bytes_per_s),
            achieved_bytes_per_s: Some(b.achieved_bytes_per_s),
            deviation_pct: Some(b.deviation_pct),
            ..Arm::new(&format!("budget {}", b.rate), b.achieved_bytes_per_s / 1e6)
        });
    }
    Ok(Report {
        scenario: "link",
        transport: "libp2p tcp+noise+yamux, 127.0.0.1, one libp2p-stream stream per arm",
        k: K,
        j: J,
        d: D,
        frame_bytes,
        bare_buffer_bytes: MIB,
        mib_per_arm_per_round: cfg.mib,
        rounds: cfg.rounds,
        bare_mb_per_s,
        framed_mb_per_s,
        overhead_pct,
        transport_cpu_bytes_per_s,
        framing_only_mb_per_s,
        framing_only_overhead_pct,
        overhead_pct_per_round,
        overhead_target_pct: 10.0,
        overhead_target_met: framing_only_overhead_pct < 10.0,
        burst_bytes: cfg.burst,
        budget_secs: cfg.budget_secs,
        deviation_target_met: budget.iter().all(|b| b.deviation_pct.abs() <= 5.0),
        budget,
        deviation_target_pct: 5.0,
        cpu,
        samples,
        arms,
    })
}

/// `met` or `MISSED`.
pub fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

impl Report {
    /// The console table of the report (what `sfb bench --scenario link` prints).
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let r = self;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<13} {:>12} {:>26}",
            "arm", "median MB/s", "per round MB/s"
        );
        for (arm, m) in [
            ("bare", r.bare_mb_per_s),
            ("framing-only", r.framing_only_mb_per_s),
            ("framed", r.framed_mb_per_s),
        ] {
            let _ = writeln!(out, "{arm:<13} {m:>12.1}   {}", r.per_round(arm));
        }
        let _ = writeln!(
            out,
            "framing overhead (write_frame → read_frame): {:.1}% of bare throughput — target < {:.0}%: {}",
            r.framing_only_overhead_pct,
            r.overhead_target_pct,
            met(r.overhead_target_met)
        );
        let per_round: Vec<_> = r
            .overhead_pct_per_round
            .iter()
            .map(|x| format!("{x:.1}%"))
            .collect();
        let _ = writeln!(
            out,
            "framing + wire::decode with full validation: {:.1}% of bare throughput (per round: {}); not held to the {:.0}% target (it also checks every value)",
            r.overhead_pct,
            per_round.join(", "),
            r.overhead_target_pct,
        );
        if let Some(rate) = r.transport_cpu_bytes_per_s {
            let _ = writeln!(
                out,
                "transport CPU of the framed path: {:.0} MB/s of one core at each end (both ends' CPU time over the bytes, split evenly; sfb sim --transport-cpu {:.0}MB)",
                rate / 1e6,
                rate / 1e6
            );
        }
        let c = &r.cpu;
        let _ = writeln!(
            out,
            "receiver CPU per unit, from memory: read_exact 1 MiB {:.0} µs; read_frame {:.0} µs + wire::decode {:.0} µs (of which FactorBatch::validate {:.0} µs); sender wire::encode {:.0} µs, once per batch",
            c.bare_read_us, c.read_frame_us, c.decode_us, c.validate_us, c.encode_us
        );
        let _ = writeln!(
            out,
            "bandwidth budget (token bucket, burst {} B, 64 KiB chunks), {} × {:.1} s per rate, median:",
            r.burst_bytes, r.rounds, r.budget_secs
        );
        let _ = writeln!(
            out,
            "{:<10} {:>12} {:>14} {:>10}   {:>22}",
            "rate", "budget MB/s", "achieved MB/s", "deviation", "per round MB/s"
        );
        for b in &r.budget {
            let _ = writeln!(
                out,
                "{:<10} {:>12.2} {:>14.2} {:>9.2}%   {}",
                b.rate,
                b.budget_bytes_per_s / 1e6,
                b.achieved_bytes_per_s / 1e6,
                b.deviation_pct,
                r.per_round(&format!("budget {}", b.rate))
            );
        }
        let _ = writeln!(
            out,
            "budget deviation target (within ±{:.0}% at every rate): {}",
            r.deviation_target_pct,
            met(r.deviation_target_met)
        );
        out
    }

    /// Per-round MB/s of one arm, formatted for a table.
    pub fn per_round(&self, arm: &str) -> String {
        self.samples
            .iter()
            .filter(|s| s.arm == arm)
            .map(|s| format!("{:>8.1}", s.mb_per_s))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `link.csv`: one row per timed transfer.
    pub fn csv(&self) -> String {
        let mut csv = String::from("arm,round,units,bytes,seconds,mb_per_s,budget_bytes_per_s\n");
        for s in &self.samples {
            let budget = self
                .budget
                .iter()
                .find(|b| s.arm == format!("budget {}", b.rate))
                .map_or(String::new(), |b| b.budget_bytes_per_s.to_string());
            csv += &format!(
                "{},{},{},{},{},{},{}\n",
                s.arm, s.round, s.units, s.bytes, s.seconds, s.mb_per_s, budget
            );
        }
        csv
    }

    /// `link.md`.
    pub fn markdown(&self) -> String {
        let r = self;
        let mut md = format!(
            "# sfb bench: link\n\nOne libp2p stream (TCP + noise + yamux over 127.0.0.1) per arm, two swarms in one \
             process. Frames: factor batches K={} J={} D={} ({} bytes with the length prefix). \
             {} MiB per arm per round, {} rounds after a warm-up, arms alternating; medians.\n\n\
             | arm | median MB/s |\n|---|---:|\n| bare copy loop | {:.1} |\n| write_frame → read_frame + wire::decode | {:.1} |\n\n\
             Framing overhead: **{:.1}%** (target < {:.0}%: {}).\n\n\
             Receiver CPU per unit from memory: read_exact of 1 MiB {:.0} µs; read_frame {:.0} µs + \
             wire::decode {:.0} µs (of which FactorBatch::validate {:.0} µs).\n\n\
             Bandwidth budget (burst {} B, 64 KiB chunks, {} × {:.1} s per rate, median):\n\n\
             | rate | budget MB/s | achieved MB/s | deviation |\n|---|---:|---:|---:|\n",
            r.k,
            r.j,
            r.d,
            r.frame_bytes,
            r.mib_per_arm_per_round,
            r.rounds,
            r.bare_mb_per_s,
            r.framed_mb_per_s,
            r.overhead_pct,
            r.overhead_target_pct,
            met(r.overhead_target_met),
            r.cpu.bare_read_us,
            r.cpu.read_frame_us,
            r.cpu.decode_us,
            r.cpu.validate_us,
            r.burst_bytes,
            r.rounds,
            r.budget_secs,
        );
        for b in &r.budget {
            md += &format!(
                "| {} | {:.2} | {:.2} | {:+.2}% |\n",
                b.rate,
                b.budget_bytes_per_s / 1e6,
                b.achieved_bytes_per_s / 1e6,
                b.deviation_pct
            );
        }
        md + &format!(
            "\nBudget target (within ±{:.0}%): {}.\n",
            r.deviation_target_pct,
            met(r.deviation_target_met)
        )
    }

    /// Writes `link.json`, `link.csv` and `link.md` into `dir` (created if needed).
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be written.
    pub fn write_files(&self, dir: &Path) -> Result<()> {
        let json = serde_json::to_string_pretty(self).expect("plain data") + "\n";
        super::write_all(
            dir,
            &[
                ("link.json", json),
                ("link.csv", self.csv()),
                ("link.md", self.markdown()),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_cpu_time_counts_work_done() {
        let start = process_cpu_s();
        if !cfg!(target_os = "linux") && start.is_none() {
            return;
        }
        let start = start.expect("schedstat is readable on Linux");
        // Work until the clock has moved 20 ms (10 s at most, however loaded the host).
        let wall = std::time::Instant::now();
        let mut x = 0u64;
        while process_cpu_s().unwrap() - start < 0.02 {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
            }
            assert!(
                wall.elapsed() < Duration::from_secs(10),
                "CPU time did not move"
            );
        }
        assert!(process_cpu_s().unwrap() >= start);
    }

    #[test]
    fn link_scenario_runs_small() {
        let cfg = Config {
            mib: 4,
            rounds: 1,
            rates: parse_rates("4gbit", "").unwrap(),
            burst: 256 * 1024,
            budget_secs: 0.01,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let r = rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(120), measure(&cfg)).await })
            .expect("link scenario within 120 s")
            .expect("link scenario");
        assert!(r.bare_mb_per_s.is_finite() && r.bare_mb_per_s > 0.0);
        assert!(r.framed_mb_per_s.is_finite() && r.framed_mb_per_s > 0.0);
        assert!(r.overhead_pct.is_finite());
        assert_eq!(r.budget.len(), 1);
        assert!(r.budget[0].achieved_bytes_per_s > 0.0);
        assert!(r.budget[0].deviation_pct.is_finite());
        assert!(r.samples.iter().all(|s| s.bytes > 0 && s.seconds > 0.0));
        assert!(r.cpu.decode_us > 0.0);
        assert_eq!(r.arms.len(), 4, "bare, framed, framing-only, one budget");
        assert!(r.framing_only_mb_per_s.is_finite() && r.framing_only_mb_per_s > 0.0);
        if cfg!(target_os = "linux") {
            let rate = r.transport_cpu_bytes_per_s.expect("CPU time on Linux");
            assert!(rate.is_finite() && rate > 0.0, "{rate}");
        }

        let dir = std::env::temp_dir().join(format!("sfb-bench-link-{}", std::process::id()));
        r.write_files(&dir).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("link.json")).unwrap()).unwrap();
        assert_eq!(json["scenario"], "link");
        for arm in json["arms"].as_array().unwrap() {
            for key in [
                "name",
                "time_to_target_s",
                "samples_per_s",
                "bytes_per_clock",
                "final_objective",
                "mb_per_s",
            ] {
                assert!(arm.get(key).is_some(), "arm lacks {key}");
            }
        }
        assert!(dir.join("link.csv").exists() && dir.join("link.md").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rates_parse_headline_first_without_repeats() {
        let rates = parse_rates("1gbit", "100mbit, 1gbit,,").unwrap();
        let labels: Vec<&str> = rates.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["1gbit", "100mbit"]);
        assert_eq!(rates[0].1.0, 125e6);
        assert!(matches!(parse_rates("fast", ""), Err(Error::Rate { .. })));
    }
}
