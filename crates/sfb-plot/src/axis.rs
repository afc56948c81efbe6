//! Axes: ranges in plotting coordinates (log10 of the data on a log axis), tick positions
//! and their labels.
//!
//! Linear ticks come from plotters' key points (multiples of 1, 2 or 5 times a power of
//! ten). Log ticks are computed here: plotters' log key points label nothing on a range
//! inside one decade and cannot thin decades or label 1-2-5 multiples within them, which
//! the charts of short runs need.

use plotters::coord::ranged1d::{KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;

use crate::text::text_width;

/// One axis in plotting coordinates (log10 of the data on a log axis), with its ticks and
/// their labels.
#[derive(Debug, Clone)]
pub(crate) struct Axis {
    pub(crate) lo: f64,
    pub(crate) hi: f64,
    pub(crate) ticks: Vec<f64>,
    pub(crate) minor: Vec<f64>,
    pub(crate) labels: Vec<String>,
}

impl Axis {
    /// `lo < hi`, in plotting coordinates; about `target` labelled ticks.
    pub(crate) fn new(lo: f64, hi: f64, log: bool, target: usize) -> Self {
        let target = target.max(2);
        let (ticks, minor, labels) = if log {
            log_ticks(lo, hi, target)
        } else {
            let (ticks, step) = linear_ticks(lo, hi, target);
            let labels = linear_labels(&ticks, step);
            (ticks, Vec::new(), labels)
        };
        Self {
            lo,
            hi,
            ticks,
            minor,
            labels,
        }
    }

    pub(crate) fn widest_label(&self, px: f64) -> u32 {
        self.labels
            .iter()
            .map(|l| text_width(l, px))
            .max()
            .unwrap_or(0)
    }
}

/// Data value to plotting coordinate (log10 on a log axis); `None` if it cannot be drawn.
pub(crate) fn to_plot(v: f64, log: bool) -> Option<f64> {
    let t = if log { v.log10() } else { v };
    t.is_finite().then_some(t)
}

/// `[lo, hi]` widened so that it has a positive length.
pub(crate) fn widen_degenerate(lo: f64, hi: f64, log: bool) -> (f64, f64) {
    if hi - lo > 1e-12 * lo.abs().max(hi.abs()).max(1e-300) {
        (lo, hi)
    } else if log {
        (lo - 0.5, hi + 0.5)
    } else if lo == 0.0 {
        (-1.0, 1.0)
    } else {
        let d = 0.1 * lo.abs();
        (lo - d, hi + d)
    }
}

/// At most `target + 1` evenly spaced ticks inside `[lo, hi]` (`lo < hi`), at multiples of
/// 1, 2 or 5 times a power of ten, from plotters; and their step.
fn linear_ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, f64) {
    let raw = RangedCoordf64::from(lo..hi).key_points((target + 1).max(2).max_num_points());
    let step = match raw.as_slice() {
        [a, b, ..] => snap_step(b - a),
        _ => snap_step(hi - lo),
    };
    let ticks = raw
        .into_iter()
        .map(|t| {
            // Plotters rounds to a granularity; snap to the exact multiple of the step.
            let t = (t / step).round() * step;
            if t.abs() < step * 1e-9 { 0.0 } else { t }
        })
        .collect();
    (ticks, step)
}

/// `d > 0` rounded to one significant digit (a step that float arithmetic blurred).
fn snap_step(d: f64) -> f64 {
    let magnitude = 10f64.powf(d.log10().floor());
    (d / magnitude).round() * magnitude
}

/// Labels for evenly spaced ticks: the same number of decimals on all of them, thousands
/// as k/M/G/T once the numbers get long, powers of ten for tiny values.
fn linear_labels(ticks: &[f64], step: f64) -> Vec<String> {
    let decimals = |scale: f64| {
        (0..=9)
            .find(|&d| {
                let x = step / scale * 10f64.powi(d);
                x.round() >= 1.0 && (x - x.round()).abs() < 1e-6 * x
            })
            .unwrap_or(9) as usize
    };
    let max_abs = ticks.iter().fold(0f64, |m, t| m.max(t.abs()));
    let (scale, suffix) = if max_abs >= 1e4 {
        si_prefix(max_abs)
    } else if max_abs > 0.0 && max_abs < 1e-3 {
        let e = max_abs.log10().floor() as i32;
        (10f64.powi(e), format!("×10{}", superscript(e)))
    } else {
        (1.0, String::new())
    };
    // Fine steps on large numbers (e.g. 1000000002 to 1000000010) read better in full.
    let (scale, suffix) = if max_abs >= 1e4 && decimals(scale) > 3 {
        (1.0, String::new())
    } else {
        (scale, suffix)
    };
    let decimals = decimals(scale);
    ticks
        .iter()
        .map(|&t| {
            if t == 0.0 {
                "0".to_string()
            } else {
                format!("{:.*}{suffix}", decimals, t / scale)
            }
        })
        .collect()
}

