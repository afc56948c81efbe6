//! Bar charts: grouped or stacked, with category names wrapped or written vertically.

use std::path::Path;

use plotters::prelude::*;

use crate::BarChart;
use crate::axis::{Axis, compact, to_plot, widen_degenerate};
use crate::error::DrawResult;
use crate::frame::{
    AXIS_COLOR, Area, LABEL_DIST, LEGEND_INSET, Layout, LegendEntry, MARGIN, Plot, Swatch,
    TEXT_COLOR, TICK_PX, VALUE_PX, color, draw_legend, draw_no_data, draw_title, legend_candidates,
    legend_size, line_height, new_area, span, y_area_width,
};
use crate::text::{HAnchor, TextStyle, VAnchor, put_text, text_width, truncate_to};

// ---------------------------------------------------------------------------------------
// Bar chart

/// How the category names are written under the x axis.
#[derive(Debug, Clone, PartialEq)]
enum CategoryLabels {
    /// One or more horizontal lines per category, at this font size.
    Lines(f64, Vec<Vec<String>>),
    /// Written bottom-to-top, at this font size.
    Vertical(f64, Vec<String>),
}

/// Lines per category name at the tick label size (one more at the smaller size).
const MAX_LABEL_LINES: usize = 3;
const VERTICAL_PX: f64 = 13.0;
const MAX_VERTICAL_WIDTH: u32 = 280;

impl CategoryLabels {
    /// The most readable way that fits in `slot` pixels per category.
    fn fit(categories: &[String], slot: u32) -> Self {
        let room = slot.saturating_sub(14);
        // Breaks at spaces at either size before breaks inside words (`Q=10` whole).
        for spaces_only in [true, false] {
            for (px, max_lines) in [(TICK_PX, MAX_LABEL_LINES), (12.0, MAX_LABEL_LINES + 1)] {
                let lines: Option<Vec<Vec<String>>> = categories
                    .iter()
                    .map(|c| wrap_with(c, px, room, max_lines, spaces_only))
                    .collect();
                if let Some(lines) = lines {
                    return Self::Lines(px, lines);
                }
            }
        }
        Self::Vertical(
            VERTICAL_PX,
            categories
                .iter()
                .map(|c| truncate_to(c, VERTICAL_PX, MAX_VERTICAL_WIDTH))
                .collect(),
        )
    }

    /// Height of the label area under the axis.
    fn height(&self) -> u32 {
        match self {
            Self::Lines(px, lines) => {
                let n = lines.iter().map(Vec::len).max().unwrap_or(1) as u32;
                LABEL_DIST + n * line_height(*px) + 6
            }
            Self::Vertical(px, labels) => {
                let w = labels.iter().map(|l| text_width(l, *px)).max().unwrap_or(0);
                LABEL_DIST + w + 8
            }
        }
    }

