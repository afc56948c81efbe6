//! An arm's results, a scenario's report and its files.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sfb_core::metrics::{ClockRecord, Summary};
use sfb_plot::{self as plot, BarChart, LineChart, Series};

use super::curve::{CurvePoint, curve, time_to_target};
use super::{Arm, Error, Result, io};

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
    /// Held-out accuracy at the first evaluation at or below the target: what a model at
    /// the target has learned (classifiers).
    pub accuracy_at_target: Option<f64>,
    /// Clocks until the target (interpolated).
    pub clocks_to_target: Option<f64>,
    /// Samples until the target (interpolated).
    pub samples_to_target: Option<f64>,
    /// Training seconds of the whole arm (last evaluation).
    pub train_s: f64,
    /// The shell command that reproduces this arm ([`Arm::command`]).
    pub command: String,
    /// The run's summary (the `sfb run --summary` keys).
    pub summary: Summary,
    /// The learning curve.
    pub curve: Vec<CurvePoint>,
    /// (file name, JSON) of the arm's spec when its command needs the file.
    #[serde(skip)]
    pub spec_file: Option<(String, String)>,
}

impl ArmReport {
    /// `arm`'s report from its run, measuring time to `target`.
    pub fn new(arm: &Arm, summary: Summary, records: &[ClockRecord], target: Option<f64>) -> Self {
        let curve = curve(records, summary.peers);
        let ttt = target.and_then(|t| time_to_target(&curve, t));
        let last = curve.last();
        Self {
            name: arm.name.clone(),
            time_to_target_s: ttt.map(|t| t.0),
            samples_per_s: summary.samples_per_s,
            bytes_per_clock: summary.bytes_per_clock,
            final_objective: last.map(|p| p.objective).or(summary.objective),
            final_accuracy: last.and_then(|p| p.accuracy).or(summary.test_accuracy),
            accuracy_at_target: target
                .and_then(|t| curve.iter().find(|p| p.objective <= t))
                .and_then(|p| p.accuracy),
            clocks_to_target: ttt.map(|t| t.1),
            samples_to_target: ttt.map(|t| t.2),
            train_s: last.map_or(summary.wall_s, |p| p.train_s),
            command: arm.command(),
            spec_file: arm
                .needs_spec_file()
                .then(|| (arm.spec_file(), arm.spec.to_json())),
            summary,
            curve,
        }
    }

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

/// A scenario's results: what `sfb bench` and `sfb demo` write as JSON, CSV, Markdown
/// and PNG.
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
    /// For `fms-vs-sfb` and the demo: FMS time to target ÷ SFB full-broadcast time to
    /// target.
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
    /// Plots to draw when the report is written, (file name, caption, chart).
    #[serde(skip)]
    pub charts: Vec<(String, String, Chart)>,
}

