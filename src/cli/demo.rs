//! `sfb demo`: the main job — a local cluster on built-in data, compared across
//! consistency models, with a table at the end.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use sfb_core::Consistency;
use sfb_core::metrics::Summary;

use super::train::{ModelKind, TrainArgs};

/// `sfb demo` options.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Peers.
    #[arg(long, default_value_t = 4)]
    pub peers: usize,
    /// Clocks per arm.
    #[arg(long, default_value_t = 300)]
    pub clocks: u64,
    /// Straggler delay in milliseconds added to the last peer's steps in the straggler arms.
    #[arg(long, default_value_t = 5)]
    pub straggler_ms: u64,
    /// Output folder for summaries and metrics.
    #[arg(short = 'o', long, default_value = "sfb-demo")]
    pub out: PathBuf,
}

pub fn run(args: &DemoArgs) -> Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let p = args.peers.max(1);
    let base = TrainArgs {
        model: ModelKind::Mlr,
        synthetic: "classes=20,features=200,samples=40000,noise=0.3".into(),
        batch: 16,
        lr: 0.5,
        clocks: args.clocks,
        staleness: None,
        consistency: Some(Consistency::Bsp),
        seed: 2016,
        init_std: 0.0,
        eval_every: 25,
        metrics: None,
        summary: None,
        straggler: None,
        model_opts: Default::default(),
    };
    let straggler = Some(((p - 1) as u32, args.straggler_ms));
    let arms: Vec<(&str, TrainArgs)> = vec![
        ("full broadcast, BSP", base.clone()),
        (
            "full broadcast, BSP, straggler",
            TrainArgs {
                straggler,
                ..base.clone()
            },
        ),
        (
            "full broadcast, SSP s=3, straggler",
            TrainArgs {
                consistency: Some(Consistency::Ssp { staleness: 3 }),
                straggler,
                ..base.clone()
            },
        ),
        (
            "full broadcast, async, straggler",
            TrainArgs {
                consistency: Some(Consistency::Async),
                straggler,
                ..base.clone()
            },
        ),
    ];
    println!(
        "sfb demo: MLR (J=20 classes, D=200 features, 40000 synthetic samples, seed 2016), {p} peers, K=16, {} clocks per arm; straggler = peer {} +{} ms/step",
        args.clocks,
        p - 1,
        args.straggler_ms
    );
    let mut rows: Vec<(String, Summary)> = Vec::new();
    for (i, (name, train)) in arms.into_iter().enumerate() {
        eprintln!("[{}/4] {name} …", i + 1);
        let full: Vec<Vec<usize>> = (0..p)
            .map(|i| (0..p).filter(|&j| j != i).collect())
            .collect();
        let (summary, records) =
            super::run::run_mem_cluster(&full, &train, Duration::from_secs(60))?;
        let slug = name.replace([',', ' ', '='], "_").replace("__", "_");
        std::fs::write(
            args.out.join(format!("{slug}.summary.json")),
            serde_json::to_string_pretty(&summary)? + "\n",
        )?;
        let mut lines = String::new();
        for r in &records {
            lines += &serde_json::to_string(r)?;
            lines.push('\n');
        }
        std::fs::write(args.out.join(format!("{slug}.metrics.jsonl")), lines)?;
        rows.push((name.to_string(), summary));
    }
    println!(
        "\n{:<36} {:>7} {:>10} {:>11} {:>8} {:>8} {:>8} {:>9} {:>8} {:>6}",
        "arm",
        "wall s",
        "samples/s",
        "bytes/clock",
        "compute",
        "apply",
        "wait",
        "objective",
        "accuracy",
        "stale"
    );
    for (name, s) in &rows {
        println!(
            "{:<36} {:>7.2} {:>10.0} {:>11.0} {:>8.3} {:>8.3} {:>8.3} {:>9.4} {:>8.4} {:>6}",
            name,
            s.wall_s,
            s.samples_per_s,
            s.bytes_per_clock,
            s.compute_s,
            s.apply_s,
            s.wait_s,
            s.objective.unwrap_or(f64::NAN),
            s.test_accuracy.unwrap_or(f64::NAN),
            s.max_staleness
        );
    }
    println!(
        "\n(compute/apply/wait: mean seconds per peer; stale: largest staleness applied, in clocks)\nsummaries and per-clock metrics in {}/",
        args.out.display()
    );
    Ok(())
}
