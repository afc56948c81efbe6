//! Hostile and broken networks around real `sfb peer` / `sfb server` processes (issue 13,
//! items 9, 10, 14): a flood of garbage TCP connections during a run, a peer started
//! twice on one address, and survivors naming the node they lost.
//!
//! Ports are chosen by the OS (`--base-port 0`) and exchanged (`--exchange-addrs`), except
//! where a test needs two processes on one port: it reuses the port the first one got.
//! Every wait is under a timeout; children are killed by PID (a guard) on every path and
//! checked gone at the end. The garbage is seeded.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::common::{Children, SFB, assert_gone, init, running, start, tempdir};

/// The `error:` line a failed node printed last.
fn error_line(stderr: &str) -> &str {
    stderr
        .lines()
        .rfind(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line in:\n{stderr}"))
}

// ---------------------------------------------------------------------------------------
// Item 9: a flood of garbage connections during a run.

/// Peers of the flood run; peer 0 is flooded.
const PEERS: usize = 3;
/// Clocks of the flood run; peer 2 straggles 25 ms per clock, so the run lasts at least
/// `CLOCKS × 25 ms` = 15 s, longer than the flood (1–6.5 s on 2 cores, by load).
const CLOCKS: u64 = 600;
const GARBAGE_CONNECTIONS: usize = 10_000;
const CONNECTORS: usize = 8;
/// Allowed growth of the flooded peer's peak RSS over the same peer's peak in the calm
/// run: 10%, or this much for a tiny process (the peers here peak near 12 MiB, where 10%
/// is 1.2 MiB, about the size of a few dozen pending handshakes' buffers).
const RSS_SLACK_KB: u64 = 2048;

fn flood_run_args(d: &Path, i: usize) -> Vec<String> {
    let mut a: Vec<String> = [
        "peer",
        "--id",
        &i.to_string(),
        "--synthetic",
        "classes=4,features=10,samples=600",
        "--clocks",
        &CLOCKS.to_string(),
        "--batch",
        "8",
        "--seed",
        "7",
        "--straggler",
        "2:25",
        "--summary",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push(d.join(format!("peer{i}.json")).display().to_string());
    a
}

/// Peak VmRSS (kB) of each PID, sampled every 10 ms on a thread until stopped.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<u64>>,
}

impl RssSampler {
    fn start(pids: Vec<u32>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut peak = vec![0u64; pids.len()];
            while !flag.load(Ordering::Relaxed) {
                for (k, pid) in pids.iter().enumerate() {
                    let status =
                        std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                    let rss = status
                        .lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                        .unwrap_or(0);
                    peak[k] = peak[k].max(rss);
                }
                // A sampling period, not a synchronization.
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        });
        Self { stop, thread }
    }

    fn finish(self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// What a flood did.
#[derive(Debug)]
struct Flood {
    /// Connections established (then fed garbage and closed).
    connected: usize,
    /// Connection attempts that failed and were retried.
    retries: usize,
    elapsed: Duration,
}

/// One garbage connection: connect (retrying a failed attempt), write seeded garbage,
/// close. Kinds by `k % 4`: nothing; 1–512 random bytes; a valid multistream-select header
/// proposing `/noise`, then random bytes (reaches the noise handshake); 2–4096 random
/// bytes. Returns the retries it needed.
fn garbage_connection(addr: SocketAddr, k: usize, seed: u64) -> usize {
    let mut rng =
        rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ (k as u64).wrapping_mul(0x9e37_79b9));
    let mut bytes = Vec::new();
    match k % 4 {
        0 => {}
        1 => bytes.extend((0..rng.random_range(1..=512)).map(|_| rng.random::<u8>())),
        2 => {
            bytes.extend_from_slice(b"\x13/multistream/1.0.0\n\x07/noise\n");
            bytes.extend((0..rng.random_range(1..=256)).map(|_| rng.random::<u8>()));
        }
        _ => bytes.extend((0..rng.random_range(2..=4096)).map(|_| rng.random::<u8>())),
    }
    for attempt in 0..20 {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(mut s) => {
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                // The peer may already have closed it: a reset is fine.
                let _ = s.write_all(&bytes);
                return attempt;
            }
            Err(e) if attempt == 19 => panic!("connection {k} to {addr}: {e}"),
            // Refused while the listener's queue is full (seen after back-to-back floods):
            // back off before the next attempt (a retry delay, not a synchronization).
            Err(_) => std::thread::sleep(Duration::from_millis(10 << attempt.min(6))),
        }
    }
    unreachable!()
}

