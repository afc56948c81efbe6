//! The optimizer scenarios of `sfb bench`: how robust each method of [`sfb_core::optim`]
//! is to its initial step size ([`optimizers`], Bösen's Fig. 3 experiment on our models),
//! what the adaptive steps cost per clock, and AdaRevision against AdaGrad and decayed SGD
//! under bounded staleness ([`adarevision`]).

use std::fmt::Write as _;

use sfb_core::{Method, Schedule};
use sfb_plot::{BarChart, LineChart, Series};

use super::report::Chart;
use super::{Arm, ArmReport, Error, Options, Report, Result, Runner, mlr, run_arms};
use sfb_harness::{
    ConsistencySpec, DataSource, MethodSpec, ModelChoice, RunSpec, ScheduleSpec, StragglerSpec,
    default_lr,
};

/// The synthetic problem both scenarios train on (one place, so it can be swapped).
fn data() -> String {
    "classes=12,features=200,samples=8000,test=2000".into()
}

/// Multipliers of a method's [`default_lr`]: two orders of magnitude in half decades.
const LR_FACTORS: [f64; 5] = [0.1, 0.316, 1.0, 3.16, 10.0];

/// Clocks of each cost arm (enough that a clock's few milliseconds average out).
const COST_CLOCKS: u64 = 100;

/// A method as the scenarios compare it: its name in tables, method and schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Variant {
    name: &'static str,
    method: Method,
    schedule: Schedule,
}

/// Plain SGD with the classic `1/√t` decay (τ = 100 clocks).
const SGD_DECAY: Variant = Variant {
    name: "SGD, inv-sqrt decay",
    method: Method::Sgd,
    schedule: Schedule::InvSqrt { tau: 100.0 },
};

const fn constant(name: &'static str, method: Method) -> Variant {
    Variant {
        name,
        method,
        schedule: Schedule::Constant,
    }
}

/// The methods of the step-size sweep, in table order.
const SWEEP: [Variant; 4] = [
    SGD_DECAY,
    constant("factored", Method::Factored),
    constant("adagrad", Method::AdaGrad),
    constant("adarevision", Method::AdaRevision),
];

/// The methods of the staleness comparison, in table order.
const STALE: [Variant; 3] = [
    constant("adarevision", Method::AdaRevision),
    constant("adagrad", Method::AdaGrad),
    SGD_DECAY,
];

/// The staleness bounds of `adarevision` (0: BSP).
const BOUNDS: [u64; 3] = [0, 2, 8];

/// `x` rounded to three significant digits (0.5 × 0.316 → 0.158), as an `lr`.
fn three_digits(x: f64) -> f32 {
    format!("{x:.2e}").parse().expect("a formatted number")
}

/// The MLR run both scenarios start from: [`data`], `K = 16`, seed 2016, with the
/// transport, budget, peers, clocks and evaluation every `clocks / 20` of `opts`.
fn base(opts: &Options, clocks: u64) -> Result<RunSpec> {
    let mut spec = RunSpec {
        model: ModelChoice::Mlr,
        data: DataSource::Synthetic(data()),
        ..RunSpec::default()
    };
    spec.train.batch = 16;
    spec.train.seed = 2016;
    opts.common(spec, opts.peers.unwrap_or(4), clocks, (clocks / 20).max(1))
}

/// `spec` training with `v` at step size `lr`.
fn with(mut spec: RunSpec, v: Variant, lr: f32) -> RunSpec {
    spec.train.optimizer = Some(MethodSpec(v.method));
    spec.train.lr_schedule = ScheduleSpec(v.schedule);
    spec.train.lr = Some(lr);
    spec
}

/// The step-size sweep: every method of [`SWEEP`] at `default_lr × f` for every `f` of
/// [`LR_FACTORS`], BSP, default 300 clocks; method-major order.
fn sweep_arms(opts: &Options) -> Result<Vec<Arm>> {
    let base = base(opts, opts.clocks.unwrap_or(300))?;
    let mut arms = Vec::new();
    for v in SWEEP {
        for f in LR_FACTORS {
            let lr = three_digits(f64::from(default_lr(v.method)) * f);
            arms.push(Arm::new(
                format!("{} lr={lr}", v.name),
                with(base.clone(), v, lr),
            ));
        }
    }
    Ok(arms)
}

