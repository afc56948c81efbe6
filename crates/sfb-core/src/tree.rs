//! Partial broadcast by an aggregation tree (`--partial tree`): every replica applies the
//! same compressed sum of every peer's batch, each clock, at O(Q) pairs per peer.
//!
//! The peers form a Q-ary tree in heap order: peer `p`'s parent is `(p − 1) / Q` and its
//! children are `Q·p + 1 ..= Q·p + Q`; peer 0 is the root. Each clock `t`:
//!
//! 1. **Up.** Once a peer has computed its batch of `t` and received every child's up
//!    message of `t`, it adds them and its residual, keeps the best rank-`R_up` form of the
//!    sum ([`Compressor`], error feedback: what is cut is sent in a later clock, nothing
//!    is lost), and sends it to its parent ([`Message::Sum`] with `down: false`).
//! 2. **Down.** The root does the same with rank `R_down`; the result is the clock's
//!    update. It goes to the root's children, and every peer forwards it to its own,
//!    verbatim ([`Message::Sum`] with `down: true`).
//! 3. **Apply.** A peer applies the down message of `t` before its clock `t + 1` (under
//!    BSP; SSP and async bound or drop that wait as for every other mode). Its own batch
//!    is applied only as part of the sum, as every other replica applies it.
//!
//! So the replicas stay **identical** under BSP (every one applies the same bytes), there
//! is no consensus to reach and no disagreement to contract, and each clock's step holds
//! what all `P·K` samples taught, compressed to rank `R_down` (the rest arriving in the
//! clocks after). A clock costs `2·H` hops of the tree's height `H = ⌈log_Q P⌉`, not one,
//! but each hop carries at most `R` pairs per link.
//!
//! **Cost per peer per clock.** A leaf sends `R_up` pairs; an inner peer `R_up` up and
//! `R_down` to each of its `Q` children. A peer applies `R_down` pairs, and an inner peer
//! decomposes `K + Q·R_up` pairs plus its residual. All O(Q), independent of P. The
//! defaults are `R_up = R_down = K`: a leaf's own batch goes up as it is.
//!
//! **The factored optimizer** (MLR's default) scales each coordinate by the squares of
//! the raw gradients it has applied. Those of a sum of batches are not those of the
//! batches, so every message carries the sum of its subtree's statistics (`J + D` values,
//! [`factored_stats`]): each replica's optimizer sees exactly what full broadcast's sees,
//! and only the direction is compressed.
//!
//! **Checkpoints** hold a peer's residual. A cut at clock `t` is taken once the down
//! message of `t − 1` is applied, before the peer's batch of `t`: no sum of a later clock
//! is begun, and a child's part of `t` that came early is sent again on resume.
//!
//! **Not yet**: peer loss (the tree has no repair), relay, gossip, `--compress`,
//! `--prioritize`, `--aggregate` and SAGA (its table needs every origin's factors);
//! [`crate::Config::validate`] names each.
//!
//! [`Compressor`]: crate::compress::Compressor
//! [`Message::Sum`]: crate::wire::Message::Sum

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::compress::Compressor;
use crate::{Error, FactorBatch, PeerId, Result, VFactors};

/// The tree mode's settings (one per run; every peer the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Children per peer (`Q`).
    pub fanout: usize,
    /// Pairs per up message at most.
    pub rank_up: usize,
    /// Pairs per down message (the clock's update) at most.
    pub rank_down: usize,
}

impl Config {
    /// Fan-out `fanout` with both ranks the batch size `batch` (at least 1).
    pub fn new(fanout: usize, batch: usize) -> Self {
        Self {
            fanout,
            rank_up: batch.max(1),
            rank_down: batch.max(1),
        }
    }

    /// `peer`'s parent, `None` for the root.
    pub fn parent(&self, peer: PeerId) -> Option<PeerId> {
        (peer.index() > 0).then(|| PeerId(((peer.index() - 1) / self.fanout.max(1)) as u32))
    }