/// Ticks of a log axis (`lo`, `hi` in log10 units): decades when the range spans many,
/// else 1-2-5 (or 1-2-3-5, or all) multiples within the decades, else evenly spaced values.
fn log_ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, Vec<f64>, Vec<String>) {
    let inside = |t: f64| t >= lo - 1e-9 && t <= hi + 1e-9;
    let first = (lo - 1e-9).ceil() as i32;
    let last = (hi + 1e-9).floor() as i32;
    let decades: Vec<i32> = (first..=last).collect();
    let sub_decade = |multiples: &[f64]| -> Vec<f64> {
        (lo.floor() as i32 - 1..=hi.floor() as i32)
            .flat_map(|e| multiples.iter().map(move |m| f64::from(e) + m.log10()))
            .filter(|&t| inside(t))
            .collect()
    };
    let all_multiples = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
    let fine = sub_decade(&[1.0, 2.0, 5.0]);
    if decades.len() >= 2 && fine.len() > target + 2 {
        let every = decades.len().div_ceil(target) as i32;
        let (major, skipped): (Vec<i32>, Vec<i32>) =
            decades.iter().partition(|&&e| e.rem_euclid(every) == 0);
        let minor = if every == 1 {
            sub_decade(&all_multiples[1..])
        } else {
            skipped.iter().map(|&e| f64::from(e)).collect()
        };
        let labels = major.iter().map(|&e| decade_label(e)).collect();
        let ticks = major.iter().map(|&e| f64::from(e)).collect();
        return (ticks, minor, labels);
    }
    // Few decades: label some multiples within each decade too.
    let tiers: [&[f64]; 3] = [&[1.0, 2.0, 5.0], &[1.0, 2.0, 3.0, 5.0], &all_multiples];
    for (i, multiples) in tiers.iter().enumerate() {
        let ticks = sub_decade(multiples);
        let enough = if i + 1 == tiers.len() { 3 } else { 4 };
        if ticks.len() >= enough && ticks.len() <= target + 2 {
            let others: Vec<f64> = all_multiples
                .iter()
                .copied()
                .filter(|m| !multiples.contains(m))
                .collect();
            let minor = sub_decade(&others);
            let labels = ticks.iter().map(|&t| compact(10f64.powf(t))).collect();
            return (ticks, minor, labels);
        }
    }
    let (values, step) = linear_ticks(10f64.powf(lo), 10f64.powf(hi), target.min(6));
    let values: Vec<f64> = values.into_iter().filter(|&v| v > 0.0).collect();
    let labels = linear_labels(&values, step);
    let ticks = values.iter().map(|v| v.log10()).collect();
    (ticks, Vec::new(), labels)
}

/// `10^e` as 0.01, 1, 100, 10k, 1M, … or 10⁻⁵.
fn decade_label(e: i32) -> String {
    match e {
        -3..=-1 => format!("{:.*}", (-e) as usize, 10f64.powi(e)),
        0..=2 => format!("{}", 10i64.pow(e as u32)),
        3..=14 => {
            let (_, suffix) = si_prefix(10f64.powi(e));
            format!("{}{suffix}", 10i64.pow((e % 3) as u32))
        }
        _ => format!("10{}", superscript(e)),
    }
}

/// The k/M/G/T/P divisor for numbers of the size of `max_abs` (≥ 1000).
fn si_prefix(max_abs: f64) -> (f64, String) {
    let prefixes = ["k", "M", "G", "T", "P"];
    let i = ((max_abs.log10() / 3.0).floor() as usize).clamp(1, prefixes.len());
    (1000f64.powi(i as i32), prefixes[i - 1].to_string())
}

fn superscript(e: i32) -> String {
    e.to_string()
        .chars()
        .map(|c| match c {
            '-' => '⁻',
            '0' => '⁰',
            '1' => '¹',
            '2' => '²',
            '3' => '³',
            '4' => '⁴',
            '5' => '⁵',
            '6' => '⁶',
            '7' => '⁷',
            '8' => '⁸',
            _ => '⁹',
        })
        .collect()
}

