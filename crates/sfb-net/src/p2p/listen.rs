//! TCP for the swarm: a listening socket the peer owns alone, dialing by libp2p-tcp.
//!
//! libp2p-tcp sets `SO_REUSEPORT` on every listening socket, so a second process (a peer
//! started twice by mistake) can bind the same address and the kernel then splits the
//! incoming connections between the two; the duplicate fails only later, confusingly.
//! [`Tcp`] binds its listeners itself with `SO_REUSEADDR` only (a restarted peer can
//! rebind a port whose old connections linger in `TIME_WAIT`) and without
//! `SO_REUSEPORT`, so a second bind of the same address fails at once with the OS's
//! "address in use". Dialing is libp2p-tcp's.
//!
//! The swarm wraps a listen error in layers whose `source()` skips the OS error, so
//! [`Tcp`] also keeps a copy of its last bind error in a [`LastError`] slot the node
//! reads to report the OS's reason ("address in use").
//!
//! An unspecified listen address (`0.0.0.0`, `::`) is reported as is, not expanded into
//! the host's interface addresses.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{self, Ready};
use libp2p::Multiaddr;
use libp2p::core::Transport;
use libp2p::core::transport::{DialOpts, ListenerId, TransportError, TransportEvent};
use libp2p::multiaddr::Protocol;
use libp2p::tcp::tokio::TcpStream;

/// How long a listener stops accepting after an accept error (e.g. out of file
/// descriptors), so that a persistent error cannot spin the swarm task.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// Kernel queue of connections not yet accepted, per listener (libp2p-tcp's default).
const BACKLOG: u32 = 1024;

type Event = TransportEvent<Ready<io::Result<TcpStream>>, io::Error>;

/// The last error of [`Tcp::listen_on`], as the OS gave it.
#[derive(Debug, Clone, Default)]
pub(super) struct LastError(Arc<Mutex<Option<io::Error>>>);

impl LastError {
    fn set(&self, e: &io::Error) {
        let copy = match e.raw_os_error() {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(e.kind(), e.to_string()),
        };
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(copy);
    }

    /// Takes the last error, if any.
    pub(super) fn take(&self) -> Option<io::Error> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// A TCP transport whose listening sockets own their port (no `SO_REUSEPORT`).
pub(super) struct Tcp {
    dial: libp2p::tcp::tokio::Transport,
    listeners: Vec<Listener>,
    events: VecDeque<Event>,
    last_error: LastError,
}

struct Listener {
    id: ListenerId,
    socket: tokio::net::TcpListener,
    addr: Multiaddr,
    /// Set after an accept error: no accepting until it fires.
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Tcp {
    /// A transport that dials with `config` (libp2p-tcp) and listens exclusively,
    /// keeping its last bind error in `last_error`.
    pub(super) fn new(config: libp2p::tcp::Config, last_error: LastError) -> Self {
        Self {
            dial: libp2p::tcp::tokio::Transport::new(config),
            listeners: Vec::new(),
            events: VecDeque::new(),
            last_error,
        }
    }
}

/// Binds `addr` without `SO_REUSEPORT` and listens.
///
/// # Errors
/// The OS's error, e.g. [`io::ErrorKind::AddrInUse`] when another socket holds the port.
pub(super) fn bind(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(io::Error::other(
            "listening needs a tokio runtime (call listen_on inside one)",
        ));
    }
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // SO_REUSEADDR only; SO_REUSEPORT stays off (the default), which is the point.
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// The IP and port of a `/ip4|ip6/…/tcp/…` address (a trailing `/p2p/…` is ignored).
fn socket_addr(addr: &Multiaddr) -> Option<SocketAddr> {
    let mut it = addr.iter();
    let ip = match it.next()? {
        Protocol::Ip4(ip) => ip.into(),
        Protocol::Ip6(ip) => ip.into(),
        _ => return None,
    };
    let Protocol::Tcp(port) = it.next()? else {
        return None;
    };
    match (it.next(), it.next()) {
        (None | Some(Protocol::P2p(_)), None) => Some(SocketAddr::new(ip, port)),
        _ => None,
    }
}

fn multiaddr(a: SocketAddr) -> Multiaddr {
    Multiaddr::empty()
        .with(a.ip().into())
        .with(Protocol::Tcp(a.port()))
}

impl Transport for Tcp {
    type Output = TcpStream;
    type Error = io::Error;
    type ListenerUpgrade = Ready<io::Result<TcpStream>>;
    type Dial = <libp2p::tcp::tokio::Transport as Transport>::Dial;

