//! [`RunSpec`]: the serializable description of one run, with the `sfb` command line's
//! defaults and validation before anything runs.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sfb_core::metrics::RunInfo;
use sfb_core::wire::Dtype;
use sfb_core::{Consistency, ThrottledRelease};
use sfb_models::ModelSpec;
use sfb_net::bandwidth::Rate;

use crate::{Error, Result, preflight};

/// One run: model, data, training options, topology, backend, transport and network.
///
/// `RunSpec::default()` is `sfb run` without options; every field has a serde default, so
/// a JSON spec names only what differs:
/// ```
/// let spec = sfb_harness::RunSpec::from_json(r#"{"peers": 2, "train": {"lr": 0.1}}"#)?;
/// assert_eq!((spec.peers, spec.train.lr, spec.train.batch), (2, Some(0.1), 16));
/// spec.validate()?;
/// # Ok::<(), sfb_harness::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSpec {
    /// Peers `P` (FMS: clients). Default 4.
    pub peers: usize,
    /// SFB peers or an FMS parameter server. Default SFB.
    pub backend: Backend,
    /// How nodes talk. Default in-memory.
    pub transport: Transport,
    /// The model and its parameters. Default MLR.
    pub model: ModelChoice,
    /// A model a program registered under this name (`sfb_cli::App::model`) instead of a
    /// built-in one: [`model`](Self::model) and [`data`](Self::data) are then the
    /// program's business. Left out of the JSON when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_model: Option<String>,
    /// Where the training and held-out samples come from.
    pub data: DataSource,
    /// Mini-batch, learning rate, clocks, consistency, seeds, evaluation, straggler.
    pub train: TrainOptions,
    /// Who sends to whom (SFB).
    pub topology: TopologyOptions,
    /// FMS: what clients push to the server. Default factors.
    pub fms_push: Push,
    /// FMS: when clients get W (`--fms-sync`): eager, the server pushes it when a clock
    /// completes (ESSP), or lazy, a client fetches it when the one it holds is too stale
    /// for the bound (the SSPTable). Default eager.
    pub fms_sync: SyncSpec,
    /// Timeouts, bandwidth budget, wire precision, network namespaces.
    pub net: NetOptions,
    /// Files the run's records and summary are written to.
    pub output: OutputOptions,
    /// Checkpoints and resuming.
    pub fault: FaultOptions,
    /// The simulated network and machine (transport `sim` only). Left out of the JSON
    /// when default.
    #[serde(skip_serializing_if = "is_default_sim")]
    pub sim: crate::sim::SimOptions,
}

fn is_default_sim(s: &crate::sim::SimOptions) -> bool {
    *s == crate::sim::SimOptions::default()
}

impl Default for RunSpec {
    fn default() -> Self {
        Self {
            peers: 4,
            backend: Backend::Sfb,
            transport: Transport::Mem,
            model: ModelChoice::Mlr,
            custom_model: None,
            data: DataSource::default(),
            train: TrainOptions::default(),
            topology: TopologyOptions::default(),
            fms_push: Push::Factors,
            fms_sync: SyncSpec::Eager,
            net: NetOptions::default(),
            output: OutputOptions::default(),
            fault: FaultOptions::default(),
            sim: crate::sim::SimOptions::default(),
        }
    }
}

/// SFB peers, or the FMS parameter-server baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Backend {
    /// Sufficient factor broadcasting between peers.
    #[default]
    Sfb,
    /// Parameter server with full matrix sync.
    Fms,
}

impl Backend {
    /// `sfb` or `fms` (the summary's `backend`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sfb => "sfb",
            Backend::Fms => "fms",
        }
    }
}

/// How the nodes of a run talk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Transport {
    /// Threads in one process joined by bounded channels.
    #[default]
    Mem,
    /// One process per node over libp2p.
    Libp2p,
    /// `sfb sim`: every node in this process on the deterministic discrete-event
    /// simulator, with the network and machine of [`RunSpec::sim`].
    Sim,
}

impl Transport {
    /// `mem` or `libp2p` (the summary's `transport`).
    pub fn name(self) -> &'static str {
        match self {
            Transport::Mem => "mem",
            Transport::Libp2p => "libp2p",
            Transport::Sim => "sim",
        }
    }
}

/// What FMS clients push to the server each clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Push {
    /// Sufficient factors, O(K·(J+D)) floats (Project Adam style).
    #[default]
    Factors,
    /// The dense ΔW, J·D floats (the paper's FMS).
    Dense,
}

/// When FMS clients get W ([`RunSpec::fms_sync`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SyncSpec {
    /// The server pushes W to every client when a clock completes (ESSP).
    #[default]
    Eager,
    /// A client fetches W when the one it holds is too stale for the bound.
    Lazy,
}

impl From<SyncSpec> for sfb_core::fms::Sync {
    fn from(s: SyncSpec) -> Self {
        match s {
            SyncSpec::Eager => sfb_core::fms::Sync::Eager,
            SyncSpec::Lazy => sfb_core::fms::Sync::Lazy,
        }
    }
}

impl From<Push> for sfb_core::fms::Push {
    fn from(p: Push) -> Self {
        match p {
            Push::Factors => sfb_core::fms::Push::Factors,
            Push::Dense => sfb_core::fms::Push::Dense,
        }
    }
}

/// A built-in model with its parameters (JSON: `{"kind": "dml", "latent": 8, …}`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
#[non_exhaustive]
pub enum ModelChoice {
    /// Multiclass logistic regression (SGD).
    #[default]
    Mlr,
    /// L2-regularized MLR by SDCA (ignores the learning rate).
    L2mlr {
        /// Regularization λ > 0 of (λ/2)‖W‖². CLI default 1e-3.
        lambda: f64,
    },
    /// Distance metric learning.
    Dml {
        /// Rows of the learned projection; 0: `min(features, 64)`. CLI default 0.
        latent: usize,
        /// The starting scale: median squared distance from a training sample to its
        /// nearest candidate when training starts (how soft the neighbour choice is). CLI
        /// default 0.3.
        margin: f32,
        /// Samples of the shard drawn per clock besides the mini-batch as neighbours; each
        /// sends one pair (K + candidates pairs per clock). CLI default 16.
        #[serde(default = "default_candidates")]
        candidates: usize,
    },
    /// Sparse coding / dictionary learning.
    Sc {
        /// Dictionary size. CLI default 32.
        atoms: usize,
        /// ℓ1 weight λ ≥ 0 of the codes. CLI default 0.1.
        lambda: f32,
        /// Coordinate-descent sweeps per code while training. CLI default 10.
        sweeps: usize,
        /// Step-size decay in clocks (0: constant). CLI default 0.
        decay: f32,
    },
}

impl ModelChoice {
    /// The choice that names the built-in model `spec`, if one does (not
    /// [`ModelSpec::MlrPrimal`], which a spec reaches only as l2mlr with saga).
    pub fn of(spec: &ModelSpec) -> Option<Self> {
        match *spec {
            ModelSpec::Mlr => Some(Self::Mlr),
            ModelSpec::L2Mlr { lambda, .. } => Some(Self::L2mlr { lambda }),
            ModelSpec::Dml {
                latent,
                margin,
                candidates,
            } => Some(Self::Dml {
                latent,
                margin,
                candidates,
            }),
            ModelSpec::SparseCoding {
                atoms,
                lambda,
                sweeps,
                decay,
            } => Some(Self::Sc {
                atoms,
                lambda,
                sweeps,
                decay,
            }),
            _ => None,
        }
    }

    /// `mlr`, `l2mlr`, `dml` or `sc`.
    pub fn name(&self) -> &'static str {
        match self {
            ModelChoice::Mlr => "mlr",
            ModelChoice::L2mlr { .. } => "l2mlr",
            ModelChoice::Dml { .. } => "dml",
            ModelChoice::Sc { .. } => "sc",
        }
    }

    /// The model as sfb-models builds it.
    pub fn spec(&self) -> ModelSpec {
        match *self {
            ModelChoice::Mlr => ModelSpec::Mlr,
            ModelChoice::L2mlr { lambda } => ModelSpec::L2Mlr {
                lambda,
                intercept: false,
            },
            ModelChoice::Dml {
                latent,
                margin,
                candidates,
            } => ModelSpec::Dml {
                latent,
                margin,
                candidates,
            },
            ModelChoice::Sc {
                atoms,
                lambda,
                sweeps,
                decay,
            } => ModelSpec::SparseCoding {
                atoms,
                lambda,
                sweeps,
                decay,
            },
        }
    }

    /// The model as sfb-models builds it for training by `method`: with
    /// [`Method::Saga`](sfb_core::Method::Saga), `mlr` and `l2mlr` train W itself by SAGA
    /// ([`ModelSpec::MlrPrimal`]: l2mlr's primal `(1/n) Σ CE + (λ/2)‖W‖²` instead of SDCA's
    /// dual); otherwise [`spec`](Self::spec).
    pub fn spec_for(&self, method: sfb_core::Method) -> ModelSpec {
        match (self, method) {
            (ModelChoice::Mlr, sfb_core::Method::Saga) => ModelSpec::MlrPrimal {
                lambda: 0.0,
                saga: true,
            },
            (&ModelChoice::L2mlr { lambda }, sfb_core::Method::Saga) => {
                ModelSpec::MlrPrimal { lambda, saga: true }
            }
            _ => self.spec(),
        }
    }

    /// Whether the model wants dense samples (files are densified on loading).
    pub fn dense(&self) -> bool {
        matches!(self, ModelChoice::Dml { .. } | ModelChoice::Sc { .. })
    }

    fn validate(&self) -> Result<()> {
        match *self {
            ModelChoice::Mlr => Ok(()),
            ModelChoice::L2mlr { lambda } => check(
                "model.lambda",
                "a positive number",
                lambda,
                lambda.is_finite() && lambda > 0.0,
            ),
            // Any latent rank: 0 picks min(features, 64).
            ModelChoice::Dml { margin, .. } => check(
                "model.margin",
                "a positive number",
                margin.into(),
                margin.is_finite() && margin > 0.0,
            ),
            ModelChoice::Sc {
                atoms,
                lambda,
                decay,
                ..
            } => {
                check("model.atoms", "at least 1", atoms as f64, atoms >= 1)?;
                check(
                    "model.lambda",
                    "a non-negative number",
                    lambda.into(),
                    lambda.is_finite() && lambda >= 0.0,
                )?;
                check(
                    "model.decay",
                    "a non-negative number",
                    decay.into(),
                    decay.is_finite() && decay >= 0.0,
                )
            }
        }
    }
}

/// Where the samples come from (JSON: `{"synthetic": "classes=20,…"}` or
/// `{"files": {"train": "a.svm", …}}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DataSource {
    /// Seeded synthetic data of the model's kind: comma-separated `key=value` (see
    /// [`sfb_models::ClassificationSpec`], [`sfb_models::ClusterSpec`],
    /// [`sfb_models::SignalSpec`]). Default `classes=20,features=100,samples=20000`.
    Synthetic(String),
    /// LIBSVM/svmlight files (0/1-based indices detected), or dense CSV (label first) when
    /// the name ends in `.csv`.
    Files {
        /// Training data.
        train: PathBuf,
        /// Held-out data, read like `train`. Without it, `holdout` of `train` is held out.
        #[serde(default)]
        test: Option<PathBuf>,
        /// Fraction of `train` held out (seeded) when `test` is not given. Default 0.2.
        #[serde(default = "default_holdout")]
        holdout: f64,
        /// Number of features `D` (default: the largest index found).
        #[serde(default)]
        features: Option<usize>,
        /// Streaming mode (`--stream`): every peer scans the files for their statistics
        /// (`D`, labels, scaling, mean ℓ1) without keeping samples, then keeps only its own
        /// shard and its slice of the held-out data; the held-out split is a per-line
        /// rule ([`sfb_models::stream`]). For files larger than memory / P. Default false:
        /// every peer loads the whole file.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stream: bool,
    },
}