/// The cost arms: sgd, factored and adagrad at J = D = `size` (default 1024) on
/// [`mlr`]'s problem, [`COST_CLOCKS`] clocks, evaluated only at the end; SGD at `mlr`'s step
/// size, the adaptive methods at their [`default_lr`].
fn cost_arms(opts: &Options) -> Result<Vec<Arm>> {
    let n = opts.size.unwrap_or(1024);
    let spec = opts.common(
        mlr(n, n, 8192, 256),
        opts.peers.unwrap_or(4),
        COST_CLOCKS,
        0,
    )?;
    let sgd = spec.train.lr.unwrap_or(default_lr(Method::Sgd));
    Ok([
        ("sgd", Method::Sgd, sgd),
        ("factored", Method::Factored, default_lr(Method::Factored)),
        ("adagrad", Method::AdaGrad, default_lr(Method::AdaGrad)),
    ]
    .into_iter()
    .map(|(name, m, lr)| Arm::new(name, with(spec.clone(), constant(name, m), lr)))
    .collect())
}

/// The staleness arms: for every bound of [`BOUNDS`] every method of [`STALE`] at its
/// default step size, one rotating straggler (`straggler_ms`, default 20 ms), default 200
/// clocks.
fn stale_arms(opts: &Options) -> Result<Vec<Arm>> {
    let base = base(opts, opts.clocks.unwrap_or(200))?;
    let delay_ms = opts.straggler_ms.unwrap_or(20);
    let mut arms = Vec::new();
    for s in BOUNDS {
        for v in STALE {
            let mut spec = with(base.clone(), v, default_lr(v.method));
            spec.train.consistency = if s == 0 {
                ConsistencySpec::Bsp
            } else {
                ConsistencySpec::Ssp { staleness: s }
            };
            spec.train.straggler = Some(StragglerSpec::Rotating { delay_ms });
            arms.push(Arm::new(format!("{}, s={s}", v.name), spec));
        }
    }
    Ok(arms)
}

/// The held-out objective of `spec`'s starting W, measured on its own test set (what a
/// peer evaluates before its first step; records start after it).
fn untrained_objective(spec: &RunSpec) -> Result<f64> {
    let t = &spec.train;
    let measure = || -> sfb_harness::Result<f64> {
        let problem = spec.data.load(&spec.model, t.seed)?.scaled(t.scale.0)?;
        let model = spec.model.spec();
        let w0 = model.init_w(&problem, t.init_std, t.seed);
        Ok(model
            .evaluator(&problem, t.seed)
            .evaluate(w0.view())
            .objective)
    };
    measure().map_err(|e| Error::Run {
        arm: "untrained W".into(),
        command: format!("evaluate the starting W of --synthetic {:?}", data()),
        source: Box::new(e),
    })
}

fn fmt_obj(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_finite() => format!("{x:.4}"),
        Some(x) => x.to_string(),
        None => "-".into(),
    }
}

fn lines(
    title: String,
    x_label: &str,
    series: Vec<Series>,
    log_x: bool,
    log_y: bool,
    hline: Option<(f64, String)>,
) -> Chart {
    Chart::Line(LineChart {
        title,
        x_label: x_label.into(),
        y_label: "held-out objective".into(),
        series,
        log_x,
        log_y,
        hline,
        markers: true,
    })
}

/// What one method did over the step sizes.
#[derive(Debug, Clone, PartialEq)]
struct Robustness {
    name: &'static str,
    /// max / min of the final objectives (infinite when one is not finite).
    spread: f64,
    /// Step sizes whose final objective ended below the untrained one.
    below: usize,
}

/// Per method of [`SWEEP`]: spread and step sizes below `untrained`, from `finals`
/// (method-major, [`LR_FACTORS`] per method).
fn robustness(finals: &[Option<f64>], untrained: f64) -> Vec<Robustness> {
    SWEEP
        .iter()
        .zip(finals.chunks(LR_FACTORS.len()))
        .map(|(v, f)| {
            let vals: Vec<f64> = f.iter().map(|x| x.unwrap_or(f64::NAN)).collect();
            let finite = vals.iter().all(|x| x.is_finite() && *x > 0.0);
            let max = vals.iter().copied().fold(f64::MIN, f64::max);
            let min = vals.iter().copied().fold(f64::MAX, f64::min);
            Robustness {
                name: v.name,
                spread: if finite { max / min } else { f64::INFINITY },
                below: vals.iter().filter(|&&x| x < untrained).count(),
            }
        })
        .collect()
}

