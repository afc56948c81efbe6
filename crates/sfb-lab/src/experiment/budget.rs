//! `budget-check`: the built-in bandwidth budget (a token bucket on each node's sends)
//! against the kernel's (`tc tbf` on each node's veth link, every node in its own network
//! namespace), for SFB full broadcast and FMS. Needs root and iproute2, which the caller
//! checks.

use std::fmt::Write as _;

use sfb_net::bandwidth::Rate;

use super::{
    Arm, ArmReport, Report, Result, Runner, clock_times, human_bytes, median, mlr, run_arms,
    slow_clocks,
};
use sfb_harness::{Backend, Transport};

/// The scenario's name.
pub const BUDGET_CHECK: &str = "budget-check";

/// The arms, in run order: (name, backend, shaped by the kernel).
const ARMS: [(&str, Backend, bool); 4] = [
    ("SFB full, token bucket", Backend::Sfb, false),
    ("SFB full, tbf", Backend::Sfb, true),
    ("FMS, token bucket", Backend::Fms, false),
    ("FMS, tbf", Backend::Fms, true),
];

/// `budget-check`'s options.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetCheck {
    /// Peers P (default 4).
    pub peers: Option<usize>,
    /// J = D (default 1024).
    pub size: Option<usize>,
    /// Clocks per arm (default 30).
    pub clocks: Option<u64>,
    /// Target at this fraction of the reference arm's clocks (default 0.5).
    pub target_frac: Option<f64>,
    /// The rate of both shapers, per node. `200mbit` keeps both backends link-bound at
    /// the default size (J = D = 1024, P = 4: an SFB peer sends 384 KiB per clock, 16 ms
    /// at 200 Mbit/s against ~4 ms at 1 Gbit/s, where its compute dominates; the FMS
    /// server 16 MiB, 670 ms), so the check compares the two shapers rather than the CPU.
    pub rate: Rate,
    /// The burst of both shapers, bytes.
    pub burst: usize,
    /// tbf's queue length in milliseconds (for the notes).
    pub tbf_latency_ms: u32,
}

/// Runs `budget-check`: the token bucket and tbf arms of SFB full broadcast and FMS over
/// libp2p, their clock times compared per backend.
///
/// # Errors
/// [`super::Error::Option`] for fewer than 2 peers, then the first arm that fails.
pub fn budget_check(o: &BudgetCheck, runner: &Runner) -> Result<Report> {
    let p = o.peers.unwrap_or(4);
    if p < 2 {
        return Err(super::Error::Option {
            option: "peers",
            expected: "at least 2",
            got: p.to_string(),
        });
    }
    let n = o.size.unwrap_or(1024);
    let clocks = o.clocks.unwrap_or(30);
    let bandwidth = super::arm::rate_text(o.rate.0);
    let mut report = Report::new(
        BUDGET_CHECK,
        &format!(
            "P={p}, MLR J=D={n}, K=16, BSP, {bandwidth} per node: the token bucket vs tc tbf on a veth link per node, SFB full broadcast and FMS"
        ),
    );
    let mut base = mlr(n, n, 8192, 256);
    base.peers = p;
    base.transport = Transport::Libp2p;
    base.train.clocks = clocks;
    base.train.eval_every = (clocks / 3).max(1);
    base.net.bandwidth = Some(o.rate);
    base.net.burst = o.burst;
    let arms: Vec<Arm> = ARMS
        .iter()
        .map(|&(name, backend, tbf)| {
            let mut s = base.clone();
            s.backend = backend;
            s.net.netns = tbf;
            Arm::new(name, s)
        })
        .collect();
    let records = run_arms(runner, &mut report, &arms, 0, o.target_frac.unwrap_or(0.5))?;
    let clocks: Vec<Vec<f64>> = records.iter().map(|r| clock_times(r, p)).collect();
    for (a, c) in report.arms.iter().zip(&clocks) {
        report.extra.insert(
            format!("{}: ms per clock", a.name),
            serde_json::json!(c.iter().map(|x| x * 1e3).collect::<Vec<_>>()),
        );
    }
    let (table, notes) = compare(&report, &clocks, o.rate, o.burst, (p, n, 16));
    report
        .sections
        .push(("Token bucket vs tbf, per backend".into(), table));
    report.notes.extend(notes);
    report.notes.push(format!(
        "Token bucket arms: every node on loopback, its sends paced in user space by the built-in bucket (--bandwidth {}, --burst {} B), which counts frame bytes (length prefix + payload). tbf arms (sfb run --netns): every node in its own network namespace on a veth link to one bridge, no bucket, the kernel's tbf on the node's side of its link at the same rate and burst (queue {} ms), counting every byte it forwards: Ethernet/IP/TCP headers, ACKs, noise and yamux framing, handshakes.",
        bandwidth, o.burst, o.tbf_latency_ms
    ));
    report.notes.push(
        "All nodes share this machine's cores in both cases; the veth/bridge path costs more CPU per byte than loopback (MTU 1500 instead of 64 KiB, a bridge hop), charged to the tbf arms."
            .into(),
    );
    Ok(report)
}

/// A backend's two arms and their clock durations (seconds).
struct Pair<'a> {
    backend: &'static str,
    bucket: (&'a ArmReport, &'a [f64]),
    tbf: (&'a ArmReport, &'a [f64]),
}

fn ms_per_clock(a: &ArmReport) -> f64 {
    a.train_s / a.summary.clocks.max(1) as f64 * 1e3
}

