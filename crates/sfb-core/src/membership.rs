//! Who is in the run: the membership view of one node and its decisions, the same on every
//! transport.
//!
//! A transport only reports what its links saw ([`News`]): a node gone (a broken stream,
//! no heartbeat, a crash detected), a node that opened a stream again, a neighbour's
//! [`Notice`], or a neighbour's state for this rejoining node. [`Membership`] decides, with
//! the node's own rules ([`StateMachine::peer_lost`], [`StateMachine::loss_reported`], the
//! majority rule in the engine), what follows, and tells the transport what to do in order
//! ([`Action`]):
//! - **a loss** is news once: the node goes on without the peer (or stops, by its policy or
//!   for want of a majority), passes the news on once to its out-neighbours, so that every
//!   survivor learns the same set of lost nodes, and rewires by the [`RepairFn`] (every
//!   survivor computes the same repaired topology from the same set);
//! - **a return** ([`Notice::Joined`]): the node takes the peer back, passes the news on,
//!   rewires, and if it sends to the peer hands it its state ([`Action::SendState`]);
//! - **a state** for this node while it rejoins: it adopts it, and learns with it the
//!   losses and returns its neighbour knew of (some while this node was away), so that it
//!   does not wait for dead nodes until its own timeout.
//!
//! # The view: lives, epoch, provenance
//! The view ([`Membership::view`], a [`View`]) gives every node of the run a **life**
//! (SWIM's incarnation number): 0 at the start, one more each time the node comes back.
//! Every notice names the life it is about ([`Notice::life`]): a loss or a leave the life
//! that ended, a return the new one. A node's **standing** in a view is its life and
//! whether it is out, and counts the changes the view has seen of it: `2 · life + out`
//! (in in life 0: 0; lost in life 0: 1; back in life 1: 2; …). The rule for news is one:
//! **news is taken only if it is a later standing than the view's** —
//! - a loss or leave of life `l` is taken if the view has the node in at life `l` (or an
//!   earlier life: it came back and was lost again while this node missed the return), or
//!   out at an earlier life; a loss of an earlier life than the view's is stale (a node
//!   back already, or news of its former life gone round) and ignored with a debug line;
//! - a return of life `l` is taken if `l` is later than the view's life; an older or equal
//!   one is ignored. A node this one counts out that opens a stream again ([`News::Up`])
//!   is back in its next life.
//!
//! So each standing only grows, and the view after any set of news is the largest standing
//! each node reached in it, whatever the order the news came in (a last-writer-wins
//! register per node, the writer's "time" the standing). The **epoch**
//! ([`Membership::epoch`], [`View::epoch`]) is the sum of the standings: the number of
//! membership changes the view has taken in. It is a function of the view alone, so every
//! survivor that has taken in the same set of changes has the same epoch and the same
//! view, in whatever order it learned of them. (A rule taking a loss only at the view's
//! own life, as SWIM suspects, would not be: a return of life 1 and the loss of life 1,
//! heard in the other order, would leave one node counting the peer in.)
//!
//! A rejoining node keeps what it heard while it waited: the state it adopts carries the
//! donor's view ([`NodeState::view`]), and each node takes the later of the two standings.
//! A donor's state taken before a return this node heard of does not count the returner
//! lost again (it hands the returner its state, as a node that sends to it: the returner
//! may be waiting for one that nobody else can send).
//!
//! For each node out, the view keeps **by whose agreement** ([`Departure`]): this node's
//! own links (and their reason), a neighbour's notice (which neighbour), the transport's
//! report to every node (the virtual-time driver's detector), or the donor's state; the
//! node's clock and the view's epoch when it was taken in; and the majority rule's count
//! when the node decided to go on (how many of the run's peers it still counted in).
//!
//! One rule is kept beside the lives: a loss or leave **told by a node this one counts
//! out** is ignored ([`News::Told`]). Lives cannot tell it apart: a node cut off by a
//! partition counts the others lost at their current lives, and its notices, once the
//! partition heals, name the same lives as good news would. Taken, one stale node would
//! push a healthy majority under its quorum (the split-brain properties of the
//! virtual-time driver check this). Its return is taken.
//!
//! The messages travel in the one wire codec ([`crate::wire::Message::Notice`],
//! [`crate::wire::Message::State`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::wire::{MAX_LIFE, Notice};
use crate::{NodeState, PeerId, Result, StateMachine};

/// A node's neighbours after the topology is repaired for a set of lost nodes: `(out,
/// in, identifier of the repaired graph)`, or `None` when there is nothing to repair
/// (e.g. FMS). Must give every survivor the same graph for the same set.
pub type RepairFn =
    Arc<dyn Fn(&[PeerId]) -> Option<(Vec<PeerId>, Vec<PeerId>, String)> + Send + Sync>;

/// What a node's links saw.
#[derive(Debug)]
pub enum News {
    /// The links say `peer` is gone (in the life this view has it in); `why` says how
    /// (for the log and the view's provenance).
    Down {
        /// The node gone.
        peer: PeerId,
        /// How the links noticed.
        why: String,
    },
    /// `peer` opened a stream to this node: at the start (not news), or back in the run
    /// (restarted with `--rejoin`): if this view counts it out, it is back in its next
    /// life.
    Up {
        /// The node.
        peer: PeerId,
    },
    /// News about a node, as every node learns it (the virtual-time driver's).
    Notice(Notice),
    /// News about a node from neighbour `from`: a loss or leave told by a node this one
    /// counts out is ignored (it speaks from a view of its own: cut off, it counts the
    /// rest lost, at the lives a true loss would name; see the [module docs](self)), a
    /// return is taken.
    Told {
        /// The neighbour that sent it.
        from: PeerId,
        /// The news.
        notice: Notice,
    },
    /// A neighbour's state, for this node if it is rejoining.
    State(Box<NodeState>),
}

