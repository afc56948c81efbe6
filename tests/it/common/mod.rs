//! Helpers shared by the root integration tests that drive real `sfb` processes
//! (`hand_run`, `flood`, `p2p_processes`, `exits`): temporary directories, a guard that
//! kills its children by PID, `sfb cluster init`, and starting hand-run nodes that
//! exchange their addresses (`--base-port 0 … --exchange-addrs`). Every wait is under a
//! timeout.

// Each test binary compiles this module on its own and uses a subset of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const SFB: &str = env!("CARGO_BIN_EXE_sfb");

/// A fresh, empty `CARGO_TARGET_TMPDIR/<group>/<name>`.
pub fn tempdir(group: &str, name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(group);
    // One directory per test process, so that two runs of a test at once (a stress run)
    // do not share files; those of processes that are gone are removed.
    if let Ok(entries) = std::fs::read_dir(&root) {
        for e in entries.flatten() {
            let file = e.file_name();
            let Some((base, pid)) = file.to_str().and_then(|f| f.rsplit_once('.')) else {
                continue;
            };
            if base == name && !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let d = root.join(format!("{name}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Children killed (by PID, through `Child::kill`) when the guard drops: on panic too.
pub struct Children(pub Vec<(String, Child)>);

impl Drop for Children {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Children {
    /// Waits for every child under one deadline; panics (the guard kills the rest) if one
    /// fails or the deadline passes. Returns each child's stderr.
    pub fn wait_all(&mut self, limit: Duration) -> Vec<String> {
        let start = Instant::now();
        let mut errs = vec![None; self.0.len()];
        while errs.iter().any(Option::is_none) {
            for (k, (name, c)) in self.0.iter_mut().enumerate() {
                if errs[k].is_some() {
                    continue;
                }
                if let Some(s) = c.try_wait().unwrap() {
                    let err = stderr_of(c);
                    assert!(s.success(), "{name} failed ({s}):\n{err}");
                    errs[k] = Some(err);
                }
            }
            assert!(
                start.elapsed() < limit,
                "the cluster did not finish within {limit:?}"
            );
            // Polling exit statuses; std has no wait-with-timeout.
            std::thread::sleep(Duration::from_millis(20));
        }
        errs.into_iter().map(Option::unwrap).collect()
    }

    /// Waits for child `k` to exit within `limit`; returns its status and stderr, or
    /// `None` if it is still running then (the guard kills it).
    pub fn try_wait_one(&mut self, k: usize, limit: Duration) -> Option<(ExitStatus, String)> {
        let c = &mut self.0[k].1;
        let s = wait_timeout(c, limit)?;
        Some((s, stderr_of(c)))
    }

    /// Waits for child `k` to exit within `limit` (panics otherwise; the guard kills it);
    /// returns its status and stderr.
    pub fn wait_one(&mut self, k: usize, limit: Duration) -> (ExitStatus, String) {
        self.try_wait_one(k, limit)
            .unwrap_or_else(|| panic!("{} still running after {limit:?}", self.0[k].0))
    }

    pub fn kill(&mut self, k: usize) {
        let c = &mut self.0[k].1;
        c.kill().unwrap();
        c.wait().unwrap();
    }

    pub fn pids(&self) -> Vec<u32> {
        self.0.iter().map(|(_, c)| c.id()).collect()
    }
}

/// Waits for `c` to exit within `limit`: its status, or `None` if it is still running
/// then (it is left running).
pub fn wait_timeout(c: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return Some(s);
        }
        if start.elapsed() >= limit {
            return None;
        }
        // Polling an exit status; std has no wait-with-timeout.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Everything left on a child's (piped) stderr.
pub fn stderr_of(c: &mut Child) -> String {
    let mut err = String::new();
    std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err).unwrap();
    err
}

/// Whether `pid` is a live process (a zombie counts as gone).
pub fn running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .next();
    !matches!(state, None | Some("Z" | "X"))
}

/// No process with one of these PIDs is left running.
pub fn assert_gone(pids: &[u32]) {
    for &pid in pids {
        assert!(!running(pid), "child {pid} is still running");
    }
}

/// Sends `sig` (`TERM`, `KILL`, `STOP`, `CONT`, …) to process `pid` (by PID, never by name).
pub fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig} {pid}");
}

/// `sfb run` BSP, 4 peers, 120 clocks of MLR on the built-in synthetic data (20 classes,
/// K = 16), seed 3, plus `extra`; its summary (`DIR/NAME.json`).
pub fn short_bsp_run(dir: &Path, name: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "run",
        "--consistency",
        "bsp",
        "--clocks",
        "120",
        "--seed",
        "3",
    ];
    args.extend_from_slice(extra);
    run_summary(&args, &dir.join(format!("{name}.json")))
}

/// `sfb run <args>`, which must fail; its standard error.
pub fn refused(args: &[&str]) -> String {
    let out = Command::new(SFB).arg("run").args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `v[key]` as a number (panics, naming it, if there is none).
pub fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {key} in {v}"))
}

/// `sfb <args> --summary <summary>` to success; the summary's JSON.
pub fn run_summary(args: &[&str], summary: &Path) -> Value {
    let out = Command::new(SFB)
        .args(args)
        .arg("--summary")
        .arg(summary)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sfb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap()
}

/// `sfb <args>` to success; its stdout.
pub fn sfb_ok(args: &[&str]) -> Vec<u8> {
    let out = Command::new(SFB).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "sfb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `sfb topology <args> -o DIR/NAME`; returns the file.
pub fn topology_file(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let path = dir.join(name);
    sfb_ok(&[&["topology"], args, &["-o", path.to_str().unwrap()]].concat());
    path
}

/// The out-lists of a topology file (`sfb topology -i FILE --format json`'s `out`).
pub fn out_lists(path: &Path) -> Value {
    let json = sfb_ok(&["topology", "--format", "json", "-i", path.to_str().unwrap()]);
    serde_json::from_slice::<Value>(&json).unwrap()["out"].clone()
}

/// `sfb cluster init --base-port 0 <args> -o DIR/cluster.toml`; returns the file.
pub fn init(dir: &Path, args: &[&str]) -> PathBuf {
    let cluster = dir.join("cluster.toml");
    let out = Command::new(SFB)
        .args(["cluster", "init", "--base-port", "0"])
        .args(args)
        .arg("-o")
        .arg(&cluster)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cluster init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster
}

/// A started cluster: the guard, each node's listen address, and its stdout lines
/// (`(node, line)`: the `{"record":{…}}` lines of each clock).
pub struct Started {
    pub children: Children,
    pub addrs: Vec<String>,
    pub lines: mpsc::Receiver<(usize, String)>,
    /// The nodes' stdin after [`Started::exchange`], open as long as this lives. (A
    /// hand-run node reads its one line and no more; only a node started by the launcher
    /// takes a closed stdin for its launcher gone.)
    pub stdins: Vec<ChildStdin>,
}

/// Starts `sfb <role…> --cluster FILE --exchange-addrs` for every node (`(name, role and
/// options)`), waits until each says where it listens, and returns before handing them
/// the addresses ([`Started::exchange`]).
pub fn start(cluster: &Path, nodes: &[(String, Vec<String>)]) -> Started {
    start_exe(Path::new(SFB), cluster, nodes)
}

/// [`start`] with another program than `sfb` (one built on `sfb::app::App`).
pub fn start_exe(exe: &Path, cluster: &Path, nodes: &[(String, Vec<String>)]) -> Started {
    let (tx, rx) = mpsc::channel();
    let mut children = Children(Vec::new());
    for (k, (name, args)) in nodes.iter().enumerate() {
        let mut c = Command::new(exe)
            .args(args)
            .arg("--cluster")
            .arg(cluster)
            .arg("--exchange-addrs")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(c.stdout.take().unwrap());
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send((k, line));
            }
        });
        children.0.push((name.clone(), c));
    }
    let mut addrs = vec![None; nodes.len()];
    let deadline = Instant::now() + Duration::from_secs(60);
    while addrs.iter().any(Option::is_none) {
        let (k, line) = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(got) => got,
            Err(_) => {
                // A node that exits before saying where it listens (e.g. refused its
                // options) is reported at once, with its stderr, not after the timeout.
                for (k, (name, c)) in children.0.iter_mut().enumerate() {
                    if addrs[k].is_none()
                        && let Ok(Some(status)) = c.try_wait()
                    {
                        let err = stderr_of(c);
                        panic!("{name} exited ({status}) before saying where it listens:\n{err}");
                    }
                }
                assert!(
                    Instant::now() < deadline,
                    "every node says where it listens within 60 s"
                );
                continue;
            }
        };
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        if let Some(a) = v["listening"].as_str() {
            addrs[k] = Some(a.to_string());
        }
    }
    Started {
        children,
        addrs: addrs.into_iter().map(Option::unwrap).collect(),
        lines: rx,
        stdins: Vec::new(),
    }
}

