//! What line and bar charts share: style, the image layout, the plot frame with its
//! grid, axes and tick labels, legends, markers and the "no data" note.

use std::path::Path;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use crate::axis::{Axis, widen_degenerate};
use crate::error::DrawResult;
use crate::text::{HAnchor, TextStyle, VAnchor, put_text, text_width, truncate_to};

// ---------------------------------------------------------------------------------------
// Style

/// Image size of a chart (a bar chart with vertical category names grows taller).
pub(crate) const WIDTH: u32 = 1000;
pub(crate) const HEIGHT: u32 = 600;

pub(crate) const TITLE_PX: f64 = 24.0;
pub(crate) const LABEL_PX: f64 = 18.0;
pub(crate) const TICK_PX: f64 = 14.0;
pub(crate) const LEGEND_PX: f64 = 15.0;
pub(crate) const VALUE_PX: f64 = 12.0;

/// Okabe–Ito, most distinct first; black is kept for the reference line and yellow last
/// (weak on white).
pub(crate) const PALETTE: [RGBColor; 7] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0xF0, 0xE4, 0x42), // yellow
];
pub(crate) const TEXT_COLOR: RGBColor = RGBColor(0x20, 0x20, 0x20);
pub(crate) const MUTED_COLOR: RGBColor = RGBColor(0x80, 0x80, 0x80);
pub(crate) const AXIS_COLOR: RGBColor = RGBColor(0x40, 0x40, 0x40);
pub(crate) const GRID_COLOR: RGBColor = RGBColor(0xDD, 0xDD, 0xDD);
pub(crate) const MINOR_GRID_COLOR: RGBColor = RGBColor(0xEF, 0xEF, 0xEF);
pub(crate) const REFERENCE_COLOR: RGBColor = RGBColor(0x20, 0x20, 0x20);

/// Outer margins and the title band, in pixels.
pub(crate) const MARGIN: u32 = 10;
pub(crate) const MARGIN_RIGHT: u32 = 28;
pub(crate) const TITLE_TOP: i32 = 12;
pub(crate) const TITLE_BAND: u32 = 52;
/// Length of the tick marks outside the plot, and the distance from an axis to its tick
/// labels.
pub(crate) const TICK_SIZE: i32 = 5;
pub(crate) const LABEL_DIST: u32 = 2 * TICK_SIZE as u32;

pub(crate) fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// How a line series is stroked: solid for the palette's first round of colours, then
/// dashed, then dotted, so that up to three times the palette's lines differ without
/// markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dash {
    Solid,
    Dashed,
    Dotted,
}

impl Dash {
    /// The stroke of series `i`.
    pub(crate) fn nth(i: usize) -> Self {
        [Self::Solid, Self::Dashed, Self::Dotted][(i / PALETTE.len()) % 3]
    }

    /// Draws the polyline `pixels` (two pixels wide) in `color`.
    pub(crate) fn draw(
        self,
        area: &Area<'_>,
        pixels: &[(i32, i32)],
        color: RGBColor,
    ) -> DrawResult {
        let style = color.stroke_width(2);
        let points = pixels.to_vec();
        match self {
            Self::Solid => area.draw(&PathElement::new(points, style))?,
            Self::Dashed => area.draw(&DashedPathElement::new(points, 9, 5, style))?,
            Self::Dotted => area.draw(&DashedPathElement::new(points, 2, 4, style))?,
        }
        Ok(())
    }
}

/// The drawing area of a chart's bitmap.
pub(crate) type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// The title, centred in the top band (shrunk if it is wider than the image).
pub(crate) fn draw_title(area: &Area<'_>, title: &str, width: u32) -> DrawResult {
    if title.is_empty() {
        return Ok(());
    }
    let mut px = TITLE_PX;
    while px > 14.0 && text_width(title, px) + 2 * MARGIN > width {
        px -= 1.0;
    }
    let title = truncate_to(title, px, width - 2 * MARGIN);
    put_text(
        area,
        &title,
        ((width / 2) as i32, TITLE_TOP),
        TextStyle::new(px, TEXT_COLOR, HAnchor::Center, VAnchor::Top),
    )
}

