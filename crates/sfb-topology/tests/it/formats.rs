//! File formats: TOML round trips and errors, the JSON report keys, DOT.

use sfb_topology::{ClusterFile, Error, Format, Report, Topology, kautz};

#[test]
fn toml_round_trip_keeps_addresses_and_unknown_keys() {
    let text = r#"
out_degree = 2
cluster_name = "lab"

[[peer]]
id = 1
addr = "/ip4/127.0.0.1/tcp/4002"
out = [2, 0]
public_key = "abc"

[[peer]]
id = 0
addr = "/ip4/127.0.0.1/tcp/4001"
out = [1, 2]

[[peer]]
id = 2
out = [0, 1]
"#;
    let file = ClusterFile::from_toml_str(text).unwrap();
    let t = file.topology().unwrap();
    assert_eq!(t.out(1), &[2, 0]);
    assert_eq!(
        file.addrs(),
        vec![
            Some("/ip4/127.0.0.1/tcp/4001".to_string()),
            Some("/ip4/127.0.0.1/tcp/4002".to_string()),
            None
        ]
    );
    let again = ClusterFile::from_toml_str(&file.to_toml_string().unwrap()).unwrap();
    assert_eq!(again, file);
    assert_eq!(again.extra["cluster_name"].as_str(), Some("lab"));
    let p1 = again.peers.iter().find(|e| e.id == 1).unwrap();
    assert_eq!(p1.extra["public_key"].as_str(), Some("abc"));
}

#[test]
fn topology_toml_and_json_round_trip() {
    let t = kautz(20, 3).unwrap();
    assert_eq!(Topology::from_toml_str(&t.to_toml()).unwrap(), t);
    let report = Report::new(&t, &t.analyze(), false);
    let json = report.to_json();
    assert_eq!(Topology::from_json_str(&json).unwrap(), t);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "cost",
            "diameter",
            "lower_bound",
            "mean_delay",
            "out",
            "out_degree",
            "peers",
            "proven_optimal"
        ]
    );
    assert_eq!(v["cost"], t.cost());
    assert_eq!(v["out"][3], serde_json::json!(t.out(3)));
}

#[test]
fn dot_lists_every_arc() {
    let t = kautz(6, 2).unwrap();
    let dot = t.to_dot();
    assert!(dot.starts_with("digraph sfb {"));
    for p in 0..6 {
        let line = format!("  {p} -> {{ {} {} }};", t.out(p)[0], t.out(p)[1]);
        assert!(dot.contains(&line), "{line}");
    }
}

fn err(text: &str) -> Error {
    Topology::from_toml_str(text).unwrap_err()
}

#[test]
fn inconsistent_files_name_the_problem() {
    let unknown = "[[peer]]\nid = 0\nout = [1]\n[[peer]]\nid = 1\nout = [7]\n";
    assert!(matches!(
        err(unknown),
        Error::UnknownPeer {
            peer: 1,
            neighbour: 7,
            peers: 2
        }
    ));
    let degree = "[[peer]]\nid = 0\nout = [1, 2]\n[[peer]]\nid = 1\nout = [2]\n[[peer]]\nid = 2\nout = [0, 1]\n";
    assert!(matches!(
        err(degree),
        Error::DegreeMismatch {
            peer: 1,
            expected: 2,
            got: 1
        }
    ));
    let declared = "out_degree = 1\n[[peer]]\nid = 0\nout = [1, 2]\n[[peer]]\nid = 1\nout = [2]\n[[peer]]\nid = 2\nout = [0]\n";
    assert!(matches!(
        err(declared),
        Error::DegreeMismatch { peer: 0, .. }
    ));
    let dup = "[[peer]]\nid = 0\nout = [1]\n[[peer]]\nid = 0\nout = [1]\n";
    assert!(matches!(err(dup), Error::DuplicatePeer { peer: 0 }));
    let missing = "[[peer]]\nid = 0\nout = [1]\n[[peer]]\nid = 5\nout = [0]\n";
    assert!(matches!(
        err(missing),
        Error::MissingPeer { peer: 1, peers: 2 }
    ));
    let looped = "[[peer]]\nid = 0\nout = [0]\n[[peer]]\nid = 1\nout = [0]\n";
    assert!(matches!(err(looped), Error::SelfLoop { peer: 0 }));
    let disconnected =
        "[[peer]]\nid = 0\nout = [1]\n[[peer]]\nid = 1\nout = [0]\n[[peer]]\nid = 2\nout = [0]\n";
    assert!(matches!(
        err(disconnected),
        Error::NotStronglyConnected { from: 0, to: 2 }
    ));
    let syntax = "[[peer]]\nid = 0\nout = [1,\n";
    let e = err(syntax);
    assert!(matches!(e, Error::Parse { format: "TOML", .. }));
    let msg = e.to_string();
    assert!(!msg.contains('\n') && msg.contains("line"), "{msg}");
    for e in [err(unknown), err(degree), err(dup), err(missing)] {
        assert!(!e.to_string().contains('\n'));
    }
}

