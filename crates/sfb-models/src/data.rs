//! Data loaders: LIBSVM/svmlight (sparse) and dense CSV, label mapping, deterministic
//! sharding and hold-out splits.
//!
//! Files are read line by line through a reused buffer (a 1 GB file is never held in one
//! `String`); every error names the file and the 1-based line.
//!
//! # Limits
//! Reading is bounded by the options' [`Limits`]: a line is refused once it grows past
//! [`Limits::max_line_bytes`] (so `/dev/zero` or a multi-gigabyte line fails after 16 MiB,
//! not after exhausting memory), a feature index or column count past
//! [`Limits::max_features`] is refused before anything of its size exists, and the samples
//! read so far are checked against [`Limits::max_data_bytes`] after every line. Bytes that
//! are not UTF-8 are an error naming the line.
//!
//! # Warnings
//! Reading a training file (no label map given) reports surprises in
//! [`Dataset::warnings`]: one class, labels that look real-valued, and a CSV first row
//! skipped as a header ([`Warning`]).
//!
//! A held-out file must be read *like* its training file ([`LibsvmOptions::like`],
//! [`CsvOptions::like`]): same index base, same number of features `D`, same label-to-class
//! map. A feature index `≥ D` or a label not seen in training is then an error.
//!
//! # Example
//! ```
//! use sfb_models::data::{parse_libsvm, LibsvmOptions};
//! let train = "# two classes, labels -1/+1, 1-based\n+1 1:0.5 3:1 # comment\n-1 qid:7 2:2\n";
//! let train = parse_libsvm(train.as_bytes(), "train.svm".as_ref(), &LibsvmOptions::default())
//!     .unwrap();
//! assert_eq!((train.samples.len(), train.features, train.labels.classes()), (2, 3, 2));
//! assert_eq!(train.samples[0].y, 1); // +1 is the second class in ascending order
//! let bad = parse_libsvm("+1 4:1\n".as_bytes(), "test.svm".as_ref(), &LibsvmOptions::like(&train));
//! assert_eq!(
//!     bad.unwrap_err().to_string(),
//!     "test.svm:1: feature index 4 is beyond the 3 features of the training data"
//! );
//! ```

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::str::FromStr;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::limits::{SAMPLE_OVERHEAD, data_bytes};
use crate::warning::{excerpt, label_warnings};
use crate::{Error, Example, Features, LimitKind, Limits, Result, Warning};

/// Maps the label values of a file to classes `0..J`: class `c` is the `c`-th smallest
/// distinct label of the training data.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelMap {
    pub(crate) values: Vec<f64>,
}

impl LabelMap {
    /// The map of the distinct values in `labels` (NaN is not a label).
    pub fn from_labels(labels: impl IntoIterator<Item = f64>) -> Self {
        let mut values: Vec<f64> = labels
            .into_iter()
            .filter(|v| !v.is_nan())
            .map(|v| v + 0.0) // -0 → +0
            .collect();
        values.sort_by(f64::total_cmp);
        values.dedup();
        Self { values }
    }

    /// Classes `0..classes` as their own labels (synthetic data).
    pub fn identity(classes: usize) -> Self {
        Self {
            values: (0..classes).map(|c| c as f64).collect(),
        }
    }

    /// Number of classes `J`.
    pub fn classes(&self) -> usize {
        self.values.len()
    }

    /// The class of label value `label`, if it was seen.
    pub fn class_of(&self, label: f64) -> Option<u32> {
        let label = label + 0.0;
        self.values
            .binary_search_by(|v| v.total_cmp(&label))
            .ok()
            .map(|c| c as u32)
    }

    /// The label value of class `class`.
    pub fn label(&self, class: u32) -> Option<f64> {
        self.values.get(class as usize).copied()
    }

    pub(crate) fn describe(&self) -> String {
        let shown: Vec<String> = self.values.iter().take(12).map(|v| v.to_string()).collect();
        let more = if self.values.len() > 12 { ", …" } else { "" };
        format!("{}{more}", shown.join(", "))
    }
}

/// How feature indices of a LIBSVM file are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexBase {
    /// The first feature is `0`.
    Zero,
    /// The first feature is `1` (the LIBSVM convention).
    One,
}