/// The models streaming data supports.
pub(crate) const STREAMED_MODELS: &str = "mlr (with any optimizer)";

/// Why a streaming peer does not take lost shards over.
pub(crate) const STREAMED_TAKEOVER: &str = "a streaming peer holds only its own shard: taking a \
     lost peer's over would re-read the data file inside the clock loop, stalling the peer for \
     a scan of the whole file; use --lost-shards drop";

fn default_candidates() -> usize {
    sfb_models::dml::DEFAULT_CANDIDATES
}

fn default_holdout() -> f64 {
    0.2
}

impl Default for DataSource {
    fn default() -> Self {
        DataSource::Synthetic("classes=20,features=100,samples=20000".into())
    }
}

/// Training options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainOptions {
    /// Mini-batch size `K` per peer and clock. Default 16.
    pub batch: usize,
    /// Learning rate: SGD's multiplier of the gradient, the adaptive methods' step per
    /// coordinate. Default (`None`): [`default_lr`] of the optimizer.
    pub lr: Option<f32>,
    /// How updates become steps. Default (`None`): [`default_method`] of the model.
    pub optimizer: Option<MethodSpec>,
    /// Step-size schedule (`constant`, `inv-sqrt[:TAU]`, `step:EVERY[:GAMMA]`,
    /// `cosine[:FLOOR]`). Default constant.
    pub lr_schedule: ScheduleSpec,
    /// Linear warm-up over this many clocks (0: none). Default (`None`):
    /// [`default_warmup`].
    pub warmup: Option<u64>,
    /// Clocks (iterations per peer). Default 100.
    pub clocks: u64,
    /// When a peer may start its next clock. Default BSP.
    pub consistency: ConsistencySpec,
    /// Seed of data, initial W and sampling. Default 1.
    pub seed: u64,
    /// Standard deviation of the initial W entries (MLR). Default 0.
    pub init_std: f32,
    /// Evaluate the held-out objective every this many clocks (0: only at the end).
    /// Default 10.
    pub eval_every: u64,
    /// Slow one peer (or a rotating one) down. Default none.
    pub straggler: Option<StragglerSpec>,
    /// Flow control of `async` and `throttle:K`: no peer starts clock `t` while an
    /// in-neighbour has delivered fewer than `t − max_drift` clocks, which bounds every
    /// peer's queues (and memory). Default [`sfb_core::DEFAULT_MAX_DRIFT`].
    pub max_drift: u64,
    /// Feature scaling (`none`, `standard`, `maxabs`, `auto`), statistics from the
    /// training set only, applied to training and held-out data alike. Default auto
    /// (standard when at least 75 % of the training entries are non-zero, else maxabs;
    /// [`sfb_models::Scale::Auto`]).
    pub scale: ScaleSpec,
    /// Fit an intercept (a bias per class) for the linear classifiers (`mlr`, `l2mlr`):
    /// one more feature, constant 1, appended after scaling. Default true; `dml` and
    /// `sc` have none (a metric's and a dictionary's have no meaning).
    pub intercept: bool,
    /// Stop rules ([`sfb_core::stop`]): end the run once a node's evaluation (every
    /// [`eval_every`](Self::eval_every) clocks) meets any of them, at the same clock on
    /// every node; [`clocks`](Self::clocks) stays the limit. Default none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub until: Vec<sfb_core::stop::Rule>,
}

/// [`sfb_models::Scale`] as JSON and command line write it (`none`, `standard`,
/// `maxabs`, `auto`). Default `auto`: standard for mostly non-zero data, max-abs otherwise (chosen
/// by the experiments of issue 15: unscaled features are the commonest reason a default
/// step size fails, and scaling already-scaled data costs nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ScaleSpec(pub sfb_models::Scale);

impl Default for ScaleSpec {
    fn default() -> Self {
        ScaleSpec(sfb_models::Scale::Auto)
    }
}

impl std::str::FromStr for ScaleSpec {
    type Err = sfb_models::Error;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        s.parse().map(ScaleSpec)
    }
}

impl TryFrom<String> for ScaleSpec {
    type Error = sfb_models::Error;

    fn try_from(s: String) -> std::result::Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<ScaleSpec> for String {
    fn from(s: ScaleSpec) -> String {
        s.0.to_string()
    }
}

/// The optimizer a model trains with when none is named: plain SGD for `l2mlr` (SDCA's
/// steps are exact coordinate maximizations, there is no step size to adapt), the factored
/// adaptive step for the SGD models (chosen by the experiments of issue 15: it is robust to
/// feature scale and to the step size, and keeps the rank-1 apply).
pub fn default_method(model: &ModelChoice) -> sfb_core::Method {
    method_for(&model.spec())
}

/// What a run's header says in place of the optimizer for a model with its own step rule
/// and no step size: `l2mlr` by SDCA (each dual step is an exact coordinate maximization;
/// `--lr` does not apply). `None` for the others.
pub fn own_step(spec: &ModelSpec) -> Option<&'static str> {
    match spec {
        ModelSpec::L2Mlr { .. } => Some("sdca (exact dual steps, no step size)"),
        _ => None,
    }
}

/// [`default_method`] of a built model.
pub(crate) fn method_for(spec: &ModelSpec) -> sfb_core::Method {
    match spec {
        ModelSpec::L2Mlr { .. } => sfb_core::Method::Sgd,
        ModelSpec::MlrPrimal { saga: true, .. } => sfb_core::Method::Saga,
        ModelSpec::MlrPrimal { saga: false, .. } => sfb_core::Method::Sgd,
        _ => sfb_core::Method::Factored,
    }
}

/// The learning rate used when none is given and the data is not known: 0.5 for SGD,
/// momentum and SAGA (a multiplier of the gradient), 0.1 for the adaptive methods (a step
/// per coordinate in W's units). With the data known, see [`default_lr_for_data`].
pub fn default_lr(method: sfb_core::Method) -> f32 {
    if method.is_adaptive() { 0.1 } else { 0.5 }
}

/// The warm-up when none is given: for the adaptive methods `min(10, clocks / 4)` clocks,
/// else none. AdaGrad-like methods take their largest steps first (nothing accumulated
/// yet): on the digits data the held-out objective went from 2.30 to 6.14 within three
/// clocks at the default step before falling, and never rose with 10 clocks of linear
/// warm-up, which cost nothing at the end (accuracy 0.969 either way; issue 15).
pub fn default_warmup(method: sfb_core::Method, clocks: u64) -> u64 {
    if method.is_adaptive() {
        (clocks / 4).min(10)
    } else {
        0
    }
}

/// How far the adaptive methods' first step moves a model's score on a typical training
/// sample: their default step per coordinate is this over the mean ℓ1 norm of the
/// training features ([`default_lr_for_data`]).
///
/// Why: AdaGrad-like steps move every coordinate by about `η` at first, whatever the
/// gradient's size, so a linear score `w·x` moves by `η ‖x‖₁`. A fixed `η` is then too
/// large on many dense features and too small on few sparse ones. Measured (issue 15, 676
/// runs over five data sets, three scalings, five optimizers): the best `η` of the
/// adaptive methods spanned ×200 across data sets and scalings (0.0035 on 200 unscaled
/// features, 0.03 after standardizing them, 0.5 on the 64 digit pixels) while
/// `η·‖x‖₁` stayed within 2.6–16 (geometric mean 8); SGD's best step tracks `‖x‖₂²`
/// instead and moved ×22000. MLR takes 5 (the low end: sparse data overshoots its
/// starting objective above about 5); DML's factors are differences of two samples and
/// its score a squared distance (best measured 1–3: 1.5); sparse coding's factors are
/// codes against unit-norm atoms, its objective barely depends on the step between 0.01
/// and 0.1 on its data (0.5).
pub fn score_step(model: &ModelSpec) -> f64 {
    match model {
        ModelSpec::Dml { .. } => 1.5,
        ModelSpec::SparseCoding { .. } => 0.5,
        _ => 5.0,
    }
}

/// The default learning rate of `method` for a user's model whose `v` factors have mean
/// ℓ1 norm `mean_v_l1` at the starting W: [`score_step`] of MLR (5) over it for the
/// adaptive methods (as for the built-ins, whose `v` is the sample), [`default_lr`]
/// otherwise.
pub fn default_lr_for_factors(method: sfb_core::Method, mean_v_l1: f64) -> f32 {
    default_lr_for_data(method, &ModelSpec::Mlr, mean_v_l1)
}

/// The default learning rate of `method` for `model` on training data whose features
/// have mean ℓ1 norm `mean_l1`: [`score_step`]` / mean_l1` (to 3 significant digits) for
/// the adaptive methods, [`default_lr`] otherwise (and when `mean_l1` is 0).
pub fn default_lr_for_data(method: sfb_core::Method, model: &ModelSpec, mean_l1: f64) -> f32 {
    if method.is_adaptive() && mean_l1.is_finite() && mean_l1 > 0.0 {
        let lr = score_step(model) / mean_l1;
        format!("{lr:.2e}").parse().unwrap_or(lr as f32)
    } else {
        default_lr(method)
    }
}

impl TrainOptions {
    /// The feature scaling for `model`: the one named, with `auto` resolved to `none` for
    /// sparse coding (its ℓ1 weight and reconstruction error are in the data's units:
    /// standardizing measured five times the non-zero codes and a 20× slower evaluation).
    pub fn scale_for(&self, model: &ModelChoice) -> sfb_models::Scale {
        match (self.scale.0, model) {
            (sfb_models::Scale::Auto, ModelChoice::Sc { .. }) => sfb_models::Scale::None,
            (s, _) => s,
        }
    }

    /// Whether `model` gets an intercept column: [`intercept`](Self::intercept) for the
    /// linear classifiers, never for `dml` and `sc`.
    pub fn intercept_for(&self, model: &ModelChoice) -> bool {
        self.intercept && matches!(model, ModelChoice::Mlr | ModelChoice::L2mlr { .. })
    }

    /// The method for `model`: the one named, else [`default_method`].
    pub fn method_for(&self, model: &ModelChoice) -> sfb_core::Method {
        self.optimizer
            .map_or_else(|| default_method(model), |m| m.0)
    }

    /// The optimizer for `model` (method, schedule, warm-up; for SAGA on `l2mlr`, its λ as
    /// [`l2`](sfb_core::Optimizer::l2). SAGA's `n` is the training set's size, which the
    /// cluster builder sets from the data).
    pub fn optimizer_for(&self, model: &ModelChoice) -> sfb_core::Optimizer {
        let mut o =
            sfb_core::Optimizer::new(self.method_for(model)).with_schedule(self.lr_schedule.0);
        o.warmup = self
            .warmup
            .unwrap_or_else(|| default_warmup(o.method, self.clocks));
        if let (sfb_core::Method::Saga, ModelChoice::L2mlr { lambda }) = (o.method, model) {
            o.l2 = *lambda as f32;
        }
        o
    }

    /// The learning rate for `model`: the one given, else [`default_lr`] of its method.
    pub fn lr_for(&self, model: &ModelChoice) -> f32 {
        self.lr
            .unwrap_or_else(|| default_lr(self.method_for(model)))
    }

