//! PNG charts for `sfb demo` and `sfb bench` reports: [`line_chart`] (e.g. objective
//! against clock or seconds, one line per consistency model) and [`bar_chart`] (e.g. time
//! split per arm, measured against formula traffic).
//!
//! Rendering is self-contained: text is drawn with DejaVu Sans, embedded in the library
//! from `assets/fonts/` (Bitstream Vera licence, see `assets/fonts/LICENSE`), so no system
//! font and no network is needed. Shapes are drawn by `plotters`' bitmap backend; text is
//! laid out from `ab_glyph`'s advances and kerning and its glyph coverage is blended onto
//! the bitmap directly (plotters' own ab_glyph text drops each glyph's side bearing, so
//! "time" came out as "tim e"). Colours are the Okabe–Ito palette, which stays
//! distinguishable under the common colour-vision deficiencies; line series also differ by
//! marker shape when markers are on.
//!
//! Images are 1000×600 pixels; a bar chart whose category names must be written
//! vertically grows taller so that its plotting area keeps its height.
//!
//! # Example
//! ```no_run
//! use sfb_plot::{LineChart, Series};
//!
//! let chart = LineChart {
//!     title: "objective per clock".into(),
//!     x_label: "clock".into(),
//!     y_label: "objective".into(),
//!     series: vec![Series {
//!         name: "BSP".into(),
//!         points: vec![(0.0, 2.3), (1.0, 1.1), (2.0, 0.7)],
//!     }],
//!     log_y: true,
//!     hline: Some((0.8, "target objective".into())),
//!     ..LineChart::default()
//! };
//! sfb_plot::line_chart(std::path::Path::new("objective.png"), &chart)?;
//! # Ok::<(), sfb_plot::Error>(())
//! ```
#![warn(missing_docs)]

mod axis;
mod bar;
mod error;
mod frame;
mod line;
mod text;

use std::path::Path;

pub use error::{Error, Result};

/// One line of a [`LineChart`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Name shown in the legend.
    pub name: String,
    /// `(x, y)` points in drawing order (usually increasing `x`). Points with a NaN or
    /// infinite coordinate, or a non-positive one on a log axis, are skipped and break the
    /// line there.
    pub points: Vec<(f64, f64)>,
}

/// A line chart: see [`line_chart`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LineChart {
    /// Title above the plot.
    pub title: String,
    /// X axis label, with its unit (e.g. `"clock"`, `"wall time (s)"`).
    pub x_label: String,
    /// Y axis label, with its unit.
    pub y_label: String,
    /// The lines, coloured in order of the palette.
    pub series: Vec<Series>,
    /// Logarithmic x axis (base 10).
    pub log_x: bool,
    /// Logarithmic y axis (base 10).
    pub log_y: bool,
    /// A horizontal dashed reference line at `y` with its legend label, e.g.
    /// `(0.35, "target objective")`. Ignored if `y` is not finite (or ≤ 0 on a log axis).
    pub hline: Option<(f64, String)>,
    /// Draw a marker at every point (shape varies by series), not just the line.
    pub markers: bool,
}

/// A bar chart: see [`bar_chart`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BarChart {
    /// Title above the plot.
    pub title: String,
    /// Y axis label, with its unit.
    pub y_label: String,
    /// One group of bars per category (e.g. per arm), named under the x axis.
    pub categories: Vec<String>,
    /// Components: `(name, one value per category)`, coloured in order of the palette
    /// and named in the legend.
    pub stacks: Vec<(String, Vec<f64>)>,
    /// Stack the components of a category on top of each other (their sum is the bar
    /// height) instead of drawing them side by side.
    pub stacked: bool,
    /// Logarithmic y axis (base 10); values ≤ 0 are then not drawn.
    pub log_y: bool,
}

/// Writes a PNG (1000×600) line chart: one coloured line per series (plus point markers if
/// `markers`), a legend box with the series names, axis labels (the caller puts units in
/// the labels), the title and an optional horizontal dashed reference line whose label
/// appears in the legend (used for "target objective").
///
/// Points with a NaN or infinite coordinate (or a non-positive one on a log axis) are
/// skipped and break the line; an isolated point gets a marker. Empty series are listed in
/// the legend (marked "no data") but not drawn. A chart with no drawable point at all still
/// renders, with "no data" in the plot, rather than failing. The legend goes into the
/// corner of the plot that covers the fewest data.
///
/// # Errors
/// [`Error::Render`] if the file cannot be written or its extension is not an image
/// format (the error names the file); [`Error::Font`] if the embedded font cannot be read
/// (a test guards against that).
pub fn line_chart(path: &Path, chart: &LineChart) -> Result<()> {
    text::ensure_font()?;
    line::render(path, chart).map_err(|e| e.at(path))
}

/// Writes a PNG bar chart with one group of bars per category.
///
/// `stacked = true`: the components of `stacks` are stacked on top of each other (e.g.
/// compute / apply / wait seconds per arm), with the total written above each bar when
/// there is room; non-finite and non-positive components add nothing. `stacked = false`:
/// the components are drawn side by side (e.g. "measured bytes/clock" against "formula
/// bytes/clock" per arm), each value written above its bar when there is room; NaN and
/// infinite values are not drawn. `log_y` suits grouped bars whose values span orders of
/// magnitude; values ≤ 0 are then not drawn.
///
/// The legend names the components; the category names are written under the x axis,
/// wrapped at spaces and punctuation onto up to three lines (four in a smaller size) if
/// they are long, or written vertically if that does not fit (the image then grows taller
/// than 600 pixels). Room is left above the bars so the legend does not cover them. A chart
/// without any drawable bar still renders, with "no data" in the plot.
///
/// # Errors
/// [`Error::RaggedComponent`] if a component does not have exactly one value per
/// category; [`Error::Render`] if the file cannot be written or its extension is not an
/// image format; [`Error::Font`] as for [`line_chart`].
pub fn bar_chart(path: &Path, chart: &BarChart) -> Result<()> {
    for (name, values) in &chart.stacks {
        if values.len() != chart.categories.len() {
            return Err(Error::RaggedComponent {
                path: path.to_path_buf(),
                component: name.clone(),
                values: values.len(),
                categories: chart.categories.len(),
            });
        }
    }
    text::ensure_font()?;
    bar::render(path, chart).map_err(|e| e.at(path))
}
