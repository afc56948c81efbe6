//! How `sfb demo` and `sfb bench` show arms running: progress bars on stderr. Everything
//! else lives in [`sfb_harness::experiment`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use sfb_core::metrics::Summary;
use sfb_harness::Progress;
use sfb_harness::experiment::{Arm, Observer, Report, Runner};

/// A runner (arms carried out by `sfb_harness::run`, libp2p ones as local processes)
/// with progress bars.
pub fn runner() -> Runner {
    Runner::new().observer(Bars {
        multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
        bars: Default::default(),
    })
}

/// Writes `report` into `dir`, prints it, and says how many files it wrote.
pub fn finish(report: &mut Report, dir: &std::path::Path) -> anyhow::Result<()> {
    let written = report.write(dir)?;
    print!("{}", report.text());
    println!("\nwrote {} files in {}/", written.len(), dir.display());
    Ok(())
}

struct Bars {
    multi: MultiProgress,
    bars: std::sync::Mutex<Vec<(String, ProgressBar)>>,
}

impl Observer for Bars {
    fn say(&self, line: &str) {
        if self.multi.is_hidden() {
            eprintln!("{line}");
        } else {
            let _ = self.multi.println(line);
        }
    }

    fn start(&self, arm: &Arm) -> Option<Progress> {
        let bar = self.multi.add(ProgressBar::new(arm.spec.train.clocks));
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:<30!} [{bar:32.cyan/blue}] {pos:>4}/{len} clocks  {elapsed:>4}  {msg}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(arm.name.clone());
        bar.enable_steady_tick(std::time::Duration::from_millis(250));
        self.bars
            .lock()
            .unwrap()
            .push((arm.name.clone(), bar.clone()));
        // Position: the clock every peer has completed (the slowest peer's).
        let done: Vec<AtomicU64> = (0..arm.spec.peers).map(|_| AtomicU64::new(0)).collect();
        Some(Arc::new(move |node: usize, clock: u64| {
            if let Some(c) = done.get(node) {
                c.fetch_max(clock, Ordering::Relaxed);
                bar.set_position(
                    done.iter()
                        .map(|c| c.load(Ordering::Relaxed))
                        .min()
                        .unwrap_or(0),
                );
            }
        }))
    }

    fn finish(&self, arm: &Arm, result: Result<&Summary, String>) {
        let bar = self
            .bars
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(n, _)| *n == arm.name)
            .map(|(_, b)| b.clone());
        let obj = |s: &Summary| s.objective.map_or("-".into(), |o| format!("{o:.4}"));
        match (&result, bar) {
            (Ok(s), Some(bar)) => {
                bar.set_position(arm.spec.train.clocks);
                bar.finish_with_message(format!(
                    "objective {}  {:.0} samples/s",
                    obj(s),
                    s.samples_per_s
                ));
            }
            (Err(_), Some(bar)) => bar.abandon_with_message("failed"),
            _ => {}
        }
        if self.multi.is_hidden()
            && let Ok(s) = result
        {
            eprintln!(
                "  {}: {} clocks in {:.1}s, objective {}",
                arm.name,
                s.clocks,
                s.wall_s,
                obj(s)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use sfb_harness::experiment::{Demo, Options, mlr, run_args};

    #[derive(Debug, Parser)]
    #[command(no_binary_name = true)]
    struct Line {
        #[command(flatten)]
        run: super::super::run::RunArgs,
    }

    fn parsed(args: &[String]) -> sfb_harness::RunSpec {
        Line::try_parse_from(args).unwrap().run.to_spec()
    }

    /// Every arm's command line, parsed by `sfb run`, gives back the arm's spec exactly.
    #[test]
    fn arm_commands_reproduce_their_specs() {
        let demo = |transport| Demo {
            peers: 6,
            out_degree: 2,
            clocks: 40,
            bandwidth: "100mbit".parse().unwrap(),
            transport,
        };
        let mut specs: Vec<_> = [sfb_harness::Transport::Mem, sfb_harness::Transport::Libp2p]
            .into_iter()
            .flat_map(|t| demo(t).arms().unwrap())
            .map(|a| a.spec)
            .collect();
        let mut s = mlr(64, 96, 500, 50);
        s.transport = sfb_harness::Transport::Libp2p;
        s.net.bandwidth = Some("1gbit".parse().unwrap());
        s.net.burst = 1000;
        s.net.netns = true;
        s.backend = sfb_harness::Backend::Fms;
        s.fms_push = sfb_harness::Push::Dense;
        s.train.consistency = sfb_harness::ConsistencySpec::Ssp { staleness: 2 };
        s.train.straggler = Some("rotate:40".parse().unwrap());
        s.train.init_std = 0.01;
        specs.push(s);
        specs.push(sfb_harness::RunSpec {
            data: sfb_harness::DataSource::Files {
                train: "a b.svm".into(),
                test: Some("t.svm".into()),
                holdout: 0.25,
                features: Some(7),
            },
            model: sfb_harness::ModelChoice::Sc {
                atoms: 9,
                lambda: 0.3,
                sweeps: 4,
                decay: 2.5,
            },
            ..sfb_harness::RunSpec::default()
        });
        for spec in specs {
            let args = run_args(&spec).expect("expressible");
            assert_eq!(parsed(&args), spec, "{args:?}");
        }
        let _ = Options::default();
    }

    /// The demo's arms are the runs today's `sfb demo` made from its argv.
    #[test]
    fn demo_arms_are_the_documented_runs() {
        let arms = Demo {
            peers: 6,
            out_degree: 2,
            clocks: 40,
            bandwidth: "100mbit".parse().unwrap(),
            transport: sfb_harness::Transport::Mem,
        }
        .arms()
        .unwrap();
        let base = "--model mlr --synthetic classes=256,features=1024,samples=24000,test=1000,rank=16 --batch 16 --lr 0.05 --seed 2016 --transport mem --peers 6 --clocks 40 --eval-every 2";
        let want = [
            base.to_string(),
            format!("{base} --out-degree 2"),
            format!("{base} --backend fms"),
        ];
        for (arm, w) in arms.iter().zip(want) {
            let w: Vec<String> = w.split(' ').map(String::from).collect();
            assert_eq!(arm.spec, parsed(&w), "{}", arm.name);
        }
    }
}
