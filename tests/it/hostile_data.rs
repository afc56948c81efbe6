//! Hostile and surprising data through the real binary (issue 13, items 4 and 7): every
//! input beyond a limit fails fast with exit code 1 and a message naming the limit and how
//! to raise it — never a panic (101) or an abort (134) — and surprises that do not stop a
//! run are WARN lines on stderr.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Longest any of these runs may take; each should finish in well under a second.
const TIMEOUT: Duration = Duration::from_secs(120);

struct Outcome {
    code: Option<i32>,
    stderr: String,
}

/// Runs `sfb run --peers 2 --clocks 2 …args` with `env` set; kills it after [`TIMEOUT`].
fn sfb_run(args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sfb"))
        .args(["run", "--peers", "2", "--clocks", "2", "--eval-every", "0"])
        .args(args)
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sfb");
    let mut pipe = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = pipe.read_to_end(&mut s);
        let _ = tx.send(s);
    });
    // The pipe closes when the process exits.
    let stderr = match rx.recv_timeout(TIMEOUT) {
        Ok(s) => s,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sfb run {args:?} did not finish within {TIMEOUT:?}");
        }
    };
    let status = child.wait().expect("wait for sfb");
    Outcome {
        code: status.code(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

fn file(bytes: &[u8], suffix: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .prefix("sfb-hostile-")
        .suffix(suffix)
        .tempfile()
        .unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    f
}

fn path(f: &tempfile::NamedTempFile) -> &str {
    f.path().to_str().unwrap()
}

/// Exit code 1 and every fragment in stderr.
fn assert_refused(o: &Outcome, fragments: &[&str]) {
    assert_eq!(o.code, Some(1), "exit code; stderr:\n{}", o.stderr);
    for f in fragments {
        assert!(
            o.stderr.contains(f),
            "stderr lacks {f:?}; stderr:\n{}",
            o.stderr
        );
    }
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
}

#[test]
fn feature_index_4e9_is_refused_with_the_feature_limit() {
    let f = file(b"1 1:0.5 3:1\n-1 2:1 4000000000:1\n", ".svm");
    let o = sfb_run(&["--data", path(&f)], &[]);
    let at = format!("{}:2: feature index 4000000000", path(&f));
    assert_refused(
        &o,
        &[
            &at,
            "over the feature-count limit of 33554432 features",
            "raise it with SFB_MAX_FEATURES=N",
        ],
    );
    // The variable the message names does raise (here: lower) the limit.
    let f = file(b"1 1:1\n-1 7:1\n", ".svm");
    let o = sfb_run(&["--data", path(&f)], &[("SFB_MAX_FEATURES", "5")]);
    assert_refused(
        &o,
        &["feature index 7, over the feature-count limit of 5 features"],
    );
}

#[test]
fn a_64_mib_line_without_newline_is_refused_with_the_line_limit() {
    let mut f = tempfile::Builder::new()
        .prefix("sfb-hostile-")
        .suffix(".svm")
        .tempfile()
        .unwrap();
    let chunk = "1 1:1 2:3.5 ".repeat((1 << 20) / 12);
    for _ in 0..64 * (1 << 20) / chunk.len() + 1 {
        f.write_all(chunk.as_bytes()).unwrap();
    }
    f.flush().unwrap();
    assert!(f.as_file().metadata().unwrap().len() >= 64 << 20);
    let o = sfb_run(&["--data", path(&f)], &[]);
    let at = format!("{}:1: line too long", path(&f));
    assert_refused(
        &o,
        &[
            &at,
            "over the line-length limit of 16777216 bytes",
            "raise it with SFB_MAX_LINE_BYTES=N",
        ],
    );
    // How much is read before the refusal is bounded by counting in sfb-models'
    // `limits::a_line_that_never_ends_is_refused_after_the_limit_without_buffering_it`.
}

#[cfg(unix)]
#[test]
fn dev_zero_as_data_is_refused_with_the_line_limit() {
    assert!(Path::new("/dev/zero").exists());
    let o = sfb_run(&["--data", "/dev/zero"], &[]);
    assert_refused(
        &o,
        &[
            "/dev/zero:1: line too long, over the line-length limit of 16777216 bytes",
            "SFB_MAX_LINE_BYTES",
        ],
    );
}

#[test]
fn invalid_utf8_is_an_error_naming_the_line() {
    let f = file(b"1 1:1\n-1 2:1\n1 3:\xff\xfe\x00garbage\n", ".svm");
    let o = sfb_run(&["--data", path(&f)], &[]);
    let at = format!("{}:3: not text: invalid UTF-8", path(&f));
    assert_refused(&o, &[&at]);
    let f = file(b"label,a\n0,1\n\x80\x81,2\n", ".csv");
    let o = sfb_run(&["--data", path(&f)], &[]);
    let at = format!("{}:3: not text", path(&f));
    assert_refused(&o, &[&at]);
}

#[test]
fn synthetic_shapes_beyond_the_limits_and_duplicate_keys_are_refused() {
    let o = sfb_run(&["--synthetic", "classes=100000,features=100000"], &[]);
    assert_refused(
        &o,
        &[
            "needs 40000000000 bytes (37.3 GiB)",
            "over the W-size limit of 2147483648 bytes",
            "SFB_MAX_W_BYTES",
        ],
    );
    let o = sfb_run(&["--synthetic", "classes=4,features=8,classes=8"], &[]);
    assert_refused(&o, &["key classes given twice: classes=4 and classes=8"]);
}

#[test]
fn surprises_that_do_not_stop_a_run_are_warned() {
    // One class, and a CSV header taken as such.
    let f = file(b"label,a,b\n1,0.5,1\n1,2,-1\n1,0,1\n1,1,1\n1,3,1\n", ".csv");
    let o = sfb_run(&["--data", path(&f), "--batch", "1"], &[]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stderr.contains("WARN"), "{}", o.stderr);
    assert!(
        o.stderr
            .contains(":1: first row taken for a header and skipped"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr
            .contains("every training sample has label 1: one class"),
        "{}",
        o.stderr
    );
    // No held-out samples.
    let o = sfb_run(
        &["--synthetic", "classes=3,features=4,samples=40,test=0"],
        &[],
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.stderr
            .contains("no held-out samples: no objective or accuracy will be computed"),
        "{}",
        o.stderr
    );
}
