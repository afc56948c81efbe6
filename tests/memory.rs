//! A run whose replicas cannot fit in this machine's memory is refused before they are
//! allocated, with both figures (issue 13), in memory and with the local launcher.

use std::process::Command;
use std::time::{Duration, Instant};

const SFB: &str = env!("CARGO_BIN_EXE_sfb");

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

#[test]
fn replicas_that_cannot_fit_are_refused_before_they_are_allocated() {
    // 1024×1024 f32 = 4 MiB per replica; enough peers for twice the available memory.
    let replica = 1024 * 1024 * 4;
    let peers = (2 * available() / replica + 1).to_string();
    for transport in ["mem", "libp2p"] {
        let start = Instant::now();
        let out = Command::new(SFB)
            .args([
                "run",
                "--transport",
                transport,
                "--peers",
                &peers,
                "--clocks",
                "1",
                "--synthetic",
                "classes=1024,features=1024,samples=200",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{transport}: {err}");
        assert!(
            err.contains(&format!("{peers} replicas of a 1024×1024 W need")),
            "{transport}: {err}"
        );
        assert!(err.contains("is available (MemAvailable)"), "{err}");
        // Refused up front, not after allocating (or swapping) its way there.
        assert!(start.elapsed() < Duration::from_secs(60), "{transport}");
    }
}
