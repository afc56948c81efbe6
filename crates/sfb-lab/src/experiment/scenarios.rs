//! The training scenarios of `sfb bench` and the arms of `sfb demo`, as functions from
//! options to a [`Report`].

use std::fmt::Write as _;

use sfb_core::metrics::ClockRecord;
use sfb_net::bandwidth::Rate;
use sfb_plot::{BarChart, LineChart, Series};

use super::paper::{PaperModel, claim};
use super::report::Chart;
use super::{Arm, ArmReport, Error, Report, Result, Runner, curve, human_bytes, target_at};
use sfb_harness::{
    Backend, ConsistencySpec, DataSource, ModelChoice, PrioritizeSpec, RunSpec, StragglerSpec,
    Transport,
};

/// The training scenarios.
pub const SCENARIOS: &[&str] = &[
    "fms-vs-sfb",
    "q-sweep",
    "staleness",
    "scaling",
    "model-size",
    "optimizers",
    "adarevision",
    "saga",
    "compression",
    "prioritization",
    "scale",
    "stragglers",
    "essp",
    "batch",
    "overlap",
    "managed",
    "rate-change",
];

/// Options of the training scenarios (`None`: the scenario's default).
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Transport of the arms (mem has no bandwidth budget). Default libp2p.
    pub transport: Transport,
    /// Peers (fms-vs-sfb 8, q-sweep 12, staleness 4, scaling up to 8, model-size 4).
    pub peers: Option<usize>,
    /// J = D of the MLR model (fms-vs-sfb 4096, others 1024).
    pub size: Option<usize>,
    /// model-size: the J = D values (256, 512, 1024, 2048).
    pub sizes: Option<Vec<usize>>,
    /// Clocks per arm (scaling: clocks at P = 1; P peers run clocks/P).
    pub clocks: Option<u64>,
    /// The target is the reference arm's held-out objective at this fraction of its clocks.
    pub target_frac: Option<f64>,
    /// Evaluate every this many clocks, replacing the scenario's cadence (0: only at the
    /// end; then no arm has a curve to reach a target on). For timing the training alone:
    /// co-located processes evaluating between clocks hide their waits for each other in
    /// the evaluations, so wall time less evaluation time is not the training time.
    pub eval_every: Option<u64>,
    /// staleness: the straggler's extra milliseconds per step (40).
    pub straggler_ms: Option<u64>,
    /// Bandwidth budget per node over libp2p, e.g. `1gbit` (the default); `none` for none.
    /// With the sim transport: every node's NIC rate.
    pub bandwidth: Option<String>,
    /// The simulated network and machine of arms on the sim transport (and of the scale
    /// scenario, always simulated).
    pub sim: sfb_harness::sim::SimOptions,
    /// fms-vs-sfb, compression, model-size: their partial-broadcast arms train on this
    /// topology file (any format `sfb topology` writes) instead of the optimizer's graph;
    /// P and Q are the file's (`peers`, if set, must agree).
    pub topology: Option<std::path::PathBuf>,
    /// q-sweep, scale: the partial-broadcast arms' mode (`--partial`; none: the default).
    pub partial: Option<sfb_harness::PartialSpec>,
    /// The paper's figures (model-size, batch, scaling, staleness, q-sweep): the model
    /// they train ([`MODEL_SCENARIOS`]; the others train MLR).
    pub model: PaperModel,
    /// Fewer arms and clocks (`--quick`): the paper's figures in minutes.
    pub quick: bool,
    /// q-sweep: also run the paper's literal partial broadcast (`--partial paper`) at
    /// each Q, beside the default mode (the `paper` scenario's Fig. 9).
    pub literal_beside: bool,
}

/// The scenarios that train [`Options::model`].
pub const MODEL_SCENARIOS: &[&str] = &["model-size", "batch", "scaling", "staleness", "q-sweep"];

/// The scenarios whose partial-broadcast arms take [`Options::topology`].
pub const TOPOLOGY_SCENARIOS: &[&str] = &["fms-vs-sfb", "compression", "model-size"];

impl Default for Options {
    fn default() -> Self {
        Self {
            transport: Transport::Libp2p,
            peers: None,
            size: None,
            sizes: None,
            clocks: None,
            target_frac: None,
            eval_every: None,
            straggler_ms: None,
            bandwidth: None,
            sim: sfb_harness::sim::SimOptions::default(),
            topology: None,
            partial: None,
            model: PaperModel::Mlr,
            quick: false,
            literal_beside: false,
        }
    }
}

impl Options {
    /// The budget in words: `bandwidth`, or 1gbit.
    pub fn bandwidth(&self) -> &str {
        self.bandwidth.as_deref().unwrap_or("1gbit")
    }

    pub(super) fn rate(&self) -> Result<Option<Rate>> {
        let bw = self.bandwidth();
        if self.transport == Transport::Mem || bw.is_empty() || bw == "none" {
            return Ok(None);
        }
        bw.parse().map(Some).map_err(|e: String| Error::Option {
            option: "bandwidth",
            expected: "a rate such as 1gbit or none",
            got: e,
        })
    }

    /// Peers and partial-broadcast out-degree of a scenario whose defaults are
    /// `default_p` and `q_of(P)`: the topology file's when one is given (refused if
    /// `peers` disagrees), else `peers` or the default.
    fn peers_and_q(
        &self,
        default_p: usize,
        q_of: impl Fn(usize) -> usize,
    ) -> Result<(usize, usize)> {
        let Some(path) = &self.topology else {
            let p = self.peers.unwrap_or(default_p);
            return Ok((p, q_of(p)));
        };
        let t = sfb_topology::Topology::read_file(path).map_err(|e| Error::Option {
            option: "topology",
            expected: "a topology file sfb topology wrote (TOML, JSON or DOT)",
            got: e.to_string(),
        })?;
        if let Some(why) = t.disagreement(self.peers, None) {
            return Err(Error::Option {
                option: "peers",
                expected: "the --topology file's peer count",
                got: format!("{}: {why}", path.display()),
            });
        }
        Ok((t.peers(), t.out_degree()))
    }

    /// Makes `spec` a partial-broadcast arm of out-degree `q`: on the topology file if
    /// one is given, else on the optimizer's graph.
    fn partial(&self, spec: &mut RunSpec, q: usize) {
        match &self.topology {
            Some(path) => spec.topology.file = Some(path.clone()),
            None => spec.topology.out_degree = Some(q),
        }
    }

    /// `model`'s problem ([`PaperModel::problem`]) at size `n`; under `--quick`, L2-MLR
    /// trains on at most 2,048 samples (its evaluations, the primal and the dual
    /// certificate over the whole training set, were half of the quick paper run at
    /// 8,192).
    pub(super) fn problem(
        &self,
        model: PaperModel,
        n: usize,
        samples: usize,
        test: usize,
    ) -> RunSpec {
        let samples = match model {
            PaperModel::L2mlr if self.quick => samples.min(2_048),
            _ => samples,
        };
        model.problem(n, samples, test)
    }

    pub(super) fn frac(&self, default: f64) -> f64 {
        self.target_frac.unwrap_or(default)
    }

    /// Transport, budget, clocks and evaluation cadence set on `spec`.
    pub(super) fn common(
        &self,
        mut spec: RunSpec,
        peers: usize,
        clocks: u64,
        eval_every: u64,
    ) -> Result<RunSpec> {
        spec.transport = self.transport;
        spec.net.bandwidth = self.rate()?;
        if self.transport == Transport::Sim {
            spec.sim = self.sim.clone();
        }
        spec.peers = peers;
        spec.train.clocks = clocks;
        // Quick: about six evaluations a run (they dominate the small runs' time).
        let cadence = if self.quick {
            eval_every.max(clocks / 6)
        } else {
            eval_every
        };
        spec.train.eval_every = self.eval_every.unwrap_or(cadence);
        Ok(spec)
    }
}

/// The data of [`mlr`] and of `sfb demo`: `j` classes of Gaussian blobs in `d` features
/// (centres of rank 16, `blobs=0.3`), so a model learns visibly within a few dozen clocks
/// at any `J` (a class is learnable from a handful of its samples), unlike a random linear
/// teacher over thousands of classes, which no scenario's budget of samples could learn
/// (the teacher data measured 1.2% accuracy at 4096 classes).
pub fn blobs(j: usize, d: usize, samples: usize, test: usize) -> String {
    format!("classes={j},features={d},samples={samples},test={test},rank=16,blobs=0.3")
}

/// A synthetic MLR problem of `j` classes and `d` features (`blobs`) and its run
/// options: batch `K=16`, seed 2016, and the defaults of `sfb run` for everything else
/// (optimizer, its step size from the data, feature scaling).
pub fn mlr(j: usize, d: usize, samples: usize, test: usize) -> RunSpec {
    let mut spec = RunSpec {
        model: ModelChoice::Mlr,
        data: DataSource::Synthetic(blobs(j, d, samples, test)),
        ..RunSpec::default()
    };
    spec.train.batch = 16;
    spec.train.seed = 2016;
    spec
}

/// Runs every arm in turn, saying which; their summaries and per-clock records.
///
/// # Errors
/// The first arm that fails.
fn run_each(
    runner: &Runner,
    arms: &[Arm],
) -> Result<Vec<(sfb_core::metrics::Summary, Vec<ClockRecord>)>> {
    let mut runs = Vec::new();
    for (i, a) in arms.iter().enumerate() {
        runner.say(&format!(
            "[{}/{}] {}: {}",
            i + 1,
            arms.len(),
            a.name,
            a.command()
        ));
        runs.push(runner.run(a)?);
    }
    Ok(runs)
}

/// Runs `arms`, takes the target from `reference` (an index into `arms`) at `frac` of its
/// clocks, and fills `report`'s target and arms; returns every arm's per-clock records.
///
/// # Errors
/// The first arm that fails, by name.
pub fn run_arms(
    runner: &Runner,
    report: &mut Report,
    arms: &[Arm],
    reference: usize,
    frac: f64,
) -> Result<Vec<Vec<ClockRecord>>> {
    let runs = run_each(runner, arms)?;
    let (ref_summary, ref_records) = &runs[reference];
    let ref_curve = curve(ref_records, ref_summary.peers);
    let target = target_at(&ref_curve, ref_summary.clocks, frac);
    if let Some((t, clock)) = target {
        report.target_objective = Some(t);
        report.target_rule = format!(
            "the held-out objective arm \"{}\" reached at clock {clock}, the first evaluation at or after {:.0}% of its {} clocks",
            arms[reference].name,
            frac * 100.0,
            ref_summary.clocks
        );
    }
    let mut all = Vec::new();
    for (arm, (summary, records)) in arms.iter().zip(runs) {
        report
            .arms
            .push(ArmReport::new(arm, summary, &records, target.map(|t| t.0)));
        all.push(records);
    }
    Ok(all)
}

/// `sfb demo`'s options.
#[derive(Debug, Clone, PartialEq)]
pub struct Demo {
    /// Peers P (≥ 2).
    pub peers: usize,
    /// Out-degree Q of the partial-broadcast arm (1 ..= P − 2).
    pub out_degree: usize,
    /// Clocks per arm (≥ 4).
    pub clocks: u64,
    /// Bandwidth budget of every node over libp2p.
    pub bandwidth: Rate,
    /// Transport.
    pub transport: Transport,
}

