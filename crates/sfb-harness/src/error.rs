//! The crate's error type.

use std::path::PathBuf;

/// Errors raised by sfb-harness. Spec errors name the [`RunSpec`](crate::RunSpec) field
/// (as a dotted path, e.g. `train.lr`) and carry the value found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `--model NAME` names neither a built-in model nor one the program registered.
    #[error("unknown model {name:?}: this program has {known}")]
    UnknownModel {
        /// The name given.
        name: String,
        /// The models this program has, comma-separated.
        known: String,
    },
    /// A program's registered model could not be made (its own error: data it could not
    /// read, …).
    #[error("model {name}: {source}")]
    Registered {
        /// The model's registered name.
        name: String,
        /// The program's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A user model's per-peer data loader failed.
    #[error("loading peer {peer}'s data: {source}")]
    Load {
        /// The peer whose part was loaded.
        peer: u32,
        /// The loader's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A number is outside its accepted range.
    #[error("{field} must be {expected}, got {got}")]
    OutOfRange {
        /// The field, as a dotted path into the spec.
        field: &'static str,
        /// The accepted range, in words.
        expected: &'static str,
        /// The value found.
        got: f64,
    },
    /// A number of seconds is not finite, out of its range, or longer than
    /// [`MAX_SECONDS`](crate::preflight::MAX_SECONDS) (so it always converts to a `Duration`).
    #[error("{field} must be {expected}, at most {max} (one year), got {got:?}", max = crate::preflight::MAX_SECONDS)]
    Seconds {
        /// The field, as a dotted path into the spec (or the flag, for options outside it).
        field: &'static str,
        /// The accepted range, in words.
        expected: &'static str,
        /// The value found.
        got: f64,
    },
    /// An output file or folder cannot be written; found before the run starts.
    #[error("cannot write {field} {}: {source}", path.display())]
    Output {
        /// The field, as a dotted path into the spec (or the flag, for options outside it).
        field: &'static str,
        /// The path given.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint file cannot be used: not an sfb checkpoint, another format version,
    /// corrupted, truncated, or written by another run (shape, topology, model, version).
    #[error("checkpoint {}: {reason}", path.display())]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// Why, in one line.
        reason: String,
    },
    /// There is nothing to resume from: no checkpoint of some node, or no clock at which
    /// every node has one.
    #[error("cannot resume from {}: {reason}", dir.display())]
    NoCheckpoint {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Why, naming the node(s).
        reason: String,
    },
    /// The run's replicas would not fit in this machine's memory; found before they are
    /// allocated.
    #[error(
        "{what} need {} but {} is available (MemAvailable): use fewer peers or a smaller \
         model, or run the peers on several machines (sfb peer)",
        gigabytes(*.need),
        gigabytes(*.available)
    )]
    Memory {
        /// What would be allocated.
        what: String,
        /// Bytes needed.
        need: u64,
        /// Bytes available.
        available: u64,
    },
    /// A local launch (`sfb run --transport libp2p`) larger than this machine can start:
    /// found before any process is spawned.
    #[error(
        "{nodes} local node processes need {need} {what}, but this machine allows {limit} \
         ({origin}): use fewer peers, or run them on several machines (sfb cluster init, \
         sfb peer)"
    )]
    HostLimit {
        /// Nodes the launch would start.
        nodes: usize,
        /// What runs out (`open files in the launcher`, …).
        what: &'static str,
        /// How many the launch needs.
        need: String,
        /// How many the machine allows.
        limit: String,
        /// Where the limit comes from (`ulimit -n`, `MemAvailable`, …).
        origin: &'static str,
    },
    /// The out-degree does not fit the number of peers.
    #[error("topology.out_degree must be in 1..P−1 = 1..{max}, got {got}", max = peers.saturating_sub(1))]
    OutDegree {
        /// Peers `P`.
        peers: usize,
        /// The out-degree asked for.
        got: usize,
    },
    /// An explicit topology does not have one out-list per peer.
    #[error("topology.explicit has {got} out-lists for {peers} peers")]
    TopologyPeers {
        /// Peers `P`.
        peers: usize,
        /// Out-lists given.
        got: usize,
    },
    /// A topology file cannot be used for this run.
    #[error("topology file {}: {why}", path.display())]
    TopologyFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong: unreadable, invalid, or its peer count or out-degree not the
        /// run's (both figures named).
        why: String,
    },
    /// The simulator failed (a node's error, a stall, the event limit).
    #[error("simulation: {0}")]
    Sim(#[source] sfb_net::virtual_time::Error),
    /// An option `sfb sim` does not model was set.
    #[error("{field} is not simulated: {why}")]
    NotSimulated {
        /// The field set.
        field: &'static str,
        /// Why, in a few words.
        why: &'static str,
    },
    /// An option that only one transport honours was set for another.
    #[error("{field} applies to the {transport} transport only")]
    Unsupported {
        /// The field set.
        field: &'static str,
        /// The transport that honours it.
        transport: &'static str,
    },
    /// An option was set without another one it needs.
    #[error("{field} needs {requires}: {why}")]
    Requires {
        /// The field set.
        field: &'static str,
        /// The field it needs.
        requires: &'static str,
        /// Why.
        why: &'static str,
    },
    /// A straggler specification could not be parsed.
    #[error(
        "{spec:?} is not a straggler pattern (PEER:MS, rotate:MS, controlled:PEER:PERCENT or production): {reason}"
    )]
    Straggler {
        /// The text given.
        spec: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A `--prioritize` value could not be parsed.
    #[error("{spec:?} is not a prioritization: {why} (expected POLICY:BUDGET, e.g. magnitude:50%)")]
    Prioritize {
        /// The text given.
        spec: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A `--compress` value could not be parsed.
    #[error("{0:?} is not a compression: expected rank:R with R ≥ 1 (e.g. rank:4)")]
    Compress(String),
    /// The topology cannot carry relayed updates (`--relay`).
    #[error("--relay: {0}")]
    Relay(String),
    /// The topology cannot carry the gossip mode (`--partial gossip`, the default).
    #[error("--partial gossip: {0}")]
    Gossip(String),
    /// A consistency model name could not be parsed.
    #[error("unknown consistency model {0:?}: expected bsp, ssp:S, async or throttle:K")]
    Consistency(String),
    /// A custom model was given no initial matrix ([`Builder::init_w`](crate::Builder::init_w)).
    #[error("a custom model needs an initial W: call .init_w(…)")]
    MissingInitialW,
    /// No training data was given to the builder.
    #[error("no training data: call .data(…)")]
    MissingData,
    /// A peer's shard is empty.
    #[error("peer {peer} has no training samples ({samples} samples over {peers} peers)")]
    EmptyShard {
        /// The peer.
        peer: u32,
        /// Training samples in all.
        samples: usize,
        /// Peers.
        peers: usize,
    },
    /// A data file has no features.
    #[error("{}: no features (every value is zero)", path.display())]
    NoFeatures {
        /// The file.
        path: PathBuf,
    },
    /// The synthetic data spec could not be parsed.
    #[error("data.synthetic: {0}")]
    Synthetic(sfb_models::Error),
    /// The spec is not valid JSON for a [`RunSpec`](crate::RunSpec).
    #[error("run spec: {0}")]
    Json(#[from] serde_json::Error),
    /// The local launcher, or a node run from a spec ([`crate::launch`]).
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// Reading data or building a model failed.
    #[error(transparent)]
    Models(#[from] sfb_models::Error),
    /// Building an engine or server failed.
    #[error(transparent)]
    Core(#[from] sfb_core::Error),
    /// A driver failed.
    #[error(transparent)]
    Net(#[from] sfb_net::Error),
    /// Building the topology failed.
    #[error(transparent)]
    Topology(#[from] sfb_topology::Error),
}

/// Result alias for sfb-harness.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `bytes` in decimal gigabytes, one decimal.
fn gigabytes(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

impl Error {
    /// Whether the run was stopped by SIGINT or SIGTERM (the launcher stopped its nodes):
    /// a caller running several should stop too.
    pub fn is_interrupted(&self) -> bool {
        matches!(self, Error::Launch(LaunchError::Interrupted))
    }
}

/// Errors of the launcher and of a node run from a spec.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// Reading or writing a file, or starting a process, failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A file did not hold the JSON expected.
    #[error("{what}: {source}")]
    Json {
        /// The file or message.
        what: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A node process failed, exited early or broke the protocol.
    #[error("{node} {reason}{tail}", tail = tail_text(.stderr))]
    Node {
        /// `peer I` or `server`.
        node: String,
        /// What happened.
        reason: String,
        /// The last lines of its stderr (when the launcher kept them).
        stderr: Vec<String>,
    },
    /// Interrupted (Ctrl-C); every child was stopped.
    #[error("interrupted; peers stopped")]
    Interrupted,
    /// The node id is not in the cluster file, or is the wrong role.
    #[error("{0}")]
    Role(String),
    /// The network namespaces of `--netns`.
    #[error(transparent)]
    Netns(#[from] crate::netns::Error),
    /// The cluster file or the libp2p driver.
    #[error(transparent)]
    Net(#[from] sfb_net::Error),
}

fn tail_text(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("\n--- last lines of its stderr ---\n{}", lines.join("\n"))
    }
}
