//! Shared helpers for the integration tests: an MLR cluster on seeded synthetic data.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use sfb::core::{Config, Consistency, Engine, PeerId, Shard, shard_indices};
use sfb::models::{ClassificationSpec, Example, Mlr, MlrEvaluator, Straggler, synthetic};

pub struct Problem {
    pub train: Vec<Example>,
    pub test: Arc<Vec<Example>>,
    pub j: usize,
    pub d: usize,
}

pub fn problem(spec: &str, seed: u64) -> Problem {
    let spec: ClassificationSpec = spec.parse().unwrap();
    let (train, test) = synthetic::classification(&spec, seed);
    Problem {
        train,
        test: Arc::new(test),
        j: spec.classes,
        d: spec.features,
    }
}

pub fn shard(p: &Problem, peers: usize, id: usize, seed: u64) -> Shard<Example> {
    let samples = shard_indices(p.train.len(), peers, id)
        .map(|i| p.train[i].clone())
        .collect();
    Shard::new(
        samples,
        seed.wrapping_mul(1_000_003).wrapping_add(id as u64),
    )
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

pub fn engines(p: &Problem, c: &ClusterSpec) -> Vec<Engine<Straggler<Mlr>>> {
    (0..c.peers)
        .map(|id| {
            let mut cfg = Config::full_broadcast(PeerId(id as u32), c.peers);
            cfg.consistency = c.consistency.clone();
            cfg.clocks = c.clocks;
            cfg.batch_size = c.batch;
            cfg.lr = c.lr;
            cfg.eval_every = 0;
            let delay = match c.straggler {
                Some((s, d)) if s == id => d,
                _ => Duration::ZERO,
            };
            let model = Straggler::new(Mlr::new(p.j, p.d), delay);
            let w0 = synthetic::init_w(p.j, p.d, 0.01, c.seed);
            Engine::new(cfg, model, w0, shard(p, c.peers, id, c.seed))
                .unwrap()
                .with_evaluator(Box::new(MlrEvaluator::new(Arc::clone(&p.test))))
        })
        .collect()
}

pub fn opts() -> sfb::net::mem::Options {
    sfb::net::mem::Options {
        timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

/// The FMS counterpart of [`engines`]: a server and one client per peer, built from the
/// same engines (same models, shards, samplers, initial W).
pub fn fms_nodes(
    p: &Problem,
    c: &ClusterSpec,
    push: sfb::core::fms::Push,
) -> (
    sfb::core::fms::Server<Straggler<Mlr>>,
    Vec<sfb::core::fms::Client<Straggler<Mlr>>>,
) {
    let server = sfb::core::fms::Server::from_engine(engines(p, c).swap_remove(0), push).unwrap();
    let clients = engines(p, c)
        .into_iter()
        .map(|e| sfb::core::fms::Client::from_engine(e, push).unwrap())
        .collect();
    (server, clients)
}