/// A labelled data set read from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// The samples, in file order; `id` counts samples from 0.
    pub samples: Vec<Example>,
    /// Number of features `D`.
    pub features: usize,
    /// Label values ↔ classes.
    pub labels: LabelMap,
    /// Index base the file was read with (`One` for CSV).
    pub base: IndexBase,
    /// What looked wrong but did not stop loading (see [`Warning`]), in the order found.
    pub warnings: Vec<Warning>,
}

impl Dataset {
    /// What a held-out file must share with this training set, for [`read_file`]: `D`,
    /// the labels and the index base.
    pub fn shape(&self) -> (Option<usize>, Option<LabelMap>, Option<IndexBase>) {
        (
            Some(self.features),
            Some(self.labels.clone()),
            Some(self.base),
        )
    }

    /// Estimated bytes of the samples once stored densely (`n` samples × `D` f32 plus each
    /// sample's bookkeeping).
    pub fn dense_bytes(&self) -> u128 {
        let n = self.samples.len() as u128;
        data_bytes(n, n.saturating_mul(self.features as u128), false)
    }

    /// [`densify`](Self::densify), refused when the dense samples would take more than
    /// [`Limits::max_data_bytes`]; `at` names the source in the error.
    ///
    /// # Errors
    /// [`Error::Limit`] ([`LimitKind::DataBytes`]); nothing is changed then.
    pub fn densify_within(&mut self, limits: &Limits, at: &str) -> Result<()> {
        let what = format!(
            "{} samples × {} features stored densely",
            self.samples.len(),
            self.features
        );
        limits.check_data_bytes(at, &what, self.dense_bytes())?;
        self.densify();
        Ok(())
    }

    /// Stores every sample's features densely (length `D`). Unbounded: see
    /// [`densify_within`](Self::densify_within).
    pub fn densify(&mut self) {
        for e in &mut self.samples {
            if !matches!(e.x, Features::Dense(_)) {
                e.x = Features::Dense(e.x.to_dense(self.features));
            }
        }
    }

    /// Splits off a deterministic hold-out set: a seeded permutation picks
    /// `round(fraction · n)` samples (at least one, and at least one left for training),
    /// both parts keep file order and ids. Returns `(train, held_out)`.
    pub fn split(self, fraction: f64, seed: u64) -> (Vec<Example>, Vec<Example>) {
        let n = self.samples.len();
        let k =
            ((fraction * n as f64).round() as usize).clamp(usize::from(n > 1), n.saturating_sub(1));
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ 0x6a09_e667_f3bc_c908));
        let mut held = vec![false; n];
        for &i in &order[..k] {
            held[i] = true;
        }
        let (mut train, mut test) = (Vec::with_capacity(n - k), Vec::with_capacity(k));
        for (e, h) in self.samples.into_iter().zip(held) {
            if h { test.push(e) } else { train.push(e) }
        }
        (train, test)
    }
}

/// Peer `peer`'s shard of `samples` out of `peers`: sample `i` goes to peer `i mod peers`
/// ([`sfb_core::shard_indices`]), so every peer computes the same split without talking.
pub fn shard(samples: &[Example], peers: usize, peer: usize) -> Vec<Example> {
    sfb_core::shard_indices(samples.len(), peers, peer)
        .map(|i| samples[i].clone())
        .collect()
}

/// Options of [`read_libsvm`]. The default detects everything (for training files).
#[derive(Debug, Clone, Default)]
pub struct LibsvmOptions {
    /// Index base; `None`: zero-based if any index `0` occurs, else one-based (as
    /// scikit-learn's `load_svmlight_file(zero_based="auto")`).
    pub base: Option<IndexBase>,
    /// Number of features `D`; `None`: the largest index + 1. When set, an index `≥ D`
    /// is an error.
    pub features: Option<usize>,
    /// Label map; `None`: built from this file's labels. When set, an unknown label is
    /// an error.
    pub labels: Option<LabelMap>,
    /// Line length, feature and size limits. Default [`Limits::default`].
    pub limits: Limits,
}

impl LibsvmOptions {
    /// Options to read a held-out file like `train`: same base, `D` and labels (default
    /// limits: set [`limits`](Self::limits) after).
    pub fn like(train: &Dataset) -> Self {
        Self {
            base: Some(train.base),
            features: Some(train.features),
            labels: Some(train.labels.clone()),
            limits: Limits::default(),
        }
    }
}