    /// `peer`'s children in a run of `peers` peers.
    pub fn children(&self, peer: PeerId, peers: usize) -> Vec<PeerId> {
        let q = self.fanout.max(1);
        let first = peer.index() * q + 1;
        (first..(first + q).min(peers))
            .map(|c| PeerId(c as u32))
            .collect()
    }

    /// `peer`'s neighbours: its parent (if any), then its children. They are both whom it
    /// sends to and whom it hears from.
    pub fn neighbors(&self, peer: PeerId, peers: usize) -> Vec<PeerId> {
        self.parent(peer)
            .into_iter()
            .chain(self.children(peer, peers))
            .collect()
    }

    /// Every peer's neighbours, as a topology's out-lists.
    pub fn lists(&self, peers: usize) -> Vec<Vec<usize>> {
        (0..peers)
            .map(|p| {
                self.neighbors(PeerId(p as u32), peers)
                    .iter()
                    .map(|q| q.index())
                    .collect()
            })
            .collect()
    }

    /// The tree's height: hops from the root to its deepest peer.
    pub fn height(&self, peers: usize) -> usize {
        let mut h = 0;
        let mut p = peers.saturating_sub(1);
        while p > 0 {
            p = (p - 1) / self.fanout.max(1);
            h += 1;
        }
        h
    }

    /// Whether the settings fit a run of `peers` peers, or why not.
    ///
    /// # Errors
    /// A sentence naming the problem.
    pub fn check(&self, peers: usize) -> std::result::Result<(), String> {
        if self.fanout == 0 {
            return Err("--partial tree needs a fan-out (--out-degree) of at least 1".into());
        }
        if self.rank_up == 0 || self.rank_down == 0 {
            return Err("--partial tree's ranks must be at least 1".into());
        }
        if peers < 2 {
            return Err("--partial tree needs at least 2 peers".into());
        }
        Ok(())
    }
}

/// The factored optimizer's statistics of `batch` ([`crate::Method::Factored`]): per row
/// of W then per column, `Σ_i a² u_ij² ‖v_i‖²` and `Σ_i a² v_ik² ‖u_i‖²` with
/// `a = scale / lr`, what its apply adds for the batch. Additive over batches.
pub fn factored_stats(batch: &FactorBatch, lr: f32) -> Vec<f64> {
    let mut rows = vec![0.0; batch.j];
    let mut cols = vec![0.0; batch.d];
    crate::optim::add_factored_stats(
        &mut rows,
        &mut cols,
        batch,
        f64::from(batch.scale) / f64::from(lr),
    );
    rows.extend(cols);
    rows
}

/// One clock's summed part: its pairs and the optimizer statistics that go with them.
#[derive(Debug, Clone)]
pub struct Part {
    /// The pairs (origin: the sender for an up message, the root for a down one).
    pub batch: Arc<FactorBatch>,
    /// [`factored_stats`] of everything summed (empty unless the factored optimizer).
    pub stats: Arc<[f32]>,
}

/// One peer's side of the tree: what it has of each clock not yet sent on, and its
/// residual.
#[derive(Debug)]
pub(crate) struct Summer {
    me: PeerId,
    /// Peers in the run: whose batches each sum holds.
    peers: usize,
    parent: Option<PeerId>,
    children: Vec<PeerId>,
    compressor: Compressor,
    /// This peer's own batch and statistics, by clock.
    own: BTreeMap<u64, (FactorBatch, Vec<f64>)>,
    /// Children's up messages, by clock.
    ups: BTreeMap<u64, Vec<Part>>,
    /// The next clock to send on.
    next: u64,
    /// Values of statistics per message: 0, or `J + D`.
    stats_len: usize,
}

/// What [`Summer::combine`] made of a clock.
pub(crate) struct Combined {
    pub(crate) part: Part,
    /// Pairs it decomposed (its own, the children's and the residual's).
    pub(crate) pairs_in: usize,
}