/// What the transport is to do, in order.
#[derive(Debug)]
pub enum Action {
    /// Stop sending to the node and drop what is queued for it.
    Forget(PeerId),
    /// Tell every out-neighbour (each passes it on once).
    Announce(Notice),
    /// The topology was repaired: the node now sends to `out` and awaits `inn` (open links
    /// to new out-neighbours).
    Rewired {
        /// Out-neighbours.
        out: Vec<PeerId>,
        /// In-neighbours.
        inn: Vec<PeerId>,
    },
    /// Open a link to the node (one back in the run).
    Connect(PeerId),
    /// Send this node's state to the node (rejoining).
    SendState(PeerId, Box<NodeState>),
    /// A line for the log at warning level.
    Warn(String),
    /// A line for the log at info level.
    Info(String),
    /// A line for the log at debug level.
    Debug(String),
}

/// One node's standing in a view: its life and whether it is out of the run (what a rejoin
/// state carries, [`NodeState::view`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// The node.
    pub peer: PeerId,
    /// Its life: 0 at the start, one more each time it came back.
    pub life: u32,
    /// Whether it is out (lost, or left on request) in that life.
    pub out: bool,
}

impl Standing {
    /// The changes this standing counts, `2 · life + out`: news is taken only if it gives a
    /// larger count ([module docs](self)).
    pub fn changes(self) -> u64 {
        2 * u64::from(self.life) + u64::from(self.out)
    }
}

/// How a node learned that another is out of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// Its own links saw it go ([`News::Down`]).
    Links {
        /// How (a broken stream, no heartbeat, …).
        why: String,
    },
    /// A neighbour's notice ([`News::Told`]).
    Neighbour(PeerId),
    /// The transport's report to every node ([`News::Notice`], [`Membership::told_lost`]:
    /// the virtual-time driver's failure detector).
    Transport,
    /// The state of the donor named, adopted when this node rejoined ([`News::State`]).
    Donor(PeerId),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Links { why } => f.write_str(why),
            Source::Neighbour(p) => write!(f, "{p} says so"),
            Source::Transport => f.write_str("reported to the run"),
            Source::Donor(p) => write!(f, "in {p}'s state, adopted on rejoining"),
        }
    }
}

/// A node out of the run, as a view took it in (by whose agreement).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Departure {
    /// The node.
    pub peer: PeerId,
    /// The life that ended.
    pub life: u32,
    /// Whether it left on request (a planned leave), not lost.
    pub left: bool,
    /// How this node learned it.
    pub source: Source,
    /// This node's clock when it took it in.
    pub clock: u64,
    /// The view's epoch once it was taken in.
    pub epoch: u64,
    /// The majority rule's count when this node decided to go on without it: the run's
    /// peers it still counted in (itself included) and the run's peers
    /// ([`StateMachine::counted_in`]); `None` for a node without the rule.
    pub counted_in: Option<(usize, usize)>,
}

/// One node's membership view (read-only; [`Membership::view`]): every node's life, and
/// the nodes out with how each was learned. Nodes it does not name are in, in life 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// Nodes in a life after their first.
    lives: BTreeMap<PeerId, u32>,
    /// Nodes out, in the order this view took them in.
    out: Vec<Departure>,
}

impl View {
    /// The number of membership changes this view has taken in: `Σ (2 · life + out)` over
    /// the run's nodes. A function of the view alone: two views that took in the same
    /// changes have the same epoch, whatever the order (see the [module docs](self)).
    ///
    /// # Complexity
    /// O(nodes named).
    pub fn epoch(&self) -> u64 {
        self.lives.values().map(|&l| 2 * u64::from(l)).sum::<u64>() + self.out.len() as u64
    }

    /// `peer`'s life in this view.
    pub fn life(&self, peer: PeerId) -> u32 {
        self.lives.get(&peer).copied().unwrap_or(0)
    }

    /// Whether `peer` is out of the run in this view.
    pub fn is_out(&self, peer: PeerId) -> bool {
        self.departure(peer).is_some()
    }

    /// How this view took in that `peer` is out, if it is.
    pub fn departure(&self, peer: PeerId) -> Option<&Departure> {
        self.out.iter().find(|d| d.peer == peer)
    }

    /// The nodes out, in the order this view took them in.
    pub fn out(&self) -> &[Departure] {
        &self.out
    }

    /// `peer`'s standing.
    pub fn standing(&self, peer: PeerId) -> Standing {
        Standing {
            peer,
            life: self.life(peer),
            out: self.is_out(peer),
        }
    }

    /// Every node in a life after its first or out, by id: the view as a rejoin state
    /// carries it ([`NodeState::view`]).
    pub fn standings(&self) -> Vec<Standing> {
        let mut peers: Vec<PeerId> = self.lives.keys().copied().collect();
        peers.extend(self.out.iter().map(|d| d.peer));
        peers.sort_unstable();
        peers.dedup();
        peers.into_iter().map(|p| self.standing(p)).collect()
    }

    fn set_life(&mut self, peer: PeerId, life: u32) {
        if life == 0 {
            self.lives.remove(&peer);
        } else {
            self.lives.insert(peer, life);
        }
    }
}

/// One node's view of who is in the run; see the [module docs](self).
#[derive(Clone, Default)]
pub struct Membership {
    view: View,
    /// The nodes out, in the order the view took them in (the view's, as ids).
    lost: Vec<PeerId>,
    repair: Option<RepairFn>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("view", &self.view)
            .field("repair", &self.repair.is_some())
            .finish()
    }
}

/// A loss or leave to take in.
struct Loss {
    peer: PeerId,
    life: u32,
    left: bool,
    source: Source,
}

impl Membership {
    /// A view where every node is in, in its first life; `repair` rewires the node after
    /// losses (`None`: the node only drops the lost ones).
    pub fn new(repair: Option<RepairFn>) -> Self {
        Self {
            view: View::default(),
            lost: Vec::new(),
            repair,
        }
    }

    /// The nodes this node went on without, in the order it learned of them.
    pub fn lost(&self) -> &[PeerId] {
        &self.lost
    }

    /// Whether this node went on without `peer`.
    pub fn is_lost(&self, peer: PeerId) -> bool {
        self.lost.contains(&peer)
    }

    /// The view: lives, and the nodes out with how each was learned.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// The view's epoch ([`View::epoch`]).
    pub fn epoch(&self) -> u64 {
        self.view.epoch()
    }

    /// The notice by which node `me` tells its out-neighbours that it leaves the run on
    /// request, in its life in this view.
    pub fn leaving(&self, me: PeerId) -> Notice {
        Notice::Left {
            peer: me.0,
            life: self.view.life(me),
        }
    }

