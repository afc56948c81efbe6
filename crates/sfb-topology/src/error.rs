//! The crate's error type.

/// Errors raised by sfb-topology. Every variant names what was wrong and carries the numbers;
/// the `Display` text is one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A topology file could not be read.
    #[error("cannot read topology file {path}: {error}")]
    ReadFile {
        /// The file.
        path: std::path::PathBuf,
        /// The IO error.
        error: std::io::Error,
    },
    /// A topology file was read but is not a valid topology.
    #[error("{path}: {error}")]
    InFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        error: Box<Error>,
    },
    /// A topology needs at least two peers (one peer cannot have an out-neighbour).
    #[error("a topology needs at least 2 peers, got {peers}")]
    TooFewPeers {
        /// The number of peers asked for.
        peers: usize,
    },
    /// The out-degree is zero.
    #[error("out-degree must be at least 1 (peers = {peers})")]
    ZeroOutDegree {
        /// The number of peers.
        peers: usize,
    },
    /// The out-degree is not below the number of peers (a peer has only `peers − 1` others).
    #[error("out-degree {out_degree} must be less than the number of peers {peers}")]
    OutDegreeTooLarge {
        /// The out-degree asked for.
        out_degree: usize,
        /// The number of peers.
        peers: usize,
    },
    /// A peer has a different number of out-neighbours than the topology's out-degree.
    #[error("peer {peer} has {got} out-neighbours, expected out-degree {expected}")]
    DegreeMismatch {
        /// The offending peer.
        peer: usize,
        /// The out-degree of the topology.
        expected: usize,
        /// The number of out-neighbours found.
        got: usize,
    },
    /// A peer lists itself as an out-neighbour.
    #[error("peer {peer} lists itself as an out-neighbour (self loop)")]
    SelfLoop {
        /// The offending peer.
        peer: usize,
    },
    /// A peer lists the same out-neighbour twice.
    #[error("peer {peer} lists out-neighbour {neighbour} more than once")]
    DuplicateArc {
        /// The offending peer.
        peer: usize,
        /// The repeated neighbour.
        neighbour: usize,
    },
    /// A peer id is not in `0..peers`.
    #[error("peer {peer} names unknown peer {neighbour} (valid ids are 0..{peers})")]
    UnknownPeer {
        /// The peer whose entry names the unknown id (`usize::MAX` when not applicable).
        peer: usize,
        /// The unknown id.
        neighbour: usize,
        /// The number of peers.
        peers: usize,
    },
    /// A topology file defines the same peer id twice.
    #[error("peer id {peer} is defined more than once")]
    DuplicatePeer {
        /// The repeated id.
        peer: usize,
    },
    /// A topology file does not define some id in `0..peers`.
    #[error("peer id {peer} is missing (ids must be 0..{peers}, each defined once)")]
    MissingPeer {
        /// The first missing id.
        peer: usize,
        /// The number of peers defined.
        peers: usize,
    },
    /// Some peer cannot reach another one: updates would never arrive.
    #[error("topology is not strongly connected: peer {to} is unreachable from peer {from}")]
    NotStronglyConnected {
        /// A peer that cannot reach `to`.
        from: usize,
        /// A peer unreachable from `from`.
        to: usize,
    },
    /// A circulant jump list is unusable.
    #[error("invalid circulant jump {jump} for {peers} peers: {reason}")]
    InvalidJump {
        /// The offending jump.
        jump: usize,
        /// The number of peers.
        peers: usize,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A generator was asked for an out-degree it cannot produce.
    #[error("method {method} needs out-degree {expected} for {peers} peers, got {got}")]
    MethodDegree {
        /// The generator.
        method: &'static str,
        /// The out-degree it produces.
        expected: usize,
        /// The out-degree asked for.
        got: usize,
        /// The number of peers.
        peers: usize,
    },
    /// Repair was asked to remove so many peers that fewer than two survive.
    #[error("repair leaves {survivors} surviving peers; at least 2 are needed")]
    TooFewSurvivors {
        /// Peers left after removing the failed ones.
        survivors: usize,
    },
    /// A topology or cluster file could not be parsed.
    #[error("invalid {format} topology file: {message}")]
    Parse {
        /// `"TOML"`, `"JSON"` or `"DOT"`.
        format: &'static str,
        /// What the parser said (one line, with the line number when known).
        message: String,
    },
    /// A topology could not be serialized.
    #[error("cannot write {format}: {message}")]
    Serialize {
        /// `"TOML"` or `"JSON"`.
        format: &'static str,
        /// What the serializer said.
        message: String,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
