//! Data sources → [`Problem`].

use std::path::Path;
use std::sync::Arc;

use sfb_models::data::{self, LabelMap};
use sfb_models::stream::{LineRule, StreamOptions, Streamed};
use sfb_models::{
    ClassificationSpec, ClusterSpec, Limits, Problem, SignalSpec, Warning, synthetic,
};

use crate::spec::{DataSource, ModelChoice};
use crate::{Error, Result};

impl DataSource {
    /// Reads the files, or generates `model`'s kind of synthetic data, with `seed`.
    ///
    /// Files are densified for the models that want dense samples (DML, sparse coding);
    /// without a test file, a seeded `holdout` fraction of the training file is held out.
    /// Everything is held in memory, whatever `stream` says: [`Cluster::from_spec`]
    /// reads a streaming source with [`stream`](Self::stream) instead.
    ///
    /// [`Cluster::from_spec`]: crate::Cluster::from_spec
    /// Synthetic data: classification for MLR/L2-MLR, clusters for DML, sparse signals
    /// (one "class") for sparse coding.
    ///
    /// Bounded by [`Limits::from_env`] (defaults, raised by `SFB_MAX_LINE_BYTES`,
    /// `SFB_MAX_FEATURES`, `SFB_MAX_DATA_BYTES`, `SFB_MAX_W_BYTES`); every [`Warning`] is
    /// logged as a `WARN` line (see [`load_within`](Self::load_within) to get them).
    ///
    /// # Errors
    /// [`Error::Models`] for unreadable or malformed files, data or W beyond the limits
    /// ([`sfb_models::Error::Limit`]) or a bad limit variable, [`Error::NoFeatures`],
    /// [`Error::OutOfRange`] for a holdout outside (0, 1), [`Error::Synthetic`] for a bad
    /// synthetic spec (an unknown or repeated key, a value out of range).
    ///
    /// # Example
    /// ```
    /// use sfb_harness::{DataSource, ModelChoice};
    /// let p = DataSource::Synthetic("classes=3,features=5,samples=100".into())
    ///     .load(&ModelChoice::Mlr, 7)?;
    /// assert_eq!((p.classes, p.features, p.train.len(), p.test.len()), (3, 5, 100, 20));
    /// # Ok::<(), sfb_harness::Error>(())
    /// ```
    pub fn load(&self, model: &ModelChoice, seed: u64) -> Result<Problem> {
        let limits = Limits::from_env()?;
        let (problem, warnings) = self.load_within(model, seed, &limits)?;
        for w in &warnings {
            tracing::warn!("{w}");
        }
        Ok(problem)
    }

    /// [`load`](Self::load) within `limits`, returning the warnings instead of logging
    /// them: label warnings (one class, real-valued labels) for the models that use labels,
    /// a CSV header skipped, no held-out samples.
    ///
    /// Everything is checked before it is allocated: synthetic shapes before generating,
    /// file lines and sizes while reading, the dense form before densifying, W (and
    /// SDCA's duals) before any model exists.
    ///
    /// # Errors
    /// As [`load`](Self::load).
    pub fn load_within(
        &self,
        model: &ModelChoice,
        seed: u64,
        limits: &Limits,
    ) -> Result<(Problem, Vec<Warning>)> {
        let (problem, mut warnings, source) = match self {
            DataSource::Files {
                train,
                test,
                holdout,
                features,
                ..
            } => {
                let (p, w) = load_files(
                    train,
                    test.as_deref(),
                    *holdout,
                    *features,
                    model,
                    seed,
                    limits,
                )?;
                (p, w, train.display().to_string())
            }
            DataSource::Synthetic(spec) => {
                let at = format!("synthetic data {spec:?}");
                let check = |classes, features, samples| {
                    model
                        .spec()
                        .check_limits(classes, features, samples, limits, &at)
                };
                let (train, test, classes, features) = match model {
                    ModelChoice::Mlr | ModelChoice::L2mlr { .. } => {
                        let s: ClassificationSpec = spec.parse().map_err(Error::Synthetic)?;
                        s.check_limits(limits, &at)?;
                        check(s.classes, s.features, s.samples)?;
                        let (tr, te) = synthetic::classification(&s, seed);
                        (tr, te, s.classes, s.features)
                    }
                    ModelChoice::Dml { .. } => {
                        let s: ClusterSpec = spec.parse().map_err(Error::Synthetic)?;
                        s.check_limits(limits, &at)?;
                        check(s.classes, s.features, s.samples)?;
                        let (tr, te) = synthetic::clusters(&s, seed);
                        (tr, te, s.classes, s.features)
                    }
                    ModelChoice::Sc { .. } => {
                        let s: SignalSpec = spec.parse().map_err(Error::Synthetic)?;
                        s.check_limits(limits, &at)?;
                        check(1, s.features, s.samples)?;
                        let (tr, te) = synthetic::signals(&s, seed);
                        (tr, te, 1, s.features)
                    }
                };
                let p = Problem {
                    train: Arc::new(train),
                    test: Arc::new(test),
                    classes,
                    features,
                    labels: LabelMap::identity(classes),
                };
                (p, Vec::new(), at)
            }
        };
        if problem.test.is_empty() {
            warnings.push(Warning::NoHeldOut { source });
        }
        Ok((problem, warnings))
    }
}

