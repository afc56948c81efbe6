//! The crate's error type.
//!
//! Transport-level errors of the libp2p driver name nodes by their index in the cluster
//! file (`usize`, displayed `peer 3`) or by [`NodeName`] (displayed `peer 3`, or `the
//! server` for an FMS server); errors that come from a node's protocol name it by its
//! sfb-core [`PeerId`] (displayed `p3`, or `server`). Errors about a broken or silent
//! stream say which node was lost: the one at the other end (`lost peer 3: …`).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use libp2p::Multiaddr;
use sfb_core::fms::Push;
use sfb_core::{Consistency, PeerId};

use crate::p2p::NodeName;

impl Error {
    /// The node this error says is gone (its stream ended early or broke, it went silent
    /// past the liveness timeout, or the link to it closed), or is shut out (its handshake
    /// was refused or refused this node's, or it sent a bad frame: the link is closed, and
    /// the fault stays on that link), as an sfb-core id; `None` for every other error.
    pub fn lost_peer(&self) -> Option<PeerId> {
        let core = |n: &NodeName| {
            if n.server {
                PeerId::SERVER
            } else {
                PeerId(n.index as u32)
            }
        };
        match self {
            Error::Send { to, .. } => Some(core(to)),
            Error::StreamClosed { from, .. }
            | Error::StreamBroken { from, .. }
            | Error::NoHeartbeat { from, .. } => Some(core(from)),
            Error::Disconnected { to, .. } => Some(*to),
            Error::Handshake { peer, .. } | Error::BadFrame { peer, .. } => Some(*peer),
            Error::LostNotice { lost, .. } => Some(*lost),
            Error::Crashed { crashed, .. } => Some(*crashed),
            Error::Left { left, .. } => Some(*left),
            _ => None,
        }
    }
}