/// `total` garbage connections to `addr` from `CONNECTORS` threads.
fn flood(addr: SocketAddr, total: usize, seed: u64) -> Flood {
    let next = AtomicUsize::new(0);
    let retries = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..CONNECTORS {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= total {
                        break;
                    }
                    retries.fetch_add(garbage_connection(addr, k, seed), Ordering::Relaxed);
                }
            });
        }
    });
    Flood {
        connected: total,
        retries: retries.into_inner(),
        elapsed: start.elapsed(),
    }
}

/// One 3-peer run; with `flood_seed`, peer 0 gets the garbage connections from the moment
/// the addresses are exchanged. Returns each peer's checksum, stderr and peak RSS (kB),
/// the run's wall time and the flood's report.
struct RunResult {
    checksums: Vec<String>,
    stderr: Vec<String>,
    peak_rss_kb: Vec<u64>,
    wall: Duration,
    flood: Option<Flood>,
}

fn three_peer_run(d: &Path, flood_seed: Option<u64>) -> RunResult {
    let cluster = init(d, &["--peers", &PEERS.to_string(), "--out-degree", "2"]);
    let nodes: Vec<(String, Vec<String>)> = (0..PEERS)
        .map(|i| (format!("peer{i}"), flood_run_args(d, i)))
        .collect();
    let mut started = start(&cluster, &nodes);
    let pids = started.children.pids();
    let rss = RssSampler::start(pids.clone());
    let target = started.socket_addr(0);
    let t0 = Instant::now();
    started.exchange();
    let flood = flood_seed.map(|seed| {
        let pid0 = pids[0];
        std::thread::spawn(move || {
            let f = flood(target, GARBAGE_CONNECTIONS, seed);
            (f, running(pid0))
        })
    });
    let stderr = started.children.wait_all(Duration::from_secs(180));
    let wall = t0.elapsed();
    let peak_rss_kb = rss.finish();
    let flood = flood.map(|t| {
        let (f, still_running) = t.join().unwrap();
        assert!(
            still_running,
            "peer 0 had finished before the flood did ({f:?}): the run is too short to show anything"
        );
        f
    });
    drop(started);
    assert_gone(&pids);
    let checksums = (0..PEERS)
        .map(|i| {
            let s: Value = serde_json::from_str(
                &std::fs::read_to_string(d.join(format!("peer{i}.json"))).unwrap(),
            )
            .unwrap();
            assert_eq!(s["clocks"], CLOCKS, "peer {i}: {s}");
            s["replica_checksums"][0].as_str().unwrap().to_string()
        })
        .collect();
    RunResult {
        checksums,
        stderr,
        peak_rss_kb,
        wall,
        flood,
    }
}

/// The largest `N since start` a summary line of refused connections reports.
fn refused_total(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .filter(|l| l.contains("unauthenticated connection"))
        .filter_map(|l| {
            let i = l.find(" since start")?;
            l[..i].rsplit('(').next()?.trim().parse().ok()
        })
        .max()
}

