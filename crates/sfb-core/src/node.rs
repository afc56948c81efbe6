//! The driver's view of a sans-IO node.

use crate::engine::{Event, Output, Progress};
use crate::fms::{Client, Server};
use crate::wire::Message;
use crate::{Engine, Model, PeerId, Result, TimeSource};

/// What every sans-IO node (an SFB [`Engine`], an FMS [`Server`] or [`Client`]) offers the
/// transport that drives it. A driver loops: deliver received frames with
/// [`on_message`](Self::on_message), call [`on_tick`](Self::on_tick), send everything
/// [`poll_output`](Self::poll_output) yields, log [`poll_event`](Self::poll_event); on
/// [`Progress::Done`] call [`finish`](Self::finish) and drain events once more. Every call
/// that may take time reads it from the driver's [`TimeSource`].
pub trait StateMachine {
    /// The node's id ([`PeerId::SERVER`] for the FMS server).
    fn id(&self) -> PeerId;
    /// The node's clock (for messages).
    fn clock(&self) -> u64;
    /// Takes a frame received from `from`; a refused frame changes nothing.
    ///
    /// # Errors
    /// The node's validation errors.
    fn on_message(&mut self, from: PeerId, msg: Message, time: &mut dyn TimeSource) -> Result<()>;
    /// Tries to make progress.
    ///
    /// # Errors
    /// The node's step errors; drop the node after one.
    fn on_tick(&mut self, time: &mut dyn TimeSource) -> Result<Progress>;
    /// The next frame to send.
    fn poll_output(&mut self) -> Option<Output>;
    /// The next event.
    fn poll_event(&mut self) -> Option<Event>;
    /// Whom the node waits for, with what each has delivered (for timeout errors).
    fn waiting_on(&self) -> Vec<(PeerId, u64)>;
    /// After [`Progress::Done`]: final evaluation and record.
    fn finish(&mut self, time: &mut dyn TimeSource);
    /// Node `peer` is gone (its transport says so): go on without it if the node can and
    /// its policy allows; whether it was a neighbour.
    ///
    /// # Errors
    /// [`Error::PeerLost`](crate::Error::PeerLost) when the node stops instead.
    fn peer_lost(&mut self, peer: PeerId) -> Result<bool>;
    /// Node `peer` finished the run (it computed and sent every clock) and sends nothing
    /// more: a new in-neighbour after a repair or a return that this node will never get
    /// the rest of its clocks from. Not a loss: it counts as having delivered every clock
    /// ([`Engine::peer_finished`]). Default: as [`peer_lost`](Self::peer_lost).
    ///
    /// # Errors
    /// As [`peer_lost`](Self::peer_lost).
    fn peer_finished(&mut self, peer: PeerId) -> Result<bool> {
        self.peer_lost(peer)
    }
    /// Another node reports `peer` lost, or `peer` said it leaves ([`Engine::loss_reported`]).
    /// Default: as [`peer_lost`](Self::peer_lost).
    ///
    /// # Errors
    /// As [`peer_lost`](Self::peer_lost).
    fn loss_reported(&mut self, peer: PeerId) -> Result<bool> {
        self.peer_lost(peer)
    }
    /// Ends the run at clock `t` (every node told the same), checkpointing there if the
    /// node checkpoints; returns the clock it stops at.
    fn stop_at(&mut self, t: u64) -> u64;
    /// New neighbours after a topology repair ([`Engine::set_neighbors`]); nodes without a
    /// topology (FMS) ignore it.
    fn set_neighbors(&mut self, out: Vec<PeerId>, inn: Vec<PeerId>, topology: String) {
        let _ = (out, inn, topology);
    }
    /// A peer lost earlier is back; record it. Default: nothing.
    fn peer_rejoined(&mut self, peer: PeerId) {
        let _ = peer;
    }
    /// The state to hand a rejoining peer (W, optimizer state, clock), if this node has
    /// one to give. Default: none.
    fn rejoin_state(&self) -> Option<crate::NodeState> {
        None
    }
    /// The state to checkpoint when the node fails ([`Engine::final_state`]), if it has a
    /// cut newer than its last checkpoint. Default: none.
    fn final_state(&self) -> Option<crate::NodeState> {
        None
    }
    /// A rejoining node takes a neighbour's state; whether it did (the first one only).
    ///
    /// # Errors
    /// A state that does not fit. Default: ignores it.
    fn adopt(&mut self, state: crate::NodeState) -> Result<bool> {
        let _ = state;
        Ok(false)
    }

    /// Whether the node is rejoining a run and waits for a neighbour's state
    /// ([`adopt`](Self::adopt)) before it can step. Default: never.
    fn rejoining(&self) -> bool {
        false
    }

    /// The majority rule's count: the run's peers this node counts in (itself included)
    /// and the run's peers, as it counts them now; `None` for a node without the rule (FMS
    /// nodes). [`Membership`](crate::Membership) records it with each loss it takes in
    /// (the [`View`](crate::membership::View)'s provenance). Default: `None`.
    fn counted_in(&self) -> Option<(usize, usize)> {
        None
    }

    /// The transport sent `bytes` and was busy sending for `busy` since it last said (the
    /// link's measured rate, [`crate::prioritize::LinkRate`]). Default: ignored.
    fn observe_egress(&mut self, bytes: u64, busy: std::time::Duration) {
        let _ = (bytes, busy);
    }
}

