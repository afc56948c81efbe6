//! `sfb cluster init`, `sfb peer` and the libp2p launcher behind
//! `sfb run --transport libp2p`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use sfb_core::metrics::{ClockRecord, PeerReport, RunInfo, Summary};
use sfb_harness::{Cluster as ClusterBuilder, NodeOutcome, RunSpec};
use sfb_net::bandwidth::{Bucket, Rate};
use sfb_net::cluster::Cluster;
use sfb_net::p2p::{Node, Options, RunShape};
use sfb_topology::Topology;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::train::TrainArgs;

/// `sfb cluster …`.
#[derive(Debug, clap::Subcommand)]
pub enum ClusterCmd {
    /// Write a cluster file: keys, addresses and an optimized Q-out topology.
    Init(InitArgs),
}

/// `sfb cluster init` options.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Number of peers P.
    #[arg(long)]
    pub peers: usize,
    /// Out-degree Q (P−1 = full broadcast).
    #[arg(long)]
    pub out_degree: usize,
    /// First port; peer i listens on base_port + i (0: any free port, exchanged at start-up
    /// by `sfb run`).
    #[arg(long, default_value_t = 4001)]
    pub base_port: u16,
    /// Comma-separated hosts (IPv4), assigned to peers round robin.
    #[arg(long, default_value = "127.0.0.1", value_delimiter = ',')]
    pub hosts: Vec<String>,
    /// Seconds the topology optimizer may spend.
    #[arg(long, default_value_t = 10.0)]
    pub time_limit: f64,
    /// Output file.
    #[arg(short = 'o', long, default_value = "cluster.toml")]
    pub out: PathBuf,
}

/// The topology for P peers and out-degree Q: full broadcast, or the optimizer's best.
pub fn topology_for(peers: usize, q: usize, time_limit: Duration) -> Result<Topology> {
    if peers < 2 {
        bail!("a libp2p cluster needs at least 2 peers, got {peers}");
    }
    if q == 0 || q >= peers {
        bail!("--out-degree must be in 1..P−1 = 1..{}, got {q}", peers - 1);
    }
    if q == peers - 1 {
        return Ok(sfb_topology::full(peers)?);
    }
    let opt = sfb_topology::optimize(
        peers,
        q,
        &sfb_topology::Options::default().time_limit(time_limit),
    )?;
    Ok(opt.topology)
}

pub fn cluster(cmd: &ClusterCmd) -> Result<()> {
    match cmd {
        ClusterCmd::Init(a) => {
            let t = topology_for(a.peers, a.out_degree, Duration::from_secs_f64(a.time_limit))?;
            let c = Cluster::init(&a.out, &t, &a.hosts, a.base_port)?;
            println!(
                "wrote {} ({} peers, out-degree {}, topology cost {}), keys beside it",
                a.out.display(),
                c.peers(),
                t.out_degree(),
                t.cost()
            );
            Ok(())
        }
    }
}

/// Network options of a peer.
#[derive(Debug, Clone, Args)]
pub struct NetArgs {
    /// Outbound bandwidth budget of each peer (e.g. 1gbit, 100mbit, 50MB).
    #[arg(long)]
    pub bandwidth: Option<Rate>,
    /// Burst size of the bandwidth budget, bytes.
    #[arg(long, default_value_t = 256 * 1024)]
    pub burst: usize,
    /// Seconds a peer may wait without progress before failing.
    #[arg(long, default_value_t = 10.0)]
    pub peer_timeout: f64,
    /// Seconds to wait for connections and handshakes at start-up.
    #[arg(long, default_value_t = 30.0)]
    pub startup_timeout: f64,
    /// Factor values on the wire: f32, or f16 (half the bytes; peers round their own
    /// factors identically, batches with values beyond ±65504 go as f32).
    #[arg(long, default_value = "f32")]
    pub wire: sfb_core::wire::Dtype,
}

