//! The swarm and the node's life cycle: start (listen, accept), run (dial, drive, flush).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::core::upgrade::Version;
use libp2p::core::{Transport, muxing::StreamMuxerBox};
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId as Libp2pId, Swarm};
use libp2p::{allow_block_list, connection_limits};
use sfb_core::wire::Expect;
use sfb_core::{PeerId, StateMachine};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};

use super::links::QueueLinks;
use super::listen;
use super::reader::Readers;
use super::refusals::{Kind, REFUSAL_LOG_WINDOW, RefusalLog};
use super::writer::{Connected, Writer};
use super::{Inbound, NetStats, NodeName, Options, Outcome, RunShape, protocol};
use crate::clock::WallClock;
use crate::cluster::Cluster;
use crate::driver::{self, DriveOptions};
use crate::frame;
use crate::{Error, Result};

mod behaviour {
    #![allow(missing_docs, missing_debug_implementations)]
    use libp2p::swarm::NetworkBehaviour;
    use libp2p::{allow_block_list, connection_limits};

    /// The swarm's behaviour: a cap on connections in their handshake, an allow list of
    /// cluster identities and generic streams.
    #[derive(NetworkBehaviour)]
    pub struct Behaviour {
        /// Refuses incoming connections beyond the cap on pending handshakes.
        pub limits: connection_limits::Behaviour,
        /// Refuses connections from identities not in the cluster file.
        pub allow: allow_block_list::Behaviour<allow_block_list::AllowedPeers>,
        /// `libp2p-stream`'s generic stream protocol.
        pub stream: libp2p_stream::Behaviour,
    }
}
pub use behaviour::Behaviour;

/// A started peer: listening and accepting streams, not yet dialing or computing.
pub struct Node {
    id: usize,
    control: libp2p_stream::Control,
    dial: mpsc::Sender<Multiaddr>,
    /// The peers this node has a connection to, as the swarm task last saw them.
    connected: watch::Receiver<Connected>,
    inbox: mpsc::Receiver<Inbound>,
    inbox_tx: mpsc::Sender<Inbound>,
    listen: Multiaddr,
    stats: Arc<NetStats>,
    swarm_task: tokio::task::JoinHandle<()>,
    /// Stops the swarm task (dropping it does too).
    stop_swarm: oneshot::Sender<()>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

/// Builds a swarm for `key` that only accepts connections from `allowed`, with at most
/// [`Options::default`]'s `max_pending_handshakes` incoming connections in their
/// handshake at once. Its TCP listeners own their port (a second bind of the same
/// address fails with "address in use").
///
/// # Errors
/// [`Error::Transport`] if the transport cannot be built.
pub fn build_swarm(key: Keypair, allowed: &[Libp2pId]) -> Result<Swarm<Behaviour>> {
    swarm(key, allowed, Options::default().max_pending_handshakes).map(|(s, _)| s)
}

/// The swarm, and the slot where its transport keeps its last listen error.
fn swarm(
    key: Keypair,
    allowed: &[Libp2pId],
    max_pending: u32,
) -> Result<(Swarm<Behaviour>, listen::LastError)> {
    let last_error = listen::LastError::default();
    let slot = last_error.clone();
    let limits = connection_limits::ConnectionLimits::default()
        .with_max_pending_incoming(Some(max_pending.max(1)));
    let noise = libp2p::noise::Config::new(&key).map_err(|source| Error::Transport { source })?;
    let mut swarm = libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_other_transport(|_| {
            // What `with_tcp` builds, over a listener that owns its port.
            listen::Tcp::new(libp2p::tcp::Config::default().nodelay(true), slot)
                .upgrade(Version::V1Lazy)
                .authenticate(noise)
                .multiplex(libp2p::yamux::Config::default())
                .map(|(peer, muxer), _| (peer, StreamMuxerBox::new(muxer)))
        })
        .unwrap_or_else(|never| match never {})
        .with_behaviour(|_| Behaviour {
            limits: connection_limits::Behaviour::new(limits),
            allow: allow_block_list::Behaviour::default(),
            stream: libp2p_stream::Behaviour::new(),
        })
        .unwrap_or_else(|never| match never {})
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(24 * 3600)))
        .build();
    for id in allowed {
        swarm.behaviour_mut().allow.allow_peer(*id);
    }
    Ok((swarm, last_error))
}

