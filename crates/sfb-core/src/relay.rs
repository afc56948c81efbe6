//! Relay for partial broadcast: every batch reaches every replica, once.
//!
//! Under partial broadcast a peer sends its batches to its `Q` out-neighbours only, so a
//! replica sees `(Q+1)/P` of the updates. With relay (`--relay`) each batch also travels
//! the rest of its **origin's shortest-path tree** in the topology: a peer that applies a
//! batch forwards it to its children in that origin's tree, in the same clock's
//! transmission as its own batch. Every replica then applies every batch exactly once, `h`
//! clocks after it was computed, `h` being its hop distance from the origin; a peer still
//! holds only `Q` connections.
//!
//! [`Routes`] holds every origin's tree, computed from the topology by breadth-first search
//! with ties broken by peer index (so every peer, given the same topology, computes the
//! same trees: no coordination, and each batch has exactly one path to each peer). The
//! engine checks each relayed frame against the trees: it must come from this peer's
//! parent in the origin's tree, carry the origin's next clock, and sit where its sender's
//! stream says ([`Message::Relayed`](crate::wire::Message::Relayed)).
//!
//! Costs: the bytes of a clock are those of full broadcast (each batch crosses `P − 1`
//! arcs, one per peer it reaches), spread over `Q` connections per peer; what relay saves
//! is connections, not bytes. A batch `h` hops from a peer is applied `h − 1` clocks later
//! than under full broadcast (more staleness).

use crate::PeerId;

/// Every origin's shortest-path tree in a topology (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    peers: usize,
    /// `parent[o·P + n]`: from whom `n` gets `o`'s batches (`NONE` for `n = o`).
    parent: Vec<u32>,
    /// `depth[o·P + n]`: hops from `o` to `n`.
    depth: Vec<u32>,
    /// `children[start[o·P + n]..start[o·P + n + 1]]`: whom `n` forwards `o`'s batches to,
    /// in peer order.
    start: Vec<usize>,
    children: Vec<PeerId>,
    /// Each peer's out-neighbours (the topology), sorted.
    out: Vec<Vec<PeerId>>,
}

const NONE: u32 = u32::MAX;

/// Why a topology cannot carry relayed updates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError {
    /// Some peer cannot be reached from some origin.
    #[error(
        "{to} cannot be reached from {from} in the topology: with relay every peer must reach \
         every other (the topology is not strongly connected)"
    )]
    Unreachable {
        /// The origin.
        from: PeerId,
        /// A peer its batches cannot reach.
        to: PeerId,
    },
    /// An out-neighbour list names a peer outside the cluster, or the peer itself.
    #[error("the out-neighbours of {peer} name {bad}, which is not another peer of the {peers}")]
    BadNeighbour {
        /// Whose list.
        peer: PeerId,
        /// The bad entry.
        bad: PeerId,
        /// Peers in the cluster.
        peers: usize,
    },
}

impl Routes {
    /// The trees of the topology whose peer `i` sends to `out[i]`.
    ///
    /// # Errors
    /// [`RouteError::Unreachable`] when some peer cannot reach another;
    /// [`RouteError::BadNeighbour`] for a list entry that is not another peer.
    ///
    /// # Complexity
    /// O(P · (P + E)) time for `E` arcs (a breadth-first search per origin), O(P²) memory.
    pub fn new(out: &[Vec<PeerId>]) -> Result<Self, RouteError> {
        let peers = out.len();
        let mut sorted: Vec<Vec<PeerId>> = Vec::with_capacity(peers);
        for (i, list) in out.iter().enumerate() {
            let mut l = list.clone();
            l.sort_unstable();
            l.dedup();
            if let Some(&bad) = l.iter().find(|p| p.index() >= peers || p.index() == i) {
                return Err(RouteError::BadNeighbour {
                    peer: PeerId(i as u32),
                    bad,
                    peers,
                });
            }
            sorted.push(l);
        }
        match Self::build(sorted, &vec![false; peers]) {
            (routes, None) => Ok(routes),
            (_, Some(e)) => Err(e),
        }
    }

    /// The trees of this topology after the loss of `lost`: the arcs into lost peers are
    /// gone, the others stay (no new ones: a relayed batch goes on in the positions its
    /// sender's stream gave it), and each origin's tree is computed again by the same
    /// search, so every survivor computes the same trees from the same set. A lost
    /// origin keeps its tree over the survivors, so its batches that reached a survivor
    /// before the loss still reach every survivor its out-neighbours reach.
    ///
    /// With them, the first pair of survivors of which one cannot reach the other through
    /// the arcs left ([`RouteError::Unreachable`]), if any: the trees then span what each
    /// origin reaches. (A peer not yet known lost may be why: it is dead too.)
    pub fn without(&self, lost: &[PeerId]) -> (Self, Option<RouteError>) {
        let mut blocked = vec![false; self.peers];
        for p in lost {
            if let Some(b) = blocked.get_mut(p.index()) {
                *b = true;
            }
        }
        let out = self
            .out
            .iter()
            .map(|l| l.iter().copied().filter(|m| !blocked[m.index()]).collect())
            .collect();
        Self::build(out, &blocked)
    }

