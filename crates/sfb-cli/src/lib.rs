//! The `sfb` command line as a library: [`App`] is the `sfb` binary, and the entry point of
//! a program of your own that registers its models by name.
//!
//! ```no_run
//! use sfb_harness::{Cluster, RunSpec};
//! # use sfb_core::{Model, ModelError, SvList};
//! # struct LeastSquares;
//! # impl Model for LeastSquares {
//! #     type Sample = (Vec<f32>, Vec<f32>);
//! #     fn compute_sv(&mut self, _: ndarray::ArrayView2<'_, f32>, _: &[&Self::Sample],
//! #         _: &mut SvList) -> Result<(), ModelError> { Ok(()) }
//! # }
//! # fn samples(_: &RunSpec) -> Vec<(Vec<f32>, Vec<f32>)> { Vec::new() }
//! fn main() -> std::process::ExitCode {
//!     sfb_cli::App::new("my-bin")
//!         .model("lsq", |spec: &RunSpec| {
//!             Ok(Cluster::builder()
//!                 .model(|_| LeastSquares)
//!                 .init_w(ndarray::Array2::zeros((3, 8)))
//!                 .data(samples(spec)))
//!         })
//!         .main()
//! }
//! ```
//!
//! `my-bin run --model lsq --peers 4`, `my-bin run --model lsq --transport libp2p` (one
//! process of `my-bin` per peer), `my-bin sim --model lsq`, `my-bin cluster init` then
//! `my-bin peer --model lsq --cluster c.toml --id I` on each machine, and every other `sfb`
//! command, with the built-in models too.
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use sfb_harness::launch::{Launcher, NodeDone, NodeSpec, Role};
use sfb_harness::{Builder, ModelSource, Outcome, Progress};
use sfb_harness::{Cluster, RunSpec};

/// `print!` for the command line's output: a closed stdout (`sfb run … | head`) ends the
/// process quietly with status 0, as Unix tools end, instead of panicking.
macro_rules! out {
    ($($t:tt)*) => {
        $crate::write_stdout(format_args!($($t)*))
    };
}

/// `println!` as [`out!`].
macro_rules! outln {
    () => {
        $crate::write_stdout(format_args!("\n"))
    };
    ($($t:tt)*) => {
        $crate::write_stdout(format_args!("{}\n", format_args!($($t)*)))
    };
}

mod bench;
mod bench_args;
mod bench_link;
mod bench_netns;
mod bench_train;
mod demo;
mod experiment;
mod fms;
mod model;
mod netns;
mod p2p;
mod plan;
mod run;
mod sim;
mod topology;
mod train;

/// Writes `args` to stdout ([`out!`]): a reader that went away (`EPIPE`) ends the
/// process with status 0; any other write error panics, as `print!` does.
fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        panic!("failed printing to stdout: {e}");
    }
}

/// Sufficient Factor Broadcasting: distributed training of matrix-parametrized models.
#[derive(Debug, Parser)]
#[command(name = "sfb", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The main job: SFB full vs partial broadcast vs the FMS parameter server on a local
    /// cluster and built-in data; prints a table, writes plots.
    Demo(demo::DemoArgs),
    /// Train on a whole local cluster (P peers, threads or one process each) in one command.
    Run(run::RunArgs),
    /// Train a whole cluster on the deterministic simulator, in simulated seconds.
    ///
    /// Real engines, a modelled network (NIC rates, link delay) and machine (GEMM rate,
    /// memory bandwidth); deterministic, in simulated seconds.
    Sim(Box<sim::SimArgs>),
    /// Predict the time per clock of each backend for a cluster, and recommend one.
    ///
    /// SFB full and partial broadcast, FMS and a ring allreduce at given shapes, cluster
    /// size, link and machine.
    Plan(Box<plan::PlanArgs>),
    /// Run one peer (or FMS client) of a cluster file until its clocks are done.
    Peer(Box<p2p::PeerArgs>),
    /// Build, analyse or repair a Q-out partial-broadcast topology; write it as TOML, JSON or DOT.
    Topology(topology::TopologyArgs),
    /// Run the FMS parameter server of a cluster file.
    Server(Box<p2p::ServerArgs>),
    /// Write the cluster files (addresses, keys, topology) that `sfb peer` and `sfb server` read.
    #[command(subcommand)]
    Cluster(p2p::ClusterCmd),
    /// Run a benchmark scenario and write its report (Markdown, JSON, CSV, PNG).
    Bench(bench_args::BenchArgs),
    /// Predict with a saved model (--save-model): a label per sample (dml: its embedding).
    Predict(model::PredictArgs),
    /// Evaluate a saved classifier on labelled data: mean cross-entropy and accuracy.
    Eval(model::EvalArgs),
}

