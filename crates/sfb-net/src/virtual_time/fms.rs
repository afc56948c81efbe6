//! FMS nodes in one network: the parameter server and its clients as one node type.

use sfb_core::fms::{Client, Server};
use sfb_core::wire::Message;
use sfb_core::{Event, Model, Output, PeerId, Progress, Result, StateMachine, TimeSource};

/// The parameter [`Server`] or one of its [`Client`]s, so that an FMS cluster can run in
/// one [`Network`](super::Network) (whose nodes share a type).
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "nodes live in one Vec; a server and a client differ by a few hundred bytes"
)]
pub enum FmsNode<M: Model, S: Model = M> {
    /// The parameter server.
    Server(Server<S>),
    /// A client.
    Client(Client<M>),
}

impl<M: Model, S: Model> FmsNode<M, S> {
    /// The server followed by the clients, ready for [`Network::new`](super::Network::new).
    pub fn cluster(server: Server<S>, clients: Vec<Client<M>>) -> Vec<Self> {
        std::iter::once(Self::Server(server))
            .chain(clients.into_iter().map(Self::Client))
            .collect()
    }

    /// The server, if this is it.
    pub fn as_server(&self) -> Option<&Server<S>> {
        match self {
            Self::Server(s) => Some(s),
            Self::Client(_) => None,
        }
    }

    /// The client, if this is one.
    pub fn as_client(&self) -> Option<&Client<M>> {
        match self {
            Self::Client(c) => Some(c),
            Self::Server(_) => None,
        }
    }
}

/// Forwards a call to whichever node this is.
macro_rules! both {
    ($self:ident, $n:ident => $e:expr) => {
        match $self {
            FmsNode::Server($n) => $e,
            FmsNode::Client($n) => $e,
        }
    };
}

impl<M: Model, S: Model> StateMachine for FmsNode<M, S> {
    fn id(&self) -> PeerId {
        both!(self, n => StateMachine::id(n))
    }
    fn clock(&self) -> u64 {
        both!(self, n => StateMachine::clock(n))
    }
    fn on_message(&mut self, from: PeerId, msg: Message, time: &mut dyn TimeSource) -> Result<()> {
        both!(self, n => StateMachine::on_message(n, from, msg, time))
    }
    fn on_tick(&mut self, time: &mut dyn TimeSource) -> Result<Progress> {
        both!(self, n => StateMachine::on_tick(n, time))
    }
    fn poll_output(&mut self) -> Option<Output> {
        both!(self, n => StateMachine::poll_output(n))
    }
    fn poll_event(&mut self) -> Option<Event> {
        both!(self, n => StateMachine::poll_event(n))
    }
    fn waiting_on(&self) -> Vec<(PeerId, u64)> {
        both!(self, n => StateMachine::waiting_on(n))
    }
    fn finish(&mut self, time: &mut dyn TimeSource) {
        both!(self, n => StateMachine::finish(n, time))
    }
    fn peer_lost(&mut self, peer: PeerId) -> Result<bool> {
        both!(self, n => StateMachine::peer_lost(n, peer))
    }
    fn stop_at(&mut self, t: u64) -> u64 {
        both!(self, n => StateMachine::stop_at(n, t))
    }
    fn observe_egress(&mut self, bytes: u64, busy: std::time::Duration) {
        both!(self, n => StateMachine::observe_egress(n, bytes, busy));
    }
}
