//! Who is in the run: the membership decisions of one node, the same on every transport.
//!
//! A transport only reports what its links saw ([`News`]): a node gone (a broken stream,
//! no heartbeat, a crash detected), a neighbour's [`Notice`], or a neighbour's state for
//! this rejoining node. [`Membership`] decides, with the node's own rules
//! ([`StateMachine::peer_lost`], [`StateMachine::loss_reported`], the majority rule in the
//! engine), what follows, and tells the transport what to do in order ([`Action`]):
//! - **a loss** is news once: the node goes on without the peer (or stops, by its policy or
//!   for want of a majority), passes the news on once to its out-neighbours, so that every
//!   survivor learns the same set of lost nodes, and rewires by the [`RepairFn`] (every
//!   survivor computes the same repaired topology from the same set);
//! - **a return** ([`Notice::Joined`]): the node takes the peer back, passes the news on,
//!   rewires, and if it sends to the peer hands it its state ([`Action::SendState`]);
//! - **a state** for this node while it rejoins: it adopts it, and learns with it the
//!   losses its neighbour knew of (some while this node was away), so that it does not wait
//!   for dead nodes until its own timeout.
//!
//! The messages travel in the one wire codec ([`crate::wire::Message::Notice`],
//! [`crate::wire::Message::State`]).

use std::sync::Arc;

use crate::wire::Notice;
use crate::{NodeState, PeerId, Result, StateMachine};

/// A node's neighbours after the topology is repaired for a set of lost nodes: `(out,
/// in, identifier of the repaired graph)`, or `None` when there is nothing to repair
/// (e.g. FMS). Must give every survivor the same graph for the same set.
pub type RepairFn =
    Arc<dyn Fn(&[PeerId]) -> Option<(Vec<PeerId>, Vec<PeerId>, String)> + Send + Sync>;

/// What a node's links saw.
#[derive(Debug)]
pub enum News {
    /// The links say `peer` is gone; `why` says how (for the log).
    Down {
        /// The node gone.
        peer: PeerId,
        /// How the links noticed.
        why: String,
    },
    /// News about a node, as every node learns it (the virtual-time driver's).
    Notice(Notice),
    /// News about a node from neighbour `from`: a loss or leave told by a node this one
    /// counts lost is ignored (it speaks from a view of its own: cut off, it counts the
    /// rest lost), a return is taken.
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

/// One node's view of who is in the run; see the [module docs](self).
#[derive(Clone, Default)]
pub struct Membership {
    lost: Vec<PeerId>,
    repair: Option<RepairFn>,
    /// Nodes this node was told are back while it was itself rejoining, and not lost again
    /// since: a neighbour's state sent before their return still counts them lost, and
    /// this node's later news wins ([`Membership::adopt`]).
    back_meanwhile: Vec<PeerId>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("lost", &self.lost)
            .field("back_meanwhile", &self.back_meanwhile)
            .field("repair", &self.repair.is_some())
            .finish()
    }
}

