//! The four models checked against independent references: numpy (MLR loss and gradient),
//! scikit-learn (the L2-MLR optimum, MiniBatchDictionaryLearning) and Euclidean 1-NN (DML).
//! Reference values come from `scripts/make_fixtures.py`, stored in sfb-models'
//! `tests/fixtures/`. They live here, above sfb-models, because the cluster-level ones
//! build their engines with the harness's builder, as `sfb run` does.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ndarray::Array2;
use sfb_core::{Engine, FactorBatch, ManualTime, Model, PeerId, Progress, Replica, SvList};
use sfb_models::data::{LibsvmOptions, read_libsvm};
use sfb_models::sdca::primal_dual;
use sfb_models::{
    AnyModel, ClusterSpec, Example, Mlr, ModelSpec, Problem, mlr, sparse_coding, synthetic,
};

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sfb-models/tests/fixtures")
        .join(name)
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
}

fn matrix(v: &serde_json::Value) -> Array2<f64> {
    let rows: Vec<Vec<f64>> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect();
    Array2::from_shape_fn((rows.len(), rows[0].len()), |(i, j)| rows[i][j])
}

/// The digits split, sparse as read; `dense` stores features densely.
fn digits(dense: bool) -> (Vec<Example>, Vec<Example>) {
    let mut train = read_libsvm(fixture("digits_train.libsvm"), &LibsvmOptions::default()).unwrap();
    let mut test =
        read_libsvm(fixture("digits_test.libsvm"), &LibsvmOptions::like(&train)).unwrap();
    if dense {
        train.densify();
        test.densify();
    }
    (train.samples, test.samples)
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-300)
}

/// Engines for `peers` peers with full broadcast under BSP, built by the harness's cluster
/// builder exactly as `sfb run` builds them (its seed scheme, shards and initial W).
fn engines(
    spec: &ModelSpec,
    problem: &Problem,
    peers: usize,
    clocks: u64,
    batch: usize,
    lr: f32,
    seed: u64,
) -> Vec<Engine<AnyModel>> {
    sfb_harness::Cluster::builder()
        .peers(peers)
        .spec(spec.clone())
        .data(problem.clone())
        .init_std(0.0)
        .clocks(clocks)
        .batch(batch)
        .lr(lr)
        // The golden comparisons are of the models under plain SGD (the step they were
        // derived with), not of the default optimizer.
        .optimizer(sfb_core::Optimizer::new(sfb_core::Method::Sgd))
        .seed(seed)
        .eval_every(0)
        .build_engines()
        .unwrap()
}

