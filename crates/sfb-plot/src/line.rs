//! Line charts.

use std::path::Path;

use plotters::element::DashedPathElement;
use plotters::prelude::*;

use crate::LineChart;
use crate::axis::{Axis, to_plot};
use crate::error::DrawResult;
use crate::frame::{
    Dash, LABEL_DIST, LABEL_PX, LEGEND_INSIDE_MAX, Layout, LegendEntry, MARGIN_RIGHT, Marker, Plot,
    REFERENCE_COLOR, Rect, Swatch, TICK_PX, color, draw_legend, draw_no_data, draw_title,
    least_covering, legend_candidates, legend_size, new_area, padded, span, y_area_width,
};

pub(crate) fn render(path: &Path, chart: &LineChart) -> DrawResult {
    // Each series as runs of drawable points, in plotting coordinates.
    let runs: Vec<Vec<Vec<(f64, f64)>>> = chart
        .series
        .iter()
        .map(|s| {
            let mut runs = vec![Vec::new()];
            for &(x, y) in &s.points {
                match (to_plot(x, chart.log_x), to_plot(y, chart.log_y)) {
                    (Some(x), Some(y)) => runs.last_mut().expect("never empty").push((x, y)),
                    _ => runs.push(Vec::new()),
                }
            }
            runs.retain(|r| !r.is_empty());
            runs
        })
        .collect();
    let all = || runs.iter().flatten().flatten();
    let hline = chart
        .hline
        .as_ref()
        .and_then(|(y, label)| to_plot(*y, chart.log_y).map(|y| (y, label.as_str())));
    let has_data = all().next().is_some();

    let x_pad = if chart.markers { 0.02 } else { 0.0 };
    let (x_lo, x_hi) = padded(span(all().map(|p| p.0)), chart.log_x, x_pad);
    let y_values = all().map(|p| p.1).chain(hline.map(|h| h.0));
    let (y_lo, y_hi) = padded(span(y_values), chart.log_y, 0.05);

    // Plot size, to pick the number of ticks; refined below once the y labels are known.
    let guess = Layout::new(&chart.title, 90, x_area_height(&chart.x_label));
    let x_axis = Axis::new(x_lo, x_hi, chart.log_x, (guess.plot_width() / 110) as usize);
    let y_axis = Axis::new(y_lo, y_hi, chart.log_y, (guess.plot_height() / 65) as usize);
    let mut layout = Layout::new(
        &chart.title,
        y_area_width(&y_axis, &chart.y_label),
        x_area_height(&chart.x_label),
    );
    // Many series: the legend goes right of the plot, in an image widened for it.
    let legend_rows = chart.series.len() + usize::from(hline.is_some());
    let outside = legend_rows > LEGEND_INSIDE_MAX;
    if outside {
        let mut probe: Vec<LegendEntry> = chart
            .series
            .iter()
            .map(|s| s.name.clone())
            .chain(hline.map(|(_, l)| l.to_string()))
            .map(|label| LegendEntry {
                label,
                swatch: Swatch::Dashed(REFERENCE_COLOR),
            })
            .collect();
        let (w, _) = legend_size(&mut probe, layout.plot_width() / 2);
        layout = layout.with_legend_outside(w + MARGIN_RIGHT);
    }

    let root = new_area(path, layout.width, layout.height)?;
    draw_title(&root, &chart.title, layout.width)?;
    let frame = Plot {
        rect: layout.plot_rect(),
        x: x_axis,
        y: y_axis,
    };
    frame.draw_grid(&root)?;
    let plot = frame.rect;
    let px = |p: &(f64, f64)| frame.px(p.0, p.1);

    let hidden = same_as_earlier(&chart.series);
    let mut obstacles = Vec::new();
    let mut entries = Vec::new();
    if let Some((y, _)) = hline {
        let (_, py) = px(&(x_lo, y));
        let style = REFERENCE_COLOR.stroke_width(2);
        root.draw(&DashedPathElement::new(
            vec![(plot.x0, py), (plot.x1, py)],
            10,
            6,
            style,
        ))?;
        obstacles.push(Rect {
            x0: plot.x0,
            y0: py - 1,
            x1: plot.x1,
            y1: py + 2,
        });
    }
    for (i, (series, runs)) in chart.series.iter().zip(&runs).enumerate() {
        let color = color(i);
        let marker = Marker::nth(i);
        let dash = Dash::nth(i);
        for run in runs {
            let pixels: Vec<(i32, i32)> = run.iter().map(px).collect();
            if pixels.len() > 1 {
                dash.draw(&root, &pixels, color)?;
            }
            if chart.markers || pixels.len() == 1 {
                for &p in &pixels {
                    marker.draw(&root, p, color)?;
                }
            }
            add_path_obstacles(&mut obstacles, &pixels);
        }
        let label = if runs.is_empty() {
            format!("{} (no data)", series.name)
        } else if let Some(j) = hidden[i] {
            // Drawn over an identical line, which the reader would look for in vain.
            format!("{} (= {})", series.name, chart.series[j].name)
        } else {
            series.name.clone()
        };
        entries.push(LegendEntry {
            label,
            swatch: Swatch::Line(color, dash, chart.markers.then_some(marker)),
        });
    }
    if let Some((_, label)) = hline {
        entries.push(LegendEntry {
            label: label.to_string(),
            swatch: Swatch::Dashed(REFERENCE_COLOR),
        });
    }
    frame.draw_axes(&root, &chart.x_label, &chart.y_label, layout.height)?;
    if !has_data {
        draw_no_data(&root, plot)?;
    }
    if !entries.is_empty() {
        let size = legend_size(&mut entries, (plot.x1 - plot.x0) as u32 / 2);
        let at = if outside {
            layout.outside_legend(size)
        } else {
            least_covering(&legend_candidates(plot, size), &obstacles)
        };
        draw_legend(&root, &entries, at)?;
    }
    root.present()?;
    Ok(())
}