impl NetArgs {
    /// These options in a [`RunSpec`] (the in-memory `timeout_s` and `netns` are
    /// `sfb run`'s).
    pub fn to_options(&self) -> sfb_harness::NetOptions {
        sfb_harness::NetOptions {
            peer_timeout_s: self.peer_timeout,
            startup_timeout_s: self.startup_timeout,
            bandwidth: self.bandwidth,
            burst: self.burst,
            wire: self.wire,
            ..sfb_harness::NetOptions::default()
        }
    }
}

/// The libp2p driver's options of a validated spec.
fn node_options(n: &sfb_harness::NetOptions) -> Options {
    Options {
        timeout: Duration::from_secs_f64(n.peer_timeout_s),
        startup_timeout: Duration::from_secs_f64(n.startup_timeout_s),
        bandwidth: n
            .bandwidth
            .map(|r| Arc::new(Bucket::new(r, n.burst.max(1)))),
        ..Options::default()
    }
}

/// Options shared by `sfb peer` and `sfb server`.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// Cluster file.
    #[arg(long)]
    pub cluster: PathBuf,
    /// Listen, print `LISTENING <addr>` on stdout, then read every node's address (one line,
    /// space-separated, in id order) from stdin; print `CLOCK n` after each clock. Used by
    /// `sfb run --transport libp2p`.
    #[arg(long)]
    pub exchange_addrs: bool,
    /// Write this node's report (JSON) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write the final W here (raw little-endian f32, row-major).
    #[arg(long)]
    pub dump_w: Option<PathBuf>,
    /// FMS only: what clients push to the server.
    #[arg(long, value_enum, default_value = "factors")]
    pub fms_push: super::fms::Push,
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub train: TrainArgs,
}

impl NodeArgs {
    /// The run of a node of a cluster with `peers` workers.
    fn spec(&self, peers: usize, backend: sfb_harness::Backend) -> Result<RunSpec> {
        let mut spec = RunSpec {
            peers,
            backend,
            transport: sfb_harness::Transport::Libp2p,
            fms_push: self.fms_push.into(),
            net: self.net.to_options(),
            ..RunSpec::default()
        };
        self.train.fill(&mut spec);
        spec.validate().map_err(super::train::cli_error)?;
        Ok(spec)
    }
}

/// `sfb peer` options.
#[derive(Debug, Args)]
pub struct PeerArgs {
    /// This peer's index in the cluster file.
    #[arg(long)]
    pub id: usize,
    /// Backend; must match the cluster file (an FMS file names a `server`).
    #[arg(long, value_enum)]
    pub backend: Option<super::run::Backend>,
    #[command(flatten)]
    pub node: NodeArgs,
}

/// `sfb server` options (the FMS parameter server of a cluster file with a `server`).
#[derive(Debug, Args)]
pub struct ServerArgs {
    #[command(flatten)]
    pub node: NodeArgs,
}

/// What `sfb peer --report` / `sfb server --report` writes.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct PeerFile {
    pub report: PeerReport,
    pub records: Vec<ClockRecord>,
    pub net_bytes_sent: u64,
    pub net_bytes_received: u64,
    pub send_span_s: f64,
    pub bad_frames: u64,
    pub refused_streams: u64,
    pub j: usize,
    pub d: usize,
}

/// What the runner needs from a finished node.
struct Finished {
    metrics: sfb_core::metrics::PeerMetrics,
    evaluation: Option<sfb_core::Evaluation>,
    checksum: String,
    w: ndarray::Array2<f32>,
    clock: u64,
}

