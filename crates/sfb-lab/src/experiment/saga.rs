//! The `saga` scenario of `sfb bench`: SAGA over factors ([`sfb_core::Method::Saga`],
//! [`sfb_models::Saga`]) against SGD at the same step on L2-regularized MLR, and ASAGA
//! (asynchronous or bounded-stale SAGA) against synchronous SAGA under a straggler.
//!
//! The problem is the one of sfb-models' SDCA golden test: the first `n = 600` samples of
//! the digits split in `crates/sfb-models/tests/fixtures` (D = 64, J = 10), `λ = 0.01`,
//! whose primal optimum `P*` of `(1/n) Σ CE + (λ/2)‖W‖²` scikit-learn computed
//! independently (`sdca_reference.json`, gradient norm 3e-8). Every arm's evaluator reports
//! the primal on those `n` samples, so `P(W) − P*` is measured exactly, per evaluation.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sfb_core::Method;
use sfb_models::ModelSpec;
use sfb_plot::{LineChart, Series};

use super::report::Chart;
use super::{
    Arm, ArmReport, CurvePoint, Error, Options, Report, Result, Runner, io, run_arms,
    time_to_target,
};
use sfb_harness::{
    ConsistencySpec, DataSource, MethodSpec, ModelChoice, RunSpec, ScaleSpec, StragglerSpec,
};

/// The fixtures directory of sfb-models (the source tree this binary was built from).
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sfb-models/tests/fixtures")
}

/// The suboptimality every arm's time is measured to.
const TARGET: f64 = 1e-4;

/// SAGA's (and SGD's) step size: stable with margin on this problem at P = 4, K = 10
/// (0.4 converges faster, 0.8 diverges; measured while writing this scenario).
const LR: f32 = 0.2;

/// Mini-batch per peer and clock.
const BATCH: usize = 10;

/// The L2-MLR reference: `(n, λ, P*)` from `sdca_reference.json`.
fn reference(dir: &Path) -> Result<(usize, f64, f64)> {
    let path = dir.join("sdca_reference.json");
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|source| Error::Json {
        path: path.clone(),
        source,
    })?;
    let field = |k: &str| {
        v[k].as_f64().ok_or_else(|| Error::Option {
            option: "sdca_reference.json",
            expected: "the keys samples, lambda and primal",
            got: format!("no number {k:?} in {}", path.display()),
        })
    };
    Ok((
        field("samples")? as usize,
        field("lambda")?,
        field("primal")?,
    ))
}

/// Writes the first `n` samples of the digits training file (the reference's subset) to a
/// file of their own, named by `n`, in the temporary directory; returns its path.
fn subset(dir: &Path, n: usize) -> Result<PathBuf> {
    let src = dir.join("digits_train.libsvm");
    let text = std::fs::read_to_string(&src).map_err(io(&src))?;
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .take(n)
        .collect();
    let out = std::env::temp_dir().join(format!("sfb-bench-saga-digits{n}.libsvm"));
    // Written aside and renamed: runs at the same time never read a half-written file.
    let tmp = out.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, lines.join("\n") + "\n").map_err(io(&tmp))?;
    std::fs::rename(&tmp, &out).map_err(io(&out))?;
    Ok(out)
}