impl Summer {
    pub(crate) fn new(me: PeerId, peers: usize, cfg: &Config, stats_len: usize) -> Self {
        let parent = cfg.parent(me);
        let rank = if parent.is_some() {
            cfg.rank_up
        } else {
            cfg.rank_down
        };
        Self {
            me,
            peers,
            parent,
            children: cfg.children(me, peers),
            compressor: Compressor::new(rank),
            own: BTreeMap::new(),
            ups: BTreeMap::new(),
            next: 0,
            stats_len,
        }
    }

    /// Values of optimizer statistics per message: 0, or `J + D`.
    pub(crate) fn stats_len(&self) -> usize {
        self.stats_len
    }

    /// Peers in the run (a down message holds a batch of each).
    pub(crate) fn peers(&self) -> usize {
        self.peers
    }

    pub(crate) fn parent(&self) -> Option<PeerId> {
        self.parent
    }

    pub(crate) fn children(&self) -> &[PeerId] {
        &self.children
    }

    /// The next clock to send on: every clock before it has gone up (or, at the root,
    /// down).
    pub(crate) fn sent(&self) -> u64 {
        self.next
    }

    /// What a checkpoint at a clock boundary holds of it: the residual (the sums of
    /// later clocks are not begun at a cut, and children send theirs again on resume).
    pub(crate) fn save_state(&self) -> Vec<u8> {
        self.compressor.save_state()
    }

    /// Back to a checkpoint of clock `clock` ([`save_state`](Self::save_state)'s bytes;
    /// empty: no residual, as a checkpoint of another mode).
    ///
    /// # Errors
    /// [`Error::Checkpoint`] for bytes that are not a residual of a `j × d` W.
    pub(crate) fn restore_state(
        &mut self,
        bytes: &[u8],
        j: usize,
        d: usize,
        clock: u64,
    ) -> Result<()> {
        if !bytes.is_empty() {
            self.compressor.restore_state(bytes, j, d)?;
        }
        self.own.clear();
        self.ups.clear();
        self.next = clock;
        Ok(())
    }

    /// Keeps this peer's own batch (with its statistics) for its clock's sum.
    pub(crate) fn own(&mut self, batch: FactorBatch, stats: Vec<f64>) {
        self.own.insert(batch.clock, (batch, stats));
    }

    /// Keeps a child's up message (its clock checked in order by the caller).
    ///
    /// # Errors
    /// [`Error::BadTree`] if the sender is not a child or its statistics have the wrong
    /// length or are not finite and non-negative.
    pub(crate) fn up(&mut self, from: PeerId, part: Part) -> Result<()> {
        let refuse = |reason: String| {
            Err(Error::BadTree {
                from,
                clock: part.batch.clock,
                reason,
            })
        };
        if !self.children.contains(&from) || part.batch.origin != from {
            return refuse(format!("{from} is not a child of {} in the tree", self.me));
        }
        if part.stats.len() != self.stats_len {
            return refuse(format!(
                "{} optimizer statistics, {} expected",
                part.stats.len(),
                self.stats_len
            ));
        }
        if part.stats.iter().any(|x| !(x.is_finite() && *x >= 0.0)) {
            return refuse("optimizer statistics negative or not finite".into());
        }
        self.ups.entry(part.batch.clock).or_default().push(part);
        Ok(())
    }

    /// Whether the next clock's sum can be formed: the own batch and every child's part
    /// are in.
    pub(crate) fn ready(&self) -> bool {
        self.own.contains_key(&self.next)
            && self
                .ups
                .get(&self.next)
                .map_or(0, Vec::len)
                .eq(&self.children.len())
    }

