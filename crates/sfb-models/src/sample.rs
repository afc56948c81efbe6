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

    /// Largest index + 1 (the dense length for dense features).
    pub fn min_dim(&self) -> usize {
        match self {
            Features::Dense(x) => x.len(),
            Features::Sparse { indices, .. } => indices.last().map_or(0, |&i| i as usize + 1),
        }
    }
}

/// A labelled example: features and a class in `0..J`.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// Features.
    pub x: Features,
    /// Class index.
    pub y: u32,
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