impl Demo {
    /// The arms: SFB full broadcast, SFB partial broadcast, FMS.
    ///
    /// # Errors
    /// [`Error::Option`] for peers, out-degree or clocks out of range.
    pub fn arms(&self) -> Result<Vec<Arm>> {
        let p = self.peers;
        let bad = |option, expected, got: String| {
            Err(Error::Option {
                option,
                expected,
                got,
            })
        };
        if p < 2 {
            return bad("peers", "at least 2 for a cluster", p.to_string());
        }
        if self.out_degree == 0 || self.out_degree >= p - 1 {
            return bad(
                "out_degree",
                "between 1 and P−2 for a partial broadcast",
                self.out_degree.to_string(),
            );
        }
        if self.clocks < 4 {
            return bad("clocks", "at least 4", self.clocks.to_string());
        }
        let mut base = RunSpec {
            transport: self.transport,
            peers: p,
            ..mlr(256, 1024, 24000, 1000)
        };
        base.train.clocks = self.clocks;
        base.train.eval_every = (self.clocks / 20).max(1);
        if self.transport == Transport::Libp2p {
            base.net.bandwidth = Some(self.bandwidth);
        }
        let mut partial = base.clone();
        partial.topology.out_degree = Some(self.out_degree);
        let mut fms = base.clone();
        fms.backend = Backend::Fms;
        Ok(vec![
            Arm::new(format!("SFB full broadcast (Q={})", p - 1), base),
            Arm::new(
                format!("SFB partial (Q={}, optimized)", self.out_degree),
                partial,
            ),
            Arm::new("FMS parameter server", fms),
        ])
    }

    /// The budget in words.
    pub fn budget(&self) -> String {
        if self.transport == Transport::Libp2p {
            format!("{} per node", super::arm::rate_text(self.bandwidth.0))
        } else {
            "no bandwidth budget (in-memory)".into()
        }
    }
}

/// `sfb demo`: SFB full vs partial broadcast vs FMS on built-in data, same model, seed
/// and budget; the target is full broadcast's objective at 40% of its clocks.
///
/// # Errors
/// [`Demo::arms`]' errors, then the first arm that fails.
pub fn demo(opts: &Demo, runner: &Runner) -> Result<Report> {
    let arms = opts.arms()?;
    let mut report = Report::new(
        "demo",
        &format!(
            "P={}, MLR J=256 D=1024, K=16, BSP, {}: SFB full vs partial (Q={}) vs FMS",
            opts.peers,
            opts.budget(),
            opts.out_degree
        ),
    );
    run_arms(runner, &mut report, &arms, 0, 0.4)?;
    report.speedup = report.speedup_of(&arms[0].name, &arms[2].name);
    if let Some(note) = learned_note(&report, Some(256)) {
        report.notes.push(note);
    }
    report.notes.push(
        "Under BSP, SFB full broadcast and FMS apply the same updates in the same order: their objective-vs-samples curves coincide (checksums equal); only their time differs."
            .into(),
    );
    if mode_ran(&report, None) == sfb_harness::PartialSpec::Tree {
        report.notes.push(
            "Partial broadcast here ran in the tree mode, the default at these shapes (its modelled clock is at most half of full broadcast's): every peer's batch is summed up a tree of fan-out Q and the sum comes back down, so every replica applies the same update."
                .into(),
        );
    } else {
        report.notes.push(
        "Partial broadcast here is the default gossip mode: each replica applies its own and its in-neighbours' updates, weighted so the replicas' mean moves as full broadcast's, and a small consensus message per link (⌊3K/16⌋ pairs) pulls the replicas together; it sends Q/(P−1) of full broadcast's bytes and up to 3/16 more, and its replicas differ by a disagreement the consensus keeps small (`max_replica_divergence`)."
            .into(),
    );
    }
    Ok(report)
}

/// What the first arm's model has learned, measured: its held-out accuracy at the target
/// and at the end, against chance (`1/classes`).
fn learned_note(report: &Report, classes: Option<usize>) -> Option<String> {
    let classes = classes?;
    let a = report.arms.first()?;
    let end = a.final_accuracy?;
    let at = a.accuracy_at_target.map_or(String::new(), |x| {
        format!("{:.1}% at the target, ", x * 100.0)
    });
    Some(format!(
        "What the model learned: arm \"{}\" classifies {at}{:.1}% of the held-out samples at the end (chance: {:.2}% over {classes} classes).",
        a.name,
        end * 100.0,
        100.0 / classes as f64
    ))
}

/// SFB full vs SFB partial (Q = 3) vs FMS at J = D = 4096: the paper's headline speedup.
///
/// # Errors
/// The first arm that fails.
pub fn fms_vs_sfb(opts: &Options, runner: &Runner) -> Result<Report> {
    let Headline { p, n, q, base } = Headline::of(opts)?;
    let mut report = Report::new(
        "fms-vs-sfb",
        &format!(
            "P={p}, MLR J=D={n}, K=16, BSP, {} per node: SFB full vs SFB partial (Q={q}) vs FMS",
            opts.bandwidth()
        ),
    );
    let full = format!("SFB full (Q={})", p - 1);
    let mut partial = base.clone();
    opts.partial(&mut partial, q);
    let mut fms = base.clone();
    fms.backend = Backend::Fms;
    let arms = [
        Arm::new(&full, base),
        Arm::new(format!("SFB partial (Q={q})"), partial),
        Arm::new("FMS", fms),
    ];
    run_arms(runner, &mut report, &arms, 0, opts.frac(0.3))?;
    report.speedup = report.speedup_of(&full, "FMS");
    explain(&mut report, opts, n, p)?;
    report.notes.push(match report.speedup {
        Some(s) if s >= 5.0 => format!(
            "SFB full broadcast reached the target {s:.2}× sooner than FMS (goal ≥ 5×; the paper reports 4.4× on 28 machines)."
        ),
        Some(s) => format!(
            "SFB full broadcast reached the target only {s:.2}× sooner than FMS (goal ≥ 5×); see the breakdown."
        ),
        None => "an arm did not reach the target: no speedup measured".into(),
    });
    Ok(report)
}

/// `--scenario compression` (issue 16): SFB full broadcast as it is vs re-compressed to
/// rank 8 and 4 with error feedback (`--compress rank:R`), and partial broadcast (Q=3)
/// without and with relay (`--relay`), each also with rank 4, relay whose forwarders
/// re-compress to rank 4 (`--relay-compress rank:4`, gossip with compression), and full
/// broadcast with aggregated apply (`--aggregate rank:16`); bytes per clock, apply time,
/// time to the full-broadcast arm's target.
///
/// # Errors
/// The first arm that fails.
pub fn compression(opts: &Options, runner: &Runner) -> Result<Report> {
    let Headline { p, n, q, base } = Headline::of(opts)?;
    let mut report = Report::new(
        "compression",
        &format!(
            "P={p}, MLR J=D={n}, K=16, BSP, {} per node: full broadcast vs low-rank \
             re-compression (error feedback) vs partial broadcast",
            opts.bandwidth()
        ),
    );
    let with = |q: Option<usize>, rank: Option<usize>, relay: bool| {
        let mut s = base.clone();
        if let Some(q) = q {
            opts.partial(&mut s, q);
        }
        s.net.compress = rank.map(|rank| sfb_harness::CompressSpec { rank });
        s.net.relay = relay;
        s
    };
    let full = format!("full (Q={})", p - 1);
    let arms = [
        Arm::new(&full, with(None, None, false)),
        Arm::new("full, rank 8", with(None, Some(8), false)),
        Arm::new("full, rank 4", with(None, Some(4), false)),
        Arm::new(format!("partial (Q={q})"), with(Some(q), None, false)),
        Arm::new(
            format!("partial (Q={q}), rank 4"),
            with(Some(q), Some(4), false),
        ),
        Arm::new("full, aggregated apply rank 16", {
            let mut s = with(None, None, false);
            s.net.aggregate = Some(sfb_harness::CompressSpec { rank: 16 });
            s
        }),
        Arm::new(format!("partial (Q={q}), relay"), with(Some(q), None, true)),
        Arm::new(
            format!("partial (Q={q}), relay, rank 4"),
            with(Some(q), Some(4), true),
        ),
        Arm::new(format!("partial (Q={q}), relay forwarding rank 4"), {
            let mut s = with(Some(q), None, true);
            s.net.relay_compress = Some(sfb_harness::CompressSpec { rank: 4 });
            s
        }),
    ];
    run_arms(runner, &mut report, &arms, 0, opts.frac(0.3))?;
    explain(&mut report, opts, n, p)?;
    report.notes.push(coverage_note(&report));
    Ok(report)
}

/// What share of the updates each arm's replicas applied, and what relay forwarded.
fn coverage_note(report: &Report) -> String {
    let arms: Vec<String> = report
        .arms
        .iter()
        .filter_map(|a| {
            let c = a.summary.update_coverage?;
            Some(format!(
                "{} {:.0}%{}",
                a.name,
                100.0 * c,
                if a.summary.relayed_batches > 0 {
                    format!(
                        " ({} batches relayed, {:.1} per peer and clock)",
                        a.summary.relayed_batches,
                        a.summary.relayed_batches as f64
                            / (a.summary.peers.max(1) as f64 * a.summary.clocks.max(1) as f64)
                    )
                } else {
                    String::new()
                }
            ))
        })
        .collect();
    format!(
        "Share of all the run's updates the replica that saw the fewest applied \
         (`update_coverage`): {}. Relay forwards each batch along its origin's shortest-path \
         tree, so a replica applies it as many clocks late as it is hops away; the bytes per \
         clock are those of full broadcast, over Q connections per peer.",
        arms.join("; ")
    )
}

/// The headline setting of `fms-vs-sfb` and `compression`: P peers (8), MLR J = D = n
/// (4096) on blob data, 40 clocks, and the partial-broadcast out-degree Q (3).
struct Headline {
    p: usize,
    n: usize,
    q: usize,
    base: RunSpec,
}

impl Headline {
    fn of(opts: &Options) -> Result<Self> {
        let (p, q) = opts.peers_and_q(8, |p| 3.min(p.saturating_sub(2)).max(1))?;
        let n = opts.size.unwrap_or(4096);
        Ok(Self {
            p,
            n,
            q,
            base: opts.common(mlr(n, n, 8192, 256), p, opts.clocks.unwrap_or(40), 4)?,
        })
    }
}

/// What the model learned and where the time goes (the [`breakdown`] table), for a
/// report on an n × n MLR with `p` peers.
fn explain(report: &mut Report, opts: &Options, n: usize, p: usize) -> Result<()> {
    if let Some(note) = learned_note(report, Some(n)) {
        report.notes.push(note);
    }
    let rate = opts.rate()?;
    report.sections.push((
        "Where the time goes".into(),
        breakdown(report, rate, n, n, p),
    ));
    Ok(())
}

