//! Text: laid out from `ab_glyph`'s advances and kerning, rasterised from its glyph
//! outlines and blended onto the bitmap pixel by pixel.
//!
//! A font "size" `px` is ab_glyph's [`PxScale`]: the height from the font's ascender to
//! its descender, in pixels.

use std::sync::OnceLock;

use ab_glyph::{Font as _, FontRef, Glyph, GlyphId, PxScale, ScaleFont, point};
use plotters::prelude::*;

use crate::error::{DrawResult, Error, Result};
use crate::frame::Area;

/// DejaVu Sans (Bitstream Vera licence, `assets/fonts/LICENSE`).
const FONT_BYTES: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");

/// The embedded font and the vertical metrics the layout needs, read once per process.
#[derive(Debug)]
pub(crate) struct Face {
    pub(crate) font: FontRef<'static>,
    /// Cap height ('H' from the baseline to its top) as a fraction of the pixel size.
    cap_height: f32,
    /// Descender depth (below the baseline, positive) as a fraction of the pixel size.
    descent: f32,
}

/// Parses the embedded font, once per process.
pub(crate) fn ensure_font() -> Result<&'static Face> {
    static FACE: OnceLock<std::result::Result<Face, ab_glyph::InvalidFont>> = OnceLock::new();
    FACE.get_or_init(|| {
        let font = FontRef::try_from_slice(FONT_BYTES)?;
        let height = font.height_unscaled();
        // `Outline::bounds` is in font units, `min.y` being the top of the ink.
        let cap = font
            .outline(font.glyph_id('H'))
            .map_or(0.7 * font.ascent_unscaled(), |o| o.bounds.min.y);
        Ok(Face {
            cap_height: cap / height,
            descent: -font.descent_unscaled() / height,
            font,
        })
    })
    .as_ref()
    .map_err(|e| Error::Font(*e))
}

/// The font. Every entry point calls [`ensure_font`] first and a test checks that the
/// embedded font parses, so this does not fail.
pub(crate) fn face() -> &'static Face {
    ensure_font().expect("the embedded font was checked on entry")
}

/// `text` laid out on a baseline at y = 0 from x = 0: glyphs positioned by advance plus
/// kerning with the previous glyph, and the total advance width.
pub(crate) fn layout(text: &str, px: f64) -> (Vec<Glyph>, f32) {
    let font = &face().font;
    let scaled = font.as_scaled(PxScale::from(px as f32));
    let mut glyphs = Vec::with_capacity(text.len());
    let mut pen = 0.0f32;
    let mut previous: Option<GlyphId> = None;
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = previous {
            pen += scaled.kern(p, id);
        }
        glyphs.push(id.with_scale_and_position(scaled.scale(), point(pen, 0.0)));
        pen += scaled.h_advance(id);
        previous = Some(id);
    }
    (glyphs, pen)
}

/// Width in pixels of `text` at `px` (advances and kerning), rounded up.
pub(crate) fn text_width(text: &str, px: f64) -> u32 {
    layout(text, px).1.ceil() as u32
}

/// Cuts `text` with an ellipsis so that it is at most `max_w` pixels wide at `px`.
pub(crate) fn truncate_to(text: &str, px: f64, max_w: u32) -> String {
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

/// Horizontal anchor of a text box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HAnchor {
    Left,
    Center,
    Right,
}

/// Vertical anchor of a text box, which reaches from the top of the capitals to the
/// bottom of the descenders; `Center` centres the capitals (and digits), so a tick label
/// or a legend entry lines up with its tick or swatch whether or not it has descenders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VAnchor {
    Top,
    Center,
    Bottom,
}

/// Reading direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Left to right.
    Horizontal,
    /// Bottom to top (rotated a quarter turn counter-clockwise).
    Up,
}

/// How and where a piece of text is drawn.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextStyle {
    pub(crate) px: f64,
    pub(crate) color: RGBColor,
    pub(crate) h: HAnchor,
    pub(crate) v: VAnchor,
    pub(crate) direction: Direction,
}

