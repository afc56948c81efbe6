//! Models for **sfb**: each a [`sfb_core::Model`] implementation a user can read as an
//! example of writing their own, plus data loaders, seeded data generators and evaluation.
//!
//! | model | W | factors `u`, `v` | extra |
//! |---|---|---|---|
//! | [`Mlr`] (softmax regression, SGD) | classes × features | `softmax(W a) − onehot(y)`, `a` | |
//! | [`L2Mlr`] (SDCA / CoCoA+) | Z, classes × (features + 1) | `Δα_i / n`, `x_i` | W = ∇h*(Z) = Z/λ, the intercept's anchor added ([`sdca::primal_w`]) |
//! | [`Dml`] (metric learning, NCA) | L, latent × features | per member `z` of batch ∪ candidates: `2 (L X A)_z`, `z` (`A` the neighbour weights) | |
//! | [`SparseCoding`] | dictionary, features × atoms | `−(x − W a)`, `a` | `prox`: unit-norm atoms |
//! | [`Saga`] (SAGA for MLR / L2-MLR) | classes × features | `u_i^new − u_i^old`, `a` | with [`sfb_core::Method::Saga`], which keeps the table mean |
//!
//! All take one sample type, [`Example`], so a program picks the model at run time with
//! [`ModelSpec`] / [`AnyModel`]. Data comes from files ([`data`]: LIBSVM/svmlight, CSV;
//! [`stream`]: a peer's own shard of a file larger than memory) or
//! seeded generators ([`synthetic`]). Every input is bounded by [`Limits`] (line length,
//! features, data size, size of W), checked before the memory is taken; surprises that do
//! not stop loading (one class, real-valued labels, a skipped CSV header, no held-out
//! samples) come back as [`Warning`]s.
//!
//! # Example
//! ```
//! use sfb_models::{synthetic, ClassificationSpec, Mlr};
//! let spec: ClassificationSpec = "classes=3,features=5,samples=100".parse().unwrap();
//! let (train, test) = synthetic::classification(&spec, 42);
//! assert_eq!((train.len(), test.len()), (100, 20));
//! assert_eq!(train[7].id, 7);
//! let w = synthetic::init_w(3, 5, 0.0, 42);
//! let eval = sfb_models::mlr::evaluate(w.view(), &test);
//! assert!((eval.objective - 3f64.ln()).abs() < 1e-6); // uniform prediction
//! # let _ = Mlr::new(3, 5);
//! ```
#![warn(missing_docs)]

mod any;
pub mod data;
pub mod dml;
mod error;
mod limits;
pub mod mlr;
pub mod saga;
mod sample;
pub mod saved;
mod scale;
pub mod sdca;
pub mod sparse_coding;
pub mod stream;
pub mod synthetic;
mod warning;

pub use any::{AnyModel, ModelSpec, Problem};
pub use dml::{Dml, DmlEvaluator};
pub use error::{Error, Result};
pub use limits::{LimitKind, Limits};
pub use mlr::{Mlr, MlrEvaluator};
pub use saga::{PrimalEvaluator, Saga};
pub use sample::{Example, Features, dot};
pub use scale::{Preprocess, STANDARDIZE_AT, STORE_DENSE_AT, Scale, nonzero_fraction};
pub use sdca::{L2Mlr, L2MlrEvaluator};
pub use sparse_coding::{SparseCoding, SparseCodingEvaluator};
pub use synthetic::{ClassificationSpec, ClusterSpec, SignalSpec};
pub use warning::Warning;
