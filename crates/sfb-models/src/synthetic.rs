//! Seeded synthetic data, one generator per kind of model:
//!
//! - [`classification`] ([`ClassificationSpec`]): a random linear teacher labels Gaussian
//!   inputs — for MLR and L2-MLR;
//! - [`clusters`] ([`ClusterSpec`]): classes separated in a few informative dimensions,
//!   hidden under high-variance noise dimensions (Euclidean nearest neighbours do badly) —
//!   for distance metric learning;
//! - [`signals`] ([`SignalSpec`]): sparse combinations of a hidden unit-norm dictionary plus
//!   noise — for sparse coding.
//!
//! Every spec parses from the CLI's `key=value,…` form (an unknown or repeated key is an
//! error); every output is a function of the spec and the seed, and samples carry their
//! index as `id`. Generating allocates what the spec asks for: check it first with the
//! spec's `check_limits` ([`ClassificationSpec::check_limits`], …), which refuses data or
//! matrices beyond [`Limits`] with the bytes they would need.

use ndarray::Array2;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::limits::data_bytes;
use crate::{Error, Example, Features, Limits, Result};

/// A standard normal draw (Box–Muller).
pub fn normal(rng: &mut impl Rng) -> f32 {
    let u1: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
    let u2: f64 = rng.random();
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

/// Parameters of a synthetic classification problem, parsed from a `key=value,…` spec.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassificationSpec {
    /// Classes `J`. Key `classes`. Default 20.
    pub classes: usize,
    /// Features `D`. Key `features`. Default 100.
    pub features: usize,
    /// Training samples. Key `samples`. Default 20000.
    pub samples: usize,
    /// Held-out samples. Key `test`. Default `samples / 5`.
    pub test: usize,
    /// Fraction of non-zero features; `< 1` gives sparse samples. Key `density`. Default 1.
    pub density: f64,
    /// Label noise: scale of Gumbel noise added to the teacher's logits (0 = realizable).
    /// Key `noise`. Default 0.5.
    pub noise: f32,
    /// Separation: scale of the teacher's logits. Key `sep`. Default 3.
    pub sep: f32,
    /// Rank of the teacher (`0` = full rank). A low-rank teacher `A·B` labels a sample in
    /// `O(rank·(J+D))` instead of `O(J·D)`, which keeps generating large problems
    /// (J = D = 4096) fast, and gives the classes shared structure. Key `rank`. Default 0.
    pub rank: usize,
    /// Unscaled features, as real data has them: feature `d` is observed as `s_d·x_d`, with
    /// `s_d` log-uniform in `[1, spread]` (per feature, seeded). The labels come from the
    /// unscaled `x`. Key `spread`. Default 1 (no scaling).
    pub spread: f32,
    /// Per-feature offsets `b_d` uniform in `[−offset, offset]` added to dense features
    /// (after `spread`): features that are not centred. Dense data only. Key `offset`.
    /// Default 0.
    pub offset: f32,
    /// Blobs instead of a teacher (a Gaussian mixture, like scikit-learn's `make_blobs`):
    /// when `> 0`, class `y` is uniform and `x = blobs · μ_y + z`, with `z` and every
    /// centre's entries standard normal (centres of rank `rank` when it is set). A linear
    /// model learns it from a few samples per class, at any `J`: at `D` features, two
    /// centres are `blobs·√(2D)` apart against unit noise. Dense only; `noise` and `sep`
    /// do not apply. Key `blobs`. Default 0 (the teacher).
    pub blobs: f32,
}

impl Default for ClassificationSpec {
    fn default() -> Self {
        Self {
            classes: 20,
            features: 100,
            samples: 20000,
            test: 4000,
            density: 1.0,
            noise: 0.5,
            sep: 3.0,
            rank: 0,
            spread: 1.0,
            offset: 0.0,
            blobs: 0.0,
        }
    }
}

impl std::str::FromStr for ClassificationSpec {
    type Err = Error;

