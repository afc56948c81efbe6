//! `sfb cluster init`, `sfb peer` and `sfb server`: clap definitions over
//! [`sfb_harness::launch`] (which also runs `sfb run --transport libp2p`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use sfb_harness::launch::{NodeSpec, Role};
use sfb_harness::{RunSpec, preflight};
use sfb_net::bandwidth::Rate;
use sfb_net::cluster::{Cluster, Existing, Ports};
use sfb_topology::Topology;

use super::train::{TrainArgs, cli_error};

/// `sfb cluster …`.
#[derive(Debug, clap::Subcommand)]
pub enum ClusterCmd {
    /// Write a cluster file: keys, addresses and an optimized Q-out topology.
    Init(InitArgs),
}

/// `sfb cluster init` options.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Number of peers P (with --topology: its file's, which --peers must match).
    #[arg(long, required_unless_present = "topology")]
    pub peers: Option<usize>,
    /// Out-degree Q (P−1 = full broadcast); SFB only.
    #[arg(long, required_unless_present_any = ["backend", "topology"])]
    pub out_degree: Option<usize>,
    /// The cluster's topology from a file `sfb topology` wrote (TOML, JSON or DOT)
    /// instead of the optimizer's; --peers and --out-degree, if given, must agree with it.
    #[arg(long, value_name = "FILE", conflicts_with = "backend")]
    pub topology: Option<PathBuf>,
    /// `fms`: a star of P clients (ids 0..P−1) and a parameter server (id P) for
    /// `sfb server` + `sfb peer`, instead of an SFB topology.
    #[arg(long, value_enum)]
    pub backend: Option<super::train::Backend>,
    /// `tree`: the tree mode's cluster (`--partial tree`): peer i's neighbours are its
    /// parent (i − 1)/Q and its children Q·i + 1 … Q·i + Q, Q the --out-degree. Peers run
    /// it with `sfb peer … --out-degree Q --partial tree`.
    #[arg(long, value_name = "tree", conflicts_with_all = ["backend", "topology"])]
    pub partial: Option<sfb_harness::PartialSpec>,
    /// First port; peer i listens on base_port + i. `free`: each peer a port free on this
    /// machine now (for hand-run peers here; hosts must be this machine's). 0: any port,
    /// exchanged at start-up by `sfb run`.
    #[arg(long, default_value = "4001", value_parser = parse_ports, value_name = "PORT|free")]
    pub base_port: Ports,
    /// Comma-separated hosts (IPv4), assigned to peers round robin.
    #[arg(long, default_value = "127.0.0.1", value_delimiter = ',')]
    pub hosts: Vec<String>,
    /// Seconds the topology optimizer may spend (at most one year).
    #[arg(long, default_value_t = 10.0)]
    pub time_limit: f64,
    /// Output file; the private keys go to `<stem>-keys/` beside it.
    #[arg(short = 'o', long, default_value = "cluster.toml")]
    pub out: PathBuf,
    /// Replace an existing cluster file and its keys (without it, an existing file or key
    /// folder is refused).
    #[arg(long)]
    pub force: bool,
}

/// `--base-port`: a port number or `free`.
fn parse_ports(s: &str) -> std::result::Result<Ports, String> {
    match s {
        "free" => Ok(Ports::Free),
        _ => s
            .parse::<u16>()
            .map(Ports::Base)
            .map_err(|_| format!("`{s}` is neither a port (0–65535) nor `free`")),
    }
}

impl InitArgs {
    /// What to do with an existing cluster file and key folder.
    fn existing(&self) -> Existing {
        if self.force {
            Existing::Replace
        } else {
            Existing::Refuse
        }
    }

    /// Refuses, before any work, a time limit that is not a number of seconds and an
    /// output that cannot be written or would replace a cluster without `--force`.
    fn check(&self) -> Result<Duration> {
        let limit = preflight::seconds("--time-limit", self.time_limit, true).map_err(cli_error)?;
        match Cluster::check_init(&self.out, self.existing()) {
            Err(sfb_net::Error::ClusterExists { path }) => bail!(
                "{} already exists: pass --force to replace {} and its keys in {}/",
                path.display(),
                self.out.display(),
                Cluster::keys_dir(&self.out).display()
            ),
            r => r?,
        }
        preflight::output_file("-o", &self.out).map_err(cli_error)?;
        Ok(limit)
    }
}

