//! The partial-broadcast mode of a run that names none (issue 28): the aggregation tree
//! ([`sfb_core::tree`]) where it pays, the gossip mode ([`sfb_core::gossip`]) elsewhere.
//!
//! Both cost O(Q) pairs per peer per clock. They differ in what a clock buys and costs:
//! - The tree applies full broadcast's update, compressed to rank R, on every replica: it
//!   follows full broadcast's trajectory, needing somewhat more clocks for the compression
//!   (measured: 1.2–1.5× to full broadcast's target at P = 12, 64 and 256). Its clock is
//!   `2·H` hops of the tree's height `H = ⌈log_Q P⌉`, each carrying `Q·R` pairs through one
//!   node, plus a decomposition of `K + (Q + 1)·R` pairs per level.
//! - The gossip mode's clock is one hop, but its replicas mix by consensus, which slows
//!   with `P/Q`: at P = 256 it never reached full broadcast's target.
//!
//! So the tree is taken under BSP, where it is at its best (under SSP and async it takes
//! full broadcast's step late), and where nothing it cannot serve is asked for (rejoin, a
//! topology, relay, compression, SAGA), when either
//! - the gossip mode's consensus would be too slow: more than [`GOSSIP_REACH`] peers per
//!   neighbourhood, `P/(Q + 1)`. Measured (128 × 128 MLR, 10 Gbit/s, and Fig. 9's 1,024 ×
//!   1,024 at 1 Gbit/s): gossip reached full broadcast's target sooner at `P/(Q + 1)` up
//!   to 6 (P = 12, every Q; P = 64, Q = 10) and not at all in 150–600 clocks at 16 and
//!   above (P = 64, Q = 3; P = 256, Q = 3 and 10). The boundary lies between; 8 is taken.
//! - or its modelled clock costs at most [`TREE_SHARE`] of full broadcast's (room for
//!   twice the clocks), whatever gossip would do.
//!
//! The model prices the bytes at the run's link (the simulator's NIC; a shaped link over
//! libp2p; none in memory) and the arithmetic at the simulator's flop rate: what matters
//! is the ratio of two clocks on the same machine, not either figure. It is rough (its
//! header said 0.80 at P = 64, Q = 3, where the simulator's clocks were 0.72 of full
//! broadcast's: `results/partial-default/`), so only a clear margin decides by it.

use crate::PartialSpec;

/// The tree is taken when its modelled clock is at most this share of full broadcast's.
pub const TREE_SHARE: f64 = 0.5;

/// The tree is taken when the gossip mode's neighbourhoods are smaller than this share of
/// the peers: `P/(Q + 1)` above it (see the [module docs](self)).
pub const GOSSIP_REACH: f64 = 8.0;

/// What a clock's cost depends on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shapes {
    /// Peers P.
    pub peers: usize,
    /// Out-degree Q (the tree's fan-out).
    pub fanout: usize,
    /// Rows J and columns D of W.
    pub j: usize,
    /// Columns D of W.
    pub d: usize,
    /// Mini-batch K.
    pub batch: usize,
    /// Pairs per tree message R.
    pub rank: usize,
}

/// The network and machine a clock runs on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Bytes per second out of a node (`None`: not limited).
    pub egress: Option<f64>,
    /// Bytes per second into a node (`None`: not limited).
    pub ingress: Option<f64>,
    /// One hop's delay, seconds.
    pub latency_s: f64,
    /// Floating-point operations per second.
    pub flops: f64,
}

/// The mode taken, and the two modelled clocks it was chosen by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    /// The mode.
    pub mode: PartialSpec,
    /// Full broadcast's modelled BSP clock, seconds.
    pub full_s: f64,
    /// The tree's, seconds.
    pub tree_s: f64,
    /// Peers per neighbourhood, `P/(Q + 1)`.
    pub reach: f64,
}

impl Choice {
    /// The tree's modelled clock over full broadcast's.
    pub fn ratio(&self) -> f64 {
        self.tree_s / self.full_s.max(f64::MIN_POSITIVE)
    }
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {:.1} peers per neighbourhood (the tree above {GOSSIP_REACH}); the tree's \
             modelled BSP clock {:.2} of full broadcast's (the tree at {TREE_SHARE} or less)",
            self.mode,
            self.reach,
            self.ratio()
        )
    }
}

/// Bytes of a message of `pairs` factor pairs (f32 values and a header).
fn frame(s: &Shapes, pairs: usize) -> f64 {
    (pairs * (s.j + s.d) * 4 + 64) as f64
}

fn at(bytes: f64, rate: Option<f64>) -> f64 {
    rate.map_or(0.0, |r| bytes / r)
}

/// Seconds to apply `pairs` pairs to W (`2·J·D` flops each).
fn apply(s: &Shapes, l: &Link, pairs: usize) -> f64 {
    (pairs * 2 * s.j * s.d) as f64 / l.flops
}