    fn from_str(spec: &str) -> Result<Self> {
        let fail = |reason: String| Error::Spec {
            spec: spec.to_string(),
            reason,
        };
        let mut s = Self::default();
        let mut test = None;
        let known = [
            "classes", "features", "samples", "test", "density", "noise", "sep", "rank", "spread",
            "offset", "blobs",
        ];
        for (k, v) in key_values(spec, &known, &[])? {
            match k {
                "classes" => s.classes = number(spec, k, v)?,
                "features" => s.features = number(spec, k, v)?,
                "samples" => s.samples = number(spec, k, v)?,
                "test" => test = Some(number(spec, k, v)?),
                "density" => s.density = number(spec, k, v)?,
                "noise" => s.noise = number(spec, k, v)?,
                "sep" => s.sep = number(spec, k, v)?,
                "spread" => s.spread = number(spec, k, v)?,
                "offset" => s.offset = number(spec, k, v)?,
                "blobs" => s.blobs = number(spec, k, v)?,
                _ => s.rank = number(spec, k, v)?,
            }
        }
        s.test = test.unwrap_or(s.samples / 5);
        if s.classes < 2 {
            return Err(fail("classes must be at least 2".into()));
        }
        if s.features == 0 || s.samples == 0 {
            return Err(fail("features and samples must be positive".into()));
        }
        if !(s.density > 0.0 && s.density <= 1.0) {
            return Err(fail(format!("density {} is not in (0, 1]", s.density)));
        }
        if !s.noise.is_finite() || s.noise < 0.0 || !s.sep.is_finite() {
            return Err(fail("noise must be ≥ 0 and sep finite".into()));
        }
        if !(s.spread.is_finite() && (1.0..=1e6).contains(&s.spread)) {
            return Err(fail(format!("spread {} is not in [1, 1e6]", s.spread)));
        }
        if !(s.offset.is_finite() && (0.0..=1e6).contains(&s.offset)) {
            return Err(fail(format!("offset {} is not in [0, 1e6]", s.offset)));
        }
        if !(s.blobs.is_finite() && s.blobs >= 0.0) {
            return Err(fail(format!("blobs {} is not a number ≥ 0", s.blobs)));
        }
        if s.blobs > 0.0 && s.density < 1.0 {
            return Err(fail("blobs are dense: leave density at 1".into()));
        }
        if s.offset > 0.0 && s.density < 1.0 {
            return Err(fail(
                "offset applies to dense data only (it would fill every sparse sample)".into(),
            ));
        }
        Ok(s)
    }
}

impl ClassificationSpec {
    /// Estimated bytes of the generated samples (training and held-out).
    pub fn data_bytes(&self) -> u128 {
        let n = self.samples as u128 + self.test as u128;
        if self.density < 1.0 {
            let nnz = (self.density * self.features as f64).ceil() as u128;
            data_bytes(n, n.saturating_mul(nnz), true)
        } else {
            data_bytes(n, n.saturating_mul(self.features as u128), false)
        }
    }

    /// Refuses a spec whose samples would exceed [`Limits::max_data_bytes`], whose teacher
    /// (`classes × features`, or its rank-`r` factors) would exceed
    /// [`Limits::max_w_bytes`], or whose features exceed [`Limits::max_features`]; `at`
    /// names the spec in the error. Nothing is allocated.
    ///
    /// # Errors
    /// [`Error::Limit`] with the bytes needed and the limit.
    ///
    /// # Example
    /// ```
    /// use sfb_models::{ClassificationSpec, Limits};
    /// let spec: ClassificationSpec = "classes=100000,features=100000".parse()?;
    /// let err = spec.check_limits(&Limits::default(), "spec").unwrap_err();
    /// assert!(err.to_string().starts_with("spec: teacher (100000 × 100000 f32) needs 40000000000 bytes"));
    /// # Ok::<(), sfb_models::Error>(())
    /// ```
    pub fn check_limits(&self, limits: &Limits, at: &str) -> Result<()> {
        limits.check_features(at, "features", self.features as u64)?;
        if self.rank == 0 {
            limits.check_matrix(at, "teacher", self.classes, self.features)?;
        } else {
            limits.check_matrix(at, "teacher factor B", self.rank, self.features)?;
            limits.check_matrix(at, "teacher factor A", self.classes, self.rank)?;
        }
        let what = format!(
            "{} + {} samples of {} features",
            self.samples, self.test, self.features
        );
        limits.check_data_bytes(at, &what, self.data_bytes())
    }
}

