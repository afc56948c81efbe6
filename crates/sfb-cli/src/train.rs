//! Training options shared by `sfb run`, `sfb peer` and `sfb server`, and their place in
//! a [`RunSpec`].

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use sfb_harness::{
    ConsistencySpec, DataSource, FaultOptions, MethodSpec, ModelChoice, OutputOptions, RunSpec,
    ScaleSpec, ScheduleSpec, StragglerSpec, TrainOptions,
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
    /// Stream --data instead of loading it: for files larger than memory / P. Every peer
    /// scans the file for D, the labels and the scaling statistics without keeping samples,
    /// then keeps only its own shard (training record t goes to peer t mod P) and its
    /// slice of the held-out data (held-out record h to peer h mod P); other peers' lines
    /// are skipped unparsed. The --holdout split is a seeded hash of each line's number
    /// (not the in-memory shuffle); each peer evaluates on its own held-out slice, and the
    /// summary's objective is the mean over peers. Every peer needs the same file (a shared
    /// or copied path). mlr only; not with --lost-shards takeover.
    #[arg(long, requires = "data")]
    pub stream: bool,
    /// l2mlr: regularization λ of (λ/2)‖W‖² (default 1e-3); sc: ℓ1 weight of the codes
    /// (default 0.1).
    #[arg(long)]
    pub lambda: Option<f64>,
    /// dml: rows of the learned projection L (latent dimension); 0: min(D, 64), starting
    /// at the identity (D ≤ 64) or the top principal directions.
    #[arg(long, default_value_t = 0)]
    pub latent: usize,
    /// dml: the starting scale of L: the median squared distance from a training sample to
    /// its nearest of 256 seeded samples when training starts (how soft NCA's neighbour choice
    /// is at first; 0.3 measured best of 0.1, 0.3, 1, 3 over five data sets).
    #[arg(long, default_value_t = 0.3)]
    pub margin: f32,
    /// dml: samples of the peer's shard drawn each clock besides the mini-batch as
    /// neighbours (the other batch samples are neighbours too). Each costs one (u, v) pair
    /// per clock: K + candidates pairs in all (docs/concepts.md: accuracy and bytes for
    /// 0 … 256).
    #[arg(long, default_value_t = sfb_models::dml::DEFAULT_CANDIDATES)]
    pub candidates: usize,
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
            stream: false,
            lambda: None,
            latent: 0,
            margin: 0.3,
            candidates: sfb_models::dml::DEFAULT_CANDIDATES,
            dict_size: 32,
            sweeps: 10,
            decay: 0.0,
        }
    }
}

