//! `Replica::apply`, the one apply kernel, on seeded factor batches
//! ([`sfb_core::replica::seeded_batches`], the workload `sfb bench --scenario kernel` uses):
//!
//! - `apply/dense/J×D/R=…`: dense `v`, R pairs in up to 4 batches (as from 4 peers);
//! - `apply/sparse/J×D/R=…,nnz=…`: sparse `v` with `nnz` columns per pair;
//! - `apply/vs_naive/…`: the kernel and the naive per-pair loop
//!   ([`sfb_core::replica::apply_naive`]) at one small size, for the ratio.
//!
//! Throughput is in multiply-adds (`J·D·R` dense, `J·nnz·R` sparse).
//! `cargo bench -p sfb-core --bench apply -- --test` runs each once (CI's smoke run).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sfb_core::Replica;
use sfb_core::replica::{apply_naive, seeded_batches, seeded_w};

const SEED: u64 = 2016;

fn batches_for(r: usize) -> usize {
    r.clamp(1, 4)
}

fn dense(c: &mut Criterion) {
    let mut g = c.benchmark_group("apply/dense");
    for (j, d, r) in [
        (1024, 1024, 1),
        (1024, 1024, 16),
        (1024, 1024, 256),
        (4096, 4096, 1),
        (4096, 4096, 64),
    ] {
        let batches = seeded_batches(SEED + r as u64, j, d, r, batches_for(r), None);
        let refs: Vec<_> = batches.iter().collect();
        let mut rep = Replica::new(seeded_w(SEED, j, d)).expect("non-empty W");
        g.throughput(Throughput::Elements((j * d * r) as u64));
        g.bench_function(
            BenchmarkId::new(format!("{j}x{d}"), format!("R={r}")),
            |b| b.iter(|| rep.apply(black_box(&refs)).expect("valid batches")),
        );
    }
    g.finish();
}

fn sparse(c: &mut Criterion) {
    let mut g = c.benchmark_group("apply/sparse");
    for (j, d, r, nnz) in [(1024, 16384, 16, 64), (1024, 16384, 256, 64)] {
        let batches = seeded_batches(SEED + r as u64, j, d, r, batches_for(r), Some(nnz));
        let refs: Vec<_> = batches.iter().collect();
        let mut rep = Replica::new(seeded_w(SEED, j, d)).expect("non-empty W");
        g.throughput(Throughput::Elements((j * nnz * r) as u64));
        g.bench_function(
            BenchmarkId::new(format!("{j}x{d}"), format!("R={r},nnz={nnz}")),
            |b| b.iter(|| rep.apply(black_box(&refs)).expect("valid batches")),
        );
    }
    g.finish();
}

fn vs_naive(c: &mut Criterion) {
    let (j, d, r) = (256, 256, 16);
    let batches = seeded_batches(SEED, j, d, r, batches_for(r), None);
    let refs: Vec<_> = batches.iter().collect();
    let mut g = c.benchmark_group(format!("apply/vs_naive/{j}x{d}/R={r}"));
    g.throughput(Throughput::Elements((j * d * r) as u64));
    let mut rep = Replica::new(seeded_w(SEED, j, d)).expect("non-empty W");
    g.bench_function("kernel", |b| {
        b.iter(|| rep.apply(black_box(&refs)).expect("valid batches"))
    });
    let mut w = seeded_w(SEED, j, d);
    g.bench_function("naive", |b| {
        b.iter(|| apply_naive(&mut w, black_box(&refs)).expect("valid batches"))
    });
    g.finish();
}

criterion_group!(benches, dense, sparse, vs_naive);
criterion_main!(benches);
