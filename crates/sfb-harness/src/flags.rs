//! The command line's flags for the spec's fields: one table ([`FLAGS`]), read both ways.
//! A field named in an error is named by its flag ([`flag_for`]); a spec becomes the
//! `sfb run` (or `sfb sim`) arguments that reproduce it ([`to_args`]), or `None` when one
//! of its fields differs from the default and has no row here, so a field added to the
//! spec without a flag can never print a command that runs something else. `sfb-cli`'s
//! tests check the table against its clap definitions, both ways.

use crate::spec::{Backend, ConsistencySpec, DataSource, ModelChoice, Push, RunSpec, Transport};

/// One spec field and the flag that sets it.
#[derive(Clone, Copy)]
pub struct Flag {
    /// The field as a dotted path of its JSON names (`train.lr`); it stands for its
    /// sub-fields too (`data` for `data.files.train`).
    pub field: &'static str,
    /// The flag (`--lr`).
    pub flag: &'static str,
    /// What the flag says for a spec (the second argument is the default spec).
    write: fn(&RunSpec, &RunSpec) -> Arg,
}

impl std::fmt::Debug for Flag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.field, self.flag)
    }
}

/// What one row writes.
enum Arg {
    /// Nothing: the field is at its default (or not this spec's: another model's).
    Skip,
    /// `--flag VALUE`.
    Value(String),
    /// `--flag V1 --flag V2 …` (a repeatable flag).
    Repeat(Vec<String>),
    /// `--flag` alone.
    Switch,
    /// No flag can say it: the spec needs a file.
    Inexpressible,
}

/// `Value` of `v` when it differs from the default's `d`.
fn changed<T: PartialEq + ToString>(v: &T, d: &T) -> Arg {
    if v == d {
        Arg::Skip
    } else {
        Arg::Value(v.to_string())
    }
}

/// `Value` of `v` when set.
fn set<T: ToString>(v: Option<&T>) -> Arg {
    v.map_or(Arg::Skip, |v| Arg::Value(v.to_string()))
}

fn switch(on: bool) -> Arg {
    if on { Arg::Switch } else { Arg::Skip }
}

/// The lower-case word a flag takes for an enum (its serde name).
fn word<T: serde::Serialize>(v: Option<&T>) -> Arg {
    match v.map(serde_json::to_value) {
        None => Arg::Skip,
        Some(Ok(serde_json::Value::String(s))) => Arg::Value(s),
        Some(_) => Arg::Inexpressible,
    }
}

/// A rate in bytes/s as `--bandwidth` reads it back exactly: bits with a unit when that is
/// exact, else plain bytes per second.
pub fn rate_text(bytes_per_s: f64) -> String {
    let bits = bytes_per_s * 8.0;
    for (unit, scale) in [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)] {
        let n = bits / scale;
        if n >= 1.0 && n.fract() == 0.0 && n * scale / 8.0 == bytes_per_s {
            return format!("{n}{unit}");
        }
    }
    bytes_per_s.to_string()
}

macro_rules! row {
    ($field:literal, $flag:literal, |$s:ident, $d:ident| $body:expr) => {
        Flag {
            field: $field,
            flag: $flag,
            write: |$s: &RunSpec, $d: &RunSpec| {
                let _ = ($s, $d);
                $body
            },
        }
    };
}

