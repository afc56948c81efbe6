//! Checkpoints on disk: one file per node and checkpoint clock, written atomically, read
//! back with every check a resumed run needs.
//!
//! The state in a file is a node's [`NodeState`] at a clock boundary (see
//! [`sfb_core::checkpoint`] for the cut and why a set of them at one clock is consistent).
//! A **cluster-wide consistent point** is the latest clock at which every node of the run
//! has a file; `--resume` restarts every node from there.
//!
//! # Files
//! `DIR/<node>.c<clock>.sfbck`, `<node>` = `peer-3` (SFB), `client-3` or `server` (FMS),
//! `<clock>` zero-padded to 10 digits. Layout:
//!
//! | bytes | what |
//! |---|---|
//! | 8 | magic `SFBCKPT\n` |
//! | 4 | format version ([`FORMAT`]), little-endian |
//! | 4 + n | length and JSON of the [`Meta`] (readable with `head -c 300`) |
//! | 8 + m | length and bytes of [`NodeState::encode`] |
//! | 4 | CRC-32 of everything after the magic |
//!
//! A file is written to `DIR/.<name>.tmp`, fsynced, renamed over its final name and the
//! directory fsynced, so a crash leaves either the old set of files or the new one, never a
//! torn file under a final name. Each node then deletes its own files beyond the newest
//! `keep`.
//!
//! # Example
//! ```
//! use sfb_core::{NodeState, PeerId, Role};
//! use sfb_harness::checkpoint::{Meta, Store};
//! let dir = tempfile::tempdir()?;
//! let meta = Meta::new("sfb", "mlr", 2, 0x1234);
//! let store = Store::open(dir.path(), 2, meta.clone())?;
//! let state = |id, clock| NodeState {
//!     role: Role::Peer,
//!     id: PeerId(id),
//!     clock,
//!     w: Some(ndarray::Array2::zeros((2, 3))),
//!     optimizer: vec![0; 16],
//!     model: Vec::new(),
//!     compressor: Vec::new(),
//!     mixer: Vec::new(),
//!     relay: Vec::new(),
//!     sampler: None,
//!     awaited: vec![PeerId(1 - id)],
//!     view: Vec::new(),
//!     metrics: Default::default(),
//!     wall_s: 0.0,
//!     first_objective: None,
//! };
//! for clock in [10, 20, 30] {
//!     store.save(&state(0, clock))?;
//! }
//! store.save(&state(1, 20))?;
//! // Peer 0 kept its newest two; the latest clock both peers have is 20.
//! assert_eq!(store.clocks(Role::Peer, PeerId(0))?, vec![20, 30]);
//! let nodes = [(Role::Peer, PeerId(0)), (Role::Peer, PeerId(1))];
//! assert_eq!(store.consistent_point(&nodes)?, 20);
//! assert_eq!(store.load(Role::Peer, PeerId(1), 20)?.clock, 20);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sfb_core::{NodeState, PeerId, Role};

use crate::{Error, Result};

/// Magic bytes at the start of every checkpoint file.
pub const MAGIC: &[u8; 8] = b"SFBCKPT\n";

/// The file format version this build writes and reads (11: a node's state holds its
/// membership view as lives and losses, [`NodeState::view`], so a version-10 node state
/// with losses does not decode; 10: a node's metrics carry an FMS
/// client's clock differentials; 9: a node's state holds the
/// membership view it was taken under, so a version-8 node state does not decode; 8: a
/// node's state holds relay's
/// next clocks and kept batches, so a version-7 node state does not decode; 7: the meta
/// carries the run's
/// agreement, so a run with another seed, step size or data is refused on resume; 6: a
/// node's metrics carry the
/// stop its stop rules agreed; 5: the gossip mode's state holds
/// the consensus messages of the clock before the cut, folded a clock later; 4: a node's state holds the
/// gossip mode's consensus state, so a version-3 node state does not decode; 3: a node's
/// metrics carry the prioritizer's largest-pair energy).
pub const FORMAT: u32 = 11;

