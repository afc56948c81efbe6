//! `sfb bench` training scenarios ([`sfb_lab::experiment::scenario`]): paired
//! comparisons of whole training runs measured in one invocation.

use anyhow::Result;
use sfb_lab::experiment::{self, Options};

use super::bench_args::{BenchArgs, check_out_dir, out_dir};

pub use sfb_lab::experiment::SCENARIOS;

/// The scenario options of `args`.
fn options(args: &BenchArgs) -> Result<Options> {
    Ok(Options {
        transport: match args.transport.as_str() {
            "mem" => sfb_harness::Transport::Mem,
            "sim" => sfb_harness::Transport::Sim,
            _ => sfb_harness::Transport::Libp2p,
        },
        sim: {
            let mut sim = args.sim.options();
            if args.scenario == "scale" && args.sim.flops.is_none() {
                // The scale scenario's cluster: 16-core machines.
                sim.flops = experiment::SCALE_CORES as f64 * sfb_harness::sim::DEFAULT_FLOPS;
            }
            sim
        },
        peers: args.peers,
        size: args.size,
        sizes: match &args.sizes {
            Some(s) => Some(
                s.split(',')
                    .map(|x| x.trim().parse())
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| anyhow::anyhow!("--sizes {s:?}: {e}"))?,
            ),
            None => None,
        },
        clocks: args.clocks,
        target_frac: args.target_frac,
        eval_every: args.eval_every,
        straggler_ms: args.straggler_ms,
        bandwidth: args.bandwidth.clone(),
        topology: args.topology.clone(),
        partial: args.partial,
        model: args.model.unwrap_or_default(),
        quick: args.quick,
        literal_beside: false,
    })
}

/// `--scenario paper` ([`experiment::paper`]): every figure's report and the index, into
/// `args.out` (default `sfb-bench/`).
pub fn paper(args: &BenchArgs) -> Result<()> {
    if let Some(m) = args.model {
        anyhow::bail!("--model {m}: the paper scenario runs every model; leave --model out");
    }
    let opts = options(args)?;
    check_out_dir(args)?;
    let dir = out_dir(args);
    let mut index = experiment::paper(&opts, &super::experiment::runner(), &dir)?;
    super::experiment::finish(&mut index, &dir)
}

/// Runs `name`, writing into `args.out` (default `sfb-bench/`).
pub fn run(name: &str, args: &BenchArgs) -> Result<()> {
    let opts = options(args)?;
    check_out_dir(args)?;
    let mut report = experiment::scenario(name, &opts, &super::experiment::runner())?;
    super::experiment::finish(&mut report, &out_dir(args))
}