/// Every spec field a flag sets, in the order [`to_args`] writes them (model and data
/// first: they read best at the front of the line). The `sim.` rows are `sfb sim`'s.
pub const FLAGS: &[Flag] = &[
    row!("model", "--model", |s, d| match &s.custom_model {
        Some(name) => Arg::Value(name.clone()),
        None => Arg::Value(s.model.name().into()),
    }),
    // Named by `--model` with the model.
    row!("custom_model", "--model", |s, d| Arg::Skip),
    row!(
        "model.lambda",
        "--lambda",
        |s, d| match (&s.custom_model, &s.model) {
            (None, ModelChoice::L2mlr { lambda }) => Arg::Value(lambda.to_string()),
            (None, ModelChoice::Sc { lambda, .. }) => Arg::Value(lambda.to_string()),
            _ => Arg::Skip,
        }
    ),
    row!(
        "model.latent",
        "--latent",
        |s, d| match (&s.custom_model, &s.model) {
            (None, ModelChoice::Dml { latent, .. }) => Arg::Value(latent.to_string()),
            _ => Arg::Skip,
        }
    ),
    row!(
        "model.margin",
        "--margin",
        |s, d| match (&s.custom_model, &s.model) {
            (None, ModelChoice::Dml { margin, .. }) => Arg::Value(margin.to_string()),
            _ => Arg::Skip,
        }
    ),
    row!(
        "model.candidates",
        "--candidates",
        |s, d| match (&s.custom_model, &s.model) {
            (None, ModelChoice::Dml { candidates, .. }) => Arg::Value(candidates.to_string()),
            _ => Arg::Skip,
        }
    ),
    row!(
        "model.atoms",
        "--dict-size",
        |s, d| match (&s.custom_model, &s.model) {
            (None, ModelChoice::Sc { atoms, .. }) => Arg::Value(atoms.to_string()),
            _ => Arg::Skip,
        }
    ),
    row!(
        "model.sweeps",
        "--sweeps",
        |s, d| match (&s.custom_model, &s.model) {
            (None, ModelChoice::Sc { sweeps, .. }) => Arg::Value(sweeps.to_string()),
            _ => Arg::Skip,
        }
    ),
    row!(
        "model.decay",
        "--decay",
        |s, d| match (&s.custom_model, &s.model) {
            (None, ModelChoice::Sc { decay, .. }) => Arg::Value(decay.to_string()),
            _ => Arg::Skip,
        }
    ),
    row!("data", "--synthetic", |s, d| match &s.data {
        DataSource::Synthetic(text) => Arg::Value(text.clone()),
        DataSource::Files { .. } => Arg::Skip,
    }),
    row!("data.train", "--data", |s, d| match &s.data {
        DataSource::Files { train, .. } => Arg::Value(train.display().to_string()),
        DataSource::Synthetic(_) => Arg::Skip,
    }),
    row!("data.test", "--test-data", |s, d| match &s.data {
        DataSource::Files { test: Some(t), .. } => Arg::Value(t.display().to_string()),
        _ => Arg::Skip,
    }),
    row!("data.holdout", "--holdout", |s, d| match &s.data {
        DataSource::Files { holdout, .. } => Arg::Value(holdout.to_string()),
        DataSource::Synthetic(_) => Arg::Skip,
    }),
    row!("data.features", "--features", |s, d| match &s.data {
        DataSource::Files {
            features: Some(f), ..
        } => Arg::Value(f.to_string()),
        _ => Arg::Skip,
    }),
    row!("data.stream", "--stream", |s, d| switch(matches!(
        s.data,
        DataSource::Files { stream: true, .. }
    ))),
    row!("train.batch", "--batch", |s, d| Arg::Value(
        s.train.batch.to_string()
    )),
    row!("train.lr", "--lr", |s, d| set(s.train.lr.as_ref())),
    row!("train.optimizer", "--optimizer", |s, d| set(s
        .train
        .optimizer
        .map(|m| m.0)
        .as_ref())),
    row!(
        "train.lr_schedule",
        "--lr-schedule",
        |s, d| if s.train.lr_schedule == d.train.lr_schedule {
            Arg::Skip
        } else {
            Arg::Value(s.train.lr_schedule.0.to_string())
        }
    ),
    row!("train.warmup", "--warmup", |s, d| set(s
        .train
        .warmup
        .as_ref())),
    row!(
        "train.scale",
        "--scale",
        |s, d| if s.train.scale == d.train.scale {
            Arg::Skip
        } else {
            Arg::Value(s.train.scale.0.to_string())
        }
    ),
    row!("train.seed", "--seed", |s, d| Arg::Value(
        s.train.seed.to_string()
    )),
    row!("train.init_std", "--init-std", |s, d| changed(
        &s.train.init_std,
        &d.train.init_std
    )),
    // `sfb sim` is the sim transport's command.
    row!("transport", "--transport", |s, d| match s.transport {
        Transport::Sim => Arg::Skip,
        t => Arg::Value(t.name().into()),
    }),
    row!("peers", "--peers", |s, d| Arg::Value(s.peers.to_string())),
    row!("topology.file", "--topology", |s, d| set(s
        .topology
        .file
        .as_ref()
        .map(|f| f.display())
        .as_ref())),
    row!("train.clocks", "--clocks", |s, d| Arg::Value(
        s.train.clocks.to_string()
    )),
    row!("train.eval_every", "--eval-every", |s, d| Arg::Value(
        s.train.eval_every.to_string()
    )),
    row!(
        "train.until",
        "--until",
        |s, d| if s.train.until.is_empty() {
            Arg::Skip
        } else {
            Arg::Repeat(s.train.until.iter().map(ToString::to_string).collect())
        }
    ),
    row!("net.bandwidth", "--bandwidth", |s, d| set(s
        .net
        .bandwidth
        .map(|b| rate_text(b.0))
        .as_ref())),
    row!("net.burst", "--burst", |s, d| changed(
        &s.net.burst,
        &d.net.burst
    )),
    row!("net.timeout_s", "--timeout", |s, d| changed(
        &s.net.timeout_s,
        &d.net.timeout_s
    )),
    row!("net.peer_timeout_s", "--peer-timeout", |s, d| changed(
        &s.net.peer_timeout_s,
        &d.net.peer_timeout_s
    )),
    row!(
        "net.startup_timeout_s",
        "--startup-timeout",
        |s, d| changed(&s.net.startup_timeout_s, &d.net.startup_timeout_s)
    ),
    row!("net.wire", "--wire", |s, d| changed(
        &s.net.wire,
        &d.net.wire
    )),
    row!("net.compress", "--compress", |s, d| set(s
        .net
        .compress
        .as_ref())),
    row!("net.prioritize", "--prioritize", |s, d| set(s
        .net
        .prioritize
        .as_ref())),
    row!("net.send_parts", "--send-parts", |s, d| changed(
        &s.net.send_parts,
        &d.net.send_parts
    )),
    row!("topology.out_degree", "--out-degree", |s, d| set(s
        .topology
        .out_degree
        .as_ref())),
    row!("topology.time_limit_s", "--topology-time-limit", |s, d| {
        changed(&s.topology.time_limit_s, &d.topology.time_limit_s)
    }),
    row!("backend", "--backend", |s, d| match s.backend {
        Backend::Sfb => Arg::Skip,
        Backend::Fms => Arg::Value("fms".into()),
    }),
    row!("fms_push", "--fms-push", |s, d| match s.fms_push {
        Push::Dense => Arg::Value("dense".into()),
        _ => Arg::Skip,
    }),
    row!("fms_sync", "--fms-sync", |s, d| match s.fms_sync {
        crate::SyncSpec::Lazy => Arg::Value("lazy".into()),
        _ => Arg::Skip,
    }),
    row!(
        "train.consistency",
        "--consistency",
        |s, d| match s.train.consistency {
            ConsistencySpec::Bsp => Arg::Skip,
            c => Arg::Value(c.to_string()),
        }
    ),
    row!("train.straggler", "--straggler", |s, d| set(s
        .train
        .straggler
        .as_ref())),
    row!("output.metrics", "--metrics", |s, d| set(s
        .output
        .metrics
        .as_ref()
        .map(|p| p.display())
        .as_ref())),
    row!("output.summary", "--summary", |s, d| set(s
        .output
        .summary
        .as_ref()
        .map(|p| p.display())
        .as_ref())),
    row!("net.aggregate", "--aggregate", |s, d| set(s
        .net
        .aggregate
        .as_ref())),
    row!("net.partial", "--partial", |s, d| set(s
        .net
        .partial
        .as_ref())),
    row!("net.tree_rank", "--tree-rank", |s, d| set(s
        .net
        .tree_rank
        .as_ref())),
    row!("net.gossip_rank", "--gossip-rank", |s, d| set(s
        .net
        .gossip_rank
        .as_ref())),
    row!("net.gossip_step", "--gossip-step", |s, d| set(s
        .net
        .gossip_step
        .as_ref())),
    row!("net.gossip_own", "--gossip-own", |s, d| set(s
        .net
        .gossip_own
        .as_ref())),
    row!("net.gossip_gain", "--gossip-gain", |s, d| set(s
        .net
        .gossip_gain
        .as_ref())),
    row!("train.max_drift", "--max-drift", |s, d| changed(
        &s.train.max_drift,
        &d.train.max_drift
    )),
    row!("fault.checkpoint_dir", "--checkpoint-dir", |s, d| set(s
        .fault
        .checkpoint_dir
        .as_ref()
        .map(|p| p.display())
        .as_ref())),
    row!("fault.checkpoint_every", "--checkpoint-every", |s, d| {
        changed(&s.fault.checkpoint_every, &d.fault.checkpoint_every)
    }),
    row!(
        "fault.checkpoint_keep",
        "--checkpoint-keep",
        |s, d| changed(&s.fault.checkpoint_keep, &d.fault.checkpoint_keep)
    ),
    row!("fault.resume_at", "--resume-at", |s, d| set(s
        .fault
        .resume_at
        .as_ref())),
    row!("fault.on_peer_loss", "--on-peer-loss", |s, d| word(
        s.fault.on_peer_loss.as_ref()
    )),
    row!("fault.heal_timeout_s", "--heal-timeout", |s, d| changed(
        &s.fault.heal_timeout_s,
        &d.fault.heal_timeout_s
    )),
    row!("fault.lost_shards", "--lost-shards", |s, d| word(
        s.fault.lost_shards.as_ref()
    )),
    row!("fault.step_bound", "--step-bound", |s, d| {
        match (s.fault.step_bound, d.fault.step_bound) {
            (a, b) if a == b => Arg::Skip,
            (Some(a), _) => Arg::Value(a.to_string()),
            (None, _) => Arg::Value("off".into()),
        }
    }),
    row!("output.save_model", "--save-model", |s, d| set(s
        .output
        .save_model
        .as_ref()
        .map(|p| p.display())
        .as_ref())),
    row!("net.relay_compress", "--relay-compress", |s, d| set(s
        .net
        .relay_compress
        .as_ref())),
    row!("net.relay", "--relay", |s, d| switch(s.net.relay)),
    row!("fault.resume", "--resume", |s, d| switch(s.fault.resume)),
    row!("fault.rejoin", "--rejoin", |s, d| switch(s.fault.rejoin)),
    row!("train.intercept", "--no-intercept", |s, d| switch(
        !s.train.intercept
    )),
    row!("net.netns", "--netns", |s, d| switch(s.net.netns)),
    row!("net.netns_slow", "--netns-slow", |s, d| Arg::Repeat(
        s.net.netns_slow.iter().map(ToString::to_string).collect()
    )),
    row!("sim.egress", "--egress", |s, d| set(s
        .sim
        .egress
        .map(|r| rate_text(r.0))
        .as_ref())),
    row!("sim.ingress", "--ingress", |s, d| changed(
        &s.sim.ingress,
        &d.sim.ingress
    )),
    row!("sim.latency_s", "--latency", |s, d| changed(
        &s.sim.latency_s,
        &d.sim.latency_s
    )),
    row!("sim.jitter_s", "--jitter", |s, d| changed(
        &s.sim.jitter_s,
        &d.sim.jitter_s
    )),
    row!(
        "sim.costs",
        "--costs",
        |s, d| if s.sim.costs == d.sim.costs {
            Arg::Skip
        } else {
            Arg::Value("calibrate".into())
        }
    ),
    row!(
        "sim.flops",
        "--flops",
        |s, d| if s.sim.flops == d.sim.flops {
            Arg::Skip
        } else {
            Arg::Value(format!("{:e}", s.sim.flops))
        }
    ),
    row!(
        "sim.mem_bw",
        "--mem-bw",
        |s, d| if s.sim.mem_bw == d.sim.mem_bw {
            Arg::Skip
        } else {
            Arg::Value(format!("{:e}", s.sim.mem_bw))
        }
    ),
    row!(
        "sim.compute_per_sample_s",
        "--compute-per-sample",
        |s, d| set(s.sim.compute_per_sample_s.as_ref())
    ),
    row!("sim.evaluate_s", "--evaluate-cost", |s, d| set(s
        .sim
        .evaluate_s
        .as_ref())),
    row!("sim.apply_per_call_s", "--apply-per-call", |s, d| set(s
        .sim
        .apply_per_call_s
        .as_ref())),
    row!("sim.transport_cpu_frame_s", "--frame-cpu", |s, d| set(s
        .sim
        .transport_cpu_frame_s
        .as_ref())),
    row!("sim.colocate", "--colocate", |s, d| set(s
        .sim
        .colocate
        .map(|(n, c)| format!("{n}:{c}"))
        .as_ref())),
    row!("sim.transport_cpu", "--transport-cpu", |s, d| set(s
        .sim
        .transport_cpu
        .map(|r| rate_text(r.0))
        .as_ref())),
    row!(
        "sim.crashes",
        "--crash",
        |s, d| if s.sim.crashes.is_empty() {
            Arg::Skip
        } else {
            Arg::Repeat(
                s.sim
                    .crashes
                    .iter()
                    .map(|(p, c)| format!("{p}@{c}"))
                    .collect(),
            )
        }
    ),
    row!("sim.partitions", "--partition", |s, d| Arg::Repeat(
        s.sim.partitions.iter().map(ToString::to_string).collect()
    )),
    row!("sim.pauses", "--pause", |s, d| Arg::Repeat(
        s.sim.pauses.iter().map(ToString::to_string).collect()
    )),
    row!("sim.slow", "--slow", |s, d| Arg::Repeat(
        s.sim.slow.iter().map(ToString::to_string).collect()
    )),
    row!("sim.crash_fraction", "--crash-fraction", |s, d| set(s
        .sim
        .crash_fraction
        .as_ref())),
    row!("sim.restart_fraction", "--restart-fraction", |s, d| set(s
        .sim
        .restart_fraction
        .as_ref())),
    row!("sim.restart_after_s", "--restart-after", |s, d| set(s
        .sim
        .restart_after_s
        .as_ref())),
    row!("sim.timing_only", "--timing-only", |s, d| switch(
        s.sim.timing_only
    )),
];