pub fn cluster(cmd: &ClusterCmd) -> Result<()> {
    match cmd {
        ClusterCmd::Init(a) if a.backend == Some(super::train::Backend::Fms) => {
            if a.out_degree.is_some() {
                bail!(
                    "--out-degree does not apply to --backend fms (clients talk to the server only)"
                );
            }
            let Some(peers) = a.peers else {
                bail!("--peers is required for an FMS cluster");
            };
            a.check()?;
            let c = Cluster::init_fms_with(&a.out, peers, &a.hosts, a.base_port, a.existing())?;
            outln!(
                "wrote {} (FMS: {} clients, server id {}), keys beside it",
                a.out.display(),
                c.workers(),
                c.server().unwrap_or(peers)
            );
            Ok(())
        }
        ClusterCmd::Init(a) if a.partial.is_some() => {
            let (Some(p), Some(q), Some(sfb_harness::PartialSpec::Tree)) =
                (a.peers, a.out_degree, a.partial)
            else {
                bail!(
                    "--partial: only `tree` writes a cluster of its own, with --peers and --out-degree"
                );
            };
            if p < 2 || q == 0 {
                bail!("a tree needs at least 2 peers and a fan-out of at least 1, got {p} and {q}");
            }
            a.check()?;
            let c = Cluster::init_tree(&a.out, p, q, &a.hosts, a.base_port, a.existing())?;
            outln!(
                "wrote {} (tree of fan-out {q}: {} peers), keys beside it",
                a.out.display(),
                c.peers()
            );
            Ok(())
        }
        ClusterCmd::Init(a) => {
            let t = match &a.topology {
                Some(path) => {
                    let t = Topology::read_file(path)?;
                    if let Some(why) = t.disagreement(a.peers, a.out_degree) {
                        bail!("{}: {why}", path.display());
                    }
                    a.check()?;
                    t
                }
                None => {
                    let (Some(p), Some(q)) = (a.peers, a.out_degree) else {
                        bail!(
                            "--peers and --out-degree are required for an SFB cluster (or --topology FILE)"
                        );
                    };
                    if p < 2 {
                        bail!("a libp2p cluster needs at least 2 peers, got {p}");
                    }
                    let limit = a.check()?;
                    // The same topology `sfb run` would use: full broadcast, or the
                    // optimizer's best.
                    let out = sfb_harness::Cluster::builder()
                        .peers(p)
                        .out_degree(q)
                        .topology_time_limit(limit)
                        .resolve_topology()
                        .map_err(cli_error)?;
                    Topology::new(out)?
                }
            };
            let c = Cluster::init_with(&a.out, &t, &a.hosts, a.base_port, a.existing())?;
            outln!(
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
    /// Liveness timeout, seconds (at most one year): a neighbour whose connection stays
    /// open but silent (no frame, no heartbeat; idle peers send one every second) for this
    /// long is declared lost. A neighbour that is merely slow or paused for less is waited
    /// for (the waiting peers log whom they wait for every few seconds); one whose process
    /// ends is lost at once.
    #[arg(long, default_value_t = 60.0)]
    pub peer_timeout: f64,
    /// Seconds to wait for connections and handshakes at start-up (at most one year); with
    /// `sfb run`, also how long each peer may take to load its data and listen, when
    /// longer than 60 (a --stream peer scans its whole file first).
    #[arg(long, default_value_t = 30.0)]
    pub startup_timeout: f64,
    /// Factor values on the wire: f32, or f16 (half the bytes; peers round their own
    /// factors identically, batches with values beyond ±65504 go as f32).
    #[arg(long, default_value = "f32")]
    pub wire: sfb_core::wire::Dtype,
    /// Re-compress each peer's factors to at most R pairs before sending (rank:R): the
    /// best rank-R approximation of the batch plus what was kept back last time, the rest
    /// kept back for the next clock (error feedback). SFB only.
    #[arg(long, value_name = "rank:R")]
    pub compress: Option<sfb_harness::CompressSpec>,
    /// Send at most BUDGET of each peer's pairs per clock, the most important first by
    /// POLICY (magnitude, relative, random, round-robin), and carry the rest over to the
    /// next clock (Bösen's prioritization). BUDGET: a share of the pairs computed per
    /// clock (50%), a number of pairs (8), or auto: what the link carries, at the rate the transport measures, in the time the clock took to compute (libp2p and sfb sim). SFB only; not with --compress.
    #[arg(long, value_name = "POLICY:BUDGET")]
    pub prioritize: Option<sfb_harness::PrioritizeSpec>,
    /// Partial broadcast with relay: every peer also forwards other peers' batches along
    /// their shortest-path trees in the topology, so every replica applies every update
    /// (as many clocks late as it is hops away) with Q connections per peer. SFB only; a
    /// peer loss then fails the run; no checkpoints.
    #[arg(long)]
    pub relay: bool,
    /// With --relay: re-compress every batch a peer forwards to at most R pairs (rank:R),
    /// without error feedback (what is cut is lost): fewer relayed bytes, an approximation
    /// of far peers' updates (gossip with compression).
    #[arg(long, value_name = "rank:R")]
    pub relay_compress: Option<sfb_harness::CompressSpec>,
    /// Apply at most R pairs per clock whenever re-compressing the received pairs is
    /// cheaper than applying them all (by a cost model, the same choice on every replica),
    /// keeping the rest for the next clock (error feedback). SFB; sgd or factored only.
    #[arg(long, value_name = "rank:R")]
    pub aggregate: Option<sfb_harness::CompressSpec>,
    /// How partial broadcast (Q < P − 1) keeps the replicas together. gossip: each
    /// replica applies its own and its in-neighbours' batches, weighted so their mean
    /// moves as full broadcast's, and moves toward its in-neighbours by compressed
    /// consensus messages (--gossip-rank pairs a clock per out-link). tree: the peers form
    /// a tree of fan-out Q; each clock every peer's batch is summed up the tree, compressed
    /// to --tree-rank pairs per link with error feedback, and the sum comes back down, so
    /// every replica applies the same update (a peer loss is repaired; no rejoin yet).
    /// paper: the SFB paper's literal mode, no consensus; it diverges or stalls on most
    /// topologies (`sfb topology` says which). Without a mode named: under BSP the tree
    /// where gossip's neighbourhoods are small against the run (P/(Q+1) above 8) or the
    /// tree's modelled clock is at most half of full broadcast's (the header's topology
    /// line says so), gossip otherwise; runs with --relay use paper.
    #[arg(long, value_name = "gossip|tree|paper")]
    pub partial: Option<sfb_harness::PartialSpec>,
    /// Pairs per consensus message of the gossip mode (default max(1, ⌊3K/16⌋) for mini-batches
    /// of K, fewer where a peer would send more than full broadcast).
    #[arg(long, value_name = "R")]
    pub gossip_rank: Option<usize>,
    /// Pairs per message of the tree mode, up and down (default: the batch size K).
    #[arg(long, value_name = "R")]
    pub tree_rank: Option<usize>,
    /// The gossip mode's consensus step in (0, 1] (default R·max(1/m, 0.4/m^0.75) for
    /// m = min(J, D), at most 1/4: half or less of the largest measured stable).
    #[arg(long, value_name = "G")]
    pub gossip_step: Option<f32>,
    /// The gossip mode's weight on a peer's own batches against its in-neighbours', in
    /// (0, 1) (default 1/(Q+1): all alike). Above 1/2 the gradient steps alone contract the
    /// replicas' disagreement on any topology, but each replica's step is noisier: it
    /// measured worse.
    #[arg(long, value_name = "A")]
    pub gossip_own: Option<f32>,
    /// How far the gossip mode's replicas' mean moves a clock, as a share of full
    /// broadcast's step, in (0, 1]. Default: min(1, 3(Q+1)/P): no batch weighted more than
    /// three times (a larger weight makes each replica's step noisier than the consensus averages).
    #[arg(long, value_name = "G")]
    pub gossip_gain: Option<f32>,
    /// Compute each clock's mini-batch in N parts and send each part as soon as it is
    /// computed, so the links carry one part while the next is computed (Bösen's
    /// communication during the clock). Every replica takes the clock as one batch: the
    /// results do not change (under BSP, bitwise). Between parts a peer applies what has
    /// arrived that it may (under SSP and async). SFB with MLR or sparse coding (models
    /// with one pair per sample); not with --relay, --partial gossip|tree, --compress,
    /// --aggregate or --rejoin. With --prioritize the clock's budget is shared out over
    /// its parts, each sending its share, most important first, as it is computed.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub send_parts: usize,
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
            compress: self.compress,
            prioritize: self.prioritize,
            relay: self.relay,
            relay_compress: self.relay_compress,
            aggregate: self.aggregate,
            partial: self.partial,
            gossip_rank: self.gossip_rank,
            tree_rank: self.tree_rank,
            gossip_step: self.gossip_step,
            gossip_own: self.gossip_own,
            gossip_gain: self.gossip_gain,
            send_parts: self.send_parts,
            ..sfb_harness::NetOptions::default()
        }
    }
}

/// Flags of the training, model and network options: given with `--spec` they would be
/// ignored, so they are refused.
const SPEC_CONFLICTS: &[&str] = &[
    "exchange_addrs",
    "checkpoint_dir",
    "checkpoint_every",
    "checkpoint_keep",
    "resume",
    "resume_at",
    "on_peer_loss",
    "lost_shards",
    "rejoin",
    "heal_timeout",
    "step_bound",
    "fms_push",
    "fms_sync",
    "bandwidth",
    "burst",
    "peer_timeout",
    "startup_timeout",
    "wire",
    "compress",
    "prioritize",
    "relay",
    "relay_compress",
    "aggregate",
    "partial",
    "gossip_rank",
    "tree_rank",
    "gossip_step",
    "gossip_own",
    "gossip_gain",
    "send_parts",
    "model",
    "synthetic",
    "batch",
    "lr",
    "clocks",
    "staleness",
    "consistency",
    "seed",
    "init_std",
    "eval_every",
    "until",
    "no_intercept",
    "metrics",
    "summary",
    "straggler",
    "max_drift",
    "scale",
    "data",
    "test_data",
    "holdout",
    "features",
    "stream",
    "lambda",
    "latent",
    "margin",
    "candidates",
    "dict_size",
    "sweeps",
    "decay",
];

/// Options shared by `sfb peer` and `sfb server`.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// Cluster file.
    #[arg(long)]
    pub cluster: PathBuf,
    /// Read this node's whole configuration (a `sfb_harness::launch::NodeSpec`, JSON)
    /// from this file instead of the options below; used by `sfb run --transport libp2p`.
    #[arg(long, conflicts_with_all = SPEC_CONFLICTS)]
    pub spec: Option<PathBuf>,
    /// Listen, print `{"listening":ADDR}` on stdout, then read every node's address from
    /// stdin (`{"addrs":[…]}`, one JSON line, in id order); print `{"clock":N}` after each
    /// clock. For cluster files with port 0.
    #[arg(long)]
    pub exchange_addrs: bool,
    /// Write this node's report (JSON: counters, checksum, shape of W) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write the final W here (raw little-endian f32, row-major).
    #[arg(long)]
    pub dump_w: Option<PathBuf>,
    /// FMS only: what clients push to the server (default factors; server and clients
    /// must agree).
    #[arg(long, value_enum)]
    pub fms_push: Option<super::fms::Push>,
    /// FMS only: when clients get W (default eager; server and clients must agree).
    #[arg(long, value_enum)]
    pub fms_sync: Option<super::fms::Sync>,
    /// Use this node's private key even if group or others may access its file (by
    /// default such a key is refused, as ssh refuses one: chmod 600 it instead).
    #[arg(long)]
    pub allow_open_key: bool,
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub train: TrainArgs,
}

