//! PNG charts for `sfb demo` and `sfb bench` reports: [`line_chart`] (e.g. objective
//! against clock or seconds, one line per consistency model) and [`bar_chart`] (e.g. time
//! split per arm, measured against formula traffic).
//!
//! Rendering is self-contained: text is drawn with DejaVu Sans, embedded in the binary
//! from `assets/fonts/` (Bitstream Vera licence, see `assets/fonts/LICENSE`), so no system
//! font and no network is needed. Colours are the Okabe–Ito palette, which stays
//! distinguishable under the common colour-vision deficiencies; line series also differ by
//! marker shape when markers are on.
//!
//! The output format follows the file extension (use `.png`). Images are 1000×600 pixels;
//! a bar chart whose category names must be written vertically grows taller so that its
//! plotting area keeps its height.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, Result, ensure};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::register_font;
use plotters::style::text_anchor::{HPos, Pos, VPos};

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
/// If the file cannot be written (the message names it) or the extension is not an image
/// format.
pub fn line_chart(path: &Path, chart: &LineChart) -> Result<()> {
    ensure_font()?;
    render_line_chart(path, chart).with_context(|| format!("rendering chart {}", path.display()))
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
/// If a component does not have exactly one value per category, if the file cannot be
/// written (the message names it) or the extension is not an image format.
pub fn bar_chart(path: &Path, chart: &BarChart) -> Result<()> {
    for (name, values) in &chart.stacks {
        ensure!(
            values.len() == chart.categories.len(),
            "bar chart {}: component {name:?} has {} values for {} categories",
            path.display(),
            values.len(),
            chart.categories.len()
        );
    }
    ensure_font()?;
    render_bar_chart(path, chart).with_context(|| format!("rendering chart {}", path.display()))
}

// ---------------------------------------------------------------------------------------
// Style

/// Image size of a chart (a bar chart with vertical category names grows taller).
const WIDTH: u32 = 1000;
const HEIGHT: u32 = 600;

/// The family name the embedded font is registered under.
const FONT: &str = "sans-serif";
/// DejaVu Sans (Bitstream Vera licence, `assets/fonts/LICENSE`).
const FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

const TITLE_PX: f64 = 24.0;
const LABEL_PX: f64 = 18.0;
const TICK_PX: f64 = 14.0;
const LEGEND_PX: f64 = 15.0;
const VALUE_PX: f64 = 12.0;

/// Okabe–Ito, most distinct first; black is kept for the reference line and yellow last
/// (weak on white).
const PALETTE: [RGBColor; 7] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0xF0, 0xE4, 0x42), // yellow
];
const TEXT_COLOR: RGBColor = RGBColor(0x20, 0x20, 0x20);
const MUTED_COLOR: RGBColor = RGBColor(0x80, 0x80, 0x80);
const AXIS_COLOR: RGBColor = RGBColor(0x40, 0x40, 0x40);
const GRID_COLOR: RGBColor = RGBColor(0xDD, 0xDD, 0xDD);
const MINOR_GRID_COLOR: RGBColor = RGBColor(0xEF, 0xEF, 0xEF);
const REFERENCE_COLOR: RGBColor = RGBColor(0x20, 0x20, 0x20);

/// Outer margins and the title band, in pixels.
const MARGIN: u32 = 10;
const MARGIN_RIGHT: u32 = 28;
const TITLE_TOP: i32 = 12;
const TITLE_BAND: u32 = 52;
/// Length of the tick marks outside the plot, and the distance from an axis to its tick
/// labels.
const TICK_SIZE: i32 = 5;
const LABEL_DIST: u32 = 2 * TICK_SIZE as u32;

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Registers the embedded font with plotters and reads its metrics, once per process.
fn ensure_font() -> Result<&'static Metrics> {
    static FONT_STATE: OnceLock<Option<Metrics>> = OnceLock::new();
    FONT_STATE
        .get_or_init(|| {
            register_font(FONT, FontStyle::Normal, FONT_BYTES).ok()?;
            Metrics::parse(FONT_BYTES)
        })
        .as_ref()
        .context("the embedded chart font is not a readable TrueType font")
}

/// The font's metrics. Every entry point calls [`ensure_font`] first, and a test checks
/// that the embedded font parses, so this does not fail.
fn metrics() -> &'static Metrics {
    ensure_font().expect("the embedded font was checked on entry")
}

