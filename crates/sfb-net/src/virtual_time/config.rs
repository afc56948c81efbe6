//! What a virtual-time run models: link delays, the cost of work, stragglers, pauses and
//! lost frames.

use std::ops::Range;
use std::time::Duration;

use sfb_core::wire::Dtype;
use sfb_core::{PeerId, Stragglers, Work};

use super::{Error, Hosts};

/// The delay of one frame on a link, drawn per frame from the link's own seeded stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    /// Shortest delay.
    pub min: Duration,
    /// Longest delay (inclusive).
    pub max: Duration,
}

impl Latency {
    /// Every frame takes `delay`.
    pub fn fixed(delay: Duration) -> Self {
        Self {
            min: delay,
            max: delay,
        }
    }

    /// Delays uniform in `min..=max` (nanosecond resolution).
    pub fn uniform(min: Duration, max: Duration) -> Self {
        Self { min, max }
    }
}

impl Default for Latency {
    /// Uniform in 50 µs ..= 150 µs.
    fn default() -> Self {
        Self::uniform(Duration::from_micros(50), Duration::from_micros(150))
    }
}

/// Every node's network interface: sends leave through one egress queue (FIFO over all
/// of the node's links: a frame is serialized at `egress` bytes per second after the
/// previous one is out) and arrive through one ingress queue (`ingress` bytes per second,
/// FIFO over all senders). A frame of `b` bytes sent at `t` starts leaving when the egress
/// is free (`s ≥ t`), is out at `s + b/egress`, starts arriving `δ` later (the link's
/// [`Latency`]) once the receiver's ingress is free, and has arrived when both its last
/// byte is in (`+ b/ingress`) and the sender's last byte has crossed the link (`s +
/// b/egress + δ`): cut-through at both NICs, switch buffers unbounded. Sizes are the
/// exact encoded sizes ([`sfb_core::wire::encoded_len_with`] at `dtype`). `None` is an
/// unlimited rate (that side takes no time). An FMS server's NIC is a node's NIC like any
/// other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Nic {
    /// Egress rate of every node, bytes per second (`None`: unlimited).
    pub egress: Option<f64>,
    /// Ingress rate of every node, bytes per second (`None`: unlimited).
    pub ingress: Option<f64>,
    /// Factor values on the wire (f16 halves factor frames).
    pub dtype: Dtype,
    /// CPU the transport spends per byte at each end (encryption, framing, copies,
    /// decoding), as bytes per second of one core. Each node's transport is one thread
    /// beside its engine (as libp2p's tasks run beside sfb's): a frame the node sends
    /// leaves its NIC `b/cpu` after the transport is free (it takes the frames in order),
    /// and one that has arrived reaches the node `b/cpu` after its transport is free; the
    /// node meanwhile goes on working. On a shared host ([`Hosts`](super::Hosts)) that
    /// work runs on the host's free cores, one at most. `None`: free.
    pub cpu: Option<f64>,
    /// CPU the transport spends per frame at each end beyond its bytes (wake-ups,
    /// system calls, hand-offs between tasks), seconds of one core, on the same thread
    /// as [`cpu`](Self::cpu). `None`: free.
    pub frame_cpu: Option<f64>,
}

impl Default for Nic {
    /// Unlimited both ways, f32: frames take only the link delay.
    fn default() -> Self {
        Self {
            egress: None,
            ingress: None,
            dtype: Dtype::F32,
            cpu: None,
            frame_cpu: None,
        }
    }
}

impl Nic {
    /// Both ways at `bytes_per_s`.
    pub fn symmetric(bytes_per_s: f64) -> Self {
        Self {
            egress: Some(bytes_per_s),
            ingress: Some(bytes_per_s),
            dtype: Dtype::F32,
            cpu: None,
            frame_cpu: None,
        }
    }

    /// Whether frames take any time to serialize (so their sizes are needed).
    pub fn limited(&self) -> bool {
        self.egress.is_some() || self.ingress.is_some() || self.transport_charged()
    }

    /// Whether the transport's CPU is charged ([`cpu`](Self::cpu) or
    /// [`frame_cpu`](Self::frame_cpu)).
    pub fn transport_charged(&self) -> bool {
        self.cpu.is_some() || self.frame_cpu.is_some()
    }

    /// The transport's CPU on a frame of `bytes` at one end.
    pub(crate) fn transport_cost(&self, bytes: usize) -> Duration {
        Self::serialize(bytes, self.cpu) + Duration::from_secs_f64(self.frame_cpu.unwrap_or(0.0))
    }

    /// Time to move `bytes` at `rate` (zero when unlimited).
    pub(crate) fn serialize(bytes: usize, rate: Option<f64>) -> Duration {
        rate.map_or(Duration::ZERO, |r| {
            Duration::from_secs_f64(bytes as f64 / r)
        })
    }
}

