//! The cluster file: every peer's index, libp2p identity, listen address and out-neighbours.
//!
//! It is sfb-topology's TOML file with two more keys per peer:
//! ```toml
//! out_degree = 2
//!
//! [[peer]]
//! id = 0
//! addr = "/ip4/127.0.0.1/tcp/4001"
//! out = [1, 2]
//! peer_id = "12D3KooW…"        # public identity; connections from ids not listed are refused
//! key = "cluster-keys/peer-0.key" # private ed25519 key (relative to this file); only peer 0 needs it
//! ```
//! A listen address with port 0 means "any free port"; the launcher then exchanges the
//! real addresses at start-up (see `sfb run --transport libp2p`).
//!
//! Writing a cluster ([`Cluster::init`]) never replaces an existing file or key folder
//! unless told to ([`Existing::Replace`]), and never leaves half-written files: keys and
//! file are written under temporary names beside the target and renamed into place at the
//! end; on any error what was created is removed (and a replaced key folder restored).
//! Key files are created with mode 0600 inside a 0700 folder; a node refuses a key file
//! that group or others may access ([`Cluster::check_key_permissions`]), as ssh does.
//!
//! An FMS (parameter-server) cluster has a top-level `server = S` naming the server's entry;
//! it is a star: the server sends to every client, each client only to the server.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId as Libp2pId};
use sfb_topology::{ClusterFile, Topology};

use crate::error::ClusterError;
use crate::{Error, Result};

/// What [`Cluster::init_with`] does when the cluster file or its key folder exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Existing {
    /// Fail with [`Error::ClusterExists`] (the default: keys are not thrown away silently).
    #[default]
    Refuse,
    /// Replace them: the new file and keys are renamed over the old ones once complete.
    Replace,
}

/// The ports a new cluster file gives its peers ([`Cluster::init_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ports {
    /// Peer `i` listens on `base + i`; base 0 writes port 0 everywhere (any free port,
    /// exchanged at start-up by a launcher that knows the real ones).
    Base(u16),
    /// Each peer a port that is free on its host when the file is written: one listener
    /// per peer is bound to `host:0` (all at once, so the ports differ) and closed again.
    /// For hand-run peers on this machine: no fixed port to collide with. The hosts must
    /// be addresses of this machine, and another program may still take a port before
    /// its peer starts.
    Free,
}

impl From<u16> for Ports {
    fn from(base: u16) -> Self {
        Self::Base(base)
    }
}

/// A validated cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    file: ClusterFile,
    path: PathBuf,
    topology: Option<Topology>,
    server: Option<usize>,
    out: Vec<Vec<usize>>,
    inn: Vec<Vec<usize>>,
    ids: Vec<Libp2pId>,
    addrs: Vec<Multiaddr>,
}

/// One port per peer of `file` (indexed by id) that is free on the peer's host now:
/// every listener stays bound until all are, so no two peers of a host get the same port.
fn free_ports(path: &Path, file: &ClusterFile, hosts: &[String]) -> Result<Vec<u16>> {
    let mut held = Vec::with_capacity(file.peers.len());
    let mut ports = vec![0; file.peers.iter().map(|e| e.id + 1).max().unwrap_or(0)];
    for e in &file.peers {
        let host = &hosts[e.id % hosts.len()];
        let listener = std::net::TcpListener::bind((host.as_str(), 0))
            .and_then(|l| l.local_addr().map(|a| (l, a.port())))
            .map_err(|err| {
                cfg_err(
                    path,
                    ClusterError::FreePort {
                        host: host.clone(),
                        reason: err.to_string(),
                    },
                )
            })?;
        ports[e.id] = listener.1;
        held.push(listener.0);
    }
    Ok(ports)
}

fn cfg_err(path: &Path, source: ClusterError) -> Error {
    Error::Cluster {
        path: path.to_path_buf(),
        source,
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| cfg_err(path, ClusterError::Io(e))
}

fn topo(path: &Path) -> impl FnOnce(sfb_topology::Error) -> Error + '_ {
    move |e| cfg_err(path, ClusterError::Topology(e))
}

