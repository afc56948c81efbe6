//! `--topology FILE` (issue 29): `sfb run`, `sfb sim` and `sfb bench` train on exactly
//! the graph of a file `sfb topology` wrote, in any of its formats; a file that does not
//! fit the run is refused before anything runs. (Hand-run peers from the same file:
//! `hand_run`.)

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::{SFB, run_summary, tempdir, topology_file as topology};

const GROUP: &str = "topology-files";

const TRAIN: &[&str] = &[
    "--synthetic",
    "classes=6,features=20,samples=1200",
    "--clocks",
    "12",
    "--seed",
    "3",
];

/// `sfb ARGS`, which must fail; its stderr.
fn refused(args: &[&str]) -> String {
    let out = Command::new(SFB).args(args).output().unwrap();
    assert!(!out.status.success(), "sfb {args:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn train(args: &[&str], summary: &Path) -> Value {
    run_summary(&[args, TRAIN].concat(), summary)
}

#[test]
fn run_trains_on_exactly_the_files_graph_in_every_format() {
    let d = tempdir(GROUP, "formats");
    let toml = topology(
        &d,
        "t.toml",
        &["--peers", "6", "--out-degree", "2", "--method", "kautz"],
    );
    let json = topology(
        &d,
        "t.json",
        &["--format", "json", "-i", toml.to_str().unwrap()],
    );
    let dot = topology(
        &d,
        "t.dot",
        &["--format", "dot", "-i", toml.to_str().unwrap()],
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let mut sums = Vec::new();
    for f in [&toml, &json, &dot] {
        let f = f.to_str().unwrap();
        let s = train(&["run", "--topology", f], &d.join("s.json"));
        // P and Q come from the file; the summary names it and its eq. 3 cost.
        assert_eq!(s["peers"], 6, "{s}");
        assert_eq!(s["out_degree"], 2, "{s}");
        assert_eq!(s["topology"]["source"], format!("file {f}"), "{s}");
        assert_eq!(s["topology"]["cost"], report["cost"], "{s}");
        sums.push(s["replica_checksums"].clone());
    }
    assert!(sums.iter().all(|s| s == &sums[0]), "{sums:?}");
    // The same out-lists given explicitly in a spec: the same replicas, so the file's
    // graph is the one trained on.
    let spec = Command::new(SFB)
        .args([&["run", "--peers", "6"], TRAIN].concat())
        .arg("--print-spec")
        .output()
        .unwrap();
    let mut spec: Value = serde_json::from_slice(&spec.stdout).unwrap();
    spec["topology"]["explicit"] = report["out"].clone();
    let summary = d.join("e.json");
    spec["output"]["summary"] = summary.to_str().unwrap().into();
    let spec_file = d.join("spec.json");
    std::fs::write(&spec_file, spec.to_string()).unwrap();
    let st = Command::new(SFB)
        .args(["run", "--spec", spec_file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["replica_checksums"], sums[0]);
    assert_eq!(s["topology"]["source"], "explicit");
    // Another graph of the same P and Q trains to other replicas.
    let ring = topology(
        &d,
        "ring.toml",
        &["--peers", "6", "--out-degree", "2", "--method", "ring"],
    );
    let s = train(
        &["run", "--topology", ring.to_str().unwrap()],
        &d.join("r.json"),
    );
    assert_ne!(s["replica_checksums"], sums[0]);
    assert!(
        s["topology"]["cost"].as_u64() > report["cost"].as_u64(),
        "{s}"
    );
}

#[test]
fn sim_and_the_optimizer_report_their_topology_too() {
    let d = tempdir(GROUP, "sim");
    let dot = topology(
        &d,
        "t.dot",
        &[
            "--peers",
            "5",
            "--out-degree",
            "2",
            "--method",
            "ring",
            "--format",
            "dot",
        ],
    );
    let s = train(
        &["sim", "--topology", dot.to_str().unwrap()],
        &d.join("s.json"),
    );
    assert_eq!(s["transport"], "sim");
    assert_eq!(s["topology"]["cost"], 30, "{s}"); // a Q = 2 ring of 5: 5 · (1+1+2+2)
    let s = train(
        &["run", "--peers", "5", "--out-degree", "2"],
        &d.join("o.json"),
    );
    assert_eq!(s["topology"]["source"], "optimal", "{s}");
    let s = train(&["run", "--peers", "5"], &d.join("f.json"));
    assert_eq!(s["topology"]["source"], "full", "{s}");
    assert_eq!(s["topology"]["cost"], 20, "{s}");
    let s = train(
        &["run", "--peers", "5", "--backend", "fms"],
        &d.join("m.json"),
    );
    assert!(s.get("topology").is_none(), "{s}");
}

#[test]
fn a_file_that_does_not_fit_the_run_is_refused_before_it_runs() {
    let d = tempdir(GROUP, "refused");
    let t = topology(
        &d,
        "t.toml",
        &["--peers", "6", "--out-degree", "2", "--method", "kautz"],
    );
    let t = t.to_str().unwrap();
    let summary = d.join("never.json");
    let s = summary.to_str().unwrap();
    let e = refused(&["run", "--topology", t, "--peers", "5", "--summary", s]);
    assert!(
        e.contains(t) && e.contains("it has 6 peers, but --peers 5 was given"),
        "{e}"
    );
    let e = refused(&["sim", "--topology", t, "--out-degree", "3", "--summary", s]);
    assert!(
        e.contains("its out-degree is 2, but --out-degree 3 was given"),
        "{e}"
    );
    let e = refused(&["run", "--topology", t, "--backend", "fms", "--summary", s]);
    assert!(e.contains("FMS has no topology"), "{e}");
    let broken = d.join("broken.dot");
    std::fs::write(&broken, "digraph {\n 0 -> 1;\n 1 -> zero;\n}\n").unwrap();
    let e = refused(&[
        "run",
        "--topology",
        broken.to_str().unwrap(),
        "--summary",
        s,
    ]);
    assert!(e.contains("broken.dot") && e.contains("line 3"), "{e}");
    let e = refused(&["run", "--topology", "/nonexistent/t.toml", "--summary", s]);
    assert!(e.contains("/nonexistent/t.toml"), "{e}");
    assert!(!summary.exists(), "a refused run wrote a summary");
    // cluster init and bench name both figures too.
    let c = d.join("c.toml");
    let e = refused(&[
        "cluster",
        "init",
        "--topology",
        t,
        "--peers",
        "4",
        "-o",
        c.to_str().unwrap(),
    ]);
    assert!(e.contains("it has 6 peers, but --peers 4 was given"), "{e}");
    assert!(!c.exists());
    let e = refused(&[
        "bench",
        "--scenario",
        "fms-vs-sfb",
        "--topology",
        t,
        "--peers",
        "4",
    ]);
    assert!(e.contains("has 6 peers"), "{e}");
    let e = refused(&["bench", "--scenario", "q-sweep", "--topology", t]);
    assert!(e.contains("fms-vs-sfb, compression, model-size"), "{e}");
}
