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
//! An FMS (parameter-server) cluster has a top-level `server = S` naming the server's entry;
//! it is a star: the server sends to every client, each client only to the server.

use std::path::{Path, PathBuf};

use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId as Libp2pId};
use sfb_topology::{ClusterFile, Topology};

use crate::error::ClusterError;
use crate::{Error, Result};

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
        let (topology, out) = match server {
            None => {
                let t = file.topology().map_err(topo(&path))?;
                let out = t.out_lists();
                (Some(t), out)
            }
            Some(s) => (None, star_lists(&file, s).map_err(|e| cfg_err(&path, e))?),
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
    /// `path`), listen addresses `/ip4/<host>/tcp/<base_port + i>` (hosts assigned round
    /// robin), and `topology`. Returns the loaded cluster.
    ///
    /// # Errors
    /// [`Error::Cluster`] for IO errors or an empty host list.
    pub fn init(
        path: &Path,
        topology: &Topology,
        hosts: &[String],
        base_port: u16,
    ) -> Result<Self> {
        Self::write(path, ClusterFile::from_topology(topology), hosts, base_port)
    }

    /// Writes a new FMS cluster: `clients` clients (ids `0..clients`) and a server (id
    /// `clients`), keys and addresses as [`init`](Self::init).
    ///
    /// # Errors
    /// As [`init`](Self::init); [`Error::Cluster`] for zero clients.
    pub fn init_fms(path: &Path, clients: usize, hosts: &[String], base_port: u16) -> Result<Self> {
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
        Self::write(path, file, hosts, base_port)
    }

    fn write(path: &Path, mut file: ClusterFile, hosts: &[String], base_port: u16) -> Result<Self> {
        if hosts.is_empty() {
            return Err(cfg_err(path, ClusterError::NoHosts));
        }
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("cluster");
        let keys_rel = format!("{stem}-keys");
        std::fs::create_dir_all(dir.join(&keys_rel)).map_err(io(path))?;
        for e in &mut file.peers {
            let key = Keypair::generate_ed25519();
            let rel = format!("{keys_rel}/peer-{}.key", e.id);
            let bytes = key
                .to_protobuf_encoding()
                .map_err(|err| cfg_err(path, ClusterError::KeyEncoding(err)))?;
            let key_path = dir.join(&rel);
            write_private(&key_path, &bytes).map_err(io(&key_path))?;
            let host = &hosts[e.id % hosts.len()];
            let port = if base_port == 0 {
                0
            } else {
                base_port
                    .checked_add(e.id as u16)
                    .ok_or_else(|| cfg_err(path, ClusterError::PortOverflow))?
            };
            e.addr = Some(format!("/ip4/{host}/tcp/{port}"));
            e.extra.insert(
                "peer_id".into(),
                toml::Value::String(key.public().to_peer_id().to_string()),
            );
            e.extra.insert("key".into(), toml::Value::String(rel));
        }
        let text = file.to_toml_string().map_err(topo(path))?;
        std::fs::write(path, text).map_err(io(path))?;
        Self::from_file(file, path.to_path_buf())
    }

    /// Number of peers.
    pub fn peers(&self) -> usize {
        self.ids.len()
    }

    /// The Q-out topology of an SFB cluster (`None` for an FMS star).
    pub fn topology(&self) -> Option<&Topology> {
        self.topology.as_ref()
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

    /// Reads peer `i`'s private key and checks it matches its `peer_id`.
    ///
    /// # Errors
    /// [`Error::Cluster`] for a missing `key` entry, an unreadable or malformed key file, or
    /// a key whose identity is not the listed `peer_id`.
    pub fn keypair(&self, i: usize) -> Result<Keypair> {
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
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let kp = dir.join(rel);
        let bytes = std::fs::read(&kp).map_err(io(&kp))?;
        let key = Keypair::from_protobuf_encoding(&bytes)
            .map_err(|err| cfg_err(&kp, ClusterError::BadKey(err)))?;
        if key.public().to_peer_id() != self.ids[i] {
            return Err(cfg_err(
                &kp,
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

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
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
    let mut out = vec![None; n];
    for e in &file.peers {
        if e.id >= n {
            return Err(ClusterError::IdOutOfRange { id: e.id, peers: n });
        }
        if out[e.id].replace(e.out.clone()).is_some() {
            return Err(ClusterError::DuplicateId { id: e.id });
        }
    }
    let out: Vec<Vec<usize>> = out.into_iter().map(|o| o.expect("ids 0..n")).collect();
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