    /// The learning rate for the default model (MLR).
    pub fn lr(&self) -> f32 {
        self.lr_for(&ModelChoice::Mlr)
    }
}

/// [`sfb_core::Method`] as JSON and command line write it (`sgd`, `factored`, `adagrad`,
/// `adarevision`, `momentum`, `saga`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MethodSpec(pub sfb_core::Method);

impl std::str::FromStr for MethodSpec {
    type Err = sfb_core::optim::ParseOptimizerError;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        s.parse().map(MethodSpec)
    }
}

impl TryFrom<String> for MethodSpec {
    type Error = sfb_core::optim::ParseOptimizerError;

    fn try_from(s: String) -> std::result::Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<MethodSpec> for String {
    fn from(m: MethodSpec) -> String {
        m.0.to_string()
    }
}

/// [`sfb_core::Schedule`] as JSON and command line write it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ScheduleSpec(pub sfb_core::Schedule);

impl std::str::FromStr for ScheduleSpec {
    type Err = sfb_core::optim::ParseOptimizerError;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        s.parse().map(ScheduleSpec)
    }
}

impl TryFrom<String> for ScheduleSpec {
    type Error = sfb_core::optim::ParseOptimizerError;

    fn try_from(s: String) -> std::result::Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<ScheduleSpec> for String {
    fn from(s: ScheduleSpec) -> String {
        s.0.to_string()
    }
}

impl Default for TrainOptions {
    fn default() -> Self {
        Self {
            batch: 16,
            lr: None,
            optimizer: None,
            lr_schedule: ScheduleSpec::default(),
            warmup: None,
            clocks: 100,
            consistency: ConsistencySpec::Bsp,
            seed: 1,
            init_std: 0.0,
            eval_every: 10,
            straggler: None,
            max_drift: sfb_core::DEFAULT_MAX_DRIFT,
            scale: ScaleSpec::default(),
            intercept: true,
            until: Vec::new(),
        }
    }
}

/// A consistency model that can be written down (JSON and command line: `bsp`, `ssp:S`,
/// `async`, `throttle:K`); [`to_core`](Self::to_core) gives the engine's
/// [`Consistency`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
#[non_exhaustive]
pub enum ConsistencySpec {
    /// Bulk synchronous.
    #[default]
    Bsp,
    /// Stale synchronous with bound `staleness`.
    Ssp {
        /// The staleness bound.
        staleness: u64,
    },
    /// Never wait.
    Async,
    /// ASYNC's throttled release: go when `min_ready` in-neighbours are ready.
    Throttle {
        /// Ready in-neighbours that release the barrier.
        min_ready: usize,
    },
}

impl ConsistencySpec {
    /// The engine's consistency model.
    pub fn to_core(self) -> Consistency {
        match self {
            ConsistencySpec::Bsp => Consistency::Bsp,
            ConsistencySpec::Ssp { staleness } => Consistency::Ssp { staleness },
            ConsistencySpec::Async => Consistency::Async,
            ConsistencySpec::Throttle { min_ready } => {
                Consistency::Custom(Arc::new(ThrottledRelease { min_ready }))
            }
        }
    }
}

impl FromStr for ConsistencySpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let err = || Error::Consistency(s.to_string());
        let lower = s.trim().to_ascii_lowercase();
        match lower.split_once(':') {
            None if lower == "bsp" => Ok(Self::Bsp),
            None if lower == "async" => Ok(Self::Async),
            Some(("ssp", a)) => Ok(Self::Ssp {
                staleness: a.parse().map_err(|_| err())?,
            }),
            Some(("throttle" | "throttled", a)) => Ok(Self::Throttle {
                min_ready: a.parse().map_err(|_| err())?,
            }),
            _ => Err(err()),
        }
    }
}

impl fmt::Display for ConsistencySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bsp => write!(f, "bsp"),
            Self::Ssp { staleness } => write!(f, "ssp:{staleness}"),
            Self::Async => write!(f, "async"),
            Self::Throttle { min_ready } => write!(f, "throttle:{min_ready}"),
        }
    }
}

impl TryFrom<String> for ConsistencySpec {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<ConsistencySpec> for String {
    fn from(c: ConsistencySpec) -> Self {
        c.to_string()
    }
}

/// Who straggles and by how much (JSON and command line: `PEER:MS`, `rotate:MS`,
/// `controlled:PEER:PERCENT` or `production`; see [`sfb_core::Stragglers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
#[non_exhaustive]
pub enum StragglerSpec {
    /// `peer` is slowed by `delay_ms` at every step.
    Peer {
        /// The slow peer.
        peer: u32,
        /// Milliseconds added to each of its steps.
        delay_ms: u64,
    },
    /// One peer per clock, a different (seeded) one each clock, is slowed by `delay_ms`.
    Rotating {
        /// Milliseconds added to the chosen peer's step.
        delay_ms: u64,
    },
    /// The ASYNC paper's controlled delay: `peer`'s compute takes `percent`% longer.
    Controlled {
        /// The slow peer.
        peer: u32,
        /// Intensity: extra compute time in percent of its own (100 doubles it).
        percent: u32,
    },
    /// The ASYNC paper's production-cluster stragglers: about 25% of the peers (seeded by
    /// the run's seed) are slow for the whole run, 80% of them by 1.5–2.5×, the others by
    /// 2.5–10×.
    Production,
}

/// The largest `controlled` intensity: 1000× slower.
const MAX_PERCENT: u32 = 100_000;

impl StragglerSpec {
    /// The fixed delay added to a slow step; zero for the patterns relative to a peer's
    /// compute time (`controlled`, `production`).
    pub fn delay(&self) -> Duration {
        match *self {
            Self::Peer { delay_ms, .. } | Self::Rotating { delay_ms } => {
                Duration::from_millis(delay_ms)
            }
            Self::Controlled { .. } | Self::Production => Duration::ZERO,
        }
    }

    /// The schedule the drivers apply (real delay on threads and processes, virtual delay
    /// in a simulated network) for a cluster of `peers` with run seed `seed`.
    pub fn schedule(&self, peers: usize, seed: u64) -> sfb_core::Stragglers {
        match *self {
            Self::Peer { peer, .. } => sfb_core::Stragglers::Fixed {
                peer: sfb_core::PeerId(peer),
                delay: self.delay(),
            },
            Self::Rotating { .. } => sfb_core::Stragglers::Rotating {
                peers: peers as u32,
                delay: self.delay(),
                seed,
            },
            Self::Controlled { peer, percent } => sfb_core::Stragglers::Controlled {
                peer: sfb_core::PeerId(peer),
                percent,
            },
            Self::Production => sfb_core::Stragglers::Production {
                peers: peers as u32,
                seed,
            },
        }
    }
}

impl FromStr for StragglerSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let err = |reason| Error::Straggler {
            spec: s.to_string(),
            reason,
        };
        if s == "production" {
            return Ok(Self::Production);
        }
        if let Some(rest) = s.strip_prefix("controlled:") {
            let (peer, percent) = rest
                .split_once(':')
                .ok_or_else(|| err("controlled needs a peer and a percent (controlled:2:100)"))?;
            let peer = peer.parse().map_err(|_| err("the peer is not a number"))?;
            let percent: u32 = percent
                .parse()
                .map_err(|_| err("the intensity is not a whole number of percent"))?;
            if percent > MAX_PERCENT {
                return Err(err("the intensity is at most 100000 (1000× slower)"));
            }
            return Ok(Self::Controlled { peer, percent });
        }
        let (p, ms) = s.split_once(':').ok_or_else(|| err("no ':'"))?;
        let delay_ms = ms
            .parse()
            .map_err(|_| err("the milliseconds are not a number"))?;
        if p == "rotate" {
            return Ok(Self::Rotating { delay_ms });
        }
        let peer = p
            .parse()
            .map_err(|_| err("the peer is not a peer number or \"rotate\""))?;
        Ok(Self::Peer { peer, delay_ms })
    }
}

impl fmt::Display for StragglerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Peer { peer, delay_ms } => write!(f, "{peer}:{delay_ms}"),
            Self::Rotating { delay_ms } => write!(f, "rotate:{delay_ms}"),
            Self::Controlled { peer, percent } => write!(f, "controlled:{peer}:{percent}"),
            Self::Production => f.write_str("production"),
        }
    }
}

impl TryFrom<String> for StragglerSpec {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<StragglerSpec> for String {
    fn from(s: StragglerSpec) -> Self {
        s.to_string()
    }
}

/// How the topology is chosen (SFB backend).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopologyOptions {
    /// Out-degree `Q`; `None` (the default) or `P − 1` is full broadcast.
    pub out_degree: Option<usize>,
    /// How a partial-broadcast topology is built. Default: optimized.
    pub method: TopologyMethod,
    /// Seconds the optimizer may spend when `Q < P − 1`. Default 5.
    pub time_limit_s: f64,
    /// Explicit out-neighbour lists, one per peer; overrides the fields above.
    pub explicit: Option<Vec<Vec<usize>>>,
    /// A topology file in any format `sfb topology` writes (TOML, JSON, DOT): the run
    /// trains on exactly that graph. Its peer count must be `peers`, and its out-degree
    /// `out_degree` when that is set; not with `explicit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
}

impl Default for TopologyOptions {
    fn default() -> Self {
        Self {
            out_degree: None,
            method: TopologyMethod::Optimal,
            time_limit_s: 5.0,
            explicit: None,
            file: None,
        }
    }
}

/// A partial-broadcast construction ([`sfb_topology::generate`]) or the optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TopologyMethod {
    /// Minimize Σ shortest-path lengths ([`sfb_topology::optimize`]).
    #[default]
    Optimal,
    /// Generalized Kautz graph.
    Kautz,
    /// i → i + 2^k.
    Exponential,
    /// i → i+1, …, i+Q.
    Ring,
    /// Seeded random Q-out graph (seeded by `train.seed`).
    Random,
}