pub fn peer(args: &PeerArgs) -> Result<()> {
    let a = &args.node;
    let cluster = Cluster::load(&a.cluster)?;
    let p = cluster.peers();
    if args.id >= p {
        bail!(
            "--id {} is not a peer of {} (it has {p} peers)",
            args.id,
            a.cluster.display()
        );
    }
    let fms = cluster.server().is_some();
    match (args.backend, fms) {
        (Some(super::run::Backend::Sfb), true) => {
            bail!(
                "{} is an FMS cluster (it names a server); use --backend fms",
                a.cluster.display()
            )
        }
        (Some(super::run::Backend::Fms), false) => {
            bail!(
                "{} is an SFB cluster (no server); use --backend sfb",
                a.cluster.display()
            )
        }
        _ => {}
    }
    if cluster.server() == Some(args.id) {
        bail!(
            "peer {} is the cluster's server: run `sfb server --cluster {}`",
            args.id,
            a.cluster.display()
        );
    }
    let workers = cluster.workers();
    if fms {
        let spec = a.spec(workers, sfb_harness::Backend::Fms)?;
        let client =
            ClusterBuilder::from_spec(&spec)?.build_client(args.id as u32, spec.fms_push)?;
        let jd = client.w().dim();
        run_node(a, &spec, cluster, args.id, client, jd, true, |c| Finished {
            metrics: c.metrics().clone(),
            evaluation: c.last_evaluation().cloned(),
            checksum: c.checksum(),
            w: c.w().to_owned(),
            clock: c.clock(),
        })
    } else {
        let spec = a.spec(p, sfb_harness::Backend::Sfb)?;
        let engine = ClusterBuilder::from_spec(&spec)?
            .out_lists((0..p).map(|i| cluster.out(i).to_vec()).collect())
            .build_peer(args.id as u32)?;
        let jd = engine.replica().dim();
        run_node(a, &spec, cluster, args.id, engine, jd, false, |e| {
            Finished {
                metrics: e.metrics().clone(),
                evaluation: e.last_evaluation().cloned(),
                checksum: e.replica().checksum(),
                w: e.replica().w().to_owned(),
                clock: e.clock(),
            }
        })
    }
}

pub fn server(args: &ServerArgs) -> Result<()> {
    let a = &args.node;
    let cluster = Cluster::load(&a.cluster)?;
    let Some(id) = cluster.server() else {
        bail!(
            "{} names no server: it is an SFB cluster (run `sfb peer` for each peer)",
            a.cluster.display()
        );
    };
    let spec = a.spec(cluster.workers(), sfb_harness::Backend::Fms)?;
    let server = ClusterBuilder::from_spec(&spec)?.build_server(spec.fms_push)?;
    let jd = server.replica().dim();
    run_node(a, &spec, cluster, id, server, jd, true, |s| Finished {
        metrics: s.metrics().clone(),
        evaluation: None,
        checksum: s.replica().checksum(),
        w: s.replica().w().to_owned(),
        clock: s.clock(),
    })
}