/// The arms: SAGA (BSP), SGD at the same step (BSP; run by [`sgd_arm`]), then SAGA under
/// BSP, ASAGA under SSP(4) and under Async, all three with a rotating straggler.
fn arms(opts: &Options, n: usize, train: PathBuf, test: PathBuf, lambda: f64) -> Result<Vec<Arm>> {
    let peers = opts.peers.unwrap_or(4);
    let epoch = epoch_clocks(n, peers);
    let clocks = opts.clocks.unwrap_or(60 * epoch);
    let mut base = RunSpec {
        model: ModelChoice::L2mlr { lambda },
        data: DataSource::Files {
            train,
            test: Some(test),
            holdout: 0.2,
            features: Some(64),
            stream: false,
        },
        ..RunSpec::default()
    };
    base.train.batch = BATCH;
    base.train.lr = Some(LR);
    base.train.optimizer = Some(MethodSpec(Method::Saga));
    base.train.seed = 2016;
    // The reference optimum is of the features as stored (already in [0, 1]).
    base.train.scale = ScaleSpec(sfb_models::Scale::None);
    let base = opts.common(base, peers, clocks, epoch)?;
    let delay_ms = opts.straggler_ms.unwrap_or(10);
    let straggling = |consistency| {
        let mut s = base.clone();
        s.train.consistency = consistency;
        s.train.straggler = Some(StragglerSpec::Rotating { delay_ms });
        s
    };
    Ok(vec![
        Arm::new("SAGA, BSP", base.clone()),
        Arm::new("SGD, BSP, same lr", base.clone()),
        Arm::new(
            format!("SAGA, BSP, straggler {delay_ms} ms"),
            straggling(ConsistencySpec::Bsp),
        ),
        Arm::new(
            format!("ASAGA, SSP s=4, straggler {delay_ms} ms"),
            straggling(ConsistencySpec::Ssp { staleness: 4 }),
        ),
        Arm::new(
            format!("ASAGA, async, straggler {delay_ms} ms"),
            straggling(ConsistencySpec::Async),
        ),
    ])
}

/// Clocks per epoch: `n` samples over `peers` peers drawing [`BATCH`] each per clock.
fn epoch_clocks(n: usize, peers: usize) -> u64 {
    (n as f64 / (peers.max(1) * BATCH) as f64).round().max(1.0) as u64
}

/// Runs `arm` (a SAGA spec) as SGD with weight decay λ on the same primal, in this
/// process: [`ModelSpec::MlrPrimal`] without SAGA, which no `sfb run` flag selects
/// (`--model l2mlr --optimizer sgd` is SDCA).
fn sgd_arm(runner: &Runner, arm: &Arm, lambda: f64, target: f64) -> Result<ArmReport> {
    runner.say(&format!(
        "{}: SGD with weight decay, in this process",
        arm.name
    ));
    let mut spec = arm.spec.clone();
    spec.output.keep_records = true;
    let fail = |source: sfb_harness::Error| Error::Run {
        arm: arm.name.clone(),
        command: arm.command(),
        source: Box::new(source),
    };
    spec.validate().map_err(fail)?;
    let mut opt = sfb_core::Optimizer::new(Method::Sgd);
    opt.l2 = lambda as f32;
    let out = sfb_harness::Cluster::from_spec(&spec)
        .and_then(|b| {
            b.model_spec(ModelSpec::MlrPrimal {
                lambda,
                saga: false,
            })
            .optimizer(opt)
            .run_mem()
        })
        .map_err(fail)?
        .into_outcome();
    let mut r = ArmReport::new(arm, out.summary, &out.records, Some(target));
    r.command = format!(
        "(in-process: {} with SGD and weight decay λ = {lambda} instead of SAGA; \
         Builder::model_spec(ModelSpec::MlrPrimal {{ saga: false, .. }}))",
        r.command
    );
    Ok(r)
}

/// `P(W) − P*` of a curve point.
fn gap(p: &CurvePoint, p_star: f64) -> f64 {
    p.objective - p_star
}

/// Epochs per decade of suboptimality over the curve's points with `gap` between
/// `hi` and `lo` (a least-squares line through log10 gap against epochs): the slope of
/// the straight line SAGA draws on the log plot. `None` with fewer than 3 such points.
fn epochs_per_decade(
    curve: &[CurvePoint],
    p_star: f64,
    epoch: u64,
    lo: f64,
    hi: f64,
) -> Option<f64> {
    let pts: Vec<(f64, f64)> = curve
        .iter()
        .filter(|p| (lo..=hi).contains(&gap(p, p_star)))
        .map(|p| (p.clock as f64 / epoch as f64, gap(p, p_star).log10()))
        .collect();
    if pts.len() < 3 {
        return None;
    }
    let n = pts.len() as f64;
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let slope = sxy / sxx;
    (slope < 0.0).then(|| -1.0 / slope)
}

fn sci(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.2e}"))
}