/// Horizontal metrics of the embedded font, from its `hhea`, `maxp`, `hmtx` and `cmap`
/// tables.
///
/// Plotters 0.3.7 draws an ab_glyph glyph with its ink box at the pen position, dropping
/// the glyph's left side bearing (so "time" comes out as "tim e"). Text is therefore drawn
/// one glyph at a time, each placed by these metrics.
#[derive(Debug)]
struct Metrics {
    /// Ascender minus descender, in font units: ab_glyph's pixel size is this height.
    height: f64,
    /// Advance width and left side bearing per glyph id, in font units.
    advances: Vec<u16>,
    bearings: Vec<i16>,
    /// `cmap` format 4 (Unicode BMP) subtable.
    cmap: &'static [u8],
}

/// Cap height of DejaVu Sans as a fraction of the pixel size (1493 units of the
/// 2384-unit ascender-to-descender height).
const CAP_HEIGHT: f64 = 1493.0 / 2384.0;
/// Descender depth as a fraction of the pixel size (483 of 2384 units).
const DESCENT: f64 = 483.0 / 2384.0;

impl Metrics {
    fn parse(font: &'static [u8]) -> Option<Self> {
        let u16_at = |at: usize| Some(u16::from_be_bytes(font.get(at..at + 2)?.try_into().ok()?));
        let u32_at = |at: usize| Some(u32::from_be_bytes(font.get(at..at + 4)?.try_into().ok()?));
        let table = |tag: &[u8; 4]| -> Option<usize> {
            (0..usize::from(u16_at(4)?))
                .map(|i| 12 + 16 * i)
                .find(|&rec| font.get(rec..rec + 4) == Some(tag))
                .and_then(|rec| Some(u32_at(rec + 8)? as usize))
        };
        let hhea = table(b"hhea")?;
        let ascender = f64::from(u16_at(hhea + 4)? as i16);
        let descender = f64::from(u16_at(hhea + 6)? as i16);
        let long_metrics = usize::from(u16_at(hhea + 34)?);
        let glyphs = usize::from(u16_at(table(b"maxp")? + 4)?);
        let hmtx = table(b"hmtx")?;
        let mut advances = Vec::with_capacity(glyphs);
        let mut bearings = Vec::with_capacity(glyphs);
        for g in 0..glyphs {
            if g < long_metrics {
                advances.push(u16_at(hmtx + 4 * g)?);
                bearings.push(u16_at(hmtx + 4 * g + 2)? as i16);
            } else {
                advances.push(*advances.last()?);
                bearings.push(u16_at(hmtx + 4 * long_metrics + 2 * (g - long_metrics))? as i16);
            }
        }
        let cmap = table(b"cmap")?;
        let subtable = (0..usize::from(u16_at(cmap + 2)?))
            .map(|i| cmap + 4 + 8 * i)
            .find(|&rec| u16_at(rec) == Some(3) && u16_at(rec + 2) == Some(1))
            .and_then(|rec| Some(cmap + u32_at(rec + 4)? as usize))?;
        if u16_at(subtable)? != 4 {
            return None;
        }
        let length = usize::from(u16_at(subtable + 2)?);
        Some(Self {
            height: ascender - descender,
            advances,
            bearings,
            cmap: font.get(subtable..subtable + length)?,
        })
    }

    /// Glyph id of `c` (0, the "missing" glyph, if the font lacks it).
    fn glyph(&self, c: char) -> usize {
        let c = match u16::try_from(u32::from(c)) {
            Ok(c) => c,
            Err(_) => return 0,
        };
        let t = self.cmap;
        let u16_at = |at: usize| {
            t.get(at..at + 2)
                .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
        };
        let segments = usize::from(u16_at(6) / 2);
        let ends = 14;
        let starts = ends + 2 * segments + 2;
        let deltas = starts + 2 * segments;
        let offsets = deltas + 2 * segments;
        let Some(s) = (0..segments).find(|&s| u16_at(ends + 2 * s) >= c) else {
            return 0;
        };
        let start = u16_at(starts + 2 * s);
        if c < start {
            return 0;
        }
        let delta = u16_at(deltas + 2 * s);
        let offset = u16_at(offsets + 2 * s);
        let id = if offset == 0 {
            c.wrapping_add(delta)
        } else {
            let at = offsets + 2 * s + usize::from(offset) + 2 * usize::from(c - start);
            match u16_at(at) {
                0 => 0,
                g => g.wrapping_add(delta),
            }
        };
        usize::from(id)
    }