/// `s` as a finite number.
fn finite<T: FromStr + Copy + Into<f64>>(s: &str) -> Option<T> {
    s.parse().ok().filter(|v: &T| (*v).into().is_finite())
}

/// A maker of [`Error::Parse`] for `path`: `fail(line, reason)`.
pub(crate) fn parse_error(path: &Path) -> impl Fn(usize, String) -> Error + '_ {
    move |line, reason| Error::Parse {
        path: path.to_path_buf(),
        line,
        reason,
    }
}

pub(crate) fn open(path: &Path) -> Result<BufReader<File>> {
    let f = File::open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(BufReader::with_capacity(1 << 16, f))
}

/// Reads a LIBSVM/svmlight file: `label [qid:N] index:value … [# comment]` per line.
///
/// Labels are any numbers (`-1`, `+1`, `3`, `2.5`), mapped to classes by [`LabelMap`];
/// `qid:` tokens and `#` comments are ignored; blank lines are skipped; zero values are
/// dropped; indices may come in any order but not twice. Samples are sparse.
///
/// # Errors
/// [`Error::Io`]; [`Error::Parse`] (file and line) for a malformed line, an index `≥ D`
/// or below the base, a label not in `opts.labels`; [`Error::Empty`] when no sample is
/// found.
pub fn read_libsvm(path: impl AsRef<Path>, opts: &LibsvmOptions) -> Result<Dataset> {
    let path = path.as_ref();
    parse_libsvm(open(path)?, path, opts)
}

/// Calls `f(line, content)` for every line of `reader` that holds more than a `#` comment
/// (`content`: the line with its comment cut off, trimmed; `line`: 1-based). Reads line by
/// line into one reused buffer that never grows past `max_line` bytes, so files of any
/// size stream and a line that never ends is refused after `max_line` bytes. Returns the
/// number of lines.
///
/// # Errors
/// [`Error::Limit`] ([`LimitKind::LineBytes`]) for a line longer than `max_line` bytes;
/// [`Error::Parse`] naming `path` and the line for a read error or bytes that are not
/// UTF-8; whatever `f` returns.
pub(crate) fn for_each_record(
    mut reader: impl BufRead,
    path: &Path,
    limits: &Limits,
    mut f: impl FnMut(usize, &str) -> Result<()>,
) -> Result<usize> {
    let max_line = limits.max_line_bytes;
    let mut buf: Vec<u8> = Vec::new();
    let mut lineno = 0usize;
    loop {
        buf.clear();
        let (mut any, mut ended) = (false, false);
        while !ended {
            let avail = match reader.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Error::Parse {
                        path: path.to_path_buf(),
                        line: lineno + 1,
                        reason: format!("cannot read line: {e}"),
                    });
                }
            };
            if avail.is_empty() {
                break;
            }
            any = true;
            let (take, used) = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    ended = true;
                    (i, i + 1)
                }
                None => (avail.len(), avail.len()),
            };
            if buf.len() + take > max_line {
                let at = format!("{}:{}", path.display(), lineno + 1);
                return Err(limits.exceeded(LimitKind::LineBytes, at, "line too long".into()));
            }
            // Grow by doubling, but never past the limit.
            if buf.capacity() < buf.len() + take {
                let want = (buf.len() + take).max((2 * buf.capacity()).min(max_line));
                buf.reserve_exact(want - buf.len());
            }
            buf.extend_from_slice(&avail[..take]);
            reader.consume(used);
        }
        if !any {
            return Ok(lineno);
        }
        lineno += 1;
        let text = std::str::from_utf8(&buf).map_err(|e| Error::Parse {
            path: path.to_path_buf(),
            line: lineno,
            reason: format!(
                "not text: invalid UTF-8 at byte {} of the line (is this a binary file?)",
                e.valid_up_to() + 1
            ),
        })?;
        let content = text.split('#').next().unwrap_or("").trim();
        if !content.is_empty() {
            f(lineno, content)?;
        }
        if !ended {
            return Ok(lineno);
        }
    }
}

/// One LIBSVM record as written: the label, the raw feature indices (ascending, before
/// the index base is applied) and the non-zero values.
pub(crate) struct LibsvmRecord<'a> {
    /// The label as written (for messages).
    pub label_tok: &'a str,
    /// The label's value.
    pub label: f64,
    /// Raw indices, ascending.
    pub indices: Vec<u32>,
    /// Their values (zeros dropped).
    pub values: Vec<f32>,
    /// Whether an index `0` occurs (with any value).
    pub zero_index: bool,
}

