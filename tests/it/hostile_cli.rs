//! Hostile input to the real `sfb` binary (issue 13, items 5, 6, 8 and 11): every input
//! here is refused with a clear message and exit code 1 — never a panic (101), an abort
//! (134) or a hang — and before any training starts.
//!
//! Every process runs under a deadline and is killed by its PID when it passes it; every
//! run that is meant to be refused would take far longer than that deadline if it started
//! training, so "refused in time" means "refused before training".

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SFB: &str = env!("CARGO_BIN_EXE_sfb");

/// Small data: a run of a few clocks takes well under a second.
const TINY: &str = "classes=3,features=8,samples=400";

/// What a finished `sfb` process left.
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs `sfb args…` in `dir`; kills it (by PID) if it has not exited after `limit`.
fn sfb_in(dir: &Path, args: &[&str], limit: Duration) -> Out {
    let child = Command::new(SFB)
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sfb starts");
    let pid = child.id();
    let start = Instant::now();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(limit) {
        Ok(out) => out.expect("waiting for sfb"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let _ = rx.recv_timeout(Duration::from_secs(10));
            panic!("sfb {args:?} (pid {pid}) did not exit within {limit:?}");
        }
    };
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: start.elapsed(),
    }
}

/// Runs `sfb args…` expecting a refusal: exit code 1 within 30 s, `needle` in its stderr,
/// nothing on stdout (no training line, no summary). Returns its stderr.
fn refused_in(dir: &Path, args: &[&str], needle: &str) -> String {
    let o = sfb_in(dir, args, Duration::from_secs(30));
    assert_eq!(
        o.code,
        Some(1),
        "sfb {args:?}: want exit code 1, got {:?}\n{}",
        o.code,
        o.stderr
    );
    assert!(
        o.stderr.contains(needle),
        "sfb {args:?}: stderr lacks {needle:?}:\n{}",
        o.stderr
    );
    assert!(
        !o.stderr.contains("panicked"),
        "sfb {args:?} panicked:\n{}",
        o.stderr
    );
    assert!(
        o.stdout.is_empty(),
        "sfb {args:?} printed before refusing:\n{}",
        o.stdout
    );
    o.stderr
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// Writes a 2-peer SFB cluster (ports 0) as `dir/c.toml`, keys in `dir/c-keys/`.
fn cluster(dir: &Path, extra: &[&str]) -> PathBuf {
    let path = dir.join("c.toml");
    let mut args = vec!["cluster", "init", "--peers", "2", "--base-port", "0"];
    args.extend_from_slice(extra);
    args.extend(["-o", s(&path)]);
    let o = sfb_in(dir, &args, Duration::from_secs(60));
    assert_eq!(o.code, Some(0), "cluster init: {}", o.stderr);
    path
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The message of a refused number of seconds.
fn seconds_msg(flag: &str, expected: &str, got: &str) -> String {
    format!("{flag} must be {expected} number of seconds, at most 31536000 (one year), got {got}")
}

/// The three values the issue found panicking, as clap passes them and as the error
/// prints them.
const HUGE: [(&str, &str); 4] = [
    ("1e30", "1e30"),
    ("inf", "inf"),
    ("nan", "NaN"),
    ("-1", "-1.0"),
];

#[test]
fn seconds_options_of_sfb_run_refuse_what_a_duration_cannot_hold() {
    let d = tempdir();
    let dir = d.path();
    for flag in ["--timeout", "--peer-timeout", "--startup-timeout"] {
        for (v, shown) in HUGE {
            let arg = format!("{flag}={v}");
            refused_in(
                dir,
                &["run", &arg, "--synthetic", TINY, "--clocks", "3"],
                &seconds_msg(flag, "a positive", shown),
            );
        }
    }
    for (v, shown) in HUGE {
        let arg = format!("--topology-time-limit={v}");
        refused_in(
            dir,
            &["run", &arg, "--out-degree", "2", "--synthetic", TINY],
            &seconds_msg("--topology-time-limit", "a non-negative", shown),
        );
    }
    // Over libp2p too: refused before a single process is started.
    refused_in(
        dir,
        &["run", "--transport", "libp2p", "--peer-timeout", "1e30"],
        &seconds_msg("--peer-timeout", "a positive", "1e30"),
    );
    // Straggler delays are durations too.
    refused_in(
        dir,
        &["run", "--straggler", "0:18446744073709551615"],
        "--straggler must be a delay of at most 31536000000 ms (one year), got 18446744073709552000",
    );
    // Zero is no timeout; one year is the documented limit, one second more is refused.
    refused_in(
        dir,
        &["run", "--timeout", "0"],
        &seconds_msg("--timeout", "a positive", "0.0"),
    );
    refused_in(
        dir,
        &["run", "--timeout", "31536001"],
        &seconds_msg("--timeout", "a positive", "31536001.0"),
    );
}

#[test]
fn a_run_spec_file_is_held_to_the_same_limits() {
    let d = tempdir();
    let dir = d.path();
    for (json, needle) in [
        (
            r#"{"net": {"timeout_s": 1e30}}"#,
            seconds_msg("--timeout", "a positive", "1e30"),
        ),
        (
            r#"{"net": {"peer_timeout_s": 1e300}}"#,
            seconds_msg("--peer-timeout", "a positive", "1e300"),
        ),
        (
            r#"{"net": {"startup_timeout_s": -5}}"#,
            seconds_msg("--startup-timeout", "a positive", "-5.0"),
        ),
        (
            r#"{"topology": {"out_degree": 2, "time_limit_s": 4e7}}"#,
            seconds_msg("--topology-time-limit", "a non-negative", "40000000.0"),
        ),
        (
            r#"{"output": {"summary": "/nonexistent-dir/x.json"}}"#,
            "cannot write --summary /nonexistent-dir/x.json: No such file or directory".into(),
        ),
    ] {
        let spec = dir.join("spec.json");
        std::fs::write(&spec, json).unwrap();
        refused_in(dir, &["run", "--spec", s(&spec)], &needle);
    }
}

#[test]
fn seconds_options_outside_a_run_are_checked_too() {
    let d = tempdir();
    let dir = d.path();
    for (v, shown) in HUGE {
        let arg = format!("--time-limit={v}");
        refused_in(
            dir,
            &["topology", "--peers", "6", "--out-degree", "2", &arg],
            &seconds_msg("--time-limit", "a positive", shown),
        );
        refused_in(
            dir,
            &[
                "cluster",
                "init",
                "--peers",
                "6",
                "--out-degree",
                "2",
                &arg,
                "-o",
                "c.toml",
            ],
            &seconds_msg("--time-limit", "a non-negative", shown),
        );
        let arg = format!("--budget-secs={v}");
        refused_in(
            dir,
            &["bench", "--scenario", "link", &arg],
            &seconds_msg("--budget-secs", "a positive", shown),
        );
    }
    assert!(listing(dir).is_empty(), "{:?}", listing(dir));
    // A hand-run node checks its own timeouts before it listens.
    let c = cluster(dir, &["--out-degree", "1"]);
    for flag in ["--peer-timeout", "--startup-timeout"] {
        for (v, shown) in HUGE {
            let arg = format!("{flag}={v}");
            refused_in(
                dir,
                &["peer", "--cluster", s(&c), "--id", "0", &arg],
                &seconds_msg(flag, "a positive", shown),
            );
        }
    }
}

#[test]
fn the_largest_staleness_bound_runs_to_completion() {
    let d = tempdir();
    for args in [
        ["--staleness", "18446744073709551615"],
        ["--consistency", "ssp:18446744073709551615"],
    ] {
        let mut all = vec!["run", "--peers", "3", "--clocks", "8", "--synthetic", TINY];
        all.extend(args);
        let o = sfb_in(d.path(), &all, Duration::from_secs(60));
        assert_eq!(o.code, Some(0), "sfb {all:?}:\n{}", o.stderr);
        assert!(
            o.stdout.contains("ssp:18446744073709551615"),
            "{}",
            o.stdout
        );
    }
}

#[test]
fn unwritable_summary_and_metrics_are_refused_before_training() {
    let d = tempdir();
    let dir = d.path();
    // Trained, these runs would take 100,000 clocks × 1 s; refused, they end at once.
    let slow = [
        "--clocks",
        "100000",
        "--straggler",
        "0:1000",
        "--synthetic",
        TINY,
    ];
    for (flag, path) in [
        ("--summary", "/nonexistent-dir/x.json"),
        ("--metrics", "/nonexistent-dir/m.jsonl"),
    ] {
        let mut args = vec!["run", flag, path];
        args.extend(slow);
        refused_in(
            dir,
            &args,
            &format!("cannot write {flag} {path}: No such file or directory"),
        );
        let mut args = vec!["run", "--transport", "libp2p", flag, path];
        args.extend(slow);
        refused_in(
            dir,
            &args,
            &format!("cannot write {flag} {path}: No such file or directory"),
        );
    }
    // A folder where a file is expected.
    let mut args = vec!["run", "--summary", s(dir)];
    args.extend(slow);
    refused_in(
        dir,
        &args,
        &format!(
            "cannot write --summary {}: it is a folder, not a file",
            s(dir)
        ),
    );
    // Hand-run nodes: checked before they listen or wait for anyone.
    let c = cluster(dir, &["--out-degree", "1"]);
    for (flag, path) in [
        ("--summary", "/nonexistent-dir/x.json"),
        ("--metrics", "/nonexistent-dir/m.jsonl"),
        ("--report", "/nonexistent-dir/r.json"),
        ("--dump-w", "/nonexistent-dir/w.bin"),
    ] {
        refused_in(
            dir,
            &["peer", "--cluster", s(&c), "--id", "1", flag, path],
            &format!("cannot write {flag} {path}: No such file or directory"),
        );
    }
    let fms_dir = dir.join("fms");
    std::fs::create_dir(&fms_dir).unwrap();
    let f = cluster(&fms_dir, &["--backend", "fms"]);
    refused_in(
        dir,
        &[
            "server",
            "--cluster",
            s(&f),
            "--summary",
            "/nonexistent-dir/x.json",
        ],
        "cannot write --summary /nonexistent-dir/x.json: No such file or directory",
    );
    // Nothing was left where the checks looked.
    assert_eq!(listing(dir), ["c-keys", "c.toml", "fms"]);
}

#[test]
fn an_output_folder_that_is_a_file_is_refused_before_any_arm() {
    let d = tempdir();
    let dir = d.path();
    let file = dir.join("taken");
    std::fs::write(&file, "not a folder").unwrap();
    let want = format!(
        "cannot write -o {}: it is an existing file, not a folder",
        s(&file)
    );
    // Each of these would train or measure for minutes before writing its folder.
    for args in [
        vec!["demo", "--transport", "mem", "-o", s(&file)],
        vec!["bench", "--scenario", "kernel", "-o", s(&file)],
        vec![
            "bench",
            "--scenario",
            "all",
            "--transport",
            "mem",
            "-o",
            s(&file),
        ],
        vec![
            "bench",
            "--scenario",
            "q-sweep",
            "--transport",
            "mem",
            "-o",
            s(&file),
        ],
        vec!["bench", "--scenario", "link", "-o", s(&file)],
    ] {
        refused_in(dir, &args, &want);
    }
    // A folder below a file.
    let below = file.join("sub");
    refused_in(
        dir,
        &[
            "bench",
            "--scenario",
            "staleness",
            "--transport",
            "mem",
            "-o",
            s(&below),
        ],
        &format!("cannot write -o {}: Not a directory", s(&below)),
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a folder");
    // `sfb topology -o` names a file: a folder there is refused before the search.
    let folder = dir.join("folder");
    std::fs::create_dir(&folder).unwrap();
    let topo = [
        "topology",
        "--peers",
        "40",
        "--out-degree",
        "3",
        "--time-limit",
        "600",
    ];
    let mut args = topo.to_vec();
    args.extend(["-o", s(&folder)]);
    refused_in(
        dir,
        &args,
        &format!("cannot write -o {}: it is a folder, not a file", s(&folder)),
    );
    let mut args = topo.to_vec();
    args.extend(["-o", "/nonexistent-dir/t.toml"]);
    refused_in(
        dir,
        &args,
        "cannot write -o /nonexistent-dir/t.toml: No such file or directory",
    );
    // `cluster init -o` likewise, before its topology search.
    refused_in(
        dir,
        &[
            "cluster",
            "init",
            "--peers",
            "40",
            "--out-degree",
            "3",
            "--time-limit",
            "600",
            "-o",
            "/nonexistent-dir/c.toml",
        ],
        "No such file or directory",
    );
    let mut names = listing(dir);
    names.sort();
    assert_eq!(names, ["folder", "taken"]);
}

#[cfg(unix)]
#[test]
fn a_private_key_others_can_read_is_refused_unless_allowed() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempdir();
    let dir = d.path();
    let c = cluster(dir, &["--out-degree", "1"]);
    let key = dir.join("c-keys").join("peer-0.key");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&key), 0o600, "cluster init writes private keys");
    assert_eq!(mode(&dir.join("c-keys")), 0o700);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = refused_in(
        dir,
        &["peer", "--cluster", s(&c), "--id", "0"],
        "private key is accessible by group or others (mode 0644)",
    );
    assert!(e.contains(s(&key)), "names the key file: {e}");
    assert!(
        e.contains("chmod 600 it, or pass --allow-open-key to use it anyway"),
        "{e}"
    );
    // With the flag the key check passes: the node goes on to its next check (here an
    // output it cannot write, so the test does not wait for a partner).
    let e = refused_in(
        dir,
        &[
            "peer",
            "--cluster",
            s(&c),
            "--id",
            "0",
            "--allow-open-key",
            "--summary",
            "/nonexistent-dir/x.json",
        ],
        "cannot write --summary /nonexistent-dir/x.json",
    );
    assert!(!e.contains("private key"), "{e}");
    // Peer 1's key is untouched, and an FMS server's key is held to the same rule.
    let fms_dir = dir.join("fms");
    std::fs::create_dir(&fms_dir).unwrap();
    let f = cluster(&fms_dir, &["--backend", "fms"]);
    let server_key = fms_dir.join("c-keys").join("peer-2.key");
    std::fs::set_permissions(&server_key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = refused_in(
        dir,
        &["server", "--cluster", s(&f)],
        "private key is accessible by group or others (mode 0640)",
    );
    assert!(e.contains(s(&server_key)), "{e}");
}

#[test]
fn cluster_init_does_not_replace_a_cluster_without_force() {
    let d = tempdir();
    let dir = d.path();
    let c = cluster(dir, &["--out-degree", "1"]);
    let key = dir.join("c-keys").join("peer-0.key");
    let (text, key_bytes) = (
        std::fs::read_to_string(&c).unwrap(),
        std::fs::read(&key).unwrap(),
    );
    let again = [
        "cluster",
        "init",
        "--peers",
        "3",
        "--out-degree",
        "2",
        "--base-port",
        "0",
        "-o",
        s(&c),
    ];
    let e = refused_in(
        dir,
        &again,
        &format!("{} already exists: pass --force to replace", s(&c)),
    );
    assert!(e.contains("c-keys"), "names the keys: {e}");
    assert_eq!(std::fs::read_to_string(&c).unwrap(), text, "file untouched");
    assert_eq!(std::fs::read(&key).unwrap(), key_bytes, "keys untouched");
    // Keys without their file are still somebody's keys.
    std::fs::remove_file(&c).unwrap();
    refused_in(
        dir,
        &again,
        &format!("{} already exists: pass --force", s(&dir.join("c-keys"))),
    );
    assert_eq!(listing(dir), ["c-keys"]);
    let mut forced = again.to_vec();
    forced.push("--force");
    let o = sfb_in(dir, &forced, Duration::from_secs(60));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stdout.contains("3 peers"), "{}", o.stdout);
    assert_ne!(std::fs::read(&key).unwrap(), key_bytes, "fresh keys");
    assert_eq!(
        listing(dir),
        ["c-keys", "c.toml"],
        "no temporary files left"
    );
    assert_eq!(listing(&dir.join("c-keys")).len(), 3);
}

