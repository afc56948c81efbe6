//! Training options shared by `sfb run`, `sfb peer` and `sfb server`, and the glue that
//! turns them into engines.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use sfb_core::{Config, Consistency, Engine, PeerId, Shard};
use sfb_models::data::{self, CsvOptions, LibsvmOptions};
use sfb_models::{
    AnyModel, ClassificationSpec, ClusterSpec, Example, ModelSpec, Problem, Schedule, SignalSpec,
    Straggler, synthetic,
};

/// Which model to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelKind {
    /// Multiclass logistic regression (SGD).
    Mlr,
    /// L2-regularized multiclass logistic regression by SDCA (uses --lambda; ignores --lr).
    L2mlr,
    /// Distance metric learning (uses --latent, --margin).
    Dml,
    /// Sparse coding / dictionary learning (uses --dict-size, --lambda, --sweeps).
    Sc,
}

impl ModelKind {
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Mlr => "mlr",
            ModelKind::L2mlr => "l2mlr",
            ModelKind::Dml => "dml",
            ModelKind::Sc => "sc",
        }
    }
}

/// Data files and per-model parameters.
#[derive(Debug, Clone, Args)]
pub struct ModelOptions {
    /// Training data: LIBSVM/svmlight (0/1-based indices detected), or dense CSV (label in
    /// the first column) when the name ends in .csv. Replaces --synthetic.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Held-out data, read like --data (same features and labels). Without it, --holdout
    /// of --data is held out.
    #[arg(long, requires = "data")]
    pub test_data: Option<PathBuf>,
    /// Fraction of --data held out (seeded) when --test-data is not given.
    #[arg(long, default_value_t = 0.2)]
    pub holdout: f64,
    /// Number of features D of --data (default: the largest index found).
    #[arg(long)]
    pub features: Option<usize>,
    /// l2mlr: regularization λ of (λ/2)‖W‖² (default 1e-3); sc: ℓ1 weight of the codes
    /// (default 0.1).
    #[arg(long)]
    pub lambda: Option<f64>,
    /// dml: rows of the learned projection L (latent dimension).
    #[arg(long, default_value_t = 8)]
    pub latent: usize,
    /// dml: hinge margin of dissimilar pairs (distances start near 1).
    #[arg(long, default_value_t = 1.0)]
    pub margin: f32,
    /// sc: dictionary size (atoms).
    #[arg(long, default_value_t = 32)]
    pub dict_size: usize,
    /// sc: coordinate-descent sweeps per code while training.
    #[arg(long, default_value_t = 10)]
    pub sweeps: usize,
    /// sc: step-size decay: the step at clock t is lr/√(1 + t/DECAY) (0: constant).
    #[arg(long, default_value_t = 0.0)]
    pub decay: f32,
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            data: None,
            test_data: None,
            holdout: 0.2,
            features: None,
            lambda: None,
            latent: 8,
            margin: 1.0,
            dict_size: 32,
            sweeps: 10,
            decay: 0.0,
        }
    }
}

/// Training options.
#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// Model to train.
    #[arg(long, value_enum, default_value = "mlr")]
    pub model: ModelKind,
    /// Seeded synthetic data (when no --data): comma-separated key=value, e.g.
    /// classes=20,features=100,samples=20000,density=0.1. mlr/l2mlr keys: classes,
    /// features, samples, test, density, noise, sep; dml: classes, features, informative,
    /// samples, test, noise, sep; sc: features, atoms (or classes), sparsity, samples,
    /// test, noise.
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
    /// Slow peers down: PEER:MILLISECONDS adds the delay to each of that peer's steps;
    /// rotate:MILLISECONDS adds it to one peer per clock, a different (seeded) one each
    /// clock.
    #[arg(long, value_parser = parse_straggler)]
    pub straggler: Option<(u32, u64)>,
    /// Data files and per-model parameters.
    #[command(flatten)]
    pub model_opts: Box<ModelOptions>,
}

/// The peer index `--straggler rotate:MS` is stored under.
pub const ROTATING_STRAGGLER: u32 = u32::MAX;

