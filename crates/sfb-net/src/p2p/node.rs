//! The swarm and the node's life cycle: start (listen, accept), run (dial, drive, flush).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::allow_block_list;
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId as Libp2pId, Swarm};
use sfb_core::wire::Expect;
use sfb_core::{PeerId, StateMachine};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::links::QueueLinks;
use super::reader::Readers;
use super::writer::Writer;
use super::{Inbound, NetStats, Options, Outcome, RunShape, protocol};
use crate::clock::WallClock;
use crate::cluster::Cluster;
use crate::driver::{self, DriveOptions};
use crate::frame;
use crate::{Error, Result};

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

/// Builds a swarm for `key` that only accepts connections from `allowed`.
///
/// # Errors
/// [`Error::Transport`] if the transport cannot be built.
pub fn build_swarm(key: Keypair, allowed: &[Libp2pId]) -> Result<Swarm<Behaviour>> {
    let mut swarm = libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_tcp(
            libp2p::tcp::Config::default().nodelay(true),
            libp2p::noise::Config::new,
            libp2p::yamux::Config::default,
        )
        .map_err(|source| Error::Transport { source })?
        .with_behaviour(|_| Behaviour {
            allow: allow_block_list::Behaviour::default(),
            stream: libp2p_stream::Behaviour::new(),
        })
        .unwrap_or_else(|never| match never {})
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
    /// [`Error::Cluster`] for key problems; [`Error::Transport`], [`Error::Listen`],
    /// [`Error::NoListenAddr`] or [`Error::Accept`] if it cannot listen in time.
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
            .map_err(|source| Error::Listen {
                addr: cluster.addr(id).clone(),
                source,
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
        let swarm_task = tokio::spawn(swarm_loop(swarm, dial_rx));
        let stats = Arc::new(NetStats::new(cluster.peers()));
        // Room for every node's per-edge queue.
        let (inbox_tx, inbox) = mpsc::channel(opts.edge_queue() * cluster.peers().max(1));
        let mut control2 = control.clone();
        let incoming = control2
            .accept(protocol())
            .map_err(|source| Error::Accept { source })?;
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
            let (tx, rx) = mpsc::channel(opts.edge_queue());
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
            writers.push((to, tokio::spawn(w.run(rx))));
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
        );
        let drive_opts = DriveOptions {
            timeout: opts.timeout,
            progress: opts.progress.clone(),
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
            // Dropping the links closes the writers' queues: they flush and close.
            drop(links);
            (engine, records, r)
        })
        .await
        .map_err(|source| Error::Task {
            peer: id,
            task: "engine".into(),
            source,
        })?;
        let timeout = opts.timeout;
        let outcome = match result {
            Ok(()) => {
                // Writers flush, close and wait for their receivers to finish reading.
                let mut done = Ok(());
                for (to, w) in writers {
                    done = join_writer(id, to, w, timeout).await;
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
                let w = writers
                    .into_iter()
                    .find_map(|(t, w)| (t == to).then_some(w));
                let real = match w {
                    Some(w) => join_writer(id, to, w, timeout).await.err(),
                    None => None,
                };
                Err(real.unwrap_or(Error::Disconnected {
                    peer: me,
                    to: cluster.core_id(to),
                }))
            }
            Err(e) => Err(e),
        };
        swarm_task.abort();
        outcome
    }
}

/// Waits for the writer to peer `to` to finish.
async fn join_writer(
    me: usize,
    to: usize,
    w: tokio::task::JoinHandle<Result<()>>,
    timeout: Duration,
) -> Result<()> {
    match tokio::time::timeout(timeout, w).await {
        Ok(Ok(r)) => r,
        Ok(Err(source)) => Err(Error::Task {
            peer: me,
            task: format!("writer to peer {to}"),
            source,
        }),
        Err(_) => Err(Error::Flush {
            peer: me,
            to,
            waited: timeout,
        }),
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
