//! Feature scaling: statistics from the training set only, applied identically to the
//! training and held-out sets (and so identically on every peer, which all load the same
//! data).
//!
//! - [`Scale::Standard`] (dense data): `x ← (x − mean) / std` per feature; a constant
//!   feature is only centred.
//! - [`Scale::MaxAbs`] (dense or sparse): `x ← x / max|x|` per feature, no centring, so
//!   zeros stay zeros and sparse data stays sparse; an all-zero feature is left alone.
//! - [`Scale::Auto`]: standard when every training sample is dense, else max-abs.

use std::str::FromStr;
use std::sync::Arc;

use crate::{Error, Example, Features, Problem, Result};

/// How features are scaled before training.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scale {
    /// As read.
    #[default]
    None,
    /// Zero mean, unit variance per feature (dense data only: centring would densify
    /// sparse data).
    Standard,
    /// Divide each feature by its largest magnitude (dense or sparse).
    MaxAbs,
    /// [`Standard`](Scale::Standard) for dense data, [`MaxAbs`](Scale::MaxAbs) when any
    /// training sample is sparse ([`Scale::resolve`]).
    Auto,
}

impl Scale {
    /// The concrete scaling for `train`: [`Scale::Auto`] becomes standard (all samples
    /// dense) or max-abs (some sparse); the others are themselves.
    pub fn resolve(self, train: &[Example]) -> Scale {
        match self {
            Scale::Auto if train.iter().all(|e| matches!(e.x, Features::Dense(_))) => {
                Scale::Standard
            }
            Scale::Auto => Scale::MaxAbs,
            other => other,
        }
    }
}

impl std::fmt::Display for Scale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scale::None => "none",
            Scale::Standard => "standard",
            Scale::MaxAbs => "maxabs",
            Scale::Auto => "auto",
        })
    }
}

impl FromStr for Scale {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(Scale::None),
            "standard" => Ok(Scale::Standard),
            "maxabs" | "max-abs" => Ok(Scale::MaxAbs),
            "auto" => Ok(Scale::Auto),
            _ => Err(Error::Parameter {
                name: "scale",
                value: s.to_string(),
                reason: "expected none, standard, maxabs or auto".into(),
            }),
        }
    }
}

/// Per-feature affine map `x ← (x − shift) · factor`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Affine {
    shift: Vec<f64>,
    pub(crate) factor: Vec<f64>,
}

impl Problem {
    /// This problem with its features scaled by `scale`, the statistics taken from the
    /// training set only.
    ///
    /// # Errors
    /// [`Error::Parameter`] for [`Scale::Standard`] on sparse data (use
    /// [`Scale::MaxAbs`]).
    ///
    /// # Complexity
    /// Two passes over the training set and one over the held-out set: O(stored values).
    pub fn scaled(&self, scale: Scale) -> Result<Problem> {
        let d = self.features;
        let map = match scale.resolve(&self.train) {
            Scale::None => return Ok(self.clone()),
            Scale::Standard => standard(&self.train, d)?,
            Scale::MaxAbs | Scale::Auto => max_abs(&self.train, d),
        };
        let apply = |set: &[Example]| -> Vec<Example> {
            set.iter()
                .map(|e| Example::new(map.apply(&e.x), e.y, e.id))
                .collect()
        };
        Ok(Problem {
            train: Arc::new(apply(&self.train)),
            test: Arc::new(apply(&self.test)),
            classes: self.classes,
            features: d,
        })
    }
}

impl Affine {
    /// `x` scaled: computed in f64, rounded to f32 (the same for every caller).
    pub(crate) fn apply(&self, x: &Features) -> Features {
        let mut y = x.clone();
        self.apply_mut(&mut y);
        y
    }

    /// [`apply`](Self::apply) in place (no allocation: what a streaming read keeps).
    pub(crate) fn apply_mut(&self, x: &mut Features) {
        match x {
            Features::Dense(v) => {
                for (k, a) in v.iter_mut().enumerate() {
                    *a = ((f64::from(*a) - self.shift[k]) * self.factor[k]) as f32;
                }
            }
            // Only shift-free maps are built for sparse data.
            Features::Sparse { indices, values } => {
                for (&k, a) in indices.iter().zip(values.iter_mut()) {
                    *a = (f64::from(*a) * self.factor[k as usize]) as f32;
                }
            }
        }
    }
}

