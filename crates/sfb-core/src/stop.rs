//! Stop rules: end a run when its evaluations say it has converged, the same clock on every
//! node.
//!
//! A rule ([`Rule`]) is checked on each node's own evaluations, at the evaluation cadence
//! ([`Config::eval_every`](crate::Config::eval_every)). Replicas differ (partial
//! broadcast, staleness), so nodes can meet a rule at different clocks; ending the run
//! changes what every node computes, so all must end at the same clock. They agree like
//! this:
//!
//! 1. A node whose evaluation after clock `c` meets a rule proposes to stop at
//!    `T = c + lead` ([`Until::lead`]), unless it already holds an earlier stop: a
//!    [`Stop`] message (at `T`, by whom, which rule, the value it saw) sent to its
//!    out-neighbours ahead of its batch of clock `c`. It adopts `T` itself.
//! 2. A node that receives a proposal better than the one it holds (smaller `T`; equal
//!    `T`, smaller proposer) adopts it and forwards it to its out-neighbours ahead of its
//!    next batch. An FMS client sends its proposal to the server, which forwards it to
//!    every client ahead of its next W.
//! 3. Adopting `T` is [`Engine::stop_at`](crate::Engine::stop_at): compute no clock `≥ T`,
//!    apply everything of the clocks `< T`, finish.
//!
//! Why every node adopts the same `T` before passing it: links are FIFO and a node may
//! not start clock `t` before each node it awaits has delivered `t − s` clocks (`s` the
//! staleness bound, or [`Config::max_drift`](crate::Config::max_drift) for the models
//! without one; 0 under BSP). So when the proposal reaches a node `h` hops downstream of
//! the proposer, that node has started no clock beyond `c + h·(s + 1) − 1`. With
//! `lead = H·(s + 1) + 1`, `H` the largest hop distance of the topology
//! ([`lead`]), every node learns `T` while its clock is below `T`; the smallest proposal
//! reaches everyone, so everyone ends with the same `(T, proposer)`. The bound needs the
//! lead of the topology actually used: after a topology repaired after a loss it may be
//! too short, and a node that then learns of a stop it has already passed fails with an
//! error naming the stop.
//!
//! The agreed stop is recorded in each node's metrics ([`PeerMetrics::stop`]) and so in
//! the run's summary.
//!
//! [`PeerMetrics::stop`]: crate::metrics::PeerMetrics::stop

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Evaluation, PeerId};

/// One stop rule, checked on a node's evaluations. Written (command line, JSON) as
/// `objective<=X`, `gap<=X`, `accuracy>=X` or `plateau:N:EPS`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Rule {
    /// `objective<=X`: the evaluation's objective is at most `X`.
    Objective(f64),
    /// `gap<=X`: the model's relative duality gap, `duality_gap / |objective|` (L2-MLR's
    /// SDCA, whose objective is its primal), is at most `X`: the primal is then within a
    /// factor `1 + X` of the optimum. Never met by a model that reports no gap.
    Gap(f64),
    /// `accuracy>=X`: the held-out accuracy is at least `X`.
    Accuracy(f64),
    /// `plateau:N:EPS`: the best objective of the last `N` evaluations improves on the
    /// best before them by less than `EPS` relative (`best_before − best_recent <
    /// EPS · |best_before|`): the usual early-stopping patience.
    Plateau {
        /// Evaluations without enough improvement.
        evals: u32,
        /// Relative improvement that counts.
        eps: f64,
    },
}

/// The extra figure [`Rule::Gap`] reads.
pub const GAP_KEY: &str = "duality_gap";

