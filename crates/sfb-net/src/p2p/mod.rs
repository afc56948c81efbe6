//! Peers over libp2p: TCP + noise + yamux, one long-lived `libp2p-stream` stream per
//! directed edge of the topology.
//!
//! A [`Node`] is started in two steps so that a launcher can use port 0 and exchange the
//! real addresses: [`Node::start`] builds the swarm, listens and begins accepting streams;
//! [`Node::run`] dials the out-neighbours and drives the engine to completion.
//!
//! Roles of the tasks, one module each:
//! - `node`: the **swarm task** owns the swarm: it refuses connections from identities not
//!   in the cluster file (allow list), caps the connections still in their handshake
//!   ([`Options::max_pending_handshakes`]) and dials on request;
//! - `listen`: the TCP transport; its listening socket owns the peer's port (no
//!   `SO_REUSEPORT`), so a peer started twice fails at once with "address in use";
//! - `refusals`: connections refused before authentication (garbage, over the cap,
//!   strangers) are counted in [`NetStats::refused_connections`] and logged as one line,
//!   then at most one summary line per [`REFUSAL_LOG_WINDOW`], never one line each;
//! - `writer`: one **writer** per out-neighbour opens the stream, sends a [`Hello`], waits
//!   for the [`Ack`](crate::frame::Ack), then writes the engine's frames from a bounded
//!   queue, paced by the optional bandwidth [`Bucket`] shared by all writers of the peer,
//!   and a [heartbeat](crate::frame::HEARTBEAT) whenever it has written nothing for
//!   [`Options::heartbeat`];
//! - `reader`: one **reader** per accepted stream checks the sender (an in-neighbour, the
//!   identity its Hello claims), validates every frame with [`sfb_core::wire::decode`]
//!   (size limit, decode, known origin, shape, finite values) and forwards it to the
//!   engine; a bad frame is counted, logged and dropped, and the stream closed with a fatal
//!   error for the run. Heartbeats are counted apart and never reach the engine: with the
//!   frames they are the reader's evidence that its in-neighbour is alive;
//! - `links`: the **engine thread** runs the sans-IO node in the crate's one
//!   [driver loop](crate::driver::drive) over the writers' bounded queues and the readers'
//!   inbox (no consistency logic lives here); it encodes each shared payload once for all
//!   its destinations.
//!
//! Liveness is not progress. Start-up is bounded by [`Options::startup_timeout`]; after
//! that a peer waits for its in-neighbours as long as they are alive, saying whom it waits
//! for every [`STALL_REPORT_EVERY`] (a peer stopped for a while, or computing slowly, is
//! waited for). A peer that dies makes its neighbours fail with an error naming it as the
//! node they lost (`lost peer 3: …`, `lost the server: …`) instead of hanging: at once when
//! its streams end early or break (its process ended), or after
//! [`Options::liveness_timeout`] of silence (no frame, no heartbeat) on a stream that is
//! still open (`lost peer 3: no heartbeat for 60.2 s …`: stopped, hung, or cut off).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use libp2p::StreamProtocol;
use sfb_core::metrics::ClockRecord;
use sfb_core::wire::{self, Message};
use sfb_core::{PeerId, Stragglers};

use crate::Error;
use crate::bandwidth::Bucket;
use crate::cluster::Cluster;
use crate::frame::{self, Hello};

mod links;
mod listen;
mod node;
mod reader;
mod refusals;
mod writer;

pub use crate::driver::ProgressFn;
pub use node::{Behaviour, Node, build_swarm};
pub use refusals::REFUSAL_LOG_WINDOW;

/// A node of a cluster file as transport errors name it: `peer 3`, or `the server` for
/// an FMS cluster's parameter server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeName {
    /// Index in the cluster file.
    pub index: usize,
    /// Whether it is the cluster's FMS server.
    pub server: bool,
}

impl NodeName {
    /// Node `index` of `cluster`.
    pub fn of(cluster: &Cluster, index: usize) -> Self {
        Self {
            index,
            server: cluster.server() == Some(index),
        }
    }

    /// Every node of `cluster`, by index.
    fn all(cluster: &Cluster) -> Vec<Self> {
        (0..cluster.peers()).map(|i| Self::of(cluster, i)).collect()
    }
}

impl std::fmt::Display for NodeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.server {
            f.write_str("the server")
        } else {
            write!(f, "peer {}", self.index)
        }
    }
}