impl Started {
    /// Hands every node the addresses (keeping their stdin open): the run begins.
    pub fn exchange(&mut self) {
        let line = serde_json::json!({ "addrs": self.addrs }).to_string();
        for (_, c) in &mut self.children.0 {
            let mut stdin = c.stdin.take().unwrap();
            writeln!(stdin, "{line}").unwrap();
            stdin.flush().unwrap();
            self.stdins.push(stdin);
        }
    }

    /// Waits until node `k` reports clock `clock` (60 s at most for each line).
    pub fn wait_clock(&self, k: usize, clock: u64) {
        loop {
            let (i, line) = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("node {k} did not reach clock {clock} within 60 s"));
            // A node's record of each clock: `{"record":{"peer":…,"clock":N,…}}`.
            let at = serde_json::from_str::<Value>(&line)
                .ok()
                .and_then(|v| v["record"]["clock"].as_u64());
            if i == k && at == Some(clock) {
                return;
            }
        }
    }

    /// The TCP address node `k` listens on.
    pub fn socket_addr(&self, k: usize) -> SocketAddr {
        tcp_of(&self.addrs[k])
    }
}

/// `/ip4/A/tcp/P[/p2p/…]` → `A:P`.
pub fn tcp_of(multiaddr: &str) -> SocketAddr {
    let parts: Vec<&str> = multiaddr.split('/').collect();
    assert!(
        parts.len() >= 5 && parts[1] == "ip4" && parts[3] == "tcp",
        "{multiaddr}"
    );
    format!("{}:{}", parts[2], parts[4]).parse().unwrap()
}

/// PIDs of the live children of `parent` (from /proc).
pub fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // "pid (comm) state ppid …": the fields after the last ')'.
        let rest: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if rest.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// PIDs of processes whose command line mentions `path` (the launcher passes its
/// temporary directory to every node): to check that none is left, never to signal.
pub fn processes_mentioning(path: &Path) -> Vec<u32> {
    let needle = path.to_string_lossy().into_owned();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(&needle) {
            out.push(pid);
        }
    }
    out
}
