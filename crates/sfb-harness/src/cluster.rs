//! The cluster builder: P engines (or an FMS server and P clients) from one description,
//! with the per-peer seed scheme in one place.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ndarray::Array2;
use sfb_core::fms::{Client, Server};
use sfb_core::metrics::{ClockRecord, RunInfo, Summary, TopologyInfo};
use sfb_core::wire::Dtype;
use sfb_core::{
    Config, Consistency, Engine, Evaluator, Model, PeerId, Role, Shard, ShardSource, shard_indices,
};
use sfb_models::stream::{Local, Streamed};
use sfb_models::{Example, ModelSpec, Preprocess, Problem};
use sfb_topology::{Method, Topology};

use crate::checkpoint::{Meta, Store};
use crate::records::RecordSink;
use crate::spec::{RunSpec, StragglerSpec, TopologyMethod};
use crate::summary::{NodeOutcome, summarize};
use crate::{Error, Result};
use sfb_net::driver::Keep;

/// A progress callback: `(node index, clocks completed)`; node `P` is the FMS server.
pub type Progress = Arc<dyn Fn(usize, u64) + Send + Sync>;

/// What a model factory ([`Builder::model`]) learns about the peer it builds for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Peer {
    /// The peer.
    pub id: PeerId,
    /// Peers in the cluster.
    pub peers: usize,
    /// The peer's own seed ([`peer_seed`]): its shard's sampler uses it; use it for any
    /// sampling the model does itself.
    pub seed: u64,
}

/// Peer `id`'s seed in a run seeded with `seed`: it seeds the peer's mini-batch sampler
/// and any sampling its model does. The one place this scheme lives.
pub fn peer_seed(seed: u64, id: u32) -> u64 {
    seed.wrapping_mul(1_000_003).wrapping_add(u64::from(id))
}

/// Peer `id`'s shard of `samples` out of `peers` (sample `i` goes to peer `i mod peers`),
/// with its sampler seeded by [`peer_seed`]: what a built cluster's peer trains on.
pub fn shard<S: Clone>(samples: &[S], peers: usize, id: u32, seed: u64) -> Shard<S> {
    let mine = shard_indices(samples.len(), peers, id as usize)
        .map(|i| samples[i].clone())
        .collect();
    Shard::new(mine, peer_seed(seed, id))
}

/// Entry point of the builder: `Cluster::builder()` or [`Cluster::from_spec`].
#[derive(Debug, Clone, Copy)]
pub struct Cluster;

impl Cluster {
    /// A builder with the defaults of [`RunSpec::default`]: 4 peers, full broadcast, BSP,
    /// 100 clocks, K = 16, lr 0.5, seed 1, evaluation every 10 clocks, no straggler, a
    /// 30 s in-memory timeout. Choose the model next ([`Builder::model`] or
    /// [`Builder::spec`]).
    pub fn builder() -> Builder<NoModel> {
        let mut s = Settings::default();
        // In memory, a builder's run returns every record unless told otherwise.
        s.spec.output.keep_records = true;
        Builder { s, kind: NoModel }
    }

    /// The builder of `spec`'s cluster, its data loaded ([`crate::DataSource::load`]).
    ///
    /// # Errors
    /// [`RunSpec::validate`]'s errors, then the data's.
    pub fn from_spec(spec: &RunSpec) -> Result<Builder<Builtin>> {
        spec.validate()?;
        if let Some(name) = &spec.custom_model {
            return Err(Error::UnknownModel {
                name: name.clone(),
                known: "the built-in models mlr, l2mlr, dml and sc only".into(),
            });
        }
        let t = &spec.train;
        let scale = t.scale_for(&spec.model);
        let b = Cluster::builder().spec(spec.model_spec());
        let intercept = t.intercept_for(&spec.model);
        let b = match spec.data.stream(&spec.model, t.seed, scale, intercept)? {
            Some(streamed) => {
                let samples = usize::try_from(streamed.train_samples()).unwrap_or(usize::MAX);
                if t.batch > samples {
                    let e = sfb_models::Error::BatchTooLarge {
                        batch: t.batch,
                        samples,
                    };
                    return Err(e.into());
                }
                b.streamed(streamed)
            }
            None => {
                let limits = sfb_models::Limits::from_env()?;
                let (problem, prep) = spec.data.load(&spec.model, t.seed)?.prepare(
                    scale,
                    t.intercept_for(&spec.model),
                    &limits,
                )?;
                problem.check_batch(t.batch)?;
                b.data(problem).preprocess(prep)
            }
        };
        let mut b = b.with_spec(spec);
        b.s.data_in_spec = true;
        Ok(b)
    }
}

impl<K> Builder<K> {
    /// Every setting of `spec` but its model and data: the peers, topology, training
    /// options (the optimizer as [`crate::TrainOptions::optimizer_for`] its model),
    /// network, fault and output options, and the run agreement
    /// ([`RunSpec::agreement`]). [`Cluster::from_spec`] is the built-in model and data of
    /// `spec` with these; a program's registered model is its own builder with these
    /// (`sfb_cli::App::model`), so the command line's settings win over the builder's.
    /// The spec is not validated here ([`RunSpec::validate`]).
    #[must_use]
    pub fn with_spec(mut self, spec: &RunSpec) -> Self {
        let data_in_spec = self.s.data_in_spec;
        self.s = Settings {
            spec: spec.clone(),
            progress: self.s.progress.take(),
            sink: self.s.sink.take(),
            data_in_spec,
            ..Settings::default()
        };
        self
    }

    /// This builder's settings as a spec: what [`with_spec`](Self::with_spec) of it
    /// would set again. A barrier or an optimizer's settings of the program's own (see
    /// [`consistency`](Self::consistency), [`optimizer`](Self::optimizer)) are not in it.
    pub fn to_spec(&self) -> &RunSpec {
        &self.s.spec
    }
}

#[derive(Debug)]
struct Resolved {
    out: Vec<Vec<usize>>,
    /// Where the lists came from ([`TopologyInfo::source`]).
    source: String,
    inn: Vec<Vec<usize>>,
    /// The relay trees, built on first use.
    routes: std::sync::OnceLock<std::result::Result<Arc<sfb_core::Routes>, sfb_core::RouteError>>,
    /// The topology's learning figures (the gossip mode's weights come from them),
    /// computed on first use.
    learning: std::sync::OnceLock<
        std::result::Result<(sfb_topology::Topology, sfb_topology::Learning), String>,
    >,
    /// Set once the paper mode's verdict on this topology has been given.
    warned: std::sync::OnceLock<()>,
}

/// Σ of hop distances over ordered pairs of `out`'s graph, by a breadth-first search from
/// every node (for graphs of several out-degrees, such as the tree mode's; unreachable
/// pairs count 0).
fn hop_cost(out: &[Vec<usize>]) -> u64 {
    let mut total = 0u64;
    for s in 0..out.len() {
        let mut dist = vec![u64::MAX; out.len()];
        dist[s] = 0;
        let mut queue = std::collections::VecDeque::from([s]);
        while let Some(a) = queue.pop_front() {
            for &b in &out[a] {
                if b < dist.len() && dist[b] == u64::MAX {
                    dist[b] = dist[a] + 1;
                    total += dist[b];
                    queue.push_back(b);
                }
            }
        }
    }
    total
}

impl Resolved {
    fn new(out: Vec<Vec<usize>>, source: String) -> Self {
        let mut inn = vec![Vec::new(); out.len()];
        for (src, list) in out.iter().enumerate() {
            for &dst in list {
                if let Some(l) = inn.get_mut(dst) {
                    l.push(src);
                }
            }
        }
        Self {
            out,
            source,
            inn,
            routes: std::sync::OnceLock::new(),
            learning: std::sync::OnceLock::new(),
            warned: std::sync::OnceLock::new(),
        }
    }

    /// Its source and hop cost (eq. 3: `P(P − 1)` for full broadcast, else a
    /// breadth-first search from every peer, O(P²Q)).
    fn info(&self) -> TopologyInfo {
        let p = self.out.len() as u64;
        let full = self.out.iter().all(|l| l.len() as u64 + 1 == p);
        let cost = if full {
            p * p.saturating_sub(1)
        } else {
            sfb_topology::Topology::new(self.out.clone())
                .map_or_else(|_| hop_cost(&self.out), |t| t.cost())
        };
        TopologyInfo {
            source: self.source.clone(),
            cost,
            mode: None,
        }
    }

    /// Warns, once per topology, when the paper's partial broadcast will not reach full
    /// broadcast's quality on it ([`sfb_topology::Learning`]).
    fn warn_paper_mode(&self) {
        self.warned.get_or_init(|| {
            let Ok(t) = sfb_topology::Topology::new(self.out.clone()) else {
                return;
            };
            let l = sfb_topology::Learning::of(&t);
            match l.paper_mode {
                sfb_topology::PaperMode::Diverges => tracing::warn!(
                    "--partial paper on this topology diverges: min Re λ(I + A_in) = {:.4} ≤ 0, \
                     so a disagreement mode of the replicas never contracts and the held-out \
                     objective rises the longer the run; use the default --partial gossip, \
                     --relay, or full broadcast",
                    l.paper_min_real_part
                ),
                sfb_topology::PaperMode::Stalls => tracing::warn!(
                    "--partial paper on this topology stalls: min Re λ(I + A_in) = {:.4} > 0 is \
                     stable, but each replica settles near its own shard's minimizer, above \
                     full broadcast's objective; use the default --partial gossip, --relay, or \
                     full broadcast",
                    l.paper_min_real_part
                ),
                _ => {}
            }
        });
    }

    /// Peer `p`'s gossip-mode weights with own weight `alpha` and gain `gain`
    /// (`sfb_topology::Learning`).
    fn gossip_weights(&self, p: usize, alpha: f64, gain: f64) -> Result<Arc<[f32]>> {
        let (t, l) = self
            .learning
            .get_or_init(|| {
                let t = sfb_topology::Topology::new(self.out.clone()).map_err(|e| e.to_string())?;
                let l = sfb_topology::Learning::of(&t);
                Ok((t, l))
            })
            .as_ref()
            .map_err(|why| {
                Error::Gossip(format!(
                    "the consensus mixes along the topology, which must be strongly \
                     connected with one out-degree: {why}"
                ))
            })?;
        Ok(l.gossip_weights(t, p, alpha)
            .iter()
            .map(|&w| (gain * w) as f32)
            .collect())
    }

    /// The relay trees of this topology.
    fn routes(&self) -> Result<Arc<sfb_core::Routes>> {
        self.routes
            .get_or_init(|| {
                let out: Vec<Vec<PeerId>> = self
                    .out
                    .iter()
                    .map(|l| l.iter().map(|&p| PeerId(p as u32)).collect())
                    .collect();
                sfb_core::Routes::new(&out).map(Arc::new)
            })
            .clone()
            .map_err(|e| Error::Relay(e.to_string()))
    }
}

/// The builder's settings: a [`RunSpec`], the builder's serialized form (every setter
/// writes one of its fields, [`Builder::with_spec`] replaces it whole, and
/// [`RunSpec::validate`] checks it before anything is built, for every model), and what no
/// spec can hold: objects of the program's own, and what the run has built so far.
#[derive(Clone, Default)]
struct Settings {
    spec: RunSpec,
    /// A consistency model no spec names (a program's own barrier,
    /// [`Consistency::Custom`]): it replaces `spec.train.consistency`.
    barrier: Option<Consistency>,
    /// An optimizer given whole ([`Builder::optimizer`]). Its method, schedule and warm-up
    /// are written to the spec too; this keeps what the spec has no field for (ε,
    /// momentum, snapshots, λ).
    optimizer: Option<sfb_core::Optimizer>,
    /// Whether `spec.data` is the data (a builder of [`Cluster::from_spec`]); else the
    /// program gave it, and the run agreement does not name it.
    data_in_spec: bool,
    progress: Option<Progress>,
    /// Where records go, if the caller holds it ([`Builder::record_sink`]); else one is
    /// made from `spec.output.metrics` for the run.
    sink: Option<Arc<RecordSink>>,
    /// The topology, once built.
    resolved: Option<Arc<Resolved>>,
    /// The checkpoint store, opened once per backend (the directory checked at start-up).
    store: Option<(&'static str, Arc<Store>)>,
    /// The spec last validated (the check runs once, not once a node).
    checked: Option<RunSpec>,
    /// The partial-broadcast mode chosen for a spec that named none ([`crate::auto`]).
    auto: Option<crate::auto::Choice>,
    /// The optimizer's budgets in work, not time ([`sfb_topology::Options::deterministic`];
    /// the simulator's, whose runs are bitwise reproducible).
    deterministic_topology: bool,
}

/// Which clock a run resumes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// A fresh run.
    No,
    /// The latest clock every node has a checkpoint of (found once, then `At`).
    Latest,
    /// This clock.
    At(u64),
}

/// `s` seconds as a `Duration`, saturating (a spec's seconds are validated to at most a
/// year before a run; this never panics before that).
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

impl Settings {
    /// When a peer may start its next clock: the program's barrier, else the spec's.
    fn consistency(&self) -> Consistency {
        self.barrier
            .clone()
            .unwrap_or_else(|| self.spec.train.consistency.to_core())
    }

    /// In-memory runs: how long a peer may wait without receiving anything.
    fn timeout(&self) -> Duration {
        seconds(self.spec.net.timeout_s)
    }

    /// How long a silent peer has before the others count it lost.
    fn detect(&self) -> Duration {
        seconds(self.spec.net.peer_timeout_s)
    }

    /// The peer-loss policy: the one given, else fail under BSP or with relay (a loss
    /// cuts relay trees) and continue otherwise ([`crate::FaultOptions::peer_loss`], with a
    /// program's barrier counted as not BSP).
    fn peer_loss(&self) -> sfb_core::PeerLoss {
        match self.spec.fault.on_peer_loss {
            Some(p) => p.into(),
            None if self.spec.net.relay
                || self.spec.tree()
                || matches!(self.consistency(), Consistency::Bsp) =>
            {
                sfb_core::PeerLoss::Fail
            }
            None => sfb_core::PeerLoss::Continue,
        }
    }

    /// [`sfb_core::Config::quorum`]: off only for `continue-alone`.
    fn quorum(&self) -> bool {
        self.spec.fault.on_peer_loss != Some(crate::PeerLossSpec::ContinueAlone)
    }

    /// Whether and from which clock the run resumes.
    fn resume(&self) -> Resume {
        let f = &self.spec.fault;
        match (&f.checkpoint_dir, f.resume_at) {
            (None, _) => Resume::No,
            (Some(_), Some(at)) => Resume::At(at),
            (Some(_), None) if f.resume => Resume::Latest,
            (Some(_), None) => Resume::No,
        }
    }

