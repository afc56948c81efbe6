//! Length-delimited frames over a byte stream, and the per-stream handshake.
//!
//! A frame is a `u32` little-endian length followed by that many bytes. Lengths above the
//! receiver's limit are refused before anything is allocated. After the handshake, a frame
//! of zero bytes is a [`HEARTBEAT`]; every other frame is an engine message
//! ([`sfb_core::wire`], membership news and rejoin states included) that the receiver
//! validates in full.

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use serde::{Deserialize, Serialize};

/// Protocol name of sfb's factor streams.
pub const PROTOCOL: &str = "/sfb/factors/1";

/// Version of the handshake and stream protocol (2: [`HEARTBEAT`]s between frames; 3: a
/// rejoin state carries the compressor's residual; 4: its metrics carry the
/// prioritizer's largest-pair energy; 5: stop proposals (`--until`), and metrics carry the
/// agreed stop; 7: membership notices and rejoin states are engine-codec messages
/// ([`sfb_core::wire::Message::Notice`], [`sfb_core::wire::Message::State`]), not a
/// transport format of their own; a peer of another version is refused at the handshake,
/// naming the versions; 8: the reader acknowledges every frame it reads with one
/// [`FRAME_ACK`] byte back on the stream, from which the writer measures the link).
pub const PROTOCOL_VERSION: u32 = 8;

/// The byte a reader writes back on its stream for every frame (not heartbeat) it has read
/// whole: the writer's acknowledgement that the frame is through the link, from which it
/// measures the rate the link carries (the time some frame was unacknowledged).
pub const FRAME_ACK: u8 = 0xAC;

/// A heartbeat as it goes on the wire: the length prefix of an empty frame. A writer sends
/// one when it has sent nothing for a while; the reader takes it as a sign of life and
/// drops it (no engine message encodes to zero bytes, so nothing is ever decoded from it
/// and frame validation is unchanged).
pub const HEARTBEAT: [u8; 4] = 0u32.to_le_bytes();

/// Whether a frame read by [`read_frame`] is a [`HEARTBEAT`].
pub fn is_heartbeat(frame: &[u8]) -> bool {
    frame.is_empty()
}

/// First frame on every stream, from the opener (the sender of factors).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// [`PROTOCOL_VERSION`].
    pub version: u32,
    /// [`sfb_core::wire::WIRE_VERSION`].
    pub wire_version: u16,
    /// Sender's peer index.
    pub peer: u32,
    /// Rows of W.
    pub j: u32,
    /// Columns of W.
    pub d: u32,
    /// Mini-batch size (bounds frame sizes).
    pub batch: u32,
    /// Clocks of the run.
    pub clocks: u64,
    /// The clock the sender starts at: 0, or the checkpoint clock of a resumed run (every
    /// node of a run must resume from the same one).
    pub start: u64,
    /// Hash of the topology (all out-neighbour lists).
    pub topology_hash: u64,
    /// Element encoding of factors on this stream (`f32` or `f16`).
    pub dtype: String,
    /// The training settings every node of the run must share, by name (`model`, `data`,
    /// `seed`, `optimizer`, `lr`, …; [`RunShape::agreement`](crate::p2p::RunShape)): a
    /// stream whose opener trains otherwise is refused, naming the first that differs.
    pub agreement: Vec<(String, String)>,
}

impl Hello {
    /// Why `self` (received) does not match `mine` (what this peer runs), if it does not.
    pub fn mismatch(&self, mine: &Hello) -> Option<String> {
        let checks: [(&str, String, String); 9] = [
            (
                "protocol version",
                self.version.to_string(),
                mine.version.to_string(),
            ),
            (
                "wire version",
                self.wire_version.to_string(),
                mine.wire_version.to_string(),
            ),
            ("J (rows of W)", self.j.to_string(), mine.j.to_string()),
            ("D (columns of W)", self.d.to_string(), mine.d.to_string()),
            ("batch size", self.batch.to_string(), mine.batch.to_string()),
            ("clocks", self.clocks.to_string(), mine.clocks.to_string()),
            (
                "start clock (the checkpoint resumed from)",
                self.start.to_string(),
                mine.start.to_string(),
            ),
            (
                "topology hash",
                format!("{:016x}", self.topology_hash),
                format!("{:016x}", mine.topology_hash),
            ),
            ("wire dtype", self.dtype.clone(), mine.dtype.clone()),
        ];
        let (they, we) = (format!("peer {}", self.peer), format!("peer {}", mine.peer));
        if let Some((what, theirs, ours)) = checks.into_iter().find(|(_, a, b)| a != b) {
            return Some(format!(
                "{what} differs: {they} has {theirs}, {we} has {ours}"
            ));
        }
        agreement_mismatch(&self.agreement, &mine.agreement, &they, &we)
    }
}