/// Errors raised by sfb-net.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A peer's engine refused a message or failed a step.
    #[error("peer {peer}: {source}")]
    Peer {
        /// The failing peer.
        peer: PeerId,
        /// The engine's error.
        #[source]
        source: sfb_core::Error,
    },
    /// A node went longer than its progress timeout ([`DriveOptions::timeout`]: the
    /// in-memory transport has one, libp2p peers rely on heartbeats instead) without
    /// progress (nothing received while blocked, or no room on a full link).
    ///
    /// [`DriveOptions::timeout`]: crate::driver::DriveOptions::timeout
    #[error(
        "peer {peer} at clock {clock} waited {waited:?} without progress; still waiting on {waiting_on}"
    )]
    Timeout {
        /// The waiting node.
        peer: PeerId,
        /// Its clock.
        clock: u64,
        /// How long it waited.
        waited: Duration,
        /// What it was waiting for.
        waiting_on: Awaiting,
    },
    /// A node restarted with `--rejoin` was not taken back: no neighbour sent it the run's
    /// state in time, or it was told to stop first.
    #[error("{peer} was not taken back into the run after {waited:?}: {why}")]
    NotTakenBack {
        /// The rejoining node.
        peer: PeerId,
        /// How long it waited.
        waited: Duration,
        /// Why it gave up.
        why: &'static str,
    },
    /// The node's checkpoint state could not be kept.
    #[error("{peer}: could not keep its checkpoint of clock {clock}: {reason}")]
    Checkpoint {
        /// The node.
        peer: PeerId,
        /// The clock of the state.
        clock: u64,
        /// Why (from the checkpoint sink).
        reason: String,
    },
    /// A node's thread panicked (an in-memory run): as a crashed process, it is lost to
    /// the others.
    #[error("peer {peer}'s thread panicked at clock {clock}: {why}")]
    Panicked {
        /// The node.
        peer: PeerId,
        /// The clock it was computing.
        clock: u64,
        /// The panic's message.
        why: String,
    },
    /// Another node's thread panicked (an in-memory run): this node lost it.
    #[error("{peer}: {crashed}'s thread panicked")]
    Crashed {
        /// This node.
        peer: PeerId,
        /// The node whose thread panicked.
        crashed: PeerId,
    },
    /// Another node failed, so this one stopped.
    #[error("peer {peer} stopped because peer {by} failed")]
    Aborted {
        /// The stopped node.
        peer: PeerId,
        /// The node that failed first.
        by: PeerId,
    },
    /// A node's link to another closed before the run was complete.
    #[error("peer {peer}: link to {to} closed before the run completed")]
    Disconnected {
        /// The node that noticed.
        peer: PeerId,
        /// The other end.
        to: PeerId,
    },
    /// Every inbound link of a node is gone while it still waits for frames.
    #[error("peer {peer}: every inbound link is gone while waiting")]
    InboxClosed {
        /// The waiting node.
        peer: PeerId,
    },
    /// A node addressed a frame to a node it has no link to.
    #[error("{peer} addressed a message to {to}, which is not one of its out-neighbours")]
    UnknownDestination {
        /// The sender.
        peer: PeerId,
        /// The destination.
        to: PeerId,
    },
    /// The libp2p transport could not be built.
    #[error("building the libp2p transport: {source}")]
    Transport {
        /// The noise (authentication) setup error.
        #[source]
        source: libp2p::noise::Error,
    },
    /// The node could not listen on its address: at once, with the OS's reason ("address
    /// in use" when another process holds the port: a peer owns its port alone).
    #[error("{node} cannot listen on {addr}: {}", listen_problem(reason))]
    Listen {
        /// The node.
        node: NodeName,
        /// The address from the cluster file.
        addr: Multiaddr,
        /// The OS's (or the transport's) reason.
        reason: std::io::Error,
    },
    /// The node got no listen address within the start-up timeout.
    #[error("no listen address on {addr} within {waited:?}")]
    NoListenAddr {
        /// The address from the cluster file.
        addr: Multiaddr,
        /// How long it waited.
        waited: Duration,
    },
    /// The stream protocol could not be registered for inbound streams.
    #[error("accepting {}: {source}", crate::frame::PROTOCOL)]
    Accept {
        /// libp2p-stream's error.
        #[source]
        source: libp2p_stream::AlreadyRegistered,
    },
    /// A node could not open its stream to an out-neighbour and complete the handshake
    /// within the start-up timeout.
    #[error(
        "{peer}: could not open a stream to {to} at {addr} within the start-up timeout ({last_problem})"
    )]
    Connect {
        /// The dialing node.
        peer: NodeName,
        /// The out-neighbour.
        to: NodeName,
        /// Its address.
        addr: Multiaddr,
        /// What went wrong on the last attempt.
        last_problem: ConnectProblem,
    },
    /// An out-neighbour accepted the stream but sent no handshake reply in time.
    #[error("{peer} → {to}: no handshake reply within {waited:?}")]
    NoAck {
        /// The dialing node.
        peer: NodeName,
        /// The out-neighbour.
        to: NodeName,
        /// How long the dialer waited.
        waited: Duration,
    },
    /// An out-neighbour's handshake reply could not be decoded.
    #[error("{peer} → {to}: bad handshake reply: {reason}")]
    BadAck {
        /// The dialing node.
        peer: NodeName,
        /// The out-neighbour.
        to: NodeName,
        /// The decoder's complaint.
        reason: String,
    },
    /// A stream's handshake was refused.
    #[error("handshake with peer {peer} refused: {reason}")]
    Handshake {
        /// The other end.
        peer: PeerId,
        /// Why (the refusing side's words).
        reason: String,
    },
    /// Writing to an out-neighbour's stream failed: the out-neighbour is gone (it died,
    /// or its connection did). The message names it as the node lost.
    #[error("lost {to}: the stream from {peer} to it broke after {frames} frames ({reason})")]
    Send {
        /// The writing node.
        peer: NodeName,
        /// The out-neighbour, the node lost.
        to: NodeName,
        /// Frames written before the failure.
        frames: u64,
        /// The IO error.
        reason: std::io::Error,
    },
    /// An in-neighbour closed its stream before sending every clock: it is gone (its
    /// process ended). The message names it as the node lost.
    #[error("lost {from}: it closed its stream to {to} after {frames} of {clocks} clocks")]
    StreamClosed {
        /// The in-neighbour, the node lost.
        from: NodeName,
        /// The receiving node.
        to: NodeName,
        /// Frames received on the stream.
        frames: u64,
        /// Clocks of the run.
        clocks: u64,
    },
    /// Reading an in-neighbour's stream failed: it is gone (it died, or its connection
    /// did). The message names it as the node lost.
    #[error("lost {from}: its stream to {to} broke after {frames} of {clocks} clocks ({reason})")]
    StreamBroken {
        /// The in-neighbour, the node lost.
        from: NodeName,
        /// The receiving node.
        to: NodeName,
        /// Frames received on the stream.
        frames: u64,
        /// Clocks of the run.
        clocks: u64,
        /// The IO error.
        reason: std::io::Error,
    },
    /// An in-neighbour's stream is open but stayed silent (no frame, no heartbeat) for the
    /// liveness timeout: the in-neighbour is stopped, hung or cut off. The message names it
    /// as the node lost.
    #[error(
        "lost {from}: no heartbeat for {:.1} s on its stream to {to} (liveness timeout {} s; {frames} of {clocks} clocks received)",
        silent.as_secs_f64(),
        timeout.as_secs_f64()
    )]
    NoHeartbeat {
        /// The in-neighbour, the node lost.
        from: NodeName,
        /// The receiving node.
        to: NodeName,
        /// How long the stream was silent, as the receiver measured it.
        silent: Duration,
        /// The liveness timeout.
        timeout: Duration,
        /// Frames received on the stream.
        frames: u64,
        /// Clocks of the run.
        clocks: u64,
    },
    /// Not a failure: node `joined` opened a stream to this one (at start, or coming back
    /// with `--rejoin`) or a neighbour says it is back. The driver loop handles it.
    #[error("{peer}: {joined} joined")]
    Joined {
        /// This node.
        peer: PeerId,
        /// The node that joined.
        joined: PeerId,
        /// Its new life, when a neighbour says it is back; `None` when it opened a stream.
        life: Option<u32>,
    },
    /// Not a failure: a neighbour's state for this rejoining node. The driver loop
    /// handles it.
    #[error("{peer}: a neighbour's state of clock {}", state.clock)]
    RejoinState {
        /// This node.
        peer: PeerId,
        /// The state.
        state: Box<sfb_core::NodeState>,
    },
    /// A neighbour left the run on request (a planned leave, not a failure of its own).
    #[error("{peer}: {left} left the run")]
    Left {
        /// This node.
        peer: PeerId,
        /// The neighbour that said so.
        from: PeerId,
        /// The node that left.
        left: PeerId,
        /// The life it left in.
        life: u32,
    },
    /// A neighbour reported a node lost (it went on without it).
    #[error("{peer}: a neighbour reports {lost} lost")]
    LostNotice {
        /// This node.
        peer: PeerId,
        /// The neighbour that reports it.
        from: PeerId,
        /// The node lost.
        lost: PeerId,
        /// The life that ended.
        life: u32,
    },
    /// A peer sent a frame that failed validation.
    #[error("bad frame from peer {peer}: {reason}")]
    BadFrame {
        /// The sender.
        peer: PeerId,
        /// What was wrong.
        reason: String,
    },
    /// An out-neighbour did not finish reading this node's frames in time after the run.
    #[error("{peer}: {to} did not finish reading within {waited:?}")]
    Flush {
        /// The finished node.
        peer: NodeName,
        /// The out-neighbour.
        to: NodeName,
        /// How long the node waited.
        waited: Duration,
    },
    /// The engine thread or a writer task panicked or was cancelled.
    #[error("peer {peer}: {task} task: {source}")]
    Task {
        /// The node (index in the cluster file).
        peer: usize,
        /// Which task: `engine` or `writer to peer N`.
        task: String,
        /// The runtime's error.
        #[source]
        source: tokio::task::JoinError,
    },
    /// The cluster file (or a key file it names) is unusable.
    #[error("invalid cluster: {}: {source}", path.display())]
    Cluster {
        /// The file at fault (the cluster file, or a key file).
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: ClusterError,
    },
    /// A new cluster would replace an existing cluster file or key folder, and was not
    /// told to ([`Existing::Replace`](crate::cluster::Existing::Replace)).
    #[error("{} already exists: refusing to replace a cluster file and its keys", path.display())]
    ClusterExists {
        /// The cluster file or key folder found.
        path: PathBuf,
    },
    /// An in-memory run was handed an engine at the wrong index or of another cluster size.
    #[error(
        "invalid cluster: engine at index {index} is {id} of {peers} peers; the run has {expected}"
    )]
    EngineMismatch {
        /// Index in the engine list.
        index: usize,
        /// The engine's id.
        id: PeerId,
        /// The engine's cluster size.
        peers: usize,
        /// Engines given.
        expected: usize,
    },
    /// An in-memory FMS run was handed a server for another number of clients.
    #[error("invalid cluster: the server expects {expected} clients, {got} given")]
    ServerClients {
        /// The server's client count.
        expected: usize,
        /// Clients given.
        got: usize,
    },
    /// An in-memory FMS run was handed a client that does not match the server.
    #[error(
        "invalid cluster: client at index {index} is {id} of {client}; the server runs {server}"
    )]
    ClientMismatch {
        /// Index in the client list.
        index: usize,
        /// The client's id.
        id: PeerId,
        /// The client's setup.
        client: FmsSetup,
        /// The server's setup.
        server: FmsSetup,
    },
}

