//! `sfb topology` end to end: outputs, file round trips, and one-line errors.

use std::process::{Command, Output};

fn sfb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sfb"))
        .arg("topology")
        .args(args)
        .output()
        .expect("run sfb")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sfb-topology-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn json_goes_to_stdout_with_the_design_keys() {
    let o = sfb(&["--peers", "12", "--out-degree", "3", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for key in [
        "peers",
        "out_degree",
        "out",
        "cost",
        "lower_bound",
        "proven_optimal",
        "diameter",
        "mean_delay",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["peers"], 12);
    assert_eq!(v["out"].as_array().unwrap().len(), 12);
    assert_eq!(v["cost"], v["lower_bound"]);
    assert_eq!(v["proven_optimal"], true);
    let summary = stderr(&o);
    assert!(
        summary.contains("gap") && summary.contains("kautz") && summary.contains("exponential")
    );
}

#[test]
fn paper_setting_q2_is_proven_optimal() {
    let o = sfb(&[
        "--peers",
        "12",
        "--out-degree",
        "2",
        "--format",
        "json",
        "--time-limit",
        "60",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["proven_optimal"], true);
    assert_eq!(v["cost"], 300);
}

#[test]
fn toml_file_round_trip_dot_and_repair() {
    let path = tmp("kautz.toml");
    let p = path.to_str().unwrap();
    let o = sfb(&[
        "--peers",
        "20",
        "--out-degree",
        "3",
        "--method",
        "kautz",
        "-o",
        p,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(
        summary.contains("cost") && summary.contains("bound"),
        "{summary}"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("[[peer]]"));

    let o = sfb(&["--input", p, "--format", "dot"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let dot = String::from_utf8_lossy(&o.stdout);
    assert!(dot.starts_with("digraph sfb {"));
    assert_eq!(dot.matches(" -> ").count(), 20);

    let o = sfb(&["--input", p, "--fail", "3,7", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["peers"], 18);
    assert_eq!(v["out_degree"], 3);
}

#[test]
fn every_method_runs() {
    for args in [
        &["--method", "kautz"][..],
        &["--method", "exponential"],
        &["--method", "ring"],
        &["--method", "random", "--seed", "7"],
        &["--method", "circulant", "--jumps", "1,5,7"],
        &["--method", "optimal", "--time-limit", "0.5"],
    ] {
        let mut all = vec!["--peers", "30", "--out-degree", "3", "--format", "json"];
        all.extend_from_slice(args);
        let o = sfb(&all);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["out_degree"], 3);
    }
    let o = sfb(&[
        "--peers",
        "6",
        "--out-degree",
        "5",
        "--method",
        "full",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Every error: nonzero exit and exactly one line naming the problem.
#[test]
fn errors_are_one_line_and_nonzero() {
    let unknown = tmp("unknown.toml");
    std::fs::write(
        &unknown,
        "[[peer]]\nid = 0\nout = [1]\n[[peer]]\nid = 1\nout = [9]\n",
    )
    .unwrap();
    let degree = tmp("degree.toml");
    std::fs::write(
        &degree,
        "[[peer]]\nid = 0\nout = [1, 2]\n[[peer]]\nid = 1\nout = [0]\n[[peer]]\nid = 2\nout = [0, 1]\n",
    )
    .unwrap();
    let garbage = tmp("garbage.toml");
    std::fs::write(&garbage, "peer = [\n").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--peers", "0", "--out-degree", "1"],
            "at least 2 peers",
        ),
        (
            vec!["--peers", "8", "--out-degree", "0"],
            "out-degree must be at least 1",
        ),
        (
            vec!["--peers", "8", "--out-degree", "8"],
            "must be less than the number of peers",
        ),
        (
            vec!["--peers", "8", "--out-degree", "9"],
            "must be less than the number of peers",
        ),
        (
            vec!["--input", "/nonexistent/topology.toml"],
            "cannot read topology file",
        ),
        (vec!["--input", unknown.to_str().unwrap()], "unknown peer 9"),
        (
            vec!["--input", degree.to_str().unwrap()],
            "peer 1 has 1 out-neighbours",
        ),
        (vec!["--input", garbage.to_str().unwrap()], "invalid TOML"),
    ];
    for (args, needle) in cases {
        let o = sfb(&args);
        assert!(!o.status.success(), "{args:?} should fail");
        let err = stderr(&o);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// The learning figures (issue 28): the paper mode's verdict and smallest real part, and the
/// gossip mode's mixing rate, in the JSON and the text.
#[test]
fn the_learning_figures_are_reported() {
    for (q, verdict) in [("2", "stalls"), ("3", "diverges"), ("11", "exact")] {
        let o = sfb(&["--peers", "12", "--out-degree", q, "--format", "json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["paper_mode"], verdict, "Q = {q}");
        let re = v["paper_min_real_part"].as_f64().unwrap();
        match verdict {
            "stalls" => assert!((re - 0.1321).abs() < 1e-3, "{re}"),
            "diverges" => assert!(re.abs() < 1e-6, "{re}"),
            _ => {}
        }
        assert!(v["mixing"].as_f64().unwrap() > 0.0);
    }
    let path = tmp("learning.toml");
    let o = sfb(&[
        "--peers",
        "12",
        "--out-degree",
        "3",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("paper mode (--partial paper) diverges"),
        "{text}"
    );
    assert!(
        text.contains("gossip mode (the default) mixes at"),
        "{text}"
    );
}

/// `--goal paper-stable` trades hops for the paper mode's stability where eq. 3's optimum
/// makes it diverge (P = 12, Q = 3), and says so with both topologies' figures; a goal
/// with a construction is refused.
#[test]
fn a_learning_goal_changes_the_choice_and_reports_both_figures() {
    let o = sfb(&[
        "--peers",
        "12",
        "--out-degree",
        "3",
        "--goal",
        "paper-stable",
        "--format",
        "json",
        "--time-limit",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["paper_mode"], "stalls", "{v}");
    assert!(v["paper_min_real_part"].as_f64().unwrap() > 0.0);
    assert!(
        v["cost"].as_u64().unwrap() > 228,
        "eq. 3's optimum (228) diverges"
    );
    assert_eq!(v["proven_optimal"], false);
    let text = stderr(&o);
    assert!(
        text.contains("goal       paper-stable: met; eq. 3's optimum: cost 228"),
        "{text}"
    );
    let o = sfb(&[
        "--peers",
        "12",
        "--out-degree",
        "3",
        "--method",
        "ring",
        "--goal",
        "mixing",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--goal is for --method optimal"),
        "{}",
        stderr(&o)
    );
}
