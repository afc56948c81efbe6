//! Labelled examples with dense or sparse features.

/// A feature vector of length `D`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Features {
    /// All `D` values.
    Dense(Vec<f32>),
    /// Non-zeros only; indices ascending and `< D`.
    Sparse {
        /// Column indices.
        indices: Vec<u32>,
        /// Values.
        values: Vec<f32>,
    },
}

impl Features {
    /// `w · x` for a row `w` of length `D`.
    pub fn dot(&self, w: &[f32]) -> f32 {
        match self {
            Features::Dense(x) => dot(w, x),
            Features::Sparse { indices, values } => indices
                .iter()
                .zip(values)
                .map(|(&c, &x)| w[c as usize] * x)
                .sum(),
        }
    }

    /// Number of stored values.
    pub fn nnz(&self) -> usize {
        match self {
            Features::Dense(x) => x.len(),
            Features::Sparse { values, .. } => values.len(),
        }
    }

    /// `‖x‖²`.
    pub fn sq_norm(&self) -> f32 {
        match self {
            Features::Dense(x) => dot(x, x),
            Features::Sparse { values, .. } => dot(values, values),
        }
    }

    /// `x · y` of two feature vectors of the same `D` (any mix of dense and sparse).
    pub fn dot_features(&self, other: &Features) -> f32 {
        match (self, other) {
            (Features::Dense(a), b) => b.dot(a),
            (a, Features::Dense(b)) => a.dot(b),
            (
                Features::Sparse {
                    indices: ia,
                    values: va,
                },
                Features::Sparse {
                    indices: ib,
                    values: vb,
                },
            ) => {
                let (mut p, mut q, mut s) = (0, 0, 0f32);
                while p < ia.len() && q < ib.len() {
                    match ia[p].cmp(&ib[q]) {
                        std::cmp::Ordering::Less => p += 1,
                        std::cmp::Ordering::Greater => q += 1,
                        std::cmp::Ordering::Equal => {
                            s += va[p] * vb[q];
                            p += 1;
                            q += 1;
                        }
                    }
                }
                s
            }
        }
    }

    /// Writes the dense form into `out` (length `D`, at least [`min_dim`](Self::min_dim)).
    pub fn write_dense(&self, out: &mut [f32]) {
        match self {
            Features::Dense(x) => {
                out[..x.len()].copy_from_slice(x);
                out[x.len()..].fill(0.0);
            }
            Features::Sparse { indices, values } => {
                out.fill(0.0);
                for (&c, &v) in indices.iter().zip(values) {
                    out[c as usize] = v;
                }
            }
        }
    }

    /// The dense form, of length `d` (at least [`min_dim`](Self::min_dim)).
    pub fn to_dense(&self, d: usize) -> Vec<f32> {
        let mut out = vec![0.0; d];
        self.write_dense(&mut out);
        out
    }

    /// Largest index + 1 (the dense length for dense features).
    pub fn min_dim(&self) -> usize {
        match self {
            Features::Dense(x) => x.len(),
            Features::Sparse { indices, .. } => indices.last().map_or(0, |&i| i as usize + 1),
        }
    }
}

/// A labelled example: features, a class in `0..J` and its index in its data set.
///
/// Every built-in model takes this one sample type, so a program can choose the model at
/// run time ([`AnyModel`](crate::AnyModel)). Models that need no label ignore `y` (sparse
/// coding); models that keep per-sample state find it by `id` (SDCA's dual variables).
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// Features.
    pub x: Features,
    /// Class index (0 for unlabelled data).
    pub y: u32,
    /// Index of the sample in its data set (row of its file, counting samples from 0);
    /// unique within a training set.
    pub id: u32,
}

impl Example {
    /// An example with the given features, class and index.
    pub fn new(x: Features, y: u32, id: u32) -> Self {
        Self { x, y, id }
    }
}

/// Dot product, written to auto-vectorize.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}