/// A listen error's reason, with "address in use" spelled out.
fn listen_problem(reason: &std::io::Error) -> String {
    if reason.kind() == std::io::ErrorKind::AddrInUse {
        format!(
            "address in use: another process already listens on this port ({reason}); is this node running twice?"
        )
    } else {
        reason.to_string()
    }
}

/// What a timed-out node was waiting for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Awaiting {
    /// Frames from these nodes, with the clocks each had delivered (what the node's
    /// [`waiting_on`](sfb_core::StateMachine::waiting_on) says; may be empty).
    Peers(Vec<(PeerId, u64)>),
    /// Room on its full link to `to`.
    Room {
        /// The destination of the full link.
        to: PeerId,
    },
}

impl fmt::Display for Awaiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Awaiting::Peers(peers) if peers.is_empty() => f.write_str("nobody it can name"),
            Awaiting::Peers(peers) => {
                for (i, (q, d)) in peers.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{q} (delivered {d} clocks)")?;
                }
                Ok(())
            }
            Awaiting::Room { to } => write!(f, "room on the link to {to}"),
        }
    }
}

/// The last problem met while opening a stream to an out-neighbour.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectProblem {
    /// The start-up deadline passed before the first attempt.
    #[error("no attempt")]
    NoAttempt,
    /// No connection to the remote came up (it may not be running, or not at that address).
    #[error("no connection to it came up")]
    NotConnected,
    /// The node's swarm task stopped.
    #[error("the node's network task stopped")]
    SwarmStopped,
    /// A connection was up but opening a stream on it did not complete in this long.
    #[error("opening a stream on the connection did not complete within {0:?}")]
    OpenTimedOut(std::time::Duration),
    /// libp2p-stream could not open the stream.
    #[error("{0}")]
    OpenStream(#[source] libp2p_stream::OpenStreamError),
    /// The remote closed the stream before replying to the handshake.
    #[error("stream closed before the handshake reply")]
    ClosedBeforeReply,
    /// The handshake exchange failed.
    #[error("handshake: {0}")]
    Handshake(#[source] std::io::Error),
}

/// What an FMS node is configured for (for [`Error::ClientMismatch`]).
#[derive(Debug, Clone)]
pub struct FmsSetup {
    /// Clients.
    pub clients: usize,
    /// What clients push.
    pub push: Push,
    /// Clocks to run.
    pub clocks: u64,
    /// The consistency model.
    pub consistency: Consistency,
}

impl From<&sfb_core::fms::Config> for FmsSetup {
    fn from(c: &sfb_core::fms::Config) -> Self {
        Self {
            clients: c.clients,
            push: c.push,
            clocks: c.clocks,
            consistency: c.consistency.clone(),
        }
    }
}

impl fmt::Display for FmsSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} clients ({} push, {} clocks, {})",
            self.clients, self.push, self.clocks, self.consistency
        )
    }
}

