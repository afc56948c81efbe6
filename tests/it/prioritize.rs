//! `--prioritize POLICY:BUDGET` (issue 16, part 3) through the command line: a budget that
//! covers the batch changes nothing; half the pairs per clock sends half the bytes, keeps
//! the replicas equal under BSP and learns on every policy; clear refusals.

use crate::common::{num as f, refused, run_summary, short_bsp_run as run, tempdir};

#[test]
fn half_the_pairs_per_clock_sends_half_the_bytes_and_still_learns() {
    let dir = tempdir("prioritize", "policies");
    let full = run(&dir, "full", &[]);
    // A budget that covers the batch: bitwise the same run.
    let same = run(&dir, "all", &["--prioritize", "magnitude:16"]);
    assert_eq!(same["replica_checksums"], full["replica_checksums"]);
    assert!(same.get("lost_update_energy").is_none(), "{same}");
    for policy in ["magnitude", "relative", "random", "round-robin"] {
        let p = run(&dir, policy, &["--prioritize", &format!("{policy}:50%")]);
        let ratio = f(&p, "bytes_per_clock") / f(&full, "bytes_per_clock");
        eprintln!(
            "{policy}: bytes per clock {ratio:.3} of all, objective {:.4} vs {:.4}, lost \
             energy {:.3}",
            f(&p, "objective"),
            f(&full, "objective"),
            f(&p, "lost_update_energy")
        );
        // 8 of 16 pairs (plus the frame's fixed part).
        assert!((ratio - 0.5).abs() < 0.02, "{policy}: {ratio} of the bytes");
        // Every peer applied what it sent: one replica under BSP.
        let sums = p["replica_checksums"].as_array().unwrap();
        assert!(sums.iter().all(|s| s == &sums[0]), "{policy}: {sums:?}");
        // It held some back and lost a part of that bounding it, and still learned.
        let lost = f(&p, "lost_update_energy");
        assert!(lost > 0.0 && lost < 0.5, "{policy}: lost {lost}");
        assert!(
            f(&p, "objective") < 1.1 * f(&full, "objective"),
            "{policy}: {p}"
        );
    }
}

/// Bösen's managed communication from FMS clients to the server: each client pushes at
/// most the budget's pairs per clock, most important first, and carries the rest over. A
/// budget of K is the run without one, bitwise; half the pairs sends about half the
/// clients' bytes and still learns.
#[test]
fn fms_clients_push_under_a_budget() {
    let dir = tempdir("prioritize", "fms");
    // The clients' bytes (the server's pushes of W are the same in every arm), from the
    // per-clock records: each client's last.
    let fms_run = |name: &str, extra: &[&str]| -> (serde_json::Value, f64) {
        let metrics = dir.join(format!("{name}.jsonl"));
        let mut args = vec!["--backend", "fms", "--metrics", metrics.to_str().unwrap()];
        args.extend_from_slice(extra);
        let summary = run(&dir, name, &args);
        let mut last = std::collections::BTreeMap::new();
        for line in std::fs::read_to_string(&metrics).unwrap().lines() {
            let r: serde_json::Value = serde_json::from_str(line).unwrap();
            let peer = r["peer"].as_u64().unwrap();
            if peer < u64::from(u32::MAX) {
                last.insert(peer, r["bytes_sent"].as_f64().unwrap());
            }
        }
        (summary, last.values().sum())
    };
    let (full, full_bytes) = fms_run("fms-full", &[]);
    let (same, _) = fms_run("fms-all", &["--prioritize", "magnitude:16"]);
    assert_eq!(same["replica_checksums"], full["replica_checksums"]);
    let (p, half_bytes) = fms_run("fms-half", &["--prioritize", "magnitude:50%"]);
    let ratio = half_bytes / full_bytes;
    eprintln!(
        "FMS clients' pushes at half the pairs: {ratio:.3} of the bytes; objective {:.4} vs \
         {:.4}",
        f(&p, "objective"),
        f(&full, "objective")
    );
    assert!((ratio - 0.5).abs() < 0.05, "{ratio} of the bytes");
    assert!(f(&p, "lost_update_energy") > 0.0, "{p}");
    assert!(
        f(&p, "objective") < 1.1 * f(&full, "objective"),
        "{p} against {full}"
    );
}

