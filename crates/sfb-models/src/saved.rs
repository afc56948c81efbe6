//! Trained models as files: what a run keeps, and what predicts on new data.
//!
//! A [`SavedModel`] holds the trained matrix, the model's kind and hyper-parameters, and
//! the data's [`Preprocess`] (the scaling fitted on the training set, the intercept, the
//! label values of the classes), so [`predict`](SavedModel::predict) sees new data exactly
//! as training did. For `l2mlr` (SDCA) the file holds the primal W = Z/λ, not the dual
//! bookkeeping of the replica.
//!
//! # File format (version [`FORMAT`])
//! `SFBMODEL` (8 bytes), the format version (u32 LE), the payload's length (u64 LE), the
//! payload, and a CRC-32 of everything after the magic (u32 LE). The payload is
//! length-prefixed sections ([`sfb_core::checkpoint::ByteWriter`]): the writing sfb's
//! version, the model kind and its parameters, W's shape and values (f32 LE, row-major),
//! then the preprocessing. A file of another format version, kind, or a corrupted one is
//! refused in one line naming why ([`SavedModel::decode`]).
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use sfb_models::data::LabelMap;
//! use sfb_models::saved::SavedModel;
//! use sfb_models::{Example, Features, ModelSpec, Problem, Scale};
//! let x = |v: f32, y, i| Example::new(Features::Dense(vec![v]), y, i);
//! let p = Problem {
//!     train: Arc::new(vec![x(-2.0, 0, 0), x(4.0, 1, 1)]),
//!     test: Arc::new(vec![]),
//!     classes: 2,
//!     features: 1,
//!     labels: LabelMap::from_labels([-1.0, 1.0]),
//! };
//! let (_, prep) = p.prepare(Scale::Standard, true, &Default::default())?;
//! // Class 1 scores the (standardized) feature, class 0 the intercept: W is 2 × (1 + 1).
//! let w = ndarray::array![[0.0, 0.5], [1.0, 0.0]];
//! let m = SavedModel::new(ModelSpec::Mlr, prep, w)?;
//! let back = SavedModel::decode(&m.encode()).unwrap();
//! assert_eq!(back.predict_label(&Features::Dense(vec![4.0])), 1.0);
//! assert_eq!(back.predict_label(&Features::Dense(vec![-2.0])), -1.0);
//! let mut bytes = m.encode();
//! bytes[30] ^= 1;
//! assert_eq!(
//!     SavedModel::decode(&bytes).unwrap_err(),
//!     "checksum mismatch: the file is corrupted"
//! );
//! # Ok::<(), sfb_models::Error>(())
//! ```

use std::path::Path;

use ndarray::{Array2, ArrayView2};
use sfb_core::Evaluation;
use sfb_core::checkpoint::{ByteReader, ByteWriter};

use crate::{Error, Example, Features, ModelSpec, Preprocess, Result, mlr, sdca};

/// The first bytes of a model file.
pub const MAGIC: &[u8; 8] = b"SFBMODEL";
/// The format version this sfb writes and reads.
pub const FORMAT: u32 = 1;

/// A trained model with what it needs to predict; see the [module docs](self).
#[derive(Debug, Clone, PartialEq)]
pub struct SavedModel {
    /// The model's kind and hyper-parameters.
    pub spec: ModelSpec,
    /// How records become samples: scaling, intercept, labels.
    pub prep: Preprocess,
    /// The trained matrix: a classifier's W (`classes × features`, the intercept in the
    /// last column), DML's projection, or sparse coding's dictionary.
    pub w: Array2<f32>,
    /// The sfb version that wrote it.
    pub version: String,
}

fn refused(reason: impl Into<String>) -> Error {
    Error::Parameter {
        name: "model",
        value: String::new(),
        reason: reason.into(),
    }
}

impl SavedModel {
    /// The model of `spec` trained into the replica `w` on data prepared by `prep` (for
    /// `l2mlr` (SDCA) `w` is the dual replica Z; the primal W is kept,
    /// [`sdca::primal_w`]).
    ///
    /// # Errors
    /// [`Error::Parameter`] when `w`'s shape does not fit the model on `prep`'s features,
    /// or holds a non-finite value.
    pub fn new(spec: ModelSpec, prep: Preprocess, w: Array2<f32>) -> Result<Self> {
        let w = match spec {
            ModelSpec::L2Mlr { lambda, intercept } => sdca::primal_w(w.view(), lambda, intercept),
            _ => w,
        };
        let m = Self {
            spec,
            prep,
            w,
            version: env!("CARGO_PKG_VERSION").to_string(),
        };
        m.check().map_err(refused)?;
        Ok(m)
    }