impl Rule {
    /// The figure the rule saw in `e` (after the `history` of earlier objectives, for a
    /// plateau), if the rule is met.
    fn met(&self, e: &Evaluation, history: &[f64]) -> Option<f64> {
        match *self {
            Rule::Objective(x) => (e.objective <= x).then_some(e.objective),
            Rule::Gap(x) => e
                .extra
                .get(GAP_KEY)
                .map(|g| g / e.objective.abs().max(f64::MIN_POSITIVE))
                .filter(|&g| g <= x),
            Rule::Accuracy(x) => e.accuracy.filter(|&a| a >= x),
            Rule::Plateau { evals, eps } => {
                let n = evals as usize;
                // `history` holds the objectives before `e`: with `e`, the last n are the
                // recent window, and at least one must come before it.
                if history.len() < n {
                    return None;
                }
                let split = history.len() + 1 - n;
                let before = history[..split]
                    .iter()
                    .copied()
                    .fold(f64::INFINITY, f64::min);
                let recent = history[split..]
                    .iter()
                    .copied()
                    .chain([e.objective])
                    .fold(f64::INFINITY, f64::min);
                (before.is_finite() && before - recent < eps * before.abs()).then_some(recent)
            }
        }
    }

    /// Whether the rule reads the model's duality gap.
    pub fn needs_gap(&self) -> bool {
        matches!(self, Rule::Gap(_))
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // `{:?}`: 1e-6 stays 1e-6 (`{}` writes 0.000001).
            Rule::Objective(x) => write!(f, "objective<={x:?}"),
            Rule::Gap(x) => write!(f, "gap<={x:?}"),
            Rule::Accuracy(x) => write!(f, "accuracy>={x:?}"),
            Rule::Plateau { evals, eps } => write!(f, "plateau:{evals}:{eps:?}"),
        }
    }
}

/// Error parsing a stop rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stop rule {text:?}: {why} (rules: objective<=X, gap<=X, accuracy>=X, plateau:N:EPS)")]
pub struct ParseRuleError {
    /// What was given.
    pub text: String,
    /// What is wrong with it.
    pub why: String,
}

impl FromStr for Rule {
    type Err = ParseRuleError;

    fn from_str(s: &str) -> Result<Self, ParseRuleError> {
        let err = |why: &str| ParseRuleError {
            text: s.to_string(),
            why: why.to_string(),
        };
        let t: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let number = |x: &str, what: &str| -> Result<f64, ParseRuleError> {
            let v: f64 = x
                .parse()
                .map_err(|_| err(&format!("{what} {x:?} is not a number")))?;
            if v.is_finite() {
                Ok(v)
            } else {
                Err(err(&format!("{what} must be finite")))
            }
        };
        if let Some(rest) = t.strip_prefix("plateau:") {
            let (n, eps) = rest
                .split_once(':')
                .ok_or_else(|| err("a plateau is plateau:N:EPS"))?;
            let evals: u32 = n
                .parse()
                .map_err(|_| err(&format!("N {n:?} is not a count of evaluations")))?;
            if evals == 0 {
                return Err(err("N must be at least 1"));
            }
            let eps = number(eps, "EPS")?;
            if eps < 0.0 {
                return Err(err("EPS must be ≥ 0"));
            }
            return Ok(Rule::Plateau { evals, eps });
        }
        if let Some(x) = t.strip_prefix("objective<=") {
            return Ok(Rule::Objective(number(x, "the objective")?));
        }
        if let Some(x) = t.strip_prefix("gap<=") {
            let x = number(x, "the gap")?;
            if x < 0.0 {
                return Err(err("a duality gap is never negative"));
            }
            return Ok(Rule::Gap(x));
        }
        if let Some(x) = t.strip_prefix("accuracy>=") {
            let x = number(x, "the accuracy")?;
            if !(0.0..=1.0).contains(&x) {
                return Err(err("an accuracy is a fraction in [0, 1]"));
            }
            return Ok(Rule::Accuracy(x));
        }
        Err(err("unknown rule"))
    }
}

impl TryFrom<String> for Rule {
    type Error = ParseRuleError;

    fn try_from(s: String) -> Result<Self, ParseRuleError> {
        s.parse()
    }
}

impl From<Rule> for String {
    fn from(r: Rule) -> String {
        r.to_string()
    }
}

/// The stop rules of a run and how far ahead a stop is set.
#[derive(Debug, Clone, PartialEq)]
pub struct Until {
    /// Stop when any of these is met.
    pub rules: Vec<Rule>,
    /// Clocks between the evaluation that meets a rule and the clock the run stops at;
    /// at least [`lead`] of the run's topology and consistency model (see the
    /// [module docs](self)).
    pub lead: u64,
}

