//! Streaming reads of a data file too large for every peer to hold: each peer keeps only
//! its own shard (and its slice of the held-out data), reading the one file all peers
//! share.
//!
//! [`Streamed::open`] makes a statistics pass over the file that keeps no sample: the
//! number of features `D`, the label set (so the classes `J`), the index base, the counts,
//! and what feature scaling and the default step size need (per-feature largest magnitude,
//! sums of magnitudes, and for standardization means and squared deviations in a second
//! pass). Every peer computes them by the same arithmetic in the same order over the same
//! file, so all agree bitwise without talking. [`Streamed::shard`] then reads the file
//! again and parses only the peer's own records: the others are found (their line ends
//! and whether they hold a record) and skipped unparsed.
//!
//! # Which record goes where ([`LineRule`])
//! Without a held-out file, the record on 1-based line `l` is held out when a hash of
//! `(seed, l)` falls below the held-out fraction ([`LineRule::held_out`]), so each peer
//! decides for every line by itself, and whatever the other lines hold. Records are then
//! numbered in file order within their part ([`Part`]): training record `t` belongs to
//! peer `t mod P` (as the in-memory [`crate::data::shard`]), held-out record `h` to peer
//! `h mod P`'s evaluation slice. Each record is in exactly one peer's training shard or in
//! exactly one peer's held-out slice. With a held-out file, every record of the training
//! file trains and the held-out file's record `h` goes to peer `h mod P`.
//!
//! # Semantics against the in-memory path
//! Like [`crate::data::read_libsvm`] / [`crate::data::read_csv`] followed by a split:
//! `D` and the labels come from the whole training file (held-out lines included), scaling
//! statistics and the mean ℓ1 norm from its training records only, ids count records in
//! file order. The held-out split is the per-line rule above instead of a seeded shuffle,
//! so the same file and seed give a different (equally sized in expectation, not exactly)
//! split than in memory.
//!
//! # Example
//! ```
//! use std::io::Write;
//! use sfb_models::stream::{LineRule, StreamOptions, Streamed};
//! let mut f = tempfile::Builder::new().suffix(".svm").tempfile().unwrap();
//! for i in 0..100 {
//!     writeln!(f, "{} 1:{} 3:1", i % 2, i + 1).unwrap();
//! }
//! let opts = StreamOptions { rule: LineRule { seed: 7, holdout: 0.2 }, ..Default::default() };
//! let s = Streamed::open(f.path(), None, &opts).unwrap();
//! assert_eq!((s.features(), s.classes()), (3, 2));
//! assert_eq!(s.train_samples() + s.held_out_samples(), 100);
//! let mine = s.shard(4, 1).unwrap();
//! assert_eq!(mine.parsed, mine.train.len() as u64 + mine.held_out.len() as u64);
//! assert_eq!(mine.train.len() as u64, (s.train_samples() + 2) / 4); // records 1, 5, 9, …
//! ```

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::data::{
    CsvOptions, CsvRows, IndexBase, LabelMap, LibsvmRecord, for_each_record, open, parse_error,
    parse_libsvm_record,
};
use crate::limits::data_bytes;
use crate::scale::{Preprocess, max_abs_map, standard_map};
use crate::warning::label_warnings;
use crate::{Error, Example, Features, LimitKind, Limits, Result, Scale, Warning};

/// Whether the record on a line is held out: a hash of `(seed, line)` against the
/// fraction. A function of the line alone, so every peer decides alike for every line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineRule {
    /// Seed of the hash (a run's seed).
    pub seed: u64,
    /// Fraction of lines held out, in `[0, 1)`; 0: none (a held-out file is given).
    pub holdout: f64,
}

impl Default for LineRule {
    /// Seed 1, nothing held out.
    fn default() -> Self {
        Self {
            seed: 1,
            holdout: 0.0,
        }
    }
}