    fn draw(&self, area: &Area<'_>, centres: &[i32], axis_y: i32) -> DrawResult {
        let top = axis_y + LABEL_DIST as i32;
        match self {
            Self::Lines(px, lines) => {
                for (&cx, lines) in centres.iter().zip(lines) {
                    for (j, line) in lines.iter().enumerate() {
                        let y = top + (j as u32 * line_height(*px)) as i32;
                        put_text(
                            area,
                            line,
                            (cx, y),
                            TextStyle::new(*px, TEXT_COLOR, HAnchor::Center, VAnchor::Top),
                        )?;
                    }
                }
            }
            Self::Vertical(px, labels) => {
                for (&cx, label) in centres.iter().zip(labels) {
                    put_text(
                        area,
                        label,
                        (cx, top),
                        TextStyle::new(*px, TEXT_COLOR, HAnchor::Right, VAnchor::Center).up(),
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// Greedy line breaking after spaces only (`Q=10 relay` stays `Q=10` / `relay`), else
/// after spaces and punctuation; `None` if a piece does not fit in `max_w` or more than
/// `max_lines` lines are needed. ([`CategoryLabels::fit`] tries spaces only at every
/// size first.)
#[cfg(test)]
fn wrap(text: &str, px: f64, max_w: u32, max_lines: usize) -> Option<Vec<String>> {
    wrap_with(text, px, max_w, max_lines, true)
        .or_else(|| wrap_with(text, px, max_w, max_lines, false))
}

/// Greedy line breaking after spaces only, or after spaces and punctuation; `None` if a
/// piece does not fit in `max_w` or more than `max_lines` lines are needed.
fn wrap_with(
    text: &str,
    px: f64,
    max_w: u32,
    max_lines: usize,
    spaces_only: bool,
) -> Option<Vec<String>> {
    if spaces_only {
        wrap_after(text, px, max_w, max_lines, |c| c == ' ')
    } else {
        wrap_after(text, px, max_w, max_lines, |c| {
            matches!(c, ' ' | '_' | '-' | '/' | ',' | ':' | '=' | '+' | ')')
        })
    }
}

/// [`wrap_with`] with breaks allowed after the characters `breaks_after` accepts.
fn wrap_after(
    text: &str,
    px: f64,
    max_w: u32,
    max_lines: usize,
    breaks_after: impl Fn(char) -> bool,
) -> Option<Vec<String>> {
    let mut pieces = Vec::new();
    let mut piece = String::new();
    for c in text.chars() {
        piece.push(c);
        if breaks_after(c) {
            pieces.push(std::mem::take(&mut piece));
        }
    }
    if !piece.is_empty() {
        pieces.push(piece);
    }
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for piece in pieces {
        let joined = format!("{line}{piece}");
        if line.is_empty() || text_width(joined.trim_end(), px) <= max_w {
            line = joined;
        } else {
            lines.push(line.trim_end().to_string());
            line = piece.trim_start().to_string();
        }
        if text_width(line.trim_end(), px) > max_w {
            return None;
        }
    }
    lines.push(line.trim_end().to_string());
    (lines.len() <= max_lines).then_some(lines)
}

/// One bar in plotting coordinates: x in category slots, y on the (maybe log) axis.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bar {
    component: usize,
    x0: f64,
    x1: f64,
    /// `None`: from the bottom of a log axis.
    bottom: Option<f64>,
    top: f64,
}

/// Value written above a bar (the stack total for stacked bars).
#[derive(Debug, Clone, PartialEq)]
struct BarLabel {
    x: f64,
    y: f64,
    below: bool,
    text: String,
}

/// Width of a category's group of bars, as a fraction of its slot.
const GROUP_WIDTH: f64 = 0.8;
/// Room kept above the bars for their value labels, in pixels.
const VALUE_ROOM: u32 = 20;

fn bars(chart: &BarChart) -> (Vec<Bar>, Vec<BarLabel>) {
    let log = chart.log_y;
    let k = chart.stacks.len();
    let mut bars = Vec::new();
    let mut labels = Vec::new();
    let bottom = |v: f64| if log { None } else { Some(v) };
    for i in 0..chart.categories.len() {
        let left = i as f64 + (1.0 - GROUP_WIDTH) / 2.0;
        if chart.stacked {
            let mut total = 0.0;
            for (j, (_, values)) in chart.stacks.iter().enumerate() {
                let v = values[i];
                if !(v.is_finite() && v > 0.0) {
                    continue;
                }
                let Some(top) = to_plot(total + v, log) else {
                    continue;
                };
                bars.push(Bar {
                    component: j,
                    x0: left,
                    x1: left + GROUP_WIDTH,
                    // On a log axis the first component starts at the bottom of the axis.
                    bottom: if log && total <= 0.0 {
                        None
                    } else {
                        to_plot(total, log)
                    },
                    top,
                });
                total += v;
            }
            if let Some(top) = to_plot(total, log).filter(|_| total > 0.0) {
                labels.push(BarLabel {
                    x: i as f64 + 0.5,
                    y: top,
                    below: false,
                    text: compact(total),
                });
            }
        } else {
            let w = GROUP_WIDTH / k as f64;
            for (j, (_, values)) in chart.stacks.iter().enumerate() {
                let Some(top) = to_plot(values[i], log) else {
                    continue;
                };
                let x0 = left + j as f64 * w;
                bars.push(Bar {
                    component: j,
                    x0,
                    x1: x0 + w,
                    bottom: bottom(0.0),
                    top,
                });
                labels.push(BarLabel {
                    x: x0 + w / 2.0,
                    y: top,
                    below: values[i] < 0.0,
                    text: compact(values[i]),
                });
            }
        }
    }
    (bars, labels)
}

pub(crate) fn render(path: &Path, chart: &BarChart) -> DrawResult {
    let n = chart.categories.len();
    let (bars, value_labels) = bars(chart);
    let has_data = !bars.is_empty();
    let log = chart.log_y;

    // A first layout with a guessed y label width, to size the category labels.
    let guess = Layout::new(&chart.title, 90, 0);
    let slot = guess.plot_width() / n.max(1) as u32;
    let categories = CategoryLabels::fit(&chart.categories, slot);
    let x_area = categories.height();
    let mut layout = Layout::new(&chart.title, 90, x_area);
    // Vertical names: grow the image rather than squash the plot.
    layout.height = layout.height.max(layout.top + MARGIN + x_area + 380);

    let mut entries: Vec<LegendEntry> = chart
        .stacks
        .iter()
        .enumerate()
        .map(|(j, (name, _))| LegendEntry {
            label: name.clone(),
            swatch: Swatch::Fill(color(j)),
        })
        .collect();
    let legend = legend_size(&mut entries, layout.plot_width() / 2);

    // The y range: from zero (or the lowest decade below the data on a log axis) to the
    // tallest bar, plus room for the value labels and the legend.
    let tops = bars.iter().map(|b| b.top);
    let (data_lo, data_hi) = span(tops.chain(bars.iter().filter_map(|b| b.bottom)))
        .map(|r| widen_degenerate(r.0, r.1, log))
        .unwrap_or((0.0, 1.0));
    let (y_lo, data_hi) = if log {
        let lo = data_lo.floor();
        (if data_lo - lo < 0.15 { lo - 1.0 } else { lo }, data_hi)
    } else {
        let pad = 0.05 * (data_hi - data_lo);
        (
            if data_lo < 0.0 { data_lo - pad } else { 0.0 },
            data_hi.max(0.0),
        )
    };
    let (y_hi, legend_right) = bar_headroom(&bars, &layout, n, legend, y_lo, data_hi);
    let mut y_axis = Axis::new(y_lo, y_hi, log, (layout.plot_height() / 65) as usize);
    // Bars are read against the labelled ticks; minor grid lines would only add noise.
    y_axis.minor.clear();
    layout.y_area = y_area_width(&y_axis, &chart.y_label);
    let x_axis = Axis {
        lo: 0.0,
        hi: n.max(1) as f64,
        ticks: Vec::new(),
        minor: Vec::new(),
        labels: Vec::new(),
    };

    let root = new_area(path, layout.width, layout.height)?;
    draw_title(&root, &chart.title, layout.width)?;
    let frame = Plot {
        rect: layout.plot_rect(),
        x: x_axis,
        y: y_axis,
    };
    frame.draw_grid(&root)?;
    let plot = frame.rect;
    let px = |x: f64, y: f64| frame.px(x, y);

    for bar in &bars {
        let (x0, y1) = px(bar.x0, bar.bottom.unwrap_or(y_lo));
        let (x1, y0) = px(bar.x1, bar.top);
        let c = color(bar.component);
        let (x1, y_top, y_bottom) = (x1 - 1, y0.min(y1), y0.max(y1));
        root.draw(&Rectangle::new([(x0, y_top), (x1, y_bottom)], c.filled()))?;
        if chart.stacked {
            root.draw(&PathElement::new(
                vec![(x0, y_top), (x1, y_top)],
                WHITE.stroke_width(1),
            ))?;
        }
    }
    if !log && y_lo < 0.0 {
        let (_, zero) = px(0.0, 0.0);
        root.draw(&PathElement::new(
            vec![(plot.x0, zero), (plot.x1, zero)],
            AXIS_COLOR,
        ))?;
    }
    frame.draw_axes(&root, "", &chart.y_label, layout.height)?;
    let per_label = if chart.stacked {
        GROUP_WIDTH
    } else {
        GROUP_WIDTH / chart.stacks.len().max(1) as f64
    };
    let label_room = (per_label * f64::from((plot.x1 - plot.x0) as u32) / n.max(1) as f64) as u32;
    if value_labels
        .iter()
        .all(|l| text_width(&l.text, VALUE_PX) <= label_room + 4)
    {
        for l in &value_labels {
            let (x, y) = px(l.x, l.y);
            let (y, v) = if l.below {
                (y + 3, VAnchor::Top)
            } else {
                (y - 3, VAnchor::Bottom)
            };
            put_text(
                &root,
                &l.text,
                (x, y),
                TextStyle::new(VALUE_PX, TEXT_COLOR, HAnchor::Center, v),
            )?;
        }
    }
    let centres: Vec<i32> = (0..n).map(|i| px(i as f64 + 0.5, y_lo).0).collect();
    categories.draw(&root, &centres, plot.y1)?;
    if !has_data {
        draw_no_data(&root, plot)?;
    }
    if !entries.is_empty() {
        let candidates = legend_candidates(plot, legend);
        let at = if legend_right {
            candidates[0]
        } else {
            candidates[1]
        };
        draw_legend(&root, &entries, at)?;
    }
    root.present()?;
    Ok(())
}

/// The top of the y axis leaving room above the bars for their value labels and, in the
/// upper corner where that costs least, for the legend. Returns it and whether the legend
/// goes right (else left).
fn bar_headroom(
    bars: &[Bar],
    layout: &Layout,
    n: usize,
    legend: (u32, u32),
    y_lo: f64,
    data_hi: f64,
) -> (f64, bool) {
    let plot_h = f64::from(layout.plot_height());
    let plot_w = f64::from(layout.plot_width());
    // Top of the axis such that `top` stays `room` pixels below the top of the plot.
    let needed =
        |top: f64, room: f64| y_lo + (top - y_lo) * plot_h / (plot_h - room).max(plot_h * 0.3);
    let base = needed(data_hi, f64::from(VALUE_ROOM)).max(data_hi + 1e-9);
    let legend_w = f64::from(legend.0 + LEGEND_INSET as u32 + 6) / plot_w * n.max(1) as f64;
    let legend_room = f64::from(legend.1 + LEGEND_INSET as u32 + 6 + VALUE_ROOM);
    let under = |from: f64, to: f64| {
        bars.iter()
            .filter(|b| b.x1 > from && b.x0 < to)
            .map(|b| b.top)
            .fold(f64::NEG_INFINITY, f64::max)
    };
    let n = n.max(1) as f64;
    let right = needed(under(n - legend_w, n), legend_room).max(base);
    let left = needed(under(0.0, legend_w), legend_room).max(base);
    if right <= left {
        (right, true)
    } else {
        (left, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::ensure_font;

    #[test]
    fn long_names_wrap_or_go_vertical() {
        ensure_font().expect("font");
        let wrapped = wrap("SSP staleness=2 lr=0.1", TICK_PX, 90, 3).expect("fits in 3 lines");
        assert!(wrapped.len() > 1, "{wrapped:?}");
        assert!(
            wrapped.iter().all(|l| text_width(l, TICK_PX) <= 90),
            "{wrapped:?}"
        );
        assert!(wrap("averyveryverylongunbreakablename", TICK_PX, 60, 3).is_none());
        // Spaces first: a label that fits when broken at its spaces keeps `Q=10` whole.
        let w = text_width("relay", TICK_PX).max(text_width("Q=10", TICK_PX));
        assert_eq!(
            wrap("Q=10 relay", TICK_PX, w, 3),
            Some(vec!["Q=10".to_string(), "relay".to_string()])
        );
        let names: Vec<String> = (0..12).map(|i| format!("arm {i}")).collect();
        assert!(matches!(
            CategoryLabels::fit(&names, 70),
            CategoryLabels::Lines(..)
        ));
        let long: Vec<String> = (0..12)
            .map(|i| format!("averyveryverylongname{i}"))
            .collect();
        assert!(matches!(
            CategoryLabels::fit(&long, 70),
            CategoryLabels::Vertical(..)
        ));
    }

    #[test]
    fn stacked_bars_skip_bad_components_and_total_the_rest() {
        let chart = BarChart {
            categories: vec!["a".into(), "b".into()],
            stacks: vec![
                ("x".into(), vec![1.0, f64::NAN]),
                ("y".into(), vec![2.0, 3.0]),
            ],
            stacked: true,
            ..BarChart::default()
        };
        let (bars, labels) = bars(&chart);
        assert_eq!(bars.len(), 3);
        let texts: Vec<&str> = labels.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, ["3", "3"]);
    }
}