// ---------------------------------------------------------------------------------------
// Layout and legend

/// The smallest plot side, in pixels, however long the labels around it.
pub(crate) const MIN_PLOT: u32 = 100;

/// Pixel layout of a chart: the image, the title band, the label areas left of and under
/// the plot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) top: u32,
    pub(crate) y_area: u32,
    pub(crate) x_area: u32,
    /// Width added right of the plot for a legend drawn outside it (0: none).
    pub(crate) legend_area: u32,
}

impl Layout {
    pub(crate) fn new(title: &str, y_area: u32, x_area: u32) -> Self {
        let top = if title.is_empty() {
            2 * MARGIN
        } else {
            TITLE_BAND
        };
        Self {
            width: WIDTH,
            height: HEIGHT,
            top,
            y_area,
            x_area,
            legend_area: 0,
        }
    }

    /// Makes the image `w` pixels wider, for a legend of that width (margins included)
    /// right of the plot; the plot keeps its width.
    pub(crate) fn with_legend_outside(mut self, w: u32) -> Self {
        self.legend_area = w;
        self.width += w;
        self
    }

    /// Where a legend of `size` goes right of the plot, at its top.
    pub(crate) fn outside_legend(&self, size: (u32, u32)) -> Rect {
        let plot = self.plot_rect();
        let x0 = plot.x1 + MARGIN_RIGHT as i32;
        Rect {
            x0,
            y0: plot.y0,
            x1: x0 + size.0 as i32,
            y1: plot.y0 + size.1 as i32,
        }
    }

    pub(crate) fn plot_width(&self) -> u32 {
        let margins = MARGIN + MARGIN_RIGHT + self.y_area + self.legend_area;
        self.width.saturating_sub(margins).max(MIN_PLOT)
    }

    pub(crate) fn plot_height(&self) -> u32 {
        let margins = self.top + MARGIN + self.x_area;
        self.height.saturating_sub(margins).max(MIN_PLOT)
    }

    /// The plot: its left edge is the y axis, its bottom edge the x axis.
    pub(crate) fn plot_rect(&self) -> Rect {
        let x0 = (MARGIN + self.y_area) as i32;
        let y0 = self.top as i32;
        Rect {
            x0,
            y0,
            x1: x0 + self.plot_width() as i32,
            y1: y0 + self.plot_height() as i32,
        }
    }
}

/// Width of the label area left of the plot: the rotated axis label, the tick labels.
pub(crate) fn y_area_width(axis: &Axis, label: &str) -> u32 {
    let desc = if label.is_empty() {
        0
    } else {
        LABEL_PX as u32 + 10
    };
    4 + desc + axis.widest_label(TICK_PX) + LABEL_DIST + 4
}

/// The plot rectangle with its two axes: maps plotting coordinates to pixels.
#[derive(Debug, Clone)]
pub(crate) struct Plot {
    pub(crate) rect: Rect,
    pub(crate) x: Axis,
    pub(crate) y: Axis,
}

impl Plot {
    pub(crate) fn px(&self, x: f64, y: f64) -> (i32, i32) {
        let fx = (x - self.x.lo) / (self.x.hi - self.x.lo);
        let fy = (y - self.y.lo) / (self.y.hi - self.y.lo);
        let r = self.rect;
        (
            r.x0 + (fx * f64::from(r.x1 - r.x0)).round() as i32,
            r.y1 - (fy * f64::from(r.y1 - r.y0)).round() as i32,
        )
    }

