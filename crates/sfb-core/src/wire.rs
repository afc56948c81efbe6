//! Wire messages and their byte encoding.
//!
//! A frame is `version: u16 LE`, a `postcard`-encoded header, then the payload as raw
//! little-endian arrays. Arrays are copied as bytes, never element by element through
//! serde. Length prefixes are the transport's business. Payloads by kind:
//! - [`Message::Factors`]: `u` (K·J f32), then dense `v` (K·D f32) or sparse `v`
//!   (K+1 u32 row pointers, nnz u32 indices, nnz f32 values);
//! - [`Message::Params`] and [`Message::Delta`] (the FMS backend): a J×D matrix, J·D f32
//!   row-major;
//! - [`Message::Notice`] (membership news: a node lost, back, or leaving): none;
//! - [`Message::State`] (a node's state for a rejoining node): [`NodeState::encode`]'s
//!   bytes;
//! - [`Message::Copy`] (a gossip peer's public copy, for a new out-neighbour): J·D f32
//!   row-major;
//! - [`Message::Fetch`] (an FMS client's request for W, lazy SSP): none;
//! - [`Message::Part`] (an early part of a clock's factors): as `Factors`.
//!
//! [`decode`] validates everything before a message exists: version, header, sizes (with
//! overflow checks), exact payload length, known origin, shape, sparse structure and finite
//! values. Any input either decodes to a valid message or yields an [`Error`].

use std::borrow::Cow;
use std::sync::Arc;

use ndarray::Array2;
use serde::{Deserialize, Serialize};

use crate::replica::validate_dense;
use crate::stop::Stop;
use crate::{Error, FactorBatch, NodeState, PeerId, Result, VFactors};

#[cfg(target_endian = "big")]
compile_error!("sfb's wire format copies f32 arrays as little-endian bytes");

/// Version written at the start of every frame (9: [`Message::Part`], a clock's factors
/// sent in parts as they are computed; 8: a [`Notice`] names the life of the
/// node it is about, and a rejoin state carries its sender's lives and losses; 7:
/// [`Message::Fetch`], an FMS client's
/// request for W under lazy SSP; 6: a rejoin state carries its sender's
/// membership view; 5: the tree mode's sums, [`Message::Sum`]; 4: membership notices, rejoin states and
/// gossip public copies in the one codec; 3: stop proposals; 2: relayed batches).
pub const WIRE_VERSION: u16 = 9;

/// Membership news between nodes ([`Message::Notice`]): what a node learned about
/// another, passed on once by each receiver so that every survivor learns the same set
/// (and so repairs the topology the same way).
///
/// Each names the life of the node it is about (SWIM's incarnation number): 0 for a node's
/// first life, one more each time it comes back. A receiver takes a loss or a leave only
/// if it has the node in at that life or an earlier one, and a return only if it has an
/// earlier life (see [`crate::membership`]); [`decode`] refuses a life past [`MAX_LIFE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Notice {
    /// The node is lost in its life `life`: the sender went on without it.
    Lost {
        /// The node (sfb-core id).
        peer: u32,
        /// The life that ended.
        life: u32,
    },
    /// The node is back (restarted with `--rejoin`), in its life `life`.
    Joined {
        /// The node (sfb-core id).
        peer: u32,
        /// Its new life.
        life: u32,
    },
    /// The node is leaving on request (a planned leave, not a failure), in its life
    /// `life`.
    Left {
        /// The node (sfb-core id).
        peer: u32,
        /// The life that ends.
        life: u32,
    },
}

/// The most lives a node can have: a notice or a rejoin state naming a later one is
/// refused ([`decode`]), and a node back that often is not taken back again. (It keeps
/// [`crate::Membership::epoch`], a sum over the run's nodes, far from overflowing.)
pub const MAX_LIFE: u32 = 1 << 24;

impl Notice {
    /// The node the news is about.
    pub fn about(self) -> PeerId {
        match self {
            Notice::Lost { peer, .. } | Notice::Joined { peer, .. } | Notice::Left { peer, .. } => {
                PeerId(peer)
            }
        }
    }

    /// The life of [`about`](Self::about) the news is about: the life that ended (a loss
    /// or a leave), or the new one (a return).
    pub fn life(self) -> u32 {
        match self {
            Notice::Lost { life, .. } | Notice::Joined { life, .. } | Notice::Left { life, .. } => {
                life
            }
        }
    }
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, peer, life) = match *self {
            Notice::Lost { peer, life } => ("lost", peer, life),
            Notice::Joined { peer, life } => ("back", peer, life),
            Notice::Left { peer, life } => ("left", peer, life),
        };
        write!(f, "{} {what} (life {life})", PeerId(peer))
    }
}

