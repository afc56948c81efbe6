//! `sfb demo`: the main job. A local cluster on built-in (seeded synthetic) data runs SFB
//! full broadcast, SFB partial broadcast over an optimized topology and the FMS parameter
//! server with the same model, seed and per-node bandwidth budget, then prints a table and
//! writes plots ([`sfb_lab::experiment::demo`]).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use sfb_lab::experiment::{self, Demo, Error};

/// `sfb demo` options.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Peers P.
    #[arg(long, default_value_t = 6)]
    pub peers: usize,
    /// Out-degree Q of the partial-broadcast arm.
    #[arg(long, default_value_t = 2)]
    pub out_degree: usize,
    /// Clocks per arm.
    #[arg(long, default_value_t = 100)]
    pub clocks: u64,
    /// Bandwidth budget of every node (peers and the FMS server), e.g. 100mbit, 1gbit.
    #[arg(long, default_value = "100mbit")]
    pub bandwidth: sfb_net::bandwidth::Rate,
    /// Transport: libp2p (one process per node, bandwidth budget enforced) or mem
    /// (threads, no budget).
    #[arg(long, default_value = "libp2p", value_parser = ["libp2p", "mem"])]
    pub transport: String,
    /// Output folder for the table, JSON, CSV and PNG plots.
    #[arg(short = 'o', long, default_value = "sfb-demo")]
    pub out: PathBuf,
}

pub fn run(args: &DemoArgs) -> Result<()> {
    let demo = Demo {
        peers: args.peers,
        out_degree: args.out_degree,
        clocks: args.clocks,
        bandwidth: args.bandwidth,
        transport: match args.transport.as_str() {
            "mem" => sfb_harness::Transport::Mem,
            _ => sfb_harness::Transport::Libp2p,
        },
    };
    // Options named by their flags.
    let flagged = |e: Error| match e {
        Error::Option {
            option,
            expected,
            got,
        } => {
            anyhow::anyhow!(
                "--{} must be {expected}, got {got}",
                option.replace('_', "-")
            )
        }
        e => e.into(),
    };
    demo.arms().map_err(flagged)?;
    // The folder is made (and found writable) before the first arm, not after the last.
    sfb_harness::preflight::output_dir("-o", &args.out).map_err(super::train::cli_error)?;
    outln!(
        "sfb demo: MLR on seeded synthetic data (J=256 classes of Gaussian blobs × D=1024 features, 24000 samples, 1000 held out; chance is 0.4%), {} peers, K=16, BSP, default optimizer, {} clocks per arm, {}, over {}",
        args.peers,
        args.clocks,
        demo.budget(),
        args.transport
    );
    let mut report = experiment::demo(&demo, &super::experiment::runner()).map_err(flagged)?;
    super::experiment::finish(&mut report, &args.out)?;
    outln!(
        "compute / apply / wait / other: mean ms per clock of a peer (FMS: of a client); times exclude evaluation.\n(open {}/demo-objective-vs-time.png)",
        args.out.display()
    );
    Ok(())
}
