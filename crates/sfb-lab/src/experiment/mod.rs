//! Paired experiments: the arms of `sfb demo` and `sfb bench`, their learning curves,
//! times to a common target, and reports (JSON, CSV, Markdown, PNG).
//!
//! An [`Arm`] is a [`RunSpec`](sfb_harness::RunSpec) with a name and an environment. A scenario
//! runs its arms one after another through a [`Runner`] (so they share the machine's state
//! and are compared within one run), turns each arm's per-clock records into a
//! [`curve`] of held-out objective against training time and samples, reads a target
//! objective off a reference arm's curve ([`target_at`]), and reports every arm's
//! [`time_to_target`] next to its throughput, traffic and time split in a [`Report`].
//!
//! Training time at a clock is the peer's wall time minus the time it spent evaluating, so
//! the cost of measuring the objective is not charged to any arm; an arm's time at a clock
//! is the largest over its peers (the clock is done when every peer has done it), and its
//! objective the mean over peers (replicas differ under partial broadcast).
//!
//! # Example: two in-memory arms compared
//! ```
//! use sfb_lab::experiment::{Arm, Report, Runner, run_arms};
//! let mut spec = sfb_harness::RunSpec::default();
//! spec.data = sfb_harness::DataSource::Synthetic("classes=3,features=8,samples=400".into());
//! spec.train.clocks = 6;
//! spec.train.eval_every = 2;
//! let mut partial = spec.clone();
//! partial.topology.out_degree = Some(1);
//! let arms = [Arm::new("full", spec), Arm::new("partial", partial)];
//! let mut report = Report::new("example", "full vs partial");
//! run_arms(&Runner::new(), &mut report, &arms, 0, 0.5)?;
//! assert!(report.arm("full").unwrap().time_to_target_s.is_some());
//! assert!(report.arms[1].command.starts_with("sfb run "));
//! # Ok::<(), sfb_lab::experiment::Error>(())
//! ```

mod arm;
mod budget;
mod curve;
mod optimizers;
mod paper;
mod prioritization;
mod report;
mod runner;
mod saga;
mod scale;
mod scenarios;
mod stragglers;

pub use arm::{Arm, run_args};
pub use budget::{BUDGET_CHECK, BudgetCheck, budget_check};
pub use curve::{
    CurvePoint, clock_ends, clock_times, curve, median, slow_clocks, target_at, time_to_target,
};
pub use optimizers::{adarevision, optimizers};
pub use paper::{FIGURES, PaperModel, batch, paper};
pub use prioritization::prioritization;
pub use report::{ArmReport, Machine, Report, human_bytes, invocation};
pub use runner::{Exec, Observer, Quiet, Runner};
pub use saga::saga;
pub use scale::{SCALE_CORES, SCALE_PEERS, scale};
pub use scenarios::{
    Demo, MODEL_SCENARIOS, Options, SCENARIOS, demo, fms_vs_sfb, mlr, model_size, q_sweep,
    run_arms, scaling, staleness,
};
pub use stragglers::{COMPUTE_PER_SAMPLE_S, stragglers};

use std::path::PathBuf;

/// Errors of an experiment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An arm's spec failed validation before anything ran.
    #[error("arm {arm:?}: {source}")]
    Spec {
        /// The arm's name.
        arm: String,
        /// What is wrong with its spec (boxed: the harness error is large and rare).
        source: Box<sfb_harness::Error>,
    },
    /// An arm failed while running.
    #[error("arm {arm:?} ({command}): {source}")]
    Run {
        /// The arm's name.
        arm: String,
        /// The command that reproduces it.
        command: String,
        /// What went wrong (the executor's error).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An arm run as a child process failed.
    #[error("arm {arm:?}: `sfb run` exited with {status}:\n{stderr}")]
    Child {
        /// The arm's name.
        arm: String,
        /// The exit status.
        status: std::process::ExitStatus,
        /// The last lines of its standard error.
        stderr: String,
    },
    /// Reading or writing a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// A child's summary or metrics could not be read.
    #[error("{path}: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// Writing a CSV file.
    #[error("{path}: {source}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// The CSV error.
        source: csv::Error,
    },
    /// Drawing a chart.
    #[error(transparent)]
    Plot(#[from] sfb_plot::Error),
    /// A scenario option is out of range.
    #[error("{option} must be {expected}, got {got}")]
    Option {
        /// The option.
        option: &'static str,
        /// What it must be.
        expected: &'static str,
        /// What was given.
        got: String,
    },
    /// No scenario of this name.
    #[error("unknown training scenario {0:?}")]
    UnknownScenario(String),
}