/// The reason of a listen error when the transport kept none (it was not a bind error):
/// the error's own words.
fn listen_reason(e: &libp2p::TransportError<std::io::Error>) -> std::io::Error {
    use std::io;
    match e {
        libp2p::TransportError::MultiaddrNotSupported(a) => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{a} is not an /ip4/…/tcp/PORT or /ip6/…/tcp/PORT address"),
        ),
        libp2p::TransportError::Other(io) => io::Error::new(io.kind(), error_chain(io)),
    }
}

impl Node {
    /// Builds the swarm for peer `id` of `cluster`, listens on its address (port 0 picks a
    /// free port) and starts accepting streams from its in-neighbours.
    ///
    /// # Errors
    /// [`Error::Cluster`] for key problems; [`Error::Transport`], [`Error::Listen`] (at
    /// once, with the OS's reason, e.g. "address in use" when another process holds the
    /// port), [`Error::NoListenAddr`] or [`Error::Accept`] if it cannot listen in time.
    pub async fn start(
        cluster: &Cluster,
        id: usize,
        shape: &RunShape,
        opts: &Options,
    ) -> Result<Node> {
        let key = match &opts.key {
            Some(bytes) => cluster.keypair_from(id, bytes)?,
            None => cluster.keypair(id)?,
        };
        let allowed: Vec<Libp2pId> = (0..cluster.peers())
            .filter(|&i| i != id)
            .map(|i| cluster.peer_id(i))
            .collect();
        let (mut swarm, last_error) = swarm(key, &allowed, opts.max_pending_handshakes)?;
        let control = swarm.behaviour().stream.new_control();
        swarm
            .listen_on(cluster.addr(id).clone())
            .map_err(|e| Error::Listen {
                node: NodeName::of(cluster, id),
                addr: cluster.addr(id).clone(),
                reason: last_error.take().unwrap_or_else(|| listen_reason(&e)),
            })?;
        let listen = tokio::time::timeout(opts.startup_timeout, async {
            loop {
                if let SwarmEvent::NewListenAddr { address, .. } = swarm.select_next_some().await {
                    return address;
                }
            }
        })
        .await
        .map_err(|_| Error::NoListenAddr {
            addr: cluster.addr(id).clone(),
            waited: opts.startup_timeout,
        })?;
        let listen = listen.with(Protocol::P2p(cluster.peer_id(id)));
        info!(peer = id, %listen, "listening");

        let (dial_tx, dial_rx) = mpsc::channel(64);
        let (stop_swarm, stop_rx) = oneshot::channel();
        let (connected_tx, connected) = watch::channel(Connected::default());
        let stats = Arc::new(NetStats::new(cluster.peers()));
        let swarm_task = tokio::spawn(swarm_loop(
            id,
            swarm,
            SwarmChannels {
                dial: dial_rx,
                stop: stop_rx,
                connected: connected_tx,
            },
            Arc::clone(&stats),
        ));
        // Room for every node's per-edge queue.
        let (inbox_tx, inbox) = mpsc::channel(opts.edge_queue() * cluster.peers().max(1));
        let mut control2 = control.clone();
        let incoming = control2
            .accept(protocol())
            .map_err(|source| Error::Accept { source })?;
        let readers = Readers {
            me: id,
            ids: (0..cluster.peers()).map(|i| cluster.peer_id(i)).collect(),
            names: NodeName::all(cluster),
            in_neighbors: cluster.in_neighbours(id).to_vec(),
            core_ids: (0..cluster.peers()).map(|i| cluster.core_id(i)).collect(),
            hello: shape.hello(id, cluster, opts.start_clock),
            expect: Expect {
                j: shape.j,
                d: shape.d,
                peers: cluster.workers(),
            },
            // Room for a neighbour's state sent to a rejoining node: W and up to three
            // more J×D matrices of optimizer state (the engine frames are still checked
            // against their own limits when decoded).
            max_frame: shape
                .max_frame()
                .max((64 << 10) + 16usize.saturating_mul(shape.j.saturating_mul(shape.d))),
            clocks: shape.clocks.saturating_sub(opts.start_clock),
            inbox: inbox_tx.clone(),
            stats: Arc::clone(&stats),
            handshake_timeout: opts.startup_timeout,
            liveness_timeout: opts.liveness_timeout,
            live: std::sync::Mutex::new(vec![false; cluster.peers()]),
            heartbeat: opts.heartbeat,
        };
        tokio::spawn(readers.accept(incoming));
        Ok(Node {
            id,
            control,
            dial: dial_tx,
            connected,
            inbox,
            inbox_tx,
            listen,
            stats,
            swarm_task,
            stop_swarm,
        })
    }