impl<M: Model> StateMachine for Engine<M> {
    fn id(&self) -> PeerId {
        self.config().id
    }
    fn clock(&self) -> u64 {
        Engine::clock(self)
    }
    fn on_message(&mut self, from: PeerId, msg: Message, time: &mut dyn TimeSource) -> Result<()> {
        Engine::on_message(self, from, msg, time)
    }
    fn on_tick(&mut self, time: &mut dyn TimeSource) -> Result<Progress> {
        Engine::on_tick(self, time)
    }
    fn poll_output(&mut self) -> Option<Output> {
        Engine::poll_output(self)
    }
    fn poll_event(&mut self) -> Option<Event> {
        Engine::poll_event(self)
    }
    fn waiting_on(&self) -> Vec<(PeerId, u64)> {
        Engine::waiting_on(self)
    }
    fn finish(&mut self, time: &mut dyn TimeSource) {
        Engine::finish(self, time);
    }
    fn peer_finished(&mut self, peer: PeerId) -> Result<bool> {
        Engine::peer_finished(self, peer);
        Ok(false)
    }
    fn peer_lost(&mut self, peer: PeerId) -> Result<bool> {
        Engine::peer_lost(self, peer)
    }
    fn loss_reported(&mut self, peer: PeerId) -> Result<bool> {
        Engine::loss_reported(self, peer)
    }
    fn stop_at(&mut self, t: u64) -> u64 {
        Engine::stop_at(self, t)
    }
    fn set_neighbors(&mut self, out: Vec<PeerId>, inn: Vec<PeerId>, topology: String) {
        Engine::set_neighbors(self, out, inn, topology);
    }
    fn peer_rejoined(&mut self, peer: PeerId) {
        Engine::peer_rejoined(self, peer);
    }
    fn rejoin_state(&self) -> Option<crate::NodeState> {
        Some(Engine::state(self))
    }
    fn adopt(&mut self, state: crate::NodeState) -> Result<bool> {
        Engine::adopt(self, state)
    }
    fn rejoining(&self) -> bool {
        Engine::is_rejoining(self)
    }
    fn counted_in(&self) -> Option<(usize, usize)> {
        Some(Engine::counted_in(self))
    }
    fn final_state(&self) -> Option<crate::NodeState> {
        Engine::final_state(self)
    }
    fn observe_egress(&mut self, bytes: u64, busy: std::time::Duration) {
        Engine::observe_egress(self, bytes, busy);
    }
}

impl<M: Model> StateMachine for Server<M> {
    fn id(&self) -> PeerId {
        PeerId::SERVER
    }
    fn clock(&self) -> u64 {
        Server::clock(self)
    }
    fn on_message(&mut self, from: PeerId, msg: Message, time: &mut dyn TimeSource) -> Result<()> {
        Server::on_message(self, from, msg, time)
    }
    fn on_tick(&mut self, time: &mut dyn TimeSource) -> Result<Progress> {
        Server::on_tick(self, time)
    }
    fn poll_output(&mut self) -> Option<Output> {
        Server::poll_output(self)
    }
    fn poll_event(&mut self) -> Option<Event> {
        Server::poll_event(self)
    }
    fn waiting_on(&self) -> Vec<(PeerId, u64)> {
        Server::waiting_on(self)
    }
    fn finish(&mut self, time: &mut dyn TimeSource) {
        Server::finish(self, time);
    }
    fn peer_lost(&mut self, peer: PeerId) -> Result<bool> {
        self.client_lost(peer)
    }
    fn stop_at(&mut self, t: u64) -> u64 {
        Server::stop_at(self, t)
    }
}

impl<M: Model> StateMachine for Client<M> {
    fn id(&self) -> PeerId {
        Client::id(self)
    }
    fn clock(&self) -> u64 {
        Client::clock(self)
    }
    fn on_message(&mut self, from: PeerId, msg: Message, time: &mut dyn TimeSource) -> Result<()> {
        Client::on_message(self, from, msg, time)
    }
    fn on_tick(&mut self, time: &mut dyn TimeSource) -> Result<Progress> {
        Client::on_tick(self, time)
    }
    fn poll_output(&mut self) -> Option<Output> {
        Client::poll_output(self)
    }
    fn poll_event(&mut self) -> Option<Event> {
        Client::poll_event(self)
    }
    fn waiting_on(&self) -> Vec<(PeerId, u64)> {
        Client::waiting_on(self)
    }
    fn finish(&mut self, time: &mut dyn TimeSource) {
        Client::finish(self, time);
    }
    fn peer_lost(&mut self, peer: PeerId) -> Result<bool> {
        if peer != PeerId::SERVER || self.is_done() || self.worker_finished_by_server() {
            return Ok(false);
        }
        Err(crate::Error::PeerLost {
            me: self.id(),
            peer,
            clock: self.clock(),
            why: "an FMS client cannot train without its server",
        })
    }
    fn stop_at(&mut self, t: u64) -> u64 {
        Client::stop_at(self, t)
    }
    fn observe_egress(&mut self, bytes: u64, busy: std::time::Duration) {
        Client::observe_egress(self, bytes, busy);
    }
}