    /// Takes `news` in; appends to `actions` what the transport is to do.
    ///
    /// # Errors
    /// The node's refusal to go on: [`crate::Error::PeerLost`] (its policy is to fail),
    /// [`crate::Error::Minority`] or [`crate::Error::Isolated`] (cut off); a state that does
    /// not fit ([`StateMachine::adopt`]). The node stops with it, and the view is as it
    /// was before the news it refused.
    pub fn on_news<N: StateMachine + ?Sized>(
        &mut self,
        node: &mut N,
        news: News,
        actions: &mut Vec<Action>,
    ) -> Result<()> {
        let (notice, source) = match news {
            News::State(state) => return self.adopt(node, *state, actions),
            News::Down { peer, why } => {
                let loss = Loss {
                    peer,
                    life: self.view.life(peer),
                    left: false,
                    source: Source::Links { why },
                };
                if self.take_loss(node, loss, actions)? {
                    self.rewire(node, actions);
                }
                return Ok(());
            }
            News::Up { peer } => {
                if self.view.is_out(peer) {
                    let life = self.view.life(peer).saturating_add(1);
                    self.take_return(node, peer, life, "it opened a stream", actions);
                }
                return Ok(());
            }
            News::Told { from, notice }
                if self.view.is_out(from) && !matches!(notice, Notice::Joined { .. }) =>
            {
                // A node this one went on without speaks from a view of its own (it was cut
                // off, and counts the rest lost): not news.
                actions.push(Action::Debug(format!(
                    "{}: {notice} from {from}, counted out here: ignored",
                    node.id()
                )));
                return Ok(());
            }
            News::Told { from, notice } => (notice, Source::Neighbour(from)),
            News::Notice(notice) => (notice, Source::Transport),
        };
        let (peer, life) = (notice.about(), notice.life());
        match notice {
            Notice::Joined { .. } => {
                let from = match &source {
                    Source::Neighbour(p) => format!("{p} says so"),
                    _ => "reported to the run".into(),
                };
                self.take_return(node, peer, life, &from, actions);
            }
            Notice::Lost { .. } | Notice::Left { .. } => {
                let left = matches!(notice, Notice::Left { .. });
                let loss = Loss {
                    peer,
                    life,
                    left,
                    source,
                };
                if self.take_loss(node, loss, actions)? {
                    self.rewire(node, actions);
                }
            }
        }
        Ok(())
    }

    /// Takes in at once that `peers` are lost in the lives this view has them in, as the
    /// transport reports to every node ([`Source::Transport`]), and rewires once for all of
    /// them.
    ///
    /// # Errors
    /// As [`on_news`](Self::on_news); the losses before the refused one are taken in.
    pub fn told_lost<N: StateMachine + ?Sized>(
        &mut self,
        node: &mut N,
        peers: &[PeerId],
        actions: &mut Vec<Action>,
    ) -> Result<()> {
        let mut news = false;
        for &peer in peers {
            let loss = Loss {
                peer,
                life: self.view.life(peer),
                left: false,
                source: Source::Transport,
            };
            news |= self.take_loss(node, loss, actions)?;
        }
        if news {
            self.rewire(node, actions);
        }
        Ok(())
    }

    /// Takes a loss or leave in if it is news (see the [module docs](self)); whether the
    /// set of nodes out changed or a life did (the caller rewires).
    fn take_loss<N: StateMachine + ?Sized>(
        &mut self,
        node: &mut N,
        loss: Loss,
        actions: &mut Vec<Action>,
    ) -> Result<bool> {
        let Loss {
            peer,
            life,
            left,
            source,
        } = loss;
        let me = node.id();
        if peer == me {
            // News about this node itself, gone round while it was away (it rejoined): it
            // is here.
            return Ok(false);
        }
        let was = self.view.standing(peer);
        let now = Standing {
            peer,
            life,
            out: true,
        };
        if now.changes() <= was.changes() {
            if life < was.life {
                actions.push(Action::Debug(format!(
                    "{me}: {peer} gone in its life {life} ({source}), but it is in its life {} \
                     here: stale, ignored",
                    was.life
                )));
            }
            return Ok(false);
        }
        let clock = node.clock();
        if was.out {
            // Out already, in an earlier life: it came back and was lost again while this
            // node missed the return. Nothing changes for the node, only the view.
            self.view.set_life(peer, life);
            let epoch = self.view.epoch();
            let counted_in = node.counted_in();
            if let Some(d) = self.view.out.iter_mut().find(|d| d.peer == peer) {
                *d = Departure {
                    peer,
                    life,
                    left,
                    source: source.clone(),
                    clock,
                    epoch,
                    counted_in,
                };
            }
            actions.push(Action::Info(format!(
                "{me} at clock {clock}: {peer}, out here in its life {}, is gone in its life \
                 {life} too ({source}; epoch {epoch})",
                was.life
            )));
            actions.push(Action::Announce(loss_notice(peer, life, left)));
            return Ok(false);
        }
        let was_needed = match &source {
            Source::Links { .. } => node.peer_lost(peer)?,
            _ => node.loss_reported(peer)?,
        };
        if !was_needed && let Source::Links { why } = &source {
            // A stream of a node this one neither waits for nor sends to ended (it
            // finished, or a topology change dropped the arc): its own neighbours report a
            // real loss.
            actions.push(Action::Debug(format!(
                "{me}: {peer}'s stream ended ({why})"
            )));
            return Ok(false);
        }
        self.view.set_life(peer, life);
        let counted_in = node.counted_in();
        self.view.out.push(Departure {
            peer,
            life,
            left,
            source: source.clone(),
            clock,
            epoch: 0,
            counted_in,
        });
        let epoch = self.view.epoch();
        if let Some(d) = self.view.out.last_mut() {
            d.epoch = epoch;
        }
        self.lost.push(peer);
        actions.push(Action::Forget(peer));
        let quorum = counted_in.map_or(String::new(), |(n, of)| {
            format!("{n} of the run's {of} peers in; ")
        });
        let was_then = if life > was.life {
            format!(", back unseen here in its life {life}")
        } else {
            String::new()
        };
        actions.push(match (was_needed, left) {
            (true, true) => Action::Warn(format!(
                "{me} at clock {clock}: {peer} left the run ({source}{was_then}); training on \
                 without it ({quorum}epoch {epoch})"
            )),
            (true, false) => Action::Warn(format!(
                "{me} at clock {clock} lost {peer} ({source}{was_then}); training on without \
                 it ({quorum}epoch {epoch})"
            )),
            // It had delivered everything this node needs (a run stopped early), or it was
            // not a neighbour (a notice).
            (false, _) => Action::Debug(format!(
                "{me}: {peer} is gone in its life {life} ({source}; epoch {epoch})"
            )),
        });
        // Pass it on, then (the caller) rewire: every survivor gets the same set of lost
        // nodes and so the same repaired topology.
        actions.push(Action::Announce(loss_notice(peer, life, left)));
        Ok(true)
    }