impl LineRule {
    /// Whether the record on 1-based line `line` is held out: the top 53 bits of a
    /// SplitMix64 hash of `(seed, line)`, as a fraction in `[0, 1)`, below
    /// [`holdout`](Self::holdout).
    pub fn held_out(&self, line: usize) -> bool {
        if self.holdout <= 0.0 {
            return false;
        }
        let h = mix(mix(self.seed ^ 0x243f_6a88_85a3_08d3) ^ line as u64);
        ((h >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < self.holdout
    }
}

/// SplitMix64's finalizer over `x + γ`.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Where a record goes: the `n`-th training record or the `n`-th held-out record of the
/// data (0-based, in file order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// Training record `n`: peer `n mod P` trains on it.
    Train(u64),
    /// Held-out record `n`: peer `n mod P` evaluates on it.
    HeldOut(u64),
}

impl Part {
    /// The peer of `peers` this record belongs to (`n mod peers`).
    pub fn peer(self, peers: usize) -> usize {
        let n = match self {
            Part::Train(n) | Part::HeldOut(n) => n,
        };
        (n % peers.max(1) as u64) as usize
    }
}

/// How a file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Format {
    /// LIBSVM/svmlight (index base detected as [`crate::data::read_libsvm`] does).
    #[default]
    Libsvm,
    /// Dense CSV, the label first, a header row detected ([`crate::data::read_csv`]).
    Csv,
}

impl Format {
    /// CSV when the name ends in `.csv` (any case), else LIBSVM.
    pub fn of(path: &Path) -> Format {
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
        {
            Format::Csv
        } else {
            Format::Libsvm
        }
    }
}

/// Options of [`Streamed::open`].
#[derive(Debug, Clone, Default)]
pub struct StreamOptions {
    /// Which lines are held out (ignored with a held-out file: none are).
    pub rule: LineRule,
    /// Number of features `D`; `None`: the largest index + 1 (LIBSVM) or the fields − 1
    /// of the first row (CSV).
    pub features: Option<usize>,
    /// Feature scaling, its statistics from the training records ([`Scale::Auto`]: by
    /// the fraction of non-zero entries, as in memory).
    pub scale: Scale,
    /// Append an intercept column (constant 1) after scaling.
    pub intercept: bool,
    /// Line length, feature and size limits; [`Limits::max_data_bytes`] bounds what one
    /// peer holds.
    pub limits: Limits,
}

/// One record as parsed, before the index base, label map and scaling are applied.
enum Raw {
    Sparse {
        label: f64,
        indices: Vec<u32>,
        values: Vec<f32>,
        zero_index: bool,
    },
    Dense {
        label: f64,
        x: Vec<f32>,
    },
}

impl Raw {
    fn label(&self) -> f64 {
        match self {
            Raw::Sparse { label, .. } | Raw::Dense { label, .. } => *label,
        }
    }
}

/// Counts of one pass over a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Pass {
    /// Lines read.
    lines: usize,
    /// Records parsed.
    parsed: u64,
    /// Records skipped unparsed.
    skipped: u64,
}

/// Streams the records of `path` (`rule`: which are held out; `None`: a held-out file,
/// every record held out): `want(part)` decides whether a record is parsed, then
/// `f(line, part, record index, raw)` gets it. A CSV file's first row is always parsed
/// (it may be a header, which is no record); the header warning goes to `warnings`.
#[allow(clippy::too_many_arguments)]
fn pass(
    path: &Path,
    format: Format,
    rule: Option<&LineRule>,
    features: Option<usize>,
    limits: &Limits,
    warnings: &mut Vec<Warning>,
    mut want: impl FnMut(Part) -> bool,
    mut f: impl FnMut(usize, Part, u64, Raw) -> Result<()>,
) -> Result<Pass> {
    let csv_opts = CsvOptions {
        features,
        limits: *limits,
        ..CsvOptions::default()
    };
    let mut csv = CsvRows::new(&csv_opts);
    let (mut train, mut held, mut out) = (0u64, 0u64, Pass::default());
    out.lines = for_each_record(open(path)?, path, limits, |line, content| {
        let first_row = format == Format::Csv && csv.at_first();
        let mut parsed = None;
        if first_row {
            match csv.parse(path, line, content, warnings)? {
                Some((label, x)) => parsed = Some(Raw::Dense { label, x }),
                None => return Ok(()),
            }
        }
        let part = match rule {
            Some(r) if !r.held_out(line) => Part::Train(train),
            _ => Part::HeldOut(held),
        };
        let record = train + held;
        match part {
            Part::Train(_) => train += 1,
            Part::HeldOut(_) => held += 1,
        }
        if !want(part) {
            out.skipped += 1;
            return Ok(());
        }
        let raw = match (parsed, format) {
            (Some(raw), _) => raw,
            (None, Format::Csv) => {
                let (label, x) = csv
                    .parse(path, line, content, warnings)?
                    .expect("only a first row is a header");
                Raw::Dense { label, x }
            }
            (None, Format::Libsvm) => {
                let LibsvmRecord {
                    label,
                    indices,
                    values,
                    zero_index,
                    ..
                } = parse_libsvm_record(path, line, content, limits)?;
                Raw::Sparse {
                    label,
                    indices,
                    values,
                    zero_index,
                }
            }
        };
        out.parsed += 1;
        f(line, part, record, raw)
    })?;
    Ok(out)
}

