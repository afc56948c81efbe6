//! `sfb bench --scenario scale` (issue 14): SFB full broadcast, partial broadcast at
//! Q = 3 and Q = 10, and FMS at P ∈ {16, 64, 256, 1024} on the simulator — a cluster of
//! [`SCALE_CORES`]-core machines on 10 Gbit/s links unless the flags say otherwise — with
//! ring allreduce of the dense gradient modelled alongside.
//!
//! Every arm runs real engines on the discrete-event simulator. Arms whose arithmetic
//! would take too long here (full broadcast at large P: every peer applies (P − 1)·K
//! pairs a clock) run timing-only ([`sfb_harness::sim::SimOptions::timing_only`]): the same
//! protocol and frames, so bytes and times are measured, but no learning, so no time to
//! target; they run 10 clocks (a steady per-clock time needs no more). Partial-broadcast
//! arms run up to [`PARTIAL_CLOCKS_MAX`] times the clocks (their clocks are cheaper and
//! each applies fewer batches: equal clocks would not compare equal times). The report
//! says which arm ran how.

use std::fmt::Write as _;

use sfb_plot::Series;

use super::scenarios::{Options, line, mlr};
use super::{Arm, Error, Report, Result, Runner, human_bytes, run_arms};
use sfb_harness::{Backend, RunSpec, Transport};

/// Cores of the scale scenario's modelled machines (its default `--flops` is this many
/// times [`sfb_harness::sim::DEFAULT_FLOPS`]).
pub const SCALE_CORES: usize = 16;

/// The cluster sizes of the scale scenario.
pub const SCALE_PEERS: &[usize] = &[16, 64, 256, 1024];

/// Flops of arithmetic (applies) above which an arm runs timing-only: about a minute of
/// this machine's GEMM rate.
const REAL_ARITHMETIC_FLOPS: f64 = 3e12;

/// Clocks of a timing-only arm (at most the scenario's).
const TIMING_ONLY_CLOCKS: u64 = 10;

/// The partial-broadcast out-degrees of the scenario.
const QS: [usize; 2] = [3, 10];

/// At most this many times the scenario's clocks for a partial-broadcast arm: a clock of
/// partial broadcast costs about `Q/(P − 1)` of full broadcast's, and a replica applies
/// `(Q + 1)/P` of the batches, so equal clocks would compare unequal times; the arm runs
/// `min(10, (P − 1)/Q)` times the clocks (fewer if its arithmetic would pass
/// [`REAL_ARITHMETIC_FLOPS`]), enough to reach full broadcast's target if it does so within
/// full broadcast's time.
const PARTIAL_CLOCKS_MAX: u64 = 10;

/// One arm of the scenario and what it stands for.
struct Planned {
    arm: Arm,
    p: usize,
    kind: Kind,
    timing_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Full,
    Partial(usize),
    Fms,
}

impl Kind {
    fn label(self) -> String {
        match self {
            Kind::Full => "SFB full".into(),
            Kind::Partial(q) => format!("SFB Q={q}"),
            Kind::Fms => "FMS".into(),
        }
    }
}

