//! Arms: a run description with a name and an environment, and its `sfb run` command.

use sfb_harness::{RunSpec, Transport};

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
/// when it has a field no flag sets ([`sfb_harness::flags::to_args`]).
pub fn run_args(spec: &RunSpec) -> Option<Vec<String>> {
    sfb_harness::flags::to_args(spec)
}

pub(super) use sfb_harness::flags::rate_text;

#[cfg(test)]
mod tests {
    use super::*;
    use sfb_harness::{DataSource, TopologyMethod};

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
        // flag (an explicit topology) sends the arm to a spec file.
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
        let mut explicit = spec.clone();
        explicit.topology.explicit = Some(vec![vec![1], vec![0]]);
        assert!(run_args(&explicit).is_none());
        let mut sim = spec.clone();
        sim.transport = Transport::Sim;
        sim.sim.apply_per_call_s = Some(1e-3);
        sim.sim.flops = 1e12;
        sim.sim.partitions = vec!["3@1..70.5".parse().unwrap()];
        let args = run_args(&sim).unwrap().join(" ");
        assert!(args.contains("--partition 3@1..70.5"), "{args}");
        assert!(
            args.contains("--flops 1e12 ") && args.contains("--apply-per-call 0.001"),
            "{args}"
        );
        // `sfb sim`'s flags are not `sfb run`'s.
        sim.transport = Transport::Mem;
        sim.sim = sfb_harness::sim::SimOptions::default();
        assert!(!run_args(&sim).unwrap().join(" ").contains("--flops"));
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