    /// Grid lines at the ticks (lighter at the minor ticks), drawn under the data.
    pub(crate) fn draw_grid(&self, area: &Area<'_>) -> DrawResult {
        let r = self.rect;
        for (ticks, color) in [
            (&self.x.minor, MINOR_GRID_COLOR),
            (&self.x.ticks, GRID_COLOR),
        ] {
            for &t in ticks {
                let (x, _) = self.px(t, self.y.lo);
                area.draw(&PathElement::new(vec![(x, r.y0), (x, r.y1)], color))?;
            }
        }
        for (ticks, color) in [
            (&self.y.minor, MINOR_GRID_COLOR),
            (&self.y.ticks, GRID_COLOR),
        ] {
            for &t in ticks {
                let (_, y) = self.px(self.x.lo, t);
                area.draw(&PathElement::new(vec![(r.x0, y), (r.x1, y)], color))?;
            }
        }
        Ok(())
    }

    /// Axis lines, tick marks, tick labels and axis labels, drawn over the data. Tick
    /// labels that would collide are thinned out (every second, third, … kept).
    pub(crate) fn draw_axes(
        &self,
        area: &Area<'_>,
        x_label: &str,
        y_label: &str,
        height: u32,
    ) -> DrawResult {
        let r = self.rect;
        area.draw(&PathElement::new(
            vec![(r.x0, r.y0), (r.x0, r.y1), (r.x1, r.y1)],
            AXIS_COLOR,
        ))?;

        let xs: Vec<i32> = self
            .x
            .ticks
            .iter()
            .map(|&t| self.px(t, self.y.lo).0)
            .collect();
        let every = thinning(&xs, self.x.widest_label(TICK_PX) + 12);
        for (i, (&x, label)) in xs.iter().zip(&self.x.labels).enumerate() {
            area.draw(&PathElement::new(
                vec![(x, r.y1), (x, r.y1 + TICK_SIZE)],
                AXIS_COLOR,
            ))?;
            if i % every == 0 {
                let at = (x, r.y1 + LABEL_DIST as i32);
                put_text(
                    area,
                    label,
                    at,
                    TextStyle::new(TICK_PX, TEXT_COLOR, HAnchor::Center, VAnchor::Top),
                )?;
            }
        }
        let ys: Vec<i32> = self
            .y
            .ticks
            .iter()
            .map(|&t| self.px(self.x.lo, t).1)
            .collect();
        let every = thinning(&ys, line_height(TICK_PX));
        for (i, (&y, label)) in ys.iter().zip(&self.y.labels).enumerate() {
            area.draw(&PathElement::new(
                vec![(r.x0 - TICK_SIZE, y), (r.x0, y)],
                AXIS_COLOR,
            ))?;
            if i % every == 0 {
                let at = (r.x0 - LABEL_DIST as i32, y);
                put_text(
                    area,
                    label,
                    at,
                    TextStyle::new(TICK_PX, TEXT_COLOR, HAnchor::Right, VAnchor::Center),
                )?;
            }
        }

        if !x_label.is_empty() {
            let label = truncate_to(x_label, LABEL_PX, (r.x1 - r.x0) as u32);
            let at = ((r.x0 + r.x1) / 2, (height - MARGIN) as i32);
            put_text(
                area,
                &label,
                at,
                TextStyle::new(LABEL_PX, TEXT_COLOR, HAnchor::Center, VAnchor::Bottom),
            )?;
        }
        if !y_label.is_empty() {
            let label = truncate_to(y_label, LABEL_PX, (r.y1 - r.y0) as u32);
            let at = (MARGIN as i32 + 4, (r.y0 + r.y1) / 2);
            put_text(
                area,
                &label,
                at,
                TextStyle::new(LABEL_PX, TEXT_COLOR, HAnchor::Center, VAnchor::Top).up(),
            )?;
        }
        Ok(())
    }
}

/// Keep every n-th of labels at pixel positions `at` so that kept ones are `room` apart.
pub(crate) fn thinning(at: &[i32], room: u32) -> usize {
    let gap = at
        .windows(2)
        .map(|w| (w[1] - w[0]).unsigned_abs())
        .min()
        .unwrap_or(u32::MAX)
        .max(1);
    room.div_ceil(gap).max(1) as usize
}

/// A pixel rectangle `[x0, x1) × [y0, y1)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rect {
    pub(crate) x0: i32,
    pub(crate) y0: i32,
    pub(crate) x1: i32,
    pub(crate) y1: i32,
}