    /// Who is slowed down when: a driver option (the drivers make the delay real, or
    /// virtual), never a change to the model.
    fn stragglers(&self) -> sfb_core::Stragglers {
        let t = &self.spec.train;
        t.straggler.map_or(sfb_core::Stragglers::None, |s| {
            s.schedule(self.spec.peers, t.seed)
        })
    }

    /// A new topology or peer count: what was built from the old one goes.
    fn topology_changed(&mut self) {
        self.resolved = None;
        self.store = None;
    }
}

/// The builder before a model is chosen.
#[derive(Debug, Clone, Copy)]
pub struct NoModel;

/// A user model made by a factory, trained on user samples.
pub struct Custom<M: Model, F> {
    /// In a cell: measuring the default step builds one model outside `parts`.
    factory: std::cell::RefCell<F>,
    data: Option<Samples<M::Sample>>,
    init_w: Option<Array2<f32>>,
    evaluator: Option<EvaluatorFactory>,
    /// The mean ℓ1 norm of the model's `v` factors at the starting W, measured once.
    mean_v_l1: std::sync::OnceLock<Option<f64>>,
}

/// Where a user model's samples come from.
enum Samples<S> {
    /// All of them; the builder shards them ([`shard`]).
    All(Arc<Vec<S>>),
    /// Each peer's own, from a loader ([`Builder::data_per_peer`]).
    PerPeer(Loader<S>),
}

/// What a per-peer data loader may fail with: any error.
pub type LoadError = Box<dyn std::error::Error + Send + Sync>;

/// A per-peer data loader ([`Builder::data_per_peer`]).
type Loader<S> = Box<dyn Fn(&Peer) -> std::result::Result<Vec<S>, LoadError>>;

impl<S: Clone> Samples<S> {
    /// Peer `peer`'s samples: its shard of all of them, or what the loader reads for it.
    fn of(&self, peer: &Peer) -> Result<Vec<S>> {
        match self {
            Samples::All(data) => Ok(shard_indices(data.len(), peer.peers, peer.id.index())
                .map(|i| data[i].clone())
                .collect()),
            Samples::PerPeer(load) => load(peer).map_err(|source| Error::Load {
                peer: peer.id.0,
                source,
            }),
        }
    }
}

/// Samples the default step of a custom model is measured on ([`Custom::mean_v_l1`]).
const STEP_PROBE_SAMPLES: usize = 256;

impl<M: Model, F: FnMut(&Peer) -> M> Custom<M, F> {
    /// The mean ℓ1 norm of the `v` factors a model (built for peer 0) computes at the
    /// starting W on the first [`STEP_PROBE_SAMPLES`] samples (of peer 0's part when the
    /// data is loaded per peer, which every node then loads once): what the adaptive step's
    /// first move scales a score by, as the features' ℓ1 norm is for the built-in models
    /// (`v` is the sample for MLR). The same for every peer; `None` without data or W, or
    /// when the model refuses them (the run then reports its error).
    fn mean_v_l1(&self, peers: usize) -> Option<f64>
    where
        M::Sample: Clone,
    {
        *self.mean_v_l1.get_or_init(|| {
            let (data, w0) = (self.data.as_ref()?, self.init_w.as_ref()?);
            let peer = Peer {
                id: PeerId(0),
                peers,
                seed: 0,
            };
            let probe: Vec<M::Sample> = match data {
                Samples::All(all) => all.iter().take(STEP_PROBE_SAMPLES).cloned().collect(),
                Samples::PerPeer(_) => {
                    let mut mine = data.of(&peer).ok()?;
                    mine.truncate(STEP_PROBE_SAMPLES);
                    mine
                }
            };
            let mut model = self.factory.try_borrow_mut().ok()?(&peer);
            let batch: Vec<&M::Sample> = probe.iter().collect();
            let mut sv = sfb_core::SvList::new(w0.nrows(), w0.ncols());
            // A model that fails or panics here is refused by `Builder::check_factors`.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                model.compute_sv(w0.view(), &batch, &mut sv)
            }))
            .ok()?
            .ok()?;
            let b = sv.to_batch(PeerId(0), 0, 1.0);
            let pairs = b.len();
            let total: f64 = (0..pairs)
                .map(|i| {
                    b.v_row(i)
                        .values()
                        .iter()
                        .map(|x| f64::from(x.abs()))
                        .sum::<f64>()
                })
                .sum();
            (pairs > 0 && total.is_finite()).then(|| total / pairs as f64)
        })
    }
}

type EvaluatorFactory = Box<dyn FnMut(&Peer) -> Box<dyn Evaluator>>;

impl<M: Model, F> fmt::Debug for Custom<M, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Custom")
            .field(
                "samples",
                &self.data.as_ref().map(|d| match d {
                    Samples::All(all) => all.len().to_string(),
                    Samples::PerPeer(_) => "per peer".into(),
                }),
            )
            .field("init_w", &self.init_w.as_ref().map(Array2::dim))
            .field("evaluator", &self.evaluator.is_some())
            .finish_non_exhaustive()
    }
}

/// A built-in model ([`ModelSpec`]) on a [`Problem`], or on streamed data.
#[derive(Debug, Clone)]
pub struct Builtin {
    spec: ModelSpec,
    problem: Option<Problem>,
    /// Streamed data ([`Builder::streamed`]): each peer reads its own part when built.
    streamed: Option<Arc<Streamed>>,
    /// `problem`'s mean ℓ1 norm, computed once (every peer's default step needs it, and
    /// a pass over the training set per peer is O(P·N)).
    mean_l1: std::sync::OnceLock<f64>,
    /// What `problem`'s data went through ([`Builder::preprocess`]).
    prep: Option<Preprocess>,
}

impl Builtin {
    /// What the data went through: the streamed data's, else the one given with
    /// [`Builder::preprocess`].
    pub fn preprocess(&self) -> Option<Preprocess> {
        match &self.streamed {
            Some(s) => Some(s.preprocess().clone()),
            None => self.prep.clone(),
        }
    }

    /// Peer `peer`'s part of the streamed data as a [`Problem`] (its held-out slice as
    /// `test`, no `train`: a streaming peer holds no other peer's samples) and its shard;
    /// for a `probe` (a node that trains on nothing: the FMS server, the memory check) no
    /// samples are read.
    fn streamed_parts(
        &self,
        data: &Streamed,
        peer: &Peer,
        probe: bool,
    ) -> Result<(Problem, Vec<Example>)> {
        if let Some(why) = self.spec.streaming_refusal() {
            return Err(Error::Requires {
                field: "data.stream",
                requires: crate::spec::STREAMED_MODELS,
                why,
            });
        }
        let local = if probe {
            Local::default()
        } else {
            data.shard(peer.peers, peer.id.index())?
        };
        tracing::debug!(
            peer = peer.id.0,
            train = local.train.len(),
            held_out = local.held_out.len(),
            parsed = local.parsed,
            skipped = local.skipped,
            "streamed shard read"
        );
        let problem = Problem {
            train: Arc::new(Vec::new()),
            test: Arc::new(local.held_out),
            classes: data.classes(),
            features: data.preprocess().features(),
            labels: data.preprocess().labels().clone(),
        };
        Ok((problem, local.train))
    }
}

mod kind {
    use super::*;

    /// The parts of one node the model side of a builder provides.
    #[allow(missing_debug_implementations)]
    pub struct Parts<M: Model> {
        /// The model.
        pub model: M,
        /// The starting matrix.
        pub w0: Array2<f32>,
        /// The node's samples, with their sampler.
        pub shard: Shard<M::Sample>,
        /// Its held-out evaluator.
        pub evaluator: Option<Box<dyn Evaluator>>,
    }

    /// What a builder knows about the model ([`NoModel`] has nothing to build).
    pub trait Kind {
        /// The model each peer runs.
        type Model: Model;
        /// Its name in summaries.
        fn name(&self) -> &'static str;
        /// What its data went through ([`sfb_models::Preprocess::describe`]) for the
        /// run's header; empty when not known.
        fn data_description(&self) -> String {
            String::new()
        }
        /// What the data went through, for a saved model ([`Builtin::preprocess`]);
        /// `None` for a user's model.
        fn preprocessing(&self) -> Option<Preprocess> {
            None
        }
        /// The model's own step rule when it has no step size (SDCA), for the header in
        /// place of the optimizer and learning rate.
        fn own_step(&self) -> Option<&'static str> {
            None
        }
        /// Builds `peer`'s model, starting matrix, shard and evaluator; a `probe` is a node
        /// that trains on nothing (the FMS server, the memory check): its shard may be
        /// left empty.
        fn parts(
            &mut self,
            peer: &Peer,
            train: &crate::TrainOptions,
            probe: bool,
        ) -> Result<Parts<Self::Model>>;
        /// The optimizer when none is set: the model's default (for a user's model the
        /// factored adaptive step, as for the built-in SGD models: robust to the data's
        /// scale; plain SGD keeps `W += scale · Σ u vᵀ` exact when asked for).
        fn default_method(&self) -> sfb_core::Method {
            sfb_core::Method::Sgd
        }
        /// The learning rate of `method` when none is set ([`crate::default_lr`]; a
        /// built-in model with its data: [`crate::default_lr_for_data`]).
        fn default_lr(&self, method: sfb_core::Method) -> f32 {
            crate::default_lr(method)
        }
        /// Training samples over all peers, once the data is given (SAGA's `n`).
        fn samples(&self) -> Option<usize> {
            None
        }
        /// The `λ` of `(λ/2)‖W‖²` the model's objective holds, if the optimizer applies it
        /// ([`sfb_core::Optimizer::l2`]).
        fn l2(&self) -> f32 {
            0.0
        }
        /// Where `peer`'s samples come from once peers are lost (their shards taken over),
        /// or why this model cannot take a shard over.
        fn shard_source(
            &mut self,
            peer: &Peer,
        ) -> std::result::Result<ShardSource<<Self::Model as Model>::Sample>, &'static str>;
        /// Whether lost shards are taken over when no policy is set.
        fn takes_over_by_default(&self) -> bool {
            false
        }
        /// Whether this is a user's model, whose factors are checked against its starting
        /// W before anything runs ([`Builder::check_fits`]); the built-in models fit by
        /// construction.
        fn user_model(&self) -> bool {
            false
        }
        /// What the simulator's cost model knows of this model and its data
        /// ([`Builder::run_sim`]), or why it cannot be simulated. A user's model: nothing
        /// (dense factors, and its compute priced as a forward pass of a linear model, or
        /// measured under [`CostModel::Calibrate`](crate::sim::CostModel::Calibrate)).
        fn sim_profile(&self) -> Result<SimProfile> {
            Ok(SimProfile::default())
        }
    }

    /// What [`Kind::sim_profile`] tells the simulator's cost model.
    #[derive(Debug, Clone, Default)]
    pub struct SimProfile {
        /// A built-in model's kind (its counts of work); `None` for a user's model.
        pub model: Option<ModelSpec>,
        /// Non-zeros of a training sample, on average (`None`: all `D`).
        pub nnz: Option<f64>,
        /// Whether the samples are sparse.
        pub sparse: bool,
        /// Held-out samples one evaluation reads.
        pub eval_samples: usize,
    }
}
use kind::{Kind, Parts, SimProfile};

/// What a builder's topology needs of its model, if it has one: W's shape, for the
/// partial-broadcast mode chosen when none is named ([`Builder::resolved_partial`]).
pub trait Probe {
    /// W's shape for `peer` (a probe: its data, no training), or `None` without a model.
    ///
    /// # Errors
    /// The model's errors building it.
    fn w_dims(
        &mut self,
        peer: &Peer,
        train: &crate::TrainOptions,
    ) -> Result<Option<(usize, usize)>>;
    /// Whether the run's optimizer is SAGA (the tree cannot serve it): `given`, else the
    /// model's default.
    fn saga(&self, given: Option<sfb_core::Method>) -> bool;
}

impl Probe for NoModel {
    fn w_dims(&mut self, _: &Peer, _: &crate::TrainOptions) -> Result<Option<(usize, usize)>> {
        Ok(None)
    }
    fn saga(&self, given: Option<sfb_core::Method>) -> bool {
        given == Some(sfb_core::Method::Saga)
    }
}

impl<K: Kind> Probe for K {
    fn w_dims(
        &mut self,
        peer: &Peer,
        train: &crate::TrainOptions,
    ) -> Result<Option<(usize, usize)>> {
        Ok(Some(self.parts(peer, train, true)?.w0.dim()))
    }
    fn saga(&self, given: Option<sfb_core::Method>) -> bool {
        given.unwrap_or_else(|| self.default_method()) == sfb_core::Method::Saga
    }
}

/// What a [`Builder`] knows about the model once it has one ([`Custom`] or [`Builtin`]):
/// name `Builder<impl ModelSource<Model = M>>` to pass a configured builder around.
pub trait ModelSource: Kind {}

impl<T: Kind> ModelSource for T {}

/// Peer `peer`'s samples of `data` for a set of lost peers ([`sfb_core::takeover_indices`]).
fn takeover_source<S: Clone + Send + Sync + 'static>(
    data: Arc<Vec<S>>,
    peer: &Peer,
) -> ShardSource<S> {
    let (peers, me) = (peer.peers, peer.id.index());
    Arc::new(move |lost: &BTreeSet<PeerId>| {
        let lost: BTreeSet<usize> = lost.iter().map(|p| p.index()).collect();
        sfb_core::takeover_indices(data.len(), peers, me, &lost)
            .into_iter()
            .map(|i| data[i].clone())
            .collect()
    })
}

fn empty_shard(peer: &Peer, samples: usize) -> Error {
    Error::EmptyShard {
        peer: peer.id.0,
        samples,
        peers: peer.peers,
    }
}

