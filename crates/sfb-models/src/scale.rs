//! What turns a data file's records into what a model trains on ([`Preprocess`]): feature
//! scaling fitted on the training set only, then an intercept column, applied identically
//! to the training and held-out sets, on every peer (all load the same data), and — saved
//! with a model — to the data it predicts on.
//!
//! - [`Scale::Standard`]: `x ← (x − mean) / std` per feature. A constant feature is not
//!   zeroed (that would silently drop a column the user supplied, such as their own
//!   constant-1 column): it is divided by its magnitude instead.
//! - [`Scale::MaxAbs`]: `x ← x / max|x|` per feature, no centring, so zeros stay zeros and
//!   sparse data stays sparse; an all-zero feature is left alone.
//! - [`Scale::Auto`] (the default) decides by the **data**, never by the file format:
//!   standard when at least [`STANDARDIZE_AT`] of the training set's entries are non-zero
//!   (the same iris gives the same model as CSV and as LIBSVM), max-abs for data with more
//!   zeros (centring would inflate its rare features, and make sparse data dense). Sparse samples are stored densely when a centring map
//!   applies to them, whichever set they come from.
//! - The **intercept** is one more feature, constant 1, appended after scaling (column `D`
//!   of W): a bias per class costs one value per factor `v` (dense) or one index/value
//!   pair (sparse), and nothing else in the protocol changes.

use std::str::FromStr;
use std::sync::Arc;

use sfb_core::checkpoint::{ByteReader, ByteWriter};

use crate::data::LabelMap;
use crate::{Error, Example, Features, Limits, Problem, Result};

/// The fraction of non-zero training entries from which samples are stored densely,
/// whatever their file: a dense copy then takes no more bytes than the sparse one (4 bytes
/// per entry against 8 per non-zero), and the same data read from CSV or LIBSVM computes
/// bit for bit alike.
pub const STORE_DENSE_AT: f64 = 0.5;

/// The fraction of non-zero training entries from which [`Scale::Auto`] standardizes:
/// data with more zeros than that (pixels, counts, words) is max-abs scaled, its zeros
/// kept. Centring such data inflates the rarely non-zero features (1 / a tiny std): on
/// the digits (51 % non-zero) standardizing gave a held-out objective of 0.132 after 2,000
/// clocks, still rising, where max-abs gave 0.100 (4 peers, default step); and the
/// partial-broadcast replicas of a 12-peer run rose 23–52 % above their minimum where
/// max-abs's rose 2–4 %. scikit-learn's iris, wine and breast cancer (99–100 %
/// non-zero) are standardized.
pub const STANDARDIZE_AT: f64 = 0.75;

/// How features are scaled before training.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scale {
    /// As read.
    #[default]
    None,
    /// Zero mean, unit variance per feature (sparse samples are stored densely).
    Standard,
    /// Divide each feature by its largest magnitude (dense or sparse).
    MaxAbs,
    /// [`Standard`](Scale::Standard) when at least [`STANDARDIZE_AT`] of the training
    /// entries are non-zero, else [`MaxAbs`](Scale::MaxAbs) ([`Scale::resolve`]).
    Auto,
}

impl Scale {
    /// The concrete scaling for `train` (`features` wide): [`Scale::Auto`] becomes
    /// standard or max-abs by [`nonzero_fraction`], whether the samples are stored dense
    /// or sparse; the others are themselves.
    pub fn resolve(self, train: &[Example], features: usize) -> Scale {
        match self {
            Scale::Auto => Scale::auto_for(nonzero_fraction(train, features)),
            other => other,
        }
    }

    /// What [`Scale::Auto`] becomes for data with `nonzero` of its entries non-zero.
    pub fn auto_for(nonzero: f64) -> Scale {
        if nonzero >= STANDARDIZE_AT {
            Scale::Standard
        } else {
            Scale::MaxAbs
        }
    }
}

/// The fraction of the `n × features` entries of `samples` that are non-zero (stored
/// zeros of either representation do not count); 0 for no samples or features.
pub fn nonzero_fraction(samples: &[Example], features: usize) -> f64 {
    let cells = samples.len() as f64 * features as f64;
    if cells == 0.0 {
        return 0.0;
    }
    let nonzero: usize = samples
        .iter()
        .map(|e| match &e.x {
            Features::Dense(v) => v.iter().filter(|&&a| a != 0.0).count(),
            Features::Sparse { values, .. } => values.iter().filter(|&&a| a != 0.0).count(),
        })
        .sum();
    nonzero as f64 / cells
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
    pub(crate) shift: Vec<f64>,
    pub(crate) factor: Vec<f64>,
}

