//! Optimize a Q-out topology and compare it with the constructions.
//!
//! ```text
//! cargo run --release -p sfb-topology --example optimize -- 100 3 10
//! ```
//! Arguments: P, Q, time limit in seconds (default 10), seed (default 0).

use std::time::Duration;

use sfb_topology::{Options, exponential, gap, kautz, lower_bound, optimize};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let p: usize = arg(0, "100").parse()?;
    let q: usize = arg(1, "3").parse()?;
    let secs: f64 = arg(2, "10").parse()?;
    let seed: u64 = arg(3, "0").parse()?;
    let lb = lower_bound(p, q);
    let pct = |c: u64| 100.0 * gap(c, lb);
    let k = kautz(p, q)?.cost();
    let e = exponential(p, q)?.cost();
    println!("P={p} Q={q} bound={lb}");
    println!("kautz        {k} ({:.3} %)", pct(k));
    println!("exponential  {e} ({:.3} %)", pct(e));
    let opts = Options::default()
        .seed(seed)
        .time_limit(Duration::from_secs_f64(secs));
    let r = optimize(p, q, &opts)?;
    println!(
        "optimized    {} ({:.3} %) proven={} ({:?}) start={} ({:.3} %) moves={} nodes={} in {:.3?}",
        r.cost,
        pct(r.cost),
        r.proven_optimal,
        r.proof,
        r.start,
        pct(r.start_cost),
        r.moves,
        r.nodes,
        r.elapsed
    );
    Ok(())
}