impl<M: Model, F: FnMut(&Peer) -> M> Kind for Custom<M, F>
where
    M::Sample: Clone + 'static,
{
    type Model = M;
    fn name(&self) -> &'static str {
        "custom"
    }
    fn default_method(&self) -> sfb_core::Method {
        sfb_core::Method::Factored
    }
    fn default_lr(&self, method: sfb_core::Method) -> f32 {
        let peers = 1; // the probe's peer count does not change its factors
        match self.mean_v_l1(peers) {
            Some(l1) => crate::spec::default_lr_for_factors(method, l1),
            None => crate::default_lr(method),
        }
    }
    fn samples(&self) -> Option<usize> {
        match self.data.as_ref()? {
            Samples::All(all) => Some(all.len()),
            Samples::PerPeer(_) => None,
        }
    }
    fn shard_source(
        &mut self,
        peer: &Peer,
    ) -> std::result::Result<ShardSource<M::Sample>, &'static str> {
        match self.data.as_ref().ok_or("no training data was given")? {
            Samples::All(all) => Ok(takeover_source(Arc::clone(all), peer)),
            Samples::PerPeer(_) => Err(
                "its data is loaded per peer (Builder::data_per_peer): a lost peer's part is not \
                 on the survivors' machines",
            ),
        }
    }
    fn user_model(&self) -> bool {
        true
    }
    fn parts(&mut self, peer: &Peer, train: &crate::TrainOptions, probe: bool) -> Result<Parts<M>> {
        let data = self.data.as_ref().ok_or(Error::MissingData)?;
        let mine = match data {
            // A node that trains on nothing (the FMS server) loads nothing.
            Samples::PerPeer(_) if probe => Vec::new(),
            _ => data.of(peer)?,
        };
        if mine.is_empty() && !(probe && matches!(data, Samples::PerPeer(_))) {
            return Err(empty_shard(peer, self.samples().unwrap_or(0)));
        }
        let shard = Shard::new(mine, peer_seed(train.seed, peer.id.0));
        Ok(Parts {
            w0: self.init_w.clone().ok_or(Error::MissingInitialW)?,
            model: (self.factory.get_mut())(peer),
            shard,
            evaluator: self.evaluator.as_mut().map(|f| f(peer)),
        })
    }
}

impl Kind for Builtin {
    type Model = sfb_models::AnyModel;
    fn name(&self) -> &'static str {
        self.spec.name()
    }
    fn data_description(&self) -> String {
        self.preprocess().map(|p| p.describe()).unwrap_or_default()
    }
    fn preprocessing(&self) -> Option<Preprocess> {
        self.preprocess()
    }
    fn own_step(&self) -> Option<&'static str> {
        crate::spec::own_step(&self.spec)
    }
    fn default_method(&self) -> sfb_core::Method {
        crate::spec::method_for(&self.spec)
    }
    fn default_lr(&self, method: sfb_core::Method) -> f32 {
        match (&self.problem, &self.streamed) {
            (Some(p), _) => {
                let l1 = *self.mean_l1.get_or_init(|| p.mean_l1());
                crate::default_lr_for_data(method, &self.spec, l1)
            }
            (None, Some(s)) => crate::default_lr_for_data(method, &self.spec, s.mean_l1()),
            (None, None) => crate::default_lr(method),
        }
    }
    fn samples(&self) -> Option<usize> {
        match (&self.problem, &self.streamed) {
            (Some(p), _) => Some(p.train.len()),
            (None, Some(s)) => Some(usize::try_from(s.train_samples()).unwrap_or(usize::MAX)),
            (None, None) => None,
        }
    }
    fn sim_profile(&self) -> Result<SimProfile> {
        let Some(problem) = &self.problem else {
            return Err(Error::NotSimulated {
                field: "data.stream",
                why: "every simulated peer lives in this one process",
            });
        };
        let train = &problem.train;
        Ok(SimProfile {
            model: Some(self.spec.clone()),
            nnz: (!train.is_empty())
                .then(|| train.iter().map(|e| e.x.nnz() as f64).sum::<f64>() / train.len() as f64),
            sparse: train
                .first()
                .is_some_and(|e| matches!(e.x, sfb_models::Features::Sparse { .. })),
            eval_samples: problem.test.len(),
        })
    }
    fn shard_source(
        &mut self,
        peer: &Peer,
    ) -> std::result::Result<ShardSource<sfb_models::Example>, &'static str> {
        if let Some(why) = self.spec.takeover_refusal() {
            return Err(why);
        }
        if self.streamed.is_some() {
            return Err(crate::spec::STREAMED_TAKEOVER);
        }
        let problem = self.problem.as_ref().ok_or("no training data was given")?;
        Ok(takeover_source(Arc::clone(&problem.train), peer))
    }
    fn takes_over_by_default(&self) -> bool {
        self.spec.takeover_refusal().is_none() && self.streamed.is_none()
    }
    fn l2(&self) -> f32 {
        match self.spec {
            ModelSpec::MlrPrimal { lambda, .. } => lambda as f32,
            _ => 0.0,
        }
    }
    fn parts(
        &mut self,
        peer: &Peer,
        train: &crate::TrainOptions,
        probe: bool,
    ) -> Result<Parts<Self::Model>> {
        if let Some(data) = self.streamed.clone() {
            let (problem, mine) = self.streamed_parts(&data, peer, probe)?;
            if mine.is_empty() && !probe {
                let samples = usize::try_from(data.train_samples()).unwrap_or(usize::MAX);
                return Err(empty_shard(peer, samples));
            }
            let model = self.spec.build(&problem, &mine, peer.peers, peer.seed)?;
            return Ok(Parts {
                model,
                w0: self.spec.init_w(&problem, train.init_std, train.seed),
                shard: Shard::new(mine, peer.seed),
                // A peer with no held-out slice reports no objective (the summary's mean
                // is over the peers that evaluated).
                evaluator: (!probe && !problem.test.is_empty())
                    .then(|| self.spec.evaluator(&problem, train.seed)),
            });
        }
        let problem = self.problem.as_ref().ok_or(Error::MissingData)?;
        let mine = sfb_models::data::shard(&problem.train, peer.peers, peer.id.index());
        if mine.is_empty() {
            return Err(empty_shard(peer, problem.train.len()));
        }
        let model = self.spec.build(problem, &mine, peer.peers, peer.seed)?;
        Ok(Parts {
            model,
            w0: self.spec.init_w(problem, train.init_std, train.seed),
            shard: Shard::new(mine, peer.seed),
            evaluator: Some(self.spec.evaluator(problem, train.seed)),
        })
    }
}

/// Builds a cluster: settings first, then the model ([`model`](Self::model) for your own,
/// [`spec`](Self::spec) for a built-in one) and its data, then run it in memory
/// ([`run_mem`](Self::run_mem), [`run_fms_mem`](Self::run_fms_mem)) or build the nodes
/// for another driver ([`build_engines`](Self::build_engines),
/// [`build_peer`](Self::build_peer), [`build_fms`](Self::build_fms), …).
///
/// Every peer gets the same initial W (from the run's seed), shard `id mod P` of the data
/// with its sampler seeded by [`peer_seed`], and its own evaluator; the same settings give
/// bitwise the same run as `sfb run`.
pub struct Builder<K> {
    s: Settings,
    kind: K,
}

impl<K: fmt::Debug> fmt::Debug for Builder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("peers", &self.s.spec.peers)
            .field("topology", &self.s.spec.topology)
            .field("consistency", &self.s.consistency())
            .field("clocks", &self.s.spec.train.clocks)
            .field("batch", &self.s.spec.train.batch)
            .field("lr", &self.s.spec.train.lr)
            .field("seed", &self.s.spec.train.seed)
            .field("model", &self.kind)
            .finish_non_exhaustive()
    }
}

impl<K> Builder<K> {
    /// Peers `P` (FMS: clients). Default 4.
    pub fn peers(mut self, peers: usize) -> Self {
        if peers != self.s.spec.peers {
            self.s.topology_changed();
        }
        self.s.spec.peers = peers;
        self
    }

    /// Peer `i` sends to `topology`'s out-neighbours of `i`. Default: full broadcast.
    pub fn topology(self, topology: &Topology) -> Self {
        self.out_lists(topology.out_lists())
    }

    /// Peer `i` sends to `out[i]` (in-neighbours derived). Default: full broadcast.
    pub fn out_lists(mut self, out: Vec<Vec<usize>>) -> Self {
        let t = &mut self.s.spec.topology;
        (t.explicit, t.file, t.out_degree) = (Some(out), None, None);
        self.s.topology_changed();
        self
    }

    /// Peer `i` sends to the out-neighbours of `i` in the topology file `path`, in any
    /// format `sfb topology` writes (TOML, JSON, DOT; [`Topology::read_file`]), read when
    /// the run is built: a file that cannot be read or validated, or whose peer count is
    /// not the run's, is refused then ([`Error::TopologyFile`]). The summary names the
    /// file.
    pub fn topology_file(mut self, path: impl AsRef<std::path::Path>) -> Self {
        let t = &mut self.s.spec.topology;
        (t.explicit, t.file, t.out_degree) = (None, Some(path.as_ref().to_path_buf()), None);
        self.s.topology_changed();
        self
    }

    /// Partial broadcast: each peer sends to `q` others, in the optimizer's best topology
    /// (within 5 s; see [`topology_time_limit`](Self::topology_time_limit)). `P − 1` is
    /// full broadcast.
    pub fn out_degree(mut self, q: usize) -> Self {
        let d = crate::TopologyOptions::default();
        self.s.spec.topology = crate::TopologyOptions {
            out_degree: Some(q),
            ..d
        };
        self.s.topology_changed();
        self
    }

    /// How the [`out_degree`](Self::out_degree) topology is built.
    pub fn topology_method(mut self, method: TopologyMethod) -> Self {
        self.s.spec.topology.method = method;
        self.s.topology_changed();
        self
    }

    /// Time the topology optimizer may spend.
    pub fn topology_time_limit(mut self, limit: Duration) -> Self {
        self.s.spec.topology.time_limit_s = limit.as_secs_f64();
        self
    }

    /// When a peer may start its next clock. Default BSP.
    pub fn consistency(mut self, consistency: Consistency) -> Self {
        self.s.barrier = None;
        self.s.spec.train.consistency = match consistency {
            Consistency::Bsp => crate::ConsistencySpec::Bsp,
            Consistency::Ssp { staleness } => crate::ConsistencySpec::Ssp { staleness },
            Consistency::Async => crate::ConsistencySpec::Async,
            other => {
                self.s.barrier = Some(other);
                crate::ConsistencySpec::default()
            }
        };
        self
    }

    /// Clocks per peer. Default 100.
    pub fn clocks(mut self, clocks: u64) -> Self {
        self.s.spec.train.clocks = clocks;
        self
    }

    /// Mini-batch size `K` per peer and clock. Default 16.
    pub fn batch(mut self, batch: usize) -> Self {
        self.s.spec.train.batch = batch;
        self
    }

    /// Learning rate: SGD's multiplier of the gradient, the adaptive methods' step per
    /// coordinate. Default: [`crate::default_lr`] of the optimizer (0.5 for SGD).
    pub fn lr(mut self, lr: f32) -> Self {
        self.s.spec.train.lr = Some(lr);
        self
    }

    /// How updates become steps (method, schedule; [`sfb_core::optim`]). Default: plain
    /// SGD for your own model ([`model`](Self::model)); for a built-in one
    /// ([`spec`](Self::spec)) the same default as `sfb run` ([`crate::default_method`]).
    pub fn optimizer(mut self, optimizer: sfb_core::Optimizer) -> Self {
        let t = &mut self.s.spec.train;
        t.optimizer = Some(crate::MethodSpec(optimizer.method));
        t.lr_schedule = crate::ScheduleSpec(optimizer.schedule);
        t.warmup = Some(optimizer.warmup);
        self.s.optimizer = Some(optimizer);
        self
    }

    /// The run's seed (initial W, evaluators, peers' seeds by [`peer_seed`]). Default 1.
    pub fn seed(mut self, seed: u64) -> Self {
        self.s.spec.train.seed = seed;
        self
    }

    /// Stop rules ([`sfb_core::stop`]): the run ends, at the same clock on every node,
    /// once a node's evaluation meets any of them (checked every
    /// [`eval_every`](Self::eval_every) clocks; a peer needs an evaluator). The
    /// [`clocks`](Self::clocks) stay the limit. Default none.
    pub fn until(mut self, rules: Vec<sfb_core::stop::Rule>) -> Self {
        self.s.spec.train.until = rules;
        self
    }

    /// Evaluate every this many clocks (0: only at the end). Default 10.
    pub fn eval_every(mut self, every: u64) -> Self {
        self.s.spec.train.eval_every = every;
        self
    }

    /// Slow a peer (or a rotating one) down. Default: nobody.
    pub fn straggler(mut self, straggler: StragglerSpec) -> Self {
        self.s.spec.train.straggler = Some(straggler);
        self
    }

    /// Factor precision of SFB peers (sent and applied). Default f32.
    pub fn wire(mut self, dtype: Dtype) -> Self {
        self.s.spec.net.wire = dtype;
        self
    }

    /// Flow control of `async` and custom barriers ([`Config::max_drift`]). Default
    /// [`sfb_core::DEFAULT_MAX_DRIFT`].
    pub fn max_drift(mut self, clocks: u64) -> Self {
        self.s.spec.train.max_drift = clocks;
        self
    }

    /// In-memory runs: keep every node's per-clock records in the result (`true`, the
    /// default: O(clocks) memory) or only each node's final one (`false`; use
    /// [`metrics_file`](Self::metrics_file) or [`progress`](Self::progress) to see them
    /// all as they happen).
    pub fn keep_records(mut self, all: bool) -> Self {
        self.s.spec.output.keep_records = all;
        self
    }

