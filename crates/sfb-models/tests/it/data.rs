//! Data loaders: LIBSVM/svmlight and CSV parsing, label mapping, index bases, sharding,
//! and clear `file:line` errors for bad input.

use std::path::Path;

use sfb_models::data::{
    self, CsvOptions, IndexBase, LibsvmOptions, parse_csv, parse_libsvm, read_libsvm,
};
use sfb_models::{Error, Features};

fn libsvm(text: &str, opts: &LibsvmOptions) -> sfb_models::Result<data::Dataset> {
    parse_libsvm(text.as_bytes(), Path::new("mem.svm"), opts)
}

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn libsvm_one_based_with_comments_qid_and_arbitrary_labels() {
    let text = "# header comment\n\
                +1 qid:3 1:0.5 4:-2 # trailing comment\n\
                \n\
                -1 qid:3 2:1.5e0 3:0\n\
                7.5 4:1 1:2\n";
    let d = libsvm(text, &LibsvmOptions::default()).unwrap();
    assert_eq!(d.base, IndexBase::One);
    assert_eq!(d.features, 4);
    assert_eq!(d.labels.classes(), 3);
    // Classes are the labels in ascending order: -1 → 0, +1 → 1, 7.5 → 2.
    let ys: Vec<u32> = d.samples.iter().map(|e| e.y).collect();
    assert_eq!(ys, [1, 0, 2]);
    assert_eq!(d.labels.label(2), Some(7.5));
    let ids: Vec<u32> = d.samples.iter().map(|e| e.id).collect();
    assert_eq!(ids, [0, 1, 2]);
    assert_eq!(
        d.samples[0].x,
        Features::Sparse {
            indices: vec![0, 3],
            values: vec![0.5, -2.0]
        }
    );
    // Explicit zeros are dropped; unsorted indices are sorted.
    assert_eq!(
        d.samples[1].x,
        Features::Sparse {
            indices: vec![1],
            values: vec![1.5]
        }
    );
    assert_eq!(
        d.samples[2].x,
        Features::Sparse {
            indices: vec![0, 3],
            values: vec![2.0, 1.0]
        }
    );
}

#[test]
fn libsvm_zero_based_detected_and_held_out_file_read_alike() {
    let train = libsvm("0 0:1 2:3\n1 1:1\n", &LibsvmOptions::default()).unwrap();
    assert_eq!((train.base, train.features), (IndexBase::Zero, 3));
    // The held-out file has no index 0 but is still read as zero-based.
    let test = libsvm("1 2:1\n", &LibsvmOptions::like(&train)).unwrap();
    assert_eq!(
        test.samples[0].x,
        Features::Sparse {
            indices: vec![2],
            values: vec![1.0]
        }
    );
    assert_eq!(test.features, 3);
}

#[test]
fn csv_with_header_and_label_column() {
    let text = "label,a,b\n3,0.5,1\n# comment\n\n5,2,-1\n";
    let d = parse_csv(
        text.as_bytes(),
        Path::new("mem.csv"),
        &CsvOptions::default(),
    )
    .unwrap();
    assert_eq!((d.samples.len(), d.features, d.labels.classes()), (2, 2, 2));
    assert_eq!(d.samples[1].x, Features::Dense(vec![2.0, -1.0]));
    assert_eq!(d.samples[1].y, 1);
    let opts = CsvOptions {
        label_column: 2,
        ..CsvOptions::default()
    };
    let d = parse_csv("1,2,0\n3,4,1\n".as_bytes(), Path::new("m.csv"), &opts).unwrap();
    assert_eq!(d.samples[1].x, Features::Dense(vec![3.0, 4.0]));
    let err = parse_csv(
        "1,2\n3\n".as_bytes(),
        Path::new("m.csv"),
        &CsvOptions::default(),
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "m.csv:2: 1 fields, expected 2");
}

#[test]
fn digits_fixture_loads() {
    let train = read_libsvm(fixture("digits_train.libsvm"), &LibsvmOptions::default()).unwrap();
    let test = read_libsvm(fixture("digits_test.libsvm"), &LibsvmOptions::like(&train)).unwrap();
    assert_eq!((train.samples.len(), test.samples.len()), (1437, 360));
    assert_eq!((train.features, train.labels.classes()), (64, 10));
    assert_eq!(train.base, IndexBase::One);
    // Labels 0..9 map to classes 0..9.
    for c in 0..10 {
        assert_eq!(train.labels.label(c), Some(f64::from(c)));
    }
}