/// The built-in models' names, as `--model` takes them.
const BUILT_IN: [&str; 4] = ["mlr", "l2mlr", "dml", "sc"];

/// The subcommands that take `--model` (the training options).
const TRAINING: [&str; 4] = ["run", "sim", "peer", "server"];

/// A command-line program: the `sfb` commands with the built-in models and the models
/// registered with [`model`](Self::model). Every subcommand that trains (`run`, `sim`,
/// `peer`, `server`) takes `--model NAME` for any of them, and `run --transport libp2p`
/// starts this program's own executable once per node.
pub struct App {
    name: String,
    models: BTreeMap<String, Arc<dyn Registered>>,
    exe: Option<PathBuf>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("name", &self.name)
            .field("models", &self.models.keys().collect::<Vec<_>>())
            .field("exe", &self.exe)
            .finish()
    }
}

impl App {
    /// The program `name` (its name in `--help`) with the built-in models only: the `sfb`
    /// binary is `App::new("sfb").main()`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            models: BTreeMap::new(),
            exe: None,
        }
    }

    /// Registers a model as `--model NAME`. `make` returns the builder of a run of it
    /// with the model, its starting W and its data set ([`Cluster::builder`]`.model(..)`,
    /// `.init_w(..)`, `.data(..)`); it gets the run's spec (`spec.seed`, `spec.data`,
    /// `spec.peers`, …) to choose them by. Every other setting is the command line's
    /// ([`Builder::with_spec`]): what `make` sets beyond the model and its data is
    /// replaced. Each node of a libp2p run calls `make` in its own process.
    ///
    /// # Panics
    /// If `name` is a built-in model's or registered twice: a program's models have one
    /// name each.
    #[must_use]
    pub fn model<K, F>(mut self, name: &str, make: F) -> Self
    where
        K: ModelSource + 'static,
        K::Model: Send + 'static,
        F: Fn(&RunSpec) -> Result<Builder<K>, BoxError> + Send + Sync + 'static,
    {
        assert!(
            !BUILT_IN.contains(&name) && !self.models.contains_key(name),
            "model {name:?} is registered twice (or is a built-in model's name)"
        );
        let entry = Entry {
            name: name.to_string(),
            make,
            _kind: PhantomData,
        };
        self.models.insert(name.to_string(), Arc::new(entry));
        self
    }

    /// The executable `run --transport libp2p` starts for each node. Default: this
    /// process's own ([`std::env::current_exe`]), which is this program.
    #[must_use]
    pub fn exe(mut self, exe: impl Into<PathBuf>) -> Self {
        self.exe = Some(exe.into());
        self
    }

    /// Parses the process's arguments, runs the command, and returns its exit status
    /// (errors are printed on stderr, on one line).
    pub fn main(self) -> ExitCode {
        self.main_from(std::env::args_os())
    }

    /// [`main`](Self::main) with these arguments (the first is the program's name).
    pub fn main_from<I, T>(self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        // A second call (a test running two apps) keeps the first subscriber.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .with_writer(std::io::stderr)
            .try_init();
        let names: Vec<String> = BUILT_IN
            .iter()
            .map(|s| s.to_string())
            .chain(self.models.keys().cloned())
            .collect();
        let mut command = Cli::command().name(self.name.clone());
        for sub in TRAINING {
            let names = names.clone();
            command = command.mut_subcommand(sub, |c| {
                c.mut_arg("model", |a| {
                    a.value_parser(clap::builder::PossibleValuesParser::new(names))
                })
            });
        }
        let cli = match Cli::from_arg_matches(&command.get_matches_from(args)) {
            Ok(cli) => cli,
            Err(e) => e.exit(),
        };
        match self.dispatch(&cli.command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {}", one_line(&e));
                if cut_off(&e) {
                    ExitCode::from(sfb_harness::launch::CUT_OFF_EXIT)
                } else {
                    ExitCode::FAILURE
                }
            }
        }
    }

    fn dispatch(&self, command: &Command) -> anyhow::Result<()> {
        match command {
            Command::Demo(a) => demo::run(a),
            Command::Run(a) => run::run(a, self),
            Command::Sim(a) => sim::run(a, self),
            Command::Plan(a) => plan::run(a),
            Command::Peer(a) => p2p::peer(a, self),
            Command::Server(a) => p2p::server(a, self),
            Command::Cluster(c) => p2p::cluster(c),
            Command::Topology(a) => topology::run(a),
            Command::Bench(a) => bench::run(a),
            Command::Predict(a) => model::predict(a),
            Command::Eval(a) => model::eval(a),
        }
    }

    /// The launcher of this program's nodes: [`exe`](Self::exe), else this process's own
    /// executable.
    // The harness's own error, as it returned it: `train::cli_error` words it by flags.
    #[allow(clippy::result_large_err)]
    fn launcher(&self) -> sfb_harness::Result<Launcher> {
        let exe = match &self.exe {
            Some(e) => e.clone(),
            None => std::env::current_exe().map_err(|source| sfb_harness::launch::Error::Io {
                what: "locating this program's executable".into(),
                source,
            })?,
        };
        Ok(Launcher::new(exe))
    }

    /// The registered model `name`, or an error naming the ones there are.
    #[allow(clippy::result_large_err)]
    fn registered(&self, name: &str) -> sfb_harness::Result<&Arc<dyn Registered>> {
        self.models
            .get(name)
            .ok_or_else(|| sfb_harness::Error::UnknownModel {
                name: name.to_string(),
                known: if self.models.is_empty() {
                    "the built-in models only".into()
                } else {
                    let mine: Vec<&str> = self.models.keys().map(String::as_str).collect();
                    format!("the built-in models and {}", mine.join(", "))
                },
            })
    }

    /// Carries out `spec` (its transport, its backend) with its model, built-in or
    /// registered.
    #[allow(clippy::result_large_err)]
    fn execute(&self, spec: &RunSpec, progress: Option<Progress>) -> sfb_harness::Result<Outcome> {
        let launcher = self.launcher()?;
        match &spec.custom_model {
            Some(name) => self.registered(name)?.run(spec, progress, &launcher),
            None => sfb_harness::run_with(spec, progress, Some(&launcher), Cluster::from_spec),
        }
    }

    /// Runs one node of a cluster file with the spec's model, built-in or registered.
    #[allow(clippy::result_large_err)]
    fn node(&self, spec: &NodeSpec, cluster: &Path, role: Role) -> sfb_harness::Result<NodeDone> {
        match &spec.run.custom_model {
            Some(name) => self.registered(name)?.node(spec, cluster, role),
            None => sfb_harness::launch::run_node(spec, cluster, role),
        }
    }
}