    /// In-memory and simulated runs: append every node's per-clock records to `path`
    /// (JSON lines) as they happen. Default: none. A write that fails stops the run at
    /// once, every node at one clock, and its summary says why (`failed`).
    pub fn metrics_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.s.spec.output.metrics = Some(path.into());
        self
    }

    /// In-memory and simulated runs: hand every record to `sink` (which decides the
    /// metrics file, instead of [`metrics_file`](Self::metrics_file)), so that the caller
    /// still has each node's last record when the run fails ([`RecordSink::last`]).
    pub fn record_sink(mut self, sink: Arc<RecordSink>) -> Self {
        self.s.sink = Some(sink);
        self
    }

    /// The run's record sink: the caller's, or a new one on the metrics file.
    fn sink(&self) -> Result<Arc<RecordSink>> {
        match &self.s.sink {
            Some(s) => Ok(Arc::clone(s)),
            None => Ok(Arc::new(RecordSink::create(
                self.s.spec.output.metrics.as_deref(),
            )?)),
        }
    }

    /// How far past the furthest node a stop on a failed write is set: the consistency
    /// model's spread (or the flow control's), plus 2.
    fn stop_margin(&self) -> u64 {
        self.s
            .consistency()
            .staleness_bound()
            .unwrap_or(self.s.spec.train.max_drift)
            .saturating_add(2)
    }

    /// Every node writes its state to `dir` every `every` clocks (those clocks are
    /// barriers: see [`sfb_core::checkpoint`]), keeping its newest `keep` files; see
    /// [`checkpoint`](crate::checkpoint) for the files.
    pub fn checkpoints(mut self, dir: impl Into<PathBuf>, every: u64, keep: usize) -> Self {
        self.s.spec.fault = crate::FaultOptions {
            checkpoint_dir: Some(dir.into()),
            checkpoint_every: every,
            checkpoint_keep: keep,
            resume: false,
            resume_at: None,
            ..self.s.spec.fault.clone()
        };
        self.s.store = None;
        self
    }

    /// Every node resumes from its checkpoint of clock `at`, or (`None`) of the latest
    /// clock at which every node of the run has one. Needs
    /// [`checkpoints`](Self::checkpoints) (without, nothing is resumed).
    pub fn resume(mut self, at: Option<u64>) -> Self {
        let f = &mut self.s.spec.fault;
        if f.checkpoint_dir.is_some() {
            (f.resume, f.resume_at) = (true, at);
        }
        self
    }

    /// What a peer does when a neighbour is lost ([`crate::PeerLossSpec`]: fail, continue
    /// while a majority of the run's peers is reachable, or continue even alone). Default:
    /// fail under BSP or with relay, continue otherwise.
    pub fn on_peer_loss(mut self, policy: crate::PeerLossSpec) -> Self {
        self.s.spec.fault.on_peer_loss = Some(policy);
        self
    }

    /// What becomes of a lost peer's shard ([`crate::FaultOptions::lost_shards`]).
    /// Default: takeover for a built-in model whose state does not belong to its samples,
    /// drop for the others and for a model of your own (its `compute_sv_indexed` may keep
    /// per-sample state; opt in when it does not).
    pub fn lost_shards(mut self, policy: crate::LostShardsSpec) -> Self {
        self.s.spec.fault.lost_shards = Some(policy);
        self
    }

    /// Low-rank re-compression of each peer's batches to at most `rank` pairs, with error
    /// feedback ([`sfb_core::compress`]). Default: none.
    pub fn compress(mut self, rank: usize) -> Self {
        self.s.spec.net.compress = Some(crate::CompressSpec { rank: rank.max(1) });
        self
    }

    /// Compute each clock's mini-batch in `parts` parts and send each as soon as it is
    /// computed ([`sfb_core::Config::send_parts`]; the model must be separable). Default:
    /// 1.
    pub fn send_parts(mut self, parts: usize) -> Self {
        self.s.spec.net.send_parts = parts;
        self
    }

    /// Prioritization under a send budget: each peer sends at most `spec`'s budget of
    /// pairs per clock, in its policy's order, and carries the rest over
    /// ([`sfb_core::prioritize`]; the random order is seeded by the run's seed). Default:
    /// none.
    pub fn prioritize(mut self, spec: crate::PrioritizeSpec) -> Self {
        self.s.spec.net.prioritize = Some(spec);
        self
    }

    /// Partial broadcast's mode ([`crate::PartialSpec`]): gossip (the default, also when
    /// not called, unless relay) or the paper's literal mode.
    pub fn partial(mut self, mode: crate::PartialSpec) -> Self {
        self.s.spec.net.partial = Some(mode);
        self
    }

    /// The tree mode's pairs per message, up and down (`--tree-rank`; default the batch
    /// size; [`sfb_core::tree`]).
    pub fn tree_rank(mut self, rank: usize) -> Self {
        self.s.spec.net.tree_rank = Some(rank);
        self
    }

    /// The gossip mode's pairs per consensus message (default `max(1, ⌊3K/16⌋)`, fewer where
    /// that would send more than full broadcast) and step (default
    /// [`sfb_core::gossip::Config::default_step`]; `None` keeps it).
    pub fn gossip(mut self, rank: usize, step: Option<f32>) -> Self {
        self.s.spec.net.gossip_rank = Some(rank.max(1));
        self.s.spec.net.gossip_step = step;
        self
    }

    /// Relay for partial broadcast: every peer forwards other peers' batches along their
    /// shortest-path trees ([`sfb_core::relay`]), so every replica applies every update.
    /// A peer loss then fails the run (the default policy becomes fail). Default: off.
    pub fn relay(mut self, on: bool) -> Self {
        self.s.spec.net.relay = on;
        self
    }

    /// With [`relay`](Self::relay): forwarders re-compress the batches they forward to at
    /// most `rank` pairs (no error feedback). Default: none.
    pub fn relay_compress(mut self, rank: usize) -> Self {
        self.s.spec.net.relay_compress = Some(crate::CompressSpec { rank: rank.max(1) });
        self
    }

    /// Aggregated apply: each peer applies at most `rank` pairs per clock whenever
    /// re-compressing the pairs it applies is cheaper ([`sfb_core::aggregate`]). Default:
    /// none.
    pub fn aggregate(mut self, rank: usize) -> Self {
        self.s.spec.net.aggregate = Some(crate::CompressSpec { rank: rank.max(1) });
        self
    }

    /// In-memory runs: how long a peer may wait without receiving anything. Default 30 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.s.spec.net.timeout_s = timeout.as_secs_f64();
        self
    }

    /// In-memory runs: called after every clock of every node.
    pub fn progress(mut self, progress: Progress) -> Self {
        self.s.progress = Some(progress);
        self
    }
}

impl Builder<NoModel> {
    /// Every peer runs the model `factory` makes for it; give the samples with
    /// [`data`](Builder::data) and the starting matrix with [`init_w`](Builder::init_w).
    pub fn model<M: Model, F: FnMut(&Peer) -> M>(self, factory: F) -> Builder<Custom<M, F>> {
        Builder {
            s: self.s,
            kind: Custom {
                factory: std::cell::RefCell::new(factory),
                data: None,
                init_w: None,
                evaluator: None,
                mean_v_l1: std::sync::OnceLock::new(),
            },
        }
    }

    /// Every peer runs the built-in model `spec` (with its initial W and evaluator); give
    /// the data with [`data`](Builder::data).
    pub fn spec(mut self, spec: ModelSpec) -> Builder<Builtin> {
        if let Some(model) = crate::ModelChoice::of(&spec) {
            self.s.spec.model = model;
        }
        Builder {
            s: self.s,
            kind: Builtin {
                spec,
                problem: None,
                streamed: None,
                mean_l1: std::sync::OnceLock::new(),
                prep: None,
            },
        }
    }
}

impl<M: Model, F> Builder<Custom<M, F>> {
    /// All training samples; peer `i` trains on samples `i`, `i + P`, `i + 2P`, ….
    pub fn data(mut self, samples: impl Into<Arc<Vec<M::Sample>>>) -> Self {
        self.kind.data = Some(Samples::All(samples.into()));
        self
    }

    /// Each peer's own samples, from `load(peer)`, called when the peer is built: on
    /// several machines (hand-run nodes, [`run_node`](Self::run_node)) each reads only its
    /// own part. Keep [`data`](Self::data)'s rule (sample `t` to peer `t mod P`) and the
    /// run is bitwise the one `data` gives; `sfb_models::stream::Streamed::shard` reads a
    /// LIBSVM or CSV file's part that way. Every node also loads peer 0's part once, when
    /// no step size is set, to measure the default one (as `data` does on the first
    /// samples). A lost peer's part is not taken over (`--lost-shards drop`). An `Err`
    /// fails the peer's build, naming the peer.
    pub fn data_per_peer(
        mut self,
        load: impl Fn(&Peer) -> std::result::Result<Vec<M::Sample>, LoadError> + 'static,
    ) -> Self {
        self.kind.data = Some(Samples::PerPeer(Box::new(load)));
        self
    }

    /// The starting matrix (`J × D`), the same on every peer.
    pub fn init_w(mut self, w0: Array2<f32>) -> Self {
        self.kind.init_w = Some(w0);
        self
    }

    /// Each peer's held-out evaluator. Default: none (records carry no objective).
    pub fn evaluator(mut self, factory: impl FnMut(&Peer) -> Box<dyn Evaluator> + 'static) -> Self {
        self.kind.evaluator = Some(Box::new(factory));
        self
    }
}

impl Builder<Builtin> {
    /// The problem every peer knows (training set, held-out set, shape).
    pub fn data(mut self, problem: Problem) -> Self {
        self.kind.problem = Some(problem);
        self.kind.streamed = None;
        self.kind.mean_l1 = std::sync::OnceLock::new();
        self.kind.prep = None;
        self
    }

    /// What [`data`](Self::data)'s problem went through ([`Problem::prepare`]): shown in
    /// the run's header and kept with a saved model ([`sfb_models::saved`]).
    pub fn preprocess(mut self, prep: Preprocess) -> Self {
        self.kind.prep = Some(prep);
        self
    }

    /// Streamed data ([`crate::DataSource::stream`]) instead of a [`Problem`]: each peer
    /// reads only its own shard and held-out slice from the file when it is built, and
    /// evaluates on its slice. Only for models that do not need the whole training set
    /// ([`ModelSpec::streaming_refusal`]); lost shards are not taken over.
    pub fn streamed(mut self, data: Streamed) -> Self {
        self.kind.streamed = Some(Arc::new(data));
        self.kind.problem = None;
        self
    }

    /// Standard deviation of the initial MLR entries. Default 0.
    pub fn init_std(mut self, std: f32) -> Self {
        self.s.spec.train.init_std = std;
        self
    }

    /// Replaces the built-in model (keeping the data and the other settings): a variant
    /// a [`RunSpec`](crate::RunSpec) does not name, e.g. [`ModelSpec::MlrPrimal`] without
    /// SAGA (SGD with weight decay on the L2-MLR primal) after [`Cluster::from_spec`].
    pub fn model_spec(mut self, spec: ModelSpec) -> Self {
        self.kind.spec = spec;
        self
    }
}