/// Network options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetOptions {
    /// In-memory transport: seconds a peer may wait without receiving anything before the
    /// run fails. Default 30.
    pub timeout_s: f64,
    /// libp2p: the liveness timeout, seconds: a neighbour whose stream stays open but
    /// silent (no frame, no heartbeat; peers send a heartbeat every second when idle) for
    /// this long is declared lost and the run fails. Waiting for a live neighbour is not
    /// bounded (a peer paused or slow for less than this is waited for, and the waiting
    /// peers say whom they wait for every few seconds); a neighbour whose process ends is
    /// lost at once. Default 60.
    pub peer_timeout_s: f64,
    /// libp2p: seconds to wait for connections and handshakes at start-up. Default 30.
    pub startup_timeout_s: f64,
    /// libp2p: outbound bandwidth budget of each node, bytes per second (JSON: a number,
    /// or a string such as `"1gbit"`). Default none.
    #[serde(with = "crate::rate_serde")]
    pub bandwidth: Option<Rate>,
    /// Burst size of the bandwidth budget, bytes. Default 256 KiB.
    pub burst: usize,
    /// Factor values on the wire (`f32` or `f16`; libp2p). Default f32.
    #[serde(with = "dtype_serde")]
    pub wire: Dtype,
    /// Low-rank re-compression of each peer's batches with error feedback (`--compress
    /// rank:R`, SFB; [`sfb_core::compress`]). Default: none.
    pub compress: Option<CompressSpec>,
    /// Prioritization under a send budget (`--prioritize POLICY:BUDGET`, SFB peers and FMS
    /// clients with factor push; [`sfb_core::prioritize`]): each peer (client) sends at
    /// most the budget's pairs per clock, in the policy's order, and carries the rest over. The budget `auto` is what the link
    /// carries, at the rate its transport measures, in the time the clock's work took.
    /// Default: none.
    pub prioritize: Option<PrioritizeSpec>,
    /// Relay for partial broadcast (`--relay`, SFB; [`sfb_core::relay`]): every peer
    /// forwards other peers' batches along their shortest-path trees in the topology, so
    /// every replica applies every update (hop-distance clocks late) while each peer keeps
    /// `Q` connections. By default a run with relay fails on a peer loss; with
    /// `--on-peer-loss continue` it routes around lost peers ([`sfb_core::relay`]).
    /// Checkpoints hold the batches still travelling the trees. No `--rejoin`. Default:
    /// false.
    pub relay: bool,
    /// With `relay`: every forwarder re-compresses the batches it forwards to at most R
    /// pairs (`--relay-compress rank:R`; no error feedback, what is cut is lost): fewer
    /// bytes, an approximation of far peers' updates. Default: none.
    pub relay_compress: Option<CompressSpec>,
    /// Aggregated apply (`--aggregate rank:R`, SFB; [`sfb_core::aggregate`]): a peer
    /// applies at most R pairs per clock whenever re-compressing the pairs it applies is
    /// cheaper than applying them, and keeps the rest for the next clock. Default: none.
    pub aggregate: Option<CompressSpec>,
    /// Partial broadcast's mode (`--partial`, SFB with `Q < P − 1`): `gossip` (the
    /// default; [`sfb_core::gossip`]: weighted neighbourhood updates plus compressed
    /// consensus, converges at `O(Q)` bytes) or `paper` (the paper's literal mode: no
    /// forwarding, no consensus; diverges or stalls on most topologies, see
    /// `sfb_topology::Learning`). `None`: gossip, or paper with `--relay`.
    pub partial: Option<PartialSpec>,
    /// Pairs per consensus message in the gossip mode (`--gossip-rank R`). Default
    /// `max(1, ⌊3K/16⌋)`, fewer where that would send more than full broadcast
    /// ([`sfb_core::gossip::Config::default_rank_for`]).
    pub gossip_rank: Option<usize>,
    /// Pairs per message of the tree mode (`--tree-rank R`, [`sfb_core::tree`]): both a
    /// subtree's sum going up and the clock's update coming down. Default: the batch
    /// size K (a leaf's batch goes up as it is).
    pub tree_rank: Option<usize>,
    /// The gossip mode's consensus step in (0, 1] (`--gossip-step G`). Default
    /// `R · max(1/m, 0.4/m^¾)` for `m = min(J, D)`, at most ¼
    /// ([`sfb_core::gossip::Config::default_step`]).
    pub gossip_step: Option<f32>,
    /// The gossip mode's weight on a peer's own batches against its in-neighbours', in
    /// (0, 1) (`--gossip-own A`). Default `1/(Q+1)`
    /// ([`sfb_core::gossip::Config::default_own`]).
    pub gossip_own: Option<f32>,
    /// How far the gossip mode's replicas' mean moves a clock, as a share of a full
    /// broadcast replica's step, in (0, 1] (`--gossip-gain G`). Default
    /// [`sfb_core::gossip::Config::default_gain`].
    pub gossip_gain: Option<f32>,
    /// libp2p, root only: every node in its own network namespace, sends shaped by the
    /// kernel's tbf at `bandwidth` (burst `burst`) instead of the token bucket.
    pub netns: bool,
    /// With `netns`: links that get slower during the run (`--netns-slow
    /// PEERS@FROM..UNTIL:FACTOR`): over each window, seconds since the nodes' first step,
    /// the listed nodes' tbf rate is divided by the factor (`tc qdisc change`), and set
    /// back after. What the simulator's `sim.slow` does to its NICs, on real links: the
    /// nodes see only what their sends take.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub netns_slow: Vec<crate::sim::Slowdown>,
    /// Parts each clock's mini-batch is computed and sent in (`--send-parts N`, SFB;
    /// [`sfb_core::Config::send_parts`]): part `i` is on the wire while part `i + 1` is
    /// computed; every replica takes the clock as one batch. Default 1.
    pub send_parts: usize,
}

impl Default for NetOptions {
    fn default() -> Self {
        Self {
            timeout_s: 30.0,
            peer_timeout_s: 60.0,
            startup_timeout_s: 30.0,
            bandwidth: None,
            burst: 256 * 1024,
            wire: Dtype::F32,
            netns: false,
            netns_slow: Vec::new(),
            send_parts: 1,
            compress: None,
            prioritize: None,
            relay: false,
            relay_compress: None,
            aggregate: None,
            partial: None,
            gossip_rank: None,
            tree_rank: None,
            gossip_step: None,
            gossip_own: None,
            gossip_gain: None,
        }
    }
}

/// [`NetOptions::partial`]: how partial broadcast keeps the replicas together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PartialSpec {
    /// Weighted neighbourhood updates plus compressed consensus ([`sfb_core::gossip`]).
    #[default]
    Gossip,
    /// An aggregation tree of fan-out Q: every replica applies the same compressed sum of
    /// every peer's batch ([`sfb_core::tree`]).
    Tree,
    /// The paper's literal mode: each replica applies its own and its in-neighbours'
    /// batches, nothing more.
    Paper,
}

impl std::str::FromStr for PartialSpec {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "gossip" => Ok(Self::Gossip),
            "paper" => Ok(Self::Paper),
            "tree" => Ok(Self::Tree),
            other => Err(format!(
                "unknown partial-broadcast mode {other:?}: expected gossip, tree or paper"
            )),
        }
    }
}

impl std::fmt::Display for PartialSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Gossip => "gossip",
            Self::Paper => "paper",
            Self::Tree => "tree",
        })
    }
}

/// [`NetOptions::compress`]: `rank:R` (command line and JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CompressSpec {
    /// Pairs sent per batch at most (≥ 1).
    pub rank: usize,
}

impl FromStr for CompressSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::Compress(s.to_string());
        let r = s.strip_prefix("rank:").ok_or_else(bad)?;
        let rank: usize = r.parse().map_err(|_| bad())?;
        if rank == 0 {
            return Err(bad());
        }
        Ok(Self { rank })
    }
}

impl fmt::Display for CompressSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank:{}", self.rank)
    }
}

impl TryFrom<String> for CompressSpec {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<CompressSpec> for String {
    fn from(s: CompressSpec) -> Self {
        s.to_string()
    }
}

/// [`NetOptions::prioritize`]: `POLICY:BUDGET` (command line and JSON), the policy one of
/// `magnitude`, `relative`, `random`, `round-robin`, the budget a share of the pairs
/// computed per clock (`50%`), a number of pairs (`8`) or `auto` (measured from the link,
/// [`sfb_core::Budget::Measured`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PrioritizeSpec {
    /// Which pairs go first.
    pub policy: sfb_core::Policy,
    /// Pairs per clock.
    pub budget: sfb_core::Budget,
}

impl FromStr for PrioritizeSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &'static str| Error::Prioritize {
            spec: s.to_string(),
            why,
        };
        let (policy, budget) = s
            .split_once(':')
            .ok_or_else(|| bad("no budget (e.g. magnitude:50%, magnitude:8 or magnitude:auto)"))?;
        let policy = sfb_core::Policy::parse(policy)
            .ok_or_else(|| bad("the policy is magnitude, relative, random or round-robin"))?;
        let budget = if budget == "auto" {
            sfb_core::Budget::Measured
        } else if let Some(pct) = budget.strip_suffix('%') {
            let f: f64 = pct.parse().map_err(|_| {
                bad("the budget is a percentage (50%), a number of pairs (8) or auto")
            })?;
            if !(f > 0.0 && f <= 100.0) {
                return Err(bad("a percentage budget is above 0% and at most 100%"));
            }
            sfb_core::Budget::Fraction(f / 100.0)
        } else {
            let n: usize = budget.parse().map_err(|_| {
                bad("the budget is a percentage (50%), a number of pairs (8) or auto")
            })?;
            if n == 0 {
                return Err(bad("a budget of 0 pairs would never send anything"));
            }
            sfb_core::Budget::Pairs(n)
        };
        Ok(Self { policy, budget })
    }
}

impl fmt::Display for PrioritizeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.policy.name(), self.budget)
    }
}

impl TryFrom<String> for PrioritizeSpec {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<PrioritizeSpec> for String {
    fn from(s: PrioritizeSpec) -> Self {
        s.to_string()
    }
}

/// Files a run writes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputOptions {
    /// Per-clock records as JSON lines.
    pub metrics: Option<PathBuf>,
    /// The run's [`Summary`](sfb_core::metrics::Summary) as JSON.
    pub summary: Option<PathBuf>,
    /// Keep every node's per-clock records in memory and return them in
    /// [`Outcome::records`](crate::Outcome::records) (O(clocks) memory, for experiments
    /// that plot curves). Default false: records stream to `metrics` as they happen and
    /// only each node's final record is kept.
    pub keep_records: bool,
    /// Save the trained model here at the end (`--save-model`): the first worker's final
    /// replica (a hand-run node: its own), the model's kind and hyper-parameters and the
    /// data's preprocessing ([`sfb_models::saved`]), for `sfb predict` and `sfb eval`.
    pub save_model: Option<PathBuf>,
}

/// Checkpoints (Bösen's consistent checkpoint at clock boundaries) and resuming from them;
/// see [`checkpoint`](crate::checkpoint).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultOptions {
    /// Where every node writes its checkpoints (`--checkpoint-dir`); none: no checkpoints.
    pub checkpoint_dir: Option<PathBuf>,
    /// Checkpoint every this many clocks (`--checkpoint-every`). Default 10.
    pub checkpoint_every: u64,
    /// Checkpoints each node keeps (`--checkpoint-keep`), the oldest deleted. Default 2.
    pub checkpoint_keep: usize,
    /// Resume from the latest clock at which every node of the run has a checkpoint in
    /// `checkpoint_dir` (`--resume`).
    pub resume: bool,
    /// Resume from this clock (`--resume-at`): for nodes whose checkpoint directories are
    /// not shared, which cannot find the common clock by themselves. The launcher sets it
    /// for its nodes.
    pub resume_at: Option<u64>,
    /// What a peer does when a neighbour is lost (`--on-peer-loss`): `fail`, or `continue`
    /// training without it. Default: fail under BSP (a BSP run must not silently change),
    /// continue under SSP, async and custom barriers.
    pub on_peer_loss: Option<PeerLossSpec>,
    /// This node was lost and restarts into the run under way (`sfb peer --rejoin`): it
    /// takes W, the optimizer state and the clock from the first neighbour that sends
    /// them, then trains on; the others take it back (the topology returns to what it was
    /// without the loss).
    pub rejoin: bool,
    /// How long a libp2p peer cut off from the majority (the minority side of a partition
    /// past the peer timeout, or a peer stopped for that long) tries to get back into the
    /// run by state transfer, seconds (`--heal-timeout`): it pauses, says so, and rejoins
    /// as `--rejoin` does once its links heal, or stops cut off (exit 3) when this runs
    /// out. 0: it stops at once. Default 600. Modes that cannot rejoin (relay, the tree)
    /// stop at once.
    pub heal_timeout_s: f64,
    /// What becomes of a lost peer's data shard (`--lost-shards`): `takeover` (the
    /// survivors split it deterministically, [`sfb_core::takeover_indices`], and give it
    /// back when the peer rejoins) or `drop`. Default: takeover for the models whose state
    /// does not belong to their samples (mlr, sc, mlr with sgd), drop for the others (SDCA's
    /// duals, SAGA's table, DML's pair sampler), and drop under FMS (a client does not
    /// learn of another's loss).
    pub lost_shards: Option<LostShardsSpec>,
    /// The step bound (`--step-bound`, [`sfb_core::bound`]): a received batch whose step
    /// size is more than this many times the largest the peer accepted in the last clocks
    /// is refused and its sender shut out (a lost peer). `None` (`off`): no bound.
    /// Default 1,000.
    #[serde(default = "default_step_bound")]
    pub step_bound: Option<f32>,
}