    /// Whether this model classifies (MLR and L2-MLR): [`predict`](Self::predict) gives a
    /// class; otherwise it transforms ([`transform`](Self::transform)).
    pub fn is_classifier(&self) -> bool {
        matches!(
            self.spec,
            ModelSpec::Mlr | ModelSpec::L2Mlr { .. } | ModelSpec::MlrPrimal { .. }
        )
    }

    fn check(&self) -> std::result::Result<(), String> {
        let d = self.prep.features();
        let (rows, cols) = self.w.dim();
        let want_cols = match self.spec {
            ModelSpec::SparseCoding { .. } => rows,
            _ => cols,
        };
        if want_cols != d {
            return Err(format!(
                "W is {rows} × {cols}, which does not fit the data's {d} features"
            ));
        }
        if self.is_classifier() && rows != self.prep.labels().classes() {
            return Err(format!(
                "W has {rows} rows for {} classes",
                self.prep.labels().classes()
            ));
        }
        if self.w.iter().any(|v| !v.is_finite()) {
            return Err("W holds a non-finite value".into());
        }
        Ok(())
    }

    /// The class scores `W x` of raw features `x` (as read from a file: scaled here).
    pub fn scores(&self, x: &Features) -> Vec<f32> {
        let x = self.prep.apply(x);
        let w = self.w.as_standard_layout();
        let d = w.ncols();
        let w = w.as_slice().expect("standard layout");
        (0..self.w.nrows())
            .map(|c| x.dot(&w[c * d..(c + 1) * d]))
            .collect()
    }

    /// The class of raw features `x` (index into the classes; the first of a tie).
    pub fn predict(&self, x: &Features) -> u32 {
        let s = self.scores(x);
        s.iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |b, (i, &v)| if v > b.1 { (i, v) } else { b },
            )
            .0 as u32
    }

    /// The label value of [`predict`](Self::predict)'s class, as the training file wrote
    /// it.
    pub fn predict_label(&self, x: &Features) -> f64 {
        let c = self.predict(x);
        self.prep.labels().label(c).unwrap_or(f64::from(c))
    }

    /// DML's embedding `L x` or, for any model, `W x` of raw features `x`.
    pub fn transform(&self, x: &Features) -> Vec<f32> {
        self.scores(x)
    }

    /// Mean cross-entropy and accuracy of a classifier on raw samples (classes as in
    /// [`Preprocess::labels`]): what the run's held-out evaluation reported for `mlr`.
    ///
    /// # Errors
    /// [`Error::Parameter`] for a model that does not classify.
    pub fn evaluate(&self, data: &[Example]) -> Result<Evaluation> {
        if !self.is_classifier() {
            return Err(refused(format!(
                "a {} model does not classify: evaluate it with sfb run",
                self.spec.name()
            )));
        }
        let prepared = self.prep.apply_all(data);
        Ok(mlr::evaluate(self.w.view(), &prepared))
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = ByteWriter::new();
        p.bytes(self.version.as_bytes());
        let (kind, params) = kind_params(&self.spec);
        p.bytes(kind.as_bytes()).f64s(&params);
        let w = self.w.as_standard_layout();
        p.u64(w.nrows() as u64)
            .u64(w.ncols() as u64)
            .f32s(w.as_slice().expect("standard layout"));
        let mut prep = ByteWriter::new();
        self.prep.encode(&mut prep);
        p.bytes(&prep.finish());
        let payload = p.finish();
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(&payload);
        let crc = crc32fast::hash(&out[MAGIC.len()..]);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Checks and reads a file's bytes.
    ///
    /// # Errors
    /// The reason, in one line: not a model file, another format version, truncated or
    /// trailing bytes, a checksum mismatch, an unknown model kind, a W that does not fit
    /// its data.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Self, String> {
        let n = bytes.len();
        if n < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            return Err("not an sfb model file (no SFBMODEL header)".into());
        }
        let head = MAGIC.len() + 12;
        if n < head + 4 {
            return Err(format!(
                "truncated: {n} bytes, at least {} expected",
                head + 4
            ));
        }
        let format = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if format != FORMAT {
            return Err(format!(
                "model file format {format}, this sfb reads format {FORMAT}"
            ));
        }
        let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
        let expected = usize::try_from(len)
            .ok()
            .and_then(|l| l.checked_add(head + 4))
            .ok_or_else(|| format!("a payload of {len} bytes cannot be"))?;
        if n != expected {
            return Err(if n < expected {
                format!("truncated: {n} bytes where the header says {expected}")
            } else {
                format!("{n} bytes where the header says {expected}: trailing bytes")
            });
        }
        let end = n - 4;
        let crc = u32::from_le_bytes(bytes[end..].try_into().expect("4 bytes"));
        if crc32fast::hash(&bytes[MAGIC.len()..end]) != crc {
            return Err("checksum mismatch: the file is corrupted".into());
        }
        let e = |e: sfb_core::checkpoint::ReadError| e.to_string();
        let mut r = ByteReader::new(&bytes[head..end]);
        let version = String::from_utf8_lossy(r.bytes().map_err(e)?).into_owned();
        let kind = String::from_utf8_lossy(r.bytes().map_err(e)?).into_owned();
        let params = r.f64s(None).map_err(e)?;
        let spec = spec_of(&kind, &params)?;
        let rows = usize::try_from(r.u64().map_err(e)?).map_err(|e| e.to_string())?;
        let cols = usize::try_from(r.u64().map_err(e)?).map_err(|e| e.to_string())?;
        let cells = rows
            .checked_mul(cols)
            .ok_or_else(|| format!("W of {rows} × {cols} cannot be"))?;
        let w = r.f32s(Some(cells)).map_err(e)?;
        let w = Array2::from_shape_vec((rows, cols), w).map_err(|e| e.to_string())?;
        let mut pr = ByteReader::new(r.bytes().map_err(e)?);
        let prep = Preprocess::decode(&mut pr)?;
        pr.finish().map_err(e)?;
        r.finish().map_err(e)?;
        let m = Self {
            spec,
            prep,
            w,
            version,
        };
        m.check()?;
        Ok(m)
    }

    /// Writes the model to `path` as checkpoints are written: to a temporary file in the
    /// same folder, synced, renamed into place, the folder synced (a crash leaves the old
    /// file or the new one, never half of one).
    ///
    /// # Errors
    /// [`Error::Io`] with the operating system's reason.
    pub fn save(&self, path: &Path) -> Result<()> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(format!(".{name}.tmp"));
        let written = (|| {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&self.encode())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        })();
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }

    /// Reads a model file.
    ///
    /// # Errors
    /// [`Error::Io`]; [`Error::ModelFile`] naming the file and why it is refused.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::decode(&bytes).map_err(|reason| Error::ModelFile {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// The trained matrix.
    pub fn w(&self) -> ArrayView2<'_, f32> {
        self.w.view()
    }
}