/// Per clock and peer: where the time goes, and what the budget alone would cost.
fn breakdown(report: &Report, rate: Option<Rate>, j: usize, d: usize, p: usize) -> String {
    let mut m = String::from(
        "| arm | ms per clock | compute | apply | wait | other | eval (excluded) | bytes sent per clock by the busiest node | at the budget |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for a in &report.arms {
        let s = &a.summary;
        let c = s.clocks.max(1) as f64;
        let [comp, app, wait, other] = a.split_per_clock();
        // The busiest sender: the FMS server sends W to every client; an SFB peer sends its
        // factors to Q peers.
        let busiest = if s.backend == "fms" {
            (p * j * d * 4) as f64
        } else {
            // Measured (framing included; what compression changes).
            s.bytes_per_clock_per_peer
        };
        let _ = writeln!(
            m,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} |",
            a.name,
            a.train_s / c * 1e3,
            comp * 1e3,
            app * 1e3,
            wait * 1e3,
            other * 1e3,
            s.eval_s / c * 1e3,
            human_bytes(busiest),
            rate.map_or("-".into(), |r| format!("{:.0} ms", busiest / r.0 * 1e3)),
        );
    }
    m += "\ncompute/apply/wait/other are means over peers (FMS: over clients); `other` is training time not in the three (framing, queues, decoding W on FMS clients). \"at the budget\" is the busiest node's bytes per clock divided by the bandwidth budget: a lower bound on a clock's duration set by the network alone.\n";
    m
}

pub(super) fn line(
    title: String,
    x_label: &str,
    y_label: &str,
    series: Vec<Series>,
    log: bool,
    hline: Option<(f64, String)>,
) -> Chart {
    Chart::Line(LineChart {
        title,
        x_label: x_label.into(),
        y_label: y_label.into(),
        series,
        log_x: log,
        log_y: log,
        hline,
        markers: true,
    })
}

/// SFB with every out-degree Q = 1 … P − 1: time to target and final objective vs Q.
///
/// # Errors
/// The first arm that fails.
pub fn q_sweep(opts: &Options, runner: &Runner) -> Result<Report> {
    let p = opts.peers.unwrap_or(if opts.quick { 8 } else { 12 });
    let n = opts.size.unwrap_or(1024);
    let clocks = opts.clocks.unwrap_or(60);
    let literal = opts.literal_beside && opts.partial != Some(sfb_harness::PartialSpec::Paper);
    let mut report = Report::new(
        "q-sweep",
        &format!(
            "P={p}, Q=1..{}, {}, K=16, BSP, {} per peer{}",
            p - 1,
            opts.model.describe(n),
            opts.bandwidth(),
            if literal {
                ", the default partial-broadcast mode with the paper's literal mode beside it"
            } else {
                ""
            }
        ),
    );
    let base = opts.common(opts.problem(opts.model, n, 24000, 500), p, clocks, 5)?;
    let arm = |q: usize, relay: bool| {
        let mut s = base.clone();
        s.topology.out_degree = Some(q);
        s.net.relay = relay;
        if !relay && q + 1 < p {
            s.net.partial = opts.partial;
        }
        Arm::new(format!("Q={q}{}", if relay { " relay" } else { "" }), s)
    };
    let literal_arm = |q: usize| {
        let mut s = base.clone();
        s.topology.out_degree = Some(q);
        s.net.partial = Some(sfb_harness::PartialSpec::Paper);
        Arm::new(format!("Q={q} paper"), s)
    };
    // Full broadcast first: it is the reference. Then partial broadcast without relay,
    // and with it (Q = P − 1 relays nothing). Above 16 peers (the simulator's scale):
    // Q = 1, 2, 4, 8, … and P − 1, without relay (every relayed replica applies all
    // P·K pairs a clock, full broadcast's work, at every Q).
    let qs: Vec<usize> = if opts.quick {
        let mut v: Vec<usize> = [1, 2, 4].into_iter().filter(|&q| q + 1 < p).collect();
        v.push(p - 1);
        v
    } else if p <= 16 {
        (1..p).collect()
    } else {
        let mut v: Vec<usize> = std::iter::successors(Some(1usize), |q| Some(q * 2))
            .take_while(|&q| q < p - 1)
            .collect();
        v.push(p - 1);
        v
    };
    let mut arms: Vec<Arm> = qs.iter().rev().map(|&q| arm(q, false)).collect();
    if literal {
        arms.extend(qs.iter().filter(|&&q| q + 1 < p).map(|&q| literal_arm(q)));
    }
    if p <= 16 && !opts.quick {
        arms.extend((1..p.saturating_sub(1)).map(|q| arm(q, true)));
    }
    run_arms(runner, &mut report, &arms, 0, opts.frac(0.25))?;
    if let Some(note) = learned_note(&report, opts.model.classes(n)) {
        report.notes.push(note);
    }
    let relayed = |a: &ArmReport| a.summary.relayed_batches > 0 || a.name.ends_with("relay");
    // Partial arms by Q (full broadcast last), then the paper-mode arms, then the relay
    // arms.
    report
        .arms
        .sort_by_key(|a| (relayed(a), is_literal(a), a.summary.out_degree));
    // Arms of one kind (0: the default mode, 1: relay, 2: the paper's literal mode), and
    // full broadcast, which ends every line.
    let kind = |a: &ArmReport| match (relayed(a), is_literal(a)) {
        (true, _) => 1,
        (_, true) => 2,
        _ => 0,
    };
    let pts = |want: u8, f: &dyn Fn(&ArmReport) -> Option<f64>| -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = report
            .arms
            .iter()
            .filter(|a| kind(a) == want || a.summary.out_degree + 1 == p)
            .filter_map(|a| f(a).map(|y| (a.summary.out_degree as f64, y)))
            .collect();
        // By Q: full broadcast (Q = P − 1) ends both lines, wherever its arm sorts.
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let two = |f: &dyn Fn(&ArmReport) -> Option<f64>| {
        [
            (0, "partial broadcast"),
            (1, "partial broadcast with relay"),
            (2, "the paper's literal mode"),
        ]
        .into_iter()
        .filter(|&(k, _)| report.arms.iter().any(|a| kind(a) == k))
        .map(|(k, name)| Series {
            name: name.into(),
            points: pts(k, f),
        })
        .collect::<Vec<_>>()
    };
    let (ttt, fin) = (two(&|a| a.time_to_target_s), two(&|a| a.final_objective));
    let hline = report
        .target_objective
        .map(|t| (t, format!("target {t:.4}")));
    report.add_chart(
        "q-sweep-time-to-target.png",
        "time to target vs Q",
        line(
            format!("q-sweep: time to target vs out-degree Q (P={p})"),
            "out-degree Q",
            "time to target (s)",
            ttt,
            false,
            None,
        ),
    );
    report.add_chart(
        "q-sweep-final-objective.png",
        "final objective vs Q",
        line(
            format!("q-sweep: final held-out objective vs Q (P={p}, {clocks} clocks)"),
            "out-degree Q",
            "final held-out objective (mean over peers)",
            fin,
            false,
            hline,
        ),
    );
    let full = report
        .arms
        .iter()
        .find(|a| a.summary.out_degree + 1 == p && !relayed(a));
    if let Some(f) = full.and_then(|a| a.final_objective) {
        let close: Vec<String> = report
            .arms
            .iter()
            .filter(|a| {
                a.final_objective
                    .is_some_and(|o| (o - f).abs() <= 0.01 * f.abs())
            })
            .map(|a| a.name.clone())
            .collect();
        report.notes.push(format!(
            "final objective within 1% of full broadcast: {}",
            close.join(", ")
        ));
    }
    let ran = mode_ran(&report, opts.partial);
    if let Some(full_t) = full.and_then(|a| a.time_to_target_s) {
        let mode = ran;
        let verdict = claim_verdict(&report, full_t, p, Some(mode), false);
        report.notes.push(verdict.clone());
        if report.arms.iter().any(relayed) {
            report
                .notes
                .push(claim_verdict(&report, full_t, p, None, false));
        }
        if literal {
            report.notes.push(claim_verdict(
                &report,
                full_t,
                p,
                Some(sfb_harness::PartialSpec::Paper),
                true,
            ));
        }
        let here = verdict
            .split_once(": ")
            .map_or(verdict.as_str(), |(_, v)| v);
        claim(&mut report, "Fig. 9", format!("in the {mode} mode, {here}"));
    } else {
        claim(
            &mut report,
            "Fig. 9",
            "not checked: full broadcast did not reach the target.".into(),
        );
    }
    let without = match ran {
        sfb_harness::PartialSpec::Gossip => {
            "Without relay (the default gossip mode) each replica applies its own and its in-neighbours' updates, weighted, and a consensus message of ⌊3K/16⌋ pairs per link pulls the replicas together; they differ by what the consensus has not yet removed (max divergence in the JSON) and the objective is the mean over peers."
        }
        sfb_harness::PartialSpec::Tree => {
            "Without relay the arms ran in the tree mode (--partial tree): the peers form a tree of fan-out Q, every peer's batch is summed up it, compressed to K pairs per link with error feedback, and the sum comes back down, so every replica applies the same update; a clock costs 2·⌈log_Q P⌉ hops, and an inner peer sends K pairs to each of its Q children."
        }
        sfb_harness::PartialSpec::Paper => {
            "Without relay the arms ran in the paper's mode (--partial paper): each replica applies its own and its in-neighbours' updates, nothing more, so the replicas drift apart (max divergence in the JSON) and the objective is the mean over peers."
        }
    };
    report.notes.push(format!("{without} With relay every replica applies every update, as many clocks late as it is hops from its origin, and sends the bytes of full broadcast over Q connections."));
    Ok(report)
}

/// An arm of the paper's literal mode run beside the default one (`Options::literal_beside`).
fn is_literal(a: &ArmReport) -> bool {
    a.name.ends_with(" paper")
}

/// The partial-broadcast mode a report's arms ran: `named`, or the one each run took when
/// none was named (`sfb_harness::auto`; a tree names itself in its arms' topology).
fn mode_ran(report: &Report, named: Option<sfb_harness::PartialSpec>) -> sfb_harness::PartialSpec {
    let tree = report.arms.iter().any(|a| {
        a.summary.topology.as_ref().is_some_and(|t| match &t.mode {
            Some(m) => m == "tree",
            // A summary of a version before `mode`.
            None => t.source.starts_with("tree of fan-out"),
        })
    });
    if tree {
        sfb_harness::PartialSpec::Tree
    } else {
        named.unwrap_or_default()
    }
}