/// A registered model, its builder's type erased. Its methods return the harness's
/// error as the harness does.
#[allow(clippy::result_large_err)]
trait Registered: Send + Sync {
    fn run(
        &self,
        spec: &RunSpec,
        progress: Option<Progress>,
        launcher: &Launcher,
    ) -> sfb_harness::Result<Outcome>;
    fn node(&self, spec: &NodeSpec, cluster: &Path, role: Role) -> sfb_harness::Result<NodeDone>;
}

/// What a registered model's `make` may fail with: any error (`?` on the program's own).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Entry<F, K> {
    name: String,
    make: F,
    _kind: PhantomData<fn() -> K>,
}

#[allow(clippy::result_large_err)]
impl<F, K> Entry<F, K>
where
    K: ModelSource,
    F: Fn(&RunSpec) -> Result<Builder<K>, BoxError>,
{
    /// The user's builder with the spec's settings.
    fn build(&self, spec: &RunSpec) -> sfb_harness::Result<Builder<K>> {
        match (self.make)(spec) {
            Ok(builder) => Ok(builder.with_spec(spec)),
            Err(source) => Err(sfb_harness::Error::Registered {
                name: self.name.clone(),
                source,
            }),
        }
    }
}

#[allow(clippy::result_large_err)]
impl<F, K> Registered for Entry<F, K>
where
    K: ModelSource + 'static,
    K::Model: Send + 'static,
    F: Fn(&RunSpec) -> Result<Builder<K>, BoxError> + Send + Sync,
{
    fn run(
        &self,
        spec: &RunSpec,
        progress: Option<Progress>,
        launcher: &Launcher,
    ) -> sfb_harness::Result<Outcome> {
        sfb_harness::run_with(spec, progress, Some(launcher), |s| self.build(s))
    }

    fn node(&self, spec: &NodeSpec, cluster: &Path, role: Role) -> sfb_harness::Result<NodeDone> {
        sfb_harness::launch::run_node_with(spec, cluster, role, &|s| self.build(s))
    }
}

