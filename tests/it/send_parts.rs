//! `--send-parts N` (issue 33, item 3: communication during the clock) through the
//! command line: a clock computed and sent in parts is the same run on every transport,
//! bitwise under BSP; the refusals name what does not go with it.

use crate::common::{num, refused, run_summary, short_bsp_run as run, tempdir};

#[test]
fn a_clock_sent_in_parts_is_the_same_run_on_every_transport() {
    let dir = tempdir("send_parts", "transports");
    for (name, base, parts) in [
        ("mem", &[][..], "4"),
        ("mem-k32", &["--batch", "32"][..], "8"),
        (
            "libp2p",
            &["--transport", "libp2p", "--peers", "3"][..],
            "4",
        ),
    ] {
        let whole = run(&dir, &format!("{name}-whole"), base);
        let mut args = base.to_vec();
        args.extend_from_slice(&["--send-parts", parts]);
        let sent = run(&dir, &format!("{name}-parts"), &args);
        let sums = sent["replica_checksums"].as_array().unwrap();
        assert!(sums.iter().all(|c| c == &sums[0]), "{name}: {sent}");
        assert_eq!(
            sent["replica_checksums"], whole["replica_checksums"],
            "{name}"
        );
        // The same pairs, in more frames.
        let ratio = num(&sent, "bytes_sent") / num(&whole, "bytes_sent");
        assert!(ratio > 1.0 && ratio < 1.05, "{name}: {ratio}");
    }
}

/// MLR's score product (faer's GEMM) rounds differently for a part of one or two samples
/// than within a larger batch: the replicas are still bitwise alike, and the run the same
/// to within rounding.
#[test]
fn parts_of_one_sample_are_the_same_run_to_within_rounding() {
    let dir = tempdir("send_parts", "one");
    let whole = run(&dir, "whole", &[]);
    let sent = run(&dir, "parts", &["--send-parts", "16"]);
    let sums = sent["replica_checksums"].as_array().unwrap();
    assert!(sums.iter().all(|c| c == &sums[0]), "{sent}");
    let (a, b) = (num(&whole, "objective"), num(&sent, "objective"));
    assert!((a - b).abs() < 1e-6 * a, "{a} against {b}");
}

/// On the simulator the parts are on the simulated wire while the next part is
/// computed: the same replicas, and a shorter clock where compute and sending are alike.
#[test]
fn on_the_simulator_sending_during_the_clock_shortens_it() {
    let dir = tempdir("send_parts", "sim");
    let args = [
        "sim",
        "--peers",
        "4",
        "--model",
        "sc",
        "--synthetic",
        "features=128,atoms=64,samples=4000",
        "--batch",
        "32",
        "--clocks",
        "30",
        "--eval-every",
        "0",
        "--egress",
        "1gbit",
        "--flops",
        "1e9",
    ];
    let whole = run_summary(&args, &dir.join("whole.json"));
    let mut with = args.to_vec();
    with.extend_from_slice(&["--send-parts", "4"]);
    let sent = run_summary(&with, &dir.join("parts.json"));
    assert_eq!(sent["replica_checksums"], whole["replica_checksums"]);
    let (a, b) = (num(&whole, "wall_s"), num(&sent, "wall_s"));
    eprintln!("simulated: whole {a:.4} s, 4 parts {b:.4} s");
    assert!(b < 0.95 * a, "whole {a} s, 4 parts {b} s");
}

#[test]
fn parts_are_refused_where_they_cannot_apply() {
    let e = refused(&["--send-parts", "17"]);
    assert!(
        e.contains("more parts than the mini-batch's 16 samples"),
        "{e}"
    );
    let e = refused(&["--send-parts", "0"]);
    assert!(e.contains("at least one part"), "{e}");
    let e = refused(&["--send-parts", "2", "--model", "l2mlr"]);
    assert!(e.contains("not separable"), "{e}");
    let e = refused(&["--send-parts", "2", "--backend", "fms"]);
    assert!(e.contains("--send-parts needs the sfb backend"), "{e}");
    let e = refused(&["--send-parts", "2", "--compress", "rank:2"]);
    assert!(e.contains("--compress decides what a clock sends"), "{e}");
    let e = refused(&[
        "--send-parts",
        "2",
        "--peers",
        "8",
        "--out-degree",
        "2",
        "--partial",
        "gossip",
    ]);
    assert!(e.contains("the gossip mode"), "{e}");
}
