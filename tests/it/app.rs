//! A program of your own on `sfb::app::App` (`examples/lsq_app.rs`): it registers a
//! least-squares model as `--model lsq` and gets the `sfb` commands. Under BSP with full
//! broadcast its replicas are bitwise alike in memory, on the simulator, under FMS, as
//! processes it launches itself over libp2p, and as 4 hand-run processes of a cluster file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{SFB, assert_gone, processes_mentioning, start_exe, tempdir};

const TRAIN: &[&str] = &["--model", "lsq", "--clocks", "30", "--eval-every", "10"];

/// The example's executable, built by `cargo test` beside the `sfb` binary.
fn app() -> PathBuf {
    let exe = Path::new(SFB).with_file_name("examples").join("lsq_app");
    assert!(exe.exists(), "{} is built by cargo test", exe.display());
    exe
}

/// `lsq_app ARGS --summary FILE` (with `TMPDIR` = `tmp`); the summary, after checking
/// it succeeded.
fn summary_of(args: &[&str], dir: &Path, name: &str, tmp: &Path) -> Value {
    let path = dir.join(format!("{name}.json"));
    let out = Command::new(app())
        .args(args)
        .arg("--summary")
        .arg(&path)
        .env("TMPDIR", tmp)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "lsq_app {args:?}: {err}");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn checksums(s: &Value) -> Vec<String> {
    s["replica_checksums"]
        .as_array()
        .unwrap_or_else(|| panic!("{s}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_registered_model_runs_on_every_transport_with_the_same_replicas() {
    let d = tempdir("app", "transports");
    let tmp = d.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let run = |extra: &[&str], name: &str| {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(TRAIN);
        summary_of(&args, &d, name, &tmp)
    };
    let mem = run(&["run"], "mem");
    let sim = run(&["sim"], "sim");
    let fms = run(&["run", "--backend", "fms"], "fms");
    let p2p = run(&["run", "--transport", "libp2p", "--peers", "4"], "libp2p");
    // The launch started this program's own executable for each node, and none is left.
    assert!(
        processes_mentioning(&tmp).is_empty(),
        "a node of the launch outlived it"
    );
    for s in [&mem, &sim, &fms, &p2p] {
        assert_eq!(s["model"], "lsq", "{s}");
        assert_eq!(s["clocks"], 30, "{s}");
        // The program's evaluator: the held-out half-MSE, near 0 (W* is recovered).
        let objective = s["objective"].as_f64().unwrap_or_else(|| panic!("{s}"));
        assert!(objective < 0.05, "{s}");
    }
    assert_eq!(p2p["transport"], "libp2p");
    let want = checksums(&mem);
    assert_eq!(want.len(), 4);
    assert!(want.iter().all(|c| c == &want[0]), "{want:?}");
    assert_eq!(checksums(&sim), want, "simulator");
    assert_eq!(checksums(&fms), want, "FMS");
    assert_eq!(checksums(&p2p), want, "libp2p processes");
}

#[test]
fn four_hand_run_processes_of_the_program_equal_its_in_memory_run() {
    let d = tempdir("app", "hand-run");
    let cluster = d.join("cluster.toml");
    let init = Command::new(app())
        .args([
            "cluster",
            "init",
            "--peers",
            "4",
            "--out-degree",
            "3",
            "--base-port",
            "0",
            "-o",
        ])
        .arg(&cluster)
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let nodes: Vec<(String, Vec<String>)> = (0..4)
        .map(|i| {
            let summary = d.join(format!("peer{i}.json")).display().to_string();
            let mut args: Vec<String> = ["peer", "--id", &i.to_string()]
                .iter()
                .chain(TRAIN)
                .map(|s| s.to_string())
                .collect();
            args.extend(["--summary".into(), summary]);
            (format!("peer{i}"), args)
        })
        .collect();
    let mut c = start_exe(&app(), &cluster, &nodes);
    let pids = c.children.pids();
    c.exchange();
    c.children.wait_all(Duration::from_secs(120));
    drop(c);
    assert_gone(&pids);
    let hand: Vec<String> = (0..4)
        .map(|i| {
            let s: Value = serde_json::from_str(
                &std::fs::read_to_string(d.join(format!("peer{i}.json"))).unwrap(),
            )
            .unwrap();
            assert_eq!(s["model"], "lsq", "{s}");
            checksums(&s).remove(0)
        })
        .collect();
    let mut args = vec!["run"];
    args.extend(TRAIN);
    let mem = summary_of(&args, &d, "mem", &std::env::temp_dir());
    assert_eq!(
        hand,
        checksums(&mem),
        "hand-run processes and the in-memory run differ"
    );
}

#[test]
fn the_program_refuses_what_its_model_cannot_do_and_names_its_models() {
    let run = |exe: &Path, args: &[&str]| {
        let out = Command::new(exe).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // `sfb` itself has no `lsq`; the program lists it beside the built-in models.
    let e = run(Path::new(SFB), &["run", "--model", "lsq"]);
    assert!(e.contains("[possible values: mlr, l2mlr, dml, sc]"), "{e}");
    let e = run(&app(), &["run", "--model", "lasso"]);
    assert!(
        e.contains("[possible values: mlr, l2mlr, dml, sc, lsq]"),
        "{e}"
    );
    // A saved-model file holds a built-in model; SAGA needs a built-in model's table.
    let d = tempdir("app", "refusals");
    let saved = d.join("m.sfbm");
    let e = run(
        &app(),
        &[
            "run",
            "--model",
            "lsq",
            "--save-model",
            saved.to_str().unwrap(),
        ],
    );
    assert!(e.contains("--save-model needs a built-in model"), "{e}");
    assert!(!saved.exists());
    let e = run(&app(), &["run", "--model", "lsq", "--optimizer", "saga"]);
    assert!(e.contains("saga"), "{e}");
    // The built-in models' up-front refusals hold for it: a batch larger than its data.
    let e = run(&app(), &["run", "--model", "lsq", "--batch", "5000"]);
    assert!(e.contains("5000"), "{e}");
}