impl<K: Kind> Builder<K> {
    /// Runs the cluster on the discrete-event simulator (`sfb sim`): every node a real
    /// engine (or FMS server and clients for `fms`), joined by the NIC model of `sim`
    /// (`bandwidth` is the egress default) and priced by its cost model
    /// ([`crate::sim`]). The summary's times are simulated seconds and it carries the
    /// `sim` block.
    ///
    /// Any model runs here, a user's too: the cost model prices its `compute_sv` as a
    /// linear model's forward pass (`2·J·D` flops a sample), or, under
    /// [`CostModel::Calibrate`](crate::sim::CostModel::Calibrate), as measured on this
    /// machine with peer 0's model and data; `sim.compute_per_sample_s` and
    /// `sim.evaluate_s` replace either.
    ///
    /// # Errors
    /// Build errors, streamed data ([`Error::NotSimulated`]), then the simulator's
    /// ([`Error::Sim`]).
    pub fn run_sim(
        mut self,
        sim: &crate::sim::SimOptions,
        bandwidth: Option<sfb_net::bandwidth::Rate>,
        fms: Option<crate::Push>,
    ) -> Result<Outcome> {
        use sfb_net::virtual_time::{Config, FmsNode, Network};
        let profile = self.kind.sim_profile()?;
        let t0 = std::time::Instant::now();
        if sim.timing_only && fms.is_some() {
            return Err(Error::Requires {
                field: "sim.timing_only",
                requires: "backend sfb",
                why: "FMS frames are dense J × D matrices, which need their values",
            });
        }
        let mut sim = sim.clone();
        if profile.model.is_none() {
            self.measure_custom(&mut sim)?;
        }
        self.s.spec.sim = sim.clone();
        self.s.spec.transport = crate::Transport::Sim;
        self.s.spec.net.bandwidth = bandwidth;
        if let Some(push) = fms {
            self.fms(push);
        }
        let sim = &sim;
        // A bitwise-reproducible run needs a topology that does not depend on how fast
        // the optimizer ran.
        self.s.deterministic_topology = true;
        let nic = sim.nic(bandwidth, self.s.spec.net.wire);
        let (seed, stragglers) = (self.s.spec.train.seed, self.s.stragglers());
        let cfg = |costs| Config {
            seed,
            latency: sim.latency(),
            nic,
            costs,
            stragglers,
            hosts: sim
                .colocate
                .map(|(nodes, cores)| sfb_net::virtual_time::Hosts::colocated(nodes, cores)),
            max_events: u64::MAX,
            keep_records: true,
            ..Config::default()
        };
        let sparse_v = profile.sparse && matches!(profile.model, Some(ModelSpec::Mlr));
        let counted = profile.model.clone().unwrap_or(ModelSpec::Mlr);
        let shapes = |j, d: usize| crate::sim::Shapes {
            j,
            d,
            nnz: profile.nnz.unwrap_or(d as f64),
            sparse_v,
            eval_samples: profile.eval_samples,
        };
        let mut observer = SimObserver {
            sink: self.sink()?,
            progress: self.s.progress.clone(),
            server_at: self.s.spec.peers,
        };
        let batch = self.s.spec.train.batch;
        let (summary, records, report, w): (Summary, Vec<ClockRecord>, _, _) = match fms {
            None => {
                let engines = self.build_engines()?;
                let (j, d) = engines.first().map_or((0, 0), |e| e.replica().dim());
                let (costs, report) =
                    crate::sim::plan_costs(sim, &counted, shapes(j, d), batch, nic);
                let out_degree = engines
                    .first()
                    .map_or(0, |e| e.config().out_neighbors.len());
                let info = self.info("sfb", out_degree);
                let crashes = crate::sim::crashes_of(
                    sim,
                    self.s.spec.peers,
                    self.s.spec.train.clocks,
                    self.s.spec.train.seed,
                );
                let mut net = Network::with_config(engines, cfg(costs));
                let mut faults: Vec<String> = Vec::new();
                let (cuts, pauses) = (&sim.partitions, &sim.pauses);
                if !(crashes.is_empty() && cuts.is_empty() && pauses.is_empty()) {
                    let out = self.resolve_topology()?;
                    let tree = self.s.spec.tree_fanout().filter(|_| self.s.spec.tree());
                    let relay = self.s.spec.net.relay;
                    net = net
                        .detect_after(self.s.detect())
                        .repair(Box::new(move |k, lost| {
                            repair_fn(out.clone(), k, tree, relay)?(lost)
                        }));
                }
                for &(p, c) in &crashes {
                    net = net.crash_after_clock(PeerId(p as u32), c);
                    faults.push(format!("crash: p{p} after clock {c}"));
                }
                let after = sim
                    .restart_after_s
                    .unwrap_or(2.0 * self.s.spec.net.peer_timeout_s);
                for p in crate::sim::restarts_of(sim, &crashes, self.s.spec.train.seed) {
                    let fresh = self.build_peer(p as u32)?.rejoining();
                    net = net.restart(PeerId(p as u32), seconds(after), fresh);
                    faults.push(format!("restart: p{p} {after} s after its crash"));
                }
                let ids = |w: &crate::sim::Window| -> Vec<PeerId> {
                    w.peers.iter().map(|&p| PeerId(p as u32)).collect()
                };
                // The minority of a cut pauses and rejoins when it heals, within the heal
                // timeout, as a libp2p peer does (where the mode can rejoin).
                let mut rejoin_spec = self.s.spec.clone();
                rejoin_spec.fault.rejoin = true;
                let heal = self.s.spec.fault.heal_timeout_s;
                let heals = heal > 0.0 && rejoin_spec.validate().is_ok();
                let p = self.s.spec.peers;
                let mut pausing = std::collections::BTreeSet::new();
                for w in cuts {
                    let (from, until) = w.span();
                    net = net.partition(ids(w), from, until);
                    faults.push(format!("partition: {w} s"));
                    // An even split leaves no majority to take anyone back.
                    if heals && 2 * w.peers.len() != p {
                        let minority: Vec<usize> = if 2 * w.peers.len() < p {
                            w.peers.clone()
                        } else {
                            (0..p).filter(|i| !w.peers.contains(i)).collect()
                        };
                        pausing.extend(minority);
                    }
                }
                for i in pausing {
                    let fresh = self.build_peer(i as u32)?.rejoining();
                    net = net.rejoin_when_healed(PeerId(i as u32), seconds(heal), fresh);
                }
                for w in pauses {
                    let (from, until) = w.span();
                    for id in ids(w) {
                        net = net.pause(id, from, until);
                    }
                    faults.push(format!("pause: {w} s"));
                }
                for w in &sim.slow {
                    let (from, until) = w.window().span();
                    for id in ids(&w.window()) {
                        net = net.slow(id, from, until, w.factor);
                    }
                    faults.push(format!("slow links: {} s, {}x", w.window(), w.factor));
                }
                if !faults.is_empty() {
                    tracing::info!("simulated faults: {}", faults.join("; "));
                }
                let run = net.run_with(&mut observer).map_err(Error::Sim)?;
                // A node that stopped cut off (the minority of a cut, or one that never
                // reached anyone), while others trained on to the end, is out of the run as
                // a crashed one is: neither is in the summary's figures, and the survivors'
                // lost_peers name both. When no node finished (an even split, or a policy
                // to fail), the run failed.
                let finished = run.nodes.iter().any(|n| !n.crashed && n.failed.is_none());
                let out_of_run = |n: &sfb_net::virtual_time::NodeRun<_>| {
                    n.crashed
                        || (finished && n.cut_off.is_some())
                        || (n.restarted_at.is_some() && n.rejoined.is_none())
                };
                for n in &run.nodes {
                    let id = sfb_core::StateMachine::id(&n.node);
                    let paused = n.paused_cut_off.map(|at| {
                        format!(
                            "{id} paused, cut off as the minority, at {:.6} s; ",
                            at.as_secs_f64()
                        )
                    });
                    let (prefix, back) = match &paused {
                        Some(p) => (p.as_str(), "when the cut healed"),
                        None => ("", "after its crash"),
                    };
                    let who = if paused.is_some() {
                        String::new()
                    } else {
                        format!("{id} ")
                    };
                    if let Some(r) = &n.rejoined {
                        faults.push(format!(
                            "{prefix}{who}rejoined at clock {} from {} {back}{}",
                            r.clock,
                            r.from,
                            if r.equal {
                                ""
                            } else {
                                " (W differs from the state sent)"
                            }
                        ));
                    } else if n.restarted_at.is_some() {
                        faults.push(format!(
                            "{prefix}{who}came back {back} and was not taken back (the run had \
                             ended)"
                        ));
                    }
                }
                for n in run.nodes.iter().filter(|_| finished) {
                    use sfb_net::virtual_time::CutOff;
                    let how = match n.cut_off {
                        Some(CutOff::Minority) => "as the minority of a cut",
                        Some(CutOff::Isolated) => "having never reached any peer",
                        None => continue,
                    };
                    faults.push(format!(
                        "{} stopped {how} at clock {}",
                        sfb_core::StateMachine::id(&n.node),
                        n.node.clock()
                    ));
                }
                let nodes: Vec<_> = run
                    .nodes
                    .iter()
                    .filter(|n| !out_of_run(n))
                    .map(|n| NodeOutcome::from_engine(&n.node, &n.records))
                    .collect();
                let mut summary = summarize(info, &nodes, None);
                if let Some((n, why)) = run
                    .nodes
                    .iter()
                    .filter(|n| !out_of_run(n))
                    .find_map(|n| Some((n, n.failed.as_ref()?)))
                {
                    summary.failed = Some(format!(
                        "{} stopped: {why}",
                        sfb_core::StateMachine::id(&n.node)
                    ));
                }
                let w = nodes.first().map(|n| n.w.to_owned());
                // The run's time: when the last node in its figures finished (a node out of
                // them may have given up later, as a paused one whose cut healed after the
                // end).
                let end = run
                    .nodes
                    .iter()
                    .filter(|n| !out_of_run(n))
                    .map(|n| n.finished_at)
                    .max()
                    .unwrap_or(run.end);
                let mut report = sim_report(report, end, run.stats.events);
                report.faults = faults;
                let records = run.nodes.into_iter().flat_map(|n| n.records).collect();
                (summary, records, report, w)
            }
            Some(push) => {
                let (server, clients) = self.build_fms(push)?;
                let (j, d) = server.replica().dim();
                let (costs, report) =
                    crate::sim::plan_costs(sim, &counted, shapes(j, d), batch, nic);
                let info = self.info("fms", 1);
                let run = Network::with_config(FmsNode::cluster(server, clients), cfg(costs))
                    .run_with(&mut observer)
                    .map_err(Error::Sim)?;
                let nodes: Vec<_> = run
                    .nodes
                    .iter()
                    .filter_map(|n| n.node.as_client().map(|c| (c, &n.records)))
                    .map(|(c, r)| NodeOutcome::from_client(c, r))
                    .collect();
                let server = run.nodes.iter().find_map(|n| n.node.as_server());
                let summary = summarize(info, &nodes, server.map(|s| s.metrics()));
                let w = nodes.first().map(|n| n.w.to_owned());
                let report = sim_report(report, run.end, run.stats.events);
                // Clients' records in peer order, then the server's.
                let (srv, cli): (Vec<_>, Vec<_>) = run
                    .nodes
                    .into_iter()
                    .partition(|n| n.node.as_server().is_some());
                let records = cli.into_iter().chain(srv).flat_map(|n| n.records).collect();
                (summary, records, report, w)
            }
        };
        let mut summary = summary;
        if let Err(e) = observer.sink.finish() {
            stopped_early(&mut summary, &records, e.to_string());
        }
        tracing::info!(
            "simulated {:.3} s in {:.2} s ({} events)",
            report.simulated_s,
            t0.elapsed().as_secs_f64(),
            report.events
        );
        summary.sim = Some(report);
        Ok(Outcome {
            summary,
            records,
            w,
        })
    }
}

impl<K: Kind> Builder<K> {
    /// Runs peer `id` of the SFB cluster file `cluster` over libp2p, in this process, until
    /// its clocks are done: the node a program runs on each machine of a cluster, for any
    /// model, a user's too (what `sfb peer --cluster FILE --id I` does for the built-in
    /// ones). The peers and the topology are the file's (`peers` and `out_degree` set on
    /// this builder are replaced); everything else is this builder's. Every node of the
    /// run must be built alike: each stream's handshake compares W's shape, the batch, the
    /// clocks, the wire encoding and the builder's training settings
    /// ([`agreement`](Self::agreement)), and refuses a node that differs.
    ///
    /// Returns this node's outcome: its own figures, checksum and W, as `sfb peer`'s
    /// summary. A peer silent for the builder's peer timeout is lost (60 s; a spec's
    /// `net.peer_timeout_s`); the other network options are `sfb peer`'s defaults (no
    /// bandwidth budget). FMS cluster files, checkpoints and rejoining take a program
    /// built on `sfb_cli::App` (its `peer` and `server` commands) or `sfb peer`.
    ///
    /// # Errors
    /// [`Error::Net`] for an unreadable or invalid cluster file or a failed run;
    /// [`Error::Requires`] for an FMS cluster file or an `id` that is not a peer of it;
    /// build errors as [`run_mem`](Self::run_mem).
    pub fn run_node(mut self, cluster: &std::path::Path, id: usize) -> Result<Outcome>
    where
        K::Model: Send + 'static,
    {
        use sfb_net::p2p::{Node, Options, RunShape};
        let file = sfb_net::cluster::Cluster::load(cluster)?;
        if file.server().is_some() {
            return Err(Error::Requires {
                field: "cluster",
                requires: "an SFB cluster file",
                why: "the nodes of an FMS cluster run as `sfb peer` and `sfb server`",
            });
        }
        let p = file.peers();
        if id >= p {
            return Err(Error::Requires {
                field: "id",
                requires: "a peer of the cluster file",
                why: "ids run from 0 to the file's number of peers − 1",
            });
        }
        let out: Vec<Vec<usize>> = (0..p).map(|i| file.out(i).to_vec()).collect();
        self = self.peers(p).out_lists(out.clone());
        self.s.spec.transport = crate::Transport::Libp2p;
        let sink = self.sink()?;
        self.check_fits_as(1, id as u32)?;
        let engine = self.build_peer(id as u32)?;
        let (j, d) = engine.replica().dim();
        let shape = RunShape {
            j,
            d,
            batch: self.s.spec.train.batch,
            clocks: self.s.spec.train.clocks,
            full_w: false,
            dtype: self.s.spec.net.wire,
            agreement: self.agreement(),
        };
        let to_sink = Arc::clone(&sink);
        let opts = Options {
            keep: sfb_net::driver::Keep::Last,
            progress: Some(Arc::new(move |r: &ClockRecord| to_sink.write(r))),
            // After a loss every survivor repairs the file's topology the same way.
            repair: repair_fn(out, id, file.tree_fanout(), self.s.spec.net.relay),
            liveness_timeout: self.s.detect(),
            stragglers: self.s.stragglers(),
            ..Options::default()
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|source| crate::error::LaunchError::Io {
                what: "starting the async runtime".into(),
                source,
            })?;
        let outcome = rt.block_on(async {
            let node = Node::start(&file, id, &shape, &opts).await?;
            node.run(&file, engine, &shape, &opts).await
        })?;
        drop(rt);
        let info = self.info("sfb", file.out(id).len());
        let mut report = NodeOutcome::from_engine(&outcome.node, &outcome.records);
        report.report.metrics.bytes_sent = outcome.stats.total_sent();
        report.report.metrics.bytes_received = outcome.stats.total_received();
        let mut summary = summarize(info, &[report], None);
        if let Err(e) = sink.finish() {
            stopped_early(&mut summary, &outcome.records, e.to_string());
        }
        Ok(Outcome {
            summary,
            records: outcome.records,
            w: Some(outcome.node.replica().w().to_owned()),
        })
    }
}

impl<K: Kind> Builder<K> {
    /// A user's model under [`CostModel::Calibrate`](crate::sim::CostModel::Calibrate):
    /// fills in `sim`'s compute per sample and evaluation time, where not given, from
    /// peer 0's model, starting matrix and mini-batch as measured here (each the best of
    /// 3 timings of at least 50 ms, [`crate::sim::best_rate`]). Under the count model it
    /// leaves `sim` alone: the counts price a linear model's forward pass.
    fn measure_custom(&mut self, sim: &mut crate::sim::SimOptions) -> Result<()> {
        if sim.costs != crate::sim::CostModel::Calibrate
            || (sim.compute_per_sample_s.is_some() && sim.evaluate_s.is_some())
        {
            return Ok(());
        }
        let Parts {
            mut model,
            w0,
            mut shard,
            evaluator,
        } = self.first_parts(0)?;
        let batch = self.s.spec.train.batch.max(1);
        if sim.compute_per_sample_s.is_none() {
            let refs = shard.next_batch(batch);
            let mut sv = sfb_core::SvList::new(w0.nrows(), w0.ncols());
            let mut failed = None;
            let rate = crate::sim::best_rate(refs.len() as f64, || {
                sv.clear();
                if let Err(e) = model.compute_sv(w0.view(), &refs, &mut sv) {
                    failed.get_or_insert(e);
                }
            });
            if let Some(e) = failed {
                return Err(Error::Core(sfb_core::Error::Model {
                    clock: 0,
                    source: e,
                }));
            }
            sim.compute_per_sample_s = Some(1.0 / rate);
        }
        if let (None, Some(mut ev)) = (sim.evaluate_s, evaluator) {
            let rate = crate::sim::best_rate(1.0, || {
                ev.evaluate(w0.view());
            });
            sim.evaluate_s = Some(1.0 / rate);
        }
        tracing::info!(
            "measured the model here: {:.3e} s of compute_sv a sample, {:.3e} s an evaluation",
            sim.compute_per_sample_s.unwrap_or(0.0),
            sim.evaluate_s.unwrap_or(0.0)
        );
        Ok(())
    }
}

/// The run's own figures in the `sim` block.
fn sim_report(
    mut report: sfb_core::metrics::SimReport,
    end: Duration,
    events: u64,
) -> sfb_core::metrics::SimReport {
    report.simulated_s = end.as_secs_f64();
    report.events = events;
    report
}

/// Streams a simulated run's records to its record sink and progress callback, and stops
/// the run when the sink's file cannot be written.
struct SimObserver {
    sink: Arc<RecordSink>,
    progress: Option<Progress>,
    server_at: usize,
}

impl<N> sfb_net::virtual_time::Observer<N> for SimObserver {
    fn stop_requested(&mut self) -> bool {
        self.sink.failed()
    }

    fn on_record(&mut self, r: &ClockRecord) {
        self.sink.write(r);
        if let Some(f) = &self.progress {
            let node = if r.peer == PeerId::SERVER.0 {
                self.server_at
            } else {
                r.peer as usize
            };
            f(node, r.clock);
        }
    }
}

impl<K: Probe> Builder<K> {
    /// Validates this builder's spec ([`RunSpec::validate`]: the checks of `sfb run`, for
    /// every model), once for all its nodes. A registered model's spec names it
    /// (`custom_model`), and what such a model cannot do from the command line is
    /// refused; a model the program built itself may do what it was built for (SAGA with
    /// its own table of per-sample gradients).
    fn check(&mut self) -> Result<()> {
        self.decide_partial()?;
        if self.s.checked.as_ref() != Some(&self.s.spec) {
            self.s.spec.validate()?;
            self.s.checked = Some(self.s.spec.clone());
        }
        Ok(())
    }

