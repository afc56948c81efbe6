//! Peers over libp2p: TCP + noise + yamux, one long-lived `libp2p-stream` stream per
//! directed edge of the topology.
//!
//! A [`Node`] is started in two steps so that a launcher can use port 0 and exchange the
//! real addresses: [`Node::start`] builds the swarm, listens and begins accepting streams;
//! [`Node::run`] dials the out-neighbours and drives the engine to completion.
//!
//! Roles of the tasks:
//! - the **swarm task** owns the swarm: it refuses connections from identities not in the
//!   cluster file (allow list) and dials on request;
//! - one **writer** per out-neighbour opens the stream, sends a [`Hello`], waits for the
//!   [`Ack`], then writes the engine's frames from a bounded queue, paced by the optional
//!   bandwidth [`Bucket`] shared by all writers of the peer;
//! - one **reader** per accepted stream checks the sender (an in-neighbour, the identity its
//!   Hello claims), validates every frame with [`sfb_core::wire::decode`] (size limit,
//!   decode, known origin, shape, finite values) and forwards it to the engine; a bad frame
//!   is counted, logged and dropped, and the stream closed with a fatal error for the run;
//! - the **engine thread** runs the sans-IO [`Engine`] (no consistency logic lives here).
//!
//! Every wait is bounded: start-up by [`Options::startup_timeout`], the run by
//! [`Options::timeout`] without progress. A peer that dies makes its neighbours fail with
//! an error naming it (its streams end early) instead of hanging.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{AsyncReadExt, AsyncWriteExt, StreamExt};
use libp2p::allow_block_list;
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId as Libp2pId, StreamProtocol, Swarm};
use sfb_core::metrics::ClockRecord;
use sfb_core::wire::{self, Expect, Message};
use sfb_core::{Event, PeerId, Progress, StateMachine, Stragglers};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::bandwidth::Bucket;
use crate::clock::WallClock;
use crate::cluster::Cluster;
use crate::frame::{self, Ack, Hello};
use crate::{Error, Result};

/// A per-clock progress callback.
pub type ProgressFn = Arc<dyn Fn(&ClockRecord) + Send + Sync>;

/// Options of a libp2p peer.
#[derive(Clone)]
pub struct Options {
    /// Longest the peer may go without progress (no frame received while blocked, or no
    /// room on a link) before the run fails. Default: 10 s.
    pub timeout: Duration,
    /// Longest to wait for connections and handshakes at start-up. Default: 30 s.
    pub startup_timeout: Duration,
    /// Optional outbound budget shared by all sends of this peer.
    pub bandwidth: Option<Arc<Bucket>>,
    /// Frames queued per out-edge before the engine is held back. Default: 4.
    pub queue_frames: usize,
    /// Called on the engine thread after every clock (e.g. to report progress).
    pub progress: Option<ProgressFn>,
    /// Injected slowness: real delay after the slow nodes' compute. Default: none.
    pub stragglers: Stragglers,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("timeout", &self.timeout)
            .field("startup_timeout", &self.startup_timeout)
            .field("bandwidth", &self.bandwidth)
            .field("queue_frames", &self.queue_frames)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            startup_timeout: Duration::from_secs(30),
            bandwidth: None,
            queue_frames: 4,
            progress: None,
            stragglers: Stragglers::None,
        }
    }
}

/// Per-edge byte counters of a peer (frame bytes including the 4-byte length prefix;
/// handshakes excluded).
#[derive(Debug)]
pub struct NetStats {
    /// Bytes sent to each peer, by index.
    pub sent: Vec<AtomicU64>,
    /// Bytes received from each peer, by index.
    pub received: Vec<AtomicU64>,
    /// Frames that failed validation.
    pub bad_frames: AtomicU64,
    /// Streams refused (unknown or unexpected sender, handshake mismatch).
    pub refused_streams: AtomicU64,
    /// Microseconds from the first frame written to the last, over all writers.
    first_write_us: AtomicU64,
    last_write_us: AtomicU64,
    epoch: Instant,
}