/// The first setting in which `theirs` differs from `ours` (both lists of `(name,
/// value)`), in words naming both sides (`they`, `we`: e.g. `peer 2`, `peer 0`), so that
/// the message reads the same in either node's log: `"lr differs: peer 2 has 1e30, peer
/// 0 has 0.05"`.
pub fn agreement_mismatch(
    theirs: &[(String, String)],
    ours: &[(String, String)],
    they: &str,
    we: &str,
) -> Option<String> {
    first_difference(theirs, ours).map(|(name, t, o)| {
        format!(
            "{name} differs: {they} has {}, {we} has {}",
            t.unwrap_or("none stated"),
            o.unwrap_or("none stated")
        )
    })
}

/// The first setting, in `ours`' order (then `theirs`' extra ones), whose value differs
/// between two agreement lists: its name and each side's value (`None`: not stated).
pub fn first_difference<'a>(
    theirs: &'a [(String, String)],
    ours: &'a [(String, String)],
) -> Option<(&'a str, Option<&'a str>, Option<&'a str>)> {
    let find = |list: &'a [(String, String)], name: &str| {
        list.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    ours.iter()
        .map(|(name, o)| (name.as_str(), find(theirs, name), Some(o.as_str())))
        .find(|(_, t, o)| t != o)
        .or_else(|| {
            theirs
                .iter()
                .find(|(n, _)| find(ours, n).is_none())
                .map(|(name, t)| (name.as_str(), Some(t.as_str()), None))
        })
}

/// Reply to a [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// Whether the stream is accepted.
    pub ok: bool,
    /// Why not, when refused.
    pub reason: String,
}

/// Writes one frame.
///
/// # Errors
/// IO errors of the stream; frames over `u32::MAX` bytes.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, payload: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "frame over 4 GiB"))?;
    w.write_all(&len.to_le_bytes()).await?;
    w.write_all(payload).await
}

/// Reads one frame of at most `max` bytes; `Ok(None)` on a clean end of stream.
///
/// # Errors
/// IO errors, a length over `max` ([`std::io::ErrorKind::InvalidData`]), a stream that
/// ends inside a frame.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = r.read(&mut len[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        got += n;
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds the limit of {max}"),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    Ok(Some(buf))
}

/// Encodes a handshake value.
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_allocvec(v).expect("handshake encodes")
}

/// Decodes a handshake value.
///
/// # Errors
/// A description of what could not be decoded.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    postcard::from_bytes(bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod control_tests {
    use super::*;

    #[test]
    fn the_first_differing_setting_is_named() {
        let s = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let m = |t: &[(String, String)], o: &[(String, String)]| {
            agreement_mismatch(t, o, "peer 2", "peer 0")
        };
        let ours = s(&[("model", "mlr"), ("seed", "1"), ("lr", "0.05")]);
        assert_eq!(m(&ours, &ours), None);
        let theirs = s(&[("model", "mlr"), ("seed", "5"), ("lr", "1e30")]);
        assert_eq!(
            m(&theirs, &ours).unwrap(),
            "seed differs: peer 2 has 5, peer 0 has 1"
        );
        let short = s(&[("model", "mlr"), ("seed", "1")]);
        assert_eq!(
            m(&short, &ours).unwrap(),
            "lr differs: peer 2 has none stated, peer 0 has 0.05"
        );
        assert_eq!(
            m(&ours, &short).unwrap(),
            "lr differs: peer 2 has 0.05, peer 0 has none stated"
        );
    }
}
