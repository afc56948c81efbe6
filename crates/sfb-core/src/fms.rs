//! The FMS baseline ("full matrix sync"): a parameter [`Server`] holds W; P [`Client`]s
//! compute updates on the W the server last sent them and push them to the server, which
//! applies them and pushes the full W back to every client. Both are sans-IO state
//! machines driven like the [`Engine`]: `on_message`, `on_tick`,
//! `poll_output`, `poll_event`.
//!
//! # Protocol
//! - Client `p` computes clock `t` once it holds a W that includes every update of clocks
//!   `0..t − s` (`s` = the SSP staleness bound, 0 for BSP): the same `compute_sv`, shard
//!   sampler, scale and validation as an SFB peer. It sends the result to
//!   [`PeerId::SERVER`]: its factors as [`Message::Factors`] ([`Push::Factors`], Project
//!   Adam style, the default) or the dense `ΔW = scale · Σ u vᵀ`, computed with the apply
//!   kernel on a zero matrix, as [`Message::Delta`] ([`Push::Dense`], the paper's FMS).
//!   A client never applies anything itself. Under [`Config::prioritize`] a client's
//!   factor push goes through a [`Prioritizer`](crate::Prioritizer) first (Bösen's
//!   managed communication from clients to the server): at most the budget's pairs, most
//!   important first, the rest carried over.
//! - The server accepts each client's clocks in order. When every client's update of the
//!   next clock `c` is in, it applies them in origin order in **one**
//!   [`Replica::apply`] call (dense: [`Replica::add_dense`]), then the model's `prox`,
//!   and pushes the full W as [`Message::Params`] `{ clock: c + 1 }` to every client at
//!   once ([`Sync::Eager`], ESSP: clients never ask). Under [`Sync::Lazy`] (the SSPTable
//!   ESSP compares with) it pushes nothing when a clock completes: a client that cannot
//!   go on with the W it holds asks for one ([`Message::Fetch`] `{ clock: t − s }`), and
//!   the server answers with its newest W once that includes clocks `0..t − s`. The last
//!   clock's W goes to every client either way (their final evaluation).
//!
//! Under BSP this is exactly the sequence of kernel calls of an SFB peer with full
//! broadcast (which applies, before computing clock `c + 1`, the P batches of clock `c`
//! in origin order in one call, then `prox`), so with factor push the server's and every
//! client's final W are bitwise identical to SFB's. Under SSP(s) the server still applies
//! whole clocks only; a client runs at most `s` clocks ahead of the server's W, and the
//! server refuses a push more than `s` clocks ahead of its W, which bounds its buffer to
//! `P·(s + 1)` updates.
//!
//! # Metrics
//! A client's [`PeerMetrics`] mean what an SFB peer's do: `batches_applied` and the
//! staleness histogram count, when the client computes clock `t`, the P updates of each
//! clock `c` that its W newly includes, as `t − 1 − c` clocks late (so under BSP every
//! update is 0 late, and under SSP(s) none is more than `s`); `apply_s` is the time spent
//! validating received W. The server's counters hold its bytes (the full-W pushes are
//! FMS's bottleneck), `apply_s` and `wait_s`; its [`ClockRecord`](crate::metrics::ClockRecord)s carry
//! `peer = PeerId::SERVER.0`.
//!
//! # Example: a server and two clients, BSP, driven by hand
//! ```
//! use ndarray::{Array2, ArrayView2};
//! use sfb_core::fms::{Client, Config, Server};
//! use sfb_core::{ManualTime, Model, ModelError, PeerId, Progress, Shard, SvList};
//!
//! /// Least squares with J = 1: u = w·x − y, v = x.
//! struct Ls;
//! impl Model for Ls {
//!     type Sample = (Vec<f32>, f32);
//!     fn compute_sv(&mut self, w: ArrayView2<'_, f32>, batch: &[&Self::Sample], sv: &mut SvList)
//!         -> Result<(), ModelError> {
//!         for (x, y) in batch {
//!             let pred: f32 = w.row(0).iter().zip(x).map(|(a, b)| a * b).sum();
//!             sv.push_dense(&[pred - y], x)?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let mut cfg = Config::new(2);
//! cfg.clocks = 5;
//! let mut server = Server::new(cfg.clone(), Ls, Array2::zeros((1, 2))).unwrap();
//! let data = |p: usize| Shard::new(vec![(vec![1.0, p as f32], 1.0); 4], p as u64);
//! let mut clients: Vec<_> = (0..2)
//!     .map(|p| Client::new(PeerId(p), cfg.clone(), Ls, Array2::zeros((1, 2)), data(p as usize)).unwrap())
//!     .collect();
//! let mut time = ManualTime::default();
//! while !(server.is_done() && clients.iter().all(|c| c.is_done())) {
//!     for c in &mut clients {
//!         c.on_tick(&mut time).unwrap();
//!         while let Some(out) = c.poll_output() {
//!             assert_eq!(out.to, PeerId::SERVER);
//!             server.on_message(c.id(), out.msg, &mut time).unwrap();
//!         }
//!     }
//!     server.on_tick(&mut time).unwrap();
//!     while let Some(out) = server.poll_output() {
//!         clients[out.to.index()].on_message(PeerId::SERVER, out.msg, &mut time).unwrap();
//!     }
//! }
//! assert_eq!(clients[0].checksum(), server.replica().checksum());
//! assert_eq!(clients[1].checksum(), server.replica().checksum());
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ndarray::{Array2, ArrayView2};

use crate::checkpoint::{NodeState, Role};
use crate::engine::{Event, Output, Progress, check_step};
use crate::error::ConfigError;
use crate::metrics::PeerMetrics;
use crate::replica::validate_dense;
use crate::time::{TimeSource, Work, secs};
use crate::wire::{self, Message};
use crate::worker::{self, Inbound, Plan, Side, Worker, WorkerParts};
use crate::{
    Consistency, Engine, Error, Evaluation, Evaluator, FactorBatch, Model, PeerId, Replica, Result,
    Shard,
};