/// A message between peers (SFB), or between an FMS client and the parameter server.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Message {
    /// One peer's factors for one clock (SFB peer → peer; FMS client → server with
    /// factor push).
    Factors {
        /// The factors.
        batch: Arc<FactorBatch>,
        /// The origin's mean iteration time in microseconds (for custom barriers).
        mean_iter_us: u32,
    },
    /// The FMS server's full W once clocks `0..clock` are complete (server → client).
    Params {
        /// Clocks whose updates W includes (all of `0..clock`, nothing later).
        clock: u64,
        /// W, `J × D` (shared: the server sends the same snapshot to every client).
        w: Arc<Array2<f32>>,
    },
    /// One FMS client's dense update `ΔW = scale · Σ u vᵀ` for one clock (client →
    /// server with dense push, the paper's FMS).
    Delta {
        /// The client.
        origin: PeerId,
        /// The client's clock.
        clock: u64,
        /// The client's mean iteration time in microseconds.
        mean_iter_us: u32,
        /// ΔW, `J × D`.
        delta: Arc<Array2<f32>>,
    },
    /// Another peer's factors forwarded along its shortest-path tree (SFB peer → peer
    /// with [`relay`](crate::relay)). Sent in the transmission of the sender's clock
    /// `carrier`: after its own batch of `carrier − 1`, before that of `carrier` (or after
    /// its last, once it has computed every clock).
    Relayed {
        /// The sender's clock whose transmission carries the batch.
        carrier: u64,
        /// The factors, as their origin computed them.
        batch: Arc<FactorBatch>,
    },
    /// A peer's consensus message of one clock in the gossip mode ([`crate::gossip`]): a
    /// few dense pairs its out-neighbours add to their copy of its public replica. Sent
    /// after its factors of the same clock (and before the next clock's).
    Mix {
        /// The pairs (scale 1), origin the sender.
        batch: Arc<FactorBatch>,
    },
    /// A summed part of one clock in the tree mode ([`crate::tree`]): up, a subtree's
    /// compressed sum from a child to its parent (origin the child); down, the clock's
    /// update from the root (origin the root), forwarded verbatim to every peer.
    Sum {
        /// Down the tree (the clock's update) or up (a subtree's sum).
        down: bool,
        /// The pairs.
        batch: Arc<FactorBatch>,
        /// The factored optimizer's statistics of everything summed ([`crate::tree`]):
        /// `J + D` values, or none.
        stats: Arc<[f32]>,
    },
    /// Membership news from `origin`, the sender (see [`Notice`]).
    Notice {
        /// The sender.
        origin: PeerId,
        /// The news.
        notice: Notice,
    },
    /// `origin`'s state at one of its clock boundaries, for a rejoining node (its W,
    /// optimizer state and clock; see [`crate::Engine::adopt`]).
    State {
        /// The sender.
        origin: PeerId,
        /// The state (its W checked against the run's shape and for finite values).
        state: Arc<NodeState>,
    },
    /// A gossip peer's public copy ([`crate::gossip`]) for an out-neighbour that has none
    /// (one gained by a repair, or the peer itself back in the run): the receiver takes it
    /// as its copy of the sender's and folds the sender's consensus messages of clock
    /// `clock` on into it.
    Copy {
        /// The sender.
        origin: PeerId,
        /// The first clock whose consensus message the copy lacks.
        clock: u64,
        /// The public copy, `J × D`.
        w: Arc<Array2<f32>>,
    },
    /// A stop agreed by the stop rules ([`crate::stop`]): sent by the node whose evaluation
    /// met a rule, and forwarded by every node that adopts it, ahead of its next batch (an
    /// FMS server: to every client, ahead of its next W).
    Stop {
        /// The sender ([`PeerId::SERVER`] from the FMS server).
        origin: PeerId,
        /// The stop.
        stop: Stop,
    },
    /// An FMS client's request under lazy SSP ([`crate::fms::Sync::Lazy`]): send me W as
    /// soon as it includes every update of clocks `0..clock` (the server answers with a
    /// [`Message::Params`] of its newest W).
    Fetch {
        /// The client.
        origin: PeerId,
        /// The clocks W must include.
        clock: u64,
    },
    /// An early part of one peer's factors of one clock, sent as soon as it is computed
    /// ([`Config::send_parts`](crate::Config::send_parts)): the receiver keeps it until the
    /// clock's last part, a [`Message::Factors`] with the rest of the pairs, and takes the
    /// clock as one batch of every part's pairs in order (SFB peer → peer).
    Part {
        /// The part's pairs, under the whole clock's scale.
        batch: Arc<FactorBatch>,
    },
}