/// A measured budget on FMS clients (`--backend fms --prioritize magnitude:auto`): on the
/// simulator each client measures its own NIC and pushes what it carries in a clock's
/// work.
#[test]
fn fms_clients_measure_their_link_on_the_simulator() {
    let dir = tempdir("prioritize", "fms-auto");
    let metrics = dir.join("fms.jsonl");
    let mut args = measured_sc_run("0");
    args.extend_from_slice(&["--backend", "fms", "--metrics", metrics.to_str().unwrap()]);
    run_summary(&args, &dir.join("fms.json"));
    let records: Vec<serde_json::Value> = std::fs::read_to_string(&metrics)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r["peer"] == 0)
        .collect();
    assert_eq!(records[0]["send_budget"], 32, "{}", records[0]);
    let last = records.last().unwrap();
    let rate = last["link_bytes_per_s"].as_f64().expect("measured");
    assert!((rate / 3.125e6 - 1.0).abs() < 0.01, "{last}");
    let budget = last["send_budget"].as_u64().unwrap();
    assert!((1..32).contains(&budget), "{last}");
}

#[test]
fn prioritization_is_refused_where_it_cannot_apply() {
    for (arg, why) in [
        ("magnitude", "no budget"),
        (
            "biggest:50%",
            "the policy is magnitude, relative, random or round-robin",
        ),
        ("random:0", "a budget of 0 pairs"),
        ("random:150%", "at most 100%"),
        (
            "random:half",
            "a percentage (50%), a number of pairs (8) or auto",
        ),
    ] {
        let e = refused(&["--prioritize", arg]);
        assert!(
            e.contains("is not a prioritization") && e.contains(why),
            "{arg}: {e}"
        );
    }
    let e = refused(&[
        "--backend",
        "fms",
        "--fms-push",
        "dense",
        "--prioritize",
        "magnitude:50%",
    ]);
    assert!(
        e.contains("--prioritize needs the sfb backend or FMS factor push"),
        "{e}"
    );
    let e = refused(&[
        "--backend",
        "fms",
        "--prioritize",
        "magnitude:50%",
        "--checkpoint-every",
        "5",
        "--checkpoint-dir",
        "/tmp/sfb-never-written",
    ]);
    assert!(e.contains("no checkpoints with it"), "{e}");
    let e = refused(&["--prioritize", "magnitude:50%", "--compress", "rank:2"]);
    assert!(e.contains("--prioritize needs no --compress"), "{e}");
    let e = refused(&["--optimizer", "saga", "--prioritize", "magnitude:50%"]);
    assert!(e.contains("--prioritize needs no saga"), "{e}");
}

/// `sfb sim` of SC at P = 4, BSP, 25 Mbit/s and 5e8 flop/s for 120 clocks, evaluated every
/// `eval_every`, under `--prioritize magnitude:auto`.
fn measured_sc_run(eval_every: &str) -> Vec<&str> {
    vec![
        "sim",
        "--peers",
        "4",
        "--model",
        "sc",
        "--synthetic",
        "features=128,atoms=64,samples=8000",
        "--batch",
        "32",
        "--clocks",
        "120",
        "--eval-every",
        eval_every,
        "--egress",
        "25mbit",
        "--flops",
        "5e8",
        "--consistency",
        "bsp",
        "--prioritize",
        "magnitude:auto",
    ]
}

