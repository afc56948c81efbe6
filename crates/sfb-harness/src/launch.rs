//! The local launcher: a [`RunSpec`] over libp2p as one `sfb` process per node.
//!
//! The parent ([`Launcher::run`]) writes a cluster file (ports chosen by the OS) and one
//! [`NodeSpec`] into a temporary directory, starts `sfb peer --spec node.json --cluster
//! cluster.toml --id I` per peer (and `sfb server --spec … --cluster …` for FMS), and
//! merges the reports the children leave in that directory through [`summarize`]. A child
//! reads its whole configuration from the spec file ([`run_node`]); nothing is re-parsed
//! from a command line.
//!
//! Parent and children talk in JSON lines ([`Event`] on the child's stdout, [`Addrs`] on
//! its stdin): each child says where it listens, learns everyone's address, then reports
//! every clock it completes with its record ([`Event::Record`]): the parent streams the
//! records to the run's metrics file as they arrive (a child writes no per-clock file, so
//! a long run fills no disk), and hears the progress. The final report goes to
//! `node-I.json` and the final W to `node-I.w`.
//!
//! Children are killed on every path out of [`Launcher::run`] (error, interruption, panic,
//! drop): each is owned by a task of a [`JoinSet`] with `kill_on_drop`, and the set is
//! dropped before the function returns.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sfb_core::metrics::{ClockRecord, PeerMetrics, PeerReport, Summary};
use sfb_net::bandwidth::Bucket;
use sfb_net::cluster::{Cluster as ClusterFile, Layout};
use sfb_net::p2p::{Node, Options, RunShape};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinSet;

use crate::cluster::{Cluster, Outcome, Progress};
use crate::netns::{self, Netns};
use crate::records::RecordSink;
use crate::spec::{Backend, NetOptions, RunSpec};
use crate::summary::{NodeOutcome, summarize};

/// Longest a child may take to say where it listens (it loads its data first), unless
/// the start-up timeout (`--startup-timeout`) is longer.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(60);

/// The exit code of a node that stopped cut off from the run: the minority side of a
/// partition, or a node that never reached any peer ([`sfb_core::Error::Minority`],
/// [`sfb_core::Error::Isolated`]). Under a continue policy the launcher counts it lost,
/// as it does a node killed by a signal, and the rest of the run goes on; other failures
/// exit 1.
pub const CUT_OFF_EXIT: u8 = 3;

/// Lines of a failed child's stderr shown in the error.
const TAIL_LINES: usize = 20;

pub use crate::error::LaunchError as Error;