impl NodeArgs {
    /// This node's spec: the `--spec` file, or the options.
    fn node_spec(&self) -> Result<NodeSpec> {
        if let Some(path) = &self.spec {
            return NodeSpec::read(path).map_err(|e| cli_error(e.into()));
        }
        let mut run = RunSpec {
            transport: sfb_harness::Transport::Libp2p,
            fms_push: self.fms_push.unwrap_or_default().into(),
            fms_sync: self.fms_sync.unwrap_or_default().into(),
            net: self.net.to_options(),
            ..RunSpec::default()
        };
        self.train.fill(&mut run);
        let mut spec = NodeSpec::new(run);
        spec.exchange_addrs = self.exchange_addrs;
        Ok(spec)
    }

    /// Refuses, before any work, output files that cannot be written (a private key
    /// that others may read is refused by `run_node` unless `--allow-open-key`).
    fn check(&self, spec: &NodeSpec) -> Result<()> {
        spec.run.check_outputs().map_err(cli_error)?;
        for (flag, path) in [("--report", &self.report), ("--dump-w", &self.dump_w)] {
            if let Some(path) = path {
                preflight::output_file(flag, path).map_err(cli_error)?;
            }
        }
        Ok(())
    }

    /// Runs node `role` and writes `--report` / `--dump-w`.
    fn run(&self, role: Role, app: &crate::App) -> Result<()> {
        let mut spec = self.node_spec()?;
        spec.allow_open_key = self.allow_open_key;
        self.check(&spec)?;
        let done = app.node(&spec, &self.cluster, role).map_err(cli_error)?;
        if let Some(path) = &self.dump_w {
            sfb_harness::launch::write_w(path, &done.w).map_err(|e| cli_error(e.into()))?;
        }
        if let Some(path) = &self.report {
            std::fs::write(path, serde_json::to_string(&done.report)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let r = &done.report.report;
        eprintln!(
            "{} done: {} clocks, checksum {}, sent {} B, objective {}",
            match role {
                Role::Server => "server".to_string(),
                Role::Peer(i) => format!("peer {i}"),
            },
            done.summary.clocks,
            r.checksum,
            done.report.net_bytes_sent,
            r.objective.map_or("-".into(), |o| format!("{o:.4}"))
        );
        // The exit code says what the summary says (e.g. stopped by a signal); a node of
        // `sfb run` leaves that to the launcher, which stopped it.
        match &done.summary.failed {
            Some(why) if !spec.owned_by_launcher => {
                bail!("the node's run did not complete: {why}")
            }
            _ => Ok(()),
        }
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
    pub backend: Option<super::train::Backend>,
    #[command(flatten)]
    pub node: NodeArgs,
}

/// `sfb server` options (the FMS parameter server of a cluster file with a `server`).
#[derive(Debug, Args)]
pub struct ServerArgs {
    #[command(flatten)]
    pub node: NodeArgs,
}

pub fn peer(args: &PeerArgs, app: &crate::App) -> Result<()> {
    let a = &args.node;
    let fms = Cluster::load(&a.cluster)?.server().is_some();
    match (args.backend, fms) {
        (Some(super::train::Backend::Sfb), true) => {
            bail!(
                "{} is an FMS cluster (it names a server); use --backend fms",
                a.cluster.display()
            )
        }
        (Some(super::train::Backend::Fms), false) => {
            bail!(
                "{} is an SFB cluster (no server); use --backend sfb",
                a.cluster.display()
            )
        }
        _ => {}
    }
    if !fms && (a.fms_push.is_some() || a.fms_sync.is_some()) {
        bail!(
            "--fms-push and --fms-sync apply to FMS clusters only; {} is an SFB cluster",
            a.cluster.display()
        );
    }
    a.run(Role::Peer(args.id), app)
}

pub fn server(args: &ServerArgs, app: &crate::App) -> Result<()> {
    let a = &args.node;
    if a.train.straggler.is_some() {
        bail!(
            "--straggler slows a worker's compute; the FMS server computes nothing (give it to `sfb peer`)"
        );
    }
    if a.train.model_opts.test_data.is_some() {
        bail!("--test-data: the FMS server does not evaluate (give it to `sfb peer`)");
    }
    a.run(Role::Server, app)
}
