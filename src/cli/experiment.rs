//! Paired experiments for `sfb demo` and `sfb bench`.
//!
//! An arm is an `sfb run` command line; a scenario runs its arms one after another in this
//! process (so they share the machine's state and are compared within one run), turns each
//! arm's per-clock records into a curve of held-out objective against training time and
//! samples, reads a target objective off a reference arm's curve, and reports every arm's
//! time to that target next to its throughput, traffic and time split, as a table on
//! stdout, JSON, CSV, Markdown and PNG plots.
//!
//! Training time at a clock is the peer's wall time minus the time it spent evaluating, so
//! the cost of measuring the objective is not charged to any arm; an arm's time at a clock
//! is the largest over its peers (the clock is done when every peer has done it), and its
//! objective the mean over peers (replicas differ under partial broadcast).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, anyhow};
use clap::Parser;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use sfb_core::metrics::{ClockRecord, Summary};
use sfb_plot::{self as plot, BarChart, LineChart, Series};

use super::run::RunArgs;

/// `sfb run`'s options, parsed from an arm's argument list.
#[derive(Debug, Parser)]
#[command(name = "sfb run", no_binary_name = true)]
struct RunLine {
    #[command(flatten)]
    run: RunArgs,
}

/// One arm: a name and the arguments of the `sfb run` command that carries it out.
#[derive(Debug, Clone)]
pub struct ArmSpec {
    /// Name in tables and legends.
    pub name: String,
    /// Arguments after `sfb run`.
    pub argv: Vec<String>,
    /// Environment of the run. An arm with any runs as a child `sfb run` process (and so
    /// do its peers), e.g. `RAYON_NUM_THREADS=1` for one core per peer.
    pub env: Vec<(String, String)>,
}

impl ArmSpec {
    /// An arm named `name` running `sfb run ARGS…`.
    pub fn new(name: impl Into<String>, argv: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            name: name.into(),
            argv: argv.into_iter().map(Into::into).collect(),
            env: Vec::new(),
        }
    }

    /// The same arm with an environment variable set.
    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The same arm with more arguments.
    pub fn with(mut self, more: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.argv.extend(more.into_iter().map(Into::into));
        self
    }

    /// The command line a user can run to reproduce this arm alone.
    pub fn command(&self) -> String {
        let mut s: String = self.env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
        s += "sfb run";
        for a in &self.argv {
            s.push(' ');
            if a.contains([' ', ',', '"', '\'', '*', '?']) {
                s.push('\'');
                s.push_str(a);
                s.push('\'');
            } else {
                s.push_str(a);
            }
        }
        s
    }

    fn parse(&self) -> Result<RunArgs> {
        RunLine::try_parse_from(&self.argv)
            .map(|l| l.run)
            .map_err(|e| anyhow!("arm {:?}: {e}", self.name))
    }
}

/// One point of an arm's learning curve: every peer evaluated at `clock`.
#[derive(Debug, Clone, Serialize)]
pub struct CurvePoint {
    /// Clocks completed.
    pub clock: u64,
    /// Training seconds (wall time minus evaluation time), the slowest peer's.
    pub train_s: f64,
    /// Samples processed by all peers together.
    pub samples: u64,
    /// Held-out objective, mean over peers.
    pub objective: f64,
    /// Held-out accuracy, mean over peers (classifiers).
    pub accuracy: Option<f64>,
}

/// When each clock ended, in training seconds (wall time minus evaluation time): the
/// slowest of the `peers` workers' (server records are left out).
pub fn clock_ends(records: &[ClockRecord], peers: usize) -> std::collections::BTreeMap<u64, f64> {
    let mut end: std::collections::BTreeMap<u64, f64> = Default::default();
    for r in records.iter().filter(|r| (r.peer as usize) < peers) {
        let t = (r.wall_s - r.eval_s).max(0.0);
        let e = end.entry(r.clock).or_insert(t);
        *e = e.max(t);
    }
    end
}