    /// The partial-broadcast mode of a run that names none, chosen once ([`crate::auto`]):
    /// under BSP and with nothing asked that it cannot serve, the tree when the gossip
    /// mode's neighbourhoods are small against P or the tree's modelled clock is at most
    /// half of full broadcast's; else the gossip mode (left unnamed). The
    /// spec then names the tree, so every node, the launcher's children included, runs it.
    ///
    /// # Errors
    /// The model's errors building a probe (its data, for W's shape).
    fn decide_partial(&mut self) -> Result<()> {
        let spec = &self.s.spec;
        let p = spec.peers;
        let topo = &spec.topology;
        let f = &spec.fault;
        let n = &spec.net;
        let Some(q) = topo.out_degree.filter(|&q| q > 0 && q + 1 < p) else {
            return Ok(());
        };
        if n.partial.is_some()
            || self.s.auto.is_some()
            || spec.backend != crate::Backend::Sfb
            || topo.file.is_some()
            || topo.explicit.is_some()
            || topo.method != TopologyMethod::Optimal
            || n.relay
            || f.rejoin
            || n.compress.is_some()
            || n.prioritize.is_some()
            || n.aggregate.is_some()
            || !matches!(self.s.consistency(), Consistency::Bsp)
            || self.kind.saga(
                self.s
                    .optimizer
                    .as_ref()
                    .map(|o| o.method)
                    .or(spec.train.optimizer.map(|m| m.0)),
            )
        {
            return Ok(());
        }
        let peer = Peer {
            id: PeerId(0),
            peers: p,
            seed: peer_seed(self.s.spec.train.seed, 0),
        };
        let Some((j, d)) = self.kind.w_dims(&peer, &self.s.spec.train)? else {
            return Ok(());
        };
        let spec = &self.s.spec;
        let batch = spec.train.batch;
        let shapes = crate::auto::Shapes {
            peers: p,
            fanout: q,
            j,
            d,
            batch,
            rank: spec.net.tree_rank.unwrap_or(batch),
        };
        let link = match spec.transport {
            crate::Transport::Sim => {
                let nic = spec.sim.nic(spec.net.bandwidth, spec.net.wire);
                crate::auto::Link {
                    egress: nic.egress,
                    ingress: nic.ingress,
                    latency_s: spec.sim.latency_s,
                    flops: spec.sim.flops,
                }
            }
            crate::Transport::Mem | crate::Transport::Libp2p => crate::auto::Link {
                egress: spec.net.bandwidth.map(|r| r.0),
                ingress: spec.net.bandwidth.map(|r| r.0),
                latency_s: 0.0,
                flops: spec.sim.flops,
            },
        };
        let choice = crate::auto::choose(&shapes, &link);
        if choice.mode == crate::PartialSpec::Tree {
            self.s.spec.net.partial = Some(crate::PartialSpec::Tree);
        }
        self.s.auto = Some(choice);
        Ok(())
    }

    /// The partial-broadcast mode the run takes: the one named, or the one chosen for it
    /// ([`crate::auto`]); `None` outside partial broadcast or for the gossip mode left
    /// unnamed. The launcher passes it on to its nodes.
    ///
    /// # Errors
    /// As [`decide_partial`](Self::decide_partial).
    pub fn resolved_partial(&mut self) -> Result<Option<crate::PartialSpec>> {
        self.decide_partial()?;
        Ok(self.s.spec.net.partial)
    }

    /// The out-neighbour lists of every peer (the topology is built once, on first use).
    ///
    /// # Errors
    /// [`Error::OutDegree`], [`Error::TopologyPeers`], the topology crate's errors.
    pub fn resolve_topology(&mut self) -> Result<Vec<Vec<usize>>> {
        Ok(self.resolved()?.out.clone())
    }

    /// Every peer's out- and in-neighbours, built once in O(P·Q) (plus the optimizer's
    /// time) and kept.
    fn resolved(&mut self) -> Result<Arc<Resolved>> {
        self.decide_partial()?;
        let p = self.s.spec.peers;
        if let Some(r) = &self.s.resolved {
            if r.out.len() == p {
                return Ok(Arc::clone(r));
            }
            return Err(Error::TopologyPeers {
                peers: p,
                got: r.out.len(),
            });
        }
        let topo = &self.s.spec.topology;
        let lists = match (&topo.file, &topo.explicit, topo.out_degree) {
            (Some(path), _, _) => {
                let refuse = |why: String| Error::TopologyFile {
                    path: path.clone(),
                    why,
                };
                let out = Topology::read_file(path)
                    .map_err(|e| refuse(e.to_string()))?
                    .out_lists();
                if out.len() != p {
                    return Err(refuse(format!(
                        "it has {} peers, but the run has {p}",
                        out.len()
                    )));
                }
                (out, format!("file {}", path.display()))
            }
            (None, Some(out), _) if out.len() != p => {
                return Err(Error::TopologyPeers {
                    peers: p,
                    got: out.len(),
                });
            }
            (None, Some(out), _) => (out.clone(), "explicit".to_string()),
            _ if p < 2 => (vec![Vec::new(); p], "full".to_string()),
            (None, None, None) => (sfb_topology::full(p)?.out_lists(), "full".to_string()),
            (None, None, Some(q)) if q == 0 || q >= p => {
                return Err(Error::OutDegree { peers: p, got: q });
            }
            (None, None, Some(q)) if self.s.spec.tree() => (
                sfb_core::tree::Config::new(q, self.s.spec.train.batch).lists(p),
                match &self.s.auto {
                    Some(c) => format!(
                        "tree of fan-out {q}, the default here ({:.1} peers per \
                         neighbourhood; modelled clock {:.2} of full broadcast's)",
                        c.reach,
                        c.ratio()
                    ),
                    None => format!("tree of fan-out {q}"),
                },
            ),
            (None, None, Some(q)) if q == p - 1 => {
                (sfb_topology::full(p)?.out_lists(), "full".to_string())
            }
            (None, None, Some(q)) => {
                let name = format!("{:?}", topo.method).to_lowercase();
                let method = match topo.method {
                    TopologyMethod::Optimal => None,
                    TopologyMethod::Kautz => Some(Method::Kautz),
                    TopologyMethod::Exponential => Some(Method::Exponential),
                    TopologyMethod::Ring => Some(Method::Ring),
                    TopologyMethod::Random => Some(Method::Random {
                        seed: self.s.spec.train.seed,
                    }),
                };
                match method {
                    Some(m) => (sfb_topology::generate(&m, p, q)?.out_lists(), name),
                    None => {
                        let opts = sfb_topology::Options::default()
                            .time_limit(seconds(topo.time_limit_s))
                            .deterministic(self.s.deterministic_topology);
                        (
                            sfb_topology::optimize(p, q, &opts)?.topology.out_lists(),
                            name,
                        )
                    }
                }
            }
        };
        let (lists, source) = lists;
        let r = Arc::new(Resolved::new(lists, source));
        self.s.resolved = Some(Arc::clone(&r));
        Ok(r)
    }
}

impl<K: Kind> Builder<K> {
    /// The preprocessing of this builder's data (a built-in model's:
    /// [`Builtin::preprocess`]; `None` for a user's model).
    pub fn preprocessing(&self) -> Option<Preprocess> {
        self.kind.preprocessing()
    }

    /// The settings every node of this run must share, as the libp2p handshake and the
    /// checkpoints' meta compare them: the spec's ([`RunSpec::agreement`]), with the
    /// optimizer and step size as resolved ([`resolved_optimizer`](Self::resolved_optimizer):
    /// a default taken from the data is compared as the figure it came to, wherever it
    /// was resolved). Data a program gave the builder is named as the program's.
    pub fn agreement(&self) -> Vec<(String, String)> {
        let (optimizer, lr) = self.resolved_optimizer();
        let (optimizer, lr) = match self.kind.own_step() {
            Some(own) => (own.to_string(), "none".to_string()),
            None => (optimizer.to_string(), format!("{lr:?}")),
        };
        let mut a = self.s.spec.agreement();
        for (name, value) in &mut a {
            match name.as_str() {
                "model" if self.kind.user_model() && self.s.spec.custom_model.is_none() => {
                    *value = format!("{} of the program's", self.kind.name());
                }
                "data" if !self.s.data_in_spec => *value = "the program's".into(),
                "consistency" if self.s.barrier.is_some() => {
                    *value = format!("{} {}", self.s.consistency(), self.s.spec.train.max_drift);
                }
                _ => {}
            }
        }
        for (name, value) in &mut a {
            match name.as_str() {
                "optimizer" => value.clone_from(&optimizer),
                "lr" => value.clone_from(&lr),
                _ => {}
            }
        }
        a
    }

    /// The optimizer and learning rate every node will use: the ones set, else the
    /// defaults (for a built-in model with its data, [`crate::default_method`] and
    /// [`crate::default_lr_for_data`]; for your own model, the factored adaptive step at
    /// a size measured on its factors).
    pub fn resolved_optimizer(&self) -> (sfb_core::Optimizer, f32) {
        let mut optimizer = self.s.optimizer.clone().unwrap_or_else(|| {
            let t = &self.s.spec.train;
            let method = t
                .optimizer
                .map_or_else(|| self.kind.default_method(), |m| m.0);
            let mut o = sfb_core::Optimizer::new(method).with_schedule(t.lr_schedule.0);
            o.warmup = t
                .warmup
                .unwrap_or_else(|| crate::spec::default_warmup(method, t.clocks));
            o
        });
        if optimizer.method == sfb_core::Method::Saga && optimizer.saga_samples == 0 {
            // SAGA's table mean is over every peer's samples: the whole training set.
            optimizer.saga_samples = self.kind.samples().unwrap_or(0);
        }
        if matches!(
            optimizer.method,
            sfb_core::Method::Saga | sfb_core::Method::Sgd
        ) && optimizer.l2 == 0.0
        {
            // The model's own λ (L2-MLR on W): what its evaluator's objective holds.
            optimizer.l2 = self.kind.l2();
        }
        let lr = self
            .s
            .spec
            .train
            .lr
            .unwrap_or_else(|| self.kind.default_lr(optimizer.method));
        (optimizer, lr)
    }

    /// Whether this run's SFB peers use the gossip mode ([`sfb_core::gossip`]): partial
    /// broadcast, and `--partial gossip` or no mode named, and no relay.
    pub fn gossips(&self) -> bool {
        self.partial_lists()
            && !self.s.spec.net.relay
            && match self.s.spec.net.partial {
                Some(crate::PartialSpec::Gossip) => true,
                Some(crate::PartialSpec::Paper | crate::PartialSpec::Tree) => false,
                None => true,
            }
    }

