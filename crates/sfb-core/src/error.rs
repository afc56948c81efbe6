//! The crate's error type.

use crate::PeerId;

/// Errors raised by sfb-core. Every variant names what was wrong and carries the numbers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A factor batch or buffer does not have the shape the replica expects.
    #[error("dimension mismatch in {what}: expected {expected}, got {got}")]
    DimensionMismatch {
        /// Which quantity was checked (e.g. "u length of pair 3 from peer 2").
        what: String,
        /// The expected size.
        expected: usize,
        /// The size found.
        got: usize,
    },
    /// A sparse `v` names a column outside `0..D`.
    #[error("sparse index {index} out of range for D = {d} (pair {pair} from peer {origin})")]
    IndexOutOfRange {
        /// Origin peer of the batch.
        origin: PeerId,
        /// Pair within the batch.
        pair: usize,
        /// The offending index.
        index: u32,
        /// The number of columns of W.
        d: usize,
    },
    /// The sparse structure (row pointers) of a batch is inconsistent.
    #[error("malformed sparse factors from peer {origin}: {reason}")]
    MalformedSparse {
        /// Origin peer of the batch.
        origin: PeerId,
        /// What is inconsistent.
        reason: &'static str,
    },
    /// A factor, scale or parameter value is NaN or infinite.
    #[error("non-finite value in {what} (pair {pair} from peer {origin})")]
    NonFinite {
        /// Origin peer of the batch.
        origin: PeerId,
        /// Pair within the batch (`usize::MAX` for the scale).
        pair: usize,
        /// Which array held it.
        what: &'static str,
    },
    /// A batch names an origin that is not a peer of this cluster.
    #[error("unknown origin peer {origin} (cluster has {peers} peers)")]
    UnknownPeer {
        /// The origin named.
        origin: PeerId,
        /// Number of peers.
        peers: usize,
    },
    /// A batch comes from a peer of the cluster that this node does not await (an SFB peer
    /// holds such frames for a while first: a sender may repair the topology before it).
    #[error("peer {from} is not an in-neighbour of this node: {reason}")]
    NotAnInNeighbour {
        /// The sender.
        from: PeerId,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A batch whose step is far larger than every step this node accepted lately
    /// ([`crate::bound`]): the sender's fault, which shuts the sender out.
    #[error(
        "batch of {origin} clock {clock} from {from} refused: its step size {norm:.3e} is more \
         than {bound} times the largest accepted in the last clocks ({reference:.3e}); a peer \
         whose code or step size differs from the run's?"
    )]
    StepTooLarge {
        /// The sender.
        from: PeerId,
        /// The batch's origin.
        origin: PeerId,
        /// The batch's clock.
        clock: u64,
        /// Its step size ([`crate::FactorBatch::step_norm`]).
        norm: f64,
        /// The largest step size accepted in the window.
        reference: f64,
        /// The bound, a multiple of the reference.
        bound: f64,
    },
    /// A part of a clock's factors ([`Message::Part`](crate::wire::Message::Part),
    /// [`Config::send_parts`](crate::Config::send_parts)) that does not fit the clock's
    /// other parts: another clock, scale, shape or kind of `v`, more pairs than a
    /// mini-batch, or a clock's last part without its earlier ones. It blames its sender
    /// (the origin: parts are never relayed).
    #[error("part of {origin}'s clock {clock} refused: {reason}")]
    BadPart {
        /// The batch's origin (and sender).
        origin: PeerId,
        /// The batch's clock.
        clock: u64,
        /// Why.
        reason: String,
    },
    /// A relayed batch ([`Message::Relayed`](crate::wire::Message::Relayed)) that does not
    /// fit the relay trees: wrong sender, duplicate or missing clock, out of place in its
    /// sender's stream, or relay not enabled.
    #[error("relayed batch of {origin} clock {clock} from {from} refused: {reason}")]
    BadRelay {
        /// The sender.
        from: PeerId,
        /// The batch's origin.
        origin: PeerId,
        /// The batch's clock.
        clock: u64,
        /// Why.
        reason: String,
    },
    /// A tree-mode message ([`crate::tree`]) from the wrong neighbour or with bad
    /// optimizer statistics.
    #[error("tree message of clock {clock} from {from} refused: {reason}")]
    BadTree {
        /// The sender.
        from: PeerId,
        /// The message's clock.
        clock: u64,
        /// Why.
        reason: String,
    },
    /// A batch's clock is outside what the engine can accept.
    #[error("clock {clock} from peer {origin} is not acceptable: {reason}")]
    BadClock {
        /// Origin peer.
        origin: PeerId,
        /// The clock received.
        clock: u64,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A node received a kind of message its role never accepts (e.g. an SFB peer sent
    /// a full W, or an FMS client sent factors to another client).
    #[error("{role} does not accept {kind} messages (received one from {from})")]
    UnexpectedMessage {
        /// The sender.
        from: PeerId,
        /// The message kind ([`Message::kind`](crate::wire::Message::kind)).
        kind: &'static str,
        /// The receiving node's role.
        role: &'static str,
    },
    /// A model mixed dense and sparse `v` within one iteration.
    #[error("an SvList holds either dense or sparse v, not both")]
    MixedFactorKinds,
    /// The user's `compute_sv` returned an error.
    #[error("model failed at clock {clock}: {source}")]
    Model {
        /// The clock being computed.
        clock: u64,
        /// The model's error.
        #[source]
        source: ModelError,
    },
    /// An engine or FMS configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(ConfigError),
    /// A frame could not be decoded.
    #[error("malformed frame: {reason}")]
    Decode {
        /// What went wrong.
        reason: String,
    },
    /// A node this one waits for (or sends to) is gone, and the run's policy is to stop
    /// (BSP without `on_peer_loss = continue`; an FMS client losing its server).
    #[error("{me} lost {peer} at clock {clock}: {why}")]
    PeerLost {
        /// This node.
        me: PeerId,
        /// The node lost.
        peer: PeerId,
        /// Clocks this node had completed.
        clock: u64,
        /// Why the run cannot go on without it.
        why: &'static str,
    },
    /// This node has lost so many peers that the ones it still reaches (itself included)
    /// are no majority of the run's: it may be the cut-off side of a partition, and the
    /// other side, if it holds the majority, trains on. It stops rather than report a
    /// result of its own ([`Config::quorum`](crate::Config::quorum)).
    #[error(
        "{me} stops at clock {clock}: it has lost {lost} of the run's {peers} peers ({names}), \
         so it and the peers it still reaches are no majority; if the rest of the run still \
         holds one it trains on without this node ({me} may --rejoin it). \
         --on-peer-loss continue-alone lets every side train on instead"
    )]
    Minority {
        /// This node.
        me: PeerId,
        /// Peers of the run.
        peers: usize,
        /// How many are lost.
        lost: usize,
        /// Which, as `p1, p3`.
        names: String,
        /// Clocks this node had completed.
        clock: u64,
    },
    /// This node has lost every other peer of the run without ever receiving a frame from
    /// any: it never reached the run (started too late, another key or cluster file, a
    /// link cut from the start). Whatever the peer-loss policy, it does not train alone
    /// and report that as the run's result.
    #[error(
        "{me} never heard from any peer of the run: it has lost all {others} others (the last \
         at clock {clock}) without receiving a frame from any, so it would train alone; were \
         they started with it (within --startup-timeout), from the same cluster file and key?"
    )]
    Isolated {
        /// This node.
        me: PeerId,
        /// The other peers of the run.
        others: usize,
        /// Clocks this node had completed.
        clock: u64,
    },
    /// Relay after a loss: the topology's arcs that are left (relay adds none) no longer
    /// connect every survivor to every other, so some survivor's batches would reach only
    /// part of the run.
    #[error(
        "{me} stops at clock {clock}: without {lost} the relay trees do not reach every \
         peer left ({reason}); relay keeps the topology's arcs and adds none, so a run that \
         goes on after losses needs a topology that stays strongly connected without them \
         (a larger --out-degree)"
    )]
    RelayCut {
        /// This node.
        me: PeerId,
        /// The peers lost, as `p1, p3`.
        lost: String,
        /// Clocks this node had completed.
        clock: u64,
        /// Which survivor cannot reach which.
        reason: String,
    },
    /// A checkpoint state cannot be read or does not fit this node.
    #[error("checkpoint {reason}")]
    Checkpoint {
        /// What is wrong, e.g. `truncated in W (64×128)`.
        reason: String,
    },
}