impl NetStats {
    fn new(peers: usize) -> Self {
        Self {
            sent: (0..peers).map(|_| AtomicU64::new(0)).collect(),
            received: (0..peers).map(|_| AtomicU64::new(0)).collect(),
            bad_frames: AtomicU64::new(0),
            refused_streams: AtomicU64::new(0),
            first_write_us: AtomicU64::new(u64::MAX),
            last_write_us: AtomicU64::new(0),
            epoch: Instant::now(),
        }
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

mod behaviour {
    #![allow(missing_docs, missing_debug_implementations)]
    use libp2p::allow_block_list;
    use libp2p::swarm::NetworkBehaviour;

    /// The swarm's behaviour: an allow list of cluster identities and generic streams.
    #[derive(NetworkBehaviour)]
    pub struct Behaviour {
        /// Refuses connections from identities not in the cluster file.
        pub allow: allow_block_list::Behaviour<allow_block_list::AllowedPeers>,
        /// `libp2p-stream`'s generic stream protocol.
        pub stream: libp2p_stream::Behaviour,
    }
}
pub use behaviour::Behaviour;

enum Inbound {
    Frame(PeerId, Message),
    Fatal(Error),
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
}

impl RunShape {
    fn hello(&self, peer: usize, cluster: &Cluster) -> Hello {
        Hello {
            version: frame::PROTOCOL_VERSION,
            wire_version: wire::WIRE_VERSION,
            peer: peer as u32,
            j: self.j as u32,
            d: self.d as u32,
            batch: self.batch as u32,
            clocks: self.clocks,
            topology_hash: cluster.topology_hash(),
            dtype: self.dtype.to_string(),
        }
    }

    /// Largest valid frame: a batch of `batch` pairs with dense or fully dense sparse `v`,
    /// or a full W when FMS frames are expected.
    pub fn max_frame(&self) -> usize {
        wire::max_frame_len(self.j, self.d, self.batch, self.full_w)
    }
}

/// A started peer: listening and accepting streams, not yet dialing or computing.
pub struct Node {
    id: usize,
    control: libp2p_stream::Control,
    dial: mpsc::Sender<Multiaddr>,
    inbox: mpsc::Receiver<Inbound>,
    inbox_tx: mpsc::Sender<Inbound>,
    listen: Multiaddr,
    stats: Arc<NetStats>,
    swarm_task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

fn protocol() -> StreamProtocol {
    StreamProtocol::new(frame::PROTOCOL)
}

/// Builds a swarm for `key` that only accepts connections from `allowed`.
///
/// # Errors
/// [`Error::Net`] if the transport cannot be built.
pub fn build_swarm(key: Keypair, allowed: &[Libp2pId]) -> Result<Swarm<Behaviour>> {
    let net = |e: &dyn std::fmt::Display| Error::Net(e.to_string());
    let mut swarm = libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_tcp(
            libp2p::tcp::Config::default().nodelay(true),
            libp2p::noise::Config::new,
            libp2p::yamux::Config::default,
        )
        .map_err(|e| net(&e))?
        .with_behaviour(|_| Behaviour {
            allow: allow_block_list::Behaviour::default(),
            stream: libp2p_stream::Behaviour::new(),
        })
        .map_err(|e| net(&e))?
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(24 * 3600)))
        .build();
    for id in allowed {
        swarm.behaviour_mut().allow.allow_peer(*id);
    }
    Ok(swarm)
}

impl Node {
    /// Builds the swarm for peer `id` of `cluster`, listens on its address (port 0 picks a
    /// free port) and starts accepting streams from its in-neighbours.
    ///
    /// # Errors
    /// [`Error::Config`] for key problems, [`Error::Net`] if it cannot listen in time.
    pub async fn start(
        cluster: &Cluster,
        id: usize,
        shape: &RunShape,
        opts: &Options,
    ) -> Result<Node> {
        let key = cluster.keypair(id)?;
        let allowed: Vec<Libp2pId> = (0..cluster.peers())
            .filter(|&i| i != id)
            .map(|i| cluster.peer_id(i))
            .collect();
        let mut swarm = build_swarm(key, &allowed)?;
        let control = swarm.behaviour().stream.new_control();
        swarm
            .listen_on(cluster.addr(id).clone())
            .map_err(|e| Error::Net(format!("listening on {}: {e}", cluster.addr(id))))?;
        let listen = tokio::time::timeout(opts.startup_timeout, async {
            loop {
                if let SwarmEvent::NewListenAddr { address, .. } = swarm.select_next_some().await {
                    return address;
                }
            }
        })
        .await
        .map_err(|_| Error::Net(format!("no listen address on {} in time", cluster.addr(id))))?;
        let listen = listen.with(Protocol::P2p(cluster.peer_id(id)));
        info!(peer = id, %listen, "listening");

        let (dial_tx, dial_rx) = mpsc::channel(64);
        let swarm_task = tokio::spawn(swarm_loop(swarm, dial_rx));
        let stats = Arc::new(NetStats::new(cluster.peers()));
        let (inbox_tx, inbox) = mpsc::channel(opts.queue_frames.max(1) * cluster.peers().max(1));
        let mut control2 = control.clone();
        let incoming = control2
            .accept(protocol())
            .map_err(|e| Error::Net(format!("accepting {}: {e}", frame::PROTOCOL)))?;
        let readers = Readers {
            me: id,
            ids: (0..cluster.peers()).map(|i| cluster.peer_id(i)).collect(),
            in_neighbors: cluster.in_neighbours(id).to_vec(),
            core_ids: (0..cluster.peers()).map(|i| cluster.core_id(i)).collect(),
            hello: shape.hello(id, cluster),
            expect: Expect {
                j: shape.j,
                d: shape.d,
                peers: cluster.workers(),
            },
            max_frame: shape.max_frame(),
            clocks: shape.clocks,
            inbox: inbox_tx.clone(),
            stats: Arc::clone(&stats),
            handshake_timeout: opts.startup_timeout,
        };
        tokio::spawn(readers.accept(incoming));
        Ok(Node {
            id,
            control,
            dial: dial_tx,
            inbox,
            inbox_tx,
            listen,
            stats,
            swarm_task,
        })
    }