    /// Breadth-first trees over `sorted` (sorted, valid out-lists), never entering a
    /// `blocked` peer; with them the first origin not blocked that does not reach every
    /// peer not blocked (a blocked origin need not).
    fn build(sorted: Vec<Vec<PeerId>>, blocked: &[bool]) -> (Self, Option<RouteError>) {
        let peers = sorted.len();
        let mut parent = vec![NONE; peers * peers];
        let mut depth = vec![0u32; peers * peers];
        let mut kids: Vec<Vec<PeerId>> = vec![Vec::new(); peers * peers];
        let mut queue = std::collections::VecDeque::with_capacity(peers);
        let mut cut = None;
        for o in 0..peers {
            let row = o * peers;
            let mut seen = blocked.to_vec();
            seen[o] = true;
            queue.clear();
            queue.push_back(o);
            while let Some(n) = queue.pop_front() {
                for &m in &sorted[n] {
                    if !seen[m.index()] {
                        seen[m.index()] = true;
                        parent[row + m.index()] = n as u32;
                        depth[row + m.index()] = depth[row + n] + 1;
                        kids[row + n].push(m);
                        queue.push_back(m.index());
                    }
                }
            }
            if blocked[o] || cut.is_some() {
                continue;
            }
            if let Some(to) = seen.iter().position(|&s| !s) {
                cut = Some(RouteError::Unreachable {
                    from: PeerId(o as u32),
                    to: PeerId(to as u32),
                });
            }
        }
        let mut start = Vec::with_capacity(peers * peers + 1);
        let mut children = Vec::with_capacity(peers * peers.saturating_sub(1));
        for mut k in kids {
            start.push(children.len());
            k.sort_unstable();
            children.extend(k);
        }
        start.push(children.len());
        let routes = Self {
            peers,
            parent,
            depth,
            start,
            children,
            out: sorted,
        };
        (routes, cut)
    }

    /// Peers of the topology.
    pub fn peers(&self) -> usize {
        self.peers
    }

    /// The out-neighbours of `peer` in the topology, sorted.
    pub fn out_neighbors(&self, peer: PeerId) -> &[PeerId] {
        &self.out[peer.index()]
    }

    /// From whom `node` gets `origin`'s batches (`None` for `origin` itself).
    pub fn parent(&self, origin: PeerId, node: PeerId) -> Option<PeerId> {
        let p = self.parent[origin.index() * self.peers + node.index()];
        (p != NONE).then_some(PeerId(p))
    }

    /// Whom `node` forwards `origin`'s batches to (for `node = origin`: its out-neighbours),
    /// in peer order.
    pub fn children(&self, origin: PeerId, node: PeerId) -> &[PeerId] {
        let i = origin.index() * self.peers + node.index();
        &self.children[self.start[i]..self.start[i + 1]]
    }

    /// Hops from `origin` to `node`: the clocks after which `node` applies a batch of
    /// `origin`, counting the direct send as one.
    pub fn depth(&self, origin: PeerId, node: PeerId) -> u32 {
        self.depth[origin.index() * self.peers + node.index()]
    }

    /// The largest hop distance between two peers (the topology's diameter): the last
    /// batches of a run reach every replica after this many hops.
    pub fn height(&self) -> u32 {
        self.depth.iter().copied().max().unwrap_or(0)
    }

    /// Batches `node` forwards per clock (batches of other origins only).
    pub fn forwards(&self, node: PeerId) -> usize {
        (0..self.peers)
            .filter(|&o| o != node.index())
            .map(|o| self.children(PeerId(o as u32), node).len())
            .sum()
    }

