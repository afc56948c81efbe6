//! `--compress rank:R` (issue 16, part 1) through the command line: fewer bytes in
//! proportion to R, the same learning thanks to error feedback, nothing changed when R
//! covers the batch, clear refusals.

use crate::common::{num as f, refused, short_bsp_run as run, tempdir};

#[test]
fn rank_r_sends_r_pairs_and_learns_as_well() {
    let dir = tempdir("compress", "ranks");
    let full = run(&dir, "full", &[]);
    // R ≥ K: the batch goes as it is, bitwise the same run.
    let same = run(&dir, "r16", &["--compress", "rank:16"]);
    assert_eq!(same["replica_checksums"], full["replica_checksums"]);
    for r in [2u32, 4, 8] {
        let c = run(
            &dir,
            &format!("r{r}"),
            &["--compress", &format!("rank:{r}")],
        );
        let ratio = f(&c, "bytes_per_clock") / f(&full, "bytes_per_clock");
        let objective = f(&c, "objective") / f(&full, "objective");
        eprintln!(
            "rank {r}: bytes per clock {:.0} vs {:.0} ({ratio:.3}), objective {:.4} vs {:.4}",
            f(&c, "bytes_per_clock"),
            f(&full, "bytes_per_clock"),
            f(&c, "objective"),
            f(&full, "objective")
        );
        // R of 16 pairs (plus the frame's fixed part).
        let want = f64::from(r) / 16.0;
        assert!(
            (ratio - want).abs() < 0.02,
            "rank {r}: {ratio} of the bytes"
        );
        assert!((objective - 1.0).abs() < 0.02, "rank {r}: {objective}");
    }
}

#[test]
fn compression_is_refused_where_it_cannot_apply() {
    let e = refused(&["--compress", "rank:0"]);
    assert!(e.contains("expected rank:R with R ≥ 1"), "{e}");
    let e = refused(&["--compress", "4"]);
    assert!(e.contains("is not a compression"), "{e}");
    let e = refused(&["--backend", "fms", "--compress", "rank:2"]);
    assert!(e.contains("--compress needs the sfb backend"), "{e}");
    let e = refused(&["--optimizer", "saga", "--compress", "rank:2"]);
    assert!(e.contains("--compress needs no saga"), "{e}");
}

#[test]
fn aggregated_apply_is_refused_where_it_cannot_apply_and_idle_where_it_would_not_pay() {
    let e = refused(&["--aggregate", "rank:0"]);
    assert!(e.contains("expected rank:R with R ≥ 1"), "{e}");
    let e = refused(&["--backend", "fms", "--aggregate", "rank:2"]);
    assert!(e.contains("--aggregate needs the sfb backend"), "{e}");
    let e = refused(&["--optimizer", "adagrad", "--aggregate", "rank:2"]);
    assert!(e.contains("adagrad applies dense updates"), "{e}");
    let dir = tempdir("compress", "aggregate");
    let e = refused(&[
        "--aggregate",
        "rank:2",
        "--checkpoint-dir",
        dir.to_str().unwrap(),
    ]);
    assert!(e.contains("no checkpoints"), "{e}");
    // On the small built-in problem re-compressing never pays: the same run as without.
    let plain = run(&dir, "plain", &[]);
    let agg = run(&dir, "agg", &["--aggregate", "rank:2"]);
    assert_eq!(agg["replica_checksums"], plain["replica_checksums"]);
    assert!(agg.get("aggregated_applies").is_none(), "{agg}");
}