    /// Takes in that `peer` is back in its life `life` if that is news (see the [module
    /// docs](self)); `from` says how it was learned (for the log).
    fn take_return<N: StateMachine + ?Sized>(
        &mut self,
        node: &mut N,
        peer: PeerId,
        life: u32,
        from: &str,
        actions: &mut Vec<Action>,
    ) {
        let me = node.id();
        let was = self.view.standing(peer);
        if life <= was.life {
            if life < was.life {
                actions.push(Action::Debug(format!(
                    "{me}: {peer} back in its life {life} ({from}), but it is in its life {} \
                     here: stale, ignored",
                    was.life
                )));
            }
            return;
        }
        if life > MAX_LIFE {
            actions.push(Action::Warn(format!(
                "{me}: {peer} back in its life {life} ({from}): past the most lives a node can \
                 have ({MAX_LIFE}); not taken back"
            )));
            return;
        }
        self.view.set_life(peer, life);
        if peer == me {
            // News of this node's own return, gone round: its life.
            return;
        }
        let clock = node.clock();
        actions.push(Action::Announce(Notice::Joined { peer: peer.0, life }));
        if !was.out {
            // In here in an earlier life: it restarted before this node counted it lost.
            // Nothing changes for the node, only the view.
            actions.push(Action::Info(format!(
                "{me} at clock {clock}: {peer} is in its life {life} ({from}; epoch {})",
                self.view.epoch()
            )));
            return;
        }
        self.view.out.retain(|d| d.peer != peer);
        self.lost.retain(|&p| p != peer);
        node.peer_rejoined(peer);
        // Only the nodes that send to it again (the topology as it was without the loss)
        // open a stream to it, and any of them can hand it the state.
        let sends_to_it = self
            .rewire(node, actions)
            .is_none_or(|out| out.contains(&peer));
        if sends_to_it {
            actions.push(Action::Connect(peer));
            if let Some(state) = self.rejoin_state(node) {
                actions.push(Action::SendState(peer, Box::new(state)));
            }
        }
        actions.push(Action::Warn(format!(
            "{me} at clock {clock}: {peer} is back in its life {life} ({from}; epoch {})",
            self.view.epoch()
        )));
    }

    fn adopt<N: StateMachine + ?Sized>(
        &mut self,
        node: &mut N,
        state: NodeState,
        actions: &mut Vec<Action>,
    ) -> Result<()> {
        // The donor's view, with the losses its counters name (some are the engine's
        // alone: a neighbour that stopped refusing to go on).
        let donor = state.id;
        let mut theirs: BTreeMap<PeerId, Standing> =
            state.view.iter().map(|s| (s.peer, *s)).collect();
        for p in state.metrics.gone() {
            theirs
                .entry(p)
                .or_insert(Standing {
                    peer: p,
                    life: 0,
                    out: false,
                })
                .out = true;
        }
        if !node.adopt(state)? {
            return Ok(());
        }
        let me = node.id();
        actions.push(Action::Warn(format!(
            "{me} rejoined the run at clock {} (from {donor}'s state)",
            node.clock()
        )));
        // This node is in, in the donor's life for it or the next.
        if let Some(s) = theirs.remove(&me) {
            let life = s.life.saturating_add(u32::from(s.out)).min(MAX_LIFE);
            if life > self.view.life(me) {
                self.view.set_life(me, life);
            }
        }
        // Each node's later standing wins. Those this node heard came back while it waited
        // may be waiting still, for a state from a node that sends to them (this one,
        // perhaps, which had none to give).
        let mut back = Vec::new();
        for p in self.view.standings() {
            if p.peer != me
                && !p.out
                && p.life > 0
                && theirs
                    .get(&p.peer)
                    .is_none_or(|t| t.changes() < p.changes())
            {
                back.push(p.peer);
            }
        }
        let mut missed = Vec::new();
        let mut rewire = false;
        for (peer, t) in theirs {
            let mine = self.view.standing(peer);
            if t.changes() <= mine.changes() {
                continue;
            }
            if t.out {
                if !mine.out {
                    missed.push(peer);
                }
                let loss = Loss {
                    peer,
                    life: t.life,
                    left: false,
                    source: Source::Donor(donor),
                };
                rewire |= self.take_loss(node, loss, actions)?;
            } else {
                self.take_return(node, peer, t.life, &format!("in {donor}'s state"), actions);
            }
        }
        if !missed.is_empty() {
            let names: Vec<String> = missed.iter().map(ToString::to_string).collect();
            actions.push(Action::Warn(format!(
                "{me}: the run lost {} while it was away (epoch {})",
                names.join(", "),
                self.view.epoch()
            )));
        }
        if rewire || !back.is_empty() {
            let out = self.rewire(node, actions);
            for peer in back {
                if out.as_ref().is_none_or(|o| o.contains(&peer))
                    && let Some(state) = self.rejoin_state(node)
                {
                    actions.push(Action::Connect(peer));
                    actions.push(Action::SendState(peer, Box::new(state)));
                }
            }
        }
        Ok(())
    }

    /// The node's state for a node coming back, carrying this view.
    fn rejoin_state<N: StateMachine + ?Sized>(&self, node: &N) -> Option<NodeState> {
        let mut state = node.rejoin_state()?;
        state.view = self.view.standings();
        Some(state)
    }

