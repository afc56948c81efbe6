//! `sfb cluster init`, `sfb peer` and the libp2p launcher behind
//! `sfb run --transport libp2p`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use sfb_core::PeerId;
use sfb_core::metrics::{ClockRecord, PeerReport, RunInfo, Summary, max_divergence};
use sfb_net::bandwidth::{Bucket, Rate};
use sfb_net::cluster::Cluster;
use sfb_net::p2p::{Node, Options, RunShape};
use sfb_topology::Topology;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::train::{TrainArgs, build_engine, load_data};

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
}

impl NetArgs {
    fn options(&self) -> Result<Options> {
        for (name, v) in [
            ("--peer-timeout", self.peer_timeout),
            ("--startup-timeout", self.startup_timeout),
        ] {
            if !(v.is_finite() && v > 0.0) {
                bail!("{name} must be a positive number of seconds, got {v}");
            }
        }
        Ok(Options {
            timeout: Duration::from_secs_f64(self.peer_timeout),
            startup_timeout: Duration::from_secs_f64(self.startup_timeout),
            bandwidth: self
                .bandwidth
                .map(|r| Arc::new(Bucket::new(r, self.burst.max(1)))),
            ..Options::default()
        })
    }
}

/// `sfb peer` options.
#[derive(Debug, Args)]
pub struct PeerArgs {
    /// Cluster file.
    #[arg(long)]
    pub cluster: PathBuf,
    /// This peer's index in the cluster file.
    #[arg(long)]
    pub id: usize,
    /// Listen, print `LISTENING <addr>` on stdout, then read every peer's address (one line,
    /// space-separated, in id order) from stdin. Used by `sfb run --transport libp2p`.
    #[arg(long)]
    pub exchange_addrs: bool,
    /// Write this peer's report (JSON) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write the final W here (raw little-endian f32, row-major).
    #[arg(long)]
    pub dump_w: Option<PathBuf>,
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub train: TrainArgs,
}

/// What `sfb peer --report` writes.
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

