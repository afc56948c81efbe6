//! The [`Topology`] type: P peers, each with exactly Q out-neighbours.

use petgraph::graph::{DiGraph, NodeIndex};

use crate::analysis::{self, Analysis};
use crate::error::{Error, Result};

/// A validated Q-out broadcast topology over peers `0..P`.
///
/// Peer `p` sends its factors to the peers in [`out`](Self::out)`(p)`. Invariants, checked
/// by every constructor: `P ≥ 2`, `1 ≤ Q < P`, every peer has exactly `Q` out-neighbours,
/// all ids are in `0..P`, no self loops, no duplicate arcs, and the directed graph is
/// strongly connected (every peer's update can reach every other peer).
///
/// Peers are plain indices `0..P`; mapping them to network identities is the job of the
/// cluster file ([`ClusterFile`](crate::ClusterFile)) and of `sfb-net`.
///
/// # Example
/// ```
/// use sfb_topology::Topology;
/// let t = Topology::new(vec![vec![1], vec![2], vec![0]])?;
/// assert_eq!((t.peers(), t.out_degree()), (3, 1));
/// assert_eq!(t.in_neighbours(0), &[2]);
/// assert!(Topology::new(vec![vec![1], vec![0], vec![0]]).is_err()); // 2 unreachable
/// # Ok::<(), sfb_topology::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Topology {
    peers: usize,
    out_degree: usize,
    /// Row-major `P × Q` out-neighbour table.
    out: Vec<usize>,
    /// In-neighbour lists, sorted.
    inn: Vec<Vec<usize>>,
}

/// Checks `P ≥ 2` and `1 ≤ Q < P`.
///
/// # Errors
/// [`Error::TooFewPeers`], [`Error::ZeroOutDegree`] or [`Error::OutDegreeTooLarge`].
pub fn check_params(peers: usize, out_degree: usize) -> Result<()> {
    if peers < 2 {
        return Err(Error::TooFewPeers { peers });
    }
    if out_degree == 0 {
        return Err(Error::ZeroOutDegree { peers });
    }
    if out_degree >= peers {
        return Err(Error::OutDegreeTooLarge { out_degree, peers });
    }
    Ok(())
}

impl Topology {
    /// Builds and validates a topology from out-neighbour lists (`out[p]` = peers `p`
    /// sends to). The out-degree is taken from `out[0]`.
    ///
    /// # Errors
    /// Any violated invariant (see the type's docs), naming the first offending peer.
    pub fn new(out: Vec<Vec<usize>>) -> Result<Self> {
        let q = out.first().map_or(0, Vec::len);
        Self::with_out_degree(q, out)
    }

    /// Like [`new`](Self::new), but checks every list against the given out-degree.
    ///
    /// # Errors
    /// Any violated invariant; [`Error::DegreeMismatch`] if a list's length is not
    /// `out_degree`.
    pub fn with_out_degree(out_degree: usize, out: Vec<Vec<usize>>) -> Result<Self> {
        let peers = out.len();
        check_params(peers, out_degree)?;
        let mut flat = Vec::with_capacity(peers * out_degree);
        for (p, list) in out.iter().enumerate() {
            if list.len() != out_degree {
                return Err(Error::DegreeMismatch {
                    peer: p,
                    expected: out_degree,
                    got: list.len(),
                });
            }
            flat.extend_from_slice(list);
        }
        Self::from_flat(peers, out_degree, flat)
    }

    /// Builds from a row-major `P × Q` table and validates it.
    pub(crate) fn from_flat(peers: usize, out_degree: usize, out: Vec<usize>) -> Result<Self> {
        check_params(peers, out_degree)?;
        debug_assert_eq!(out.len(), peers * out_degree);
        let mut seen = vec![usize::MAX; peers];
        let mut inn = vec![Vec::with_capacity(out_degree); peers];
        for p in 0..peers {
            for &v in &out[p * out_degree..(p + 1) * out_degree] {
                if v >= peers {
                    return Err(Error::UnknownPeer {
                        peer: p,
                        neighbour: v,
                        peers,
                    });
                }
                if v == p {
                    return Err(Error::SelfLoop { peer: p });
                }
                if seen[v] == p {
                    return Err(Error::DuplicateArc {
                        peer: p,
                        neighbour: v,
                    });
                }
                seen[v] = p;
                inn[v].push(p);
            }
        }
        let t = Self {
            peers,
            out_degree,
            out,
            inn,
        };
        if let Some((from, to)) = t.unreachable_pair() {
            return Err(Error::NotStronglyConnected { from, to });
        }
        Ok(t)
    }