/// What a client pushes to the server each clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Push {
    /// Its sufficient factors, `O(K·(J + D))` floats (Project Adam style). The server
    /// applies them with the same kernel as SFB peers: bitwise-identical W under BSP.
    #[default]
    Factors,
    /// The dense `ΔW`, `J·D` floats (the paper's FMS). Equal to factor push up to float
    /// rounding.
    Dense,
}

impl std::fmt::Display for Push {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Push::Factors => "factors",
            Push::Dense => "dense",
        })
    }
}

/// When clients get W ([`Config::sync`]): ESSP's comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sync {
    /// The server pushes W to every client as soon as a clock completes (ESSP's eager
    /// server push): clients mostly compute on a fresh W.
    #[default]
    Eager,
    /// A client keeps its W until it is too stale for the bound, then fetches the
    /// server's newest (the lazy SSPTable): fewer W transfers, older W read.
    Lazy,
}

impl std::fmt::Display for Sync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sync::Eager => "eager",
            Sync::Lazy => "lazy",
        })
    }
}

/// Configuration shared by the server and its clients.
#[derive(Debug, Clone)]
pub struct Config {
    /// Clients `P` (ids `0..P`).
    pub clients: usize,
    /// BSP or SSP(s). Default: BSP.
    pub consistency: Consistency,
    /// Clocks to run. Default: 100.
    pub clocks: u64,
    /// Mini-batch size `K` per client and clock. Default: 16.
    pub batch_size: usize,
    /// Learning rate handed to [`Model::scale`]. Default: 0.1.
    pub lr: f32,
    /// Clients evaluate every this many clocks (the last clock always); 0: only at the
    /// end. Default: 10.
    pub eval_every: u64,
    /// What clients push. Default: [`Push::Factors`].
    pub push: Push,
    /// When clients get W. Default: [`Sync::Eager`].
    pub sync: Sync,
    /// How the server turns the clients' updates into steps on W (the server plays the
    /// optimizer for everyone; clients only compute). Default: plain SGD.
    pub optimizer: crate::Optimizer,
    /// The server and every client take their state ([`Event::Checkpoint`]) every this
    /// many clocks; 0: never. See [`checkpoint`](crate::checkpoint). Default: 0.
    pub checkpoint_every: u64,
    /// What the server does when a client is lost ([`Server::client_lost`]). Default:
    /// [`PeerLoss::Fail`](crate::PeerLoss::Fail).
    pub on_peer_loss: crate::PeerLoss,
    /// Stop rules ([`crate::stop`]), checked on the clients' evaluations; the server
    /// forwards the agreed stop to every client. Default: none.
    pub until: Option<crate::stop::Until>,
    /// Prioritization of each client's push under a send budget ([`crate::prioritize`],
    /// Bösen's managed communication from clients to the server): a client pushes at most
    /// the budget's factor pairs per clock, most important first, and carries the rest
    /// over. Factor push only. Default: none.
    pub prioritize: Option<crate::Prioritize>,
}

impl Config {
    /// `clients` clients with the defaults.
    pub fn new(clients: usize) -> Self {
        Self {
            clients,
            consistency: Consistency::Bsp,
            clocks: 100,
            batch_size: 16,
            lr: 0.1,
            eval_every: 10,
            push: Push::Factors,
            sync: Sync::Eager,
            optimizer: crate::Optimizer::default(),
            checkpoint_every: 0,
            on_peer_loss: crate::PeerLoss::Fail,
            until: None,
            prioritize: None,
        }
    }

    /// The FMS counterpart of an SFB peer configuration: same clients, consistency, clocks,
    /// batch size, learning rate, evaluation period and stop rules (with the lead of the
    /// client → server → clients path, [`Config::stop_lead`]).
    pub fn from_engine(cfg: &crate::Config, push: Push) -> Self {
        let mut out = Self {
            clients: cfg.peers,
            consistency: cfg.consistency.clone(),
            clocks: cfg.clocks,
            batch_size: cfg.batch_size,
            lr: cfg.lr,
            eval_every: cfg.eval_every,
            push,
            sync: Sync::Eager,
            optimizer: cfg.optimizer.clone(),
            checkpoint_every: cfg.checkpoint_every,
            on_peer_loss: cfg.on_peer_loss,
            until: cfg.until.clone(),
            prioritize: cfg.prioritize,
        };
        let lead = out.stop_lead();
        if let Some(u) = &mut out.until {
            u.lead = lead;
        }
        out
    }

    /// The [`Until::lead`](crate::stop::Until::lead) of an FMS run: a stop goes from the
    /// client whose evaluation met a rule to the server and from it to every client.
    pub fn stop_lead(&self) -> u64 {
        crate::stop::lead(2, self.staleness())
    }

    /// Checks the configuration before anything runs.
    ///
    /// # Errors
    /// [`Error::Config`] naming the problem (no clients, a consistency model other than
    /// BSP or SSP, a zero batch size, a non-finite learning rate, SAGA with dense push).
    pub fn validate(&self) -> Result<()> {
        let max = PeerId::SERVER.index() - 1;
        if self.clients == 0 || self.clients > max {
            return Err(ConfigError::FmsClients {
                got: self.clients,
                max,
            }
            .into());
        }
        if self.consistency.staleness_bound().is_none() {
            return Err(ConfigError::FmsConsistency {
                consistency: self.consistency.to_string(),
            }
            .into());
        }
        check_step(self.batch_size, self.lr)?;
        if self.push == Push::Dense && self.optimizer.method == crate::Method::Saga {
            return Err(ConfigError::Optimizer {
                optimizer: self.optimizer.method.to_string(),
                reason: "needs factor push: the server keeps SAGA's table mean from the \
                         clients' factors, which a dense ΔW does not carry"
                    .into(),
            }
            .into());
        }
        if let Some(p) = &self.prioritize {
            let refuse = |why: &str| -> Result<()> {
                Err(ConfigError::Sending(format!("--prioritize with FMS {why}")).into())
            };
            if self.push == Push::Dense {
                refuse(
                    "needs factor push: it chooses which of a client's factor pairs go to the \
                     server, and a dense ΔW has none",
                )?;
            }
            if self.checkpoint_every > 0 {
                refuse(
                    "keeps each client's held-back pairs, which an FMS client's checkpoint \
                     does not hold yet: no checkpoints with it",
                )?;
            }
            crate::engine::check_prioritize(p)?;
        }
        if self.push == Push::Dense && self.optimizer.method == crate::Method::Factored {
            return Err(ConfigError::Optimizer {
                optimizer: self.optimizer.method.to_string(),
                reason: crate::optim::DENSE_PUSH_FACTORED.into(),
            }
            .into());
        }
        self.optimizer.validate(self.lr)
    }