/// The paper's claim, checked on the partial-broadcast arms of a q-sweep without relay
/// (in `mode`) or with it (`None`): Q ≥ 4 within 10% of full broadcast's time to target
/// (`full_t`).
fn claim_verdict(
    report: &Report,
    full_t: f64,
    p: usize,
    mode: Option<sfb_harness::PartialSpec>,
    literal: bool,
) -> String {
    let relay = mode.is_none();
    let why = match mode {
        None => {
            " Relay sends full broadcast's bytes and applies every pair, so its clocks \
             cost what full broadcast's do; what it adds is staleness (a batch h hops \
             away is applied h − 1 clocks late)."
        }
        Some(sfb_harness::PartialSpec::Gossip) => {
            " A gossip replica applies (Q + 1)/P of the batches a clock, weighted, so it \
             needs more clocks than full broadcast; its clocks cost Q/(P − 1) of the \
             bytes and apply work plus the consensus's (⌊3K/16⌋ pairs a link, at most full \
             broadcast's bytes)."
        }
        Some(sfb_harness::PartialSpec::Tree) => {
            " A tree clock applies a rank-K form of the sum of all P·K pairs (the rest \
             comes in later clocks), so it needs more clocks than full broadcast where that \
             sum's rank is above K; a clock costs 2·⌈log_Q P⌉ hops, and an inner peer sends \
             K pairs to each of its Q children."
        }
        Some(sfb_harness::PartialSpec::Paper) => {
            " A paper-mode replica applies its own and its in-neighbours' batches only, so \
             the replicas drift apart and it needs more clocks than full broadcast, if it \
             reaches the target at all."
        }
    };
    let full_c = report
        .arms
        .iter()
        .find(|a| a.summary.out_degree + 1 == p && a.summary.relayed_batches == 0)
        .and_then(|a| a.clocks_to_target);
    let mode = match mode {
        None => "with relay".to_string(),
        Some(m) => format!("in the {m} mode"),
    };
    let arms: Vec<&ArmReport> = report
        .arms
        .iter()
        .filter(|a| {
            let relayed = a.summary.relayed_batches > 0 || a.name.ends_with("relay");
            relayed == relay
                && is_literal(a) == literal
                && a.summary.out_degree >= 4
                && a.summary.out_degree + 1 < p
        })
        .collect();
    if arms.is_empty() {
        return format!(
            "The paper's claim \"Q ≥ 4 is close to full broadcast\" is not checked {mode} at \
             P={p}: no such arm has 4 ≤ Q < P − 1."
        );
    }
    let within = |x: Option<f64>, of: f64| x.is_some_and(|x| x <= 1.1 * of);
    let verdict = |ok: bool| {
        if ok && !arms.is_empty() {
            "holds"
        } else {
            "does not hold"
        }
    };
    let pct = |x: f64, of: f64| format!("{:+.0}%", 100.0 * (x / of - 1.0));
    let times: Vec<String> = arms
        .iter()
        .map(|a| match a.time_to_target_s {
            Some(t) => format!("Q={} {t:.2} s ({})", a.summary.out_degree, pct(t, full_t)),
            None => format!("Q={} never", a.summary.out_degree),
        })
        .collect();
    let mut text = format!(
        "The paper's claim \"Q ≥ 4 is close to full broadcast\", {mode} at P={p}, in time \
         to the target: {} at 10% of full broadcast's {full_t:.2} s: {}.",
        verdict(arms.iter().all(|a| within(a.time_to_target_s, full_t))),
        times.join(", ")
    );
    if let Some(fc) = full_c {
        let clocks: Vec<String> = arms
            .iter()
            .filter_map(|a| {
                let c = a.clocks_to_target?;
                Some(format!(
                    "Q={} {c:.1} ({})",
                    a.summary.out_degree,
                    pct(c, fc)
                ))
            })
            .collect();
        let never: Vec<String> = arms
            .iter()
            .filter(|a| a.clocks_to_target.is_none())
            .map(|a| format!("Q={} never", a.summary.out_degree))
            .collect();
        text += &format!(
            " In clocks to the target (which no machine's load moves): {} against {fc:.1}: {}.{}",
            verdict(arms.iter().all(|a| within(a.clocks_to_target, fc))),
            [clocks, never].concat().join(", "),
            why
        );
    }
    text
}

/// One straggling peer (rotating or fixed), SSP staleness s ∈ {0, 1, 2, 4, 8}, SFB full vs
/// FMS.
///
/// # Errors
/// The first arm that fails.
pub fn staleness(opts: &Options, runner: &Runner) -> Result<Report> {
    let p = opts.peers.unwrap_or(4);
    let n = opts.size.unwrap_or(1024);
    let delay = opts.straggler_ms.unwrap_or(40);
    let bounds: &[u64] = if opts.quick {
        &[0, 2, 8]
    } else {
        &[0, 1, 2, 4, 8]
    };
    let mut report = Report::new(
        "staleness",
        &format!(
            "P={p}, {}, K=16, {} per node, one straggling peer (+{delay} ms per step): SSP staleness s ∈ {bounds:?}, SFB full vs FMS",
            opts.model.describe(n),
            opts.bandwidth()
        ),
    );
    let base = opts.common(
        opts.problem(opts.model, n, 24000, 500),
        p,
        opts.clocks.unwrap_or(80),
        5,
    )?;
    let mut arms = Vec::new();
    // Rotating: one peer per clock is slow, a different (seeded) one each clock.
    // Fixed: the last peer is slow at every clock.
    let stragglers = [
        ("rotating", StragglerSpec::Rotating { delay_ms: delay }),
        (
            "fixed",
            StragglerSpec::Peer {
                peer: (p - 1) as u32,
                delay_ms: delay,
            },
        ),
    ];
    for (mode, straggler) in &stragglers[..if opts.quick { 1 } else { 2 }] {
        let (mode, straggler) = (*mode, *straggler);
        for backend in [Backend::Sfb, Backend::Fms] {
            for &s in bounds {
                let mut spec = base.clone();
                spec.backend = backend;
                spec.train.consistency = if s == 0 {
                    ConsistencySpec::Bsp
                } else {
                    ConsistencySpec::Ssp { staleness: s }
                };
                spec.train.straggler = Some(straggler);
                let name = format!("{} s={s} {mode}", backend.name().to_uppercase());
                arms.push(Arm::new(name, spec));
            }
        }
    }
    run_arms(runner, &mut report, &arms, 0, opts.frac(0.5))?;
    if let Some(note) = learned_note(&report, opts.model.classes(n)) {
        report.notes.push(note);
    }
    let group = |b: &str, m: &str| -> Vec<&ArmReport> {
        report
            .arms
            .iter()
            .filter(|a| a.name.starts_with(b) && a.name.ends_with(m))
            .collect()
    };
    let bound = |a: &ArmReport| -> Option<f64> {
        a.name.split("s=").nth(1)?.split(' ').next()?.parse().ok()
    };
    let series: Vec<Series> = ["SFB", "FMS"]
        .iter()
        .flat_map(|b| ["rotating", "fixed"].map(|m| (b, m)))
        .map(|(b, m)| Series {
            name: format!("{b}, {m} straggler"),
            points: group(b, m)
                .into_iter()
                .filter_map(|a| Some((bound(a)?, a.time_to_target_s?)))
                .collect(),
        })
        .collect();
    let c = |a: &ArmReport| a.summary.clocks.max(1) as f64;
    let wait = |a: &ArmReport| (a.summary.wait_s + a.summary.flush_s) / c(a) * 1e3;
    let compute: Vec<f64> = report
        .arms
        .iter()
        .map(|a| (a.summary.compute_s + a.summary.apply_s) / c(a) * 1e3)
        .collect();
    let waits: Vec<f64> = report.arms.iter().map(wait).collect();
    let mut notes = Vec::new();
    for b in ["SFB", "FMS"] {
        for m in ["rotating", "fixed"] {
            let g = group(b, m);
            let best = g
                .iter()
                .filter(|a| a.time_to_target_s.is_some())
                .min_by(|x, y| {
                    x.time_to_target_s
                        .partial_cmp(&y.time_to_target_s)
                        .unwrap_or(std::cmp::Ordering::Equal)
                });
            let (Some(bsp), Some(best)) = (g.first(), best) else {
                continue;
            };
            let t = |a: &ArmReport| {
                a.time_to_target_s
                    .map_or("-".into(), |t| format!("{t:.2} s"))
            };
            notes.push(format!(
                "{b}, {m} straggler: BSP waits {:.1} ms per clock and reaches the target in {}; the best bound, {}, waits {:.1} ms and reaches it in {}.",
                wait(bsp), t(bsp), best.name.split(' ').nth(1).unwrap_or("?"), wait(best), t(best),
            ));
        }
    }
    let cats = report.arms.iter().map(|a| a.name.clone()).collect();
    report.add_chart(
        "staleness-time-to-target.png",
        "time to target vs s",
        line(
            "staleness: time to target vs staleness bound s".into(),
            "staleness bound s (clocks)",
            "time to target (s)",
            series,
            false,
            None,
        ),
    );
    report.add_chart(
        "staleness-compute-vs-wait.png",
        "compute vs wait per clock",
        Chart::Bar(BarChart {
            title: "staleness: compute vs wait per clock (mean peer)".into(),
            y_label: "ms per clock".into(),
            categories: cats,
            stacks: vec![("compute + apply".into(), compute), ("wait".into(), waits)],
            stacked: true,
            log_y: false,
        }),
    );
    report.notes.extend(notes);
    let verdict = staleness_verdict(&report, bounds);
    claim(&mut report, "Fig. 8", verdict);
    Ok(report)
}

/// The paper's Fig. 8 claim checked on the rotating-straggler arms: SFB's wait per clock
/// falls from BSP to the largest bound while its compute stays, and SFB waits less than
/// FMS at every bound.
fn staleness_verdict(report: &Report, bounds: &[u64]) -> String {
    let per_clock = |a: &ArmReport, x: f64| x / a.summary.clocks.max(1) as f64 * 1e3;
    let get = |b: &str, s: u64| report.arm(&format!("{b} s={s} rotating"));
    let wait = |a: &ArmReport| per_clock(a, a.summary.wait_s + a.summary.flush_s);
    let work = |a: &ArmReport| per_clock(a, a.summary.compute_s + a.summary.apply_s);
    let (Some(&first), Some(&last)) = (bounds.first(), bounds.last()) else {
        return "not checked: no bounds.".into();
    };
    let (Some(s0), Some(s1), Some(f0), Some(f1)) = (
        get("SFB", first),
        get("SFB", last),
        get("FMS", first),
        get("FMS", last),
    ) else {
        return "not checked: an arm is missing.".into();
    };
    let less_than_fms = bounds
        .iter()
        .all(|&s| match (get("SFB", s), get("FMS", s)) {
            (Some(a), Some(b)) => wait(a) < wait(b),
            _ => false,
        });
    let falls = wait(s1) < wait(s0);
    let stays = (work(s1) - work(s0)).abs() <= 0.25 * work(s0).max(1e-9);
    format!(
        "{}: with a rotating straggler, SFB waits {:.1} ms per clock under BSP and {:.1} ms at s={last} (compute + apply {:.1} → {:.1} ms); FMS waits {:.1} → {:.1} ms; SFB waits less than FMS at {} bound.",
        if falls && stays && less_than_fms {
            "holds"
        } else {
            "does not hold"
        },
        wait(s0),
        wait(s1),
        work(s0),
        work(s1),
        wait(f0),
        wait(f1),
        if less_than_fms { "every" } else { "not every" }
    )
}