    /// How batches travel ([`TopologyInfo::mode`]): `full`, `tree`, `relay`, `gossip` or
    /// `paper` (the mode named, or chosen: call after the choice, `resolved_partial`).
    fn mode_name(&self) -> &'static str {
        mode_name(
            self.s.spec.tree(),
            !self.partial_lists(),
            self.s.spec.net.relay,
            self.s.spec.net.partial,
        )
    }

    /// Whether some peer sends to fewer than all the others.
    fn partial_lists(&self) -> bool {
        let p = self.s.spec.peers;
        let topo = &self.s.spec.topology;
        let partial_lists = |out: &[Vec<usize>]| out.iter().any(|l| l.len() + 1 < p);
        match (&self.s.resolved, &topo.file, &topo.explicit) {
            (Some(r), _, _) => partial_lists(&r.out),
            // Not built yet: read again (a file that cannot be read fails the build).
            (None, Some(path), _) => {
                Topology::read_file(path).is_ok_and(|t| partial_lists(&t.out_lists()))
            }
            (None, None, Some(out)) => partial_lists(out),
            (None, None, None) => topo.out_degree.is_some_and(|q| q + 1 < p),
        }
    }

    /// Peer `id`'s engine with these neighbours; `relay`: with the topology's relay trees
    /// (when the run relays; not for the probes that build a peer without neighbours).
    fn engine(
        &mut self,
        id: u32,
        out: Vec<PeerId>,
        inn: Vec<PeerId>,
        relay: bool,
        probe: bool,
    ) -> Result<Engine<K::Model>> {
        self.check()?;
        let peer = Peer {
            id: PeerId(id),
            peers: self.s.spec.peers,
            seed: peer_seed(self.s.spec.train.seed, id),
        };
        let parts = self.kind.parts(&peer, &self.s.spec.train, probe)?;
        if let Some(samples) = self.kind.samples().filter(|&n| self.s.spec.train.batch > n) {
            let e = sfb_models::Error::BatchTooLarge {
                batch: self.s.spec.train.batch,
                samples,
            };
            return Err(e.into());
        }
        let mut cfg = Config::new(peer.id, peer.peers, out, inn);
        cfg.consistency = self.s.consistency().clone();
        cfg.clocks = self.s.spec.train.clocks;
        cfg.batch_size = self.s.spec.train.batch;
        let (optimizer, lr) = self.resolved_optimizer();
        cfg.lr = lr;
        cfg.eval_every = self.s.spec.train.eval_every;
        cfg.max_drift = self.s.spec.train.max_drift;
        cfg.optimizer = optimizer;
        let f = &self.s.spec.fault;
        cfg.step_bound = f.step_bound;
        cfg.checkpoint_every = if f.checkpoint_dir.is_some() {
            f.checkpoint_every
        } else {
            0
        };
        cfg.compress = self.s.spec.net.compress.map(|c| c.rank);
        cfg.prioritize = self.s.spec.net.prioritize.map(|p| sfb_core::Prioritize {
            policy: p.policy,
            budget: p.budget,
            seed: self.s.spec.train.seed,
        });
        cfg.aggregate = self.s.spec.net.aggregate.map(|c| c.rank);
        cfg.send_parts = self.s.spec.net.send_parts;
        cfg.timing_only = self.s.spec.sim.timing_only;
        if !self.s.spec.train.until.is_empty() {
            // An FMS node's lead is its own (`fms::Config::from_engine`).
            let lead = if relay {
                let slack = self
                    .s
                    .consistency()
                    .staleness_bound()
                    .unwrap_or(self.s.spec.train.max_drift);
                // Every peer reaches every other (else: the routes' error names two that
                // do not): a stop agreed by one reaches all.
                sfb_core::stop::lead(self.resolved()?.routes()?.height(), slack)
            } else {
                1
            };
            cfg.until = Some(sfb_core::stop::Until {
                rules: self.s.spec.train.until.clone(),
                lead,
            });
        }
        if relay && self.s.spec.net.relay {
            cfg.relay = Some(self.resolved()?.routes()?);
            cfg.relay_compress = self.s.spec.net.relay_compress.map(|c| c.rank);
        }
        if let Some(q) = self.s.spec.tree_fanout().filter(|_| relay) {
            let rank = self.s.spec.net.tree_rank.unwrap_or(self.s.spec.train.batch);
            cfg.tree = Some(sfb_core::tree::Config::new(q, rank));
        }
        if relay && !self.s.spec.net.relay && !self.gossips() && !self.s.spec.tree() {
            let r = self.resolved()?;
            if r.out.iter().any(|l| l.len() + 1 < self.s.spec.peers) {
                r.warn_paper_mode();
            }
        }
        if relay && self.gossips() {
            let q = self.resolved()?.out.get(id as usize).map_or(1, Vec::len);
            let alpha = f64::from(
                self.s
                    .spec
                    .net
                    .gossip_own
                    .unwrap_or(sfb_core::gossip::Config::default_own(q)),
            );
            let gain = f64::from(
                self.s
                    .spec
                    .net
                    .gossip_gain
                    .unwrap_or(sfb_core::gossip::Config::default_gain(self.s.spec.peers, q)),
            );
            let mut g = sfb_core::gossip::Config::new(self.resolved()?.gossip_weights(
                id as usize,
                alpha,
                gain,
            )?);
            g.rank =
                self.s
                    .spec
                    .net
                    .gossip_rank
                    .unwrap_or(sfb_core::gossip::Config::default_rank_for(
                        self.s.spec.train.batch,
                        self.s.spec.peers,
                        q,
                    ));
            g.step = self.s.spec.net.gossip_step;
            cfg.gossip = Some(g);
        }
        cfg.on_peer_loss = self.s.peer_loss();
        cfg.quorum = self.s.quorum();
        let takeover = cfg.on_peer_loss == sfb_core::PeerLoss::Continue
            && match self.s.spec.fault.lost_shards {
                Some(p) => p == crate::LostShardsSpec::Takeover,
                None => self.kind.takes_over_by_default(),
            };
        let mut engine = Engine::new(cfg, parts.model, parts.w0, parts.shard)?;
        if takeover {
            let source = self
                .kind
                .shard_source(&peer)
                .map_err(|why| Error::Requires {
                    field: "fault.lost_shards",
                    requires: "a model whose state does not belong to its samples for takeover",
                    why,
                })?;
            engine = engine.with_takeover(source);
        }
        Ok(match parts.evaluator {
            Some(e) => engine.with_evaluator(e),
            None => engine,
        })
    }

    /// Refuses, before any topology or replica is built, `nodes` replicas of this
    /// cluster's W in one process when they would not fit in the memory available (it
    /// builds peer 0 alone to learn W's shape), and a user's model whose factors do not
    /// fit its starting W (its first mini-batch, computed here).
    ///
    /// # Errors
    /// [`Error::Memory`] with both figures; the build errors of peer 0.
    pub fn check_fits(&mut self, nodes: usize) -> Result<()> {
        self.check_fits_as(nodes, 0)
    }

    /// [`check_fits`](Self::check_fits) where this process builds peer `id` (a node of a
    /// cluster file): a user's model is checked on that peer's first mini-batch, so a node
    /// whose data is loaded per peer reads only its own part.
    fn check_fits_as(&mut self, nodes: usize, id: u32) -> Result<()> {
        if self.kind.user_model() {
            self.check_factors(id)?;
        }
        let engine = self.engine(0, Vec::new(), Vec::new(), false, true)?;
        if self.s.spec.sim.timing_only {
            // No replica and no optimizer state: nothing of W's size per node.
            return Ok(());
        }
        let (j, d) = engine.replica().dim();
        let state = engine.config().optimizer.state_bytes(j, d) as u128;
        check_fits(nodes, j, d, state, available_memory())
    }

    /// Peer `id`'s model, starting W, shard and evaluator, as its first clock gets them.
    fn first_parts(&mut self, id: u32) -> Result<Parts<K::Model>> {
        let peer = Peer {
            id: PeerId(id),
            peers: self.s.spec.peers,
            seed: peer_seed(self.s.spec.train.seed, id),
        };
        self.kind.parts(&peer, &self.s.spec.train, false)
    }

    /// Refuses a user's model whose factors do not fit its starting W, before anything
    /// runs: peer `id`'s model computes its first mini-batch at the starting W, as its
    /// first clock would ([`Model::compute_sv_indexed`]). A wrong-shaped factor is the error
    /// the first clock would give; a panic (a shape mismatch in the model's own
    /// arithmetic) becomes an error here instead of taking a peer's thread down.
    fn check_factors(&mut self, id: u32) -> Result<()> {
        let Parts {
            mut model,
            w0,
            mut shard,
            ..
        } = self.first_parts(id)?;
        let failed = |source| Error::Core(sfb_core::Error::Model { clock: 0, source });
        if w0.is_empty() {
            return Err(failed(sfb_core::ModelError::msg(format!(
                "the starting W is {} × {}: it needs at least one row and one column",
                w0.nrows(),
                w0.ncols()
            ))));
        }
        if w0.iter().any(|v| !v.is_finite()) {
            return Err(failed(sfb_core::ModelError::msg(
                "the starting W holds a non-finite value",
            )));
        }
        let batch = shard.next_batch_indexed(self.s.spec.train.batch);
        let mut sv = sfb_core::SvList::new(w0.nrows(), w0.ncols());
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            model.compute_sv_indexed(w0.view(), &batch, &mut sv)
        }));
        match out {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(failed(e)),
            Err(panic) => {
                let why = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("no message");
                Err(failed(sfb_core::ModelError::msg(format!(
                    "compute_sv panicked on its first mini-batch at the starting W ({} × {}): {why}",
                    w0.nrows(),
                    w0.ncols()
                ))))
            }
        }
    }

    /// SFB peer `id`'s engine, its neighbours from the topology (for a driver of your own,
    /// e.g. [`sfb_net::p2p::Node`]).
    ///
    /// # Errors
    /// Topology, data and engine errors ([`Error::EmptyShard`], [`Error::MissingData`], …).
    pub fn build_peer(&mut self, id: u32) -> Result<Engine<K::Model>> {
        let r = self.resolved()?;
        let ids = |v: &[usize]| v.iter().map(|&x| PeerId(x as u32)).collect();
        let (o, i) = match (r.out.get(id as usize), r.inn.get(id as usize)) {
            (Some(o), Some(i)) => (ids(o), ids(i)),
            // Out of range: the engine's configuration check names it.
            _ => (Vec::new(), Vec::new()),
        };
        let mut engine = self
            .engine(id, o, i, true, false)?
            .with_wire(self.s.spec.net.wire);
        if let Some((store, clock)) = self.resume_from("sfb")? {
            let state = store.resume(Role::Peer, PeerId(id), clock)?;
            engine
                .restore(state)
                .map_err(|e| restore_error(&store, Role::Peer, PeerId(id), clock, e))?;
        }
        Ok(engine)
    }

    /// The checkpoint store of this run as `backend` (`sfb` or `fms`), opened (and its
    /// directory checked) on first use; `None` without [`checkpoints`](Self::checkpoints).
    ///
    /// # Errors
    /// [`Error::Output`] for a directory that cannot be written; topology errors.
    pub fn checkpoint_store(&mut self, backend: &'static str) -> Result<Option<Arc<Store>>> {
        // Nothing is written for a run that will be refused.
        self.check()?;
        let f = &self.s.spec.fault;
        let Some(dir) = f.checkpoint_dir.clone() else {
            return Ok(None);
        };
        if let Some((b, store)) = &self.s.store
            && *b == backend
        {
            return Ok(Some(Arc::clone(store)));
        }
        let (keep, resume) = (f.checkpoint_keep, self.s.resume());
        crate::preflight::output_dir("fault.checkpoint_dir", &dir)?;
        let topology = if backend == "sfb" {
            // A resumed run uses the topology the checkpoints were taken with (an optimized
            // topology found under a time limit may differ from run to run).
            let saved = dir.join(crate::checkpoint::TOPOLOGY_FILE);
            let p = self.s.spec.peers;
            let t = &self.s.spec.topology;
            let asked = match (&t.file, &t.explicit, t.out_degree) {
                (None, None, None) => Some(p.saturating_sub(1)),
                (None, None, Some(q)) => Some(q),
                _ => None,
            };
            if resume != Resume::No
                && let Some(q) = asked
                && let Some(out) = crate::checkpoint::read_topology(&saved)?
                && out.len() == p
                && out.iter().all(|l| l.len() == q)
            {
                // The same P and Q as the checkpointed run: its very graph.
                let t = &mut self.s.spec.topology;
                (t.explicit, t.out_degree) = (Some(out), None);
                self.s.resolved = None;
            }
            let out = self.resolved()?.out.clone();
            if resume == Resume::No {
                crate::checkpoint::write_topology(&saved, &out)?;
            }
            crate::checkpoint::topology_fingerprint(&out)
        } else {
            0
        };
        let meta = Meta::new(backend, self.kind.name(), self.s.spec.peers, topology)
            .with_agreement(self.agreement());
        let store = Arc::new(Store::open(&dir, keep, meta)?);
        self.s.store = Some((backend, Arc::clone(&store)));
        Ok(Some(store))
    }

    /// The nodes of this run as `backend`, as checkpoint files name them.
    fn checkpoint_nodes(&self, backend: &str) -> Vec<(Role, PeerId)> {
        let p = self.s.spec.peers as u32;
        if backend == "sfb" {
            (0..p).map(|i| (Role::Peer, PeerId(i))).collect()
        } else {
            (0..p)
                .map(|i| (Role::Client, PeerId(i)))
                .chain(std::iter::once((Role::Server, PeerId::SERVER)))
                .collect()
        }
    }

    /// The clock this run resumes from as `backend` (the latest consistent point, found
    /// once), with its store; `None` for a fresh run.
    ///
    /// # Errors
    /// [`Error::NoCheckpoint`] naming the node without a checkpoint; the store's errors.
    pub fn resume_from(&mut self, backend: &'static str) -> Result<Option<(Arc<Store>, u64)>> {
        let resume = self.s.resume();
        if resume == Resume::No {
            return Ok(None);
        }
        let store = self
            .checkpoint_store(backend)?
            .expect("checkpoints are set");
        let clock = match resume {
            Resume::At(c) => c,
            _ => {
                let c = store.consistent_point(&self.checkpoint_nodes(backend))?;
                tracing::info!(
                    "resuming from clock {c}, the latest clock every node has a checkpoint of \
                     in {}",
                    store.dir().display()
                );
                self.s.spec.fault.resume_at = Some(c);
                c
            }
        };
        Ok(Some((store, clock)))
    }

    /// Every SFB peer's engine, peer `i` at index `i`.
    ///
    /// # Errors
    /// As [`build_peer`](Self::build_peer).
    pub fn build_engines(&mut self) -> Result<Vec<Engine<K::Model>>> {
        // Before the topology is resolved: a resumed run uses the checkpointed one.
        self.checkpoint_store("sfb")?;
        self.check_fits(self.s.spec.peers)?;
        (0..self.s.spec.peers as u32)
            .map(|id| self.build_peer(id))
            .collect()
    }

    /// FMS client `id`: built as SFB peer `id` (same model, shard, sampler, initial W and
    /// evaluator), talking to the server only.
    ///
    /// # Errors
    /// As [`build_peer`](Self::build_peer).
    pub fn build_client(&mut self, id: u32, push: crate::Push) -> Result<Client<K::Model>> {
        self.fms(push);
        let engine = self.engine(id, Vec::new(), Vec::new(), false, false)?;
        let mut client =
            Client::from_engine(engine, push.into())?.with_sync(self.s.spec.fms_sync.into());
        if let Some((store, clock)) = self.resume_from("fms")? {
            let state = store.resume(Role::Client, PeerId(id), clock)?;
            client
                .restore(state)
                .map_err(|e| restore_error(&store, Role::Client, PeerId(id), clock, e))?;
        }
        Ok(client)
    }

    /// The FMS parameter server (it holds peer 0's initial W).
    ///
    /// # Errors
    /// As [`build_peer`](Self::build_peer).
    pub fn build_server(&mut self, push: crate::Push) -> Result<Server<K::Model>> {
        self.fms(push);
        let engine = self.engine(0, Vec::new(), Vec::new(), false, true)?;
        let mut server =
            Server::from_engine(engine, push.into())?.with_sync(self.s.spec.fms_sync.into());
        if let Some((store, clock)) = self.resume_from("fms")? {
            let state = store.resume(Role::Server, PeerId::SERVER, clock)?;
            server
                .restore(state)
                .map_err(|e| restore_error(&store, Role::Server, PeerId::SERVER, clock, e))?;
        }
        Ok(server)
    }

    /// The run is the FMS baseline, its clients pushing `push` (what the spec's checks of
    /// an FMS run read).
    fn fms(&mut self, push: crate::Push) {
        self.s.spec.backend = crate::Backend::Fms;
        self.s.spec.fms_push = push;
    }

    /// The FMS server and every client.
    ///
    /// # Errors
    /// As [`build_peer`](Self::build_peer).
    #[allow(clippy::type_complexity)]
    pub fn build_fms(
        &mut self,
        push: crate::Push,
    ) -> Result<(Server<K::Model>, Vec<Client<K::Model>>)> {
        self.fms(push);
        self.checkpoint_store("fms")?;
        // The clients' replicas and the server's.
        self.check_fits(self.s.spec.peers + 1)?;
        let clients = (0..self.s.spec.peers as u32)
            .map(|id| self.build_client(id, push))
            .collect::<Result<Vec<_>>>()?;
        Ok((self.build_server(push)?, clients))
    }

    pub(crate) fn info(&self, backend: &str, out_degree: usize) -> RunInfo {
        RunInfo {
            backend: backend.into(),
            transport: self.s.spec.transport.name().into(),
            model: self
                .s
                .spec
                .custom_model
                .clone()
                .unwrap_or_else(|| self.kind.name().into()),
            consistency: self.s.consistency().to_string(),
            peers: self.s.spec.peers,
            out_degree,
            clocks: self.s.spec.train.clocks,
            batch: self.s.spec.train.batch,
            optimizer: self
                .kind
                .own_step()
                .map_or_else(|| self.resolved_optimizer().0.to_string(), str::to_string),
            lr: match self.kind.own_step() {
                Some(_) => 0.0,
                None => self.resolved_optimizer().1,
            },
            data: self.kind.data_description(),
            until: self
                .s
                .spec
                .train
                .until
                .iter()
                .map(ToString::to_string)
                .collect(),
            topology: match (&self.s.resolved, backend) {
                (Some(r), "sfb") => Some(TopologyInfo {
                    mode: Some(self.mode_name().into()),
                    ..r.info()
                }),
                _ => None,
            },
        }
    }

    /// The source and hop cost of this run's topology, built if it was not yet
    /// ([`RunInfo::topology`]).
    ///
    /// # Errors
    /// As [`resolve_topology`](Self::resolve_topology).
    pub fn topology_info(&mut self) -> Result<TopologyInfo> {
        let info = self.resolved()?.info();
        Ok(TopologyInfo {
            mode: Some(self.mode_name().into()),
            ..info
        })
    }

    /// The in-memory driver's options, and the record sink they hand every record to
    /// (flushed by the caller, [`RecordSink::finish`]); a failed write stops every node
    /// at one clock.
    fn mem_options(
        &mut self,
        backend: &'static str,
    ) -> Result<(sfb_net::mem::Options, Arc<RecordSink>)> {
        let checkpoint = self.checkpoint_store(backend)?.map(checkpoint_sink);
        let sink = self.sink()?;
        let stop = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
        let margin = self.stop_margin();
        let on_failure = Arc::clone(&stop);
        sink.on_failure(Box::new(move |fastest| {
            let at = fastest.saturating_add(margin);
            tracing::warn!("the metrics cannot be written: every node stops at clock {at}");
            on_failure.store(at, std::sync::atomic::Ordering::Relaxed);
        }));
        let user = self.s.progress.clone();
        let server_at = self.s.spec.peers;
        let to_sink = Arc::clone(&sink);
        let progress: sfb_net::p2p::ProgressFn = Arc::new(move |r: &ClockRecord| {
            to_sink.write(r);
            if let Some(f) = &user {
                let node = if r.peer == PeerId::SERVER.0 {
                    server_at
                } else {
                    r.peer as usize
                };
                f(node, r.clock);
            }
        });
        let opts = sfb_net::mem::Options {
            timeout: self.s.timeout(),
            progress: Some(progress),
            stragglers: self.s.stragglers(),
            keep: if self.s.spec.output.keep_records {
                Keep::All
            } else {
                Keep::Last
            },
            checkpoint,
            stop_at: Some(stop),
            ..Default::default()
        };
        Ok((opts, sink))
    }

    /// Who the drivers slow down when ([`Builder::straggler`]): hand it to the driver of a
    /// node built here (`sfb_net::p2p::Options::stragglers`, the virtual-time network).
    pub fn stragglers(&self) -> sfb_core::Stragglers {
        self.s.stragglers()
    }

    /// Runs the SFB peers to completion over the in-memory transport (a thread per peer).
    ///
    /// # Errors
    /// Build errors, then the first peer's error ([`Error::Net`]).
    pub fn run_mem(mut self) -> Result<MemRun<K::Model>> {
        let t0 = std::time::Instant::now();
        let engines = self.build_engines()?;
        tracing::info!(
            "built {} peers in {:.2} s; starting the first clock",
            engines.len(),
            t0.elapsed().as_secs_f64()
        );
        let out_degree = engines
            .first()
            .map_or(0, |e| e.config().out_neighbors.len());
        let info = self.info("sfb", out_degree);
        let (opts, sink) = self.mem_options("sfb")?;
        let peers = sfb_net::mem::run(engines, &opts)?;
        let failed = sink.finish().err().map(|e| e.to_string());
        Ok(MemRun {
            peers,
            info,
            failed,
        })
    }

    /// Runs an FMS server and P clients to completion over the in-memory transport.
    ///
    /// # Errors
    /// As [`run_mem`](Self::run_mem).
    pub fn run_fms_mem(mut self, push: crate::Push) -> Result<FmsRun<K::Model>> {
        let (server, clients) = self.build_fms(push)?;
        let info = self.info("fms", 1);
        let (opts, sink) = self.mem_options("fms")?;
        let run = sfb_net::mem_fms::run(server, clients, &opts)?;
        let failed = sink.finish().err().map(|e| e.to_string());
        Ok(FmsRun { run, info, failed })
    }
}