/// The smallest safe [`Until::lead`] for a run whose longest shortest path between two
/// nodes is `hops` (the topology's diameter: [`Routes::height`](crate::Routes::height);
/// 2 for FMS, client → server → clients) and where a node may be `slack` clocks ahead of a
/// node it awaits (the staleness bound; the maximum drift for async and custom barriers;
/// 0 for BSP): `hops·(slack + 1) + 1`.
pub fn lead(hops: u32, slack: u64) -> u64 {
    u64::from(hops)
        .saturating_mul(slack.saturating_add(1))
        .saturating_add(1)
}

/// An agreed (or proposed) stop: what a [`Message::Stop`](crate::wire::Message::Stop)
/// carries and what the summary records.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stop {
    /// The run ends at this clock: clocks `0..at` run.
    pub at: u64,
    /// The node whose evaluation met the rule.
    pub by: u32,
    /// The clock after which that evaluation was made.
    pub clock: u64,
    /// The rule's index in [`Until::rules`].
    pub rule: u32,
    /// The figure the rule saw (objective, relative gap, accuracy, or the plateau's best
    /// objective).
    pub value: f64,
}

impl Stop {
    /// Whether `self` wins over `other`: the earlier stop, then the smaller proposer (a
    /// total order, so every node keeps the same one).
    pub fn better_than(&self, other: &Stop) -> bool {
        (self.at, self.by) < (other.at, other.by)
    }
}

/// A node's stop rules, its history of objectives and the stop it holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct Watch {
    until: Option<Until>,
    history: Vec<f64>,
    /// The best stop seen (own or received).
    pub(crate) agreed: Option<Stop>,
    /// A stop to send ahead of the next batch (new or improved).
    pub(crate) to_send: Option<Stop>,
}

impl Watch {
    pub(crate) fn new(until: Option<Until>) -> Self {
        Self {
            until: until.filter(|u| !u.rules.is_empty()),
            ..Self::default()
        }
    }

    /// Records the evaluation made by node `me` after `clock` clocks; if a rule is met
    /// (not by the untrained evaluation at clock 0), returns the stop it proposes, unless
    /// the one it holds is earlier.
    pub(crate) fn observe(&mut self, me: PeerId, clock: u64, e: &Evaluation) -> Option<Stop> {
        let until = self.until.as_ref()?;
        let met = until
            .rules
            .iter()
            .enumerate()
            .find_map(|(i, r)| r.met(e, &self.history).map(|v| (i, v)));
        self.history.push(e.objective);
        if clock == 0 {
            return None;
        }
        let (rule, value) = met?;
        let stop = Stop {
            at: clock.saturating_add(until.lead),
            by: me.0,
            clock,
            rule: rule as u32,
            value,
        };
        self.agreed
            .is_none_or(|held| stop.better_than(&held))
            .then_some(stop)
    }

    /// Takes `stop` if it is better than the one held (and queues it to be forwarded);
    /// returns whether it did.
    pub(crate) fn offer(&mut self, stop: Stop) -> bool {
        if self.agreed.as_ref().is_some_and(|a| !stop.better_than(a)) {
            return false;
        }
        self.agreed = Some(stop);
        self.to_send = Some(stop);
        true
    }