impl DataSource {
    /// The files of a streaming source (`stream: true`), scanned for what every peer must
    /// know ([`Streamed::open`]: `D`, classes, counts, the scaling `scale`, the mean ℓ1
    /// norm) without keeping samples; `None` for any other source (use
    /// [`load`](Self::load)). A peer then reads its own part with [`Streamed::shard`].
    ///
    /// The held-out split is [`sfb_models::stream::LineRule`] with `seed` and `holdout`
    /// (none with a test file). Bounded by [`Limits::from_env`]; W of `model`'s shape is
    /// checked as by [`load`](Self::load), and [`Limits::max_data_bytes`] bounds what one
    /// peer holds. Warnings are logged as `WARN` lines.
    ///
    /// # Errors
    /// [`Error::Models`] for an unreadable or malformed file (naming file and line), or
    /// limits exceeded; [`Error::NoFeatures`]; [`Error::OutOfRange`] for a holdout outside
    /// (0, 1).
    pub fn stream(
        &self,
        model: &ModelChoice,
        seed: u64,
        scale: sfb_models::Scale,
        intercept: bool,
    ) -> Result<Option<Streamed>> {
        let DataSource::Files {
            train,
            test,
            holdout,
            features,
            stream: true,
        } = self
        else {
            return Ok(None);
        };
        if test.is_none() && !(*holdout > 0.0 && *holdout < 1.0) {
            return Err(Error::OutOfRange {
                field: "data.holdout",
                expected: "in (0, 1)",
                got: *holdout,
            });
        }
        let limits = Limits::from_env()?;
        let opts = StreamOptions {
            rule: LineRule {
                seed,
                holdout: *holdout,
            },
            features: *features,
            scale,
            intercept,
            limits,
        };
        let s = Streamed::open(train, test.as_deref(), &opts)?;
        if s.features() == 0 {
            return Err(Error::NoFeatures {
                path: train.to_path_buf(),
            });
        }
        let at = train.display().to_string();
        let samples = usize::try_from(s.train_samples()).unwrap_or(usize::MAX);
        model
            .spec()
            .check_limits(s.classes(), s.features(), samples, &limits, &at)?;
        for w in s.warnings() {
            tracing::warn!("{w}");
        }
        if s.held_out_samples() == 0 {
            tracing::warn!("{}", Warning::NoHeldOut { source: at });
        }
        Ok(Some(s))
    }
}

