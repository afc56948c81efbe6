//! Topology repair after peer failures.

use petgraph::graph::{DiGraph, NodeIndex};

use crate::error::{Error, Result};
use crate::topology::Topology;

/// Result of [`repair`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Repaired {
    /// The repaired topology over the survivors, relabelled `0..P'`.
    pub topology: Topology,
    /// `survivors[i]` is the old id of new peer `i` (increasing).
    pub survivors: Vec<usize>,
    /// Arcs of the new topology (in old ids) that were not in the old one.
    pub changed_arcs: usize,
    /// True if no minimal-change repair was found and the survivors were given a fresh
    /// generalized Kautz topology instead (not expected in practice; reported for honesty).
    pub rebuilt: bool,
}

impl Repaired {
    /// The new id of old peer `old`, if it survived.
    pub fn new_id(&self, old: usize) -> Option<usize> {
        self.survivors.binary_search(&old).ok()
    }
}

/// Removes failed peers and returns a valid Q-out topology over the survivors that keeps
/// as many of the old arcs as it can.
///
/// Survivors are relabelled `0..P'` in increasing old-id order. The out-degree becomes
/// `Q' = min(Q, P' − 1)` (it must shrink when fewer than Q + 1 peers survive; a peer then
/// keeps its first Q' surviving arcs). Every arc between survivors is kept; every arc
/// `u → f` into a failed peer is replaced by `u → g` with `g` the nearest survivor to `f`
/// in the old graph (so `f`'s own surviving out-neighbours first: the path `u → f → g`
/// becomes `u → g`), skipping `u` itself and duplicates. If the result is not strongly
/// connected, arcs inside a sink component are redirected one at a time to a source
/// component, each redirection chosen to reduce the number of strongly connected
/// components.
///
/// # Arguments
/// * `topology` — the old topology; `failed` — old ids of failed peers (duplicates allowed).
///
/// # Returns
/// The new topology, the id mapping and the number of changed arcs.
///
/// # Errors
/// [`Error::UnknownPeer`] for a failed id ≥ P; [`Error::TooFewSurvivors`] if fewer than 2
/// peers remain.
///
/// # Complexity
/// O(F · P Q) for the replacements (one BFS per lost arc, F = lost arcs), plus
/// O(P Q) per strong-connectivity fix attempt.
///
/// # Example
/// ```
/// use sfb_topology::{repair, ring};
/// let r = repair(&ring(6, 1)?, &[2])?;
/// assert_eq!(r.topology.peers(), 5);
/// assert_eq!(r.changed_arcs, 1); // 1 -> 2 -> 3 became 1 -> 3
/// assert_eq!(r.survivors, vec![0, 1, 3, 4, 5]);
/// # Ok::<(), sfb_topology::Error>(())
/// ```
pub fn repair(topology: &Topology, failed: &[usize]) -> Result<Repaired> {
    let p = topology.peers();
    let q = topology.out_degree();
    let mut dead = vec![false; p];
    for &f in failed {
        if f >= p {
            return Err(Error::UnknownPeer {
                peer: f,
                neighbour: f,
                peers: p,
            });
        }
        dead[f] = true;
    }
    let survivors: Vec<usize> = (0..p).filter(|&x| !dead[x]).collect();
    let n = survivors.len();
    if n < 2 {
        return Err(Error::TooFewSurvivors { survivors: n });
    }
    let q2 = q.min(n - 1);
    let mut new_id = vec![usize::MAX; p];
    for (i, &old) in survivors.iter().enumerate() {
        new_id[old] = i;
    }

    // Kept arcs, then replacements for lost ones (in old ids).
    let mut lists: Vec<Vec<usize>> = Vec::with_capacity(n);
    for &u in &survivors {
        let mut list: Vec<usize> = topology
            .out(u)
            .iter()
            .copied()
            .filter(|&v| !dead[v])
            .take(q2)
            .collect();
        for &f in topology.out(u).iter().filter(|&&v| dead[v]) {
            if list.len() == q2 {
                break;
            }
            if let Some(g) = nearest_survivors(topology, f, &dead)
                .into_iter()
                .find(|&g| g != u && !list.contains(&g))
            {
                list.push(g);
            }
        }
        if list.len() < q2 {
            for g in nearest_survivors(topology, u, &dead) {
                if list.len() == q2 {
                    break;
                }
                if g != u && !list.contains(&g) {
                    list.push(g);
                }
            }
        }
        lists.push(list);
    }
    // Relabel.
    let mut out: Vec<Vec<usize>> = lists
        .iter()
        .map(|l| l.iter().map(|&v| new_id[v]).collect())
        .collect();
    let mut rebuilt = false;
    if !connect(&mut out, n * 4 + 16) {
        out = crate::generate::kautz(n, q2)?.out_lists();
        rebuilt = true;
    }
    let topology_new = Topology::with_out_degree(q2, out)?;
    let changed_arcs = topology_new
        .arcs()
        .filter(|&(a, b)| !topology.out(survivors[a]).contains(&survivors[b]))
        .count();
    Ok(Repaired {
        topology: topology_new,
        survivors,
        changed_arcs,
        rebuilt,
    })
}