/// What turns a file's records into a model's samples: the scaling fitted on the training
/// set, then the intercept column, and the map between the file's label values and the
/// model's classes. Saved with a model ([`crate::saved`]) so prediction sees its data as
/// training did.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocess {
    features: usize,
    scale: Scale,
    nonzero: f64,
    map: Option<Affine>,
    intercept: bool,
    labels: LabelMap,
}

impl Preprocess {
    /// No scaling, no intercept, `features` wide, classes as labels.
    pub fn identity(features: usize, labels: LabelMap) -> Self {
        Self::from_parts(features, Scale::None, f64::NAN, None, false, labels)
    }

    /// From a streaming scan's results.
    pub(crate) fn from_parts(
        features: usize,
        scale: Scale,
        nonzero: f64,
        map: Option<Affine>,
        intercept: bool,
        labels: LabelMap,
    ) -> Self {
        Self {
            features,
            scale,
            nonzero,
            map,
            intercept,
            labels,
        }
    }

    /// Fits `scale` ([`Scale::resolve`]d) on `train` (`features` wide) and appends an
    /// intercept column when `intercept`.
    ///
    /// # Complexity
    /// Two passes over the training set: O(stored values + D).
    pub fn fit(
        train: &[Example],
        features: usize,
        scale: Scale,
        intercept: bool,
        labels: LabelMap,
    ) -> Self {
        let nonzero = nonzero_fraction(train, features);
        let scale = match scale {
            Scale::Auto => Scale::auto_for(nonzero),
            s => s,
        };
        let map = match scale {
            Scale::None | Scale::Auto => None,
            Scale::Standard => Some(standard(train, features)),
            Scale::MaxAbs => Some(max_abs(train, features)),
        };
        Self::from_parts(features, scale, nonzero, map, intercept, labels)
    }

    /// Features of the raw data (`D` of the file).
    pub fn raw_features(&self) -> usize {
        self.features
    }

    /// Features the model sees: `D`, plus one with an intercept.
    pub fn features(&self) -> usize {
        self.features + usize::from(self.intercept)
    }

    /// The scaling applied (resolved: never [`Scale::Auto`]).
    pub fn scale(&self) -> Scale {
        self.scale
    }

    /// Whether an intercept column is appended.
    pub fn intercept(&self) -> bool {
        self.intercept
    }

    /// Label values ↔ classes.
    pub fn labels(&self) -> &LabelMap {
        &self.labels
    }

    /// Whether samples come out dense: data at least [`STORE_DENSE_AT`] non-zero is
    /// stored densely whatever its file (so a CSV and a LIBSVM copy compute bit for bit
    /// alike), and a centring map densifies sparse samples.
    pub fn densifies(&self) -> bool {
        self.nonzero >= STORE_DENSE_AT
            || self
                .map
                .as_ref()
                .is_some_and(|m| m.shift.iter().any(|&s| s != 0.0))
    }

    /// What a run's header says: e.g. `standard scaling (51 % non-zero) · intercept`.
    pub fn describe(&self) -> String {
        let scaling = match self.scale {
            Scale::None | Scale::Auto => "unscaled".to_string(),
            s if self.nonzero.is_finite() => {
                format!("{s} scaling ({:.0} % non-zero)", 100.0 * self.nonzero)
            }
            s => format!("{s} scaling"),
        };
        let intercept = if self.intercept {
            "intercept"
        } else {
            "no intercept"
        };
        format!("{scaling} · {intercept}")
    }

    /// `x` as the model sees it (scaled, computed in f64 and rounded to f32, the same for
    /// every caller; then the intercept).
    pub fn apply(&self, x: &Features) -> Features {
        let mut y = x.clone();
        self.apply_mut(&mut y);
        y
    }

    /// [`apply`](Self::apply) in place.
    pub fn apply_mut(&self, x: &mut Features) {
        if self.nonzero >= STORE_DENSE_AT && matches!(x, Features::Sparse { .. }) {
            *x = Features::Dense(x.to_dense(self.features));
        }
        if let Some(map) = &self.map {
            map.apply_mut(x);
        }
        if self.intercept {
            match x {
                Features::Dense(v) => {
                    v.resize(self.features, 0.0);
                    v.push(1.0);
                }
                Features::Sparse { indices, values } => {
                    indices.push(self.features as u32);
                    values.push(1.0);
                }
            }
        }
    }