/// The error and its causes on one line, each cause once: most of our errors already
/// name their cause in their own message (`file: No such file or directory`), which
/// `{:#}` would repeat.
/// Whether `e` says the node stopped cut off from the run (the minority side of a cut, or
/// never reaching any peer): [`sfb_harness::launch::CUT_OFF_EXIT`], by which a launcher
/// tells such a node from a failed one.
fn cut_off(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<sfb_core::Error>(),
            Some(sfb_core::Error::Minority { .. } | sfb_core::Error::Isolated { .. })
        )
    })
}

fn one_line(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg = format!("{msg}: {c}");
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;
    use std::collections::BTreeSet;

    /// The long flags of `sfb SUB`.
    fn longs(sub: &str) -> BTreeSet<String> {
        let cli = Cli::command();
        let sub = cli.find_subcommand(sub).expect("a subcommand");
        sub.get_arguments()
            .filter_map(|a| a.get_long())
            .map(|l| format!("--{l}"))
            .collect()
    }

    /// The spec's flag table ([`sfb_harness::flags::FLAGS`]) and clap's definitions name
    /// the same flags: every row's flag is one `sfb run` (a `sim.` row: `sfb sim`) takes,
    /// and every flag of theirs sets a spec field of the table or is one of the few that
    /// set none. A flag added to either side alone fails here.
    #[test]
    fn the_flag_table_and_the_command_line_name_the_same_flags() {
        let (run, sim) = (longs("run"), longs("sim"));
        let table = sfb_harness::flags::FLAGS;
        for row in table {
            let on = if row.field.starts_with("sim.") {
                &sim
            } else {
                &run
            };
            assert!(on.contains(row.flag), "{row:?}: no such flag");
        }
        let rows: BTreeSet<&str> = table.iter().map(|r| r.flag).collect();
        // Flags that set no spec field of their own: the spec itself, what is printed, and
        // `--staleness S`, a shorthand of `--consistency ssp:S`.
        let none = ["--help", "--spec", "--print-spec", "--staleness"];
        let stray: Vec<&String> = run
            .iter()
            .chain(&sim)
            .filter(|f| !rows.contains(f.as_str()) && !none.contains(&f.as_str()))
            .collect();
        assert!(
            stray.is_empty(),
            "flags that set no field of the table: {stray:?}"
        );
    }
}
