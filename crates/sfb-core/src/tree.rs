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
//! **Peer loss** (`--on-peer-loss continue`). The tree is laid out over the peers not
//! lost, in heap order of their rank ([`Config::place`]): every survivor computes the same
//! tree from the same set of lost peers ([`Config::repaired`]), whatever order it learned
//! of them in. What was in flight is delivered **at most once**, never twice:
//! - An up message is sent once, to the parent of the moment. One that reaches a dead peer
//!   (or a peer that is no longer the parent) is lost with it, as is a dead peer's
//!   residual: what one clock of a subtree taught, never counted twice.
//! - A child adopted by a repair is not waited for until its first up message; one of a
//!   clock its new parent has already sent on is added to the parent's next sum.
//! - Every down message is known by its origin (the root that made it) and clock, and every
//!   survivor applies each one exactly once: a peer passes one it did not have to all its
//!   neighbours but the sender, and sends the last few it holds to each new neighbour
//!   ([`Summer::retree`]), so one that reached only part of the tree before a loss reaches
//!   all of it.
//! - A new root (the first survivor) lacks the down messages of clocks it has sent up but
//!   the dead root never sent it. It makes an empty one for each, so that nobody waits for
//!   them forever. If the dead root's did reach a survivor, every survivor applies both (the
//!   empty one changes nothing); a peer that applies it a clock late differs from the others
//!   by that clock's timing, not by an update. So under BSP the replicas are identical until
//!   a loss and apply the same updates after it, to rounding and the timing of one clock.
//!
//! **Not yet**: rejoin (a peer back in the run would need the tree rebuilt around it),
//! relay, gossip, `--compress`, `--prioritize`, `--aggregate` and SAGA (its table needs
//! every origin's factors); [`crate::Config::validate`] names each.
//!
//! [`Compressor`]: crate::compress::Compressor
//! [`Message::Sum`]: crate::wire::Message::Sum

