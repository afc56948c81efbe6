//! The batched apply kernel against the slow per-pair reference, plus bad-input handling.

use ndarray::Array2;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sfb_core::replica::apply_reference;
use sfb_core::{Error, FactorBatch, PeerId, Replica, VFactors};

fn random_batch(
    rng: &mut ChaCha8Rng,
    origin: u32,
    j: usize,
    d: usize,
    k: usize,
    sparse: bool,
) -> FactorBatch {
    let u: Vec<f32> = (0..k * j).map(|_| rng.random_range(-1.0..1.0)).collect();
    let v = if sparse {
        let mut indptr = vec![0u32];
        let mut indices = Vec::new();
        let mut values = Vec::new();
        for _ in 0..k {
            for c in 0..d {
                if rng.random_bool(0.3) {
                    indices.push(c as u32);
                    values.push(rng.random_range(-1.0..1.0));
                }
            }
            indptr.push(indices.len() as u32);
        }
        VFactors::Sparse {
            indptr,
            indices,
            values,
        }
    } else {
        VFactors::Dense((0..k * d).map(|_| rng.random_range(-1.0..1.0)).collect())
    };
    FactorBatch {
        origin: PeerId(origin),
        clock: 0,
        scale: rng.random_range(-0.5..0.5),
        j,
        d,
        u,
        v,
    }
}

fn rel_err(a: &Array2<f32>, b: &Array2<f32>) -> f64 {
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(x - y).powi(2))
        .sum::<f64>()
        .sqrt();
    let den: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>().sqrt();
    num / den.max(1e-30)
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Seeded: the same cases on every run.
        rng_seed: proptest::test_runner::RngSeed::Fixed(48),
        failure_persistence: None,
        ..ProptestConfig::with_cases(48)
    })]

    /// For random shapes, K, dense and sparse v (mixed within one call), the batched kernel
    /// equals the per-pair outer-product reference within 1e-5 relative, entry by entry.
    #[test]
    fn batched_kernel_matches_reference(
        seed in any::<u64>(),
        j in 1usize..150,
        d in 1usize..90,
        ks in proptest::collection::vec((0usize..12, any::<bool>()), 1..6),
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let w0 = Array2::from_shape_fn((j, d), |_| rng.random_range(-1.0f32..1.0));
        let batches: Vec<FactorBatch> = ks
            .iter()
            .enumerate()
            .map(|(i, &(k, sparse))| random_batch(&mut rng, i as u32, j, d, k, sparse))
            .collect();
        let refs: Vec<&FactorBatch> = batches.iter().collect();
        let mut fast = Replica::new(w0.clone()).unwrap();
        fast.apply(&refs).unwrap();
        let mut slow = w0.clone();
        apply_reference(&mut slow, &refs).unwrap();
        let fast = fast.into_inner();
        prop_assert!(rel_err(&fast, &slow) <= 1e-5, "relative error {}", rel_err(&fast, &slow));
        // Entry-wise, relative to the magnitude of the terms involved.
        let scale: f32 = 1.0 + batches.iter().map(|b| b.scale.abs() * b.len() as f32).sum::<f32>();
        for (x, y) in fast.iter().zip(slow.iter()) {
            prop_assert!((x - y).abs() <= 1e-5 * scale * (1.0 + y.abs()));
        }
    }
}

#[test]
fn kernel_bits_do_not_depend_on_thread_count() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (j, d) = (300, 257);
    let w0 = Array2::from_shape_fn((j, d), |_| rng.random_range(-1.0f32..1.0));
    let batches: Vec<FactorBatch> = (0..4)
        .map(|i| random_batch(&mut rng, i, j, d, 9, i % 2 == 1))
        .collect();
    let refs: Vec<&FactorBatch> = batches.iter().collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut r = Replica::new(w0.clone()).unwrap();
            r.apply(&refs).unwrap();
            r.checksum()
        })
    };
    let one = run(1);
    assert_eq!(one, run(2));
    assert_eq!(one, run(3));
}

fn assert_rejected(batch: FactorBatch, check: impl Fn(&Error) -> bool) {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let good = random_batch(&mut rng, 0, 5, 7, 3, false);
    let w0 = Array2::from_shape_fn((5, 7), |(a, b)| (a * 7 + b) as f32);
    let mut r = Replica::new(w0.clone()).unwrap();
    let before = r.checksum();
    let err = r.apply(&[&good, &batch]).unwrap_err();
    assert!(check(&err), "unexpected error: {err}");
    assert_eq!(
        r.checksum(),
        before,
        "replica changed after a rejected batch"
    );
    assert_eq!(r.w(), w0.view());
}

#[test]
fn wrong_u_length_is_rejected_and_replica_unchanged() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let mut b = random_batch(&mut rng, 1, 5, 7, 3, false);
    b.u.pop();
    assert_rejected(b, |e| matches!(e, Error::DimensionMismatch { .. }));
}

#[test]
fn wrong_v_length_is_rejected_and_replica_unchanged() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut b = random_batch(&mut rng, 1, 5, 7, 3, false);
    if let VFactors::Dense(v) = &mut b.v {
        v.push(1.0);
    }
    assert_rejected(b, |e| {
        matches!(
            e,
            Error::DimensionMismatch {
                expected: 21,
                got: 22,
                ..
            }
        )
    });
}

#[test]
fn wrong_j_is_rejected() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let b = random_batch(&mut rng, 1, 6, 7, 3, false);
    assert_rejected(b, |e| {
        matches!(
            e,
            Error::DimensionMismatch {
                expected: 5,
                got: 6,
                ..
            }
        )
    });
}

#[test]
fn out_of_range_sparse_index_is_rejected_and_replica_unchanged() {
    let b = FactorBatch {
        origin: PeerId(2),
        clock: 0,
        scale: 1.0,
        j: 5,
        d: 7,
        u: vec![1.0; 5],
        v: VFactors::Sparse {
            indptr: vec![0, 2],
            indices: vec![3, 7],
            values: vec![1.0, 2.0],
        },
    };
    assert_rejected(b, |e| {
        matches!(e, Error::IndexOutOfRange { index: 7, d: 7, .. })
    });
}

#[test]
fn malformed_sparse_structure_is_rejected() {
    let b = FactorBatch {
        origin: PeerId(2),
        clock: 0,
        scale: 1.0,
        j: 5,
        d: 7,
        u: vec![1.0; 10],
        v: VFactors::Sparse {
            indptr: vec![0, 2, 1],
            indices: vec![3, 4],
            values: vec![1.0, 2.0],
        },
    };
    assert_rejected(b, |e| matches!(e, Error::MalformedSparse { .. }));
}

#[test]
fn non_finite_values_are_rejected_and_replica_unchanged() {
    for (which, bad) in [(0, f32::NAN), (1, f32::INFINITY), (2, f32::NEG_INFINITY)] {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut b = random_batch(&mut rng, 1, 5, 7, 3, false);
        match which {
            0 => b.u[7] = bad,
            1 => {
                if let VFactors::Dense(v) = &mut b.v {
                    v[20] = bad;
                }
            }
            _ => b.scale = bad,
        }
        assert_rejected(b, |e| matches!(e, Error::NonFinite { .. }));
    }
}
