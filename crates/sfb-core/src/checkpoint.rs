//! What a node needs to continue exactly from a clock boundary (Bösen's consistent
//! checkpoint), as plain data and bytes. Writing them to disk is the harness's job.
//!
//! # The cut
//! With [`Config::checkpoint_every`](crate::Config::checkpoint_every) = `N`, a node takes
//! its state at every clock `t = N, 2N, …` (below the last) at one point: **about to
//! compute clock `t`, after applying every update of clocks `< t` from every node it
//! waits for, and nothing of a later clock**. To get there it waits, at those clocks only,
//! until every awaited node has delivered `t` clocks (a BSP barrier every `N` clocks: BSP
//! already waits for that; SSP, async and custom barriers wait there once per `N` clocks;
//! async applies only the clocks `< t` at that step). What the node has received of
//! clocks `≥ t` is not part of the state: on resume every node restarts at `t` and
//! recomputes its clock-`t` factors from its restored state (W, optimizer, model state,
//! sampler), so they are bitwise the factors of the interrupted run, and every update is
//! applied exactly once. The set of every node's state at one `t` is a consistent cut;
//! under BSP a resumed run is bitwise the uninterrupted one.
//!
//! An FMS server's state at `t` is taken when it completes clock `t − 1` (its W holds
//! clocks `< t`); an FMS client's when it is about to compute clock `t` on the server's W
//! of clock `t` (the client keeps that W in its state, so a resumed client needs nothing
//! from the server before pushing clock `t`).
//!
//! # Bytes
//! [`NodeState::encode`] writes a small postcard header (role, id, clock, shapes, counters)
//! and then W, the optimizer's state and the model's state as raw little-endian sections;
//! [`NodeState::decode`] checks every length. Versioning, checksums and file names are the
//! harness's.

use ndarray::Array2;
use serde::{Deserialize, Serialize};

use crate::membership::Standing;
use crate::metrics::PeerMetrics;
use crate::wire::MAX_LIFE;
use crate::{Error, PeerId, Result};

/// Which kind of node a state belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    /// An SFB peer ([`Engine`](crate::Engine)).
    Peer,
    /// The FMS parameter server.
    Server,
    /// An FMS client.
    Client,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Peer => "SFB peer",
            Role::Server => "FMS server",
            Role::Client => "FMS client",
        })
    }
}

/// Where a shard's sampler is: the permutation of epoch `epoch` is redrawn from the
/// shard's seed, and `pos` samples of it were drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SamplerState {
    /// Epoch of the current permutation.
    pub epoch: u64,
    /// Samples drawn from it.
    pub pos: usize,
    /// Samples in the shard (a check that the same data is loaded).
    pub len: usize,
}

/// One node's state at a clock boundary; see the [module docs](self).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeState {
    /// What kind of node wrote it.
    pub role: Role,
    /// The node ([`PeerId::SERVER`] for the server).
    pub id: PeerId,
    /// The clock the node computes next (`t`): clocks `< t` are in W.
    pub clock: u64,
    /// The replica (SFB peer, server) or the server's W the client holds.
    pub w: Option<Array2<f32>>,
    /// The optimizer's state ([`Stepper::save_state`](crate::Stepper::save_state)); empty
    /// for a client.
    pub optimizer: Vec<u8>,
    /// The model's own state ([`Model::save_state`](crate::Model::save_state)).
    pub model: Vec<u8>,
    /// What the peer's compressor kept back to send later
    /// ([`Compressor::save_state`](crate::compress::Compressor::save_state)); empty
    /// without `--compress`.
    pub compressor: Vec<u8>,
    /// The gossip mode's consensus state: the public copy, the copies of the
    /// in-neighbours' and the power iteration's warm start
    /// ([`Mixer::save_state`](crate::gossip::Mixer::save_state)); empty outside that mode.
    pub mixer: Vec<u8>,
    /// Relay's state: the clock of each origin expected next and the batches kept for the
    /// peer's children in the relay trees (handed to them again on resume); empty without
    /// `--relay` ([`crate::relay`]).
    pub relay: Vec<u8>,
    /// The sampler of the node's shard (none for the server).
    pub sampler: Option<SamplerState>,
    /// The nodes this one waits for (in-neighbours; the clients; the server), sorted: a
    /// state is refused by a run with another topology.
    pub awaited: Vec<PeerId>,
    /// The writer's [`Membership`](crate::Membership) view when it took the state: each
    /// node with a life after its first or out of the run, sorted by id (any other node is
    /// in, in its first life). A rejoin state carries the donor's view (its counters name
    /// only the losses of its own neighbours), so the node back learns the losses and
    /// returns it missed, with their lives ([`crate::membership`]). Empty in checkpoints.
    pub view: Vec<Standing>,
    /// Counters so far.
    pub metrics: PeerMetrics,
    /// Seconds of the run so far (a resumed run's records continue from it).
    pub wall_s: f64,
    /// The first held-out objective (the divergence check's baseline).
    pub first_objective: Option<f64>,
}

