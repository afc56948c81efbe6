//! `--scale`: statistics from the training data, the same on every peer (BSP replicas
//! stay bitwise equal, in memory and over libp2p), and one rule for one data set whether
//! it is written as CSV or LIBSVM.

use std::process::Command;

const SFB: &str = env!("CARGO_BIN_EXE_sfb");

fn run(args: &[&str], name: &str) -> (i32, String, serde_json::Value) {
    let dir = std::env::temp_dir().join(format!("sfb-test-scale-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let summary = dir.join("s.json");
    let out = Command::new(SFB)
        .arg("run")
        .args(args)
        .arg("--summary")
        .arg(&summary)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let s = std::fs::read_to_string(&summary)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    let _ = std::fs::remove_dir_all(&dir);
    (out.status.code().unwrap_or(-1), err, s)
}

const SMALL: [&str; 6] = [
    "--peers",
    "3",
    "--clocks",
    "8",
    "--synthetic",
    "classes=4,features=12,samples=600",
];

#[test]
fn standard_scaling_is_the_same_on_every_peer_and_changes_the_run() {
    let plain_args = [&SMALL[..], &["--scale", "none"]].concat();
    let (rc, err, plain) = run(&plain_args, "none");
    assert_eq!(rc, 0, "{err}");
    let scaled_args = [&SMALL[..], &["--scale", "standard"]].concat();
    let (rc, err, mem) = run(&scaled_args, "mem");
    assert_eq!(rc, 0, "{err}");
    let sums = mem["replica_checksums"].as_array().unwrap();
    assert!(sums.iter().all(|c| c == &sums[0]), "{sums:?}");
    assert_ne!(
        sums[0], plain["replica_checksums"][0],
        "scaling changed nothing"
    );
    let p2p_args = [&scaled_args[..], &["--transport", "libp2p"]].concat();
    let (rc, err, p2p) = run(&p2p_args, "p2p");
    assert_eq!(rc, 0, "{err}");
    assert_eq!(p2p["transport"], "libp2p");
    assert_eq!(p2p["replica_checksums"], mem["replica_checksums"]);
}

#[test]
fn sparse_and_dense_files_of_the_same_data_scale_alike() {
    let dir = std::env::temp_dir().join(format!("sfb-test-scale-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The same 8 samples as LIBSVM (sparse) and CSV (dense); 21 of the 24 entries non-zero.
    let rows = [
        (0, [1.0, 0.5, 2.0]),
        (1, [0.0, 1.0, 0.5]),
        (0, [3.0, 2.0, 1.0]),
        (1, [0.5, 1.0, 1.0]),
        (0, [2.0, 0.5, 1.0]),
        (1, [0.0, 2.0, 1.5]),
        (0, [4.0, 1.0, 2.0]),
        (1, [0.5, 3.0, 0.0]),
    ];
    let (mut svm, mut csv) = (String::new(), String::new());
    for (y, x) in rows {
        svm.push_str(&y.to_string());
        for (k, v) in x.iter().enumerate().filter(|(_, v)| **v != 0.0) {
            svm.push_str(&format!(" {}:{v}", k + 1));
        }
        svm.push('\n');
        csv.push_str(&format!("{y},{},{},{}\n", x[0], x[1], x[2]));
    }
    let (svm_path, csv_path) = (dir.join("d.svm"), dir.join("d.csv"));
    std::fs::write(&svm_path, svm).unwrap();
    std::fs::write(&csv_path, csv).unwrap();
    let mut runs = Vec::new();
    for (data, scale) in [
        (&svm_path, "auto"),
        (&csv_path, "auto"),
        (&svm_path, "standard"),
    ] {
        #[rustfmt::skip]
        let (rc, err, s) = run(
            &["--peers", "2", "--clocks", "5", "--batch", "2", "--holdout", "0.25",
              "--data", data.to_str().unwrap(), "--scale", scale],
            "sparse",
        );
        assert_eq!(rc, 0, "{err}");
        assert!(!err.contains("panicked"), "{err}");
        runs.push(s);
    }
    // One rule for one data set: standard scaling (≥ 75 % non-zero), whatever the format,
    // so the same model bit for bit.
    for s in &runs {
        let data = s["data"].as_str().unwrap();
        assert!(
            data.starts_with("standard scaling (") && data.ends_with("non-zero) · intercept"),
            "{data}"
        );
        assert_eq!(s["data"], runs[0]["data"]);
        assert_eq!(s["replica_checksums"], runs[0]["replica_checksums"]);
        assert_eq!(s["objective"], runs[0]["objective"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
