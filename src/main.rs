//! The `sfb` command.

use clap::{Parser, Subcommand};

mod cli;

/// Sufficient Factor Broadcasting: distributed training of matrix-parametrized models.
#[derive(Debug, Parser)]
#[command(name = "sfb", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The main job: a local cluster on built-in data, compared across consistency models.
    Demo(cli::demo::DemoArgs),
    /// Run a whole cluster (P peers) in one command.
    Run(cli::run::RunArgs),
    /// Run a whole cluster on the discrete-event simulator: real engines, a modelled
    /// network (NIC rates, link delay) and machine (GEMM rate, memory bandwidth);
    /// deterministic, in simulated seconds.
    Sim(Box<cli::sim::SimArgs>),
    /// Predict the time per clock of SFB full and partial broadcast, FMS and a ring
    /// allreduce at given shapes, cluster size, link and machine, and recommend one.
    Plan(Box<cli::plan::PlanArgs>),
    /// Run one peer of a cluster file until its clocks are done.
    Peer(Box<cli::p2p::PeerArgs>),
    /// Q-out partial-broadcast topologies: optimize, construct, analyse, repair.
    Topology(cli::topology::TopologyArgs),
    /// Run the FMS parameter server of a cluster file.
    Server(Box<cli::p2p::ServerArgs>),
    /// Cluster files.
    #[command(subcommand)]
    Cluster(cli::p2p::ClusterCmd),
    /// Benchmarks: paired comparisons measured in one run.
    Bench(cli::bench::BenchArgs),
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
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
