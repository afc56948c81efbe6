//! `sfb run`: a whole cluster in one command.

use std::io::Write;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use sfb_core::PeerId;
use sfb_core::metrics::{ClockRecord, PeerReport, RunInfo, Summary, max_divergence};

use super::train::{TrainArgs, build_engine, load_data};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Sufficient factor broadcasting between peers.
    Sfb,
    /// Parameter server with full matrix sync.
    Fms,
}

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
    /// Number of peers P.
    #[arg(long, default_value_t = 4)]
    pub peers: usize,
    /// Out-degree Q (default P−1: full broadcast).
    #[arg(long)]
    pub out_degree: Option<usize>,
    /// Backend.
    #[arg(long, value_enum, default_value = "sfb")]
    pub backend: Backend,
    /// Transport.
    #[arg(long, value_enum, default_value = "mem")]
    pub transport: Transport,
    /// Seconds a peer may wait without receiving anything before the run fails (in-memory
    /// transport; libp2p peers use --peer-timeout).
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// FMS only: what clients push to the server (factors, or the dense ΔW of the paper).
    #[arg(long, value_enum, default_value = "factors")]
    pub fms_push: super::fms::Push,
    /// Seconds the topology optimizer may spend when Q < P−1.
    #[arg(long, default_value_t = 5.0)]
    pub topology_time_limit: f64,
    /// libp2p only, needs root and iproute2: run every node in its own network namespace,
    /// joined by veth links to a bridge, and shape each node's sends with the kernel's tbf
    /// at --bandwidth (burst --burst) instead of the built-in token bucket.
    #[arg(long)]
    pub netns: bool,
    #[command(flatten)]
    pub net: super::p2p::NetArgs,
    #[command(flatten)]
    pub train: TrainArgs,
}