/// For each series, the first earlier one with the same points (to a part in 10⁹), which
/// it is drawn over and hides.
fn same_as_earlier(series: &[crate::Series]) -> Vec<Option<usize>> {
    let same = |a: &crate::Series, b: &crate::Series| {
        !a.points.is_empty()
            && a.points.len() == b.points.len()
            && a.points.iter().zip(&b.points).all(|(p, q)| {
                let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs());
                close(p.0, q.0) && close(p.1, q.1)
            })
    };
    series
        .iter()
        .enumerate()
        .map(|(i, s)| (0..i).find(|&j| same(s, &series[j])))
        .collect()
}

/// The x label area: tick labels, then the axis label.
fn x_area_height(x_label: &str) -> u32 {
    let desc = if x_label.is_empty() {
        0
    } else {
        LABEL_PX as u32 + 8
    };
    LABEL_DIST + TICK_PX as u32 + 6 + desc
}

/// Small squares along a polyline, every few pixels, for legend placement.
fn add_path_obstacles(obstacles: &mut Vec<Rect>, pixels: &[(i32, i32)]) {
    let dot = |(x, y): (i32, i32)| Rect {
        x0: x - 1,
        y0: y - 1,
        x1: x + 2,
        y1: y + 2,
    };
    if let [only] = pixels {
        obstacles.push(dot(*only));
    }
    for w in pixels.windows(2) {
        let (a, b) = (w[0], w[1]);
        let len = f64::from((b.0 - a.0).abs().max((b.1 - a.1).abs()));
        let steps = (len / 3.0).ceil().max(1.0) as i32;
        for s in 0..=steps {
            let t = f64::from(s) / f64::from(steps);
            let x = f64::from(a.0) + t * f64::from(b.0 - a.0);
            let y = f64::from(a.1) + t * f64::from(b.1 - a.1);
            obstacles.push(dot((x.round() as i32, y.round() as i32)));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Series;

    #[test]
    fn a_line_drawn_over_an_identical_one_names_it() {
        let s = |name: &str, ys: &[f64]| Series {
            name: name.into(),
            points: ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect(),
        };
        let series = [
            s("full", &[3.0, 2.0, 1.0]),
            s("partial", &[3.0, 2.5, 1.5]),
            s("fms", &[3.0, 2.0, 1.0 + 1e-12]),
            s("empty", &[]),
            s("empty too", &[]),
        ];
        assert_eq!(
            super::same_as_earlier(&series),
            vec![None, None, Some(0), None, None]
        );
    }
}