/// `r` from the most robust to the least: most step sizes below the untrained objective,
/// then the smallest spread (stable: ties keep [`SWEEP`]'s order).
fn ranked(r: &[Robustness]) -> Vec<&Robustness> {
    let mut v: Vec<&Robustness> = r.iter().collect();
    v.sort_by(|a, b| b.below.cmp(&a.below).then(a.spread.total_cmp(&b.spread)));
    v
}

/// `optimizers`: every method at five step sizes over two orders of magnitude around its
/// default (MLR, P = 4, BSP): final held-out objective and accuracy per step size, the
/// spread per method, and the cost per clock of the adaptive steps at J = D = `size`.
///
/// # Errors
/// The first arm that fails; a data source that does not load.
pub fn optimizers(opts: &Options, runner: &Runner) -> Result<Report> {
    let arms = sweep_arms(opts)?;
    let spec0 = &arms[0].spec;
    let (p, clocks) = (spec0.peers, spec0.train.clocks);
    let mut report = Report::new(
        "optimizers",
        &format!(
            "P={p}, MLR on synthetic {}, K=16, BSP, {clocks} clocks: final objective of sgd (inv-sqrt decay), factored, adagrad, adarevision at a base lr × {{0.1, 0.316, 1, 3.16, 10}}; cost per clock at J=D={}",
            data(),
            opts.size.unwrap_or(1024)
        ),
    );
    let untrained = untrained_objective(spec0)?;
    // The reference: the default method (factored) at its default step size.
    let reference = arms
        .iter()
        .position(|a| {
            let t = &a.spec.train;
            t.optimizer == Some(MethodSpec(Method::Factored))
                && t.lr == Some(default_lr(Method::Factored))
        })
        .unwrap_or(0);
    run_arms(runner, &mut report, &arms, reference, opts.frac(0.5))?;

    let finals: Vec<Option<f64>> = report.arms.iter().map(|a| a.final_objective).collect();
    let rob = robustness(&finals, untrained);
    let mut table = String::from("| method | base lr |");
    for f in LR_FACTORS {
        let _ = write!(table, " ×{f} |");
    }
    table += " spread (max/min) | lrs below untrained |\n|---|---:|";
    table += &"---:|".repeat(LR_FACTORS.len() + 2);
    table += "\n";
    for ((v, chunk), r) in SWEEP
        .iter()
        .zip(report.arms.chunks(LR_FACTORS.len()))
        .zip(&rob)
    {
        let _ = write!(table, "| {} | {} |", v.name, default_lr(v.method));
        for a in chunk {
            let _ = write!(
                table,
                " {} ({}) |",
                fmt_obj(a.final_objective),
                a.final_accuracy
                    .map_or("-".into(), |x| format!("{:.1}%", x * 100.0))
            );
        }
        let _ = writeln!(
            table,
            " {:.2} | {}/{} |",
            r.spread,
            r.below,
            LR_FACTORS.len()
        );
    }
    let _ = write!(
        table,
        "\nCells: final held-out objective (test accuracy) after {clocks} clocks, step size = base lr × the column's factor (base: `default_lr` without the data, 0.1 for the adaptive methods, 0.5 for SGD; `sfb run`'s data-dependent default on this data is 5 / mean ‖x‖₁ ≈ 0.031, the ×0.316 column). Untrained objective (the starting W evaluated on the same test set): {untrained:.4}.\n"
    );
    report
        .sections
        .push(("Final objective by step size".into(), table));

    let finite = |x: f64| x.is_finite() && x > 0.0;
    let series: Vec<Series> = SWEEP
        .iter()
        .zip(report.arms.chunks(LR_FACTORS.len()))
        .zip(arms.chunks(LR_FACTORS.len()))
        .map(|((v, done), arms)| Series {
            name: v.name.into(),
            points: done
                .iter()
                .zip(arms)
                .filter_map(|(a, arm)| {
                    let lr = f64::from(arm.spec.train.lr?);
                    a.final_objective.filter(|&o| finite(o)).map(|o| (lr, o))
                })
                .collect(),
        })
        .collect();
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .collect();
    let (lo, hi) = ys
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &y| (l.min(y), h.max(y)));
    report.add_chart(
        "optimizers-final-objective-vs-lr.png",
        "final objective vs step size",
        lines(
            format!("optimizers: final held-out objective vs lr ({clocks} clocks)"),
            "learning rate (log scale)",
            series,
            true,
            // A log y axis only when the values span more than a decade.
            hi > 10.0 * lo,
            Some((untrained, format!("untrained {untrained:.4}"))),
        ),
    );
    let order = ranked(&rob);
    if let (Some(most), Some(least)) = (order.first(), order.last()) {
        let all: Vec<String> = order
            .iter()
            .map(|r| {
                format!(
                    "{} {}/{}, {:.2}×",
                    r.name,
                    r.below,
                    LR_FACTORS.len(),
                    r.spread
                )
            })
            .collect();
        report.notes.push(format!(
            "Most robust to the step size: {}; least robust: {} (most to least, step sizes ending below the untrained objective and spread max/min of the final objective: {}).",
            most.name,
            least.name,
            all.join("; ")
        ));
    }

    report
        .extra
        .insert("untrained_objective".into(), serde_json::json!(untrained));
    report.extra.insert(
        "robustness".into(),
        rob.iter()
            .map(|r| {
                serde_json::json!({
                    "method": r.name,
                    "spread": if r.spread.is_finite() { Some(r.spread) } else { None },
                    "lrs_below_untrained": r.below,
                })
            })
            .collect(),
    );
    cost_per_clock(opts, runner, &mut report)?;
    Ok(report)
}

