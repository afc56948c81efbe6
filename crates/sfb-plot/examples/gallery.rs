//! Renders a gallery of sample charts for looking at them: log axes, a target line,
//! legends placed to avoid the data, NaN gaps, stacked and grouped bars with short, long
//! and unbreakable category names.
//!
//! ```text
//! cargo run -p sfb-plot --example gallery -- [OUT_DIR]   # default: <temp dir>/plot-demo
//! ```

use std::path::PathBuf;
use std::time::Instant;

use sfb_plot::{BarChart, LineChart, Series, bar_chart, line_chart};

fn main() -> Result<(), sfb_plot::Error> {
    let dir = std::env::args()
        .nth(1)
        .map_or_else(|| std::env::temp_dir().join("plot-demo"), PathBuf::from);
    std::fs::create_dir_all(&dir).expect("create the output folder");
    let start = Instant::now();
    let models = [
        ("BSP", 1.0),
        ("SSP s=1", 0.9),
        ("SSP s=3", 0.75),
        ("ASP (async)", 0.6),
    ];
    let objective = |speed: f64, noise: f64| -> Vec<(f64, f64)> {
        (0..=60)
            .map(|c| {
                let c = f64::from(c);
                let y = 0.3 + 2.0 * (-speed * c / 12.0).exp() + noise * (c * 1.7).sin().abs();
                (c, y)
            })
            .collect()
    };
    line_chart(
        &dir.join("objective.png"),
        &LineChart {
            title: "MLR objective per clock (P = 8, Q = 3 out-links)".into(),
            x_label: "clock".into(),
            y_label: "training objective (nats)".into(),
            series: models
                .iter()
                .map(|&(name, speed)| Series {
                    name: name.into(),
                    points: objective(speed, 0.02 * (1.0 - speed)),
                })
                .collect(),
            log_y: true,
            hline: Some((0.35, "target objective ≥ 0.35".into())),
            markers: true,
            ..LineChart::default()
        },
    )?;

    let mut series: Vec<Series> = models
        .iter()
        .map(|&(name, speed)| Series {
            name: format!("{name}, 16 peers × 4 threads"),
            points: objective(speed, 0.0)
                .into_iter()
                .map(|(c, y)| (c * 230.0 / (1.0 + speed), y * 1.5e5))
                .collect(),
        })
        .collect();
    series[2].points[20].1 = f64::NAN;
    series[2].points[21].1 = f64::INFINITY;
    series.push(Series {
        name: "FMS server (crashed)".into(),
        points: vec![],
    });
    line_chart(
        &dir.join("wall-time.png"),
        &LineChart {
            title: "Loss against wall time".into(),
            x_label: "wall time (s)".into(),
            y_label: "loss (bytes²/s)".into(),
            series,
            ..LineChart::default()
        },
    )?;

    line_chart(
        &dir.join("scaling.png"),
        &LineChart {
            title: "Throughput scaling".into(),
            x_label: "peers P".into(),
            y_label: "samples/s".into(),
            series: vec![
                Series {
                    name: "SFB".into(),
                    points: [1.0f64, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
                        .iter()
                        .map(|&p| (p, 9e3 * p * 0.93f64.powf(p.log2())))
                        .collect(),
                },
                Series {
                    name: "FMS".into(),
                    points: [1.0f64, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
                        .iter()
                        .map(|&p| (p, 9e3 * p.min(8.0)))
                        .collect(),
                },
            ],
            log_x: true,
            log_y: true,
            markers: true,
            ..LineChart::default()
        },
    )?;

    line_chart(
        &dir.join("no-data.png"),
        &LineChart {
            title: "Nothing measured".into(),
            x_label: "clock".into(),
            y_label: "objective".into(),
            series: vec![Series {
                name: "BSP".into(),
                points: vec![(0.0, f64::NAN)],
            }],
            hline: Some((0.35, "target objective".into())),
            ..LineChart::default()
        },
    )?;

    let arms = ["BSP", "SSP s=1", "SSP s=3", "ASP", "FMS (server)"];
    bar_chart(
        &dir.join("time-split.png"),
        &BarChart {
            title: "Where a clock goes (mean over 8 peers)".into(),
            y_label: "seconds per clock".into(),
            categories: arms.iter().map(|s| s.to_string()).collect(),
            stacks: vec![
                ("compute".into(), vec![0.82, 0.80, 0.81, 0.79, 0.80]),
                ("apply".into(), vec![0.21, 0.22, 0.24, 0.25, 0.05]),
                ("wait".into(), vec![0.64, 0.31, 0.08, 0.0, 0.45]),
            ],
            stacked: true,
            log_y: false,
        },
    )?;

    bar_chart(
        &dir.join("traffic.png"),
        &BarChart {
            title: "Traffic per clock: measured against formula".into(),
            y_label: "bytes/clock".into(),
            categories: ["SFB P=4", "SFB P=16", "SFB Q=3", "FMS P=16", "FMS P=64"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            stacks: vec![
                ("measured".into(), vec![4.1e4, 6.6e5, 1.2e5, 3.4e7, 1.4e8]),
                ("formula".into(), vec![4.0e4, 6.4e5, 1.2e5, 3.3e7, 1.3e8]),
            ],
            stacked: false,
            log_y: true,
        },
    )?;

    let n = 12;
    bar_chart(
        &dir.join("twelve-long.png"),
        &BarChart {
            title: "Twelve arms with long names".into(),
            y_label: "time to target (s)".into(),
            categories: (0..n)
                .map(|i| format!("SSP s={i} lr=0.05 batch=64 f16"))
                .collect(),
            stacks: vec![
                (
                    "run 1".into(),
                    (0..n).map(|i| 40.0 + 3.0 * f64::from(i)).collect(),
                ),
                (
                    "run 2".into(),
                    (0..n).map(|i| 42.0 + 2.5 * f64::from(i)).collect(),
                ),
            ],
            stacked: false,
            log_y: false,
        },
    )?;

    bar_chart(
        &dir.join("twelve-vertical.png"),
        &BarChart {
            title: "Twelve arms with unbreakable names".into(),
            y_label: "bytes/clock".into(),
            categories: (0..n)
                .map(|i| format!("SparseFactorBroadcastArm{i:02}"))
                .collect(),
            stacks: vec![(
                "measured".into(),
                (0..n).map(|i| 1e3 * 2f64.powi(i)).collect(),
            )],
            stacked: false,
            log_y: true,
        },
    )?;

    bar_chart(
        &dir.join("eight-wrapped.png"),
        &BarChart {
            title: "Eight arms, wrapped names, negative values".into(),
            y_label: "Δ objective vs BSP".into(),
            categories: (0..8).map(|i| format!("SSP staleness={i}")).collect(),
            stacks: vec![(
                "Δ".into(),
                (0..8).map(|i| 0.05 * f64::from(i) - 0.12).collect(),
            )],
            stacked: false,
            log_y: false,
        },
    )?;

    // Like results/staleness-time-split.png (made by the old in-binary code): twenty
    // arms whose names go vertical, stacked components, totals above the bars.
    let mut arms = Vec::new();
    for straggler in ["rotating", "fixed"] {
        for backend in ["SFB", "FMS"] {
            for s in [0, 1, 2, 4, 8] {
                arms.push(format!("{backend} s={s} {straggler}"));
            }
        }
    }
    let wait: Vec<f64> = [
        30.9, 12.6, 8.8, 7.8, 5.5, 166.0, 120.7, 120.0, 121.0, 120.0, 29.5, 28.8, 28.9, 28.7, 28.0,
        166.7, 119.5, 120.6, 120.8, 120.0,
    ]
    .to_vec();
    bar_chart(
        &dir.join("staleness-time-split.png"),
        &BarChart {
            title: "staleness: where a peer's time goes".into(),
            y_label: "ms per clock (mean peer)".into(),
            categories: arms,
            stacks: vec![
                ("compute".into(), vec![12.0; 20]),
                ("apply".into(), vec![3.2; 20]),
                ("wait".into(), wait),
                (
                    "other".into(),
                    (0..20)
                        .map(|i| if i % 5 == 0 { 1.5 } else { 0.3 })
                        .collect(),
                ),
            ],
            stacked: true,
            log_y: false,
        },
    )?;
    println!(
        "wrote 10 charts to {} in {:.0} ms",
        dir.display(),
        start.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}