fn opts() -> sfb_net::mem::Options {
    sfb_net::mem::Options {
        timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

/// MLR mean cross-entropy and its gradient, through `compute_sv` and the batched apply
/// kernel (sparse and dense inputs), equal numpy's float64 values within 1e-5 relative.
#[test]
fn mlr_loss_and_gradient_match_numpy() {
    let golden = json("mlr_golden.json");
    let m = golden["samples"].as_u64().unwrap() as usize;
    let w64 = matrix(&golden["w"]);
    let grad_ref = matrix(&golden["grad"]);
    let loss_ref = golden["loss"].as_f64().unwrap();
    let w = w64.mapv(|v| v as f32);
    // W holds f32 values (the script rounds them), so the cast loses nothing.
    assert!(
        w.iter()
            .zip(&w64)
            .all(|(a, b)| (f64::from(*a) - b).abs() <= 1e-12 * b.abs())
    );
    let (j, d) = w.dim();
    for dense in [false, true] {
        let samples: Vec<Example> = digits(dense).0.into_iter().take(m).collect();
        let loss = mlr::evaluate(w.view(), &samples).objective;
        // The gradient: factors of all samples, scale 1/m, applied to a zero replica.
        let refs: Vec<&Example> = samples.iter().collect();
        let mut sv = SvList::new(j, d);
        Mlr::new(j, d).compute_sv(w.view(), &refs, &mut sv).unwrap();
        let batch: FactorBatch = sv.to_batch(PeerId(0), 0, 1.0 / m as f32);
        let mut g = Replica::zeros(j, d);
        g.apply(&[&batch]).unwrap();
        let diff = g
            .w()
            .iter()
            .zip(&grad_ref)
            .map(|(a, b)| (f64::from(*a) - b).powi(2))
            .sum::<f64>()
            .sqrt();
        let norm = grad_ref.iter().map(|b| b * b).sum::<f64>().sqrt();
        let max_ref = grad_ref.iter().fold(0f64, |a, b| a.max(b.abs()));
        let max_err = g
            .w()
            .iter()
            .zip(&grad_ref)
            .fold(0f64, |a, (x, y)| a.max((f64::from(*x) - y).abs()));
        eprintln!(
            "dense={dense}: loss {loss:.9} vs numpy {loss_ref:.9} (rel {:.2e}); gradient rel err \
             (Frobenius) {:.2e}, max entry err / max |entry| {:.2e}",
            rel(loss, loss_ref),
            diff / norm,
            max_err / max_ref
        );
        assert!(rel(loss, loss_ref) < 1e-5);
        assert!(diff / norm < 1e-5);
        assert!(max_err / max_ref < 1e-5);
    }
}

/// SDCA on 4 peers closes the duality gap below 1e-4 and reaches scikit-learn's optimum
/// of the same L2-regularized problem within 1e-3 relative.
#[test]
fn sdca_closes_the_gap_at_the_sklearn_optimum() {
    let reference = json("sdca_reference.json");
    let n = reference["samples"].as_u64().unwrap() as usize;
    let lambda = reference["lambda"].as_f64().unwrap();
    let sk_primal = reference["primal"].as_f64().unwrap();
    let (train, test) = digits(true);
    let train: Vec<Example> = train.into_iter().take(n).collect();
    let problem = Problem {
        train: Arc::new(train),
        test: Arc::new(test),
        classes: 10,
        features: 64,
        labels: sfb_models::data::LabelMap::identity(10),
    };
    let spec = ModelSpec::L2Mlr {
        lambda,
        intercept: false,
    };
    let runs = sfb_net::mem::run(engines(&spec, &problem, 4, 250, 16, 1.0, 3), &opts()).unwrap();
    let ev = runs[0].engine.last_evaluation().unwrap();
    let (primal, dual, gap) = (
        ev.extra.get("primal_objective").unwrap(),
        ev.extra.get("dual_objective").unwrap(),
        ev.extra.get("duality_gap").unwrap(),
    );

    // Independently of the bookkeeping column: rebuild W(α) = (1/(λn)) Σ α_i x_iᵀ and the
    // dual from every peer's dual variables, in f64.
    let (j, d) = (10, 64);
    let mut w_alpha = Array2::<f64>::zeros((j, d));
    let mut entropy = 0.0;
    let mut seen = 0;
    for r in &runs {
        let AnyModel::L2Mlr(m) = r.engine.model() else {
            panic!("not SDCA")
        };
        for (id, p) in m.dual_probabilities() {
            let e = &problem.train[id as usize];
            assert_eq!(e.id, id);
            let x = e.x.to_dense(d);
            for c in 0..j {
                let alpha = f64::from(u8::from(c == e.y as usize)) - p[c];
                for (k, xv) in x.iter().enumerate() {
                    w_alpha[[c, k]] += alpha * f64::from(*xv) / (lambda * n as f64);
                }
            }
            entropy -= p
                .iter()
                .filter(|&&v| v > 0.0)
                .map(|v| v * v.ln())
                .sum::<f64>();
            seen += 1;
        }
    }
    assert_eq!(seen, n);
    let sq: f64 = w_alpha.iter().map(|v| v * v).sum();
    let exact_dual = entropy / n as f64 - 0.5 * lambda * sq;
    // Primal at the replica's W and at W(α) (f32 rounding of the latter is negligible).
    let z = runs[0].engine.replica().w();
    let (primal_z, _) = primal_dual(z, &problem.train, lambda);
    let w32 = w_alpha.mapv(|v| v as f32);
    let primal_alpha = mlr::evaluate(w32.view(), &problem.train).objective + 0.5 * lambda * sq;
    eprintln!(
        "SDCA (n = {n}, λ = {lambda}, 4 peers, 250 clocks × 16): primal {primal:.8} dual {dual:.8} \
         gap {gap:.2e}; exact dual from the duals {exact_dual:.8}, primal at W(α) {primal_alpha:.8} \
         (exact gap {:.2e}); sklearn optimum {sk_primal:.8} (rel diff {:.2e}); test accuracy {:.4}",
        primal_alpha - exact_dual,
        rel(primal, sk_primal),
        ev.accuracy.unwrap()
    );
    assert_eq!(primal, primal_z);
    assert!((-1e-5..1e-4).contains(&gap), "reported gap {gap}");
    assert!(
        primal_alpha - exact_dual < 1e-4,
        "exact gap {}",
        primal_alpha - exact_dual
    );
    assert!(
        (dual - exact_dual).abs() < 1e-5,
        "bookkeeping dual {dual} vs {exact_dual}"
    );
    // Weak duality: no dual value exceeds the optimum.
    assert!(exact_dual <= sk_primal + 1e-9);
    assert!(rel(primal, sk_primal) < 1e-3);
}

/// Drives BSP engines with full broadcast by hand, calling `each_clock` with every
/// replica after each peer's step.
fn drive<M: Model>(engines: &mut [Engine<M>], mut each_clock: impl FnMut(&Engine<M>)) {
    let n = engines.len();
    let mut time = ManualTime::default();
    let mut done = 0;
    let mut rounds = 0;
    while done < n {
        rounds += 1;
        assert!(rounds < 1_000_000, "no progress");
        done = 0;
        for p in 0..n {
            match engines[p].on_tick(&mut time).unwrap() {
                Progress::Done => done += 1,
                Progress::Stepped => each_clock(&engines[p]),
                Progress::Blocked => {}
            }
            while let Some(out) = engines[p].poll_output() {
                engines[out.to.index()]
                    .on_message(PeerId(p as u32), out.msg, &mut time)
                    .unwrap();
            }
        }
    }
    for e in engines.iter_mut() {
        each_clock(e);
        e.finish(&mut time);
    }
}

/// Sparse coding on digits under BSP: the objective decreases, every atom has norm ≤ 1
/// after every clock, and the held-out reconstruction error is within 10% of
/// scikit-learn's MiniBatchDictionaryLearning at the same size and λ.
#[test]
fn sparse_coding_matches_sklearn_dictionary_learning() {
    let reference = json("sc_reference.json");
    let atoms = reference["dict_size"].as_u64().unwrap() as usize;
    let lambda = reference["lambda"].as_f64().unwrap() as f32;
    let sk_err = reference["reconstruction_error"].as_f64().unwrap();
    let sk_obj = reference["objective"].as_f64().unwrap();
    let (train, test) = digits(true);
    let problem = Problem {
        train: Arc::new(train),
        test: Arc::new(test),
        classes: 10,
        features: 64,
        labels: sfb_models::data::LabelMap::identity(10),
    };
    let spec = ModelSpec::SparseCoding {
        atoms,
        lambda,
        sweeps: 10,
        decay: 20.0,
    };
    let (clocks, every) = (200u64, 25u64);
    let mut engines = engines(&spec, &problem, 4, clocks, 32, 0.1, 5);
    // Objective on a fixed training subset at the start and every `every` clocks (peer 0).
    let subset: Vec<Example> = problem.train.iter().step_by(4).cloned().collect();
    let objective =
        |w: ndarray::ArrayView2<'_, f32>| sparse_coding::reconstruction(w, &subset, lambda, 100).1;
    let mut curve = vec![objective(engines[0].replica().w())];
    let mut max_norm = 0f64;
    drive(&mut engines, |e| {
        let w = e.replica().w();
        for c in w.columns() {
            let norm = c.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
            max_norm = max_norm.max(norm);
            assert!(
                norm <= 1.0 + 1e-6,
                "atom norm {norm} at clock {}",
                e.clock()
            );
        }
        if e.config().id == PeerId(0) && e.clock() % every == 0 && !e.is_done() {
            curve.push(objective(w));
        }
    });
    eprintln!(
        "sparse coding training objective every {every} clocks: {curve:.4?}; max atom norm {max_norm:.7}"
    );
    assert_eq!(curve.len() as u64, clocks / every + 1);
    for pair in curve.windows(2) {
        assert!(pair[1] < pair[0], "objective rose: {curve:?}");
    }
    // Held-out reconstruction, ours vs sklearn's dictionary under the same encoder.
    let w = engines[0].replica().w();
    let (err, obj, nnz) = sparse_coding::reconstruction(w, &problem.test, lambda, 1000);
    let sk_dict = matrix(&reference["dictionary"]).t().mapv(|v| v as f32);
    let (sk_err_ours, sk_obj_ours, _) =
        sparse_coding::reconstruction(sk_dict.view(), &problem.test, lambda, 1000);
    eprintln!(
        "held-out reconstruction error: sfb {err:.5} (objective {obj:.5}, {nnz:.1} non-zeros), \
         sklearn {sk_err:.5} (objective {sk_obj:.5}); sklearn's dictionary under our encoder \
         {sk_err_ours:.5} (objective {sk_obj_ours:.5})"
    );
    // Our encoder agrees with sklearn's lasso on sklearn's dictionary.
    assert!(rel(sk_obj_ours, sk_obj) < 1e-3);
    assert!(
        err <= 1.1 * sk_err,
        "reconstruction {err} vs sklearn {sk_err}"
    );
    assert!(obj <= 1.1 * sk_obj);
    let ev = engines[0].last_evaluation().unwrap();
    let reported = ev.extra.get("reconstruction_error").unwrap();
    assert!(rel(reported, err) < 1e-4, "evaluator {reported} vs {err}");
}

/// Metric learning on noisy clusters: held-out 1-NN accuracy in the learned metric beats
/// Euclidean 1-NN.
#[test]
fn dml_beats_euclidean_nearest_neighbour() {
    let spec: ClusterSpec = "classes=5,features=20,informative=3,samples=2000,noise=3,sep=3"
        .parse()
        .unwrap();
    let (train, test) = synthetic::clusters(&spec, 9);
    let problem = Problem {
        train: Arc::new(train),
        test: Arc::new(test),
        classes: 5,
        features: 20,
        labels: sfb_models::data::LabelMap::identity(5),
    };
    let model = ModelSpec::Dml {
        latent: 5,
        margin: 1.0,
        candidates: sfb_models::dml::DEFAULT_CANDIDATES,
    };
    let mut before = model.evaluator(&problem, 9);
    let initial = before.evaluate(model.init_w(&problem, 0.0, 9).view());
    let runs = sfb_net::mem::run(engines(&model, &problem, 4, 300, 16, 0.01, 9), &opts()).unwrap();
    let ev = runs[0].engine.last_evaluation().unwrap();
    let learned = ev.accuracy.unwrap();
    let euclid = ev.extra.get("knn_accuracy_euclidean").unwrap();
    eprintln!(
        "DML held-out 1-NN accuracy: learned metric {learned:.4}, Euclidean {euclid:.4}, \
         initial projection {:.4}; held-out neighbour loss {:.4} → {:.4}",
        initial.accuracy.unwrap(),
        initial.objective,
        ev.objective
    );
    assert!(
        learned > euclid + 0.05,
        "learned {learned} vs Euclidean {euclid}"
    );
    assert!(ev.objective < initial.objective);
}