/// The learning curve of a run with `peers` workers (server records are left out): the
/// clocks at which every worker evaluated, in order.
pub fn curve(records: &[ClockRecord], peers: usize) -> Vec<CurvePoint> {
    let ends = clock_ends(records, peers);
    let mut by_clock: std::collections::BTreeMap<u64, Vec<&ClockRecord>> = Default::default();
    for r in records {
        if (r.peer as usize) < peers && r.objective.is_some() {
            by_clock.entry(r.clock).or_default().push(r);
        }
    }
    by_clock
        .into_iter()
        .filter_map(|(clock, rs)| {
            // A peer may report a clock twice (its last step, then the final evaluation):
            // keep one record per peer, the later one.
            let mut per_peer: std::collections::BTreeMap<u32, &ClockRecord> = Default::default();
            for r in rs {
                per_peer.insert(r.peer, r);
            }
            if per_peer.len() != peers {
                return None;
            }
            let rs: Vec<&ClockRecord> = per_peer.into_values().collect();
            let n = rs.len() as f64;
            let accs: Vec<f64> = rs.iter().filter_map(|r| r.test_accuracy).collect();
            Some(CurvePoint {
                clock,
                train_s: ends.get(&clock).copied().unwrap_or(0.0),
                samples: rs.iter().map(|r| r.samples).sum(),
                objective: rs
                    .iter()
                    .map(|r| r.objective.unwrap_or(f64::NAN))
                    .sum::<f64>()
                    / n,
                accuracy: (accs.len() == rs.len()).then(|| accs.iter().sum::<f64>() / n),
            })
        })
        .collect()
}

/// When `curve` first reaches `target` (objective ≤ target): `(seconds, clocks, samples)`,
/// interpolated linearly between the two evaluations around the crossing.
pub fn time_to_target(curve: &[CurvePoint], target: f64) -> Option<(f64, f64, f64)> {
    let i = curve.iter().position(|p| p.objective <= target)?;
    let b = &curve[i];
    if i == 0 {
        return Some((b.train_s, b.clock as f64, b.samples as f64));
    }
    let a = &curve[i - 1];
    let f = if a.objective > b.objective {
        ((a.objective - target) / (a.objective - b.objective)).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let lerp = |x: f64, y: f64| x + f * (y - x);
    Some((
        lerp(a.train_s, b.train_s),
        lerp(a.clock as f64, b.clock as f64),
        lerp(a.samples as f64, b.samples as f64),
    ))
}

/// The objective `curve` has at the first evaluation at or after `frac` of `clocks`.
pub fn target_at(curve: &[CurvePoint], clocks: u64, frac: f64) -> Option<(f64, u64)> {
    let at = (frac * clocks as f64).ceil() as u64;
    curve
        .iter()
        .find(|p| p.clock >= at)
        .map(|p| (p.objective, p.clock))
}

/// One arm's results.
#[derive(Debug, Clone, Serialize)]
pub struct ArmReport {
    /// Arm name.
    pub name: String,
    /// Training seconds until the held-out objective reached the scenario's target (None:
    /// not reached within the arm's clocks).
    pub time_to_target_s: Option<f64>,
    /// Samples per second of wall time, all peers together.
    pub samples_per_s: f64,
    /// Bytes sent per clock, all nodes together (framing included over libp2p).
    pub bytes_per_clock: f64,
    /// Held-out objective after the last clock (mean over peers).
    pub final_objective: Option<f64>,
    /// Held-out accuracy after the last clock.
    pub final_accuracy: Option<f64>,
    /// Clocks until the target (interpolated).
    pub clocks_to_target: Option<f64>,
    /// Samples until the target (interpolated).
    pub samples_to_target: Option<f64>,
    /// Training seconds of the whole arm (last evaluation).
    pub train_s: f64,
    /// The `sfb run` command of this arm.
    pub command: String,
    /// The run's summary (the `sfb run --summary` keys).
    pub summary: Summary,
    /// The learning curve.
    pub curve: Vec<CurvePoint>,
}

impl ArmReport {
    /// Mean seconds per clock a peer spent computing, applying and waiting, and the rest
    /// of its training time (framing, queues, scheduling).
    pub fn split_per_clock(&self) -> [f64; 4] {
        let s = &self.summary;
        let c = s.clocks.max(1) as f64;
        let other = (self.train_s - s.compute_s - s.apply_s - s.wait_s - s.flush_s).max(0.0);
        [
            s.compute_s / c,
            s.apply_s / c,
            (s.wait_s + s.flush_s) / c,
            other / c,
        ]
    }
}

/// The machine a report was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model (`/proc/cpuinfo`).
    pub cpu: String,
    /// Logical cores available to this process.
    pub cores: usize,
    /// Total memory, GiB.
    pub memory_gib: f64,
    /// Kernel release.
    pub os: String,
}