/// Parses one LIBSVM record: `content` is line `lineno` of `path` with its comment cut off,
/// trimmed and not empty ([`for_each_record`]).
///
/// # Errors
/// [`Error::Parse`] naming `path` and `lineno` for a malformed label, token, index or
/// value, or an index given twice; [`Error::Limit`] for an index past
/// [`Limits::max_features`].
pub(crate) fn parse_libsvm_record<'a>(
    path: &Path,
    lineno: usize,
    content: &'a str,
    limits: &Limits,
) -> Result<LibsvmRecord<'a>> {
    let fail = parse_error(path);
    let at = |line: usize| format!("{}:{line}", path.display());
    let mut tokens = content.split_ascii_whitespace();
    let label_tok = tokens.next().expect("non-empty line has a token");
    let label: f64 = finite::<f64>(label_tok).ok_or_else(|| {
        fail(
            lineno,
            format!(
                "label {label_tok:?} is not a finite number (multi-label lines are not supported)"
            ),
        )
    })?;
    let mut zero_index = false;
    // One slot per `index:value` token: no growth, no spare capacity to keep.
    let tokens_with_colon = content.bytes().filter(|&b| b == b':').count();
    let mut idx = Vec::with_capacity(tokens_with_colon);
    let mut val = Vec::with_capacity(tokens_with_colon);
    for tok in tokens {
        let (i, v) = tok
            .split_once(':')
            .ok_or_else(|| fail(lineno, format!("{tok:?} is not index:value")))?;
        if i == "qid" {
            i64::from_str(v).map_err(|_| fail(lineno, format!("qid {v:?} is not an integer")))?;
            continue;
        }
        let bad_index = || {
            fail(
                lineno,
                format!("feature index {i:?} in {tok:?} is not a non-negative integer below 2^32"),
            )
        };
        let index: u64 = i.parse().map_err(|_| bad_index())?;
        // One-based index `max_features` is feature `max_features − 1`: allowed here;
        // a zero-based one is caught with the final D below.
        limits.check_features(at(lineno), "feature index", index)?;
        let index = u32::try_from(index).map_err(|_| bad_index())?;
        let value: f32 = finite::<f32>(v).ok_or_else(|| {
            fail(
                lineno,
                format!("value {v:?} of feature {i} is not a finite number"),
            )
        })?;
        zero_index |= index == 0;
        if value != 0.0 {
            idx.push(index);
            val.push(value);
        }
    }
    if idx.windows(2).any(|w| w[0] >= w[1]) {
        let mut pairs: Vec<(u32, f32)> = idx.iter().copied().zip(val.iter().copied()).collect();
        pairs.sort_by_key(|p| p.0);
        if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(fail(
                lineno,
                format!("feature index {} appears twice", w[0].0),
            ));
        }
        idx = pairs.iter().map(|p| p.0).collect();
        val = pairs.iter().map(|p| p.1).collect();
    }
    Ok(LibsvmRecord {
        label_tok,
        label,
        indices: idx,
        values: val,
        zero_index,
    })
}