/// `bytes` as lower-case hex.
fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The private key a launcher hands its node on stdin ([`NodeSpec::key_on_stdin`]): the
/// first line, hex. Read through the process's one stdin buffer, which later reads (the
/// addresses, the launcher's requests) go on from.
fn key_from_stdin() -> crate::Result<Vec<u8>> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(io("reading the node's key from stdin"))?;
    let hex = line.trim();
    let bad = || Error::Role("the key on stdin is not a line of hex digits".into());
    if hex.is_empty() || !hex.len().is_multiple_of(2) {
        return Err(bad().into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
        .collect::<Result<Vec<u8>, Error>>()
        .map_err(Into::into)
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// What a child process reads from `--spec`: the run, and how to talk to its parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// The run (its `output` is the node's own: `--summary`/`--metrics` of one node).
    pub run: RunSpec,
    /// Say where this node listens ([`Event::Listening`]), read every node's address
    /// ([`Addrs`]) from stdin, and report every clock's record ([`Event::Record`]) on
    /// stdout.
    #[serde(default)]
    pub exchange_addrs: bool,
    /// Write `node-I.json` (a [`NodeReport`]) and `node-I.w` (final W, raw little-endian
    /// f32, row-major) here at the end, `I` being the node's index in the cluster file.
    #[serde(default)]
    pub out_dir: Option<PathBuf>,
    /// `out_dir` is the launcher's own temporary directory (it holds the cluster file and
    /// the private keys): when the launcher dies without cleaning up (its end of stdin
    /// closes before the run is over), the node removes it before it exits. Needs
    /// `exchange_addrs`.
    #[serde(default)]
    pub owned_by_launcher: bool,
    /// Use the node's private key even if group or others may access its file (by
    /// default [`run_node`] refuses such a key, as ssh does).
    #[serde(default)]
    pub allow_open_key: bool,
    /// The node's private key comes on its stdin, as the first line (hex of its protobuf
    /// encoding), not from a key file: the launcher's way, so that no key ever reaches
    /// the disk ([`sfb_net::cluster::Cluster::init_for_launch`]).
    #[serde(default)]
    pub key_on_stdin: bool,
}

impl NodeSpec {
    /// A node of `run` on its own (a hand-run `sfb peer`).
    pub fn new(run: RunSpec) -> Self {
        Self {
            run,
            exchange_addrs: false,
            out_dir: None,
            owned_by_launcher: false,
            allow_open_key: false,
            key_on_stdin: false,
        }
    }

    /// Reads a spec file.
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::Json`].
    pub fn read(path: &Path) -> Result<Self, Error> {
        let text =
            std::fs::read_to_string(path).map_err(io(format!("reading {}", path.display())))?;
        serde_json::from_str(&text).map_err(|source| Error::Json {
            what: format!("{}", path.display()),
            source,
        })
    }
}

/// A child's message to its parent, one JSON object per stdout line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// The node listens at this multiaddr.
    Listening(String),
    /// The node completed a clock: its record.
    Record(ClockRecord),
}

/// A request of the launcher to its children, one JSON line on their stdin after [`Addrs`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Request {
    /// End the run at this clock (every node gets the same), checkpointing there if the
    /// run checkpoints: how the launcher stops a run on SIGINT/SIGTERM.
    StopAt(u64),
}

/// The parent's answer on a child's stdin: every node's address, in cluster-file order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Addrs {
    /// Multiaddrs, node `i` at index `i`.
    pub addrs: Vec<String>,
}

/// What a node leaves in `node-I.json` for its parent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeReport {
    /// Its counters, final objective and checksum.
    pub report: PeerReport,
    /// Shape of W (`node-I.w` holds `j × d` f32).
    pub j: usize,
    /// Shape of W.
    pub d: usize,
    /// Transport counters: bytes sent, framing included.
    pub net_bytes_sent: u64,
    /// Bytes received, framing included.
    pub net_bytes_received: u64,
    /// Seconds from the first to the last send.
    pub send_span_s: f64,
    /// Frames rejected by validation.
    pub bad_frames: u64,
    /// Streams refused (unknown or unauthenticated peers).
    pub refused_streams: u64,
}

/// A node run by [`run_node`], finished.
#[derive(Debug, Clone)]
pub struct NodeDone {
    /// Its own summary (one node: its figures, its one checksum).
    pub summary: Summary,
    /// Its report.
    pub report: NodeReport,
    /// Its final W.
    pub w: ndarray::Array2<f32>,
}

/// Which node of a cluster file to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An SFB peer or FMS client with this index.
    Peer(usize),
    /// The FMS server.
    Server,
}

/// Runs one node of the cluster file `cluster` as `spec` says, to completion: builds its
/// engine (SFB peer or FMS client or server) from `spec.run` through the cluster builder,
/// drives it over libp2p, streams its per-clock records to `spec.run.output.metrics` (and,
/// with `exchange_addrs`, to its parent), writes its own summary (one node: its figures and its
/// one checksum) to `spec.run.output.summary`, and its report and W under `out_dir`.
/// Returns its summary, report and final W.
///
/// # Errors
/// [`Error::Role`] for an id that is not in the file or of the wrong kind; spec, build,
/// driver and file errors.
pub fn run_node(spec: &NodeSpec, cluster: &Path, role: Role) -> crate::Result<NodeDone> {
    run_node_with(spec, cluster, role, &Cluster::from_spec)
}

/// [`run_node`] for any model: `make` builds the node's builder from its run spec (the
/// built-in models: [`Cluster::from_spec`]; a program's own model, registered by name:
/// its builder [`with_spec`](crate::cluster::Builder::with_spec)).
///
/// # Errors
/// As [`run_node`].
pub fn run_node_with<K: crate::cluster::ModelSource>(
    spec: &NodeSpec,
    cluster: &Path,
    role: Role,
    make: &dyn Fn(&RunSpec) -> crate::Result<crate::cluster::Builder<K>>,
) -> crate::Result<NodeDone>
where
    K::Model: Send + 'static,
{
    let file = ClusterFile::load(cluster).map_err(Error::from)?;
    let fms = file.server().is_some();
    let p = file.peers();
    let id = match role {
        Role::Server => file.server().ok_or_else(|| {
            Error::Role(format!(
                "{} names no server: it is an SFB cluster (run `sfb peer` for each peer)",
                cluster.display()
            ))
        })?,
        Role::Peer(i) if i >= p => {
            return Err(Error::Role(format!(
                "--id {i} is not a peer of {} (it has {p} peers)",
                cluster.display()
            ))
            .into());
        }
        Role::Peer(i) if file.server() == Some(i) => {
            return Err(Error::Role(format!(
                "peer {i} is the cluster's server: run `sfb server --cluster {}`",
                cluster.display()
            ))
            .into());
        }
        Role::Peer(i) => i,
    };
    let key = if spec.key_on_stdin {
        Some(key_from_stdin()?)
    } else {
        if !spec.allow_open_key {
            file.check_key_permissions(id).map_err(Error::from)?;
        }
        None
    };
    let mut run = spec.run.clone();
    run.peers = file.workers();
    run.backend = if fms { Backend::Fms } else { Backend::Sfb };
    run.transport = crate::Transport::Libp2p;
    if let Some(q) = file.tree_fanout() {
        // A tree cluster runs the tree mode on the file's tree, whatever else is asked.
        if run
            .net
            .partial
            .is_some_and(|m| m != crate::PartialSpec::Tree)
        {
            return Err(Error::Role(format!(
                "{} is a tree cluster (tree_fanout = {q}): it runs --partial tree, not --partial {}",
                cluster.display(),
                run.net.partial.unwrap_or_default()
            ))
            .into());
        }
        run.net.partial = Some(crate::PartialSpec::Tree);
        run.topology.out_degree = Some(q);
    }
    run.validate()?;
    // A failed write of its metrics makes the node leave the run at once (its neighbours
    // go on under the run's peer-loss policy); it then fails, naming the file.
    let sink = Arc::new(RecordSink::create(run.output.metrics.as_deref())?);
    // The cluster file with the addresses exchanged on stdin, if they were.
    let resolved = std::sync::Mutex::new(None);
    let mut out = drive_node(
        (spec, &run, key.clone()),
        (file.clone(), &resolved),
        (id, role),
        fms,
        p,
        &sink,
        make,
    );
    // Cut off from the majority: pause, and get back in by state transfer once the links
    // heal, for up to the heal timeout. A hand-run peer only: a launcher's nodes share
    // one host, where a cut is a stopped process, and the launcher counts it lost.
    // A node that never heard from the run (refused, another file or key) is not cut
    // off: it was never in.
    let was_in = sink.last().iter().any(|r| r.bytes_received > 0);
    if let Err(first) = &out
        && !fms
        && !spec.owned_by_launcher
        && was_in
        && is_minority(first)
        && let Some(mut again) = heal_spec(&run)
    {
        // Back on the addresses of the first attempt (its own port too), not asking for
        // them again.
        let file = resolved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or_else(|| file.clone());
        let spec = &NodeSpec {
            exchange_addrs: false,
            key_on_stdin: false,
            ..spec.clone()
        };
        let until = std::time::Instant::now() + Duration::from_secs_f64(run.fault.heal_timeout_s);
        let me = file.core_id(id);
        tracing::warn!(
            "{me} is cut off from the majority of the run ({first}); it pauses and tries to \
             rejoin by state transfer for up to {} s (--heal-timeout)",
            run.fault.heal_timeout_s
        );
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            // A pause between attempts, so that a link still cut is not dialled in a loop.
            let gap = Duration::from_secs_f64((run.net.peer_timeout_s / 4.0).min(5.0));
            if std::time::Instant::now() + gap >= until || pause(gap)? {
                break;
            }
            again.fault.rejoin = true;
            let next = drive_node(
                (spec, &again, key.clone()),
                (file.clone(), &resolved),
                (id, role),
                fms,
                p,
                &sink,
                make,
            );
            match &next {
                Ok(_) => {
                    tracing::warn!("{me} is back in the run after its cut (attempt {attempt})");
                    out = next;
                    break;
                }
                // Asked to stop while it tried: it stays the node cut off.
                Err(e) if not_taken_back(e) && STOP_ASKED.load(Relaxed) => break,
                Err(e) if is_minority(e) || not_taken_back(e) => {
                    tracing::info!("{me}: not back yet (attempt {attempt}): {e}");
                }
                Err(_) => {
                    out = next;
                    break;
                }
            }
        }
    }
    if let Err(e) = &out {
        // A summary marked failed, from the node's last record.
        crate::records::write_partial_summary(&run, &e.to_string(), &sink.last());
    }
    out
}

/// A node of this process was asked to stop by a signal (it then stops pausing after a cut).
static STOP_ASKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Waits `gap` while listening for SIGTERM and SIGINT; whether one came.
fn pause(gap: Duration) -> crate::Result<bool> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("starting the async runtime"))?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(io("listening for SIGTERM"))?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(io("listening for SIGINT"))?;
        let asked = tokio::select! {
            () = tokio::time::sleep(gap) => false,
            _ = term.recv() => true,
            _ = int.recv() => true,
        };
        if asked {
            STOP_ASKED.store(true, Relaxed);
        }
        Ok(asked || STOP_ASKED.load(Relaxed))
    })
}

/// The driver's error inside `e`, if it is one.
fn net_error(e: &crate::Error) -> Option<&sfb_net::Error> {
    match e {
        crate::Error::Net(n) | crate::Error::Launch(Error::Net(n)) => Some(n),
        _ => None,
    }
}

/// Whether `e` is a node's stop as the minority of a cut.
fn is_minority(e: &crate::Error) -> bool {
    let core = match e {
        crate::Error::Core(c) => Some(c),
        _ => match net_error(e) {
            Some(sfb_net::Error::Peer { source, .. }) => Some(source),
            _ => None,
        },
    };
    matches!(core, Some(sfb_core::Error::Minority { .. }))
}

/// Whether `e` is a rejoining node's give-up: no neighbour took it back in time.
fn not_taken_back(e: &crate::Error) -> bool {
    matches!(net_error(e), Some(sfb_net::Error::NotTakenBack { .. }))
}

/// The spec of a node that pauses after a cut and rejoins, if it may: a heal timeout,
/// and a mode that can rejoin.
fn heal_spec(run: &RunSpec) -> Option<RunSpec> {
    if run.fault.heal_timeout_s <= 0.0 {
        return None;
    }
    let mut again = run.clone();
    again.fault.rejoin = true;
    again.fault.resume = false;
    again.fault.resume_at = None;
    again.validate().ok().map(|()| again)
}

/// Builds node `id` (in `role`) of `file` and drives it to the end, its records to `sink`
/// ([`run_node`]'s body).
fn drive_node<K: crate::cluster::ModelSource>(
    (spec, run, key): (&NodeSpec, &RunSpec, Option<Vec<u8>>),
    (file, resolved): (ClusterFile, &std::sync::Mutex<Option<ClusterFile>>),
    (id, role): (usize, Role),
    fms: bool,
    p: usize,
    sink: &Arc<RecordSink>,
    make: &dyn Fn(&RunSpec) -> crate::Result<crate::cluster::Builder<K>>,
) -> crate::Result<NodeDone>
where
    K::Model: Send + 'static,
{
    let mut builder = make(run)?;
    if !fms {
        // The cluster file's topology, not the spec's.
        builder = builder.out_lists((0..p).map(|i| file.out(i).to_vec()).collect());
    }
    let checkpoint = builder.checkpoint_store(if fms { "fms" } else { "sfb" })?;
    let ctx = NodeRun {
        spec,
        run,
        key,
        file,
        id,
        checkpoint,
        prep: builder.preprocessing(),
        agreement: builder.agreement(),
        sink: Arc::clone(sink),
        resolved,
    };
    match (fms, role) {
        (true, Role::Server) => {
            let server = builder.build_server(run.fms_push)?;
            let jd = server.replica().dim();
            let base = server.metrics().clone();
            let start = server.clock();
            ctx.drive(server, jd, true, base, start, |s| Finished {
                metrics: s.metrics().clone(),
                evaluation: None,
                checksum: s.replica().checksum(),
                w: s.replica().w().to_owned(),
            })
        }
        (true, _) => {
            let client = builder.build_client(id as u32, run.fms_push)?;
            let jd = client.w().dim();
            let base = client.metrics().clone();
            let start = client.clock();
            ctx.drive(client, jd, true, base, start, |c| Finished {
                metrics: c.metrics().clone(),
                evaluation: c.last_evaluation().cloned(),
                checksum: c.checksum(),
                w: c.w().to_owned(),
            })
        }
        (false, _) => {
            let mut engine = builder.build_peer(id as u32)?;
            if run.fault.rejoin {
                engine = engine.rejoining();
            }
            let jd = engine.replica().dim();
            let base = engine.metrics().clone();
            let start = engine.clock();
            ctx.drive(engine, jd, false, base, start, |e| Finished {
                metrics: e.metrics().clone(),
                evaluation: e.last_evaluation().cloned(),
                checksum: e.replica().checksum(),
                w: e.replica().w().to_owned(),
            })
        }
    }
}

/// What a finished node hands to its report.
struct Finished {
    metrics: PeerMetrics,
    evaluation: Option<sfb_core::Evaluation>,
    checksum: String,
    w: ndarray::Array2<f32>,
}

struct NodeRun<'a> {
    spec: &'a NodeSpec,
    run: &'a RunSpec,
    /// The private key handed over on stdin ([`NodeSpec::key_on_stdin`]).
    key: Option<Vec<u8>>,
    file: ClusterFile,
    id: usize,
    checkpoint: Option<Arc<crate::checkpoint::Store>>,
    /// What the node's data went through (kept by `--save-model`).
    prep: Option<sfb_models::Preprocess>,
    /// What every node must share ([`Cluster::agreement`](crate::Builder::agreement)).
    agreement: Vec<(String, String)>,
    /// The node's own metrics file (`run.output.metrics`).
    sink: Arc<RecordSink>,
    /// Where the cluster file goes once the addresses exchanged on stdin are in it.
    resolved: &'a std::sync::Mutex<Option<ClusterFile>>,
}

impl NodeRun<'_> {
    fn drive<N: sfb_core::StateMachine + Send + 'static>(
        self,
        node: N,
        jd: (usize, usize),
        full_w: bool,
        base: PeerMetrics,
        start_clock: u64,
        finished: impl FnOnce(&N) -> Finished,
    ) -> crate::Result<NodeDone> {
        let NodeRun {
            spec,
            run,
            key,
            mut file,
            id,
            checkpoint,
            prep,
            agreement,
            sink,
            resolved,
        } = self;
        // The graph this node trains on is the cluster file's, whatever the spec says.
        let topology = (!full_w).then(|| file.topology()).flatten().map(|t| {
            let mode = crate::cluster::mode_name(
                file.tree_fanout().is_some(),
                t.out_degree() + 1 >= file.peers(),
                run.net.relay,
                run.net.partial,
            );
            (
                t.out_degree(),
                sfb_core::metrics::TopologyInfo {
                    source: "cluster file".into(),
                    cost: t.cost(),
                    mode: Some(mode.into()),
                },
            )
        });
        let mut opts = node_options(&run.net);
        opts.key = key;
        // A coordinated stop: the launcher's `{"stop_at":T}` on stdin, or SIGTERM/SIGINT; a
        // failed write of the node's metrics makes it leave now (0).
        let stop = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
        opts.stop_at = Some(Arc::clone(&stop));
        let leave = Arc::clone(&stop);
        sink.on_failure(Box::new(move |_| {
            leave.store(0, std::sync::atomic::Ordering::Relaxed);
        }));
        // Straggling is a driver option: the same schedule as in memory.
        opts.stragglers = run.train.straggler.map_or(sfb_core::Stragglers::None, |s| {
            s.schedule(run.peers, run.train.seed)
        });
        // The records stream to the sinks; the node keeps only its final one.
        opts.keep = sfb_net::driver::Keep::Last;
        opts.checkpoint = checkpoint.map(crate::cluster::checkpoint_sink);
        opts.rejoin = run.fault.rejoin;
        if !full_w && run.net.relay {
            // Relayed batches share the arcs with the senders' own: room for a clock's worth
            // on the busiest arc, times the default's slack.
            let out: Vec<Vec<sfb_core::PeerId>> = (0..file.peers())
                .map(|i| {
                    file.out(i)
                        .iter()
                        .map(|&p| sfb_core::PeerId(p as u32))
                        .collect()
                })
                .collect();
            if let Ok(routes) = sfb_core::Routes::new(&out) {
                opts.queue_frames = opts.queue_frames.max(4 * routes.max_arc_load());
            }
        }
        if !full_w && run.net.send_parts > 1 {
            // A clock goes out as `send_parts` frames per out-link: room for two clocks'.
            opts.queue_frames = opts.queue_frames.max(2 * run.net.send_parts);
        }
        if !full_w {
            // SFB: after a loss every survivor repairs the cluster file's topology the same
            // way (sfb-topology's repair of the same set of lost peers).
            let out: Vec<Vec<usize>> = (0..file.peers()).map(|i| file.out(i).to_vec()).collect();
            opts.repair = crate::cluster::repair_fn(out, id, file.tree_fanout(), run.net.relay);
        }
        // A resumed node's streams carry the clocks from its checkpoint on.
        opts.start_clock = start_clock;
        let exchange = spec.exchange_addrs;
        let to_sink = Arc::clone(&sink);
        opts.progress = Some(Arc::new(move |r: &ClockRecord| {
            // Streamed as records happen; the sink keeps only the last.
            to_sink.write(r);
            if exchange {
                say(&Event::Record(r.clone()));
            }
        }));
        let shape = RunShape {
            j: jd.0,
            d: jd.1,
            batch: run.train.batch,
            clocks: run.train.clocks,
            full_w,
            dtype: run.net.wire,
            agreement,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(io("starting the async runtime"))?;
        let outcome = rt.block_on(async {
            // SIGTERM (and SIGINT, unless the launcher owns this node: a terminal's Ctrl-C
            // reaches the whole process group, and the launcher stops every node at one
            // clock) ends this node's run at its current clock: it exits 0 with its records
            // and a summary marked stopped; its neighbours see it leave.
            let owned = spec.owned_by_launcher;
            let on_signal = Arc::clone(&stop);
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .map_err(io("listening for SIGTERM"))?;
            let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .map_err(io("listening for SIGINT"))?;
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => if owned { continue },
                    }
                    // 0: stop at whatever clock the node is at.
                    on_signal.store(0, std::sync::atomic::Ordering::Relaxed);
                    STOP_ASKED.store(true, Relaxed);
                }
            });
            let started = Node::start(&file, id, &shape, &opts).await?;
            if exchange {
                say(&Event::Listening(started.listen_addr().to_string()));
                let line = read_addrs_line(id, spec, Arc::clone(&stop)).await?;
                let a: Addrs = serde_json::from_str(&line).map_err(|source| Error::Json {
                    what: "the addresses on stdin".into(),
                    source,
                })?;
                let addrs = a
                    .addrs
                    .iter()
                    .map(|x| {
                        x.parse()
                            .map_err(|e| Error::Role(format!("address {x:?} on stdin: {e}")))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                file.set_addrs(addrs).map_err(Error::from)?;
                *resolved
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(file.clone());
            }
            Ok::<_, crate::Error>(
                started
                    .run(&file, node, &shape, &opts)
                    .await
                    .map_err(Error::from)?,
            )
        })?;
        drop(rt);
        sink.finish()?;
        let f = finished(&outcome.node);
        let mut metrics = f.metrics;
        // The transport's counts include framing; prefer them to the node's payload counts
        // (a resumed node adds them to what its checkpoint had counted).
        metrics.bytes_sent = base.bytes_sent + outcome.stats.total_sent();
        metrics.bytes_received = base.bytes_received + outcome.stats.total_received();
        let (j, d) = f.w.dim();
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        let report = NodeReport {
            report: PeerReport {
                peer: file.core_id(id).0,
                wall_s: outcome.records.last().map_or(0.0, |r| r.wall_s),
                metrics,
                objective: f.evaluation.as_ref().map(|e| e.objective),
                test_accuracy: f.evaluation.as_ref().and_then(|e| e.accuracy),
                checksum: f.checksum,
            },
            j,
            d,
            net_bytes_sent: outcome.stats.total_sent(),
            net_bytes_received: outcome.stats.total_received(),
            send_span_s: outcome.stats.send_span_s(),
            bad_frames: load(&outcome.stats.bad_frames),
            refused_streams: load(&outcome.stats.refused_streams),
        };
        if let Some(dir) = &spec.out_dir {
            write_w(&dir.join(format!("node-{id}.w")), &f.w)?;
            write_json(&dir.join(format!("node-{id}.json")), &report, false)?;
        }
        // One node's summary: its own figures and its one checksum.
        let node = NodeOutcome {
            report: report.report.clone(),
            w: f.w.view(),
            extra: None,
        };
        let mut summary = summarize(run.run_info(), &[node], None);
        if let Some((q, info)) = topology {
            summary.out_degree = q;
            summary.topology = Some(info);
        }
        if stop.load(std::sync::atomic::Ordering::Relaxed) != u64::MAX {
            let at = report.report.metrics.clocks;
            summary.clocks = at;
            summary.failed = Some(format!("stopped at clock {at} on request"));
        }
        if let Some(path) = &run.output.summary {
            write_json(path, &summary, true)?;
        }
        if let Some(path) = &run.output.save_model {
            crate::records::save_model(path, run, prep, f.w.view())?;
        }
        Ok(NodeDone {
            summary,
            report,
            w: f.w,
        })
    }
}

/// Writes W raw (little-endian f32, row-major).
pub fn write_w(path: &Path, w: &ndarray::Array2<f32>) -> Result<(), Error> {
    let w = w.as_standard_layout();
    let bytes = bytemuck::cast_slice::<f32, u8>(w.as_slice().expect("standard layout"));
    std::fs::write(path, bytes).map_err(io(format!("writing {}", path.display())))
}

fn write_json<T: Serialize>(path: &Path, value: &T, pretty: bool) -> Result<(), Error> {
    let text = if pretty {
        serde_json::to_string_pretty(value).map(|s| s + "\n")
    } else {
        serde_json::to_string(value)
    }
    .map_err(|source| Error::Json {
        what: format!("{}", path.display()),
        source,
    })?;
    std::fs::write(path, text).map_err(io(format!("writing {}", path.display())))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, Error> {
    let text = std::fs::read_to_string(path).map_err(io(format!("reading {}", path.display())))?;
    serde_json::from_str(&text).map_err(|source| Error::Json {
        what: format!("{}", path.display()),
        source,
    })
}

/// Reads the parent's [`Addrs`] line from stdin on a plain thread (a blocking read on
/// the runtime would keep it from shutting down). A node started by the launcher
/// ([`NodeSpec::owned_by_launcher`]) then keeps reading: its stdin closing before the run
/// is over means the launcher died (even by SIGKILL), and the node stops, taking the
/// launcher's directory (cluster file, keys) with it.
async fn read_addrs_line(
    id: usize,
    spec: &NodeSpec,
    stop: Arc<std::sync::atomic::AtomicU64>,
) -> Result<String, Error> {
    use std::io::{BufRead, Read};
    let launcher_dir = if spec.owned_by_launcher {
        Some(spec.out_dir.clone())
    } else {
        None
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut line = String::new();
        let first = stdin.read_line(&mut line).map(|_| line);
        let _ = tx.send(first);
        let Some(dir) = launcher_dir else { return };
        // Then the launcher's requests, one JSON line each, until it closes stdin.
        let mut line = String::new();
        while matches!(stdin.read_line(&mut line), Ok(n) if n > 0) {
            if let Ok(Request::StopAt(t)) = serde_json::from_str::<Request>(line.trim()) {
                stop.store(t, std::sync::atomic::Ordering::Relaxed);
            }
            line.clear();
        }
        let _ = stdin.read(&mut [0u8; 1]);
        orphaned(id, dir.as_deref());
    });
    let line = rx
        .await
        .map_err(|_| Error::Role("the stdin reader stopped".into()))?
        .map_err(io("reading node addresses from stdin"))?;
    if line.is_empty() {
        return Err(Error::Role(
            "stdin closed before the launcher sent the addresses".into(),
        ));
    }
    Ok(line)
}

/// A launched node whose launcher died: removes the launcher's directory (cluster file,
/// keys) if it is given, and exits.
fn orphaned(id: usize, launcher_dir: Option<&Path>) -> ! {
    eprintln!("node {id}: the launcher is gone (its end of stdin closed): stopping");
    if let Some(dir) = launcher_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    std::process::exit(1);
}

/// One protocol line on stdout.
fn say(e: &Event) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, e);
    let _ = writeln!(out);
    let _ = out.flush();
}

/// The libp2p driver's options of a validated spec.
fn node_options(n: &NetOptions) -> Options {
    Options {
        liveness_timeout: Duration::from_secs_f64(n.peer_timeout_s),
        startup_timeout: Duration::from_secs_f64(n.startup_timeout_s),
        bandwidth: n
            .bandwidth
            .map(|r| Arc::new(Bucket::new(r, n.burst.max(1)))),
        ..Options::default()
    }
}

/// Threads of each child's kernel pool when `nodes` processes share this host: this
/// host's cores divided among them (at least one), unless `RAYON_NUM_THREADS` is set for
/// the launcher, which the children then inherit as it is (`None`).
///
/// Left to rayon's default every child would start a pool of one thread per core: 8
/// peers on 2 cores ran 16 kernel threads whose spinning and preemption doubled
/// `compute_sv` against one thread each (measured at J = D = 4096, K = 16).
fn child_threads(nodes: usize) -> Option<String> {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    Some(threads_each(cores, nodes).to_string())
}

/// `cores` divided among `nodes` processes, at least one thread each.
fn threads_each(cores: usize, nodes: usize) -> usize {
    (cores / nodes.max(1)).max(1)
}

/// Runs [`RunSpec`]s over libp2p as local processes of the `sfb` executable.
#[derive(Clone)]
pub struct Launcher {
    exe: PathBuf,
    progress: Option<Progress>,
    sink: Option<Arc<RecordSink>>,
}

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launcher")
            .field("exe", &self.exe)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl Launcher {
    /// A launcher that starts `exe` (the `sfb` binary: `std::env::current_exe()` from
    /// the binary itself, `env!("CARGO_BIN_EXE_sfb")` in its tests).
    pub fn new(exe: impl Into<PathBuf>) -> Self {
        Self {
            exe: exe.into(),
            progress: None,
            sink: None,
        }
    }

    /// The executable named by the environment variable `SFB_EXE`. There is no other
    /// default: a program launches itself by naming its own executable
    /// ([`Launcher::new`]; `sfb_cli::App` does).
    ///
    /// # Errors
    /// [`Error::Io`] when `SFB_EXE` is not set.
    pub fn from_env() -> Result<Self, Error> {
        match std::env::var_os("SFB_EXE") {
            Some(p) => Ok(Self::new(PathBuf::from(p))),
            None => Err(Error::Io {
                what: "choosing the executable to start for each node".into(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no executable named: set SFB_EXE or use Launcher::new (sfb run names its own)",
                ),
            }),
        }
    }

    /// Hear `(node, clocks completed)` for every clock every child completes (node `P` is
    /// the FMS server). With a callback the children's stderr is kept (and shown only if
    /// the run fails); without, it goes to this process's stderr.
    pub fn progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Hand every node's records to `sink` as they arrive (which decides the metrics file,
    /// instead of the spec's `output.metrics`), so that the caller still has each node's
    /// last record when the run fails ([`RecordSink::last`]).
    pub fn record_sink(mut self, sink: Arc<RecordSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Runs `spec` (transport libp2p): on loopback, or with `spec.net.netns` each node in
    /// its own network namespace behind a tbf-shaped link at `spec.net.bandwidth`
    /// ([`crate::netns`]; the children then get no token bucket). Returns the merged
    /// summary (through [`summarize`]) and every node's records, peers in order then the
    /// server.
    ///
    /// # Errors
    /// [`RunSpec::validate`]'s errors; [`Error::Netns`]; [`Error::Node`] when a child
    /// fails (the others are stopped); [`Error::Interrupted`]; file errors.
    pub fn run(&self, spec: &RunSpec) -> crate::Result<Outcome> {
        self.run_with(spec, &Cluster::from_spec)
    }

    /// [`run`](Self::run) for any model: `make` builds the run's builder from the spec
    /// here (its checks, default step, checkpoints and topology); every node builds its
    /// own from the same spec in its process ([`crate::run::run_with`]).
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn run_with<K: crate::cluster::ModelSource>(
        &self,
        spec: &RunSpec,
        make: &dyn Fn(&RunSpec) -> crate::Result<crate::cluster::Builder<K>>,
    ) -> crate::Result<Outcome> {
        spec.validate()?;
        let p = spec.peers;
        let fms = spec.backend == Backend::Fms;
        let nodes = p + usize::from(fms);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(io("starting the async runtime"))?;
        // SIGINT and SIGTERM are heard from here on, in every phase: before the children
        // start, one ends the launch between two steps (nothing is left behind: the
        // temporary directory and its keys go with it); once they run, see `children`.
        let mut signals = rt.block_on(Signals::listen())?;
        // Set up before anything else can fail; torn down (drop) after the children end.
        let shaping = match (spec.net.netns, spec.net.bandwidth) {
            (true, Some(rate)) => {
                Some(Netns::setup(nodes, rate, spec.net.burst).map_err(Error::from)?)
            }
            _ => None,
        };
        signals.check()?;
        let dir = tempfile::Builder::new()
            .prefix("sfb-run-")
            .tempdir()
            .map_err(io("creating a temporary directory"))?;
        let hosts: Vec<String> = match &shaping {
            Some(n) => (0..nodes).map(|i| n.addr(i)).collect(),
            None => vec!["127.0.0.1".to_string()],
        };
        let cluster_path = dir.path().join("cluster.toml");
        // Every node's replica is on this machine: refuse before starting any.
        let mut builder = make(spec)?;
        signals.check()?;
        builder.check_fits(nodes)?;
        // Processes, pipes and sockets: before the topology is built or anything spawned.
        let neighbours = match spec.backend {
            Backend::Fms => p,
            Backend::Sfb => (2 * spec.topology.out_degree.unwrap_or(p.saturating_sub(1)))
                .min(p.saturating_sub(1)),
        };
        check_host(nodes, neighbours, &HostLimits::of_this_machine())?;
        // A default learning rate may depend on the data (`default_lr_for_data`): resolve it
        // once here, so every node and the summary use this one.
        let resolved = RunSpec {
            train: crate::TrainOptions {
                lr: Some(builder.resolved_optimizer().1),
                ..spec.train.clone()
            },
            ..spec.clone()
        };
        let mut resolved = resolved;
        // The partial-broadcast mode, when none is named (`crate::auto`): every node and
        // the cluster file (a tree's) follow this one.
        resolved.net.partial = builder.resolved_partial()?;
        // Checkpoints: the directory is checked, and the clock to resume from found, once
        // here, before any node starts.
        let backend = if fms { "fms" } else { "sfb" };
        builder.checkpoint_store(backend)?;
        if let Some((_, clock)) = builder.resume_from(backend)? {
            resolved.fault.resume = false;
            resolved.fault.resume_at = Some(clock);
        }
        let spec = &resolved;
        let mut topology = None;
        // No key reaches the disk: each node gets its own on its stdin (`key_on_stdin`).
        let (_, keys) = if fms {
            ClusterFile::init_for_launch(&cluster_path, Layout::Fms { clients: p }, &hosts)
        } else if let Some(fanout) = spec.tree_fanout() {
            topology = Some(builder.topology_info()?);
            let layout = Layout::Tree { peers: p, fanout };
            ClusterFile::init_for_launch(&cluster_path, layout, &hosts)
        } else {
            let out = builder.resolve_topology()?;
            topology = Some(builder.topology_info()?);
            signals.check()?;
            let t = sfb_topology::Topology::new(out)?;
            ClusterFile::init_for_launch(&cluster_path, Layout::Topology(&t), &hosts)
        }
        .map_err(Error::from)?;
        signals.check()?;
        let mut child = NodeSpec {
            run: spec.clone(),
            exchange_addrs: true,
            out_dir: Some(dir.path().to_path_buf()),
            owned_by_launcher: true,
            allow_open_key: false,
            key_on_stdin: true,
        };
        child.run.output = Default::default();
        child.run.net.netns = false;
        // The launcher changes the links' rates; the nodes only see what that does.
        child.run.net.netns_slow.clear();
        if shaping.is_some() {
            // The kernel shapes the links: no token bucket on top.
            child.run.net.bandwidth = None;
        }
        let spec_path = dir.path().join("node.json");
        write_json(&spec_path, &child, true)?;
        let prefixes: Vec<Vec<String>> = (0..nodes)
            .map(|i| shaping.as_ref().map_or_else(Vec::new, |n| n.exec_prefix(i)))
            .collect();
        // Under a continue policy a node that dies is lost, not the run's end.
        let survive = spec
            .fault
            .peer_loss(&spec.train.consistency, spec.net.relay || spec.tree())
            == sfb_core::PeerLoss::Continue;
        // How far ahead of the fastest node reported a coordinated stop is set, so that no
        // node is past it when the request arrives: the consistency model's spread, plus 2.
        let margin = match spec.train.consistency.to_core().staleness_bound() {
            Some(s) => s + 2,
            None => spec.train.max_drift + 2,
        };
        // A streaming peer scans its data file before it listens: minutes for a large one.
        let listen = LISTEN_TIMEOUT.max(Duration::from_secs_f64(spec.net.startup_timeout_s));
        let sink = match &self.sink {
            Some(s) => Arc::clone(s),
            None => Arc::new(
                RecordSink::create(spec.output.metrics.as_deref())?
                    .keep_all(spec.output.keep_records),
            ),
        };
        // `--netns-slow`: the qdisc changes due during the run, and those made.
        let changes = shaping
            .as_ref()
            .map(|n| n.rate_changes(&spec.net.netns_slow))
            .unwrap_or_default();
        let changed = Arc::new(Mutex::new(Vec::new()));
        let ran = rt.block_on(self.children(
            &spec_path,
            &cluster_path,
            (&prefixes, &keys),
            (fms, survive),
            (margin, listen, (changes, &changed)),
            (&sink, &mut signals),
        ));
        // The runtime (and with it every child still running) ends before the namespaces
        // are torn down.
        drop(rt);
        let (lost, stopped_at) = match ran {
            Ok(r) => r,
            Err(e) => {
                // What the nodes recorded before the failure is in the metrics file.
                if let Err(w) = sink.finish() {
                    tracing::warn!("{w}");
                }
                return Err(e.into());
            }
        };
        let mut outcome = merge(dir.path(), spec, fms, &lost, &sink)?;
        outcome.summary.topology = topology;
        if let Some(t) = stopped_at {
            let resume = if spec.fault.checkpoint_dir.is_some() {
                "every node checkpointed there: continue with --resume"
            } else {
                "no checkpoints (--checkpoint-dir): it cannot be resumed"
            };
            let why = match sink.failure() {
                Some(e) => e,
                None => "stopped by a signal".into(),
            };
            outcome.summary.clocks = t.min(outcome.summary.clocks);
            outcome.summary.failed = Some(format!("{why}: the run stopped at clock {t}; {resume}"));
        }
        if let Some(n) = &shaping {
            outcome.summary.transport = "libp2p+netns".into();
            add_qdisc_stats(&mut outcome.summary, n);
            let made = changed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .len();
            if !spec.net.netns_slow.is_empty() {
                outcome
                    .summary
                    .extra
                    .insert("netns_rate_changes".into(), made as f64);
            }
        }
        drop(shaping);
        Ok(outcome)
    }

    /// Starts every node, exchanges addresses, waits for all; the first failure stops
    /// the rest (dropping the [`JoinSet`] kills them). With `survive`, a node killed by a
    /// signal once the run has begun is lost, not a failure: the others go on (they drop
    /// it themselves) and its index is returned. Meanwhile it makes `changes`
    /// ([`RateSchedule`]) at their times from the nodes' first step.
    async fn children(
        &self,
        spec: &Path,
        cluster: &Path,
        (prefixes, keys): (&[Vec<String>], &[Vec<u8>]),
        (fms, survive): (bool, bool),
        (margin, listen, (changes, changed)): (u64, Duration, RateSchedule<'_>),
        (sink, signals): (&Arc<RecordSink>, &mut Signals),
    ) -> Result<(Vec<usize>, Option<u64>), Error> {
        let n = prefixes.len();
        let name = |i: usize| {
            if fms && i == n - 1 {
                "server".to_string()
            } else {
                format!("peer {i}")
            }
        };
        // A failed write of the metrics stops the run as a signal does.
        let (failed_tx, mut write_failed) = tokio::sync::mpsc::unbounded_channel::<()>();
        sink.on_failure(Box::new(move |_| {
            let _ = failed_tx.send(());
        }));
        let (tx, mut listening) = tokio::sync::mpsc::channel::<(usize, String)>(n.max(1));
        let mut set: JoinSet<(usize, Result<std::process::ExitStatus, Error>)> = JoinSet::new();
        let mut stdins = Vec::new();
        let tails: Vec<Arc<Mutex<std::collections::VecDeque<String>>>> =
            (0..n).map(|_| Arc::default()).collect();
        // The highest clock any node has reported, and when the nodes started.
        let fastest = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let started = std::time::Instant::now();
        // When the nodes took their first step, on this process's clock: the first record
        // to arrive, less the wall time it reports (what `--netns-slow`'s windows count
        // from, as the records' `wall_s` do).
        let (origin_tx, origin_rx) = tokio::sync::watch::channel(None::<tokio::time::Instant>);
        let threads = child_threads(n);
        if let Some(t) = &threads {
            tracing::info!("{n} nodes on this host: RAYON_NUM_THREADS={t} each");
        }
        for (i, prefix) in prefixes.iter().enumerate() {
            // A signal while the nodes are started: those started are killed (dropping
            // `set`) and see their stdin close, which removes the directory too.
            signals.check()?;
            let mut cmd = match prefix.split_first() {
                Some((prog, args)) => {
                    let mut c = tokio::process::Command::new(prog);
                    c.args(args).arg(&self.exe);
                    c
                }
                None => tokio::process::Command::new(&self.exe),
            };
            if fms && i == n - 1 {
                cmd.arg("server");
            } else {
                cmd.arg("peer").arg("--id").arg(i.to_string());
            }
            cmd.arg("--spec")
                .arg(spec)
                .arg("--cluster")
                .arg(cluster)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                // With a progress callback the caller draws progress: keep the children's
                // logs out of the way, and show them only if the run fails.
                .stderr(if self.progress.is_some() {
                    Stdio::piped()
                } else {
                    Stdio::inherit()
                })
                .kill_on_drop(true);
            if let Some(t) = &threads {
                cmd.env("RAYON_NUM_THREADS", t);
            }
            let mut c = cmd.spawn().map_err(io(format!("starting {}", name(i))))?;
            let mut stdin = c.stdin.take().expect("piped stdin");
            // Its private key, first on its stdin: it never touches the disk.
            let line = format!("{}\n", to_hex(&keys[i]));
            stdin
                .write_all(line.as_bytes())
                .await
                .map_err(io(format!("handing {} its key", name(i))))?;
            stdins.push(stdin);
            let out = c.stdout.take().expect("piped stdout");
            let err = c.stderr.take();
            let tail = Arc::clone(&tails[i]);
            let tx = tx.clone();
            let progress = self.progress.clone();
            let fastest = Arc::clone(&fastest);
            let sink = Arc::clone(sink);
            let origin_tx = origin_tx.clone();
            set.spawn(async move {
                // The child lives in this task: aborting the task kills it.
                let mut c = c;
                let keep_tail = async {
                    if let Some(err) = err {
                        let mut lines = BufReader::new(err).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            let mut t = tail
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner);
                            if t.len() == TAIL_LINES {
                                t.pop_front();
                            }
                            t.push_back(line);
                        }
                    }
                };
                let events = async {
                    let mut lines = BufReader::new(out).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        match serde_json::from_str::<Event>(&line) {
                            Ok(Event::Listening(a)) => {
                                let _ = tx.send((i, a)).await;
                            }
                            Ok(Event::Record(r)) => {
                                origin_tx.send_if_modified(|o| {
                                    if o.is_some() {
                                        return false;
                                    }
                                    let back =
                                        Duration::try_from_secs_f64(r.wall_s).unwrap_or_default();
                                    let now = tokio::time::Instant::now();
                                    *o = Some(now.checked_sub(back).unwrap_or(now));
                                    true
                                });
                                let k = r.clock;
                                fastest.fetch_max(k, std::sync::atomic::Ordering::Relaxed);
                                sink.write(&r);
                                if let Some(f) = &progress {
                                    f(i, k);
                                }
                            }
                            // Anything else a child prints is not for the launcher.
                            Err(_) => {}
                        }
                    }
                };
                tokio::join!(keep_tail, events);
                (i, c.wait().await.map_err(io("waiting for a child")))
            });
        }
        drop(tx);
        let tail = |i: usize| -> Vec<String> {
            tails[i]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .cloned()
                .collect()
        };
        let failed = |i: usize, reason: String| Error::Node {
            node: name(i),
            reason,
            stderr: tail(i),
        };
        // Every node's real listen address, then tell everyone.
        let mut addrs = vec![None; n];
        let deadline = tokio::time::Instant::now() + listen;
        while addrs.iter().any(Option::is_none) {
            tokio::select! {
                got = listening.recv() => match got {
                    Some((i, a)) => addrs[i] = Some(a),
                    None => break,
                },
                Some(done) = set.join_next() => {
                    let (i, _) = done.expect("node task panicked");
                    if addrs[i].is_none() {
                        // Let its stderr reach the tail before reporting.
                        return Err(failed(i, "exited before listening".into()));
                    }
                }
                Some(()) = signals.rx.recv() => return Err(Error::Interrupted),
                () = tokio::time::sleep_until(deadline) => {
                    let i = addrs.iter().position(Option::is_none).unwrap_or(0);
                    return Err(failed(i, format!("did not say where it listens within {listen:?}")));
                }
            }
        }
        let Some(addrs) = addrs.into_iter().collect::<Option<Vec<String>>>() else {
            return Err(Error::Node {
                node: "a node".into(),
                reason: "closed its stdout before listening".into(),
                stderr: Vec::new(),
            });
        };
        let line = serde_json::to_string(&Addrs { addrs }).expect("plain strings") + "\n";
        // Each child's stdin stays open until this function returns: a child that sees it
        // close early knows the launcher died and stops.
        for (i, stdin) in stdins.iter_mut().enumerate() {
            // A child that already failed shows up in the wait below.
            if let Err(e) = stdin.write_all(line.as_bytes()).await {
                tracing::debug!("{}: {e}", name(i));
            }
        }
        // Wait for all; the first failure stops the rest. The first Ctrl-C or SIGTERM asks
        // every node to stop at one clock (a coordinated stop, checkpointed if the run
        // checkpoints); a second one kills them.
        // The rate changes, each at its time from the nodes' first step; one that fails
        // fails the run (it would not be the run asked for). Dropping `timers` when this
        // returns stops the schedule.
        let (change_failed_tx, mut change_failed) = tokio::sync::mpsc::channel(1);
        let mut timers = JoinSet::new();
        if !changes.is_empty() {
            timers.spawn(rate_schedule(
                changes,
                origin_rx,
                Arc::clone(changed),
                change_failed_tx,
            ));
        }
        let mut lost = Vec::new();
        let mut stopping: Option<u64> = None;
        loop {
            let signalled = tokio::select! {
                Some(e) = change_failed.recv() => return Err(Error::from(e)),
                done = set.join_next() => {
                    let Some(done) = done else { return Ok((lost, stopping)) };
                    let (i, status) = done.expect("node task panicked");
                    let s = match status {
                        Ok(s) if s.success() => continue,
                        Ok(s) => s,
                        Err(e) => return Err(failed(i, e.to_string())),
                    };
                    let signal = std::os::unix::process::ExitStatusExt::signal(&s);
                    let server = fms && i == n - 1;
                    if survive && !server && s.code() == Some(i32::from(CUT_OFF_EXIT)) {
                        tracing::warn!(
                            "{} stopped, cut off from the run; the others train on without it",
                            name(i)
                        );
                        lost.push(i);
                        if lost.len() + usize::from(fms) == n {
                            return Err(failed(
                                i,
                                "stopped cut off, as every other node did: no side of the \
                                 partition holds a majority of the run's peers"
                                    .into(),
                            ));
                        }
                        continue;
                    }
                    if survive && !server && let Some(sig) = signal {
                        tracing::warn!(
                            "{} died (killed by signal {sig}); the others train on without it",
                            name(i)
                        );
                        lost.push(i);
                        continue;
                    }
                    // The first to exit may be a survivor reporting a lost neighbour: give
                    // the others a moment, and blame a node that was killed, if one was.
                    let (i, s) = blame(&mut set, i, s).await;
                    let why = match std::os::unix::process::ExitStatusExt::signal(&s) {
                        Some(sig) => format!("died (killed by signal {sig})"),
                        None => format!("failed ({s})"),
                    };
                    return Err(failed(i, why));
                }
                Some(()) = signals.rx.recv() => true,
                Some(()) = write_failed.recv() => {
                    if stopping.is_some() {
                        continue;
                    }
                    tracing::warn!("{}", sink.failure().unwrap_or_default());
                    true
                }
            };
            if signalled {
                if stopping.is_some() {
                    return Err(Error::Interrupted);
                }
                let t = stop_clock(
                    fastest.load(std::sync::atomic::Ordering::Relaxed),
                    margin,
                    started.elapsed(),
                );
                tracing::warn!(
                    "stopping every node at clock {t} (press Ctrl-C again to kill them now)"
                );
                let line = serde_json::to_string(&Request::StopAt(t)).expect("plain") + "\n";
                for stdin in &mut stdins {
                    let _ = stdin.write_all(line.as_bytes()).await;
                    let _ = stdin.flush().await;
                }
                stopping = Some(t);
            }
        }
    }
}

/// `--netns-slow`'s qdisc changes, in the order they are due, and where those made go.
type RateSchedule<'a> = (
    Vec<netns::RateChange>,
    &'a Arc<Mutex<Vec<netns::RateChange>>>,
);

/// Makes each of `changes` ([`Netns::rate_changes`]) at its time from the nodes' first
/// step (`origin`, once known), logging it and keeping it in `changed`; the first that
/// fails goes to `failed`, and the schedule ends.
async fn rate_schedule(
    changes: Vec<netns::RateChange>,
    mut origin: tokio::sync::watch::Receiver<Option<tokio::time::Instant>>,
    changed: Arc<Mutex<Vec<netns::RateChange>>>,
    failed: tokio::sync::mpsc::Sender<netns::Error>,
) {
    let Ok(Some(start)) = origin.wait_for(Option::is_some).await.map(|o| *o) else {
        return;
    };
    for c in changes {
        tokio::time::sleep_until(start + Duration::try_from_secs_f64(c.at_s).unwrap_or_default())
            .await;
        let done = tokio::task::spawn_blocking(move || c.apply().map(|()| c)).await;
        match done {
            Ok(Ok(c)) => {
                tracing::info!(
                    "--netns-slow: node {} at {:.3} Mbit/s from {:.2} s",
                    c.node,
                    c.rate.0 * 8e-6,
                    start.elapsed().as_secs_f64()
                );
                changed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(c);
            }
            Ok(Err(e)) => {
                let _ = failed.send(e).await;
                return;
            }
            // The runtime is shutting down.
            Err(_) => return,
        }
    }
}

/// SIGINT and SIGTERM, heard by the launcher from its first step: each delivery is one
/// message on `rx`. (Registering replaces the signals' default action, killing the
/// process, for the rest of its life.)
struct Signals {
    rx: tokio::sync::mpsc::UnboundedReceiver<()>,
}

impl Signals {
    /// Starts listening (on the current runtime).
    async fn listen() -> Result<Self, Error> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(io("listening for SIGTERM"))?;
        let mut int = signal(SignalKind::interrupt()).map_err(io("listening for SIGINT"))?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    Some(()) = term.recv() => {}
                    Some(()) = int.recv() => {}
                    else => return,
                }
                if tx.send(()).is_err() {
                    return;
                }
            }
        });
        Ok(Self { rx })
    }

    /// [`Error::Interrupted`] if a signal came since the last look.
    fn check(&mut self) -> Result<(), Error> {
        match self.rx.try_recv() {
            Ok(()) => Err(Error::Interrupted),
            Err(_) => Ok(()),
        }
    }
}

/// How far ahead, in time, a coordinated stop is set: the nodes' progress lines reach the
/// launcher late (a busy machine delays them by several clocks of a small model), and a
/// node already past the stop clock would stop at its own, alone.
const STOP_LEAD: Duration = Duration::from_millis(500);

/// The clock a coordinated stop is set at: the fastest node's reported clock, plus the
/// consistency model's spread (`margin`), plus the clocks the run makes in [`STOP_LEAD`]
/// at its average pace so far (`fastest` clocks in `elapsed`).
fn stop_clock(fastest: u64, margin: u64, elapsed: Duration) -> u64 {
    let per_s = fastest as f64 / elapsed.as_secs_f64().max(1e-3);
    let lead = (per_s * STOP_LEAD.as_secs_f64()).ceil() as u64;
    fastest.saturating_add(margin).saturating_add(lead)
}

/// How long, after a node fails, the launcher waits for others to end before it reports
/// which node failed first.
const BLAME_WINDOW: Duration = Duration::from_secs(2);

/// The node to report after node `i` failed with `status`: the first node, among those
/// that end within [`BLAME_WINDOW`], that was killed by a signal (it died; the others
/// only noticed), else `i`.
async fn blame(
    set: &mut JoinSet<(usize, Result<std::process::ExitStatus, Error>)>,
    i: usize,
    status: std::process::ExitStatus,
) -> (usize, std::process::ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    if status.signal().is_some() {
        return (i, status);
    }
    let deadline = tokio::time::Instant::now() + BLAME_WINDOW;
    while let Ok(Some(done)) = tokio::time::timeout_at(deadline, set.join_next()).await {
        if let Ok((j, Ok(s))) = done
            && s.signal().is_some()
        {
            return (j, s);
        }
    }
    (i, status)
}

/// The run's outcome from the children's files and the records `sink` received: one
/// [`summarize`] over the workers (and the FMS server's counters).
fn merge(
    dir: &Path,
    spec: &RunSpec,
    fms: bool,
    lost: &[usize],
    sink: &RecordSink,
) -> crate::Result<Outcome> {
    let p = spec.peers;
    let mut reports = Vec::new();
    let mut server = None;
    let mut ws = Vec::new();
    for i in 0..p + usize::from(fms) {
        if lost.contains(&i) {
            // Its records up to its loss are in the metrics; its figures are not in the
            // survivors' summary.
            continue;
        }
        let r: NodeReport = read_json(&dir.join(format!("node-{i}.json")))?;
        if i == p {
            server = Some(r.report.metrics.clone());
            continue;
        }
        {
            let wpath = dir.join(format!("node-{i}.w"));
            let bytes =
                std::fs::read(&wpath).map_err(io(format!("reading {}", wpath.display())))?;
            let w =
                ndarray::Array2::from_shape_vec((r.j, r.d), bytemuck::pod_collect_to_vec(&bytes))
                    .map_err(|e| Error::Role(format!("{}: {e}", wpath.display())))?;
            ws.push(w);
        }
        reports.push(r);
    }
    // A node's report carries no model-specific figures: the summary has none.
    let nodes: Vec<NodeOutcome<'_>> = reports
        .iter()
        .zip(&ws)
        .map(|(r, w)| NodeOutcome {
            report: r.report.clone(),
            w: w.view(),
            extra: None,
        })
        .collect();
    let summary = summarize(spec.run_info(), &nodes, server.as_ref());
    // A failed write has stopped the run already; the caller says so in the summary.
    if !sink.failed() {
        sink.finish()?;
    }
    Ok(Outcome {
        summary,
        records: sink.records(),
        w: ws.into_iter().next(),
    })
}

/// Counters of every node's tbf qdisc and TCP stack, summed, as summary extras: bytes on
/// the wire (link-layer headers included), drops, waits for tokens, TCP retransmissions.
fn add_qdisc_stats(summary: &mut Summary, n: &Netns) {
    let mut total = netns::QdiscStats::default();
    for i in 0..n.nodes() {
        match n.stats(i) {
            Ok(s) => {
                total.bytes += s.bytes;
                total.packets += s.packets;
                total.dropped += s.dropped;
                total.overlimits += s.overlimits;
            }
            Err(e) => {
                tracing::warn!("node {i}: {e}");
                return;
            }
        }
    }
    let mut retransmits = 0;
    for i in 0..n.nodes() {
        match n.tcp_retransmits(i) {
            Ok(r) => retransmits += r,
            Err(e) => tracing::warn!("node {i}: {e}"),
        }
    }
    for (k, v) in [
        ("tcp_retransmits", retransmits),
        ("tbf_bytes_sent", total.bytes),
        ("tbf_packets", total.packets),
        ("tbf_dropped", total.dropped),
        ("tbf_overlimits", total.overlimits),
    ] {
        summary.extra.insert(k.into(), v as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_set_half_a_second_of_clocks_ahead() {
        // 1000 clocks in 2 s: 250 clocks of lead, plus the margin.
        assert_eq!(stop_clock(1000, 3, Duration::from_secs(2)), 1253);
        // Nothing reported yet: the margin alone.
        assert_eq!(stop_clock(0, 3, Duration::from_secs(1)), 3);
    }

    #[test]
    fn co_located_nodes_share_the_cores() {
        assert_eq!(threads_each(2, 8), 1);
        assert_eq!(threads_each(16, 4), 4);
        assert_eq!(threads_each(16, 5), 3);
        assert_eq!(threads_each(1, 0), 1);
    }

    #[test]
    fn a_launch_past_the_hosts_limits_is_refused_with_both_figures() {
        let roomy = HostLimits {
            open_files: Some(20_000),
            processes: Some(100_000),
            memory: Some(23 << 30),
        };
        assert!(check_host(64, 63, &roomy).is_ok());
        // 1000 nodes: 23.4 GiB besides the replicas, 23 GiB available.
        let e = check_host(1000, 20, &roomy).unwrap_err().to_string();
        assert!(
            e.contains("1000 local node processes need 25.2 GB of memory"),
            "{e}"
        );
        assert!(e.contains("allows 24.7 GB (MemAvailable)"), "{e}");
        let few_files = HostLimits {
            open_files: Some(256),
            ..roomy
        };
        let e = check_host(100, 3, &few_files).unwrap_err().to_string();
        assert!(
            e.contains("need 364 open files in the launcher")
                && e.contains("allows 256 (ulimit -n)"),
            "{e}"
        );
        // Full broadcast at 300 nodes: each node's sockets.
        let e = check_host(60, 299, &few_files).unwrap_err().to_string();
        assert!(e.contains("need 363 open files in each node"), "{e}");
        let few_threads = HostLimits {
            processes: Some(500),
            ..roomy
        };
        let e = check_host(100, 3, &few_threads).unwrap_err().to_string();
        assert!(
            e.contains("need 800 threads") && e.contains("(ulimit -u)"),
            "{e}"
        );
        // Unknown limits refuse nothing.
        assert!(check_host(100_000, 99_999, &HostLimits::default()).is_ok());
    }

    #[test]
    fn protocol_lines_are_explicit_json() {
        assert_eq!(
            serde_json::to_string(&Event::Listening("/ip4/127.0.0.1/tcp/1".into())).unwrap(),
            r#"{"listening":"/ip4/127.0.0.1/tcp/1"}"#
        );
        let r = ClockRecord {
            peer: 2,
            clock: 3,
            wall_s: 0.5,
            objective: Some(1.25),
            test_accuracy: None,
            samples: 8,
            samples_per_s: 16.0,
            bytes_sent: 100,
            bytes_received: 90,
            compute_s: 0.1,
            apply_s: 0.2,
            wait_s: 0.0,
            eval_s: 0.0,
            max_staleness: 1,
            send_budget: None,
            link_bytes_per_s: None,
        };
        let line = serde_json::to_string(&Event::Record(r.clone())).unwrap();
        assert!(
            line.starts_with(r#"{"record":{"peer":2,"clock":3,"#),
            "{line}"
        );
        assert_eq!(
            serde_json::from_str::<Event>(&line).unwrap(),
            Event::Record(r)
        );
        let a: Addrs = serde_json::from_str(r#"{"addrs":["a","b"]}"#).unwrap();
        assert_eq!(a.addrs, ["a", "b"]);
    }

    #[test]
    fn a_node_spec_round_trips_and_refuses_unknown_keys() {
        let s = NodeSpec {
            run: RunSpec::default(),
            exchange_addrs: true,
            out_dir: Some("/x".into()),
            owned_by_launcher: false,
            allow_open_key: false,
            key_on_stdin: true,
        };
        let back: NodeSpec = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert!(serde_json::from_str::<NodeSpec>(r#"{"run":{},"report":"x"}"#).is_err());
    }

    #[test]
    fn a_missing_executable_is_a_clear_error_and_leaves_nothing() {
        let mut spec = RunSpec {
            transport: crate::Transport::Libp2p,
            peers: 2,
            data: crate::DataSource::Synthetic("classes=3,features=4,samples=40".into()),
            ..RunSpec::default()
        };
        spec.train.clocks = 1;
        let e = Launcher::new("/nonexistent/sfb").run(&spec).unwrap_err();
        assert!(e.to_string().contains("starting peer 0"), "{e}");
    }
}

/// Resident memory of one node process besides its replicas and data: a libp2p peer
/// measured 19–20 MB over a 10-minute run (issue 31's soak); rounded up.
const NODE_PROCESS_BYTES: u64 = 24 << 20;

/// Open files a node process needs besides one socket per neighbour: its listener, the
/// runtime's, standard streams, its metrics and checkpoint files, with room to spare.
const NODE_BASE_FILES: u64 = 64;

/// Threads of one node process (the runtime's workers, its blocking pool, the engine's
/// kernels and the main thread), as the process limit counts them.
const NODE_THREADS: u64 = 8;

/// The limits of this machine a local launch must fit in (`None`: unlimited or unknown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HostLimits {
    /// Soft limit on open files of a process (`ulimit -n`), inherited by the nodes.
    pub open_files: Option<u64>,
    /// Soft limit on this user's processes and threads (`ulimit -u`).
    pub processes: Option<u64>,
    /// Memory available to new allocations (`MemAvailable`).
    pub memory: Option<u64>,
}

impl HostLimits {
    /// This process's limits (`/proc/self/limits`) and `MemAvailable` (Linux; elsewhere
    /// unknown, so nothing is refused).
    pub fn of_this_machine() -> Self {
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let soft = |name: &str| -> Option<u64> {
            let line = limits.lines().find(|l| l.starts_with(name))?;
            line[name.len()..].split_whitespace().next()?.parse().ok()
        };
        Self {
            open_files: soft("Max open files"),
            processes: soft("Max processes"),
            memory: crate::cluster::available_memory(),
        }
    }
}

/// Refuses a local launch of `nodes` processes, each with up to `neighbours` connections,
/// that `limits` cannot hold: the launcher's three pipes per node, a node's sockets, the
/// nodes' threads, and their memory besides the replicas ([`Cluster::check_fits`] counts
/// those).
///
/// # Errors
/// [`crate::Error::HostLimit`] naming the first limit passed, with both figures.
pub(crate) fn check_host(
    nodes: usize,
    neighbours: usize,
    limits: &HostLimits,
) -> crate::Result<()> {
    let n = nodes as u64;
    let checks = [
        (
            "open files in the launcher (3 pipes a node)",
            3 * n + NODE_BASE_FILES,
            limits.open_files,
            "ulimit -n",
        ),
        (
            "open files in each node (a socket a neighbour)",
            neighbours as u64 + NODE_BASE_FILES,
            limits.open_files,
            "ulimit -n",
        ),
        ("threads", n * NODE_THREADS, limits.processes, "ulimit -u"),
    ];
    for (what, need, limit, source) in checks {
        if let Some(limit) = limit
            && need > limit
        {
            return Err(crate::Error::HostLimit {
                nodes,
                what,
                need: need.to_string(),
                limit: limit.to_string(),
                origin: source,
            });
        }
    }
    let memory = n * NODE_PROCESS_BYTES;
    match limits.memory {
        Some(avail) if memory > avail => Err(crate::Error::HostLimit {
            nodes,
            what: "of memory besides their replicas (24 MiB a process)",
            need: format!("{:.1} GB", memory as f64 / 1e9),
            limit: format!("{:.1} GB", avail as f64 / 1e9),
            origin: "MemAvailable",
        }),
        _ => Ok(()),
    }
}
