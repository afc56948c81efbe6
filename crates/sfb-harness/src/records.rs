//! A run's per-clock records, streamed to its metrics file as they happen.
//!
//! Nodes report a record per clock; every transport hands each one to the run's
//! [`RecordSink`] as it is emitted (in memory and on the simulator from the nodes'
//! threads, over libp2p from the children's stdout). The sink appends it to the metrics
//! file (`--metrics FILE.jsonl`, flushed at least every [`FLUSH_EVERY`], so the file can be
//! followed while the run goes), and keeps each node's latest record in memory (all of
//! them only if asked, [`crate::OutputOptions::keep_records`]): memory stays flat however
//! long the run, and a run that fails still knows how far every node got.
//!
//! A write that fails (a full disk, a file past its size limit) is kept, and the sink's
//! failure callback ([`RecordSink::on_failure`]) is called once with the highest clock any
//! node reported: the transports stop the whole run at a clock just past it, so the run
//! ends at once, every node at the same clock (checkpointed there if it checkpoints), and
//! its summary says why (`failed`) with the clocks actually done.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sfb_core::metrics::ClockRecord;

use crate::{Error, Result};

/// Longest a record waits in the metrics file's buffer.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// Called once, on the first failed write, with the highest clock any node reported.
pub type OnFailure = Box<dyn FnOnce(u64) + Send>;

/// Where a run's records go: its metrics file (if any) and, in memory, each node's latest
/// record (or all of them). Shared by every node's thread.
pub struct RecordSink {
    path: Option<PathBuf>,
    keep_all: bool,
    state: Mutex<State>,
}

impl std::fmt::Debug for RecordSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordSink")
            .field("path", &self.path)
            .field("keep_all", &self.keep_all)
            .finish_non_exhaustive()
    }
}

struct State {
    out: Option<BufWriter<File>>,
    flushed: Instant,
    failed: Option<std::io::Error>,
    on_failure: Option<OnFailure>,
    fastest: u64,
    /// Per node (the FMS server's `u32::MAX` last): its latest record, or all of them.
    records: BTreeMap<u32, Vec<ClockRecord>>,
}

impl RecordSink {
    /// A sink writing to the metrics file `path` (created or truncated), or to no file.
    ///
    /// # Errors
    /// [`Error::Output`] naming `output.metrics` and the path.
    pub fn create(path: Option<&Path>) -> Result<Self> {
        let out = match path {
            Some(p) => Some(BufWriter::new(
                File::create(p).map_err(|source| output_error(p, source))?,
            )),
            None => None,
        };
        Ok(Self {
            path: path.map(Path::to_path_buf),
            keep_all: false,
            state: Mutex::new(State {
                out,
                flushed: Instant::now(),
                failed: None,
                on_failure: None,
                fastest: 0,
                records: BTreeMap::new(),
            }),
        })
    }

    /// Keep every record in memory ([`records`](Self::records)), not only each node's
    /// latest.
    #[must_use]
    pub fn keep_all(mut self, all: bool) -> Self {
        self.keep_all = all;
        self
    }