/// A synthetic classification problem: a random linear teacher labels random inputs.
///
/// Returns `(train, test)`, both drawn from the same distribution; everything is a
/// function of `spec` and `seed`.
pub fn classification(spec: &ClassificationSpec, seed: u64) -> (Vec<Example>, Vec<Example>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (j, d) = (spec.classes, spec.features);
    if spec.blobs > 0.0 {
        let (train, test) = blobs(spec, &mut rng);
        return unscale(spec, seed, train, test);
    }
    let nnz_expect = (spec.density * d as f64).max(1.0);
    let teacher_scale = spec.sep / (nnz_expect as f32).sqrt();
    // Full rank: one J×D teacher. Low rank r: logits = A·(B·x) with B (r×D) scaled so B·x
    // has unit variance and A (J×r) so the logits have the same scale `sep`.
    let r = spec.rank;
    let teacher = if r == 0 {
        Array2::from_shape_fn((j, d), |_| normal(&mut rng) * teacher_scale)
    } else {
        let b_scale = 1.0 / (nnz_expect as f32).sqrt();
        Array2::from_shape_fn((r, d), |_| normal(&mut rng) * b_scale)
    };
    let a_scale = spec.sep / (r.max(1) as f32).sqrt();
    let a = Array2::from_shape_fn((j, r), |_| normal(&mut rng) * a_scale);
    let teacher = teacher.as_standard_layout().into_owned();
    let tw = teacher.as_slice().expect("standard layout");
    let aw = a.as_slice().expect("standard layout");
    let sparse = spec.density < 1.0;
    let draw = |rng: &mut ChaCha8Rng| -> Example {
        let x = if sparse {
            let mut indices = Vec::new();
            let mut values = Vec::new();
            for c in 0..d {
                if rng.random_bool(spec.density) {
                    indices.push(c as u32);
                    values.push(normal(rng));
                }
            }
            Features::Sparse { indices, values }
        } else {
            Features::Dense((0..d).map(|_| normal(rng)).collect())
        };
        let bx: Vec<f32> = (0..r).map(|k| x.dot(&tw[k * d..(k + 1) * d])).collect();
        let y = (0..j)
            .map(|c| {
                let g: f32 = -(-(rng.random_range(f32::MIN_POSITIVE..1.0f32)).ln()).ln();
                let z = if r == 0 {
                    x.dot(&tw[c * d..(c + 1) * d])
                } else {
                    aw[c * r..(c + 1) * r]
                        .iter()
                        .zip(&bx)
                        .map(|(a, b)| a * b)
                        .sum()
                };
                (c, z + spec.noise * g)
            })
            .fold(
                (0, f32::NEG_INFINITY),
                |b, (c, z)| if z > b.1 { (c, z) } else { b },
            )
            .0 as u32;
        Example { x, y, id: 0 }
    };
    let train = (0..spec.samples).map(|_| draw(&mut rng)).collect();
    let test = (0..spec.test).map(|_| draw(&mut rng)).collect();
    unscale(spec, seed, train, test)
}

/// The blobs of [`ClassificationSpec::blobs`], unnumbered.
fn blobs(spec: &ClassificationSpec, rng: &mut ChaCha8Rng) -> (Vec<Example>, Vec<Example>) {
    let (j, d, r) = (spec.classes, spec.features, spec.rank);
    let centres = if r == 0 {
        Array2::from_shape_fn((j, d), |_| normal(rng))
    } else {
        // Rank r: A·B with unit-variance entries.
        let a = Array2::from_shape_fn((j, r), |_| normal(rng) / (r as f32).sqrt());
        let b = Array2::from_shape_fn((r, d), |_| normal(rng));
        a.dot(&b)
    };
    let draw = |rng: &mut ChaCha8Rng| -> Example {
        let y = rng.random_range(0..j);
        let c = centres.row(y);
        let x: Vec<f32> = c.iter().map(|&m| spec.blobs * m + normal(rng)).collect();
        Example {
            x: Features::Dense(x),
            y: y as u32,
            id: 0,
        }
    };
    let train = (0..spec.samples).map(|_| draw(rng)).collect();
    let test = (0..spec.test).map(|_| draw(rng)).collect();
    (train, test)
}

