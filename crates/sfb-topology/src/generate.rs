//! Constructions: full, ring, circulant, exponential, generalized Kautz, seeded random.

use rand::SeedableRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};
use crate::topology::{Topology, check_params};

/// A topology construction, for [`generate`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Method {
    /// Every peer sends to every other peer (needs Q = P − 1). See [`full`].
    Full,
    /// Peer i sends to i+1, …, i+Q. See [`ring`].
    Ring,
    /// Peer i sends to i+j for each jump j (Q = number of jumps). See [`circulant`].
    Circulant(Vec<usize>),
    /// Peer i sends to i+1, i+2, i+4, …. See [`exponential`].
    Exponential,
    /// Generalized Kautz (Imase–Itoh) graph. See [`kautz`].
    Kautz,
    /// Seeded random Q-out graph. See [`random`].
    Random {
        /// RNG seed (`ChaCha8Rng::seed_from_u64`).
        seed: u64,
    },
}

impl Method {
    /// Short lower-case name, as used on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Method::Full => "full",
            Method::Ring => "ring",
            Method::Circulant(_) => "circulant",
            Method::Exponential => "exponential",
            Method::Kautz => "kautz",
            Method::Random { .. } => "random",
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Builds a topology with the given construction.
///
/// # Errors
/// Invalid `peers`/`out_degree` ([`check_params`]), a degree the method cannot produce
/// ([`Error::MethodDegree`] for [`Method::Full`] with Q ≠ P − 1, [`Error::InvalidJump`] for
/// a jump list of the wrong length), or a circulant that is not strongly connected.
///
/// # Example
/// ```
/// use sfb_topology::{generate, Method};
/// let t = generate(&Method::Kautz, 12, 3)?;
/// assert_eq!(t.cost(), sfb_topology::lower_bound(12, 3)); // Kautz K(3,2) is Moore-optimal
/// # Ok::<(), sfb_topology::Error>(())
/// ```
pub fn generate(method: &Method, peers: usize, out_degree: usize) -> Result<Topology> {
    check_params(peers, out_degree)?;
    match method {
        Method::Full => {
            if out_degree != peers - 1 {
                return Err(Error::MethodDegree {
                    method: "full",
                    expected: peers - 1,
                    got: out_degree,
                    peers,
                });
            }
            full(peers)
        }
        Method::Ring => ring(peers, out_degree),
        Method::Circulant(jumps) => {
            if jumps.len() != out_degree {
                return Err(Error::InvalidJump {
                    jump: jumps.len(),
                    peers,
                    reason: "the number of jumps must equal the out-degree",
                });
            }
            circulant(peers, jumps)
        }
        Method::Exponential => exponential(peers, out_degree),
        Method::Kautz => kautz(peers, out_degree),
        Method::Random { seed } => random(peers, out_degree, *seed),
    }
}

/// The complete digraph: every peer sends to all P − 1 others (full broadcast).
///
/// # Errors
/// [`Error::TooFewPeers`] if P < 2.
pub fn full(peers: usize) -> Result<Topology> {
    check_params(peers, peers.saturating_sub(1))?;
    ring(peers, peers - 1)
}

/// Peer i sends to i+1, …, i+Q (mod P): the circulant with jumps 1..=Q. Q = 1 is the
/// directed ring, the only strongly connected 1-out graph up to relabelling.
///
/// # Errors
/// Invalid `peers`/`out_degree` ([`check_params`]).
pub fn ring(peers: usize, out_degree: usize) -> Result<Topology> {
    check_params(peers, out_degree)?;
    circulant(peers, &(1..=out_degree).collect::<Vec<_>>())
}

/// The circulant digraph: peer i sends to (i + j) mod P for each jump j.
///
/// Strongly connected iff gcd(P, j₁, …, j_Q) = 1.
///
/// # Errors
/// [`Error::InvalidJump`] for a jump outside `1..P` or repeated; [`Error::NotStronglyConnected`]
/// if the jumps share a factor with P; parameter errors as in [`check_params`].
///
/// # Complexity
/// O(P Q).
pub fn circulant(peers: usize, jumps: &[usize]) -> Result<Topology> {
    check_params(peers, jumps.len())?;
    for (k, &j) in jumps.iter().enumerate() {
        if j == 0 || j >= peers {
            return Err(Error::InvalidJump {
                jump: j,
                peers,
                reason: "jumps must be in 1..P",
            });
        }
        if jumps[..k].contains(&j) {
            return Err(Error::InvalidJump {
                jump: j,
                peers,
                reason: "jump repeated",
            });
        }
    }
    let q = jumps.len();
    let mut out = Vec::with_capacity(peers * q);
    for i in 0..peers {
        out.extend(jumps.iter().map(|&j| (i + j) % peers));
    }
    Topology::from_flat(peers, q, out)
}

/// The exponential graph of decentralized-SGD libraries: peer i sends to i + 2^k (mod P)
/// for k = 0, 1, … .
///
/// With Q out-neighbours the jumps are the first Q powers of two below P; if there are
/// fewer than Q of them (Q > ⌈log₂ P⌉), the list is completed with the smallest unused
/// jumps 3, 5, 6, … .
///
/// # Errors
/// Invalid `peers`/`out_degree` ([`check_params`]).
pub fn exponential(peers: usize, out_degree: usize) -> Result<Topology> {
    check_params(peers, out_degree)?;
    let mut jumps = Vec::with_capacity(out_degree);
    let mut j = 1usize;
    while j < peers && jumps.len() < out_degree {
        jumps.push(j);
        j *= 2;
    }
    let mut extra = 1;
    while jumps.len() < out_degree {
        if !jumps.contains(&extra) {
            jumps.push(extra);
        }
        extra += 1;
    }
    circulant(peers, &jumps)
}

/// The generalized Kautz (Imase–Itoh) digraph: peer i sends to (−Q·i − a) mod P for
/// a = 1, …, Q. It has diameter ≤ ⌈log_Q P⌉ and, when P = Q^D + Q^(D−1), is the Kautz
/// digraph K(Q, D).
///
/// Repairs: the Q targets of a peer are consecutive residues, so they never repeat, but
/// one of them can be the peer itself; such a self loop is replaced by continuing the
/// sequence (a = Q+1, Q+2, … until the target is new). For Q = 1 the Imase–Itoh graph is a
/// union of 2-cycles, so the ring is returned instead (every strongly connected 1-out
/// graph is a relabelled ring).
///
/// # Errors
/// Invalid `peers`/`out_degree` ([`check_params`]).
///
/// # Complexity
/// O(P Q) plus one strong-connectivity check.
pub fn kautz(peers: usize, out_degree: usize) -> Result<Topology> {
    check_params(peers, out_degree)?;
    if out_degree == 1 {
        return ring(peers, 1);
    }
    let p = peers as u128;
    let q = out_degree as u128;
    let target = |i: usize, a: u128| -> usize { ((p - (q * i as u128 + a) % p) % p) as usize };
    let mut out = Vec::with_capacity(peers * out_degree);
    for i in 0..peers {
        let start = out.len();
        let mut a = 1u128;
        while out.len() - start < out_degree {
            let t = target(i, a);
            if t != i && !out[start..].contains(&t) {
                out.push(t);
            }
            a += 1;
        }
    }
    Topology::from_flat(peers, out_degree, out)
}

/// A seeded random Q-out topology: a random Hamiltonian cycle (which guarantees strong
/// connectivity) plus Q − 1 further distinct out-neighbours per peer drawn uniformly.
///
/// # Errors
/// Invalid `peers`/`out_degree` ([`check_params`]).
///
/// # Complexity
/// O(P²) time (candidate lists), O(P) extra memory.
pub fn random(peers: usize, out_degree: usize, seed: u64) -> Result<Topology> {
    check_params(peers, out_degree)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut perm: Vec<usize> = (0..peers).collect();
    perm.shuffle(&mut rng);
    let mut succ = vec![0; peers];
    for k in 0..peers {
        succ[perm[k]] = perm[(k + 1) % peers];
    }
    let mut out = Vec::with_capacity(peers * out_degree);
    let mut candidates = Vec::with_capacity(peers);
    for (i, &s) in succ.iter().enumerate() {
        out.push(s);
        candidates.clear();
        candidates.extend((0..peers).filter(|&v| v != i && v != s));
        out.extend(
            candidates
                .choose_multiple(&mut rng, out_degree - 1)
                .copied(),
        );
    }
    Topology::from_flat(peers, out_degree, out)
}

/// Generalized Kautz graph on `peers + extra` peers with `extra` peers removed: every arc
/// into a removed peer `x` is redirected to one of `x`'s out-neighbours (in-neighbour `j`
/// of `x` gets out-neighbour `j` when possible, keeping in-degrees balanced). The removed
/// set is drawn at random among peers with pairwise disjoint closed neighbourhoods.
///
/// Used as a starting point by the optimizer when `peers` is a little below a Kautz order
/// `Q^D + Q^(D−1)`, where the Kautz digraph is much closer to the bound than the
/// generalized Kautz graph on `peers`.
pub(crate) fn kautz_deletion(
    peers: usize,
    out_degree: usize,
    extra: usize,
    rng: &mut ChaCha8Rng,
) -> Option<Topology> {
    let (p, q) = (peers, out_degree);
    let n = p + extra;
    let base = kautz(n, q).ok()?;
    // Pick removed peers far apart: disjoint closed 2-neighbourhoods if there is room,
    // else disjoint closed neighbourhoods, else any.
    let mut removed = vec![false; n];
    for radius in [2usize, 1, 0] {
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(rng);
        let mut blocked = vec![false; n];
        removed.fill(false);
        let mut count = 0;
        let mut frontier = Vec::new();
        let mut next = Vec::new();
        for &x in &order {
            if count == extra {
                break;
            }
            if blocked[x] {
                continue;
            }
            removed[x] = true;
            count += 1;
            blocked[x] = true;
            frontier.clear();
            frontier.push(x);
            for _ in 0..radius {
                next.clear();
                for &y in &frontier {
                    for &z in base.out(y).iter().chain(base.in_neighbours(y)) {
                        if !blocked[z] {
                            blocked[z] = true;
                            next.push(z);
                        }
                    }
                }
                std::mem::swap(&mut frontier, &mut next);
            }
        }
        if count == extra {
            break;
        }
    }
    let mut label = vec![usize::MAX; n];
    let mut next = 0;
    for x in 0..n {
        if !removed[x] {
            label[x] = next;
            next += 1;
        }
    }
    let mut out = Vec::with_capacity(p * q);
    for y in 0..n {
        if removed[y] {
            continue;
        }
        let start = out.len();
        for &x in base.out(y) {
            if !removed[x] {
                out.push(label[x]);
            }
        }
        for &x in base.out(y) {
            if !removed[x] {
                continue;
            }
            let j = base
                .in_neighbours(x)
                .iter()
                .position(|&z| z == y)
                .unwrap_or(0);
            let cands = base.out(x);
            let k0 = j;
            let pick = (0..cands.len())
                .map(|k| cands[(k0 + k) % cands.len()])
                .find(|&z| !removed[z] && z != y && !out[start..].contains(&label[z]));
            match pick {
                Some(z) => out.push(label[z]),
                None => {
                    let z = (0..n)
                        .find(|&z| !removed[z] && z != y && !out[start..].contains(&label[z]))?;
                    out.push(label[z]);
                }
            }
        }
    }
    Topology::from_flat(p, q, out).ok()
}