    /// `(advance, left side bearing)` of `c` in pixels at size `px`.
    fn h_metrics(&self, c: char, px: f64) -> (f64, f64) {
        let g = self.glyph(c).min(self.advances.len().saturating_sub(1));
        let scale = px / self.height;
        let advance = self.advances.get(g).map_or(0.0, |&a| f64::from(a));
        let bearing = self.bearings.get(g).map_or(0.0, |&b| f64::from(b));
        (advance * scale, bearing * scale)
    }
}

fn font(px: f64) -> FontDesc<'static> {
    FontDesc::new(FontFamily::Name(FONT), px, FontStyle::Normal)
}

/// Width in pixels of `text` at `px` (sum of advances).
fn text_width(text: &str, px: f64) -> u32 {
    let m = metrics();
    text.chars()
        .map(|c| m.h_metrics(c, px).0)
        .sum::<f64>()
        .ceil() as u32
}

/// Cuts `text` with an ellipsis so that it is at most `max_w` pixels wide at `px`.
fn truncate_to(text: &str, px: f64, max_w: u32) -> String {
    if text_width(text, px) <= max_w {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    let mut n = chars.len();
    while n > 1 {
        n -= 1;
        let candidate: String = chars[..n].iter().collect::<String>() + "…";
        if text_width(&candidate, px) <= max_w {
            return candidate;
        }
    }
    "…".to_string()
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// Draws `text` at size `px` anchored at `at`: `pos` refers to the text's own box (from
/// the top of the capitals to the bottom of the descenders), before `rotation`.
fn put_text(
    area: &Area<'_>,
    text: &str,
    px: f64,
    color: RGBColor,
    at: (i32, i32),
    pos: Pos,
    rotation: FontTransform,
) -> Result<()> {
    let m = metrics();
    let width: f64 = text.chars().map(|c| m.h_metrics(c, px).0).sum();
    let x0 = match pos.h_pos {
        HPos::Left => 0.0,
        HPos::Center => -width / 2.0,
        HPos::Right => -width,
    };
    let (cap, descent) = (CAP_HEIGHT * px, DESCENT * px);
    let baseline = match pos.v_pos {
        VPos::Top => cap,
        VPos::Center => (cap - descent) / 2.0,
        VPos::Bottom => -descent,
    };
    // Plotters puts the baseline of a glyph drawn from (x, y) at y + px / 2.
    let y = (baseline - px / 2.0).round() as i32;
    let style = font(px)
        .color(&color)
        .pos(Pos::new(HPos::Left, VPos::Top))
        .transform(rotation.clone());
    let mut pen = x0;
    for c in text.chars() {
        let (advance, bearing) = m.h_metrics(c, px);
        if !c.is_whitespace() {
            let x = pen.round() as i32 + bearing.floor() as i32;
            let (dx, dy) = rotation.transform(x, y);
            area.draw_text(&c.to_string(), &style, (at.0 + dx, at.1 + dy))?;
        }
        pen += advance;
    }
    Ok(())
}

/// The title, centred in the top band (shrunk if it is wider than the image).
fn draw_title(area: &Area<'_>, title: &str, width: u32) -> Result<()> {
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
        px,
        TEXT_COLOR,
        ((width / 2) as i32, TITLE_TOP),
        Pos::new(HPos::Center, VPos::Top),
        FontTransform::None,
    )
}

// ---------------------------------------------------------------------------------------
// Axes and tick labels

/// One axis in plotting coordinates (log10 of the data on a log axis), with its ticks and
/// their labels.
#[derive(Debug, Clone)]
struct Axis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    minor: Vec<f64>,
    labels: Vec<String>,
}

