//! `sfb predict` and `sfb eval`: a saved model (`--save-model`) on new data.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use sfb_models::Limits;
use sfb_models::saved::SavedModel;

/// `sfb predict` options.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// The model file (written by --save-model).
    #[arg(long)]
    pub model: PathBuf,
    /// The samples: CSV (.csv, label first) or LIBSVM, as the training data was written;
    /// their labels are not used (any value).
    #[arg(long)]
    pub data: PathBuf,
    /// Write the predictions here (CSV with a header, one row per sample) instead of
    /// standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `sfb eval` options.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The model file (written by --save-model).
    #[arg(long)]
    pub model: PathBuf,
    /// Labelled samples (CSV or LIBSVM), every label one the model was trained on.
    #[arg(long)]
    pub test_data: PathBuf,
}

fn load(path: &std::path::Path) -> Result<SavedModel> {
    Ok(SavedModel::load(path)?)
}

/// Classifiers: one predicted label per sample (as the training file wrote labels). DML:
/// the embedding `L x` of each sample.
pub fn predict(a: &PredictArgs) -> Result<()> {
    let m = load(&a.model)?;
    if matches!(m.spec, sfb_models::ModelSpec::SparseCoding { .. }) {
        bail!(
            "{}: a sparse-coding model predicts nothing (its file holds the dictionary)",
            a.model.display()
        );
    }
    let data = m.read_data(&a.data, false, &Limits::from_env()?)?;
    let mut text = String::new();
    if m.is_classifier() {
        text.push_str("prediction\n");
        for e in &data.samples {
            text.push_str(&format!("{}\n", m.predict_label(&e.x)));
        }
    } else {
        let k = m.w.nrows();
        let names: Vec<String> = (0..k).map(|i| format!("z{i}")).collect();
        text.push_str(&names.join(","));
        text.push('\n');
        for e in &data.samples {
            let z: Vec<String> = m.transform(&e.x).iter().map(|v| v.to_string()).collect();
            text.push_str(&z.join(","));
            text.push('\n');
        }
    }
    match &a.out {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?
        }
        None => out!("{text}"),
    }
    Ok(())
}

/// Mean cross-entropy and accuracy of a saved classifier on labelled data, printed as a
/// run prints them.
pub fn eval(a: &EvalArgs) -> Result<()> {
    let m = load(&a.model)?;
    let data = m.read_data(&a.test_data, true, &Limits::from_env()?)?;
    let e = m.evaluate(&data.samples)?;
    outln!(
        "{} model · {} samples · data: {}",
        m.spec.name(),
        data.samples.len(),
        m.prep.describe()
    );
    outln!(
        "  objective {:.4}  test accuracy {}",
        e.objective,
        e.accuracy.map_or("-".into(), |a| format!("{a:.4}"))
    );
    Ok(())
}