    /// Rewires the node for the lost nodes so far, if it repairs; the new out-neighbours.
    fn rewire<N: StateMachine + ?Sized>(
        &self,
        node: &mut N,
        actions: &mut Vec<Action>,
    ) -> Option<Vec<PeerId>> {
        let (out, inn, topology) = self.repair.as_ref().and_then(|r| r(&self.lost))?;
        actions.push(Action::Info(format!(
            "{}: topology repaired for lost {:?} (epoch {}): sends to {out:?}",
            node.id(),
            self.lost,
            self.view.epoch()
        )));
        node.set_neighbors(out.clone(), inn.clone(), topology);
        actions.push(Action::Rewired {
            out: out.clone(),
            inn,
        });
        Some(out)
    }
}

fn loss_notice(peer: PeerId, life: u32, left: bool) -> Notice {
    if left {
        Notice::Left { peer: peer.0, life }
    } else {
        Notice::Lost { peer: peer.0, life }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Event, Output, Progress};
    use crate::wire::Message;
    use crate::{Error, TimeSource};

    /// A node that needs `needs`, refuses losses when `refuse`, and records what it was
    /// told.
    #[derive(Default)]
    struct Node {
        needs: Vec<PeerId>,
        refuse: bool,
        reported: Vec<PeerId>,
        rejoined: Vec<PeerId>,
        neighbours: Option<(Vec<PeerId>, Vec<PeerId>)>,
        rejoining: bool,
    }

    /// Peers of the test run.
    const PEERS: usize = 4;

    impl StateMachine for Node {
        fn id(&self) -> PeerId {
            PeerId(0)
        }
        fn clock(&self) -> u64 {
            7
        }
        fn on_message(&mut self, _: PeerId, _: Message, _: &mut dyn TimeSource) -> Result<()> {
            Ok(())
        }
        fn on_tick(&mut self, _: &mut dyn TimeSource) -> Result<Progress> {
            Ok(Progress::Blocked)
        }
        fn poll_output(&mut self) -> Option<Output> {
            None
        }
        fn poll_event(&mut self) -> Option<Event> {
            None
        }
        fn waiting_on(&self) -> Vec<(PeerId, u64)> {
            Vec::new()
        }
        fn finish(&mut self, _: &mut dyn TimeSource) {}
        fn peer_lost(&mut self, peer: PeerId) -> Result<bool> {
            if self.refuse {
                return Err(Error::PeerLost {
                    me: PeerId(0),
                    peer,
                    clock: 7,
                    why: "its policy is to fail",
                });
            }
            self.reported.push(peer);
            Ok(self.needs.contains(&peer))
        }
        fn stop_at(&mut self, t: u64) -> u64 {
            t
        }
        fn set_neighbors(&mut self, out: Vec<PeerId>, inn: Vec<PeerId>, _: String) {
            self.neighbours = Some((out, inn));
        }
        fn peer_rejoined(&mut self, peer: PeerId) {
            self.rejoined.push(peer);
        }
        fn rejoin_state(&self) -> Option<NodeState> {
            Some(state(Vec::new()))
        }
        fn adopt(&mut self, _: NodeState) -> Result<bool> {
            Ok(std::mem::take(&mut self.rejoining))
        }
        fn rejoining(&self) -> bool {
            self.rejoining
        }
        fn counted_in(&self) -> Option<(usize, usize)> {
            Some((PEERS.saturating_sub(self.reported.len()), PEERS))
        }
    }

    fn state(lost: Vec<(u32, u64)>) -> NodeState {
        NodeState {
            role: crate::Role::Peer,
            id: PeerId(1),
            clock: 7,
            w: Some(ndarray::Array2::zeros((1, 1))),
            optimizer: Vec::new(),
            model: Vec::new(),
            compressor: Vec::new(),
            mixer: Vec::new(),
            relay: Vec::new(),
            sampler: None,
            awaited: Vec::new(),
            view: Vec::new(),
            metrics: crate::metrics::PeerMetrics {
                lost_peers: lost,
                ..Default::default()
            },
            wall_s: 0.0,
            first_objective: None,
        }
    }

    /// Sends to every peer not lost: the repair of a 4-node full graph.
    fn repair() -> Option<RepairFn> {
        Some(Arc::new(|lost: &[PeerId]| {
            let live: Vec<PeerId> = (1..4).map(PeerId).filter(|p| !lost.contains(p)).collect();
            Some((live.clone(), live, format!("without {lost:?}")))
        }))
    }

    fn lost(peer: u32, life: u32) -> Notice {
        Notice::Lost { peer, life }
    }
    fn left(peer: u32, life: u32) -> Notice {
        Notice::Left { peer, life }
    }
    fn joined(peer: u32, life: u32) -> Notice {
        Notice::Joined { peer, life }
    }
    fn out(peer: u32, life: u32) -> Standing {
        Standing {
            peer: PeerId(peer),
            life,
            out: true,
        }
    }

    /// The actions' kinds, in order, as short words.
    fn kinds(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Forget(p) => Some(format!("forget {p}")),
                Action::Announce(n) => Some(format!("announce {n}")),
                Action::Rewired { out, .. } => Some(format!("rewired {}", out.len())),
                Action::Connect(p) => Some(format!("connect {p}")),
                Action::SendState(p, _) => Some(format!("state to {p}")),
                Action::Warn(_) | Action::Info(_) | Action::Debug(_) => None,
            })
            .collect()
    }

    #[test]
    fn a_loss_is_news_once_passed_on_and_rewired() {
        let mut node = Node {
            needs: vec![PeerId(2)],
            ..Node::default()
        };
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        let down = |peer| News::Down {
            peer,
            why: "stream broken".into(),
        };
        m.on_news(&mut node, down(PeerId(2)), &mut a).unwrap();
        assert_eq!(
            kinds(&a),
            ["forget p2", "announce p2 lost (life 0)", "rewired 2"],
            "{a:?}"
        );
        assert!(matches!(&a[1], Action::Warn(w) if w.contains("lost p2 (stream broken)")));
        assert_eq!(m.lost(), [PeerId(2)]);
        assert_eq!(
            node.neighbours,
            Some((vec![PeerId(1), PeerId(3)], vec![PeerId(1), PeerId(3)]))
        );
        // The same news again, by the links or a neighbour: nothing.
        a.clear();
        m.on_news(&mut node, down(PeerId(2)), &mut a).unwrap();
        m.on_news(&mut node, News::Notice(lost(2, 0)), &mut a)
            .unwrap();
        assert!(a.is_empty(), "{a:?}");
        assert_eq!(node.reported, [PeerId(2)]);
        // A stream of a node it does not need ended: not a loss (its neighbours say so);
        // a neighbour's notice of it is one.
        m.on_news(&mut node, down(PeerId(3)), &mut a).unwrap();
        assert!(kinds(&a).is_empty() && !m.is_lost(PeerId(3)), "{a:?}");
        m.on_news(&mut node, News::Notice(left(3, 0)), &mut a)
            .unwrap();
        assert_eq!(
            kinds(&a),
            ["forget p3", "announce p3 left (life 0)", "rewired 1"]
        );
        assert_eq!(m.lost(), [PeerId(2), PeerId(3)]);
    }

    #[test]
    fn a_refused_loss_changes_nothing_and_stops_the_node() {
        let mut node = Node {
            refuse: true,
            ..Node::default()
        };
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        let e = m
            .on_news(&mut node, News::Notice(lost(1, 0)), &mut a)
            .unwrap_err();
        assert!(matches!(e, Error::PeerLost { .. }), "{e}");
        assert!(a.is_empty() && m.lost().is_empty() && node.neighbours.is_none());
        let e = m.told_lost(&mut node, &[PeerId(1), PeerId(2)], &mut a);
        assert!(e.is_err() && a.is_empty() && m.lost().is_empty());
    }

    #[test]
    fn a_return_is_passed_on_and_the_returner_gets_the_state() {
        let mut node = Node {
            needs: vec![PeerId(1)],
            ..Node::default()
        };
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        // A stream opened by a node not lost here: nothing to take back.
        m.on_news(&mut node, News::Up { peer: PeerId(1) }, &mut a)
            .unwrap();
        assert!(a.is_empty() && m.epoch() == 0, "{a:?}");
        m.told_lost(&mut node, &[PeerId(1), PeerId(3)], &mut a)
            .unwrap();
        assert_eq!(
            kinds(&a),
            [
                "forget p1",
                "announce p1 lost (life 0)",
                "forget p3",
                "announce p3 lost (life 0)",
                "rewired 1"
            ]
        );
        a.clear();
        m.on_news(&mut node, News::Notice(joined(1, 1)), &mut a)
            .unwrap();
        assert_eq!(
            kinds(&a),
            [
                "announce p1 back (life 1)",
                "rewired 2",
                "connect p1",
                "state to p1"
            ]
        );
        assert_eq!(
            (node.rejoined.as_slice(), m.lost()),
            (&[PeerId(1)][..], &[PeerId(3)][..])
        );
    }

    #[test]
    fn a_rejoining_node_adopts_a_state_and_learns_the_losses_it_missed() {
        let mut node = Node {
            rejoining: true,
            needs: vec![PeerId(2)],
            ..Node::default()
        };
        let mut m = Membership::new(None);
        let mut a = Vec::new();
        // p2 lost at clock 3 and p3 lost and back: only p2 is gone.
        let s = state(vec![(2, 3), (3, 4)]);
        let mut s3 = s.clone();
        s3.metrics.rejoined_peers = vec![(3, 5)];
        m.on_news(&mut node, News::State(Box::new(s3)), &mut a)
            .unwrap();
        assert_eq!(
            kinds(&a),
            ["forget p2", "announce p2 lost (life 0)"],
            "{a:?}"
        );
        assert!(matches!(&a[0], Action::Warn(w) if w.contains("rejoined the run at clock 7")));
        assert_eq!(m.lost(), [PeerId(2)]);
        // A second state is ignored.
        a.clear();
        m.on_news(&mut node, News::State(Box::new(s)), &mut a)
            .unwrap();
        assert!(a.is_empty());
    }
    /// Issue 31 (found by the restart property): a node told, while it rejoins, that p2 is
    /// back adopts a state sent before that return (p2 still lost there). It does not count
    /// p2 lost, and, as a node that sends to p2, hands p2 its state (p2 may be waiting for
    /// one that nobody else can send).
    #[test]
    fn a_return_told_while_rejoining_wins_over_an_older_state() {
        let mut node = Node {
            rejoining: true,
            ..Node::default()
        };
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        m.on_news(&mut node, News::Notice(joined(2, 1)), &mut a)
            .unwrap();
        assert_eq!(kinds(&a), ["announce p2 back (life 1)"], "{a:?}");
        a.clear();
        m.on_news(
            &mut node,
            News::State(Box::new(state(vec![(2, 3)]))),
            &mut a,
        )
        .unwrap();
        assert_eq!(m.view().standing(PeerId(2)).life, 1);
        assert_eq!(m.lost(), []);
        assert_eq!(
            kinds(&a),
            ["rewired 3", "connect p2", "state to p2"],
            "{a:?}"
        );
        // Lost again after it was told of the return: the loss counts.
        let mut node = Node {
            rejoining: true,
            ..Node::default()
        };
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        for n in [joined(2, 1), lost(2, 1)] {
            m.on_news(&mut node, News::Notice(n), &mut a).unwrap();
        }
        m.on_news(&mut node, News::State(Box::new(state(Vec::new()))), &mut a)
            .unwrap();
        assert_eq!(m.lost(), [PeerId(2)]);
    }

    /// A donor counts lost more than its counters say (only its neighbours' losses are
    /// counted there): a rejoin state carries its view, the node back takes it, and the
    /// states this node hands out carry its own.
    #[test]
    fn a_rejoin_state_carries_its_senders_view() {
        let mut node = Node {
            rejoining: true,
            ..Node::default()
        };
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        let mut donor = state(Vec::new());
        donor.view = vec![out(3, 0)];
        m.on_news(&mut node, News::State(Box::new(donor)), &mut a)
            .unwrap();
        assert_eq!(m.lost(), [PeerId(3)]);
        assert_eq!(node.reported, [PeerId(3)]);
        // p2 goes, then p3 comes back: the state handed to p3 says p2 is lost.
        a.clear();
        m.on_news(&mut node, News::Notice(lost(2, 0)), &mut a)
            .unwrap();
        m.on_news(&mut node, News::Notice(joined(3, 1)), &mut a)
            .unwrap();
        let sent = a.iter().find_map(|x| match x {
            Action::SendState(to, st) => Some((*to, st.view.clone())),
            _ => None,
        });
        let back3 = Standing {
            peer: PeerId(3),
            life: 1,
            out: false,
        };
        assert_eq!(sent, Some((PeerId(3), vec![out(2, 0), back3])), "{a:?}");
    }

    /// A node this one went on without (cut off, it counts the rest lost) announces losses
    /// from its own view: they are not news here, or one stale node would push a healthy
    /// majority under its quorum. Its return is.
    #[test]
    fn losses_told_by_a_node_counted_lost_are_ignored() {
        let mut node = Node::default();
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        m.on_news(&mut node, News::Notice(lost(2, 0)), &mut a)
            .unwrap();
        a.clear();
        let told = |notice| News::Told {
            from: PeerId(2),
            notice,
        };
        m.on_news(&mut node, told(lost(1, 0)), &mut a).unwrap();
        m.on_news(&mut node, told(left(3, 0)), &mut a).unwrap();
        assert_eq!(m.lost(), [PeerId(2)]);
        assert!(kinds(&a).is_empty(), "{a:?}");
        // From a node in the run the same news counts; the stale node's return is taken.
        let from3 = News::Told {
            from: PeerId(3),
            notice: lost(1, 0),
        };
        m.on_news(&mut node, from3, &mut a).unwrap();
        m.on_news(&mut node, told(joined(2, 1)), &mut a).unwrap();
        assert_eq!(m.lost(), [PeerId(1)]);
    }

    /// The Debug lines among `actions`.
    fn debugs(actions: &[Action]) -> Vec<&str> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Debug(d) => Some(d.as_str()),
                _ => None,
            })
            .collect()
    }

    /// A loss of an earlier life than the view's is stale: news of a node's former life
    /// gone round after it came back does not take it out again.
    #[test]
    fn a_loss_of_an_earlier_life_is_stale_and_ignored() {
        let mut node = Node {
            needs: vec![PeerId(2)],
            ..Node::default()
        };
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        for n in [lost(2, 0), joined(2, 1)] {
            m.on_news(&mut node, News::Notice(n), &mut a).unwrap();
        }
        assert!(!m.is_lost(PeerId(2)) && m.view().life(PeerId(2)) == 1);
        a.clear();
        let told = News::Told {
            from: PeerId(3),
            notice: lost(2, 0),
        };
        m.on_news(&mut node, told, &mut a).unwrap();
        assert!(kinds(&a).is_empty() && !m.is_lost(PeerId(2)), "{a:?}");
        assert!(
            debugs(&a)
                .iter()
                .any(|d| d.contains("p2 gone in its life 0 (p3 says so)")
                    && d.contains("in its life 1 here: stale")),
            "{a:?}"
        );
        assert_eq!(node.reported, [PeerId(2)]);
        // The loss of its current life is news; the links' loss is of that life.
        m.on_news(
            &mut node,
            News::Down {
                peer: PeerId(2),
                why: "no heartbeat".into(),
            },
            &mut a,
        )
        .unwrap();
        assert_eq!(m.view().departure(PeerId(2)).map(|d| d.life), Some(1));
        assert!(kinds(&a).contains(&"announce p2 lost (life 1)".to_string()));
    }

    /// A return is news only in a later life than the view's; a node counted out that
    /// opens a stream is back in its next life.
    #[test]
    fn a_later_return_is_taken_and_an_older_one_ignored() {
        let mut node = Node::default();
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        m.on_news(&mut node, News::Notice(lost(2, 0)), &mut a)
            .unwrap();
        // Back in life 2 (its life-1 return and loss missed here).
        a.clear();
        m.on_news(&mut node, News::Notice(joined(2, 2)), &mut a)
            .unwrap();
        assert_eq!(
            kinds(&a),
            [
                "announce p2 back (life 2)",
                "rewired 3",
                "connect p2",
                "state to p2"
            ]
        );
        assert!(!m.is_lost(PeerId(2)) && node.rejoined == [PeerId(2)]);
        // The older return, and the same one again: nothing.
        a.clear();
        for life in [1, 2] {
            m.on_news(&mut node, News::Notice(joined(2, life)), &mut a)
                .unwrap();
        }
        assert!(kinds(&a).is_empty(), "{a:?}");
        assert!(debugs(&a)[0].contains("p2 back in its life 1"), "{a:?}");
        // Out in life 2, an older return does not take it back; a stream it opens does,
        // in life 3.
        m.on_news(&mut node, News::Notice(lost(2, 2)), &mut a)
            .unwrap();
        m.on_news(&mut node, News::Notice(joined(2, 1)), &mut a)
            .unwrap();
        assert!(m.is_lost(PeerId(2)));
        a.clear();
        m.on_news(&mut node, News::Up { peer: PeerId(2) }, &mut a)
            .unwrap();
        assert_eq!(kinds(&a)[0], "announce p2 back (life 3)");
        assert_eq!(m.view().standing(PeerId(2)).changes(), 6);
        assert_eq!(node.rejoined, [PeerId(2), PeerId(2)]);
    }

    /// News of a later life than the view's: a loss while out (it came back and was lost
    /// again, the return missed) changes only the life; a return while in (it restarted
    /// before this node counted it lost) too. Neither reaches the node's engine.
    #[test]
    fn news_of_a_later_life_moves_the_view_without_the_engine() {
        let mut node = Node::default();
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        m.on_news(&mut node, News::Notice(lost(2, 0)), &mut a)
            .unwrap();
        a.clear();
        m.on_news(&mut node, News::Notice(lost(2, 1)), &mut a)
            .unwrap();
        assert_eq!(kinds(&a), ["announce p2 lost (life 1)"]);
        assert_eq!(node.reported, [PeerId(2)]);
        assert_eq!((m.lost(), m.epoch()), (&[PeerId(2)][..], 3));
        a.clear();
        m.on_news(&mut node, News::Notice(joined(3, 1)), &mut a)
            .unwrap();
        assert_eq!(kinds(&a), ["announce p3 back (life 1)"]);
        assert!(node.rejoined.is_empty() && !m.is_lost(PeerId(3)));
        assert_eq!(m.epoch(), 5);
    }

    /// A rejoining node heard returns, losses and lives while it waited; the donor's
    /// state is older for some nodes and newer for others. Each node's later standing
    /// wins.
    #[test]
    fn a_rejoiner_adopting_an_older_state_keeps_the_newer_lives_it_heard() {
        let mut node = Node {
            rejoining: true,
            ..Node::default()
        };
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        // Heard while waiting: p2 back in life 1; p3 lost in life 1 (back unseen here).
        for n in [joined(2, 1), lost(3, 1)] {
            m.on_news(&mut node, News::Notice(n), &mut a).unwrap();
        }
        // The donor's state: p2 lost in life 0 and p3 out in life 0 (older than heard);
        // p1 back in life 2, and this node p0 back in life 1 (newer).
        let mut donor = state(Vec::new());
        donor.view = vec![
            Standing {
                peer: PeerId(0),
                life: 1,
                out: false,
            },
            Standing {
                peer: PeerId(1),
                life: 2,
                out: false,
            },
            out(2, 0),
            out(3, 0),
        ];
        a.clear();
        m.on_news(&mut node, News::State(Box::new(donor)), &mut a)
            .unwrap();
        let v = m.view();
        let standing = |p| {
            let s = v.standing(PeerId(p));
            (s.life, s.out)
        };
        assert_eq!(
            [0, 1, 2, 3].map(standing),
            [(1, false), (2, false), (1, false), (1, true)]
        );
        assert_eq!(m.lost(), [PeerId(3)]);
        assert_eq!(
            v.departure(PeerId(3)).map(|d| &d.source),
            Some(&Source::Transport)
        );
        // p2, back meanwhile, may wait for a state: this node, sending to it, hands it one.
        assert!(kinds(&a).contains(&"state to p2".to_string()), "{a:?}");
        // p1's later life is taken and passed on, with nothing for the engine.
        assert!(kinds(&a).contains(&"announce p1 back (life 2)".to_string()));
        assert!(node.rejoined.is_empty(), "{:?}", node.rejoined);
        assert_eq!(m.epoch(), 2 + 4 + 2 + 3);
    }

    /// The epoch, and the whole view, depend only on the set of news taken in, not on
    /// the order it came in: every order of the same six notices.
    #[test]
    fn the_epoch_and_view_do_not_depend_on_the_order_of_the_news() {
        let news = [
            lost(1, 0),
            joined(1, 1),
            lost(1, 1),
            left(2, 0),
            joined(3, 1),
            lost(3, 0),
        ];
        let mut seen = Vec::new();
        let mut order: Vec<usize> = (0..news.len()).collect();
        // Heap's algorithm: every permutation once.
        let mut c = vec![0; order.len()];
        let run = |order: &[usize]| {
            let mut node = Node::default();
            let mut m = Membership::new(repair());
            let mut a = Vec::new();
            for &i in order {
                m.on_news(&mut node, News::Notice(news[i]), &mut a).unwrap();
            }
            let mut lost = m.lost().to_vec();
            lost.sort_unstable();
            (m.epoch(), m.view().standings(), lost)
        };
        seen.push(run(&order));
        let mut i = 0;
        while i < order.len() {
            if c[i] < i {
                let j = if i % 2 == 0 { 0 } else { c[i] };
                order.swap(j, i);
                seen.push(run(&order));
                c[i] += 1;
                i = 0;
            } else {
                c[i] = 0;
                i += 1;
            }
        }
        assert_eq!(seen.len(), 720);
        assert!(seen.iter().all(|s| *s == seen[0]), "{:?}", seen[0]);
        let (epoch, view, lost) = &seen[0];
        // p1 out in life 1 (3), p2 out in life 0 (1), p3 in in life 1 (2).
        assert_eq!(*epoch, 6);
        assert_eq!(view.iter().map(|s| s.changes()).sum::<u64>(), *epoch);
        assert_eq!(lost, &[PeerId(1), PeerId(2)]);
    }

    /// Each node out records how it was learned, at which clock and epoch, and the
    /// majority rule's count when the node went on.
    #[test]
    fn each_departure_records_by_whose_agreement() {
        let mut node = Node {
            needs: vec![PeerId(1), PeerId(2), PeerId(3)],
            ..Node::default()
        };
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        let down = News::Down {
            peer: PeerId(2),
            why: "stream broken".into(),
        };
        m.on_news(&mut node, down, &mut a).unwrap();
        let told = News::Told {
            from: PeerId(3),
            notice: left(1, 0),
        };
        m.on_news(&mut node, told, &mut a).unwrap();
        m.told_lost(&mut node, &[PeerId(3)], &mut a).unwrap();
        let d = m.view().out();
        assert_eq!(
            d.iter().map(|d| d.source.clone()).collect::<Vec<_>>(),
            [
                Source::Links {
                    why: "stream broken".into()
                },
                Source::Neighbour(PeerId(3)),
                Source::Transport
            ]
        );
        assert_eq!(
            d.iter()
                .map(|d| (d.peer, d.left, d.clock, d.epoch, d.counted_in))
                .collect::<Vec<_>>(),
            [
                (PeerId(2), false, 7, 1, Some((3, PEERS))),
                (PeerId(1), true, 7, 2, Some((2, PEERS))),
                (PeerId(3), false, 7, 3, Some((1, PEERS))),
            ]
        );
        let warns: Vec<&String> = a
            .iter()
            .filter_map(|x| match x {
                Action::Warn(w) => Some(w),
                _ => None,
            })
            .collect();
        assert!(
            warns[0].contains("p0 at clock 7 lost p2 (stream broken)")
                && warns[0].contains("3 of the run's 4 peers in; epoch 1"),
            "{warns:?}"
        );
        assert!(
            warns[1].contains("p1 left the run (p3 says so)"),
            "{warns:?}"
        );
        // A donor's loss is the donor's.
        let mut node = Node {
            rejoining: true,
            ..Node::default()
        };
        let mut m = Membership::new(None);
        let mut donor = state(Vec::new());
        donor.view = vec![out(3, 0)];
        m.on_news(&mut node, News::State(Box::new(donor)), &mut a)
            .unwrap();
        let d = m.view().departure(PeerId(3)).unwrap();
        assert_eq!((&d.source, d.epoch), (&Source::Donor(PeerId(1)), 1));
    }
}