/// [`FaultOptions::lost_shards`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LostShardsSpec {
    /// The survivors take the lost shard over.
    Takeover,
    /// The lost shard is not trained on any more.
    Drop,
}

/// [`FaultOptions::on_peer_loss`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerLossSpec {
    /// Stop the run.
    Fail,
    /// Train on without the lost node while a majority of the run's peers is reachable
    /// ([`sfb_core::Config::quorum`]).
    Continue,
    /// Train on without the lost node, even alone (no quorum).
    #[serde(rename = "continue-alone")]
    ContinueAlone,
}

impl From<PeerLossSpec> for sfb_core::PeerLoss {
    fn from(p: PeerLossSpec) -> Self {
        match p {
            PeerLossSpec::Fail => sfb_core::PeerLoss::Fail,
            PeerLossSpec::Continue | PeerLossSpec::ContinueAlone => sfb_core::PeerLoss::Continue,
        }
    }
}

impl Default for FaultOptions {
    fn default() -> Self {
        Self {
            checkpoint_dir: None,
            checkpoint_every: 10,
            checkpoint_keep: 2,
            resume: false,
            resume_at: None,
            on_peer_loss: None,
            rejoin: false,
            heal_timeout_s: 600.0,
            lost_shards: None,
            step_bound: default_step_bound(),
        }
    }
}

fn default_step_bound() -> Option<f32> {
    Some(sfb_core::bound::DEFAULT_STEP_BOUND)
}

impl FaultOptions {
    /// Clocks between checkpoints, 0 when none are written.
    pub fn every(&self) -> u64 {
        if self.checkpoint_dir.is_some() {
            self.checkpoint_every
        } else {
            0
        }
    }

    /// Whether the run resumes.
    pub fn resuming(&self) -> bool {
        self.resume || self.resume_at.is_some()
    }

    /// The peer-loss policy of a run under `consistency`: the one given, else fail under
    /// BSP or with `trees` (relay and the tree mode: a loss reshapes their trees, which a
    /// run asks for by name) and continue otherwise.
    pub fn peer_loss(&self, consistency: &ConsistencySpec, trees: bool) -> sfb_core::PeerLoss {
        match self.on_peer_loss {
            Some(p) => p.into(),
            None if trees => sfb_core::PeerLoss::Fail,
            None if matches!(consistency.to_core(), sfb_core::Consistency::Bsp) => {
                sfb_core::PeerLoss::Fail
            }
            None => sfb_core::PeerLoss::Continue,
        }
    }
}

/// `Ok` when `ok`, else [`Error::OutOfRange`] naming `field`, what it must be and `got`.
pub(crate) fn check(field: &'static str, expected: &'static str, got: f64, ok: bool) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            field,
            expected,
            got,
        })
    }
}

impl RunSpec {
    /// Whether the run's SFB peers form an aggregation tree (`--partial tree`,
    /// [`sfb_core::tree`]).
    pub fn tree(&self) -> bool {
        self.net.partial == Some(PartialSpec::Tree)
    }

    /// The tree mode's fan-out: `--out-degree`, or the root's out-list of explicit lists
    /// (a node of a tree cluster file); `None` outside the tree mode.
    pub fn tree_fanout(&self) -> Option<usize> {
        let t = &self.topology;
        self.tree().then(|| {
            t.out_degree
                .or_else(|| t.explicit.as_ref().and_then(|l| l.first()).map(Vec::len))
        })?
    }

    /// Reads a spec from JSON (absent fields take their defaults).
    ///
    /// # Errors
    /// [`Error::Json`] for malformed JSON or unknown fields.
    pub fn from_json(text: &str) -> Result<Self> {
        Ok(serde_json::from_str(text)?)
    }

