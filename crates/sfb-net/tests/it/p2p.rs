//! libp2p transport: authentication against the cluster file, and the frame reader +
//! validator under arbitrary input.

use std::sync::Arc;
use std::time::Duration;

use futures::{AsyncWriteExt, StreamExt};
use libp2p::identity::Keypair;
use libp2p::{Multiaddr, StreamProtocol};
use proptest::prelude::*;
use sfb_core::wire::{self, Expect, Message};
use sfb_core::{FactorBatch, PeerId, VFactors};
use sfb_net::cluster::Cluster;
use sfb_net::frame::{self, Ack, Hello};
use sfb_net::p2p::{Node, Options, RunShape, build_swarm};

/// A fresh folder for one test under the build's own temporary directory (cluster files
/// and private keys stay out of the system's /tmp; removed first if a run left it).
fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sfb-net-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const SHAPE: RunShape = RunShape {
    j: 3,
    d: 4,
    batch: 2,
    clocks: 5,
    full_w: false,
    dtype: sfb_core::wire::Dtype::F32,
    agreement: Vec::new(),
};

fn factor_frame(origin: u32) -> Vec<u8> {
    wire::encode(&Message::Factors {
        batch: Arc::new(FactorBatch {
            origin: PeerId(origin),
            clock: 0,
            scale: -0.1,
            j: 3,
            d: 4,
            u: vec![0.5; 6],
            v: VFactors::Dense(vec![1.0; 8]),
        }),
        mean_iter_us: 1,
    })
}

/// Dials `addr` with `key`, opens an sfb stream, sends `hello` and one factor frame; returns
/// the handshake reply if the stream got that far.
async fn try_deliver(
    key: Keypair,
    target: libp2p::PeerId,
    addr: Multiaddr,
    hello: Hello,
    frame_bytes: Vec<u8>,
) -> Result<Ack, String> {
    let mut swarm = build_swarm(key, &[target]).map_err(|e| e.to_string())?;
    let mut control = swarm.behaviour().stream.new_control();
    swarm.dial(addr).map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move {
        loop {
            swarm.select_next_some().await;
        }
    });
    let r = async {
        let mut stream = control
            .open_stream(target, StreamProtocol::new(frame::PROTOCOL))
            .await
            .map_err(|e| e.to_string())?;
        frame::write_frame(&mut stream, &frame::encode(&hello))
            .await
            .map_err(|e| e.to_string())?;
        stream.flush().await.map_err(|e| e.to_string())?;
        let reply = frame::read_frame(&mut stream, 1 << 16)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("closed")?;
        let ack: Ack = frame::decode(&reply)?;
        frame::write_frame(&mut stream, &frame_bytes)
            .await
            .map_err(|e| e.to_string())?;
        // Closing waits until the connection has sent the frame and the stream's end:
        // a flush only hands it to the muxer, whose bytes were lost when the driver below
        // was aborted first (the receiver then saw a broken stream, not the frame).
        stream.close().await.map_err(|e| e.to_string())?;
        Ok(ack)
    };
    let out = tokio::time::timeout(Duration::from_secs(10), r)
        .await
        .unwrap_or_else(|_| Err("timed out".into()));
    driver.abort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_not_in_the_cluster_file_cannot_deliver_a_frame() {
    let dir = tempdir("auth");
    let topo = sfb_topology::full(2).unwrap();
    let cluster =
        Cluster::init(&dir.join("cluster.toml"), &topo, &["127.0.0.1".into()], 0).unwrap();
    let node = Node::start(&cluster, 0, &SHAPE, &Options::default())
        .await
        .unwrap();
    let addr = node.listen_addr().clone();
    let target = cluster.peer_id(0);
    let hello = Hello {
        version: frame::PROTOCOL_VERSION,
        wire_version: wire::WIRE_VERSION,
        peer: 1,
        j: 3,
        d: 4,
        batch: 2,
        clocks: 5,
        start: 0,
        topology_hash: cluster.topology_hash(),
        dtype: "f32".into(),
        agreement: Vec::new(),
    };
    // A stranger claiming to be peer 1 with a fresh key: refused at connection level.
    let rogue = try_deliver(
        Keypair::generate_ed25519(),
        target,
        addr.clone(),
        hello.clone(),
        factor_frame(1),
    )
    .await;
    assert!(
        rogue.is_err(),
        "a key outside the cluster file got a stream: {rogue:?}"
    );
    // Control: peer 1's real key gets its handshake accepted, so the test can see delivery.
    let legit = try_deliver(
        cluster.keypair(1).unwrap(),
        target,
        addr.clone(),
        hello.clone(),
        factor_frame(1),
    )
    .await;
    assert_eq!(
        legit,
        Ok(Ack {
            ok: true,
            reason: String::new()
        })
    );
    // A listed key whose node trains otherwise is refused, naming the setting.
    let mut other = hello.clone();
    other.agreement = vec![("lr".into(), "1e30".into())];
    let refused = try_deliver(
        cluster.keypair(1).unwrap(),
        target,
        addr.clone(),
        other,
        factor_frame(1),
    )
    .await
    .unwrap();
    assert!(
        !refused.ok
            && refused
                .reason
                .contains("lr differs: peer 1 has 1e30, peer 0 has none stated"),
        "{refused:?}"
    );
    // A listed key with a mismatched handshake is refused with a reason.
    let mut wrong = hello;
    wrong.j = 7;
    let refused = try_deliver(
        cluster.keypair(1).unwrap(),
        target,
        addr,
        wrong,
        factor_frame(1),
    )
    .await
    .unwrap();
    assert!(
        !refused.ok && refused.reason.contains("J (rows of W)"),
        "{refused:?}"
    );
    drop(node);
}

