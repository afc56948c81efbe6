//! Running arms: in this process through an executor, or as child `sfb run --spec FILE`
//! processes when an arm has an environment.

use std::path::PathBuf;
use std::sync::Arc;

use sfb_core::metrics::{ClockRecord, Summary};

use super::{Arm, Error, Result, io};
use sfb_harness::Progress;

/// Carries out one run in this process: `sfb_harness::run` by default; the `sfb` binary
/// supplies one that also launches libp2p clusters.
pub type Exec = Arc<
    dyn Fn(
            &sfb_harness::RunSpec,
            Option<Progress>,
        )
            -> std::result::Result<sfb_harness::Outcome, Box<dyn std::error::Error + Send + Sync>>
        + Send
        + Sync,
>;

/// What a [`Runner`] tells its user while arms run; every method defaults to nothing.
pub trait Observer: Send + Sync {
    /// A line of progress in words.
    fn say(&self, _line: &str) {}
    /// `arm` starts; the returned callback, if any, hears every clock every node completes
    /// (not called for arms run as child processes).
    fn start(&self, _arm: &Arm) -> Option<Progress> {
        None
    }
    /// `arm` ended: its summary, or the error's text.
    fn finish(&self, _arm: &Arm, _result: std::result::Result<&Summary, String>) {}
}

/// An [`Observer`] that says nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Observer for Quiet {}

/// Runs arms one after another.
pub struct Runner {
    exec: Exec,
    observer: Box<dyn Observer>,
    sfb: Option<PathBuf>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("sfb", &self.sfb)
            .finish_non_exhaustive()
    }
}

impl Default for Runner {
    fn default() -> Self {
        Self::new()
    }
}

impl Runner {
    /// A quiet runner carrying out arms with [`sfb_harness::run`] (libp2p arms launch the
    /// executable named by `SFB_EXE`), and arms with an environment as child processes
    /// of [`sfb_exe`](Self::sfb_exe).
    pub fn new() -> Self {
        Self {
            exec: Arc::new(|spec, progress| Ok(sfb_harness::run(spec, progress)?)),
            observer: Box::new(Quiet),
            sfb: None,
        }
    }

    /// Carries out runs in this process with `exec`.
    pub fn exec(mut self, exec: Exec) -> Self {
        self.exec = exec;
        self
    }

    /// Reports progress to `observer`.
    pub fn observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observer = Box::new(observer);
        self
    }

    /// The `sfb` executable for arms run as child processes (default: the one named by
    /// `SFB_EXE`; `sfb bench` names its own executable).
    pub fn sfb_exe(mut self, path: impl Into<PathBuf>) -> Self {
        self.sfb = Some(path.into());
        self
    }

    /// Tells the observer `line`.
    pub fn say(&self, line: &str) {
        self.observer.say(line);
    }

    /// Runs `arm`: validates its spec, then carries it out in this process, or as a child
    /// `sfb run --spec FILE` with the arm's environment when it has one.
    ///
    /// # Errors
    /// [`Error::Spec`] before anything runs; [`Error::Run`] or [`Error::Child`] naming
    /// the arm when it fails.
    pub fn run(&self, arm: &Arm) -> Result<(Summary, Vec<ClockRecord>)> {
        arm.spec.validate().map_err(|source| Error::Spec {
            arm: arm.name.clone(),
            source: Box::new(source),
        })?;
        let r = if arm.env.is_empty() {
            let progress = self.observer.start(arm);
            // The report plots every clock: keep the records (bench runs are short).
            let mut spec = arm.spec.clone();
            spec.output.keep_records = true;
            (self.exec)(&spec, progress)
                .map(|o| (o.summary, o.records))
                .map_err(|source| Error::Run {
                    arm: arm.name.clone(),
                    command: arm.command(),
                    source,
                })
        } else {
            self.run_child(arm)
        };
        match &r {
            Ok((s, _)) => self.observer.finish(arm, Ok(s)),
            Err(e) => self.observer.finish(arm, Err(e.to_string())),
        }
        r
    }

    /// Runs `arm` as a child `sfb run --spec FILE` with its environment and reads back
    /// its summary and per-clock metrics.
    fn run_child(&self, arm: &Arm) -> Result<(Summary, Vec<ClockRecord>)> {
        let exe = match (&self.sfb, std::env::var_os("SFB_EXE")) {
            (Some(p), _) => p.clone(),
            (None, Some(p)) => PathBuf::from(p),
            (None, None) => {
                return Err(Error::Io {
                    path: "sfb".into(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "no executable to run the arm in: name one (Runner::sfb_exe or SFB_EXE)",
                    ),
                });
            }
        };
        let dir = std::env::temp_dir().join(format!(
            "sfb-arm-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let result = (|| {
            let (summary, metrics) = (dir.join("summary.json"), dir.join("metrics.jsonl"));
            let mut spec = arm.spec.clone();
            spec.output.summary = Some(summary.clone());
            spec.output.metrics = Some(metrics.clone());
            let file = dir.join("arm.json");
            std::fs::write(&file, spec.to_json()).map_err(io(&file))?;
            self.observer.start(arm);
            let out = std::process::Command::new(&exe)
                .args(["run", "--spec"])
                .arg(&file)
                .envs(arm.env.iter().map(|(k, v)| (k, v)))
                .output()
                .map_err(io(&exe))?;
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                let mut tail: Vec<&str> = err.lines().rev().take(20).collect();
                tail.reverse();
                return Err(Error::Child {
                    arm: arm.name.clone(),
                    status: out.status,
                    stderr: tail.join("\n"),
                });
            }
            let read = |path: &PathBuf| std::fs::read_to_string(path).map_err(io(path));
            let json = |path: &PathBuf| {
                let path = path.clone();
                move |source| Error::Json { path, source }
            };
            let s: Summary = serde_json::from_str(&read(&summary)?).map_err(json(&summary))?;
            let records = read(&metrics)?
                .lines()
                .map(serde_json::from_str)
                .collect::<std::result::Result<Vec<ClockRecord>, _>>()
                .map_err(json(&metrics))?;
            Ok((s, records))
        })();
        let _ = std::fs::remove_dir_all(&dir);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_arm_is_named_with_what_is_wrong() {
        let mut spec = sfb_harness::RunSpec::default();
        spec.train.lr = Some(-1.0);
        let e = Runner::new().run(&Arm::new("bad arm", spec)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "arm \"bad arm\": train.lr must be a positive number, got -1"
        );
        let spec = sfb_harness::RunSpec {
            transport: sfb_harness::Transport::Libp2p,
            ..sfb_harness::RunSpec::default()
        };
        let e = Runner::new().run(&Arm::new("p2p", spec)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("arm \"p2p\" (sfb run --model mlr ")
                && text.contains("--transport libp2p"),
            "{text}"
        );
        assert!(matches!(e, Error::Run { ref arm, .. } if arm == "p2p"));
    }

    #[test]
    fn a_failing_child_is_named_with_its_stderr() {
        let arm = Arm::new("child", sfb_harness::RunSpec::default()).with_env("X", "1");
        // `false` ignores its arguments and fails: the arm's error says which arm and why.
        let e = Runner::new().sfb_exe("false").run(&arm).unwrap_err();
        assert!(
            matches!(&e, Error::Child { arm, status, .. } if arm == "child" && !status.success()),
            "{e}"
        );
    }
}