impl Message {
    /// Origin of the message ([`PeerId::SERVER`] for [`Message::Params`]).
    pub fn origin(&self) -> PeerId {
        match self {
            Message::Factors { batch, .. }
            | Message::Part { batch }
            | Message::Relayed { batch, .. }
            | Message::Mix { batch }
            | Message::Sum { batch, .. } => batch.origin,
            Message::Params { .. } => PeerId::SERVER,
            Message::Delta { origin, .. }
            | Message::Stop { origin, .. }
            | Message::Notice { origin, .. }
            | Message::State { origin, .. }
            | Message::Copy { origin, .. }
            | Message::Fetch { origin, .. } => *origin,
        }
    }

    /// The clock the message belongs to (for `Params`: the clocks W includes; for
    /// `Stop`: the clock after which the rule was met).
    pub fn clock(&self) -> u64 {
        match self {
            Message::Factors { batch, .. }
            | Message::Part { batch }
            | Message::Relayed { batch, .. }
            | Message::Mix { batch }
            | Message::Sum { batch, .. } => batch.clock,
            Message::Params { clock, .. }
            | Message::Delta { clock, .. }
            | Message::Copy { clock, .. }
            | Message::Fetch { clock, .. } => *clock,
            Message::Stop { stop, .. } => stop.clock,
            Message::Notice { .. } => 0,
            Message::State { state, .. } => state.clock,
        }
    }

    /// The kind's name, for errors and logs: `factors`, `relayed`, `mix`, `params`,
    /// `delta`, `sum-up`, `sum-down`, `stop`, `notice`, `state`, `copy`, `fetch` or `part`.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Factors { .. } => "factors",
            Message::Relayed { .. } => "relayed",
            Message::Mix { .. } => "mix",
            Message::Sum { down: false, .. } => "sum-up",
            Message::Sum { down: true, .. } => "sum-down",
            Message::Params { .. } => "params",
            Message::Delta { .. } => "delta",
            Message::Stop { .. } => "stop",
            Message::Notice { .. } => "notice",
            Message::State { .. } => "state",
            Message::Copy { .. } => "copy",
            Message::Fetch { .. } => "fetch",
            Message::Part { .. } => "part",
        }
    }
}

/// The header of a factor batch. (A newtype variant holding this struct encodes to the
/// same bytes as a struct variant with these fields.)
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct FactorsHeader {
    origin: u32,
    clock: u64,
    scale: f32,
    mean_iter_us: u32,
    k: u32,
    j: u32,
    d: u32,
    nnz: Option<u32>,
}

// Variant order is part of the wire format (postcard encodes the variant index).
#[derive(Debug, Serialize, Deserialize)]
enum Header {
    Factors(FactorsHeader),
    Params {
        clock: u64,
        j: u32,
        d: u32,
    },
    Delta {
        origin: u32,
        clock: u64,
        mean_iter_us: u32,
        j: u32,
        d: u32,
    },
    /// As `Factors`, with `u` and the `v` values as IEEE half floats (indices stay u32).
    FactorsF16(FactorsHeader),
    /// A relayed batch (its `mean_iter_us` is 0): the factors header and payload of its
    /// origin's batch, carried by the sender's clock `carrier`.
    Relayed {
        carrier: u64,
        factors: FactorsHeader,
    },
    /// As `Relayed`, with half-float values.
    RelayedF16 {
        carrier: u64,
        factors: FactorsHeader,
    },
    /// A consensus message (dense pairs, always f32: they are differences of replicas).
    Mix(FactorsHeader),
    /// A tree-mode sum (always f32); the payload is the factors, then `stats` f32s.
    Sum {
        down: bool,
        factors: FactorsHeader,
        stats: u32,
    },
    /// A stop proposal; no payload.
    Stop {
        origin: u32,
        stop: Stop,
    },
    /// Membership news; no payload.
    Notice {
        origin: u32,
        notice: Notice,
    },
    /// A rejoin state; the payload is [`NodeState::encode`]'s bytes.
    State {
        origin: u32,
    },
    /// A public copy, J·D f32.
    Copy {
        origin: u32,
        clock: u64,
        j: u32,
        d: u32,
    },
    /// An FMS client's request for W; no payload.
    Fetch {
        origin: u32,
        clock: u64,
    },
    /// An early part of a clock's factors: as `Factors` (its `mean_iter_us` is 0).
    Part(FactorsHeader),
    /// As `Part`, with half-float values.
    PartF16(FactorsHeader),
}

