//! Hostile and surprising input: every resource limit refuses before allocating, with an
//! error naming where, the figure, the limit and how to raise it; binary garbage is an
//! error, never a panic; surprises that do not stop loading come back as warnings.

use std::cell::Cell;
use std::io::{BufReader, Read};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sfb_models::data::{CsvOptions, LibsvmOptions, parse_csv, parse_libsvm};
use sfb_models::{
    ClassificationSpec, ClusterSpec, Error, Example, Features, LimitKind, Limits, ModelSpec,
    Problem, SignalSpec, Warning,
};

/// An endless stream of one byte (like `/dev/zero`) that counts what was read from it.
struct Endless {
    byte: u8,
    read: Rc<Cell<usize>>,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        buf.fill(self.byte);
        self.read.set(self.read.get() + buf.len());
        Ok(buf.len())
    }
}

fn small(max_line_bytes: usize) -> Limits {
    Limits {
        max_line_bytes,
        ..Limits::default()
    }
}

fn libsvm_opts(limits: Limits) -> LibsvmOptions {
    LibsvmOptions {
        limits,
        ..LibsvmOptions::default()
    }
}

fn csv_opts(limits: Limits) -> CsvOptions {
    CsvOptions {
        limits,
        ..CsvOptions::default()
    }
}

fn libsvm(text: &[u8], opts: &LibsvmOptions) -> sfb_models::Result<sfb_models::data::Dataset> {
    parse_libsvm(text, Path::new("mem.svm"), opts)
}

fn csv(text: &[u8], opts: &CsvOptions) -> sfb_models::Result<sfb_models::data::Dataset> {
    parse_csv(text, Path::new("mem.csv"), opts)
}

#[test]
fn a_line_that_never_ends_is_refused_after_the_limit_without_buffering_it() {
    for byte in [b'0', 0u8, b'1'] {
        let read = Rc::new(Cell::new(0));
        let reader = BufReader::with_capacity(
            4096,
            Endless {
                byte,
                read: Rc::clone(&read),
            },
        );
        let err =
            parse_libsvm(reader, Path::new("zero"), &libsvm_opts(small(1 << 20))).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Limit {
                    limit: LimitKind::LineBytes,
                    max: 1_048_576,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "zero:1: line too long, over the line-length limit of 1048576 bytes (raise it with \
             SFB_MAX_LINE_BYTES=N)"
        );
        // Read at most the limit plus one buffer.
        assert!(read.get() <= (1 << 20) + 4096, "read {} bytes", read.get());
    }
    // CSV reads through the same bounded reader.
    let read = Rc::new(Cell::new(0));
    let reader = BufReader::new(Endless {
        byte: b',',
        read: Rc::clone(&read),
    });
    let err = parse_csv(reader, Path::new("c.csv"), &csv_opts(small(100_000))).unwrap_err();
    assert!(
        err.to_string().starts_with("c.csv:1: line too long"),
        "{err}"
    );
}

#[cfg(unix)]
#[test]
fn dev_zero_is_refused_with_the_line_length_error() {
    // An endless file ends in the line-length error (how much is read before it is
    // bounded above, by counting, with the `Endless` reader).
    let err = sfb_models::data::read_libsvm("/dev/zero", &LibsvmOptions::default()).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "/dev/zero:1: line too long, over the line-length limit of 16777216 bytes"
        ),
        "{err}"
    );
}

#[test]
fn the_line_limit_counts_the_line_not_its_end_and_applies_to_every_line() {
    let line = "1 1:0.5 2:1"; // 11 bytes
    let text = format!("{line}\n{line}\r\n{line}");
    let d = libsvm(text.as_bytes(), &libsvm_opts(small(line.len() + 1))).unwrap();
    assert_eq!(d.samples.len(), 3);
    let text = format!("{line}\n{line} 3:1\n");
    let err = libsvm(text.as_bytes(), &libsvm_opts(small(line.len() + 1))).unwrap_err();
    assert!(
        err.to_string().starts_with("mem.svm:2: line too long"),
        "{err}"
    );
}