/// Bytes per clock tbf forwarded (every node's qdisc), if the run reported them.
fn wire_per_clock(a: &ArmReport) -> Option<f64> {
    let b = a.summary.extra.get("tbf_bytes_sent")?;
    Some(b / a.summary.clocks.max(1) as f64)
}

fn fmt_opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The comparison table and the findings in words. `clocks` are the arms' clock
/// durations, in report order; `shape` is (P, J = D, K).
fn compare(
    report: &Report,
    clocks: &[Vec<f64>],
    rate: Rate,
    burst: usize,
    (p, n, k): (usize, usize, usize),
) -> (String, Vec<String>) {
    let find = |name: String| {
        let i = report.arms.iter().position(|a| a.name == name)?;
        Some((&report.arms[i], clocks.get(i)?.as_slice()))
    };
    let pairs: Vec<Pair<'_>> = [("SFB full", "sfb"), ("FMS", "fms")]
        .into_iter()
        .filter_map(|(label, backend)| {
            Some(Pair {
                backend,
                bucket: find(format!("{label}, token bucket"))?,
                tbf: find(format!("{label}, tbf"))?,
            })
        })
        .collect();
    let mut t = String::from(
        "| backend | bucket ms/clock (mean) | tbf ms/clock (mean) | tbf ÷ bucket (mean) | bucket ms/clock (median) | tbf ms/clock (median) | tbf ÷ bucket (median) | frame bytes/clock (bucket arm) | wire bytes/clock (tbf arm) | wire ÷ frame | tbf ÷ bucket (median) per byte counted | busiest node at the rate, ms/clock | clocks > 2× median (bucket / tbf) | tbf drops | TCP retransmits (tbf) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut notes = Vec::new();
    for pr in &pairs {
        let (b, s) = (ms_per_clock(pr.bucket.0), ms_per_clock(pr.tbf.0));
        let (mb, ms) = (
            median(pr.bucket.1).map(|x| x * 1e3),
            median(pr.tbf.1).map(|x| x * 1e3),
        );
        let median_ratio = mb.zip(ms).map(|(b, s)| s / b);
        let wire = wire_per_clock(pr.tbf.0);
        let frame = pr.bucket.0.bytes_per_clock;
        let bytes_ratio = wire.map(|w| w / frame);
        let per_byte = median_ratio.zip(bytes_ratio).map(|(r, w)| r / w);
        // The busiest sender per clock: the FMS server sends W to every client; an SFB
        // peer its factors to the P−1 others.
        let busiest = if pr.backend == "fms" {
            (p * n * n * 4) as f64
        } else {
            ((p - 1) * k * (n + n) * 4) as f64
        };
        let floor = busiest / rate.0 * 1e3;
        let extra = |key: &str| pr.tbf.0.summary.extra.get(key).copied();
        let (slow_b, slow_s) = (slow_clocks(pr.bucket.1), slow_clocks(pr.tbf.1));
        let _ = writeln!(
            t,
            "| {} | {b:.1} | {s:.1} | {:.3} | {} | {} | {} | {} | {} | {} | {} | {floor:.1} | {slow_b} / {slow_s} | {} | {} |",
            pr.backend.to_uppercase(),
            s / b,
            fmt_opt(mb, 1),
            fmt_opt(ms, 1),
            fmt_opt(median_ratio, 3),
            human_bytes(frame),
            wire.map_or("-".into(), human_bytes),
            fmt_opt(bytes_ratio, 3),
            fmt_opt(per_byte, 3),
            fmt_opt(extra("tbf_dropped"), 0),
            fmt_opt(extra("tcp_retransmits"), 0),
        );
        let bound = if floor >= 0.5 * mb.unwrap_or(b) {
            "link-bound"
        } else {
            "mostly compute-bound"
        };
        let mut note = format!(
            "{}: the median clock takes {} ms under tbf and {} ms under the token bucket ({}",
            pr.backend.to_uppercase(),
            fmt_opt(ms, 1),
            fmt_opt(mb, 1),
            median_ratio.map_or("-".into(), |r| format!("{:+.1}%", (r - 1.0) * 100.0)),
        );
        if let (Some(w), Some(pb)) = (bytes_ratio, per_byte) {
            let _ = write!(
                note,
                ") while tbf forwards {:+.1}% more bytes than the bucket counts (Ethernet/IP/TCP headers, ACKs, noise and yamux framing): per byte each shaper counts they agree within {:.1}%",
                (w - 1.0) * 100.0,
                (pb - 1.0).abs() * 100.0
            );
        } else {
            note += ")";
        }
        let _ = write!(
            note,
            ". Means: {s:.1} vs {b:.1} ms ({:+.1}%); {slow_s} tbf clock(s) and {slow_b} bucket clock(s) took over twice the median. The busiest node's {} per clock take {floor:.1} ms at the rate: this arm is {bound}.",
            (s / b - 1.0) * 100.0,
            human_bytes(busiest)
        );
        notes.push(note);
    }
    t += &format!(
        "\nA clock's time is training time (evaluation excluded) from the end of the previous clock until the slowest worker finished it; the median is robust to the few slow clocks (start-up, stalls) that the mean includes; every clock's time is in the JSON (`extra`). Frame bytes are what the token bucket counts (all nodes); wire bytes what tbf forwarded (all nodes, link-layer headers and ACKs included). \"per byte counted\" divides the median time ratio by the byte ratio: 1 when both shapers hold the same rate over the bytes each counts. \"busiest node at the rate\" is what its bytes per clock take at the rate: about the shortest a link-bound clock can be (the burst lets a little go at once). TCP retransmits are summed over the tbf arm's namespaces. Burst {} for both shapers.\n",
        human_bytes(burst as f64)
    );
    (t, notes)
}
