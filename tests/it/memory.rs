//! A run whose replicas cannot fit in this machine's memory is refused before they are
//! allocated, with both figures (issue 13), in memory and with the local launcher.

use std::process::Command;

const SFB: &str = env!("CARGO_BIN_EXE_sfb");

/// The refused runs' address-space limit, KiB: the available memory, at least 1 GiB (room
/// for the runtime's threads and their reserved arenas) and at most 8 GiB; half the
/// replicas asked for, or less.
fn as_limit_kb() -> u64 {
    (available() / 1024).clamp(1 << 20, 8 << 20)
}

/// `MemAvailable` in bytes.
fn available() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// Runs `sfb run ARGS` with its address space limited to [`as_limit_kb`], expects it
/// refused (rc 1, no panic) and returns its stderr. Under the limit a run that allocated
/// its replicas (twice the available memory) before checking would fail to allocate
/// (an abort, not rc 1 with the figures): the refusal comes first, whatever the time.
fn refused(args: &[&str]) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {} && exec \"$0\" \"$@\"", as_limit_kb()))
        .arg(SFB)
        .arg("run")
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn replicas_that_cannot_fit_are_refused_before_they_are_allocated() {
    // 1024×1024 f32 = 4 MiB per replica (one more column: the intercept); enough peers
    // for twice the available memory.
    let replica = 1024 * 1024 * 4;
    let peers = (2 * available() / replica + 1).to_string();
    for transport in ["mem", "libp2p"] {
        let err = refused(&[
            "--transport",
            transport,
            "--peers",
            &peers,
            "--clocks",
            "1",
            "--synthetic",
            "classes=1024,features=1024,samples=200",
        ]);
        assert!(
            err.contains(&format!("{peers} replicas of a 1024×1025 W")) && err.contains(" need "),
            "{transport}: {err}"
        );
        assert!(err.contains("is available (MemAvailable)"), "{err}");
    }
}

#[test]
fn a_batch_larger_than_the_data_set_is_refused_before_anything_is_allocated() {
    let err = refused(&[
        "--peers",
        "2",
        "--clocks",
        "1",
        "--batch",
        "1000000000",
        "--synthetic",
        "classes=4,features=16,samples=600",
    ]);
    assert!(
        err.contains("batch 1000000000 is larger than the whole training set"),
        "{err}"
    );
}