/// Training options.
#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// Model to train: mlr (multiclass logistic regression), l2mlr (L2-regularized MLR by
    /// SDCA; uses --lambda, ignores --lr), dml (distance metric learning; uses --latent,
    /// --margin), sc (sparse coding; uses --dict-size, --lambda, --sweeps), or a model the
    /// program registered (sfb_cli::App::model; its data is the program's).
    #[arg(long, default_value = "mlr")]
    pub model: String,
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
    /// Learning rate: SGD's multiplier of the gradient, the adaptive optimizers' step per
    /// coordinate. Default: for factored, adagrad and adarevision, set from the data so the
    /// first step moves a score by a fixed amount (5 / mean ‖x‖₁ for mlr, 1.5 / … for dml,
    /// 0.5 / … for sc, after scaling; printed with the run); 0.5 for sgd, momentum and saga.
    #[arg(long)]
    pub lr: Option<f32>,
    /// How updates become steps: factored (adaptive per row and column, keeps the rank-1
    /// apply; default except for l2mlr), sgd (default for l2mlr, whose SDCA steps take no
    /// step size), adagrad (dense per-coordinate AdaGrad), adarevision (delay-tolerant
    /// AdaGrad, dense), momentum (heavy ball, dense), saga (variance-reduced SAGA for mlr
    /// and l2mlr: each peer keeps its samples' last gradient factors and sends the
    /// differences, every replica keeps the table mean; for l2mlr it trains the primal
    /// (1/n)Σ CE + λ/2‖W‖² on W instead of SDCA; linear convergence at a constant step;
    /// needs factor push with --backend fms).
    #[arg(long, value_name = "METHOD")]
    pub optimizer: Option<MethodSpec>,
    /// Step-size schedule over clocks: constant, inv-sqrt[:TAU] (1/√(1+t/τ), τ=100),
    /// step:EVERY[:GAMMA] (×γ every EVERY clocks, γ=0.5), cosine[:FLOOR] (to FLOOR×lr at
    /// the last clock).
    #[arg(long, default_value = "constant")]
    pub lr_schedule: ScheduleSpec,
    /// Linear warm-up of the step size over the first N clocks. Default: min(10, clocks/4)
    /// for factored, adagrad and adarevision (their first steps are their largest), none
    /// for the others.
    #[arg(long, value_name = "N")]
    pub warmup: Option<u64>,
    /// Clocks (iterations per peer).
    #[arg(long, default_value_t = 100)]
    pub clocks: u64,
    /// SSP staleness bound (0 = BSP). Shorthand for --consistency ssp:S.
    #[arg(long, conflicts_with = "consistency")]
    pub staleness: Option<u64>,
    /// Consistency model: bsp, ssp:S, async, throttle:K (go when ≥ K in-neighbours ready).
    #[arg(long)]
    pub consistency: Option<ConsistencySpec>,
    /// Seed for data, initial W and sampling.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Standard deviation of the initial W entries (same W on every peer).
    #[arg(long, default_value_t = 0.0)]
    pub init_std: f32,
    /// Evaluate held-out objective every N clocks (0: only at the end).
    #[arg(long, default_value_t = 10)]
    pub eval_every: u64,
    /// Stop early, at the same clock on every peer, once a peer's evaluation (every
    /// --eval-every clocks) meets RULE; --clocks stays the limit. Repeat for any of
    /// several. objective<=X (the evaluation's objective: held-out for mlr, dml, sc;
    /// l2mlr's primal on the training set); gap<=X (l2mlr's duality gap relative to its
    /// primal: the primal is then within a factor 1 + X of the optimum); accuracy>=X
    /// (held-out); plateau:N:EPS (the best
    /// objective of the last N evaluations is less than EPS (relative) below the best
    /// before them). The summary's stop block says which rule, which peer, when.
    #[arg(long, value_name = "RULE")]
    pub until: Vec<sfb_core::stop::Rule>,
    /// Write per-clock metrics as JSON lines here.
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    /// Write the run summary JSON here.
    #[arg(long)]
    pub summary: Option<PathBuf>,
    /// Save the trained model here (W, intercept, scaling, labels, model and its
    /// hyper-parameters; versioned and checksummed) for sfb predict and sfb eval.
    #[arg(long, value_name = "FILE")]
    pub save_model: Option<PathBuf>,
    /// Slow peers down: PEER:MILLISECONDS adds the delay to each of that peer's steps;
    /// rotate:MILLISECONDS adds it to one peer per clock, a different (seeded) one each
    /// clock. The ASYNC paper's patterns, relative to a peer's own compute time:
    /// controlled:PEER:PERCENT makes that peer's compute take PERCENT% longer (100 doubles
    /// it); production makes ~25% of the peers (seeded) slow for the whole run, 80% of them
    /// by 1.5-2.5x and the others by 2.5-10x.
    #[arg(long)]
    pub straggler: Option<StragglerSpec>,
    /// Flow control of async and throttle:K: a peer does not start clock t while an
    /// in-neighbour has delivered fewer than t − N clocks (bounds every queue and so
    /// memory; BSP and SSP ignore it).
    #[arg(long, value_name = "N", default_value_t = sfb_core::DEFAULT_MAX_DRIFT)]
    pub max_drift: u64,
    /// Feature scaling, statistics from the training data only (saved with the model):
    /// auto decides by the data, not the file format — standard when at least three
    /// quarters of the training entries are non-zero, else maxabs (none for sc); standard (zero
    /// mean, unit variance; a constant column is divided by its magnitude, never zeroed);
    /// maxabs (divide by each feature's largest magnitude; keeps sparse data sparse);
    /// none.
    #[arg(long, default_value = "auto")]
    pub scale: ScaleSpec,
    /// No intercept: by default mlr and l2mlr fit a bias per class (a constant-1 feature
    /// appended after scaling; not regularized, as scikit-learn does).
    #[arg(long)]
    pub no_intercept: bool,
    /// Write every node's state (W, optimizer and model state, sampler, counters) to this
    /// folder every --checkpoint-every clocks, as `peer-I.cCLOCK.sfbck` (FMS:
    /// `client-I…`, `server…`); checked at start-up.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Clocks between checkpoints. Checkpoint clocks are barriers: a node waits there until
    /// it has every update of the clocks before (free under BSP).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub checkpoint_every: u64,
    /// Checkpoints each node keeps (older ones are deleted).
    #[arg(long, value_name = "K", default_value_t = 2)]
    pub checkpoint_keep: usize,
    /// Resume from the latest clock at which every node has a checkpoint in
    /// --checkpoint-dir (under BSP the resumed run ends bitwise where the uninterrupted
    /// run would have).
    #[arg(long, requires = "checkpoint_dir")]
    pub resume: bool,
    /// Resume from this clock's checkpoints (for nodes on machines that do not share
    /// --checkpoint-dir: give every node the same clock).
    #[arg(
        long,
        value_name = "CLOCK",
        requires = "checkpoint_dir",
        conflicts_with = "resume"
    )]
    pub resume_at: Option<u64>,
    /// When a neighbour is lost (its process died, or no heartbeat within --peer-timeout):
    /// fail, or continue training without it (its data: see --lost-shards; the summary
    /// names who was lost at which clock) while this peer still reaches a majority of the
    /// run's peers, or continue-alone. Default: fail under BSP, continue under ssp, async
    /// and throttle.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub on_peer_loss: Option<PeerLossArg>,
    /// sfb peer: this peer was lost and restarts into the run under way: it takes W, the
    /// optimizer state and the clock from a neighbour and trains on; the others take it
    /// back.
    #[arg(long)]
    pub rejoin: bool,
    /// sfb peer: seconds a peer cut off from the majority (the minority side of a
    /// partition, or a peer stopped, past --peer-timeout) tries to get back in: it pauses,
    /// says so, and rejoins by state transfer as --rejoin does once it reaches the run
    /// again; when the time runs out it stops cut off (exit 3). 0: stop at once. Relay
    /// and the tree mode cannot rejoin: they stop at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    pub heal_timeout: f64,
    /// A received batch whose step (|scale|·Σ‖u‖‖v‖) is more than X times the largest the
    /// peer accepted in the last 8 clocks is refused and its sender shut out as a lost
    /// peer (a peer whose code or step size went wrong); off: no bound. The summary's
    /// max_step_ratio says how close a run came.
    #[arg(long, value_name = "X|off", default_value = "1000", value_parser = parse_step_bound)]
    pub step_bound: StepBound,
    /// A lost peer's data shard: takeover (the survivors split it between them, the same
    /// way whatever order they learn of losses in, and give it back if it rejoins) or drop
    /// (no longer trained on). Default: takeover for mlr, sc and mlr-primal with sgd; drop
    /// for models whose state belongs to their own samples (l2mlr's SDCA duals, saga, dml)
    /// and under FMS.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub lost_shards: Option<LostShardsArg>,
    /// Data files and per-model parameters.
    #[command(flatten)]
    pub model_opts: Box<ModelOptions>,
}