/// Why the receiving path refused bytes.
#[derive(Debug)]
enum Refused {
    /// Framing: a truncated or oversized frame.
    Frame(std::io::Error),
    /// Decoding or validation of a whole frame.
    Decode(sfb_core::Error),
}

impl Refused {
    /// Whether this is one of the refusals a stream of hostile bytes may cause: a
    /// truncated frame, a frame over the size limit, or a frame that does not decode or
    /// validate — never anything else (an IO error of another kind, a model error, …).
    fn is_validation(&self) -> bool {
        use sfb_core::Error as E;
        match self {
            Refused::Frame(e) => matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidData
            ),
            Refused::Decode(e) => matches!(
                e,
                E::Decode { .. }
                    | E::DimensionMismatch { .. }
                    | E::IndexOutOfRange { .. }
                    | E::MalformedSparse { .. }
                    | E::NonFinite { .. }
                    | E::UnknownPeer { .. }
                    | E::BadClock { .. }
                    | E::MixedFactorKinds
            ),
        }
    }
}

/// The receiving path of a stream: framing, then decode + validation.
fn receive(bytes: &[u8]) -> Vec<Result<Message, Refused>> {
    futures::executor::block_on(async {
        let mut r = futures::io::Cursor::new(bytes);
        let mut out = Vec::new();
        loop {
            match frame::read_frame(&mut r, SHAPE.max_frame()).await {
                Ok(Some(buf)) => out.push(
                    wire::decode(
                        &buf,
                        &Expect {
                            j: 3,
                            d: 4,
                            peers: 2,
                        },
                    )
                    .map_err(Refused::Decode),
                ),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(Refused::Frame(e)));
                    break;
                }
            }
        }
        out
    })
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_the_receiver(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for r in receive(&bytes) {
            match r {
                Ok(Message::Factors { batch, .. }) => prop_assert!(batch.validate(3, 4).is_ok()),
                Ok(_) => {}
                Err(e) => prop_assert!(e.is_validation(), "unexpected refusal {e:?}"),
            }
        }
    }

    #[test]
    fn mutated_valid_frames_decode_to_valid_frames_or_typed_errors(
        origin in 0u32..2,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = framed(&factor_frame(origin));
        for (pos, b) in edits {
            let i = pos % bytes.len();
            bytes[i] = b;
        }
        for r in receive(&bytes) {
            match r {
                Ok(Message::Factors { batch, .. }) => {
                    prop_assert!(batch.validate(3, 4).is_ok());
                    prop_assert!(batch.origin.index() < 2);
                }
                Ok(_) => {}
                Err(e) => prop_assert!(e.is_validation(), "unexpected refusal {e:?}"),
            }
        }
    }
}

#[test]
fn valid_frames_pass_and_oversized_lengths_are_refused_before_allocation() {
    let ok = receive(&framed(&factor_frame(1)));
    assert!(matches!(ok.as_slice(), [Ok(Message::Factors { .. })]));
    let huge = u32::MAX.to_le_bytes();
    let r = receive(&huge);
    assert!(
        matches!(r.as_slice(), [Err(Refused::Frame(e))] if e.to_string().contains("exceeds the limit")),
        "{r:?}"
    );
}

/// Three MLR engines with full broadcast under BSP on seeded synthetic data.
/// The run shape of [`mlr_engines`]' engines.
pub(crate) fn mlr_shape(clocks: u64) -> RunShape {
    RunShape {
        j: 3,
        d: 6,
        batch: 4,
        clocks,
        full_w: false,
        dtype: wire::Dtype::F32,
        agreement: Vec::new(),
    }
}