/// How often a blocked peer says whom it waits for (a `tracing` warning).
pub const STALL_REPORT_EVERY: Duration = Duration::from_secs(5);

/// Options of a libp2p peer.
#[derive(Clone)]
pub struct Options {
    /// Longest an in-neighbour's open stream may stay silent (no frame, no heartbeat)
    /// before the peer declares it lost and the run fails; also how long a finished peer
    /// waits for its out-neighbours to read its last frames. Waiting for progress is not
    /// bounded: a live in-neighbour is waited for. Default: 60 s.
    pub liveness_timeout: Duration,
    /// A writer that has written nothing for this long writes a heartbeat. Keep it well
    /// below [`liveness_timeout`](Self::liveness_timeout) (a reader checks its stream
    /// about twice per interval). Default: 1 s.
    pub heartbeat: Duration,
    /// Longest to wait for connections and handshakes at start-up. Default: 30 s.
    pub startup_timeout: Duration,
    /// Optional outbound budget shared by all sends of this peer.
    pub bandwidth: Option<Arc<Bucket>>,
    /// Frames queued per out-edge before the engine is held back (at least
    /// [`FRAMES_PER_EDGE_PER_CLOCK`](wire::FRAMES_PER_EDGE_PER_CLOCK), one clock's worth).
    /// Default: 4.
    pub queue_frames: usize,
    /// Called on the engine thread after every clock (e.g. to report progress).
    pub progress: Option<ProgressFn>,
    /// Where the node's checkpoint states go (called on the engine thread). Default: none.
    pub checkpoint: Option<crate::driver::CheckpointFn>,
    /// How the node's neighbours change when nodes are lost (partial broadcast): see
    /// [`RepairFn`](crate::driver::RepairFn). Default: none (lost nodes are only dropped).
    pub repair: Option<crate::driver::RepairFn>,
    /// A coordinated stop (see [`DriveOptions::stop_at`](crate::driver::DriveOptions)):
    /// store a clock here to end the run there. Default: none.
    pub stop_at: Option<Arc<AtomicU64>>,
    /// The clock the node starts at: 0, or the clock of the checkpoint a resumed node
    /// continues from. Every stream then carries the clocks from there; the handshake
    /// refuses a neighbour that starts elsewhere. Default: 0.
    pub start_clock: u64,
    /// The node restarts into a run under way (`--rejoin`): besides its out-neighbours it
    /// dials its in-neighbours, which know only the address it had (it may listen on
    /// another port now) and must reach it to send. Default: false.
    pub rejoin: bool,
    /// Injected slowness: real delay after the slow nodes' compute. Default: none.
    pub stragglers: Stragglers,
    /// Which per-clock records the run keeps (every one reaches `progress`). Default: all.
    pub keep: crate::driver::Keep,
    /// Incoming connections allowed in their handshake (TCP accepted, not yet
    /// authenticated) at once; more are refused as they arrive, so a flood of connections
    /// costs bounded memory. A refused cluster member retries until the start-up timeout.
    /// Default: 32.
    pub max_pending_handshakes: u32,
    /// The node's private key (its protobuf encoding), when it does not come from the
    /// cluster file's key folder (a launch hands each node its key on stdin, so no key
    /// reaches the disk: [`Cluster::init_for_launch`](crate::cluster::Cluster::init_for_launch)).
    /// Checked against the file's `peer_id`. Default: none (read the file's).
    pub key: Option<Vec<u8>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("liveness_timeout", &self.liveness_timeout)
            .field("heartbeat", &self.heartbeat)
            .field("startup_timeout", &self.startup_timeout)
            .field("bandwidth", &self.bandwidth)
            .field("queue_frames", &self.queue_frames)
            .field("progress", &self.progress.is_some())
            .field("stragglers", &self.stragglers)
            .field("max_pending_handshakes", &self.max_pending_handshakes)
            .field("key", &self.key.as_ref().map(|_| "given"))
            .finish()
    }
}

impl Options {
    /// Frames queued per edge: [`queue_frames`](Self::queue_frames), but never less than one
    /// clock's worth.
    fn edge_queue(&self) -> usize {
        self.queue_frames.max(wire::FRAMES_PER_EDGE_PER_CLOCK)
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            liveness_timeout: Duration::from_secs(60),
            heartbeat: Duration::from_secs(1),
            startup_timeout: Duration::from_secs(30),
            bandwidth: None,
            queue_frames: 4,
            progress: None,
            checkpoint: None,
            repair: None,
            stop_at: None,
            start_clock: 0,
            rejoin: false,
            stragglers: Stragglers::None,
            max_pending_handshakes: 32,
            keep: crate::driver::Keep::All,
            key: None,
        }
    }
}