    fn plan(&self) -> Plan {
        Plan {
            consistency: self.consistency.clone(),
            clocks: self.clocks,
            batch_size: self.batch_size,
            lr: self.lr,
            optimizer: self.optimizer.to_string(),
            eval_every: self.eval_every,
            // FMS runs only the bounded models, which ignore it.
            max_drift: crate::DEFAULT_MAX_DRIFT,
            checkpoint_every: self.checkpoint_every,
            // FMS ships dense matrices, which need their values: never timing-only.
            timing_only: false,
            until: self.until.clone(),
            // A client sends its clock's update when it is complete.
            parts: 1,
        }
    }

    /// The staleness bound `s` (0 for BSP).
    pub fn staleness(&self) -> u64 {
        self.consistency.staleness_bound().unwrap_or(0)
    }
}

#[derive(Debug)]
enum Update {
    Factors(Arc<FactorBatch>),
    Dense(Arc<Array2<f32>>),
}

/// The parameter server; see the [module docs](self).
pub struct Server<M: Model> {
    cfg: Config,
    model: M,
    replica: Replica,
    stepper: crate::Stepper,
    clock: u64,
    /// What each client has delivered (the shared arrival check of every node).
    inbound: Inbound,
    pending: BTreeMap<(u64, PeerId), Update>,
    outputs: VecDeque<Output>,
    events: VecDeque<Event>,
    metrics: PeerMetrics,
    started: Option<Duration>,
    last_step_end: Option<Duration>,
    done: bool,
    /// Seconds of the run before this process (a resumed run's).
    wall_offset_s: f64,
    /// Clients lost during the run.
    lost: Vec<PeerId>,
    /// The run was cut short by [`stop_at`](Self::stop_at).
    stopped_early: bool,
    /// Lazy sync: the clock each client waits for W to include, if it asked.
    fetches: BTreeMap<PeerId, u64>,
    /// Lazy sync: the clock of the last W sent to every client.
    pushed: u64,
}