pub fn peer(args: &PeerArgs) -> Result<()> {
    let mut cluster = Cluster::load(&args.cluster)?;
    let p = cluster.peers();
    if args.id >= p {
        bail!(
            "--id {} is not a peer of {} (it has {p} peers)",
            args.id,
            args.cluster.display()
        );
    }
    let mut opts = args.net.options()?;
    if args.exchange_addrs {
        // The launcher (or a test) reads progress from stdout.
        opts.progress = Some(Arc::new(|r: &ClockRecord| {
            println!("CLOCK {}", r.clock);
            let _ = std::io::stdout().flush();
        }));
    }
    let data = load_data(&args.train)?;
    let t = cluster.topology();
    let ids = |v: &[usize]| v.iter().map(|&i| PeerId(i as u32)).collect::<Vec<_>>();
    let engine = build_engine(
        &args.train,
        &data,
        args.id as u32,
        p,
        ids(t.out(args.id)),
        ids(t.in_neighbours(args.id)),
    )?;
    let (j, d) = engine.replica().dim();
    let shape = RunShape {
        j,
        d,
        batch: args.train.batch,
        clocks: args.train.clocks,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let outcome = rt.block_on(async {
        let node = Node::start(&cluster, args.id, &shape, &opts).await?;
        if args.exchange_addrs {
            println!("LISTENING {}", node.listen_addr());
            std::io::stdout().flush()?;
            let mut line = String::new();
            BufReader::new(tokio::io::stdin())
                .read_line(&mut line)
                .await
                .context("reading peer addresses from stdin")?;
            let addrs = line
                .split_whitespace()
                .map(|a| a.parse().with_context(|| format!("address {a:?}")))
                .collect::<Result<Vec<_>>>()?;
            cluster.set_addrs(addrs)?;
        }
        anyhow::Ok(node.run(&cluster, engine, &shape, &opts).await?)
    })?;
    let e = outcome.engine.last_evaluation();
    let mut metrics = outcome.engine.metrics().clone();
    // The transport's counts include framing; prefer them to the engine's payload counts.
    metrics.bytes_sent = outcome.stats.total_sent();
    metrics.bytes_received = outcome.stats.total_received();
    let file = PeerFile {
        report: PeerReport {
            peer: args.id as u32,
            wall_s: outcome.records.last().map_or(0.0, |r| r.wall_s),
            metrics,
            objective: e.map(|e| e.objective),
            test_accuracy: e.and_then(|e| e.accuracy),
            checksum: outcome.engine.replica().checksum(),
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
    if let Some(path) = &args.dump_w {
        let w = outcome.engine.replica().w();
        let w = w.as_standard_layout();
        std::fs::write(
            path,
            bytemuck::cast_slice::<f32, u8>(w.as_slice().expect("standard")),
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_string(&file)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!(
        "peer {} done: {} clocks, checksum {}, sent {} B, objective {}",
        args.id,
        outcome.engine.clock(),
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
];

/// The training and network arguments of this `sfb run` invocation, to pass to peers.
fn passthrough_args() -> Vec<String> {
    let all: Vec<String> = std::env::args().collect();
    let start = all
        .iter()
        .position(|a| a == "run")
        .map_or(all.len(), |i| i + 1);
    let mut out = Vec::new();
    let mut i = start;
    while i < all.len() {
        let a = &all[i];
        let name = a.split('=').next().unwrap_or(a);
        if let Some(&(_, takes)) = LAUNCHER_FLAGS.iter().find(|(f, _)| *f == name) {
            i += if takes && !a.contains('=') { 2 } else { 1 };
            continue;
        }
        out.push(a.clone());
        i += 1;
    }
    out
}

/// Runs P `sfb peer` processes on loopback and merges their reports.
pub fn launch(
    p: usize,
    q: usize,
    train: &TrainArgs,
    timeout: Duration,
    topology_time_limit: Duration,
) -> Result<(Summary, Vec<ClockRecord>)> {
    let topology = topology_for(p, q, topology_time_limit)?;
    let dir = std::env::temp_dir().join(format!(
        "sfb-run-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&dir)?;
    let cluster_path = dir.join("cluster.toml");
    Cluster::init(&cluster_path, &topology, &["127.0.0.1".to_string()], 0)?;
    let exe = std::env::current_exe()?;
    let pass = passthrough_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = rt.block_on(run_children(&exe, &cluster_path, &dir, p, &pass, timeout));
    let merged = result.and_then(|()| merge(&dir, p, q, train));
    let _ = std::fs::remove_dir_all(&dir);
    merged
}

async fn run_children(
    exe: &Path,
    cluster: &Path,
    dir: &Path,
    p: usize,
    pass: &[String],
    timeout: Duration,
) -> Result<()> {
    let mut children = Vec::new();
    for i in 0..p {
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("peer")
            .arg("--cluster")
            .arg(cluster)
            .arg("--id")
            .arg(i.to_string())
            .arg("--exchange-addrs")
            .arg("--report")
            .arg(dir.join(format!("peer-{i}.json")))
            .arg("--dump-w")
            .arg(dir.join(format!("peer-{i}.w")))
            .args(pass)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        children.push(cmd.spawn().with_context(|| format!("starting peer {i}"))?);
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
        // Keep draining its stdout so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
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
        Some(e) => Err(e),
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

fn merge(dir: &Path, p: usize, q: usize, train: &TrainArgs) -> Result<(Summary, Vec<ClockRecord>)> {
    let mut reports = Vec::new();
    let mut records = Vec::new();
    let mut ws = Vec::new();
    for i in 0..p {
        let path = dir.join(format!("peer-{i}.json"));
        let f: PeerFile = serde_json::from_str(
            &std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?,
        )?;
        let wbytes = std::fs::read(dir.join(format!("peer-{i}.w")))?;
        let w: Vec<f32> = bytemuck::pod_collect_to_vec(&wbytes);
        ws.push(ndarray::Array2::from_shape_vec((f.j, f.d), w)?);
        reports.push(f.report);
        records.extend(f.records);
    }
    let views: Vec<_> = ws.iter().map(|w| w.view()).collect();
    let info = RunInfo {
        backend: "sfb".into(),
        transport: "libp2p".into(),
        model: train.model.name().into(),
        consistency: train.consistency().to_string(),
        peers: p,
        out_degree: q,
        clocks: train.clocks,
        batch: train.batch,
    };
    Ok((
        Summary::aggregate(info, &reports, max_divergence(&views)),
        records,
    ))
}