    /// The address this peer listens on, with its `/p2p/<id>` suffix.
    pub fn listen_addr(&self) -> &Multiaddr {
        &self.listen
    }

    /// Dials the out-neighbours (at the addresses in `cluster`) and drives `engine` until
    /// all clocks are done and every out-neighbour has received everything.
    ///
    /// # Errors
    /// The first fatal condition: an engine error, a bad frame, a broken or refused stream,
    /// a handshake mismatch, a timeout naming whom the peer was waiting on.
    pub async fn run<N: StateMachine + Send + 'static>(
        self,
        cluster: &Cluster,
        engine: N,
        shape: &RunShape,
        opts: &Options,
    ) -> Result<Outcome<N>> {
        let Node {
            id,
            control,
            dial,
            inbox,
            inbox_tx,
            stats,
            swarm_task,
            ..
        } = self;
        let hello = frame::encode(&shape.hello(id, cluster));
        let deadline = Instant::now() + opts.startup_timeout;
        let mut writers = Vec::new();
        let mut queues: Vec<Option<mpsc::Sender<Arc<Vec<u8>>>>> = vec![None; cluster.peers()];
        for &to in cluster.out(id) {
            let (tx, rx) = mpsc::channel(opts.queue_frames.max(1));
            queues[to] = Some(tx);
            let addr = cluster
                .addr(to)
                .clone()
                .with(Protocol::P2p(cluster.peer_id(to)));
            let _ = dial.send(addr.clone()).await;
            let w = Writer {
                me: id,
                to,
                to_id: cluster.peer_id(to),
                addr,
                control: control.clone(),
                dial: dial.clone(),
                hello: hello.clone(),
                bucket: opts.bandwidth.clone(),
                stats: Arc::clone(&stats),
                fatal: inbox_tx.clone(),
                deadline,
                ack_timeout: opts.startup_timeout,
            };
            writers.push(tokio::spawn(w.run(rx)));
        }
        drop(inbox_tx);
        let handle = tokio::runtime::Handle::current();
        let timeout = opts.timeout;
        let progress = opts.progress.clone();
        let dtype = shape.dtype;
        let stragglers = opts.stragglers;
        let nodes: Vec<sfb_core::PeerId> =
            (0..cluster.peers()).map(|i| cluster.core_id(i)).collect();
        let (engine, records, result) = tokio::task::spawn_blocking(move || {
            let mut engine = engine;
            let mut records = Vec::new();
            let mut inbox = inbox;
            let links = Links {
                nodes: &nodes,
                queues,
                handle: &handle,
                timeout,
                progress: progress.as_deref(),
                dtype,
                stragglers,
            };
            let r = drive(&mut engine, &mut inbox, links, &mut records);
            (engine, records, r)
        })
        .await
        .map_err(|e| Error::Net(format!("engine thread: {e}")))?;
        let outcome = match result {
            Ok(()) => {
                // The queues were dropped by `drive`: writers flush, close and wait for
                // their receivers to finish reading.
                for w in writers {
                    match tokio::time::timeout(timeout, w).await {
                        Ok(Ok(Ok(()))) => {}
                        Ok(Ok(Err(e))) => return Err(e),
                        Ok(Err(e)) => return Err(Error::Net(format!("writer task: {e}"))),
                        Err(_) => {
                            return Err(Error::Net(format!(
                                "peer {id}: an out-neighbour did not finish reading within {timeout:?}"
                            )));
                        }
                    }
                }
                Ok(Outcome {
                    node: engine,
                    records,
                    stats,
                })
            }
            Err(e) => Err(e),
        };
        swarm_task.abort();
        outcome
    }
}