impl Rect {
    pub(crate) fn overlap(&self, other: &Rect) -> i64 {
        let w = (self.x1.min(other.x1) - self.x0.max(other.x0)).max(0);
        let h = (self.y1.min(other.y1) - self.y0.max(other.y0)).max(0);
        i64::from(w) * i64::from(h)
    }
}

/// Marker shapes, cycled over series so that lines differ by more than colour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Marker {
    Circle,
    Triangle,
    Square,
    Diamond,
}

impl Marker {
    pub(crate) fn nth(i: usize) -> Self {
        [Self::Circle, Self::Triangle, Self::Square, Self::Diamond][i % 4]
    }

    pub(crate) fn draw(self, area: &Area<'_>, at: (i32, i32), color: RGBColor) -> DrawResult {
        let style = color.filled();
        let (x, y) = at;
        match self {
            Self::Circle => area.draw(&Circle::new(at, 4, style))?,
            Self::Triangle => area.draw(&Polygon::new(
                vec![(x, y - 5), (x + 5, y + 4), (x - 5, y + 4)],
                style,
            ))?,
            Self::Square => area.draw(&Rectangle::new([(x - 4, y - 4), (x + 4, y + 4)], style))?,
            Self::Diamond => area.draw(&Polygon::new(
                vec![(x, y - 5), (x + 5, y), (x, y + 5), (x - 5, y)],
                style,
            ))?,
        }
        Ok(())
    }
}

/// What a legend entry shows next to its text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Swatch {
    Line(RGBColor, Dash, Option<Marker>),
    Dashed(RGBColor),
    Fill(RGBColor),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LegendEntry {
    pub(crate) label: String,
    pub(crate) swatch: Swatch,
}

pub(crate) const LEGEND_ROW: u32 = 22;
pub(crate) const LEGEND_PAD: u32 = 8;
pub(crate) const LEGEND_SWATCH: u32 = 32;
pub(crate) const LEGEND_INSET: i32 = 10;

/// The legend's size in pixels, with labels cut to fit `max_w`.
pub(crate) fn legend_size(entries: &mut [LegendEntry], max_w: u32) -> (u32, u32) {
    let fixed = 2 * LEGEND_PAD + LEGEND_SWATCH + 6;
    let max_text = max_w.saturating_sub(fixed).max(40);
    for e in entries.iter_mut() {
        e.label = truncate_to(&e.label, LEGEND_PX, max_text);
    }
    let text = entries
        .iter()
        .map(|e| text_width(&e.label, LEGEND_PX))
        .max()
        .unwrap_or(0);
    (
        fixed + text,
        2 * LEGEND_PAD - 4 + LEGEND_ROW * entries.len() as u32,
    )
}

/// A legend of more entries than this goes outside the plot, right of it (inside, it
/// would cover the lines).
pub(crate) const LEGEND_INSIDE_MAX: usize = 10;

/// Legend placements in order of preference: the corners, then top and bottom centre.
pub(crate) fn legend_candidates(plot: Rect, size: (u32, u32)) -> Vec<Rect> {
    let (w, h) = (size.0 as i32, size.1 as i32);
    let left = plot.x0 + LEGEND_INSET;
    let right = plot.x1 - LEGEND_INSET - w;
    let centre = (plot.x0 + plot.x1 - w) / 2;
    let top = plot.y0 + LEGEND_INSET;
    let bottom = plot.y1 - LEGEND_INSET - h;
    [
        (right, top),
        (left, top),
        (right, bottom),
        (left, bottom),
        (centre, top),
        (centre, bottom),
    ]
    .iter()
    .map(|&(x, y)| Rect {
        x0: x,
        y0: y,
        x1: x + w,
        y1: y + h,
    })
    .collect()
}