impl Error {
    /// The peer this error blames for a frame it sent: the receiver shuts it out as it does
    /// a bad frame's sender (the fault stays on that link, and the run's peer-loss policy
    /// decides); `None` for every other error.
    pub fn blames_sender(&self) -> Option<PeerId> {
        match self {
            Error::StepTooLarge { from, .. } => Some(*from),
            Error::BadPart { origin, .. } => Some(*origin),
            _ => None,
        }
    }
}

/// What is wrong with a configuration ([`Config`](crate::Config),
/// [`fms::Config`](crate::fms::Config)), found before anything runs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A cluster of no peers.
    #[error("peers must be at least 1")]
    NoPeers,
    /// A peer id outside `0..peers`.
    #[error("peer id {id} is not below peers = {peers}")]
    IdOutOfRange {
        /// The id given.
        id: PeerId,
        /// Peers in the cluster.
        peers: usize,
    },
    /// A neighbour outside `0..peers`.
    #[error("{direction}-neighbour {peer} is not below peers = {peers}")]
    NeighbourOutOfRange {
        /// `"in"` or `"out"`.
        direction: &'static str,
        /// The neighbour named.
        peer: PeerId,
        /// Peers in the cluster.
        peers: usize,
    },
    /// A peer listed as its own neighbour.
    #[error("{direction}-neighbours of {peer} include itself")]
    SelfNeighbour {
        /// `"in"` or `"out"`.
        direction: &'static str,
        /// The peer.
        peer: PeerId,
    },
    /// A neighbour listed twice.
    #[error("{direction}-neighbour {peer} listed twice")]
    DuplicateNeighbour {
        /// `"in"` or `"out"`.
        direction: &'static str,
        /// The neighbour.
        peer: PeerId,
    },
    /// A mini-batch of zero samples.
    #[error("batch size must be at least 1")]
    ZeroBatch,
    /// A learning rate that is NaN or infinite.
    #[error("learning rate {lr} is not finite")]
    NonFiniteLr {
        /// The rate given.
        lr: f32,
    },
    /// The optimizer's constants do not fit the run.
    #[error("optimizer {optimizer}: {reason}")]
    Optimizer {
        /// The method.
        optimizer: String,
        /// What is wrong.
        reason: String,
    },
    /// An FMS run with too few or too many clients.
    #[error("FMS needs between 1 and {max} clients, got {got}")]
    FmsClients {
        /// Clients asked for.
        got: usize,
        /// Most clients an FMS run can have.
        max: usize,
    },
    /// A consistency model the FMS backend cannot run (it needs a staleness bound).
    #[error("the FMS backend supports bsp and ssp:S, not {consistency}")]
    FmsConsistency {
        /// The model asked for.
        consistency: String,
    },
    /// An FMS client id outside `0..clients`.
    #[error("client id {id} is not below clients = {clients}")]
    ClientOutOfRange {
        /// The id given.
        id: PeerId,
        /// Clients of the run.
        clients: usize,
    },
    /// Converting an engine that has already stepped or received something.
    #[error("engine of {id} has already run (clock {clock}); only a fresh engine can be converted")]
    AlreadyRan {
        /// The engine's peer.
        id: PeerId,
        /// Its clock.
        clock: u64,
    },
    /// What the peer sends (`--compress`, `--prioritize`) cannot be done as configured.
    #[error("{0}")]
    Sending(String),
    /// Relay (`--relay`) cannot be done as configured.
    #[error("relay: {0}")]
    Relay(String),
}

// Not `#[from]`: that would make the configuration error the source too, and error
// chains (`{:#}`) would print it twice.
impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::Config(e)
    }
}

/// Result alias for sfb-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error returned by a user's [`Model`](crate::Model) callback.
///
/// Wraps any error type, so `compute_sv` can use `?` on its own errors.
#[derive(Debug)]
pub struct ModelError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl ModelError {
    /// Creates a model error from a message.
    pub fn msg(message: impl std::fmt::Display) -> Self {
        Self(message.to_string().into())
    }
}

impl std::fmt::Display for ModelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ModelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl From<Error> for ModelError {
    fn from(e: Error) -> Self {
        Self(Box::new(e))
    }
}
