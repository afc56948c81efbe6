//! The link: the factor batch frame of `sfb bench --scenario link`
//! ([`sfb_lab::bench::link::frame_message`]: K = 16 seeded dense pairs, J = 1024,
//! D = 15360, ≈ 1 MiB) through each stage of the wire path, then over a real libp2p stream.
//!
//! - `frame/encode`: `wire::encode` (sender side, once per batch);
//! - `frame/decode_validate`: `wire::decode` with full validation (receiver side);
//! - `frame/validate`: of which `FactorBatch::validate`;
//! - `frame/write_read_memory`: `frame::write_frame` into memory then `frame::read_frame`;
//! - `loopback/{bare,framing_only,framed}`: two libp2p swarms in this process (TCP + noise +
//!   yamux over 127.0.0.1, [`sfb_lab::bench::link::Link`]), timed from the first write
//!   to the last byte read (and decoded): 1 MiB buffers, frames, frames + decode.
//!
//! Throughput is in bytes per frame (per 1 MiB buffer for `bare`).
//! `cargo bench -p sfb-lab --bench link -- --test` runs each once (CI's smoke run).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::FutureExt;
use sfb_core::wire::{self, Message};
use sfb_lab::bench::link::{D, J, Lanes, Link, MIB, expect, frame_message, max_frame};
use sfb_net::frame;

fn frame_stages(c: &mut Criterion) {
    let msg = frame_message();
    let payload = wire::encode(&msg);
    let (expect, max) = (expect(), max_frame());
    let mut g = c.benchmark_group("frame");
    g.throughput(Throughput::Bytes(payload.len() as u64 + 4));
    g.bench_function("encode", |b| b.iter(|| wire::encode(black_box(&msg))));
    g.bench_function("decode_validate", |b| {
        b.iter(|| wire::decode(black_box(&payload), &expect).expect("valid frame"))
    });
    let Message::Factors { batch, .. } = &msg else {
        unreachable!("the bench frame is a factor batch")
    };
    g.bench_function("validate", |b| {
        b.iter(|| black_box(batch).validate(J, D).expect("valid batch"))
    });
    let mut buf = Vec::with_capacity(payload.len() + 4);
    g.bench_function("write_read_memory", |b| {
        b.iter(|| {
            buf.clear();
            frame::write_frame(&mut buf, black_box(&payload))
                .now_or_never()
                .expect("memory writes complete at once")
                .expect("in memory");
            frame::read_frame(&mut futures::io::Cursor::new(&buf[..]), max)
                .now_or_never()
                .expect("memory reads complete at once")
                .expect("in memory")
                .expect("one frame")
        })
    });
    g.finish();
}

fn loopback(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let payload = Arc::new(wire::encode(&frame_message()));
    let frame_bytes = payload.len() as u64 + 4;
    let link = rt
        .block_on(Link::connect(payload))
        .expect("two swarms on 127.0.0.1");
    let mut g = c.benchmark_group("loopback");
    g.sample_size(10);
    for (name, lanes, unit) in [
        ("bare", Lanes::Bare, MIB as u64),
        ("framing_only", Lanes::FramingOnly, frame_bytes),
        ("framed", Lanes::Framed, frame_bytes),
    ] {
        g.throughput(Throughput::Bytes(unit));
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let limit = Duration::from_secs(30) + Duration::from_millis(iters * 200);
                let (_, secs) = rt
                    .block_on(link.transfer(lanes, iters as usize, None, limit))
                    .expect("transfer");
                Duration::from_secs_f64(secs)
            })
        });
    }
    g.finish();
    drop(link);
    rt.shutdown_timeout(Duration::from_secs(1));
}

criterion_group!(benches, frame_stages, loopback);
criterion_main!(benches);