/// The "Cost per clock" section of `optimizers`: [`cost_arms`] run now, ms per clock and
/// apply ms per clock, and their ratios to SGD.
fn cost_per_clock(opts: &Options, runner: &Runner, report: &mut Report) -> Result<()> {
    let arms = cost_arms(opts)?;
    let n = opts.size.unwrap_or(1024);
    let mut sub = Report::new("optimizers", "");
    run_arms(runner, &mut sub, &arms, 0, 1.0)?;
    let per_clock = |a: &ArmReport| a.train_s / a.summary.clocks.max(1) as f64 * 1e3;
    let apply = |a: &ArmReport| a.split_per_clock()[1] * 1e3;
    let sgd = sub.arms.first().map(|a| (per_clock(a), apply(a)));
    let mut t = String::from(
        "| method | ms per clock | compute | apply | wait | other | ms per clock ÷ sgd | apply ÷ sgd |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut json = Vec::new();
    for a in &sub.arms {
        let [c, ap, w, o] = a.split_per_clock();
        let ratio = sgd.map(|(ms, ap0)| (per_clock(a) / ms, apply(a) / ap0));
        let _ = writeln!(
            t,
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} |",
            a.name,
            per_clock(a),
            c * 1e3,
            ap * 1e3,
            w * 1e3,
            o * 1e3,
            ratio.map_or("-".into(), |r| format!("{:.2}×", r.0)),
            ratio.map_or("-".into(), |r| format!("{:.2}×", r.1)),
        );
        json.push(serde_json::json!({
            "name": a.name,
            "ms_per_clock": per_clock(a),
            "apply_ms_per_clock": apply(a),
            "ms_per_clock_over_sgd": ratio.map(|r| r.0),
            "apply_over_sgd": ratio.map(|r| r.1),
            "command": a.command,
        }));
    }
    let p = arms[0].spec.peers;
    let _ = write!(
        t,
        "\nP={p}, MLR J=D={n} (synthetic classes={n},features={n},samples=8192,test=256,rank=16,blobs=0.3), K=16, BSP, {COST_CLOCKS} clocks, evaluated only at the end; same seed for all three, run one after another in this invocation. ms per clock is training time (evaluation excluded) ÷ clocks; compute/apply/wait/other are means over peers.\n\nCommands:\n"
    );
    for a in &sub.arms {
        let _ = writeln!(t, "- {}: `{}`", a.name, a.command);
    }
    let ratio_note = |name: &str| {
        let a = sub.arm(name)?;
        let (ms, ap0) = sgd?;
        Some(format!(
            "{name}/sgd: {:.2}× per clock ({:.1} vs {:.1} ms), apply {:.2}× ({:.1} vs {:.1} ms)",
            per_clock(a) / ms,
            per_clock(a),
            ms,
            apply(a) / ap0,
            apply(a),
            ap0
        ))
    };
    let ratios: Vec<String> = ["factored", "adagrad"]
        .iter()
        .filter_map(|m| ratio_note(m))
        .collect();
    if !ratios.is_empty() {
        report.notes.push(format!(
            "Cost per clock at J=D={n} (goal: time per clock within 10% of plain SGD), measured: {}.",
            ratios.join("; ")
        ));
    }
    if cfg!(debug_assertions) {
        report.notes.push(
            "This was measured by a debug build of sfb (the workspace's own crates, sfb-core's dense passes among them, are compiled with fewer optimizations than in --release): rerun with a release build before reading the cost ratios."
                .into(),
        );
    }
    let splits: Vec<[f64; 4]> = sub.arms.iter().map(ArmReport::split_per_clock).collect();
    report.add_chart(
        "optimizers-cost-per-clock.png",
        "cost per clock by method",
        Chart::Bar(BarChart {
            title: format!("optimizers: where a peer's time goes, J=D={n}"),
            y_label: "ms per clock (mean peer)".into(),
            categories: sub.arms.iter().map(|a| a.name.clone()).collect(),
            stacks: ["compute", "apply", "wait", "other"]
                .iter()
                .enumerate()
                .map(|(i, s)| (s.to_string(), splits.iter().map(|x| x[i] * 1e3).collect()))
                .collect(),
            stacked: true,
            log_y: false,
        }),
    );
    report
        .sections
        .push((format!("Cost per clock (J=D={n})"), t));
    report
        .extra
        .insert("cost_per_clock".into(), serde_json::Value::Array(json));
    Ok(())
}