#[derive(Serialize, Deserialize)]
struct Head {
    role: Role,
    id: PeerId,
    clock: u64,
    w: Option<(u64, u64)>,
    optimizer: u64,
    model: u64,
    compressor: u64,
    mixer: u64,
    relay: u64,
    sampler: Option<SamplerState>,
    awaited: Vec<PeerId>,
    view: Vec<Standing>,
    metrics: PeerMetrics,
    wall_s: f64,
    first_objective: Option<f64>,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::Checkpoint {
        reason: reason.into(),
    }
}

impl NodeState {
    /// The state as bytes; see the [module docs](self#bytes).
    pub fn encode(&self) -> Vec<u8> {
        let head = Head {
            role: self.role,
            id: self.id,
            clock: self.clock,
            w: self
                .w
                .as_ref()
                .map(|w| (w.nrows() as u64, w.ncols() as u64)),
            optimizer: self.optimizer.len() as u64,
            model: self.model.len() as u64,
            compressor: self.compressor.len() as u64,
            mixer: self.mixer.len() as u64,
            relay: self.relay.len() as u64,
            sampler: self.sampler,
            awaited: self.awaited.clone(),
            view: self.view.clone(),
            metrics: self.metrics.clone(),
            wall_s: self.wall_s,
            first_objective: self.first_objective,
        };
        let head = postcard::to_allocvec(&head).expect("a head always encodes");
        let w_len = self.w.as_ref().map_or(0, |w| w.len() * 4);
        let mut out =
            Vec::with_capacity(8 + head.len() + w_len + self.optimizer.len() + self.model.len());
        out.extend_from_slice(&(head.len() as u64).to_le_bytes());
        out.extend_from_slice(&head);
        if let Some(w) = &self.w {
            put_f32s_raw(
                &mut out,
                w.as_standard_layout().as_slice().expect("standard"),
            );
        }
        out.extend_from_slice(&self.optimizer);
        out.extend_from_slice(&self.model);
        out.extend_from_slice(&self.compressor);
        out.extend_from_slice(&self.mixer);
        out.extend_from_slice(&self.relay);
        out
    }