/// Per-edge byte counters of a peer (frame bytes including the 4-byte length prefix;
/// handshakes and heartbeats excluded: heartbeats are counted apart).
#[derive(Debug)]
pub struct NetStats {
    /// Bytes sent to each peer, by index.
    pub sent: Vec<AtomicU64>,
    /// Bytes received from each peer, by index.
    pub received: Vec<AtomicU64>,
    /// Heartbeats written (4 bytes each, not in [`sent`](Self::sent)).
    pub heartbeats_sent: AtomicU64,
    /// Heartbeats received (4 bytes each, not in [`received`](Self::received)).
    pub heartbeats_received: AtomicU64,
    /// Frames that failed validation.
    pub bad_frames: AtomicU64,
    /// Streams refused (unknown or unexpected sender, handshake mismatch).
    pub refused_streams: AtomicU64,
    /// Incoming connections refused before authentication: bytes that are not the
    /// protocol, an identity not in the cluster file, or over
    /// [`Options::max_pending_handshakes`].
    pub refused_connections: AtomicU64,
    /// Microseconds from the first frame written to the last, over all writers.
    first_write_us: AtomicU64,
    last_write_us: AtomicU64,
    epoch: Instant,
    /// Frames being written now, since when some has been, and the totals
    /// ([`NetStats::egress`]).
    busy: std::sync::Mutex<Busy>,
}

/// [`NetStats::busy`]: the spans in which the link carried a writer's bytes, not yet
/// counted, and how far the counted ones reach.
#[derive(Debug, Default)]
struct Busy {
    spans: Vec<(Instant, Instant, u64)>,
    counted_until: Option<Instant>,
    done: crate::driver::Egress,
}

impl Busy {
    /// Counts the recorded spans: their bytes, and the time at least one of them covers
    /// (concurrent writers share the node's link, so their spans are merged, and a span
    /// recorded late is counted only past what was counted before).
    fn count(&mut self) {
        let mut spans = std::mem::take(&mut self.spans);
        spans.sort_by_key(|s| s.0);
        for (start, end, bytes) in spans {
            self.done.bytes += bytes;
            let from = self.counted_until.map_or(start, |c| c.max(start));
            if end > from {
                self.done.busy += end - from;
                self.counted_until = Some(end);
            }
        }
    }
}

impl NetStats {
    fn new(peers: usize) -> Self {
        Self {
            sent: (0..peers).map(|_| AtomicU64::new(0)).collect(),
            received: (0..peers).map(|_| AtomicU64::new(0)).collect(),
            heartbeats_sent: AtomicU64::new(0),
            heartbeats_received: AtomicU64::new(0),
            bad_frames: AtomicU64::new(0),
            refused_streams: AtomicU64::new(0),
            refused_connections: AtomicU64::new(0),
            first_write_us: AtomicU64::new(u64::MAX),
            last_write_us: AtomicU64::new(0),
            epoch: Instant::now(),
            busy: std::sync::Mutex::new(Busy::default()),
        }
    }

    /// The link carried a writer's `bytes` between `start` and `end`: with a token bucket,
    /// the bytes beyond its tokens over the time the bucket held them (a burst that waits
    /// for nothing says nothing of the rate and is not counted); without one, a frame from
    /// its first write (or the previous acknowledgement) to the receiver's
    /// [`FRAME_ACK`](crate::frame::FRAME_ACK), so bytes that sit in a socket buffer count
    /// until they are through.
    fn carried(&self, start: Instant, end: Instant, bytes: u64) {
        self.busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .spans
            .push((start, end, bytes));
    }

    /// The bytes the link carried for this peer's writers and the time it was carrying
    /// at least one of them ([`carried`](Self::carried)): the link's measured rate,
    /// which [`Links::egress`] hands the driver loop. A kernel shaper's own burst (tbf's
    /// `burst`) is carried at the line's rate and so reads as more than the shaped rate
    /// while a clock's frames fit in it.
    pub fn egress(&self) -> crate::driver::Egress {
        let mut b = self
            .busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        b.count();
        b.done
    }

