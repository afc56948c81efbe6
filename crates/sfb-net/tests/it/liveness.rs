//! Liveness over real libp2p streams, in one process: a peer that is slow but alive keeps
//! its neighbours waiting (its heartbeats say it lives), however long it takes; without
//! heartbeats the same slowness reads as a dead peer.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sfb_core::{PeerId, Stragglers};
use sfb_net::Error;
use sfb_net::cluster::Cluster;
use sfb_net::p2p::{Node, Options, Outcome};

const CLOCKS: u64 = 3;

/// A fresh folder for one test under the build's own temporary directory.
fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sfb-net-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Three MLR engines with full broadcast under BSP on seeded synthetic data.
fn engines() -> Vec<sfb_core::Engine<sfb_models::Mlr>> {
    use sfb_models::synthetic;
    let spec: synthetic::ClassificationSpec = "classes=3,features=6,samples=120".parse().unwrap();
    let (train, _) = synthetic::classification(&spec, 7);
    (0..3u32)
        .map(|i| {
            let mut cfg = sfb_core::Config::full_broadcast(PeerId(i), 3);
            cfg.clocks = CLOCKS;
            cfg.batch_size = 4;
            cfg.eval_every = 0;
            let mine = sfb_core::shard_indices(train.len(), 3, i as usize)
                .map(|k| train[k].clone())
                .collect();
            sfb_core::Engine::new(
                cfg,
                sfb_models::Mlr::new(3, 6),
                synthetic::init_w(3, 6, 0.01, 7),
                sfb_core::Shard::new(mine, 11 + u64::from(i)),
            )
            .unwrap()
        })
        .collect()
}

type Run = Result<Outcome<sfb_core::Engine<sfb_models::Mlr>>, Error>;

/// Runs three peers over libp2p on loopback with `opts`; peer 1 takes 1.2 s per clock,
/// more than twice the liveness timeout of 500 ms. Every result, by peer.
async fn run_with_a_slow_peer(name: &str, heartbeat: Duration) -> Vec<Run> {
    let dir = tempdir(name);
    let topo = sfb_topology::full(3).unwrap();
    let mut cluster =
        Cluster::init(&dir.join("cluster.toml"), &topo, &["127.0.0.1".into()], 0).unwrap();
    let shape = crate::p2p::mlr_shape(CLOCKS);
    let opts = Options {
        liveness_timeout: Duration::from_millis(500),
        heartbeat,
        stragglers: Stragglers::Fixed {
            peer: PeerId(1),
            delay: Duration::from_millis(1200),
        },
        ..Options::default()
    };
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(Node::start(&cluster, i, &shape, &opts).await.unwrap());
    }
    cluster
        .set_addrs(nodes.iter().map(|n| n.listen_addr().clone()).collect())
        .unwrap();
    let cluster = Arc::new(cluster);
    let runs: Vec<_> = nodes
        .into_iter()
        .zip(engines())
        .map(|(node, engine)| {
            let (cluster, opts, shape) = (Arc::clone(&cluster), opts.clone(), shape.clone());
            tokio::spawn(async move { node.run(&cluster, engine, &shape, &opts).await })
        })
        .collect();
    let mut out = Vec::new();
    for r in runs {
        out.push(
            tokio::time::timeout(Duration::from_secs(60), r)
                .await
                .expect("every peer ends within 60 s")
                .unwrap(),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_peer_is_waited_for_past_the_liveness_timeout_while_it_heartbeats() {
    let runs = run_with_a_slow_peer("slow-alive", Duration::from_millis(50)).await;
    let mut sums = Vec::new();
    for (i, r) in runs.into_iter().enumerate() {
        let out = r.unwrap_or_else(|e| panic!("peer {i} failed: {e}"));
        assert_eq!(out.records.len() as u64, CLOCKS + 1);
        // The others waited for peer 1 about 1.2 s per clock, and heard its heartbeats.
        if i != 1 {
            let wait = out.records.last().unwrap().wait_s;
            assert!(wait > 2.0, "peer {i} waited {wait} s");
        }
        assert!(out.stats.heartbeats_received.load(Ordering::Relaxed) > 0);
        sums.push(out.node.replica().checksum());
    }
    assert!(sums.iter().all(|s| s == &sums[0]), "{sums:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_heartbeats_the_same_slow_peer_reads_as_lost() {
    // A heartbeat interval far beyond the run: no heartbeat is ever sent.
    let runs = run_with_a_slow_peer("slow-silent", Duration::from_secs(3600)).await;
    let errors: Vec<String> = runs
        .into_iter()
        .map(|r| r.expect_err("no peer finishes").to_string())
        .collect();
    assert!(
        errors.iter().any(|e| e.contains(": no heartbeat for ")),
        "{errors:?}"
    );
}