/// Survivors in BFS order from `from` in the old graph (excluding `from` itself).
fn nearest_survivors(t: &Topology, from: usize, dead: &[bool]) -> Vec<usize> {
    let p = t.peers();
    let mut seen = vec![false; p];
    let mut queue = vec![from];
    seen[from] = true;
    let mut head = 0;
    let mut found = Vec::new();
    while head < queue.len() {
        let x = queue[head];
        head += 1;
        for &y in t.out(x) {
            if !seen[y] {
                seen[y] = true;
                queue.push(y);
                if !dead[y] {
                    found.push(y);
                }
            }
        }
    }
    found
}

/// Strongly connected components of `out`, as a component id per peer, and their count.
fn components(out: &[Vec<usize>]) -> (Vec<usize>, usize) {
    let mut g: DiGraph<(), ()> = DiGraph::with_capacity(out.len(), 0);
    for _ in 0..out.len() {
        g.add_node(());
    }
    for (a, list) in out.iter().enumerate() {
        for &b in list {
            g.add_edge(NodeIndex::new(a), NodeIndex::new(b), ());
        }
    }
    let sccs = petgraph::algo::tarjan_scc(&g);
    let mut comp = vec![0; out.len()];
    for (c, members) in sccs.iter().enumerate() {
        for m in members {
            comp[m.index()] = c;
        }
    }
    (comp, sccs.len())
}

/// Score of a graph for [`connect`]: components first, then components with no arc
/// leaving or entering them. Strongly connected iff the score is 0.
fn score(out: &[Vec<usize>]) -> (usize, Vec<usize>, Vec<bool>, Vec<bool>) {
    let (comp, count) = components(out);
    let mut has_out = vec![false; count];
    let mut has_in = vec![false; count];
    for (a, list) in out.iter().enumerate() {
        for &b in list {
            if comp[a] != comp[b] {
                has_out[comp[a]] = true;
                has_in[comp[b]] = true;
            }
        }
    }
    let lacking = has_out.iter().filter(|&&h| !h).count() + has_in.iter().filter(|&&h| !h).count();
    let s = if count == 1 {
        0
    } else {
        count * 2 * out.len() + lacking
    };
    (s, comp, has_out, has_in)
}

/// Makes `out` strongly connected by redirecting arcs of sink components (no arc leaves
/// them) towards source components (no arc enters them) first, then towards any other
/// component; every redirection must reduce [`score`]. Returns false if it gives up after
/// `max_steps` redirections.
fn connect(out: &mut [Vec<usize>], max_steps: usize) -> bool {
    let n = out.len();
    for _ in 0..max_steps {
        let (current, comp, has_out, has_in) = score(out);
        if current == 0 {
            return true;
        }
        let mut targets: Vec<usize> = (0..n).filter(|&x| !has_in[comp[x]]).collect();
        targets.extend((0..n).filter(|&x| has_in[comp[x]]));
        let mut improved = false;
        'search: for u in (0..n).filter(|&u| !has_out[comp[u]]) {
            for slot in 0..out[u].len() {
                for &x in &targets {
                    if comp[x] == comp[u] || out[u].contains(&x) {
                        continue;
                    }
                    let old = out[u][slot];
                    out[u][slot] = x;
                    if score(out).0 < current {
                        improved = true;
                        break 'search;
                    }
                    out[u][slot] = old;
                }
            }
        }
        if !improved {
            return false;
        }
    }
    false
}