/// Statistics of the training file gathered by the first pass.
#[derive(Debug, Default)]
struct Scan {
    labels: HashSet<u64>,
    first_label: Option<f64>,
    non_integer: Option<f64>,
    zero_index_line: Option<usize>,
    /// The largest raw index and its line.
    max_index: Option<(u32, usize)>,
    dense: bool,
    width: usize,
    train: u64,
    held_out: u64,
    /// Per raw feature index, over training records: largest magnitude, sum of
    /// magnitudes, sum, stored values.
    max_abs: Vec<f64>,
    abs_sum: Vec<f64>,
    sum: Vec<f64>,
    seen: Vec<u64>,
    /// Non-zero values of the training records.
    nonzero: u64,
}

impl Scan {
    fn add(&mut self, line: usize, part: Part, raw: &Raw) {
        let label = raw.label() + 0.0;
        self.labels.insert(label.to_bits());
        self.first_label.get_or_insert(label);
        if self.non_integer.is_none() && label.fract() != 0.0 {
            self.non_integer = Some(label);
        }
        let train = matches!(part, Part::Train(_));
        if train {
            self.train += 1;
        } else {
            self.held_out += 1;
        }
        match raw {
            Raw::Sparse {
                indices,
                values,
                zero_index,
                ..
            } => {
                if *zero_index && self.zero_index_line.is_none() {
                    self.zero_index_line = Some(line);
                }
                if let Some(&m) = indices.last()
                    && self.max_index.is_none_or(|(max, _)| m > max)
                {
                    self.max_index = Some((m, line));
                }
                if train {
                    if let Some(&m) = indices.last()
                        && m as usize >= self.max_abs.len()
                    {
                        for v in [&mut self.max_abs, &mut self.abs_sum, &mut self.sum] {
                            v.resize(m as usize + 1, 0.0);
                        }
                        self.seen.resize(m as usize + 1, 0);
                    }
                    for (&k, &a) in indices.iter().zip(values) {
                        let a = f64::from(a);
                        let k = k as usize;
                        self.max_abs[k] = self.max_abs[k].max(a.abs());
                        self.abs_sum[k] += a.abs();
                        self.sum[k] += a;
                        self.seen[k] += 1;
                        self.nonzero += u64::from(a != 0.0);
                    }
                }
            }
            Raw::Dense { x, .. } => {
                self.dense = true;
                self.width = x.len();
                if train {
                    if self.sum.len() < x.len() {
                        for v in [&mut self.max_abs, &mut self.abs_sum, &mut self.sum] {
                            v.resize(x.len(), 0.0);
                        }
                        self.seen.resize(x.len(), 0);
                    }
                    for (k, &a) in x.iter().enumerate() {
                        let a = f64::from(a);
                        self.max_abs[k] = self.max_abs[k].max(a.abs());
                        self.abs_sum[k] += a.abs();
                        self.sum[k] += a;
                        self.seen[k] += 1;
                        self.nonzero += u64::from(a != 0.0);
                    }
                }
            }
        }
    }
}

/// A peer's part of the data read by [`Streamed::shard`] (or [`Streamed::read`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Local {
    /// Its training records, in file order, scaled.
    pub train: Vec<Example>,
    /// Its held-out records, in file order, scaled.
    pub held_out: Vec<Example>,
    /// Records parsed in this read (over both files).
    pub parsed: u64,
    /// Records skipped unparsed.
    pub skipped: u64,
}

/// A data file read in streaming mode: what every peer knows of it without holding it
/// (`D`, the labels, counts, the scaling and the mean ℓ1 norm), and the means to read any
/// peer's part of it. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Streamed {
    train_path: PathBuf,
    test_path: Option<PathBuf>,
    rule: LineRule,
    limits: Limits,
    features: usize,
    labels: LabelMap,
    base: IndexBase,
    dense: bool,
    train: u64,
    held_out: u64,
    prep: Preprocess,
    mean_l1: f64,
    warnings: Vec<Warning>,
}