/// [`read_libsvm`] from any buffered reader; `path` only names the source in errors.
///
/// # Errors
/// As [`read_libsvm`].
pub fn parse_libsvm(reader: impl BufRead, path: &Path, opts: &LibsvmOptions) -> Result<Dataset> {
    let fail = parse_error(path);
    let limits = &opts.limits;
    let at = |line: usize| format!("{}:{line}", path.display());
    if let Some(d) = opts.features {
        limits.check_features(path.display().to_string(), "features asked for:", d as u64)?;
    }
    // Raw samples: (line, label, raw indices, values); the base is applied at the end.
    let mut rows: Vec<(usize, f64, Vec<u32>, Vec<f32>)> = Vec::new();
    let mut saw_zero_index = None;
    let mut bytes = 0u128;
    let lineno = for_each_record(reader, path, limits, |lineno, content| {
        let LibsvmRecord {
            label_tok,
            label,
            indices: idx,
            values: val,
            zero_index,
        } = parse_libsvm_record(path, lineno, content, limits)?;
        if zero_index && saw_zero_index.is_none() {
            saw_zero_index = Some(lineno);
        }
        if let Some(map) = &opts.labels
            && map.class_of(label).is_none()
        {
            return Err(fail(
                lineno,
                format!(
                    "label {label_tok} was not seen in the training data (its labels: {})",
                    map.describe()
                ),
            ));
        }
        bytes += data_bytes(1, idx.len() as u128, true);
        if bytes > u128::from(limits.max_data_bytes) {
            limits.check_data_bytes(at(lineno), "the samples read so far", bytes)?;
        }
        rows.push((lineno, label, idx, val));
        Ok(())
    })?;
    if rows.is_empty() {
        return Err(Error::Empty {
            path: path.to_path_buf(),
            lines: lineno,
        });
    }
    let base = opts.base.unwrap_or(if saw_zero_index.is_some() {
        IndexBase::Zero
    } else {
        IndexBase::One
    });
    if base == IndexBase::One
        && let Some(line) = saw_zero_index
    {
        return Err(fail(
            line,
            "feature index 0 in a file read as one-based".into(),
        ));
    }
    let shift = u32::from(base == IndexBase::One);
    let max_index = rows
        .iter()
        .filter_map(|r| r.2.last().copied())
        .max()
        .map(|m| (m - shift) as usize);
    let features = match opts.features {
        Some(d) => {
            if let Some(r) = rows
                .iter()
                .find(|r| r.2.last().is_some_and(|&m| (m - shift) as usize >= d))
            {
                let bad = r.2.last().copied().unwrap_or_default();
                return Err(fail(
                    r.0,
                    format!("feature index {bad} is beyond the {d} features of the training data"),
                ));
            }
            d
        }
        None => {
            let d = max_index.map_or(0, |m| m + 1);
            if d > limits.max_features
                && let Some(r) = rows.iter().max_by_key(|r| r.2.last().copied())
            {
                let found = format!(
                    "feature index {} (zero-based: {d} features)",
                    r.2.last().copied().unwrap_or_default()
                );
                return Err(limits.exceeded(LimitKind::Features, at(r.0), found));
            }
            d
        }
    };
    let mut warnings = Vec::new();
    let labels = match &opts.labels {
        Some(m) => m.clone(),
        None => {
            let m = LabelMap::from_labels(rows.iter().map(|r| r.1));
            warnings = label_warnings(
                &path.display().to_string(),
                rows.iter().map(|r| r.1),
                m.classes(),
                rows.len(),
            );
            m
        }
    };
    let samples = rows
        .into_iter()
        .enumerate()
        .map(|(id, (_, label, mut indices, values))| {
            for i in &mut indices {
                *i -= shift;
            }
            Example {
                x: Features::Sparse { indices, values },
                y: labels.class_of(label).expect("label checked"),
                id: id as u32,
            }
        })
        .collect();
    Ok(Dataset {
        samples,
        features,
        labels,
        base,
        warnings,
    })
}

/// Options of [`read_csv`].
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// Column holding the label (0-based). Default 0.
    pub label_column: usize,
    /// Field separator. Default `,`.
    pub delimiter: char,
    /// Whether the first row is a header; `None` (default): it is one if any of its
    /// fields is not a number.
    pub header: Option<bool>,
    /// Number of features; `None`: the field count − 1 of the first row. Rows must all
    /// have `D + 1` fields.
    pub features: Option<usize>,
    /// Label map; `None`: built from this file. When set, an unknown label is an error.
    pub labels: Option<LabelMap>,
    /// Line length, feature and size limits. Default [`Limits::default`].
    pub limits: Limits,
    /// The label column may be missing (new data to predict on): with
    /// [`features`](Self::features) `D` known, a first data row of `D` fields means every
    /// field is a feature and every sample gets the first label of
    /// [`labels`](Self::labels) (0 without a map); `D + 1` fields, a label as usual.
    /// Default false.
    pub label_optional: bool,
}

impl Default for CsvOptions {
    fn default() -> Self {
        Self {
            label_column: 0,
            delimiter: ',',
            header: None,
            features: None,
            labels: None,
            limits: Limits::default(),
            label_optional: false,
        }
    }
}

impl CsvOptions {
    /// Options to read a held-out file like `train` (same `D` and labels; the header is
    /// still detected; default limits: set [`limits`](Self::limits) after).
    pub fn like(train: &Dataset) -> Self {
        Self {
            features: Some(train.features),
            labels: Some(train.labels.clone()),
            ..Self::default()
        }
    }
}