/// ESSP's comparison (Dai et al., AAAI 2015: Figs. 2 and 3) on the FMS backend: eager
/// server push (`--fms-sync eager`, ESSP) against the lazy SSPTable (`--fms-sync lazy`),
/// under SSP(3), for MLR and L2-MLR: the clients' clock differentials (how many clocks
/// older than the clock computed the W it was computed on), convergence, bytes and time.
/// Dense push with plain SGD, so that the server's work per clock (P dense adds) stays
/// below a client's (K pairs): ESSP's regime, where the clients' compute, not the
/// server's link, sets the pace (see the report's notes).
///
/// # Errors
/// The first arm that fails.
pub fn essp(opts: &Options, runner: &Runner) -> Result<Report> {
    const S: u64 = 3;
    let p = opts.peers.unwrap_or(8);
    let n = opts.size.unwrap_or(256);
    let j = 16;
    let mut report = Report::new(
        "essp",
        &format!(
            "P={p} FMS clients, SSP({S}), J={j} classes × D={n} features, K=64, dense push, sgd, {} per node: eager server push vs lazy SSPTable, MLR and L2-MLR",
            opts.bandwidth()
        ),
    );
    let models = [
        ("MLR", ModelChoice::Mlr),
        ("L2-MLR", ModelChoice::L2mlr { lambda: 1e-3 }),
    ];
    let frac = opts.frac(0.5);
    let mut targets = Vec::new();
    // MLR: a quarter more samples than the run takes (no sample seen twice: the held-out
    // curve measures the sync, not overfitting); 128,000 at the defaults. L2-MLR's
    // objective is SDCA's primal on the training set, whose every evaluation (with the
    // dual certificate) passes over all of it several times: at most 8,192 samples, as in
    // the paper's figures ([`PaperModel::problem`]), visited repeatedly as SDCA does.
    let clocks = opts.clocks.unwrap_or(200);
    let samples = (clocks as usize * p * 64 * 5 / 4).max(8_000);
    for (label, model) in models {
        let samples = match model {
            ModelChoice::L2mlr { .. } => samples.min(8_192),
            _ => samples,
        };
        let mut spec = mlr(j, n, samples, (samples / 32).max(1_000));
        spec.model = model;
        spec.train.batch = 64;
        let mut base = opts.common(spec, p, clocks, 20)?;
        base.backend = Backend::Fms;
        base.fms_push = sfb_harness::Push::Dense;
        base.train.optimizer = Some(sfb_harness::MethodSpec(sfb_core::Method::Sgd));
        base.train.consistency = ConsistencySpec::Ssp { staleness: S };
        let arms: Vec<Arm> = [
            ("eager", sfb_harness::SyncSpec::Eager),
            ("lazy", sfb_harness::SyncSpec::Lazy),
        ]
        .into_iter()
        .map(|(sync, v)| {
            let mut spec = base.clone();
            spec.fms_sync = v;
            Arm::new(format!("{label} {sync}"), spec)
        })
        .collect();
        // Each model's target: its eager arm's objective at `frac` of its clocks.
        run_against_first(
            runner,
            &mut report,
            &arms,
            frac,
            &mut targets,
            label,
            "eager",
        )?;
    }
    report.target_rule = format!(
        "per model, the eager arm's held-out objective at the first evaluation at or after {:.0}% of its clocks ({})",
        frac * 100.0,
        targets.join("; ")
    );
    let shares = |a: &ArmReport| -> Vec<f64> {
        let h = &a.summary.read_differential;
        let n: u64 = h.iter().sum();
        (0..=S as usize)
            .map(|d| h.get(d).copied().unwrap_or(0) as f64 / n.max(1) as f64)
            .collect()
    };
    let mean = |a: &ArmReport| -> f64 {
        let h = &a.summary.read_differential;
        let n: u64 = h.iter().sum();
        h.iter()
            .enumerate()
            .map(|(d, &c)| d as f64 * c as f64)
            .sum::<f64>()
            / n.max(1) as f64
    };
    // Fig. 2: the distribution of clock differentials, one bar group per differential.
    let categories: Vec<String> = (0..=S).map(|d| format!("{d} clocks")).collect();
    let per_d: Vec<(String, Vec<f64>)> = report
        .arms
        .iter()
        .map(|a| (a.name.clone(), shares(a)))
        .collect();
    report.add_chart(
        "essp-clock-differentials.png",
        "clock differentials (ESSP Fig. 2)",
        Chart::Bar(BarChart {
            title: "essp: share of clocks computed on a W d clocks old".into(),
            y_label: "share of the clients' clocks".into(),
            categories,
            stacks: per_d,
            stacked: false,
            log_y: false,
        }),
    );
    for a in &report.arms.clone() {
        let h = &a.summary.read_differential;
        report.notes.push(format!(
            "{}: clock differentials {h:?} (d = 0, 1, …; mean {:.2}), {} sent, final objective {}, {:.4} s.",
            a.name,
            mean(a),
            human_bytes(a.summary.bytes_sent as f64),
            a.final_objective.map_or("-".into(), |o| format!("{o:.4}")),
            a.train_s
        ));
    }
    let near = |k: usize| shares(&report.arms[k]).iter().take(2).sum::<f64>();
    let (eager_near, lazy_near) = ((near(0) + near(2)) / 2.0, (near(1) + near(3)) / 2.0);
    let mut verdict = format!(
        "the eager arms computed on a W at most one clock old in {:.0}% (MLR) and {:.0}% (L2-MLR) of their clocks, the lazy arms in {:.0}% and {:.0}%.",
        100.0 * near(0),
        100.0 * near(2),
        100.0 * near(1),
        100.0 * near(3),
    );
    if eager_near > lazy_near {
        verdict.push_str(" Eager reads the fresher W, as ESSP found");
    } else {
        verdict.push_str(
            " Eager does not read the fresher W here: the server's link or its apply sets the pace (the FMS bottleneck; a fast CPU against the link), so eager clients run to the bound and wait there. ESSP's regime is the clients' compute setting the pace: in simulation, e.g. --bandwidth 10gbit --latency 5us --flops 1e9",
        );
    }
    // Fig. 3's question: what the fresher reads buy, per model.
    for (k, label) in [(0, "MLR"), (2, "L2-MLR")] {
        let (e, l) = (&report.arms[k], &report.arms[k + 1]);
        let (Some(oe), Some(ol)) = (e.final_objective, l.final_objective) else {
            continue;
        };
        let clocks = |a: &ArmReport| {
            a.clocks_to_target
                .map_or("never".into(), |c| format!("{c:.1}"))
        };
        let _ = write!(
            verdict,
            "; {label}, convergence: final held-out objective {oe:.4} eager, {ol:.4} lazy ({:+.1}% lazy against eager), clocks to the target {} eager, {} lazy, lazy sent {:.0}% of eager's bytes and took {:.1}% of its time",
            100.0 * (ol - oe) / oe,
            clocks(e),
            clocks(l),
            100.0 * l.summary.bytes_sent as f64 / e.summary.bytes_sent.max(1) as f64,
            100.0 * l.train_s / e.train_s.max(f64::MIN_POSITIVE),
        );
    }
    verdict.push('.');
    claim(&mut report, "ESSP Figs. 2–3", verdict);
    Ok(report)
}

/// Runs one model's `arms`, takes its target from the first arm (named `reference` in
/// the target's text) at `frac` of its clocks, adds that text to `targets` and every arm to
/// `report` measured against it.
///
/// # Errors
/// The first arm that fails.
fn run_against_first(
    runner: &Runner,
    report: &mut Report,
    arms: &[Arm],
    frac: f64,
    targets: &mut Vec<String>,
    label: &str,
    reference: &str,
) -> Result<()> {
    let runs = run_each(runner, arms)?;
    let (s0, r0) = &runs[0];
    let target = target_at(&curve(r0, s0.peers), s0.clocks, frac);
    if let Some((t, clock)) = target {
        targets.push(format!(
            "{label}: {t:.4}, the {reference} arm's held-out objective at clock {clock}"
        ));
    }
    for (arm, (summary, records)) in arms.iter().zip(runs) {
        report
            .arms
            .push(ArmReport::new(arm, summary, &records, target.map(|t| t.0)));
    }
    Ok(())
}

/// SFB full broadcast at P ∈ {1, 2, 4, 8, 16} (up to `peers`), one core per peer, equal
/// samples per arm: speedup over P = 1.
///
/// # Errors
/// The first arm that fails.
pub fn scaling(opts: &Options, runner: &Runner) -> Result<Report> {
    let n = opts.size.unwrap_or(1024);
    let max_p = opts.peers.unwrap_or(8);
    let ps: Vec<usize> = [1, 2, 4, 8, 16]
        .into_iter()
        .filter(|&x| x <= max_p)
        .collect();
    // Equal samples for every arm: P peers run (clocks at P=1) / P clocks.
    let clocks1 = opts.clocks.unwrap_or(if opts.quick { 320 } else { 640 });
    let mut report = Report::new(
        "scaling",
        &format!(
            "SFB full broadcast, P ∈ {ps:?}, {}, K=16, BSP, {} per peer, equal samples per arm",
            opts.model.describe(n),
            opts.bandwidth()
        ),
    );
    let mut arms = Vec::new();
    for &p in &ps {
        let clocks = (clocks1 / p as u64).max(1);
        let mut spec = opts.common(
            opts.problem(opts.model, n, 24000, 500),
            p,
            clocks,
            (clocks / 10).max(1),
        )?;
        if p == 1 && spec.transport == Transport::Libp2p {
            // One peer sends nothing; the libp2p launcher needs a cluster of two.
            spec.transport = Transport::Mem;
            spec.net.bandwidth = None;
        }
        // One core per peer, as on a cluster of single-core machines.
        arms.push(Arm::new(format!("P={p}"), spec).with_env("RAYON_NUM_THREADS", "1"));
    }
    run_arms(runner, &mut report, &arms, 0, opts.frac(0.5))?;
    if let Some(note) = learned_note(&report, opts.model.classes(n)) {
        report.notes.push(note);
    }
    let base_tps = report.arms.first().map(|a| a.samples_per_s);
    let base_ttt = report.arms.first().and_then(|a| a.time_to_target_s);
    let mut table = String::from(
        "| P | samples/s | throughput speedup | time to target (s) | time-to-target speedup |\n|---:|---:|---:|---:|---:|\n",
    );
    let (mut thr, mut ttt) = (Vec::new(), Vec::new());
    for a in &report.arms {
        let p = a.summary.peers as f64;
        let s1 = base_tps.map(|b| a.samples_per_s / b);
        let s2 = match (base_ttt, a.time_to_target_s) {
            (Some(b), Some(t)) if t > 0.0 => Some(b / t),
            _ => None,
        };
        thr.extend(s1.map(|s| (p, s)));
        ttt.extend(s2.map(|s| (p, s)));
        let x = |s: Option<f64>| s.map_or("-".into(), |s| format!("{s:.2}×"));
        let _ = writeln!(
            table,
            "| {} | {:.0} | {} | {} | {} |",
            a.summary.peers,
            a.samples_per_s,
            x(s1),
            a.time_to_target_s
                .map_or("not reached".into(), |t| format!("{t:.2}")),
            x(s2),
        );
    }
    report.sections.push(("Speedup over P=1".into(), table));
    let last_speedup = ttt.last().copied();
    let series = vec![
        Series {
            name: "throughput (samples/s)".into(),
            points: thr,
        },
        Series {
            name: "time to target".into(),
            points: ttt,
        },
        Series {
            name: "linear".into(),
            points: ps.iter().map(|&p| (p as f64, p as f64)).collect(),
        },
    ];
    report.add_chart(
        "scaling-speedup.png",
        "speedup over P=1",
        line(
            "scaling: speedup over P=1".into(),
            "peers P",
            "speedup over P=1 (×)",
            series,
            true,
            None,
        ),
    );
    if opts.transport == Transport::Sim {
        report.notes.push(
            "Simulated: every peer on a machine of its own (the simulator's cost model, or this machine's measured rates with --costs calibrate), so compute scales with P as it would on a cluster; every SFB peer still applies all P·K updates per clock, so per-peer apply work grows with P."
                .into(),
        );
    } else {
        report.notes.push(format!(
            "Every peer runs its kernels on one thread (RAYON_NUM_THREADS=1), as on a cluster of single-core machines; P=1 runs in-memory (a single peer sends nothing). This machine has {} cores: peers beyond that share cores, so compute cannot scale past it here, and every SFB peer applies all P·K updates per clock, so per-peer apply work grows with P.",
            report.machine.cores
        ));
    }
    let verdict = match last_speedup {
        Some((p, s)) if p > 1.0 => format!(
            "{}: the time to the target at P={p:.0} was {:.2}× that at P=1, a speedup of {s:.2}× ({:.0}% of linear; near-linear taken as ≥ 70%){}.",
            // Near-linear at the largest P: a smaller P's speedup does not show it.
            if s >= 0.7 * p && p >= ps.last().copied().unwrap_or(1) as f64 {
                "holds"
            } else {
                "does not hold"
            },
            1.0 / s,
            100.0 * s / p,
            if p < ps.last().copied().unwrap_or(1) as f64 {
                "; the larger P did not reach the target"
            } else {
                ""
            }
        ),
        _ => "not checked: no arm with P > 1 reached the target.".into(),
    };
    claim(&mut report, "Fig. 7", verdict);
    Ok(report)
}

