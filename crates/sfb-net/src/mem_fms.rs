//! The in-memory FMS run: one parameter [`Server`] and P [`Client`]s on threads, joined by
//! bounded channels, with the [`mem`](crate::mem) driver's discipline (bounded inboxes,
//! a sender with a full destination keeps draining its own inbox and does not compute,
//! every wait bounded by [`Options::timeout`], a failing node stops the others).

use std::thread;

use sfb_core::fms::{Client, Server};
use sfb_core::metrics::ClockRecord;
use sfb_core::{Model, PeerId};

use crate::error::FmsSetup;
use crate::mem::{Options, drive, first_error, inboxes};
use crate::{Error, Result};

/// One client after its run.
#[derive(Debug)]
pub struct ClientRun<M: Model> {
    /// The client, with its final W and metrics.
    pub client: Client<M>,
    /// Per-clock records, in order (the last one after the final evaluation).
    pub records: Vec<ClockRecord>,
}

/// The server after its run.
#[derive(Debug)]
pub struct ServerRun<S: Model> {
    /// The server, with its final W and metrics (bytes of its W pushes).
    pub server: Server<S>,
    /// A record per completed clock, then a final one (`peer = PeerId::SERVER.0`).
    pub records: Vec<ClockRecord>,
}

/// A whole FMS run.
#[derive(Debug)]
pub struct Run<M: Model, S: Model> {
    /// The server.
    pub server: ServerRun<S>,
    /// Client `i` at index `i`.
    pub clients: Vec<ClientRun<M>>,
}

/// Clients `0..P` own inboxes `0..P`; the server owns the last.
fn fms_slot(id: PeerId, nodes: usize) -> usize {
    if id == PeerId::SERVER {
        nodes - 1
    } else {
        id.index()
    }
}

/// Runs `server` and `clients` (client `i` at index `i`) to completion.
///
/// # Errors
/// [`Error::ServerClients`] or [`Error::ClientMismatch`] if the clients do not match the
/// server's configuration; otherwise the
/// first node error (refused messages, model failures, timeouts); nodes stopped because of
/// it are not reported separately.
pub fn run<M: Model, S: Model>(
    server: Server<S>,
    clients: Vec<Client<M>>,
    opts: &Options,
) -> Result<Run<M, S>> {
    let p = clients.len();
    let scfg = server.config();
    if scfg.clients != p {
        return Err(Error::ServerClients {
            expected: scfg.clients,
            got: p,
        });
    }
    for (i, c) in clients.iter().enumerate() {
        let ccfg = c.config();
        if c.id().index() != i
            || ccfg.clients != p
            || ccfg.push != scfg.push
            || ccfg.clocks != scfg.clocks
            || ccfg.staleness() != scfg.staleness()
        {
            return Err(Error::ClientMismatch {
                index: i,
                id: c.id(),
                client: FmsSetup::from(ccfg),
                server: FmsSetup::from(scfg),
            });
        }
    }
    let (txs, rxs) = inboxes(p + 1, opts);
    let stop = &crate::Stop::default();
    let mut rxs = rxs.into_iter();
    let (client_results, server_result) = thread::scope(|s| {
        let handles: Vec<_> = clients
            .into_iter()
            .zip(rxs.by_ref())
            .map(|(client, rx)| {
                let txs = txs.clone();
                s.spawn(move || drive(client, rx, txs, fms_slot, opts, stop))
            })
            .collect();
        let server_rx = rxs.next().expect("one inbox per node");
        let server_txs = txs.clone();
        let server_handle =
            s.spawn(move || drive(server, server_rx, server_txs, fms_slot, opts, stop));
        drop(txs);
        let clients: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .expect("client thread panicked")
                    .map(|(client, records)| ClientRun { client, records })
            })
            .collect();
        let server = server_handle
            .join()
            .expect("server thread panicked")
            .map(|(server, records)| ServerRun { server, records });
        (clients, server)
    });
    let mut all: Vec<Result<Option<ClientRun<M>>>> =
        client_results.into_iter().map(|r| r.map(Some)).collect();
    let server = match server_result {
        Ok(s) => Some(s),
        Err(e) => {
            all.push(Err(e));
            None
        }
    };
    let clients = first_error(all)?.into_iter().flatten().collect();
    Ok(Run {
        server: server.expect("a server error is returned above"),
        clients,
    })
}
