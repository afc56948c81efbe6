//! Runs that complete but deserve a warning (issue 13): training that diverges, and async
//! peers held back by flow control. Each warning is said once (or rate-limited), not once
//! per peer and clock.

use std::process::Command;

const SFB: &str = env!("CARGO_BIN_EXE_sfb");

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(SFB)
        .arg("run")
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_diverging_run_is_warned_about_once() {
    let (rc, _, err) = run(&["--peers", "4", "--clocks", "30", "--lr", "1e30"]);
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("diverging")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("try a smaller step size (--lr)"), "{err}");
    // The default step size does not trigger it.
    let (rc, _, err) = run(&["--peers", "4", "--clocks", "30"]);
    assert_eq!(rc, 0, "{err}");
    assert!(!err.contains("diverging"), "{err}");
}

#[test]
fn async_flow_control_bounds_staleness_and_warns_a_bounded_number_of_times() {
    // Peer 0 is 5 ms slower per clock: without flow control the others would run
    // hundreds of clocks ahead.
    let dir = std::env::temp_dir().join(format!("sfb-test-drift-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let summary = dir.join("s.json");
    let (rc, _, err) = run(&[
        "--peers",
        "3",
        "--clocks",
        "400",
        "--eval-every",
        "0",
        "--consistency",
        "async",
        "--max-drift",
        "8",
        "--straggler",
        "0:5",
        "--synthetic",
        "classes=4,features=16,samples=600",
        "--summary",
        summary.to_str().unwrap(),
    ]);
    assert_eq!(rc, 0, "{err}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let max = s["max_staleness"].as_u64().unwrap();
    assert!((1..=8).contains(&max), "max staleness {max}");
    let warnings = err.lines().filter(|l| l.contains("flow control")).count();
    // Hundreds of clocks are held; the first is said at once, then at most one line per
    // 10 s (the run takes about 2 s; the bound leaves room for a slow machine).
    assert!((1..=10).contains(&warnings), "{warnings} warnings:\n{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The paper's partial broadcast on a topology where it cannot reach full broadcast's
/// quality is warned about once per run, naming the condition and what to use instead;
/// the default gossip mode and a complete topology are not.
#[test]
fn the_paper_mode_on_a_failing_topology_is_warned_about_once() {
    // P = 12, Q = 3 (optimal: three zero eigenvalues) diverges; Q = 2 stalls.
    for (q, verdict) in [("3", "diverges"), ("2", "stalls")] {
        let args = [
            "--peers",
            "12",
            "--out-degree",
            q,
            "--clocks",
            "5",
            "--partial",
            "paper",
        ];
        let (rc, _, err) = run(&args);
        assert_eq!(rc, 0, "{err}");
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("--partial paper"))
            .collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains(verdict), "{err}");
        assert!(lines[0].contains("min Re λ(I + A_in)"), "{err}");
        assert!(lines[0].contains("--partial gossip"), "{err}");
    }
    for args in [
        vec!["--peers", "12", "--out-degree", "3", "--clocks", "5"],
        vec!["--peers", "4", "--clocks", "5", "--partial", "paper"],
    ] {
        let (rc, _, err) = run(&args);
        assert_eq!(rc, 0, "{err}");
        assert!(!err.contains("--partial paper"), "{args:?}: {err}");
    }
}