/// What run a checkpoint belongs to; a resumed run refuses a file whose meta differs from
/// its own (the node's own checks then cover shape, topology, optimizer and data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The sfb version that wrote it.
    pub sfb: String,
    /// `sfb` or `fms`.
    pub backend: String,
    /// The model (`mlr`, `l2mlr`, …, or a custom model's name).
    pub model: String,
    /// Peers (FMS: clients).
    pub peers: usize,
    /// A hash of the topology's out-lists (0 for FMS).
    pub topology: u64,
    /// The settings every node of the run shared
    /// ([`Builder::agreement`](crate::Builder::agreement)): a run resumed with another
    /// seed, step size, optimizer, consistency model or data is refused, naming the first.
    #[serde(default)]
    pub agreement: Vec<(String, String)>,
}

impl Meta {
    /// The meta of a run of this sfb version.
    pub fn new(backend: &str, model: &str, peers: usize, topology: u64) -> Self {
        Self {
            sfb: env!("CARGO_PKG_VERSION").into(),
            backend: backend.into(),
            model: model.into(),
            peers,
            topology,
            agreement: Vec::new(),
        }
    }

    /// The meta with the run's agreement ([`Meta::agreement`]).
    pub fn with_agreement(mut self, agreement: Vec<(String, String)>) -> Self {
        self.agreement = agreement;
        self
    }

    /// The first field in which `self` (a file's) differs from `run` (this run's), in words.
    fn mismatch(&self, run: &Meta) -> Option<String> {
        if self.sfb != run.sfb {
            return Some(format!(
                "written by sfb {}, this is sfb {} (checkpoints are not portable across versions)",
                self.sfb, run.sfb
            ));
        }
        if self.backend != run.backend {
            return Some(format!(
                "written by a {} run, this run is {}",
                self.backend, run.backend
            ));
        }
        if self.model != run.model {
            return Some(format!(
                "written for model {}, this run trains {}",
                self.model, run.model
            ));
        }
        if self.peers != run.peers {
            return Some(format!(
                "written by a run of {} peers, this run has {}",
                self.peers, run.peers
            ));
        }
        if self.topology != run.topology {
            return Some(format!(
                "written with another topology (fingerprint {:016x}, this run's {:016x})",
                self.topology, run.topology
            ));
        }
        sfb_net::frame::first_difference(&self.agreement, &run.agreement).map(
            |(name, file, run)| {
                format!(
                    "written by a run with {name} {}, this run has {}",
                    file.unwrap_or("(not stated)"),
                    run.unwrap_or("(not stated)")
                )
            },
        )
    }
}

/// The fingerprint of a topology's out-lists ([`Meta::topology`]).
pub fn topology_fingerprint(out: &[Vec<usize>]) -> u64 {
    let mut h = crc32fast::Hasher::new();
    let mut h2 = crc32fast::Hasher::new_with_initial(0x5fb);
    for (p, list) in out.iter().enumerate() {
        for x in std::iter::once(p).chain(list.iter().copied()) {
            h.update(&(x as u64).to_le_bytes());
            h2.update(&(x as u64).to_le_bytes());
        }
        h.update(b";");
        h2.update(b";");
    }
    (u64::from(h.finalize()) << 32) | u64::from(h2.finalize())
}

/// The file in a checkpoint directory holding an SFB run's topology (out-lists as JSON),
/// written when the run starts and used by a resumed run.
pub const TOPOLOGY_FILE: &str = "topology.json";

/// Writes `out` (every peer's out-neighbours) to `path` atomically.
///
/// # Errors
/// [`Error::Output`] with the operating system's reason.
pub fn write_topology(path: &Path, out: &[Vec<usize>]) -> Result<()> {
    // Every node of a run on this machine writes the same file: a temporary name of its
    // own, then an atomic rename (same content, last one wins).
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    let err = |source| Error::Output {
        field: "fault.checkpoint_dir",
        path: path.to_path_buf(),
        source,
    };
    let text = serde_json::to_string(out).expect("lists serialize");
    fs::write(&tmp, text + "\n").map_err(err)?;
    fs::rename(&tmp, path).map_err(err)
}