    /// Reads what [`encode`](Self::encode) wrote.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming what is truncated, too long or not finite.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = ByteReader::new(bytes);
        let head_len = r.u64().map_err(|_| bad("truncated before its header"))?;
        let head_bytes = r
            .take(usize::try_from(head_len).unwrap_or(usize::MAX))
            .map_err(|_| bad("truncated in its header"))?;
        let head: Head =
            postcard::from_bytes(head_bytes).map_err(|e| bad(format!("malformed header: {e}")))?;
        if let Some(w) = head.view.windows(2).find(|w| w[0].peer >= w[1].peer) {
            return Err(bad(format!(
                "malformed header: its membership view is not sorted by node ({} before {})",
                w[0].peer, w[1].peer
            )));
        }
        if let Some(s) = head.view.iter().find(|s| s.life > MAX_LIFE) {
            return Err(bad(format!(
                "malformed header: its membership view gives {} life {}, past the most a node \
                 can have ({MAX_LIFE})",
                s.peer, s.life
            )));
        }
        let w = match head.w {
            None => None,
            Some((j, d)) => {
                let n = j
                    .checked_mul(d)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| bad(format!("W shape {j}×{d} does not fit in memory")))?;
                let raw = r
                    .take(n.checked_mul(4).ok_or_else(|| bad("W too large"))?)
                    .map_err(|_| bad(format!("truncated in W ({j}×{d})")))?;
                let values = f32s_from_le(raw);
                if let Some(i) = values.iter().position(|x| !x.is_finite()) {
                    return Err(bad(format!("W holds a non-finite value at index {i}")));
                }
                Some(
                    Array2::from_shape_vec((j as usize, d as usize), values)
                        .map_err(|e| bad(format!("W: {e}")))?,
                )
            }
        };
        let optimizer = r
            .take(usize::try_from(head.optimizer).unwrap_or(usize::MAX))
            .map_err(|_| bad("truncated in the optimizer's state"))?
            .to_vec();
        let model = r
            .take(usize::try_from(head.model).unwrap_or(usize::MAX))
            .map_err(|_| bad("truncated in the model's state"))?
            .to_vec();
        let compressor = r
            .take(usize::try_from(head.compressor).unwrap_or(usize::MAX))
            .map_err(|_| bad("truncated in the compressor's state"))?
            .to_vec();
        let mixer = r
            .take(usize::try_from(head.mixer).unwrap_or(usize::MAX))
            .map_err(|_| bad("truncated in the gossip mode's state"))?
            .to_vec();
        let relay = r
            .take(usize::try_from(head.relay).unwrap_or(usize::MAX))
            .map_err(|_| bad("truncated in relay's state"))?
            .to_vec();
        r.finish()
            .map_err(|e| bad(format!("{e} after relay's state")))?;
        Ok(Self {
            role: head.role,
            id: head.id,
            clock: head.clock,
            w,
            optimizer,
            model,
            compressor,
            mixer,
            relay,
            sampler: head.sampler,
            awaited: head.awaited,
            view: head.view,
            metrics: head.metrics,
            wall_s: head.wall_s,
            first_objective: head.first_objective,
        })
    }

    /// Checks that this state can resume node `id` (of kind `role`) waiting for `awaited`
    /// with a `j × d` W in a run of `clocks` clocks.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming the mismatch.
    pub fn check(
        &self,
        role: Role,
        id: PeerId,
        awaited: &[PeerId],
        dim: (usize, usize),
        clocks: u64,
    ) -> Result<()> {
        if self.role != role || self.id != id {
            return Err(bad(format!(
                "written by {}, not by {}",
                who(self.role, self.id),
                who(role, id)
            )));
        }
        let mut want = awaited.to_vec();
        want.sort_unstable();
        if self.awaited != want {
            return Err(bad(format!(
                "written with another topology: {id} waited for {:?}, this run waits for {:?}",
                ids(&self.awaited),
                ids(&want)
            )));
        }
        if let Some(w) = &self.w
            && w.dim() != dim
        {
            return Err(bad(format!(
                "written for another model shape: W is {}×{}, this run's is {}×{}",
                w.nrows(),
                w.ncols(),
                dim.0,
                dim.1
            )));
        }
        if self.clock > clocks {
            return Err(bad(format!(
                "taken at clock {}, past this run's last clock ({clocks})",
                self.clock
            )));
        }
        Ok(())
    }
}

/// `SFB peer p1`, `FMS client p0`, `the FMS server`.
fn who(role: Role, id: PeerId) -> String {
    match role {
        Role::Server => "the FMS server".into(),
        _ => format!("{role} {id}"),
    }
}

fn ids(v: &[PeerId]) -> Vec<u32> {
    v.iter().map(|p| p.0).collect()
}