    /// `set` with every sample [`apply`](Self::apply)'d.
    pub fn apply_all(&self, set: &[Example]) -> Vec<Example> {
        set.iter()
            .map(|e| Example::new(self.apply(&e.x), e.y, e.id))
            .collect()
    }

    /// Appends this map to `w` (what a model file stores).
    pub fn encode(&self, w: &mut ByteWriter) {
        let scale = match self.scale {
            Scale::None | Scale::Auto => 0,
            Scale::Standard => 1,
            Scale::MaxAbs => 2,
        };
        w.u64(self.features as u64)
            .u64(scale)
            .u64(u64::from(self.intercept))
            .f64s(&[self.nonzero]);
        let (shift, factor) = self
            .map
            .as_ref()
            .map_or((&[][..], &[][..]), |m| (&m.shift[..], &m.factor[..]));
        w.f64s(shift).f64s(factor).f64s(&self.labels.values);
    }

    /// Reads what [`encode`](Self::encode) wrote.
    ///
    /// # Errors
    /// The reason, in words: truncated, a scaling code or a length that cannot be, a
    /// non-finite factor.
    pub fn decode(r: &mut ByteReader<'_>) -> std::result::Result<Self, String> {
        let e = |e: sfb_core::checkpoint::ReadError| e.to_string();
        let features = usize::try_from(r.u64().map_err(e)?).map_err(|e| e.to_string())?;
        let scale = match r.u64().map_err(e)? {
            0 => Scale::None,
            1 => Scale::Standard,
            2 => Scale::MaxAbs,
            c => return Err(format!("unknown scaling code {c}")),
        };
        let intercept = match r.u64().map_err(e)? {
            0 => false,
            1 => true,
            c => return Err(format!("intercept flag {c} is neither 0 nor 1")),
        };
        let nonzero = r.f64s(Some(1)).map_err(e)?[0];
        let want = (scale != Scale::None).then_some(features);
        let shift = r.f64s(want.or(Some(0))).map_err(e)?;
        let factor = r.f64s(want.or(Some(0))).map_err(e)?;
        if shift.iter().chain(&factor).any(|v| !v.is_finite()) {
            return Err("a non-finite scaling value".into());
        }
        let values = r.f64s(None).map_err(e)?;
        let labels = LabelMap::from_labels(values.iter().copied());
        if labels.values != values {
            return Err("label values not distinct and ascending".into());
        }
        Ok(Self {
            features,
            scale,
            nonzero,
            map: want.map(|_| Affine { shift, factor }),
            intercept,
            labels,
        })
    }
}

impl Problem {
    /// This problem with its features scaled by `scale`, the statistics taken from the
    /// training set only (no intercept): [`prepare`](Self::prepare) without limits.
    ///
    /// # Errors
    /// As [`prepare`](Self::prepare).
    pub fn scaled(&self, scale: Scale) -> Result<Problem> {
        Ok(self.prepare(scale, false, &Limits::default())?.0)
    }

    /// This problem as the model sees it: `scale` fitted on the training set, then an
    /// intercept column when `intercept` ([`Preprocess::fit`]); and the map itself.
    ///
    /// # Errors
    /// [`Error::Limit`] when a centring map would store sparse data densely beyond
    /// [`Limits::max_data_bytes`] (use `maxabs`); nothing is allocated then.
    ///
    /// # Complexity
    /// Two passes over the training set and one over the held-out set: O(stored values).
    pub fn prepare(
        &self,
        scale: Scale,
        intercept: bool,
        limits: &Limits,
    ) -> Result<(Problem, Preprocess)> {
        let d = self.features;
        let prep = Preprocess::fit(&self.train, d, scale, intercept, self.labels.clone());
        if prep.densifies() {
            let sparse = |set: &[Example]| {
                set.iter()
                    .filter(|e| matches!(e.x, Features::Sparse { .. }))
                    .count() as u128
            };
            let n = sparse(&self.train) + sparse(&self.test);
            let what = format!("{n} sparse samples × {d} features stored densely");
            limits
                .check_data_bytes("scaling", &what, n * (d as u128 + 1) * 4)
                .map_err(|e| match e {
                    Error::Limit {
                        at,
                        found,
                        limit,
                        max,
                    } => Error::Limit {
                        at,
                        found: format!("{found} (--scale maxabs keeps them sparse)"),
                        limit,
                        max,
                    },
                    other => other,
                })?;
        }
        if prep.scale == Scale::None && !intercept && !prep.densifies() {
            return Ok((self.clone(), prep));
        }
        let problem = Problem {
            train: Arc::new(prep.apply_all(&self.train)),
            test: Arc::new(prep.apply_all(&self.test)),
            classes: self.classes,
            features: prep.features(),
            labels: self.labels.clone(),
        };
        Ok((problem, prep))
    }
}