/// Element encoding of factor values on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Dtype {
    /// 4 bytes per value, exact.
    #[default]
    F32,
    /// 2 bytes per value (IEEE binary16). Used only for batches whose values all fit
    /// ([`fits_f16`]); others go as f32. Senders apply the rounded values themselves
    /// ([`round_to_f16`]) so every replica applies the same numbers.
    F16,
}

/// Error parsing a wire dtype name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown wire dtype {0:?} (f32 or f16)")]
pub struct ParseDtypeError(pub String);

impl std::str::FromStr for Dtype {
    type Err = ParseDtypeError;
    fn from_str(s: &str) -> std::result::Result<Self, ParseDtypeError> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(Dtype::F32),
            "f16" => Ok(Dtype::F16),
            _ => Err(ParseDtypeError(s.to_string())),
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
        })
    }
}

/// Largest finite half float.
const F16_MAX: f32 = 65504.0;

fn v_values(batch: &FactorBatch) -> &[f32] {
    match &batch.v {
        VFactors::Dense(v) => v,
        VFactors::Sparse { values, .. } => values,
    }
}

/// Whether every `u` and `v` value of `batch` is within half-float range.
pub fn fits_f16(batch: &FactorBatch) -> bool {
    batch
        .u
        .iter()
        .chain(v_values(batch))
        .all(|x| x.abs() <= F16_MAX)
}

/// Rounds every `u` and `v` value to the nearest half float (in place), if all fit;
/// returns whether it did. What a receiver of the f16 encoding decodes.
pub fn round_to_f16(batch: &mut FactorBatch) -> bool {
    if !fits_f16(batch) {
        return false;
    }
    let round = |xs: &mut [f32]| {
        for x in xs {
            *x = half::f16::from_f32(*x).to_f32();
        }
    };
    round(&mut batch.u);
    match &mut batch.v {
        VFactors::Dense(v) => round(v),
        VFactors::Sparse { values, .. } => round(values),
    }
    true
}

/// The factor batch a message carries, if it carries one.
fn batch_of(msg: &Message) -> Option<&FactorBatch> {
    match msg {
        Message::Factors { batch, .. }
        | Message::Part { batch }
        | Message::Relayed { batch, .. } => Some(batch),
        Message::Params { .. }
        | Message::Delta { .. }
        | Message::Mix { .. }
        | Message::Sum { .. }
        | Message::Stop { .. }
        | Message::Notice { .. }
        | Message::State { .. }
        | Message::Copy { .. }
        | Message::Fetch { .. } => None,
    }
}

fn uses_f16(msg: &Message, dtype: Dtype) -> bool {
    dtype == Dtype::F16 && batch_of(msg).is_some_and(fits_f16)
}

/// Frames a node sends each out-neighbour per clock, at most: one factor batch and, in the
/// gossip mode ([`crate::gossip`]), one consensus message (SFB peer); one factor batch
/// (FMS client); one full W (FMS server, to each client). Transports size their per-edge
/// queues in these units.
pub const FRAMES_PER_EDGE_PER_CLOCK: usize = 2;

/// Fixed bytes a frame may carry besides its arrays (header, lengths, tags); generous.
const FRAME_OVERHEAD: usize = 256;

/// The largest valid frame of a run whose W is `j × d` and whose mini-batches hold
/// `batch` samples: a factor batch of `batch` pairs whose `v` is dense or sparse with every
/// column present (`u`: `batch·j` floats; sparse `v`: `batch + 1` row pointers, `batch·d`
/// indices and `batch·d` values), or, when `full_w` (an FMS run), a full W or dense ΔW.
/// A reader refuses a longer length prefix before allocating anything.
///
/// # Complexity
/// O(1).
pub fn max_frame_len(j: usize, d: usize, batch: usize, full_w: bool) -> usize {
    let k = batch;
    let factors = FRAME_OVERHEAD
        .saturating_add(4usize.saturating_mul(k.saturating_mul(j)))
        .saturating_add(4usize.saturating_mul(k.saturating_mul(d).saturating_mul(2)))
        .saturating_add(4 * (k + 1));
    if full_w {
        factors.max(FRAME_OVERHEAD.saturating_add(4usize.saturating_mul(j.saturating_mul(d))))
    } else {
        factors
    }
}

/// What a receiver expects of incoming frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// Rows of W.
    pub j: usize,
    /// Columns of W.
    pub d: usize,
    /// Number of peers (origins must be `< peers`).
    pub peers: usize,
}

fn header_with(msg: &Message, half: bool) -> Header {
    match (header_of(msg), half) {
        (Header::Factors(h), true) => Header::FactorsF16(h),
        (Header::Relayed { carrier, factors }, true) => Header::RelayedF16 { carrier, factors },
        (Header::Part(h), true) => Header::PartF16(h),
        (h, _) => h,
    }
}