impl<M: Model> std::fmt::Debug for Server<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("fms::Server")
            .field("clock", &self.clock)
            .field("pending", &self.pending.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<M: Model> Server<M> {
    /// A server for `cfg` starting from `w0` (the clients' initial W), with `model` for its
    /// `prox` (the server never calls `compute_sv`).
    ///
    /// # Errors
    /// [`Error::Config`] from [`Config::validate`]; [`Error::NonFinite`] for a bad `w0`.
    pub fn new(cfg: Config, model: M, w0: Array2<f32>) -> Result<Self> {
        cfg.validate()?;
        let clients: Vec<PeerId> = (0..cfg.clients as u32).map(PeerId).collect();
        let replica = Replica::new(w0)?;
        Ok(Self {
            stepper: crate::Stepper::new(cfg.optimizer.clone(), cfg.lr, cfg.clocks, replica.dim())?,
            replica,
            inbound: Inbound::new(&clients, cfg.clients),
            cfg,
            model,
            clock: 0,
            pending: BTreeMap::new(),
            outputs: VecDeque::new(),
            events: VecDeque::new(),
            metrics: PeerMetrics::default(),
            started: None,
            last_step_end: None,
            done: false,
            wall_offset_s: 0.0,
            lost: Vec::new(),
            stopped_early: false,
            fetches: BTreeMap::new(),
            pushed: 0,
        })
    }

    /// A server for `cfg` continuing from `state` (taken by the server of a run with the
    /// same clients, model shape and optimizer): it waits for every client's clock
    /// `state.clock` next. See [`checkpoint`](crate::checkpoint).
    ///
    /// # Errors
    /// [`Error::Config`] from [`Config::validate`]; [`Error::Checkpoint`] naming what does
    /// not fit.
    pub fn resume(cfg: Config, model: M, state: NodeState) -> Result<Self> {
        let w = state.w.clone().ok_or_else(|| Error::Checkpoint {
            reason: "holds no W".into(),
        })?;
        let mut server = Self::new(cfg, model, w)?;
        server.restore(state)?;
        Ok(server)
    }

    /// Puts a fresh server where `state` says (see [`resume`](Self::resume), which is
    /// `new` then this).
    ///
    /// # Errors
    /// As [`resume`](Self::resume); after an error drop the server.
    pub fn restore(&mut self, mut state: NodeState) -> Result<()> {
        let w = state.w.take().ok_or_else(|| Error::Checkpoint {
            reason: "holds no W".into(),
        })?;
        let clients: Vec<PeerId> = (0..self.cfg.clients as u32).map(PeerId).collect();
        let dim = self.replica.dim();
        state.w = Some(w);
        state.check(Role::Server, PeerId::SERVER, &clients, dim, self.cfg.clocks)?;
        let w = state.w.take().expect("just put back");
        if self.clock > 0 || self.started.is_some() {
            return Err(Error::Checkpoint {
                reason: "cannot be restored into a server that has run".into(),
            });
        }
        self.replica = Replica::new(w)?;
        self.stepper.restore_state(&state.optimizer)?;
        self.model
            .restore_state(&state.model)
            .map_err(|e| Error::Checkpoint {
                reason: format!("model state: {e}"),
            })?;
        for i in 0..clients.len() {
            self.inbound.set_delivered(i, state.clock);
        }
        self.clock = state.clock;
        self.metrics = state.metrics;
        self.wall_offset_s = state.wall_s;
        Ok(())
    }

    /// The server's state now (what [`Event::Checkpoint`] carries at its checkpoint clocks).
    pub fn state(&self, now: Duration) -> NodeState {
        NodeState {
            role: Role::Server,
            id: PeerId::SERVER,
            clock: self.clock,
            w: Some(self.replica.w().to_owned()),
            optimizer: self.stepper.save_state(),
            model: self.model.save_state(),
            compressor: Vec::new(),
            mixer: Vec::new(),
            relay: Vec::new(),
            sampler: None,
            awaited: (0..self.cfg.clients as u32).map(PeerId).collect(),
            view: Vec::new(),
            metrics: self.metrics.clone(),
            wall_s: self.wall_offset_s + self.started.map_or(0.0, |s| secs(s, now)),
            first_objective: None,
        }
    }

    /// When clients get W ([`Config::sync`]; the server and its clients must agree).
    pub fn with_sync(mut self, sync: Sync) -> Self {
        self.cfg.sync = sync;
        self
    }

    /// The server for clients made like the fresh SFB `engine` (any peer's): its model
    /// (for `prox`), initial W, peers as clients, consistency and clocks.
    ///
    /// # Errors
    /// [`Error::Config`] if the engine has already run or its configuration is not valid
    /// for FMS (see [`Config::validate`]).
    pub fn from_engine(engine: Engine<M>, push: Push) -> Result<Self> {
        let (ecfg, (model, _, _), replica) = engine.into_parts()?;
        Self::new(
            Config::from_engine(&ecfg, push),
            model,
            replica.into_inner(),
        )
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Clocks complete: W includes every update of clocks `0..clock()`.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// The server's W.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// The model (only its `prox` is used).
    pub fn model(&self) -> &M {
        &self.model
    }

    /// Counters so far (bytes, `apply_s`, `wait_s`, `batches_applied`, `clocks`).
    pub fn metrics(&self) -> &PeerMetrics {
        &self.metrics
    }

    /// Whether every clock is applied and its W pushed.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Clients whose update of the next clock is missing, with the clocks each has
    /// delivered; empty when the server is not waiting. For error messages on timeouts.
    pub fn waiting_on(&self) -> Vec<(PeerId, u64)> {
        if self.done || self.clock >= self.cfg.clocks {
            return Vec::new();
        }
        (0..self.cfg.clients)
            .filter(|&p| self.inbound.delivered(p) <= self.clock)
            .map(|p| (PeerId(p as u32), self.inbound.delivered(p)))
            .collect()
    }

    /// Takes a client's update, received from `from`.
    ///
    /// The update must be of the configured [`Push`] kind, come from the client it names,
    /// be that client's next clock (links are FIFO), be below the run's clocks and at most
    /// `s` clocks ahead of the server's W, and have W's shape and finite values. A refused
    /// message changes nothing; W only changes in [`on_tick`](Self::on_tick). Receiving
    /// takes no time of its own.
    ///
    /// # Errors
    /// [`Error::UnexpectedMessage`] for a full W or the other push kind;
    /// [`Error::UnknownPeer`]; [`Error::BadClock`]; the shape and non-finite errors of
    /// [`FactorBatch::validate`] and [`validate_dense`].
    pub fn on_message(
        &mut self,
        from: PeerId,
        msg: Message,
        time: &mut dyn TimeSource,
    ) -> Result<()> {
        let _ = time;
        if let Message::Stop { origin, stop } = &msg {
            return self.offer_stop(from, *origin, *stop);
        }
        if let Message::Fetch { origin, clock } = msg {
            return self.fetch(from, origin, clock);
        }
        let (origin, clock) = match (&msg, self.cfg.push) {
            (Message::Factors { batch, .. }, Push::Factors) => (batch.origin, batch.clock),
            (Message::Delta { origin, clock, .. }, Push::Dense) => (*origin, *clock),
            _ => {
                return Err(Error::UnexpectedMessage {
                    from,
                    kind: msg.kind(),
                    role: match self.cfg.push {
                        Push::Factors => "FMS server with factor push",
                        Push::Dense => "FMS server with dense push",
                    },
                });
            }
        };
        let i = self.inbound.check(from, origin, clock, self.cfg.clocks)?;
        if clock > self.clock.saturating_add(self.cfg.staleness()) {
            return Err(Error::BadClock {
                origin,
                clock,
                reason: "ahead of the staleness bound (no W it may have computed on exists yet)",
            });
        }
        let (j, d) = self.replica.dim();
        let update = match msg {
            Message::Factors { ref batch, .. } => {
                batch.validate(j, d)?;
                Update::Factors(Arc::clone(batch))
            }
            Message::Delta { ref delta, .. } => {
                validate_dense(delta.view(), j, d, origin, "dense ΔW")?;
                Update::Dense(Arc::clone(delta))
            }
            Message::Params { .. }
            | Message::Relayed { .. }
            | Message::Mix { .. }
            | Message::Sum { .. }
            | Message::Stop { .. }
            | Message::Notice { .. }
            | Message::State { .. }
            | Message::Copy { .. }
            | Message::Fetch { .. }
            | Message::Part { .. } => {
                unreachable!("refused above")
            }
        };
        self.metrics.bytes_received += wire::encoded_len(&msg) as u64;
        self.inbound.deliver(i, 0);
        self.pending.insert((clock, origin), update);
        Ok(())
    }

    /// A client's request for W including clocks `0..clock` (lazy sync): answered now if
    /// W does, else once it does.
    fn fetch(&mut self, from: PeerId, origin: PeerId, clock: u64) -> Result<()> {
        let role = "FMS server with eager sync (clients do not ask for W)";
        if self.cfg.sync != Sync::Lazy || origin != from {
            return Err(Error::UnexpectedMessage {
                from,
                kind: "fetch",
                role,
            });
        }
        if from.index() >= self.cfg.clients {
            return Err(Error::UnknownPeer {
                origin: from,
                peers: self.cfg.clients,
            });
        }
        if clock > self.cfg.clocks {
            return Err(Error::BadClock {
                origin: from,
                clock,
                reason: "a request for W beyond the run's last clock",
            });
        }
        self.metrics.bytes_received += wire::encoded_len(&Message::Fetch { origin, clock }) as u64;
        if self.clock >= clock {
            self.send_w(from);
        } else {
            let want = self.fetches.entry(from).or_insert(clock);
            *want = (*want).max(clock);
        }
        Ok(())
    }

    /// Queues the newest W for client `to`.
    fn send_w(&mut self, to: PeerId) {
        let msg = Message::Params {
            clock: self.clock,
            w: Arc::new(self.replica.w().to_owned()),
        };
        self.metrics.bytes_sent += wire::encoded_len(&msg) as u64;
        self.outputs.push_back(Output { to, msg });
    }

    /// The next frame to send (a [`Message::Params`] to one client), if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The next event (a record per completed clock), if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether every client's update of the next clock is in: the server applies whole
    /// clocks only, BSP among the updates whatever the clients' staleness.
    fn clock_complete(&self) -> bool {
        self.clock < self.cfg.clocks && self.inbound.all_delivered(self.clock + 1)
    }

    /// Applies every complete clock and queues its W for every client.
    ///
    /// Returns [`Progress::Stepped`] when it completed at least one clock (drain
    /// [`poll_output`](Self::poll_output), then tick again), [`Progress::Blocked`] while
    /// some client's update is missing, [`Progress::Done`] once every clock is applied and
    /// pushed.
    ///
    /// # Errors
    /// Kernel errors, which cannot happen for updates accepted by `on_message`. After an
    /// error the server should be dropped.
    pub fn on_tick(&mut self, time: &mut dyn TimeSource) -> Result<Progress> {
        if self.done {
            return Ok(Progress::Done);
        }
        let now = time.now();
        let started = *self.started.get_or_insert(now);
        if self.clock >= self.cfg.clocks {
            if self.cfg.sync == Sync::Lazy && self.pushed < self.clock {
                // A stop at a clock already completed: its W was not pushed.
                self.push_w();
                return Ok(Progress::Stepped);
            }
            if self.stopped_early && self.cfg.checkpoint_every > 0 {
                self.events
                    .push_back(Event::Checkpoint(Box::new(self.state(time.now()))));
            }
            self.done = true;
            return Ok(Progress::Done);
        }
        if !self.clock_complete() {
            return Ok(Progress::Blocked);
        }
        let since = self.last_step_end.unwrap_or(started);
        self.metrics.wait_s += secs(since, now);
        while self.clock_complete() {
            self.complete_clock(time)?;
            let end = time.now();
            self.last_step_end = Some(end);
            self.events.push_back(Event::Clock(worker::record(
                PeerId::SERVER,
                &self.metrics,
                self.clock,
                self.wall_offset_s + secs(started, end),
                None,
            )));
            let every = self.cfg.checkpoint_every;
            if every > 0 && self.clock.is_multiple_of(every) && self.clock < self.cfg.clocks {
                self.events
                    .push_back(Event::Checkpoint(Box::new(self.state(end))));
            }
        }
        Ok(Progress::Stepped)
    }

    fn complete_clock(&mut self, time: &mut dyn TimeSource) -> Result<()> {
        let c = self.clock;
        let t0 = time.now();
        // Every live client's update of clock c, and any a lost client had sent, in origin
        // order.
        let origins: Vec<PeerId> = self
            .pending
            .range((c, PeerId(0))..=(c, PeerId(u32::MAX)))
            .map(|(k, _)| k.1)
            .collect();
        let updates: Vec<Update> = origins
            .iter()
            .map(|&p| self.pending.remove(&(c, p)).expect("listed"))
            .collect();
        let (j, d) = self.replica.dim();
        let work = match self.cfg.push {
            Push::Factors => {
                let refs: Vec<&FactorBatch> = updates
                    .iter()
                    .map(|u| match u {
                        Update::Factors(b) => b.as_ref(),
                        Update::Dense(_) => unreachable!("push kind checked on receipt"),
                    })
                    .collect();
                let stats = self.stepper.apply(&mut self.replica, &refs, c + 1)?;
                Work::Apply {
                    pairs: stats.pairs(),
                    j,
                    d,
                }
            }
            Push::Dense => {
                let views: Vec<(PeerId, u64, ArrayView2<'_, f32>)> = updates
                    .iter()
                    .enumerate()
                    .map(|(p, u)| match u {
                        Update::Dense(m) => (PeerId(p as u32), c, m.view()),
                        Update::Factors(_) => unreachable!("push kind checked on receipt"),
                    })
                    .collect();
                self.stepper.apply_dense(&mut self.replica, &views, c + 1)?;
                Work::Dense {
                    matrices: views.len(),
                    j,
                    d,
                }
            }
        };
        self.model.prox(self.replica.w_mut());
        self.metrics.apply_s += secs(t0, time.after(work));
        self.metrics.batches_applied += updates.len() as u64;
        self.clock += 1;
        self.metrics.clocks = self.clock;
        if self.cfg.sync == Sync::Eager || self.clock >= self.cfg.clocks {
            self.push_w();
        } else {
            let now = self.clock;
            let due: Vec<PeerId> = self
                .fetches
                .iter()
                .filter(|&(p, &want)| want <= now && !self.lost.contains(p))
                .map(|(&p, _)| p)
                .collect();
            for p in due {
                self.fetches.remove(&p);
                self.send_w(p);
            }
        }
        Ok(())
    }

    /// Queues W for every client still served (the last clock's W reaches every client
    /// for its final evaluation, whatever the sync).
    fn push_w(&mut self) {
        self.fetches.clear();
        self.pushed = self.clock;
        self.send_to_every_client(Message::Params {
            clock: self.clock,
            w: Arc::new(self.replica.w().to_owned()),
        });
    }

    /// Queues `msg` for every client still served.
    fn send_to_every_client(&mut self, msg: Message) {
        let len = wire::encoded_len(&msg) as u64;
        for p in 0..self.cfg.clients as u32 {
            if self.lost.contains(&PeerId(p)) {
                continue;
            }
            self.metrics.bytes_sent += len;
            self.outputs.push_back(Output {
                to: PeerId(p),
                msg: msg.clone(),
            });
        }
    }

    /// Ends the run at clock `t` (every client told the same): the server completes the
    /// clocks before `t`, takes a checkpoint of clock `t` if it checkpoints, and is done.
    /// Returns the clock it stops at (its own if it is past `t`).
    pub fn stop_at(&mut self, t: u64) -> u64 {
        if self.done {
            return self.clock;
        }
        let t = t.max(self.clock);
        if t < self.cfg.clocks {
            self.cfg.clocks = t;
            self.stopped_early = true;
        }
        self.cfg.clocks
    }

    /// A stop proposed by client `from` ([`crate::stop`]): if it is better than the one
    /// held, the server ends at its clock and forwards it to every client it serves, ahead
    /// of its next W.
    fn offer_stop(&mut self, from: PeerId, origin: PeerId, stop: crate::stop::Stop) -> Result<()> {
        if origin != from || !self.inbound.awaits(from) {
            return Err(Error::UnexpectedMessage {
                from,
                kind: "stop",
                role: "FMS server (stops come from its clients)",
            });
        }
        if self
            .metrics
            .stop
            .is_some_and(|held| !stop.better_than(&held))
        {
            return Ok(());
        }
        if stop.at < self.clock && stop.at < self.cfg.clocks {
            return Err(Error::BadClock {
                origin: from,
                clock: stop.at,
                reason: "a stop (--until) at a clock the server has already completed",
            });
        }
        self.metrics.stop = Some(stop);
        self.stop_at(stop.at);
        self.send_to_every_client(Message::Stop {
            origin: PeerId::SERVER,
            stop,
        });
        Ok(())
    }

    /// Client `peer` is gone. With [`PeerLoss::Continue`](crate::PeerLoss::Continue) the
    /// server stops waiting for it and stops sending it W, and serves the others (the
    /// updates it had sent are applied with their clocks). Returns whether it was a client
    /// still served.
    ///
    /// # Errors
    /// [`Error::PeerLost`] with [`PeerLoss::Fail`](crate::PeerLoss::Fail) (nothing changes).
    pub fn client_lost(&mut self, peer: PeerId) -> Result<bool> {
        // A client that pushed every clock has finished, not died.
        let finished = self
            .inbound
            .delivered_by(peer)
            .is_some_and(|d| d >= self.cfg.clocks);
        if !self.inbound.awaits(peer) || self.done || finished {
            return Ok(false);
        }
        if self.cfg.on_peer_loss == crate::PeerLoss::Fail {
            return Err(Error::PeerLost {
                me: PeerId::SERVER,
                peer,
                clock: self.clock,
                why: "the run's policy is to fail (BSP; give --on-peer-loss continue to serve \
                      the other clients)",
            });
        }
        self.inbound.remove(peer);
        self.lost.push(peer);
        self.outputs.retain(|o| o.to != peer);
        self.metrics.lost_peers.push((peer.0, self.clock));
        Ok(true)
    }

    /// After [`Progress::Done`]: emits the final record.
    pub fn finish(&mut self, time: &mut dyn TimeSource) {
        let now = time.now();
        let wall = self.wall_offset_s + self.started.map_or(0.0, |s| secs(s, now));
        self.events.push_back(Event::Clock(worker::record(
            PeerId::SERVER,
            &self.metrics,
            self.clock,
            wall,
            None,
        )));
    }
}

/// The FMS side of a client: the W the server last sent, and how it pushes.
struct ClientSide {
    w: Arc<Array2<f32>>,
    push: Push,
    clients: usize,
    /// Clocks of W whose updates are already counted in the staleness histogram.
    accounted: u64,
    /// What pushes the client's pairs first under a budget, if anything.
    prioritizer: Option<crate::Prioritizer>,
    /// The client's compute seconds when it last pushed (a measured budget's clock work
    /// is the difference).
    work_seen: f64,
}

impl ClientSide {
    /// The clock of the held W: what the server (the client's only awaited node, position
    /// 0) has delivered.
    fn w_clock<M: Model>(worker: &Worker<M>) -> u64 {
        worker.inbound.delivered(0)
    }
}

impl<M: Model> Side<M> for ClientSide {
    fn w(&self) -> ArrayView2<'_, f32> {
        self.w.view()
    }

    /// Records the updates W gained since the last step, as if applied before computing
    /// the worker's next clock (see the module docs); W itself was replaced on receipt.
    fn absorb(
        &mut self,
        worker: &mut Worker<M>,
        _limit: u64,
        _time: &mut dyn TimeSource,
    ) -> Result<()> {
        let w_clock = Self::w_clock(worker);
        for c in self.accounted..w_clock {
            let late = worker.clock.saturating_sub(1).saturating_sub(c);
            for _ in 0..self.clients {
                worker.metrics.record_staleness(late);
            }
        }
        self.accounted = w_clock;
        Ok(())
    }

    fn stop_destinations(&self) -> Vec<PeerId> {
        vec![PeerId::SERVER]
    }

    fn role(&self) -> Role {
        Role::Client
    }

    fn snapshot(&self, state: &mut NodeState) {
        state.w = Some(self.w.as_ref().clone());
    }

    /// Pushes the factors, or the dense ΔW built from them, to the server.
    fn emit(
        &mut self,
        worker: &mut Worker<M>,
        fb: FactorBatch,
        time: &mut dyn TimeSource,
    ) -> Result<()> {
        let t = fb.clock;
        let mut fb = fb;
        let work = worker.metrics.compute_s + worker.metrics.apply_s;
        let clock_work = work - std::mem::replace(&mut self.work_seen, work);
        if let Some(p) = &mut self.prioritizer {
            let t0 = time.now();
            p.set_work(clock_work);
            let (out, stats) = p.select(fb, self.w.view());
            fb = out;
            crate::engine::note_priority(worker, p, &stats, secs(t0, time.now()));
        }
        let pairs = fb.len();
        let msg = match self.push {
            Push::Factors => Message::Factors {
                batch: Arc::new(fb),
                mean_iter_us: worker.mean_iter_us(),
            },
            Push::Dense => {
                let t0 = time.now();
                let (j, d) = self.w.dim();
                let mut delta = Replica::zeros(j, d);
                delta.apply(&[&fb]).map_err(|e| Error::Model {
                    clock: t,
                    source: e.into(),
                })?;
                let t1 = time.after(Work::Dense { matrices: 1, j, d });
                worker.metrics.compute_s += secs(t0, t1);
                Message::Delta {
                    origin: worker.id,
                    clock: t,
                    mean_iter_us: worker.mean_iter_us(),
                    delta: Arc::new(delta.into_inner()),
                }
            }
        };
        let bytes = wire::encoded_len(&msg) as u64;
        worker.metrics.bytes_sent += bytes;
        if let Some(p) = &mut self.prioritizer {
            p.sent(bytes, pairs);
        }
        worker.outputs.push_back(Output {
            to: PeerId::SERVER,
            msg,
        });
        Ok(())
    }
}

/// One FMS client; see the [module docs](self).
///
/// It runs the same protocol skeleton as an SFB [`Engine`]: its one awaited node is the
/// server, whose W of clock `c` counts as `c` clocks delivered, so the SSP rule "start
/// clock `t` once every awaited node has delivered `t − s` clocks" is the FMS rule "compute
/// on a W that includes every update of clocks `0..t − s`".
pub struct Client<M: Model> {
    cfg: Config,
    worker: Worker<M>,
    side: ClientSide,
    /// Lazy sync: the clock this client last asked W to include.
    asked: u64,
}

impl<M: Model> std::fmt::Debug for Client<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("fms::Client")
            .field("id", &self.worker.id)
            .field("clock", &self.worker.clock)
            .field("w_clock", &self.w_clock())
            .field("done", &self.worker.done)
            .finish_non_exhaustive()
    }
}