impl Affine {
    /// [`Preprocess::apply`]'s scaling, in place (no allocation for dense samples and
    /// shift-free maps: what a streaming read keeps). A sparse sample under a map that
    /// shifts is stored densely (its zeros move).
    pub(crate) fn apply_mut(&self, x: &mut Features) {
        if matches!(x, Features::Sparse { .. }) && self.shift.iter().any(|&s| s != 0.0) {
            *x = Features::Dense(x.to_dense(self.shift.len()));
        }
        match x {
            Features::Dense(v) => {
                for (k, a) in v.iter_mut().enumerate() {
                    *a = ((f64::from(*a) - self.shift[k]) * self.factor[k]) as f32;
                }
            }
            Features::Sparse { indices, values } => {
                for (&k, a) in indices.iter().zip(values.iter_mut()) {
                    *a = (f64::from(*a) * self.factor[k as usize]) as f32;
                }
            }
        }
    }
}

/// Standardization statistics of `train`, dense or sparse samples alike (a sparse
/// sample's missing entries are zeros).
fn standard(train: &[Example], d: usize) -> Affine {
    let mut sum = vec![0f64; d];
    let mut seen = vec![0usize; d];
    let mut sq = vec![0f64; d];
    let each = |e: &Example, f: &mut dyn FnMut(usize, f64)| match &e.x {
        Features::Dense(v) => v.iter().enumerate().for_each(|(k, &a)| f(k, f64::from(a))),
        Features::Sparse { indices, values } => indices
            .iter()
            .zip(values)
            .for_each(|(&k, &a)| f(k as usize, f64::from(a))),
    };
    for e in train {
        each(e, &mut |k, a| {
            sum[k] += a;
            seen[k] += 1;
        });
    }
    let n = train.len().max(1) as f64;
    let mean: Vec<f64> = sum.iter().map(|s| s / n).collect();
    for e in train {
        each(e, &mut |k, a| {
            let c = a - mean[k];
            sq[k] += c * c;
        });
    }
    // The entries a sparse sample does not store are zeros.
    let rows = train.len();
    for k in 0..d {
        sq[k] += (rows - seen[k].min(rows)) as f64 * mean[k] * mean[k];
    }
    standard_map(mean, &sq, n)
}

