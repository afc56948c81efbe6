//! How `sfb demo` and `sfb bench` show arms running: progress bars on stderr. Everything
//! else lives in [`sfb_lab::experiment`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use sfb_core::metrics::Summary;
use sfb_harness::Progress;
use sfb_lab::experiment::{Arm, Observer, Report, Runner};

/// A runner (arms carried out by `sfb_harness::run`, libp2p ones as local processes)
/// with progress bars.
///
/// This program's own executable runs the libp2p arms' nodes and the arms with an
/// environment.
pub fn runner() -> Runner {
    let exe = std::env::current_exe().ok();
    let exec: sfb_lab::experiment::Exec = Arc::new(move |spec, progress| {
        let exe = exe
            .clone()
            .ok_or("cannot locate this program's executable")?;
        let launcher = sfb_harness::launch::Launcher::new(exe);
        let out = sfb_harness::run_with(
            spec,
            progress,
            Some(&launcher),
            sfb_harness::Cluster::from_spec,
        )?;
        Ok(out)
    });
    let runner = Runner::new().exec(exec);
    let runner = match std::env::current_exe() {
        Ok(exe) => runner.sfb_exe(exe),
        Err(_) => runner,
    };
    runner.observer(Bars {
        multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
        bars: Default::default(),
    })
}

/// Writes `report` into `dir`, prints it, and says how many files it wrote.
pub fn finish(report: &mut Report, dir: &std::path::Path) -> anyhow::Result<()> {
    let written = report.write(dir)?;
    out!("{}", report.text());
    outln!("\nwrote {} files in {}/", written.len(), dir.display());
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
