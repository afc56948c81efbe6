//! A run's per-clock records, streamed to its metrics file as they happen.
//!
//! Nodes report a record per clock; a run keeps only each node's latest one in memory (unless
//! asked for all, [`crate::OutputOptions::keep_records`]) and appends every one to the
//! metrics file (`--metrics FILE.jsonl`) through a [`MetricsFile`]: memory stays flat
//! however long the run.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sfb_core::metrics::ClockRecord;

use crate::{Error, Result};

/// A JSON-lines file that records are appended to, from any thread. A failed write is
/// kept and reported by [`finish`](Self::finish); later records are dropped.
#[derive(Debug)]
pub struct MetricsFile {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    out: BufWriter<File>,
    failed: Option<std::io::Error>,
}

impl MetricsFile {
    /// Creates (or truncates) `path`.
    ///
    /// # Errors
    /// [`Error::Output`] naming `output.metrics` and the path.
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).map_err(|source| output_error(path, source))?;
        Ok(Self {
            path: path.to_path_buf(),
            state: Mutex::new(State {
                out: BufWriter::new(file),
                failed: None,
            }),
        })
    }

    /// Appends one record as a line.
    pub fn write(&self, record: &ClockRecord) {
        let line = serde_json::to_string(record).expect("a record serializes");
        self.write_line(&line);
    }

    /// Appends one line that already holds a record's JSON.
    pub fn write_line(&self, line: &str) {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.failed.is_some() {
            return;
        }
        if let Err(e) = writeln!(s.out, "{line}") {
            s.failed = Some(e);
        }
    }

    /// Flushes the file.
    ///
    /// # Errors
    /// [`Error::Output`] with the first write error, if any.
    pub fn finish(&self) -> Result<()> {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let r = match s.failed.take() {
            Some(e) => Err(e),
            None => s.out.flush(),
        };
        r.map_err(|source| output_error(&self.path, source))
    }
}

fn output_error(path: &Path, source: std::io::Error) -> Error {
    Error::Output {
        field: "output.metrics",
        path: path.to_path_buf(),
        source,
    }
}

/// The last record of each node in a JSON-lines metrics file (by node, ascending), skipping
/// lines that do not parse (a node may have died in the middle of one).
///
/// # Errors
/// [`Error::Output`] if the file cannot be read.
pub fn last_records(path: &Path) -> Result<Vec<ClockRecord>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Output {
        field: "output.metrics",
        path: path.to_path_buf(),
        source,
    })?;
    let mut last: std::collections::BTreeMap<u32, ClockRecord> = std::collections::BTreeMap::new();
    for line in text.lines() {
        if let Ok(r) = serde_json::from_str::<ClockRecord>(line) {
            last.insert(r.peer, r);
        }
    }
    Ok(last.into_values().collect())
}

/// After a run described by `spec` failed with `failed`: writes its summary to
/// `output.summary` (if set) from the last record of each node in `output.metrics` (if
/// set; otherwise the summary holds the run's description and the failure only), marked
/// with `failed` ([`Summary::partial`](sfb_core::metrics::Summary::partial)). Best effort:
/// a file that cannot be read or written is logged, not raised over the run's error.
pub fn write_partial_summary(spec: &crate::RunSpec, failed: &str) {
    let Some(path) = &spec.output.summary else {
        return;
    };
    let last = match &spec.output.metrics {
        Some(m) => last_records(m).unwrap_or_else(|e| {
            tracing::warn!("partial summary: {e}");
            Vec::new()
        }),
        None => Vec::new(),
    };
    let summary = sfb_core::metrics::Summary::partial(spec.run_info(), &last, failed.to_string());
    let text = serde_json::to_string_pretty(&summary).expect("a summary serializes") + "\n";
    if let Err(e) = std::fs::write(path, text) {
        tracing::warn!("writing the partial summary {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(clock: u64) -> ClockRecord {
        ClockRecord {
            peer: 1,
            clock,
            wall_s: 0.5,
            objective: None,
            test_accuracy: None,
            samples: 3,
            samples_per_s: 6.0,
            bytes_sent: 0,
            bytes_received: 0,
            compute_s: 0.0,
            apply_s: 0.0,
            wait_s: 0.0,
            eval_s: 0.0,
            max_staleness: 0,
        }
    }

    #[test]
    fn records_from_several_threads_are_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        let f = MetricsFile::create(&path).unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..100).for_each(|c| f.write(&record(c))));
            }
        });
        f.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let back: Vec<ClockRecord> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back.len(), 400);
        assert_eq!(back.iter().filter(|r| r.clock == 7).count(), 4);
    }

    #[test]
    fn an_uncreatable_file_names_the_field_and_path() {
        let e = MetricsFile::create(Path::new("/nonexistent-dir/m.jsonl")).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("output.metrics"), "{text}");
        assert!(text.contains("/nonexistent-dir/m.jsonl"), "{text}");
    }
}
