//! Arms: a run description with a name and an environment, and its `sfb run` command.

use sfb_harness::Transport;
use sfb_harness::{
    Backend, ConsistencySpec, DataSource, ModelChoice, Push, RunSpec, TopologyMethod,
};

/// One arm of an experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct Arm {
    /// Name in tables and legends.
    pub name: String,
    /// The run.
    pub spec: RunSpec,
    /// Environment of the run. An arm with any runs as a child `sfb run --spec FILE`
    /// process (and so do its peers), e.g. `RAYON_NUM_THREADS=1` for one core per peer.
    pub env: Vec<(String, String)>,
}

impl Arm {
    /// An arm named `name` carrying out `spec`.
    pub fn new(name: impl Into<String>, spec: RunSpec) -> Self {
        Self {
            name: name.into(),
            spec,
            env: Vec::new(),
        }
    }

    /// The same arm with an environment variable set.
    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The shell command that reproduces this arm alone: `KEY=VALUE… sfb run ARGS…`, or,
    /// when the spec has fields `sfb run` has no flag for, `sfb run --spec FILE` with
    /// `spec_file` the name [`Report::write`](super::Report::write) writes the spec to.
    pub fn command(&self) -> String {
        let mut words: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let command = if self.spec.transport == Transport::Sim {
            "sim"
        } else {
            "run"
        };
        words.extend(["sfb".into(), command.into()]);
        match run_args(&self.spec) {
            Some(args) => words.extend(args),
            None => words.extend(["--spec".into(), self.spec_file()]),
        }
        words
            .iter()
            .map(|w| match w.split_once('=') {
                // Keep `KEY=VALUE` prefixes readable: quote the value only.
                Some((k, v)) if self.env.iter().any(|(e, _)| e == k) => {
                    format!("{k}={}", quote(v))
                }
                _ => quote(w),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Whether the spec needs a file to be reproduced (see [`Arm::command`]).
    pub fn needs_spec_file(&self) -> bool {
        run_args(&self.spec).is_none()
    }

    /// The file name of this arm's spec next to a report: the name, made file-safe.
    pub fn spec_file(&self) -> String {
        let slug: String = self
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        format!("arm-{}.json", slug.trim_matches('-'))
    }
}

fn quote(w: &str) -> String {
    shlex::try_quote(w).map_or_else(|_| format!("{w:?}"), |q| q.into_owned())
}

/// `spec` as the arguments of `sfb run` (options at their defaults left out), or `None`
/// when it has a field `sfb run` has no flag for here (a topology method other than the
/// optimizer, an explicit topology, `fault.rejoin`, …): every field that differs from
/// its default must be one this function writes ([`WRITTEN`]), so a field added to the
/// spec without a flag here sends the arm to a spec file instead of printing a command
/// that would run something else.
pub fn run_args(spec: &RunSpec) -> Option<Vec<String>> {
    let d = RunSpec::default();
    if spec.topology.method != TopologyMethod::Optimal || spec.topology.explicit.is_some() {
        return None;
    }
    let written = |field: &str| {
        WRITTEN
            .iter()
            .any(|w| field == *w || field.starts_with(&format!("{w}.")))
    };
    if !differing_fields(spec, &d).iter().all(|f| written(f)) {
        return None;
    }
    let mut a: Vec<String> = Vec::new();
    let mut put = |flag: &str, value: String| {
        a.push(format!("--{flag}"));
        a.push(value);
    };
    // Model and data first: they read best at the front of the line.
    match (&spec.custom_model, &spec.model) {
        // A program's own model: its options are the program's.
        (Some(name), _) => put("model", name.clone()),
        (None, ModelChoice::Mlr) => put("model", "mlr".into()),
        (None, ModelChoice::L2mlr { lambda }) => {
            put("model", "l2mlr".into());
            put("lambda", lambda.to_string());
        }
        (
            None,
            ModelChoice::Dml {
                latent,
                margin,
                candidates,
            },
        ) => {
            put("model", "dml".into());
            put("latent", latent.to_string());
            put("margin", margin.to_string());
            put("candidates", candidates.to_string());
        }
        (
            None,
            ModelChoice::Sc {
                atoms,
                lambda,
                sweeps,
                decay,
            },
        ) => {
            put("model", "sc".into());
            put("dict-size", atoms.to_string());
            put("lambda", lambda.to_string());
            put("sweeps", sweeps.to_string());
            put("decay", decay.to_string());
        }
        // A model without flags here: the arm's spec file says it.
        _ => return None,
    }
    match &spec.data {
        DataSource::Synthetic(s) => put("synthetic", s.clone()),
        DataSource::Files {
            train,
            test,
            holdout,
            features,
            ..
        } => {
            put("data", train.display().to_string());
            if let Some(t) = test {
                put("test-data", t.display().to_string());
            }
            put("holdout", holdout.to_string());
            if let Some(f) = features {
                put("features", f.to_string());
            }
        }
        _ => return None,
    }
    let (t, dt) = (&spec.train, &d.train);
    put("batch", t.batch.to_string());
    if let Some(lr) = t.lr {
        put("lr", lr.to_string());
    }
    if let Some(m) = t.optimizer {
        put("optimizer", m.0.to_string());
    }
    if t.lr_schedule != dt.lr_schedule {
        put("lr-schedule", t.lr_schedule.0.to_string());
    }
    if let Some(w) = t.warmup {
        put("warmup", w.to_string());
    }
    if t.scale != dt.scale {
        put("scale", t.scale.0.to_string());
    }
    put("seed", t.seed.to_string());
    if t.init_std != dt.init_std {
        put("init-std", t.init_std.to_string());
    }
    if spec.transport != Transport::Sim {
        // `sfb sim` is the sim transport's command.
        put("transport", spec.transport.name().into());
    }
    put("peers", spec.peers.to_string());
    if let Some(f) = &spec.topology.file {
        put("topology", f.display().to_string());
    }
    put("clocks", t.clocks.to_string());
    put("eval-every", t.eval_every.to_string());
    for rule in &t.until {
        put("until", rule.to_string());
    }
    if let Some(b) = spec.net.bandwidth {
        put("bandwidth", rate_text(b.0));
    }
    let (n, dn) = (&spec.net, &d.net);
    if n.burst != dn.burst {
        put("burst", n.burst.to_string());
    }
    if n.timeout_s != dn.timeout_s {
        put("timeout", n.timeout_s.to_string());
    }
    if n.peer_timeout_s != dn.peer_timeout_s {
        put("peer-timeout", n.peer_timeout_s.to_string());
    }
    if n.startup_timeout_s != dn.startup_timeout_s {
        put("startup-timeout", n.startup_timeout_s.to_string());
    }
    if n.wire != dn.wire {
        put("wire", n.wire.to_string());
    }
    if let Some(c) = n.compress {
        put("compress", c.to_string());
    }
    if let Some(p) = n.prioritize {
        put("prioritize", p.to_string());
    }
    if let Some(q) = spec.topology.out_degree {
        put("out-degree", q.to_string());
    }
    if spec.topology.time_limit_s != d.topology.time_limit_s {
        put(
            "topology-time-limit",
            spec.topology.time_limit_s.to_string(),
        );
    }
    match spec.backend {
        Backend::Sfb => {}
        Backend::Fms => put("backend", "fms".into()),
        // A backend without a flag here: the arm's spec file says it.
        _ => return None,
    }
    if spec.fms_push == Push::Dense {
        put("fms-push", "dense".into());
    }
    if t.consistency != ConsistencySpec::Bsp {
        put("consistency", t.consistency.to_string());
    }
    if let Some(s) = t.straggler {
        put("straggler", s.to_string());
    }
    if let Some(m) = &spec.output.metrics {
        put("metrics", m.display().to_string());
    }
    if let Some(s) = &spec.output.summary {
        put("summary", s.display().to_string());
    }
    if let Some(c) = n.aggregate {
        put("aggregate", c.to_string());
    }
    if let Some(m) = n.partial {
        put("partial", m.to_string());
    }
    if let Some(r) = n.gossip_rank {
        put("gossip-rank", r.to_string());
    }
    if let Some(x) = n.gossip_step {
        put("gossip-step", x.to_string());
    }
    if let Some(x) = n.gossip_own {
        put("gossip-own", x.to_string());
    }
    if let Some(x) = n.gossip_gain {
        put("gossip-gain", x.to_string());
    }
    if t.max_drift != dt.max_drift {
        put("max-drift", t.max_drift.to_string());
    }
    let (f, df) = (&spec.fault, &d.fault);
    if let Some(dir) = &f.checkpoint_dir {
        put("checkpoint-dir", dir.display().to_string());
    }
    if f.checkpoint_every != df.checkpoint_every {
        put("checkpoint-every", f.checkpoint_every.to_string());
    }
    if f.checkpoint_keep != df.checkpoint_keep {
        put("checkpoint-keep", f.checkpoint_keep.to_string());
    }
    if let Some(c) = f.resume_at {
        put("resume-at", c.to_string());
    }
    // Lower-case words, as the flags take them (their serde names).
    let word = |v: serde_json::Value| v.as_str().map(str::to_string);
    if let Some(p) = f.on_peer_loss {
        put("on-peer-loss", word(serde_json::to_value(p).ok()?)?);
    }
    if let Some(l) = f.lost_shards {
        put("lost-shards", word(serde_json::to_value(l).ok()?)?);
    }
    if let Some(m) = &spec.output.save_model {
        put("save-model", m.display().to_string());
    }
    if let Some(c) = n.relay_compress {
        put("relay-compress", c.to_string());
    }
    if n.relay {
        a.push("--relay".into());
    }
    if f.resume {
        a.push("--resume".into());
    }
    if !spec.train.intercept {
        a.push("--no-intercept".into());
    }
    if n.netns {
        a.push("--netns".into());
    }
    if matches!(spec.data, DataSource::Files { stream: true, .. }) {
        a.push("--stream".into());
    }
    if spec.transport == Transport::Sim {
        sim_args(&spec.sim, &mut a);
    }
    Some(a)
}

/// The spec fields [`run_args`] writes as flags (a field stands for its sub-fields too);
/// `output.keep_records` has no flag and changes no result (the runner sets it).
pub const WRITTEN: &[&str] = &[
    "peers",
    "backend",
    "transport",
    "model",
    "custom_model",
    "data",
    "fms_push",
    "train.batch",
    "train.lr",
    "train.optimizer",
    "train.lr_schedule",
    "train.warmup",
    "train.clocks",
    "train.consistency",
    "train.seed",
    "train.init_std",
    "train.eval_every",
    "train.until",
    "train.straggler",
    "train.max_drift",
    "train.scale",
    "train.intercept",
    "topology.out_degree",
    "topology.file",
    "topology.time_limit_s",
    "net.bandwidth",
    "net.burst",
    "net.timeout_s",
    "net.peer_timeout_s",
    "net.startup_timeout_s",
    "net.wire",
    "net.compress",
    "net.prioritize",
    "net.relay",
    "net.relay_compress",
    "net.partial",
    "net.gossip_rank",
    "net.gossip_step",
    "net.gossip_own",
    "net.gossip_gain",
    "net.aggregate",
    "net.netns",
    "output.metrics",
    "output.summary",
    "output.save_model",
    "output.keep_records",
    "fault.checkpoint_dir",
    "fault.checkpoint_every",
    "fault.checkpoint_keep",
    "fault.resume",
    "fault.resume_at",
    "fault.on_peer_loss",
    "fault.lost_shards",
    "sim.egress",
    "sim.ingress",
    "sim.latency_s",
    "sim.jitter_s",
    "sim.costs",
    "sim.flops",
    "sim.mem_bw",
    "sim.compute_per_sample_s",
    "sim.evaluate_s",
    "sim.colocate",
    "sim.transport_cpu",
    "sim.crashes",
    "sim.crash_fraction",
    "sim.timing_only",
];

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

/// The `sfb sim` flags of `s` that differ from their defaults.
fn sim_args(s: &sfb_harness::sim::SimOptions, a: &mut Vec<String>) {
    let d = sfb_harness::sim::SimOptions::default();
    let mut put = |flag: &str, value: String| {
        a.push(format!("--{flag}"));
        a.push(value);
    };
    if let Some(r) = s.egress {
        put("egress", rate_text(r.0));
    }
    if s.ingress != d.ingress {
        put("ingress", s.ingress.to_string());
    }
    if s.latency_s != d.latency_s {
        put("latency", s.latency_s.to_string());
    }
    if s.jitter_s != d.jitter_s {
        put("jitter", s.jitter_s.to_string());
    }
    if s.costs != d.costs {
        put("costs", "calibrate".into());
    }
    if s.flops != d.flops {
        put("flops", format!("{:e}", s.flops));
    }
    if s.mem_bw != d.mem_bw {
        put("mem-bw", format!("{:e}", s.mem_bw));
    }
    if let Some(c) = s.compute_per_sample_s {
        put("compute-per-sample", c.to_string());
    }
    if let Some(c) = s.evaluate_s {
        put("evaluate-cost", c.to_string());
    }
    if let Some((n, c)) = s.colocate {
        put("colocate", format!("{n}:{c}"));
    }
    if let Some(r) = s.transport_cpu {
        put("transport-cpu", rate_text(r.0));
    }
    for &(p, c) in &s.crashes {
        put("crash", format!("{p}@{c}"));
    }
    if let Some(f) = s.crash_fraction {
        put("crash-fraction", f.to_string());
    }
    if s.timing_only {
        a.push("--timing-only".into());
    }
}

/// A rate in bytes/s as `sfb run --bandwidth` reads it back exactly: bits with a unit
/// when that is exact, else plain bytes per second.
pub(super) fn rate_text(bytes_per_s: f64) -> String {
    let bits = bytes_per_s * 8.0;
    for (unit, scale) in [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)] {
        let n = bits / scale;
        if n >= 1.0 && n.fract() == 0.0 && n * scale / 8.0 == bytes_per_s {
            return format!("{n}{unit}");
        }
    }
    bytes_per_s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_back_exactly() {
        for text in ["1gbit", "100mbit", "200mbit", "12kbit", "1234", "2.5mbit"] {
            let r: sfb_net::bandwidth::Rate = text.parse().unwrap();
            let back: sfb_net::bandwidth::Rate = rate_text(r.0).parse().unwrap();
            assert_eq!(back.0, r.0, "{text} -> {}", rate_text(r.0));
        }
        assert_eq!(rate_text(1.25e8), "1gbit");
        assert_eq!(rate_text(1.25e7), "100mbit");
    }

    #[test]
    fn commands_quote_what_the_shell_would_split_and_fall_back_to_a_spec_file() {
        let mut spec = RunSpec {
            data: DataSource::Synthetic("classes=3, features=4".into()),
            ..RunSpec::default()
        };
        spec.train.clocks = 7;
        let arm = Arm::new("P=2 arm", spec.clone()).with_env("RAYON_NUM_THREADS", "1");
        let cmd = arm.command();
        assert!(
            cmd.starts_with(
                "RAYON_NUM_THREADS=1 sfb run --model mlr --synthetic 'classes=3, features=4' "
            ),
            "{cmd}"
        );
        assert!(cmd.contains(" --clocks 7 "), "{cmd}");
        assert_eq!(
            shlex::split(&cmd).unwrap()[5..7],
            ["--synthetic".to_string(), "classes=3, features=4".into()]
        );
        // The gossip mode's settings and the fault options are written; a field with no
        // flag here (a rejoin) sends the arm to a spec file.
        let mut paper = spec.clone();
        paper.net.partial = Some(sfb_harness::PartialSpec::Paper);
        paper.net.gossip_rank = Some(2);
        paper.train.max_drift = 9;
        paper.fault.on_peer_loss = Some(sfb_harness::PeerLossSpec::ContinueAlone);
        let args = run_args(&paper).unwrap().join(" ");
        for want in [
            "--partial paper",
            "--gossip-rank 2",
            "--max-drift 9",
            "--on-peer-loss continue-alone",
        ] {
            assert!(args.contains(want), "{args}");
        }
        let mut rejoin = spec.clone();
        rejoin.fault.rejoin = true;
        assert!(run_args(&rejoin).is_none());
        let mut sim = spec.clone();
        sim.transport = Transport::Sim;
        sim.sim.apply_per_call_s = Some(1e-3);
        assert!(run_args(&sim).is_none());
        sim.sim.apply_per_call_s = None;
        sim.sim.flops = 1e12;
        assert!(run_args(&sim).unwrap().join(" ").contains("--flops 1e12"));
        // A program's registered model is named as the program takes it.
        let custom = RunSpec {
            custom_model: Some("lsq".into()),
            ..spec.clone()
        };
        let args = run_args(&custom).unwrap();
        assert_eq!(args[..2], ["--model".to_string(), "lsq".into()]);
        assert_eq!(args.iter().filter(|a| *a == "--model").count(), 1);
        spec.topology.method = TopologyMethod::Kautz;
        let arm = Arm::new("P=2 arm", spec);
        assert!(arm.needs_spec_file());
        assert_eq!(arm.command(), "sfb run --spec arm-P-2-arm.json");
    }
}
