//! `sfb bench --scenario stragglers` (issue 14): the consistency models under the ASYNC
//! paper's straggler patterns at data-centre scale, on the simulator.
//!
//! P = 256 peers (default) in partial broadcast (Q = 10), MLR, compute-bound: the
//! simulator prices `compute_sv` at [`COMPUTE_PER_SAMPLE_S`] a sample (a model whose
//! forward and backward passes dominate a clock, the setting of the ASYNC paper's
//! experiments), so a straggler's slower compute is what holds the others up. Arms: BSP
//! without stragglers (the reference whose objective sets the target), then for the
//! controlled-delay pattern (peer 0's compute 300% slower) and the production-cluster
//! pattern (about 25% of the peers 1.5–10× slower, seeded) each of BSP, SSP (s = 2, 8),
//! Async and throttled release (go when 8 of the 10 in-neighbours are ready). Real
//! engines and real learning: time to target per model and pattern.

use std::fmt::Write as _;

use sfb_plot::BarChart;

use super::report::Chart;
use super::scenarios::{Options, mlr};
use super::{Arm, Report, Result, Runner, run_arms};
use sfb_harness::{ConsistencySpec, StragglerSpec, Transport};

/// Simulated seconds of `compute_sv` per sample in the stragglers scenario (unless
/// `--compute-per-sample` says otherwise).
pub const COMPUTE_PER_SAMPLE_S: f64 = 1e-3;

/// The out-degree of the scenario's partial broadcast.
const Q: usize = 10;

