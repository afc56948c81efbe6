//! Wire messages and their byte encoding.
//!
//! A frame is `version: u16 LE`, a `postcard`-encoded header, then the payload as raw
//! little-endian arrays: `u` (K·J f32), then dense `v` (K·D f32) or sparse `v`
//! (K+1 u32 row pointers, nnz u32 indices, nnz f32 values). Arrays are copied as bytes,
//! never element by element through serde. Length prefixes are the transport's business.
//!
//! [`decode`] validates everything before a message exists: version, header, sizes (with
//! overflow checks), exact payload length, known origin, shape, sparse structure and finite
//! values. Any input either decodes to a valid message or yields an [`Error`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Error, FactorBatch, PeerId, Result, VFactors};

#[cfg(target_endian = "big")]
compile_error!("sfb's wire format copies f32 arrays as little-endian bytes");

/// Version written at the start of every frame.
pub const WIRE_VERSION: u16 = 1;

/// A message between peers.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Message {
    /// One peer's factors for one clock.
    Factors {
        /// The factors.
        batch: Arc<FactorBatch>,
        /// The origin's mean iteration time in microseconds (for custom barriers).
        mean_iter_us: u32,
    },
}

impl Message {
    /// Origin peer of the message.
    pub fn origin(&self) -> PeerId {
        match self {
            Message::Factors { batch, .. } => batch.origin,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum Header {
    Factors {
        origin: u32,
        clock: u64,
        scale: f32,
        mean_iter_us: u32,
        k: u32,
        j: u32,
        d: u32,
        nnz: Option<u32>,
    },
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

fn header_of(msg: &Message) -> Header {
    match msg {
        Message::Factors {
            batch,
            mean_iter_us,
        } => Header::Factors {
            origin: batch.origin.0,
            clock: batch.clock,
            scale: batch.scale,
            mean_iter_us: *mean_iter_us,
            k: batch.len() as u32,
            j: batch.j as u32,
            d: batch.d as u32,
            nnz: match &batch.v {
                VFactors::Dense(_) => None,
                VFactors::Sparse { values, .. } => Some(values.len() as u32),
            },
        },
    }
}

/// Exact size in bytes of `msg`'s encoding.
pub fn encoded_len(msg: &Message) -> usize {
    let header = postcard::to_allocvec(&header_of(msg)).map_or(0, |h| h.len());
    let payload = match msg {
        Message::Factors { batch, .. } => {
            4 * (batch.u.len()
                + match &batch.v {
                    VFactors::Dense(v) => v.len(),
                    VFactors::Sparse {
                        indptr,
                        indices,
                        values,
                    } => indptr.len() + indices.len() + values.len(),
                })
        }
    };
    2 + header + payload
}

/// Encodes `msg` into a new buffer.
pub fn encode(msg: &Message) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(msg));
    encode_into(msg, &mut out);
    out
}

/// Appends `msg`'s encoding to `out`.
pub fn encode_into(msg: &Message, out: &mut Vec<u8>) {
    out.extend_from_slice(&WIRE_VERSION.to_le_bytes());
    let header = postcard::to_allocvec(&header_of(msg)).expect("header encodes");
    out.extend_from_slice(&header);
    match msg {
        Message::Factors { batch, .. } => {
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
        }
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
        Ok(bytemuck::pod_collect_to_vec(bytes))
    }

    fn u32s(&mut self, n: usize, what: &str) -> Result<Vec<u32>> {
        let bytes = self.take(n.checked_mul(4).ok_or_else(|| bad("size overflow"))?, what)?;
        Ok(bytemuck::pod_collect_to_vec(bytes))
    }
}

/// Decodes and validates one frame.
///
/// # Errors
/// [`Error::Decode`] for a wrong version, undecodable header, size mismatch or trailing
/// bytes; [`Error::UnknownPeer`] for an origin `≥ peers`; shape, sparse-structure and
/// non-finite errors from [`FactorBatch::validate`].
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
        Header::Factors {
            origin,
            clock,
            scale,
            mean_iter_us,
            k,
            j,
            d,
            nnz,
        } => {
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
            let u = r.f32s(kj, "u")?;
            let v = match nnz {
                None => {
                    let kd = k.checked_mul(d).ok_or_else(|| bad("K·D overflows"))?;
                    VFactors::Dense(r.f32s(kd, "dense v")?)
                }
                Some(nnz) => {
                    let indptr = r.u32s(
                        k.checked_add(1).ok_or_else(|| bad("K overflows"))?,
                        "row pointers",
                    )?;
                    let indices = r.u32s(nnz as usize, "sparse indices")?;
                    let values = r.f32s(nnz as usize, "sparse values")?;
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
            Message::Factors {
                batch: Arc::new(batch),
                mean_iter_us,
            }
        }
    };
    if !r.rest.is_empty() {
        return Err(bad(format!("{} trailing bytes", r.rest.len())));
    }
    Ok(msg)
}