use std::collections::{BTreeMap, BTreeSet};
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

    /// `me`'s parent (`None` for the root) and children in the tree over `members` (the
    /// run's peers not lost, in ascending order): heap order of the rank in `members`, so
    /// the first member is the root. `None` if `me` is not a member.
    pub fn place(&self, members: &[PeerId], me: PeerId) -> Option<(Option<PeerId>, Vec<PeerId>)> {
        let q = self.fanout.max(1);
        let r = members.iter().position(|&m| m == me)?;
        let parent = (r > 0).then(|| members[(r - 1) / q]);
        let first = r * q + 1;
        let children = members
            .get(first.min(members.len())..(first + q).min(members.len()))
            .unwrap_or_default()
            .to_vec();
        Some((parent, children))
    }

    /// `me`'s neighbours after the run of `peers` peers lost `lost` ([`place`](Self::place)
    /// over the survivors): `(out, in, identifier of the tree)`, as a topology repair gives
    /// them (a transport's [`crate::membership::RepairFn`]); `None` if `me` is lost.
    pub fn repaired(
        &self,
        peers: usize,
        lost: &[PeerId],
        me: PeerId,
    ) -> Option<(Vec<PeerId>, Vec<PeerId>, String)> {
        let members = members_without(peers, lost);
        let (parent, children) = self.place(&members, me)?;
        let near: Vec<PeerId> = parent.into_iter().chain(children).collect();
        let ids: Vec<String> = members.iter().map(|p| p.0.to_string()).collect();
        let id = format!("tree fan-out {} over [{}]", self.fanout, ids.join(","));
        Some((near.clone(), near, id))
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

/// The run's peers not in `lost`, ascending.
pub fn members_without(peers: usize, lost: &[PeerId]) -> Vec<PeerId> {
    (0..peers as u32)
        .map(PeerId)
        .filter(|p| !lost.contains(p))
        .collect()
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

/// One peer's side of the tree: what it has of each clock not yet sent on, its residual,
/// and the down messages it holds.
#[derive(Debug)]
pub(crate) struct Summer {
    me: PeerId,
    cfg: Config,
    /// Peers in the run.
    run_peers: usize,
    /// The run's peers not lost, ascending: the tree is laid out over them.
    members: Vec<PeerId>,
    parent: Option<PeerId>,
    children: Vec<PeerId>,
    /// Per child, the first clock it owes this peer an up message of: 0 (or a resumed
    /// clock) for a child from the start; for one adopted by a repair, unknown until its
    /// first up message here (see [`Summer::retree`]), and waited for until then.
    owes_from: BTreeMap<PeerId, Option<u64>>,
    compressor: Compressor,
    /// This peer's own batch and statistics, by clock.
    own: BTreeMap<u64, (FactorBatch, Vec<f64>)>,
    /// Children's up messages, by clock.
    ups: BTreeMap<u64, Vec<Part>>,
    /// Up messages of clocks already sent on (an adopted child behind its new parent):
    /// added to the next sum.
    late: Vec<Part>,
    /// The next clock to send on.
    next: u64,
    /// Values of statistics per message: 0, or `J + D`.
    stats_len: usize,
    downs: Downs,
    /// Clocks of down messages kept for new neighbours.
    log_clocks: u64,
}

/// The down messages a peer holds: each known by `(clock, origin)`, applied once.
#[derive(Debug, Default)]
struct Downs {
    /// The first clock this peer has no down message of.
    next: u64,
    /// The recent ones, sent to each new neighbour after a repair.
    log: BTreeMap<(u64, PeerId), Part>,
    /// Every one taken since `next − SEEN_CLOCKS` (to refuse a copy).
    seen: BTreeSet<(u64, PeerId)>,
}

/// Clocks of down messages kept to send to new neighbours after a repair, at least:
/// peers that wait for each other are at most a few clocks apart (see
/// [`Summer::new`]'s `log_clocks`).
const LOG_CLOCKS: u64 = 8;

/// Clocks of down messages remembered to refuse copies of.
const SEEN_CLOCKS: u64 = 1024;

/// What [`Summer::combine`] made of a clock.
pub(crate) struct Combined {
    pub(crate) part: Part,
    /// Pairs it decomposed (its own, the children's and the residual's).
    pub(crate) pairs_in: usize,
}

/// What a repair changed for a peer ([`Summer::retree`]).
#[derive(Debug, Default)]
pub(crate) struct Retree {
    /// Neighbours it did not have (its new parent, adopted children): they get the down
    /// messages it holds.
    pub(crate) new_neighbors: Vec<PeerId>,
    /// Neighbours it no longer has.
    pub(crate) dropped: Vec<PeerId>,
    /// Empty down messages it made as the new root, for clocks it sent up to the dead
    /// root and got nothing back of (see the [module docs](self)).
    pub(crate) fillers: Vec<Part>,
    /// For a new parent: an empty up message of the last clock this peer sent up
    /// elsewhere, so that the parent knows which clocks it owes (none if it sent none).
    pub(crate) status: Option<(PeerId, Part)>,
}

impl Summer {
    /// `log_clocks`: how far apart (in clocks) two peers may be, so that a peer keeps the
    /// down messages a new neighbour may lack (the staleness bound and a few; at least
    /// [`LOG_CLOCKS`]).
    pub(crate) fn new(
        me: PeerId,
        peers: usize,
        cfg: &Config,
        stats_len: usize,
        log_clocks: u64,
    ) -> Self {
        let members = members_without(peers, &[]);
        let (parent, children) = cfg.place(&members, me).unwrap_or_default();
        let rank = if parent.is_some() {
            cfg.rank_up
        } else {
            cfg.rank_down
        };
        Self {
            me,
            cfg: *cfg,
            run_peers: peers,
            members,
            parent,
            owes_from: children.iter().map(|&c| (c, Some(0))).collect(),
            children,
            compressor: Compressor::new(rank),
            own: BTreeMap::new(),
            ups: BTreeMap::new(),
            late: Vec::new(),
            next: 0,
            stats_len,
            downs: Downs::default(),
            log_clocks: log_clocks.max(LOG_CLOCKS),
        }
    }

    /// Values of optimizer statistics per message: 0, or `J + D`.
    pub(crate) fn stats_len(&self) -> usize {
        self.stats_len
    }

    /// Peers in the tree now (a down message holds a batch of each).
    pub(crate) fn peers(&self) -> usize {
        self.members.len()
    }

    pub(crate) fn parent(&self) -> Option<PeerId> {
        self.parent
    }

    pub(crate) fn children(&self) -> &[PeerId] {
        &self.children
    }

    /// The parent, then the children.
    pub(crate) fn neighbors(&self) -> Vec<PeerId> {
        self.parent
            .into_iter()
            .chain(self.children.iter().copied())
            .collect()
    }

    /// The next clock to send on: every clock before it has gone up (or, at the root,
    /// down).
    pub(crate) fn sent(&self) -> u64 {
        self.next
    }

    /// The first clock this peer holds no down message of.
    pub(crate) fn downs_next(&self) -> u64 {
        self.downs.next
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
        self.late.clear();
        self.next = clock;
        self.downs = Downs {
            next: clock,
            ..Downs::default()
        };
        for c in self.owes_from.values_mut() {
            *c = Some(clock);
        }
        Ok(())
    }

    /// Keeps this peer's own batch (with its statistics) for its clock's sum.
    pub(crate) fn own(&mut self, batch: FactorBatch, stats: Vec<f64>) {
        self.own.insert(batch.clock, (batch, stats));
    }

    /// Keeps a child's up message (its clocks checked in order by the caller); one of a
    /// clock already sent on goes into the next sum.
    ///
    /// # Errors
    /// [`Error::BadTree`] if the sender is not a child or its statistics have the wrong
    /// length or are not finite and non-negative.
    pub(crate) fn up(&mut self, from: PeerId, part: Part) -> Result<()> {
        let clock = part.batch.clock;
        let refuse = |reason: String| {
            Err(Error::BadTree {
                from,
                clock,
                reason,
            })
        };
        if !self.children.contains(&from) || part.batch.origin != from {
            return refuse(format!("{from} is not a child of {} in the tree", self.me));
        }
        self.check_stats(&part.stats).or_else(refuse)?;
        if let Some(owes) = self.owes_from.get_mut(&from) {
            *owes = Some(owes.map_or(clock, |o| o.min(clock)));
        }
        if clock < self.next {
            self.late.push(part);
        } else {
            self.ups.entry(clock).or_default().push(part);
        }
        Ok(())
    }

    /// Whether `stats` fit a message: `stats_len` values, finite and non-negative.
    pub(crate) fn check_stats(&self, stats: &[f32]) -> std::result::Result<(), String> {
        if stats.len() != self.stats_len {
            return Err(format!(
                "{} optimizer statistics, {} expected",
                stats.len(),
                self.stats_len
            ));
        }
        if stats.iter().any(|x| !(x.is_finite() && *x >= 0.0)) {
            return Err("optimizer statistics negative or not finite".into());
        }
        Ok(())
    }

    /// Whether the next clock's sum can be formed: the own batch and the part of every
    /// child that owes one of that clock are in.
    pub(crate) fn ready(&self) -> bool {
        let t = self.next;
        self.own.contains_key(&t)
            && self.children.iter().all(|c| match self.owes_from.get(c) {
                Some(None) => false,
                Some(Some(from)) if *from > t => true,
                _ => self
                    .ups
                    .get(&t)
                    .is_some_and(|parts| parts.iter().any(|p| p.batch.origin == *c)),
            })
    }

    /// The next clock's sum, compressed with error feedback (see the [module docs](self)),
    /// as this peer's part; `timing`: no arithmetic, a part of the right size.
    pub(crate) fn combine(&mut self, timing: bool) -> Combined {
        let t = self.next;
        self.next += 1;
        let (own, own_stats) = self.own.remove(&t).expect("ready: the own batch is in");
        let mut ups = self.ups.remove(&t).unwrap_or_default();
        ups.append(&mut self.late);
        let pairs_in = own.len()
            + ups.iter().map(|p| p.batch.len()).sum::<usize>()
            + self.compressor.residual_pairs();
        let origin = self.me;
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

    /// Takes a down message in: `true` if this peer did not hold it (it is to be applied
    /// and passed on), `false` for a copy.
    pub(crate) fn take_down(&mut self, part: &Part) -> bool {
        let key = (part.batch.clock, part.batch.origin);
        if key.0 + SEEN_CLOCKS < self.downs.next || !self.downs.seen.insert(key) {
            return false;
        }
        self.downs.log.insert(key, part.clone());
        while self
            .downs
            .log
            .range((self.downs.next, PeerId(0))..)
            .next()
            .is_some_and(|(k, _)| k.0 == self.downs.next)
        {
            self.downs.next += 1;
        }
        let next = self.downs.next;
        let keep = self.log_clocks;
        self.downs.log.retain(|k, _| k.0 + keep >= next);
        self.downs.seen.retain(|k| k.0 + SEEN_CLOCKS >= next);
        true
    }

    /// The down messages this peer holds, oldest first (for a new neighbour).
    pub(crate) fn held_downs(&self) -> Vec<Part> {
        self.downs.log.values().cloned().collect()
    }

    /// Lays the tree out again over the run's peers not in `lost` (every survivor
    /// computes the same tree from the same set); what changed for this peer. A peer not
    /// in the tree (lost itself) keeps its place.
    pub(crate) fn retree(&mut self, lost: &BTreeSet<PeerId>, j: usize, d: usize) -> Retree {
        let lost: Vec<PeerId> = lost.iter().copied().collect();
        let members = members_without(self.run_peers, &lost);
        let Some((parent, children)) = self.cfg.place(&members, self.me) else {
            return Retree::default();
        };
        let before = self.neighbors();
        let was_root = self.parent.is_none();
        self.members = members;
        self.parent = parent;
        self.owes_from.retain(|c, _| children.contains(c));
        for &c in &children {
            self.owes_from.entry(c).or_insert(None);
        }
        self.children = children;
        let after = self.neighbors();
        let mut r = Retree {
            new_neighbors: after
                .iter()
                .filter(|p| !before.contains(p))
                .copied()
                .collect(),
            dropped: before
                .iter()
                .filter(|p| !after.contains(p))
                .copied()
                .collect(),
            fillers: Vec::new(),
            status: None,
        };
        let empty = |origin: PeerId, clock: u64| Part {
            batch: Arc::new(FactorBatch {
                origin,
                clock,
                scale: 0.0,
                j,
                d,
                u: Vec::new(),
                v: VFactors::Dense(Vec::new()),
            }),
            stats: vec![0.0; self.stats_len].into(),
        };
        if let Some(p) = self.parent
            && r.new_neighbors.contains(&p)
            && self.next > 0
        {
            r.status = Some((p, empty(self.me, self.next - 1)));
        }
        if self.parent.is_none() && !was_root {
            self.compressor.set_rank(self.cfg.rank_down);
            for t in self.downs.next..self.next {
                r.fillers.push(empty(self.me, t));
            }
        }
        r
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
        let mut s = Summer::new(PeerId(1), 7, &cfg, 0, 0);
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
        let mut s = Summer::new(PeerId(1), 7, &cfg, 0, 0);
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
        let mut s = Summer::new(PeerId(1), 7, &cfg, 9, 0);
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

    #[test]
    fn a_repair_lays_the_tree_out_over_the_survivors_the_same_for_every_order() {
        let cfg = Config::new(2, 4);
        // Without losses: the heap layout.
        let all = members_without(7, &[]);
        for p in 0..7u32 {
            let (parent, children) = cfg.place(&all, PeerId(p)).unwrap();
            assert_eq!(parent, cfg.parent(PeerId(p)));
            assert_eq!(children, cfg.children(PeerId(p), 7));
        }
        // Peer 0 (the root) and 4 lost: ranks over [1, 2, 3, 5, 6].
        let lost = [PeerId(4), PeerId(0)];
        let members = members_without(7, &lost);
        assert_eq!(
            cfg.place(&members, PeerId(1)),
            Some((None, vec![PeerId(2), PeerId(3)]))
        );
        assert_eq!(
            cfg.place(&members, PeerId(2)),
            Some((Some(PeerId(1)), vec![PeerId(5), PeerId(6)]))
        );
        assert_eq!(cfg.place(&members, PeerId(4)), None);
        let (out, inn, id) = cfg.repaired(7, &lost, PeerId(2)).unwrap();
        assert_eq!(out, vec![PeerId(1), PeerId(5), PeerId(6)]);
        assert_eq!(out, inn);
        assert_eq!(
            cfg.repaired(7, &[PeerId(0), PeerId(4)], PeerId(2))
                .unwrap()
                .2,
            id
        );
        assert!(cfg.repaired(7, &lost, PeerId(0)).is_none());
    }

    #[test]
    fn a_repair_tells_a_new_parent_where_it_is_and_a_new_root_fills_its_gaps() {
        let cfg = Config::new(2, 4);
        // Peer 1 of 7 (parent 0, children 3 and 4) has sent clocks 0 and 1 up and holds
        // the down message of clock 0 only.
        let mut s = Summer::new(PeerId(1), 7, &cfg, 0, 0);
        for t in 0..2 {
            s.own(batch(1, t, 1, 0.0), Vec::new());
            for c in [3, 4] {
                s.up(PeerId(c), part(batch(c, t, 1, 1.0))).unwrap();
            }
            assert!(s.ready());
            s.combine(false);
        }
        assert!(s.take_down(&part(batch(0, 0, 1, 2.0))));
        assert!(
            !s.take_down(&part(batch(0, 0, 1, 2.0))),
            "a copy is nothing"
        );
        assert_eq!(s.downs_next(), 1);
        // The root is lost: peer 1 is the root of [1..7), with children 2 and 3.
        let r = s.retree(&BTreeSet::from([PeerId(0)]), 5, 4);
        assert_eq!(s.parent(), None);
        assert_eq!(s.children(), &[PeerId(2), PeerId(3)]);
        assert_eq!(r.new_neighbors, vec![PeerId(2)]);
        assert_eq!(r.dropped, vec![PeerId(0), PeerId(4)]);
        assert!(r.status.is_none(), "a root has no parent to tell");
        // Clock 1 went up to the dead root and came back from nobody: an empty one.
        assert_eq!(r.fillers.len(), 1);
        let f = &r.fillers[0].batch;
        assert_eq!((f.clock, f.origin, f.len()), (1, PeerId(1), 0));
        // Its adopted child 2 is awaited from its first frame; child 3 owes clock 2.
        s.own(batch(1, 2, 1, 0.0), Vec::new());
        s.up(PeerId(3), part(batch(3, 2, 1, 1.0))).unwrap();
        assert!(!s.ready(), "waits for the adopted child's word");
        // Its word: it sent clocks up to 4 elsewhere (an empty part of clock 4)…
        s.up(PeerId(2), part(batch(2, 4, 0, 0.0))).unwrap();
        assert!(s.ready(), "…so it owes nothing of clock 2");
        // Peer 5 of the same run, whose parent 2 is lost: it tells its new parent.
        let mut leaf = Summer::new(PeerId(5), 7, &cfg, 0, 0);
        leaf.own(batch(5, 0, 1, 0.0), Vec::new());
        leaf.combine(false);
        let r = leaf.retree(&BTreeSet::from([PeerId(2)]), 5, 4);
        let (to, word) = r.status.expect("a new parent");
        assert_eq!(to, PeerId(1));
        assert_eq!((word.batch.clock, word.batch.len()), (0, 0));
        assert!(r.fillers.is_empty());
    }
}