#[allow(clippy::too_many_arguments)]
fn run_node<N: sfb_core::StateMachine + Send + 'static>(
    a: &NodeArgs,
    spec: &RunSpec,
    mut cluster: Cluster,
    id: usize,
    node: N,
    jd: (usize, usize),
    full_w: bool,
    finished: impl FnOnce(&N) -> Finished,
) -> Result<()> {
    let mut opts = node_options(&spec.net);
    if a.exchange_addrs {
        // The launcher (or a test) reads progress from stdout.
        opts.progress = Some(Arc::new(|r: &ClockRecord| {
            println!("CLOCK {}", r.clock);
            let _ = std::io::stdout().flush();
        }));
    }
    let shape = RunShape {
        j: jd.0,
        d: jd.1,
        batch: spec.train.batch,
        clocks: spec.train.clocks,
        full_w,
        dtype: spec.net.wire,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let outcome = rt.block_on(async {
        let started = Node::start(&cluster, id, &shape, &opts).await?;
        if a.exchange_addrs {
            println!("LISTENING {}", started.listen_addr());
            std::io::stdout().flush()?;
            let mut line = String::new();
            BufReader::new(tokio::io::stdin())
                .read_line(&mut line)
                .await
                .context("reading node addresses from stdin")?;
            let addrs = line
                .split_whitespace()
                .map(|x| x.parse().with_context(|| format!("address {x:?}")))
                .collect::<Result<Vec<_>>>()?;
            cluster.set_addrs(addrs)?;
        }
        anyhow::Ok(started.run(&cluster, node, &shape, &opts).await?)
    })?;
    let f = finished(&outcome.node);
    let mut metrics = f.metrics;
    // The transport's counts include framing; prefer them to the node's payload counts.
    metrics.bytes_sent = outcome.stats.total_sent();
    metrics.bytes_received = outcome.stats.total_received();
    let (j, d) = f.w.dim();
    let file = PeerFile {
        report: PeerReport {
            peer: cluster.core_id(id).0,
            wall_s: outcome.records.last().map_or(0.0, |r| r.wall_s),
            metrics,
            objective: f.evaluation.as_ref().map(|e| e.objective),
            test_accuracy: f.evaluation.as_ref().and_then(|e| e.accuracy),
            checksum: f.checksum.clone(),
        },
        records: outcome.records,
        net_bytes_sent: outcome.stats.total_sent(),
        net_bytes_received: outcome.stats.total_received(),
        send_span_s: outcome.stats.send_span_s(),
        bad_frames: outcome
            .stats
            .bad_frames
            .load(std::sync::atomic::Ordering::Relaxed),
        refused_streams: outcome
            .stats
            .refused_streams
            .load(std::sync::atomic::Ordering::Relaxed),
        j,
        d,
    };
    if let Some(path) = &a.dump_w {
        let w = f.w.as_standard_layout();
        std::fs::write(
            path,
            bytemuck::cast_slice::<f32, u8>(w.as_slice().expect("standard")),
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.report {
        std::fs::write(path, serde_json::to_string(&file)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!(
        "{} done: {} clocks, checksum {}, sent {} B, objective {}",
        if cluster.server() == Some(id) {
            "server".to_string()
        } else {
            format!("peer {id}")
        },
        f.clock,
        file.report.checksum,
        file.net_bytes_sent,
        file.report
            .objective
            .map_or("-".into(), |o| format!("{o:.4}"))
    );
    Ok(())
}

/// Flags of `sfb run` that the launcher handles itself (with whether they take a value).
const LAUNCHER_FLAGS: &[(&str, bool)] = &[
    ("--peers", true),
    ("--out-degree", true),
    ("--backend", true),
    ("--transport", true),
    ("--timeout", true),
    ("--summary", true),
    ("--metrics", true),
    ("--topology-time-limit", true),
    ("--netns", false),
];

/// Flags the launcher keeps from the children when the kernel shapes the links
/// (`--netns`): the budget is then tbf's, not a token bucket's.
const BUCKET_FLAGS: &[(&str, bool)] = &[("--bandwidth", true), ("--burst", true)];

/// A launcher's progress callback: `(node index, clocks completed)`, node `P` being the
/// FMS server.
pub type Progress = sfb_harness::Progress;

/// The arguments of this process after `sfb run`.
pub fn run_argv() -> Vec<String> {
    let all: Vec<String> = std::env::args().collect();
    let start = all
        .iter()
        .position(|a| a == "run")
        .map_or(all.len(), |i| i + 1);
    all[start..].to_vec()
}

/// The training and network arguments among `sfb run`'s arguments `all`, to pass to peers
/// (without the token bucket's flags if `drop_bucket`).
fn passthrough_args(all: &[String], drop_bucket: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    let extra: &[(&str, bool)] = if drop_bucket { BUCKET_FLAGS } else { &[] };
    while i < all.len() {
        let a = &all[i];
        let name = a.split('=').next().unwrap_or(a);
        if let Some(&(_, takes)) = LAUNCHER_FLAGS.iter().chain(extra).find(|(f, _)| *f == name) {
            i += if takes && !a.contains('=') { 2 } else { 1 };
            continue;
        }
        out.push(a.clone());
        i += 1;
    }
    out
}

/// Links shaped by the kernel instead of the token bucket (`sfb run --netns`).
#[derive(Debug, Clone, Copy)]
pub struct Shaping {
    /// Every node's send rate (tbf on its side of its link).
    pub rate: Rate,
    /// tbf burst, bytes.
    pub burst: usize,
}

/// Runs P `sfb peer` processes (plus `sfb server` for FMS) and merges their reports: on
/// loopback, or with `shaping` each in its own network namespace behind a tbf-shaped veth
/// link ([`super::netns`]). `run_args` are the arguments of the `sfb run` command being
/// carried out (the training and network options among them go to every process, except
/// the token bucket's under `shaping`); `progress`, if given, hears every clock every
/// process completes.
pub fn launch(
    spec: &RunSpec,
    run_args: &[String],
    shaping: Option<Shaping>,
    progress: Option<Progress>,
) -> Result<(Summary, Vec<ClockRecord>)> {
    let p = spec.peers;
    let q = spec.topology.out_degree.unwrap_or(p.saturating_sub(1));
    let fms = spec.backend == sfb_harness::Backend::Fms;
    let topology_time_limit = Duration::from_secs_f64(spec.topology.time_limit_s);
    let timeout = Duration::from_secs_f64(spec.net.timeout_s);
    let dir = std::env::temp_dir().join(format!(
        "sfb-run-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&dir)?;
    let cluster_path = dir.join("cluster.toml");
    let nodes = p + usize::from(fms);
    // Set up before anything else can fail, and torn down (drop) after the children end.
    let netns = match shaping {
        Some(s) => match super::netns::Netns::setup(nodes, s.rate, s.burst) {
            Ok(n) => Some(n),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        },
        None => None,
    };
    let hosts: Vec<String> = match &netns {
        Some(n) => (0..nodes).map(|i| n.addr(i)).collect(),
        None => vec!["127.0.0.1".to_string()],
    };
    let prefixes: Vec<Vec<String>> = (0..nodes)
        .map(|i| netns.as_ref().map_or_else(Vec::new, |n| n.exec_prefix(i)))
        .collect();
    let result = launch_in(
        &dir,
        &cluster_path,
        &hosts,
        &prefixes,
        (p, q),
        &spec.run_info(),
        run_args,
        timeout,
        topology_time_limit,
        fms,
        progress,
    );
    let result = result.map(|(mut summary, records)| {
        if let Some(n) = &netns {
            summary.transport = "libp2p+netns".into();
            add_qdisc_stats(&mut summary, n);
        }
        (summary, records)
    });
    drop(netns);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Counters of every node's tbf qdisc and TCP stack, summed, as summary extras: bytes on
/// the wire (link-layer headers included), drops, waits for tokens, TCP retransmissions.
fn add_qdisc_stats(summary: &mut Summary, n: &super::netns::Netns) {
    let mut total = super::netns::QdiscStats::default();
    for i in 0..n.nodes() {
        match n.stats(i) {
            Ok(s) => {
                total.bytes += s.bytes;
                total.packets += s.packets;
                total.dropped += s.dropped;
                total.overlimits += s.overlimits;
            }
            Err(e) => {
                tracing::warn!("node {i}: {e:#}");
                return;
            }
        }
    }
    let mut retransmits = 0;
    for i in 0..n.nodes() {
        match n.tcp_retransmits(i) {
            Ok(r) => retransmits += r,
            Err(e) => tracing::warn!("node {i}: {e:#}"),
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

/// [`launch`] once the hosts are known: writes the cluster file into `dir`, runs node `i`
/// as `prefixes[i]… sfb peer|server …`, merges the reports.
#[allow(clippy::too_many_arguments)]
fn launch_in(
    dir: &Path,
    cluster_path: &Path,
    hosts: &[String],
    prefixes: &[Vec<String>],
    (p, q): (usize, usize),
    info: &RunInfo,
    run_args: &[String],
    timeout: Duration,
    topology_time_limit: Duration,
    fms: bool,
    progress: Option<Progress>,
) -> Result<(Summary, Vec<ClockRecord>)> {
    let shaped = prefixes.iter().any(|x| !x.is_empty());
    if fms {
        Cluster::init_fms(cluster_path, p, hosts, 0)?;
    } else {
        let topology = topology_for(p, q, topology_time_limit)?;
        Cluster::init(cluster_path, &topology, hosts, 0)?;
    }
    let exe = std::env::current_exe()?;
    let pass = passthrough_args(run_args, shaped);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run_children(
        &exe,
        cluster_path,
        dir,
        prefixes,
        fms,
        &pass,
        timeout,
        progress,
    ))?;
    // The runtime (and with it every child still running) ends before the caller tears
    // the namespaces down.
    drop(rt);
    merge(dir, p, info.clone(), fms)
}

#[allow(clippy::too_many_arguments)]
async fn run_children(
    exe: &Path,
    cluster: &Path,
    dir: &Path,
    prefixes: &[Vec<String>],
    fms: bool,
    pass: &[String],
    timeout: Duration,
    progress: Option<Progress>,
) -> Result<()> {
    let p = prefixes.len();
    let mut children = Vec::new();
    for (i, prefix) in prefixes.iter().enumerate() {
        let mut cmd = match prefix.split_first() {
            Some((prog, args)) => {
                let mut c = tokio::process::Command::new(prog);
                c.args(args).arg(exe);
                c
            }
            None => tokio::process::Command::new(exe),
        };
        if fms && i == p - 1 {
            cmd.arg("server");
        } else {
            cmd.arg("peer").arg("--id").arg(i.to_string());
        }
        cmd.arg("--cluster")
            .arg(cluster)
            .arg("--exchange-addrs")
            .arg("--report")
            .arg(dir.join(format!("peer-{i}.json")))
            .arg("--dump-w")
            .arg(dir.join(format!("peer-{i}.w")))
            .args(pass)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // With a progress callback the caller draws progress: keep the children's logs
            // out of the way, and show them only if the run fails.
            .stderr(if progress.is_some() {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .kill_on_drop(true);
        children.push(cmd.spawn().with_context(|| format!("starting peer {i}"))?);
    }
    let logs: Vec<Arc<std::sync::Mutex<std::collections::VecDeque<String>>>> =
        (0..p).map(|_| Arc::default()).collect();
    for (c, log) in children.iter_mut().zip(&logs) {
        if let Some(err) = c.stderr.take() {
            let log = Arc::clone(log);
            tokio::spawn(async move {
                let mut lines = BufReader::new(err).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut l = log
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if l.len() == 20 {
                        l.pop_front();
                    }
                    l.push_back(line);
                }
            });
        }
    }
    // Collect every peer's real listen address, then tell everyone.
    let mut addrs = Vec::new();
    for (i, c) in children.iter_mut().enumerate() {
        let out = c.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(out).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .with_context(|| format!("peer {i} did not report its address in time"))??
            .with_context(|| format!("peer {i} exited before listening"))?;
        let addr = line
            .strip_prefix("LISTENING ")
            .with_context(|| format!("peer {i} printed {line:?} instead of its address"))?;
        addrs.push(addr.to_string());
        // Keep draining its stdout so it never blocks on a full pipe; report progress.
        let progress = progress.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if let (Some(f), Some(n)) = (
                    &progress,
                    line.strip_prefix("CLOCK ")
                        .and_then(|n| n.trim().parse().ok()),
                ) {
                    f(i, n);
                }
            }
        });
    }
    let line = addrs.join(" ") + "\n";
    for c in &mut children {
        let mut stdin = c.stdin.take().expect("piped stdin");
        stdin.write_all(line.as_bytes()).await?;
        stdin.flush().await?;
    }
    // Wait for all; the first failure (or Ctrl-C) stops the rest.
    let mut waits = futures_unordered(children);
    let mut failed: Option<anyhow::Error> = None;
    let mut remaining = p;
    while remaining > 0 {
        tokio::select! {
            r = waits.recv() => {
                let Some((i, status)) = r else { break };
                remaining -= 1;
                match status {
                    Ok(s) if s.success() => {}
                    Ok(s) => {
                        failed.get_or_insert_with(|| anyhow::anyhow!("peer {i} failed ({s})"));
                        break;
                    }
                    Err(e) => {
                        failed.get_or_insert_with(|| anyhow::anyhow!("peer {i}: {e}"));
                        break;
                    }
                }
            }
            _ = tokio::signal::ctrl_c() => {
                failed = Some(anyhow::anyhow!("interrupted; peers stopped"));
                break;
            }
        }
    }
    let _ = timeout;
    drop(waits); // kills children still running (kill_on_drop)
    match failed {
        Some(e) => {
            let mut tails = String::new();
            for (i, log) in logs.iter().enumerate() {
                let l = log
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if !l.is_empty() {
                    tails += &format!("\n--- node {i} (last lines of stderr) ---\n");
                    tails += &l.iter().cloned().collect::<Vec<_>>().join("\n");
                }
            }
            Err(if tails.is_empty() {
                e
            } else {
                anyhow::anyhow!("{e:#}{tails}")
            })
        }
        None => Ok(()),
    }
}

/// Waits on children concurrently; yields `(index, exit status)` as they end. Dropping the
/// receiver aborts the waiting tasks, which kills the children.
struct Waits {
    rx: tokio::sync::mpsc::Receiver<(usize, std::io::Result<std::process::ExitStatus>)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Waits {
    async fn recv(&mut self) -> Option<(usize, std::io::Result<std::process::ExitStatus>)> {
        self.rx.recv().await
    }
}

impl Drop for Waits {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn futures_unordered(children: Vec<tokio::process::Child>) -> Waits {
    let (tx, rx) = tokio::sync::mpsc::channel(children.len().max(1));
    let tasks = children
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            let tx = tx.clone();
            tokio::spawn(async move {
                let s = c.wait().await;
                let _ = tx.send((i, s)).await;
            })
        })
        .collect();
    Waits { rx, tasks }
}

fn merge(dir: &Path, p: usize, info: RunInfo, fms: bool) -> Result<(Summary, Vec<ClockRecord>)> {
    let read = |i: usize| -> Result<PeerFile> {
        let path = dir.join(format!("peer-{i}.json"));
        Ok(serde_json::from_str(
            &std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?,
        )?)
    };
    let mut files = Vec::new();
    let mut records = Vec::new();
    let mut ws = Vec::new();
    for i in 0..p {
        let mut f = read(i)?;
        let wbytes = std::fs::read(dir.join(format!("peer-{i}.w")))?;
        let w: Vec<f32> = bytemuck::pod_collect_to_vec(&wbytes);
        ws.push(ndarray::Array2::from_shape_vec((f.j, f.d), w)?);
        records.append(&mut f.records);
        files.push(f);
    }
    let server = if fms {
        let f = read(p)?;
        records.extend(f.records);
        Some(f.report.metrics)
    } else {
        None
    };
    // A node's report file carries no model-specific figures: the summary has none.
    let nodes: Vec<NodeOutcome<'_>> = files
        .into_iter()
        .zip(&ws)
        .map(|(f, w)| NodeOutcome {
            report: f.report,
            w: w.view(),
            extra: None,
        })
        .collect();
    let summary = sfb_harness::summarize(info, &nodes, server.as_ref());
    Ok((summary, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn launcher_flags_stay_with_the_launcher_and_netns_drops_the_bucket() {
        let all = args(
            "--peers 4 --netns --bandwidth 200mbit --burst=4096 --transport libp2p --clocks 3 --backend=fms --wire f16",
        );
        assert_eq!(
            passthrough_args(&all, false),
            args("--bandwidth 200mbit --burst=4096 --clocks 3 --wire f16")
        );
        assert_eq!(passthrough_args(&all, true), args("--clocks 3 --wire f16"));
    }
}