/// Seconds of a mini-batch's `compute_sv` (a forward pass, `2·J·D` flops a sample).
fn compute(s: &Shapes, l: &Link) -> f64 {
    apply(s, l, s.batch)
}

/// Full broadcast's BSP clock: compute, `P − 1` frames of K pairs out of each node (and
/// as many in), one hop, the apply of `P·K` pairs.
pub fn full_clock(s: &Shapes, l: &Link) -> f64 {
    let bytes = (s.peers - 1) as f64 * frame(s, s.batch);
    compute(s, l)
        + at(bytes, l.egress).max(at(bytes, l.ingress))
        + l.latency_s
        + apply(s, l, s.peers * s.batch)
}

/// The tree's BSP clock: compute; up the `H` levels, each node takes `Q` messages of R
/// pairs and decomposes `K + (Q + 1)·R` pairs (two thin QRs, `2·(J + D)·n²` flops); down
/// the `H` levels, each node sends R pairs to each of its `Q` children in turn; `2·H` hop
/// delays; the apply of R pairs.
pub fn tree_clock(s: &Shapes, l: &Link) -> f64 {
    let q = s.fanout.max(1);
    let h = sfb_core::tree::Config::new(q, s.rank).height(s.peers) as f64;
    let fan = q as f64 * frame(s, s.rank);
    let n = s.batch + (q + 1) * s.rank;
    let decompose = (2 * (s.j + s.d) * n * n) as f64 / l.flops;
    compute(s, l)
        + h * (at(fan, l.ingress) + decompose)
        + h * at(fan, l.egress)
        + 2.0 * h * l.latency_s
        + apply(s, l, s.rank)
}

/// The mode for a BSP run of these shapes on this link that names none (see the
/// [module docs](self)).
pub fn choose(s: &Shapes, l: &Link) -> Choice {
    let (full_s, tree_s) = (full_clock(s, l), tree_clock(s, l));
    let reach = s.peers as f64 / (s.fanout + 1) as f64;
    let mode = if reach > GOSSIP_REACH || tree_s <= TREE_SHARE * full_s {
        PartialSpec::Tree
    } else {
        PartialSpec::Gossip
    };
    Choice {
        mode,
        full_s,
        tree_s,
        reach,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBIT: f64 = 1e9 / 8.0;

    fn link(bits: f64) -> Link {
        Link {
            egress: Some(bits),
            ingress: Some(bits),
            latency_s: 50e-6,
            flops: 5.7e10,
        }
    }

    fn shapes(peers: usize, fanout: usize, jd: usize) -> Shapes {
        Shapes {
            peers,
            fanout,
            j: jd,
            d: jd,
            batch: 16,
            rank: 16,
        }
    }

    /// The measured cases of issue 28 (`results/partial-default/`, `docs/concepts.md`):
    /// the tree reached full broadcast's target sooner at P = 64, Q = 3 and at P = 256
    /// (and ran at P = 1,024), where gossip did not; it lost at P = 12 with a 1,024 × 1,024
    /// W on 1 Gbit/s; gossip was faster at P = 64, Q = 10.
    #[test]
    fn the_tree_where_it_was_measured_to_win_gossip_elsewhere() {
        let ten = link(10.0 * GBIT);
        for (p, q, jd, l, want) in [
            (256, 3, 128, ten, PartialSpec::Tree),
            (256, 10, 128, ten, PartialSpec::Tree),
            (1024, 10, 128, ten, PartialSpec::Tree),
            (64, 3, 128, ten, PartialSpec::Tree),
            (64, 10, 128, ten, PartialSpec::Gossip),
            (12, 2, 1024, link(GBIT), PartialSpec::Gossip),
            (12, 4, 1024, link(GBIT), PartialSpec::Gossip),
            (12, 10, 1024, link(GBIT), PartialSpec::Gossip),
            (12, 1, 1024, link(GBIT), PartialSpec::Gossip),
        ] {
            let c = choose(&shapes(p, q, jd), &l);
            assert_eq!(c.mode, want, "P = {p}, Q = {q}, {jd}²: {c}");
        }
    }

    #[test]
    fn in_memory_the_arithmetic_decides() {
        let mem = Link {
            egress: None,
            ingress: None,
            latency_s: 0.0,
            flops: 5.7e10,
        };
        // A small model at few peers: the decomposition costs more than applying P·K.
        let small = Shapes {
            j: 10,
            d: 64,
            ..shapes(12, 3, 0)
        };
        assert_eq!(choose(&small, &mem).mode, PartialSpec::Gossip);
        // Thousands of pairs to apply on every replica against sixteen.
        assert_eq!(choose(&shapes(256, 3, 128), &mem).mode, PartialSpec::Tree);
        let c = choose(&shapes(256, 3, 128), &mem);
        assert!(
            c.to_string()
                .starts_with("tree: 64.0 peers per neighbourhood"),
            "{c}"
        );
    }
}