/// Applies [`ClassificationSpec::spread`] and [`ClassificationSpec::offset`], and numbers
/// the samples.
fn unscale(
    spec: &ClassificationSpec,
    seed: u64,
    mut train: Vec<Example>,
    mut test: Vec<Example>,
) -> (Vec<Example>, Vec<Example>) {
    let d = spec.features;
    if spec.spread > 1.0 || spec.offset > 0.0 {
        // A separate stream: the same spec without spread/offset gives the same samples.
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0ff5_e7ed_5ca1_ed00);
        let ln = f64::from(spec.spread).ln();
        let scales: Vec<f32> = (0..d)
            .map(|_| rng.random_range(0.0..=ln).exp() as f32)
            .collect();
        let offsets: Vec<f32> = (0..d)
            .map(|_| {
                if spec.offset > 0.0 {
                    rng.random_range(-spec.offset..=spec.offset)
                } else {
                    0.0
                }
            })
            .collect();
        for e in train.iter_mut().chain(test.iter_mut()) {
            match &mut e.x {
                Features::Dense(x) => {
                    for ((v, s), b) in x.iter_mut().zip(&scales).zip(&offsets) {
                        *v = *v * s + b;
                    }
                }
                Features::Sparse { indices, values } => {
                    for (&c, v) in indices.iter().zip(values.iter_mut()) {
                        *v *= scales[c as usize];
                    }
                }
            }
        }
    }
    (numbered(train), numbered(test))
}

/// The initial W every peer starts from: `N(0, std²)` entries drawn from `seed`
/// (zeros when `std == 0`).
pub fn init_w(j: usize, d: usize, std: f32, seed: u64) -> Array2<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5f5f_1a2b_3c4d_5e6f);
    if std == 0.0 {
        return Array2::zeros((j, d));
    }
    Array2::from_shape_fn((j, d), |_| normal(&mut rng) * std)
}

/// Sets `id` to the position of each sample.
fn numbered(mut v: Vec<Example>) -> Vec<Example> {
    for (i, e) in v.iter_mut().enumerate() {
        e.id = i as u32;
    }
    v
}

/// Splits a `key=value,…` spec, refusing keys outside `known` and keys given twice;
/// `aliases` maps alternative names to their key (`classes` → `atoms`), so a key and its
/// alias count as the same key. Returns keys as written.
fn key_values<'a>(
    spec: &'a str,
    known: &[&str],
    aliases: &[(&str, &str)],
) -> Result<Vec<(&'a str, &'a str)>> {
    let fail = |reason: String| Error::Spec {
        spec: spec.to_string(),
        reason,
    };
    let canonical = |k: &str| -> String {
        aliases
            .iter()
            .find(|(alias, _)| *alias == k)
            .map_or(k, |(_, key)| key)
            .to_string()
    };
    let mut out: Vec<(&str, &str)> = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| fail(format!("{part:?} is not key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        if !known.contains(&k) {
            return Err(fail(format!(
                "unknown key {k:?} (known: {})",
                known.join(", ")
            )));
        }
        if let Some((k0, v0)) = out.iter().find(|(k0, _)| canonical(k0) == canonical(k)) {
            let alias = if k0 == &k {
                String::new()
            } else {
                format!(" ({k0} and {k} are the same key)")
            };
            return Err(fail(format!(
                "key {k} given twice: {k0}={v0} and {k}={v}{alias}"
            )));
        }
        out.push((k, v));
    }
    Ok(out)
}

fn number<T: std::str::FromStr>(spec: &str, k: &str, v: &str) -> Result<T> {
    v.parse().map_err(|_| Error::Spec {
        spec: spec.to_string(),
        reason: format!("{k} = {v:?} is not a valid number"),
    })
}

/// Parameters of [`clusters`] (distance metric learning data).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClusterSpec {
    /// Classes. Key `classes`. Default 5.
    pub classes: usize,
    /// Features `d`. Key `features`. Default 20.
    pub features: usize,
    /// Informative features (the first ones); the rest are noise. Key `informative`.
    /// Default `min(features, 3)`.
    pub informative: usize,
    /// Training samples. Key `samples`. Default 2000.
    pub samples: usize,
    /// Held-out samples. Key `test`. Default `samples / 5`.
    pub test: usize,
    /// Standard deviation of the noise features. Key `noise`. Default 3.
    pub noise: f32,
    /// Standard deviation of the class centres in the informative features (the spread
    /// within a class is 1). Key `sep`. Default 3.
    pub sep: f32,
}