/// `saga`: SAGA vs SGD at the same step (BSP), and ASAGA (SSP, async) vs synchronous SAGA
/// under a rotating straggler, on L2-MLR with a known optimum: primal suboptimality per
/// epoch (table and log-scale plot), time to `P* + 1e-4`.
///
/// # Errors
/// [`Error::Io`] when the fixtures of `crates/sfb-models/tests/fixtures` cannot be read
/// (the scenario needs the source tree this binary was built from); the first arm that
/// fails.
pub fn saga(opts: &Options, runner: &Runner) -> Result<Report> {
    let dir = fixtures();
    let (n, lambda, p_star) = reference(&dir)?;
    let train = subset(&dir, n)?;
    let arms = arms(
        opts,
        n,
        train.clone(),
        dir.join("digits_test.libsvm"),
        lambda,
    )?;
    let spec0 = &arms[0].spec;
    let (p, clocks) = (spec0.peers, spec0.train.clocks);
    let epoch = epoch_clocks(n, p);
    let mut report = Report::new(
        "saga",
        &format!(
            "P={p}, L2-MLR (λ={lambda}) on the first {n} digits samples (D=64, J=10), K={BATCH}, lr={LR}, {clocks} clocks ({:.0} epochs): SAGA vs SGD (BSP), ASAGA vs SAGA under a rotating straggler; primal suboptimality P(W) − P*",
            clocks as f64 / epoch as f64
        ),
    );
    let target = p_star + TARGET;
    let (sgd, rest): (Vec<Arm>, Vec<Arm>) = arms
        .iter()
        .cloned()
        .partition(|a| a.name.starts_with("SGD"));
    let mut saga_report = Report::new("saga", "");
    run_arms(runner, &mut saga_report, &rest, 0, 1.0)?;
    let mut done = saga_report.arms;
    let sgd_report = sgd_arm(runner, &sgd[0], lambda, target)?;
    done.insert(1, sgd_report);
    for a in &mut done {
        let ttt = time_to_target(&a.curve, target);
        a.time_to_target_s = ttt.map(|t| t.0);
        a.clocks_to_target = ttt.map(|t| t.1);
        a.samples_to_target = ttt.map(|t| t.2);
    }
    report.arms = done;
    report.target_objective = Some(target);
    report.target_rule = format!(
        "P* + {TARGET:e}: primal suboptimality {TARGET:e}, with P* = {p_star} from scikit-learn (crates/sfb-models/tests/fixtures/sdca_reference.json)"
    );

    // Table: suboptimality per arm at every ten epochs, epochs and time to the target.
    let mut t = String::from(
        "| arm | final P(W) − P* | epochs to 1e-4 | training s to 1e-4 | epochs per decade | training s | max staleness |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for a in &report.arms {
        let final_gap = a.curve.last().map(|c| gap(c, p_star));
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {:.2} | {} |",
            a.name,
            sci(final_gap),
            a.clocks_to_target
                .map_or("not reached".into(), |c| format!("{:.1}", c / epoch as f64)),
            a.time_to_target_s.map_or("-".into(), |s| format!("{s:.2}")),
            // A slope only for the arms that converge (reached the target).
            epochs_per_decade(&a.curve, p_star, epoch, 1e-7, 1e-1)
                .filter(|_| a.clocks_to_target.is_some())
                .map_or("-".into(), |e| format!("{e:.1}")),
            a.train_s,
            a.summary.max_staleness,
        );
    }
    let _ = write!(
        t,
        "\nP(W) − P*: the primal on the {n} training samples (mean over peers' replicas) minus scikit-learn's optimum; values near 1e-8 are at the precision of evaluating an f32 W (they may dip below 0). Epochs per decade: the slope of a least-squares line through log10(P − P*) between 1e-1 and 1e-7 (a straight line on the log plot). One epoch = {epoch} clocks = {} samples over all peers.\n",
        epoch * (p * BATCH) as u64
    );
    let _ = write!(t, "\n| epoch |");
    for a in &report.arms {
        let _ = write!(t, " {} |", a.name);
    }
    t += "\n|---:|";
    t += &"---:|".repeat(report.arms.len());
    t += "\n";
    let total_epochs = clocks / epoch;
    // The first evaluation (epoch 1), then every `step` epochs, and the last.
    let step = 10.max(total_epochs / 6);
    let mut rows: Vec<u64> = std::iter::once(1)
        .chain((step..=total_epochs).step_by(step as usize))
        .collect();
    if rows.last() != Some(&total_epochs) {
        rows.push(total_epochs);
    }
    for e in rows {
        let _ = write!(t, "| {e} |");
        for a in &report.arms {
            let at = a.curve.iter().find(|c| c.clock == e * epoch);
            let _ = write!(t, " {} |", sci(at.map(|c| gap(c, p_star))));
        }
        t += "\n";
    }
    report.sections.push(("Primal suboptimality".into(), t));

    // Plots: suboptimality against epochs (all arms), and against training time (the
    // straggler arms). Points at or below the evaluation floor are drawn at 1e-9.
    let floor = 1e-9;
    let series = |x: &dyn Fn(&CurvePoint) -> f64, pick: &dyn Fn(&str) -> bool| -> Vec<Series> {
        report
            .arms
            .iter()
            .filter(|a| pick(&a.name))
            .map(|a| Series {
                name: a.name.clone(),
                points: a
                    .curve
                    .iter()
                    .filter(|c| c.objective.is_finite())
                    .map(|c| (x(c), gap(c, p_star).max(floor)))
                    .collect(),
            })
            .collect()
    };
    let by_epoch = series(&|c| c.clock as f64 / epoch as f64, &|_| true);
    let by_time = series(&|c| c.train_s, &|name| name.contains("straggler"));
    let chart = |title: String, x_label: &str, series| {
        Chart::Line(LineChart {
            title,
            x_label: x_label.into(),
            y_label: "primal suboptimality P(W) − P* (log scale)".into(),
            series,
            log_x: false,
            log_y: true,
            hline: Some((TARGET, format!("target {TARGET:e}"))),
            markers: true,
        })
    };
    report.add_chart(
        "saga-suboptimality-vs-epochs.png",
        "primal suboptimality vs epochs (log scale)",
        chart(
            format!("saga: P(W) − P* vs epochs, L2-MLR λ={lambda}, P={p}"),
            "epochs",
            by_epoch,
        ),
    );
    report.add_chart(
        "saga-suboptimality-vs-time-straggler.png",
        "primal suboptimality vs training time, rotating straggler",
        chart(
            "saga: P(W) − P* vs training time under a rotating straggler".into(),
            "training seconds",
            by_time,
        ),
    );

    // Findings, from the measured numbers.
    let get = |prefix: &str| report.arms.iter().find(|a| a.name.starts_with(prefix));
    let final_gap = |a: &ArmReport| a.curve.last().map(|c| gap(c, p_star));
    if let (Some(saga), Some(sgd)) = (get("SAGA, BSP"), get("SGD")) {
        // SGD's floor: the smallest suboptimality over the second half of its run.
        let half = sgd.curve.len() / 2;
        let sgd_floor = sgd.curve[half..]
            .iter()
            .map(|c| gap(c, p_star))
            .fold(f64::INFINITY, f64::min);
        report.notes.push(format!(
            "Same step lr = {LR}, BSP: SAGA reached P − P* = {} ({} epochs per decade) while SGD ended at {} (its best over the second half of the run: {sgd_floor:.2e}): SGD's noise floor at this step, which SAGA's variance reduction removes.",
            sci(final_gap(saga)),
            epochs_per_decade(&saga.curve, p_star, epoch, 1e-7, 1e-1)
                .map_or("-".into(), |e| format!("{e:.1}")),
            sci(final_gap(sgd)),
        ));
    }
    let sync = get("SAGA, BSP, straggler");
    let mut speedups = serde_json::Map::new();
    for name in ["ASAGA, SSP", "ASAGA, async"] {
        let (Some(s), Some(a)) = (sync, get(name)) else {
            continue;
        };
        let text = match (s.time_to_target_s, a.time_to_target_s) {
            (Some(ts), Some(ta)) if ta > 0.0 => {
                speedups.insert(a.name.clone(), serde_json::json!(ts / ta));
                format!(
                    "{}: {ta:.2} s to P − P* = {TARGET:e} against {ts:.2} s for synchronous SAGA with the same straggler, {:.2}× faster (max staleness {}; epochs to the target {} vs {})",
                    a.name,
                    ts / ta,
                    a.summary.max_staleness,
                    a.clocks_to_target
                        .map_or("-".into(), |c| format!("{:.1}", c / epoch as f64)),
                    s.clocks_to_target
                        .map_or("-".into(), |c| format!("{:.1}", c / epoch as f64)),
                )
            }
            _ => format!("{}: the target was not reached by both arms", a.name),
        };
        report.notes.push(text);
    }
    report.notes.push(format!(
        "The straggler: at every clock one peer (a different, seeded one each clock) is slowed by {} ms; under BSP every clock waits for it, under SSP and Async the others go on (ASAGA: each replica keeps the table mean from the factors it has applied so far). The ASYNC paper reports up to ~4× for ASAGA over synchronous SAGA with stragglers; the figures above are ours, measured in this run.",
        opts.straggler_ms.unwrap_or(10)
    ));
    report.notes.push(format!(
        "Data: the first {n} samples of crates/sfb-models/tests/fixtures/digits_train.libsvm (copied to {}), held-out accuracy on digits_test.libsvm. The SGD arm runs SGD with exact weight decay W ← (1 − lr·λ)W on the same primal, in this process (no `sfb run` flag selects it: --model l2mlr --optimizer sgd is SDCA).",
        train.display()
    ));
    report
        .extra
        .insert("p_star".into(), serde_json::json!(p_star));
    report
        .extra
        .insert("target_suboptimality".into(), serde_json::json!(TARGET));
    report.extra.insert(
        "suboptimality".into(),
        report
            .arms
            .iter()
            .map(|a| {
                serde_json::json!({
                    "arm": a.name,
                    "epochs": a.curve.iter().map(|c| c.clock as f64 / epoch as f64).collect::<Vec<_>>(),
                    "gap": a.curve.iter().map(|c| gap(c, p_star)).collect::<Vec<_>>(),
                })
            })
            .collect(),
    );
    report
        .extra
        .insert("asaga_speedup".into(), serde_json::Value::Object(speedups));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sfb_harness::Transport;

    /// A short run of the whole scenario (in memory, 10 epochs, a 1 ms straggler): every
    /// arm reports, and under BSP (deterministic) SAGA is already well below SGD.
    #[test]
    fn the_scenario_runs_small_and_saga_beats_sgd() {
        let opts = Options {
            transport: Transport::Mem,
            clocks: Some(150),
            straggler_ms: Some(1),
            ..Options::default()
        };
        let r = saga(&opts, &Runner::new()).unwrap();
        assert_eq!(r.arms.len(), 5);
        let p_star = r.extra["p_star"].as_f64().unwrap();
        let last = |i: usize| r.arms[i].curve.last().unwrap().objective - p_star;
        assert!(
            last(0) < 0.3 * last(1),
            "SAGA {} vs SGD {}",
            last(0),
            last(1)
        );
        // BSP is deterministic: the straggler changes the time, not the curve.
        assert_eq!(r.arms[0].curve.len(), r.arms[2].curve.len());
        for (a, b) in r.arms[0].curve.iter().zip(&r.arms[2].curve) {
            assert_eq!(a.objective, b.objective);
        }
        assert!(r.arms[1].command.contains("SGD and weight decay"));
    }

    #[test]
    fn a_straight_line_has_its_slope() {
        let curve: Vec<CurvePoint> = (1..=10)
            .map(|e| CurvePoint {
                clock: e * 15,
                train_s: e as f64,
                samples: 0,
                objective: 1.0 + 10f64.powf(-(e as f64) / 2.0),
                accuracy: None,
            })
            .collect();
        let e = epochs_per_decade(&curve, 1.0, 15, 1e-9, 1.0).unwrap();
        assert!((e - 2.0).abs() < 1e-6, "{e}");
    }
}