/// Reads `path` as CSV when its extension is `.csv` (any case), else as LIBSVM: what
/// `sfb run --data`, `sfb predict` and `sfb eval` read. `features`: `D`, if known (an
/// index or row past it is an error); `labels`: the classes' label values, if known (an
/// unknown label is an error); `base`: LIBSVM's index base, if known (else detected). A
/// held-out file passes its training set's three ([`Dataset::shape`]). A CSV file read
/// with `D` known and no labels (new data to predict on) may lack its label column
/// ([`CsvOptions::label_optional`]).
///
/// # Errors
/// As [`read_csv`] and [`read_libsvm`].
pub fn read_file(
    path: impl AsRef<Path>,
    (features, labels, base): (Option<usize>, Option<LabelMap>, Option<IndexBase>),
    limits: &Limits,
) -> Result<Dataset> {
    let path = path.as_ref();
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
    {
        let opts = CsvOptions {
            label_optional: features.is_some() && labels.is_none(),
            features,
            labels,
            limits: *limits,
            ..CsvOptions::default()
        };
        read_csv(path, &opts)
    } else {
        let opts = LibsvmOptions {
            base,
            features,
            labels,
            limits: *limits,
        };
        read_libsvm(path, &opts)
    }
}

/// Reads a dense CSV file: one sample per row, the label in
/// [`label_column`](CsvOptions::label_column), every other field a feature. `#` comments
/// and blank lines are skipped. Samples are dense.
///
/// # Errors
/// [`Error::Io`]; [`Error::Parse`] (file and line) for a field that is not a number, a
/// row of the wrong width, an unknown label; [`Error::Empty`] when no row is found.
pub fn read_csv(path: impl AsRef<Path>, opts: &CsvOptions) -> Result<Dataset> {
    let path = path.as_ref();
    parse_csv(open(path)?, path, opts)
}

/// Reading CSV rows one at a time: the row width once known, and whether the first row
/// (perhaps a header) is still to come.
pub(crate) struct CsvRows<'o> {
    opts: &'o CsvOptions,
    width: Option<usize>,
    first: bool,
    /// No label column ([`CsvOptions::label_optional`], decided by the first data row).
    unlabelled: bool,
}

impl<'o> CsvRows<'o> {
    pub(crate) fn new(opts: &'o CsvOptions) -> Self {
        Self {
            opts,
            // With an optional label, the first data row says which width it is.
            width: opts
                .features
                .filter(|_| !opts.label_optional)
                .map(|d| d + 1),
            first: true,
            unlabelled: false,
        }
    }

    /// Features `D` (fields − 1, or fields without a label column) of the rows read so
    /// far (0 before the first).
    pub(crate) fn features(&self) -> usize {
        self.width
            .map_or(0, |w| w.saturating_sub(usize::from(!self.unlabelled)))
    }

    /// Whether the next row is the first one (which may be a header).
    pub(crate) fn at_first(&self) -> bool {
        self.first
    }