#[test]
fn feature_index_beyond_the_limit_is_refused_before_allocating() {
    let err = libsvm(b"1 1:1\n-1 4000000000:1\n", &LibsvmOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Limit {
                limit: LimitKind::Features,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "mem.svm:2: feature index 4000000000, over the feature-count limit of 33554432 features \
         (raise it with SFB_MAX_FEATURES=N)"
    );
    let ten = LibsvmOptions {
        limits: Limits {
            max_features: 10,
            ..Limits::default()
        },
        ..LibsvmOptions::default()
    };
    // One-based index 10 is the tenth feature: allowed.
    assert_eq!(libsvm(b"1 10:1\n2 1:1\n", &ten).unwrap().features, 10);
    // Zero-based, index 10 makes 11 features.
    let err = libsvm(b"1 0:1\n2 10:1\n", &ten).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("mem.svm:2: feature index 10 (zero-based: 11 features), over the"),
        "{err}"
    );
    // A D asked for is checked too.
    let err = libsvm(
        b"1 1:1\n",
        &LibsvmOptions {
            features: Some(11),
            ..ten.clone()
        },
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("mem.svm: features asked for: 11, over the feature-count"),
        "{err}"
    );
    // Indices past 2^32 are refused by the limit too.
    let err = libsvm(b"1 99999999999:1\n", &LibsvmOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("feature index 99999999999"),
        "{err}"
    );
    // CSV: the column count.
    let err = csv(
        b"1,2,3,4,5,6,7,8,9,10,11,12\n",
        &csv_opts(Limits {
            max_features: 10,
            ..Limits::default()
        }),
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with(
            "mem.csv:1: features (fields − 1): 11, over the feature-count limit of 10"
        ),
        "{err}"
    );
}

#[test]
fn data_size_is_checked_while_reading() {
    let limits = Limits {
        max_data_bytes: 1000,
        ..Limits::default()
    };
    let line = "1 1:1 2:1 3:1 4:1\n";
    let text = line.repeat(100);
    let err = libsvm(text.as_bytes(), &libsvm_opts(limits)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Limit {
                limit: LimitKind::DataBytes,
                max: 1000,
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains("the samples read so far need"), "{msg}");
    assert!(
        msg.ends_with("(raise it with SFB_MAX_DATA_BYTES=N)"),
        "{msg}"
    );
    // Refused early: within the first few lines, not at the end of the file.
    let Error::Limit { at, .. } = &err else {
        unreachable!()
    };
    let line_no: usize = at.rsplit(':').next().unwrap().parse().unwrap();
    assert!(line_no < 20, "{at}");
    let err = csv("1,2,3,4\n".repeat(100).as_bytes(), &csv_opts(limits)).unwrap_err();
    assert!(
        err.to_string().contains("the samples read so far need"),
        "{err}"
    );
    // Densifying is checked before it starts.
    let mut d = libsvm(b"1 1:1\n2 100:1\n", &LibsvmOptions::default()).unwrap();
    let err = d
        .densify_within(
            &Limits {
                max_data_bytes: 500,
                ..Limits::default()
            },
            "mem.svm",
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("mem.svm: 2 samples × 100 features stored densely need"),
        "{err}"
    );
    assert!(
        matches!(d.samples[0].x, Features::Sparse { .. }),
        "unchanged"
    );
    d.densify_within(&Limits::default(), "mem.svm").unwrap();
    assert!(matches!(d.samples[0].x, Features::Dense(_)));
}

#[test]
fn invalid_utf8_is_an_error_naming_the_line() {
    let err = libsvm(b"1 1:1\n1 2:\xff\xfe\n", &LibsvmOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "mem.svm:2: not text: invalid UTF-8 at byte 5 of the line (is this a binary file?)"
    );
    let err = csv(b"1,2\n\x80,1\n", &CsvOptions::default()).unwrap_err();
    assert!(err.to_string().starts_with("mem.csv:2: not text"), "{err}");
}

/// Seeded garbage — random bytes, and random mixes of the characters the formats use —
/// is an error or a data set, never a panic.
#[test]
fn binary_garbage_never_panics() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let alphabet = b"0123456789:.,-+eE #qid\n\r\t\xff\x00";
    let limits = Limits {
        max_line_bytes: 256,
        max_features: 1000,
        max_data_bytes: 1 << 20,
        ..Limits::default()
    };
    for i in 0..400 {
        let n = rng.random_range(0..600);
        let bytes: Vec<u8> = if i % 2 == 0 {
            (0..n).map(|_| rng.random()).collect()
        } else {
            (0..n)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect()
        };
        for opts in [LibsvmOptions::default(), libsvm_opts(limits)] {
            if let Ok(d) = libsvm(&bytes, &opts) {
                assert!(d.samples.iter().all(|e| e.x.min_dim() <= d.features));
            }
        }
        for opts in [CsvOptions::default(), csv_opts(limits)] {
            let _ = csv(&bytes, &opts);
        }
    }
}