fn factors_header(batch: &FactorBatch, mean_iter_us: u32) -> FactorsHeader {
    FactorsHeader {
        origin: batch.origin.0,
        clock: batch.clock,
        scale: batch.scale,
        mean_iter_us,
        k: batch.len() as u32,
        j: batch.j as u32,
        d: batch.d as u32,
        nnz: match &batch.v {
            VFactors::Dense(_) => None,
            VFactors::Sparse { values, .. } => Some(values.len() as u32),
        },
    }
}

fn header_of(msg: &Message) -> Header {
    match msg {
        Message::Factors {
            batch,
            mean_iter_us,
        } => Header::Factors(factors_header(batch, *mean_iter_us)),
        Message::Relayed { carrier, batch } => Header::Relayed {
            carrier: *carrier,
            factors: factors_header(batch, 0),
        },
        Message::Mix { batch } => Header::Mix(factors_header(batch, 0)),
        Message::Part { batch } => Header::Part(factors_header(batch, 0)),
        Message::Sum { down, batch, stats } => Header::Sum {
            down: *down,
            factors: factors_header(batch, 0),
            stats: stats.len() as u32,
        },
        Message::Params { clock, w } => Header::Params {
            clock: *clock,
            j: w.nrows() as u32,
            d: w.ncols() as u32,
        },
        Message::Delta {
            origin,
            clock,
            mean_iter_us,
            delta,
        } => Header::Delta {
            origin: origin.0,
            clock: *clock,
            mean_iter_us: *mean_iter_us,
            j: delta.nrows() as u32,
            d: delta.ncols() as u32,
        },
        Message::Stop { origin, stop } => Header::Stop {
            origin: origin.0,
            stop: *stop,
        },
        Message::Notice { origin, notice } => Header::Notice {
            origin: origin.0,
            notice: *notice,
        },
        Message::State { origin, .. } => Header::State { origin: origin.0 },
        Message::Copy { origin, clock, w } => Header::Copy {
            origin: origin.0,
            clock: *clock,
            j: w.nrows() as u32,
            d: w.ncols() as u32,
        },
        Message::Fetch { origin, clock } => Header::Fetch {
            origin: origin.0,
            clock: *clock,
        },
    }
}

/// A matrix's entries in row-major order (borrowed when it is in standard layout).
fn row_major(m: &Array2<f32>) -> Cow<'_, [f32]> {
    match m.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(m.iter().copied().collect()),
    }
}

/// Exact size in bytes of `msg`'s encoding.
pub fn encoded_len(msg: &Message) -> usize {
    encoded_len_with(msg, Dtype::F32)
}

/// Exact size in bytes of `msg`'s encoding with factor values as `dtype`.
pub fn encoded_len_with(msg: &Message, dtype: Dtype) -> usize {
    let half = uses_f16(msg, dtype);
    let header = postcard::to_allocvec(&header_with(msg, half)).map_or(0, |h| h.len());
    let value = if half { 2 } else { 4 };
    let payload = match msg {
        Message::Factors { batch, .. }
        | Message::Part { batch }
        | Message::Relayed { batch, .. }
        | Message::Mix { batch }
        | Message::Sum { batch, .. } => {
            value * (batch.u.len() + v_values(batch).len())
                + match &batch.v {
                    VFactors::Dense(_) => 0,
                    VFactors::Sparse {
                        indptr, indices, ..
                    } => 4 * (indptr.len() + indices.len()),
                }
                + match msg {
                    Message::Sum { stats, .. } => 4 * stats.len(),
                    _ => 0,
                }
        }
        Message::Params { w: m, .. }
        | Message::Delta { delta: m, .. }
        | Message::Copy { w: m, .. } => 4 * m.len(),
        Message::Stop { .. } | Message::Notice { .. } | Message::Fetch { .. } => 0,
        Message::State { state, .. } => state.encode().len(),
    };
    2 + header + payload
}

/// Exact size in bytes of a dense-matrix frame of `rows × cols`, without the matrix: a
/// [`Message::Delta`] when `delta`, else a [`Message::Params`] (the same as
/// [`encoded_len`] of one). For pricing shapes no memory holds (`sfb plan` at J = 325k,
/// D = 20k).
pub fn dense_frame_len(delta: bool, clock: u64, rows: usize, cols: usize) -> usize {
    let (j, d) = (rows as u32, cols as u32);
    let header = if delta {
        Header::Delta {
            origin: 0,
            clock,
            mean_iter_us: 100_000,
            j,
            d,
        }
    } else {
        Header::Params { clock, j, d }
    };
    let header = postcard::to_allocvec(&header).map_or(0, |h| h.len());
    2 + header + 4 * rows * cols
}