/// SFB full vs SFB partial (Q = P/2) vs FMS at each J = D: bytes per clock against the
/// cost formulas, and time to target against model size.
///
/// # Errors
/// The first arm that fails.
pub fn model_size(opts: &Options, runner: &Runner) -> Result<Report> {
    let (p, q) = opts.peers_and_q(4, |p| 1usize.max(p / 2))?;
    let clocks = opts.clocks.unwrap_or(40);
    let sizes = opts.sizes.clone().unwrap_or_else(|| {
        if opts.quick {
            vec![128, 256]
        } else {
            vec![256, 512, 1024, 2048]
        }
    });
    let model = opts.model;
    let k = model.pairs_per_clock(16);
    let mut report = Report::new(
        "model-size",
        &format!(
            "P={p}, {} at n ∈ {sizes:?}, K=16, BSP, {} per node: SFB full vs SFB partial (Q={q}) vs FMS",
            model.describe_any(),
            opts.bandwidth()
        ),
    );
    let mut rules = Vec::new();
    let mut formula_rows = String::from(
        "| n | arm | measured bytes/clock | formula | measured ÷ formula |\n|---:|---|---:|---:|---:|\n",
    );
    let (mut measured, mut formula, mut cats) = (Vec::new(), Vec::new(), Vec::new());
    for &n in &sizes {
        let base = opts.common(opts.problem(model, n, 8192, 256), p, clocks, 4)?;
        let mut partial = base.clone();
        opts.partial(&mut partial, q);
        let mut fms = base.clone();
        fms.backend = Backend::Fms;
        let arms = [
            Arm::new(format!("{n}² SFB full"), base),
            Arm::new(format!("{n}² SFB Q={q}"), partial),
            Arm::new(format!("{n}² FMS"), fms),
        ];
        let mut sub = Report::new("model-size", "");
        run_arms(runner, &mut sub, &arms, 0, opts.frac(0.4))?;
        rules.push(format!(
            "n={n}: target {:.4}",
            sub.target_objective.unwrap_or(f64::NAN)
        ));
        let (rows, cols) = model.shape(n);
        for a in &sub.arms {
            let f = (rows + cols) as f64 * k as f64 * 4.0 * p as f64;
            let expect = if a.name.ends_with("FMS") {
                f + (p * rows * cols * 4) as f64
            } else if a.name.ends_with("full") {
                f * (p - 1) as f64
            } else {
                f * q as f64
            };
            let _ = writeln!(
                formula_rows,
                "| {n} | {} | {} | {} | {:.3} |",
                a.name,
                human_bytes(a.bytes_per_clock),
                human_bytes(expect),
                a.bytes_per_clock / expect
            );
            measured.push(a.bytes_per_clock);
            formula.push(expect);
            cats.push(a.name.clone());
        }
        report.arms.extend(sub.arms);
    }
    let mut speed = String::from(
        "| n | SFB full time to target (s) | FMS time to target (s) | FMS ÷ SFB |\n|---:|---:|---:|---:|\n",
    );
    let mut ratios = Vec::new();
    for &n in &sizes {
        let t = |kind: &str| {
            report
                .arm(&format!("{n}² {kind}"))
                .and_then(|a| a.time_to_target_s)
        };
        let (s, f) = (t("SFB full"), t("FMS"));
        let x = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}"));
        let ratio = match (s, f) {
            (Some(s), Some(f)) if s > 0.0 => Some(f / s),
            _ => None,
        };
        ratios.extend(ratio.map(|r| (n, r)));
        let ratio = ratio.map_or("-".into(), |r| format!("{r:.1}×"));
        let _ = writeln!(speed, "| {n} | {} | {} | {ratio} |", x(s), x(f));
    }
    report
        .sections
        .push(("SFB vs FMS by model size".into(), speed));
    let verdict = match (ratios.first(), ratios.last()) {
        (Some(&(n0, r0)), Some(&(n1, r1))) if n1 > n0 => format!(
            "{}: FMS took {r0:.1}× SFB full broadcast's time to the target at n={n0} and {r1:.1}× at n={n1} ({}).",
            if r1 > r0 { "holds" } else { "does not hold" },
            ratios
                .iter()
                .map(|(n, r)| format!("{n}: {r:.1}×"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => "not checked: fewer than two sizes had both SFB full broadcast and FMS reach the target.".into(),
    };
    claim(&mut report, "Fig. 5", verdict);
    report.target_rule = format!(
        "one target per size: the held-out objective SFB full reached at the first evaluation at or after {:.0}% of its clocks ({})",
        opts.frac(0.4) * 100.0,
        rules.join("; ")
    );
    report.sections.push((
        "Bytes per clock vs the cost formulas".into(),
        formula_rows
            + "\nFormulas (4-byte floats): SFB full P(P−1)·K(J+D), SFB partial P·Q·K(J+D), FMS P·K(J+D) up + P·J·D down, with W of J×D and K the pairs a peer sends per clock (DML: the mini-batch and its 16 neighbour candidates). Measured bytes include framing (headers, length prefixes) and every frame the run sent.\n",
    ));
    report.add_chart(
        "model-size-bytes-vs-formula.png",
        "bytes per clock vs formula",
        Chart::Bar(BarChart {
            title: "model-size: bytes per clock, measured vs formula".into(),
            y_label: "bytes per clock".into(),
            categories: cats,
            stacks: vec![("measured".into(), measured), ("formula".into(), formula)],
            stacked: false,
            log_y: true,
        }),
    );
    let series: Vec<Series> = ["SFB full", &format!("SFB Q={q}"), "FMS"]
        .iter()
        .map(|kind| Series {
            name: kind.to_string(),
            points: report
                .arms
                .iter()
                .filter(|a| a.name.ends_with(kind))
                .filter_map(|a| {
                    let n: f64 = a.name.split('²').next()?.parse().ok()?;
                    let (r, c) = model.shape(n as usize);
                    a.time_to_target_s.map(|t| ((r * c) as f64, t))
                })
                .collect(),
        })
        .collect();
    report.add_chart(
        "model-size-time-to-target.png",
        "time to target vs model size",
        line(
            format!("model-size: time to target vs J·D (P={p})"),
            "parameters J·D",
            "time to target (s)",
            series,
            true,
            None,
        ),
    );
    Ok(report)
}

/// Parts a clock is sent in by the `overlap` scenario's overlapped arms.
const OVERLAP_PARTS: usize = 4;

/// Bösen's overlap of compute and communication for SFB peers: each model's clock sent
/// whole at its end (today's sequential clock) against computed and sent in
/// [`OVERLAP_PARTS`] parts (`--send-parts`), full broadcast under BSP, the two arms run
/// alternately `reps` times so that each pair shares the machine's state. Time per clock
/// is measured after a warm-up, from every peer's clock records; the replicas' checksums
/// say whether the results are equal. Cases: SC where sending a clock takes about as long
/// as computing it, SC at the budget (compute-bound on two cores) and MLR at the budget;
/// `--quick` leaves out the second (its 2 s clocks are most of the run, and overlap has
/// nothing to hide there) and runs 12 clocks.
///
/// # Errors
/// The first arm that fails.
pub fn overlap(opts: &Options, runner: &Runner) -> Result<Report> {
    let p = opts.peers.unwrap_or(8);
    let n = opts.size.unwrap_or(512);
    let k = 64;
    let clocks = opts.clocks.unwrap_or(if opts.quick { 12 } else { 40 });
    let reps = if opts.quick { 2 } else { 3 };
    // Where sending a clock takes about as long as computing it (SC's 1 MiB a peer a clock
    // against its coordinate descent at P = 8 on two cores), and the scenario's budget.
    let balanced = "25mbit";
    let mut report = Report::new(
        "overlap",
        &format!(
            "P={p} SFB peers, full broadcast, BSP, K={k}: a clock sent whole at its end against computed and sent in {OVERLAP_PARTS} parts, {reps} alternating pairs per case; SC at {balanced}{} per node, MLR at {bw}",
            if opts.quick {
                String::new()
            } else {
                format!(" and {}", opts.bandwidth())
            },
            bw = opts.bandwidth()
        ),
    );
    let sc = (
        super::paper::PaperModel::Sc,
        "sparse coding, n atoms over n features",
    );
    let mlr = (
        super::paper::PaperModel::Mlr,
        "multiclass logistic regression, n classes × n features",
    );
    let mut models = vec![
        (format!("SC {balanced}"), sc, Some(balanced)),
        (format!("SC {}", opts.bandwidth()), sc, None),
        (format!("MLR {}", opts.bandwidth()), mlr, None),
    ];
    if opts.quick {
        models.remove(1);
    }
    // Per case: its label, (whole, parts) time per clock of each pair, and whether every
    // replica of every arm ended with one checksum.
    struct Case(String, Vec<(f64, f64)>, bool);
    let mut rows: Vec<Case> = Vec::new();
    let warm = (clocks / 8).max(2);
    // Up to the last clock but one: the last clock's record includes the final evaluation.
    let last = (clocks - 1).max(warm + 1);
    let per_clock = |records: &[ClockRecord]| -> f64 {
        let mut peers: std::collections::BTreeMap<u32, (f64, f64)> = Default::default();
        for r in records {
            let e = peers.entry(r.peer).or_insert((f64::NAN, f64::NAN));
            if r.clock == warm {
                e.0 = r.wall_s;
            }
            if r.clock == last {
                e.1 = r.wall_s;
            }
        }
        let times: Vec<f64> = peers
            .values()
            .filter(|(a, b)| a.is_finite() && b.is_finite())
            .map(|(a, b)| (b - a) / (last - warm) as f64)
            .collect();
        times.iter().sum::<f64>() / times.len().max(1) as f64
    };
    let mut done = 0;
    let total = models.len() * reps * 2;
    for (label, (model, what), rate) in models {
        let mut spec = model.problem(n, (clocks as usize * p * k).max(8_000), 500);
        spec.train.batch = k;
        let mut base = opts.common(spec, p, clocks, 0)?;
        if let (Some(r), true) = (rate, base.net.bandwidth.is_some()) {
            base.net.bandwidth = Some(r.parse().map_err(|e: String| Error::Option {
                option: "bandwidth",
                expected: "a rate",
                got: e,
            })?);
        }
        let mut pairs = Vec::new();
        let mut sums = std::collections::BTreeSet::new();
        for rep in 0..reps {
            let mut pair = [0.0; 2];
            // Alternate which arm runs first, so neither always follows the other.
            let order = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let mut spec = base.clone();
                let name = if which == 0 {
                    format!("{label} whole")
                } else {
                    spec.net.send_parts = OVERLAP_PARTS;
                    format!("{label} {OVERLAP_PARTS} parts")
                };
                let arm = Arm::new(name, spec);
                done += 1;
                runner.say(&format!("[{done}/{total}] {}: {}", arm.name, arm.command()));
                let (summary, records) = runner.run(&arm)?;
                pair[which] = per_clock(&records);
                sums.extend(summary.replica_checksums.iter().cloned());
                if rep == 0 {
                    report
                        .arms
                        .push(ArmReport::new(&arm, summary, &records, None));
                }
            }
            pairs.push((pair[0], pair[1]));
        }
        report.notes.push(format!(
            "{label} ({what}, n = {n}): time per clock from clock {warm} to {last}, whole / {OVERLAP_PARTS} parts, by pair: {}.",
            pairs
                .iter()
                .map(|(a, b)| format!(
                    "{:.2} / {:.2} ms ({:+.1}%)",
                    a * 1e3,
                    b * 1e3,
                    100.0 * (b - a) / a
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        rows.push(Case(label, pairs, sums.len() == 1));
    }
    // Of an even count, the mean of the middle two (of two pairs, their mean).
    let median = |xs: Vec<f64>| -> f64 { curve::median(&xs).unwrap_or(f64::NAN) };
    report.add_chart(
        "overlap-time-per-clock.png",
        "time per clock, median of the pairs",
        Chart::Bar(BarChart {
            title: format!(
                "overlap: time per clock, whole vs {OVERLAP_PARTS} parts (BSP, P = {p})"
            ),
            y_label: "ms per clock".into(),
            categories: rows.iter().map(|r| r.0.clone()).collect(),
            stacks: vec![
                (
                    "whole".into(),
                    rows.iter()
                        .map(|r| 1e3 * median(r.1.iter().map(|x| x.0).collect()))
                        .collect(),
                ),
                (
                    format!("{OVERLAP_PARTS} parts"),
                    rows.iter()
                        .map(|r| 1e3 * median(r.1.iter().map(|x| x.1).collect()))
                        .collect(),
                ),
            ],
            stacked: false,
            log_y: false,
        }),
    );
    let mut verdicts = Vec::new();
    for Case(label, pairs, equal) in &rows {
        let ratios: Vec<f64> = pairs.iter().map(|(a, b)| b / a).collect();
        let m = median(ratios.clone());
        let faster = ratios.iter().filter(|&&r| r < 1.0).count();
        verdicts.push(format!(
            "{label}: {OVERLAP_PARTS} parts took {:.1}% of the whole clock's time per clock (median of {} pairs; faster in {faster} of them); the replicas of every arm {}",
            100.0 * m,
            ratios.len(),
            if *equal {
                "ended with one checksum (bitwise equal results)"
            } else {
                "did NOT all end with one checksum"
            }
        ));
    }
    claim(
        &mut report,
        "Bösen Fig. 6",
        format!("{}.", verdicts.join("; ")),
    );
    report.notes.push(
        "The parts are on the wire while the next part is computed; the apply of a clock's batches still waits for all of them under BSP, so the most overlap can hide is the smaller of a clock's compute and its sending."
            .into(),
    );
    Ok(report)
}

/// The `managed` scenario's budget unless one is given: one where a clock's sending is a
/// large share of it (Bösen's regime).
pub const MANAGED_BANDWIDTH: &str = "25mbit";

/// The shapes `managed` and `rate-change` share: P peers, models of about n × n, K = 64,
/// the clocks and the bandwidth budget (by default [`MANAGED_BANDWIDTH`]).
struct SspSetup {
    p: usize,
    n: usize,
    k: usize,
    clocks: u64,
    bandwidth: String,
    opts: Options,
}

impl SspSetup {
    fn new(opts: &Options) -> Self {
        let bandwidth = opts
            .bandwidth
            .clone()
            .unwrap_or_else(|| MANAGED_BANDWIDTH.into());
        Self {
            p: opts.peers.unwrap_or(8),
            n: opts.size.unwrap_or(256),
            k: 64,
            clocks: opts.clocks.unwrap_or(if opts.quick { 64 } else { 300 }),
            opts: Options {
                bandwidth: Some(bandwidth.clone()),
                ..opts.clone()
            },
            bandwidth,
        }
    }

    /// `model`'s run under SSP(`s`): enough samples for every clock, K a clock.
    fn base(&self, model: super::paper::PaperModel, s: u64) -> Result<RunSpec> {
        let (p, k, clocks) = (self.p, self.k, self.clocks);
        let mut spec = model.problem(self.n, (clocks as usize * p * k).max(8_000), 500);
        spec.train.batch = k;
        let mut base = self.opts.common(spec, p, clocks, (clocks / 20).max(1))?;
        base.train.consistency = ConsistencySpec::Ssp { staleness: s };
        Ok(base)
    }
}

/// Bösen's managed against unmanaged communication (its Fig. 4) for SFB peers under
/// SSP: each model's clocks sent whole at their end (unmanaged: communication at clock
/// boundaries only) against computed and sent in [`OVERLAP_PARTS`] parts with what has
/// arrived applied between parts (managed: the links used during the clock, updates
/// applied as they arrive), at one bandwidth budget. Convergence per clock and per second,
/// and time to each model's target (its unmanaged arm's objective at half its clocks).
///
/// # Errors
/// The first arm that fails.
pub fn managed(opts: &Options, runner: &Runner) -> Result<Report> {
    const S: u64 = 2;
    let setup = SspSetup::new(opts);
    let SspSetup {
        p,
        n,
        k,
        clocks,
        ref bandwidth,
        ref opts,
    } = setup;
    let mut report = Report::new(
        "managed",
        &format!(
            "P={p} SFB peers, full broadcast, SSP({S}), K={k}, {bandwidth} per node: unmanaged (a clock sent at its end) against managed ({OVERLAP_PARTS} parts sent as computed, arrivals applied between parts) against unmanaged with clocks of K/{OVERLAP_PARTS} samples, SC and MLR at n = {n}"
        ),
    );
    let frac = opts.frac(0.5);
    let mut targets = Vec::new();
    let mut verdicts = Vec::new();
    for (label, model) in [
        ("SC", super::paper::PaperModel::Sc),
        ("MLR", super::paper::PaperModel::Mlr),
    ] {
        let base = setup.base(model, S)?;
        let mut arms: Vec<Arm> = [("unmanaged", 1), ("managed", OVERLAP_PARTS)]
            .into_iter()
            .map(|(name, parts)| {
                let mut spec = base.clone();
                spec.net.send_parts = parts;
                Arm::new(format!("{label} {name}"), spec)
            })
            .collect();
        // Bösen's Fig. 8: instead of managing communication, simply communicate more often
        // (a clock of a quarter of the samples, four times the clocks: the same samples).
        let mut often = base.clone();
        let parts = OVERLAP_PARTS as u64;
        often.train.batch = k / OVERLAP_PARTS;
        often.train.clocks = clocks * parts;
        often.train.eval_every = base.train.eval_every * parts;
        arms.push(Arm::new(
            format!("{label} unmanaged, K = {}", k / OVERLAP_PARTS),
            often,
        ));
        let first = report.arms.len();
        run_against_first(
            runner,
            &mut report,
            &arms,
            frac,
            &mut targets,
            label,
            "unmanaged",
        )?;
        let (u, m, o) = (
            &report.arms[first],
            &report.arms[first + 1],
            &report.arms[first + 2],
        );
        let fresh = |a: &ArmReport| {
            let h = &a.summary.staleness_histogram;
            h.first().copied().unwrap_or(0) as f64 / h.iter().sum::<u64>().max(1) as f64
        };
        let time = |a: &ArmReport| {
            a.time_to_target_s
                .map_or("never".into(), |t| format!("{t:.3} s"))
        };
        let sooner = match (u.time_to_target_s, m.time_to_target_s) {
            (Some(a), Some(b)) => b < a,
            (None, Some(_)) => true,
            _ => false,
        };
        verdicts.push(format!(
            "{label}: managed {} the target sooner ({} against {} unmanaged; clocks {} against {}); final objective {} against {}; batches applied at staleness 0: {:.1}% against {:.1}%",
            if sooner { "reached" } else { "did not reach" },
            time(m),
            time(u),
            m.clocks_to_target.map_or("never".into(), |c| format!("{c:.1}")),
            u.clocks_to_target.map_or("never".into(), |c| format!("{c:.1}")),
            m.final_objective.map_or("-".into(), |o| format!("{o:.4}")),
            u.final_objective.map_or("-".into(), |o| format!("{o:.4}")),
            100.0 * fresh(m),
            100.0 * fresh(u),
        ));
        verdicts.push(format!(
            "{label}, against simply communicating more often (Bösen's Fig. 8: K = {} a clock, four times the clocks, the same samples): {} to the target, {} sent per sample against managed's {}",
            k / OVERLAP_PARTS,
            time(o),
            human_bytes(o.summary.bytes_sent as f64 / o.summary.samples.max(1) as f64),
            human_bytes(m.summary.bytes_sent as f64 / m.summary.samples.max(1) as f64),
        ));
    }
    report.target_rule = format!(
        "per model, the unmanaged arm's held-out objective at the first evaluation at or after {:.0}% of its clocks ({})",
        frac * 100.0,
        targets.join("; ")
    );
    claim(
        &mut report,
        "Bösen Figs. 4 and 8",
        format!("{}.", verdicts.join("; ")),
    );
    Ok(report)
}

/// How many times slower every link gets in the `rate-change` scenario.
pub const RATE_DROP: f64 = 4.0;

/// How many times the unmanaged arms' clocks the `rate-change` budget arms run.
const BUDGET_CLOCKS: u64 = 3;

/// Bösen's reaction to a link whose bandwidth changes during the run, for SFB peers under
/// SSP: at a budget of [`MANAGED_BANDWIDTH`], every link gets [`RATE_DROP`] times slower
/// from a quarter to a half of the measured budget's run on the steady link (a congested
/// link, not a reconfigured one). On the simulator by its `--slow`; over libp2p on real
/// processes, each node in its own network namespace (`--netns`, root), by changing every
/// node's tbf rate mid-run (`--netns-slow`). Per model:
/// - the steady link, unmanaged (the target), and with the measured budget (the time
///   scale of the change);
/// - unmanaged, through the change;
/// - a fixed budget of pairs per clock (`--prioritize magnitude:N`), N what the measured
///   budget chose before the change: tuned to the link as it was;
/// - the measured budget (`--prioritize magnitude:auto`): the link's rate from the NIC's
///   busy time, so the budget follows the change both ways;
/// - the measured budget spent during the clock (`--send-parts`): Bösen's managed
///   communication whole.
///
/// # Errors
/// The first arm that fails; the in-memory transport, or libp2p where `--netns` cannot
/// run.
pub fn rate_change(opts: &Options, runner: &Runner) -> Result<Report> {
    const S: u64 = 2;
    let real = match opts.transport {
        Transport::Sim => false,
        Transport::Libp2p => {
            if let Err(why) = sfb_harness::netns::available() {
                return Err(Error::Option {
                    option: "transport",
                    expected: "sim, or libp2p where --netns can run (its links' tbf rate changes mid-run)",
                    got: format!("libp2p, but {why}"),
                });
            }
            true
        }
        _ => {
            return Err(Error::Option {
                option: "transport",
                expected: "sim (the simulator's --slow) or libp2p (real processes under --netns, the tbf rate changed mid-run: --netns-slow)",
                got: opts.transport.name().into(),
            });
        }
    };
    let seconds = if real { "seconds" } else { "simulated seconds" };
    // --quick: 40 clocks (the budget arms 120), not managed's 64: its twelve arms are
    // the longest of the paper's quick run.
    let setup = SspSetup::new(&Options {
        clocks: opts.clocks.or(opts.quick.then_some(40)),
        ..opts.clone()
    });
    let SspSetup {
        p,
        n,
        k,
        clocks,
        ref bandwidth,
        ref opts,
    } = setup;
    let mut report = Report::new(
        "rate-change",
        &format!(
            "P={p} SFB peers, full broadcast, SSP({S}), K={k}, {bandwidth} per node, every link {RATE_DROP}x slower over the second quarter of the measured budget's steady run: unmanaged ({clocks} clocks), a fixed pair budget, the measured budget (--prioritize magnitude:auto) and the measured budget in {OVERLAP_PARTS} parts (--send-parts; the budget arms {BUDGET_CLOCKS}x the clocks), SC and MLR at n = {n}, {}",
            if real {
                "real processes over libp2p, each node's sends shaped by tbf in its own network namespace"
            } else {
                "on the simulator"
            }
        ),
    );
    let frac = opts.frac(0.5);
    let mut targets = Vec::new();
    let mut verdicts = Vec::new();
    let (mut budget_series, mut rate_series) = (Vec::new(), Vec::new());
    let mut burst = 0;
    for (label, model) in [
        ("SC", super::paper::PaperModel::Sc),
        ("MLR", super::paper::PaperModel::Mlr),
    ] {
        let mut base = setup.base(model, S)?;
        // On real processes every node in its own namespace, its sends shaped by tbf
        // (whose rate the change then sets), and the rate measured from acknowledgements.
        base.net.netns = real;
        burst = base.net.burst;
        let steady = Arm::new(format!("{label} steady link, unmanaged"), base.clone());
        runner.say(&format!("{}: {}", steady.name, steady.command()));
        let (s0, r0) = runner.run(&steady)?;
        // A budget's clocks are shorter: its arms run BUDGET_CLOCKS times the clocks (as
        // many evaluations), so that time to the target is not cut short by the end.
        let mut budgeted = base.clone();
        budgeted.train.clocks = clocks * BUDGET_CLOCKS;
        budgeted.train.eval_every = base.train.eval_every * BUDGET_CLOCKS;
        budgeted.net.prioritize = Some(PrioritizeSpec {
            policy: sfb_core::Policy::Magnitude,
            budget: sfb_core::Budget::Measured,
        });
        // The change comes in the second quarter of the measured budget's own run on the
        // steady link, so that its run has a before, a during and an after.
        let pilot = Arm::new(
            format!("{label} steady link, measured budget"),
            budgeted.clone(),
        );
        runner.say(&format!(
            "{} (the time scale): {}",
            pilot.name,
            pilot.command()
        ));
        let (sp, _) = runner.run(&pilot)?;
        let (from_s, until_s) = (sp.wall_s / 4.0, sp.wall_s / 2.0);
        let slow = vec![sfb_harness::sim::Slowdown {
            peers: (0..p).collect(),
            from_s,
            until_s,
            factor: RATE_DROP,
        }];
        if real {
            base.net.netns_slow.clone_from(&slow);
            budgeted.net.netns_slow = slow;
        } else {
            base.sim.slow.clone_from(&slow);
            budgeted.sim.slow = slow;
        }
        let auto = Arm::new(format!("{label} measured budget"), budgeted.clone());
        // Bösen's managed communication whole: the measured budget spent during the
        // clock, each part sending its share as it is computed.
        let mut in_parts = budgeted.clone();
        in_parts.net.send_parts = OVERLAP_PARTS;
        let in_parts = Arm::new(
            format!("{label} measured budget, {OVERLAP_PARTS} parts"),
            in_parts,
        );
        let unmanaged = Arm::new(format!("{label} unmanaged"), base.clone());
        runner.say(&format!("{}: {}", auto.name, auto.command()));
        let (sa, ra) = runner.run(&auto)?;
        // What the measured budget chose before the change: the fixed arm's budget.
        fn phase(records: &[ClockRecord], a: f64, b: f64) -> Vec<&ClockRecord> {
            records
                .iter()
                .filter(|r| r.peer == 0 && r.wall_s >= a && r.wall_s < b)
                .collect()
        }
        let median = |v: Vec<f64>| curve::median(&v);
        let budget_in = |a: f64, b: f64| {
            median(
                phase(&ra, a, b)
                    .iter()
                    .filter_map(|r| r.send_budget.map(|x| x as f64))
                    .collect(),
            )
        };
        let rate_in = |a: f64, b: f64| {
            median(
                phase(&ra, a, b)
                    .iter()
                    .filter_map(|r| r.link_bytes_per_s)
                    .collect(),
            )
        };
        let before = budget_in(0.0, from_s).unwrap_or(k as f64).max(1.0) as usize;
        let mut fixed = budgeted.clone();
        fixed.net.prioritize = Some(PrioritizeSpec {
            policy: sfb_core::Policy::Magnitude,
            budget: sfb_core::Budget::Pairs(before),
        });
        let fixed = Arm::new(format!("{label} fixed budget"), fixed);
        runner.say(&format!("{}: {}", unmanaged.name, unmanaged.command()));
        let (su, ru) = runner.run(&unmanaged)?;
        runner.say(&format!("{}: {}", fixed.name, fixed.command()));
        let (sf, rf) = runner.run(&fixed)?;
        runner.say(&format!("{}: {}", in_parts.name, in_parts.command()));
        let (sq, rq) = runner.run(&in_parts)?;
        let target = target_at(&curve(&r0, s0.peers), s0.clocks, frac);
        if let Some((t, clock)) = target {
            targets.push(format!(
                "{label}: {t:.4}, the steady arm's held-out objective at clock {clock}"
            ));
        }
        // The budget the measured arm allowed each clock and the rate it measured.
        let own = phase(&ra, 0.0, f64::INFINITY);
        budget_series.push(Series {
            name: format!("{label} pairs allowed per clock (of {k})"),
            points: own
                .iter()
                .filter_map(|r| r.send_budget.map(|b| (r.wall_s, b as f64)))
                .collect(),
        });
        rate_series.push(Series {
            name: format!("{label} measured"),
            points: own
                .iter()
                .filter_map(|r| r.link_bytes_per_s.map(|b| (r.wall_s, b * 8e-6)))
                .collect(),
        });
        let first = report.arms.len();
        for (arm, (summary, records)) in [
            (&steady, (s0, r0)),
            (&unmanaged, (su, ru)),
            (&fixed, (sf, rf)),
            (&auto, (sa, ra.clone())),
            (&in_parts, (sq, rq)),
        ] {
            report
                .arms
                .push(ArmReport::new(arm, summary, &records, target.map(|t| t.0)));
        }
        let time = |a: &ArmReport| {
            a.time_to_target_s
                .map_or("never".into(), |t| format!("{t:.3} s"))
        };
        let arms = &report.arms[first..];
        let mbit = |r: Option<f64>| r.map_or("-".into(), |r| format!("{:.2} Mbit/s", r * 8e-6));
        let pairs = |b: Option<f64>| b.map_or("-".into(), |b| format!("{b:.0}"));
        let end = arms[3].summary.wall_s;
        verdicts.push(format!(
            "{label}: to the target, steady {}, unmanaged {}, fixed {} pairs {}, measured {}, measured in {OVERLAP_PARTS} parts {}. The measured budget's link rate (peer 0, median) {} before the change, {} during it ({from_s:.2}-{until_s:.2} s), {} after; its budget {} pairs before, {} during, {} after, of K = {k}",
            time(&arms[0]),
            time(&arms[1]),
            before,
            time(&arms[2]),
            time(&arms[3]),
            time(&arms[4]),
            mbit(rate_in(0.0, from_s)),
            mbit(rate_in(from_s, until_s)),
            mbit(rate_in(until_s, end + 1.0)),
            pairs(budget_in(0.0, from_s)),
            pairs(budget_in(from_s, until_s)),
            pairs(budget_in(until_s, end + 1.0)),
        ));
    }
    report.add_chart(
        "rate-change-budget.png",
        "the measured budget per clock",
        line(
            "rate-change: pairs the measured budget allowed per clock (peer 0)".into(),
            seconds,
            "pairs per clock",
            budget_series,
            false,
            None,
        ),
    );
    report.add_chart(
        "rate-change-rate.png",
        "the link rate measured",
        // Log y: under --netns a frame that fits in tbf's burst is acknowledged at the
        // veth's speed, hundreds of Mbit/s, beside the shaped rate of the others.
        Chart::Line(LineChart {
            title: format!("rate-change: link rate measured by peer 0 (configured {bandwidth}, {RATE_DROP}x slower in the window)"),
            x_label: seconds.into(),
            y_label: "Mbit/s".into(),
            series: rate_series,
            log_x: false,
            log_y: real,
            hline: bandwidth
                .parse::<Rate>()
                .ok()
                .map(|r| (r.0 * 8e-6, format!("configured {bandwidth}"))),
            markers: true,
        }),
    );
    report.target_rule = format!(
        "per model, the steady arm's held-out objective at the first evaluation at or after {:.0}% of its clocks ({})",
        frac * 100.0,
        targets.join("; ")
    );
    report.notes.push(format!(
        "The rate is measured from the NIC's busy time (on libp2p, from the token bucket's waits, or under --netns from each frame's time to the receiver's acknowledgement); the configured {bandwidth} drops to a {RATE_DROP}th of it over the window."
    ));
    if real {
        report.notes.push(format!(
            "Real processes: every node in its own network namespace, its sends shaped by the kernel's tbf at {bandwidth} (burst {} B); the launcher changes every node's tbf rate at the window's start and end (`--netns-slow`, `tc qdisc change`), seconds counted from the nodes' first step. A frame that fits in the burst's tokens leaves at the veth's speed, so a measured rate mixes those with the shaped ones (the chart's spikes), and its median reads above the shaped rate in the window.",
            burst
        ));
    }
    claim(
        &mut report,
        "Bösen, a changing link",
        format!("{}.", verdicts.join("; ")),
    );
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eval_every_replaces_the_scenarios_cadence() {
        let o = Options {
            transport: Transport::Mem,
            ..Options::default()
        };
        let spec = |o: &Options| o.common(mlr(8, 8, 100, 10), 2, 20, 5).unwrap();
        assert_eq!(spec(&o).train.eval_every, 5);
        let o = Options {
            eval_every: Some(0),
            ..o
        };
        assert_eq!(spec(&o).train.eval_every, 0);
    }
}