impl std::str::FromStr for ClusterSpec {
    type Err = Error;

    fn from_str(spec: &str) -> Result<Self> {
        let mut s = Self {
            classes: 5,
            features: 20,
            informative: 0,
            samples: 2000,
            test: 0,
            noise: 3.0,
            sep: 3.0,
        };
        let (mut informative, mut test) = (None, None);
        let known = [
            "classes",
            "features",
            "informative",
            "samples",
            "test",
            "noise",
            "sep",
        ];
        for (k, v) in key_values(spec, &known, &[])? {
            match k {
                "classes" => s.classes = number(spec, k, v)?,
                "features" => s.features = number(spec, k, v)?,
                "informative" => informative = Some(number(spec, k, v)?),
                "samples" => s.samples = number(spec, k, v)?,
                "test" => test = Some(number(spec, k, v)?),
                "noise" => s.noise = number(spec, k, v)?,
                _ => s.sep = number(spec, k, v)?,
            }
        }
        s.informative = informative.unwrap_or(s.features.min(3));
        s.test = test.unwrap_or(s.samples / 5);
        let fail = |reason: &str| Error::Spec {
            spec: spec.to_string(),
            reason: reason.into(),
        };
        if s.classes < 2 || s.features == 0 || s.samples < 2 {
            return Err(fail("need classes ≥ 2, features ≥ 1, samples ≥ 2"));
        }
        if s.informative == 0 || s.informative > s.features {
            return Err(fail("informative must be in 1..=features"));
        }
        if !(s.noise.is_finite() && s.noise >= 0.0 && s.sep.is_finite() && s.sep > 0.0) {
            return Err(fail("noise must be ≥ 0 and sep > 0"));
        }
        Ok(s)
    }
}

/// Refuses `samples + test` dense samples of `features` values beyond
/// [`Limits::max_data_bytes`].
fn check_dense_samples(
    limits: &Limits,
    at: &str,
    samples: usize,
    test: usize,
    features: usize,
) -> Result<()> {
    let n = samples as u128 + test as u128;
    let what = format!("{samples} + {test} samples of {features} features");
    let bytes = data_bytes(n, n.saturating_mul(features as u128), false);
    limits.check_data_bytes(at, &what, bytes)
}

impl ClusterSpec {
    /// Refuses a spec whose samples would exceed [`Limits::max_data_bytes`] or whose
    /// features exceed [`Limits::max_features`]; `at` names the spec in the error.
    ///
    /// # Errors
    /// [`Error::Limit`] with the bytes needed and the limit.
    pub fn check_limits(&self, limits: &Limits, at: &str) -> Result<()> {
        limits.check_features(at, "features", self.features as u64)?;
        limits.check_matrix(at, "class centres", self.classes, self.informative)?;
        check_dense_samples(limits, at, self.samples, self.test, self.features)
    }
}

/// Labelled clusters for metric learning: class centres `N(0, sep²)` in the first
/// `informative` features, unit spread around them, and `N(0, noise²)` in every other
/// feature. Returns dense `(train, test)`.
pub fn clusters(spec: &ClusterSpec, seed: u64) -> (Vec<Example>, Vec<Example>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xc1u64);
    let m = spec.informative;
    let centres: Vec<Vec<f32>> = (0..spec.classes)
        .map(|_| (0..m).map(|_| normal(&mut rng) * spec.sep).collect())
        .collect();
    let draw = |rng: &mut ChaCha8Rng| -> Example {
        let y = rng.random_range(0..spec.classes);
        let x = (0..spec.features)
            .map(|c| {
                if c < m {
                    centres[y][c] + normal(rng)
                } else {
                    normal(rng) * spec.noise
                }
            })
            .collect();
        Example::new(Features::Dense(x), y as u32, 0)
    };
    let train = (0..spec.samples).map(|_| draw(&mut rng)).collect();
    let test = (0..spec.test).map(|_| draw(&mut rng)).collect();
    (numbered(train), numbered(test))
}