/// `--prioritize magnitude:auto` (issue 33, item 3: bandwidth measured, not configured):
/// on the simulator the peer measures its NIC's rate from the time it is busy, and the
/// budget follows a link that gets 4x slower mid-run and recovers; the replicas stay
/// alike under BSP.
#[test]
fn a_measured_budget_follows_the_links_rate_down_and_back_up() {
    let dir = tempdir("prioritize", "auto");
    let args = measured_sc_run("0");
    let records = |name: &str, extra: &[&str]| -> Vec<(f64, Option<u64>, Option<f64>)> {
        let metrics = dir.join(format!("{name}.jsonl"));
        let mut a = args.to_vec();
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--metrics", metrics.to_str().unwrap()]);
        let s = run_summary(&a, &dir.join(format!("{name}.json")));
        let sums = s["replica_checksums"].as_array().unwrap();
        assert!(sums.iter().all(|c| c == &sums[0]), "{name}: {s}");
        std::fs::read_to_string(&metrics)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["peer"] == 0)
            .map(|r| {
                (
                    r["wall_s"].as_f64().unwrap(),
                    r["send_budget"].as_u64(),
                    r["link_bytes_per_s"].as_f64(),
                )
            })
            .collect()
    };
    let steady = records("steady", &[]);
    // The first clock sends everything: nothing is measured yet.
    assert_eq!(steady[0].1, Some(32), "{:?}", steady[0]);
    let end = steady.last().unwrap().0;
    let before = steady[steady.len() / 2];
    let rate = before.2.expect("measured");
    // 25 Mbit/s is 3.125e6 bytes per second.
    assert!((rate / 3.125e6 - 1.0).abs() < 0.01, "{rate}");
    let budget = before.1.unwrap();
    assert!((4..32).contains(&budget), "{budget} pairs");
    // 4x slower over the second quarter of the run and the third.
    let (from, until) = (end / 4.0, end / 2.0);
    let window = format!("0,1,2,3@{from}..{until}:4");
    let changed = records("changed", &["--slow", &window]);
    // Four clocks of measurement after the change, and before its end.
    let during: Vec<_> = changed
        .iter()
        .filter(|r| r.0 > from + (until - from) / 2.0 && r.0 < until)
        .collect();
    let after: Vec<_> = changed
        .iter()
        .filter(|r| r.0 > until + (until - from) / 2.0)
        .collect();
    assert!(!during.is_empty() && !after.is_empty(), "{changed:?}");
    for r in &during {
        let measured = r.2.unwrap();
        assert!((measured / 0.78125e6 - 1.0).abs() < 0.01, "{r:?}");
        assert!(
            r.1.unwrap() <= budget.div_ceil(4) + 1,
            "{r:?} against {budget}"
        );
    }
    for r in &after {
        assert!((r.2.unwrap() / 3.125e6 - 1.0).abs() < 0.01, "{r:?}");
        assert_eq!(r.1, Some(budget), "{r:?}");
    }
}

/// Bösen's managed communication whole: a measured budget (`magnitude:auto`) spent during
/// the clock (`--send-parts 4`), each part sending its share of the budget, most
/// important first, while the next part is computed. On the simulator: one replica under
/// BSP, the same pairs per clock as the budget sent whole (within the parts' headers) and a
/// shorter clock, as without a budget.
#[test]
fn a_measured_budget_spent_during_the_clock_shortens_it() {
    let dir = tempdir("prioritize", "auto-parts");
    let args = measured_sc_run("20");
    let whole = run_summary(&args, &dir.join("whole.json"));
    let mut with = args.clone();
    with.extend_from_slice(&["--send-parts", "4"]);
    let parts = run_summary(&with, &dir.join("parts.json"));
    let sums = parts["replica_checksums"].as_array().unwrap();
    assert!(sums.iter().all(|c| c == &sums[0]), "{parts}");
    let bytes = f(&parts, "bytes_per_clock") / f(&whole, "bytes_per_clock");
    let (a, b) = (f(&whole, "wall_s"), f(&parts, "wall_s"));
    let (oa, ob) = (f(&whole, "objective"), f(&parts, "objective"));
    eprintln!(
        "simulated: whole {a:.3} s, 4 parts {b:.3} s; bytes per clock {bytes:.3} of whole's; \
         objective {oa:.4} against {ob:.4}"
    );
    assert!((bytes - 1.0).abs() < 0.05, "{bytes}");
    assert!(b < 0.95 * a, "whole {a} s, 4 parts {b} s");
    assert!((ob / oa - 1.0).abs() < 0.02, "{oa} against {ob}");
}

#[test]
fn a_measured_budget_needs_a_link_to_measure() {
    let e = refused(&["--prioritize", "magnitude:auto"]);
    assert!(
        e.contains("--transport libp2p or sfb sim") && e.contains("no link to measure"),
        "{e}"
    );
}