/// A chart of a report, drawn by [`Report::write`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Chart {
    /// Lines.
    Line(LineChart),
    /// Bars.
    Bar(BarChart),
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
            charts: Vec::new(),
        }
    }

    /// The arm named `name`.
    pub fn arm(&self, name: &str) -> Option<&ArmReport> {
        self.arms.iter().find(|a| a.name == name)
    }

    /// FMS time to target ÷ `sfb`'s time to target, when both reached it.
    pub fn speedup_of(&self, sfb: &str, fms: &str) -> Option<f64> {
        let s = self.arm(sfb)?.time_to_target_s?;
        let f = self.arm(fms)?.time_to_target_s?;
        (s > 0.0).then(|| f / s)
    }

    /// Adds a chart drawn into `file` when the report is written.
    pub fn add_chart(&mut self, file: &str, caption: &str, chart: Chart) {
        self.charts.push((file.into(), caption.into(), chart));
    }

    /// The main table (Markdown).
    pub fn table(&self) -> String {
        let mut t = String::from(
            "| arm | time to target (s) | clocks to target | accuracy at target | samples/s | bytes/clock | compute / apply / wait / other (ms per clock) | final objective | final accuracy |\n|---|---:|---:|---:|---:|---:|---|---:|---:|\n",
        );
        for a in &self.arms {
            let [c, ap, w, o] = a.split_per_clock();
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {:.0} | {} | {:.1} / {:.1} / {:.1} / {:.1} | {} | {} |",
                a.name,
                a.time_to_target_s
                    .map_or("not reached".into(), |t| format!("{t:.2}")),
                a.clocks_to_target.map_or("-".into(), |c| format!("{c:.1}")),
                a.accuracy_at_target
                    .map_or("-".into(), |x| format!("{:.1}%", x * 100.0)),
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

    /// The table, sections, speedup and notes as text for a terminal.
    pub fn text(&self) -> String {
        let mut s = format!("\n## {} — {}\n\n", self.scenario, self.title);
        if let Some(t) = self.target_objective {
            let _ = writeln!(
                s,
                "target: held-out objective {t:.4} ({})\n",
                self.target_rule
            );
        }
        s += &self.table();
        for (title, body) in &self.sections {
            let _ = writeln!(s, "\n### {title}\n\n{body}");
        }
        if let Some(x) = self.speedup {
            let _ = writeln!(
                s,
                "\nspeedup (FMS time to target ÷ SFB full broadcast): {x:.2}×"
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "- {n}");
        }
        s
    }

    /// Writes `<scenario>.json`, `<scenario>.csv`, `<scenario>-curves.csv`, the plots,
    /// `<scenario>.md` and the spec files of arms whose command needs one into `dir`;
    /// returns the files written.
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::Csv`] or [`Error::Plot`] for the file that failed.
    pub fn write(&mut self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let name = self.scenario.clone();
        self.standard_plots();
        for (file, caption, chart) in std::mem::take(&mut self.charts) {
            match &chart {
                Chart::Line(c) => plot::line_chart(&dir.join(&file), c)?,
                Chart::Bar(c) => plot::bar_chart(&dir.join(&file), c)?,
            }
            if !self.plots.iter().any(|(f, _)| *f == file) {
                self.plots.push((file, caption));
            }
        }
        let mut written = Vec::new();
        let path = dir.join(format!("{name}.json"));
        let json = serde_json::to_string_pretty(self).expect("a report serializes") + "\n";
        std::fs::write(&path, json).map_err(io(&path))?;
        written.push(path);

        let o = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
        let path = dir.join(format!("{name}.csv"));
        let mut rows = vec![
            [
                "name",
                "time_to_target_s",
                "clocks_to_target",
                "samples_per_s",
                "bytes_per_clock",
                "final_objective",
                "final_accuracy",
                "train_s",
                "wall_s",
                "compute_s",
                "apply_s",
                "wait_s",
                "flush_s",
                "eval_s",
                "peers",
                "out_degree",
                "backend",
                "consistency",
                "max_staleness",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for a in &self.arms {
            let s = &a.summary;
            rows.push(vec![
                a.name.clone(),
                o(a.time_to_target_s),
                o(a.clocks_to_target),
                a.samples_per_s.to_string(),
                a.bytes_per_clock.to_string(),
                o(a.final_objective),
                o(a.final_accuracy),
                a.train_s.to_string(),
                s.wall_s.to_string(),
                s.compute_s.to_string(),
                s.apply_s.to_string(),
                s.wait_s.to_string(),
                s.flush_s.to_string(),
                s.eval_s.to_string(),
                s.peers.to_string(),
                s.out_degree.to_string(),
                s.backend.clone(),
                s.consistency.clone(),
                s.max_staleness.to_string(),
            ]);
        }
        write_csv(&path, &rows)?;
        written.push(path);

        let path = dir.join(format!("{name}-curves.csv"));
        let mut rows = vec![
            [
                "arm",
                "clock",
                "train_s",
                "samples",
                "objective",
                "accuracy",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for a in &self.arms {
            for p in &a.curve {
                rows.push(vec![
                    a.name.clone(),
                    p.clock.to_string(),
                    p.train_s.to_string(),
                    p.samples.to_string(),
                    p.objective.to_string(),
                    o(p.accuracy),
                ]);
            }
        }
        write_csv(&path, &rows)?;
        written.push(path);

        for (file, json) in self.arms.iter().filter_map(|a| a.spec_file.as_ref()) {
            let path = dir.join(file);
            std::fs::write(&path, json.clone() + "\n").map_err(io(&path))?;
            written.push(path);
        }
        let path = dir.join(format!("{name}.md"));
        std::fs::write(&path, self.markdown()).map_err(io(&path))?;
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
        // An index of other reports (the paper scenario's) has no arms of its own.
        if !self.arms.is_empty() {
            m += &self.table();
        }
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
        if !self.arms.is_empty() {
            m += "<details><summary>Arm commands</summary>\n\n";
            for a in &self.arms {
                let _ = writeln!(m, "- {}: `{}`", a.name, a.command);
            }
            m += "\n</details>\n";
        }
        m
    }

    /// Objective vs time and vs samples, bytes per clock, time split.
    fn standard_plots(&mut self) {
        if self.arms.is_empty() {
            return;
        }
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
        let line = |title: &str, x_label: &str, series| {
            Chart::Line(LineChart {
                title: format!("{name}: {title}"),
                x_label: x_label.into(),
                y_label: "held-out objective".into(),
                series,
                log_x: false,
                log_y: false,
                hline: hline.clone(),
                markers: true,
            })
        };
        let cats: Vec<String> = self.arms.iter().map(|a| a.name.clone()).collect();
        let splits: Vec<[f64; 4]> = self.arms.iter().map(ArmReport::split_per_clock).collect();
        let standard = vec![
            (
                format!("{name}-objective-vs-time.png"),
                "held-out objective vs training time",
                line(
                    "held-out objective vs training time",
                    "training time (s, evaluation excluded)",
                    series(&|p| p.train_s),
                ),
            ),
            (
                format!("{name}-objective-vs-samples.png"),
                "held-out objective vs samples processed",
                line(
                    "held-out objective vs samples",
                    "samples processed (all peers)",
                    series(&|p| p.samples as f64),
                ),
            ),
            (
                format!("{name}-bytes-per-clock.png"),
                "bytes sent per clock",
                Chart::Bar(BarChart {
                    title: format!("{name}: bytes sent per clock (all nodes)"),
                    y_label: "bytes per clock".into(),
                    categories: cats.clone(),
                    stacks: vec![(
                        "measured".into(),
                        self.arms.iter().map(|a| a.bytes_per_clock).collect(),
                    )],
                    stacked: false,
                    log_y: true,
                }),
            ),
            (
                format!("{name}-time-split.png"),
                "compute / apply / wait / other per clock",
                Chart::Bar(BarChart {
                    title: format!("{name}: where a peer's time goes"),
                    y_label: "ms per clock (mean peer)".into(),
                    categories: cats,
                    stacks: ["compute", "apply", "wait", "other"]
                        .iter()
                        .enumerate()
                        .map(|(i, n)| (n.to_string(), splits.iter().map(|s| s[i] * 1e3).collect()))
                        .collect(),
                    stacked: true,
                    log_y: false,
                }),
            ),
        ];
        // The scenario's own charts come first, as they always have in `plots`.
        self.charts.extend(
            standard
                .into_iter()
                .map(|(f, c, chart)| (f, c.to_string(), chart)),
        );
    }
}

fn write_csv(path: &Path, rows: &[Vec<String>]) -> Result<()> {
    let err = |source| Error::Csv {
        path: path.to_path_buf(),
        source,
    };
    let mut w = csv::Writer::from_path(path).map_err(err)?;
    for r in rows {
        w.write_record(r).map_err(err)?;
    }
    w.flush().map_err(io(path))
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