#[test]
fn one_class_and_real_valued_labels_warn() {
    let d = libsvm(b"1 1:1\n1 2:1\n1 3:1\n", &LibsvmOptions::default()).unwrap();
    assert_eq!(
        d.warnings,
        [Warning::OneClass {
            source: "mem.svm".into(),
            label: 1.0
        }]
    );
    assert_eq!(
        d.warnings[0].to_string(),
        "mem.svm: every training sample has label 1: one class, so the model learns nothing \
         and accuracy is trivially 1.0"
    );
    // 4,000 distinct real-valued labels.
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let text: String = (0..4000)
        .map(|i| {
            format!(
                "{} 1:{}\n",
                f64::from(i) * 0.37 + 0.1,
                rng.random_range(1..9)
            )
        })
        .collect();
    let d = libsvm(text.as_bytes(), &LibsvmOptions::default()).unwrap();
    assert_eq!(d.labels.classes(), 4000);
    assert!(
        matches!(
            d.warnings[..],
            [Warning::ContinuousLabels {
                classes: 4000,
                samples: 4000,
                non_integer: Some(_),
                ..
            }]
        ),
        "{:?}",
        d.warnings
    );
    let msg = d.warnings[0].to_string();
    assert!(
        msg.starts_with("mem.svm: 4000 distinct labels over 4000 samples (some not integers, e.g. 0.1) are treated as 4000 classes"),
        "{msg}"
    );
    // Ordinary classification data: no warning.
    let d = libsvm(
        b"0 1:1\n1 1:2\n2 1:3\n0 1:1\n1 1:2\n2 1:3\n",
        &LibsvmOptions::default(),
    )
    .unwrap();
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    // A held-out file read like its training file is not judged on its own labels.
    let train = libsvm(b"0 1:1\n1 1:2\n", &LibsvmOptions::default()).unwrap();
    let test = libsvm(b"1 1:1\n", &LibsvmOptions::like(&train)).unwrap();
    assert!(test.warnings.is_empty());
    // CSV: the same label checks.
    let d = csv(b"2,1,1\n2,3,4\n", &CsvOptions::default()).unwrap();
    assert!(matches!(d.warnings[..], [Warning::OneClass { .. }]));
}

#[test]
fn a_csv_header_detected_and_skipped_is_reported_with_its_row() {
    let d = csv(
        b"# comment\nlabel,a,b\n0,0.5,1\n1,2,-1\n",
        &CsvOptions::default(),
    )
    .unwrap();
    assert_eq!(d.samples.len(), 2);
    assert_eq!(
        d.warnings,
        [Warning::HeaderSkipped {
            path: "mem.csv".into(),
            line: 2,
            row: "label,a,b".into()
        }]
    );
    assert_eq!(
        d.warnings[0].to_string(),
        "mem.csv:2: first row taken for a header and skipped (a field is not a number): \
         \"label,a,b\""
    );
    // Asked for: no warning.
    let header = CsvOptions {
        header: Some(true),
        ..CsvOptions::default()
    };
    let d = csv(b"label,a\n0,1\n1,2\n", &header).unwrap();
    assert!(d.warnings.is_empty());
    // A numeric first row is data.
    let d = csv(b"0,1\n1,2\n", &CsvOptions::default()).unwrap();
    assert_eq!((d.samples.len(), d.warnings.len()), (2, 0));
    // A long header is quoted cut short.
    let long = format!("y,{}\n0,1\n1,2\n", "x".repeat(500));
    let d = csv(long.as_bytes(), &CsvOptions::default()).unwrap();
    let Warning::HeaderSkipped { row, .. } = &d.warnings[0] else {
        panic!("{:?}", d.warnings)
    };
    assert_eq!(row.chars().count(), 81);
}

#[test]
fn synthetic_specs_refuse_duplicate_keys() {
    let err = "classes=4,classes=8"
        .parse::<ClassificationSpec>()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "bad synthetic spec \"classes=4,classes=8\": key classes given twice: classes=4 and \
         classes=8"
    );
    let err = "features=10, samples=5,features=10"
        .parse::<ClusterSpec>()
        .unwrap_err();
    assert!(
        err.to_string().contains("key features given twice"),
        "{err}"
    );
    let err = "atoms=4,classes=8".parse::<SignalSpec>().unwrap_err();
    assert!(
        err.to_string().ends_with(
            "key classes given twice: atoms=4 and classes=8 (atoms and classes are the same key)"
        ),
        "{err}"
    );
    // Unknown keys and bad numbers are still named.
    let err = "classes=4,colour=red"
        .parse::<ClassificationSpec>()
        .unwrap_err();
    assert!(err.to_string().contains("unknown key \"colour\""), "{err}");
    let err = "classes=1e9".parse::<ClassificationSpec>().unwrap_err();
    assert!(
        err.to_string()
            .contains("classes = \"1e9\" is not a valid number"),
        "{err}"
    );
}