    /// Parses one row (`content`: line `lineno` of `path`, comment cut off, trimmed, not
    /// empty) into its label and features; `None` for a first row skipped as a header (a
    /// [`Warning::HeaderSkipped`] is pushed when it was detected, not declared).
    ///
    /// # Errors
    /// [`Error::Parse`] naming `path` and `lineno` for a field that is not a number or a
    /// row of the wrong width; [`Error::Limit`] for too many fields.
    pub(crate) fn parse(
        &mut self,
        path: &Path,
        lineno: usize,
        content: &str,
        warnings: &mut Vec<Warning>,
    ) -> Result<Option<(f64, Vec<f32>)>> {
        let opts = self.opts;
        let fail = parse_error(path);
        let at = |line: usize| format!("{}:{line}", path.display());
        let fields: Vec<&str> = content.split(opts.delimiter).map(str::trim).collect();
        if std::mem::take(&mut self.first) {
            let numeric = fields.iter().all(|f| f.parse::<f64>().is_ok());
            match opts.header {
                Some(true) => return Ok(None),
                None if !numeric => {
                    warnings.push(Warning::HeaderSkipped {
                        path: path.to_path_buf(),
                        line: lineno,
                        row: excerpt(content),
                    });
                    return Ok(None);
                }
                _ => {}
            }
        }
        if self.width.is_none() {
            match opts.features.filter(|_| opts.label_optional) {
                Some(d) => {
                    self.unlabelled = fields.len() == d;
                    self.width = Some(d + usize::from(!self.unlabelled));
                }
                None => {
                    let d = fields.len().saturating_sub(1);
                    opts.limits
                        .check_features(at(lineno), "features (fields − 1):", d as u64)?;
                }
            }
        }
        let w = *self.width.get_or_insert(fields.len());
        if fields.len() != w {
            return Err(fail(
                lineno,
                format!("{} fields, expected {w}", fields.len()),
            ));
        }
        if self.unlabelled {
            let label = opts.labels.as_ref().and_then(|m| m.label(0)).unwrap_or(0.0);
            let x = fields
                .iter()
                .enumerate()
                .map(|(c, f)| {
                    finite::<f32>(f).ok_or_else(|| {
                        fail(
                            lineno,
                            format!("field {f:?} (column {}) is not a finite number", c + 1),
                        )
                    })
                })
                .collect::<Result<Vec<f32>>>()?;
            return Ok(Some((label, x)));
        }
        if opts.label_column >= w {
            return Err(fail(
                lineno,
                format!("label column {} but only {w} fields", opts.label_column),
            ));
        }
        let mut label = f64::NAN;
        let mut x = Vec::with_capacity(w - 1);
        for (c, f) in fields.iter().enumerate() {
            if c == opts.label_column {
                label = finite::<f64>(f).ok_or_else(|| {
                    fail(
                        lineno,
                        format!("label {f:?} (column {}) is not a finite number", c + 1),
                    )
                })?;
            } else {
                x.push(finite::<f32>(f).ok_or_else(|| {
                    fail(
                        lineno,
                        format!("field {f:?} (column {}) is not a finite number", c + 1),
                    )
                })?);
            }
        }
        Ok(Some((label, x)))
    }
}

/// [`read_csv`] from any buffered reader; `path` only names the source in errors.
///
/// # Errors
/// As [`read_csv`].
pub fn parse_csv(reader: impl BufRead, path: &Path, opts: &CsvOptions) -> Result<Dataset> {
    let fail = parse_error(path);
    let limits = &opts.limits;
    let at = |line: usize| format!("{}:{line}", path.display());
    if let Some(d) = opts.features {
        limits.check_features(path.display().to_string(), "features asked for:", d as u64)?;
    }
    let mut rows: Vec<(f64, Vec<f32>)> = Vec::new();
    let mut csv = CsvRows::new(opts);
    let mut warnings = Vec::new();
    let mut bytes = 0u128;
    let lineno = for_each_record(reader, path, limits, |lineno, content| {
        let Some((label, x)) = csv.parse(path, lineno, content, &mut warnings)? else {
            return Ok(());
        };
        if let Some(map) = &opts.labels
            && map.class_of(label).is_none()
        {
            return Err(fail(
                lineno,
                format!(
                    "label {label} was not seen in the training data (its labels: {})",
                    map.describe()
                ),
            ));
        }
        bytes += SAMPLE_OVERHEAD + 4 * x.len() as u128;
        if bytes > u128::from(limits.max_data_bytes) {
            limits.check_data_bytes(at(lineno), "the samples read so far", bytes)?;
        }
        rows.push((label, x));
        Ok(())
    })?;
    if rows.is_empty() {
        return Err(Error::Empty {
            path: path.to_path_buf(),
            lines: lineno,
        });
    }
    let labels = match &opts.labels {
        Some(m) => m.clone(),
        None => {
            let m = LabelMap::from_labels(rows.iter().map(|r| r.0));
            warnings.extend(label_warnings(
                &path.display().to_string(),
                rows.iter().map(|r| r.0),
                m.classes(),
                rows.len(),
            ));
            m
        }
    };
    let features = csv.features();
    let samples = rows
        .into_iter()
        .enumerate()
        .map(|(id, (label, x))| Example {
            x: Features::Dense(x),
            y: labels.class_of(label).expect("label checked"),
            id: id as u32,
        })
        .collect();
    Ok(Dataset {
        samples,
        features,
        labels,
        base: IndexBase::One,
        warnings,
    })
}