/// `--scenario scale`. `--peers` caps P (default 1024), `--size` is J = D (default 128),
/// `--clocks` the clocks per arm (default 60), `--bandwidth` every NIC's rate (default
/// 10gbit); the sim flags describe the rest of the machine.
///
/// # Errors
/// [`Error::Option`] for a cap below 16 or a bad rate; the first arm that fails.
pub fn scale(opts: &Options, runner: &Runner) -> Result<Report> {
    let cap = opts.peers.unwrap_or(1024);
    let ps: Vec<usize> = SCALE_PEERS.iter().copied().filter(|&p| p <= cap).collect();
    if ps.is_empty() {
        return Err(Error::Option {
            option: "peers",
            expected: "at least 16 (the scenario's P run over 16, 64, 256, 1024 up to it)",
            got: cap.to_string(),
        });
    }
    let n = opts.size.unwrap_or(128);
    let clocks = opts.clocks.unwrap_or(60);
    let k = 16usize;
    let mut o = opts.clone();
    o.transport = Transport::Sim;
    o.bandwidth = Some(opts.bandwidth.clone().unwrap_or_else(|| "10gbit".into()));
    let link = o.bandwidth().to_string();
    let mut report = Report::new(
        "scale",
        &format!(
            "simulated: P ∈ {ps:?}, MLR J=D={n}, K={k}, BSP, {link} NICs, {:.2e} flop/s machines: SFB full vs Q=3 vs Q=10 vs FMS vs ring allreduce (modelled)",
            o.sim.flops
        ),
    );
    let mut rules = Vec::new();
    let mut planned: Vec<Planned> = Vec::new();
    for &p in &ps {
        // Enough samples that no peer's shard is a handful (64 each), and a held-out set.
        let base = o.common(mlr(n, n, (64 * p).max(24_000), 500), p, clocks, 5)?;
        let mut kinds = vec![Kind::Full];
        kinds.extend(QS.iter().filter(|&&q| q + 1 < p).map(|&q| Kind::Partial(q)));
        kinds.push(Kind::Fms);
        let mut arms: Vec<Planned> = kinds
            .into_iter()
            .map(|kind| arm(&base, p, n, k, clocks, kind, opts.partial))
            .collect();
        // The reference of this P's target: its first arm that learns.
        let reference = arms.iter().position(|a| !a.timing_only).unwrap_or(0);
        let mut sub = Report::new("scale", "");
        let just: Vec<Arm> = arms.iter().map(|a| a.arm.clone()).collect();
        run_arms(runner, &mut sub, &just, reference, opts.frac(0.5))?;
        rules.push(format!(
            "P={p}: {} from \"{}\"",
            sub.target_objective
                .map_or("none".into(), |t| format!("{t:.4}")),
            just[reference].name
        ));
        report.arms.extend(sub.arms);
        planned.append(&mut arms);
    }
    report.target_rule = format!(
        "one target per P: the held-out objective its first learning arm (SFB full where its arithmetic runs, else Q=10) reached at the first evaluation at or after {:.0}% of its clocks ({})",
        opts.frac(0.5) * 100.0,
        rules.join("; ")
    );
    summarize(&mut report, &planned, &ps, n, k, &o);
    Ok(report)
}

/// The arm of `kind` at `p` peers, timing-only when its arithmetic is too much for here.
/// `partial`: the partial arms' mode (`--partial`).
fn arm(
    base: &RunSpec,
    p: usize,
    n: usize,
    k: usize,
    clocks: u64,
    kind: Kind,
    partial: Option<sfb_harness::PartialSpec>,
) -> Planned {
    let mut spec = base.clone();
    let applied_per_clock = match kind {
        Kind::Full => p * p,
        Kind::Partial(q) => p * (q + 1),
        // The server's dense adds and the clients' U·Vᵀ: about P rank-K products.
        Kind::Fms => p,
    };
    let flops_per_clock = applied_per_clock as f64 * k as f64 * 2.0 * (n * n) as f64;
    let clocks = match kind {
        Kind::Partial(q) => {
            let times = ((p - 1) / q).clamp(1, PARTIAL_CLOCKS_MAX as usize) as u64;
            let affordable = (REAL_ARITHMETIC_FLOPS / (flops_per_clock * clocks as f64)) as u64;
            clocks * times.min(affordable).max(1)
        }
        _ => clocks,
    };
    let flops = flops_per_clock * clocks as f64;
    let timing_only = kind != Kind::Fms && flops > REAL_ARITHMETIC_FLOPS;
    match kind {
        Kind::Full => spec.topology.out_degree = None,
        Kind::Partial(q) => {
            spec.topology.out_degree = Some(q);
            spec.net.partial = partial;
        }
        Kind::Fms => spec.backend = Backend::Fms,
    }
    spec.sim.timing_only = timing_only;
    if spec.train.clocks > 0 && clocks > spec.train.clocks {
        // About twice the evaluations of the other arms, not ten times (each costs every
        // peer a pass over the held-out set).
        let times = clocks / spec.train.clocks;
        spec.train.eval_every = spec.train.eval_every.max(1) * times.div_ceil(2);
    }
    spec.train.clocks = clocks;
    if timing_only {
        // Nothing to learn: enough clocks for a steady per-clock time. (Full broadcast
        // at P = 1024 is P² frames a clock, and each frame costs its receiver O(P) in the
        // engine's barrier bookkeeping: 10 clocks take minutes here.)
        spec.train.clocks = clocks.min(TIMING_ONLY_CLOCKS);
    }
    let name = format!(
        "P={p} {}{}",
        kind.label(),
        if timing_only { " (timing only)" } else { "" }
    );
    Planned {
        arm: Arm::new(name, spec),
        p,
        kind,
        timing_only,
    }
}