impl TextStyle {
    /// Horizontal text of size `px` in `color`, anchored by `h` and `v`.
    pub(crate) fn new(px: f64, color: RGBColor, h: HAnchor, v: VAnchor) -> Self {
        Self {
            px,
            color,
            h,
            v,
            direction: Direction::Horizontal,
        }
    }

    /// The same, reading bottom to top; the anchors refer to the unrotated box.
    pub(crate) fn up(self) -> Self {
        Self {
            direction: Direction::Up,
            ..self
        }
    }
}

/// Draws `text` anchored at `at`. Glyph coverage from ab_glyph's rasteriser is blended
/// onto what is already drawn (so text over a grid line or a legend box stays smooth).
pub(crate) fn put_text(
    area: &Area<'_>,
    text: &str,
    at: (i32, i32),
    style: TextStyle,
) -> DrawResult {
    let face = face();
    let (glyphs, width) = layout(text, style.px);
    let px = style.px as f32;
    let x0 = match style.h {
        HAnchor::Left => 0.0,
        HAnchor::Center => -width / 2.0,
        HAnchor::Right => -width,
    }
    .round();
    let (cap, descent) = (face.cap_height * px, face.descent * px);
    // Whole-pixel baseline: horizontal strokes of the glyphs stay crisp.
    let baseline = match style.v {
        VAnchor::Top => cap,
        VAnchor::Center => cap / 2.0,
        VAnchor::Bottom => -descent,
    }
    .round();
    for mut glyph in glyphs {
        glyph.position = point(x0 + glyph.position.x, baseline);
        let Some(outlined) = face.font.outline_glyph(glyph) else {
            continue; // a space
        };
        let bounds = outlined.px_bounds();
        let (left, top) = (bounds.min.x as i32, bounds.min.y as i32);
        let mut result = Ok(());
        outlined.draw(|x, y, coverage| {
            if result.is_err() || coverage < 1.0 / 255.0 {
                return;
            }
            // (lx, ly): the pixel relative to the anchor in the text's own frame.
            let (lx, ly) = (left + x as i32, top + y as i32);
            let pixel = match style.direction {
                Direction::Horizontal => (at.0 + lx, at.1 + ly),
                Direction::Up => (at.0 + ly, at.1 - lx - 1),
            };
            let color = style.color.mix(f64::from(coverage.min(1.0)));
            result = area.draw_pixel(pixel, &color);
        });
        result?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use plotters::backend::BitMapBackend;

    #[test]
    fn embedded_font_has_the_glyphs_charts_use() {
        let font = &ensure_font().expect("font parses").font;
        for c in "×≥≤²³⁻⁰¹⁴⁵⁶⁷⁸⁹…ΔµσAz09()%/".chars() {
            assert_ne!(font.glyph_id(c).0, 0, "missing glyph for {c:?}");
        }
        assert_eq!(
            font.glyph_id('\u{E000}').0,
            0,
            "private-use character is not in DejaVu Sans"
        );
        let face = face();
        assert!(
            (0.55..0.7).contains(&face.cap_height),
            "{}",
            face.cap_height
        );
        assert!((0.15..0.25).contains(&face.descent), "{}", face.descent);
    }

    #[test]
    fn width_is_advances_plus_kerning() {
        let font = &face().font;
        let px = 20.0;
        let scaled = font.as_scaled(PxScale::from(px as f32));
        // "AV" and "To" are kerned pairs in DejaVu Sans; the sum must include that.
        for text in ["AVATAR Toy", "time (s)", "0123456789"] {
            let ids: Vec<GlyphId> = text.chars().map(|c| scaled.glyph_id(c)).collect();
            let advances: f32 = ids.iter().map(|&id| scaled.h_advance(id)).sum();
            let kerning: f32 = ids.windows(2).map(|w| scaled.kern(w[0], w[1])).sum();
            let (_, width) = layout(text, px);
            assert!((width - (advances + kerning)).abs() < 1e-3, "{text}");
            if text.starts_with("AV") {
                assert!(kerning < -1.0, "kerning is applied: {kerning}");
            }
        }
        // Digits are all as wide as each other in DejaVu Sans (tabular figures).
        let one = layout("0", px).1;
        assert!((layout("0123456789", px).1 - 10.0 * one).abs() < 1e-3);
    }

    /// Renders `text` on a white 400×100 buffer and returns the inked columns and rows.
    fn ink(text: &str, style: TextStyle, at: (i32, i32)) -> (Vec<u32>, Vec<u32>) {
        let (w, h) = (400u32, 100u32);
        let mut buf = vec![255u8; (w * h * 3) as usize];
        {
            let area = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            put_text(&area, text, at, style).expect("draw");
            area.present().expect("present");
        }
        let dark = |x: u32, y: u32| buf[((y * w + x) * 3) as usize] < 128;
        let cols = (0..w).filter(|&x| (0..h).any(|y| dark(x, y))).collect();
        let rows = (0..h).filter(|&y| (0..w).any(|x| dark(x, y))).collect();
        (cols, rows)
    }

    #[test]
    fn glyph_coverage_lands_where_the_layout_says() {
        ensure_font().expect("font");
        let style = TextStyle::new(20.0, BLACK, HAnchor::Left, VAnchor::Top);
        let (cols, rows) = ink("HxxxxxxxxxxxxxxxxxxxxxxH", style, (10, 20));
        assert!(!cols.is_empty(), "nothing drawn");
        // Ink spans the advance width, less the side bearings of the two H's (~1.5 px).
        let ink_w = cols.last().unwrap() - cols.first().unwrap() + 1;
        let width = text_width("HxxxxxxxxxxxxxxxxxxxxxxH", 20.0);
        assert!(ink_w + 6 >= width && ink_w <= width, "{ink_w} vs {width}");
        assert!((10..=13).contains(cols.first().unwrap()), "{cols:?}");
        // Top anchor: the capitals start at y = 20 and stand cap-height tall.
        assert_eq!(*rows.first().unwrap(), 20, "{rows:?}");
        let cap = (face().cap_height * 20.0).round() as u32;
        assert!(
            rows.len().abs_diff(cap as usize) <= 1,
            "{} vs {cap}",
            rows.len()
        );

        // Letters are evenly spaced: "iiiiii" has ink columns at a constant pitch.
        let (cols, _) = ink("llllllll", style, (10, 20));
        let starts: Vec<u32> = cols
            .iter()
            .zip(std::iter::once(&0).chain(cols.iter()))
            .filter(|(c, p)| **c != **p + 1)
            .map(|(c, _)| *c)
            .collect();
        assert_eq!(starts.len(), 8, "{cols:?}");
        let gaps: Vec<u32> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        let (lo, hi) = (gaps.iter().min().unwrap(), gaps.iter().max().unwrap());
        assert!(hi - lo <= 1, "uneven letter pitch {gaps:?}");
    }

    #[test]
    fn vertical_text_reads_bottom_to_top() {
        ensure_font().expect("font");
        let style = TextStyle::new(20.0, BLACK, HAnchor::Center, VAnchor::Top).up();
        let (cols, rows) = ink("Ly", style, (30, 50));
        // The box's top (the tops of the capitals) is at x = 30, the text runs upwards
        // centred on y = 50.
        assert_eq!(*cols.first().unwrap(), 30, "{cols:?}");
        let mid = (rows.first().unwrap() + rows.last().unwrap()) / 2;
        assert!(mid.abs_diff(50) <= 2, "{rows:?}");
        let width = text_width("Ly", 20.0);
        assert!(rows.len() as u32 <= width + 1, "{} vs {width}", rows.len());
    }

    #[test]
    fn truncation_fits_and_marks_the_cut() {
        ensure_font().expect("font");
        let t = truncate_to("a rather long legend entry", 15.0, 80);
        assert!(t.ends_with('…'), "{t}");
        assert!(text_width(&t, 15.0) <= 80);
        assert_eq!(truncate_to("short", 15.0, 80), "short");
    }
}
