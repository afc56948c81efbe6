//! Training options shared by `sfb run`, `sfb peer` and `sfb server`, and the glue that
//! turns them into engines.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use sfb_core::{Config, Consistency, Engine, PeerId, Shard, shard_indices};
use sfb_models::{ClassificationSpec, Example, Mlr, MlrEvaluator, Straggler, synthetic};

/// Which model to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelKind {
    /// Multiclass logistic regression.
    Mlr,
}

impl ModelKind {
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Mlr => "mlr",
        }
    }
}

/// Training options.
#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// Model to train.
    #[arg(long, value_enum, default_value = "mlr")]
    pub model: ModelKind,
    /// Seeded synthetic data: comma-separated key=value, e.g.
    /// classes=20,features=100,samples=20000,density=0.1 (keys: classes, features, samples,
    /// test, density, noise, sep).
    #[arg(long, default_value = "classes=20,features=100,samples=20000")]
    pub synthetic: String,
    /// Mini-batch size K per peer and clock.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.5)]
    pub lr: f32,
    /// Clocks (iterations per peer).
    #[arg(long, default_value_t = 100)]
    pub clocks: u64,
    /// SSP staleness bound (0 = BSP). Shorthand for --consistency ssp:S.
    #[arg(long, conflicts_with = "consistency")]
    pub staleness: Option<u64>,
    /// Consistency model: bsp, ssp:S, async, throttle:K (go when ≥ K in-neighbours ready).
    #[arg(long)]
    pub consistency: Option<Consistency>,
    /// Seed for data, initial W and sampling.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Standard deviation of the initial W entries (same W on every peer).
    #[arg(long, default_value_t = 0.0)]
    pub init_std: f32,
    /// Evaluate held-out objective every N clocks (0: only at the end).
    #[arg(long, default_value_t = 10)]
    pub eval_every: u64,
    /// Write per-clock metrics as JSON lines here.
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    /// Write the run summary JSON here.
    #[arg(long)]
    pub summary: Option<PathBuf>,
    /// Slow one peer down: PEER:MILLISECONDS added to each of its steps.
    #[arg(long, value_parser = parse_straggler)]
    pub straggler: Option<(u32, u64)>,
}

fn parse_straggler(s: &str) -> Result<(u32, u64), String> {
    let (p, ms) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not PEER:MILLISECONDS"))?;
    Ok((
        p.parse()
            .map_err(|_| format!("peer {p:?} is not a number"))?,
        ms.parse()
            .map_err(|_| format!("milliseconds {ms:?} is not a number"))?,
    ))
}

impl TrainArgs {
    pub fn consistency(&self) -> Consistency {
        match (&self.consistency, self.staleness) {
            (Some(c), _) => c.clone(),
            (None, Some(0) | None) => Consistency::Bsp,
            (None, Some(s)) => Consistency::Ssp { staleness: s },
        }
    }
}

/// Data of a run: training samples and held-out samples, with the model shape.
pub struct Dataset {
    pub train: Vec<Example>,
    pub test: Arc<Vec<Example>>,
    pub classes: usize,
    pub features: usize,
}

pub fn load_data(args: &TrainArgs) -> Result<Dataset> {
    let spec: ClassificationSpec = args.synthetic.parse().context("--synthetic")?;
    let (train, test) = synthetic::classification(&spec, args.seed);
    Ok(Dataset {
        train,
        test: Arc::new(test),
        classes: spec.classes,
        features: spec.features,
    })
}

/// The model every peer runs: MLR, possibly slowed down on the straggler.
pub type PeerModel = Straggler<Mlr>;

/// Builds peer `id`'s engine.
pub fn build_engine(
    args: &TrainArgs,
    data: &Dataset,
    id: u32,
    peers: usize,
    out_neighbors: Vec<PeerId>,
    in_neighbors: Vec<PeerId>,
) -> Result<Engine<PeerModel>> {
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    if !(args.lr.is_finite() && args.lr > 0.0) {
        bail!("--lr must be a positive number, got {}", args.lr);
    }
    let mut cfg = Config::full_broadcast(PeerId(id), peers);
    cfg.out_neighbors = out_neighbors;
    cfg.in_neighbors = in_neighbors;
    cfg.consistency = args.consistency();
    cfg.clocks = args.clocks;
    cfg.batch_size = args.batch;
    cfg.lr = args.lr;
    cfg.eval_every = args.eval_every;
    let shard: Vec<Example> = shard_indices(data.train.len(), peers, id as usize)
        .map(|i| data.train[i].clone())
        .collect();
    if shard.is_empty() {
        bail!(
            "peer {id} has no training samples ({} samples over {peers} peers)",
            data.train.len()
        );
    }
    let delay = match args.straggler {
        Some((p, ms)) if p == id => Duration::from_millis(ms),
        _ => Duration::ZERO,
    };
    let model = Straggler::new(Mlr::new(data.classes, data.features), delay);
    let w0 = synthetic::init_w(data.classes, data.features, args.init_std, args.seed);
    let shard_seed = args
        .seed
        .wrapping_mul(1_000_003)
        .wrapping_add(u64::from(id));
    let engine = Engine::new(cfg, model, w0, Shard::new(shard, shard_seed))?
        .with_evaluator(Box::new(MlrEvaluator::new(Arc::clone(&data.test))));
    Ok(engine)
}