    /// What to do when a write fails: called once, with the highest clock any node has
    /// reported (the transports stop the run just past it). Replaces an earlier callback.
    pub fn on_failure(&self, f: OnFailure) {
        self.lock().on_failure = Some(f);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes one record: kept, and appended to the metrics file as a line.
    pub fn write(&self, record: &ClockRecord) {
        let mut s = self.lock();
        s.fastest = s.fastest.max(record.clock);
        let kept = s.records.entry(record.peer).or_default();
        if !self.keep_all {
            kept.clear();
        }
        kept.push(record.clone());
        if s.failed.is_some() {
            return;
        }
        let Some(out) = s.out.as_mut() else { return };
        let line = serde_json::to_string(record).expect("a record serializes");
        let mut r = writeln!(out, "{line}");
        if r.is_ok() && s.flushed.elapsed() >= FLUSH_EVERY {
            r = s.out.as_mut().map_or(Ok(()), Write::flush);
            s.flushed = Instant::now();
        }
        if let Err(e) = r {
            s.failed = Some(e);
            let fastest = s.fastest;
            if let Some(f) = s.on_failure.take() {
                // Outside the lock: the callback may stop nodes that write records.
                drop(s);
                f(fastest);
            }
        }
    }

    /// The highest clock any node has reported.
    pub fn fastest(&self) -> u64 {
        self.lock().fastest
    }

    /// Each node's latest record, by node (workers in order, then the FMS server).
    pub fn last(&self) -> Vec<ClockRecord> {
        self.lock()
            .records
            .values()
            .filter_map(|v| v.last().cloned())
            .collect()
    }

    /// Every record kept: with [`keep_all`](Self::keep_all) every node's, node by node,
    /// else each node's latest.
    pub fn records(&self) -> Vec<ClockRecord> {
        self.lock().records.values().flatten().cloned().collect()
    }

    /// Whether a write failed.
    pub fn failed(&self) -> bool {
        self.lock().failed.is_some()
    }

    /// Why the metrics file could not be written, if a write failed: the error
    /// [`finish`](Self::finish) returns, as text.
    pub fn failure(&self) -> Option<String> {
        let s = self.lock();
        let e = s.failed.as_ref()?;
        let path = self.path.clone().unwrap_or_default();
        Some(output_error(&path, std::io::Error::new(e.kind(), e.to_string())).to_string())
    }

    /// Flushes the metrics file.
    ///
    /// # Errors
    /// [`Error::Output`] with the first write error, if any.
    pub fn finish(&self) -> Result<()> {
        let mut s = self.lock();
        let path = self.path.clone().unwrap_or_default();
        if let Some(e) = &s.failed {
            return Err(output_error(
                &path,
                std::io::Error::new(e.kind(), e.to_string()),
            ));
        }
        let r = s.out.as_mut().map_or(Ok(()), Write::flush);
        s.flushed = Instant::now();
        r.map_err(|source| output_error(&path, source))
    }
}

fn output_error(path: &Path, source: std::io::Error) -> Error {
    Error::Output {
        field: "output.metrics",
        path: path.to_path_buf(),
        source,
    }
}

/// After a run described by `spec` failed with `failed`: writes its summary to
/// `output.summary` (if set) from `last`, each node's last record (what the run's
/// [`RecordSink`] kept: [`RecordSink::last`]), marked with `failed`
/// ([`Summary::partial`](sfb_core::metrics::Summary::partial)): the clocks every node
/// completed, not 0. Best effort: a file that cannot be written is logged, not raised over
/// the run's error.
pub fn write_partial_summary(spec: &crate::RunSpec, failed: &str, last: &[ClockRecord]) {
    let Some(path) = &spec.output.summary else {
        return;
    };
    let summary = sfb_core::metrics::Summary::partial(spec.run_info(), last, failed.to_string());
    let text = serde_json::to_string_pretty(&summary).expect("a summary serializes") + "\n";
    if let Err(e) = std::fs::write(path, text) {
        tracing::warn!("writing the partial summary {}: {e}", path.display());
    }
}

/// Saves the model `spec` trained into the replica `w` (on data prepared by `prep`) to
/// `path` ([`SavedModel`](sfb_models::saved::SavedModel)); returns what was saved.
///
/// # Errors
/// [`Error::Models`]: a replica that does not fit the model (or
/// holds a non-finite value), or the operating system's reason the file cannot be written.
pub fn save_model(
    path: &std::path::Path,
    spec: &crate::RunSpec,
    prep: Option<sfb_models::Preprocess>,
    w: ndarray::ArrayView2<'_, f32>,
) -> crate::Result<sfb_models::saved::SavedModel> {
    let model = spec.model_spec();
    let prep = prep.unwrap_or_else(|| {
        let (classes, d) = (w.nrows(), w.ncols());
        sfb_models::Preprocess::identity(d, sfb_models::data::LabelMap::identity(classes))
    });
    let saved = sfb_models::saved::SavedModel::new(model, prep, w.to_owned())?;
    saved.save(path)?;
    tracing::info!("saved the model to {}", path.display());
    Ok(saved)
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
            send_budget: None,
            link_bytes_per_s: None,
        }
    }

    #[test]
    fn records_from_several_threads_are_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        let f = RecordSink::create(Some(&path)).unwrap();
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
        let e = RecordSink::create(Some(Path::new("/nonexistent-dir/m.jsonl"))).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("output.metrics"), "{text}");
        assert!(text.contains("/nonexistent-dir/m.jsonl"), "{text}");
    }

    fn at(peer: u32, clock: u64) -> ClockRecord {
        ClockRecord {
            peer,
            ..record(clock)
        }
    }

    #[test]
    fn each_nodes_latest_record_is_kept_or_all_when_asked() {
        let last = RecordSink::create(None).unwrap();
        let all = RecordSink::create(None).unwrap().keep_all(true);
        for c in 1..=3 {
            for p in [u32::MAX, 2, 0] {
                last.write(&at(p, c));
                all.write(&at(p, c));
            }
        }
        let peers_clocks = |v: Vec<ClockRecord>| -> Vec<(u32, u64)> {
            v.iter().map(|r| (r.peer, r.clock)).collect()
        };
        assert_eq!(
            peers_clocks(last.last()),
            [(0, 3), (2, 3), (u32::MAX, 3)],
            "workers in order, then the server"
        );
        assert_eq!(peers_clocks(last.records()), peers_clocks(last.last()));
        assert_eq!(all.records().len(), 9);
        assert_eq!(peers_clocks(all.records())[..3], [(0, 1), (0, 2), (0, 3)]);
        assert_eq!(last.fastest(), 3);
        assert!(last.finish().is_ok() && last.failure().is_none());
    }

    /// `/dev/full` takes the file but refuses every write (ENOSPC), like a full disk.
    #[test]
    fn a_failed_write_calls_back_once_with_the_fastest_clock_and_is_reported() {
        let path = Path::new("/dev/full");
        if !path.exists() {
            return;
        }
        let f = RecordSink::create(Some(path)).unwrap();
        let called = std::sync::Arc::new(Mutex::new(Vec::new()));
        let c = std::sync::Arc::clone(&called);
        f.on_failure(Box::new(move |clock| c.lock().unwrap().push(clock)));
        // Enough lines to fill the buffer, then past the flush interval.
        let mut clock = 0;
        while f.failure().is_none() {
            clock += 1;
            f.write(&at(clock as u32 % 3, clock));
            assert!(clock < 1_000_000, "a write to /dev/full never failed");
            if clock % 1000 == 0 {
                std::thread::sleep(FLUSH_EVERY);
            }
        }
        // Later records are still kept, not written.
        f.write(&at(0, clock + 1));
        assert_eq!(
            *called.lock().unwrap(),
            [clock],
            "called once, at the failing clock"
        );
        assert_eq!(f.fastest(), clock + 1);
        let why = f.failure().unwrap();
        assert!(
            why.contains("output.metrics /dev/full") && why.contains("No space left"),
            "{why}"
        );
        assert_eq!(f.finish().unwrap_err().to_string(), why);
    }
}
