//! `--prioritize POLICY:BUDGET` (issue 16, part 3) through the command line: a budget that
//! covers the batch changes nothing; half the pairs per clock sends half the bytes, keeps
//! the replicas equal under BSP and learns on every policy; clear refusals.

use crate::common::{num as f, refused, short_bsp_run as run, tempdir};

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
        ("random:half", "a percentage (50%) or a number of pairs (8)"),
    ] {
        let e = refused(&["--prioritize", arg]);
        assert!(
            e.contains("is not a prioritization") && e.contains(why),
            "{arg}: {e}"
        );
    }
    let e = refused(&["--backend", "fms", "--prioritize", "magnitude:50%"]);
    assert!(e.contains("--prioritize needs the sfb backend"), "{e}");
    let e = refused(&["--prioritize", "magnitude:50%", "--compress", "rank:2"]);
    assert!(e.contains("--prioritize needs no --compress"), "{e}");
    let e = refused(&["--optimizer", "saga", "--prioritize", "magnitude:50%"]);
    assert!(e.contains("--prioritize needs no saga"), "{e}");
}