/// `--lost-shards`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LostShardsArg {
    /// The survivors take the lost shard over.
    Takeover,
    /// The lost shard is not trained on any more.
    Drop,
}

/// `--on-peer-loss`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PeerLossArg {
    /// Stop the run (after the last checkpoint).
    Fail,
    /// Train on without the lost node while a majority of the run's peers is reachable
    /// (the side of a partition without one stops, exit 1).
    Continue,
    /// Train on without the lost node, even alone (availability: both sides of a
    /// partition may go on and report results of their own).
    ContinueAlone,
}

impl ModelKind {
    /// The model with `o`'s parameters (λ defaults: 1e-3 for l2mlr, 0.1 for sc).
    fn choice(self, o: &ModelOptions) -> ModelChoice {
        match self {
            ModelKind::Mlr => ModelChoice::Mlr,
            ModelKind::L2mlr => ModelChoice::L2mlr {
                lambda: o.lambda.unwrap_or(1e-3),
            },
            ModelKind::Dml => ModelChoice::Dml {
                latent: o.latent,
                margin: o.margin,
                candidates: o.candidates,
            },
            ModelKind::Sc => ModelChoice::Sc {
                atoms: o.dict_size,
                // Cast like the library's f32 λ; validation refuses a non-finite result.
                lambda: o.lambda.unwrap_or(0.1) as f32,
                sweeps: o.sweeps,
                decay: o.decay,
            },
        }
    }
}