#[test]
fn a_failed_cluster_init_leaves_no_half_written_files() {
    let d = tempdir();
    let dir = d.path();
    // The ports run out at the second peer, after the first key was made.
    refused_in(
        dir,
        &[
            "cluster",
            "init",
            "--peers",
            "3",
            "--out-degree",
            "2",
            "--base-port",
            "65535",
            "-o",
            "c.toml",
        ],
        "ports run past 65535",
    );
    assert!(listing(dir).is_empty(), "{:?}", listing(dir));
    // A failed --force leaves the old cluster as it was.
    let c = cluster(dir, &["--out-degree", "1"]);
    let text = std::fs::read_to_string(&c).unwrap();
    refused_in(
        dir,
        &[
            "cluster",
            "init",
            "--peers",
            "3",
            "--out-degree",
            "2",
            "--base-port",
            "65535",
            "--force",
            "-o",
            s(&c),
        ],
        "ports run past 65535",
    );
    assert_eq!(std::fs::read_to_string(&c).unwrap(), text);
    assert_eq!(listing(dir), ["c-keys", "c.toml"]);
}

#[test]
fn refusals_are_quick() {
    // The whole point of checking first: a refusal costs well under a second of work,
    // however long the run it refuses would have been.
    let d = tempdir();
    let o = sfb_in(
        d.path(),
        &[
            "run",
            "--clocks",
            "100000",
            "--straggler",
            "0:1000",
            "--summary",
            "/nonexistent-dir/x.json",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(o.took < Duration::from_secs(20), "took {:?}", o.took);
}