impl Membership {
    /// A view where every node is in; `repair` rewires the node after losses (`None`: the
    /// node only drops the lost ones).
    pub fn new(repair: Option<RepairFn>) -> Self {
        Self {
            lost: Vec::new(),
            repair,
            back_meanwhile: Vec::new(),
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

    /// Takes `news` in; appends to `actions` what the transport is to do.
    ///
    /// # Errors
    /// The node's refusal to go on: [`crate::Error::PeerLost`] (its policy is to fail),
    /// [`crate::Error::Minority`] or [`crate::Error::Isolated`] (cut off); a state that does
    /// not fit ([`StateMachine::adopt`]). The node stops with it.
    pub fn on_news<N: StateMachine + ?Sized>(
        &mut self,
        node: &mut N,
        news: News,
        actions: &mut Vec<Action>,
    ) -> Result<()> {
        match news {
            News::State(state) => self.adopt(node, *state, actions),
            News::Notice(Notice::Joined(p)) => {
                self.joined(node, PeerId(p), actions);
                Ok(())
            }
            News::Told { from, notice }
                if self.is_lost(from) && !matches!(notice, Notice::Joined(_)) =>
            {
                // A node this one went on without speaks from a view of its own (it was cut
                // off, and counts the rest lost): not news.
                actions.push(Action::Debug(format!(
                    "{}: {notice:?} from {from}, counted lost here: ignored",
                    node.id()
                )));
                Ok(())
            }
            News::Told { notice, .. } => self.on_news(node, News::Notice(notice), actions),
            News::Notice(Notice::Lost(p)) => self.gone(node, PeerId(p), None, false, actions),
            News::Notice(Notice::Left(p)) => self.gone(node, PeerId(p), None, true, actions),
            News::Down { peer, why } => self.gone(node, peer, Some(why), false, actions),
        }
    }

    /// Takes in at once that `peers` are lost, as told by others (a notice each), and
    /// rewires once for all of them.
    ///
    /// # Errors
    /// As [`on_news`](Self::on_news).
    pub fn told_lost<N: StateMachine + ?Sized>(
        &mut self,
        node: &mut N,
        peers: &[PeerId],
        actions: &mut Vec<Action>,
    ) -> Result<()> {
        let mut news = false;
        for &peer in peers {
            if self.lost.contains(&peer) || peer == node.id() {
                continue;
            }
            node.loss_reported(peer)?;
            self.lost.push(peer);
            actions.push(Action::Forget(peer));
            actions.push(Action::Announce(Notice::Lost(peer.0)));
            news = true;
        }
        if news {
            self.rewire(node, actions);
        }
        Ok(())
    }

    fn adopt<N: StateMachine + ?Sized>(
        &mut self,
        node: &mut N,
        state: NodeState,
        actions: &mut Vec<Action>,
    ) -> Result<()> {
        // The losses the neighbour knows of, some of them while this node was away: its
        // view, and its counters' (a state written before the view travelled with it).
        let mut gone = state.metrics.gone();
        for &p in &state.lost {
            if !gone.contains(&p) {
                gone.push(p);
            }
        }
        if !node.adopt(state)? {
            return Ok(());
        }
        let me = node.id();
        actions.push(Action::Warn(format!(
            "{me} rejoined the run at clock {}",
            node.clock()
        )));
        // Not those it was told came back while it waited: the state may predate that.
        let back = std::mem::take(&mut self.back_meanwhile);
        let news: Vec<PeerId> = gone
            .into_iter()
            .filter(|p| *p != me && !self.lost.contains(p) && !back.contains(p))
            .collect();
        if !news.is_empty() {
            let names: Vec<String> = news.iter().map(ToString::to_string).collect();
            actions.push(Action::Warn(format!(
                "{me}: the run lost {} while it was away",
                names.join(", ")
            )));
        }
        for peer in news {
            self.gone(node, peer, None, false, actions)?;
        }
        // Those that came back while this node waited may be waiting still, for a state
        // from a node that sends to them (this one, perhaps, which had none to give).
        if !back.is_empty() {
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

    fn joined<N: StateMachine + ?Sized>(
        &mut self,
        node: &mut N,
        joined: PeerId,
        actions: &mut Vec<Action>,
    ) {
        let Some(i) = self.lost.iter().position(|&p| p == joined) else {
            // Not lost here: a stream opened, or news already taken; or news this node,
            // rejoining, has no view for yet (kept for the state it adopts).
            if node.rejoining() && !self.back_meanwhile.contains(&joined) {
                self.back_meanwhile.push(joined);
            }
            return;
        };
        self.lost.remove(i);
        actions.push(Action::Announce(Notice::Joined(joined.0)));
        node.peer_rejoined(joined);
        // Only the nodes that send to it again (the topology as it was without the loss)
        // open a stream to it, and any of them can hand it the state.
        let sends_to_it = self
            .rewire(node, actions)
            .is_none_or(|out| out.contains(&joined));
        if sends_to_it {
            actions.push(Action::Connect(joined));
            if let Some(state) = self.rejoin_state(node) {
                actions.push(Action::SendState(joined, Box::new(state)));
            }
        }
        actions.push(Action::Warn(format!(
            "{} at clock {}: {joined} is back",
            node.id(),
            node.clock()
        )));
    }

    /// `peer` is gone: by the links (`why`), or by a neighbour's notice (`why` `None`),
    /// left on request if `left`.
    fn gone<N: StateMachine + ?Sized>(
        &mut self,
        node: &mut N,
        peer: PeerId,
        why: Option<String>,
        left: bool,
        actions: &mut Vec<Action>,
    ) -> Result<()> {
        if self.lost.contains(&peer) || peer == node.id() {
            // Known already; or news about this node itself, gone round while it was away
            // (it rejoined): it is here.
            return Ok(());
        }
        self.back_meanwhile.retain(|&p| p != peer);
        let me = node.id();
        let was_needed = match &why {
            Some(_) => node.peer_lost(peer)?,
            None => node.loss_reported(peer)?,
        };
        if !was_needed && let Some(why) = &why {
            // A stream of a node this one neither waits for nor sends to ended (it
            // finished, or a topology change dropped the arc): its own neighbours report a
            // real loss.
            actions.push(Action::Debug(format!(
                "{me}: {peer}'s stream ended ({why})"
            )));
            return Ok(());
        }
        self.lost.push(peer);
        actions.push(Action::Forget(peer));
        let clock = node.clock();
        actions.push(match (&why, was_needed, left) {
            (_, true, true) => Action::Warn(format!(
                "{me} at clock {clock}: {peer} left the run; training on without it"
            )),
            (Some(why), true, false) => Action::Warn(format!(
                "{me} at clock {clock} lost {peer} ({why}); training on without it"
            )),
            (None, true, false) => Action::Warn(format!(
                "{me} at clock {clock} lost {peer} (a neighbour says it is lost); training on \
                 without it"
            )),
            // It had delivered everything this node needs (a run stopped early), or it was
            // not a neighbour (a notice).
            (_, false, _) => Action::Debug(format!("{me}: {peer} is gone")),
        });
        // Pass it on, then rewire: every survivor gets the same set of lost nodes and so the
        // same repaired topology.
        actions.push(Action::Announce(if left {
            Notice::Left(peer.0)
        } else {
            Notice::Lost(peer.0)
        }));
        self.rewire(node, actions);
        Ok(())
    }

    /// The node's state for a node coming back, carrying this view's losses.
    fn rejoin_state<N: StateMachine + ?Sized>(&self, node: &N) -> Option<NodeState> {
        let mut state = node.rejoin_state()?;
        state.lost.clone_from(&self.lost);
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
            "{}: topology repaired for lost {:?}: sends to {out:?}",
            node.id(),
            self.lost
        )));
        node.set_neighbors(out.clone(), inn.clone(), topology);
        actions.push(Action::Rewired {
            out: out.clone(),
            inn,
        });
        Some(out)
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
            lost: Vec::new(),
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

    /// The actions' kinds, in order, as short words.
    fn kinds(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Forget(p) => Some(format!("forget {p}")),
                Action::Announce(n) => Some(format!("announce {n:?}")),
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
            ["forget p2", "announce Lost(2)", "rewired 2"],
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
        m.on_news(&mut node, News::Notice(Notice::Lost(2)), &mut a)
            .unwrap();
        assert!(a.is_empty(), "{a:?}");
        assert_eq!(node.reported, [PeerId(2)]);
        // A stream of a node it does not need ended: not a loss (its neighbours say so);
        // a neighbour's notice of it is one.
        m.on_news(&mut node, down(PeerId(3)), &mut a).unwrap();
        assert!(kinds(&a).is_empty() && !m.is_lost(PeerId(3)), "{a:?}");
        m.on_news(&mut node, News::Notice(Notice::Left(3)), &mut a)
            .unwrap();
        assert_eq!(kinds(&a), ["forget p3", "announce Left(3)", "rewired 1"]);
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
            .on_news(&mut node, News::Notice(Notice::Lost(1)), &mut a)
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
        // Not lost here: nothing to take back.
        m.on_news(&mut node, News::Notice(Notice::Joined(1)), &mut a)
            .unwrap();
        assert!(a.is_empty());
        m.told_lost(&mut node, &[PeerId(1), PeerId(3)], &mut a)
            .unwrap();
        assert_eq!(
            kinds(&a),
            [
                "forget p1",
                "announce Lost(1)",
                "forget p3",
                "announce Lost(3)",
                "rewired 1"
            ]
        );
        a.clear();
        m.on_news(&mut node, News::Notice(Notice::Joined(1)), &mut a)
            .unwrap();
        assert_eq!(
            kinds(&a),
            [
                "announce Joined(1)",
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
        assert_eq!(kinds(&a), ["forget p2", "announce Lost(2)"], "{a:?}");
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
        m.on_news(&mut node, News::Notice(Notice::Joined(2)), &mut a)
            .unwrap();
        assert!(kinds(&a).is_empty(), "{a:?}");
        m.on_news(
            &mut node,
            News::State(Box::new(state(vec![(2, 3)]))),
            &mut a,
        )
        .unwrap();
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
        for n in [Notice::Joined(2), Notice::Lost(2)] {
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
        donor.lost = vec![PeerId(3)];
        m.on_news(&mut node, News::State(Box::new(donor)), &mut a)
            .unwrap();
        assert_eq!(m.lost(), [PeerId(3)]);
        assert_eq!(node.reported, [PeerId(3)]);
        // p2 goes, then p3 comes back: the state handed to p3 says p2 is lost.
        a.clear();
        m.on_news(&mut node, News::Notice(Notice::Lost(2)), &mut a)
            .unwrap();
        m.on_news(&mut node, News::Notice(Notice::Joined(3)), &mut a)
            .unwrap();
        let sent = a.iter().find_map(|x| match x {
            Action::SendState(to, st) => Some((*to, st.lost.clone())),
            _ => None,
        });
        assert_eq!(sent, Some((PeerId(3), vec![PeerId(2)])), "{a:?}");
    }

    /// A node this one went on without (cut off, it counts the rest lost) announces losses
    /// from its own view: they are not news here, or one stale node would push a healthy
    /// majority under its quorum. Its return is.
    #[test]
    fn losses_told_by_a_node_counted_lost_are_ignored() {
        let mut node = Node::default();
        let mut m = Membership::new(repair());
        let mut a = Vec::new();
        m.on_news(&mut node, News::Notice(Notice::Lost(2)), &mut a)
            .unwrap();
        a.clear();
        let told = |notice| News::Told {
            from: PeerId(2),
            notice,
        };
        m.on_news(&mut node, told(Notice::Lost(1)), &mut a).unwrap();
        m.on_news(&mut node, told(Notice::Left(3)), &mut a).unwrap();
        assert_eq!(m.lost(), [PeerId(2)]);
        assert!(kinds(&a).is_empty(), "{a:?}");
        // From a node in the run the same news counts; the stale node's return is taken.
        let from3 = News::Told {
            from: PeerId(3),
            notice: Notice::Lost(1),
        };
        m.on_news(&mut node, from3, &mut a).unwrap();
        m.on_news(&mut node, told(Notice::Joined(2)), &mut a)
            .unwrap();
        assert_eq!(m.lost(), [PeerId(1)]);
    }
}
