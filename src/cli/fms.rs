//! The FMS (parameter server, full matrix sync) backend of `sfb run`.

use anyhow::Result;
use sfb_core::fms::{Client, Server};
use sfb_core::metrics::{ClockRecord, PeerReport, RunInfo, Summary, max_divergence};

use super::train::{TrainArgs, build_engine, load_data};

/// What FMS clients push to the server each clock (`--fms-push`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Push {
    /// Sufficient factors, O(K·(J+D)) floats (Project Adam style).
    #[default]
    Factors,
    /// The dense ΔW, J·D floats (the paper's FMS).
    Dense,
}

impl From<Push> for sfb_core::fms::Push {
    fn from(p: Push) -> Self {
        match p {
            Push::Factors => sfb_core::fms::Push::Factors,
            Push::Dense => sfb_core::fms::Push::Dense,
        }
    }
}

/// Runs a parameter server and P clients over the in-memory transport; returns the summary
/// and the per-clock records of every client, then the server's (`peer` = 4294967295).
///
/// Clients are built exactly as `run_mem_cluster` builds SFB peers (same model, shard,
/// sampler, initial W and evaluator). The summary's `out_degree` is 1 (each client sends to
/// the server only); `bytes_sent` includes the server's full-W pushes;
/// `replica_checksums` has one entry per client (its final W, which is the server's).
pub fn run_mem_fms(
    p: usize,
    train: &TrainArgs,
    timeout: std::time::Duration,
    push: Push,
    progress: Option<super::p2p::Progress>,
) -> Result<(Summary, Vec<ClockRecord>)> {
    anyhow::ensure!(p >= 1, "FMS needs at least one client");
    let data = load_data(train)?;
    let engine = |id: u32| build_engine(train, &data, id, p, Vec::new(), Vec::new());
    let clients = (0..p as u32)
        .map(|id| Ok(Client::from_engine(engine(id)?, push.into())?))
        .collect::<Result<Vec<_>>>()?;
    let server = Server::from_engine(engine(0)?, push.into())?;
    let opts = sfb_net::mem::Options {
        timeout,
        progress: super::run::mem_progress(progress, p),
        ..Default::default()
    };
    let run = sfb_net::mem_fms::run(server, clients, &opts)?;
    let reports: Vec<PeerReport> = run
        .clients
        .iter()
        .map(|r| {
            let e = r.client.last_evaluation();
            PeerReport {
                peer: r.client.id().0,
                wall_s: r.records.last().map_or(0.0, |x| x.wall_s),
                metrics: r.client.metrics().clone(),
                objective: e.map(|e| e.objective),
                test_accuracy: e.and_then(|e| e.accuracy),
                checksum: r.client.checksum(),
            }
        })
        .collect();
    let ws: Vec<_> = run.clients.iter().map(|r| r.client.w()).collect();
    let info = RunInfo {
        backend: "fms".into(),
        transport: "mem".into(),
        model: train.model.name().into(),
        consistency: train.consistency().to_string(),
        peers: p,
        out_degree: 1,
        clocks: train.clocks,
        batch: train.batch,
    };
    let mut summary = Summary::aggregate_with_server(
        info,
        &reports,
        run.server.server.metrics(),
        max_divergence(&ws),
    );
    let extras: Vec<_> = run
        .clients
        .iter()
        .filter_map(|r| r.client.last_evaluation().map(|e| e.extra))
        .collect();
    summary.extra = sfb_core::metrics::mean_extras(&extras);
    let records = run
        .clients
        .into_iter()
        .flat_map(|r| r.records)
        .chain(run.server.records)
        .collect();
    Ok((summary, records))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;
    use sfb_core::fms::Push as CorePush;
    use sfb_core::metrics::ClockRecord;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        train: TrainArgs,
    }

    fn train(args: &[&str]) -> TrainArgs {
        Cli::parse_from(std::iter::once("sfb").chain(args.iter().copied())).train
    }

    /// Server bytes per clock from the server's records (`peer = PeerId::SERVER.0`).
    fn server_bytes(records: &[ClockRecord]) -> (u64, u64) {
        let last = records
            .iter()
            .rfind(|r| r.peer == sfb_core::PeerId::SERVER.0)
            .expect("server records");
        (last.bytes_sent, last.bytes_received)
    }

    #[test]
    fn run_mem_fms_matches_sfb_and_counts_the_server_bytes() {
        let t = train(&[
            "--synthetic",
            "classes=6,features=10,samples=400",
            "--clocks",
            "8",
            "--batch",
            "4",
            "--eval-every",
            "0",
        ]);
        let p = 4;
        let full: Vec<Vec<usize>> = (0..p)
            .map(|i| (0..p).filter(|&o| o != i).collect())
            .collect();
        let (sfb, _) =
            super::super::run::run_mem_cluster(&full, &t, Duration::from_secs(60), None).unwrap();
        let (fms, records) =
            run_mem_fms(p, &t, Duration::from_secs(60), Push::Factors, None).unwrap();
        assert_eq!(fms.backend, "fms");
        assert_eq!(fms.replica_checksums.len(), p);
        assert_eq!(fms.replica_checksums, sfb.replica_checksums);
        assert_eq!(fms.max_replica_divergence, Some(0.0));
        let (server_sent, server_received) = server_bytes(&records);
        let client_sent: u64 = (0..p as u32)
            .map(|c| records.iter().rfind(|r| r.peer == c).unwrap().bytes_sent)
            .sum();
        assert_eq!(server_received, client_sent);
        assert_eq!(fms.bytes_sent, client_sent + server_sent);
        // W pushes: P frames of J·D floats (plus a few header bytes) per clock.
        let w_bytes = (6 * 10 * 4) as u64;
        assert!(server_sent >= 8 * p as u64 * w_bytes);
        assert!(server_sent <= 8 * p as u64 * (w_bytes + 16));
        assert_eq!(CorePush::from(Push::Dense), CorePush::Dense);
    }

    /// The figure for the note: server bytes per clock against 2·P·J·D·4 (+ factor
    /// bytes). `SFB_FMS_MEASURE=J,D,K,P,clocks` overrides the shape.
    /// Run: `cargo test -p sfb --bin sfb -- --ignored --nocapture measure_server_bytes`.
    #[test]
    #[ignore = "measurement; prints figures"]
    fn measure_server_bytes_per_clock() {
        let spec = std::env::var("SFB_FMS_MEASURE").unwrap_or_else(|_| "1024,1024,16,4,5".into());
        let v: Vec<usize> = spec.split(',').map(|x| x.parse().unwrap()).collect();
        let (j, d, k, p, clocks) = (v[0], v[1], v[2], v[3], v[4] as u64);
        let t = train(&[
            "--synthetic",
            &format!("classes={j},features={d},samples={},density=0.1", 8 * k * p),
            "--clocks",
            &clocks.to_string(),
            "--batch",
            &k.to_string(),
            "--eval-every",
            "0",
        ]);
        for push in [Push::Factors, Push::Dense] {
            let (s, records) = run_mem_fms(p, &t, Duration::from_secs(600), push, None).unwrap();
            let (sent, received) = server_bytes(&records);
            let jd4 = (j * d * 4) as f64;
            let c = clocks as f64;
            println!(
                "FMS {push:?} push, P={p} J={j} D={d} K={k}, {clocks} clocks: server sent {:.0} B/clock \
                 (P·J·D·4 = {:.0}), received {:.0} B/clock; server in+out {:.0} B/clock vs \
                 2·P·J·D·4 = {:.0}; cluster bytes_per_clock {:.0}; wall {:.2}s",
                sent as f64 / c,
                p as f64 * jd4,
                received as f64 / c,
                (sent + received) as f64 / c,
                2.0 * p as f64 * jd4,
                s.bytes_per_clock,
                s.wall_s,
            );
        }
        let full: Vec<Vec<usize>> = (0..p)
            .map(|i| (0..p).filter(|&o| o != i).collect())
            .collect();
        let (s, _) =
            super::super::run::run_mem_cluster(&full, &t, Duration::from_secs(600), None).unwrap();
        println!(
            "SFB full broadcast, same run: cluster bytes_per_clock {:.0} (P·(P−1)·K·(J+D)·4 = {:.0}); wall {:.2}s",
            s.bytes_per_clock,
            (p * (p - 1) * k * (j + d) * 4) as f64,
            s.wall_s
        );
    }
}
