//! `sfb plan` against `sfb sim`: the plan's closed forms are the simulator's model of one
//! steady BSP clock, so at modest P they must give the simulator's time per clock
//! (model costs, deterministic; no wall-clock figure is asserted). And the command's
//! output and refusals.

mod common;

use std::process::Command;

use common::SFB;
use sfb_harness::plan::{Plan, Setup, Strategy, plan};
use sfb_harness::sim::{Ingress, SimOptions};
use sfb_harness::{Backend, DataSource, Push, RunSpec, TopologyOptions, Transport};
use sfb_net::bandwidth::Rate;

const P: usize = 8;
const J: usize = 64;
const D: usize = 256;

/// The machine and network of both: 1 Gbit/s, 50 µs, model costs; with `cpu`, libp2p's
/// measured transport CPU and all nodes on a 2-core host.
fn sim_options(cpu: bool, nodes: usize) -> SimOptions {
    SimOptions {
        egress: Some(Rate(1.25e8)),
        // The simulator books a receiver's ingress in the order sends are processed,
        // not the order frames reach it (see the README's plan section): without an
        // ingress limit both models are the same NIC.
        ingress: Ingress::Unlimited,
        evaluate_s: Some(1e-9),
        colocate: cpu.then_some((nodes, 2)),
        transport_cpu: cpu.then_some(Rate(360e6)),
        ..SimOptions::default()
    }
}

/// The simulator's steady time per clock: the latest record of each clock, differenced,
/// the median over clocks 2..=clocks−1 (the first clock has nothing to apply, the last
/// evaluates and finishes).
fn sim_clock(backend: Backend, push: Push, q: Option<usize>, cpu: bool) -> f64 {
    let nodes = if backend == Backend::Fms { P + 1 } else { P };
    let mut spec = RunSpec {
        peers: P,
        backend,
        transport: Transport::Sim,
        fms_push: push,
        data: DataSource::Synthetic(format!("classes={J},features={D},samples=2048,test=16")),
        topology: TopologyOptions {
            out_degree: q,
            ..TopologyOptions::default()
        },
        sim: sim_options(cpu, nodes),
        ..RunSpec::default()
    };
    spec.train.clocks = 8;
    spec.train.batch = 16;
    spec.train.optimizer = Some("sgd".parse().unwrap());
    let out = sfb_harness::run(&spec, None).unwrap();
    let mut last = vec![0.0f64; spec.train.clocks as usize + 1];
    for r in &out.records {
        let c = r.clock as usize;
        if c < last.len() {
            last[c] = last[c].max(r.wall_s);
        }
    }
    let mut d: Vec<f64> = last.windows(2).skip(1).map(|w| w[1] - w[0]).collect();
    d.pop();
    d.sort_by(f64::total_cmp);
    d[d.len() / 2]
}

fn planned(cpu: bool, nodes: usize) -> Plan {
    plan(&Setup {
        peers: P,
        j: J,
        d: D,
        batch: 16,
        sim: sim_options(cpu, nodes),
        qs: vec![3],
        calibrated: false,
        calibration_workers: 0,
    })
    .unwrap()
}

/// The plan's clock for `(strategy, q)` against the simulator's, within 1%.
fn check(cpu: bool, arms: &[(Strategy, Option<usize>, Backend, Push)]) {
    for &(strategy, q, backend, push) in arms {
        let nodes = if backend == Backend::Fms { P + 1 } else { P };
        let p = planned(cpu, nodes);
        let planned = p
            .estimates
            .iter()
            .find(|e| e.strategy == strategy && (q.is_none() || e.q == q))
            .map(|e| e.clock_s)
            .unwrap();
        let sim = sim_clock(backend, push, q, cpu);
        let ratio = planned / sim;
        assert!(
            (ratio - 1.0).abs() < 0.01,
            "{strategy} {q:?}: plan {planned:.6e} s, sim {sim:.6e} s (ratio {ratio:.4})"
        );
    }
}

const FULL: (Strategy, Option<usize>, Backend, Push) =
    (Strategy::SfbFull, None, Backend::Sfb, Push::Factors);
const Q3: (Strategy, Option<usize>, Backend, Push) =
    (Strategy::SfbPartial, Some(3), Backend::Sfb, Push::Factors);
const FMS: (Strategy, Option<usize>, Backend, Push) =
    (Strategy::FmsFactors, None, Backend::Fms, Push::Factors);
const FMS_DENSE: (Strategy, Option<usize>, Backend, Push) =
    (Strategy::FmsDense, None, Backend::Fms, Push::Dense);

#[test]
fn the_plan_gives_the_simulators_time_per_clock() {
    check(false, &[FULL, Q3, FMS, FMS_DENSE]);
}

#[test]
fn with_transport_cpu_on_a_shared_host_too() {
    check(true, &[FULL, Q3, FMS]);
}

/// `sfb plan ARGS`'s standard output; panics with its stderr if it fails.
fn sfb_plan(args: &[&str]) -> Vec<u8> {
    let out = Command::new(SFB).arg("plan").args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {err}");
    out.stdout
}

#[test]
fn the_command_prints_a_table_or_json_and_names_bad_flags() {
    let text = String::from_utf8(sfb_plan(&[
        "-P",
        "16",
        "--size",
        "512",
        "--bandwidth",
        "1gbit",
        "--q",
        "2,4",
    ]))
    .unwrap();
    let names = ["sfb-full", "sfb-partial", "fms-factors", "ring-allreduce"];
    for s in names.iter().chain(&["recommended:"]) {
        assert!(text.contains(s), "{s} missing:\n{text}");
    }
    let json = sfb_plan(&[
        "--peers",
        "4",
        "--classes",
        "10",
        "--features",
        "20",
        "--link",
        "10gbit",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(v["peers"], 4);
    assert_eq!(v["estimates"][0]["strategy"], "sfb-full");
    assert!(v["recommended"].is_string() && v["frames"]["factors"].is_u64());
    for (args, flag) in [
        (&["-P", "4", "--size", "8", "--q", "4"][..], "--q"),
        (&["-P", "0", "--size", "8"][..], "--peers"),
        (&["-P", "4", "--rows", "8"][..], "--cols"),
        (
            &["-P", "4", "--size", "8", "--bandwidth", "fast"][..],
            "--bandwidth",
        ),
        (
            &["-P", "4", "--size", "8", "--colocate", "8"][..],
            "--colocate",
        ),
    ] {
        let out = Command::new(SFB).arg("plan").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(flag),
            "{args:?}: {err}"
        );
    }
}