/// What is wrong with a cluster file or a key file it names.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The file could not be read or written (or its key directory created).
    #[error("{0}")]
    Io(#[source] std::io::Error),
    /// Bad TOML, an inconsistent topology, or a file that cannot be written as TOML.
    #[error("{0}")]
    Topology(#[source] sfb_topology::Error),
    /// `server` is not a non-negative integer.
    #[error("`server` must be a peer id")]
    ServerNotAnId,
    /// `server` names no peer.
    #[error("server {server} is not a peer id (there are {peers} peers)")]
    ServerOutOfRange {
        /// The `server` value.
        server: usize,
        /// Peers in the file.
        peers: usize,
    },
    /// A peer id is not below the number of peers.
    #[error("peer id {id} is not below {peers}")]
    IdOutOfRange {
        /// The id.
        id: usize,
        /// Peers in the file.
        peers: usize,
    },
    /// A peer id appears twice.
    #[error("peer {id} listed twice")]
    DuplicateId {
        /// The id.
        id: usize,
    },
    /// An FMS file whose out-lists are not a star around the server.
    #[error("FMS star: peer {peer} must send to {want:?}, the file says {got:?}")]
    NotAStar {
        /// The peer.
        peer: usize,
        /// The out-list a star needs.
        want: Vec<usize>,
        /// The file's out-list.
        got: Vec<usize>,
    },
    /// `tree_fanout` is not a positive integer.
    #[error("`tree_fanout` must be a fan-out of at least 1")]
    TreeFanoutNotANumber,
    /// A tree file (`tree_fanout`) whose out-lists are not the tree's.
    #[error(
        "tree of fan-out {fanout}: peer {peer} must send to {want:?} (its parent, then its children), the file says {got:?}"
    )]
    NotTheTree {
        /// The fan-out.
        fanout: usize,
        /// The peer.
        peer: usize,
        /// The out-list the tree needs.
        want: Vec<usize>,
        /// The file's out-list.
        got: Vec<usize>,
    },
    /// A peer has no `peer_id`.
    #[error("peer {peer} has no peer_id")]
    MissingPeerId {
        /// The peer.
        peer: usize,
    },
    /// A `peer_id` does not parse.
    #[error("peer {peer}: bad peer_id {value:?}: {source}")]
    BadPeerId {
        /// The peer.
        peer: usize,
        /// The text.
        value: String,
        /// The parser's error.
        #[source]
        source: libp2p::identity::ParseError,
    },
    /// Two peers share a `peer_id`.
    #[error("peer {peer}: peer_id {peer_id} listed twice")]
    DuplicatePeerId {
        /// The second peer listing it.
        peer: usize,
        /// The identity.
        peer_id: libp2p::PeerId,
    },
    /// A peer has no `addr`.
    #[error("peer {peer} has no addr")]
    MissingAddr {
        /// The peer.
        peer: usize,
    },
    /// An `addr` does not parse.
    #[error("peer {peer}: bad addr {value:?}: {source}")]
    BadAddr {
        /// The peer.
        peer: usize,
        /// The text.
        value: String,
        /// The parser's error.
        #[source]
        source: libp2p::multiaddr::Error,
    },
    /// An FMS cluster was asked for zero clients.
    #[error("an FMS cluster needs at least one client")]
    NoClients,
    /// No hosts to assign addresses from.
    #[error("no hosts given")]
    NoHosts,
    /// `base_port + id` overflows.
    #[error("ports run past 65535")]
    PortOverflow,
    /// No free port could be taken on a host (free ports need this machine's addresses).
    #[error("no free port on {host}: {reason} (free ports need addresses of this machine)")]
    FreePort {
        /// The host.
        host: String,
        /// The operating system's reason.
        reason: String,
    },
    /// Listen addresses given for another number of peers.
    #[error("{given} addresses for {peers} peers")]
    AddrCount {
        /// Addresses given.
        given: usize,
        /// Peers in the cluster.
        peers: usize,
    },
    /// A peer the file does not list.
    #[error("no peer {peer}")]
    NoPeer {
        /// The peer asked for.
        peer: usize,
    },
    /// A peer has no `key` entry.
    #[error("peer {peer} has no key")]
    MissingKey {
        /// The peer.
        peer: usize,
    },
    /// A key file does not hold an ed25519 key.
    #[error("not an ed25519 key file: {0}")]
    BadKey(#[source] libp2p::identity::DecodingError),
    /// A fresh key could not be encoded for its key file.
    #[error("encoding a key: {0}")]
    KeyEncoding(#[source] libp2p::identity::DecodingError),
    /// A private key file that group or others may access (any of mode `0o077`), refused
    /// as ssh refuses one.
    #[error(
        "private key is accessible by group or others (mode {mode:04o}); chmod 600 it, or pass --allow-open-key to use it anyway"
    )]
    KeyPermissions {
        /// The file's permission bits.
        mode: u32,
    },
    /// A key file's identity is not the `peer_id` listed for its peer.
    #[error("key does not match peer {peer}'s peer_id {peer_id}")]
    KeyMismatch {
        /// The peer.
        peer: usize,
        /// The listed identity.
        peer_id: libp2p::PeerId,
    },
}

/// Result alias for sfb-net.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_and_flush_errors_call_the_fms_server_the_server() {
        let peer = NodeName {
            index: 2,
            server: false,
        };
        let server = NodeName {
            index: 3,
            server: true,
        };
        let e = Error::NoAck {
            peer,
            to: server,
            waited: Duration::from_secs(1),
        };
        assert_eq!(
            e.to_string(),
            "peer 2 → the server: no handshake reply within 1s"
        );
        let e = Error::Flush {
            peer: server,
            to: peer,
            waited: Duration::from_secs(2),
        };
        assert_eq!(
            e.to_string(),
            "the server: peer 2 did not finish reading within 2s"
        );
    }
}