impl<M: Model> Client<M> {
    /// Client `id` of `cfg`, starting from `w0` (the server's initial W), training `model`
    /// on `shard`.
    ///
    /// # Errors
    /// [`Error::Config`] from [`Config::validate`] or for an `id` not below
    /// `cfg.clients`; [`Error::NonFinite`] for a bad `w0`.
    pub fn new(
        id: PeerId,
        cfg: Config,
        model: M,
        w0: Array2<f32>,
        shard: Shard<M::Sample>,
    ) -> Result<Self> {
        Self::from_parts(id, cfg, (model, shard, None), Replica::new(w0)?)
    }

    /// When clients get W ([`Config::sync`]; the server and its clients must agree).
    pub fn with_sync(mut self, sync: Sync) -> Self {
        self.cfg.sync = sync;
        self
    }

    /// The client that trains exactly what the fresh SFB `engine` would (same id, model,
    /// shard and sampler, evaluator, initial W, consistency, clocks, batch size and
    /// learning rate), syncing through a server instead.
    ///
    /// # Errors
    /// [`Error::Config`] if the engine has already run or its configuration is not valid
    /// for FMS (see [`Config::validate`]).
    pub fn from_engine(engine: Engine<M>, push: Push) -> Result<Self> {
        let (ecfg, parts, replica) = engine.into_parts()?;
        Self::from_parts(ecfg.id, Config::from_engine(&ecfg, push), parts, replica)
    }

