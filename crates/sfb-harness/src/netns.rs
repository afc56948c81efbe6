//! Network namespaces for `sfb run --netns`: every node in its own network namespace, joined by veth links to
//! one bridge, each node's sends shaped by the kernel (`tc tbf`) instead of by the
//! built-in token bucket. Needs root and iproute2 (`ip`, `tc`); [`available`] says whether
//! this machine can, and why not.
//!
//! Layout for a run of process `PID` with `N` nodes:
//! ```text
//!  namespace sfb-PID-i   (node i):  lo, eth0 = 10.77.x.y/16, root qdisc tbf on eth0
//!        │ veth
//!  namespace sfb-PID-sw  (switch):  n0 … n(N−1) ── bridge br0
//! ```
//! The bridge lives in a namespace of its own rather than the root one, so the host's
//! firewall never sees the bridged traffic (with `br_netfilter` loaded, a host whose
//! FORWARD policy is DROP, as Docker sets it, would drop it), no device of the run appears
//! in the host's namespace, and removing the namespaces removes everything.
//!
//! Shaping `eth0` inside a node's namespace limits what the node sends (the traffic the
//! token bucket limits); what it receives is shaped by the senders' qdiscs. Everything is
//! removed on drop, on error and panic paths too; a run killed outright leaves its
//! namespaces behind, and the next [`Netns::setup`] (or [`cleanup_stale`]) removes those
//! of processes that no longer exist.

use std::process::Command;
use std::sync::{Mutex, MutexGuard, TryLockError};

use sfb_net::bandwidth::Rate;

/// Errors of the namespace setup.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// This machine cannot (see [`available`]).
    #[error("--netns is not available here: {0}")]
    Unavailable(String),
    /// Too many or no nodes.
    #[error("--netns supports 1..65000 nodes, got {0}")]
    Nodes(usize),
    /// The rate is below 8 bit/s (or not finite).
    #[error("--netns needs a rate of at least 8 bit/s")]
    Rate,
    /// Another [`Netns`] of this process is alive.
    #[error("this process already has network namespaces set up (one at a time)")]
    Busy,
    /// A program could not be started.
    #[error("running `{prog}`: {source}")]
    Spawn {
        /// The program.
        prog: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A command failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its standard error.
        stderr: String,
    },
    /// Building the layout failed (what was built is removed again).
    #[error("setting up network namespaces: {0}")]
    Setup(#[source] Box<Error>),
    /// `tc -s qdisc show` printed no tbf counters.
    #[error("no tbf counters in `tc -s qdisc show`: {0:?}")]
    NoQdiscStats(String),
    /// A namespace's `/proc/net/snmp` lacks `Tcp RetransSegs`.
    #[error("no Tcp RetransSegs in {0}'s /proc/net/snmp")]
    NoRetransmits(String),
}

/// Result alias of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One [`Netns`] per process at a time: the names carry only the process id.
static LIVE: Mutex<()> = Mutex::new(());

/// How long a packet may wait in a tbf queue before it is dropped; sets the queue's
/// length (`rate × latency + burst`). Long enough that a TCP socket's queued bytes (up to
/// `tcp_limit_output_bytes`) rarely overflow it at the rates benchmarks use.
pub const TBF_LATENCY_MS: u32 = 100;

/// The smallest tbf burst: two full Ethernet frames, so one MTU-sized packet always fits.
const MIN_BURST: usize = 2 * 1514;

/// Per-node network namespaces joined by a bridge, each node's sends shaped by tbf;
/// removed on drop.
#[derive(Debug)]
pub struct Netns {
    names: Names,
    nodes: usize,
    rate: Rate,
    burst: usize,
    _live: MutexGuard<'static, ()>,
}