/// Refuses, before the replicas are allocated, a cluster of `nodes` J×D f32 replicas in
/// one process that would not fit in `available` bytes (when known).
///
/// # Errors
/// [`Error::Memory`] with both figures.
pub(crate) fn check_fits(
    nodes: usize,
    j: usize,
    d: usize,
    optimizer_bytes: u128,
    available: Option<u64>,
) -> Result<()> {
    let need = (nodes as u128) * ((j as u128) * (d as u128) * 4 + optimizer_bytes);
    match available {
        Some(avail) if need > u128::from(avail) => Err(Error::Memory {
            what: if optimizer_bytes > 0 {
                format!("{nodes} replicas of a {j}×{d} W with their optimizer state")
            } else {
                format!("{nodes} replicas of a {j}×{d} W")
            },
            need: u64::try_from(need).unwrap_or(u64::MAX),
            available: avail,
        }),
        _ => Ok(()),
    }
}

/// The memory available to new allocations (Linux `MemAvailable`), if known.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The driver's checkpoint callback writing to `store` (and logging each file at debug
/// level).
pub fn checkpoint_sink(store: Arc<Store>) -> sfb_net::driver::CheckpointFn {
    Arc::new(move |state: &sfb_core::NodeState, why| {
        let t0 = std::time::Instant::now();
        let bytes = match why {
            sfb_net::driver::Checkpoint::Scheduled => store.save(state)?,
            sfb_net::driver::Checkpoint::Final => store.save_unpruned(state)?,
        };
        tracing::debug!(
            "{} checkpointed clock {} ({bytes} bytes in {:.1} ms)",
            state.id,
            state.clock,
            t0.elapsed().as_secs_f64() * 1e3
        );
        Ok(())
    })
}

/// A node's refusal of its checkpoint, with the file named.
fn restore_error(store: &Store, role: Role, id: PeerId, clock: u64, e: sfb_core::Error) -> Error {
    Error::Checkpoint {
        path: store.path(role, id, clock),
        reason: match e {
            sfb_core::Error::Checkpoint { reason } => reason,
            other => other.to_string(),
        },
    }
}

/// A run that was stopped because its records could not be written (`why`): its summary
/// says so, with the clocks every worker actually completed (from `records`, each worker's
/// last one at least), not the clocks asked for.
fn stopped_early(summary: &mut Summary, records: &[ClockRecord], why: String) {
    let done = records.iter().filter(|r| r.peer != PeerId::SERVER.0).fold(
        std::collections::BTreeMap::new(),
        |mut m, r| {
            let c: &mut u64 = m.entry(r.peer).or_default();
            *c = (*c).max(r.clock);
            m
        },
    );
    if let Some(&least) = done.values().min() {
        summary.clocks = summary.clocks.min(least);
    }
    summary.failed = Some(format!(
        "{why}: the run stopped at clock {}",
        summary.clocks
    ));
}

/// A finished run: its summary and every node's per-clock records.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The run's summary.
    pub summary: Summary,
    /// Every worker's records in peer order, then the FMS server's (peer
    /// [`PeerId::SERVER`]).
    pub records: Vec<ClockRecord>,
    /// The final replica of the first worker that finished (peer 0's unless it was lost;
    /// an FMS client's holds the server's W): what `--save-model` keeps.
    pub w: Option<Array2<f32>>,
}

/// A finished in-memory SFB run.
pub struct MemRun<M: Model> {
    /// Every peer's final engine and records, peer `i` at index `i`.
    pub peers: Vec<sfb_net::mem::PeerRun<M>>,
    /// What the run was.
    pub info: RunInfo,
    /// Why the run was stopped early, if it was: its records could not be written (the
    /// summary's `failed`).
    pub failed: Option<String>,
}

impl<M: Model> fmt::Debug for MemRun<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemRun")
            .field("peers", &self.peers.len())
            .field("info", &self.info)
            .finish()
    }
}

impl<M: Model> MemRun<M> {
    /// The run's summary ([`summarize`]).
    pub fn summary(&self) -> Summary {
        let nodes: Vec<_> = self
            .peers
            .iter()
            .map(|r| NodeOutcome::from_engine(&r.engine, &r.records))
            .collect();
        let mut summary = summarize(self.info.clone(), &nodes, None);
        if let Some(why) = &self.failed {
            let last: Vec<ClockRecord> = self
                .peers
                .iter()
                .filter_map(|r| r.records.last().cloned())
                .collect();
            stopped_early(&mut summary, &last, why.clone());
        }
        summary
    }

    /// The summary and every peer's records.
    pub fn into_outcome(self) -> Outcome {
        let summary = self.summary();
        let w = self
            .peers
            .first()
            .map(|r| r.engine.replica().w().to_owned());
        let records = self.peers.into_iter().flat_map(|r| r.records).collect();
        Outcome {
            summary,
            records,
            w,
        }
    }
}

/// A finished in-memory FMS run.
pub struct FmsRun<M: Model> {
    /// The server and clients, with their records.
    pub run: sfb_net::mem_fms::Run<M, M>,
    /// What the run was.
    pub info: RunInfo,
    /// Why the run was stopped early, if it was (as [`MemRun::failed`]).
    pub failed: Option<String>,
}

impl<M: Model> fmt::Debug for FmsRun<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FmsRun")
            .field("clients", &self.run.clients.len())
            .field("info", &self.info)
            .finish()
    }
}

impl<M: Model> FmsRun<M> {
    /// The run's summary ([`summarize`] with the server's traffic).
    pub fn summary(&self) -> Summary {
        let nodes: Vec<_> = self
            .run
            .clients
            .iter()
            .map(|r| NodeOutcome::from_client(&r.client, &r.records))
            .collect();
        let mut summary = summarize(
            self.info.clone(),
            &nodes,
            Some(self.run.server.server.metrics()),
        );
        if let Some(why) = &self.failed {
            let last: Vec<ClockRecord> = self
                .run
                .clients
                .iter()
                .filter_map(|r| r.records.last().cloned())
                .collect();
            stopped_early(&mut summary, &last, why.clone());
        }
        summary
    }

    /// The summary, every client's records, then the server's.
    pub fn into_outcome(self) -> Outcome {
        let summary = self.summary();
        let w = self.run.clients.first().map(|r| r.client.w().to_owned());
        let records = self
            .run
            .clients
            .into_iter()
            .flat_map(|r| r.records)
            .chain(self.run.server.records)
            .collect();
        Outcome {
            summary,
            records,
            w,
        }
    }
}

/// How batches travel ([`TopologyInfo::mode`]) in a run with a tree, or on a full graph,
/// or with relay, or in the partial-broadcast mode named (`None`: gossip, the default
/// where the tree was not chosen).
pub(crate) fn mode_name(
    tree: bool,
    full: bool,
    relay: bool,
    partial: Option<crate::PartialSpec>,
) -> &'static str {
    match (tree, full, relay, partial) {
        (true, ..) => "tree",
        (_, true, ..) => "full",
        (_, _, true, _) => "relay",
        (.., Some(crate::PartialSpec::Paper)) => "paper",
        _ => "gossip",
    }
}

/// Node `me`'s neighbours in the topology `out` repaired for a set of lost peers
/// ([`sfb_topology::repair`], deterministic: every survivor computes the same graph), with
/// the fingerprint of the repaired graph in the original ids; `None` if `out` is not a
/// valid topology. With `tree` (the tree mode's fan-out): the tree laid out over the
/// survivors ([`sfb_core::tree::Config::repaired`]), as each engine lays it out.
/// With `relay`: `out` without the lost peers (relay adds no arcs;
/// [`sfb_core::Routes::without`]).
pub(crate) fn repair_fn(
    out: Vec<Vec<usize>>,
    me: usize,
    tree: Option<usize>,
    relay: bool,
) -> Option<sfb_net::driver::RepairFn> {
    if let Some(q) = tree {
        let peers = out.len();
        let t = sfb_core::tree::Config::new(q, 1);
        return Some(Arc::new(move |lost: &[sfb_core::PeerId]| {
            t.repaired(peers, lost, sfb_core::PeerId(me as u32))
        }));
    }
    if relay {
        // Relay keeps the topology's arcs between survivors and adds none
        // (`sfb_core::Routes::without`): the engine routes around the lost peers itself.
        return Some(Arc::new(move |lost: &[sfb_core::PeerId]| {
            let gone = |n: &usize| lost.iter().any(|p| p.index() == *n);
            let mut in_old = vec![Vec::new(); out.len()];
            for (n, l) in out.iter().enumerate().filter(|(n, _)| !gone(n)) {
                in_old[n] = l.iter().copied().filter(|m| !gone(m)).collect::<Vec<_>>();
            }
            let my_out = in_old[me].clone();
            let my_in: Vec<usize> = (0..out.len())
                .filter(|n| !gone(n) && in_old[*n].contains(&me))
                .collect();
            let ids = |v: Vec<usize>| v.into_iter().map(|x| sfb_core::PeerId(x as u32)).collect();
            let fingerprint = format!("{:016x}", crate::checkpoint::topology_fingerprint(&in_old));
            Some((ids(my_out), ids(my_in), fingerprint))
        }));
    }
    let topology = sfb_topology::Topology::new(out).ok()?;
    Some(Arc::new(move |lost: &[sfb_core::PeerId]| {
        let failed: Vec<usize> = lost.iter().map(|p| p.index()).collect();
        let r = sfb_topology::repair(&topology, &failed).ok()?;
        let new_me = r.new_id(me)?;
        let old = |v: &[usize]| -> Vec<usize> { v.iter().map(|&n| r.survivors[n]).collect() };
        let lists = r.topology.out_lists();
        let mut in_old = vec![Vec::new(); topology.peers()];
        for (n, l) in lists.iter().enumerate() {
            in_old[r.survivors[n]] = old(l);
        }
        let ids = |v: Vec<usize>| v.into_iter().map(|x| sfb_core::PeerId(x as u32)).collect();
        let my_out = old(&lists[new_me]);
        let my_in: Vec<usize> = (0..lists.len())
            .filter(|&n| lists[n].contains(&new_me))
            .map(|n| r.survivors[n])
            .collect();
        let fingerprint = format!("{:016x}", crate::checkpoint::topology_fingerprint(&in_old));
        Some((ids(my_out), ids(my_in), fingerprint))
    }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn replicas_that_do_not_fit_are_refused_with_both_figures() {
        let e = super::check_fits(2000, 4096, 4096, 0, Some(24 << 30)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("2000 replicas of a 4096×4096 W"), "{text}");
        assert!(text.contains("134.2 GB"), "{text}");
        assert!(text.contains("25.8 GB"), "{text}");
        super::check_fits(4, 4096, 4096, 0, Some(24 << 30)).unwrap();
        super::check_fits(2000, 4096, 4096, 0, None).unwrap();
    }
}