fn standard(train: &[Example], d: usize) -> Result<Affine> {
    let mut sum = vec![0f64; d];
    let mut sq = vec![0f64; d];
    for e in train {
        match &e.x {
            Features::Dense(v) => {
                for (k, &a) in v.iter().enumerate() {
                    sum[k] += f64::from(a);
                }
            }
            Features::Sparse { .. } => return Err(standard_refused()),
        }
    }
    let n = train.len().max(1) as f64;
    let mean: Vec<f64> = sum.iter().map(|s| s / n).collect();
    for e in train {
        if let Features::Dense(v) = &e.x {
            for (k, &a) in v.iter().enumerate() {
                let c = f64::from(a) - mean[k];
                sq[k] += c * c;
            }
        }
    }
    Ok(standard_map(mean, &sq, n))
}

/// Why sparse data is not standardized.
pub(crate) fn standard_refused() -> Error {
    Error::Parameter {
        name: "scale",
        value: "standard".into(),
        reason: "centring would make sparse data dense: use maxabs".into(),
    }
}

/// Standardization from each feature's `mean` and sum of squared deviations `sq` over
/// `n` samples: a constant feature is only centred.
pub(crate) fn standard_map(mean: Vec<f64>, sq: &[f64], n: f64) -> Affine {
    let factor = sq
        .iter()
        .map(|s| {
            let std = (s / n).sqrt();
            if std > 0.0 { 1.0 / std } else { 1.0 }
        })
        .collect();
    Affine {
        shift: mean,
        factor,
    }
}

fn max_abs(train: &[Example], d: usize) -> Affine {
    let mut max = vec![0f64; d];
    for e in train {
        match &e.x {
            Features::Dense(v) => {
                for (k, &a) in v.iter().enumerate() {
                    max[k] = max[k].max(f64::from(a).abs());
                }
            }
            Features::Sparse { indices, values } => {
                for (&k, &a) in indices.iter().zip(values) {
                    let k = k as usize;
                    max[k] = max[k].max(f64::from(a).abs());
                }
            }
        }
    }
    max_abs_map(&max)
}

/// Max-abs scaling from each feature's largest magnitude `max`: an all-zero feature is
/// left alone.
pub(crate) fn max_abs_map(max: &[f64]) -> Affine {
    Affine {
        shift: vec![0.0; max.len()],
        factor: max
            .iter()
            .map(|&m| if m > 0.0 { 1.0 / m } else { 1.0 })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(rows: &[[f32; 2]]) -> Arc<Vec<Example>> {
        Arc::new(
            rows.iter()
                .enumerate()
                .map(|(i, r)| Example::new(Features::Dense(r.to_vec()), 0, i as u32))
                .collect(),
        )
    }

    fn values(set: &[Example]) -> Vec<Vec<f32>> {
        set.iter()
            .map(|e| match &e.x {
                Features::Dense(v) => v.clone(),
                Features::Sparse { values, .. } => values.clone(),
            })
            .collect()
    }

    #[test]
    fn standard_uses_training_statistics_for_both_sets() {
        let p = Problem {
            train: dense(&[[1.0, 5.0], [3.0, 5.0]]),
            test: dense(&[[5.0, 6.0]]),
            classes: 1,
            features: 2,
        };
        let s = p.scaled(Scale::Standard).unwrap();
        // Feature 0: mean 2, std 1; feature 1 is constant: only centred.
        assert_eq!(values(&s.train), [[-1.0, 0.0], [1.0, 0.0]]);
        assert_eq!(values(&s.test), [[3.0, 1.0]]);
        assert_eq!(
            values(&p.scaled(Scale::None).unwrap().train),
            values(&p.train)
        );
    }

    #[test]
    fn max_abs_keeps_sparse_data_sparse_and_standard_refuses_it() {
        let sparse = |idx: Vec<u32>, val: Vec<f32>| {
            Example::new(
                Features::Sparse {
                    indices: idx,
                    values: val,
                },
                0,
                0,
            )
        };
        let p = Problem {
            train: Arc::new(vec![
                sparse(vec![0, 2], vec![-4.0, 0.5]),
                sparse(vec![2], vec![2.0]),
            ]),
            test: Arc::new(vec![sparse(vec![0, 1], vec![8.0, 3.0])]),
            classes: 1,
            features: 3,
        };
        let s = p.scaled(Scale::MaxAbs).unwrap();
        assert_eq!(values(&s.train), [vec![-1.0, 0.25], vec![1.0]]);
        // Feature 1 never appears in training: left as is.
        assert_eq!(values(&s.test), [vec![2.0, 3.0]]);
        let e = p.scaled(Scale::Standard).unwrap_err().to_string();
        assert!(e.contains("use maxabs"), "{e}");
    }

    #[test]
    fn names_round_trip() {
        for s in [Scale::None, Scale::Standard, Scale::MaxAbs] {
            assert_eq!(s.to_string().parse::<Scale>().unwrap(), s);
        }
        assert!("minmax".parse::<Scale>().is_err());
    }
}
