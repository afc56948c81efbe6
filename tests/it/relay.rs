//! `--relay` (issue 16, part 4) through the command line: over libp2p processes every
//! replica applies every update with Q connections per peer, and the BSP run is bitwise
//! the in-memory one; what relay cannot serve is refused, naming it.

use std::process::Command;

use crate::common::{SFB, num, run_summary, tempdir};

const SPEC: &[&str] = &[
    "--peers",
    "6",
    "--out-degree",
    "2",
    "--clocks",
    "15",
    "--seed",
    "4",
    "--optimizer",
    "sgd",
];

#[test]
fn relay_over_libp2p_gives_every_replica_every_update_as_in_memory() {
    let dir = tempdir("relay", "libp2p");
    let run = |name: &str, extra: &[&str]| {
        let mut args = vec!["run"];
        args.extend_from_slice(SPEC);
        args.extend_from_slice(extra);
        run_summary(&args, &dir.join(format!("{name}.json")))
    };
    let p2p = run("p2p", &["--relay", "--transport", "libp2p"]);
    let mem = run("mem", &["--relay"]);
    let partial = run("partial", &[]);
    assert_eq!(num(&p2p, "update_coverage"), 1.0, "{p2p}");
    assert_eq!(num(&mem, "update_coverage"), 1.0);
    assert_eq!(num(&partial, "update_coverage"), 0.5, "(Q+1)/P = 3/6");
    assert!(partial.get("relayed_batches").is_none(), "{partial}");
    // Each batch crosses P − 1 arcs: Q of them from its origin, the rest relayed.
    assert_eq!(num(&p2p, "relayed_batches"), (6.0 * (5.0 - 2.0)) * 15.0);
    // BSP and plain SGD: the same run whatever the transport; every replica holds the
    // same updates (applied at other clocks: equal up to rounding).
    assert_eq!(p2p["replica_checksums"], mem["replica_checksums"]);
    assert!(num(&p2p, "max_replica_divergence") < 1e-5, "{p2p}");
    assert!(num(&partial, "max_replica_divergence") > 1e-2, "{partial}");
    assert!(num(&p2p, "objective") < num(&partial, "objective"));
}

#[test]
fn relay_refuses_what_it_cannot_serve_naming_it() {
    let dir = tempdir("relay", "refusals");
    let out = Command::new(SFB)
        .args(["run", "--relay-compress", "rank:2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--relay-compress needs --relay"),
        "{err}"
    );
    let cases: &[(&[&str], &str)] = &[
        (&["--backend", "fms"], "the sfb backend"),
        (
            &[
                "--on-peer-loss",
                "continue",
                "--rejoin",
                "--checkpoint-dir",
                dir.to_str().unwrap(),
            ],
            "no --rejoin",
        ),
    ];
    for (extra, says) in cases {
        let out = Command::new(SFB)
            .arg("run")
            .args(SPEC)
            .arg("--relay")
            .args(*extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?}: {err}");
        assert!(
            err.contains("--relay") && err.contains(says),
            "{extra:?}: {err}"
        );
    }
}
