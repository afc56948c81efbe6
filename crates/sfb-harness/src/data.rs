//! Data sources → [`Problem`].

use std::path::Path;
use std::sync::Arc;

use sfb_models::data::{self, CsvOptions, LibsvmOptions};
use sfb_models::{ClassificationSpec, ClusterSpec, Problem, SignalSpec, synthetic};

use crate::spec::{DataSource, ModelChoice};
use crate::{Error, Result};

impl DataSource {
    /// Reads the files, or generates `model`'s kind of synthetic data, with `seed`.
    ///
    /// Files are densified for the models that want dense samples (DML, sparse coding);
    /// without a test file, a seeded `holdout` fraction of the training file is held out.
    /// Synthetic data: classification for MLR/L2-MLR, clusters for DML, sparse signals
    /// (one "class") for sparse coding.
    ///
    /// # Errors
    /// [`Error::Models`] for unreadable or malformed files, [`Error::NoFeatures`],
    /// [`Error::OutOfRange`] for a holdout outside (0, 1), [`Error::Synthetic`] for a bad
    /// synthetic spec.
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
        match self {
            DataSource::Files {
                train,
                test,
                holdout,
                features,
            } => load_files(train, test.as_deref(), *holdout, *features, model, seed),
            DataSource::Synthetic(spec) => {
                let (train, test, classes, features) = match model {
                    ModelChoice::Mlr | ModelChoice::L2mlr { .. } => {
                        let s: ClassificationSpec = spec.parse().map_err(Error::Synthetic)?;
                        let (tr, te) = synthetic::classification(&s, seed);
                        (tr, te, s.classes, s.features)
                    }
                    ModelChoice::Dml { .. } => {
                        let s: ClusterSpec = spec.parse().map_err(Error::Synthetic)?;
                        let (tr, te) = synthetic::clusters(&s, seed);
                        (tr, te, s.classes, s.features)
                    }
                    ModelChoice::Sc { .. } => {
                        let s: SignalSpec = spec.parse().map_err(Error::Synthetic)?;
                        let (tr, te) = synthetic::signals(&s, seed);
                        (tr, te, 1, s.features)
                    }
                };
                Ok(Problem {
                    train: Arc::new(train),
                    test: Arc::new(test),
                    classes,
                    features,
                })
            }
        }
    }
}

fn is_csv(p: &Path) -> bool {
    p.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

fn load_files(
    path: &Path,
    test: Option<&Path>,
    holdout: f64,
    features: Option<usize>,
    model: &ModelChoice,
    seed: u64,
) -> Result<Problem> {
    let mut train = if is_csv(path) {
        data::read_csv(
            path,
            &CsvOptions {
                features,
                ..CsvOptions::default()
            },
        )?
    } else {
        data::read_libsvm(
            path,
            &LibsvmOptions {
                features,
                ..LibsvmOptions::default()
            },
        )?
    };
    if model.dense() {
        train.densify();
    }
    let (classes, features) = (train.labels.classes(), train.features);
    if features == 0 {
        return Err(Error::NoFeatures {
            path: path.to_path_buf(),
        });
    }
    let (train, test) = match test {
        Some(tp) => {
            let mut test = if is_csv(tp) {
                data::read_csv(tp, &CsvOptions::like(&train))?
            } else {
                data::read_libsvm(tp, &LibsvmOptions::like(&train))?
            };
            if model.dense() {
                test.densify();
            }
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
    Ok(Problem {
        train: Arc::new(train),
        test: Arc::new(test),
        classes,
        features,
    })
}