/// Reads what [`write_topology`] wrote; `None` if there is no such file.
///
/// # Errors
/// [`Error::Checkpoint`] for an unreadable or malformed file.
pub fn read_topology(path: &Path) -> Result<Option<Vec<Vec<usize>>>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Checkpoint {
                path: path.to_path_buf(),
                reason: e.to_string(),
            });
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::Checkpoint {
            path: path.to_path_buf(),
            reason: format!("not a list of out-neighbour lists: {e}"),
        })
}

/// File-name stem of a node: `peer-3`, `client-3` or `server`.
pub fn node_name(role: Role, id: PeerId) -> String {
    match role {
        Role::Peer => format!("peer-{}", id.0),
        Role::Client => format!("client-{}", id.0),
        Role::Server => "server".into(),
    }
}

fn describe(role: Role, id: PeerId) -> String {
    match role {
        Role::Peer => format!("peer {}", id.0),
        Role::Client => format!("client {}", id.0),
        Role::Server => "the server".into(),
    }
}

/// A checkpoint directory as one run sees it.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    keep: usize,
    meta: Meta,
}

impl Store {
    /// The store in `dir` (created if needed) for the run described by `meta`, keeping
    /// each node's newest `keep` files. Checks at once that files can be created there, so
    /// an unwritable directory is reported before any training.
    ///
    /// # Errors
    /// [`Error::Output`] (field `fault.checkpoint_dir`) with the operating system's reason.
    pub fn open(dir: &Path, keep: usize, meta: Meta) -> Result<Self> {
        crate::preflight::output_dir("fault.checkpoint_dir", dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            keep: keep.max(1),
            meta,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where node `(role, id)`'s checkpoint of `clock` lives.
    pub fn path(&self, role: Role, id: PeerId, clock: u64) -> PathBuf {
        self.dir
            .join(format!("{}.c{clock:010}.sfbck", node_name(role, id)))
    }

    /// The file's bytes for `state`.
    pub fn encode(&self, state: &NodeState) -> Vec<u8> {
        let meta = serde_json::to_vec(&self.meta).expect("meta serializes");
        let payload = state.encode();
        let mut out = Vec::with_capacity(MAGIC.len() + 4 + 4 + meta.len() + 8 + payload.len() + 4);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        out.extend_from_slice(&meta);
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(&payload);
        let crc = crc32fast::hash(&out[MAGIC.len()..]);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Writes `state` atomically (temporary file, fsync, rename, fsync of the directory),
    /// then deletes the node's files beyond the newest `keep`. Returns the bytes written.
    ///
    /// # Errors
    /// The operating system's reason, with the path.
    pub fn save(&self, state: &NodeState) -> std::result::Result<u64, String> {
        let bytes = self.save_unpruned(state)?;
        let clocks = self
            .clocks(state.role, state.id)
            .map_err(|e| e.to_string())?;
        let excess = clocks.len().saturating_sub(self.keep);
        for &old in &clocks[..excess] {
            let old = self.path(state.role, state.id, old);
            fs::remove_file(&old).map_err(|e| format!("deleting {}: {e}", old.display()))?;
        }
        Ok(bytes)
    }

    /// [`save`](Self::save) without deleting older files: for a failed node's final
    /// state, which must not push out the checkpoints the other nodes share.
    ///
    /// # Errors
    /// The operating system's reason, with the path.
    pub fn save_unpruned(&self, state: &NodeState) -> std::result::Result<u64, String> {
        let path = self.path(state.role, state.id, state.clock);
        let name = path.file_name().expect("a file name").to_string_lossy();
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let bytes = self.encode(state);
        let write = || -> io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            // The rename is durable once the directory is.
            File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            format!("writing {}: {e}", path.display())
        })?;
        Ok(bytes.len() as u64)
    }

    /// The clocks node `(role, id)` has a checkpoint of, ascending.
    ///
    /// # Errors
    /// [`Error::NoCheckpoint`] if the directory cannot be listed.
    pub fn clocks(&self, role: Role, id: PeerId) -> Result<Vec<u64>> {
        let prefix = format!("{}.c", node_name(role, id));
        let entries = fs::read_dir(&self.dir).map_err(|e| Error::NoCheckpoint {
            dir: self.dir.clone(),
            reason: e.to_string(),
        })?;
        let mut clocks: Vec<u64> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let clock = name.strip_prefix(&prefix)?.strip_suffix(".sfbck")?;
                (clock.len() == 10).then(|| clock.parse().ok())?
            })
            .collect();
        clocks.sort_unstable();
        Ok(clocks)
    }

    /// The latest clock at which every one of `nodes` has a checkpoint.
    ///
    /// # Errors
    /// [`Error::NoCheckpoint`] naming the node without any checkpoint, or listing what
    /// each node has when no clock is common to all.
    pub fn consistent_point(&self, nodes: &[(Role, PeerId)]) -> Result<u64> {
        let mut common: Option<Vec<u64>> = None;
        let mut have = Vec::new();
        for &(role, id) in nodes {
            let clocks = self.clocks(role, id)?;
            if clocks.is_empty() {
                return Err(Error::NoCheckpoint {
                    dir: self.dir.clone(),
                    reason: format!(
                        "{} has no checkpoint there (expected files named {}.c<clock>.sfbck)",
                        describe(role, id),
                        node_name(role, id)
                    ),
                });
            }
            have.push(format!("{} {clocks:?}", describe(role, id)));
            common = Some(match common {
                None => clocks,
                Some(c) => c.into_iter().filter(|x| clocks.contains(x)).collect(),
            });
        }
        common
            .and_then(|c| c.last().copied())
            .ok_or_else(|| Error::NoCheckpoint {
                dir: self.dir.clone(),
                reason: format!(
                    "no clock at which every node has a checkpoint ({}); keep more with \
                     --checkpoint-keep",
                    have.join(", ")
                ),
            })
    }

    /// Reads node `(role, id)`'s checkpoint of `clock`, checking magic, format, length,
    /// checksum and meta.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] with a one-line reason (missing, not an sfb checkpoint, other
    /// format, truncated, corrupted, another run).
    pub fn load(&self, role: Role, id: PeerId, clock: u64) -> Result<NodeState> {
        let path = self.path(role, id, clock);
        let err = |reason: String| Error::Checkpoint {
            path: path.clone(),
            reason,
        };
        let bytes = fs::read(&path).map_err(|e| {
            err(if e.kind() == io::ErrorKind::NotFound {
                format!("{} has no checkpoint of clock {clock}", describe(role, id))
            } else {
                e.to_string()
            })
        })?;
        let state = self.decode(&bytes).map_err(err)?;
        if state.role != role || state.id != id || state.clock != clock {
            return Err(err(format!(
                "holds {} at clock {}, not {} at clock {clock} (renamed?)",
                describe(state.role, state.id),
                state.clock,
                describe(role, id)
            )));
        }
        Ok(state)
    }

    /// [`load`](Self::load) for a node resuming from `clock`, which then deletes the
    /// node's files of later clocks: they belong to the run being abandoned (e.g. a failed
    /// node's final state), and a resumed run that reached one of those clocks again
    /// without writing it must not be mixed with them.
    ///
    /// # Errors
    /// As [`load`](Self::load); the operating system's reason for a file it cannot delete.
    pub fn resume(&self, role: Role, id: PeerId, clock: u64) -> Result<NodeState> {
        let state = self.load(role, id, clock)?;
        for later in self.clocks(role, id)?.into_iter().filter(|&c| c > clock) {
            let path = self.path(role, id, later);
            fs::remove_file(&path).map_err(|e| Error::Checkpoint {
                reason: format!("deleting a checkpoint of the abandoned run: {e}"),
                path,
            })?;
        }
        Ok(state)
    }

    /// Checks and decodes a file's bytes.
    ///
    /// # Errors
    /// The reason, in one line.
    pub fn decode(&self, bytes: &[u8]) -> std::result::Result<NodeState, String> {
        let n = bytes.len();
        if n < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            return Err("not an sfb checkpoint (no SFBCKPT header)".into());
        }
        let body = &bytes[MAGIC.len()..];
        let truncated = |need: usize| format!("truncated: {n} bytes, at least {need} expected");
        let u32_at = |at: usize| -> Option<u32> {
            body.get(at..at + 4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        };
        let format = u32_at(0).ok_or_else(|| truncated(MAGIC.len() + 8))?;
        if format != FORMAT {
            return Err(format!(
                "format version {format}, this sfb reads version {FORMAT}"
            ));
        }
        let meta_len = u32_at(4).ok_or_else(|| truncated(MAGIC.len() + 8))? as usize;
        let payload_at = 8 + meta_len + 8;
        let payload_len = body
            .get(8 + meta_len..payload_at)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or_else(|| truncated(MAGIC.len() + payload_at))?;
        let end = usize::try_from(payload_len)
            .ok()
            .and_then(|l| payload_at.checked_add(l))
            .ok_or_else(|| format!("a payload of {payload_len} bytes cannot be"))?;
        let expected = MAGIC.len() + end + 4;
        if n != expected {
            return Err(if n < expected {
                truncated(expected)
            } else {
                format!("{n} bytes where the header says {expected}: trailing bytes")
            });
        }
        let crc = u32_at(end).expect("length checked");
        if crc32fast::hash(&body[..end]) != crc {
            return Err("checksum mismatch: the file is corrupted".into());
        }
        let meta: Meta = serde_json::from_slice(&body[8..8 + meta_len])
            .map_err(|e| format!("unreadable meta: {e}"))?;
        if let Some(why) = meta.mismatch(&self.meta) {
            return Err(why);
        }
        NodeState::decode(&body[payload_at..end]).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(clock: u64) -> NodeState {
        NodeState {
            role: Role::Peer,
            id: PeerId(1),
            clock,
            w: Some(ndarray::Array2::from_elem((4, 6), 0.5)),
            optimizer: vec![1, 2, 3],
            model: vec![4],
            compressor: Vec::new(),
            mixer: Vec::new(),
            relay: Vec::new(),
            sampler: None,
            awaited: vec![PeerId(0)],
            view: Vec::new(),
            metrics: Default::default(),
            wall_s: 2.0,
            first_objective: Some(1.0),
        }
    }

    fn store(dir: &Path) -> Store {
        Store::open(dir, 2, Meta::new("sfb", "mlr", 2, 7)).unwrap()
    }

    #[test]
    fn round_trip_and_pruning() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        for c in [5, 10, 15] {
            s.save(&state(c)).unwrap();
        }
        assert_eq!(s.clocks(Role::Peer, PeerId(1)).unwrap(), vec![10, 15]);
        assert_eq!(s.load(Role::Peer, PeerId(1), 15).unwrap(), state(15));
        // No temporary file is left.
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn a_final_state_pushes_nothing_out_and_a_resume_drops_the_abandoned_future() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        for c in [10, 20] {
            s.save(&state(c)).unwrap();
        }
        s.save_unpruned(&state(23)).unwrap();
        let id = PeerId(1);
        assert_eq!(s.clocks(Role::Peer, id).unwrap(), vec![10, 20, 23]);
        assert_eq!(s.resume(Role::Peer, id, 20).unwrap(), state(20));
        assert_eq!(s.clocks(Role::Peer, id).unwrap(), vec![10, 20]);
        // The resumed run's own checkpoints prune as before.
        s.save(&state(30)).unwrap();
        assert_eq!(s.clocks(Role::Peer, id).unwrap(), vec![20, 30]);
    }

    #[test]
    fn every_damage_is_refused_with_a_one_line_reason() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let bytes = s.encode(&state(5));
        let refuse = |b: &[u8]| s.decode(b).unwrap_err();
        // Every truncation.
        for n in 0..bytes.len() {
            let e = refuse(&bytes[..n]);
            assert!(
                e.contains("truncated") || e.contains("not an sfb checkpoint"),
                "{n}: {e}"
            );
            assert!(!e.contains('\n'));
        }
        // Every single flipped bit past the magic.
        for i in MAGIC.len()..bytes.len() {
            for bit in [0, 7] {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                let e = refuse(&b);
                assert!(!e.is_empty() && !e.contains('\n'), "{i}: {e}");
            }
        }
        let mut b = bytes.clone();
        b[20] ^= 1;
        assert!(refuse(&b).contains("checksum mismatch") || refuse(&b).contains("truncated"));
        let mut b = bytes.clone();
        let last = b.len() - 10;
        b[last] ^= 0x40;
        assert_eq!(refuse(&b), "checksum mismatch: the file is corrupted");
        assert!(refuse(b"PK\x03\x04 a zip file").contains("not an sfb checkpoint"));
        let mut long = bytes.clone();
        long.push(0);
        assert!(refuse(&long).contains("trailing bytes"));
        for old in [3u8, 10] {
            let mut b = bytes.clone();
            b[8] = old;
            let e = refuse(&b);
            assert!(
                e.contains(&format!("format version {old}, this sfb reads version 11")),
                "{e}"
            );
        }
        // Another run's files.
        let other = |meta: Meta| Store::open(dir.path(), 2, meta).unwrap().encode(&state(5));
        let e = refuse(&other(Meta::new("sfb", "dml", 2, 7)));
        assert!(
            e.contains("written for model dml, this run trains mlr"),
            "{e}"
        );
        let e = refuse(&other(Meta::new("sfb", "mlr", 3, 7)));
        assert!(e.contains("3 peers"), "{e}");
        let e = refuse(&other(Meta::new("sfb", "mlr", 2, 8)));
        assert!(e.contains("another topology"), "{e}");
        let e = refuse(&other(Meta::new("fms", "mlr", 2, 7)));
        assert!(e.contains("fms run"), "{e}");
        let mut old = Meta::new("sfb", "mlr", 2, 7);
        old.sfb = "0.0.1".into();
        assert!(refuse(&other(old)).contains("written by sfb 0.0.1"));
        // Another run's settings: the first that differs, named with both values.
        let seeded = |seed: &str| {
            Meta::new("sfb", "mlr", 2, 7).with_agreement(vec![
                ("seed".into(), seed.into()),
                ("lr".into(), "0.5".into()),
            ])
        };
        let mine = Store::open(dir.path(), 2, seeded("1")).unwrap();
        let theirs = Store::open(dir.path(), 2, seeded("5"))
            .unwrap()
            .encode(&state(5));
        let e = mine.decode(&theirs).unwrap_err();
        assert!(
            e.contains("written by a run with seed 5, this run has 1"),
            "{e}"
        );
        assert!(mine.decode(&mine.encode(&state(5))).is_ok());
    }

    #[test]
    fn consistent_point_names_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let nodes = [(Role::Peer, PeerId(0)), (Role::Peer, PeerId(1))];
        let e = s.consistent_point(&nodes).unwrap_err().to_string();
        assert!(e.contains("peer 0 has no checkpoint"), "{e}");
        s.save(&state(10)).unwrap();
        let mut p0 = state(20);
        p0.id = PeerId(0);
        s.save(&p0).unwrap();
        let e = s.consistent_point(&nodes).unwrap_err().to_string();
        assert!(e.contains("peer 0 [20], peer 1 [10]"), "{e}");
        p0.clock = 10;
        s.save(&p0).unwrap();
        assert_eq!(s.consistent_point(&nodes).unwrap(), 10);
        let e = s.load(Role::Peer, PeerId(1), 20).unwrap_err().to_string();
        assert!(e.contains("peer 1 has no checkpoint of clock 20"), "{e}");
        // A file renamed to another node's name is refused.
        fs::copy(
            s.path(Role::Peer, PeerId(1), 10),
            s.path(Role::Peer, PeerId(0), 30),
        )
        .unwrap();
        let e = s.load(Role::Peer, PeerId(0), 30).unwrap_err().to_string();
        assert!(e.contains("renamed"), "{e}");
    }

    #[test]
    fn an_unwritable_directory_is_reported_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        fs::write(&file, b"x").unwrap();
        let e = Store::open(&file, 2, Meta::new("sfb", "mlr", 2, 7))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fault.checkpoint_dir"), "{e}");
        let e = Store::open(&file.join("sub"), 2, Meta::new("sfb", "mlr", 2, 7))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fault.checkpoint_dir"), "{e}");
    }
}
