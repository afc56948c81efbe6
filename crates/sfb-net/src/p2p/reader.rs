//! One reader per accepted stream: check the sender, handshake, validate every frame.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{AsyncWriteExt, StreamExt};
use libp2p::PeerId as Libp2pId;
use sfb_core::PeerId;
use sfb_core::wire::{self, Expect};
use tokio::sync::mpsc;
use tracing::warn;

use super::{Inbound, NetStats, NodeName};
use crate::Error;
use crate::frame::{self, Ack, Hello};

/// Accepts inbound streams and reads each in its own task.
pub(super) struct Readers {
    pub(super) me: usize,
    pub(super) ids: Vec<Libp2pId>,
    /// How errors name each node (`peer 3`, `the server`).
    pub(super) names: Vec<NodeName>,
    pub(super) in_neighbors: Vec<usize>,
    pub(super) core_ids: Vec<PeerId>,
    pub(super) hello: Hello,
    pub(super) expect: Expect,
    pub(super) max_frame: usize,
    pub(super) clocks: u64,
    pub(super) inbox: mpsc::Sender<Inbound>,
    pub(super) stats: Arc<NetStats>,
    pub(super) handshake_timeout: Duration,
}

impl Readers {
    /// Reads every accepted stream until the run ends.
    pub(super) async fn accept(self, mut incoming: libp2p_stream::IncomingStreams) {
        let this = Arc::new(self);
        while let Some((peer, stream)) = incoming.next().await {
            tokio::spawn(Arc::clone(&this).read(peer, stream));
        }
    }

    fn refuse(&self, why: String) {
        self.stats.refused_streams.fetch_add(1, Ordering::Relaxed);
        warn!(peer = self.me, "refusing stream: {why}");
    }

    async fn read(self: Arc<Self>, peer: Libp2pId, mut stream: libp2p::Stream) {
        let me = self.me;
        let Some(from) = self.ids.iter().position(|x| *x == peer) else {
            self.refuse(format!("{peer} is not in the cluster file"));
            return;
        };
        if !self.in_neighbors.contains(&from) {
            self.refuse(format!("peer {from} is not an in-neighbour of peer {me}"));
            return;
        }
        let hello = match tokio::time::timeout(
            self.handshake_timeout,
            frame::read_frame(&mut stream, 64 * 1024),
        )
        .await
        {
            Ok(Ok(Some(b))) => frame::decode::<Hello>(&b),
            Ok(Ok(None)) => Err("stream closed before its handshake".into()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no handshake in time".into()),
        };
        let problem = match &hello {
            Err(e) => Some(format!("bad handshake: {e}")),
            Ok(h) if h.peer as usize != from => Some(format!(
                "handshake claims peer {} but the connection's key is peer {from}'s",
                h.peer
            )),
            Ok(h) => h.mismatch(&self.hello),
        };
        let ack = Ack {
            ok: problem.is_none(),
            reason: problem.clone().unwrap_or_default(),
        };
        let _ = frame::write_frame(&mut stream, &frame::encode(&ack)).await;
        let _ = stream.flush().await;
        if let Some(why) = problem {
            self.refuse(format!("peer {from}: {why}"));
            let _ = stream.close().await;
            let _ = self
                .inbox
                .send(Inbound::Fatal(Error::Handshake {
                    peer: self.core_ids[from],
                    reason: why,
                }))
                .await;
            return;
        }
        let mut frames = 0u64;
        loop {
            match frame::read_frame(&mut stream, self.max_frame).await {
                Ok(Some(buf)) => {
                    let n = buf.len() as u64 + 4;
                    match wire::decode(&buf, &self.expect) {
                        Ok(msg) if msg.origin() == self.core_ids[from] => {
                            self.stats.received[from].fetch_add(n, Ordering::Relaxed);
                            frames += 1;
                            if self
                                .inbox
                                .send(Inbound::Frame(self.core_ids[from], msg))
                                .await
                                .is_err()
                            {
                                return; // the run is over
                            }
                        }
                        other => {
                            let why = match other {
                                Ok(msg) => format!(
                                    "frame claims origin {} on peer {from}'s stream",
                                    msg.origin()
                                ),
                                Err(e) => e.to_string(),
                            };
                            self.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
                            warn!(
                                peer = me,
                                from, "dropping bad frame and closing the stream: {why}"
                            );
                            let _ = stream.close().await;
                            let _ = self
                                .inbox
                                .send(Inbound::Fatal(Error::BadFrame {
                                    peer: self.core_ids[from],
                                    reason: why,
                                }))
                                .await;
                            return;
                        }
                    }
                }
                Ok(None) => {
                    if frames < self.clocks {
                        let _ = self
                            .inbox
                            .send(Inbound::Fatal(Error::StreamClosed {
                                from: self.names[from],
                                to: self.names[me],
                                frames,
                                clocks: self.clocks,
                            }))
                            .await;
                    }
                    let _ = stream.close().await;
                    return;
                }
                Err(e) => {
                    let _ = self
                        .inbox
                        .send(Inbound::Fatal(Error::StreamBroken {
                            from: self.names[from],
                            to: self.names[me],
                            frames,
                            clocks: self.clocks,
                            reason: e,
                        }))
                        .await;
                    return;
                }
            }
        }
    }
}
