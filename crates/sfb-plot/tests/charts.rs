//! Charts written to PNG files: size, determinism, dependence on the data, where ink
//! lands, and errors.

use std::path::{Path, PathBuf};

use sfb_plot::{BarChart, Error, LineChart, Series, bar_chart, line_chart};

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 600;

/// A scratch folder under the system temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sfb-plot-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Self(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
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

fn pixels(path: &Path) -> image::RgbImage {
    image::open(path).expect("decode png").to_rgb8()
}

/// Pixels in a rectangle darker than mid-grey (text, axes; not grid lines or pale fills).
fn dark_in(img: &image::RgbImage, x: std::ops::Range<u32>, y: std::ops::Range<u32>) -> usize {
    y.flat_map(|y| x.clone().map(move |x| (x, y)))
        .filter(|&(x, y)| img.get_pixel(x, y).0.iter().all(|&c| c < 110))
        .count()
}

/// Pixels of exactly `rgb` anywhere in the image.
fn count_color(img: &image::RgbImage, rgb: [u8; 3]) -> usize {
    img.pixels().filter(|p| p.0 == rgb).count()
}

const BLUE: [u8; 3] = [0x00, 0x72, 0xB2];
const ORANGE: [u8; 3] = [0xE6, 0x9F, 0x00];

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

    // Both series are drawn in their palette colours.
    let img = pixels(&a);
    assert!(count_color(&img, BLUE) > 500, "first series drawn");
    assert!(count_color(&img, ORANGE) > 500, "second series drawn");
}

#[test]
fn text_is_inked_where_the_layout_puts_it() {
    let dir = Scratch::new("ink");
    let with = dir.path("with.png");
    line_chart(&with, &loss_chart()).expect("render");
    let without = dir.path("without.png");
    let bare = LineChart {
        title: String::new(),
        x_label: String::new(),
        y_label: String::new(),
        ..loss_chart()
    };
    line_chart(&without, &bare).expect("render");
    let (img, bare_img) = (pixels(&with), pixels(&without));

    // The title band (top 45 px) holds the centred title and nothing else.
    let title_ink = dark_in(&img, 0..WIDTH, 0..45);
    assert!(title_ink > 400, "title drawn: {title_ink} dark pixels");
    assert_eq!(dark_in(&bare_img, 0..WIDTH, 0..20), 0, "no title, no ink");
    let left = dark_in(&img, 0..WIDTH / 2, 0..45);
    let right = dark_in(&img, WIDTH / 2..WIDTH, 0..45);
    let balance = left as f64 / right as f64;
    assert!(
        (0.6..1.6).contains(&balance),
        "title centred: {left} vs {right}"
    );

    // The x axis label sits at the bottom, the rotated y label at the left edge.
    let x_label = dark_in(&img, 400..700, HEIGHT - 30..HEIGHT);
    assert!(x_label > 30, "x label: {x_label}");
    assert_eq!(
        dark_in(&bare_img, 0..WIDTH, HEIGHT - 20..HEIGHT),
        0,
        "no x label"
    );
    let y_label = dark_in(&img, 0..35, 150..450);
    assert!(y_label > 60, "y label: {y_label}");
    assert_eq!(dark_in(&bare_img, 0..16, 150..450), 0, "no y label, no ink");
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
    let (_, w, h) = png(&p);
    assert_eq!((w, h), (WIDTH, HEIGHT));
    // "no data" is written in the middle of the plot.
    let img = pixels(&p);
    assert!(
        dark_in(&img, 400..600, 250..350) == 0,
        "muted grey, not dark"
    );
    assert!(
        img.pixels().any(|p| p.0 == [0x80, 0x80, 0x80]),
        "the muted 'no data' note is drawn"
    );

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

    // Taller bars, more paint.
    let mut taller = time_split();
    taller.stacks[0].1 = vec![2.0; 4];
    let t = dir.path("taller.png");
    bar_chart(&t, &taller).expect("render");
    let blue = |p: &Path| count_color(&pixels(p), BLUE);
    assert!(blue(&t) > blue(&s), "{} vs {}", blue(&t), blue(&s));
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
    let (_, w, h) = png(&p);
    assert_eq!((w, h), (WIDTH, HEIGHT), "names wrap");

    let mut unbreakable = chart.clone();
    unbreakable.categories = (0..n)
        .map(|i| format!("ArmWithAVeryLongName{i:010}"))
        .collect();
    let v = dir.path("vertical.png");
    bar_chart(&v, &unbreakable).expect("render");
    let (_, w, h) = png(&v);
    assert_eq!(w, WIDTH);
    assert!(h > HEIGHT, "vertical names make the image taller, got {h}");
    // The vertical names fit in the image: the bottom rows are blank.
    let img = pixels(&v);
    assert_eq!(
        dark_in(&img, 0..WIDTH, h - 4..h),
        0,
        "names cut at the bottom"
    );

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
    assert!(
        matches!(
            &err,
            Error::RaggedComponent { component, values: 3, categories: 4, .. } if component == "apply"
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("apply"), "{err}");
}

#[test]
fn unwritable_path_names_the_file() {
    let path = Path::new("/nonexistent-sfb-dir/chart.png");
    let err = line_chart(path, &loss_chart()).unwrap_err();
    assert!(
        matches!(&err, Error::Render { path: p, .. } if p == path),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("/nonexistent-sfb-dir/chart.png"),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some(), "keeps the cause");
}

/// 21 series (the q-sweep's): the legend goes right of the plot in a wider image, so it
/// covers no line, and every series past the palette's seven colours is stroked dashed or
/// dotted (fewer inked pixels than a solid line of the same colour).
#[test]
fn many_series_put_the_legend_outside_and_vary_the_stroke() {
    let dir = Scratch::new("many");
    let chart = |n: usize| LineChart {
        series: (0..n)
            .map(|i| curve(&format!("Q={i}"), 1.0 + 0.05 * i as f64))
            .collect(),
        log_y: false,
        hline: None,
        markers: false,
        ..loss_chart()
    };
    let few = dir.path("few.png");
    line_chart(&few, &chart(3)).expect("render");
    assert_eq!((png(&few).1, png(&few).2), (WIDTH, HEIGHT));
    let many = dir.path("many.png");
    line_chart(&many, &chart(21)).expect("render");
    let (_, w, h) = png(&many);
    assert!(w > WIDTH && h == HEIGHT, "{w}×{h}");
    // The legend's box is right of the plot: the image's last WIDTH / 10 columns hold its
    // labels' ink; with the legend inside they would be empty margin.
    let img = pixels(&many);
    assert!(dark_in(&img, w - WIDTH / 5..w - 10, 60..500) > 100);
    // Series 0 (solid blue) inks more than series 7 (blue, dashed) and 14 (dotted).
    let only = |k: usize| {
        let path = dir.path(&format!("only{k}.png"));
        let mut c = chart(21);
        for (i, s) in c.series.iter_mut().enumerate() {
            if i != k {
                s.points.clear();
            }
        }
        line_chart(&path, &c).expect("render");
        count_color(&pixels(&path), BLUE)
    };
    let (solid, dashed, dotted) = (only(0), only(7), only(14));
    assert!(
        solid > dashed && dashed > dotted && dotted > 0,
        "{solid} {dashed} {dotted}"
    );
}