/// Simulated seconds per clock of a run, its evaluations excluded (timing-only runs have
/// none; under BSP every node evaluates at the same clocks).
pub(super) fn per_clock(s: &sfb_core::metrics::Summary) -> f64 {
    (s.wall_s - s.eval_s).max(0.0) / s.clocks.max(1) as f64
}

/// Ring allreduce of the dense J × D gradient at `p` nodes, as [`crate::plan`] prices it
/// on the simulator's model: `(bytes sent per node, seconds per clock)`.
fn ring(p: usize, n: usize, k: usize, o: &Options) -> (f64, f64) {
    let mut sim = o.sim.clone();
    sim.egress = sim.egress.or(o.rate().ok().flatten());
    let setup = crate::plan::Setup {
        peers: p,
        j: n,
        d: n,
        batch: k,
        sim,
        ..crate::plan::Setup::default()
    };
    crate::plan::plan(&setup)
        .ok()
        .and_then(|plan| {
            plan.estimate(crate::plan::Strategy::RingAllreduce)
                .map(|e| (e.bytes_sent as f64, e.clock_s))
        })
        .unwrap_or((f64::NAN, f64::NAN))
}

/// The scale tables, crossover and plots.
fn summarize(
    report: &mut Report,
    planned: &[Planned],
    ps: &[usize],
    n: usize,
    k: usize,
    o: &Options,
) {
    let mut rows = String::from(
        "| P | arm | arithmetic | bytes/clock per peer | ms per clock | time to target (s) |\n|---:|---|---|---:|---:|---:|\n",
    );
    let find = |p: usize, kind: Kind| {
        planned
            .iter()
            .zip(&report.arms)
            .find(|(pl, _)| pl.p == p && pl.kind == kind)
    };
    for (pl, a) in planned.iter().zip(&report.arms) {
        let _ = writeln!(
            rows,
            "| {} | {} | {} | {} | {:.3} | {} |",
            pl.p,
            pl.kind.label(),
            if pl.timing_only {
                "timing only"
            } else {
                "real"
            },
            human_bytes(a.summary.bytes_per_clock_per_peer),
            1e3 * per_clock(&a.summary),
            a.time_to_target_s.map_or("-".into(), |t| format!("{t:.4}"))
        );
    }
    for &p in ps {
        let (bytes, secs) = ring(p, n, k, o);
        let _ = writeln!(
            rows,
            "| {p} | ring allreduce (modelled) | - | {} | {:.3} | - |",
            human_bytes(bytes),
            1e3 * secs
        );
    }
    report.sections.push(("Per clock at scale".into(), rows));

    // Where partial broadcast overtakes full broadcast, per clock and to the target.
    let mut cross = String::from(
        "| P | full ms/clock | Q=3 ms/clock | Q=10 ms/clock | faster per clock | sooner to target |\n|---:|---:|---:|---:|---|---|\n",
    );
    let mut first_per_clock = None;
    for &p in ps {
        let t = |kind| find(p, kind).map(|(_, a)| per_clock(&a.summary));
        let ttt = |kind| find(p, kind).and_then(|(_, a)| a.time_to_target_s);
        let full = t(Kind::Full);
        let best_partial = QS
            .iter()
            .filter_map(|&q| t(Kind::Partial(q)).map(|x| (q, x)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let faster = match (full, best_partial) {
            (Some(f), Some((q, x))) if x < f => {
                first_per_clock.get_or_insert(p);
                format!("Q={q} ({:.2}× full)", f / x)
            }
            (Some(_), Some(_)) => "full".into(),
            _ => "-".into(),
        };
        let sooner = {
            let mut c: Vec<(String, f64)> = [Kind::Full, Kind::Partial(3), Kind::Partial(10)]
                .into_iter()
                .filter_map(|kind| ttt(kind).map(|x| (kind.label(), x)))
                .collect();
            c.sort_by(|a, b| a.1.total_cmp(&b.1));
            c.first().map_or("-".into(), |(l, _)| l.clone())
        };
        let ms = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.3}", 1e3 * x));
        let _ = writeln!(
            cross,
            "| {p} | {} | {} | {} | {faster} | {sooner} |",
            ms(full),
            ms(t(Kind::Partial(3))),
            ms(t(Kind::Partial(10)))
        );
    }
    report
        .sections
        .push(("Full vs partial broadcast: the crossover".into(), cross));
    report.notes.push(match first_per_clock {
        Some(p) => format!(
            "Per clock, partial broadcast is faster than full broadcast from P={p} on (of the P run); whether it also reaches the target sooner is in the crossover table (fewer updates reach each replica per clock)."
        ),
        None => "Per clock, full broadcast was never slower than partial broadcast at the P run.".into(),
    });
    report.notes.push(format!(
        "Simulated (sfb sim): real engines on the discrete-event simulator, times in simulated seconds from the cost model ({:.2e} flop/s, {:.2e} B/s memory, {} NICs, {} µs links); arms marked timing only did the protocol and sent every frame at its real size without the arithmetic (their bytes and times are measured, their learning is not).",
        o.sim.flops,
        o.sim.mem_bw,
        o.bandwidth(),
        o.sim.latency_s * 1e6
    ));

    let series = |f: &dyn Fn(&Planned, &super::ArmReport) -> f64,
                  ring_of: &dyn Fn(usize) -> f64| {
        let mut v: Vec<Series> = [Kind::Full, Kind::Partial(3), Kind::Partial(10), Kind::Fms]
            .into_iter()
            .map(|kind| Series {
                name: kind.label(),
                points: planned
                    .iter()
                    .zip(&report.arms)
                    .filter(|(pl, _)| pl.kind == kind)
                    .map(|(pl, a)| (pl.p as f64, f(pl, a)))
                    .collect(),
            })
            .collect();
        v.push(Series {
            name: "ring allreduce (modelled)".into(),
            points: ps.iter().map(|&p| (p as f64, ring_of(p))).collect(),
        });
        v
    };
    let bytes = series(&|_, a| a.summary.bytes_per_clock_per_peer, &|p| {
        ring(p, n, k, o).0
    });
    let times = series(&|_, a| 1e3 * per_clock(&a.summary), &|p| {
        1e3 * ring(p, n, k, o).1
    });
    let charts: [(&str, &str, &str, Vec<Series>); 2] = [
        (
            "scale-bytes-per-peer.png",
            "bytes per clock per peer vs P",
            "bytes per clock per peer",
            bytes,
        ),
        (
            "scale-time-per-clock.png",
            "time per clock vs P",
            "ms per clock (simulated)",
            times,
        ),
    ];
    for (file, caption, y, s) in charts {
        report.add_chart(
            file,
            caption,
            line(format!("scale: {caption}"), "peers P", y, s, true, None),
        );
    }
}