/// A tbf qdisc's counters (`tc -s qdisc show`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QdiscStats {
    /// Bytes sent through the qdisc, link-layer headers included.
    pub bytes: u64,
    /// Packets sent (a GSO packet counts once).
    pub packets: u64,
    /// Packets dropped because the queue was full.
    pub dropped: u64,
    /// Times a packet had to wait for tokens.
    pub overlimits: u64,
}

impl Netns {
    /// Creates the bridge, `nodes` namespaces with a veth link each, and a tbf qdisc of
    /// `rate` and `burst` bytes (at least two full frames) on every node's side of its
    /// link. Removes leftovers of dead runs first.
    ///
    /// # Errors
    /// If [`available`] fails, another `Netns` of this process is alive, there are more
    /// nodes than the /16 has addresses, or an `ip`/`tc` command fails (the message names it); what was
    /// created is removed again.
    pub fn setup(nodes: usize, rate: Rate, burst: usize) -> Result<Self> {
        available().map_err(Error::Unavailable)?;
        if nodes == 0 || nodes > 65_000 {
            return Err(Error::Nodes(nodes));
        }
        tbf_bits(rate)?;
        let live = match LIVE.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Err(Error::Busy),
        };
        cleanup_stale();
        let n = Self {
            names: Names {
                pid: std::process::id(),
            },
            nodes,
            rate,
            burst: burst.max(MIN_BURST),
            _live: live,
        };
        // A half-built layout is removed by drop when `?` returns early.
        n.build().map_err(|e| Error::Setup(Box::new(e)))?;
        Ok(n)
    }

    fn build(&self) -> Result<()> {
        let sw = self.names.switch();
        run("ip", &["netns", "add", &sw])?;
        run("ip", &["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        run("ip", &["-n", &sw, "link", "set", "br0", "up"])?;
        for i in 0..self.nodes {
            let ns = self.names.netns(i);
            let port = format!("n{i}");
            run("ip", &["netns", "add", &ns])?;
            run(
                "ip",
                &[
                    "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                    "netns", &ns,
                ],
            )?;
            run(
                "ip",
                &["-n", &sw, "link", "set", &port, "master", "br0", "up"],
            )?;
            run(
                "ip",
                &[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("{}/16", self.addr(i)),
                    "dev",
                    "eth0",
                ],
            )?;
            run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            run("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
            tbf(&ns, "add", self.rate, self.burst)?;
        }
        Ok(())
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Node `i`'s namespace.
    pub fn name(&self, i: usize) -> String {
        self.names.netns(i)
    }

    /// Node `i`'s IPv4 address (inside its namespace; the nodes share one /16).
    pub fn addr(&self, i: usize) -> String {
        self.names.addr(i)
    }

    /// The command prefix that runs a program in node `i`'s namespace.
    pub fn exec_prefix(&self, i: usize) -> Vec<String> {
        self.names.exec_prefix(i)
    }

    /// The counters of node `i`'s tbf qdisc.
    ///
    /// # Errors
    /// If `tc` fails or prints no counters.
    pub fn stats(&self, i: usize) -> Result<QdiscStats> {
        let out = output(
            "tc",
            &["-n", &self.name(i), "-s", "qdisc", "show", "dev", "eth0"],
        )?;
        parse_qdisc_stats(&out).ok_or(Error::NoQdiscStats(out))
    }

    /// The qdisc changes that make `slow`'s nodes `factor` times slower over their
    /// windows, and their rate whole again after, in the order they are due: each a
    /// `tc qdisc change` of the node's tbf at a time since the nodes' first step.
    /// Windows of one node may overlap: a node's rate is its base rate over the product
    /// of the factors of the windows that hold at that moment.
    pub fn rate_changes(&self, slow: &[crate::sim::Slowdown]) -> Vec<RateChange> {
        schedule(self.names, self.nodes, (self.rate, self.burst), slow)
    }

    /// TCP segments node `i` retransmitted (`RetransSegs` of its `/proc/net/snmp`).
    ///
    /// # Errors
    /// If the file cannot be read in the namespace or lacks the counter.
    pub fn tcp_retransmits(&self, i: usize) -> Result<u64> {
        let mut argv = self.exec_prefix(i);
        argv.extend(["cat".into(), "/proc/net/snmp".into()]);
        let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
        let out = output(&argv[0], &args)?;
        snmp_counter(&out, "Tcp", "RetransSegs").ok_or_else(|| Error::NoRetransmits(self.name(i)))
    }
}

/// [`Netns::rate_changes`] of the layout `names` of `nodes` at `rate` and `burst`.
fn schedule(
    names: Names,
    nodes: usize,
    (rate, burst): (Rate, usize),
    slow: &[crate::sim::Slowdown],
) -> Vec<RateChange> {
    let mut due: Vec<(f64, usize)> = slow
        .iter()
        .flat_map(|w| {
            w.peers
                .iter()
                .flat_map(|&i| [(w.from_s, i), (w.until_s, i)])
        })
        .filter(|&(_, i)| i < nodes)
        .collect();
    due.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    due.dedup();
    due.into_iter()
        .map(|(at_s, i)| {
            let factor: f64 = slow
                .iter()
                .filter(|w| w.peers.contains(&i) && w.from_s <= at_s && at_s < w.until_s)
                .map(|w| w.factor)
                .product();
            RateChange {
                at_s,
                node: i,
                netns: names.netns(i),
                rate: Rate(rate.0 / factor),
                burst,
            }
        })
        .collect()
}

/// One change of a node's tbf rate at a moment of the run ([`Netns::rate_changes`]): a
/// link that gets slower (congestion, a shared uplink) and recovers, under the running
/// nodes, who see only what their sends take.
#[derive(Debug, Clone, PartialEq)]
pub struct RateChange {
    /// When, seconds since the nodes' first step.
    pub at_s: f64,
    /// The node.
    pub node: usize,
    /// Its namespace.
    pub netns: String,
    /// Its rate from then on.
    pub rate: Rate,
    /// Its burst, bytes (unchanged).
    pub burst: usize,
}

impl RateChange {
    /// Changes the node's tbf qdisc to [`rate`](Self::rate) (`tc qdisc change`), its
    /// burst and queue as they were set up.
    ///
    /// # Errors
    /// If `tc` fails (the namespace is gone, or the rate is below 8 bit/s).
    pub fn apply(&self) -> Result<()> {
        tbf(&self.netns, "change", self.rate, self.burst)
    }
}

/// `rate` in whole bits per second, as tbf takes it: at least 8.
fn tbf_bits(rate: Rate) -> Result<u64> {
    let bits = (rate.0 * 8.0).round();
    if bits.is_finite() && bits >= 8.0 {
        Ok(bits as u64)
    } else {
        Err(Error::Rate)
    }
}

/// `tc qdisc OP` (`add` or `change`) of the tbf on `eth0` in namespace `ns`: `rate`,
/// `burst` bytes, a queue of [`TBF_LATENCY_MS`].
fn tbf(ns: &str, op: &str, rate: Rate, burst: usize) -> Result<()> {
    let rate = format!("{}bit", tbf_bits(rate)?);
    let burst = burst.to_string();
    let latency = format!("{TBF_LATENCY_MS}ms");
    run(
        "tc",
        &[
            "-n", ns, "qdisc", op, "dev", "eth0", "root", "tbf", "rate", &rate, "burst", &burst,
            "latency", &latency,
        ],
    )
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The switch first: deleting it deletes the bridge and every veth pair at once, even
        // while a process still runs in a node's namespace. Missing namespaces are fine.
        let _ = quiet("ip", &["netns", "del", &self.names.switch()]);
        for i in 0..self.nodes {
            let _ = quiet("ip", &["netns", "del", &self.names.netns(i)]);
        }
    }
}

/// The names and addresses of one process's layout.
#[derive(Debug, Clone, Copy)]
struct Names {
    pid: u32,
}

impl Names {
    fn netns(self, i: usize) -> String {
        format!("sfb-{}-{i}", self.pid)
    }

    fn switch(self) -> String {
        format!("sfb-{}-sw", self.pid)
    }

    fn addr(self, i: usize) -> String {
        let k = i + 1;
        format!("10.77.{}.{}", k >> 8, k & 255)
    }

    fn exec_prefix(self, i: usize) -> Vec<String> {
        ["ip", "netns", "exec"]
            .into_iter()
            .map(String::from)
            .chain([self.netns(i)])
            .collect()
    }
}

/// Whether `--netns` can run here: root, `ip` and `tc` present, and a namespace with a
/// bridge, a veth pair and a tbf qdisc can be created and removed.
///
/// # Errors
/// Why not, in words.
pub fn available() -> std::result::Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status ({e})"))?;
    match effective_uid(&status) {
        Some(0) => {}
        Some(uid) => return Err(format!("not running as root (effective uid {uid})")),
        None => return Err("cannot tell the effective uid from /proc/self/status".into()),
    }
    for (tool, arg) in [("ip", "-V"), ("tc", "-V")] {
        match Command::new(tool).arg(arg).output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => return Err(format!("`{tool} {arg}` failed ({})", o.status)),
            Err(e) => return Err(format!("`{tool}` (iproute2) not usable: {e}")),
        }
    }
    let ns = format!("sfb-probe-{}", std::process::id());
    let _ = quiet("ip", &["netns", "del", &ns]);
    let probe = || -> Result<()> {
        run("ip", &["netns", "add", &ns])?;
        run("ip", &["-n", &ns, "link", "add", "b0", "type", "bridge"])?;
        run(
            "ip",
            &[
                "-n", &ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
            ],
        )?;
        run(
            "tc",
            &[
                "-n", &ns, "qdisc", "add", "dev", "v0", "root", "tbf", "rate", "1mbit", "burst",
                "32kb", "latency", "10ms",
            ],
        )?;
        Ok(())
    };
    let r = probe();
    let _ = quiet("ip", &["netns", "del", &ns]);
    r.map_err(|e| e.to_string())
}