impl TrainArgs {
    /// Writes the training, model, data and output options into `spec`.
    pub fn fill(&self, spec: &mut RunSpec) {
        let o = &self.model_opts;
        match ModelKind::from_str(&self.model, false) {
            Ok(kind) => spec.model = kind.choice(o),
            // A registered model (App::parse has checked the name).
            Err(_) => spec.custom_model = Some(self.model.clone()),
        }
        spec.data = match &o.data {
            Some(train) => DataSource::Files {
                train: train.clone(),
                test: o.test_data.clone(),
                holdout: o.holdout,
                features: o.features,
                stream: o.stream,
            },
            None => DataSource::Synthetic(self.synthetic.clone()),
        };
        spec.train = TrainOptions {
            batch: self.batch,
            lr: self.lr,
            optimizer: self.optimizer,
            lr_schedule: self.lr_schedule,
            warmup: self.warmup,
            clocks: self.clocks,
            consistency: match (self.consistency, self.staleness) {
                (Some(c), _) => c,
                (None, Some(0) | None) => ConsistencySpec::Bsp,
                (None, Some(s)) => ConsistencySpec::Ssp { staleness: s },
            },
            seed: self.seed,
            init_std: self.init_std,
            eval_every: self.eval_every,
            straggler: self.straggler,
            max_drift: self.max_drift,
            scale: self.scale,
            intercept: !self.no_intercept,
            until: self.until.clone(),
        };
        spec.output = OutputOptions {
            metrics: self.metrics.clone(),
            summary: self.summary.clone(),
            save_model: self.save_model.clone(),
            ..OutputOptions::default()
        };
        spec.fault = FaultOptions {
            checkpoint_dir: self.checkpoint_dir.clone(),
            checkpoint_every: self.checkpoint_every,
            checkpoint_keep: self.checkpoint_keep,
            resume: self.resume,
            resume_at: self.resume_at,
            on_peer_loss: self.on_peer_loss.map(|p| match p {
                PeerLossArg::Fail => sfb_harness::PeerLossSpec::Fail,
                PeerLossArg::Continue => sfb_harness::PeerLossSpec::Continue,
                PeerLossArg::ContinueAlone => sfb_harness::PeerLossSpec::ContinueAlone,
            }),
            rejoin: self.rejoin,
            heal_timeout_s: self.heal_timeout,
            step_bound: self.step_bound.0,
            lost_shards: self.lost_shards.map(|p| match p {
                LostShardsArg::Takeover => sfb_harness::LostShardsSpec::Takeover,
                LostShardsArg::Drop => sfb_harness::LostShardsSpec::Drop,
            }),
        };
    }
}

/// `e` in the command line's words: spec fields named by their flags.
pub fn cli_error(e: sfb_harness::Error) -> anyhow::Error {
    use sfb_harness::Error as E;
    let flag = sfb_harness::flag_for;
    match e {
        E::OutOfRange {
            field,
            expected,
            got,
        } => anyhow::anyhow!("{} must be {expected}, got {got}", flag(field)),
        E::Seconds {
            field,
            expected,
            got,
        } => anyhow::anyhow!(
            "{} must be {expected}, at most {} (one year), got {got:?}",
            flag(field),
            sfb_harness::preflight::MAX_SECONDS
        ),
        E::Output {
            field,
            path,
            source,
        } => anyhow::anyhow!("cannot write {} {}: {source}", flag(field), path.display()),
        E::OutDegree { peers, got } => anyhow::anyhow!(
            "--out-degree must be in 1..P−1 = 1..{}, got {got}",
            peers.saturating_sub(1)
        ),
        E::Unsupported { field, transport } => anyhow::anyhow!(
            "{} applies to the {transport} transport; add --transport {transport}",
            flag(field)
        ),
        E::Requires {
            field,
            requires,
            why,
        } => anyhow::anyhow!("{} needs {}: {why}", flag(field), flag(requires)),
        e => e.into(),
    }
}

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Sufficient factor broadcasting between peers.
    Sfb,
    /// Parameter server with full matrix sync.
    Fms,
}

impl From<Backend> for sfb_harness::Backend {
    fn from(b: Backend) -> Self {
        match b {
            Backend::Sfb => sfb_harness::Backend::Sfb,
            Backend::Fms => sfb_harness::Backend::Fms,
        }
    }
}

/// `--step-bound`: a multiple above 1, or `off`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepBound(pub Option<f32>);

fn parse_step_bound(s: &str) -> Result<StepBound, String> {
    if s == "off" {
        return Ok(StepBound(None));
    }
    match s.parse::<f32>() {
        Ok(x) if x.is_finite() && x > 1.0 => Ok(StepBound(Some(x))),
        _ => Err(format!("expected a number above 1 or off, got {s}")),
    }
}