fn parse_straggler(s: &str) -> Result<(u32, u64), String> {
    let (p, ms) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not PEER:MILLISECONDS or rotate:MILLISECONDS"))?;
    Ok((
        if p == "rotate" {
            ROTATING_STRAGGLER
        } else {
            p.parse()
                .ok()
                .filter(|&p| p != ROTATING_STRAGGLER)
                .ok_or_else(|| format!("peer {p:?} is not a peer number or \"rotate\""))?
        },
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

    /// The model and its parameters.
    pub fn model_spec(&self) -> Result<ModelSpec> {
        let o = &self.model_opts;
        let lambda = |default: f64| -> Result<f64> {
            let l = o.lambda.unwrap_or(default);
            if !(l.is_finite() && l >= 0.0) {
                bail!("--lambda must be a non-negative number, got {l}");
            }
            Ok(l)
        };
        Ok(match self.model {
            ModelKind::Mlr => ModelSpec::Mlr,
            ModelKind::L2mlr => {
                let lambda = lambda(1e-3)?;
                if lambda <= 0.0 {
                    bail!("--lambda must be positive for l2mlr");
                }
                ModelSpec::L2Mlr { lambda }
            }
            ModelKind::Dml => ModelSpec::Dml {
                latent: o.latent,
                margin: o.margin,
            },
            ModelKind::Sc => ModelSpec::SparseCoding {
                atoms: o.dict_size,
                lambda: lambda(0.1)? as f32,
                sweeps: o.sweeps,
                decay: o.decay,
            },
        })
    }
}

/// Data of a run: training samples and held-out samples, with the model shape.
pub struct Dataset {
    /// Every training sample (each peer takes its shard).
    pub train: Arc<Vec<Example>>,
    pub test: Arc<Vec<Example>>,
    /// Classes (1 for unlabelled data).
    pub classes: usize,
    pub features: usize,
}

/// Reads `--data`/`--test-data`, or generates the model's kind of `--synthetic` data.
pub fn load_data(args: &TrainArgs) -> Result<Dataset> {
    let o = &args.model_opts;
    let dense = matches!(args.model, ModelKind::Dml | ModelKind::Sc);
    if let Some(path) = &o.data {
        let is_csv =
            |p: &std::path::Path| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        let mut train = if is_csv(path) {
            data::read_csv(
                path,
                &CsvOptions {
                    features: o.features,
                    ..CsvOptions::default()
                },
            )?
        } else {
            data::read_libsvm(
                path,
                &LibsvmOptions {
                    features: o.features,
                    ..LibsvmOptions::default()
                },
            )?
        };
        if dense {
            train.densify();
        }
        let (classes, features) = (train.labels.classes(), train.features);
        if features == 0 {
            bail!("{}: no features (every value is zero)", path.display());
        }
        let (train, test) = match &o.test_data {
            Some(tp) => {
                let mut test = if is_csv(tp) {
                    data::read_csv(tp, &CsvOptions::like(&train))?
                } else {
                    data::read_libsvm(tp, &LibsvmOptions::like(&train))?
                };
                if dense {
                    test.densify();
                }
                (train.samples, test.samples)
            }
            None => {
                if !(o.holdout > 0.0 && o.holdout < 1.0) {
                    bail!("--holdout must be in (0, 1), got {}", o.holdout);
                }
                train.split(o.holdout, args.seed)
            }
        };
        return Ok(Dataset {
            train: Arc::new(train),
            test: Arc::new(test),
            classes,
            features,
        });
    }
    let (train, test, classes, features) = match args.model {
        ModelKind::Mlr | ModelKind::L2mlr => {
            let spec: ClassificationSpec = args.synthetic.parse().context("--synthetic")?;
            let (tr, te) = synthetic::classification(&spec, args.seed);
            (tr, te, spec.classes, spec.features)
        }
        ModelKind::Dml => {
            let spec: ClusterSpec = args.synthetic.parse().context("--synthetic")?;
            let (tr, te) = synthetic::clusters(&spec, args.seed);
            (tr, te, spec.classes, spec.features)
        }
        ModelKind::Sc => {
            let spec: SignalSpec = args.synthetic.parse().context("--synthetic")?;
            let (tr, te) = synthetic::signals(&spec, args.seed);
            (tr, te, 1, spec.features)
        }
    };
    Ok(Dataset {
        train: Arc::new(train),
        test: Arc::new(test),
        classes,
        features,
    })
}

/// The model every peer runs: any built-in model, possibly slowed down on the straggler.
pub type PeerModel = Straggler<AnyModel>;

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
    let spec = args.model_spec()?;
    let mut cfg = Config::full_broadcast(PeerId(id), peers);
    cfg.out_neighbors = out_neighbors;
    cfg.in_neighbors = in_neighbors;
    cfg.consistency = args.consistency();
    cfg.clocks = args.clocks;
    cfg.batch_size = args.batch;
    cfg.lr = args.lr;
    cfg.eval_every = args.eval_every;
    let shard = data::shard(&data.train, peers, id as usize);
    if shard.is_empty() {
        bail!(
            "peer {id} has no training samples ({} samples over {peers} peers)",
            data.train.len()
        );
    }
    let (delay, schedule) = match args.straggler {
        Some((ROTATING_STRAGGLER, ms)) => (
            Duration::from_millis(ms),
            Schedule::Rotating {
                id,
                peers: peers as u32,
                seed: args.seed,
            },
        ),
        Some((p, ms)) if p == id => (Duration::from_millis(ms), Schedule::Always),
        _ => (Duration::ZERO, Schedule::Always),
    };
    let problem = Problem {
        train: Arc::clone(&data.train),
        test: Arc::clone(&data.test),
        classes: data.classes,
        features: data.features,
    };
    let shard_seed = args
        .seed
        .wrapping_mul(1_000_003)
        .wrapping_add(u64::from(id));
    let model = spec
        .build(&problem, &shard, peers, shard_seed)
        .with_context(|| format!("building the {} model", spec.name()))?;
    let model = Straggler::with_schedule(model, delay, schedule);
    let w0 = spec.init_w(&problem, args.init_std, args.seed);
    let engine = Engine::new(cfg, model, w0, Shard::new(shard, shard_seed))?
        .with_evaluator(spec.evaluator(&problem, args.seed));
    Ok(engine)
}
