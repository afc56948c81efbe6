//! Things about the input that are allowed but probably not what the user meant.
//!
//! Loaders return them ([`Dataset::warnings`](crate::data::Dataset::warnings)) rather than
//! logging them, so a program decides how to show them and a test can assert them; the
//! harness logs each one as a `WARN` line.

use std::path::PathBuf;

/// Longest excerpt of a row quoted in a warning, in characters.
const QUOTE_CHARS: usize = 80;

/// `text`, cut to [`QUOTE_CHARS`] characters with `…` when longer.
pub(crate) fn excerpt(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// A surprise in the input that does not stop loading.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Warning {
    /// The first row of a CSV file was taken for a header (one of its fields is not a
    /// number) and skipped.
    HeaderSkipped {
        /// The file.
        path: PathBuf,
        /// 1-based line of the row.
        line: usize,
        /// The row (cut to 80 characters).
        row: String,
    },
    /// Every training sample has the same label: a classifier learns nothing and scores
    /// accuracy 1.0.
    OneClass {
        /// The source (file or synthetic spec).
        source: String,
        /// The one label value.
        label: f64,
    },
    /// The labels look real-valued (some are not integers, or there are more distinct
    /// labels than half the samples), yet each distinct value is made a class.
    ContinuousLabels {
        /// The source.
        source: String,
        /// Distinct labels, i.e. classes `J`.
        classes: usize,
        /// Training samples.
        samples: usize,
        /// One label that is not an integer, if any.
        non_integer: Option<f64>,
    },
    /// No held-out samples: no objective or accuracy can be computed.
    NoHeldOut {
        /// The source.
        source: String,
    },
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Warning::HeaderSkipped { path, line, row } => write!(
                f,
                "{}:{line}: first row taken for a header and skipped (a field is not a \
                 number): {row:?}",
                path.display()
            ),
            Warning::OneClass { source, label } => write!(
                f,
                "{source}: every training sample has label {label}: one class, so the model \
                 learns nothing and accuracy is trivially 1.0"
            ),
            Warning::ContinuousLabels {
                source,
                classes,
                samples,
                non_integer,
            } => {
                write!(
                    f,
                    "{source}: {classes} distinct labels over {samples} samples"
                )?;
                if let Some(v) = non_integer {
                    write!(f, " (some not integers, e.g. {v})")?;
                }
                write!(
                    f,
                    " are treated as {classes} classes; real-valued (regression) labels are \
                     not supported"
                )
            }
            Warning::NoHeldOut { source } => write!(
                f,
                "{source}: no held-out samples: no objective or accuracy will be computed"
            ),
        }
    }
}

/// The label warnings of a training set with label values `labels` (one per sample) that
/// make `classes` classes.
pub(crate) fn label_warnings(
    source: &str,
    labels: impl Iterator<Item = f64>,
    classes: usize,
    samples: usize,
) -> Vec<Warning> {
    let mut first = None;
    let mut non_integer = None;
    for v in labels {
        first.get_or_insert(v);
        if non_integer.is_none() && v.fract() != 0.0 {
            non_integer = Some(v);
        }
    }
    let mut out = Vec::new();
    if classes == 1
        && let Some(label) = first
    {
        out.push(Warning::OneClass {
            source: source.to_string(),
            label,
        });
    }
    if classes > 2 && (non_integer.is_some() || 2 * classes > samples) {
        out.push(Warning::ContinuousLabels {
            source: source.to_string(),
            classes,
            samples,
            non_integer,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_heuristics() {
        let w = |labels: &[f64]| {
            let mut u = labels.to_vec();
            u.sort_by(f64::total_cmp);
            u.dedup();
            label_warnings("s", labels.iter().copied(), u.len(), labels.len())
        };
        assert_eq!(
            w(&[3.0, 3.0]),
            [Warning::OneClass {
                source: "s".into(),
                label: 3.0
            }]
        );
        // Two classes: fine even when not integers (-0.5/+0.5 coding).
        assert!(w(&[-0.5, 0.5, 0.5]).is_empty());
        // Integer classes with several samples each: fine.
        assert!(w(&[0.0, 1.0, 2.0, 0.0, 1.0, 2.0]).is_empty());
        // Real-valued.
        let got = w(&[0.25, 1.0, 2.0, 1.0, 2.0, 1.0]);
        assert!(matches!(
            got[..],
            [Warning::ContinuousLabels {
                classes: 3,
                non_integer: Some(0.25),
                ..
            }]
        ));
        // As many classes as samples.
        let many: Vec<f64> = (0..100).map(f64::from).collect();
        let got = w(&many);
        assert_eq!(
            got[0].to_string(),
            "s: 100 distinct labels over 100 samples are treated as 100 classes; real-valued \
             (regression) labels are not supported"
        );
        assert_eq!(excerpt(&"é".repeat(100)).chars().count(), 81);
    }
}