    /// The address this peer listens on, with its `/p2p/<id>` suffix.
    pub fn listen_addr(&self) -> &Multiaddr {
        &self.listen
    }

    /// The peer's network counters (live: the swarm and readers count from the start).
    pub fn stats(&self) -> &Arc<NetStats> {
        &self.stats
    }

    /// Dials the out-neighbours (at the addresses in `cluster`) and drives `engine` until
    /// all clocks are done and every out-neighbour has received everything.
    ///
    /// # Errors
    /// The first fatal condition: an engine error, a bad frame, a broken or refused stream,
    /// a handshake mismatch, an in-neighbour silent for [`Options::liveness_timeout`]
    /// ([`Error::NoHeartbeat`]).
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
            connected,
            inbox,
            inbox_tx,
            stats,
            swarm_task,
            stop_swarm,
            ..
        } = self;
        let hello = frame::encode(&shape.hello(id, cluster, opts.start_clock));
        let mut queues: Vec<Option<mpsc::Sender<Arc<Vec<u8>>>>> = vec![None; cluster.peers()];
        // Writers are spawned at start for the out-neighbours, and mid-run for new ones
        // after a topology repair (through the links); all are joined at the end.
        let writers: Arc<std::sync::Mutex<Vec<WriterTask>>> = Arc::default();
        let spawn_writer = {
            let (me, cluster_c) = (NodeName::of(cluster, id), cluster.clone());
            let (control, dial, connected, hello, stats) = (
                control.clone(),
                dial.clone(),
                connected.clone(),
                hello.clone(),
                Arc::clone(&stats),
            );
            let (bucket, fatal, writers) = (
                opts.bandwidth.clone(),
                inbox_tx.clone(),
                Arc::clone(&writers),
            );
            let (queue_len, ack_timeout, heartbeat) =
                (opts.edge_queue(), opts.startup_timeout, opts.heartbeat);
            let handle = tokio::runtime::Handle::current();
            move |to: usize| -> mpsc::Sender<Arc<Vec<u8>>> {
                let (tx, rx) = mpsc::channel(queue_len);
                let addr = cluster_c
                    .addr(to)
                    .clone()
                    .with(Protocol::P2p(cluster_c.peer_id(to)));
                let _ = dial.try_send(addr.clone());
                let w = Writer {
                    me,
                    to,
                    to_name: NodeName::of(&cluster_c, to),
                    to_core: cluster_c.core_id(to),
                    to_id: cluster_c.peer_id(to),
                    addr,
                    control: control.clone(),
                    dial: dial.clone(),
                    connected: connected.clone(),
                    hello: hello.clone(),
                    bucket: bucket.clone(),
                    stats: Arc::clone(&stats),
                    fatal: fatal.clone(),
                    deadline: Instant::now() + ack_timeout,
                    ack_timeout,
                    heartbeat,
                };
                let task = handle.spawn(w.run(rx));
                writers
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((to, task));
                tx
            }
        };
        for &to in cluster.out(id) {
            queues[to] = Some(spawn_writer(to));
        }
        if opts.rejoin {
            // A connection from this node is the one they open their streams on.
            for &from in cluster.in_neighbours(id) {
                let addr = cluster
                    .addr(from)
                    .clone()
                    .with(Protocol::P2p(cluster.peer_id(from)));
                let _ = dial.try_send(addr);
            }
        }
        drop(inbox_tx);
        let nodes: Vec<PeerId> = (0..cluster.peers()).map(|i| cluster.core_id(i)).collect();
        let me = nodes[id];
        let mut links = QueueLinks::new(
            me,
            nodes,
            queues,
            inbox,
            tokio::runtime::Handle::current(),
            shape.dtype,
        )
        .with_spawner(Box::new(spawn_writer))
        .with_stats(Arc::clone(&stats));
        // No progress timeout: the readers declare a silent in-neighbour lost (liveness);
        // a blocked peer says whom it waits for.
        let drive_opts = DriveOptions {
            timeout: None,
            stall_report: Some(super::STALL_REPORT_EVERY),
            progress: opts.progress.clone(),
            keep: opts.keep,
            checkpoint: opts.checkpoint.clone(),
            stop_at: opts.stop_at.clone(),
            repair: opts.repair.clone(),
            // As long as a silent neighbour is given before it counts as lost.
            rejoin_timeout: opts.rejoin.then_some(opts.liveness_timeout),
        };
        let stragglers = opts.stragglers;
        let (engine, records, result) = tokio::task::spawn_blocking(move || {
            let mut engine = engine;
            let mut records = Vec::new();
            let mut time = WallClock::new(Instant::now(), stragglers);
            let r = driver::drive(
                &mut engine,
                &mut links,
                &mut time,
                &drive_opts,
                &mut records,
            );
            let lost = links.forgotten();
            // Dropping the links closes the writers' queues: they flush and close.
            drop(links);
            (engine, records, (r, lost))
        })
        .await
        .map_err(|source| Error::Task {
            peer: id,
            task: "engine".into(),
            source,
        })?;
        let timeout = opts.liveness_timeout;
        let (result, lost) = result;
        let outcome = match result {
            Ok(()) => {
                // Writers flush, close and wait for their receivers to finish reading (a
                // writer to a node lost during the run failed with it: not the run's error).
                let mut done = Ok(());
                let writers = std::mem::take(
                    &mut *writers
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                );
                let last_of = |to: usize| writers.iter().rposition(|(t, _)| *t == to);
                let replaced: Vec<bool> = writers
                    .iter()
                    .enumerate()
                    .map(|(k, (to, _))| last_of(*to) != Some(k))
                    .collect();
                for (k, (to, w)) in writers.into_iter().enumerate() {
                    // A writer to a node lost during the run failed with it; one replaced
                    // by a new writer (the node came back) failed before it.
                    if lost.contains(&to) || replaced[k] {
                        w.abort();
                        continue;
                    }
                    done = join_writer(cluster, id, to, w, timeout).await;
                    if done.is_err() {
                        break;
                    }
                }
                done.map(|()| Outcome {
                    node: engine,
                    records,
                    stats,
                })
            }
            // A writer failed: its task holds the real error.
            Err(Error::Disconnected { to, .. }) if cluster.node_of(to).is_some() => {
                let to = cluster.node_of(to).expect("checked");
                let writers = std::mem::take(
                    &mut *writers
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                );
                let w = writers
                    .into_iter()
                    .find_map(|(t, w)| (t == to).then_some(w));
                let real = match w {
                    Some(w) => join_writer(cluster, id, to, w, timeout).await.err(),
                    None => None,
                };
                Err(real.unwrap_or(Error::Disconnected {
                    peer: me,
                    to: cluster.core_id(to),
                }))
            }
            Err(e) => Err(e),
        };
        // The swarm task logs what it still holds (refused connections) and stops.
        let _ = stop_swarm.send(());
        let abort = swarm_task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(1), swarm_task)
            .await
            .is_err()
        {
            abort.abort();
        }
        outcome
    }
}

