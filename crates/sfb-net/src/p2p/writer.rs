//! One writer per out-edge: stream, handshake, then the engine's frames under the
//! bandwidth budget.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::{AsyncReadExt, AsyncWriteExt};
use libp2p::{Multiaddr, PeerId as Libp2pId};
use sfb_core::PeerId;
use tokio::sync::mpsc;
use tracing::debug;

use super::{Inbound, NetStats, NodeName, protocol};
use crate::bandwidth::Bucket;
use crate::error::ConnectProblem;
use crate::frame::{self, Ack};
use crate::{Error, Result};

/// Writes one out-edge: opens the stream, handshakes, then writes the engine's frames.
pub(super) struct Writer {
    pub(super) me: NodeName,
    pub(super) to: usize,
    pub(super) to_name: NodeName,
    pub(super) to_core: PeerId,
    pub(super) to_id: Libp2pId,
    pub(super) addr: Multiaddr,
    pub(super) control: libp2p_stream::Control,
    pub(super) dial: mpsc::Sender<Multiaddr>,
    pub(super) hello: Vec<u8>,
    pub(super) bucket: Option<Arc<Bucket>>,
    pub(super) stats: Arc<NetStats>,
    pub(super) fatal: mpsc::Sender<Inbound>,
    pub(super) deadline: Instant,
    pub(super) ack_timeout: Duration,
}

const CHUNK: usize = 64 * 1024;

impl Writer {
    /// Runs until the engine drops the queue and the receiver has read everything, or
    /// fails; a failure also tells the engine thread (whose driver loop then stops with
    /// [`Error::Disconnected`], which [`Node::run`](super::Node::run) replaces with this
    /// task's error).
    pub(super) async fn run(self, rx: mpsc::Receiver<Arc<Vec<u8>>>) -> Result<()> {
        let r = self.run_inner(rx).await;
        if r.is_err() {
            let _ = self.fatal.try_send(Inbound::WriterFailed(self.to));
        }
        r
    }

    /// Opens the stream and completes the handshake, retrying until the start-up deadline
    /// when the stream fails before the reply (the remote may not be up yet, or may have
    /// dropped the inbound stream under load: libp2p-stream drops streams an acceptor is
    /// too slow to take). A refused handshake is final.
    async fn connect(&self) -> Result<libp2p::Stream> {
        let (me, to) = (self.me, self.to_name);
        let mut control = self.control.clone();
        let mut last_problem = ConnectProblem::NoAttempt;
        loop {
            let remaining = self.deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(Error::Connect {
                    peer: me,
                    to,
                    addr: self.addr.clone(),
                    last_problem,
                });
            }
            let mut stream =
                match tokio::time::timeout(remaining, control.open_stream(self.to_id, protocol()))
                    .await
                {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        debug!(peer = %me, to = %to, %e, "open_stream failed; re-dialing");
                        last_problem = ConnectProblem::OpenStream(e);
                        let _ = self.dial.send(self.addr.clone()).await;
                        // Back off before re-dialing a peer that is not up yet.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    Err(_) => continue,
                };
            let attempt = async {
                frame::write_frame(&mut stream, &self.hello).await?;
                stream.flush().await?;
                frame::read_frame(&mut stream, 64 * 1024).await
            };
            let remaining = self
                .deadline
                .saturating_duration_since(Instant::now())
                .max(self.ack_timeout);
            let reply = match tokio::time::timeout(remaining, attempt).await {
                Ok(Ok(Some(reply))) => reply,
                Ok(Ok(None)) => {
                    last_problem = ConnectProblem::ClosedBeforeReply;
                    debug!(peer = %me, to = %to, "{last_problem}; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Ok(Err(e)) => {
                    last_problem = ConnectProblem::Handshake(e);
                    debug!(peer = %me, to = %to, "{last_problem}; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(_) => {
                    return Err(Error::NoAck {
                        peer: me,
                        to,
                        waited: remaining,
                    });
                }
            };
            let ack: Ack = frame::decode(&reply).map_err(|reason| Error::BadAck {
                peer: me,
                to,
                reason,
            })?;
            if !ack.ok {
                return Err(Error::Handshake {
                    peer: self.to_core,
                    reason: ack.reason,
                });
            }
            return Ok(stream);
        }
    }

    async fn run_inner(&self, mut rx: mpsc::Receiver<Arc<Vec<u8>>>) -> Result<()> {
        let to = self.to;
        let mut stream = self.connect().await?;
        let mut frames = 0u64;
        let io = |frames, reason| Error::Send {
            peer: self.me,
            to: self.to_name,
            frames,
            reason,
        };
        debug!(peer = self.me.index, to, "stream open");
        while let Some(buf) = rx.recv().await {
            let started = Instant::now();
            let len = (buf.len() as u32).to_le_bytes();
            let mut pieces: Vec<&[u8]> = vec![&len];
            pieces.extend(buf.chunks(CHUNK));
            for piece in pieces {
                if let Some(b) = &self.bucket {
                    let wait = b.reserve(piece.len());
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                }
                stream.write_all(piece).await.map_err(|e| io(frames, e))?;
            }
            stream.flush().await.map_err(|e| io(frames, e))?;
            frames += 1;
            self.stats.sent[to].fetch_add(buf.len() as u64 + 4, Ordering::Relaxed);
            self.stats.mark_write(started);
        }
        stream.close().await.map_err(|e| io(frames, e))?;
        // Wait for the receiver to close its side: it has read everything.
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(self.ack_timeout, stream.read_to_end(&mut rest)).await;
        Ok(())
    }
}