    /// Client `id` of `cfg` continuing from `state` (taken by this client in a run with the
    /// same model shape and data): it holds the server's W of clock `state.clock` and
    /// computes that clock next. See [`checkpoint`](crate::checkpoint).
    ///
    /// # Errors
    /// As [`new`](Self::new); [`Error::Checkpoint`] naming what does not fit.
    pub fn resume(
        id: PeerId,
        cfg: Config,
        model: M,
        shard: Shard<M::Sample>,
        state: NodeState,
    ) -> Result<Self> {
        let w = state.w.clone().ok_or_else(|| Error::Checkpoint {
            reason: "holds no W".into(),
        })?;
        let mut client = Self::new(id, cfg, model, w, shard)?;
        client.restore(state)?;
        Ok(client)
    }

    /// Puts a fresh client where `state` says (see [`resume`](Self::resume), which is
    /// `new` then this).
    ///
    /// # Errors
    /// As [`resume`](Self::resume); after an error drop the client.
    pub fn restore(&mut self, mut state: NodeState) -> Result<()> {
        let w = state.w.take().ok_or_else(|| Error::Checkpoint {
            reason: "holds no W".into(),
        })?;
        let id = self.worker.id;
        let dim = self.side.w.dim();
        state.w = Some(w);
        state.check(Role::Client, id, &[PeerId::SERVER], dim, self.cfg.clocks)?;
        let w = state.w.take().expect("just put back");
        let replica = Replica::new(w)?;
        self.worker.restore(&state, state.clock)?;
        self.side.w = Arc::new(replica.into_inner());
        self.side.accounted = state.clock;
        Ok(())
    }