    /// The spec as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a RunSpec always serializes")
    }

    /// Stop rules need evaluations to read, a gap rule a model that reports one, and
    /// none of them a timing-only simulation (which evaluates nothing).
    fn check_until(&self) -> Result<()> {
        let t = &self.train;
        if t.until.is_empty() {
            return Ok(());
        }
        if t.eval_every == 0 {
            return Err(Error::Requires {
                field: "train.until",
                requires: "train.eval_every ≥ 1",
                why: "stop rules are checked on the evaluations made every eval_every clocks",
            });
        }
        if t.until.iter().any(|r| r.needs_gap()) && !matches!(self.model, ModelChoice::L2mlr { .. })
        {
            return Err(Error::Requires {
                field: "train.until",
                requires: "model l2mlr for gap<=X",
                why: "only SDCA (l2mlr) has a duality gap; use objective<=X or plateau:N:EPS",
            });
        }
        if self.sim.timing_only {
            return Err(Error::Requires {
                field: "train.until",
                requires: "a simulation that learns (no sim.timing_only)",
                why: "a timing-only run evaluates nothing for a stop rule to read",
            });
        }
        Ok(())
    }

    /// Checks every field before anything runs (no file is touched: see
    /// [`check_outputs`](Self::check_outputs)). Every number of seconds is finite and at
    /// most [`MAX_SECONDS`](crate::preflight::MAX_SECONDS), so it converts to a
    /// `Duration` without panicking.
    ///
    /// # Errors
    /// The first problem found, naming the field: [`Error::OutOfRange`],
    /// [`Error::Seconds`], [`Error::OutDegree`], [`Error::TopologyPeers`],
    /// [`Error::Unsupported`] or [`Error::Requires`].
    pub fn validate(&self) -> Result<()> {
        let p = self.peers;
        check("peers", "at least 1", p as f64, p >= 1)?;
        if self.fms_sync == SyncSpec::Lazy && self.backend != Backend::Fms {
            return Err(Error::Requires {
                field: "fms_sync",
                requires: "backend fms",
                why: "lazy sync is how FMS clients get W from the parameter server; SFB \
                      peers hold their own replicas",
            });
        }
        let t = &self.train;
        check("train.batch", "at least 1", t.batch as f64, t.batch >= 1)?;
        if let Some(lr) = t.lr {
            check(
                "train.lr",
                "a positive number",
                lr.into(),
                lr.is_finite() && lr > 0.0,
            )?;
        }
        let opt = t.optimizer_for(&self.model);
        if opt.method == sfb_core::Method::Saga {
            self.check_saga()?;
        } else if matches!(self.model, ModelChoice::L2mlr { .. }) && !opt.is_plain() {
            return Err(Error::Requires {
                field: "train.optimizer",
                requires: "a model trained by SGD (mlr, dml or sc), or saga",
                why: "l2mlr trains by SDCA, whose steps are exact dual coordinate \
                      maximizations with no step size to adapt or schedule (saga trains its \
                      primal instead)",
            });
        }
        check(
            "train.init_std",
            "a non-negative number",
            t.init_std.into(),
            t.init_std.is_finite() && t.init_std >= 0.0,
        )?;
        if let Some(StragglerSpec::Peer { peer, .. } | StragglerSpec::Controlled { peer, .. }) =
            t.straggler
        {
            let ok = (peer as usize) < p;
            check("train.straggler", "a peer below `peers`", peer.into(), ok)?;
        }
        if let Some(st) = t.straggler {
            // Like every duration: at most one year, so deadlines never overflow.
            let ms = st.delay().as_secs_f64() * 1e3;
            let ok = st.delay().as_secs_f64() <= preflight::MAX_SECONDS;
            check(
                "train.straggler",
                "a delay of at most 31536000000 ms (one year)",
                ms,
                ok,
            )?;
        }
        self.model.validate()?;
        self.check_custom()?;
        self.check_until()?;
        if let DataSource::Files {
            test: None,
            holdout,
            ..
        } = self.data
        {
            let ok = holdout > 0.0 && holdout < 1.0;
            check("data.holdout", "in (0, 1)", holdout, ok)?;
        }
        self.check_stream()?;
        let topo = &self.topology;
        preflight::seconds("topology.time_limit_s", topo.time_limit_s, true)?;
        if let Some(path) = &topo.file {
            self.check_topology_file(path)?;
        }
        if self.backend == Backend::Sfb {
            if let Some(out) = &topo.explicit {
                if out.len() != p {
                    return Err(Error::TopologyPeers {
                        peers: p,
                        got: out.len(),
                    });
                }
            } else if let Some(q) = topo.out_degree
                && p >= 2
                && !(1..p).contains(&q)
            {
                return Err(Error::OutDegree { peers: p, got: q });
            }
        }
        let n = &self.net;
        preflight::seconds("net.timeout_s", n.timeout_s, false)?;
        preflight::seconds("net.peer_timeout_s", n.peer_timeout_s, false)?;
        preflight::seconds("fault.heal_timeout_s", self.fault.heal_timeout_s, true)?;
        if let Some(b) = self.fault.step_bound {
            check(
                "fault.step_bound",
                "a number above 1 (or off)",
                b.into(),
                b.is_finite() && b > 1.0,
            )?;
        }
        preflight::seconds("net.startup_timeout_s", n.startup_timeout_s, false)?;
        if self.transport == Transport::Mem {
            let set = [
                ("net.bandwidth", n.bandwidth.is_some()),
                ("net.wire", n.wire != Dtype::F32),
                ("net.netns", n.netns),
            ];
            if let Some(&(field, _)) = set.iter().find(|(_, set)| *set) {
                return Err(Error::Unsupported {
                    field,
                    transport: Transport::Libp2p.name(),
                });
            }
        }
        if self.transport == Transport::Sim {
            self.sim.validate()?;
            self.check_simulated()?;
        } else if !is_default_sim(&self.sim) {
            return Err(Error::Unsupported {
                field: "sim",
                transport: Transport::Sim.name(),
            });
        }
        if !n.netns_slow.is_empty() && !n.netns {
            return Err(Error::Requires {
                field: "net.netns_slow",
                requires: "net.netns",
                why: "the kernel's qdiscs are what change rate (the token bucket's rate is fixed)",
            });
        }
        for w in &n.netns_slow {
            check(
                "net.netns_slow",
                "a factor of 1 or more",
                w.factor,
                w.factor.is_finite() && w.factor >= 1.0,
            )?;
            self.check_window("net.netns_slow", "net.netns_slow", &w.window())?;
        }
        if n.netns && n.bandwidth.is_none() {
            return Err(Error::Requires {
                field: "net.netns",
                requires: "net.bandwidth",
                why: "the rate the kernel shapes each node's sends to",
            });
        }
        let f = &self.fault;
        if f.checkpoint_dir.is_some() {
            let every = f.checkpoint_every;
            check(
                "fault.checkpoint_every",
                "at least 1",
                every as f64,
                every >= 1,
            )?;
            let keep = f.checkpoint_keep;
            check(
                "fault.checkpoint_keep",
                "at least 1",
                keep as f64,
                keep >= 1,
            )?;
        } else if f.resuming() {
            return Err(Error::Requires {
                field: "fault.resume",
                requires: "fault.checkpoint_dir",
                why: "the directory the checkpoints are read from",
            });
        }
        if n.compress.is_some() && self.backend == Backend::Fms {
            return Err(Error::Requires {
                field: "net.compress",
                requires: "the sfb backend",
                why: "it re-compresses a peer's factor batches before they are broadcast",
            });
        }
        if n.prioritize.is_some() {
            if self.backend == Backend::Fms && self.fms_push == Push::Dense {
                return Err(Error::Requires {
                    field: "net.prioritize",
                    requires: "the sfb backend or FMS factor push",
                    why: "it chooses which of a peer's or client's factor pairs are sent \
                          each clock, and a dense ΔW has none",
                });
            }
            if n.compress.is_some() {
                return Err(Error::Requires {
                    field: "net.prioritize",
                    requires: "no --compress",
                    why: "they are two ways to send less: pick one (a compressed batch is \
                          already ordered by importance, its singular values)",
                });
            }
            if n.prioritize
                .is_some_and(|p| p.budget == sfb_core::Budget::Measured)
                && self.transport == Transport::Mem
            {
                return Err(Error::Requires {
                    field: "net.prioritize",
                    requires: "--transport libp2p or sfb sim",
                    why: "an auto budget is what the link carries as its transport measures \
                          it, and in-memory channels have no link to measure",
                });
            }
        }
        if n.send_parts != 1 {
            let refuse = |requires: &'static str, why: &'static str| {
                Err(Error::Requires {
                    field: "net.send_parts",
                    requires,
                    why,
                })
            };
            if self.backend == Backend::Fms {
                return refuse(
                    "the sfb backend",
                    "an FMS client sends its clock's update when it is complete",
                );
            }
            if f.rejoin {
                return refuse(
                    "no --rejoin",
                    "a peer back in the run could take a clock's last part without its \
                     earlier ones",
                );
            }
        }
        if n.aggregate.is_some() {
            let refuse = |requires: &'static str, why: &'static str| {
                Err(Error::Requires {
                    field: "net.aggregate",
                    requires,
                    why,
                })
            };
            if self.backend == Backend::Fms {
                return refuse(
                    "the sfb backend",
                    "it re-compresses the pairs a peer applies to its replica",
                );
            }
            if f.checkpoint_dir.is_some() {
                return refuse(
                    "no checkpoints",
                    "the residual it keeps back is not checkpointed yet",
                );
            }
        }
        if n.partial == Some(PartialSpec::Gossip) {
            let refuse = |requires: &'static str, why: &'static str| {
                Err(Error::Requires {
                    field: "net.partial",
                    requires,
                    why,
                })
            };
            if n.relay {
                return refuse(
                    "no --relay (or --partial paper with it)",
                    "relay carries every batch to every replica; gossip mixes replicas instead",
                );
            }
        }
        if self.tree() {
            let refuse = |requires: &'static str, why: &'static str| {
                Err(Error::Requires {
                    field: "net.partial",
                    requires,
                    why,
                })
            };
            let t = &self.topology;
            let cut = [
                (
                    n.relay,
                    "no --relay",
                    "the tree carries every peer's batch already",
                ),
                (
                    self.tree_fanout().is_none_or(|q| q == 0),
                    "--out-degree Q, the tree's fan-out",
                    "it builds its own topology, a tree of fan-out Q",
                ),
                (
                    t.file.is_some()
                        || t.method != TopologyMethod::Optimal
                        || t.explicit.as_ref().is_some_and(|l| {
                            let q = l.first().map_or(0, Vec::len);
                            *l != sfb_core::tree::Config::new(q, 1).lists(self.peers)
                        }),
                    "no --topology or topology method",
                    "it builds its own topology, a tree of fan-out Q",
                ),
                (
                    f.rejoin,
                    "no rejoin (or --partial gossip)",
                    "a peer back in the run would need the tree rebuilt around it, which is \
                     not built (a loss is repaired)",
                ),
                (
                    n.compress.is_some() || n.prioritize.is_some() || n.aggregate.is_some(),
                    "no --compress, --prioritize or --aggregate",
                    "the tree compresses its sums itself",
                ),
            ];
            if let Some((_, requires, why)) = cut.iter().find(|c| c.0) {
                return refuse(requires, why);
            }
        }
        if n.tree_rank == Some(0) {
            return Err(Error::Requires {
                field: "net.tree_rank",
                requires: "a rank of at least 1",
                why: "a tree message of no pairs would carry nothing",
            });
        }
        if n.tree_rank.is_some() && !self.tree() {
            return Err(Error::Requires {
                field: "net.tree_rank",
                requires: "--partial tree",
                why: "only the tree mode sends sums",
            });
        }
        if n.gossip_rank == Some(0) {
            return Err(Error::Requires {
                field: "net.gossip_rank",
                requires: "a rank of at least 1",
                why: "rank 0 would never mix the replicas",
            });
        }
        // The gossip mode's fractions: (field, value, whether 1 is allowed, what it needs,
        // why).
        let fractions = [
            (
                "net.gossip_step",
                n.gossip_step,
                true,
                "a step in (0, 1]",
                "it is the fraction of the way to the neighbours' mean taken a clock",
            ),
            (
                "net.gossip_own",
                n.gossip_own,
                false,
                "a weight in (0, 1)",
                "it is the share of a replica's step that comes from its own batches",
            ),
            (
                "net.gossip_gain",
                n.gossip_gain,
                true,
                "a gain in (0, 1]",
                "it is the share of full broadcast's step the replicas' mean takes a clock",
            ),
        ];
        for (field, value, one, requires, why) in fractions {
            if let Some(x) = value
                && !(x > 0.0 && (x < 1.0 || (one && x == 1.0)))
            {
                return Err(Error::Requires {
                    field,
                    requires,
                    why,
                });
            }
        }
        if n.relay_compress.is_some() && !n.relay {
            return Err(Error::Requires {
                field: "net.relay_compress",
                requires: "--relay",
                why: "it re-compresses the batches a peer forwards, and only relay forwards",
            });
        }
        if n.relay {
            let refuse = |requires: &'static str, why: &'static str| {
                Err(Error::Requires {
                    field: "net.relay",
                    requires,
                    why,
                })
            };
            if self.backend == Backend::Fms {
                return refuse(
                    "the sfb backend",
                    "it forwards peers' factor batches along the peer topology",
                );
            }
            if f.rejoin {
                return refuse(
                    "no --rejoin",
                    "a peer back in the run would need the relay trees rebuilt around it and \
                     every batch it missed; relay goes on without lost peers (--on-peer-loss \
                     continue) but does not take them back",
                );
            }
        }
        if f.lost_shards == Some(LostShardsSpec::Takeover) {
            if self.backend == Backend::Fms {
                return Err(Error::Requires {
                    field: "fault.lost_shards",
                    requires: "the sfb backend for takeover",
                    why: "an FMS client does not learn of another client's loss (the server \
                          trains on with the clients left); use --lost-shards drop",
                });
            }
            let spec = self.model_spec();
            if let Some(why) = spec.takeover_refusal() {
                return Err(Error::Requires {
                    field: "fault.lost_shards",
                    requires: "a model whose state does not belong to its samples for takeover",
                    why,
                });
            }
        }
        Ok(())
    }

    /// The simulated partitions, pauses and slow links: SFB peers of the run, over a span
    /// that ends after it starts; a cut leaves someone on the other side; a slowdown's
    /// factor at least 1.
    fn check_windows(&self) -> Result<()> {
        for w in &self.sim.slow {
            check(
                "sim.slow",
                "a factor of 1 or more",
                w.factor,
                w.factor.is_finite() && w.factor >= 1.0,
            )?;
        }
        let slow: Vec<crate::sim::Window> = self
            .sim
            .slow
            .iter()
            .map(crate::sim::Slowdown::window)
            .collect();
        let kinds = [
            (
                "sim.partitions",
                "sim.partitions peer",
                &self.sim.partitions,
            ),
            ("sim.pauses", "sim.pauses peer", &self.sim.pauses),
            ("sim.slow", "sim.slow peer", &slow),
        ];
        for (field, peer_field, windows) in kinds {
            if windows.is_empty() {
                continue;
            }
            if self.backend == Backend::Fms {
                return Err(Error::Requires {
                    field,
                    requires: "backend sfb",
                    why: "the simulator cuts and pauses SFB peers; an FMS client reaches only \
                          its server",
                });
            }
            for w in windows {
                self.check_window(field, peer_field, w)?;
                let side: std::collections::BTreeSet<_> = w.peers.iter().collect();
                if field == "sim.partitions" {
                    let ok = side.len() < self.peers;
                    check(
                        field,
                        "fewer peers than the run's (a cut has two sides)",
                        side.len() as f64,
                        ok,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// One window of `field` (`peer_field` naming its peers): at least one peer, each a
    /// peer of the run, over a span that ends after it starts.
    fn check_window(
        &self,
        field: &'static str,
        peer_field: &'static str,
        w: &crate::sim::Window,
    ) -> Result<()> {
        check(field, "at least one peer", 0.0, !w.peers.is_empty())?;
        for &peer in &w.peers {
            let ok = peer < self.peers;
            check(
                peer_field,
                "a peer of the run (below --peers)",
                peer as f64,
                ok,
            )?;
        }
        preflight::seconds(field, w.from_s, true)?;
        preflight::seconds(field, w.until_s, true)?;
        check(
            field,
            "a span that ends after it starts",
            w.until_s,
            w.until_s > w.from_s,
        )
    }

    /// What a registered model ([`custom_model`](Self::custom_model)) cannot do: the
    /// built-in models' optimizer and data paths (SAGA's per-sample table, streamed files)
    /// and their saved-model format.
    fn check_custom(&self) -> Result<()> {
        let Some(name) = &self.custom_model else {
            return Ok(());
        };
        if name.is_empty() {
            return Err(Error::Requires {
                field: "custom_model",
                requires: "a model name",
                why: "a registered model is named by the name it was registered under",
            });
        }
        let refusals: [(bool, &'static str, &'static str, &'static str); 3] = [
            (
                self.train
                    .optimizer
                    .is_some_and(|m| m.0 == sfb_core::Method::Saga),
                "train.optimizer",
                "a built-in model (mlr or l2mlr) with saga",
                "saga keeps a model's per-sample gradients; a registered model has no such table",
            ),
            (
                matches!(self.data, DataSource::Files { stream: true, .. }),
                "data.stream",
                STREAMED_MODELS,
                "a registered model reads its own data",
            ),
            (
                self.output.save_model.is_some(),
                "output.save_model",
                "a built-in model",
                "the saved-model file holds a built-in model for `predict` and `eval`",
            ),
        ];
        match refusals.into_iter().find(|r| r.0) {
            Some((_, field, requires, why)) => Err(Error::Requires {
                field,
                requires,
                why,
            }),
            None => Ok(()),
        }
    }

    /// What streaming data needs ([`STREAMED_MODELS`], [`STREAMED_TAKEOVER`]): a model
    /// that does not need the whole training set on every peer, and no takeover of lost
    /// shards (it would re-read the file inside the clock loop, stalling the peer for a
    /// scan of the whole file).
    fn check_stream(&self) -> Result<()> {
        if !matches!(self.data, DataSource::Files { stream: true, .. }) {
            return Ok(());
        }
        let spec = self.model_spec();
        if let Some(why) = spec.streaming_refusal() {
            return Err(Error::Requires {
                field: "data.stream",
                requires: STREAMED_MODELS,
                why,
            });
        }
        if self.fault.lost_shards == Some(LostShardsSpec::Takeover) {
            return Err(Error::Requires {
                field: "fault.lost_shards",
                requires: "data in memory (no --stream) for takeover",
                why: STREAMED_TAKEOVER,
            });
        }
        Ok(())
    }

    /// What `--optimizer saga` needs: a model it is implemented for, factors the table
    /// mean can be kept from (FMS factor push), and the factors as computed (f32 wire).
    fn check_saga(&self) -> Result<()> {
        if !matches!(self.model, ModelChoice::Mlr | ModelChoice::L2mlr { .. }) {
            return Err(Error::Requires {
                field: "train.optimizer",
                requires: "model mlr or l2mlr with saga",
                why: "saga's model keeps the last softmax gradient of every sample; it is \
                      implemented for (L2-regularized) multiclass logistic regression",
            });
        }
        if self.backend == Backend::Fms && self.fms_push == Push::Dense {
            return Err(Error::Requires {
                field: "fms_push",
                requires: "factor push with saga",
                why: "the server keeps SAGA's table mean from the clients' factors, which a \
                      dense ΔW does not carry",
            });
        }
        if self.net.wire != Dtype::F32 {
            return Err(Error::Requires {
                field: "net.wire",
                requires: "f32 factors with saga",
                why: "rounding the broadcast differences would let every replica's table \
                      mean drift from the tables the peers keep",
            });
        }
        if self.net.prioritize.is_some() {
            return Err(Error::Requires {
                field: "net.prioritize",
                requires: "no saga",
                why: "saga's table mean is kept from every per-sample difference as it is \
                      computed; pairs held back or dropped would let it drift from the tables",
            });
        }
        if self.net.compress.is_some() {
            return Err(Error::Requires {
                field: "net.compress",
                requires: "no saga",
                why: "saga's table mean is kept from the exact per-sample differences; a \
                      low-rank approximation of them would let it drift from the tables",
            });
        }
        Ok(())
    }

    /// Refuses what `sfb sim` does not model.
    fn check_simulated(&self) -> Result<()> {
        let refused = [
            (
                "net.netns",
                self.net.netns,
                "the simulator models NICs itself (sim.egress, sim.ingress)",
            ),
            (
                "fault.checkpoint_dir",
                self.fault.checkpoint_dir.is_some(),
                "a simulated run is replayed from its seed, not from checkpoints",
            ),
            (
                "data.stream",
                matches!(self.data, DataSource::Files { stream: true, .. }),
                "every simulated peer lives in this one process",
            ),
        ];
        if let Some(&(field, _, why)) = refused.iter().find(|(_, set, _)| *set) {
            return Err(Error::NotSimulated { field, why });
        }
        if !self.sim.crashes.is_empty() || self.sim.crash_fraction.is_some() {
            if self.backend == Backend::Fms {
                return Err(Error::Requires {
                    field: "sim.crashes",
                    requires: "backend sfb",
                    why: "the simulator crashes SFB peers; an FMS run has one server",
                });
            }
            if self
                .fault
                .peer_loss(&self.train.consistency, self.net.relay)
                == sfb_core::PeerLoss::Fail
            {
                return Err(Error::Requires {
                    field: "sim.crashes",
                    requires: "--on-peer-loss continue (or continue-alone)",
                    why: "under the run's policy a loss fails every node: nothing to simulate",
                });
            }
            for &(peer, clock) in &self.sim.crashes {
                check(
                    "sim.crashes peer",
                    "a peer of the run (below --peers)",
                    peer as f64,
                    peer < self.peers,
                )?;
                check(
                    "sim.crashes clock",
                    "in 1..clocks",
                    clock as f64,
                    clock >= 1 && clock < self.train.clocks,
                )?;
            }
        }
        if self.sim.restart_fraction.is_some() || self.sim.restart_after_s.is_some() {
            if self.sim.crashes.is_empty() && self.sim.crash_fraction.is_none() {
                return Err(Error::Requires {
                    field: "sim.restart_fraction",
                    requires: "--crash or --crash-fraction",
                    why: "only a crashed peer restarts",
                });
            }
            if let Some(after) = self.sim.restart_after_s
                && after <= self.net.peer_timeout_s
            {
                return Err(Error::OutOfRange {
                    field: "sim.restart_after_s",
                    expected: "more than --peer-timeout (the others count the peer lost first)",
                    got: after,
                });
            }
        }
        self.check_windows()?;
        if self.sim.timing_only {
            if self.backend == Backend::Fms {
                return Err(Error::Requires {
                    field: "sim.timing_only",
                    requires: "backend sfb",
                    why: "FMS frames are dense J × D matrices, which need their values \
                          (FMS's arithmetic is O(P·J·D) a clock: run it with real arithmetic)",
                });
            }
            if self.model != ModelChoice::Mlr {
                return Err(Error::Requires {
                    field: "sim.timing_only",
                    requires: "model mlr",
                    why: "timing-only frames carry MLR's factor shapes (u: J zeros, v: the \
                          sample's features); other models' shapes depend on their values",
                });
            }
        }
        Ok(())
    }

    /// Checks that the run's output files (`output.metrics`, `output.summary`, the
    /// checkpoint folder `fault.checkpoint_dir`) can be
    /// written, before any training: a bad path fails in the first second, not after the
    /// last clock ([`preflight::output_file`]; nothing is left behind).
    ///
    /// # Errors
    /// [`Error::Output`] naming the field, the path and the operating system's reason.
    pub fn check_outputs(&self) -> Result<()> {
        let o = &self.output;
        for (field, path) in [
            ("output.metrics", &o.metrics),
            ("output.summary", &o.summary),
            ("output.save_model", &o.save_model),
        ] {
            if let Some(path) = path {
                preflight::output_file(field, path)?;
            }
        }
        if let Some(dir) = &self.fault.checkpoint_dir {
            preflight::output_dir("fault.checkpoint_dir", dir)?;
        }
        Ok(())
    }

    /// The settings every node of this run must share, `(name, value)` in a fixed order,
    /// for the libp2p handshake ([`sfb_net::p2p::RunShape::agreement`]) and the
    /// checkpoints' meta: the backend, the model and its hyper-parameters, the data (a
    /// synthetic set's description; a file's size and a checksum of its first and last
    /// 64 KiB, so copies at other paths agree), the seed, the optimizer, its step size
    /// and schedule, the consistency model, initialization, feature scaling, stop rules,
    /// and how partial broadcast, compression and FMS pushes work. (J, D, batch, clocks,
    /// topology and wire encoding are compared by the handshake itself.) Not compared:
    /// timeouts, bandwidth, outputs, stragglers, checkpoint settings — a node's own.
    pub fn agreement(&self) -> Vec<(String, String)> {
        fn j<T: Serialize + ?Sized>(v: &T) -> String {
            serde_json::to_string(v).unwrap_or_default()
        }
        let t = &self.train;
        let n = &self.net;
        let data = match &self.data {
            DataSource::Synthetic(s) => format!("synthetic {s}"),
            DataSource::Files {
                train,
                test,
                holdout,
                features,
                stream,
                ..
            } => format!(
                "train {}, test {}, holdout {holdout}, features {}, stream {stream}",
                file_identity(train),
                test.as_deref().map_or("none".into(), file_identity),
                features.map_or("from the data".into(), |f| f.to_string())
            ),
        };
        let pairs: [(&str, String); 17] = [
            ("backend", self.backend.name().into()),
            (
                "model",
                match &self.custom_model {
                    Some(name) => format!("registered {name}"),
                    None => j(&self.model),
                },
            ),
            ("data", data),
            ("seed", t.seed.to_string()),
            ("optimizer", j(&t.optimizer)),
            ("lr", t.lr.map_or("default".into(), |lr| format!("{lr:?}"))),
            (
                "lr schedule",
                format!("{} {}", j(&t.lr_schedule), j(&t.warmup)),
            ),
            (
                "consistency",
                format!("{} {}", j(&t.consistency), t.max_drift),
            ),
            ("init_std", t.init_std.to_string()),
            ("scaling", format!("{} {}", j(&t.scale), t.intercept)),
            ("stop rules", j(&t.until)),
            (
                "partial broadcast",
                format!(
                    "{} relay {} {} gossip {} {} {} {} tree {}",
                    j(&n.partial),
                    n.relay,
                    j(&n.relay_compress),
                    j(&n.gossip_rank),
                    j(&n.gossip_step),
                    j(&n.gossip_own),
                    j(&n.gossip_gain),
                    j(&n.tree_rank)
                ),
            ),
            (
                "compression",
                format!(
                    "{} {} {}",
                    j(&n.compress),
                    j(&n.prioritize),
                    j(&n.aggregate)
                ),
            ),
            ("send parts", j(&n.send_parts)),
            ("fms push", j(&self.fms_push)),
            ("fms sync", j(&self.fms_sync)),
            (
                "peer loss",
                format!(
                    "{} {}",
                    self.fault.peer_loss(&t.consistency, n.relay),
                    self.fault.on_peer_loss != Some(PeerLossSpec::ContinueAlone)
                ),
            ),
        ];
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// Refuses a topology file that cannot be read or does not describe this run (its
    /// peer count, or its out-degree when `topology.out_degree` is set, is not the run's),
    /// and one given where it has no use (FMS) or beside `topology.explicit`.
    fn check_topology_file(&self, path: &Path) -> Result<()> {
        let refuse = |why: String| Error::TopologyFile {
            path: path.to_path_buf(),
            why,
        };
        if self.backend == Backend::Fms {
            return Err(refuse(
                "FMS has no topology (clients talk to the server only)".into(),
            ));
        }
        if self.topology.explicit.is_some() {
            return Err(refuse(
                "give either topology.file or topology.explicit, not both".into(),
            ));
        }
        let t = sfb_topology::Topology::read_file(path).map_err(|e| refuse(e.to_string()))?;
        match t.disagreement(Some(self.peers), self.topology.out_degree) {
            Some(why) => Err(refuse(why)),
            None => Ok(()),
        }
    }

    /// The model as sfb-models builds it for this run: [`ModelChoice::spec_for`] the
    /// training method, with the intercept the run's data gets.
    pub fn model_spec(&self) -> ModelSpec {
        self.model
            .spec_for(self.train.method_for(&self.model))
            .with_intercept(self.train.intercept_for(&self.model))
    }

    /// The descriptive part of this run's summary (`out_degree` as resolved: `Q`, or
    /// `P − 1` for full broadcast, 1 for FMS).
    pub fn run_info(&self) -> RunInfo {
        let p = self.peers;
        let model = self.model_spec();
        let out_degree = match (self.backend, &self.topology.explicit) {
            (Backend::Fms, _) => 1,
            (Backend::Sfb, Some(out)) => out.first().map_or(0, Vec::len),
            (Backend::Sfb, None) if p < 2 => 0,
            (Backend::Sfb, None) => match &self.topology.file {
                // Validated before the run: read again only for its out-degree.
                Some(path) => sfb_topology::Topology::read_file(path).map_or(0, |t| t.out_degree()),
                None => self.topology.out_degree.unwrap_or(p - 1),
            },
        };
        RunInfo {
            backend: self.backend.name().into(),
            transport: self.transport.name().into(),
            model: self
                .custom_model
                .clone()
                .unwrap_or_else(|| self.model.name().into()),
            consistency: self.train.consistency.to_core().to_string(),
            peers: p,
            out_degree,
            clocks: self.train.clocks,
            batch: self.train.batch,
            optimizer: own_step(&model).map_or_else(
                || self.train.optimizer_for(&self.model).to_string(),
                str::to_string,
            ),
            // The launcher resolves a data-dependent default before it writes the nodes'
            // specs (`Launcher::run`), so every node and the summary see the same rate.
            lr: match own_step(&model) {
                Some(_) => 0.0,
                None => self.train.lr_for(&self.model),
            },
            data: String::new(),
            until: self.train.until.iter().map(ToString::to_string).collect(),
            // The launcher fills it in from the topology it built.
            topology: None,
        }
    }
}

mod dtype_serde {
    use serde::{Deserialize, Deserializer, Serializer};
    use sfb_core::wire::Dtype;

    pub(super) fn serialize<S: Serializer>(d: &Dtype, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(d)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Dtype, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A data file's identity for [`RunSpec::agreement`]: its size and a CRC-32 of its first
/// and last 64 KiB (the same file copied to another path or machine agrees; reading it
/// whole would cost a pass over a file larger than memory).
fn file_identity(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const EDGE: u64 = 64 * 1024;
    let read = || -> std::io::Result<String> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        let mut h = crc32fast::Hasher::new();
        let mut buf = Vec::new();
        (&mut f).take(EDGE).read_to_end(&mut buf)?;
        h.update(&buf);
        if len > EDGE {
            f.seek(SeekFrom::Start(len.saturating_sub(EDGE).max(EDGE)))?;
            buf.clear();
            f.take(EDGE).read_to_end(&mut buf)?;
            h.update(&buf);
        }
        Ok(format!("{len} bytes crc {:08x}", h.finalize()))
    };
    read().unwrap_or_else(|e| format!("unreadable ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_keeps_every_field() {
        let spec = RunSpec {
            peers: 6,
            backend: Backend::Fms,
            transport: Transport::Libp2p,
            model: ModelChoice::Sc {
                atoms: 16,
                lambda: 0.2,
                sweeps: 5,
                decay: 10.0,
            },
            custom_model: None,
            data: DataSource::Files {
                train: "a.svm".into(),
                test: Some("b.svm".into()),
                holdout: 0.3,
                features: Some(7),
                stream: false,
            },
            train: TrainOptions {
                consistency: ConsistencySpec::Throttle { min_ready: 2 },
                straggler: Some(StragglerSpec::Rotating { delay_ms: 5 }),
                ..TrainOptions::default()
            },
            topology: TopologyOptions {
                out_degree: Some(2),
                method: TopologyMethod::Kautz,
                ..TopologyOptions::default()
            },
            fms_push: Push::Dense,
            fms_sync: SyncSpec::Lazy,
            net: NetOptions {
                bandwidth: Some(Rate(1e6)),
                wire: Dtype::F16,
                netns: true,
                ..NetOptions::default()
            },
            output: OutputOptions {
                metrics: Some("m.jsonl".into()),
                summary: None,
                keep_records: true,
                save_model: Some("m.sfbm".into()),
            },
            fault: FaultOptions {
                checkpoint_dir: Some("ck".into()),
                checkpoint_every: 7,
                checkpoint_keep: 3,
                resume: true,
                resume_at: Some(14),
                on_peer_loss: Some(PeerLossSpec::Continue),
                rejoin: true,
                heal_timeout_s: 30.0,
                lost_shards: Some(LostShardsSpec::Drop),
                step_bound: Some(50.0),
            },
            sim: crate::sim::SimOptions {
                egress: Some(Rate(1.25e8)),
                ingress: crate::sim::Ingress::Unlimited,
                jitter_s: 1e-5,
                costs: crate::sim::CostModel::Calibrate,
                colocate: Some((8, 2)),
                transport_cpu: Some(Rate(3.6e8)),
                compute_per_sample_s: Some(2e-6),
                crashes: vec![(1, 20), (3, 40)],
                crash_fraction: Some(0.05),
                ..crate::sim::SimOptions::default()
            },
        };
        assert_eq!(RunSpec::from_json(&spec.to_json()).unwrap(), spec);
        assert_eq!(RunSpec::from_json("{}").unwrap(), RunSpec::default());
        let s = RunSpec::from_json(r#"{"net": {"bandwidth": "8mbit"}}"#).unwrap();
        assert_eq!(s.net.bandwidth, Some(Rate(1e6)));
        assert!(RunSpec::from_json(r#"{"peerz": 3}"#).is_err());
    }

    #[test]
    fn validate_names_the_field() {
        let bad = |f: &dyn Fn(&mut RunSpec)| {
            let mut s = RunSpec::default();
            f(&mut s);
            s.validate().unwrap_err().to_string()
        };
        assert!(bad(&|s| s.train.lr = Some(f32::NAN)).starts_with("train.lr must be a positive"));
        assert!(bad(&|s| s.train.lr = Some(-1.0)).starts_with("train.lr"));
        assert_eq!(
            bad(&|s| s.train.batch = 0),
            "train.batch must be at least 1, got 0"
        );
        assert!(bad(&|s| s.peers = 0).starts_with("peers"));
        assert!(bad(&|s| s.net.timeout_s = f64::INFINITY).starts_with("net.timeout_s"));
        assert!(bad(&|s| s.net.peer_timeout_s = 0.0).starts_with("net.peer_timeout_s"));
        for v in [1e30, f64::INFINITY, f64::NAN, -1.0] {
            for (field, set) in [
                (
                    "net.timeout_s",
                    &(|s: &mut RunSpec, v| s.net.timeout_s = v) as &dyn Fn(&mut RunSpec, f64),
                ),
                ("net.peer_timeout_s", &|s, v| s.net.peer_timeout_s = v),
                ("net.startup_timeout_s", &|s, v| s.net.startup_timeout_s = v),
                ("topology.time_limit_s", &|s, v| s.topology.time_limit_s = v),
            ] {
                let e = bad(&|s| set(s, v));
                assert!(e.starts_with(field), "{e}");
                assert!(e.contains("at most 31536000 (one year)"), "{e}");
            }
        }
        assert!(bad(&|s| s.topology.out_degree = Some(4)).starts_with("topology.out_degree"));
        assert!(bad(&|s| s.model = ModelChoice::L2mlr { lambda: 0.0 }).starts_with("model.lambda"));
        assert!(bad(&|s| s.net.bandwidth = Some(Rate(1.0))).starts_with("net.bandwidth"));
        let takeover = |s: &mut RunSpec| s.fault.lost_shards = Some(LostShardsSpec::Takeover);
        let e = bad(&|s| {
            takeover(s);
            s.model = ModelChoice::L2mlr { lambda: 1e-3 };
        });
        assert!(
            e.starts_with("fault.lost_shards") && e.contains("dual variable per sample"),
            "{e}"
        );
        let e = bad(&|s| {
            takeover(s);
            s.backend = Backend::Fms;
        });
        assert!(
            e.starts_with("fault.lost_shards") && e.contains("FMS client"),
            "{e}"
        );
        assert!(
            bad(&|s| s.train.straggler = Some(StragglerSpec::Peer {
                peer: 4,
                delay_ms: 1
            }))
            .starts_with("train.straggler")
        );
        assert!(
            bad(&|s| s.train.straggler = Some(StragglerSpec::Rotating { delay_ms: u64::MAX }))
                .starts_with("train.straggler must be a delay of at most 31536000000 ms")
        );
        // The gossip mode's settings (issue 28): fractions with their open or closed ends,
        // a rank of at least 1, no relay and no rejoin with it named.
        for (field, set, ok, bad_values) in [
            (
                "net.gossip_step",
                &(|s: &mut RunSpec, v| s.net.gossip_step = Some(v)) as &dyn Fn(&mut RunSpec, f32),
                1.0,
                [0.0, 1.5, f32::NAN],
            ),
            (
                "net.gossip_own",
                &|s, v| s.net.gossip_own = Some(v),
                0.5,
                [0.0, 1.0, f32::NAN],
            ),
            (
                "net.gossip_gain",
                &|s, v| s.net.gossip_gain = Some(v),
                1.0,
                [0.0, 1.5, f32::NAN],
            ),
        ] {
            let mut s = RunSpec::default();
            set(&mut s, ok);
            s.validate().unwrap();
            for v in bad_values {
                let e = bad(&|s| set(s, v));
                assert!(e.starts_with(field), "{v}: {e}");
            }
        }
        assert!(bad(&|s| s.net.gossip_rank = Some(0)).starts_with("net.gossip_rank"));
        let gossip = |s: &mut RunSpec| s.net.partial = Some(PartialSpec::Gossip);
        assert!(
            bad(&|s| {
                gossip(s);
                s.net.relay = true;
            })
            .starts_with("net.partial")
        );
        // A gossip peer may rejoin (its public copy is sent whole, `Message::Copy`).
        let mut s = RunSpec::default();
        gossip(&mut s);
        s.fault.rejoin = true;
        s.validate().unwrap();
        // The tree mode: its own topology of fan-out Q, and what it cannot serve yet.
        let tree = |s: &mut RunSpec| {
            s.net.partial = Some(PartialSpec::Tree);
            s.peers = 8;
            s.topology.out_degree = Some(2);
        };
        for (f, why) in [
            (
                &(|s: &mut RunSpec| s.net.relay = true) as &dyn Fn(&mut RunSpec),
                "no --relay",
            ),
            (&|s| s.topology.out_degree = None, "--out-degree Q"),
            (
                &|s| s.topology.method = TopologyMethod::Ring,
                "no --topology",
            ),
            (&|s| s.fault.rejoin = true, "no rejoin"),
            (&|s| s.net.tree_rank = Some(0), "a rank of at least 1"),
        ] {
            let e = bad(&|s| {
                tree(s);
                f(s);
            });
            assert!(e.starts_with("net.") && e.contains(why), "{why}: {e}");
        }
        let e = bad(&|s| s.net.tree_rank = Some(4));
        assert!(e.contains("--partial tree"), "{e}");
        let mut s = RunSpec::default();
        tree(&mut s);
        s.net.tree_rank = Some(4);
        s.validate().unwrap();
        // A loss is repaired: the tree trains on without the peer if asked to.
        s.fault.on_peer_loss = Some(PeerLossSpec::Continue);
        s.validate().unwrap();
        RunSpec::default().validate().unwrap();
        let mut s = RunSpec::default();
        takeover(&mut s);
        s.validate().unwrap();
    }

    #[test]
    fn consistency_and_straggler_parse_like_the_command_line() {
        for s in ["bsp", "ssp:3", "async", "throttle:2"] {
            assert_eq!(s.parse::<ConsistencySpec>().unwrap().to_string(), s);
        }
        assert_eq!(
            "THROTTLED:2".parse::<ConsistencySpec>().unwrap(),
            ConsistencySpec::Throttle { min_ready: 2 }
        );
        assert!("ssp".parse::<ConsistencySpec>().is_err());
        assert_eq!(
            ConsistencySpec::Ssp { staleness: 2 }.to_core().to_string(),
            "ssp:2"
        );
        assert_eq!(
            "rotate:7".parse::<StragglerSpec>().unwrap(),
            StragglerSpec::Rotating { delay_ms: 7 }
        );
        assert_eq!(
            "3:20".parse::<StragglerSpec>().unwrap(),
            StragglerSpec::Peer {
                peer: 3,
                delay_ms: 20
            }
        );
        assert!("x:20".parse::<StragglerSpec>().is_err());
        for s in ["controlled:2:100", "production"] {
            assert_eq!(s.parse::<StragglerSpec>().unwrap().to_string(), s);
        }
        for bad in [
            "controlled:2",
            "controlled:x:5",
            "controlled:1:100001",
            "controlled:1:1.5",
        ] {
            let e = bad.parse::<StragglerSpec>().unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
        assert!("3".parse::<StragglerSpec>().is_err());
    }
}