/// The modelled cost of each piece of [`Work`] a node reports through
/// [`TimeSource::after`](sfb_core::TimeSource::after). Straggler delay is added on top of
/// `Compute` (see [`Config::stragglers`]).
///
/// Costs are seconds as `f64` (a cost per element or per pair can be well below the
/// nanosecond a [`Duration`] resolves); a piece of work's total is rounded to the
/// nanosecond once, in [`Costs::of`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// Seconds per `compute_sv` call (one clock's mini-batch). Default: 100 µs.
    pub compute_per_clock: f64,
    /// Seconds per sample of the mini-batch. Default: 10 µs.
    pub compute_per_sample: f64,
    /// Seconds per batched apply (kernel launch and `prox`). Default: 10 µs.
    pub apply_per_call: f64,
    /// Seconds per rank-one pair applied. Default: 1 µs.
    pub apply_per_pair: f64,
    /// Seconds per element of a dense `J × D` matrix added, built or validated (FMS).
    /// Default: 1 ns.
    pub per_element: f64,
    /// Seconds per evaluation on held-out data. Default: 100 µs.
    pub evaluate: f64,
}

impl Default for Costs {
    fn default() -> Self {
        Self {
            compute_per_clock: 100e-6,
            compute_per_sample: 10e-6,
            apply_per_call: 10e-6,
            apply_per_pair: 1e-6,
            per_element: 1e-9,
            evaluate: 100e-6,
        }
    }
}

impl Costs {
    /// Work that takes no virtual time at all (only link delays and stragglers move the
    /// clocks).
    pub fn free() -> Self {
        Self {
            compute_per_clock: 0.0,
            compute_per_sample: 0.0,
            apply_per_call: 0.0,
            apply_per_pair: 0.0,
            per_element: 0.0,
            evaluate: 0.0,
        }
    }

    /// The modelled cost of `work` (without straggler delay). Kinds of work this version
    /// does not know cost nothing.
    pub fn of(&self, work: Work) -> Duration {
        let secs = match work {
            Work::Compute { samples, .. } => {
                self.compute_per_clock + self.compute_per_sample * samples as f64
            }
            Work::Apply { pairs, .. } => self.apply_per_call + self.apply_per_pair * pairs as f64,
            Work::Dense { matrices, j, d } => {
                self.per_element * matrices as f64 * j as f64 * d as f64
            }
            Work::CheckW { j, d } => self.per_element * j as f64 * d as f64,
            Work::Evaluate => self.evaluate,
            _ => 0.0,
        };
        // At most a year: a bad cost must not overflow the clock.
        if secs.is_finite() && secs > 0.0 {
            Duration::from_secs_f64(secs.min(365.0 * 86_400.0))
        } else {
            Duration::ZERO
        }
    }
}

/// Node `node` does nothing from virtual time `from` until `until`: it starts no step
/// (a step already under way at `from` completes) and takes no frames; frames sent to it
/// queue on their links and are handed over at `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    /// The paused node.
    pub node: PeerId,
    /// Start of the pause.
    pub from: Duration,
    /// End of the pause (exclusive).
    pub until: Duration,
}

/// The links of `node` are `factor` times slower from `from` until `until`: a frame it
/// sends or is sent in that span takes `factor` times the link delay, and `factor` times
/// as long to leave the sender's NIC (a congested or degraded link, not a cut).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slow {
    /// The node whose links are slow.
    pub node: PeerId,
    /// Start of the span.
    pub from: Duration,
    /// End of the span (exclusive).
    pub until: Duration,
    /// How many times slower, at least 1.
    pub factor: f64,
}

/// The nodes of `side` and the others cannot reach each other from `from` until `until`:
/// frames between the two sides are held on the cut links and handed over when they heal
/// (as a transport holds what it cannot deliver yet). If the cut lasts
/// [`Config::detect_after`], each node learns then that every node across it is lost, as
/// its transport's liveness check would tell it: a node that this leaves without a
/// majority of the run's peers stops (the quorum rule), the others go on without the far
/// side, and a node takes nothing more from a sender it counts lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// The nodes on one side (the rest are on the other).
    pub side: Vec<PeerId>,
    /// Start of the cut.
    pub from: Duration,
    /// End of the cut (exclusive): the link heals.
    pub until: Duration,
}

/// Node `node` crashes at virtual time `at`: it takes no step and no frame from then on
/// (frames it sent before arrive; frames sent to it are dropped), and
/// [`Config::detect_after`] later every node still running learns that it is lost, as
/// the transports' liveness check and loss notices tell them
/// ([`StateMachine::loss_reported`](sfb_core::StateMachine::loss_reported)); the
/// [`Network::repair`](super::Network::repair) function, if given, then rewires them. A
/// node that has finished by `at` is not affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crash {
    /// The node that crashes.
    pub node: PeerId,
    /// When.
    pub at: CrashAt,
}

/// When a [`Crash`] happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashAt {
    /// At this virtual time.
    Time(Duration),
    /// Right after the node completes this clock (its batch of that clock is out).
    Clock(u64),
}