async fn swarm_loop(mut swarm: Swarm<Behaviour>, mut dial: mpsc::Receiver<Multiaddr>) {
    loop {
        tokio::select! {
            ev = swarm.select_next_some() => match ev {
                SwarmEvent::ConnectionEstablished { peer_id, .. } => debug!(%peer_id, "connected"),
                SwarmEvent::ConnectionClosed { peer_id, cause, .. } => debug!(%peer_id, ?cause, "connection closed"),
                SwarmEvent::IncomingConnectionError { error, send_back_addr, .. } => {
                    warn!(%send_back_addr, %error, "refused incoming connection");
                }
                SwarmEvent::OutgoingConnectionError { peer_id, error, .. } => {
                    debug!(?peer_id, %error, "dial failed");
                }
                _ => {}
            },
            addr = dial.recv() => match addr {
                Some(addr) => {
                    if let Err(e) = swarm.dial(addr.clone()) {
                        debug!(%addr, %e, "dial refused");
                    }
                }
                None => break,
            },
        }
    }
}

struct Writer {
    me: usize,
    to: usize,
    to_id: Libp2pId,
    addr: Multiaddr,
    control: libp2p_stream::Control,
    dial: mpsc::Sender<Multiaddr>,
    hello: Vec<u8>,
    bucket: Option<Arc<Bucket>>,
    stats: Arc<NetStats>,
    fatal: mpsc::Sender<Inbound>,
    deadline: Instant,
    ack_timeout: Duration,
}

const CHUNK: usize = 64 * 1024;

impl Writer {
    async fn run(self, rx: mpsc::Receiver<Arc<Vec<u8>>>) -> Result<()> {
        let r = self.run_inner(rx).await;
        if let Err(e) = &r {
            let _ = self
                .fatal
                .try_send(Inbound::Fatal(Error::Net(e.to_string())));
        }
        r
    }