impl Streamed {
    /// Scans `train` (and `test`, the held-out file, if given: its records are counted, not
    /// parsed) keeping no sample: one pass, two for standardization.
    ///
    /// # Errors
    /// [`Error::Io`]; [`Error::Parse`] naming the file and line of the first malformed
    /// record anywhere in the training file (a feature index `≥ D` when `D` is given, an
    /// index `0` in a one-based file…); [`Error::Empty`] for a file without records or
    /// without a training record; [`Error::Limit`] for a line or feature index past the
    /// limits; [`Error::Parameter`] for standardization of sparse data.
    ///
    /// # Complexity
    /// O(file size) time, O(D + distinct labels) memory.
    pub fn open(train: &Path, test: Option<&Path>, opts: &StreamOptions) -> Result<Streamed> {
        let limits = &opts.limits;
        let features = opts.features;
        if let Some(d) = features {
            limits.check_features(train.display().to_string(), "features asked for:", d as u64)?;
        }
        let rule = LineRule {
            holdout: if test.is_some() {
                0.0
            } else {
                opts.rule.holdout
            },
            ..opts.rule
        };
        let format = Format::of(train);
        let mut warnings = Vec::new();
        let mut scan = Scan::default();
        let done = pass(
            train,
            format,
            Some(&rule),
            features,
            limits,
            &mut warnings,
            |_| true,
            |line, part, _, raw| {
                scan.add(line, part, &raw);
                Ok(())
            },
        )?;
        if scan.train + scan.held_out == 0 || scan.train == 0 {
            return Err(Error::Empty {
                path: train.to_path_buf(),
                lines: done.lines,
            });
        }
        let fail = parse_error(train);
        let base = if scan.zero_index_line.is_some() {
            IndexBase::Zero
        } else {
            IndexBase::One
        };
        let shift = usize::from(base == IndexBase::One);
        let d = if scan.dense {
            scan.width
        } else {
            let found = scan.max_index.map_or(0, |(m, _)| m as usize + 1 - shift);
            match (features, scan.max_index) {
                (Some(d), Some((m, line))) if found > d => {
                    return Err(fail(
                        line,
                        format!("feature index {m} is beyond the {d} features asked for"),
                    ));
                }
                (Some(d), _) => d,
                (None, Some((m, line))) if found > limits.max_features => {
                    let what = format!("feature index {m} (zero-based: {found} features)");
                    let at = format!("{}:{line}", train.display());
                    return Err(limits.exceeded(LimitKind::Features, at, what));
                }
                (None, _) => found,
            }
        };
        // Per-feature statistics by zero-based feature, D long.
        let by_feature = |mut v: Vec<f64>| {
            if !scan.dense && shift == 1 && !v.is_empty() {
                v.remove(0);
            }
            v.resize(d, 0.0);
            v
        };
        let max_abs = by_feature(std::mem::take(&mut scan.max_abs));
        let abs_sum = by_feature(std::mem::take(&mut scan.abs_sum));
        let sum = by_feature(std::mem::take(&mut scan.sum));
        let seen = by_feature(scan.seen.iter().map(|&c| c as f64).collect());
        let n = scan.train as f64;
        let nonzero = scan.nonzero as f64 / (n * d.max(1) as f64);
        let scale = match opts.scale {
            Scale::Auto => Scale::auto_for(nonzero),
            s => s,
        };
        let (map, l1_by_feature) = match scale {
            Scale::Standard => {
                let mean: Vec<f64> = sum.iter().map(|s| s / n).collect();
                let (mut sq, mut dev) = (vec![0f64; d], vec![0f64; d]);
                let mut add = |k: usize, a: f32| {
                    let c = f64::from(a) - mean[k];
                    sq[k] += c * c;
                    dev[k] += c.abs();
                };
                pass(
                    train,
                    format,
                    Some(&rule),
                    features,
                    limits,
                    &mut Vec::new(),
                    |part| matches!(part, Part::Train(_)),
                    |_, _, _, raw| {
                        match raw {
                            Raw::Dense { x, .. } => {
                                x.iter().enumerate().for_each(|(k, &a)| add(k, a));
                            }
                            Raw::Sparse {
                                indices, values, ..
                            } => {
                                for (&k, &a) in indices.iter().zip(&values) {
                                    add(k as usize - shift, a);
                                }
                            }
                        }
                        Ok(())
                    },
                )?;
                // The entries a sparse record does not store are zeros.
                for k in 0..d {
                    let missing = (n - seen[k]).max(0.0);
                    sq[k] += missing * mean[k] * mean[k];
                    dev[k] += missing * mean[k].abs();
                }
                let map = standard_map(mean, &sq, n);
                // A constant feature is divided by its magnitude, not centred.
                let l1 = (0..d)
                    .map(|k| {
                        let raw = if map.shift[k] == 0.0 {
                            abs_sum[k]
                        } else {
                            dev[k]
                        };
                        raw * map.factor[k]
                    })
                    .collect();
                (Some(map), l1)
            }
            Scale::MaxAbs => {
                let map = max_abs_map(&max_abs);
                let l1 = abs_sum
                    .iter()
                    .zip(&map.factor)
                    .map(|(s, f)| s * f)
                    .collect();
                (Some(map), l1)
            }
            _ => (None, abs_sum),
        };
        let intercept = if opts.intercept { n } else { 0.0 };
        let mean_l1 = (l1_by_feature.iter().sum::<f64>() + intercept) / n;
        let labels = LabelMap::from_labels(scan.labels.iter().map(|&b| f64::from_bits(b)));
        warnings.extend(label_warnings(
            &train.display().to_string(),
            scan.first_label.into_iter().chain(scan.non_integer),
            labels.classes(),
            (scan.train + scan.held_out) as usize,
        ));
        let mut held_out = scan.held_out;
        if let Some(t) = test {
            // Only counted: a peer parses its own slice of it (and checks it then).
            held_out = pass(
                t,
                Format::of(t),
                None,
                Some(d),
                limits,
                &mut warnings,
                |_| false,
                |_, _, _, _| Ok(()),
            )?
            .skipped;
        }
        Ok(Streamed {
            train_path: train.to_path_buf(),
            test_path: test.map(Path::to_path_buf),
            rule,
            limits: *limits,
            features: d,
            labels: labels.clone(),
            base,
            dense: scan.dense,
            train: scan.train,
            held_out,
            prep: Preprocess::from_parts(d, scale, nonzero, map, opts.intercept, labels),
            mean_l1,
            warnings,
        })
    }