impl Machine {
    /// This machine.
    pub fn this() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("unknown".into(), |(_, v)| v.trim().to_string());
        let memory_gib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            })
            .map_or(0.0, |kb| kb / (1024.0 * 1024.0));
        let os = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or("unknown".into(), |s| format!("Linux {}", s.trim()));
        Self {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            memory_gib,
            os,
        }
    }

    /// One line for tables and notes.
    pub fn line(&self) -> String {
        format!(
            "{}, {} cores, {:.0} GiB, {}",
            self.cpu, self.cores, self.memory_gib, self.os
        )
    }
}

/// Runs arms one after another with progress bars.
#[derive(Debug)]
pub struct Runner {
    multi: MultiProgress,
}

impl Default for Runner {
    fn default() -> Self {
        Self::new()
    }
}

impl Runner {
    /// A runner drawing progress bars on stderr (hidden when stderr is not a terminal).
    pub fn new() -> Self {
        Self {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
        }
    }

    /// Prints a line above the progress bars.
    pub fn say(&self, line: &str) {
        if self.multi.is_hidden() {
            eprintln!("{line}");
        } else {
            let _ = self.multi.println(line);
        }
    }

    /// Runs `spec` and returns its summary and records.
    pub fn run(&self, spec: &ArmSpec) -> Result<(Summary, Vec<ClockRecord>)> {
        let args = spec.parse()?;
        let peers = args.peers;
        let clocks = args.train.clocks;
        let bar = self.multi.add(ProgressBar::new(clocks));
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:<30!} [{bar:32.cyan/blue}] {pos:>4}/{len} clocks  {elapsed:>4}  {msg}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(spec.name.clone());
        bar.enable_steady_tick(std::time::Duration::from_millis(250));
        // Position: the clock every peer has completed (the slowest peer's).
        let done: Arc<Vec<AtomicU64>> = Arc::new((0..peers).map(|_| AtomicU64::new(0)).collect());
        let progress: super::p2p::Progress = {
            let bar = bar.clone();
            let done = Arc::clone(&done);
            Arc::new(move |node: usize, clock: u64| {
                if let Some(c) = done.get(node) {
                    c.fetch_max(clock, Ordering::Relaxed);
                    let min = done
                        .iter()
                        .map(|c| c.load(Ordering::Relaxed))
                        .min()
                        .unwrap_or(0);
                    bar.set_position(min);
                }
            })
        };
        let r = if spec.env.is_empty() {
            super::run::execute(&args.to_spec(), &spec.argv, Some(progress))
        } else {
            run_child(spec)
        }
        .with_context(|| format!("arm {:?} ({})", spec.name, spec.command()));
        match &r {
            Ok((s, _)) => {
                bar.set_position(clocks);
                bar.finish_with_message(format!(
                    "objective {}  {:.0} samples/s",
                    s.objective.map_or("-".into(), |o| format!("{o:.4}")),
                    s.samples_per_s
                ));
            }
            Err(_) => bar.abandon_with_message("failed"),
        }
        if self.multi.is_hidden()
            && let Ok((s, _)) = &r
        {
            eprintln!(
                "  {}: {} clocks in {:.1}s, objective {}",
                spec.name,
                s.clocks,
                s.wall_s,
                s.objective.map_or("-".into(), |o| format!("{o:.4}"))
            );
        }
        r
    }
}