/// A writer's node index and task.
type WriterTask = (usize, tokio::task::JoinHandle<Result<()>>);

/// Waits for the writer to peer `to` to finish.
async fn join_writer(
    cluster: &Cluster,
    me: usize,
    to: usize,
    w: tokio::task::JoinHandle<Result<()>>,
    timeout: Duration,
) -> Result<()> {
    match tokio::time::timeout(timeout, w).await {
        Ok(Ok(r)) => r,
        Ok(Err(source)) => Err(Error::Task {
            peer: me,
            task: format!("writer to {}", NodeName::of(cluster, to)),
            source,
        }),
        Err(_) => Err(Error::Flush {
            peer: NodeName::of(cluster, me),
            to: NodeName::of(cluster, to),
            waited: timeout,
        }),
    }
}

/// How the swarm task talks with the rest of the node.
struct SwarmChannels {
    /// Addresses to dial.
    dial: mpsc::Receiver<Multiaddr>,
    /// Stops the task.
    stop: oneshot::Receiver<()>,
    /// Where the task publishes which peers it has a connection to.
    connected: watch::Sender<Connected>,
}

/// The swarm task: drives the swarm, dials on request, publishes which peers it is
/// connected to, and logs refused connections through [`RefusalLog`]s (one line, then at
/// most one summary per window) until told to stop, when it logs what it still holds.
async fn swarm_loop(
    me: usize,
    mut swarm: Swarm<Behaviour>,
    ch: SwarmChannels,
    stats: Arc<NetStats>,
) {
    let SwarmChannels {
        mut dial,
        mut stop,
        connected,
    } = ch;
    let mut refused = RefusalLog::new(Kind::Refused, REFUSAL_LOG_WINDOW);
    let mut accept_errors = RefusalLog::new(Kind::AcceptError, REFUSAL_LOG_WINDOW);
    let mut dialing = true;
    loop {
        let due = match (refused.due(), accept_errors.due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let summary_at = tokio::time::Instant::from_std(
            due.unwrap_or_else(|| Instant::now() + REFUSAL_LOG_WINDOW),
        );
        tokio::select! {
            ev = swarm.select_next_some() => match ev {
                SwarmEvent::ConnectionEstablished { peer_id, num_established, .. } => {
                    debug!(%peer_id, "connected");
                    connected.send_modify(|c| c.set(peer_id, num_established.get()));
                }
                SwarmEvent::ConnectionClosed { peer_id, cause, num_established, .. } => {
                    debug!(%peer_id, ?cause, "connection closed");
                    connected.send_modify(|c| c.set(peer_id, num_established));
                }
                SwarmEvent::IncomingConnectionError { error, send_back_addr, .. } => {
                    stats.refused_connections.fetch_add(1, Ordering::Relaxed);
                    debug!(%send_back_addr, %error, "refused incoming connection");
                    let line = refused.note(Instant::now(), || {
                        format!("from {send_back_addr}: {}", error_chain(&error))
                    });
                    if let Some(line) = line {
                        warn!(peer = me, "{line}");
                    }
                }
                SwarmEvent::ListenerError { error, .. } => {
                    debug!(%error, "accept failed");
                    if let Some(line) = accept_errors.note(Instant::now(), || error_chain(&error)) {
                        warn!(peer = me, "{line}");
                    }
                }
                SwarmEvent::OutgoingConnectionError { peer_id, error, .. } => {
                    debug!(?peer_id, %error, "dial failed");
                }
                _ => {}
            },
            () = tokio::time::sleep_until(summary_at), if due.is_some() => {
                let now = Instant::now();
                for log in [&mut refused, &mut accept_errors] {
                    if let Some(line) = log.tick(now) {
                        warn!(peer = me, "{line}");
                    }
                }
            }
            addr = dial.recv(), if dialing => match addr {
                Some(addr) => {
                    if let Err(e) = swarm.dial(addr.clone()) {
                        debug!(%addr, %e, "dial refused");
                    }
                }
                None => dialing = false,
            },
            _ = &mut stop => break,
        }
    }
    let now = Instant::now();
    for log in [&mut refused, &mut accept_errors] {
        if let Some(line) = log.finish(now) {
            warn!(peer = me, "{line}");
        }
    }
}

/// An error and its causes, `: `-separated, empty messages skipped.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(x) = cur {
        let m = x.to_string();
        if !m.is_empty() && !out.ends_with(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        cur = x.source();
    }
    out
}