    /// The rule text of a stop, for messages.
    pub(crate) fn rule_text(&self, stop: &Stop) -> String {
        self.until
            .as_ref()
            .and_then(|u| u.rules.get(stop.rule as usize))
            .map_or_else(|| format!("rule {}", stop.rule), Rule::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_print_back() {
        for s in [
            "objective<=0.25",
            "gap<=1e-6",
            "accuracy>=0.9",
            "plateau:5:0.001",
        ] {
            let r: Rule = s.parse().unwrap();
            assert_eq!(r.to_string().parse::<Rule>().unwrap(), r, "{s}");
        }
        assert_eq!(" gap <= 0.5 ".parse::<Rule>().unwrap(), Rule::Gap(0.5));
        for (bad, why) in [
            ("gap<=x", "not a number"),
            ("gap<=-1", "never negative"),
            ("plateau:0:0.1", "at least 1"),
            ("plateau:3", "plateau:N:EPS"),
            ("accuracy>=2", "fraction"),
            ("objective<=NaN", "finite"),
            ("loss<3", "unknown rule"),
        ] {
            let e = bad.parse::<Rule>().unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(bad.trim()), "{bad}: {e}");
        }
    }

    fn ev(objective: f64) -> Evaluation {
        Evaluation::new(objective, Some(0.5)).with(GAP_KEY, objective / 10.0)
    }

    #[test]
    fn each_rule_fires_on_what_it_reads() {
        assert_eq!(Rule::Objective(1.0).met(&ev(1.0), &[]), Some(1.0));
        assert_eq!(Rule::Objective(1.0).met(&ev(1.5), &[]), None);
        // The gap relative to the objective: 0.1 / 1 and 0.2 / 2.
        assert_eq!(Rule::Gap(0.1).met(&ev(1.0), &[]), Some(0.1));
        assert_eq!(Rule::Gap(0.1).met(&ev(2.0), &[]), Some(0.1));
        let e = Evaluation::new(0.5, None).with(GAP_KEY, 0.1);
        assert_eq!(Rule::Gap(0.1).met(&e, &[]), None);
        assert_eq!(Rule::Gap(1.0).met(&Evaluation::new(0.0, None), &[]), None);
        assert_eq!(Rule::Accuracy(0.5).met(&ev(9.0), &[]), Some(0.5));
        assert_eq!(Rule::Accuracy(0.6).met(&ev(9.0), &[]), None);
    }

    #[test]
    fn a_plateau_needs_a_window_and_a_stall() {
        let r = Rule::Plateau {
            evals: 2,
            eps: 0.01,
        };
        // Not enough history: the window needs one evaluation before it.
        assert_eq!(r.met(&ev(1.0), &[1.0]), None);
        // Still improving by more than 1 %.
        assert_eq!(r.met(&ev(0.8), &[1.0, 0.9]), None);
        // Best before the window 1.0, best in it 0.995: less than 1 % better.
        assert_eq!(r.met(&ev(0.995), &[1.0, 1.2]), Some(0.995));
        // Getting worse counts as a plateau too.
        assert_eq!(r.met(&ev(3.0), &[1.0, 2.0]), Some(2.0));
    }

    #[test]
    fn the_lead_covers_the_longest_path() {
        let ring: Vec<Vec<PeerId>> = (0..5).map(|i| vec![PeerId((i + 1) % 5)]).collect();
        let hops = crate::Routes::new(&ring).unwrap().height();
        assert_eq!(lead(hops, 0), 5);
        assert_eq!(lead(hops, 2), 4 * 3 + 1);
        assert_eq!(lead(1, 3), 5);
        assert_eq!(lead(0, 7), 1);
        assert_eq!(lead(u32::MAX, u64::MAX), u64::MAX);
    }

    #[test]
    fn the_earliest_stop_wins_then_the_smallest_proposer() {
        let s = |at, by| Stop {
            at,
            by,
            clock: 0,
            rule: 0,
            value: 0.0,
        };
        let mut w = Watch::new(Some(Until {
            rules: vec![Rule::Objective(1.0)],
            lead: 3,
        }));
        assert!(w.offer(s(10, 4)));
        assert!(!w.offer(s(11, 0)));
        assert!(!w.offer(s(10, 4)));
        assert!(w.offer(s(10, 2)));
        assert!(w.offer(s(9, 7)));
        assert_eq!(w.agreed, Some(s(9, 7)));
        // No proposal later than the stop held, and none from the untrained evaluation.
        assert_eq!(w.observe(PeerId(1), 8, &ev(0.5)), None);
        let earlier = w.observe(PeerId(1), 5, &ev(0.5)).unwrap();
        assert_eq!((earlier.at, earlier.by), (8, 1));
        let mut fresh = Watch::new(Some(Until {
            rules: vec![Rule::Objective(1.0)],
            lead: 3,
        }));
        assert_eq!(fresh.observe(PeerId(1), 0, &ev(0.5)), None);
        let p = fresh.observe(PeerId(1), 20, &ev(0.5)).unwrap();
        assert_eq!((p.at, p.by, p.clock, p.value), (23, 1, 20, 0.5));
    }
}