    fn listen_on(
        &mut self,
        id: ListenerId,
        addr: Multiaddr,
    ) -> Result<(), TransportError<io::Error>> {
        let sa = socket_addr(&addr).ok_or(TransportError::MultiaddrNotSupported(addr))?;
        let bound = bind(sa).and_then(|s| Ok((s.local_addr()?, s)));
        let (local, socket) = bound.map_err(|e| {
            self.last_error.set(&e);
            TransportError::Other(e)
        })?;
        let addr = multiaddr(local);
        self.events.push_back(TransportEvent::NewAddress {
            listener_id: id,
            listen_addr: addr.clone(),
        });
        self.listeners.push(Listener {
            id,
            socket,
            addr,
            pause: None,
        });
        Ok(())
    }

    fn remove_listener(&mut self, id: ListenerId) -> bool {
        let Some(k) = self.listeners.iter().position(|l| l.id == id) else {
            return false;
        };
        self.listeners.remove(k);
        self.events.push_back(TransportEvent::ListenerClosed {
            listener_id: id,
            reason: Ok(()),
        });
        true
    }

    fn dial(
        &mut self,
        addr: Multiaddr,
        opts: DialOpts,
    ) -> Result<Self::Dial, TransportError<io::Error>> {
        self.dial.dial(addr, opts)
    }

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Event> {
        let this = &mut *self;
        if let Some(ev) = this.events.pop_front() {
            return Poll::Ready(ev);
        }
        // The dialing transport has no listeners; poll it anyway in case it ever reports.
        if let Poll::Ready(ev) = Pin::new(&mut this.dial).poll(cx) {
            return Poll::Ready(ev);
        }
        for l in &mut this.listeners {
            if let Some(p) = &mut l.pause {
                if p.as_mut().poll(cx).is_pending() {
                    continue;
                }
                l.pause = None;
            }
            match l.socket.poll_accept(cx) {
                Poll::Ready(Ok((stream, remote))) => {
                    let _ = stream.set_nodelay(true);
                    return Poll::Ready(TransportEvent::Incoming {
                        listener_id: l.id,
                        upgrade: future::ok(TcpStream(stream)),
                        local_addr: l.addr.clone(),
                        send_back_addr: multiaddr(remote),
                    });
                }
                Poll::Ready(Err(error)) => {
                    l.pause = Some(Box::pin(tokio::time::sleep(ACCEPT_PAUSE)));
                    // Registers the waker for the end of the pause.
                    let _ = l.pause.as_mut().map(|p| p.as_mut().poll(cx));
                    return Poll::Ready(TransportEvent::ListenerError {
                        listener_id: l.id,
                        error,
                    });
                }
                Poll::Pending => {}
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_to_socket_addresses() {
        let p = |s: &str| socket_addr(&s.parse().unwrap());
        assert_eq!(
            p("/ip4/127.0.0.1/tcp/7"),
            Some("127.0.0.1:7".parse().unwrap())
        );
        assert_eq!(p("/ip6/::1/tcp/0"), Some("[::1]:0".parse().unwrap()));
        assert_eq!(
            p("/ip4/10.0.0.1/tcp/9/p2p/12D3KooWLjY6s8UKLdcm7NyuYAULGHP5t6xafqgk1JjNNcB7yS9u"),
            Some("10.0.0.1:9".parse().unwrap())
        );
        assert_eq!(p("/ip4/127.0.0.1/udp/7"), None);
        assert_eq!(p("/dns4/localhost/tcp/7"), None);
        assert_eq!(p("/ip4/127.0.0.1/tcp/7/ws"), None);
    }

    #[tokio::test]
    async fn a_bound_port_cannot_be_bound_again() {
        let a = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let taken = a.local_addr().unwrap();
        let e = bind(taken).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        // Not even by a socket that asks for SO_REUSEPORT itself (as libp2p-tcp does).
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.set_reuseaddr(true).unwrap();
        s.set_reuseport(true).unwrap();
        let e = s.bind(taken).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
    }
}