/// Removes the namespaces of this naming scheme whose process is gone (or is this
/// process: only one [`Netns`] lives at a time, and it calls this first).
pub fn cleanup_stale() {
    let me = std::process::id();
    let dead = |pid: u32| pid == me || !std::path::Path::new(&format!("/proc/{pid}")).exists();
    if let Ok(list) = output("ip", &["netns", "list"]) {
        // Switches first, as in drop.
        let mut stale: Vec<&str> = list
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|name| owner(name).is_some_and(dead))
            .collect();
        stale.sort_by_key(|name| !name.ends_with("-sw"));
        for name in stale {
            let _ = quiet("ip", &["netns", "del", name]);
        }
    }
}

/// The process that owns a namespace of this scheme (`sfb-PID-I` or `sfb-PID-sw`); `None`
/// for other names.
fn owner(name: &str) -> Option<u32> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (pid, what) = name.strip_prefix("sfb-")?.split_once('-')?;
    if digits(pid) && (digits(what) || what == "sw") {
        pid.parse().ok()
    } else {
        None
    }
}

/// The effective uid from `/proc/self/status` (`Uid:` real, effective, saved, fs).
fn effective_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Counter `name` of protocol `proto` in `/proc/net/snmp` (a header line of names, then a
/// line of values, both starting `proto:`).
fn snmp_counter(snmp: &str, proto: &str, name: &str) -> Option<u64> {
    let prefix = format!("{proto}:");
    let mut lines = snmp.lines().filter(|l| l.starts_with(&prefix));
    let (names, values) = (lines.next()?, lines.next()?);
    let i = names.split_whitespace().position(|w| w == name)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// The counters of the first qdisc in `tc -s qdisc show` output:
/// ` Sent 109637796 bytes 72426 pkt (dropped 0, overlimits 4815 requeues 0)`.
fn parse_qdisc_stats(out: &str) -> Option<QdiscStats> {
    let line = out.lines().find_map(|l| l.trim().strip_prefix("Sent "))?;
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .filter(|w| !w.is_empty())
        .collect();
    let after = |key: &str| -> Option<u64> {
        let i = words.iter().position(|w| *w == key)?;
        words.get(i + 1)?.parse().ok()
    };
    let before = |key: &str| -> Option<u64> {
        let i = words.iter().position(|w| *w == key)?;
        words.get(i.checked_sub(1)?)?.parse().ok()
    };
    Some(QdiscStats {
        bytes: words.first()?.parse().ok()?,
        packets: before("pkt")?,
        dropped: after("dropped")?,
        overlimits: after("overlimits")?,
    })
}

/// Runs `prog args`, failing with its stderr.
fn run(prog: &str, args: &[&str]) -> Result<()> {
    output(prog, args).map(drop)
}

/// Runs `prog args` and returns its stdout, failing with its stderr.
fn output(prog: &str, args: &[&str]) -> Result<String> {
    let o = Command::new(prog)
        .args(args)
        .output()
        .map_err(|source| Error::Spawn {
            prog: prog.into(),
            source,
        })?;
    if !o.status.success() {
        return Err(Error::Command {
            command: format!("{prog} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&o.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Runs `prog args`, discarding its output (clean-up, where failure is expected).
fn quiet(prog: &str, args: &[&str]) -> std::io::Result<std::process::ExitStatus> {
    Command::new(prog)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slowdown_is_two_changes_per_node_and_overlaps_multiply() {
        use crate::sim::Slowdown;
        let names = Names { pid: 7 };
        let slow = [
            Slowdown {
                peers: vec![0, 1],
                from_s: 1.0,
                until_s: 3.0,
                factor: 4.0,
            },
            Slowdown {
                peers: vec![1],
                from_s: 2.0,
                until_s: 4.0,
                factor: 2.0,
            },
            // A node the layout does not have: nothing to change.
            Slowdown {
                peers: vec![5],
                from_s: 0.5,
                until_s: 1.0,
                factor: 3.0,
            },
        ];
        let got: Vec<(f64, usize, f64)> = schedule(names, 2, (Rate(1000.0), 4096), &slow)
            .into_iter()
            .map(|c| {
                assert_eq!(c.netns, names.netns(c.node));
                assert_eq!(c.burst, 4096);
                (c.at_s, c.node, c.rate.0)
            })
            .collect();
        assert_eq!(
            got,
            [
                (1.0, 0, 250.0),
                (1.0, 1, 250.0),
                (2.0, 1, 125.0),
                (3.0, 0, 1000.0),
                (3.0, 1, 500.0),
                (4.0, 1, 1000.0),
            ]
        );
    }

    #[test]
    fn names_of_the_scheme_and_their_owner() {
        assert_eq!(owner("sfb-1234-0"), Some(1234));
        assert_eq!(owner("sfb-1234-17"), Some(1234));
        assert_eq!(owner("sfb-4194304-sw"), Some(4_194_304));
        for other in [
            "sfb-probe-12",
            "sfb-12",
            "sfb-12-",
            "sfb-x-1",
            "sfb-12-swx",
            "sfb-12-3-4",
            "sfbbr12",
            "eth0",
            "sfb-run-1-2",
        ] {
            assert_eq!(owner(other), None, "{other}");
        }
    }

    #[test]
    fn effective_uid_is_the_second_uid() {
        let s = "Name:\tsfb\nUid:\t1000\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
        assert_eq!(effective_uid(s), Some(0));
        assert_eq!(effective_uid("Uid:\t0\t1000\t0\t0\n"), Some(1000));
        assert_eq!(effective_uid("Name: x\n"), None);
    }

    #[test]
    fn qdisc_counters_parse() {
        let out = "qdisc tbf 8001: root refcnt 3 rate 200Mbit burst 262125b lat 100ms \n \
                   Sent 109637796 bytes 72426 pkt (dropped 3, overlimits 4815 requeues 0) \n \
                   backlog 0b 0p requeues 0\n";
        assert_eq!(
            parse_qdisc_stats(out),
            Some(QdiscStats {
                bytes: 109_637_796,
                packets: 72_426,
                dropped: 3,
                overlimits: 4815,
            })
        );
        assert_eq!(parse_qdisc_stats("qdisc noqueue 0: root\n"), None);
    }

    #[test]
    fn snmp_counters_parse() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 2 64\n\
                    Tcp: RtoAlgorithm RtoMin ActiveOpens RetransSegs InErrs\n\
                    Tcp: 1 200 6 17 0\n\
                    Udp: InDatagrams\nUdp: 3\n";
        assert_eq!(snmp_counter(snmp, "Tcp", "RetransSegs"), Some(17));
        assert_eq!(snmp_counter(snmp, "Ip", "DefaultTTL"), Some(64));
        assert_eq!(snmp_counter(snmp, "Tcp", "Nope"), None);
        assert_eq!(snmp_counter(snmp, "Icmp", "InMsgs"), None);
    }

    #[test]
    fn addresses_are_distinct_and_names_are_owned() {
        let n = Names { pid: 4_194_304 }; // the largest Linux pid
        let addrs: std::collections::BTreeSet<String> = (0..300).map(|i| n.addr(i)).collect();
        assert_eq!(addrs.len(), 300);
        assert_eq!(n.addr(0), "10.77.0.1");
        assert_eq!(n.addr(255), "10.77.1.0");
        for name in [n.netns(7), n.switch()] {
            assert_eq!(owner(&name), Some(n.pid), "{name}");
        }
        assert_eq!(
            n.exec_prefix(2),
            ["ip", "netns", "exec", "sfb-4194304-2"].map(String::from)
        );
    }

    /// Without root (or iproute2), setup refuses with the reason and builds nothing.
    #[test]
    fn setup_refuses_with_the_reason_where_unavailable() {
        let Err(why) = available() else {
            eprintln!("skipped: netns is available here (see the root-only test)");
            return;
        };
        match Netns::setup(2, Rate(10e6), 64 * 1024) {
            Err(Error::Unavailable(w)) => assert_eq!(w, why),
            other => panic!("setup without netns support: {other:?}"),
        }
        assert!(matches!(
            Netns::setup(0, Rate(1.0), 0),
            Err(Error::Unavailable(_))
        ));
    }

    /// As root: a layout is really built, shapes, and is gone after a panic unwinds
    /// through its owner.
    #[test]
    #[ignore = "needs root and iproute2 (run with --ignored as root)"]
    fn setup_builds_and_drop_removes_even_on_panic() {
        available().expect("this test needs root and iproute2");
        let names = Names {
            pid: std::process::id(),
        };
        let r = std::panic::catch_unwind(|| {
            let n = Netns::setup(2, Rate(10e6), 64 * 1024).expect("setup");
            let list = output("ip", &["netns", "list"]).unwrap();
            for name in [n.name(0), n.name(1), names.switch()] {
                assert!(list.contains(&name), "{name} missing: {list}");
            }
            assert_eq!(n.stats(1).unwrap().dropped, 0);
            assert_eq!(n.tcp_retransmits(0).unwrap(), 0);
            panic!("on purpose");
        });
        assert!(r.is_err());
        let list = output("ip", &["netns", "list"]).unwrap();
        for l in list.lines() {
            let name = l.split_whitespace().next().unwrap_or("");
            assert_ne!(owner(name), Some(names.pid), "{name} left");
        }
    }
}
