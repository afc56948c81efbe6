//! Checks made before any work starts, so that a run fails in its first second rather
//! than after its last clock:
//!
//! - [`seconds`]: a number of seconds is finite, in range and at most [`MAX_SECONDS`], so
//!   converting it to a [`Duration`] (or adding it to an `Instant`) can never panic;
//! - [`output_file`], [`output_dir`]: an output path can be written (its folder exists,
//!   it is not a folder, a folder is not a file, permissions allow it), with the
//!   operating system's reason when it cannot.
//!
//! # Example
//! ```
//! use sfb_harness::preflight;
//! assert_eq!(preflight::seconds("--timeout", 2.5, false)?.as_millis(), 2500);
//! let e = preflight::seconds("--timeout", 1e30, false).unwrap_err();
//! assert_eq!(
//!     e.to_string(),
//!     "--timeout must be a positive number of seconds, at most 31536000 (one year), got 1e30"
//! );
//! assert!(preflight::output_file("output.summary", "/nonexistent-dir/x.json".as_ref()).is_err());
//! # Ok::<(), sfb_harness::Error>(())
//! ```

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{Error, Result};

/// The longest duration any seconds option accepts: one year, 31,536,000 s.
///
/// Far beyond any sensible timeout or search budget, and far below what [`Duration`]
/// (`u64::MAX` seconds) and deadline arithmetic (`Instant + Duration`, tokio's timers)
/// can hold: a value that passes [`seconds`] converts without panicking wherever it goes.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// Checks a number of seconds given as `field` (a spec field such as `net.timeout_s`, or
/// a flag) and converts it.
///
/// # Arguments
/// `zero_ok`: whether 0 is accepted (a search budget may be zero; a timeout may not).
///
/// # Errors
/// [`Error::Seconds`] naming `field` for NaN, infinities, negative values (and zero unless
/// `zero_ok`), and values above [`MAX_SECONDS`].
pub fn seconds(field: &'static str, v: f64, zero_ok: bool) -> Result<Duration> {
    let low_ok = if zero_ok { v >= 0.0 } else { v > 0.0 };
    // NaN fails both comparisons; ±∞ fails one of them.
    if low_ok && v <= MAX_SECONDS {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(Error::Seconds {
            field,
            expected: if zero_ok {
                "a non-negative number of seconds"
            } else {
                "a positive number of seconds"
            },
            got: v,
        })
    }
}

/// Checks that `path` can be written as a file (given as `field`, named in the error):
/// its folder exists, it is not a folder, and it opens for writing. An existing file is
/// opened without truncating it and left unchanged; a file the check had to create is
/// removed again. Paths that exist and are not regular files (`/dev/null`, a FIFO) are
/// accepted without being opened, so the check never blocks.
///
/// # Errors
/// [`Error::Output`] with the operating system's reason.
pub fn output_file(field: &'static str, path: &Path) -> Result<()> {
    let err = |source| Error::Output {
        field,
        path: path.to_path_buf(),
        source,
    };
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "it is a folder, not a file",
        ))),
        Ok(m) if m.is_file() => std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(err),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(err)?;
            std::fs::remove_file(path).map_err(err)
        }
        Err(e) => Err(err(e)),
    }
}

/// Checks that `dir` is a folder files can be written in (given as `field`, named in the
/// error), creating it and its parents when missing (as the writer would), then creating
/// and removing a probe file in it.
///
/// # Errors
/// [`Error::Output`] with the operating system's reason: `dir` names an existing file, a
/// parent is not a folder, or permissions forbid it.
pub fn output_dir(field: &'static str, dir: &Path) -> Result<()> {
    let err = |source| Error::Output {
        field,
        path: dir.to_path_buf(),
        source,
    };
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "it is an existing file, not a folder",
            )));
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        Err(e) => return Err(err(e)),
    }
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let probe = dir.join(format!(
        ".sfb-probe-{}-{}",
        std::process::id(),
        PROBES.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(err)?;
    std::fs::remove_file(&probe).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_refuse_what_duration_cannot_hold() {
        for v in [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -1.0,
            1e30,
            3.2e7,
        ] {
            let e = seconds("net.timeout_s", v, true).unwrap_err().to_string();
            assert!(e.starts_with("net.timeout_s must be a non-negative number of seconds, at most 31536000 (one year), got "), "{e}");
        }
        assert!(seconds("x", 0.0, false).is_err());
        assert_eq!(seconds("x", 0.0, true).unwrap(), Duration::ZERO);
        assert_eq!(
            seconds("x", MAX_SECONDS, false).unwrap(),
            Duration::from_secs(31_536_000)
        );
        let e = seconds("--timeout", f64::NAN, false)
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("got NaN"), "{e}");
    }

    #[test]
    fn output_paths_are_checked_without_leaving_anything() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("summary.json");
        output_file("output.summary", &f).unwrap();
        assert!(!f.exists(), "the probe is removed");
        std::fs::write(&f, "keep").unwrap();
        output_file("output.summary", &f).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "keep");
        let e = output_file("output.summary", d.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("it is a folder, not a file"), "{e}");
        let e = output_file("output.metrics", &d.path().join("no/such/m.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cannot write output.metrics "), "{e}");
        assert!(e.contains("No such file or directory"), "{e}");
        output_file("output.metrics", Path::new("/dev/null")).unwrap();

        let e = output_dir("-o", &f).unwrap_err().to_string();
        assert!(e.contains("it is an existing file, not a folder"), "{e}");
        let e = output_dir("-o", &f.join("sub")).unwrap_err().to_string();
        assert!(e.contains("Not a directory"), "{e}");
        let new = d.path().join("a/b");
        output_dir("-o", &new).unwrap();
        assert!(new.is_dir());
        assert_eq!(std::fs::read_dir(&new).unwrap().count(), 0);
    }
}