    /// The next clock's sum, compressed with error feedback (see the [module docs](self)),
    /// as this peer's part; `timing`: no arithmetic, a part of the right size.
    pub(crate) fn combine(&mut self, timing: bool) -> Combined {
        let t = self.next;
        self.next += 1;
        let (own, own_stats) = self.own.remove(&t).expect("ready: the own batch is in");
        let ups = self.ups.remove(&t).unwrap_or_default();
        let pairs_in = own.len()
            + ups.iter().map(|p| p.batch.len()).sum::<usize>()
            + self.compressor.residual_pairs();
        let origin = if self.parent.is_some() {
            self.me
        } else {
            PeerId(0)
        };
        let (j, d) = (own.j, own.d);
        let mut stats = own_stats;
        for p in &ups {
            for (s, &x) in stats.iter_mut().zip(p.stats.iter()) {
                *s += f64::from(x);
            }
        }
        let stats: Arc<[f32]> = stats.iter().map(|&x| x as f32).collect();
        let batch = if timing {
            let k = pairs_in.min(self.compressor.rank());
            FactorBatch {
                origin,
                clock: t,
                scale: own.scale,
                j,
                d,
                u: vec![0.0; k * j],
                v: VFactors::Dense(vec![0.0; k * d]),
            }
        } else {
            let mut sum = concat(own, &ups);
            sum.origin = origin;
            self.compressor.compress(sum).0
        };
        Combined {
            part: Part {
                batch: Arc::new(batch),
                stats,
            },
            pairs_in,
        }
    }
}