/// The experiment module's result.
pub type Result<T> = std::result::Result<T, Error>;

fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Runs the training scenario `name`.
///
/// # Errors
/// [`Error::UnknownScenario`], then the scenario's.
pub fn scenario(name: &str, opts: &Options, runner: &Runner) -> Result<Report> {
    if opts.topology.is_some() && !scenarios::TOPOLOGY_SCENARIOS.contains(&name) {
        return Err(Error::Option {
            option: "topology",
            expected: "one of the scenarios with a single partial-broadcast topology: fms-vs-sfb, compression, model-size",
            got: format!("--scenario {name}"),
        });
    }
    if opts.model != PaperModel::Mlr && !scenarios::MODEL_SCENARIOS.contains(&name) {
        return Err(Error::Option {
            option: "model",
            expected: "mlr for this scenario (the paper's figures take another: model-size, batch, scaling, staleness, q-sweep)",
            got: format!("--model {} with --scenario {name}", opts.model),
        });
    }
    let mut report = match name {
        "fms-vs-sfb" => scenarios::fms_vs_sfb(opts, runner)?,
        "q-sweep" => scenarios::q_sweep(opts, runner)?,
        "staleness" => scenarios::staleness(opts, runner)?,
        "scaling" => scenarios::scaling(opts, runner)?,
        "model-size" => scenarios::model_size(opts, runner)?,
        "optimizers" => optimizers(opts, runner)?,
        "adarevision" => adarevision(opts, runner)?,
        "saga" => saga(opts, runner)?,
        "compression" => scenarios::compression(opts, runner)?,
        "prioritization" => prioritization(opts, runner)?,
        "scale" => scale(opts, runner)?,
        "stragglers" => stragglers(opts, runner)?,
        "essp" => scenarios::essp(opts, runner)?,
        "batch" => paper::batch(opts, runner)?,
        "overlap" => scenarios::overlap(opts, runner)?,
        "managed" => scenarios::managed(opts, runner)?,
        "rate-change" => scenarios::rate_change(opts, runner)?,
        other => return Err(Error::UnknownScenario(other.into())),
    };
    if opts.model != PaperModel::Mlr {
        paper::for_model(&mut report, opts.model);
    }
    let simulated = matches!(name, "scale" | "stragglers");
    let opts = &match (name, &opts.bandwidth) {
        ("managed" | "rate-change", None) => Options {
            bandwidth: Some(scenarios::MANAGED_BANDWIDTH.into()),
            ..opts.clone()
        },
        _ => opts.clone(),
    };
    if opts.transport != sfb_harness::Transport::Sim && !simulated {
        report.notes.push(
            "All peers (and the FMS server) share this machine's cores; the bandwidth budget is per node (--bandwidth: a token bucket on each node's sends, or under --netns the kernel's tbf). Compute-bound parts are therefore slower than on a cluster with a machine per peer, communication-bound parts are not."
                .into(),
        );
    } else if !simulated {
        let machine = match opts.sim.costs {
            sfb_harness::sim::CostModel::Calibrate => {
                "this machine's rates, measured before each arm (--costs calibrate)".to_string()
            }
            sfb_harness::sim::CostModel::Model => format!(
                "a machine of {:.2e} flop/s and {:.2e} B/s",
                opts.sim.flops, opts.sim.mem_bw
            ),
        };
        report.notes.push(format!(
            "Simulated (--transport sim): every arm ran on the discrete-event simulator, a NIC of {} per node and {machine} per node; times are simulated seconds.",
            opts.bandwidth(),
        ));
    }
    Ok(report)
}
