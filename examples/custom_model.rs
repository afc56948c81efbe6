//! A user's model, not in `sfb-models`: least squares `min ½‖W x − y‖²`, whose gradient
//! `(W x − y) xᵀ` is one factor pair per sample, on 4 peers under BSP: full broadcast
//! recovers W, and so does partial broadcast (Q = 2, the default mode, gossip at this size:
//! weighted neighbourhood updates plus compressed consensus; and `--partial tree`, every
//! peer's batch summed up a tree and the sum sent back down). The paper's literal mode
//! (`--partial paper`) stalls here far from W* (its replicas each settle near their own
//! shard's fit); it is run too, to show the difference. The same builder lines then run
//! on the simulator and under the FMS parameter server: under BSP their replicas are
//! bitwise the in-memory full broadcast's.
//!
//! `custom_model node CLUSTER ID` runs one peer of a cluster file over libp2p instead (start
//! one process per id, on each machine): the same builder lines, `.run_node(CLUSTER, ID)`.
//! Each node then checks its replica against the in-memory run on the file's topology.
#[path = "shared/lsq.rs"]
mod lsq;

use lsq::LeastSquares;
use ndarray::Array2;
use sfb::harness::Cluster;

/// `cargo run --release --example custom_model [PEERS [CLOCKS [Q]]]` (default 4 200 2), or
/// `… custom_model node CLUSTER ID` for one libp2p peer of a cluster file.
fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let node = args.get(1).is_some_and(|a| a == "node");
    let arg = |i: usize, default: usize| -> anyhow::Result<usize> {
        args.get(i)
            .map_or(Ok(default), |a| a.parse().map_err(anyhow::Error::from))
    };
    let (peers, clocks, q) = if node {
        (4, 200, 2)
    } else {
        (arg(1, 4)?, arg(2, 200)?, arg(3, 2)?)
    };
    let (truth, data) = lsq::problem(4000);
    let cluster = || {
        Cluster::builder()
            .peers(peers)
            .model(|_| LeastSquares)
            .init_w(Array2::zeros((3, 8)))
            .data(data.clone())
            .clocks(clocks as u64)
    };
    if node {
        let (file, id) = (std::path::Path::new(&args[2]), arg(3, 0)?);
        let out = cluster().run_node(file, id)?;
        // The same run in memory, on the file's topology, for comparison.
        let c = sfb::net::cluster::Cluster::load(file)?;
        let lists = (0..c.peers()).map(|i| c.out(i).to_vec()).collect();
        let mem = cluster()
            .peers(c.peers())
            .out_lists(lists)
            .run_mem()?
            .summary();
        let mine = &out.summary.replica_checksums[0];
        println!(
            "peer {id}: {} clocks over libp2p, {} bytes sent, replica {mine}",
            out.summary.clocks, out.summary.bytes_sent
        );
        anyhow::ensure!(
            *mine == mem.replica_checksums[id],
            "peer {id}'s replica differs from the in-memory run's ({})",
            mem.replica_checksums[id]
        );
        println!("peer {id}: bitwise the in-memory run's replica");
        return Ok(());
    }
    let (step, lr) = cluster().resolved_optimizer();
    println!("default step: {step} · lr {lr}");
    let full = cluster().run_mem()?;
    let partial = cluster().out_degree(q).run_mem()?;
    let tree = cluster()
        .out_degree(q)
        .partial(sfb::harness::PartialSpec::Tree)
        .run_mem()?;
    let paper = cluster()
        .out_degree(q)
        .partial(sfb::harness::PartialSpec::Paper)
        .run_mem()?;
    // Σ|W − W*| over 24 entries of W* in [−1, 1]; every replica is checked.
    let worst = |run: &sfb::harness::MemRun<LeastSquares>| {
        run.peers
            .iter()
            .map(|p| (&p.engine.replica().w() - &truth).mapv(f32::abs).sum())
            .fold(0f32, f32::max)
    };
    // The mode the run took with none named (`sfb::harness::auto`): its topology says.
    let default_mode = match partial.summary().topology {
        Some(t) if t.source.starts_with("tree") => "tree",
        _ => "gossip",
    };
    let (full, partial, paper) = (worst(&full), worst(&partial), worst(&paper));
    let tree = worst(&tree);
    println!("{peers} peers, {clocks} clocks, worst replica's Σ|W − W*|:");
    println!("  full broadcast          {full:.2e}");
    println!("  Q={q} default ({default_mode:>6})  {partial:.2e}");
    println!("  Q={q} tree               {tree:.2e}");
    println!("  Q={q} paper mode         {paper:.2e}");
    // The same lines on the simulator (simulated seconds, the `sfb sim` cost model) and
    // under FMS: BSP applies the same updates, so the replicas agree bit for bit.
    let sim = cluster().run_sim(&sfb::harness::sim::SimOptions::default(), None, None)?;
    let fms = cluster()
        .run_fms_mem(sfb::harness::Push::Factors)?
        .summary();
    let mem = cluster().run_mem()?.summary();
    let simulated = sim.summary.sim.as_ref().map_or(0.0, |s| s.simulated_s);
    println!("full broadcast's replica checksums:");
    println!("  in memory               {:?}", mem.replica_checksums);
    println!(
        "  simulated ({simulated:.3} s)   {:?}",
        sim.summary.replica_checksums
    );
    println!("  FMS parameter server    {:?}", fms.replica_checksums);
    anyhow::ensure!(
        sim.summary.replica_checksums == mem.replica_checksums
            && fms.replica_checksums == mem.replica_checksums,
        "the transports disagree"
    );
    anyhow::ensure!(full < 1e-3, "full broadcast did not converge");
    anyhow::ensure!(
        partial < 1e-2,
        "partial broadcast (the default, {default_mode}) did not converge"
    );
    anyhow::ensure!(tree < 1e-2, "partial broadcast (tree) did not converge");
    Ok(())
}