    /// Features `D`.
    pub fn features(&self) -> usize {
        self.features
    }

    /// Classes `J` (distinct labels of the training file).
    pub fn classes(&self) -> usize {
        self.labels.classes()
    }

    /// Training records over all peers.
    pub fn train_samples(&self) -> u64 {
        self.train
    }

    /// Held-out records over all peers (of the held-out file, if one is given).
    pub fn held_out_samples(&self) -> u64 {
        self.held_out
    }

    /// The scaling applied (`auto` resolved by the fraction of non-zero training
    /// entries, [`Scale::auto_for`]).
    pub fn scale(&self) -> Scale {
        self.prep.scale()
    }

    /// What turns a record into a sample (scaling, intercept, labels): the
    /// [`Preprocess`] a saved model keeps. Its [`features`](Preprocess::features) is the
    /// model's `D` (one more than [`features`](Self::features) with an intercept).
    pub fn preprocess(&self) -> &Preprocess {
        &self.prep
    }

    /// The mean ℓ1 norm of the scaled training features, `(1/n) Σ_i ‖x_i‖₁`, from
    /// per-feature sums (what [`crate::Problem::mean_l1`] is of the data in memory, up to
    /// the f32 rounding of the scaled values it sums).
    pub fn mean_l1(&self) -> f64 {
        self.mean_l1
    }

    /// Whether the samples are dense (CSV).
    pub fn dense(&self) -> bool {
        self.dense
    }

