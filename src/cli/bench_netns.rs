//! `sfb bench --scenario budget-check`: the built-in bandwidth budget (a token bucket on
//! each node's sends) against the kernel's (`tc tbf` on each node's veth link, every node
//! in its own network namespace, `sfb run --netns`), for SFB full broadcast and FMS. Needs
//! root and iproute2; elsewhere it says why and does nothing.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Result, bail};
use sfb_core::metrics::ClockRecord;
use sfb_net::bandwidth::Rate;

use super::bench::BenchArgs;
use super::bench_train::{mlr, run_arms};
use super::experiment::{ArmReport, ArmSpec, Report, Runner, human_bytes};

/// The scenario's name.
pub const NAME: &str = "budget-check";

/// The rate without `--bandwidth`: low enough that both backends are link-bound at the
/// default size (J = D = 1024, P = 4: an SFB peer sends 384 KiB per clock, 16 ms at
/// 200 Mbit/s against ~4 ms at 1 Gbit/s, where its compute dominates; the FMS server
/// 16 MiB, 670 ms), so the check compares the two shapers rather than the CPU.
const DEFAULT_RATE: &str = "200mbit";

/// The arms, in run order: (name, backend, shaped by the kernel).
const ARMS: [(&str, &str, bool); 4] = [
    ("SFB full, token bucket", "sfb", false),
    ("SFB full, tbf", "sfb", true),
    ("FMS, token bucket", "fms", false),
    ("FMS, tbf", "fms", true),
];

/// Runs the scenario, writing into `args.out` (default `sfb-bench/`); prints
/// `budget-check skipped: <reason>` and writes nothing where namespaces are unavailable.
pub fn run(args: &BenchArgs) -> Result<()> {
    if let Err(why) = super::netns::available() {
        println!("{NAME} skipped: {why}");
        return Ok(());
    }
    if args.transport != "libp2p" {
        bail!(
            "{NAME} compares libp2p links; drop --transport {}",
            args.transport
        );
    }
    let bandwidth = args.bandwidth_or(DEFAULT_RATE).to_string();
    let rate: Rate = bandwidth
        .parse()
        .map_err(|e: String| anyhow::anyhow!("{NAME} needs a --bandwidth rate: {e}"))?;
    let p = args.peers.unwrap_or(4);
    if p < 2 {
        bail!("{NAME} needs at least 2 peers, got {p}");
    }
    let n = args.size.unwrap_or(1024);
    let clocks = args.clocks.unwrap_or(30);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("sfb-bench"));
    let runner = Runner::new();
    let mut report = Report::new(
        NAME,
        &format!(
            "P={p}, MLR J=D={n}, K=16, BSP, {} per node: the token bucket vs tc tbf on a veth link per node, SFB full broadcast and FMS",
            bandwidth
        ),
    );
    let base: Vec<String> = mlr(n, n, 8192, 256)
        .into_iter()
        .chain([
            "--clocks".into(),
            clocks.to_string(),
            "--eval-every".into(),
            (clocks / 3).max(1).to_string(),
            "--transport".into(),
            "libp2p".into(),
            "--bandwidth".into(),
            bandwidth.clone(),
            "--burst".into(),
            args.burst.to_string(),
            "--peers".into(),
            p.to_string(),
        ])
        .collect();
    let arms: Vec<ArmSpec> = ARMS
        .iter()
        .map(|&(name, backend, tbf)| {
            let a = ArmSpec::new(name, base.clone()).with(["--backend", backend]);
            if tbf { a.with(["--netns"]) } else { a }
        })
        .collect();
    let records = run_arms(
        &runner,
        &mut report,
        &arms,
        0,
        args.target_frac.unwrap_or(0.5),
    )?;
    let clocks: Vec<Vec<f64>> = records.iter().map(|r| clock_times(r, p)).collect();
    for (a, c) in report.arms.iter().zip(&clocks) {
        report.extra.insert(
            format!("{}: ms per clock", a.name),
            serde_json::json!(c.iter().map(|x| x * 1e3).collect::<Vec<_>>()),
        );
    }
    let (table, notes) = compare(&report, &clocks, rate, args.burst, (p, n, 16));
    report
        .sections
        .push(("Token bucket vs tbf, per backend".into(), table));
    report.notes.extend(notes);
    report.notes.push(format!(
        "Token bucket arms: every node on loopback, its sends paced in user space by the built-in bucket (--bandwidth {}, --burst {} B), which counts frame bytes (length prefix + payload). tbf arms (sfb run --netns): every node in its own network namespace on a veth link to one bridge, no bucket, the kernel's tbf on the node's side of its link at the same rate and burst (queue {} ms), counting every byte it forwards: Ethernet/IP/TCP headers, ACKs, noise and yamux framing, handshakes.",
        bandwidth,
        args.burst,
        super::netns::TBF_LATENCY_MS
    ));
    report.notes.push(
        "All nodes share this machine's cores in both cases; the veth/bridge path costs more CPU per byte than loopback (MTU 1500 instead of 64 KiB, a bridge hop), charged to the tbf arms."
            .into(),
    );
    let written = report.write(&out)?;
    report.print();
    println!("\nwrote {} files in {}/", written.len(), out.display());
    Ok(())
}

/// A backend's two arms and their clock durations (seconds).
struct Pair<'a> {
    backend: &'static str,
    bucket: (&'a ArmReport, &'a [f64]),
    tbf: (&'a ArmReport, &'a [f64]),
}

/// How long each clock took, seconds: clock c ends when the slowest of the `peers` workers
/// has finished it (training time: wall minus evaluation), and starts when clock c − 1
/// ended.
fn clock_times(records: &[ClockRecord], peers: usize) -> Vec<f64> {
    let mut prev = 0.0;
    super::experiment::clock_ends(records, peers)
        .into_values()
        .map(|t| {
            let d = (t - prev).max(0.0);
            prev = t;
            d
        })
        .collect()
}

fn median(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| {
        let m = v.len() / 2;
        if v.len() % 2 == 1 {
            v[m]
        } else {
            (v[m - 1] + v[m]) / 2.0
        }
    })
}

/// Clocks that took more than twice the median.
fn slow_clocks(xs: &[f64]) -> usize {
    median(xs).map_or(0, |m| xs.iter().filter(|&&x| x > 2.0 * m).count())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(peer: u32, clock: u64, wall: f64, eval: f64) -> ClockRecord {
        crate::cli::experiment::tests::rec(peer, clock, wall, eval, None)
    }

    #[test]
    fn a_clock_lasts_until_its_slowest_worker_and_evaluation_is_left_out() {
        let rs = [
            rec(0, 1, 1.0, 0.0),
            rec(1, 1, 1.5, 0.0),
            rec(0, 2, 2.0, 0.0),
            rec(1, 2, 3.5, 0.5),        // 3.0 of training
            rec(u32::MAX, 2, 9.0, 0.0), // an FMS server: not a worker
        ];
        let t = clock_times(&rs, 2);
        assert_eq!(t, [1.5, 1.5]);
    }

    #[test]
    fn median_and_slow_clocks() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(slow_clocks(&[1.0, 1.0, 1.1, 0.9, 2.2, 5.0]), 2);
        assert_eq!(slow_clocks(&[]), 0);
    }
}