/// Standardization from each feature's `mean` and sum of squared deviations `sq` over
/// `n` samples. A constant feature (no deviation) is divided by its magnitude, not
/// centred: a column of 1s stays a column of 1s, an all-zero one stays zero.
pub(crate) fn standard_map(mean: Vec<f64>, sq: &[f64], n: f64) -> Affine {
    let (shift, factor) = mean
        .iter()
        .zip(sq)
        .map(|(&m, &s)| {
            let std = (s / n).sqrt();
            if std > 1e-12 * m.abs() {
                (m, 1.0 / std)
            } else if m != 0.0 {
                (0.0, 1.0 / m.abs())
            } else {
                (0.0, 1.0)
            }
        })
        .unzip();
    Affine { shift, factor }
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
            labels: crate::data::LabelMap::identity(1),
        };
        let s = p.scaled(Scale::Standard).unwrap();
        // Feature 0: mean 2, std 1; feature 1 is constant: divided by its magnitude, not
        // zeroed (a constant column the user supplied stays).
        assert_eq!(values(&s.train), [[-1.0, 1.0], [1.0, 1.0]]);
        assert_eq!(values(&s.test), [[3.0, 1.2]]);
        assert_eq!(
            values(&p.scaled(Scale::None).unwrap().train),
            values(&p.train)
        );
    }

    #[test]
    fn max_abs_keeps_sparse_data_sparse_and_standard_centres_it_densely() {
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
            labels: crate::data::LabelMap::identity(1),
        };
        // Under half the entries non-zero (3 of 2 × 8): stored as read, sparse.
        let wide = Problem {
            features: 8,
            ..p.clone()
        };
        let s = wide.scaled(Scale::MaxAbs).unwrap();
        assert_eq!(values(&s.train), [vec![-1.0, 0.25], vec![1.0]]);
        // Feature 1 never appears in training: left as is.
        assert_eq!(values(&s.test), [vec![2.0, 3.0]]);
        // Half of 2 × 3 non-zero: stored densely (no more bytes than sparse).
        let s = p.scaled(Scale::MaxAbs).unwrap();
        assert_eq!(values(&s.train), [[-1.0, 0.0, 0.25], [0.0, 0.0, 1.0]]);
        // Standard scaling of sparse samples: their zeros count in the statistics and
        // move with the centring, so the samples come out dense. Feature 0: values −4, 0
        // (mean −2, std 2); feature 1: all zero (left alone); feature 2: 0.5, 2 (mean
        // 1.25, std 0.75).
        let s = p.scaled(Scale::Standard).unwrap();
        assert_eq!(values(&s.train), [[-1.0, 0.0, -1.0], [1.0, 0.0, 1.0]]);
        assert_eq!(values(&s.test), [[5.0, 3.0, -1.25 / 0.75]]);
        // The same data stored densely gives the same bits.
        let dense_p = Problem {
            train: Arc::new(
                p.train
                    .iter()
                    .map(|e| Example::new(Features::Dense(e.x.to_dense(3)), 0, 0))
                    .collect(),
            ),
            test: Arc::clone(&p.test),
            ..p.clone()
        };
        assert_eq!(dense_p.scaled(Scale::Standard).unwrap().train, s.train);
        // Limits apply before densifying.
        let tiny = Limits {
            max_data_bytes: 8,
            ..Limits::default()
        };
        let e = p
            .prepare(Scale::Standard, false, &tiny)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--scale maxabs keeps them sparse"), "{e}");
    }

    #[test]
    fn auto_decides_by_the_data_not_its_storage_and_the_intercept_is_last() {
        let x = |v: Vec<f32>| Example::new(Features::Dense(v), 0, 0);
        // Three of four entries non-zero: standardized.
        let dense = Problem {
            train: Arc::new(vec![x(vec![1.0, 2.0]), x(vec![0.0, 3.0])]),
            test: Arc::new(vec![]),
            classes: 1,
            features: 2,
            labels: crate::data::LabelMap::identity(1),
        };
        // Half the entries zero (pixels, counts): max-abs, whether stored dense or sparse.
        let half = Problem {
            train: Arc::new(vec![x(vec![1.0, 0.0]), x(vec![0.0, 3.0])]),
            ..dense.clone()
        };
        let half_sparse: Vec<Example> = half
            .train
            .iter()
            .map(|e| {
                let (indices, values) =
                    e.x.to_dense(2)
                        .iter()
                        .enumerate()
                        .filter(|(_, v)| **v != 0.0)
                        .map(|(k, v)| (k as u32, *v))
                        .unzip();
                Example::new(Features::Sparse { indices, values }, 0, 0)
            })
            .collect();
        assert_eq!(Scale::Auto.resolve(&dense.train, 2), Scale::Standard);
        assert_eq!(Scale::Auto.resolve(&half.train, 2), Scale::MaxAbs);
        assert_eq!(Scale::Auto.resolve(&half_sparse, 2), Scale::MaxAbs);
        let (p, prep) = dense
            .prepare(Scale::Auto, true, &Limits::default())
            .unwrap();
        assert_eq!(
            (p.features, prep.features(), prep.raw_features()),
            (3, 3, 2)
        );
        assert_eq!(values(&p.train), [[1.0, -1.0, 1.0], [-1.0, 1.0, 1.0]]);
        assert_eq!(
            prep.describe(),
            "standard scaling (75 % non-zero) · intercept"
        );
        let sp = Features::Sparse {
            indices: vec![1],
            values: vec![3.0],
        };
        // A sparse sample under a centring map comes out dense, intercept last.
        assert_eq!(prep.apply(&sp), Features::Dense(vec![-1.0, 1.0, 1.0]));
    }

    #[test]
    fn names_round_trip() {
        for s in [Scale::None, Scale::Standard, Scale::MaxAbs] {
            assert_eq!(s.to_string().parse::<Scale>().unwrap(), s);
        }
        assert!("minmax".parse::<Scale>().is_err());
    }
}