    fn from_parts(
        id: PeerId,
        cfg: Config,
        (model, shard, evaluator): WorkerParts<M>,
        replica: Replica,
    ) -> Result<Self> {
        cfg.validate()?;
        if id.index() >= cfg.clients {
            return Err(ConfigError::ClientOutOfRange {
                id,
                clients: cfg.clients,
            }
            .into());
        }
        let worker = Worker::new(
            id,
            model,
            shard,
            evaluator,
            replica.dim(),
            cfg.plan(),
            Inbound::new(&[PeerId::SERVER], cfg.clients + 1),
        );
        Ok(Self {
            side: ClientSide {
                w: Arc::new(replica.into_inner()),
                push: cfg.push,
                clients: cfg.clients,
                accounted: 0,
                prioritizer: cfg.prioritize.map(crate::Prioritizer::new),
                work_seen: 0.0,
            },
            worker,
            cfg,
            asked: 0,
        })
    }

    /// Evaluates with `evaluator` every `eval_every` clocks and at the end.
    pub fn with_evaluator(mut self, evaluator: Box<dyn Evaluator>) -> Self {
        self.worker.set_evaluator(evaluator);
        self
    }

    /// This client.
    pub fn id(&self) -> PeerId {
        self.worker.id
    }

    /// The transport sent `bytes` and was busy `busy` since the last call: what a
    /// measured send budget (`--prioritize POLICY:auto`) sizes the next pushes by.
    pub fn observe_egress(&mut self, bytes: u64, busy: std::time::Duration) {
        if let Some(p) = &mut self.side.prioritizer {
            p.observe_link(bytes, busy.as_secs_f64());
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The next clock to compute (= clocks computed and pushed).
    pub fn clock(&self) -> u64 {
        self.worker.clock
    }

    /// Clocks whose updates the client's W includes (all of `0..w_clock()`).
    pub fn w_clock(&self) -> u64 {
        ClientSide::w_clock(&self.worker)
    }

    /// The W the server last sent (the initial W before that).
    pub fn w(&self) -> ArrayView2<'_, f32> {
        self.side.w.view()
    }

    /// [`Replica::checksum`] of [`w`](Self::w).
    pub fn checksum(&self) -> String {
        crate::replica::checksum(self.side.w.view())
    }

    /// The model.
    pub fn model(&self) -> &M {
        &self.worker.model
    }

    /// Counters so far; see the [module docs](self#metrics).
    pub fn metrics(&self) -> &PeerMetrics {
        &self.worker.metrics
    }

    /// The latest evaluation, if any.
    pub fn last_evaluation(&self) -> Option<&Evaluation> {
        self.worker.last_eval.as_ref()
    }

    /// Whether every clock is pushed and the final W received.
    pub fn is_done(&self) -> bool {
        self.worker.done
    }

    /// `[(PeerId::SERVER, w_clock)]` while the client waits for a newer W; empty
    /// otherwise. For error messages on timeouts.
    pub fn waiting_on(&self) -> Vec<(PeerId, u64)> {
        self.worker.waiting_on()
    }

    /// Takes a message received from `from`: a full W from the server.
    ///
    /// W must come from [`PeerId::SERVER`], be newer than the one held, include no clock
    /// this client has not pushed yet, and have the right shape and finite values (the
    /// check is timed as `apply_s` on `time`). A refused message changes nothing.
    ///
    /// # Errors
    /// [`Error::UnexpectedMessage`] for factors or deltas, or W from anyone but the
    /// server; [`Error::BadClock`]; the errors of [`validate_dense`].
    pub fn on_message(
        &mut self,
        from: PeerId,
        msg: Message,
        time: &mut dyn TimeSource,
    ) -> Result<()> {
        if let Message::Stop { stop, .. } = &msg
            && from == PeerId::SERVER
        {
            self.worker.metrics.bytes_received += wire::encoded_len(&msg) as u64;
            self.worker.offer_stop(*stop, from, false)?;
            return Ok(());
        }
        let Message::Params { clock, w } = &msg else {
            return Err(Error::UnexpectedMessage {
                from,
                kind: msg.kind(),
                role: "FMS client",
            });
        };
        if from != PeerId::SERVER {
            return Err(Error::UnexpectedMessage {
                from,
                kind: msg.kind(),
                role: "FMS client (W only comes from the server)",
            });
        }
        let clock = *clock;
        let reason = if clock <= self.w_clock() {
            Some("stale or duplicate W (not newer than the one held)")
        } else if clock > self.worker.clock {
            Some("W includes clocks this client has not pushed")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::BadClock {
                origin: PeerId::SERVER,
                clock,
                reason,
            });
        }
        let t0 = time.now();
        let (j, d) = self.side.w.dim();
        validate_dense(w.view(), j, d, PeerId::SERVER, "W")?;
        self.worker.metrics.apply_s += secs(t0, time.after(Work::CheckW { j, d }));
        self.worker.metrics.bytes_received += wire::encoded_len(&msg) as u64;
        self.side.w = Arc::clone(w);
        self.worker.inbound.set_delivered(0, clock);
        Ok(())
    }

