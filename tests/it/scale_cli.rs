//! `--scale`: statistics from the training data, the same on every peer (BSP replicas
//! stay bitwise equal, in memory and over libp2p), and a clear refusal of `standard` on
//! sparse data.

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
fn standard_scaling_of_sparse_data_is_refused() {
    let dir = std::env::temp_dir().join(format!("sfb-test-scale-sparse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("d.svm");
    std::fs::write(&data, "0 1:1 3:2\n1 2:1\n0 1:3\n1 3:1\n").unwrap();
    let (rc, err, _) = run(
        &[
            "--peers",
            "2",
            "--clocks",
            "1",
            "--batch",
            "1",
            "--data",
            data.to_str().unwrap(),
            "--scale",
            "standard",
        ],
        "sparse",
    );
    assert_eq!(rc, 1, "{err}");
    assert!(
        err.contains("centring would make sparse data dense: use maxabs"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
