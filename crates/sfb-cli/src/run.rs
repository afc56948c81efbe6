//! `sfb run`: a whole cluster in one command.

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use sfb_core::metrics::{ClockRecord, Summary};
use sfb_harness::{Progress, RunSpec, TopologyOptions};

use super::train::{Backend, TrainArgs, cli_error};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// Threads in this process joined by bounded channels.
    Mem,
    /// One process per peer over libp2p.
    Libp2p,
}

/// `sfb run` options.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Number of peers P (default 4, or the --topology file's).
    #[arg(long)]
    pub peers: Option<usize>,
    /// Out-degree Q (default P−1: full broadcast, or the --topology file's).
    #[arg(long)]
    pub out_degree: Option<usize>,
    /// Train on exactly this topology: a file `sfb topology` wrote (TOML, JSON or DOT).
    /// --peers and --out-degree, if given, must agree with it. SFB only.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<std::path::PathBuf>,
    /// Backend.
    #[arg(long, value_enum, default_value = "sfb")]
    pub backend: Backend,
    /// Transport.
    #[arg(long, value_enum, default_value = "mem")]
    pub transport: Transport,
    /// Seconds a peer may wait without receiving anything before the run fails (in-memory
    /// transport; libp2p peers use --peer-timeout). At most one year, like every seconds
    /// option.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// FMS only: what clients push to the server (factors, or the dense ΔW of the paper).
    #[arg(long, value_enum, default_value = "factors")]
    pub fms_push: super::fms::Push,
    /// FMS only: when clients get W: eager (the server pushes it when a clock completes,
    /// ESSP) or lazy (a client fetches it when its own is too stale for the bound).
    #[arg(long, value_enum, default_value = "eager")]
    pub fms_sync: super::fms::Sync,
    /// Seconds the topology optimizer may spend when Q < P−1.
    #[arg(long, default_value_t = 5.0)]
    pub topology_time_limit: f64,
    /// libp2p only, needs root and iproute2: run every node in its own network namespace,
    /// joined by veth links to a bridge, and shape each node's sends with the kernel's tbf
    /// at --bandwidth (burst --burst) instead of the built-in token bucket.
    #[arg(long)]
    pub netns: bool,
    /// With --netns: those nodes' links get FACTOR times slower from FROM to UNTIL
    /// (seconds since the nodes' first step, e.g. 0,1@10..20:4; repeatable), by changing
    /// their tbf rate mid-run, and recover after: a congested link the nodes must measure.
    #[arg(long = "netns-slow", value_name = "PEERS@FROM..UNTIL:FACTOR")]
    pub netns_slow: Vec<sfb_harness::sim::Slowdown>,
    /// Run the serialized run description (RunSpec JSON) in FILE; no other option may be
    /// given with it.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<std::path::PathBuf>,
    /// Print the run these options describe as RunSpec JSON (what --spec reads) and exit
    /// without running it.
    #[arg(long)]
    pub print_spec: bool,
    #[command(flatten)]
    pub net: super::p2p::NetArgs,
    #[command(flatten)]
    pub train: TrainArgs,
}

impl RunArgs {
    /// The run these options describe.
    pub fn to_spec(&self) -> RunSpec {
        // The file's peer count is the default P; a file that cannot be read is refused
        // by the spec's validation, naming it.
        let file_peers = self.topology.as_deref().and_then(|path| {
            sfb_topology::Topology::read_file(path)
                .ok()
                .map(|t| t.peers())
        });
        let mut spec = RunSpec {
            peers: self.peers.or(file_peers).unwrap_or(4),
            backend: self.backend.into(),
            transport: match self.transport {
                Transport::Mem => sfb_harness::Transport::Mem,
                Transport::Libp2p => sfb_harness::Transport::Libp2p,
            },
            topology: TopologyOptions {
                out_degree: self.out_degree,
                file: self.topology.clone(),
                time_limit_s: self.topology_time_limit,
                ..TopologyOptions::default()
            },
            fms_push: self.fms_push.into(),
            fms_sync: self.fms_sync.into(),
            net: self.net.to_options(),
            ..RunSpec::default()
        };
        spec.net.timeout_s = self.timeout;
        spec.net.netns = self.netns;
        spec.net.netns_slow.clone_from(&self.netns_slow);
        self.train.fill(&mut spec);
        spec
    }
}

pub fn run(args: &RunArgs, app: &crate::App) -> Result<()> {
    let spec = match &args.spec {
        Some(file) => {
            if args.to_spec() != RunSpec::default() {
                bail!(
                    "--spec {} describes the whole run: give no other run option with it",
                    file.display()
                );
            }
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            RunSpec::from_json(&text).with_context(|| file.display().to_string())?
        }
        None => args.to_spec(),
    };
    run_spec(&spec, args.print_spec, app)
}

/// Prints `spec` (`--print-spec`) or runs it and prints its summary (and writes it to
/// `--summary`).
pub fn run_spec(spec: &RunSpec, print_spec: bool, app: &crate::App) -> Result<()> {
    if print_spec {
        outln!("{}", spec.to_json());
        return Ok(());
    }
    // Everything that can be refused is refused before the first clock: the options, then
    // the output files.
    spec.validate().map_err(cli_error)?;
    spec.check_outputs().map_err(cli_error)?;
    // The harness streams the per-clock records to `--metrics` as they happen.
    let (summary, _) = execute(spec, None, app)?;
    out!("{summary}");
    if let Some(path) = &spec.output.summary {
        std::fs::write(path, serde_json::to_string_pretty(&summary)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    // The exit code says what the summary says: a run stopped before its clocks (a
    // signal, a full disk) did not complete.
    match &summary.failed {
        Some(why) => bail!("the run did not complete: {why}"),
        None => Ok(()),
    }
}

/// Carries out `spec` through the harness with its model, built-in or registered with
/// `app` (the libp2p transport as one local process of this program per node) and
/// returns the summary and every node's per-clock records.
pub fn execute(
    spec: &RunSpec,
    progress: Option<Progress>,
    app: &crate::App,
) -> Result<(Summary, Vec<ClockRecord>)> {
    spec.validate().map_err(cli_error)?;
    let out = app.execute(spec, progress).map_err(cli_error)?;
    Ok((out.summary, out.records))
}