    /// Opens the stream and completes the handshake, retrying until the start-up deadline
    /// when the stream fails before the reply (the remote may not be up yet, or may have
    /// dropped the inbound stream under load: libp2p-stream drops streams an acceptor is
    /// too slow to take). A refused handshake is final.
    async fn connect(&self) -> Result<libp2p::Stream> {
        let (me, to) = (self.me, self.to);
        let mut control = self.control.clone();
        let mut last_problem = String::from("no attempt");
        loop {
            let remaining = self.deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(Error::Net(format!(
                    "peer {me}: could not open a stream to peer {to} at {} within the start-up timeout ({last_problem})",
                    self.addr
                )));
            }
            let mut stream =
                match tokio::time::timeout(remaining, control.open_stream(self.to_id, protocol()))
                    .await
                {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        last_problem = e.to_string();
                        debug!(peer = me, to, %e, "open_stream failed; re-dialing");
                        let _ = self.dial.send(self.addr.clone()).await;
                        // Back off before re-dialing a peer that is not up yet.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    Err(_) => continue,
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
                    last_problem = "stream closed before the handshake reply".into();
                    debug!(peer = me, to, "{last_problem}; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Ok(Err(e)) => {
                    last_problem = format!("handshake: {e}");
                    debug!(peer = me, to, "{last_problem}; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(_) => {
                    return Err(Error::Net(format!(
                        "peer {me} → peer {to}: no handshake reply in time"
                    )));
                }
            };
            let ack: Ack = frame::decode(&reply).map_err(|e| {
                Error::Net(format!("peer {me} → peer {to}: bad handshake reply: {e}"))
            })?;
            if !ack.ok {
                return Err(Error::Handshake {
                    peer: PeerId(to as u32),
                    reason: ack.reason,
                });
            }
            return Ok(stream);
        }
    }

    async fn run_inner(&self, mut rx: mpsc::Receiver<Arc<Vec<u8>>>) -> Result<()> {
        let (me, to) = (self.me, self.to);
        let mut stream = self.connect().await?;
        let io = |e: std::io::Error| Error::Net(format!("peer {me} → peer {to}: {e}"));
        debug!(peer = me, to, "stream open");
        while let Some(buf) = rx.recv().await {
            let started = Instant::now();
            let len = (buf.len() as u32).to_le_bytes();
            let mut pieces: Vec<&[u8]> = vec![&len];
            pieces.extend(buf.chunks(CHUNK));
            for piece in pieces {
                if let Some(b) = &self.bucket {
                    let wait = b.reserve(piece.len());
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                }
                stream.write_all(piece).await.map_err(io)?;
            }
            stream.flush().await.map_err(io)?;
            self.stats.sent[to].fetch_add(buf.len() as u64 + 4, Ordering::Relaxed);
            self.stats.mark_write(started);
        }
        stream.close().await.map_err(io)?;
        // Wait for the receiver to close its side: it has read everything.
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(self.ack_timeout, stream.read_to_end(&mut rest)).await;
        Ok(())
    }
}

struct Readers {
    me: usize,
    ids: Vec<Libp2pId>,
    in_neighbors: Vec<usize>,
    core_ids: Vec<PeerId>,
    hello: Hello,
    expect: Expect,
    max_frame: usize,
    clocks: u64,
    inbox: mpsc::Sender<Inbound>,
    stats: Arc<NetStats>,
    handshake_timeout: Duration,
}