/// `--scenario stragglers`: `--peers` (default 256), `--size` J = D (128), `--clocks`
/// (60), `--bandwidth` the NICs' rate (10gbit); the sim flags describe the machine.
///
/// # Errors
/// Option errors; the first arm that fails.
pub fn stragglers(opts: &Options, runner: &Runner) -> Result<Report> {
    let p = opts.peers.unwrap_or(256);
    let n = opts.size.unwrap_or(128);
    let clocks = opts.clocks.unwrap_or(60);
    let mut o = opts.clone();
    o.transport = Transport::Sim;
    o.bandwidth = Some(opts.bandwidth.clone().unwrap_or_else(|| "10gbit".into()));
    o.sim
        .compute_per_sample_s
        .get_or_insert(COMPUTE_PER_SAMPLE_S);
    let q = Q.min(p.saturating_sub(1)).max(1);
    let ready = (q * 4 / 5).max(1);
    let mut base = o.common(mlr(n, n, (64 * p).max(24_000), 500), p, clocks, 5)?;
    base.topology.out_degree = (q + 1 < p).then_some(q);
    let models = [
        ("BSP", ConsistencySpec::Bsp),
        ("SSP s=2", ConsistencySpec::Ssp { staleness: 2 }),
        ("SSP s=8", ConsistencySpec::Ssp { staleness: 8 }),
        ("Async", ConsistencySpec::Async),
        ("throttled", ConsistencySpec::Throttle { min_ready: ready }),
    ];
    let patterns = [
        (
            "controlled",
            StragglerSpec::Controlled {
                peer: 0,
                percent: 300,
            },
        ),
        ("production", StragglerSpec::Production),
    ];
    let mut arms = vec![Arm::new("BSP, no stragglers", base.clone())];
    for (pattern, straggler) in patterns {
        for (model, consistency) in &models {
            let mut spec = base.clone();
            spec.train.consistency = *consistency;
            spec.train.straggler = Some(straggler);
            arms.push(Arm::new(format!("{model}, {pattern}"), spec));
        }
    }
    let mut report = Report::new(
        "stragglers",
        &format!(
            "simulated: P={p}, Q={q}, MLR J=D={n}, K=16, compute {:.1} ms per sample, {} NICs: BSP vs SSP vs Async vs throttled release ({ready} of {q} ready) under controlled-delay (peer 0 +300%) and production-cluster stragglers",
            1e3 * o.sim.compute_per_sample_s.unwrap_or(COMPUTE_PER_SAMPLE_S),
            o.bandwidth()
        ),
    );
    let records = run_arms(runner, &mut report, &arms, 0, opts.frac(0.5))?;
    // Per arm: when the median peer's replica reached the target (its own clock).
    let target = report.target_objective;
    let median: Vec<Option<f64>> = records
        .iter()
        .map(|r| target.and_then(|t| median_peer_time(r, p, t)))
        .collect();
    let median_of = |name: &str| {
        arms.iter()
            .position(|a| a.name == name)
            .and_then(|i| median[i])
    };

    let mut table = String::from(
        "| consistency | controlled: all peers at target (s) | median peer at target (s) | ms per clock | production: all peers at target (s) | median peer at target (s) | ms per clock |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let (mut cats, mut controlled, mut production) = (Vec::new(), Vec::new(), Vec::new());
    let find = |name: &str| report.arms.iter().find(|a| a.name == name);
    let per_clock = |s: &sfb_core::metrics::Summary| 1e3 * super::scale::per_clock(s);
    for (model, _) in &models {
        let c = find(&format!("{model}, controlled"));
        let pr = find(&format!("{model}, production"));
        let ttt = |a: Option<&super::ArmReport>| {
            a.and_then(|a| a.time_to_target_s)
                .map_or("not reached".into(), |t| format!("{t:.3}"))
        };
        let ms = |a: Option<&super::ArmReport>| {
            a.map_or("-".into(), |a| format!("{:.2}", per_clock(&a.summary)))
        };
        let (mc, mp) = (
            median_of(&format!("{model}, controlled")),
            median_of(&format!("{model}, production")),
        );
        let m = |x: Option<f64>| x.map_or("not reached".into(), |t| format!("{t:.3}"));
        let _ = writeln!(
            table,
            "| {model} | {} | {} | {} | {} | {} | {} |",
            ttt(c),
            m(mc),
            ms(c),
            ttt(pr),
            m(mp),
            ms(pr)
        );
        cats.push(model.to_string());
        controlled.push(mc.unwrap_or(0.0));
        production.push(mp.unwrap_or(0.0));
    }
    if let Some(r) = find("BSP, no stragglers") {
        let _ = writeln!(
            table,
            "\nWithout stragglers BSP takes {:.2} ms per clock and reaches the target in {} s.\n\n*All peers at target*: the mean objective over every replica at a clock, timed when the slowest peer finished that clock (the other scenarios' measure). *Median peer at target*: when half the replicas had reached the target, each on its own clock (what a fast majority gains by not waiting). *ms per clock*: the run's simulated end over its clocks (the slowest peer's pace).",
            per_clock(&r.summary),
            r.time_to_target_s.map_or("-".into(), |t| format!("{t:.3}"))
        );
    }
    report
        .sections
        .push(("Time to target per consistency model".into(), table));
    let best = |pattern: &str| {
        models
            .iter()
            .filter_map(|(m, _)| median_of(&format!("{m}, {pattern}")).map(|t| (*m, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    };
    for pattern in ["controlled", "production"] {
        let bsp = median_of(&format!("BSP, {pattern}"));
        report.notes.push(match (best(pattern), bsp) {
            (Some((m, t)), Some(b)) => format!(
                "{pattern} stragglers: with {m} the median replica reached the target soonest ({t:.3} s, {:.2}× sooner than under BSP, {b:.3} s).",
                b / t
            ),
            (Some((m, t)), None) => format!(
                "{pattern} stragglers: with {m} the median replica reached the target soonest ({t:.3} s); under BSP it did not."
            ),
            _ => format!("{pattern} stragglers: no arm reached the target."),
        });
    }
    report.notes.push(format!(
        "Simulated (sfb sim): real engines and learning, times in simulated seconds; compute_sv priced at {:.1} ms per sample so that compute, which the stragglers slow, dominates a clock.",
        1e3 * o.sim.compute_per_sample_s.unwrap_or(COMPUTE_PER_SAMPLE_S)
    ));
    report.add_chart(
        "stragglers-time-to-target.png",
        "time to target per consistency model and straggler pattern",
        Chart::Bar(BarChart {
            title: format!("stragglers: median replica's time to target at P={p} (0: not reached)"),
            y_label: "time to target (simulated s)".into(),
            categories: cats,
            stacks: vec![
                ("controlled delay".into(), controlled),
                ("production cluster".into(), production),
            ],
            stacked: false,
            log_y: false,
        }),
    );
    Ok(report)
}

/// When the median of the `peers` replicas first evaluated at or below `target`, in its
/// own training seconds (wall minus evaluation time); `None` unless more than half did.
fn median_peer_time(
    records: &[sfb_core::metrics::ClockRecord],
    peers: usize,
    target: f64,
) -> Option<f64> {
    let mut first = vec![f64::INFINITY; peers];
    for r in records {
        let p = r.peer as usize;
        if p < peers && r.objective.is_some_and(|o| o <= target) {
            first[p] = first[p].min((r.wall_s - r.eval_s).max(0.0));
        }
    }
    first.sort_by(f64::total_cmp);
    first.get(peers / 2).copied().filter(|t| t.is_finite())
}