pub fn run(args: &RunArgs) -> Result<()> {
    let (summary, records) = execute(args, &super::p2p::run_argv(), None)?;
    if let Some(path) = &args.train.metrics {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        for rec in &records {
            serde_json::to_writer(&mut f, rec)?;
            writeln!(f)?;
        }
        f.flush()?;
    }
    print_summary(&summary);
    if let Some(path) = &args.train.summary {
        std::fs::write(path, serde_json::to_string_pretty(&summary)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Carries out `sfb run` (`args`, parsed from `argv`, the arguments after `run`) and
/// returns the summary and every node's per-clock records.
pub fn execute(
    args: &RunArgs,
    argv: &[String],
    progress: Option<super::p2p::Progress>,
) -> Result<(Summary, Vec<ClockRecord>)> {
    let p = args.peers;
    if p == 0 {
        bail!("--peers must be at least 1");
    }
    let q = args.out_degree.unwrap_or(p - 1);
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!("--timeout must be a positive number of seconds");
    }
    let tl = std::time::Duration::from_secs_f64(args.topology_time_limit.max(0.0));
    let shaping = if args.netns {
        if args.transport != Transport::Libp2p {
            bail!("--netns shapes libp2p links; add --transport libp2p");
        }
        let Some(rate) = args.net.bandwidth else {
            bail!("--netns needs --bandwidth: the rate the kernel shapes each node's sends to");
        };
        if let Err(why) = super::netns::available() {
            bail!("--netns is not available here: {why}");
        }
        Some(super::p2p::Shaping {
            rate,
            burst: args.net.burst,
        })
    } else {
        None
    };
    let (summary, records) = match (args.backend, args.transport) {
        (Backend::Fms, Transport::Mem) => {
            if args.net.bandwidth.is_some() {
                bail!("--bandwidth is enforced by the libp2p transport; add --transport libp2p");
            }
            super::fms::run_mem_fms(
                p,
                &args.train,
                std::time::Duration::from_secs_f64(args.timeout),
                args.fms_push,
                progress,
            )?
        }
        (Backend::Fms, Transport::Libp2p) => super::p2p::launch(
            p,
            q,
            &args.train,
            argv,
            std::time::Duration::from_secs_f64(args.timeout),
            tl,
            true,
            shaping,
            progress,
        )?,
        (Backend::Sfb, Transport::Mem) => {
            if args.net.bandwidth.is_some() || args.net.wire != sfb_core::wire::Dtype::F32 {
                bail!(
                    "--bandwidth and --wire f16 apply to the libp2p transport; add --transport libp2p"
                );
            }
            let out = if p == 1 {
                vec![vec![]]
            } else {
                super::p2p::topology_for(p, q, tl)?.out_lists()
            };
            run_mem_cluster(
                &out,
                &args.train,
                std::time::Duration::from_secs_f64(args.timeout),
                progress,
            )?
        }
        (Backend::Sfb, Transport::Libp2p) => super::p2p::launch(
            p,
            q,
            &args.train,
            argv,
            std::time::Duration::from_secs_f64(args.timeout),
            tl,
            false,
            shaping,
            progress,
        )?,
    };
    Ok((summary, records))
}

/// Runs P peers over the in-memory transport, peer `i` sending to `out[i]`; returns the
/// summary and every peer's per-clock records.
pub fn run_mem_cluster(
    out: &[Vec<usize>],
    train: &TrainArgs,
    timeout: std::time::Duration,
    progress: Option<super::p2p::Progress>,
) -> Result<(Summary, Vec<ClockRecord>)> {
    let p = out.len();
    let data = load_data(train)?;
    let engines = (0..p)
        .map(|id| {
            let o: Vec<PeerId> = out[id].iter().map(|&x| PeerId(x as u32)).collect();
            let i: Vec<PeerId> = (0..p)
                .filter(|&src| out[src].contains(&id))
                .map(|x| PeerId(x as u32))
                .collect();
            build_engine(train, &data, id as u32, p, o, i)
        })
        .collect::<Result<Vec<_>>>()?;
    let opts = sfb_net::mem::Options {
        timeout,
        progress: mem_progress(progress, p),
        ..Default::default()
    };
    let runs = sfb_net::mem::run(engines, &opts)?;
    let reports: Vec<PeerReport> = runs
        .iter()
        .map(|r| {
            let e = r.engine.last_evaluation();
            PeerReport {
                peer: r.engine.config().id.0,
                wall_s: r.records.last().map_or(0.0, |x| x.wall_s),
                metrics: r.engine.metrics().clone(),
                objective: e.map(|e| e.objective),
                test_accuracy: e.and_then(|e| e.accuracy),
                checksum: r.engine.replica().checksum(),
            }
        })
        .collect();
    let ws: Vec<_> = runs.iter().map(|r| r.engine.replica().w()).collect();
    let info = RunInfo {
        backend: "sfb".into(),
        transport: "mem".into(),
        model: train.model.name().into(),
        consistency: train.consistency().to_string(),
        peers: p,
        out_degree: out.first().map_or(0, Vec::len),
        clocks: train.clocks,
        batch: train.batch,
    };
    let mut summary = Summary::aggregate(info, &reports, max_divergence(&ws));
    let extras: Vec<_> = runs
        .iter()
        .filter_map(|r| r.engine.last_evaluation().map(|e| e.extra))
        .collect();
    summary.extra = sfb_core::metrics::mean_extras(&extras);
    let records = runs.into_iter().flat_map(|r| r.records).collect();
    Ok((summary, records))
}

/// `progress` as the in-memory transport's per-record callback (server records, whose
/// peer is [`sfb_core::PeerId::SERVER`], report as node `servers_at`).
pub fn mem_progress(
    progress: Option<super::p2p::Progress>,
    servers_at: usize,
) -> Option<sfb_net::p2p::ProgressFn> {
    progress.map(|f| -> sfb_net::p2p::ProgressFn {
        std::sync::Arc::new(move |r: &ClockRecord| {
            let node = if r.peer == sfb_core::PeerId::SERVER.0 {
                servers_at
            } else {
                r.peer as usize
            };
            f(node, r.clock);
        })
    })
}

fn opt(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.4}"))
}

pub fn print_summary(s: &Summary) {
    println!(
        "{} over {} · {} peers · Q={} · {} · {} clocks × K={}",
        s.backend, s.transport, s.peers, s.out_degree, s.consistency, s.clocks, s.batch
    );
    println!(
        "  objective {}  test accuracy {}  wall {:.2}s  {:.0} samples/s",
        opt(s.objective),
        opt(s.test_accuracy),
        s.wall_s,
        s.samples_per_s
    );
    println!(
        "  per peer: compute {:.3}s  apply {:.3}s  wait {:.3}s  final flush {:.3}s  eval {:.3}s",
        s.compute_s, s.apply_s, s.wait_s, s.flush_s, s.eval_s
    );
    println!(
        "  bytes sent {} ({:.0} per clock, {:.0} per clock per peer)  max staleness {}",
        s.bytes_sent, s.bytes_per_clock, s.bytes_per_clock_per_peer, s.max_staleness
    );
    if !s.extra.is_empty() {
        let figures: Vec<String> = s
            .extra
            .iter()
            .map(|(k, v)| {
                if v.abs() < 1e-3 && *v != 0.0 {
                    format!("{k} {v:.3e}")
                } else if v.fract() == 0.0 && v.abs() < 1e15 {
                    // Counts (e.g. the tbf counters of --netns).
                    format!("{k} {v:.0}")
                } else {
                    format!("{k} {v:.6}")
                }
            })
            .collect();
        println!("  {}", figures.join("  "));
    }
    let distinct = {
        let mut c = s.replica_checksums.clone();
        c.sort();
        c.dedup();
        c.len()
    };
    println!(
        "  replicas: {} distinct checksum(s) of {}; max divergence {}",
        distinct,
        s.replica_checksums.len(),
        s.max_replica_divergence
            .map_or("-".into(), |d| format!("{d:.3e}"))
    );
}