    /// What looked wrong but did not stop the scan (one class, real-valued labels, a CSV
    /// header skipped).
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Peer `peer`'s part out of `peers`: its training shard (training records `t` with
    /// `t mod peers == peer`) and its held-out slice (`h mod peers == peer`), all else
    /// skipped unparsed.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn shard(&self, peers: usize, peer: usize) -> Result<Local> {
        let p = peers.max(1) as u64;
        let share = |n: u64| usize::try_from((n + p - 1 - (peer as u64).min(p - 1)) / p);
        let (train, held_out) = (share(self.train), share(self.held_out));
        let mut local = Local::default();
        // Exactly what it will hold: no doubling slack over the whole run.
        local.train.reserve_exact(train.unwrap_or(0));
        local.held_out.reserve_exact(held_out.unwrap_or(0));
        self.read_into(local, |part| part.peer(peers) == peer)
    }

    /// The records `want` asks for, scaled, with ids counting the file's records; every
    /// other record is skipped unparsed.
    ///
    /// # Errors
    /// [`Error::Io`]; [`Error::Parse`] naming file and line for a record of the held-out
    /// file that does not fit the training data (label not seen, index `≥ D`) or is
    /// malformed, or a file that changed since [`open`](Self::open); [`Error::Limit`]
    /// when what is kept passes [`Limits::max_data_bytes`].
    pub fn read(&self, want: impl FnMut(Part) -> bool) -> Result<Local> {
        self.read_into(Local::default(), want)
    }

    /// [`read`](Self::read) appending to `local`.
    fn read_into(&self, mut local: Local, mut want: impl FnMut(Part) -> bool) -> Result<Local> {
        let mut bytes = 0u128;
        for (path, rule) in [
            (Some(&self.train_path), Some(&self.rule)),
            (self.test_path.as_ref(), None),
        ] {
            let Some(path) = path else { continue };
            let done = pass(
                path,
                Format::of(path),
                rule,
                Some(self.features),
                &self.limits,
                &mut Vec::new(),
                |part| want(part) && (rule.is_some() || matches!(part, Part::HeldOut(_))),
                |line, part, record, raw| {
                    let e = self.example(path, line, record, raw)?;
                    let sparse = matches!(e.x, Features::Sparse { .. });
                    bytes += data_bytes(1, e.x.nnz() as u128, sparse);
                    if bytes > u128::from(self.limits.max_data_bytes) {
                        let at = format!("{}:{line}", path.display());
                        self.limits
                            .check_data_bytes(at, "this peer's samples", bytes)?;
                    }
                    match part {
                        Part::Train(_) => local.train.push(e),
                        Part::HeldOut(_) => local.held_out.push(e),
                    }
                    Ok(())
                },
            )?;
            local.parsed += done.parsed;
            local.skipped += done.skipped;
        }
        Ok(local)
    }

    /// Record `record` (line `line` of `path`) as a sample of the training data: class,
    /// zero-based indices, scaled.
    fn example(&self, path: &Path, line: usize, record: u64, raw: Raw) -> Result<Example> {
        let fail = |reason: String| Error::Parse {
            path: path.to_path_buf(),
            line,
            reason,
        };
        let label = raw.label();
        let y = self.labels.class_of(label).ok_or_else(|| {
            fail(format!(
                "label {label} was not seen in the training data (its labels: {})",
                self.labels.describe()
            ))
        })?;
        let x = match raw {
            Raw::Dense { x, .. } if x.len() == self.features => Features::Dense(x),
            Raw::Dense { x, .. } => {
                return Err(fail(format!(
                    "{} features, expected {}",
                    x.len(),
                    self.features
                )));
            }
            Raw::Sparse {
                mut indices,
                values,
                zero_index,
                ..
            } => {
                let shift = u32::from(self.base == IndexBase::One);
                if zero_index && shift == 1 {
                    return Err(fail("feature index 0 in a file read as one-based".into()));
                }
                if let Some(&m) = indices.last()
                    && (m - shift) as usize >= self.features
                {
                    return Err(fail(format!(
                        "feature index {m} is beyond the {} features of the training data",
                        self.features
                    )));
                }
                for i in &mut indices {
                    *i -= shift;
                }
                // Kept for the whole run: no spare capacity from the parser's pushes.
                let (mut indices, mut values) = (indices, values);
                indices.shrink_to_fit();
                values.shrink_to_fit();
                Features::Sparse { indices, values }
            }
        };
        let id = u32::try_from(record).map_err(|_| {
            fail(format!(
                "record {record} is past the 2^32 samples supported"
            ))
        })?;
        let mut x = x;
        self.prep.apply_mut(&mut x);
        Ok(Example::new(x, y, id))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use super::*;
    use crate::Problem;
    use crate::data::{LibsvmOptions, read_csv, read_libsvm};

    fn file(text: &str, suffix: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new().suffix(suffix).tempfile().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    /// `n` LIBSVM records (feature 1 holds the record's number + 1), with a comment and a
    /// blank line among them.
    fn svm(n: usize) -> String {
        let mut s = String::from("# header comment\n");
        for i in 0..n {
            if i == 5 {
                s.push('\n');
            }
            s.push_str(&format!("{} 1:{} {}:0.5\n", i % 3, i + 1, 2 + i % 7));
        }
        s
    }

    fn opts(holdout: f64, scale: Scale) -> StreamOptions {
        StreamOptions {
            rule: LineRule { seed: 11, holdout },
            scale,
            ..StreamOptions::default()
        }
    }

    /// Feature 1's raw value: the record's number + 1 (scale none).
    fn record_of(e: &Example) -> u64 {
        match &e.x {
            Features::Sparse { indices, values } => {
                assert_eq!(indices[0], 0);
                values[0] as u64 - 1
            }
            Features::Dense(_) => unreachable!("LIBSVM is sparse"),
        }
    }

    #[test]
    fn every_record_is_in_exactly_one_shard_or_slice_and_only_its_owner_parses_it() {
        let n = 203;
        let f = file(&svm(n), ".svm");
        let s = Streamed::open(f.path(), None, &opts(0.25, Scale::None)).unwrap();
        assert_eq!(s.train_samples() + s.held_out_samples(), n as u64);
        assert!(s.held_out_samples() > 30 && s.held_out_samples() < 70);
        // The per-line rule, recomputed here: records start on line 2, a blank line
        // after the fifth.
        let line_of = |r: usize| r + 2 + usize::from(r >= 5);
        let rule = LineRule {
            seed: 11,
            holdout: 0.25,
        };
        let held: Vec<bool> = (0..n).map(|r| rule.held_out(line_of(r))).collect();
        for peers in [1, 3, 4] {
            let mut owner: Vec<Option<(usize, bool)>> = vec![None; n];
            for peer in 0..peers {
                let local = s.shard(peers, peer).unwrap();
                let mine = (local.train.len() + local.held_out.len()) as u64;
                assert_eq!(local.parsed, mine, "only its own records are parsed");
                assert_eq!(local.skipped, n as u64 - mine);
                for (set, is_held) in [(&local.train, false), (&local.held_out, true)] {
                    for e in set.iter() {
                        let r = record_of(e) as usize;
                        assert_eq!(e.id as usize, r);
                        assert_eq!(held[r], is_held, "record {r}");
                        assert!(owner[r].is_none(), "record {r} read twice");
                        owner[r] = Some((peer, is_held));
                    }
                }
                // Round robin within each part, in file order.
                let nth = |is_held: bool, r: usize| {
                    (0..r).filter(|&q| held[q] == is_held).count() % peers
                };
                for e in local.train.iter().chain(&local.held_out) {
                    let r = e.id as usize;
                    assert_eq!(nth(held[r], r), peer);
                }
                // Deterministic: the same read again gives the same samples.
                let again = s.shard(peers, peer).unwrap();
                assert_eq!((again.train, again.held_out), (local.train, local.held_out));
            }
            assert!(
                owner.iter().all(Option::is_some),
                "every record has an owner"
            );
        }
    }

    #[test]
    fn statistics_and_scaling_match_the_in_memory_reader_on_the_same_split() {
        let f = file(&svm(120), ".svm");
        let all = read_libsvm(f.path(), &LibsvmOptions::default()).unwrap();
        // A quarter of the entries are non-zero: auto max-abs scales, as in memory.
        let auto = Streamed::open(f.path(), None, &opts(0.2, Scale::Auto)).unwrap();
        assert_eq!(auto.scale(), Scale::MaxAbs);
        for scale in [Scale::MaxAbs, Scale::Standard] {
            let s = Streamed::open(f.path(), None, &opts(0.2, scale)).unwrap();
            assert_eq!(
                (s.features(), s.classes()),
                (all.features, all.labels.classes())
            );
            let whole = s.shard(1, 0).unwrap();
            let (train, test): (Vec<Example>, Vec<Example>) = all
                .samples
                .iter()
                .cloned()
                .partition(|e| whole.train.iter().any(|t| t.id == e.id));
            let p = Problem {
                train: Arc::new(train),
                test: Arc::new(test),
                classes: s.classes(),
                features: s.features(),
                labels: crate::data::LabelMap::identity(s.classes()),
            }
            .scaled(scale)
            .unwrap();
            assert_eq!(*p.train, whole.train, "{scale}: bitwise the same samples");
            assert_eq!(*p.test, whole.held_out);
            let rel = (p.mean_l1() - s.mean_l1()).abs() / p.mean_l1();
            // In memory the f32-rounded scaled values are summed: equal to f32 rounding.
            assert!(rel < 1e-6, "{scale}: {} vs {}", p.mean_l1(), s.mean_l1());
        }
    }

    #[test]
    fn csv_is_standardized_in_two_passes_like_in_memory() {
        let mut text = String::from("label,a,b\n");
        for i in 0..40 {
            text.push_str(&format!(
                "{},{},{}\n",
                i % 2,
                i * 3 % 7,
                1.5 * (i % 5) as f64
            ));
        }
        let f = file(&text, ".csv");
        let s = Streamed::open(f.path(), None, &opts(0.3, Scale::Auto)).unwrap();
        assert_eq!(s.scale(), Scale::Standard);
        assert!(matches!(
            s.warnings(),
            [Warning::HeaderSkipped { line: 1, .. }]
        ));
        let whole = s.shard(1, 0).unwrap();
        let all = read_csv(f.path(), &CsvOptions::default()).unwrap();
        let train: Vec<Example> = all
            .samples
            .iter()
            .filter(|e| whole.train.iter().any(|t| t.id == e.id))
            .cloned()
            .collect();
        let p = Problem {
            train: Arc::new(train),
            test: Arc::new(Vec::new()),
            classes: 2,
            features: 2,
            labels: crate::data::LabelMap::identity(2),
        }
        .scaled(Scale::Standard)
        .unwrap();
        assert_eq!(*p.train, whole.train);
        assert!((p.mean_l1() - s.mean_l1()).abs() < 1e-6 * p.mean_l1());
    }

    #[test]
    fn a_held_out_file_is_sliced_and_checked_by_the_peer_that_reads_it() {
        let train = file(&svm(10), ".svm");
        let test = file("0 1:4\n1 2:1\n2 1:1\n7 1:1\n", ".svm");
        let s = Streamed::open(train.path(), Some(test.path()), &opts(0.5, Scale::None)).unwrap();
        assert_eq!((s.train_samples(), s.held_out_samples()), (10, 4));
        let p0 = s.shard(2, 0).unwrap();
        assert_eq!((p0.train.len(), p0.held_out.len()), (5, 2));
        let e = s.shard(2, 1).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}:4: label 7 was not seen",
                test.path().display()
            )),
            "{e}"
        );
    }

    #[test]
    fn bad_input_names_file_and_line_wherever_it_is() {
        let mut text = svm(30);
        text.push_str("1 3:x\n");
        let f = file(&text, ".svm");
        let e = Streamed::open(f.path(), None, &opts(0.2, Scale::None))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "{}:33: value \"x\" of feature 3 is not a finite number",
                f.path().display()
            )
        );
        let f = file("# nothing\n\n", ".svm");
        let e = Streamed::open(f.path(), None, &opts(0.2, Scale::None)).unwrap_err();
        assert!(matches!(e, Error::Empty { lines: 2, .. }), "{e}");
        let e = Streamed::open("/nonexistent/x.svm".as_ref(), None, &opts(0.2, Scale::None))
            .unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        let f = file(&svm(10), ".svm");
        let few = StreamOptions {
            features: Some(4),
            ..opts(0.2, Scale::None)
        };
        let e = Streamed::open(f.path(), None, &few)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("feature index 8 is beyond the 4 features asked for"),
            "{e}"
        );
    }

    #[test]
    fn the_line_rule_holds_out_about_its_fraction_and_depends_on_the_seed() {
        let rule = |seed| LineRule { seed, holdout: 0.2 };
        let held = (1..=100_000).filter(|&l| rule(3).held_out(l)).count();
        assert!((19_000..21_000).contains(&held), "{held}");
        let same = (1..=1000)
            .filter(|&l| rule(3).held_out(l) == rule(4).held_out(l))
            .count();
        assert!(same < 800, "{same}");
        assert!(!(1..1000).any(|l| {
            LineRule {
                seed: 3,
                holdout: 0.0,
            }
            .held_out(l)
        }));
    }
}
