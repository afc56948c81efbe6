//! Seeded synthetic data.

use ndarray::Array2;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Error, Example, Features, Result};

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
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| fail(format!("{part:?} is not key=value")))?;
            let num = |v: &str| -> Result<f64> {
                v.trim()
                    .parse::<f64>()
                    .map_err(|_| fail(format!("{k} = {v:?} is not a number")))
            };
            let int = |v: &str| -> Result<usize> {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| fail(format!("{k} = {v:?} is not a non-negative integer")))
            };
            match k.trim() {
                "classes" => s.classes = int(v)?,
                "features" => s.features = int(v)?,
                "samples" => s.samples = int(v)?,
                "test" => test = Some(int(v)?),
                "density" => s.density = num(v)?,
                "noise" => s.noise = num(v)? as f32,
                "sep" => s.sep = num(v)? as f32,
                other => {
                    return Err(fail(format!(
                        "unknown key {other:?} (known: classes, features, samples, test, density, noise, sep)"
                    )));
                }
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
        Ok(s)
    }
}

/// A synthetic classification problem: a random linear teacher labels random inputs.
///
/// Returns `(train, test)`, both drawn from the same distribution; everything is a
/// function of `spec` and `seed`.
pub fn classification(spec: &ClassificationSpec, seed: u64) -> (Vec<Example>, Vec<Example>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (j, d) = (spec.classes, spec.features);
    let nnz_expect = (spec.density * d as f64).max(1.0);
    let teacher_scale = spec.sep / (nnz_expect as f32).sqrt();
    let teacher = Array2::from_shape_fn((j, d), |_| normal(&mut rng) * teacher_scale);
    let teacher = teacher.as_standard_layout().into_owned();
    let tw = teacher.as_slice().expect("standard layout");
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
        let y = (0..j)
            .map(|c| {
                let g: f32 = -(-(rng.random_range(f32::MIN_POSITIVE..1.0f32)).ln()).ln();
                (c, x.dot(&tw[c * d..(c + 1) * d]) + spec.noise * g)
            })
            .fold(
                (0, f32::NEG_INFINITY),
                |b, (c, z)| if z > b.1 { (c, z) } else { b },
            )
            .0 as u32;
        Example { x, y }
    };
    let train = (0..spec.samples).map(|_| draw(&mut rng)).collect();
    let test = (0..spec.test).map(|_| draw(&mut rng)).collect();
    (train, test)
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