/// Encodes `msg` into a new buffer.
pub fn encode(msg: &Message) -> Vec<u8> {
    encode_with(msg, Dtype::F32)
}

/// Encodes `msg` with factor values as `dtype` (f16 only where every value fits).
pub fn encode_with(msg: &Message, dtype: Dtype) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len_with(msg, dtype));
    encode_into_with(msg, dtype, &mut out);
    out
}

/// Appends `msg`'s encoding to `out`.
pub fn encode_into(msg: &Message, out: &mut Vec<u8>) {
    encode_into_with(msg, Dtype::F32, out);
}

fn push_f16(out: &mut Vec<u8>, xs: &[f32]) {
    use half::slice::HalfFloatSliceExt;
    let mut h = vec![half::f16::ZERO; xs.len()];
    h.convert_from_f32_slice(xs);
    out.extend_from_slice(bytemuck::cast_slice(&h));
}

/// Appends `msg`'s encoding with factor values as `dtype` to `out`.
pub fn encode_into_with(msg: &Message, dtype: Dtype, out: &mut Vec<u8>) {
    out.extend_from_slice(&WIRE_VERSION.to_le_bytes());
    let half = uses_f16(msg, dtype);
    let header = postcard::to_allocvec(&header_with(msg, half)).expect("header encodes");
    out.extend_from_slice(&header);
    match msg {
        Message::Factors { batch, .. }
        | Message::Part { batch }
        | Message::Relayed { batch, .. }
            if half =>
        {
            push_f16(out, &batch.u);
            if let VFactors::Sparse {
                indptr, indices, ..
            } = &batch.v
            {
                out.extend_from_slice(bytemuck::cast_slice(indptr));
                out.extend_from_slice(bytemuck::cast_slice(indices));
            }
            push_f16(out, v_values(batch));
        }
        Message::Factors { batch, .. }
        | Message::Part { batch }
        | Message::Relayed { batch, .. }
        | Message::Mix { batch }
        | Message::Sum { batch, .. } => {
            out.extend_from_slice(bytemuck::cast_slice(&batch.u));
            match &batch.v {
                VFactors::Dense(v) => out.extend_from_slice(bytemuck::cast_slice(v)),
                VFactors::Sparse {
                    indptr,
                    indices,
                    values,
                } => {
                    out.extend_from_slice(bytemuck::cast_slice(indptr));
                    out.extend_from_slice(bytemuck::cast_slice(indices));
                    out.extend_from_slice(bytemuck::cast_slice(values));
                }
            }
            if let Message::Sum { stats, .. } = msg {
                out.extend_from_slice(bytemuck::cast_slice(stats));
            }
        }
        Message::Params { w: m, .. }
        | Message::Delta { delta: m, .. }
        | Message::Copy { w: m, .. } => {
            out.extend_from_slice(bytemuck::cast_slice(&row_major(m)));
        }
        Message::Stop { .. } | Message::Notice { .. } | Message::Fetch { .. } => {}
        Message::State { state, .. } => out.extend_from_slice(&state.encode()),
    }
}