    fn mark_write(&self, started: Instant) {
        let s = started.saturating_duration_since(self.epoch).as_micros() as u64;
        let e = self.epoch.elapsed().as_micros() as u64;
        self.first_write_us.fetch_min(s, Ordering::Relaxed);
        self.last_write_us.fetch_max(e, Ordering::Relaxed);
    }

    /// Total bytes sent.
    pub fn total_sent(&self) -> u64 {
        self.sent.iter().map(|x| x.load(Ordering::Relaxed)).sum()
    }

    /// Total bytes received.
    pub fn total_received(&self) -> u64 {
        self.received
            .iter()
            .map(|x| x.load(Ordering::Relaxed))
            .sum()
    }

    /// Seconds between the start of the first frame write and the end of the last.
    pub fn send_span_s(&self) -> f64 {
        let (a, b) = (
            self.first_write_us.load(Ordering::Relaxed),
            self.last_write_us.load(Ordering::Relaxed),
        );
        if a == u64::MAX || b <= a {
            0.0
        } else {
            (b - a) as f64 * 1e-6
        }
    }
}

/// A finished node.
#[derive(Debug)]
pub struct Outcome<N> {
    /// The node (SFB engine, FMS server or client) with its final state and metrics.
    pub node: N,
    /// Per-clock records.
    pub records: Vec<ClockRecord>,
    /// Network counters.
    pub stats: Arc<NetStats>,
}

/// What the readers and writers hand the engine thread.
enum Inbound {
    /// A validated frame from an in-neighbour.
    Frame(PeerId, Message),
    /// A fatal condition noticed by a reader.
    Fatal(Error),
    /// The writer to this node index failed; its task holds the error.
    WriterFailed(usize),
    /// Neighbour `from` says node `lost` (sfb-core ids) is lost
    /// ([`sfb_core::wire::Notice::Lost`]).
    Lost {
        from: PeerId,
        lost: PeerId,
        life: u32,
    },
    /// A node opened a stream to this one (no life), or a neighbour says it is back in
    /// the life given ([`sfb_core::wire::Notice::Joined`]).
    Joined(PeerId, Option<u32>),
    /// A neighbour's state, for a rejoining node.
    State(Box<sfb_core::NodeState>),
    /// In-neighbour `from` says node `left` is leaving ([`sfb_core::wire::Notice::Left`]):
    /// itself, or one it passes the news of on.
    Left {
        from: PeerId,
        left: PeerId,
        life: u32,
    },
}

fn protocol() -> StreamProtocol {
    StreamProtocol::new(frame::PROTOCOL)
}

/// The run-time facts every stream must agree on, from which handshakes and frame limits
/// follow.
#[derive(Debug, Clone)]
pub struct RunShape {
    /// Rows of W.
    pub j: usize,
    /// Columns of W.
    pub d: usize,
    /// Mini-batch size.
    pub batch: usize,
    /// Clocks of the run.
    pub clocks: u64,
    /// Whether full W frames (FMS) travel on the streams.
    pub full_w: bool,
    /// How factor values are encoded (every stream of a run must agree).
    pub dtype: wire::Dtype,
    /// The training settings every node must share, `(name, value)` in a fixed order
    /// (the harness's `RunSpec::agreement`): carried in every handshake and compared, so
    /// that a node started with another seed, step size, optimizer, consistency model or
    /// data is refused instead of mixing its updates into the others' replicas. Empty:
    /// nothing beyond the shape is compared.
    pub agreement: Vec<(String, String)>,
}

impl RunShape {
    fn hello(&self, peer: usize, cluster: &Cluster, start: u64) -> Hello {
        Hello {
            version: frame::PROTOCOL_VERSION,
            wire_version: wire::WIRE_VERSION,
            peer: peer as u32,
            j: self.j as u32,
            d: self.d as u32,
            batch: self.batch as u32,
            clocks: self.clocks,
            start,
            topology_hash: cluster.topology_hash(),
            dtype: self.dtype.to_string(),
            agreement: self.agreement.clone(),
        }
    }

    /// Largest valid frame: a batch of `batch` pairs with dense or fully dense sparse `v`,
    /// or a full W when FMS frames are expected.
    pub fn max_frame(&self) -> usize {
        wire::max_frame_len(self.j, self.d, self.batch, self.full_w)
    }
}
