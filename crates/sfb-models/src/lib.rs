//! Models for **sfb**: each a [`sfb_core::Model`] implementation a user can read as an
//! example of writing their own, plus seeded data generators and evaluation.
//!
//! - [`Mlr`]: multiclass logistic regression, `u = softmax(W a) − onehot(y)`, `v = a`.
//! - [`synthetic`]: seeded classification data ([`ClassificationSpec`]) and the shared
//!   initial W.
//! - [`Straggler`]: wraps a model with an injected per-step delay.
//!
//! # Example
//! ```
//! use sfb_models::{synthetic, ClassificationSpec, Mlr};
//! let spec: ClassificationSpec = "classes=3,features=5,samples=100".parse().unwrap();
//! let (train, test) = synthetic::classification(&spec, 42);
//! assert_eq!((train.len(), test.len()), (100, 20));
//! let w = synthetic::init_w(3, 5, 0.0, 42);
//! let eval = sfb_models::mlr::evaluate(w.view(), &test);
//! assert!((eval.objective - 3f64.ln()).abs() < 1e-6); // uniform prediction
//! # let _ = Mlr::new(3, 5);
//! ```
#![warn(missing_docs)]

mod error;
pub mod mlr;
mod sample;
mod straggler;
pub mod synthetic;

pub use error::{Error, Result};
pub use mlr::{Mlr, MlrEvaluator};
pub use sample::{Example, Features, dot};
pub use straggler::Straggler;
pub use synthetic::ClassificationSpec;