fn kind_params(spec: &ModelSpec) -> (&'static str, Vec<f64>) {
    match *spec {
        ModelSpec::Mlr => ("mlr", vec![]),
        ModelSpec::L2Mlr { lambda, intercept } => {
            ("l2mlr-sdca", vec![lambda, f64::from(u8::from(intercept))])
        }
        ModelSpec::MlrPrimal { lambda, saga } => {
            ("mlr-primal", vec![lambda, f64::from(u8::from(saga))])
        }
        ModelSpec::Dml {
            latent,
            margin,
            candidates,
        } => (
            "dml",
            vec![latent as f64, f64::from(margin), candidates as f64],
        ),
        ModelSpec::SparseCoding {
            atoms,
            lambda,
            sweeps,
            decay,
        } => (
            "sc",
            vec![
                atoms as f64,
                f64::from(lambda),
                sweeps as f64,
                f64::from(decay),
            ],
        ),
    }
}

fn spec_of(kind: &str, p: &[f64]) -> std::result::Result<ModelSpec, String> {
    let want = |n: usize| {
        if p.len() == n {
            Ok(())
        } else {
            Err(format!(
                "model kind {kind} with {} parameters, {n} expected",
                p.len()
            ))
        }
    };
    Ok(match kind {
        "mlr" => {
            want(0)?;
            ModelSpec::Mlr
        }
        // Files of 0.1 before the unregularized intercept hold λ alone.
        "l2mlr-sdca" if p.len() == 1 => ModelSpec::L2Mlr {
            lambda: p[0],
            intercept: false,
        },
        "l2mlr-sdca" => {
            want(2)?;
            ModelSpec::L2Mlr {
                lambda: p[0],
                intercept: p[1] != 0.0,
            }
        }
        "mlr-primal" => {
            want(2)?;
            ModelSpec::MlrPrimal {
                lambda: p[0],
                saga: p[1] != 0.0,
            }
        }
        "dml" => {
            want(3)?;
            ModelSpec::Dml {
                latent: p[0] as usize,
                margin: p[1] as f32,
                candidates: p[2] as usize,
            }
        }
        "sc" => {
            want(4)?;
            ModelSpec::SparseCoding {
                atoms: p[0] as usize,
                lambda: p[1] as f32,
                sweeps: p[2] as usize,
                decay: p[3] as f32,
            }
        }
        other => return Err(format!("unknown model kind {other:?}")),
    })
}