/// The first evaluated clock at which `a`'s objective is at or below `target`, and the
/// training time then.
fn first_at_target(a: &ArmReport, target: f64) -> Option<(u64, f64)> {
    a.curve
        .iter()
        .find(|p| p.objective <= target)
        .map(|p| (p.clock, p.train_s))
}

/// `adarevision`: AdaRevision, AdaGrad and inv-sqrt SGD at their default step sizes under
/// SSP(s), s ∈ {0, 2, 8}, with a rotating straggler (MLR, P = 4): clocks and time to one
/// common target (AdaGrad at s = 0, half-way), final objective, staleness.
///
/// # Errors
/// The first arm that fails.
pub fn adarevision(opts: &Options, runner: &Runner) -> Result<Report> {
    let arms = stale_arms(opts)?;
    let spec0 = &arms[0].spec;
    let (p, clocks) = (spec0.peers, spec0.train.clocks);
    let delay = match spec0.train.straggler {
        Some(s) => s.delay().as_millis(),
        None => 0,
    };
    let mut report = Report::new(
        "adarevision",
        &format!(
            "P={p}, MLR on synthetic {}, K=16, {clocks} clocks, rotating straggler (+{delay} ms per step): adarevision vs adagrad vs SGD (inv-sqrt decay) at default lr, SSP s ∈ {BOUNDS:?}",
            data()
        ),
    );
    let reference = arms
        .iter()
        .position(|a| a.name == "adagrad, s=0")
        .unwrap_or(0);
    run_arms(runner, &mut report, &arms, reference, opts.frac(0.5))?;
    let target = report.target_objective;
    let mut t = String::from(
        "| arm | s | clocks to target | training time then (s) | final objective | final accuracy | max staleness |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for (a, spec) in report.arms.iter().zip(&arms) {
        let s = match spec.spec.train.consistency {
            ConsistencySpec::Ssp { staleness } => staleness,
            _ => 0,
        };
        let hit = target.and_then(|x| first_at_target(a, x));
        let _ = writeln!(
            t,
            "| {} | {s} | {} | {} | {} | {} | {} |",
            a.name,
            hit.map_or("not reached".into(), |h| h.0.to_string()),
            hit.map_or("-".into(), |h| format!("{:.2}", h.1)),
            fmt_obj(a.final_objective),
            a.final_accuracy
                .map_or("-".into(), |x| format!("{:.1}%", x * 100.0)),
            a.summary.max_staleness,
        );
    }
    t += "\nclocks to target: the first evaluated clock whose held-out objective (mean over peers) is at or below the target; the time is the training time (evaluation excluded) at that clock.\n";
    report.sections.push(("Per arm".into(), t));

    let hline = target.map(|x| (x, format!("target {x:.4}")));
    for s in BOUNDS {
        let suffix = format!(", s={s}");
        let series: Vec<Series> = report
            .arms
            .iter()
            .filter(|a| a.name.ends_with(&suffix))
            .map(|a| Series {
                name: a.name.trim_end_matches(&suffix).into(),
                points: a
                    .curve
                    .iter()
                    .filter(|c| c.objective.is_finite())
                    .map(|c| (c.clock as f64, c.objective))
                    .collect(),
            })
            .collect();
        report.add_chart(
            &format!("adarevision-objective-s{s}.png"),
            &format!("held-out objective vs clock, s={s}"),
            lines(
                format!("adarevision: held-out objective vs clock, s={s}"),
                "clock",
                series,
                false,
                false,
                hline.clone(),
            ),
        );
    }

    // From the measured numbers: AdaRevision against AdaGrad and SGD at each bound.
    let mut below: [(Vec<String>, Vec<String>); 2] = Default::default();
    let mut notes = Vec::new();
    for s in BOUNDS {
        let get = |m: &str| report.arm(&format!("{m}, s={s}"));
        let (Some(ar), Some(ag), Some(sg)) =
            (get("adarevision"), get("adagrad"), get(SGD_DECAY.name))
        else {
            continue;
        };
        let clock = |a: &ArmReport| {
            target
                .and_then(|x| first_at_target(a, x))
                .map_or("not reached".into(), |h| format!("clock {}", h.0))
        };
        let fin = |a: &ArmReport| a.final_objective.unwrap_or(f64::NAN);
        notes.push(format!(
            "s={s} (max staleness {}): first evaluation at or below the target: adarevision {}, adagrad {}, SGD {}; final objective adarevision {}, adagrad {}, SGD {} (adarevision {:+.1}% vs adagrad).",
            ar.summary.max_staleness,
            clock(ar),
            clock(ag),
            clock(sg),
            fmt_obj(ar.final_objective),
            fmt_obj(ag.final_objective),
            fmt_obj(sg.final_objective),
            (fin(ar) / fin(ag) - 1.0) * 100.0,
        ));
        for (i, other) in [ag, sg].into_iter().enumerate() {
            let side = if fin(ar) < fin(other) {
                &mut below[i].0
            } else {
                &mut below[i].1
            };
            side.push(format!("s={s}"));
        }
    }
    report.notes.extend(notes);
    report.notes.push(
        "Under SSP which updates a replica holds when it computes depends on timing (the straggler, the scheduler of this machine): the s > 0 arms are one run each and differ from run to run; under BSP every run of an arm is the same."
            .into(),
    );
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    report.notes.push(format!(
        "AdaRevision's final objective was below AdaGrad's at: {}; not below it at: {}. Below SGD's (inv-sqrt decay) at: {}; not below it at: {} (same data, seed, straggler schedule; each method at its default step size).",
        list(&below[0].0),
        list(&below[0].1),
        list(&below[1].0),
        list(&below[1].1),
    ));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sfb_harness::Transport;

    fn mem() -> Options {
        Options {
            transport: Transport::Mem,
            ..Options::default()
        }
    }

    #[test]
    fn sweep_is_four_methods_at_five_step_sizes() {
        let arms = sweep_arms(&mem()).unwrap();
        assert_eq!(arms.len(), 20);
        let lrs: Vec<f32> = arms.iter().map(|a| a.spec.train.lr.unwrap()).collect();
        assert_eq!(&lrs[..5], &[0.05, 0.158, 0.5, 1.58, 5.0]);
        for chunk in lrs[5..].chunks(5) {
            assert_eq!(chunk, &[0.01, 0.0316, 0.1, 0.316, 1.0]);
        }
        assert_eq!(arms[0].name, "SGD, inv-sqrt decay lr=0.05");
        assert_eq!(arms[19].name, "adarevision lr=1");
        let first = &arms[0].spec.train;
        assert_eq!(first.optimizer, Some(MethodSpec(Method::Sgd)));
        assert_eq!(first.lr_schedule.0, Schedule::InvSqrt { tau: 100.0 });
        assert_eq!(
            arms[7].spec.train.optimizer,
            Some(MethodSpec(Method::Factored))
        );
        assert_eq!(arms[7].spec.train.lr_schedule.0, Schedule::Constant);
        for a in &arms {
            let s = &a.spec;
            assert_eq!((s.peers, s.train.clocks, s.train.eval_every), (4, 300, 15));
            assert_eq!(s.train.consistency, ConsistencySpec::Bsp);
            assert_eq!(s.transport, Transport::Mem);
            assert_eq!(s.data, DataSource::Synthetic(data()));
            assert!(s.validate().is_ok(), "{}", a.name);
            // Every arm is reproducible by a plain `sfb run` command.
            assert!(
                a.command()
                    .contains(&format!("--lr {}", s.train.lr.unwrap()))
            );
        }
        let names: std::collections::BTreeSet<_> = arms.iter().map(|a| &a.name).collect();
        assert_eq!(names.len(), arms.len());
    }

    #[test]
    fn cost_arms_share_everything_but_the_method() {
        let opts = Options {
            size: Some(256),
            ..mem()
        };
        let arms = cost_arms(&opts).unwrap();
        let names: Vec<&str> = arms.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["sgd", "factored", "adagrad"]);
        for a in &arms {
            let t = &a.spec.train;
            assert_eq!((t.clocks, t.eval_every, t.seed), (COST_CLOCKS, 0, 2016));
            assert_eq!(
                a.spec.data,
                DataSource::Synthetic(
                    "classes=256,features=256,samples=8192,test=256,rank=16,blobs=0.3".into()
                )
            );
        }
        assert_eq!(arms[1].spec.train.lr, Some(0.1));
        assert_eq!(
            arms[2].spec.train.optimizer,
            Some(MethodSpec(Method::AdaGrad))
        );
    }

    #[test]
    fn stale_arms_cover_every_bound_and_method() {
        let opts = Options {
            clocks: Some(40),
            ..mem()
        };
        let arms = stale_arms(&opts).unwrap();
        assert_eq!(arms.len(), 9);
        assert_eq!(arms[1].name, "adagrad, s=0");
        assert_eq!(arms[8].name, "SGD, inv-sqrt decay, s=8");
        let bounds: Vec<ConsistencySpec> = arms.iter().map(|a| a.spec.train.consistency).collect();
        assert_eq!(bounds[..3], [ConsistencySpec::Bsp; 3]);
        assert_eq!(bounds[3..6], [ConsistencySpec::Ssp { staleness: 2 }; 3]);
        assert_eq!(bounds[6..], [ConsistencySpec::Ssp { staleness: 8 }; 3]);
        for a in &arms {
            let t = &a.spec.train;
            assert_eq!(t.straggler, Some(StragglerSpec::Rotating { delay_ms: 20 }));
            assert_eq!(t.lr, Some(default_lr(t.optimizer.unwrap().0)));
            assert_eq!((t.clocks, t.eval_every), (40, 2));
            assert!(a.spec.validate().is_ok(), "{}", a.name);
        }
    }

    #[test]
    fn robustness_counts_and_spreads() {
        let mut finals = vec![Some(1.0); 20];
        finals[0] = Some(3.0); // SGD: one above an untrained 2.5
        finals[5] = None; // factored: one missing
        finals[10] = Some(f64::NAN); // adagrad: one diverged
        let r = robustness(&finals, 2.5);
        assert_eq!(r.iter().map(|x| x.below).collect::<Vec<_>>(), [4, 4, 4, 5]);
        assert_eq!(r[0].spread, 3.0);
        assert!(r[1].spread.is_infinite() && r[2].spread.is_infinite());
        assert_eq!(r[3].spread, 1.0);
        let order: Vec<&str> = ranked(&r).iter().map(|x| x.name).collect();
        // Ties on the count go to the smaller spread, then keep the sweep's order.
        assert_eq!(
            order,
            ["adarevision", "SGD, inv-sqrt decay", "factored", "adagrad"]
        );
    }
}