/// Spec fields no flag sets that change no result: the runner sets them.
const UNWRITTEN: &[&str] = &["output.keep_records"];

/// The flag that sets the spec field `field` (as the harness's errors name it, e.g.
/// `"train.lr"` → `"--lr"`), or `field` itself when no flag sets it alone.
pub fn flag_for(field: &'static str) -> &'static str {
    FLAGS
        .iter()
        .find(|f| f.field == field)
        .map_or(field, |f| f.flag)
}

/// `spec` as the arguments of `sfb run` (of `sfb sim` for the sim transport), options at
/// their defaults left out; `None` when a field that differs from the default has no row
/// in [`FLAGS`] (an explicit topology, a topology method, a rejoin, …) or a value no flag
/// can say.
pub fn to_args(spec: &RunSpec) -> Option<Vec<String>> {
    let d = RunSpec::default();
    let covered = |field: &str| {
        FLAGS
            .iter()
            .map(|f| f.field)
            .chain(UNWRITTEN.iter().copied())
            .any(|w| field == w || field.starts_with(&format!("{w}.")))
    };
    if !differing_fields(spec, &d).iter().all(|f| covered(f)) {
        return None;
    }
    let mut args = Vec::new();
    for f in FLAGS {
        if f.field.starts_with("sim.") && spec.transport != Transport::Sim {
            continue;
        }
        match (f.write)(spec, &d) {
            Arg::Skip => {}
            Arg::Value(v) => args.extend([f.flag.to_string(), v]),
            Arg::Repeat(vs) => {
                for v in vs {
                    args.extend([f.flag.to_string(), v]);
                }
            }
            Arg::Switch => args.push(f.flag.to_string()),
            Arg::Inexpressible => return None,
        }
    }
    Some(args)
}

/// The fields (dotted paths, as JSON names them) whose values in `spec` differ from
/// `default`'s.
fn differing_fields(spec: &RunSpec, default: &RunSpec) -> Vec<String> {
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value::{Null, Object};
        match (a, b) {
            (Object(x), Object(y)) => {
                for key in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                    let sub = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    walk(
                        &sub,
                        x.get(key).unwrap_or(&Null),
                        y.get(key).unwrap_or(&Null),
                        out,
                    );
                }
            }
            _ if a != b => out.push(path.to_string()),
            _ => {}
        }
    }
    let mut out = Vec::new();
    // A spec always serializes; `sim` is left out of its JSON when default, so it is
    // compared field by field here.
    let json = |s: &RunSpec| {
        let mut v = serde_json::to_value(s).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "sim".into(),
                serde_json::to_value(&s.sim).unwrap_or_default(),
            );
        }
        v
    };
    let (a, b) = (json(spec), json(default));
    walk("", &a, &b, &mut out);
    out
}