fn mlr_engines(clocks: u64) -> Vec<sfb_core::Engine<sfb_models::Mlr>> {
    mlr_engines_with(clocks, |_| {})
}

/// [`mlr_engines`] with `tweak` applied to each engine's configuration.
fn mlr_engines_with(
    clocks: u64,
    tweak: impl Fn(&mut sfb_core::Config),
) -> Vec<sfb_core::Engine<sfb_models::Mlr>> {
    use sfb_models::synthetic;
    let spec: synthetic::ClassificationSpec = "classes=3,features=6,samples=120".parse().unwrap();
    let (train, _) = synthetic::classification(&spec, 7);
    (0..3u32)
        .map(|i| {
            let mut cfg = sfb_core::Config::full_broadcast(PeerId(i), 3);
            cfg.clocks = clocks;
            cfg.batch_size = 4;
            cfg.eval_every = 0;
            tweak(&mut cfg);
            let mine = sfb_core::shard_indices(train.len(), 3, i as usize)
                .map(|k| train[k].clone())
                .collect();
            sfb_core::Engine::new(
                cfg,
                sfb_models::Mlr::new(3, 6),
                synthetic::init_w(3, 6, 0.01, 7),
                sfb_core::Shard::new(mine, 11 + u64::from(i)),
            )
            .unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libp2p_and_in_memory_runs_give_the_same_replicas_and_frames() {
    const CLOCKS: u64 = 6;
    let dir = tempdir("equiv");
    let topo = sfb_topology::full(3).unwrap();
    let mut cluster =
        Cluster::init(&dir.join("cluster.toml"), &topo, &["127.0.0.1".into()], 0).unwrap();
    let shape = mlr_shape(CLOCKS);
    // Queues of one frame: the engines keep meeting full links.
    let opts = Options {
        queue_frames: 1,
        ..Options::default()
    };
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(Node::start(&cluster, i, &shape, &opts).await.unwrap());
    }
    cluster
        .set_addrs(nodes.iter().map(|n| n.listen_addr().clone()).collect())
        .unwrap();
    let cluster = Arc::new(cluster);
    let runs: Vec<_> = nodes
        .into_iter()
        .zip(mlr_engines(CLOCKS))
        .map(|(node, engine)| {
            let (cluster, opts, shape) = (Arc::clone(&cluster), opts.clone(), shape.clone());
            tokio::spawn(async move { node.run(&cluster, engine, &shape, &opts).await })
        })
        .collect();
    let mut p2p = Vec::new();
    for r in runs {
        let out = tokio::time::timeout(Duration::from_secs(60), r)
            .await
            .expect("the libp2p run finishes")
            .unwrap()
            .unwrap();
        p2p.push(out);
    }
    let mem = sfb_net::mem::run(
        mlr_engines(CLOCKS),
        &sfb_net::mem::Options {
            capacity: 1,
            ..Default::default()
        },
    )
    .unwrap();
    for (a, b) in p2p.iter().zip(&mem) {
        assert_eq!(a.node.replica().checksum(), b.engine.replica().checksum());
        assert_eq!(a.records.len(), b.records.len());
        assert_eq!(a.records.len() as u64, CLOCKS + 1);
        // Every frame the engine counted went out, once, to both out-neighbours (sizes vary
        // from run to run: the header carries the mean iteration time as a varint).
        assert_eq!(
            a.stats.total_sent(),
            a.records.last().unwrap().bytes_sent + 2 * CLOCKS * 4
        );
        assert_eq!(
            a.stats
                .bad_frames
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
    }
    let total =
        |f: fn(&sfb_net::p2p::NetStats) -> u64| p2p.iter().map(|p| f(&p.stats)).sum::<u64>();
    assert_eq!(
        total(sfb_net::p2p::NetStats::total_sent),
        total(sfb_net::p2p::NetStats::total_received)
    );
    let first = p2p[0].node.replica().checksum();
    assert!(p2p.iter().all(|p| p.node.replica().checksum() == first));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_on_a_taken_address_fails_at_once_with_the_os_reason() {
    let dir = tempdir("twice");
    let topo = sfb_topology::full(2).unwrap();
    let mut cluster =
        Cluster::init(&dir.join("cluster.toml"), &topo, &["127.0.0.1".into()], 0).unwrap();
    let first = Node::start(&cluster, 0, &SHAPE, &Options::default())
        .await
        .unwrap();
    let taken = first.listen_addr().clone();
    let other = cluster.addr(1).clone();
    cluster.set_addrs(vec![taken.clone(), other]).unwrap();
    // "At once": the start fails at its listen, before it dials or waits for anyone (a
    // `Listen` error, below). The timeout only guards against a hang; how long the refusal
    // takes is not asserted (a loaded machine can take seconds).
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        Node::start(&cluster, 0, &SHAPE, &Options::default()),
    )
    .await
    .expect("a start on a taken address hung")
    .expect_err("a second node bound the same address");
    match &err {
        sfb_net::Error::Listen { reason, .. } => {
            assert_eq!(reason.kind(), std::io::ErrorKind::AddrInUse, "{err}");
        }
        other => panic!("not a listen error: {other}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("peer 0 cannot listen on {taken}: address in use"))
            && text.contains("(os error"),
        "{text}"
    );
    // An address that is not TCP is refused with a reason too, not an empty one.
    cluster
        .set_addrs(vec![
            "/ip4/127.0.0.1/udp/0".parse().unwrap(),
            cluster.addr(1).clone(),
        ])
        .unwrap();
    let err = Node::start(&cluster, 0, &SHAPE, &Options::default())
        .await
        .expect_err("listened on a UDP address");
    assert!(
        err.to_string()
            .contains("is not an /ip4/…/tcp/PORT or /ip6/…/tcp/PORT address"),
        "{err}"
    );
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_pending_handshake_cap_are_refused_and_counted() {
    use tokio::io::AsyncReadExt;
    const CAP: u32 = 4;
    let dir = tempdir("cap");
    let topo = sfb_topology::full(2).unwrap();
    let cluster =
        Cluster::init(&dir.join("cluster.toml"), &topo, &["127.0.0.1".into()], 0).unwrap();
    let opts = Options {
        max_pending_handshakes: CAP,
        ..Options::default()
    };
    let node = Node::start(&cluster, 0, &SHAPE, &opts).await.unwrap();
    let addr = node.listen_addr().clone();
    let tcp: std::net::SocketAddr = {
        let mut it = addr.iter();
        let ip = match it.next() {
            Some(libp2p::multiaddr::Protocol::Ip4(ip)) => ip,
            other => panic!("{other:?}"),
        };
        let port = match it.next() {
            Some(libp2p::multiaddr::Protocol::Tcp(p)) => p,
            other => panic!("{other:?}"),
        };
        (ip, port).into()
    };
    let hello = Hello {
        version: frame::PROTOCOL_VERSION,
        wire_version: wire::WIRE_VERSION,
        peer: 1,
        j: 3,
        d: 4,
        batch: 2,
        clocks: 5,
        start: 0,
        topology_hash: cluster.topology_hash(),
        dtype: "f32".into(),
        agreement: Vec::new(),
    };
    // CAP silent connections hold every handshake slot (until the 10 s handshake timeout).
    let mut silent = Vec::new();
    for _ in 0..CAP {
        silent.push(tokio::net::TcpStream::connect(tcp).await.unwrap());
    }
    // The next one is closed at once, unread.
    let mut extra = tokio::net::TcpStream::connect(tcp).await.unwrap();
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(5), extra.read(&mut buf))
        .await
        .expect("the connection over the cap is closed at once");
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    let refused = || {
        node.stats()
            .refused_connections
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // The swarm closes the socket, then reports the refusal: poll the counter.
    eventually(|| refused() == 1, "one refusal counted").await;
    // So is a cluster member while the slots are held…
    let denied = try_deliver(
        cluster.keypair(1).unwrap(),
        cluster.peer_id(0),
        addr.clone(),
        hello.clone(),
        factor_frame(1),
    )
    .await;
    assert!(denied.is_err(), "{denied:?}");
    // …and it gets through once they are free.
    drop(silent);
    let mut accepted = Err(String::new());
    for _ in 0..50 {
        accepted = try_deliver(
            cluster.keypair(1).unwrap(),
            cluster.peer_id(0),
            addr.clone(),
            hello.clone(),
            factor_frame(1),
        )
        .await;
        if accepted.is_ok() {
            break;
        }
        // Polling for the freed slots (the node's swarm sees the closes on its own time).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        accepted,
        Ok(Ack {
            ok: true,
            reason: String::new()
        })
    );
    // The silent ones ended as refusals too (closed before a handshake).
    eventually(
        || refused() >= 2 + u64::from(CAP),
        "the silent connections counted",
    )
    .await;
    drop(node);
}

/// Polls `cond` (every 5 ms) until it holds; panics with `what` after 10 s.
async fn eventually(cond: impl Fn() -> bool, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "not within 10 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn a_broken_stream_names_the_node_lost_and_the_server_as_the_server() {
    use sfb_net::Error;
    use sfb_net::p2p::NodeName;
    let peer = |index| NodeName {
        index,
        server: false,
    };
    let server = NodeName {
        index: 3,
        server: true,
    };
    let closed = Error::StreamClosed {
        from: server,
        to: peer(0),
        frames: 4,
        clocks: 10,
    };
    assert_eq!(
        closed.to_string(),
        "lost the server: it closed its stream to peer 0 after 4 of 10 clocks"
    );
    let broken = Error::StreamBroken {
        from: peer(2),
        to: server,
        frames: 4,
        clocks: 10,
        reason: std::io::Error::from(std::io::ErrorKind::ConnectionReset),
    };
    assert!(
        broken
            .to_string()
            .starts_with("lost peer 2: its stream to the server broke after 4 of 10 clocks ("),
        "{broken}"
    );
    let send = Error::Send {
        peer: peer(1),
        to: peer(2),
        frames: 7,
        reason: std::io::Error::from(std::io::ErrorKind::BrokenPipe),
    };
    assert!(
        send.to_string()
            .starts_with("lost peer 2: the stream from peer 1 to it broke after 7 frames ("),
        "{send}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_frame_from_an_authenticated_peer_costs_that_link_only() {
    // Issue 31, item 3: a bad frame was fatal to the receiving node's run. Now the link is
    // closed and its sender counts as lost: under SSP with a continue policy, nodes 0 and
    // 1 finish without "node 2", here a client with node 2's key that sends garbage after
    // a good handshake.
    const CLOCKS: u64 = 40;
    let dir = tempdir("bad-frame");
    let topo = sfb_topology::full(3).unwrap();
    let mut cluster =
        Cluster::init(&dir.join("cluster.toml"), &topo, &["127.0.0.1".into()], 0).unwrap();
    let shape = mlr_shape(CLOCKS);
    let opts = Options {
        startup_timeout: Duration::from_secs(20),
        ..Options::default()
    };
    let mut nodes = Vec::new();
    for i in 0..2 {
        nodes.push(Node::start(&cluster, i, &shape, &opts).await.unwrap());
    }
    // Nothing listens at node 2's address but the impostor's dial comes from elsewhere.
    let mut addrs: Vec<Multiaddr> = nodes.iter().map(|n| n.listen_addr().clone()).collect();
    addrs.push("/ip4/127.0.0.1/tcp/1".parse().unwrap());
    cluster.set_addrs(addrs).unwrap();
    let target = cluster.peer_id(0);
    let to = cluster.addr(0).clone();
    let hello = Hello {
        version: frame::PROTOCOL_VERSION,
        wire_version: wire::WIRE_VERSION,
        peer: 2,
        j: 3,
        d: 6,
        batch: 4,
        clocks: CLOCKS,
        start: 0,
        topology_hash: cluster.topology_hash(),
        dtype: "f32".into(),
        agreement: Vec::new(),
    };
    let key = cluster.keypair(2).unwrap();
    // The garbage arrives before the nodes run: their readers take it as they start.
    let ack = try_deliver(key, target, to, hello, vec![0xA5; 64])
        .await
        .unwrap();
    assert!(ack.ok, "{ack:?}");
    let cluster = Arc::new(cluster);
    let runs: Vec<_> = nodes
        .into_iter()
        .zip(mlr_engines_with(CLOCKS, |c| {
            c.consistency = sfb_core::Consistency::Ssp { staleness: 2 };
            c.on_peer_loss = sfb_core::PeerLoss::Continue;
        }))
        .map(|(node, engine)| {
            let (cluster, opts, shape) = (Arc::clone(&cluster), opts.clone(), shape.clone());
            tokio::spawn(async move { node.run(&cluster, engine, &shape, &opts).await })
        })
        .collect();
    for (i, r) in runs.into_iter().enumerate() {
        let out = tokio::time::timeout(Duration::from_secs(120), r)
            .await
            .expect("the run finishes")
            .unwrap()
            .unwrap_or_else(|e| panic!("node {i} failed: {e}"));
        assert_eq!(out.records.last().unwrap().clock, CLOCKS, "node {i}");
        let lost = &out.node.metrics().lost_peers;
        assert_eq!(
            lost.iter().map(|l| l.0).collect::<Vec<_>>(),
            [2],
            "node {i}"
        );
        let bad = out
            .stats
            .bad_frames
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(bad, u64::from(i == 0), "node {i}");
    }
}