/// A single number in at most three significant digits: 0.0123, 4.5, 678, 12.3k, 4.5M,
/// 2×10⁻⁵.
pub(crate) fn compact(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let a = v.abs();
    let sign = if v < 0.0 { "-" } else { "" };
    if !(1e-3..1e15).contains(&a) {
        let mut e = a.log10().floor() as i32;
        let mut m = a / 10f64.powi(e);
        if (m * 100.0).round() >= 1000.0 {
            m /= 10.0;
            e += 1;
        }
        let m = three_digits(m);
        return if m == "1" {
            format!("{sign}10{}", superscript(e))
        } else {
            format!("{sign}{m}×10{}", superscript(e))
        };
    }
    if a >= 999.5 {
        // Rounding to three digits may carry into the next prefix (999.9k is 1M).
        let (scale, suffix) = si_prefix(a);
        let (scale, suffix) = if a / scale >= 999.5 {
            si_prefix(a * 1.001)
        } else {
            (scale, suffix)
        };
        return format!("{sign}{}{suffix}", three_digits(a / scale));
    }
    format!("{sign}{}", three_digits(a))
}

/// `x > 0` with three significant digits, trailing zeros removed.
fn three_digits(x: f64) -> String {
    let decimals = (2 - x.log10().floor() as i32).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_short() {
        let (ticks, step) = linear_ticks(0.0, 1e6, 6);
        assert_eq!(
            linear_labels(&ticks, step),
            ["0", "0.2M", "0.4M", "0.6M", "0.8M", "1.0M"]
        );
        let (ticks, step) = linear_ticks(0.0, 1.0, 5);
        assert_eq!(
            linear_labels(&ticks, step),
            ["0", "0.2", "0.4", "0.6", "0.8", "1.0"]
        );
        let (ticks, step) = linear_ticks(0.0, 3e-5, 3);
        assert_eq!(linear_labels(&ticks, step)[1], "1×10⁻⁵");
        let (ticks, step) = linear_ticks(1e9 + 1.0, 1e9 + 9.0, 4);
        assert_eq!(linear_labels(&ticks, step)[0], "1000000002");
        let (ticks, step) = linear_ticks(-0.13, 0.27, 5);
        assert_eq!(
            linear_labels(&ticks, step),
            ["-0.1", "0", "0.1", "0.2"],
            "{ticks:?}"
        );
        assert_eq!(decade_label(-2), "0.01");
        assert_eq!(decade_label(4), "10k");
        assert_eq!(decade_label(6), "1M");
        assert_eq!(decade_label(-5), "10⁻⁵");
        assert_eq!(compact(1234.0), "1.23k");
        assert_eq!(compact(999_999.0), "1M");
        assert_eq!(compact(0.5), "0.5");
        assert_eq!(compact(2.5e-5), "2.5×10⁻⁵");
        assert_eq!(compact(-42.0), "-42");
    }

    #[test]
    fn linear_ticks_stay_inside_and_respect_the_target() {
        for (lo, hi) in [
            (0.0, 1.0),
            (-3.7, 12.9),
            (0.31, 0.37),
            (1e9, 1e9 + 7.0),
            (-5e6, 0.0),
        ] {
            for target in 2..12 {
                let (ticks, step) = linear_ticks(lo, hi, target);
                assert!(!ticks.is_empty(), "{lo}..{hi} / {target}");
                assert!(
                    ticks.len() <= target + 1,
                    "{lo}..{hi} / {target}: {ticks:?}"
                );
                let tol = 1e-9 * (hi - lo);
                assert!(
                    ticks.iter().all(|&t| t >= lo - tol && t <= hi + tol),
                    "{ticks:?}"
                );
                for w in ticks.windows(2) {
                    assert!(((w[1] - w[0]) - step).abs() <= 1e-6 * step, "{ticks:?}");
                }
            }
        }
    }

    #[test]
    fn log_axis_uses_decades_or_finer_ticks() {
        let wide = Axis::new(0.0, 4.0, true, 8);
        assert_eq!(wide.labels, ["1", "10", "100", "1k", "10k"]);
        let narrow = Axis::new(0.1, 0.9, true, 8);
        assert_eq!(narrow.labels, ["2", "3", "4", "5", "6", "7"]);
        let few = Axis::new(0.0, 64f64.log10(), true, 8);
        assert_eq!(few.labels, ["1", "2", "5", "10", "20", "50"]);
        let within = Axis::new(3.2f64.log10(), 3.9f64.log10(), true, 8);
        assert!(within.labels.len() >= 3, "{:?}", within.labels);
        assert!(narrow.ticks.len() >= 2, "{:?}", narrow.labels);
        let many = Axis::new(-6.0, 9.0, true, 5);
        assert!(many.labels.len() <= 7, "{:?}", many.labels);
        assert!(!many.minor.is_empty(), "skipped decades become minor ticks");
    }
}