/// Frames number `frames` (0-based, counted per link in sending order) on the directed
/// link `from → to` are lost: sent (and counted in the sender's bytes) but never
/// delivered.
///
/// What the nodes then do, with today's engine (which expects every in-neighbour's
/// clocks in order): losing the last frames of a link (`n..u64::MAX`, a link that breaks)
/// leaves the receiver waiting for a clock that never comes, and the run ends with
/// [`Error::Stalled`] naming whom it waits on; losing a frame in the middle of a stream
/// makes the receiver refuse the next one as out of order ([`Error::Node`] with
/// [`sfb_core::Error::BadClock`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// Sender.
    pub from: PeerId,
    /// Receiver.
    pub to: PeerId,
    /// The lost frames' numbers on the link.
    pub frames: Range<u64>,
}

/// Everything a [`Network`](super::Network) run models. Every field has a documented
/// default; [`validate`](Self::validate) checks it before anything runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seed of the links' delay streams (link `p → q` draws from its own ChaCha8 stream
    /// seeded from `(seed, p, q)`). Default: 0.
    pub seed: u64,
    /// Per-frame link delay. Default: [`Latency::default`].
    pub latency: Latency,
    /// Every node's network interface. Default: unlimited ([`Nic::default`]).
    pub nic: Nic,
    /// Modelled cost of work. Default: [`Costs::default`].
    pub costs: Costs,
    /// Extra virtual compute time of slow nodes. Default: none.
    pub stragglers: Stragglers,
    /// Pauses of nodes. Default: none.
    pub pauses: Vec<Pause>,
    /// Slow links of nodes. Default: none.
    pub slow: Vec<Slow>,
    /// Lost frames. Default: none.
    pub losses: Vec<Loss>,
    /// Crashed nodes. Default: none.
    pub crashes: Vec<Crash>,
    /// Network partitions ([`Partition`]).
    pub partitions: Vec<Partition>,
    /// How long after a crash the others learn of it (the transports' liveness timeout,
    /// plus the notices' way round; modelled as one delay for every node). Default: 1 s.
    pub detect_after: Duration,
    /// Nodes that share hosts' cores ([`Hosts`]). Default: none (every node has a host
    /// to itself and its work takes exactly its cost).
    pub hosts: Option<Hosts>,
    /// Most events (frame arrivals and node wake-ups) a run may process before it fails
    /// with [`Error::EventLimit`]. Default: 10 000 000.
    pub max_events: u64,
    /// Whether each node's per-clock records are kept in the
    /// [`Outcome`](super::Outcome) (O(clocks) memory per node; an
    /// [`Observer`](super::Observer) sees them either way). Default: true.
    pub keep_records: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            seed: 0,
            latency: Latency::default(),
            nic: Nic::default(),
            costs: Costs::default(),
            stragglers: Stragglers::None,
            pauses: Vec::new(),
            slow: Vec::new(),
            losses: Vec::new(),
            crashes: Vec::new(),
            partitions: Vec::new(),
            detect_after: Duration::from_secs(1),
            hosts: None,
            max_events: 10_000_000,
            keep_records: true,
        }
    }
}

impl Config {
    /// Checks the configuration on its own (the nodes a pause or loss names are checked
    /// when the run starts).
    ///
    /// # Errors
    /// [`Error::InvalidLatency`] if `min > max`; [`Error::InvalidPause`] if a pause ends
    /// before it starts; [`Error::InvalidRate`] for a rate that is not positive;
    /// [`Error::InvalidHosts`]; [`Error::EventLimit`] if `max_events` is 0.
    pub fn validate(&self) -> Result<(), Error> {
        let Latency { min, max } = self.latency;
        if min > max {
            return Err(Error::InvalidLatency { min, max });
        }
        if let Some(p) = self.partitions.iter().find(|p| p.from > p.until) {
            return Err(Error::InvalidPartition {
                side: p.side.clone(),
                from: p.from,
                until: p.until,
            });
        }
        if let Some(p) = self.pauses.iter().find(|p| p.from > p.until) {
            return Err(Error::InvalidPause {
                node: p.node,
                from: p.from,
                until: p.until,
            });
        }
        if let Some(w) = self
            .slow
            .iter()
            .find(|w| w.from > w.until || !(w.factor.is_finite() && w.factor >= 1.0))
        {
            return Err(Error::InvalidSlow {
                node: w.node,
                factor: w.factor,
                from: w.from,
                until: w.until,
            });
        }
        for (side, rate) in [
            ("egress", self.nic.egress),
            ("ingress", self.nic.ingress),
            ("transport cpu", self.nic.cpu),
        ] {
            if let Some(r) = rate
                && !(r.is_finite() && r > 0.0)
            {
                return Err(Error::InvalidRate { side, rate: r });
            }
        }
        if let Some(f) = self.nic.frame_cpu
            && !(f.is_finite() && (0.0..=1.0).contains(&f))
        {
            return Err(Error::InvalidFrameCpu { seconds: f });
        }
        if let Some(h) = self.hosts
            && !h.valid()
        {
            return Err(Error::InvalidHosts { hosts: h });
        }
        if self.max_events == 0 {
            return Err(Error::EventLimit {
                limit: 0,
                at: Duration::ZERO,
            });
        }
        Ok(())
    }
}