/// The candidate covering the least of `obstacles` (first one on ties).
pub(crate) fn least_covering(candidates: &[Rect], obstacles: &[Rect]) -> Rect {
    let mut best = candidates[0];
    let mut best_cover = i64::MAX;
    for c in candidates {
        let grown = Rect {
            x0: c.x0 - 4,
            y0: c.y0 - 4,
            x1: c.x1 + 4,
            y1: c.y1 + 4,
        };
        let cover: i64 = obstacles.iter().map(|o| grown.overlap(o)).sum();
        if cover < best_cover {
            best = *c;
            best_cover = cover;
        }
    }
    best
}

pub(crate) fn draw_legend(area: &Area<'_>, entries: &[LegendEntry], at: Rect) -> DrawResult {
    area.draw(&Rectangle::new(
        [(at.x0, at.y0), (at.x1, at.y1)],
        WHITE.mix(0.88).filled(),
    ))?;
    area.draw(&Rectangle::new(
        [(at.x0, at.y0), (at.x1, at.y1)],
        MUTED_COLOR.stroke_width(1),
    ))?;
    for (i, e) in entries.iter().enumerate() {
        let cy = at.y0 + (LEGEND_PAD - 2 + LEGEND_ROW * i as u32 + LEGEND_ROW / 2) as i32;
        let x0 = at.x0 + LEGEND_PAD as i32;
        let x1 = x0 + LEGEND_SWATCH as i32;
        match e.swatch {
            Swatch::Line(c, dash, marker) => {
                dash.draw(area, &[(x0, cy), (x1, cy)], c)?;
                if let Some(m) = marker {
                    m.draw(area, ((x0 + x1) / 2, cy), c)?;
                }
            }
            Swatch::Dashed(c) => {
                area.draw(&PathElement::new(
                    vec![(x0, cy), (x0 + 12, cy)],
                    c.stroke_width(2),
                ))?;
                area.draw(&PathElement::new(
                    vec![(x1 - 12, cy), (x1, cy)],
                    c.stroke_width(2),
                ))?;
            }
            Swatch::Fill(c) => {
                let mid = (x0 + x1) / 2;
                area.draw(&Rectangle::new(
                    [(mid - 8, cy - 7), (mid + 8, cy + 7)],
                    c.filled(),
                ))?;
            }
        }
        put_text(
            area,
            &e.label,
            (x1 + 6, cy),
            TextStyle::new(LEGEND_PX, TEXT_COLOR, HAnchor::Left, VAnchor::Center),
        )?;
    }
    Ok(())
}

/// "no data" in the middle of the plot, on a white patch (a reference line may cross).
pub(crate) fn draw_no_data(area: &Area<'_>, plot: Rect) -> DrawResult {
    let px = LABEL_PX + 4.0;
    let (cx, cy) = ((plot.x0 + plot.x1) / 2, (plot.y0 + plot.y1) / 2);
    let half_w = text_width("no data", px) as i32 / 2 + 10;
    let half_h = px as i32 / 2 + 6;
    area.draw(&Rectangle::new(
        [(cx - half_w, cy - half_h), (cx + half_w, cy + half_h)],
        WHITE.filled(),
    ))?;
    put_text(
        area,
        "no data",
        (cx, cy),
        TextStyle::new(px, MUTED_COLOR, HAnchor::Center, VAnchor::Center),
    )
}

pub(crate) fn new_area(path: &Path, width: u32, height: u32) -> DrawResult<Area<'_>> {
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    Ok(root)
}

// ---------------------------------------------------------------------------------------
// Line chart

/// Unwraps the data range of a set of plotting coordinates.
pub(crate) fn span(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// `(lo, hi)` padded by `frac` of its length on both sides (degenerate ranges widened).
pub(crate) fn padded(range: Option<(f64, f64)>, log: bool, frac: f64) -> (f64, f64) {
    let (lo, hi) = range.unwrap_or((0.0, 1.0));
    let (lo, hi) = widen_degenerate(lo, hi, log);
    let d = (hi - lo) * frac;
    (lo - d, hi + d)
}

pub(crate) fn line_height(px: f64) -> u32 {
    (px * 1.3).round() as u32
}