#[test]
fn sharding_is_a_deterministic_partition() {
    let train = read_libsvm(fixture("digits_test.libsvm"), &LibsvmOptions::default()).unwrap();
    let mut ids: Vec<u32> = (0..3)
        .flat_map(|p| data::shard(&train.samples, 3, p))
        .map(|e| e.id)
        .collect();
    assert_eq!(
        data::shard(&train.samples, 3, 1),
        data::shard(&train.samples, 3, 1)
    );
    ids.sort_unstable();
    assert_eq!(ids, (0..360).collect::<Vec<u32>>());
    let (a, b) = train.clone().split(0.25, 7);
    let (a2, b2) = train.split(0.25, 7);
    assert_eq!((a.len(), b.len()), (270, 90));
    assert_eq!((a, b), (a2, b2));
}

/// Each kind of bad input is an error naming the file and line.
#[test]
fn bad_input_names_file_and_line() {
    let train = libsvm("1 1:1 2:1\n2 3:1\n", &LibsvmOptions::default()).unwrap();
    let like = LibsvmOptions::like(&train);
    let cases: [(&str, &LibsvmOptions, &str); 7] = [
        (
            "1 1:1\n1 2:x\n",
            &LibsvmOptions::default(),
            "mem.svm:2: value \"x\" of feature 2",
        ),
        (
            "1 1:1\n\n1 2\n",
            &LibsvmOptions::default(),
            "mem.svm:3: \"2\" is not index:value",
        ),
        (
            "one 1:1\n",
            &LibsvmOptions::default(),
            "mem.svm:1: label \"one\" is not a finite number",
        ),
        (
            "1 1:1 1:2\n",
            &LibsvmOptions::default(),
            "mem.svm:1: feature index 1 appears twice",
        ),
        (
            "1 1:1\n2 4:1\n",
            &like,
            "mem.svm:2: feature index 4 is beyond the 3 features",
        ),
        (
            "1 1:1\n3 1:1\n",
            &like,
            "mem.svm:2: label 3 was not seen in the training data",
        ),
        (
            "# only a comment\n\n",
            &LibsvmOptions::default(),
            "mem.svm:2: empty data file",
        ),
    ];
    for (text, opts, want) in cases {
        let err = libsvm(text, opts).unwrap_err();
        assert!(
            err.to_string().starts_with(want),
            "{text:?}: got {err}, want {want}…"
        );
        assert!(matches!(err, Error::Parse { .. } | Error::Empty { .. }));
    }
    let err = read_libsvm("/nonexistent/sfb.svm", &LibsvmOptions::default()).unwrap_err();
    assert!(
        err.to_string().starts_with("/nonexistent/sfb.svm: "),
        "{err}"
    );
}

#[test]
fn low_rank_teacher_labels_by_a_times_b_and_spreads_classes() {
    use sfb_models::synthetic::{ClassificationSpec, classification};
    let spec: ClassificationSpec = "classes=50,features=40,samples=2000,test=10,rank=4,noise=0"
        .parse()
        .unwrap();
    assert_eq!(spec.rank, 4);
    let (a, test) = classification(&spec, 7);
    let (b, _) = classification(&spec, 7);
    assert_eq!(a, b, "same spec and seed, same data");
    assert_eq!(test.len(), 10);
    let mut seen = std::collections::BTreeSet::new();
    for e in &a {
        assert!((e.y as usize) < 50);
        seen.insert(e.y);
    }
    // A rank-4 teacher over 50 classes still uses many of them.
    assert!(seen.len() >= 10, "only {} classes used", seen.len());
    // The full-rank spec is unchanged by the new key.
    let full: ClassificationSpec = "classes=5,features=8,samples=10".parse().unwrap();
    assert_eq!(full.rank, 0);
    let err = "classes=5,rank=x"
        .parse::<ClassificationSpec>()
        .unwrap_err();
    assert!(err.to_string().contains("rank"), "{err}");
}