#[test]
fn bad_parameters_are_typed_errors() {
    assert!(matches!(kautz(0, 1), Err(Error::TooFewPeers { peers: 0 })));
    assert!(matches!(
        kautz(5, 0),
        Err(Error::ZeroOutDegree { peers: 5 })
    ));
    assert!(matches!(
        kautz(5, 5),
        Err(Error::OutDegreeTooLarge {
            out_degree: 5,
            peers: 5
        })
    ));
    assert!(matches!(
        sfb_topology::generate(&sfb_topology::Method::Full, 5, 3),
        Err(Error::MethodDegree { expected: 4, .. })
    ));
    assert!(matches!(
        sfb_topology::circulant(6, &[2, 4]),
        Err(Error::NotStronglyConnected { .. })
    ));
    assert!(matches!(
        Topology::from_json_str(r#"{"peers": 3, "out": [[1], [0]]}"#),
        Err(Error::MissingPeer { .. })
    ));
}

#[test]
fn every_written_format_is_read_back() {
    for t in [
        kautz(20, 3).unwrap(),
        sfb_topology::ring(7, 2).unwrap(),
        sfb_topology::full(4).unwrap(),
    ] {
        let report = Report::new(&t, &t.analyze(), false);
        for (text, format) in [
            (t.to_toml(), Format::Toml),
            (report.to_json(), Format::Json),
            (t.to_dot(), Format::Dot),
        ] {
            // The format is recognized from the text alone (no telling extension)…
            let path = std::path::Path::new("topology.txt");
            assert_eq!(Format::of(path, &text), format, "{text}");
            // …and read back to the same graph, arc order included.
            assert_eq!(Topology::from_str_as(&text, format).unwrap(), t, "{text}");
        }
    }
}

#[test]
fn hand_written_dot_is_read() {
    let text =
        "# a ring of three, one arc per statement\ndigraph g {\n  0 -> 1; 1 -> 2\n  2 -> 0;\n}\n";
    let t = Topology::from_dot_str(text).unwrap();
    assert_eq!(t.out_lists(), vec![vec![1], vec![2], vec![0]]);
    let one_line = "digraph { 0 -> {1 2}; 1 -> {2, 0}; 2 -> {0 1}; }";
    assert_eq!(Topology::from_dot_str(one_line).unwrap().out_degree(), 2);
}

#[test]
fn broken_dot_is_refused_naming_the_line() {
    let cases = [
        ("graph g { 0 -- 1 }", "line 1"),
        (
            "digraph g {\n  0 -> 1;\n  1 -> x;\n}",
            "line 3: `x` is not a peer id",
        ),
        ("digraph g {\n  0 -> { 1 2;\n}", "line 2: unclosed `{`"),
        ("digraph g {\n  0 -> 1;\n  1 -> 0;\n", "`}` is missing"),
        (
            "digraph g {\n  0 -> 1;\n  1 => 0;\n}",
            "line 3: expected `a -> b`",
        ),
        (
            "digraph g { 0 -> 1; 1 -> 0; }\n2 -> 0;",
            "after the graph's closing",
        ),
    ];
    for (text, want) in cases {
        let err = Topology::from_dot_str(text).unwrap_err().to_string();
        assert!(err.contains("DOT") && err.contains(want), "{text:?}: {err}");
    }
    // A valid graph that is not a topology (peer 2 sends nowhere) is refused as such.
    let err = Topology::from_dot_str("digraph { 0 -> 1; 1 -> 0; 1 -> 2; }").unwrap_err();
    assert!(!err.to_string().contains("DOT"), "{err}");
    // The header's peer count must agree with the arcs.
    let err = Topology::from_dot_str(
        "digraph {\n // peers = 2, out_degree = 1\n 0 -> 1; 1 -> 2; 2 -> 0; }",
    );
    assert!(err.is_err());
}
