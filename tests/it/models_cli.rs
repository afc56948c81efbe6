//! `sfb run` on data files: digits accuracy against scikit-learn, every model's summary
//! keys, and bad input failing with `file:line` and a non-zero exit.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/sfb-models/tests/fixtures")
        .join(name)
}

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("models_cli");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Runs `sfb run …`; returns (success, stderr).
fn sfb_run(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sfb"))
        .arg("run")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn run_ok(args: &[&str], summary: &Path) -> serde_json::Value {
    let s = summary.to_str().unwrap();
    let mut all = args.to_vec();
    all.extend(["--summary", s]);
    let (ok, err) = sfb_run(&all);
    assert!(ok, "sfb run {args:?} failed: {err}");
    json(summary)
}

#[test]
fn digits_mlr_on_four_peers_matches_sklearn_logistic_regression() {
    let train = fixture("digits_train.libsvm");
    let test = fixture("digits_test.libsvm");
    let summary = tmp("digits_mlr.json");
    #[rustfmt::skip]
    let s = run_ok(&[
        "--peers", "4", "--model", "mlr",
        "--data", train.to_str().unwrap(), "--test-data", test.to_str().unwrap(),
        "--clocks", "500", "--batch", "16", "--eval-every", "0", "--seed", "1",
    ], &summary);
    let ours = s["test_accuracy"].as_f64().unwrap();
    let reference = json(&fixture("digits_reference.json"));
    let sklearn = reference["sklearn_logreg_default_test_accuracy"]
        .as_f64()
        .unwrap();
    eprintln!(
        "digits test accuracy: sfb mlr (4 peers) {ours:.4}, sklearn LogisticRegression {sklearn:.4} \
         (without intercept {:.4})",
        reference["sklearn_logreg_no_intercept_test_accuracy"]
    );
    assert!(
        (ours - sklearn).abs() <= 0.01,
        "sfb {ours:.4} vs sklearn {sklearn:.4}: more than 1 point apart"
    );
}

#[test]
fn every_model_reports_its_figures() {
    let train = fixture("digits_train.libsvm");
    let test = fixture("digits_test.libsvm");
    let (train, test) = (train.to_str().unwrap(), test.to_str().unwrap());
    #[rustfmt::skip]
    let s = run_ok(&[
        "--peers", "2", "--model", "l2mlr", "--lambda", "0.01", "--data", train,
        "--test-data", test, "--clocks", "150", "--batch", "16", "--eval-every", "0",
    ], &tmp("l2mlr.json"));
    assert_eq!(s["model"], "l2mlr");
    let gap = s["duality_gap"].as_f64().unwrap();
    assert!((-1e-5..1e-2).contains(&gap), "duality gap {gap}");
    assert!(
        s["primal_objective"].as_f64().unwrap() >= s["dual_objective"].as_f64().unwrap() - 1e-5
    );
    assert!(s["test_accuracy"].as_f64().unwrap() > 0.85);

    #[rustfmt::skip]
    let s = run_ok(&[
        "--peers", "2", "--model", "sc", "--dict-size", "16", "--lambda", "0.1", "--data", train,
        "--test-data", test, "--clocks", "40", "--batch", "16", "--lr", "0.1", "--eval-every", "0",
    ], &tmp("sc.json"));
    assert!(s["reconstruction_error"].as_f64().unwrap() > 0.0);
    assert!(s["max_column_norm"].as_f64().unwrap() <= 1.0 + 1e-6);
    assert!(s["test_accuracy"].is_null());

    // No --test-data: a seeded 20% hold-out of --data.
    #[rustfmt::skip]
    let s = run_ok(&[
        "--peers", "2", "--model", "dml", "--latent", "4", "--data", train,
        "--clocks", "20", "--batch", "8", "--lr", "0.005", "--eval-every", "0",
    ], &tmp("dml.json"));
    assert!(s["knn_accuracy_euclidean"].as_f64().unwrap() > 0.9);
    assert!(s["knn_accuracy"].as_f64().is_some());

    // Synthetic data of each model's kind.
    for model in ["l2mlr", "dml", "sc"] {
        #[rustfmt::skip]
        let s = run_ok(&[
            "--peers", "2", "--model", model, "--synthetic", "classes=4,features=10,samples=400",
            "--clocks", "10", "--lr", "0.01", "--eval-every", "0",
        ], &tmp(&format!("synthetic_{model}.json")));
        assert!(s["objective"].as_f64().unwrap().is_finite(), "{model}: {s}");
    }
}

/// Bad input → an error naming file:line and a non-zero exit.
#[test]
fn bad_input_fails_with_file_and_line() {
    let good_train = fixture("digits_train.libsvm");
    let write = |name: &str, text: &str| {
        let p = tmp(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let malformed = write("malformed.svm", "1 1:0.5 2:1\n2 3:0.25\n1 1:0.5 2 :1\n");
    let wide = write("wide_test.svm", "3 1:0.5\n4 65:1\n");
    let unseen = write("unseen_test.svm", "3 1:0.5\n4 2:1\n10 3:1\n");
    let empty = write("empty.svm", "");
    let cases: [(&Path, Option<&Path>, String); 4] = [
        (&malformed, None, format!("{}:3: ", malformed.display())),
        (
            &good_train,
            Some(&wide),
            format!(
                "{}:2: feature index 65 is beyond the 64 features",
                wide.display()
            ),
        ),
        (
            &good_train,
            Some(&unseen),
            format!(
                "{}:3: label 10 was not seen in the training data",
                unseen.display()
            ),
        ),
        (
            &empty,
            None,
            format!("{}:0: empty data file", empty.display()),
        ),
    ];
    for (train, test, want) in cases {
        let mut args = vec![
            "--peers",
            "2",
            "--clocks",
            "2",
            "--data",
            train.to_str().unwrap(),
        ];
        if let Some(t) = test {
            args.extend(["--test-data", t.to_str().unwrap()]);
        }
        let (ok, stderr) = sfb_run(&args);
        assert!(!ok, "{args:?} succeeded");
        assert!(
            stderr.contains(&want),
            "{args:?}: stderr {stderr:?} lacks {want:?}"
        );
    }
}