    /// The next frame to send (to [`PeerId::SERVER`]), if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.worker.outputs.pop_front()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.worker.poll_event()
    }

    /// Whether the server has sent W of the run's last clock (its stream may then end).
    pub(crate) fn worker_finished_by_server(&self) -> bool {
        self.worker.finished_by(PeerId::SERVER)
    }

    /// Ends the run at clock `t`; see [`Engine::stop_at`].
    pub fn stop_at(&mut self, t: u64) -> u64 {
        self.worker.stop_at(t)
    }

    /// Tries to make progress: computes and pushes the next clock if the held W is recent
    /// enough; every duration it records is read from `time`.
    ///
    /// # Errors
    /// [`Error::Model`] if `compute_sv` fails or produces invalid factors. Nothing is sent
    /// then; the client should be dropped.
    pub fn on_tick(&mut self, time: &mut dyn TimeSource) -> Result<Progress> {
        let (t, w) = (self.worker.clock, self.w_clock());
        let progress = self.worker.step(&mut self.side, time)?;
        if self.worker.clock > t {
            // Clock t computed on the W of clock w.
            self.worker.metrics.record_read(t - w);
        }
        if self.cfg.sync == Sync::Lazy
            && progress == Progress::Blocked
            && !self.worker.waiting_on().is_empty()
        {
            // It cannot go on with the W it holds: ask for one including clocks
            // `0..t − s`, once. (The last clock's W comes to every client unasked.)
            let t = self.worker.clock;
            let need = t.saturating_sub(self.cfg.staleness());
            if t < self.worker.plan.clocks && need > self.asked && need > self.w_clock() {
                self.asked = need;
                let msg = Message::Fetch {
                    origin: self.worker.id,
                    clock: need,
                };
                self.worker.metrics.bytes_sent += wire::encoded_len(&msg) as u64;
                self.worker.outputs.push_back(Output {
                    to: PeerId::SERVER,
                    msg,
                });
            }
        }
        Ok(progress)
    }

    /// Runs the evaluator on the held W (timed as `eval_s`).
    pub fn evaluate(&mut self, time: &mut dyn TimeSource) -> Option<Evaluation> {
        self.worker.evaluate(self.side.w.view(), time)
    }

    /// After [`Progress::Done`]: evaluates the final W and emits the final record.
    pub fn finish(&mut self, time: &mut dyn TimeSource) -> Option<Evaluation> {
        self.worker.finish(self.side.w.view(), time)
    }
}