/// Runs `spec` as a child `sfb run` process with its environment; reads back its summary
/// and per-clock metrics.
fn run_child(spec: &ArmSpec) -> Result<(Summary, Vec<ClockRecord>)> {
    let dir = std::env::temp_dir().join(format!(
        "sfb-arm-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&dir)?;
    let (summary, metrics) = (dir.join("summary.json"), dir.join("metrics.jsonl"));
    let out = std::process::Command::new(std::env::current_exe()?)
        .arg("run")
        .args(&spec.argv)
        .arg("--summary")
        .arg(&summary)
        .arg("--metrics")
        .arg(&metrics)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .output()
        .context("starting sfb run")?;
    let result = (|| {
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(20).collect();
            anyhow::bail!(
                "sfb run failed ({}):\n{}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        let s: Summary = serde_json::from_str(&std::fs::read_to_string(&summary)?)
            .context("reading the arm's summary")?;
        let records = std::fs::read_to_string(&metrics)?
            .lines()
            .map(serde_json::from_str)
            .collect::<std::result::Result<Vec<ClockRecord>, _>>()
            .context("reading the arm's metrics")?;
        Ok((s, records))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Builds an arm's report from its run, measuring time to `target`.
pub fn arm_report(
    spec: &ArmSpec,
    summary: Summary,
    records: &[ClockRecord],
    target: Option<f64>,
) -> ArmReport {
    let curve = curve(records, summary.peers);
    let ttt = target.and_then(|t| time_to_target(&curve, t));
    let last = curve.last();
    ArmReport {
        name: spec.name.clone(),
        time_to_target_s: ttt.map(|t| t.0),
        samples_per_s: summary.samples_per_s,
        bytes_per_clock: summary.bytes_per_clock,
        final_objective: last.map(|p| p.objective).or(summary.objective),
        final_accuracy: last.and_then(|p| p.accuracy).or(summary.test_accuracy),
        clocks_to_target: ttt.map(|t| t.1),
        samples_to_target: ttt.map(|t| t.2),
        train_s: last.map_or(summary.wall_s, |p| p.train_s),
        command: spec.command(),
        summary,
        curve,
    }
}

/// A scenario's results: what `sfb bench` writes as JSON, CSV, Markdown and PNG.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// One-line description.
    pub title: String,
    /// The command that produced this report.
    pub command: String,
    /// Where it was measured.
    pub machine: Machine,
    /// The target objective (held-out), identical for all arms.
    pub target_objective: Option<f64>,
    /// How the target was chosen.
    pub target_rule: String,
    /// The arms, in run order.
    pub arms: Vec<ArmReport>,
    /// For `fms-vs-sfb`: FMS time to target ÷ SFB full-broadcast time to target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// Scenario-specific figures.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// Findings and caveats, in words.
    pub notes: Vec<String>,
    /// Extra Markdown sections (title, body).
    #[serde(skip)]
    pub sections: Vec<(String, String)>,
    /// Plots written, (file name, caption).
    pub plots: Vec<(String, String)>,
}

impl Report {
    /// An empty report for `scenario`.
    pub fn new(scenario: &str, title: &str) -> Self {
        Self {
            scenario: scenario.into(),
            title: title.into(),
            command: invocation(),
            machine: Machine::this(),
            target_objective: None,
            target_rule: String::new(),
            arms: Vec::new(),
            speedup: None,
            extra: Default::default(),
            notes: Vec::new(),
            sections: Vec::new(),
            plots: Vec::new(),
        }
    }

    /// The arm named `name`.
    pub fn arm(&self, name: &str) -> Option<&ArmReport> {
        self.arms.iter().find(|a| a.name == name)
    }

    /// The main table (Markdown).
    pub fn table(&self) -> String {
        let mut t = String::from(
            "| arm | time to target (s) | clocks to target | samples/s | bytes/clock | compute / apply / wait / other (ms per clock) | final objective | final accuracy |\n|---|---:|---:|---:|---:|---|---:|---:|\n",
        );
        for a in &self.arms {
            let [c, ap, w, o] = a.split_per_clock();
            let _ = writeln!(
                t,
                "| {} | {} | {} | {:.0} | {} | {:.1} / {:.1} / {:.1} / {:.1} | {} | {} |",
                a.name,
                a.time_to_target_s
                    .map_or("not reached".into(), |t| format!("{t:.2}")),
                a.clocks_to_target.map_or("-".into(), |c| format!("{c:.1}")),
                a.samples_per_s,
                human_bytes(a.bytes_per_clock),
                c * 1e3,
                ap * 1e3,
                w * 1e3,
                o * 1e3,
                a.final_objective.map_or("-".into(), |x| format!("{x:.4}")),
                a.final_accuracy.map_or("-".into(), |x| format!("{x:.4}")),
            );
        }
        t
    }

    /// Prints the table and notes to stdout.
    pub fn print(&self) {
        println!("\n## {} — {}\n", self.scenario, self.title);
        if let Some(t) = self.target_objective {
            println!("target: held-out objective {t:.4} ({})\n", self.target_rule);
        }
        print!("{}", self.table());
        for (title, body) in &self.sections {
            println!("\n### {title}\n\n{body}");
        }
        if let Some(s) = self.speedup {
            println!("\nspeedup (FMS time to target ÷ SFB full broadcast): {s:.2}×");
        }
        for n in &self.notes {
            println!("- {n}");
        }
    }

    /// Writes `<scenario>.json`, `<scenario>.csv`, `<scenario>-curves.csv`, the standard
    /// plots and `<scenario>.md` into `dir`.
    pub fn write(&mut self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let name = &self.scenario.clone();
        self.standard_plots(dir)?;
        let mut written = Vec::new();
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        written.push(path);

        let mut csv = String::from(
            "name,time_to_target_s,clocks_to_target,samples_per_s,bytes_per_clock,final_objective,final_accuracy,train_s,wall_s,compute_s,apply_s,wait_s,flush_s,eval_s,peers,out_degree,backend,consistency,max_staleness\n",
        );
        let o = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
        for a in &self.arms {
            let s = &a.summary;
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                csv_field(&a.name),
                o(a.time_to_target_s),
                o(a.clocks_to_target),
                a.samples_per_s,
                a.bytes_per_clock,
                o(a.final_objective),
                o(a.final_accuracy),
                a.train_s,
                s.wall_s,
                s.compute_s,
                s.apply_s,
                s.wait_s,
                s.flush_s,
                s.eval_s,
                s.peers,
                s.out_degree,
                s.backend,
                csv_field(&s.consistency),
                s.max_staleness
            );
        }
        let path = dir.join(format!("{name}.csv"));
        std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);

        let mut curves = String::from("arm,clock,train_s,samples,objective,accuracy\n");
        for a in &self.arms {
            for p in &a.curve {
                let _ = writeln!(
                    curves,
                    "{},{},{},{},{},{}",
                    csv_field(&a.name),
                    p.clock,
                    p.train_s,
                    p.samples,
                    p.objective,
                    o(p.accuracy)
                );
            }
        }
        let path = dir.join(format!("{name}-curves.csv"));
        std::fs::write(&path, curves).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);

        let path = dir.join(format!("{name}.md"));
        std::fs::write(&path, self.markdown())
            .with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
        written.extend(self.plots.iter().map(|(f, _)| dir.join(f)));
        Ok(written)
    }

    /// The Markdown summary (images referenced by file name, next to it).
    pub fn markdown(&self) -> String {
        let mut m = format!("## `{}` — {}\n\n", self.scenario, self.title);
        let _ = writeln!(m, "Command: `{}`  ", self.command);
        let _ = writeln!(m, "Machine: {}\n", self.machine.line());
        if let Some(t) = self.target_objective {
            let _ = writeln!(
                m,
                "Target: held-out objective **{t:.4}** ({}).\n",
                self.target_rule
            );
        }
        m += &self.table();
        if let Some(s) = self.speedup {
            let _ = writeln!(
                m,
                "\n**Speedup** (FMS time to target ÷ SFB full-broadcast time to target): **{s:.2}×**"
            );
        }
        for (title, body) in &self.sections {
            let _ = write!(m, "\n### {title}\n\n{body}\n");
        }
        if !self.notes.is_empty() {
            m += "\n";
            for n in &self.notes {
                let _ = writeln!(m, "- {n}");
            }
        }
        m += "\n";
        for (file, caption) in &self.plots {
            let _ = writeln!(m, "![{caption}]({file})\n");
        }
        m += "<details><summary>Arm commands</summary>\n\n";
        for a in &self.arms {
            let _ = writeln!(m, "- {}: `{}`", a.name, a.command);
        }
        m += "\n</details>\n";
        m
    }

    /// Adds a plot written by the caller.
    pub fn add_plot(&mut self, file: &str, caption: &str) {
        if !self.plots.iter().any(|(f, _)| f == file) {
            self.plots.push((file.into(), caption.into()));
        }
    }

    fn standard_plots(&mut self, dir: &Path) -> Result<()> {
        let name = self.scenario.clone();
        let hline = self.target_objective.map(|t| (t, format!("target {t:.4}")));
        let series = |x: &dyn Fn(&CurvePoint) -> f64| -> Vec<Series> {
            self.arms
                .iter()
                .map(|a| Series {
                    name: a.name.clone(),
                    points: a.curve.iter().map(|p| (x(p), p.objective)).collect(),
                })
                .collect()
        };
        let by_time = series(&|p| p.train_s);
        let by_samples = series(&|p| p.samples as f64);
        let file = format!("{name}-objective-vs-time.png");
        plot::line_chart(
            &dir.join(&file),
            &LineChart {
                title: format!("{}: held-out objective vs training time", self.scenario),
                x_label: "training time (s, evaluation excluded)".into(),
                y_label: "held-out objective".into(),
                series: by_time,
                log_x: false,
                log_y: false,
                hline: hline.clone(),
                markers: true,
            },
        )?;
        self.add_plot(&file, "held-out objective vs training time");
        let file = format!("{name}-objective-vs-samples.png");
        plot::line_chart(
            &dir.join(&file),
            &LineChart {
                title: format!("{}: held-out objective vs samples", self.scenario),
                x_label: "samples processed (all peers)".into(),
                y_label: "held-out objective".into(),
                series: by_samples,
                log_x: false,
                log_y: false,
                hline,
                markers: true,
            },
        )?;
        self.add_plot(&file, "held-out objective vs samples processed");
        let cats: Vec<String> = self.arms.iter().map(|a| a.name.clone()).collect();
        let file = format!("{name}-bytes-per-clock.png");
        plot::bar_chart(
            &dir.join(&file),
            &BarChart {
                title: format!("{}: bytes sent per clock (all nodes)", self.scenario),
                y_label: "bytes per clock".into(),
                categories: cats.clone(),
                stacks: vec![(
                    "measured".into(),
                    self.arms.iter().map(|a| a.bytes_per_clock).collect(),
                )],
                stacked: false,
                log_y: true,
            },
        )?;
        self.add_plot(&file, "bytes sent per clock");
        let splits: Vec<[f64; 4]> = self.arms.iter().map(ArmReport::split_per_clock).collect();
        let file = format!("{name}-time-split.png");
        plot::bar_chart(
            &dir.join(&file),
            &BarChart {
                title: format!("{}: where a peer's time goes", self.scenario),
                y_label: "ms per clock (mean peer)".into(),
                categories: cats,
                stacks: ["compute", "apply", "wait", "other"]
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (n.to_string(), splits.iter().map(|s| s[i] * 1e3).collect()))
                    .collect(),
                stacked: true,
                log_y: false,
            },
        )?;
        self.add_plot(&file, "compute / apply / wait / other per clock");
        Ok(())
    }
}

/// This process's command line, as `sfb …`.
pub fn invocation() -> String {
    std::env::args()
        .enumerate()
        .map(|(i, a)| if i == 0 { "sfb".into() } else { a })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Bytes with a binary unit.
pub fn human_bytes(b: f64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < U.len() {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{x:.0} B")
    } else {
        format!("{x:.1} {}", U[i])
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record of `peer` after `clock` (samples `10·clock`), for tests.
    pub(crate) fn rec(
        peer: u32,
        clock: u64,
        wall: f64,
        eval: f64,
        obj: Option<f64>,
    ) -> ClockRecord {
        ClockRecord {
            peer,
            clock,
            wall_s: wall,
            objective: obj,
            test_accuracy: obj.map(|_| 0.5),
            samples: clock * 10,
            samples_per_s: 0.0,
            bytes_sent: 0,
            bytes_received: 0,
            compute_s: 0.0,
            apply_s: 0.0,
            wait_s: 0.0,
            eval_s: eval,
            max_staleness: 0,
        }
    }

    #[test]
    fn curve_needs_every_peer_and_subtracts_evaluation() {
        let rs = vec![
            rec(0, 5, 1.0, 0.2, Some(2.0)),
            rec(1, 5, 1.5, 0.1, Some(4.0)),
            rec(0, 10, 2.0, 0.4, Some(1.0)),
            // peer 1 did not evaluate at clock 10: the point is left out
            rec(1, 10, 2.1, 0.1, None),
            rec(0, 12, 3.0, 0.6, Some(0.5)),
            rec(1, 12, 3.0, 0.2, Some(0.7)),
            rec(u32::MAX, 12, 9.0, 0.0, Some(0.0)), // a server: ignored
        ];
        let c = curve(&rs, 2);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].clock, 5);
        assert!((c[0].train_s - 1.4).abs() < 1e-12);
        assert!((c[0].objective - 3.0).abs() < 1e-12);
        assert_eq!(c[0].samples, 100);
        assert!((c[1].train_s - 2.8).abs() < 1e-12);
        assert!((c[1].objective - 0.6).abs() < 1e-12);
    }

    #[test]
    fn time_to_target_interpolates_and_reports_misses() {
        let pts = |v: &[(f64, f64)]| -> Vec<CurvePoint> {
            v.iter()
                .enumerate()
                .map(|(i, &(t, o))| CurvePoint {
                    clock: (i as u64 + 1) * 10,
                    train_s: t,
                    samples: (i as u64 + 1) * 100,
                    objective: o,
                    accuracy: None,
                })
                .collect()
        };
        let c = pts(&[(1.0, 3.0), (2.0, 2.0), (3.0, 1.0)]);
        let (t, k, s) = time_to_target(&c, 1.5).unwrap();
        assert!((t - 2.5).abs() < 1e-12 && (k - 25.0).abs() < 1e-12 && (s - 250.0).abs() < 1e-9);
        assert_eq!(time_to_target(&c, 3.5).unwrap().0, 1.0);
        assert!(time_to_target(&c, 0.5).is_none());
        assert_eq!(target_at(&c, 30, 0.5), Some((2.0, 20)));
    }

    #[test]
    fn arms_parse_as_run_commands_and_bad_ones_are_named() {
        let a = ArmSpec::new("x", ["--peers", "3", "--synthetic", "classes=3,features=4"]);
        assert_eq!(a.parse().unwrap().peers, 3);
        assert_eq!(
            a.command(),
            "sfb run --peers 3 --synthetic 'classes=3,features=4'"
        );
        let bad = ArmSpec::new("bad arm", ["--peers", "many"]);
        let e = bad.parse().unwrap_err().to_string();
        assert!(e.contains("bad arm") && e.contains("many"), "{e}");
    }
}