#[test]
fn ten_thousand_garbage_connections_change_neither_checksums_nor_memory_and_log_a_few_lines() {
    let test_start = Instant::now();
    let calm = three_peer_run(&tempdir("flood", "calm"), None);
    let hit = three_peer_run(&tempdir("flood", "flooded"), Some(0x5eed));
    let f = hit.flood.as_ref().unwrap();
    let lines = |s: &str| s.lines().count();
    let (calm_lines, hit_lines) = (lines(&calm.stderr[0]), lines(&hit.stderr[0]));
    eprintln!(
        "flood: {} connections in {:.2} s ({} retried attempts) from {CONNECTORS} threads",
        f.connected,
        f.elapsed.as_secs_f64(),
        f.retries
    );
    eprintln!(
        "runs: calm {:.2} s, flooded {:.2} s; peak RSS (kB) calm {:?}, flooded {:?}",
        calm.wall.as_secs_f64(),
        hit.wall.as_secs_f64(),
        calm.peak_rss_kb,
        hit.peak_rss_kb
    );
    eprintln!(
        "stderr lines of peer 0: calm {calm_lines}, flooded {hit_lines}:\n{}",
        hit.stderr[0]
    );
    // The garbage changes nothing in the training.
    assert!(
        calm.checksums.iter().all(|c| c == &calm.checksums[0]),
        "{:?}",
        calm.checksums
    );
    assert_eq!(
        hit.checksums, calm.checksums,
        "the flood changed the replicas"
    );
    // Every garbage connection was refused and counted, and the log stays short: the first
    // refusal, one summary per 10 s window, the final summary (and what the calm run logs).
    assert_eq!(f.connected, GARBAGE_CONNECTIONS);
    // Runs here counted 10,000 to 10,003 refusals: a few refusal events beyond the garbage
    // connections (cause not established: a peer's dial meeting the cap and retried, or
    // one connection reported twice). Allow 1% beyond.
    let refused = refused_total(&hit.stderr[0]).unwrap_or(0);
    let most = GARBAGE_CONNECTIONS as u64 + GARBAGE_CONNECTIONS as u64 / 100;
    assert!(
        (GARBAGE_CONNECTIONS as u64..=most).contains(&refused),
        "{refused} refused:\n{}",
        hit.stderr[0]
    );
    let windows = (hit.wall.as_secs_f64() / 10.0).ceil() as usize;
    assert!(
        hit_lines <= calm_lines + 2 + windows,
        "peer 0 logged {hit_lines} lines under the flood (calm: {calm_lines}; bound {})",
        calm_lines + 2 + windows
    );
    // The other peers heard nothing of it.
    for i in 1..PEERS {
        assert!(
            !hit.stderr[i].contains("unauthenticated"),
            "peer {i}: {}",
            hit.stderr[i]
        );
    }
    // Memory: the flooded peer's peak is the calm peak within 10% (or the slack).
    let (calm_rss, hit_rss) = (calm.peak_rss_kb[0], hit.peak_rss_kb[0]);
    assert!(calm_rss > 0 && hit_rss > 0, "no RSS sampled");
    let allowed = (calm_rss / 10).max(RSS_SLACK_KB);
    assert!(
        hit_rss <= calm_rss + allowed,
        "peer 0 peaked at {hit_rss} kB under the flood, {calm_rss} kB calm (allowed +{allowed} kB)"
    );
    eprintln!("whole test: {:.1} s", test_start.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------
// Item 10: a peer owns its port.

#[test]
fn a_second_process_on_a_peers_address_fails_at_once_with_address_in_use() {
    let d = tempdir("flood", "twice");
    let cluster = init(&d, &["--peers", "2", "--out-degree", "1"]);
    let args = |i: usize| -> Vec<String> {
        vec![
            "peer".into(),
            "--id".into(),
            i.to_string(),
            "--synthetic".into(),
            "classes=4,features=10,samples=400".into(),
        ]
    };
    // Peer 0 listens on the port the OS gave it and waits for the addresses.
    let first = start(&cluster, &[("peer0".into(), args(0))]);
    let taken = first.socket_addr(0);
    // The same cluster file with that port written in: a second peer 0.
    let text = std::fs::read_to_string(&cluster).unwrap();
    let ours = format!("/ip4/{}/tcp/{}", taken.ip(), taken.port());
    let dup_text = text.replacen("/tcp/0\"", &format!("/tcp/{}\"", taken.port()), 1);
    assert!(dup_text.contains(&ours), "{dup_text}");
    let dup = d.join("duplicate.toml");
    std::fs::write(&dup, dup_text).unwrap();
    let t0 = Instant::now();
    let mut second = Children(vec![(
        "second peer 0".into(),
        Command::new(SFB)
            .args(args(0))
            .arg("--cluster")
            .arg(&dup)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )]);
    // "At once": with no other peer ever started, a second peer 0 that got past its listen
    // would wait for peer 1 until the hang guard below fires; the exit with the listen
    // error is the event under test, not how long it took (a loaded machine can take
    // seconds).
    let (status, err) = second.wait_one(0, Duration::from_secs(60));
    eprintln!("second peer 0 ({:.2?}): {err}", t0.elapsed());
    assert_eq!(status.code(), Some(1), "{status}: {err}");
    let line = error_line(&err);
    assert!(
        line.contains(&format!("peer 0 cannot listen on {ours}: address in use"))
            && line.contains("Address already in use (os error"),
        "{line}"
    );
    // The first owner is unharmed: still listening, still waiting for its addresses.
    let pid = first.children.pids()[0];
    assert!(running(pid), "the first peer 0 died");
    TcpStream::connect_timeout(&taken, Duration::from_secs(5)).expect("peer 0 still accepts");
    drop(first);
    drop(second);
    assert_gone(&[pid]);
}

// ---------------------------------------------------------------------------------------
// Item 14: a survivor names the node it lost.

fn slow_args(role: &[&str]) -> Vec<String> {
    role.iter()
        .chain(&[
            "--synthetic",
            "classes=4,features=10,samples=400",
            "--clocks",
            "100000",
            "--peer-timeout",
            "20",
        ])
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn a_peer_whose_neighbour_dies_names_it() {
    let d = tempdir("flood", "lost-peer");
    let cluster = init(&d, &["--peers", "2", "--out-degree", "1"]);
    let nodes = vec![
        ("peer0".to_string(), slow_args(&["peer", "--id", "0"])),
        (
            "peer1".to_string(),
            [
                slow_args(&["peer", "--id", "1"]),
                vec!["--straggler".into(), "1:20".into()],
            ]
            .concat(),
        ),
    ];
    let mut c = start(&cluster, &nodes);
    let pids = c.children.pids();
    c.exchange();
    c.wait_clock(0, 5);
    c.children.kill(1);
    let (status, err) = c.children.wait_one(0, Duration::from_secs(30));
    let line = error_line(&err);
    eprintln!("peer 0: {line}");
    assert_eq!(status.code(), Some(1), "{status}: {err}");
    assert!(line.starts_with("error: lost peer 1: "), "{err}");
    drop(c);
    assert_gone(&pids);
}

#[test]
fn clients_of_a_dead_server_name_the_server_and_a_server_names_a_dead_client() {
    let d = tempdir("flood", "lost-server");
    let cluster = init(&d, &["--peers", "2", "--backend", "fms"]);
    let nodes = || {
        vec![
            ("client0".to_string(), slow_args(&["peer", "--id", "0"])),
            ("client1".to_string(), slow_args(&["peer", "--id", "1"])),
            ("server".to_string(), slow_args(&["server"])),
        ]
    };
    // The server dies: each client's only link was to it.
    let mut c = start(&cluster, &nodes());
    let pids = c.children.pids();
    c.exchange();
    c.wait_clock(0, 5);
    c.children.kill(2);
    for k in [0, 1] {
        let (status, err) = c.children.wait_one(k, Duration::from_secs(30));
        let line = error_line(&err);
        eprintln!("client {k}: {line}");
        assert_eq!(status.code(), Some(1), "{status}: {err}");
        assert!(line.starts_with("error: lost the server: "), "{err}");
        assert!(!line.contains("peer 2"), "{err}");
    }
    drop(c);
    assert_gone(&pids);

    // Client 0 dies: the server names it (and client 1 then loses the server).
    let mut c = start(&cluster, &nodes());
    let pids = c.children.pids();
    c.exchange();
    c.wait_clock(2, 5);
    c.children.kill(0);
    let (status, err) = c.children.wait_one(2, Duration::from_secs(30));
    let line = error_line(&err);
    eprintln!("server: {line}");
    assert_eq!(status.code(), Some(1), "{status}: {err}");
    assert!(line.starts_with("error: lost peer 0: "), "{err}");
    let (status, err) = c.children.wait_one(1, Duration::from_secs(30));
    let line = error_line(&err);
    eprintln!("client 1: {line}");
    assert_eq!(status.code(), Some(1), "{status}: {err}");
    assert!(line.starts_with("error: lost the server: "), "{err}");
    drop(c);
    assert_gone(&pids);
}
