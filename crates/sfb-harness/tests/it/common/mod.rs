//! Shared helpers for the integration tests: an MLR cluster on seeded synthetic data, built
//! by the harness's cluster builder (which owns the per-peer seed scheme).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use sfb_core::{Consistency, Engine, Shard};
use sfb_harness::{Cluster, StragglerSpec};
use sfb_models::{ClassificationSpec, Example, Mlr, MlrEvaluator, synthetic};

pub struct Problem {
    pub train: Arc<Vec<Example>>,
    pub test: Arc<Vec<Example>>,
    pub j: usize,
    pub d: usize,
}

pub fn problem(spec: &str, seed: u64) -> Problem {
    let spec: ClassificationSpec = spec.parse().unwrap();
    let (train, test) = synthetic::classification(&spec, seed);
    Problem {
        train: Arc::new(train),
        test: Arc::new(test),
        j: spec.classes,
        d: spec.features,
    }
}

/// Peer `id`'s shard, as the builder gives it.
pub fn shard(p: &Problem, peers: usize, id: usize, seed: u64) -> Shard<Example> {
    sfb_harness::shard(&p.train, peers, id as u32, seed)
}

pub struct ClusterSpec {
    pub peers: usize,
    pub clocks: u64,
    pub batch: usize,
    pub lr: f32,
    pub consistency: Consistency,
    pub seed: u64,
    pub straggler: Option<(usize, Duration)>,
}

/// MLR on `p` (initial W entries N(0, 0.01²), evaluated only at the end).
fn builder(
    p: &Problem,
    c: &ClusterSpec,
) -> sfb_harness::Builder<impl sfb_harness::ModelSource<Model = Mlr>> {
    let (j, d) = (p.j, p.d);
    builder_for(p, c, move |_| Mlr::new(j, d))
}

/// [`builder`] with the model `factory` makes.
fn builder_for<M, F>(
    p: &Problem,
    c: &ClusterSpec,
    factory: F,
) -> sfb_harness::Builder<impl sfb_harness::ModelSource<Model = M>>
where
    M: sfb_core::Model<Sample = Example>,
    F: FnMut(&sfb_harness::Peer) -> M,
{
    let (j, d, test) = (p.j, p.d, Arc::clone(&p.test));
    let mut b = Cluster::builder()
        .peers(c.peers)
        .model(factory)
        .init_w(synthetic::init_w(j, d, 0.01, c.seed))
        .evaluator(move |_| Box::new(MlrEvaluator::new(Arc::clone(&test))))
        .data(Arc::clone(&p.train))
        .consistency(c.consistency.clone())
        .clocks(c.clocks)
        .batch(c.batch)
        // Plain SGD: the single-process references compute `W += scale · Σ u vᵀ` (a custom
        // model's default is the adaptive step).
        .optimizer(sfb_core::Optimizer::new(sfb_core::Method::Sgd))
        .lr(c.lr)
        .seed(c.seed)
        .eval_every(0);
    if let Some((peer, delay)) = c.straggler {
        b = b.straggler(StragglerSpec::Peer {
            peer: peer as u32,
            delay_ms: delay.as_millis() as u64,
        });
    }
    b
}

pub fn engines(p: &Problem, c: &ClusterSpec) -> Vec<Engine<Mlr>> {
    builder(p, c).build_engines().unwrap()
}

pub fn opts() -> sfb_net::mem::Options {
    sfb_net::mem::Options {
        timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

/// [`opts`] with `c`'s straggler (a driver option: real delay after its compute).
pub fn opts_for(p: &Problem, c: &ClusterSpec) -> sfb_net::mem::Options {
    sfb_net::mem::Options {
        stragglers: builder(p, c).stragglers(),
        ..opts()
    }
}

/// The FMS counterpart of [`engines`]: a server and one client per peer, built from the
/// same engines (same models, shards, samplers, initial W).
pub fn fms_nodes(
    p: &Problem,
    c: &ClusterSpec,
    push: sfb_core::fms::Push,
) -> (sfb_core::fms::Server<Mlr>, Vec<sfb_core::fms::Client<Mlr>>) {
    let push = match push {
        sfb_core::fms::Push::Dense => sfb_harness::Push::Dense,
        _ => sfb_harness::Push::Factors,
    };
    builder(p, c).build_fms(push).unwrap()
}

/// [`engines`] with optimizer `opt`.
pub fn engines_opt(p: &Problem, c: &ClusterSpec, opt: &sfb_core::Optimizer) -> Vec<Engine<Mlr>> {
    builder(p, c)
        .optimizer(opt.clone())
        .build_engines()
        .unwrap()
}

/// [`fms_nodes`] with optimizer `opt` (the server runs it).
pub fn fms_nodes_opt(
    p: &Problem,
    c: &ClusterSpec,
    push: sfb_harness::Push,
    opt: &sfb_core::Optimizer,
) -> (sfb_core::fms::Server<Mlr>, Vec<sfb_core::fms::Client<Mlr>>) {
    try_fms_nodes_opt(p, c, push, opt).unwrap()
}

/// [`fms_nodes_opt`], or the error of a push the optimizer cannot run with.
#[allow(clippy::type_complexity, clippy::result_large_err)]
pub fn try_fms_nodes_opt(
    p: &Problem,
    c: &ClusterSpec,
    push: sfb_harness::Push,
    opt: &sfb_core::Optimizer,
) -> sfb_harness::Result<(sfb_core::fms::Server<Mlr>, Vec<sfb_core::fms::Client<Mlr>>)> {
    builder(p, c).optimizer(opt.clone()).build_fms(push)
}

/// SAGA on `p` (the same data, initial W, shards and samplers as [`engines`]); the builder
/// sets SAGA's `n` from the data.
fn saga_builder(
    p: &Problem,
    c: &ClusterSpec,
    opt: &sfb_core::Optimizer,
) -> sfb_harness::Builder<impl sfb_harness::ModelSource<Model = sfb_models::Saga>> {
    let (j, d) = (p.j, p.d);
    builder_for(p, c, move |_| sfb_models::Saga::new(j, d)).optimizer(opt.clone())
}

/// [`engines_opt`] for the SAGA model.
pub fn saga_engines(
    p: &Problem,
    c: &ClusterSpec,
    opt: &sfb_core::Optimizer,
) -> Vec<Engine<sfb_models::Saga>> {
    saga_builder(p, c, opt).build_engines().unwrap()
}

/// [`fms_nodes_opt`] for the SAGA model (an error for a push SAGA cannot run with).
#[allow(clippy::type_complexity, clippy::result_large_err)]
pub fn saga_fms(
    p: &Problem,
    c: &ClusterSpec,
    push: sfb_harness::Push,
    opt: &sfb_core::Optimizer,
) -> sfb_harness::Result<(
    sfb_core::fms::Server<sfb_models::Saga>,
    Vec<sfb_core::fms::Client<sfb_models::Saga>>,
)> {
    saga_builder(p, c, opt).build_fms(push)
}