    /// The most batches that cross one arc per clock (its own origin's included): what a
    /// transport's per-arc queue must hold for one clock.
    pub fn max_arc_load(&self) -> usize {
        let mut load = std::collections::HashMap::<(usize, PeerId), usize>::new();
        for o in 0..self.peers {
            for n in 0..self.peers {
                for &c in self.children(PeerId(o as u32), PeerId(n as u32)) {
                    *load.entry((n, c)).or_default() += 1;
                }
            }
        }
        load.values().copied().max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u32]) -> Vec<PeerId> {
        v.iter().map(|&x| PeerId(x)).collect()
    }

    /// `i → i+1, i+2` over `p` peers.
    fn circulant(p: u32) -> Vec<Vec<PeerId>> {
        (0..p).map(|i| ids(&[(i + 1) % p, (i + 2) % p])).collect()
    }

    #[test]
    fn the_trees_route_around_a_lost_peer_and_keep_a_lost_origins_tree() {
        let r = Routes::new(&circulant(6)).unwrap();
        let lost = ids(&[2]);
        let (w, cut) = r.without(&lost);
        assert_eq!(cut, None);
        for o in (0..6).filter(|&o| o != 2) {
            for n in (0..6).filter(|&n| n != 2 && n != o) {
                // Every survivor still gets every survivor's batches, never through 2.
                let mut at = PeerId(n);
                while let Some(p) = w.parent(PeerId(o), at) {
                    assert_ne!(p, PeerId(2), "{o} → {n}");
                    at = p;
                }
                assert_eq!(at, PeerId(o));
            }
            assert!(!w.children(PeerId(o), PeerId(o)).contains(&PeerId(2)));
            assert_eq!(w.parent(PeerId(o), PeerId(2)), None);
        }
        // 1 sent to 2 and 3: now to 3 alone, and 3 passes 1's batches on to 4 and 5.
        assert_eq!(w.out_neighbors(PeerId(1)), ids(&[3]).as_slice());
        assert_eq!(w.children(PeerId(1), PeerId(3)), ids(&[4, 5]).as_slice());
        // The lost origin's batches still reach every survivor from its out-neighbours.
        assert_eq!(w.children(PeerId(2), PeerId(2)), ids(&[3, 4]).as_slice());
        assert_eq!(w.parent(PeerId(2), PeerId(5)), Some(PeerId(3)));
        assert_eq!(w.parent(PeerId(2), PeerId(0)), Some(PeerId(4)));
        // The same set gives the same trees whatever its order.
        assert_eq!(w, r.without(&ids(&[2, 2])).0);
        // 0 sent to 1 and 2 only: without both it reaches nobody.
        let (w, cut) = r.without(&ids(&[2, 1]));
        assert_eq!(
            cut,
            Some(RouteError::Unreachable {
                from: PeerId(0),
                to: PeerId(3)
            })
        );
        // The others' trees still span what they reach.
        assert_eq!(w.parent(PeerId(3), PeerId(0)), Some(PeerId(4)));
    }

    fn ring(p: u32, q: u32) -> Vec<Vec<PeerId>> {
        (0..p)
            .map(|i| (1..=q).map(|k| PeerId((i + k) % p)).collect())
            .collect()
    }

    #[test]
    fn a_ring_relays_around_the_ring() {
        let r = Routes::new(&ring(5, 1)).unwrap();
        assert_eq!(r.height(), 4);
        assert_eq!(r.parent(PeerId(0), PeerId(3)), Some(PeerId(2)));
        assert_eq!(r.parent(PeerId(0), PeerId(0)), None);
        assert_eq!(r.children(PeerId(0), PeerId(2)), ids(&[3]).as_slice());
        assert_eq!(r.children(PeerId(0), PeerId(4)), &[] as &[PeerId]);
        assert_eq!(r.depth(PeerId(1), PeerId(0)), 4);
        // Every peer forwards the batches of the three origins it is not last for.
        assert!((0..5).all(|n| r.forwards(PeerId(n)) == 3));
        assert_eq!(r.max_arc_load(), 4);
    }

    #[test]
    fn every_tree_spans_every_peer_once() {
        let p = 12;
        let out: Vec<Vec<PeerId>> = (0..p)
            .map(|i| ids(&[(i + 1) % p, (i + 5) % p, (i + 7) % p]))
            .collect();
        let r = Routes::new(&out).unwrap();
        for o in 0..p {
            let o = PeerId(o);
            let mut reached = vec![0; p as usize];
            let mut stack = vec![o];
            while let Some(n) = stack.pop() {
                reached[n.index()] += 1;
                for &c in r.children(o, n) {
                    assert_eq!(r.parent(o, c), Some(n));
                    assert_eq!(r.depth(o, c), r.depth(o, n) + 1);
                    assert!(out[n.index()].contains(&c), "a tree arc is a topology arc");
                    stack.push(c);
                }
            }
            assert!(reached.iter().all(|&k| k == 1), "{o}: {reached:?}");
            assert_eq!(r.children(o, o), r.out_neighbors(o));
        }
        // Each origin's batch crosses P − 1 arcs: the bytes of full broadcast.
        let total: usize = (0..p).map(|n| r.forwards(PeerId(n))).sum();
        assert_eq!(total, (p as usize) * (p as usize - 1) - 3 * p as usize);
    }

    #[test]
    fn a_topology_that_does_not_connect_is_refused() {
        // 0 ⇄ 1, 2 ⇄ 3: two islands.
        let out = vec![ids(&[1]), ids(&[0]), ids(&[3]), ids(&[2])];
        let err = Routes::new(&out).unwrap_err();
        assert_eq!(
            err,
            RouteError::Unreachable {
                from: PeerId(0),
                to: PeerId(2)
            }
        );
        assert!(err.to_string().contains("not strongly connected"));
        let err = Routes::new(&[ids(&[1]), ids(&[1])]).unwrap_err();
        assert!(matches!(err, RouteError::BadNeighbour { .. }), "{err}");
    }
}