#[test]
fn synthetic_shapes_beyond_the_limits_are_refused_with_the_bytes_needed() {
    let l = Limits::default();
    let s: ClassificationSpec = "classes=100000,features=100000".parse().unwrap();
    let err = s
        .check_limits(&l, "\"classes=100000,features=100000\"")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "\"classes=100000,features=100000\": teacher (100000 × 100000 f32) needs 40000000000 \
         bytes (37.3 GiB), over the W-size limit of 2147483648 bytes (raise it with \
         SFB_MAX_W_BYTES=N)"
    );
    // Low rank: the factors are small, but the data is not.
    let s: ClassificationSpec = "classes=100,features=100000,samples=20000,rank=4"
        .parse()
        .unwrap();
    let err = s.check_limits(&l, "spec").unwrap_err();
    assert!(
        err.to_string().starts_with(
            "spec: 20000 + 4000 samples of 100000 features need 9601344000 bytes (8.9 GiB), \
             over the data-size limit of 4294967296 bytes"
        ),
        "{err}"
    );
    // Sparse data counts its expected non-zeros.
    let s: ClassificationSpec = "classes=10,features=100000,samples=20000,density=0.001"
        .parse()
        .unwrap();
    s.check_limits(&l, "spec").unwrap();
    let s: ClassificationSpec = "features=40000000".parse().unwrap();
    let err = s.check_limits(&l, "spec").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("spec: features 40000000, over the feature-count"),
        "{err}"
    );
    // The defaults pass.
    ClassificationSpec::default()
        .check_limits(&l, "spec")
        .unwrap();
    let c: ClusterSpec = "samples=100000000".parse().unwrap();
    assert!(matches!(
        c.check_limits(&l, "spec"),
        Err(Error::Limit {
            limit: LimitKind::DataBytes,
            ..
        })
    ));
    let g: SignalSpec = "atoms=100000,features=100000,sparsity=1".parse().unwrap();
    let err = g.check_limits(&l, "spec").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("spec: hidden dictionary (100000 × 100000 f32)"),
        "{err}"
    );
    "".parse::<ClusterSpec>()
        .unwrap()
        .check_limits(&l, "spec")
        .unwrap();
    "".parse::<SignalSpec>()
        .unwrap()
        .check_limits(&l, "spec")
        .unwrap();
}

#[test]
fn model_matrices_and_sdca_duals_are_checked_against_the_limits() {
    let l = Limits::default();
    ModelSpec::Mlr
        .check_limits(20, 100, 20000, &l, "d")
        .unwrap();
    let err = ModelSpec::Mlr
        .check_limits(4000, 1 << 20, 4000, &l, "d.svm")
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("d.svm: W of mlr (4000 × 1048576 f32) needs 16777216000 bytes"),
        "{err}"
    );
    let sdca = ModelSpec::L2Mlr {
        lambda: 1e-3,
        intercept: false,
    };
    let err = sdca.check_limits(1000, 10, 1_000_000, &l, "d").unwrap_err();
    assert!(
        err.to_string().starts_with(
            "d: SDCA dual variables (1000000 samples × 1000 classes, f64) need 8000000000 bytes"
        ),
        "{err}"
    );
    let sc = ModelSpec::SparseCoding {
        atoms: 1 << 20,
        lambda: 0.1,
        sweeps: 1,
        decay: 0.0,
    };
    assert!(sc.check_limits(1, 1 << 10, 10, &l, "d").is_err());
}

#[test]
fn a_batch_larger_than_the_training_set_is_refused() {
    let x = |i| Example::new(Features::Dense(vec![1.0]), 0, i);
    let p = Problem {
        train: Arc::new((0..100).map(x).collect()),
        test: Arc::new(Vec::new()),
        classes: 2,
        features: 1,
        labels: sfb_models::data::LabelMap::identity(2),
    };
    p.check_batch(25).unwrap();
    // Larger than a shard is allowed (drawn with repeats), not larger than everything.
    p.check_batch(100).unwrap();
    let err = p.check_batch(1_000_000_000).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BatchTooLarge {
                batch: 1_000_000_000,
                samples: 100,
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("use a batch of at most 100"),
        "{err}"
    );
}

/// New data may leave out the label column: with `D` known, the first data row's width
/// says whether there is one; every row must then have that width.
#[test]
fn an_optional_label_column_is_decided_by_the_first_data_row() {
    let opts = CsvOptions {
        features: Some(2),
        label_optional: true,
        ..CsvOptions::default()
    };
    let bare = csv(b"x,y\n1.5,2\n3,4\n", &opts).unwrap();
    let labelled = csv(b"7,1.5,2\n7,3,4\n", &opts).unwrap();
    assert_eq!((bare.samples.len(), bare.features), (2, 2));
    for (a, b) in bare.samples.iter().zip(&labelled.samples) {
        assert_eq!(a.x, b.x);
    }
    let mixed = csv(b"1.5,2\n7,3,4\n", &opts).unwrap_err().to_string();
    assert!(
        mixed.starts_with("mem.csv:2: 3 fields, expected 2"),
        "{mixed}"
    );
    // Without the option a row of D fields is the wrong width.
    let strict = CsvOptions {
        label_optional: false,
        ..opts
    };
    let e = csv(b"1.5,2\n", &strict).unwrap_err().to_string();
    assert!(e.contains("2 fields, expected 3"), "{e}");
}