fn put_f32s_raw(out: &mut Vec<u8>, v: &[f32]) {
    if cfg!(target_endian = "little") {
        out.extend_from_slice(bytemuck::cast_slice(v));
    } else {
        for x in v {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
}

fn f32s_from_le(raw: &[u8]) -> Vec<f32> {
    raw.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Appends length-prefixed sections to a byte buffer: how [`Stepper`](crate::Stepper) and
/// the models write their checkpoint state ([`Model::save_state`](crate::Model::save_state)).
/// Read back with [`ByteReader`] in the same order.
#[derive(Debug, Default, Clone)]
pub struct ByteWriter {
    buf: Vec<u8>,
}

impl ByteWriter {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// One `u64`.
    pub fn u64(&mut self, x: u64) -> &mut Self {
        self.buf.extend_from_slice(&x.to_le_bytes());
        self
    }

    /// A length-prefixed `f32` slice (raw little-endian).
    pub fn f32s(&mut self, v: &[f32]) -> &mut Self {
        self.u64(v.len() as u64);
        put_f32s_raw(&mut self.buf, v);
        self
    }

    /// A length-prefixed `f64` slice.
    pub fn f64s(&mut self, v: &[f64]) -> &mut Self {
        self.u64(v.len() as u64);
        for x in v {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
        self
    }

    /// Length-prefixed bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u64(v.len() as u64);
        self.buf.extend_from_slice(v);
        self
    }

    /// The bytes written.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

/// Reads what a [`ByteWriter`] wrote; every read checks the length left.
#[derive(Debug, Clone)]
pub struct ByteReader<'a> {
    rest: &'a [u8],
}

/// A [`ByteReader`] ran out of bytes, or had some left over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ReadError(String);

impl<'a> ByteReader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], ReadError> {
        if self.rest.len() < n {
            return Err(ReadError(format!(
                "truncated: {n} bytes expected, {} left",
                self.rest.len()
            )));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    /// One `u64`.
    ///
    /// # Errors
    /// Fewer than 8 bytes left.
    pub fn u64(&mut self) -> std::result::Result<u64, ReadError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn len(&mut self, width: usize) -> std::result::Result<usize, ReadError> {
        let n = self.u64()?;
        match usize::try_from(n).ok().and_then(|n| n.checked_mul(width)) {
            Some(bytes) if bytes <= self.rest.len() => Ok(n as usize),
            _ => Err(ReadError(format!(
                "truncated: a section of {n} values, {} bytes left",
                self.rest.len()
            ))),
        }
    }

    /// A length-prefixed `f32` slice; `expect`: the length it must have, if known.
    ///
    /// # Errors
    /// Truncated, or not `expect` long.
    pub fn f32s(&mut self, expect: Option<usize>) -> std::result::Result<Vec<f32>, ReadError> {
        let n = self.len(4)?;
        check_len(n, expect)?;
        Ok(f32s_from_le(self.take(n * 4)?))
    }

    /// A length-prefixed `f64` slice; `expect` as for [`f32s`](Self::f32s).
    ///
    /// # Errors
    /// Truncated, or not `expect` long.
    pub fn f64s(&mut self, expect: Option<usize>) -> std::result::Result<Vec<f64>, ReadError> {
        let n = self.len(8)?;
        check_len(n, expect)?;
        Ok(self
            .take(n * 8)?
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// Length-prefixed bytes.
    ///
    /// # Errors
    /// Truncated.
    pub fn bytes(&mut self) -> std::result::Result<&'a [u8], ReadError> {
        let n = self.len(1)?;
        self.take(n)
    }

    /// Checks that everything was read.
    ///
    /// # Errors
    /// Bytes left over.
    pub fn finish(self) -> std::result::Result<(), ReadError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(ReadError(format!("{} bytes left over", self.rest.len())))
        }
    }
}

fn check_len(n: usize, expect: Option<usize>) -> std::result::Result<(), ReadError> {
    match expect {
        Some(e) if e != n => Err(ReadError(format!(
            "a section of {n} values where {e} were expected"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> NodeState {
        NodeState {
            role: Role::Peer,
            id: PeerId(2),
            clock: 30,
            w: Some(Array2::from_shape_fn((3, 5), |(i, j)| {
                (i * 5 + j) as f32 * 0.25
            })),
            optimizer: ByteWriter::new().f64s(&[1.0, 2.0]).finish(),
            model: vec![7, 8, 9],
            compressor: vec![1, 2],
            mixer: vec![3, 4, 5],
            relay: vec![6, 7],
            sampler: Some(SamplerState {
                epoch: 3,
                pos: 4,
                len: 10,
            }),
            awaited: vec![PeerId(0), PeerId(1)],
            view: vec![
                Standing {
                    peer: PeerId(0),
                    life: 2,
                    out: false,
                },
                Standing {
                    peer: PeerId(3),
                    life: 0,
                    out: true,
                },
            ],
            metrics: PeerMetrics {
                clocks: 30,
                ..PeerMetrics::default()
            },
            wall_s: 1.5,
            first_objective: Some(2.3),
        }
    }

    #[test]
    fn round_trips() {
        let s = state();
        assert_eq!(NodeState::decode(&s.encode()).unwrap(), s);
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let bytes = state().encode();
        for n in 0..bytes.len() {
            let e = NodeState::decode(&bytes[..n]).unwrap_err().to_string();
            assert!(
                e.contains("truncated") || e.contains("malformed"),
                "{n}: {e}"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        let e = NodeState::decode(&long).unwrap_err().to_string();
        assert!(e.contains("left over"), "{e}");
    }

    #[test]
    fn a_view_out_of_order_or_past_the_last_life_is_refused() {
        let mut s = state();
        s.view.swap(0, 1);
        let e = NodeState::decode(&s.encode()).unwrap_err().to_string();
        assert!(e.contains("not sorted by node (p3 before p0)"), "{e}");
        let mut s = state();
        s.view[0].life = MAX_LIFE + 1;
        let e = NodeState::decode(&s.encode()).unwrap_err().to_string();
        assert!(e.contains("past the most a node can have"), "{e}");
        s.view[0].life = MAX_LIFE;
        assert_eq!(NodeState::decode(&s.encode()).unwrap(), s);
    }

    #[test]
    fn a_non_finite_w_is_refused() {
        let mut s = state();
        s.w.as_mut().unwrap()[(1, 1)] = f32::NAN;
        let e = NodeState::decode(&s.encode()).unwrap_err().to_string();
        assert!(e.contains("non-finite"), "{e}");
    }

    #[test]
    fn check_names_the_mismatch() {
        let s = state();
        let aw = [PeerId(1), PeerId(0)];
        s.check(Role::Peer, PeerId(2), &aw, (3, 5), 60).unwrap();
        let e = |r: Result<()>| r.unwrap_err().to_string();
        assert!(e(s.check(Role::Peer, PeerId(1), &aw, (3, 5), 60)).contains("not by SFB peer p1"));
        assert!(e(s.check(Role::Server, PeerId(2), &aw, (3, 5), 60)).contains("FMS server"));
        assert!(e(s.check(Role::Peer, PeerId(2), &[PeerId(0)], (3, 5), 60)).contains("topology"));
        assert!(e(s.check(Role::Peer, PeerId(2), &aw, (4, 5), 60)).contains("model shape"));
        assert!(e(s.check(Role::Peer, PeerId(2), &aw, (3, 5), 20)).contains("past"));
    }

    #[test]
    fn byte_sections_round_trip_and_check_lengths() {
        let bytes = ByteWriter::new()
            .u64(5)
            .f32s(&[1.5, -2.0])
            .f64s(&[3.25])
            .bytes(b"ab")
            .finish();
        let mut r = ByteReader::new(&bytes);
        assert_eq!(r.u64().unwrap(), 5);
        assert_eq!(r.f32s(Some(2)).unwrap(), vec![1.5, -2.0]);
        assert_eq!(r.f64s(None).unwrap(), vec![3.25]);
        assert_eq!(r.bytes().unwrap(), b"ab");
        r.finish().unwrap();
        let mut r = ByteReader::new(&bytes);
        r.u64().unwrap();
        assert!(r.f32s(Some(3)).is_err());
        assert!(ByteReader::new(&bytes[..12]).f32s(None).is_err());
    }
}