fn load_files(
    path: &Path,
    test: Option<&Path>,
    holdout: f64,
    features: Option<usize>,
    model: &ModelChoice,
    seed: u64,
    limits: &Limits,
) -> Result<(Problem, Vec<Warning>)> {
    let mut train = data::read_file(path, (features, None, None), limits)?;
    let (classes, features) = (train.labels.classes(), train.features);
    let labels = train.labels.clone();
    if features == 0 {
        return Err(Error::NoFeatures {
            path: path.to_path_buf(),
        });
    }
    let at = path.display().to_string();
    model
        .spec()
        .check_limits(classes, features, train.samples.len(), limits, &at)?;
    if model.dense() {
        train.densify_within(limits, &at)?;
    }
    let mut warnings = std::mem::take(&mut train.warnings);
    if matches!(model, ModelChoice::Sc { .. }) {
        // Sparse coding ignores labels.
        warnings.retain(|w| {
            !matches!(
                w,
                Warning::OneClass { .. } | Warning::ContinuousLabels { .. }
            )
        });
    }
    let (train, test) = match test {
        Some(tp) => {
            let mut test = data::read_file(tp, train.shape(), limits)?;
            if model.dense() {
                test.densify_within(limits, &tp.display().to_string())?;
            }
            warnings.append(&mut test.warnings);
            (train.samples, test.samples)
        }
        None => {
            if !(holdout > 0.0 && holdout < 1.0) {
                return Err(Error::OutOfRange {
                    field: "data.holdout",
                    expected: "in (0, 1)",
                    got: holdout,
                });
            }
            train.split(holdout, seed)
        }
    };
    let problem = Problem {
        train: Arc::new(train),
        test: Arc::new(test),
        classes,
        features,
        labels,
    };
    Ok((problem, warnings))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use sfb_models::LimitKind;

    use super::*;

    fn synthetic(spec: &str, model: &ModelChoice) -> Result<(Problem, Vec<Warning>)> {
        DataSource::Synthetic(spec.into()).load_within(model, 3, &Limits::default())
    }

    fn file(text: &str, suffix: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new().suffix(suffix).tempfile().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    fn files(path: &Path, holdout: f64) -> DataSource {
        DataSource::Files {
            train: path.to_path_buf(),
            test: None,
            holdout,
            features: None,
            stream: false,
        }
    }

    #[test]
    fn no_held_out_samples_warn() {
        let (p, w) =
            synthetic("classes=3,features=4,samples=50,test=0", &ModelChoice::Mlr).unwrap();
        assert!(p.test.is_empty());
        assert_eq!(
            w,
            [Warning::NoHeldOut {
                source: "synthetic data \"classes=3,features=4,samples=50,test=0\"".into()
            }]
        );
        assert_eq!(
            w[0].to_string(),
            "synthetic data \"classes=3,features=4,samples=50,test=0\": no held-out samples: \
             no objective or accuracy will be computed"
        );
        let (_, w) = synthetic("classes=3,features=4,samples=50", &ModelChoice::Mlr).unwrap();
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn synthetic_limits_and_duplicate_keys_are_refused_before_generating() {
        let err = synthetic("classes=100000,features=100000", &ModelChoice::Mlr).unwrap_err();
        assert_eq!(
            err.to_string(),
            "synthetic data \"classes=100000,features=100000\": teacher (100000 × 100000 f32) \
             needs 40000000000 bytes (37.3 GiB), over the W-size limit of 2147483648 bytes \
             (raise it with SFB_MAX_W_BYTES=N)"
        );
        let err = synthetic("classes=4,classes=8", &ModelChoice::Mlr).unwrap_err();
        assert!(err.to_string().contains("key classes given twice"), "{err}");
        // The model's own matrix: DML's latent × D, checked before the data is drawn.
        let dml = ModelChoice::Dml {
            latent: 1 << 20,
            margin: 1.0,
            candidates: 32,
        };
        let err = synthetic("features=1024", &dml).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Models(sfb_models::Error::Limit {
                    limit: LimitKind::WBytes,
                    ..
                })
            ),
            "{err}"
        );
    }

    #[test]
    fn file_warnings_are_returned_and_label_ones_dropped_for_sparse_coding() {
        let f = file("label,a,b\n1,0.5,1\n1,2,-1\n1,0,1\n", ".csv");
        let (p, w) = files(f.path(), 0.3)
            .load_within(&ModelChoice::Mlr, 1, &Limits::default())
            .unwrap();
        assert_eq!(
            (p.classes, p.features, p.train.len() + p.test.len()),
            (1, 2, 3)
        );
        assert!(matches!(
            w[..],
            [
                Warning::HeaderSkipped { line: 1, .. },
                Warning::OneClass { .. }
            ]
        ));
        let sc = ModelChoice::Sc {
            atoms: 2,
            lambda: 0.1,
            sweeps: 1,
            decay: 0.0,
        };
        let (_, w) = files(f.path(), 0.3)
            .load_within(&sc, 1, &Limits::default())
            .unwrap();
        assert!(matches!(w[..], [Warning::HeaderSkipped { .. }]), "{w:?}");
    }

    #[test]
    fn file_limits_apply_to_reading_and_densifying() {
        let f = file("1 1:1\n2 4000000000:1\n", ".svm");
        let err = files(f.path(), 0.2)
            .load_within(&ModelChoice::Mlr, 1, &Limits::default())
            .unwrap_err();
        assert!(
            err.to_string()
                .ends_with(":2: feature index 4000000000, over the feature-count limit of 33554432 features (raise it with SFB_MAX_FEATURES=N)"),
            "{err}"
        );
        // Sparse data whose dense form is too large for a dense model.
        let f = file("1 1:1\n2 20000:1\n1 5:1\n", ".svm");
        let small = Limits {
            max_data_bytes: 100_000,
            ..Limits::default()
        };
        files(f.path(), 0.3)
            .load_within(&ModelChoice::Mlr, 1, &small)
            .unwrap();
        let dml = ModelChoice::Dml {
            latent: 2,
            margin: 1.0,
            candidates: 32,
        };
        let err = files(f.path(), 0.3)
            .load_within(&dml, 1, &small)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("3 samples × 20000 features stored densely need"),
            "{err}"
        );
        // W of the file's shape.
        let tiny_w = Limits {
            max_w_bytes: 1000,
            ..Limits::default()
        };
        let err = files(f.path(), 0.3)
            .load_within(&ModelChoice::Mlr, 1, &tiny_w)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("W of mlr (2 × 20000 f32) needs 160000 bytes"),
            "{err}"
        );
    }
}