impl SavedModel {
    /// Reads a data file to predict on or evaluate, as training read it: CSV (`.csv`,
    /// label first) or LIBSVM, the model's raw `D`. With `labelled`, every label must be
    /// one the model was trained on (classes as in [`Preprocess::labels`]); without,
    /// labels are read but not used (any value), and a CSV file may have no label column
    /// (rows of `D` fields).
    ///
    /// # Errors
    /// As [`crate::data::read_csv`] / [`crate::data::read_libsvm`], naming the file and
    /// line: a row of the wrong width, a feature index past `D`, an unknown label.
    pub fn read_data(
        &self,
        path: &Path,
        labelled: bool,
        limits: &crate::Limits,
    ) -> Result<crate::data::Dataset> {
        let labels = labelled.then(|| self.prep.labels().clone());
        crate::data::read_file(path, (Some(self.prep.raw_features()), labels, None), limits)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::data::LabelMap;
    use crate::{Problem, Scale};

    fn model() -> SavedModel {
        let x = |v: [f32; 2], y, i| Example::new(Features::Dense(v.to_vec()), y, i);
        let p = Problem {
            train: Arc::new(vec![
                x([1.0, 3.0], 0, 0),
                x([3.0, 5.0], 1, 1),
                x([2.0, 4.0], 2, 2),
            ]),
            test: Arc::new(vec![]),
            classes: 3,
            features: 2,
            labels: LabelMap::from_labels([2.0, 4.0, 8.0]),
        };
        let (_, prep) = p.prepare(Scale::Auto, true, &Default::default()).unwrap();
        let w = ndarray::Array2::from_shape_fn((3, 3), |(r, c)| (r * 3 + c) as f32 * 0.25 - 1.0);
        SavedModel::new(
            ModelSpec::L2Mlr {
                lambda: 0.5,
                intercept: false,
            },
            prep,
            {
                // SDCA's replica: one more (bookkeeping) column, W = Z/λ.
                let mut z = ndarray::Array2::zeros((3, 4));
                z.slice_mut(ndarray::s![.., ..3]).assign(&(&w * 0.5));
                z
            },
        )
        .unwrap()
    }

    #[test]
    fn round_trips_bitwise_and_predicts_as_before() {
        let m = model();
        assert_eq!(m.w.dim(), (3, 3));
        let back = SavedModel::decode(&m.encode()).unwrap();
        assert_eq!(back, m);
        for x in [[1.0, 3.0], [3.0, 5.0], [-7.0, 0.5]] {
            let x = Features::Dense(x.to_vec());
            assert_eq!(back.scores(&x), m.scores(&x));
            assert_eq!(back.predict_label(&x), m.predict_label(&x));
            assert!([2.0, 4.0, 8.0].contains(&m.predict_label(&x)));
        }
    }

    #[test]
    fn every_damage_is_refused_in_one_line() {
        let good = model().encode();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"NOTAMODEL".to_vec(), "not an sfb model file"),
            (good[..good.len() - 1].to_vec(), "truncated"),
            ([good.clone(), vec![0]].concat(), "trailing bytes"),
            (
                {
                    let mut b = good.clone();
                    b[8] = 9;
                    b
                },
                "model file format 9, this sfb reads format 1",
            ),
        ];
        for (bytes, want) in cases {
            let e = SavedModel::decode(&bytes).unwrap_err();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains('\n'));
        }
        // Every single flipped bit of the payload is caught.
        for at in (20..good.len() - 4).step_by(7) {
            let mut b = good.clone();
            b[at] ^= 0x10;
            assert_eq!(
                SavedModel::decode(&b).unwrap_err(),
                "checksum mismatch: the file is corrupted"
            );
        }
    }

    #[test]
    fn a_file_of_another_model_or_shape_is_refused_naming_why() {
        let m = model();
        let mut other = m.clone();
        other.w = ndarray::Array2::zeros((3, 5));
        let e = SavedModel::decode(&other.encode()).unwrap_err();
        assert_eq!(e, "W is 3 × 5, which does not fit the data's 3 features");
        let mut nan = m.clone();
        nan.w[[0, 0]] = f32::NAN;
        assert_eq!(
            SavedModel::decode(&nan.encode()).unwrap_err(),
            "W holds a non-finite value"
        );
        assert_eq!(
            spec_of("mlp", &[]).unwrap_err(),
            "unknown model kind \"mlp\""
        );
    }
}