impl Cluster {
    /// Reads and validates a cluster file.
    ///
    /// # Errors
    /// [`Error::Cluster`] naming the file and the problem: unreadable, bad TOML, inconsistent
    /// topology (unknown peer id, wrong degree, …), a missing or malformed `addr` or
    /// `peer_id`.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(io(path))?;
        let file = ClusterFile::from_toml_str(&text).map_err(topo(path))?;
        Self::from_file(file, path.to_path_buf())
    }

    fn from_file(file: ClusterFile, path: PathBuf) -> Result<Self> {
        let server = match file.extra.get("server") {
            None => None,
            Some(v) => Some(
                v.as_integer()
                    .and_then(|x| usize::try_from(x).ok())
                    .ok_or_else(|| cfg_err(&path, ClusterError::ServerNotAnId))?,
            ),
        };
        let fanout = match file.extra.get("tree_fanout") {
            None => None,
            Some(v) => Some(
                v.as_integer()
                    .and_then(|x| usize::try_from(x).ok())
                    .filter(|&q| q > 0)
                    .ok_or_else(|| cfg_err(&path, ClusterError::TreeFanoutNotANumber))?,
            ),
        };
        let (topology, out) = match (server, fanout) {
            (Some(s), _) => (None, star_lists(&file, s).map_err(|e| cfg_err(&path, e))?),
            (None, Some(q)) => (None, tree_lists(&file, q).map_err(|e| cfg_err(&path, e))?),
            (None, None) => {
                let t = file.topology().map_err(topo(&path))?;
                let out = t.out_lists();
                (Some(t), out)
            }
        };
        let p = out.len();
        let mut inn = vec![Vec::new(); p];
        for (from, list) in out.iter().enumerate() {
            for &to in list {
                inn[to].push(from);
            }
        }
        let mut ids = vec![None; p];
        let mut addrs = vec![None; p];
        for e in &file.peers {
            let pid = e
                .extra
                .get("peer_id")
                .and_then(|v| v.as_str())
                .ok_or_else(|| cfg_err(&path, ClusterError::MissingPeerId { peer: e.id }))?;
            let pid: Libp2pId = pid.parse().map_err(|source| {
                cfg_err(
                    &path,
                    ClusterError::BadPeerId {
                        peer: e.id,
                        value: pid.to_string(),
                        source,
                    },
                )
            })?;
            if ids.contains(&Some(pid)) {
                return Err(cfg_err(
                    &path,
                    ClusterError::DuplicatePeerId {
                        peer: e.id,
                        peer_id: pid,
                    },
                ));
            }
            let addr = e
                .addr
                .as_deref()
                .ok_or_else(|| cfg_err(&path, ClusterError::MissingAddr { peer: e.id }))?;
            let addr: Multiaddr = addr.parse().map_err(|source| {
                cfg_err(
                    &path,
                    ClusterError::BadAddr {
                        peer: e.id,
                        value: addr.to_string(),
                        source,
                    },
                )
            })?;
            ids[e.id] = Some(pid);
            addrs[e.id] = Some(addr);
        }
        Ok(Self {
            file,
            path,
            topology,
            server,
            out,
            inn,
            ids: ids
                .into_iter()
                .map(|x| x.expect("every id present"))
                .collect(),
            addrs: addrs
                .into_iter()
                .map(|x| x.expect("every id present"))
                .collect(),
        })
    }

    /// Writes a new cluster: one fresh ed25519 key per peer (in `<stem>-keys/` next to
    /// `path`, see [`keys_dir`](Self::keys_dir)), listen addresses `/ip4/<host>/tcp/<port>`
    /// (hosts assigned round robin, ports as [`Ports`] says; a `u16` is
    /// [`Ports::Base`]), and `topology`.
    /// Returns the loaded cluster. Refuses to replace an existing cluster file or key
    /// folder ([`init_with`](Self::init_with) can).
    ///
    /// # Errors
    /// [`Error::ClusterExists`]; [`Error::Cluster`] for IO errors or an empty host list
    /// (nothing is left behind).
    pub fn init(
        path: &Path,
        topology: &Topology,
        hosts: &[String],
        ports: impl Into<Ports>,
    ) -> Result<Self> {
        Self::init_with(path, topology, hosts, ports, Existing::Refuse)
    }

    /// [`init`](Self::init), replacing an existing cluster file and key folder when
    /// `existing` says so.
    ///
    /// # Errors
    /// As [`init`](Self::init).
    pub fn init_with(
        path: &Path,
        topology: &Topology,
        hosts: &[String],
        ports: impl Into<Ports>,
        existing: Existing,
    ) -> Result<Self> {
        let file = ClusterFile::from_topology(topology);
        Self::write(path, file, hosts, ports.into(), existing)
    }

    /// Writes a new FMS cluster: `clients` clients (ids `0..clients`) and a server (id
    /// `clients`), keys and addresses as [`init`](Self::init).
    ///
    /// # Errors
    /// As [`init`](Self::init); [`Error::Cluster`] for zero clients.
    pub fn init_fms(
        path: &Path,
        clients: usize,
        hosts: &[String],
        ports: impl Into<Ports>,
    ) -> Result<Self> {
        Self::init_fms_with(path, clients, hosts, ports, Existing::Refuse)
    }

    /// [`init_fms`](Self::init_fms), replacing an existing cluster file and key folder
    /// when `existing` says so.
    ///
    /// # Errors
    /// As [`init_fms`](Self::init_fms).
    pub fn init_fms_with(
        path: &Path,
        clients: usize,
        hosts: &[String],
        ports: impl Into<Ports>,
        existing: Existing,
    ) -> Result<Self> {
        let file = fms_file(path, clients)?;
        Self::write(path, file, hosts, ports.into(), existing)
    }

    /// The key folder of the cluster file `path`: `<stem>-keys` beside it.
    pub fn keys_dir(path: &Path) -> PathBuf {
        parent_dir(path).join(keys_dir_name(path))
    }

    /// Checks, without writing anything, that a cluster can be written at `path`: unless
    /// `existing` is [`Existing::Replace`], neither `path` nor its
    /// [`keys_dir`](Self::keys_dir) exists; and the folder of `path` takes new files.
    ///
    /// # Errors
    /// [`Error::ClusterExists`]; [`Error::Cluster`] with the operating system's reason.
    pub fn check_init(path: &Path, existing: Existing) -> Result<()> {
        if existing == Existing::Refuse {
            for p in [path.to_path_buf(), Self::keys_dir(path)] {
                if std::fs::symlink_metadata(&p).is_ok() {
                    return Err(Error::ClusterExists { path: p });
                }
            }
        }
        let probe = temp_name(parent_dir(path), ".sfb-probe");
        std::fs::create_dir(&probe).map_err(io(path))?;
        std::fs::remove_dir(&probe).map_err(io(path))
    }

    fn write(
        path: &Path,
        mut file: ClusterFile,
        hosts: &[String],
        ports: Ports,
        existing: Existing,
    ) -> Result<Self> {
        if hosts.is_empty() {
            return Err(cfg_err(path, ClusterError::NoHosts));
        }
        Self::check_init(path, existing)?;
        let free = match ports {
            Ports::Free => free_ports(path, &file, hosts)?,
            Ports::Base(_) => Vec::new(),
        };
        let keys_rel = keys_dir_name(path);
        let mut staged = Staged::new(path)?;
        for e in &mut file.peers {
            let bytes = place(path, e, hosts, ports, &free)?;
            let name = format!("peer-{}.key", e.id);
            let key_path = staged.keys.join(&name);
            write_private(&key_path, &bytes).map_err(io(&key_path))?;
            let rel = format!("{keys_rel}/{name}");
            e.extra.insert("key".into(), toml::Value::String(rel));
        }
        let text = file.to_toml_string().map_err(topo(path))?;
        let tmp = staged.file.clone();
        write_new(&tmp, text.as_bytes()).map_err(io(&tmp))?;
        staged.commit(path, existing)?;
        Self::from_file(file, path.to_path_buf())
    }

    /// Writes a new cluster of `peers` peers in the tree mode's tree of fan-out `fanout`
    /// ([`sfb_core::tree`]; key `tree_fanout`, each peer's out-list its parent then its
    /// children), with keys, addresses and ports as [`init_with`](Self::init_with).
    ///
    /// # Errors
    /// As [`init`](Self::init).
    pub fn init_tree(
        path: &Path,
        peers: usize,
        fanout: usize,
        hosts: &[String],
        ports: impl Into<Ports>,
        existing: Existing,
    ) -> Result<Self> {
        let file = tree_file(path, peers, fanout)?;
        Self::write(path, file, hosts, ports.into(), existing)
    }

    /// Writes a new cluster file for one launch (`sfb run --transport libp2p`): as
    /// [`init`](Self::init) (a `layout` of a topology) or [`init_tree`](Self::init_tree),
    /// but no key reaches the disk: the file has no `key` entries, and each node's private
    /// key (protobuf encoding) is returned, in id order, for the launcher to hand over
    /// (see [`Options::key`](crate::p2p::Options::key)). Ports 0 (the OS picks).
    ///
    /// # Errors
    /// As [`init`](Self::init).
    pub fn init_for_launch(
        path: &Path,
        layout: Layout<'_>,
        hosts: &[String],
    ) -> Result<(Self, Vec<Vec<u8>>)> {
        if hosts.is_empty() {
            return Err(cfg_err(path, ClusterError::NoHosts));
        }
        let mut file = match layout {
            Layout::Topology(t) => ClusterFile::from_topology(t),
            Layout::Fms { clients } => fms_file(path, clients)?,
            Layout::Tree { peers, fanout } => tree_file(path, peers, fanout)?,
        };
        let keys = file
            .peers
            .iter_mut()
            .map(|e| place(path, e, hosts, Ports::Base(0), &[]))
            .collect::<Result<Vec<_>>>()?;
        let text = file.to_toml_string().map_err(topo(path))?;
        write_new(path, text.as_bytes()).map_err(io(path))?;
        Ok((Self::from_file(file, path.to_path_buf())?, keys))
    }

    /// Number of peers.
    pub fn peers(&self) -> usize {
        self.ids.len()
    }

    /// The Q-out topology of an SFB cluster (`None` for an FMS star or a tree).
    pub fn topology(&self) -> Option<&Topology> {
        self.topology.as_ref()
    }

    /// The fan-out of a tree cluster's tree (`tree_fanout`; [`init_tree`](Self::init_tree)),
    /// `None` for other clusters.
    pub fn tree_fanout(&self) -> Option<usize> {
        self.file
            .extra
            .get("tree_fanout")
            .and_then(toml::Value::as_integer)
            .and_then(|q| usize::try_from(q).ok())
    }

    /// The server's index in an FMS cluster.
    pub fn server(&self) -> Option<usize> {
        self.server
    }

    /// Where node `i` sends.
    pub fn out(&self, i: usize) -> &[usize] {
        &self.out[i]
    }

    /// Who sends to node `i`.
    pub fn in_neighbours(&self, i: usize) -> &[usize] {
        &self.inn[i]
    }

    /// The sfb-core id of node `i`: [`sfb_core::PeerId::SERVER`] for the FMS server.
    pub fn core_id(&self, i: usize) -> sfb_core::PeerId {
        if Some(i) == self.server {
            sfb_core::PeerId::SERVER
        } else {
            sfb_core::PeerId(i as u32)
        }
    }

    /// The node index of an sfb-core id.
    pub fn node_of(&self, id: sfb_core::PeerId) -> Option<usize> {
        if id == sfb_core::PeerId::SERVER {
            self.server
        } else {
            (id.index() < self.peers() && Some(id.index()) != self.server).then_some(id.index())
        }
    }

    /// Peers that compute (all nodes but the FMS server).
    pub fn workers(&self) -> usize {
        self.peers() - usize::from(self.server.is_some())
    }

    /// Peer `i`'s libp2p identity.
    pub fn peer_id(&self, i: usize) -> Libp2pId {
        self.ids[i]
    }

    /// Index of a libp2p identity, if it belongs to the cluster.
    pub fn index_of(&self, id: &Libp2pId) -> Option<usize> {
        self.ids.iter().position(|x| x == id)
    }

    /// Peer `i`'s listen address.
    pub fn addr(&self, i: usize) -> &Multiaddr {
        &self.addrs[i]
    }

    /// Replaces the listen addresses (after a start-up exchange).
    ///
    /// # Errors
    /// [`Error::Cluster`] if the count differs from the number of peers.
    pub fn set_addrs(&mut self, addrs: Vec<Multiaddr>) -> Result<()> {
        if addrs.len() != self.peers() {
            return Err(cfg_err(
                &self.path,
                ClusterError::AddrCount {
                    given: addrs.len(),
                    peers: self.peers(),
                },
            ));
        }
        self.addrs = addrs;
        Ok(())
    }

    /// Where peer `i`'s private key file is (its `key` entry, relative to the cluster
    /// file's folder).
    ///
    /// # Errors
    /// [`Error::Cluster`] for a peer the file does not list or without a `key` entry.
    pub fn key_path(&self, i: usize) -> Result<PathBuf> {
        let e = self
            .file
            .peers
            .iter()
            .find(|e| e.id == i)
            .ok_or_else(|| cfg_err(&self.path, ClusterError::NoPeer { peer: i }))?;
        let rel = e
            .extra
            .get("key")
            .and_then(|v| v.as_str())
            .ok_or_else(|| cfg_err(&self.path, ClusterError::MissingKey { peer: i }))?;
        Ok(parent_dir(&self.path).join(rel))
    }

    /// Refuses peer `i`'s private key file when group or others may access it (any bit of
    /// mode `0o077`), as ssh refuses an unprotected private key. Does nothing off Unix.
    ///
    /// # Errors
    /// [`Error::Cluster`] naming the key file: [`ClusterError::KeyPermissions`], or the
    /// errors of [`key_path`](Self::key_path) and of reading the file's metadata.
    pub fn check_key_permissions(&self, i: usize) -> Result<()> {
        let kp = self.key_path(i)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&kp)
                .map_err(io(&kp))?
                .permissions()
                .mode()
                & 0o7777;
            if mode & 0o077 != 0 {
                return Err(cfg_err(&kp, ClusterError::KeyPermissions { mode }));
            }
        }
        Ok(())
    }

    /// Reads peer `i`'s private key and checks it matches its `peer_id`. (It does not
    /// check the file's permissions: see
    /// [`check_key_permissions`](Self::check_key_permissions).)
    ///
    /// # Errors
    /// [`Error::Cluster`] for a missing `key` entry, an unreadable or malformed key file, or
    /// a key whose identity is not the listed `peer_id`.
    pub fn keypair(&self, i: usize) -> Result<Keypair> {
        let kp = self.key_path(i)?;
        let bytes = std::fs::read(&kp).map_err(io(&kp))?;
        let key = Keypair::from_protobuf_encoding(&bytes)
            .map_err(|err| cfg_err(&kp, ClusterError::BadKey(err)))?;
        self.matching(i, key, &kp)
    }

    /// Peer `i`'s private key from `bytes`, its protobuf encoding handed over rather than
    /// read from a file, checked as [`keypair`](Self::keypair) checks a file's.
    ///
    /// # Errors
    /// [`Error::Cluster`] naming the cluster file: [`ClusterError::BadKey`],
    /// [`ClusterError::KeyMismatch`].
    pub fn keypair_from(&self, i: usize, bytes: &[u8]) -> Result<Keypair> {
        let key = Keypair::from_protobuf_encoding(bytes)
            .map_err(|err| cfg_err(&self.path, ClusterError::BadKey(err)))?;
        self.matching(i, key, &self.path)
    }

    fn matching(&self, i: usize, key: Keypair, whose: &Path) -> Result<Keypair> {
        if key.public().to_peer_id() != self.ids[i] {
            return Err(cfg_err(
                whose,
                ClusterError::KeyMismatch {
                    peer: i,
                    peer_id: self.ids[i],
                },
            ));
        }
        Ok(key)
    }

    /// A hash of the topology (every out-neighbour list), exchanged in handshakes.
    pub fn topology_hash(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for p in 0..self.peers() {
            for &q in self.out[p].iter().chain(std::iter::once(&usize::MAX)) {
                h = (h ^ q as u64).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        h
    }
}

/// The folder of `path` (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// `<stem>-keys`, the key folder's name beside the cluster file `path`.
fn keys_dir_name(path: &Path) -> String {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("cluster");
    format!("{stem}-keys")
}

/// A fresh hidden name in `dir`: `<prefix>.tmp-<pid>-<n>`.
fn temp_name(dir: &Path, prefix: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    dir.join(format!(
        "{prefix}.tmp-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A new cluster being written under temporary names beside its target: removed on drop
/// unless [`commit`](Self::commit)ted.
struct Staged {
    /// The temporary key folder (mode 0700).
    keys: PathBuf,
    /// The temporary cluster file.
    file: PathBuf,
    committed: bool,
}

impl Staged {
    fn new(path: &Path) -> Result<Self> {
        let dir = parent_dir(path);
        let name = path
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or("cluster.toml");
        let keys = temp_name(dir, &format!(".{}", keys_dir_name(path)));
        let mut b = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(&keys).map_err(io(path))?;
        Ok(Self {
            keys,
            file: temp_name(dir, &format!(".{name}")),
            committed: false,
        })
    }

    /// Renames the key folder, then the file, into place (over old ones if `existing`
    /// says so); on failure puts back what was there.
    fn commit(&mut self, path: &Path, existing: Existing) -> Result<()> {
        let keys = Cluster::keys_dir(path);
        if existing == Existing::Refuse {
            // Checked before the keys were made; checked again just before renaming.
            Cluster::check_init(path, existing)?;
        }
        let backup = match std::fs::symlink_metadata(&keys) {
            Ok(_) => {
                let b = temp_name(parent_dir(path), &format!(".{}-old", keys_dir_name(path)));
                std::fs::rename(&keys, &b).map_err(io(&keys))?;
                Some(b)
            }
            Err(_) => None,
        };
        let restore = |backup: &Option<PathBuf>| {
            if let Some(b) = backup {
                let _ = std::fs::rename(b, &keys);
            }
        };
        if let Err(e) = std::fs::rename(&self.keys, &keys) {
            restore(&backup);
            return Err(cfg_err(&keys, ClusterError::Io(e)));
        }
        if let Err(e) = std::fs::rename(&self.file, path) {
            let _ = std::fs::remove_dir_all(&keys);
            restore(&backup);
            return Err(cfg_err(path, ClusterError::Io(e)));
        }
        self.committed = true;
        if let Some(b) = backup
            && let Err(e) = std::fs::remove_dir_all(&b)
        {
            tracing::warn!(folder = %b.display(), error = %e, "could not remove the replaced keys");
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.keys);
            let _ = std::fs::remove_file(&self.file);
        }
    }
}

/// Writes a new file (never an existing one); mode 0600 from its creation on Unix.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)?.write_all(bytes)
}

/// Writes a new file (never an existing one).
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?
        .write_all(bytes)
}

/// The file's out-lists by peer id, checked: ids `0..n`, each once.
fn lists_by_id(file: &ClusterFile) -> std::result::Result<Vec<Vec<usize>>, ClusterError> {
    let n = file.peers.len();
    let mut out = vec![None; n];
    for e in &file.peers {
        if e.id >= n {
            return Err(ClusterError::IdOutOfRange { id: e.id, peers: n });
        }
        if out[e.id].replace(e.out.clone()).is_some() {
            return Err(ClusterError::DuplicateId { id: e.id });
        }
    }
    Ok(out.into_iter().map(|o| o.expect("ids 0..n")).collect())
}

/// The out-lists of an FMS star, checked: ids `0..n`, the server sends to every client, each
/// client only to the server.
fn star_lists(
    file: &ClusterFile,
    server: usize,
) -> std::result::Result<Vec<Vec<usize>>, ClusterError> {
    let n = file.peers.len();
    if server >= n {
        return Err(ClusterError::ServerOutOfRange { server, peers: n });
    }
    let out = lists_by_id(file)?;
    for (i, list) in out.iter().enumerate() {
        let mut sorted = list.clone();
        sorted.sort_unstable();
        let want: Vec<usize> = if i == server {
            (0..n).filter(|&c| c != server).collect()
        } else {
            vec![server]
        };
        if sorted != want {
            return Err(ClusterError::NotAStar {
                peer: i,
                want,
                got: list.clone(),
            });
        }
    }
    Ok(out)
}

/// What a cluster file for one launch lays out ([`Cluster::init_for_launch`]).
#[derive(Debug, Clone, Copy)]
pub enum Layout<'a> {
    /// SFB peers on a Q-out topology.
    Topology(&'a Topology),
    /// An FMS star: `clients` clients and a server.
    Fms {
        /// Clients (the server is one more node).
        clients: usize,
    },
    /// SFB peers in the tree mode's tree ([`Cluster::init_tree`]).
    Tree {
        /// Peers.
        peers: usize,
        /// Children per peer.
        fanout: usize,
    },
}

/// Gives entry `e` a fresh ed25519 identity (its `peer_id`) and its listen address
/// (`hosts` round robin, the port as `ports` says, `free[id]` for [`Ports::Free`]);
/// returns the private key's protobuf encoding.
fn place(
    path: &Path,
    e: &mut sfb_topology::PeerEntry,
    hosts: &[String],
    ports: Ports,
    free: &[u16],
) -> Result<Vec<u8>> {
    let key = Keypair::generate_ed25519();
    let bytes = key
        .to_protobuf_encoding()
        .map_err(|err| cfg_err(path, ClusterError::KeyEncoding(err)))?;
    let host = &hosts[e.id % hosts.len()];
    let port = match ports {
        Ports::Free => free[e.id],
        Ports::Base(0) => 0,
        Ports::Base(base) => u16::try_from(e.id)
            .ok()
            .and_then(|i| base.checked_add(i))
            .ok_or_else(|| cfg_err(path, ClusterError::PortOverflow))?,
    };
    e.addr = Some(format!("/ip4/{host}/tcp/{port}"));
    e.extra.insert(
        "peer_id".into(),
        toml::Value::String(key.public().to_peer_id().to_string()),
    );
    Ok(bytes)
}

/// An FMS star's file: `clients` clients sending to the server, id `clients`.
fn fms_file(path: &Path, clients: usize) -> Result<ClusterFile> {
    if clients == 0 {
        return Err(cfg_err(path, ClusterError::NoClients));
    }
    let mut file = ClusterFile::from_topology(&sfb_topology::full(2).map_err(topo(path))?);
    file.out_degree = None;
    file.peers = (0..=clients)
        .map(|i| {
            let out = if i == clients {
                (0..clients).collect()
            } else {
                vec![clients]
            };
            sfb_topology::PeerEntry::new(i, out)
        })
        .collect();
    file.extra
        .insert("server".into(), toml::Value::Integer(clients as i64));
    Ok(file)
}

/// A tree file: `peers` peers in the tree of fan-out `fanout` (key `tree_fanout`).
fn tree_file(path: &Path, peers: usize, fanout: usize) -> Result<ClusterFile> {
    let mut file = ClusterFile::from_topology(&sfb_topology::full(2).map_err(topo(path))?);
    file.out_degree = None;
    file.peers = sfb_core::tree::Config::new(fanout, 1)
        .lists(peers)
        .into_iter()
        .enumerate()
        .map(|(i, out)| sfb_topology::PeerEntry::new(i, out))
        .collect();
    file.extra
        .insert("tree_fanout".into(), toml::Value::Integer(fanout as i64));
    Ok(file)
}

/// The out-lists of a tree file of fan-out `fanout`, checked against the tree's.
fn tree_lists(
    file: &ClusterFile,
    fanout: usize,
) -> std::result::Result<Vec<Vec<usize>>, ClusterError> {
    let n = file.peers.len();
    let out = lists_by_id(file)?;
    let want = sfb_core::tree::Config::new(fanout, 1).lists(n);
    for (peer, (got, want)) in out.iter().zip(want).enumerate() {
        if *got != want {
            return Err(ClusterError::NotTheTree {
                fanout,
                peer,
                want,
                got: got.clone(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder for one test (removed first if a previous run left it).
    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sfb-net-cluster-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn hosts() -> Vec<String> {
        vec!["127.0.0.1".into()]
    }

    /// A launch's cluster file puts no key on the disk: the keys come back to the caller,
    /// each the listed peer's, and a key that is not the peer's is refused.
    #[test]
    fn a_launch_cluster_keeps_its_keys_off_the_disk() {
        let d = tempdir("launch");
        let path = d.join("cluster.toml");
        let t = sfb_topology::full(3).unwrap();
        let (c, keys) = Cluster::init_for_launch(&path, Layout::Topology(&t), &hosts()).unwrap();
        assert_eq!(listing(&d), ["cluster.toml"]);
        assert!(!std::fs::read_to_string(&path).unwrap().contains("key ="));
        assert_eq!(keys.len(), 3);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(
                c.keypair_from(i, k).unwrap().public().to_peer_id(),
                c.peer_id(i)
            );
        }
        let e = c.keypair_from(1, &keys[0]).unwrap_err().to_string();
        assert!(e.contains("peer 1"), "{e}");
        assert!(c.keypair_from(0, b"not a key").is_err());
        let d = tempdir("launch-tree");
        let path = d.join("cluster.toml");
        let layout = Layout::Tree {
            peers: 5,
            fanout: 2,
        };
        let (c, keys) = Cluster::init_for_launch(&path, layout, &hosts()).unwrap();
        assert_eq!((c.out(1), keys.len()), (&[0, 3, 4][..], 5));
        let (c, _) =
            Cluster::init_for_launch(&d.join("f.toml"), Layout::Fms { clients: 2 }, &hosts())
                .unwrap();
        assert_eq!(c.server(), Some(2));
    }

    /// A tree cluster file (`tree_fanout`) loads with the tree's lists and no Q-out
    /// topology; one whose lists are not the tree's, or whose fan-out is not a number, is
    /// refused naming the peer or the key.
    #[test]
    fn tree_files_load_with_the_trees_lists_and_other_lists_are_refused() {
        let d = tempdir("tree");
        let path = d.join("c.toml");
        let c = Cluster::init_tree(&path, 7, 2, &hosts(), 0, Existing::Refuse).unwrap();
        let back = Cluster::load(&path).unwrap();
        assert!(back.topology().is_none());
        assert_eq!(back.out(1), [0, 3, 4]);
        assert_eq!(back.in_neighbours(0), [1, 2]);
        assert_eq!(back.peer_id(3), c.peer_id(3));
        let text = std::fs::read_to_string(&path).unwrap();
        let bad = d.join("bad.toml");
        std::fs::write(&bad, text.replacen("tree_fanout = 2", "tree_fanout = 3", 1)).unwrap();
        let e = Cluster::load(&bad).unwrap_err().to_string();
        assert!(
            e.contains("tree of fan-out 3: peer 0 must send to [1, 2, 3]"),
            "{e}"
        );
        std::fs::write(
            &bad,
            text.replacen("tree_fanout = 2", "tree_fanout = -1", 1),
        )
        .unwrap();
        let e = Cluster::load(&bad).unwrap_err().to_string();
        assert!(e.contains("tree_fanout"), "{e}");
    }

    #[test]
    fn init_refuses_to_replace_a_cluster_unless_told_to() {
        let d = tempdir("replace");
        let path = d.join("c.toml");
        let t = sfb_topology::full(3).unwrap();
        let first = Cluster::init(&path, &t, &hosts(), 0).unwrap();
        assert_eq!(listing(&d), ["c-keys", "c.toml"]);
        let e = Cluster::init(&path, &t, &hosts(), 0).unwrap_err();
        assert!(
            matches!(&e, Error::ClusterExists { path: p } if *p == path),
            "{e}"
        );
        assert!(e.to_string().contains("already exists"), "{e}");
        // The refused attempt changed nothing.
        assert_eq!(Cluster::load(&path).unwrap().peer_id(0), first.peer_id(0));
        // Keys alone also count as a cluster.
        std::fs::remove_file(&path).unwrap();
        let e = Cluster::init_fms(&path, 2, &hosts(), 0).unwrap_err();
        assert!(matches!(&e, Error::ClusterExists { path: p } if *p == d.join("c-keys")));
        let second = Cluster::init_with(&path, &t, &hosts(), 0, Existing::Replace).unwrap();
        assert_ne!(second.peer_id(0), first.peer_id(0));
        assert_eq!(listing(&d), ["c-keys", "c.toml"]);
        assert_eq!(listing(&d.join("c-keys")).len(), 3);
        let loaded = Cluster::load(&path).unwrap();
        assert_eq!(
            loaded.keypair(2).unwrap().public().to_peer_id(),
            second.peer_id(2)
        );
        let fms = Cluster::init_fms_with(&path, 2, &hosts(), 0, Existing::Replace).unwrap();
        assert_eq!(fms.server(), Some(2));
        assert_eq!(listing(&d), ["c-keys", "c.toml"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_init_leaves_nothing_behind() {
        let d = tempdir("half");
        let path = d.join("c.toml");
        let t = sfb_topology::full(3).unwrap();
        // Ports run past 65535 at the second peer, after the first key was written.
        let e = Cluster::init(&path, &t, &hosts(), 65535).unwrap_err();
        assert!(e.to_string().contains("ports run past 65535"), "{e}");
        assert!(listing(&d).is_empty(), "{:?}", listing(&d));
        // Replacing: the old cluster survives a failed replacement untouched.
        let old = Cluster::init(&path, &t, &hosts(), 0).unwrap();
        Cluster::init_with(&path, &t, &hosts(), 65535, Existing::Replace).unwrap_err();
        assert_eq!(listing(&d), ["c-keys", "c.toml"]);
        let back = Cluster::load(&path).unwrap();
        assert_eq!(
            back.keypair(0).unwrap().public().to_peer_id(),
            old.peer_id(0)
        );
        // A folder that does not exist: refused before anything is made.
        let e = Cluster::init(&d.join("no/such/c.toml"), &t, &hosts(), 0).unwrap_err();
        assert!(e.to_string().contains("No such file or directory"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn free_ports_are_distinct_bindable_and_only_on_this_machines_addresses() {
        let d = tempdir("free");
        let path = d.join("c.toml");
        let c = Cluster::init(
            &path,
            &sfb_topology::full(6).unwrap(),
            &hosts(),
            Ports::Free,
        )
        .unwrap();
        let mut ports: Vec<u16> = (0..6)
            .map(|i| {
                let a = c.addr(i).to_string();
                assert!(a.starts_with("/ip4/127.0.0.1/tcp/"), "{a}");
                a.rsplit('/').next().unwrap().parse().unwrap()
            })
            .collect();
        assert!(ports.iter().all(|&p| p != 0), "{ports:?}");
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 6, "two peers got one port");
        // An address of another machine: refused naming it, nothing written.
        let other = d.join("other.toml");
        let e = Cluster::init_fms(&other, 2, &["192.0.2.1".into()], Ports::Free).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("no free port on 192.0.2.1"), "{e}");
        assert_eq!(listing(&d), ["c-keys", "c.toml"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn keys_are_private_and_open_ones_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempdir("perms");
        let path = d.join("c.toml");
        let c = Cluster::init(&path, &sfb_topology::full(2).unwrap(), &hosts(), 0).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let key = c.key_path(1).unwrap();
        assert_eq!(key, d.join("c-keys/peer-1.key"));
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(&d.join("c-keys")), 0o700);
        c.check_key_permissions(1).unwrap();
        for bad in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(bad)).unwrap();
            let e = c.check_key_permissions(1).unwrap_err().to_string();
            assert!(e.contains(&key.display().to_string()), "{e}");
            assert!(e.contains(&format!("(mode {bad:04o})")), "{e}");
        }
        // The key itself still loads: the policy is the caller's.
        c.keypair(1).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        c.check_key_permissions(1).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }
}