/// Parameters of [`signals`] (sparse coding data).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SignalSpec {
    /// Signal dimension `d`. Key `features`. Default 64.
    pub features: usize,
    /// Atoms of the hidden dictionary. Key `atoms` (`classes` is read as `atoms`, so the
    /// CLI's default spec works for every model). Default 32.
    pub atoms: usize,
    /// Non-zero coefficients per signal. Key `sparsity`. Default 3.
    pub sparsity: usize,
    /// Training samples. Key `samples`. Default 5000.
    pub samples: usize,
    /// Held-out samples. Key `test`. Default `samples / 5`.
    pub test: usize,
    /// Standard deviation of additive noise per entry. Key `noise`. Default 0.05.
    pub noise: f32,
}

impl std::str::FromStr for SignalSpec {
    type Err = Error;

    fn from_str(spec: &str) -> Result<Self> {
        let mut s = Self {
            features: 64,
            atoms: 32,
            sparsity: 3,
            samples: 5000,
            test: 0,
            noise: 0.05,
        };
        let mut test = None;
        let known = [
            "features", "atoms", "classes", "sparsity", "samples", "test", "noise",
        ];
        for (k, v) in key_values(spec, &known, &[("classes", "atoms")])? {
            match k {
                "features" => s.features = number(spec, k, v)?,
                "atoms" | "classes" => s.atoms = number(spec, k, v)?,
                "sparsity" => s.sparsity = number(spec, k, v)?,
                "samples" => s.samples = number(spec, k, v)?,
                "test" => test = Some(number(spec, k, v)?),
                _ => s.noise = number(spec, k, v)?,
            }
        }
        s.test = test.unwrap_or(s.samples / 5);
        if s.features == 0 || s.atoms == 0 || s.samples == 0 {
            return Err(Error::Spec {
                spec: spec.to_string(),
                reason: "features, atoms and samples must be positive".into(),
            });
        }
        if s.sparsity == 0 || s.sparsity > s.atoms || !(s.noise.is_finite() && s.noise >= 0.0) {
            return Err(Error::Spec {
                spec: spec.to_string(),
                reason: "sparsity must be in 1..=atoms and noise ≥ 0".into(),
            });
        }
        Ok(s)
    }
}

impl SignalSpec {
    /// Refuses a spec whose samples would exceed [`Limits::max_data_bytes`], whose hidden
    /// dictionary (`atoms × features`) would exceed [`Limits::max_w_bytes`], or whose
    /// features exceed [`Limits::max_features`]; `at` names the spec in the error.
    ///
    /// # Errors
    /// [`Error::Limit`] with the bytes needed and the limit.
    pub fn check_limits(&self, limits: &Limits, at: &str) -> Result<()> {
        limits.check_features(at, "features", self.features as u64)?;
        limits.check_matrix(at, "hidden dictionary", self.atoms, self.features)?;
        check_dense_samples(limits, at, self.samples, self.test, self.features)
    }
}

/// Signals `x = D c + noise` with a hidden `features × atoms` dictionary `D` of unit-norm
/// Gaussian atoms and `sparsity` standard-normal coefficients per signal (label 0).
/// Returns dense `(train, test)`.
pub fn signals(spec: &SignalSpec, seed: u64) -> (Vec<Example>, Vec<Example>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0051_90a1);
    let (d, k) = (spec.features, spec.atoms);
    let mut dict = Array2::from_shape_fn((k, d), |_| normal(&mut rng));
    for mut atom in dict.rows_mut() {
        let n = atom.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
        atom.mapv_inplace(|v| v / n);
    }
    let draw = |rng: &mut ChaCha8Rng| -> Example {
        let mut x: Vec<f32> = (0..d).map(|_| normal(rng) * spec.noise).collect();
        let chosen = rand::seq::index::sample(rng, k, spec.sparsity);
        for a in chosen.iter() {
            let c = normal(rng);
            for (xi, di) in x.iter_mut().zip(dict.row(a)) {
                *xi += c * di;
            }
        }
        Example::new(Features::Dense(x), 0, 0)
    };
    let train = (0..spec.samples).map(|_| draw(&mut rng)).collect();
    let test = (0..spec.test).map(|_| draw(&mut rng)).collect();
    (numbered(train), numbered(test))
}
