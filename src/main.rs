//! The `sfb` command.

use clap::{Parser, Subcommand};

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

mod cli;

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
    Demo(cli::demo::DemoArgs),
    /// Train on a whole local cluster (P peers, threads or one process each) in one command.
    Run(cli::run::RunArgs),
    /// Train a whole cluster on the deterministic simulator, in simulated seconds.
    ///
    /// Real engines, a modelled network (NIC rates, link delay) and machine (GEMM rate,
    /// memory bandwidth); deterministic, in simulated seconds.
    Sim(Box<cli::sim::SimArgs>),
    /// Predict the time per clock of each backend for a cluster, and recommend one.
    ///
    /// SFB full and partial broadcast, FMS and a ring allreduce at given shapes, cluster
    /// size, link and machine.
    Plan(Box<cli::plan::PlanArgs>),
    /// Run one peer (or FMS client) of a cluster file until its clocks are done.
    Peer(Box<cli::p2p::PeerArgs>),
    /// Build, analyse or repair a Q-out partial-broadcast topology; write it as TOML, JSON or DOT.
    Topology(cli::topology::TopologyArgs),
    /// Run the FMS parameter server of a cluster file.
    Server(Box<cli::p2p::ServerArgs>),
    /// Write the cluster files (addresses, keys, topology) that `sfb peer` and `sfb server` read.
    #[command(subcommand)]
    Cluster(cli::p2p::ClusterCmd),
    /// Run a benchmark scenario and write its report (Markdown, JSON, CSV, PNG).
    Bench(cli::bench::BenchArgs),
    /// Predict with a saved model (--save-model): a label per sample (dml: its embedding).
    Predict(cli::model::PredictArgs),
    /// Evaluate a saved classifier on labelled data: mean cross-entropy and accuracy.
    Eval(cli::model::EvalArgs),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let r = match &cli.command {
        Command::Demo(a) => cli::demo::run(a),
        Command::Run(a) => cli::run::run(a),
        Command::Sim(a) => cli::sim::run(a),
        Command::Plan(a) => cli::plan::run(a),
        Command::Peer(a) => cli::p2p::peer(a),
        Command::Server(a) => cli::p2p::server(a),
        Command::Cluster(c) => cli::p2p::cluster(c),
        Command::Topology(a) => cli::topology::run(a),
        Command::Bench(a) => cli::bench::run(a),
        Command::Predict(a) => cli::model::predict(a),
        Command::Eval(a) => cli::model::eval(a),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, each cause once: most of our errors already
/// name their cause in their own message (`file: No such file or directory`), which
/// `{:#}` would repeat.
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
