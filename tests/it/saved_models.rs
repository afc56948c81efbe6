//! Models users can trust and keep (issue 30): the four scikit-learn UCI sets as CSV and
//! as LIBSVM train alike with no flags, within reach of scikit-learn's
//! `LogisticRegression()`; `--save-model` → `sfb eval` / `sfb predict` reproduce the
//! run's figures exactly; a damaged model file is refused in one line.

use std::path::{Path, PathBuf};
use std::process::Command;

const SFB: &str = env!("CARGO_BIN_EXE_sfb");

fn uci(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/sfb-models/tests/fixtures/uci")
        .join(name)
}

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("saved_models");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs `sfb ARGS`; returns (success, stdout, stderr).
fn sfb(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(SFB).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `sfb run` with no tuning flag on `set`'s training and test files in `format`; saves
/// the model; returns the summary.
fn train(set: &str, format: &str, model: &Path) -> serde_json::Value {
    let summary = model.with_extension("json");
    let (train, test) = (
        uci(&format!("{set}_train.{format}")),
        uci(&format!("{set}_test.{format}")),
    );
    #[rustfmt::skip]
    let (ok, _, err) = sfb(&[
        "run", "--data", train.to_str().unwrap(), "--test-data", test.to_str().unwrap(),
        "--summary", summary.to_str().unwrap(), "--save-model", model.to_str().unwrap(),
    ]);
    assert!(ok, "{set} {format}: {err}");
    json(&summary)
}

#[test]
fn csv_and_libsvm_give_the_same_model_near_scikit_learn_and_it_is_kept_exactly() {
    let reference = json(&uci("reference.json"));
    for set in ["iris", "wine", "breast_cancer", "digits"] {
        let (m_csv, m_svm) = (
            tmp(&format!("{set}.csv.sfbm")),
            tmp(&format!("{set}.svm.sfbm")),
        );
        let csv = train(set, "csv", &m_csv);
        let svm = train(set, "libsvm", &m_svm);
        // One scaling rule per data set: the same model whatever the file format.
        assert_eq!(csv["replica_checksums"], svm["replica_checksums"], "{set}");
        assert_eq!(csv["test_accuracy"], svm["test_accuracy"], "{set}");
        assert!(
            csv["data"].as_str().unwrap().ends_with("· intercept"),
            "{csv}"
        );
        let ours = csv["test_accuracy"].as_f64().unwrap();
        let r = &reference[set];
        let (raw, std) = (
            r["logreg_default_accuracy"].as_f64().unwrap(),
            r["logreg_standardized_accuracy"].as_f64().unwrap(),
        );
        eprintln!("{set}: sfb {ours:.4}, LogisticRegression() {raw:.4} (standardized {std:.4})");
        assert!(
            ours >= raw.min(std) - 0.02,
            "{set}: {ours:.4} against scikit-learn's {raw:.4} / {std:.4}"
        );
        // The saved model reproduces the run's figures on either format of the test set.
        for format in ["csv", "libsvm"] {
            let test = uci(&format!("{set}_test.{format}"));
            #[rustfmt::skip]
            let (ok, out, err) = sfb(&[
                "eval", "--model", m_svm.to_str().unwrap(), "--test-data", test.to_str().unwrap(),
            ]);
            assert!(ok, "{err}");
            let line = out.lines().nth(1).unwrap();
            assert_eq!(
                line,
                format!(
                    "  objective {:.4}  test accuracy {ours:.4}",
                    csv["objective"].as_f64().unwrap()
                ),
                "{set} {format}"
            );
        }
        // Predictions: the labels as the file writes them, as accurate as the run said.
        let test = uci(&format!("{set}_test.csv"));
        let preds = tmp(&format!("{set}.preds.csv"));
        #[rustfmt::skip]
        let (ok, _, err) = sfb(&[
            "predict", "--model", m_csv.to_str().unwrap(), "--data", test.to_str().unwrap(),
            "--out", preds.to_str().unwrap(),
        ]);
        assert!(ok, "{err}");
        let preds = std::fs::read_to_string(&preds).unwrap();
        let truth = std::fs::read_to_string(&test).unwrap();
        let mut lines = preds.lines();
        assert_eq!(lines.next(), Some("prediction"));
        let (mut right, mut n) = (0, 0);
        for (p, row) in lines.zip(truth.lines()) {
            n += 1;
            right += usize::from(p == row.split(',').next().unwrap());
        }
        assert_eq!(n, truth.lines().count());
        assert_eq!(right as f64 / n as f64, ours, "{set}");
        // New data has no label column: the same rows without it predict the same.
        let bare = tmp(&format!("{set}.unlabelled.csv"));
        let rows: Vec<&str> = truth
            .lines()
            .map(|r| r.split_once(',').unwrap().1)
            .collect();
        std::fs::write(&bare, rows.join("\n") + "\n").unwrap();
        let (ok, out, err) = sfb(&[
            "predict",
            "--model",
            m_csv.to_str().unwrap(),
            "--data",
            bare.to_str().unwrap(),
        ]);
        assert!(ok, "{err}");
        assert_eq!(
            out,
            std::fs::read_to_string(tmp(&format!("{set}.preds.csv"))).unwrap(),
            "{set}"
        );
    }
}

#[test]
fn a_damaged_or_foreign_model_file_is_refused_in_one_line() {
    let model = tmp("iris.damaged.sfbm");
    train("iris", "csv", &model);
    let bytes = std::fs::read(&model).unwrap();
    let test = uci("iris_test.csv");
    let cases: [(Vec<u8>, &str); 4] = [
        (
            {
                let mut b = bytes.clone();
                let mid = b.len() / 2;
                b[mid] ^= 0x40;
                b
            },
            "checksum mismatch: the file is corrupted",
        ),
        (bytes[..bytes.len() / 3].to_vec(), "truncated"),
        (b"label,a,b\n0,1,2\n".to_vec(), "not an sfb model file"),
        (
            {
                let mut b = bytes.clone();
                b[8] = 7;
                b
            },
            "model file format 7, this sfb reads format 1",
        ),
    ];
    for (i, (damaged, why)) in cases.into_iter().enumerate() {
        let path = tmp(&format!("damaged-{i}.sfbm"));
        std::fs::write(&path, damaged).unwrap();
        for cmd in ["predict", "eval"] {
            let data_flag = if cmd == "predict" {
                "--data"
            } else {
                "--test-data"
            };
            #[rustfmt::skip]
            let (ok, _, err) = sfb(&[
                cmd, "--model", path.to_str().unwrap(), data_flag, test.to_str().unwrap(),
            ]);
            assert!(!ok);
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains(why) && err.contains(path.to_str().unwrap()),
                "{err}"
            );
            assert!(!err.contains("panicked"), "{err}");
        }
    }
    // Data that does not fit the model is refused naming file and line.
    let wine = uci("wine_test.csv");
    #[rustfmt::skip]
    let (ok, _, err) = sfb(&[
        "predict", "--model", model.to_str().unwrap(), "--data", wine.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("wine_test.csv:1"), "{err}");
}