impl Readers {
    async fn accept(self, mut incoming: libp2p_stream::IncomingStreams) {
        let this = Arc::new(self);
        while let Some((peer, stream)) = incoming.next().await {
            tokio::spawn(Arc::clone(&this).read(peer, stream));
        }
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
        if !self.in_neighbors.contains(&from) {
            self.refuse(format!("peer {from} is not an in-neighbour of peer {me}"));
            return;
        }
        let hello = match tokio::time::timeout(
            self.handshake_timeout,
            frame::read_frame(&mut stream, 64 * 1024),
        )
        .await
        {
            Ok(Ok(Some(b))) => frame::decode::<Hello>(&b),
            Ok(Ok(None)) => Err("stream closed before its handshake".into()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no handshake in time".into()),
        };
        let problem = match &hello {
            Err(e) => Some(format!("bad handshake: {e}")),
            Ok(h) if h.peer as usize != from => Some(format!(
                "handshake claims peer {} but the connection's key is peer {from}'s",
                h.peer
            )),
            Ok(h) => h.mismatch(&self.hello),
        };
        let ack = Ack {
            ok: problem.is_none(),
            reason: problem.clone().unwrap_or_default(),
        };
        let _ = frame::write_frame(&mut stream, &frame::encode(&ack)).await;
        let _ = stream.flush().await;
        if let Some(why) = problem {
            self.refuse(format!("peer {from}: {why}"));
            let _ = stream.close().await;
            let _ = self
                .inbox
                .send(Inbound::Fatal(Error::Handshake {
                    peer: PeerId(from as u32),
                    reason: why,
                }))
                .await;
            return;
        }
        let mut frames = 0u64;
        loop {
            match frame::read_frame(&mut stream, self.max_frame).await {
                Ok(Some(buf)) => {
                    let n = buf.len() as u64 + 4;
                    match wire::decode(&buf, &self.expect) {
                        Ok(msg) if msg.origin() == self.core_ids[from] => {
                            self.stats.received[from].fetch_add(n, Ordering::Relaxed);
                            frames += 1;
                            if self
                                .inbox
                                .send(Inbound::Frame(self.core_ids[from], msg))
                                .await
                                .is_err()
                            {
                                return; // the run is over
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
                            let _ = self
                                .inbox
                                .send(Inbound::Fatal(Error::BadFrame {
                                    peer: PeerId(from as u32),
                                    reason: why,
                                }))
                                .await;
                            return;
                        }
                    }
                }
                Ok(None) => {
                    if frames < self.clocks {
                        let _ = self
                            .inbox
                            .send(Inbound::Fatal(Error::Net(format!(
                                "peer {from} closed its stream to peer {me} after {frames} of {} clocks",
                                self.clocks
                            ))))
                            .await;
                    }
                    let _ = stream.close().await;
                    return;
                }
                Err(e) => {
                    let _ = self
                        .inbox
                        .send(Inbound::Fatal(Error::Net(format!(
                            "stream from peer {from} to peer {me} broke after {frames} of {} clocks: {e}",
                            self.clocks
                        ))))
                        .await;
                    return;
                }
            }
        }
    }
}

/// What the engine thread sends through.
struct Links<'a> {
    /// sfb-core id of every node index.
    nodes: &'a [PeerId],
    /// Bounded queue to each out-neighbour's writer, by node index.
    queues: Vec<Option<mpsc::Sender<Arc<Vec<u8>>>>>,
    handle: &'a tokio::runtime::Handle,
    timeout: Duration,
    progress: Option<&'a (dyn Fn(&ClockRecord) + Send + Sync)>,
    dtype: wire::Dtype,
    stragglers: Stragglers,
}

/// The engine loop on its own thread: the same discipline as the in-memory driver (drain
/// the inbox, never compute while a link is full, bounded waits).
fn drive<N: StateMachine>(
    engine: &mut N,
    inbox: &mut mpsc::Receiver<Inbound>,
    links: Links<'_>,
    records: &mut Vec<ClockRecord>,
) -> Result<()> {
    let Links {
        nodes,
        queues,
        handle,
        timeout,
        progress,
        dtype,
        stragglers,
    } = links;
    let me = engine.id();
    let mut outbox: VecDeque<(usize, Arc<Vec<u8>>)> = VecDeque::new();
    let mut last_progress = Instant::now();
    let mut time = WallClock::new(Instant::now(), stragglers);
    let handle_in = |engine: &mut N, x: Inbound, time: &mut WallClock| -> Result<()> {
        match x {
            Inbound::Frame(from, msg) => engine
                .on_message(from, msg, time)
                .map_err(|source| Error::Peer { peer: me, source }),
            Inbound::Fatal(e) => Err(e),
        }
    };
    loop {
        while let Ok(x) = inbox.try_recv() {
            handle_in(engine, x, &mut time)?;
            last_progress = Instant::now();
        }
        while let Some((to, buf)) = outbox.pop_front() {
            let q = queues[to].as_ref().expect("queue for out-neighbour");
            match q.try_send(buf) {
                Ok(()) => last_progress = Instant::now(),
                Err(mpsc::error::TrySendError::Full(buf)) => {
                    outbox.push_front((to, buf));
                    break;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    return Err(Error::Disconnected {
                        peer: me,
                        to: PeerId(to as u32),
                    });
                }
            }
        }
        if let Some((to, _)) = outbox.front() {
            let to = *to;
            let q = queues[to].as_ref().expect("queue").clone();
            let remaining = timeout.saturating_sub(last_progress.elapsed());
            let got = handle.block_on(async {
                tokio::select! {
                    permit = q.reserve() => Ok(permit.is_ok().then_some(None)),
                    x = inbox.recv() => Ok(Some(x)),
                    _ = tokio::time::sleep(remaining) => Err(()),
                }
            });
            match got {
                Ok(Some(None)) => {} // room on the link: loop sends
                Ok(Some(Some(x))) => {
                    handle_in(engine, x, &mut time)?;
                    last_progress = Instant::now();
                }
                Ok(None) => {
                    return Err(Error::Disconnected {
                        peer: me,
                        to: PeerId(to as u32),
                    });
                }
                Err(()) => return Err(stalled(engine, last_progress.elapsed(), Some(to))),
            }
            continue;
        }
        match engine
            .on_tick(&mut time)
            .map_err(|source| Error::Peer { peer: me, source })?
        {
            Progress::Stepped => {
                last_progress = Instant::now();
                // Messages to several destinations share their payload: encode once.
                let mut cache: Option<(usize, Arc<Vec<u8>>)> = None;
                while let Some(o) = engine.poll_output() {
                    let key = payload_key(&o.msg);
                    let buf = match &cache {
                        Some((k, b)) if key.is_some_and(|x| x == *k) => Arc::clone(b),
                        _ => {
                            let b = Arc::new(wire::encode_with(&o.msg, dtype));
                            if let Some(k) = key {
                                cache = Some((k, Arc::clone(&b)));
                            }
                            b
                        }
                    };
                    let to = nodes.iter().position(|&n| n == o.to).ok_or_else(|| {
                        Error::Config(format!(
                            "{me} addressed a message to {} outside the cluster",
                            o.to
                        ))
                    })?;
                    outbox.push_back((to, buf));
                }
                while let Some(ev) = engine.poll_event() {
                    if let Event::Clock(r) = ev {
                        if let Some(f) = progress {
                            f(&r);
                        }
                        records.push(r);
                    }
                }
            }
            Progress::Done => {
                engine.finish(&mut time);
                while let Some(ev) = engine.poll_event() {
                    if let Event::Clock(r) = ev {
                        records.push(r);
                    }
                }
                return Ok(());
            }
            Progress::Blocked => {
                let remaining = timeout.saturating_sub(last_progress.elapsed());
                match handle.block_on(tokio::time::timeout(remaining, inbox.recv())) {
                    Ok(Some(x)) => {
                        handle_in(engine, x, &mut time)?;
                        last_progress = Instant::now();
                    }
                    Ok(None) => {
                        return Err(Error::Net(format!(
                            "peer {me}: every inbound stream is gone while waiting"
                        )));
                    }
                    Err(_) => return Err(stalled(engine, last_progress.elapsed(), None)),
                }
            }
        }
    }
}

/// Identity of a message's shared payload (the address of its `Arc`), if any.
fn payload_key(m: &Message) -> Option<usize> {
    match m {
        Message::Factors { batch, .. } => Some(Arc::as_ptr(batch) as *const u8 as usize),
        Message::Params { w, .. } => Some(Arc::as_ptr(w) as *const u8 as usize),
        Message::Delta { delta, .. } => Some(Arc::as_ptr(delta) as *const u8 as usize),
        _ => None,
    }
}

fn stalled<N: StateMachine>(engine: &N, waited: Duration, link: Option<usize>) -> Error {
    let waiting_on = match link {
        Some(to) => format!("room on the link to peer {to}"),
        None => engine
            .waiting_on()
            .iter()
            .map(|(q, d)| format!("{q} (delivered {d} clocks)"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    Error::Timeout {
        peer: engine.id(),
        clock: engine.clock(),
        waited,
        waiting_on,
    }
}
