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
    /// Seconds a peer may wait without receiving anything before the run fails.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    #[command(flatten)]
    pub train: TrainArgs,
}

pub fn run(args: &RunArgs) -> Result<()> {
    let p = args.peers;
    if p == 0 {
        bail!("--peers must be at least 1");
    }
    let q = args.out_degree.unwrap_or(p - 1);
    if q != p - 1 {
        bail!(
            "--out-degree {q} < P−1 needs partial-broadcast topologies, which `sfb run` does not wire yet; use full broadcast (Q = P−1 = {})",
            p - 1
        );
    }
    match (args.backend, args.transport) {
        (Backend::Sfb, Transport::Mem) => {}
        (Backend::Fms, _) => bail!("--backend fms is not available in this build yet"),
        (_, Transport::Libp2p) => bail!("--transport libp2p is not available in this build yet"),
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!("--timeout must be a positive number of seconds");
    }
    let (summary, records) = run_mem_cluster(
        p,
        &args.train,
        std::time::Duration::from_secs_f64(args.timeout),
    )?;
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

/// Runs P peers with full broadcast over the in-memory transport; returns the summary and
/// every peer's per-clock records.
pub fn run_mem_cluster(
    p: usize,
    train: &TrainArgs,
    timeout: std::time::Duration,
) -> Result<(Summary, Vec<ClockRecord>)> {
    let data = load_data(train)?;
    let engines = (0..p as u32)
        .map(|id| {
            let others: Vec<PeerId> = (0..p as u32).filter(|&o| o != id).map(PeerId).collect();
            build_engine(train, &data, id, p, others.clone(), others)
        })
        .collect::<Result<Vec<_>>>()?;
    let opts = sfb_net::mem::Options {
        timeout,
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
        out_degree: p - 1,
        clocks: train.clocks,
        batch: train.batch,
    };
    let summary = Summary::aggregate(info, &reports, max_divergence(&ws));
    let records = runs.into_iter().flat_map(|r| r.records).collect();
    Ok((summary, records))
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