fn bad(reason: impl Into<String>) -> Error {
    Error::Decode {
        reason: reason.into(),
    }
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(bad(format!(
                "truncated {what}: need {n} bytes, {} left",
                self.rest.len()
            )));
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }

    fn f32s(&mut self, n: usize, what: &str) -> Result<Vec<f32>> {
        let bytes = self.take(n.checked_mul(4).ok_or_else(|| bad("size overflow"))?, what)?;
        // One allocation, no zero-fill; the payload need not be 4-byte aligned.
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    fn f16s(&mut self, n: usize, what: &str) -> Result<Vec<f32>> {
        use half::slice::HalfFloatSliceExt;
        let bytes = self.take(n.checked_mul(2).ok_or_else(|| bad("size overflow"))?, what)?;
        let h: Vec<half::f16> = bytemuck::pod_collect_to_vec(bytes);
        let mut out = vec![0f32; n];
        h.convert_to_f32_slice(&mut out);
        Ok(out)
    }

    fn values(&mut self, n: usize, half: bool, what: &str) -> Result<Vec<f32>> {
        if half {
            self.f16s(n, what)
        } else {
            self.f32s(n, what)
        }
    }

    fn u32s(&mut self, n: usize, what: &str) -> Result<Vec<u32>> {
        let bytes = self.take(n.checked_mul(4).ok_or_else(|| bad("size overflow"))?, what)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// A factor batch described by `h` (values as half floats when `half`), validated.
    fn factors(&mut self, h: FactorsHeader, half: bool, expect: &Expect) -> Result<FactorBatch> {
        let FactorsHeader {
            origin,
            clock,
            scale,
            mean_iter_us: _,
            k,
            j,
            d,
            nnz,
        } = h;
        let origin = PeerId(origin);
        if origin.index() >= expect.peers {
            return Err(Error::UnknownPeer {
                origin,
                peers: expect.peers,
            });
        }
        let (k, j, d) = (k as usize, j as usize, d as usize);
        if j != expect.j {
            return Err(Error::DimensionMismatch {
                what: format!("J (rows of W) in frame from {origin}"),
                expected: expect.j,
                got: j,
            });
        }
        if d != expect.d {
            return Err(Error::DimensionMismatch {
                what: format!("D (columns of W) in frame from {origin}"),
                expected: expect.d,
                got: d,
            });
        }
        let kj = k.checked_mul(j).ok_or_else(|| bad("K·J overflows"))?;
        let u = self.values(kj, half, "u")?;
        let v = match nnz {
            None => {
                let kd = k.checked_mul(d).ok_or_else(|| bad("K·D overflows"))?;
                VFactors::Dense(self.values(kd, half, "dense v")?)
            }
            Some(nnz) => {
                let indptr = self.u32s(
                    k.checked_add(1).ok_or_else(|| bad("K overflows"))?,
                    "row pointers",
                )?;
                let indices = self.u32s(nnz as usize, "sparse indices")?;
                let values = self.values(nnz as usize, half, "sparse values")?;
                VFactors::Sparse {
                    indptr,
                    indices,
                    values,
                }
            }
        };
        let batch = FactorBatch {
            origin,
            clock,
            scale,
            j,
            d,
            u,
            v,
        };
        if batch.len() != k {
            return Err(bad("pair count disagrees with header"));
        }
        batch.validate(expect.j, expect.d)?;
        Ok(batch)
    }

    /// A `j × d` matrix from `origin` (shape checked against `expect` before reading).
    fn matrix(
        &mut self,
        j: u32,
        d: u32,
        expect: &Expect,
        origin: PeerId,
        what: &'static str,
    ) -> Result<Array2<f32>> {
        let (j, d) = (j as usize, d as usize);
        for (name, got, expected) in [("J (rows)", j, expect.j), ("D (columns)", d, expect.d)] {
            if got != expected {
                return Err(Error::DimensionMismatch {
                    what: format!("{name} of {what} in frame from {origin}"),
                    expected,
                    got,
                });
            }
        }
        let n = j.checked_mul(d).ok_or_else(|| bad("J·D overflows"))?;
        let values = self.f32s(n, what)?;
        let m = Array2::from_shape_vec((j, d), values).map_err(|e| bad(format!("{what}: {e}")))?;
        validate_dense(m.view(), j, d, origin, what)?;
        Ok(m)
    }
}

/// A node of the run: a peer (an origin `< peers`) or the FMS server.
fn known(origin: u32, expect: &Expect) -> Result<PeerId> {
    let origin = PeerId(origin);
    if origin != PeerId::SERVER && origin.index() >= expect.peers {
        return Err(Error::UnknownPeer {
            origin,
            peers: expect.peers,
        });
    }
    Ok(origin)
}

/// Decodes and validates one frame.
///
/// # Errors
/// [`Error::Decode`] for a wrong version, undecodable header, size mismatch or trailing
/// bytes; [`Error::UnknownPeer`] for an origin `≥ peers`; shape, sparse-structure and
/// non-finite errors from [`FactorBatch::validate`] (factors) and
/// [`validate_dense`] (full W and dense ΔW).
pub fn decode(bytes: &[u8], expect: &Expect) -> Result<Message> {
    if bytes.len() < 2 {
        return Err(bad("frame shorter than its version field"));
    }
    let version = u16::from_le_bytes([bytes[0], bytes[1]]);
    if version != WIRE_VERSION {
        return Err(bad(format!(
            "wire version {version}, this peer speaks {WIRE_VERSION}"
        )));
    }
    let (header, rest): (Header, &[u8]) =
        postcard::take_from_bytes(&bytes[2..]).map_err(|e| bad(format!("header: {e}")))?;
    let mut r = Reader { rest };
    let msg = match header {
        Header::Factors(h) | Header::FactorsF16(h) => {
            let half = matches!(header, Header::FactorsF16(_));
            let mean_iter_us = h.mean_iter_us;
            Message::Factors {
                batch: Arc::new(r.factors(h, half, expect)?),
                mean_iter_us,
            }
        }
        Header::Part(h) | Header::PartF16(h) => {
            let half = matches!(header, Header::PartF16(_));
            Message::Part {
                batch: Arc::new(r.factors(h, half, expect)?),
            }
        }
        Header::Relayed { carrier, factors } | Header::RelayedF16 { carrier, factors } => {
            let half = matches!(header, Header::RelayedF16 { .. });
            Message::Relayed {
                carrier,
                batch: Arc::new(r.factors(factors, half, expect)?),
            }
        }
        Header::Mix(h) => {
            if h.nnz.is_some() {
                return Err(bad("a consensus message with sparse v"));
            }
            Message::Mix {
                batch: Arc::new(r.factors(h, false, expect)?),
            }
        }
        Header::Sum {
            down,
            factors,
            stats,
        } => {
            let batch = r.factors(factors, false, expect)?;
            let n = stats as usize;
            if n != 0 && n != expect.j + expect.d {
                return Err(bad(format!(
                    "a tree sum with {n} optimizer statistics (0 or J + D = {} expected)",
                    expect.j + expect.d
                )));
            }
            let stats: Arc<[f32]> = r.f32s(n, "optimizer statistics")?.into();
            if stats.iter().any(|x| !(x.is_finite() && *x >= 0.0)) {
                return Err(bad(
                    "a tree sum's optimizer statistics are negative or not finite",
                ));
            }
            Message::Sum {
                down,
                batch: Arc::new(batch),
                stats,
            }
        }
        Header::Params { clock, j, d } => {
            let w = r.matrix(j, d, expect, PeerId::SERVER, "W")?;
            Message::Params {
                clock,
                w: Arc::new(w),
            }
        }
        Header::Delta {
            origin,
            clock,
            mean_iter_us,
            j,
            d,
        } => {
            let origin = PeerId(origin);
            if origin.index() >= expect.peers {
                return Err(Error::UnknownPeer {
                    origin,
                    peers: expect.peers,
                });
            }
            let delta = r.matrix(j, d, expect, origin, "dense ΔW")?;
            Message::Delta {
                origin,
                clock,
                mean_iter_us,
                delta: Arc::new(delta),
            }
        }
        Header::Stop { origin, stop } => {
            let origin = known(origin, expect)?;
            if stop.by as usize >= expect.peers {
                return Err(bad(format!(
                    "a stop proposed by node {} of {}",
                    stop.by, expect.peers
                )));
            }
            if stop.at <= stop.clock || !stop.value.is_finite() {
                return Err(bad(format!(
                    "a stop at clock {} met after clock {} with value {}",
                    stop.at, stop.clock, stop.value
                )));
            }
            Message::Stop { origin, stop }
        }
        Header::Notice { origin, notice } => {
            let origin = known(origin, expect)?;
            let about = notice.about();
            if about == PeerId::SERVER || about.index() >= expect.peers {
                return Err(bad(format!("news about node {about} of {}", expect.peers)));
            }
            if notice.life() > MAX_LIFE {
                return Err(bad(format!(
                    "news about {about}'s life {}, past the most a node can have ({MAX_LIFE})",
                    notice.life()
                )));
            }
            Message::Notice { origin, notice }
        }
        Header::Fetch { origin, clock } => {
            let origin = PeerId(origin);
            if origin.index() >= expect.peers {
                return Err(Error::UnknownPeer {
                    origin,
                    peers: expect.peers,
                });
            }
            Message::Fetch { origin, clock }
        }
        Header::State { origin } => {
            let origin = known(origin, expect)?;
            let state = NodeState::decode(std::mem::take(&mut r.rest))
                .map_err(|e| bad(format!("a rejoin state: {e}")))?;
            if let Some(s) = state
                .view
                .iter()
                .find(|s| s.peer == PeerId::SERVER || s.peer.index() >= expect.peers)
            {
                return Err(bad(format!(
                    "a rejoin state whose view names node {} of {}",
                    s.peer, expect.peers
                )));
            }
            let w = state
                .w
                .as_ref()
                .ok_or_else(|| bad("a rejoin state without W"))?;
            validate_dense(
                w.view(),
                expect.j,
                expect.d,
                origin,
                "the W of a rejoin state",
            )?;
            Message::State {
                origin,
                state: Arc::new(state),
            }
        }
        Header::Copy {
            origin,
            clock,
            j,
            d,
        } => {
            let origin = known(origin, expect)?;
            let w = r.matrix(j, d, expect, origin, "public copy")?;
            Message::Copy {
                origin,
                clock,
                w: Arc::new(w),
            }
        }
    };
    if !r.rest.is_empty() {
        return Err(bad(format!("{} trailing bytes", r.rest.len())));
    }
    Ok(msg)
}
