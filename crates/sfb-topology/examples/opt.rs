//! Experiment driver.
use std::time::Duration;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let p: usize = a[1].parse().unwrap();
    let q: usize = a[2].parse().unwrap();
    let secs: f64 = a.get(3).map_or(10.0, |s| s.parse().unwrap());
    let lb = sfb_topology::lower_bound(p, q);
    let k = sfb_topology::kautz(p, q).unwrap().cost();
    let e = sfb_topology::exponential(p, q).unwrap().cost();
    println!(
        "P={p} Q={q} lb={lb} kautz={k} ({:.3}%) exp={e} ({:.3}%)",
        100.0 * sfb_topology::gap(k, lb),
        100.0 * sfb_topology::gap(e, lb)
    );
    let r = sfb_topology::optimize(
        p,
        q,
        &sfb_topology::Options::default().time_limit(Duration::from_secs_f64(secs)),
    )
    .unwrap();
    println!(
        "opt={} ({:.3}%) proven={} {:?} nodes={} moves={} {:?}",
        r.cost,
        100.0 * sfb_topology::gap(r.cost, lb),
        r.proven_optimal,
        r.proof,
        r.nodes,
        r.moves,
        r.elapsed
    );
}