/// `own` and the children's parts as one batch under `own`'s scale (another scale folded
/// into its `u`s); dense if any part is.
fn concat(own: FactorBatch, ups: &[Part]) -> FactorBatch {
    if ups.is_empty() {
        return own;
    }
    let (j, d) = (own.j, own.d);
    // Under a zero scale (no pairs of its own), the first part's.
    let scale = std::iter::once(own.scale)
        .chain(ups.iter().map(|p| p.batch.scale))
        .find(|&s| s != 0.0)
        .unwrap_or(0.0);
    let mut u = Vec::new();
    let mut v = Vec::new();
    for b in std::iter::once(&own).chain(ups.iter().map(|p| p.batch.as_ref())) {
        if b.is_empty() || b.scale == 0.0 {
            continue;
        }
        let ratio = b.scale / scale;
        u.extend(b.u.iter().map(|&x| x * ratio));
        for p in 0..b.len() {
            let mut row = vec![0.0f32; d];
            for (c, x) in b.v_row(p).entries() {
                row[c] = x;
            }
            v.extend(row);
        }
    }
    FactorBatch {
        origin: own.origin,
        clock: own.clock,
        scale,
        j,
        d,
        u,
        v: VFactors::Dense(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(origin: u32, clock: u64, k: usize, seed: f32) -> FactorBatch {
        let (j, d) = (5, 4);
        FactorBatch {
            origin: PeerId(origin),
            clock,
            scale: -0.1,
            j,
            d,
            u: (0..k * j)
                .map(|i| ((i as f32 + seed) * 0.37).sin())
                .collect(),
            v: VFactors::Dense(
                (0..k * d)
                    .map(|i| ((i as f32 + seed) * 0.71).cos())
                    .collect(),
            ),
        }
    }

    fn dense(b: &FactorBatch) -> Vec<f32> {
        let mut m = vec![0.0; b.j * b.d];
        for p in 0..b.len() {
            let u = b.u_row(p);
            for (c, x) in b.v_row(p).entries() {
                for (r, &ur) in u.iter().enumerate() {
                    m[r * b.d + c] += b.scale * ur * x;
                }
            }
        }
        m
    }

    fn part(b: FactorBatch) -> Part {
        Part {
            batch: Arc::new(b),
            stats: Arc::from(vec![]),
        }
    }

    #[test]
    fn heap_layout() {
        let cfg = Config::new(3, 16);
        assert_eq!(cfg.parent(PeerId(0)), None);
        assert_eq!(cfg.parent(PeerId(4)), Some(PeerId(1)));
        assert_eq!(
            cfg.children(PeerId(1), 12),
            vec![PeerId(4), PeerId(5), PeerId(6)]
        );
        assert_eq!(cfg.children(PeerId(3), 12), vec![PeerId(10), PeerId(11)]);
        assert_eq!(cfg.neighbors(PeerId(3), 12)[0], PeerId(0));
        assert_eq!(cfg.height(12), 2);
        assert_eq!(cfg.height(13), 2);
        assert_eq!(cfg.height(14), 3);
        assert_eq!(Config::new(10, 16).height(256), 3);
        // Every non-root peer is its parent's child exactly once.
        let lists = cfg.lists(40);
        for p in 1..40u32 {
            let parent = cfg.parent(PeerId(p)).unwrap();
            assert!(lists[parent.index()].contains(&(p as usize)));
            assert!(lists[p as usize].contains(&parent.index()));
        }
    }

    #[test]
    fn an_exact_sum_when_the_rank_allows_and_nothing_lost_when_it_does_not() {
        // Peer 1 of a fan-out-2 tree of 7: children 3 and 4.
        let cfg = Config {
            fanout: 2,
            rank_up: 12,
            rank_down: 12,
        };
        let mut s = Summer::new(PeerId(1), 7, &cfg, 0);
        s.own(batch(1, 0, 2, 0.0), Vec::new());
        assert!(!s.ready());
        for (c, seed) in [(3, 1.0), (4, 2.0)] {
            s.up(PeerId(c), part(batch(c, 0, 2, seed))).unwrap();
        }
        assert!(s.ready());
        let want: Vec<f32> = [
            batch(1, 0, 2, 0.0),
            batch(3, 0, 2, 1.0),
            batch(4, 0, 2, 2.0),
        ]
        .iter()
        .map(dense)
        .fold(vec![0.0; 20], |a, m| {
            a.iter().zip(m).map(|(x, y)| x + y).collect()
        });
        let got = dense(&s.combine(false).part.batch);
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        assert_eq!(s.sent(), 1);
        // At rank 1, what two clocks send is the two clocks' sum less the residual.
        let cfg = Config { rank_up: 1, ..cfg };
        let mut s = Summer::new(PeerId(1), 7, &cfg, 0);
        let mut sent = [0.0; 20];
        let mut total = [0.0; 20];
        for t in 0..2 {
            for (c, seed) in [(1, 0.0), (3, 1.0), (4, 2.0)] {
                let b = batch(c, t, 2, seed + t as f32);
                for (x, y) in total.iter_mut().zip(dense(&b)) {
                    *x += y;
                }
                if c == 1 {
                    s.own(b, Vec::new());
                } else {
                    s.up(PeerId(c), part(b)).unwrap();
                }
            }
            let out = s.combine(false).part.batch;
            assert_eq!(out.len(), 1);
            for (x, y) in sent.iter_mut().zip(dense(&out)) {
                *x += y;
            }
        }
        let r = s.compressor.residual_dense();
        for i in 0..20 {
            let kept = r[(i / 4, i % 4)] as f32;
            assert!((sent[i] + kept - total[i]).abs() < 1e-4);
        }
    }

    #[test]
    fn parts_from_strangers_or_with_bad_statistics_are_refused() {
        let cfg = Config::new(2, 4);
        let mut s = Summer::new(PeerId(1), 7, &cfg, 9);
        let part = |o: u32, stats: Vec<f32>| Part {
            batch: Arc::new(batch(o, 0, 1, 0.0)),
            stats: Arc::from(stats),
        };
        let e = s.up(PeerId(2), part(2, vec![0.0; 9])).unwrap_err();
        assert!(e.to_string().contains("not a child"), "{e}");
        let e = s.up(PeerId(3), part(3, vec![0.0; 4])).unwrap_err();
        assert!(
            e.to_string().contains("4 optimizer statistics, 9 expected"),
            "{e}"
        );
        let e = s.up(PeerId(3), part(3, vec![f32::NAN; 9])).unwrap_err();
        assert!(e.to_string().contains("not finite"), "{e}");
        s.up(PeerId(3), part(3, vec![1.0; 9])).unwrap();
    }
}