impl Axis {
    /// `lo < hi`, in plotting coordinates; about `target` labelled ticks.
    fn new(lo: f64, hi: f64, log: bool, target: usize) -> Self {
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

    fn widest_label(&self, px: f64) -> u32 {
        self.labels
            .iter()
            .map(|l| text_width(l, px))
            .max()
            .unwrap_or(0)
    }
}

/// Data value to plotting coordinate (log10 on a log axis); `None` if it cannot be drawn.
fn to_plot(v: f64, log: bool) -> Option<f64> {
    let t = if log { v.log10() } else { v };
    t.is_finite().then_some(t)
}

/// `[lo, hi]` widened so that it has a positive length.
fn widen_degenerate(lo: f64, hi: f64, log: bool) -> (f64, f64) {
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

/// A step of 1, 2, 2.5 or 5 times a power of ten giving at most about `target` steps.
fn nice_step(span: f64, target: usize) -> f64 {
    let raw = span / target as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude)
}

/// Multiples of a nice step inside `[lo, hi]`.
fn linear_ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, f64) {
    let step = nice_step(hi - lo, target);
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    let ticks = (first..=last)
        .map(|i| {
            let t = i as f64 * step;
            if t.abs() < step * 1e-9 { 0.0 } else { t }
        })
        .collect();
    (ticks, step)
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
fn compact(v: f64) -> String {
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

// ---------------------------------------------------------------------------------------
// Layout and legend

/// The smallest plot side, in pixels, however long the labels around it.
const MIN_PLOT: u32 = 100;

/// Pixel layout of a chart: the image, the title band, the label areas left of and under
/// the plot.
#[derive(Debug, Clone, Copy)]
struct Layout {
    width: u32,
    height: u32,
    top: u32,
    y_area: u32,
    x_area: u32,
}

impl Layout {
    fn new(title: &str, y_area: u32, x_area: u32) -> Self {
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
        }
    }

    fn plot_width(&self) -> u32 {
        let margins = MARGIN + MARGIN_RIGHT + self.y_area;
        self.width.saturating_sub(margins).max(MIN_PLOT)
    }

    fn plot_height(&self) -> u32 {
        let margins = self.top + MARGIN + self.x_area;
        self.height.saturating_sub(margins).max(MIN_PLOT)
    }

    /// The plot: its left edge is the y axis, its bottom edge the x axis.
    fn plot_rect(&self) -> Rect {
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
fn y_area_width(axis: &Axis, label: &str) -> u32 {
    let desc = if label.is_empty() {
        0
    } else {
        LABEL_PX as u32 + 10
    };
    4 + desc + axis.widest_label(TICK_PX) + LABEL_DIST + 4
}

/// The plot rectangle with its two axes: maps plotting coordinates to pixels.
#[derive(Debug, Clone)]
struct Plot {
    rect: Rect,
    x: Axis,
    y: Axis,
}

impl Plot {
    fn px(&self, x: f64, y: f64) -> (i32, i32) {
        let fx = (x - self.x.lo) / (self.x.hi - self.x.lo);
        let fy = (y - self.y.lo) / (self.y.hi - self.y.lo);
        let r = self.rect;
        (
            r.x0 + (fx * f64::from(r.x1 - r.x0)).round() as i32,
            r.y1 - (fy * f64::from(r.y1 - r.y0)).round() as i32,
        )
    }

    /// Grid lines at the ticks (lighter at the minor ticks), drawn under the data.
    fn draw_grid(&self, area: &Area<'_>) -> Result<()> {
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
    fn draw_axes(&self, area: &Area<'_>, x_label: &str, y_label: &str, height: u32) -> Result<()> {
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
                    TICK_PX,
                    TEXT_COLOR,
                    at,
                    Pos::new(HPos::Center, VPos::Top),
                    FontTransform::None,
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
                    TICK_PX,
                    TEXT_COLOR,
                    at,
                    Pos::new(HPos::Right, VPos::Center),
                    FontTransform::None,
                )?;
            }
        }

        if !x_label.is_empty() {
            let label = truncate_to(x_label, LABEL_PX, (r.x1 - r.x0) as u32);
            let at = ((r.x0 + r.x1) / 2, (height - MARGIN) as i32);
            put_text(
                area,
                &label,
                LABEL_PX,
                TEXT_COLOR,
                at,
                Pos::new(HPos::Center, VPos::Bottom),
                FontTransform::None,
            )?;
        }
        if !y_label.is_empty() {
            let label = truncate_to(y_label, LABEL_PX, (r.y1 - r.y0) as u32);
            let at = (MARGIN as i32 + 4, (r.y0 + r.y1) / 2);
            put_text(
                area,
                &label,
                LABEL_PX,
                TEXT_COLOR,
                at,
                Pos::new(HPos::Center, VPos::Top),
                FontTransform::Rotate270,
            )?;
        }
        Ok(())
    }
}

/// Keep every n-th of labels at pixel positions `at` so that kept ones are `room` apart.
fn thinning(at: &[i32], room: u32) -> usize {
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
struct Rect {
    x0: i32,
    y0: i32,
    x1: i32,
    y1: i32,
}

impl Rect {
    fn overlap(&self, other: &Rect) -> i64 {
        let w = (self.x1.min(other.x1) - self.x0.max(other.x0)).max(0);
        let h = (self.y1.min(other.y1) - self.y0.max(other.y0)).max(0);
        i64::from(w) * i64::from(h)
    }
}

/// Marker shapes, cycled over series so that lines differ by more than colour.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Marker {
    Circle,
    Triangle,
    Square,
    Diamond,
}

impl Marker {
    fn nth(i: usize) -> Self {
        [Self::Circle, Self::Triangle, Self::Square, Self::Diamond][i % 4]
    }

    fn draw(self, area: &Area<'_>, at: (i32, i32), color: RGBColor) -> Result<()> {
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
enum Swatch {
    Line(RGBColor, Option<Marker>),
    Dashed(RGBColor),
    Fill(RGBColor),
}

#[derive(Debug, Clone, PartialEq)]
struct LegendEntry {
    label: String,
    swatch: Swatch,
}

const LEGEND_ROW: u32 = 22;
const LEGEND_PAD: u32 = 8;
const LEGEND_SWATCH: u32 = 32;
const LEGEND_INSET: i32 = 10;

/// The legend's size in pixels, with labels cut to fit `max_w`.
fn legend_size(entries: &mut [LegendEntry], max_w: u32) -> (u32, u32) {
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

/// Legend placements in order of preference: the corners, then top and bottom centre.
fn legend_candidates(plot: Rect, size: (u32, u32)) -> Vec<Rect> {
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
fn least_covering(candidates: &[Rect], obstacles: &[Rect]) -> Rect {
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

fn draw_legend(area: &Area<'_>, entries: &[LegendEntry], at: Rect) -> Result<()> {
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
            Swatch::Line(c, marker) => {
                area.draw(&PathElement::new(
                    vec![(x0, cy), (x1, cy)],
                    c.stroke_width(2),
                ))?;
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
            LEGEND_PX,
            TEXT_COLOR,
            (x1 + 6, cy),
            Pos::new(HPos::Left, VPos::Center),
            FontTransform::None,
        )?;
    }
    Ok(())
}

/// "no data" in the middle of the plot, on a white patch (a reference line may cross).
fn draw_no_data(area: &Area<'_>, plot: Rect) -> Result<()> {
    let px = LABEL_PX + 4.0;
    let (cx, cy) = ((plot.x0 + plot.x1) / 2, (plot.y0 + plot.y1) / 2);
    let half_w = text_width("no data", px) as i32 / 2 + 10;
    let half_h = px as i32 / 2 + 6;
    area.draw(&Rectangle::new(
        [(cx - half_w, cy - half_h), (cx + half_w, cy + half_h)],
        WHITE.filled(),
    ))?;
    let centre = Pos::new(HPos::Center, VPos::Center);
    put_text(
        area,
        "no data",
        px,
        MUTED_COLOR,
        (cx, cy),
        centre,
        FontTransform::None,
    )
}

fn new_area(path: &Path, width: u32, height: u32) -> Result<Area<'_>> {
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    Ok(root)
}

// ---------------------------------------------------------------------------------------
// Line chart

/// Unwraps the data range of a set of plotting coordinates.
fn span(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// `(lo, hi)` padded by `frac` of its length on both sides (degenerate ranges widened).
fn padded(range: Option<(f64, f64)>, log: bool, frac: f64) -> (f64, f64) {
    let (lo, hi) = range.unwrap_or((0.0, 1.0));
    let (lo, hi) = widen_degenerate(lo, hi, log);
    let d = (hi - lo) * frac;
    (lo - d, hi + d)
}

fn render_line_chart(path: &Path, chart: &LineChart) -> Result<()> {
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
    let layout = Layout::new(
        &chart.title,
        y_area_width(&y_axis, &chart.y_label),
        x_area_height(&chart.x_label),
    );

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
        for run in runs {
            let pixels: Vec<(i32, i32)> = run.iter().map(px).collect();
            if pixels.len() > 1 {
                root.draw(&PathElement::new(pixels.clone(), color.stroke_width(2)))?;
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
        } else {
            series.name.clone()
        };
        entries.push(LegendEntry {
            label,
            swatch: Swatch::Line(color, chart.markers.then_some(marker)),
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
        let at = least_covering(&legend_candidates(plot, size), &obstacles);
        draw_legend(&root, &entries, at)?;
    }
    root.present()?;
    Ok(())
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
        for (px, max_lines) in [(TICK_PX, MAX_LABEL_LINES), (12.0, MAX_LABEL_LINES + 1)] {
            let lines: Option<Vec<Vec<String>>> = categories
                .iter()
                .map(|c| wrap(c, px, room, max_lines))
                .collect();
            if let Some(lines) = lines {
                return Self::Lines(px, lines);
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

    fn draw(&self, area: &Area<'_>, centres: &[i32], axis_y: i32) -> Result<()> {
        let top = axis_y + LABEL_DIST as i32;
        match self {
            Self::Lines(px, lines) => {
                for (&cx, lines) in centres.iter().zip(lines) {
                    for (j, line) in lines.iter().enumerate() {
                        let y = top + (j as u32 * line_height(*px)) as i32;
                        put_text(
                            area,
                            line,
                            *px,
                            TEXT_COLOR,
                            (cx, y),
                            Pos::new(HPos::Center, VPos::Top),
                            FontTransform::None,
                        )?;
                    }
                }
            }
            Self::Vertical(px, labels) => {
                for (&cx, label) in centres.iter().zip(labels) {
                    put_text(
                        area,
                        label,
                        *px,
                        TEXT_COLOR,
                        (cx, top),
                        Pos::new(HPos::Right, VPos::Center),
                        FontTransform::Rotate270,
                    )?;
                }
            }
        }
        Ok(())
    }
}

fn line_height(px: f64) -> u32 {
    (px * 1.3).round() as u32
}

/// Greedy line breaking after spaces and punctuation; `None` if a piece does not fit in
/// `max_w` or more than `max_lines` lines are needed.
fn wrap(text: &str, px: f64, max_w: u32, max_lines: usize) -> Option<Vec<String>> {
    let mut pieces = Vec::new();
    let mut piece = String::new();
    for c in text.chars() {
        piece.push(c);
        if matches!(c, ' ' | '_' | '-' | '/' | ',' | ':' | '=' | '+' | ')') {
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

fn render_bar_chart(path: &Path, chart: &BarChart) -> Result<()> {
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
                (y + 3, VPos::Top)
            } else {
                (y - 3, VPos::Bottom)
            };
            put_text(
                &root,
                &l.text,
                VALUE_PX,
                TEXT_COLOR,
                (x, y),
                Pos::new(HPos::Center, v),
                FontTransform::None,
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

    /// A scratch folder under the system temp dir, removed on drop.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("sfb-plot-test-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("create scratch dir");
            Self(dir)
        }

        fn path(&self, file: &str) -> std::path::PathBuf {
            self.0.join(file)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Reads a file and checks the PNG signature; returns its bytes and IHDR dimensions.
    fn png(path: &Path) -> (Vec<u8>, u32, u32) {
        let bytes = std::fs::read(path).expect("read png");
        assert!(bytes.len() > 33, "{} is too short", path.display());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
        assert_eq!(&bytes[12..16], b"IHDR", "first chunk is IHDR");
        let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let (w, h) = (be(16), be(20));
        (bytes, w, h)
    }

    fn curve(name: &str, scale: f64) -> Series {
        Series {
            name: name.to_string(),
            points: (0..50)
                .map(|i| {
                    (
                        f64::from(i) * 10.0,
                        scale * (1.0 + 50.0 / (1.0 + f64::from(i))),
                    )
                })
                .collect(),
        }
    }

    fn loss_chart() -> LineChart {
        LineChart {
            title: "Objective × clock (P = 4, s ≥ 2)".into(),
            x_label: "clock".into(),
            y_label: "objective (nats²)".into(),
            series: vec![curve("BSP", 1.0), curve("SSP s=2", 0.8)],
            log_x: false,
            log_y: true,
            hline: Some((1.5, "target objective".into())),
            markers: true,
        }
    }

    #[test]
    fn line_chart_writes_png_of_chosen_size_and_reflects_data() {
        let dir = Scratch::new("line");
        let a = dir.path("a.png");
        line_chart(&a, &loss_chart()).expect("render");
        let (bytes_a, w, h) = png(&a);
        assert_eq!((w, h), (WIDTH, HEIGHT));

        let mut other = loss_chart();
        other.series[1] = curve("SSP s=2", 0.5);
        let b = dir.path("b.png");
        line_chart(&b, &other).expect("render");
        let (bytes_b, _, _) = png(&b);
        assert_ne!(bytes_a, bytes_b, "different data, same image");

        // Same input, same bytes.
        let c = dir.path("c.png");
        line_chart(&c, &loss_chart()).expect("render");
        assert_eq!(bytes_a, png(&c).0);
    }

    #[test]
    fn line_chart_skips_bad_points_and_renders_without_data() {
        let dir = Scratch::new("nodata");
        let empty = LineChart {
            title: "nothing yet".into(),
            series: vec![
                Series {
                    name: "all NaN".into(),
                    points: vec![(f64::NAN, 1.0), (1.0, f64::INFINITY), (2.0, -1.0)],
                },
                Series {
                    name: "empty".into(),
                    points: vec![],
                },
            ],
            log_y: true,
            log_x: true,
            ..LineChart::default()
        };
        let p = dir.path("empty.png");
        line_chart(&p, &empty).expect("no data still renders");
        assert_eq!((png(&p).1, png(&p).2), (WIDTH, HEIGHT));

        let mut holes = loss_chart();
        holes.series[0].points[10].1 = f64::NAN;
        holes.series[0].points[20].0 = f64::NEG_INFINITY;
        holes.series.push(Series {
            name: "empty".into(),
            points: vec![],
        });
        let q = dir.path("holes.png");
        line_chart(&q, &holes).expect("render");
        let (with_holes, w, h) = png(&q);
        assert_eq!((w, h), (WIDTH, HEIGHT));
        let r = dir.path("whole.png");
        line_chart(&r, &loss_chart()).expect("render");
        assert_ne!(
            with_holes,
            png(&r).0,
            "skipped points and the empty series show"
        );
    }

    fn time_split() -> BarChart {
        BarChart {
            title: "Time per clock".into(),
            y_label: "seconds".into(),
            categories: vec![
                "BSP".into(),
                "SSP s=1".into(),
                "SSP s=3".into(),
                "async".into(),
            ],
            stacks: vec![
                ("compute".into(), vec![1.0, 1.0, 1.1, 0.9]),
                ("apply".into(), vec![0.3, 0.3, 0.35, 0.3]),
                ("wait".into(), vec![0.8, 0.4, 0.1, f64::NAN]),
            ],
            stacked: true,
            log_y: false,
        }
    }

    fn traffic() -> BarChart {
        BarChart {
            title: "Bytes per clock".into(),
            y_label: "bytes/clock".into(),
            categories: vec!["SFB P=4".into(), "SFB P=16".into(), "FMS P=16".into()],
            stacks: vec![
                ("measured".into(), vec![1.2e4, 2.1e5, 3.3e7]),
                ("formula".into(), vec![1.1e4, 2.0e5, 0.0]),
            ],
            stacked: false,
            log_y: true,
        }
    }

    #[test]
    fn bar_charts_write_pngs_and_reflect_data() {
        let dir = Scratch::new("bars");
        let s = dir.path("stacked.png");
        bar_chart(&s, &time_split()).expect("render");
        let (stacked, w, h) = png(&s);
        assert_eq!((w, h), (WIDTH, HEIGHT));

        let g = dir.path("grouped.png");
        bar_chart(&g, &traffic()).expect("render");
        let (grouped, w, h) = png(&g);
        assert_eq!((w, h), (WIDTH, HEIGHT));
        assert_ne!(stacked, grouped);

        let mut more = traffic();
        more.stacks[0].1[0] = 5e3;
        let m = dir.path("more.png");
        bar_chart(&m, &more).expect("render");
        assert_ne!(grouped, png(&m).0, "different data, same image");
    }

    #[test]
    fn bar_chart_with_many_long_names_or_no_data_renders() {
        let dir = Scratch::new("bars-long");
        let n = 12;
        let chart = BarChart {
            title: "Twelve arms".into(),
            y_label: "seconds".into(),
            categories: (0..n)
                .map(|i| format!("SSP staleness={i} batch=64 lr=0.05"))
                .collect(),
            stacks: vec![("total".into(), (0..n).map(f64::from).collect())],
            stacked: false,
            log_y: false,
        };
        let p = dir.path("long.png");
        bar_chart(&p, &chart).expect("render");
        assert_eq!((png(&p).1, png(&p).2), (WIDTH, HEIGHT), "names wrap");

        let mut unbreakable = chart.clone();
        unbreakable.categories = (0..n)
            .map(|i| format!("ArmWithAVeryLongName{i:010}"))
            .collect();
        let v = dir.path("vertical.png");
        bar_chart(&v, &unbreakable).expect("render");
        let (_, w, h) = png(&v);
        assert_eq!(w, WIDTH);
        assert!(h > HEIGHT, "vertical names make the image taller, got {h}");

        let empty = BarChart {
            title: "empty".into(),
            stacks: vec![("x".into(), vec![f64::NAN, -1.0])],
            categories: vec!["a".into(), "b".into()],
            log_y: true,
            ..BarChart::default()
        };
        let q = dir.path("empty.png");
        bar_chart(&q, &empty).expect("no data still renders");
        assert_eq!(png(&q).1, WIDTH);
    }

    #[test]
    fn bar_chart_rejects_ragged_components() {
        let mut chart = time_split();
        chart.stacks[1].1.pop();
        let err = bar_chart(Path::new("/nonexistent/x.png"), &chart).unwrap_err();
        assert!(err.to_string().contains("apply"), "{err}");
    }

    #[test]
    fn unwritable_path_names_the_file() {
        let path = Path::new("/nonexistent-sfb-dir/chart.png");
        let err = line_chart(path, &loss_chart()).unwrap_err();
        assert!(
            format!("{err:#}").contains("/nonexistent-sfb-dir/chart.png"),
            "{err:#}"
        );
    }

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
    }

    #[test]
    fn embedded_font_has_the_glyphs_charts_use() {
        let m = ensure_font().expect("font parses");
        for c in "×≥≤²³⁻⁰¹⁴⁵⁶⁷⁸⁹…ΔµσAz09()%/".chars() {
            assert_ne!(m.glyph(c), 0, "missing glyph for {c:?}");
        }
        assert_eq!(
            m.glyph('\u{E000}'),
            0,
            "private-use character is not in DejaVu Sans"
        );
        // Our widths agree with ab_glyph's (kerning aside: digits have none).
        let ours = text_width("0123456789", 20.0);
        let theirs = font(20.0).box_size("0123456789").expect("layout").0;
        assert!(ours.abs_diff(theirs) <= 1, "{ours} vs {theirs}");
    }

    #[test]
    fn long_names_wrap_or_go_vertical() {
        ensure_font().expect("font");
        let wrapped = wrap("SSP staleness=2 lr=0.1", TICK_PX, 90, 3).expect("fits in 3 lines");
        assert!(wrapped.len() > 1, "{wrapped:?}");
        assert!(wrap("averyveryverylongunbreakablename", TICK_PX, 60, 3).is_none());
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
}

#[cfg(test)]
mod examples {
    use super::*;

    /// Renders sample charts to `<temp dir>/plot-demo/` for looking at them:
    /// `cargo test -p sfb --bin sfb plot::examples -- --ignored`.
    #[test]
    #[ignore = "writes example images for visual review"]
    fn render_examples() {
        let dir = std::env::temp_dir().join("plot-demo");
        std::fs::create_dir_all(&dir).expect("create demo dir");
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
        )
        .expect("objective");

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
        )
        .expect("wall time");

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
        )
        .expect("scaling");

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
        )
        .expect("no data");

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
        )
        .expect("time split");

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
        )
        .expect("traffic");

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
        )
        .expect("twelve long");

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
        )
        .expect("twelve vertical");

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
        )
        .expect("eight wrapped");
    }
}