    /// Number of peers P.
    pub fn peers(&self) -> usize {
        self.peers
    }

    /// Out-degree Q (every peer sends to exactly Q others).
    pub fn out_degree(&self) -> usize {
        self.out_degree
    }

    /// The out-neighbours of `peer`, in the order given at construction.
    ///
    /// # Panics
    /// If `peer ≥ P`.
    pub fn out(&self, peer: usize) -> &[usize] {
        &self.out[peer * self.out_degree..(peer + 1) * self.out_degree]
    }

    /// The in-neighbours of `peer` (the peers that send to it), sorted.
    ///
    /// # Panics
    /// If `peer ≥ P`.
    pub fn in_neighbours(&self, peer: usize) -> &[usize] {
        &self.inn[peer]
    }

    /// All out-neighbour lists, `out_lists()[p] == out(p)`.
    pub fn out_lists(&self) -> Vec<Vec<usize>> {
        self.out
            .chunks(self.out_degree)
            .map(<[usize]>::to_vec)
            .collect()
    }

    /// All arcs `(from, to)`, by source peer.
    pub fn arcs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.peers).flat_map(move |p| self.out(p).iter().map(move |&v| (p, v)))
    }

    /// The row-major `P × Q` out-neighbour table.
    pub(crate) fn flat(&self) -> &[usize] {
        &self.out
    }

    /// The topology as a petgraph [`DiGraph`]; node `i` has weight `i` and index `i`.
    pub fn to_graph(&self) -> DiGraph<usize, ()> {
        let mut g = DiGraph::with_capacity(self.peers, self.peers * self.out_degree);
        for p in 0..self.peers {
            g.add_node(p);
        }
        for (a, b) in self.arcs() {
            g.add_edge(NodeIndex::new(a), NodeIndex::new(b), ());
        }
        g
    }

    /// `None` if strongly connected, else a pair `(from, to)` with `to` unreachable from `from`.
    fn unreachable_pair(&self) -> Option<(usize, usize)> {
        let sccs = petgraph::algo::tarjan_scc(&self.to_graph());
        if sccs.len() <= 1 {
            return None;
        }
        // Report a concrete pair: some peer that peer 0 cannot reach, or that cannot reach 0.
        let row = analysis::bfs_distances(self.flat(), self.out_degree, 0);
        if let Some(to) = row.iter().position(|&d| d == analysis::UNREACHABLE) {
            return Some((0, to));
        }
        let mut seen = vec![false; self.peers];
        let mut stack = vec![0];
        seen[0] = true;
        while let Some(x) = stack.pop() {
            for &y in &self.inn[x] {
                if !seen[y] {
                    seen[y] = true;
                    stack.push(y);
                }
            }
        }
        let from = seen.iter().position(|&s| !s).unwrap_or(0);
        Some((from, 0))
    }

    /// All-pairs hop distances and the summary numbers (cost, diameter, mean delay,
    /// eccentricities, lower bound).
    ///
    /// # Complexity
    /// One BFS per peer: O(P² Q) time, O(P²) memory.
    pub fn analyze(&self) -> Analysis {
        Analysis::of(self)
    }

    /// The SFB objective (paper eq. 3): Σ over ordered pairs p ≠ q of the hop distance
    /// p → q. Same as `analyze().cost` without keeping the distance matrix.
    ///
    /// # Complexity
    /// O(P² Q) time, O(P) memory.
    pub fn cost(&self) -> u64 {
        analysis::total_cost(self.flat(), self.peers, self.out_degree)
            .expect("a Topology is strongly connected")
    }
}
