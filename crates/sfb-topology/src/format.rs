//! File formats: the human-edited TOML cluster/topology file, the JSON report of
//! DESIGN.md, and Graphviz DOT.
//!
//! See [`ClusterFile`] for the TOML schema.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::analysis::Analysis;
use crate::error::{Error, Result};
use crate::topology::Topology;

/// One `[[peer]]` entry of a cluster/topology file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PeerEntry {
    /// Peer index in `0..P`.
    pub id: usize,
    /// Listen address (a multiaddr such as `/ip4/127.0.0.1/tcp/4001`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// Out-neighbour ids.
    pub out: Vec<usize>,
    /// Keys this crate does not interpret, preserved on round trips.
    #[serde(flatten)]
    pub extra: BTreeMap<String, toml::Value>,
}

impl PeerEntry {
    /// An entry with no address and no extra keys.
    pub fn new(id: usize, out: Vec<usize>) -> Self {
        Self {
            id,
            addr: None,
            out,
            extra: BTreeMap::new(),
        }
    }
}

/// A parsed cluster/topology TOML file.
///
/// # Schema
/// ```toml
/// out_degree = 2            # optional; if present every peer must have this many
///
/// [[peer]]
/// id = 0                    # 0..P, each exactly once, any order
/// addr = "/ip4/127.0.0.1/tcp/4001"   # optional listen address
/// out = [1, 2]              # out-neighbour ids
///
/// [[peer]]
/// id = 1
/// out = [2, 0]
/// # ...
/// ```
/// Unknown keys (top level or per peer, e.g. a later `public_key`) are kept in
/// [`ClusterFile::extra`] / [`PeerEntry::extra`] and written back unchanged, so other crates
/// can extend the file without changing this one.
///
/// # Example
/// ```
/// use sfb_topology::ClusterFile;
/// let text = r#"
/// [[peer]]
/// id = 0
/// addr = "/ip4/127.0.0.1/tcp/4001"
/// out = [1]
/// [[peer]]
/// id = 1
/// out = [0]
/// "#;
/// let file = ClusterFile::from_toml_str(text)?;
/// let topology = file.topology()?;
/// assert_eq!(topology.out(0), &[1]);
/// assert_eq!(file.peers[0].addr.as_deref(), Some("/ip4/127.0.0.1/tcp/4001"));
/// # Ok::<(), sfb_topology::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ClusterFile {
    /// Declared out-degree; when present every peer must have exactly this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_degree: Option<usize>,
    /// The `[[peer]]` entries.
    #[serde(default, rename = "peer")]
    pub peers: Vec<PeerEntry>,
    /// Top-level keys this crate does not interpret, preserved on round trips.
    #[serde(flatten)]
    pub extra: BTreeMap<String, toml::Value>,
}

impl ClusterFile {
    /// The file for a topology: entries in id order, no addresses, `out_degree` set.
    pub fn from_topology(t: &Topology) -> Self {
        Self {
            out_degree: Some(t.out_degree()),
            peers: (0..t.peers())
                .map(|p| PeerEntry::new(p, t.out(p).to_vec()))
                .collect(),
            extra: BTreeMap::new(),
        }
    }

    /// Parses TOML text (syntax and types only; see [`topology`](Self::topology) for the
    /// consistency checks).
    ///
    /// # Errors
    /// [`Error::Parse`] with the parser's message and line.
    pub fn from_toml_str(text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let msg = e.message().replace('\n', " ");
            Error::Parse {
                format: "TOML",
                message: match line {
                    Some(l) => format!("line {l}: {}", msg.trim()),
                    None => msg.trim().to_string(),
                },
            }
        })
    }

    /// Writes the file as TOML.
    ///
    /// # Errors
    /// [`Error::Serialize`] if an extra key cannot be represented.
    pub fn to_toml_string(&self) -> Result<String> {
        toml::to_string(self).map_err(|e| Error::Serialize {
            format: "TOML",
            message: e.to_string().replace('\n', " "),
        })
    }

    /// Validates the file and builds the topology (peer `id` gets `out`).
    ///
    /// # Errors
    /// [`Error::DuplicatePeer`], [`Error::MissingPeer`] (ids must be exactly `0..P`),
    /// [`Error::UnknownPeer`] (an out-neighbour id ≥ P), [`Error::DegreeMismatch`] (a list
    /// whose length differs from `out_degree`, or from peer 0's if absent), and every
    /// [`Topology`] invariant.
    pub fn topology(&self) -> Result<Topology> {
        let p = self.peers.len();
        let mut by_id: Vec<Option<&PeerEntry>> = vec![None; p];
        for e in &self.peers {
            if e.id >= p {
                return Err(Error::MissingPeer {
                    peer: by_id.iter().position(Option::is_none).unwrap_or(0),
                    peers: p,
                });
            }
            if by_id[e.id].is_some() {
                return Err(Error::DuplicatePeer { peer: e.id });
            }
            by_id[e.id] = Some(e);
        }
        let entries: Vec<&PeerEntry> = by_id
            .into_iter()
            .map(|e| e.expect("ids are 0..P"))
            .collect();
        for e in &entries {
            if let Some(&v) = e.out.iter().find(|&&v| v >= p) {
                return Err(Error::UnknownPeer {
                    peer: e.id,
                    neighbour: v,
                    peers: p,
                });
            }
        }
        let q = self
            .out_degree
            .unwrap_or_else(|| entries.first().map_or(0, |e| e.out.len()));
        Topology::with_out_degree(q, entries.iter().map(|e| e.out.clone()).collect())
    }

    /// Listen addresses by peer id (`None` where absent), if the ids are `0..P`.
    pub fn addrs(&self) -> Vec<Option<String>> {
        let mut v = vec![None; self.peers.len()];
        for e in &self.peers {
            if let Some(slot) = v.get_mut(e.id) {
                slot.clone_from(&e.addr);
            }
        }
        v
    }
}

/// The JSON report of `sfb topology --format json`, with exactly the DESIGN.md keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Report {
    /// Number of peers P.
    pub peers: usize,
    /// Out-degree Q.
    pub out_degree: usize,
    /// Out-neighbour lists, `out[p]` for peer p.
    pub out: Vec<Vec<usize>>,
    /// Σ shortest-path lengths over ordered pairs.
    pub cost: u64,
    /// Moore-type lower bound.
    pub lower_bound: u64,
    /// Whether `cost` is proven minimal.
    pub proven_optimal: bool,
    /// Largest hop distance.
    pub diameter: u32,
    /// Mean hop distance over ordered pairs.
    pub mean_delay: f64,
    /// What the paper's no-forwarding mode does here: `exact`, `stalls` or `diverges`
    /// ([`Learning`](crate::Learning)); absent in files written before it was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paper_mode: Option<String>,
    /// `min Re λ(I + A_in)`: ≤ 0 means the paper mode diverges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paper_min_real_part: Option<f64>,
    /// The gossip mode's consensus rate per unit step (`min Re (1 − λ)` of the
    /// in-averaging matrix, `λ ≠ 1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixing: Option<f64>,
}

impl Report {
    /// The report for a topology; `proven_optimal` comes from the optimizer (a cost equal
    /// to the lower bound is always reported as proven).
    pub fn new(t: &Topology, analysis: &Analysis, proven_optimal: bool) -> Self {
        Self {
            peers: t.peers(),
            out_degree: t.out_degree(),
            out: t.out_lists(),
            cost: analysis.cost,
            lower_bound: analysis.lower_bound,
            proven_optimal: proven_optimal || analysis.cost == analysis.lower_bound,
            diameter: analysis.diameter,
            mean_delay: analysis.mean_delay,
            paper_mode: None,
            paper_min_real_part: None,
            mixing: None,
        }
    }

    /// The report with the learning figures of `l` (computed for the same topology).
    pub fn with_learning(mut self, l: &crate::Learning) -> Self {
        self.paper_mode = Some(l.paper_mode.name().to_string());
        self.paper_min_real_part = Some(l.paper_min_real_part);
        self.mixing = Some(l.mixing);
        self
    }

    /// Pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a Report always serializes")
    }
}

/// The minimal JSON a topology can be read from: `out`, optionally `peers`/`out_degree`.
#[derive(Deserialize)]
struct JsonTopology {
    out: Vec<Vec<usize>>,
    peers: Option<usize>,
    out_degree: Option<usize>,
}

impl Topology {
    /// Parses a TOML cluster/topology file and validates it (addresses and extra keys are
    /// dropped; use [`ClusterFile`] to keep them).
    ///
    /// # Errors
    /// As [`ClusterFile::from_toml_str`] and [`ClusterFile::topology`].
    pub fn from_toml_str(text: &str) -> Result<Self> {
        ClusterFile::from_toml_str(text)?.topology()
    }

    /// The topology as a TOML cluster/topology file (no addresses).
    pub fn to_toml(&self) -> String {
        ClusterFile::from_topology(self)
            .to_toml_string()
            .expect("a plain topology always serializes")
    }

    /// Parses JSON with at least an `out` key (as written by [`Report::to_json`]); `peers`
    /// and `out_degree`, if present, must agree with `out`.
    ///
    /// # Errors
    /// [`Error::Parse`], [`Error::MissingPeer`] if `peers` disagrees, [`Error::UnknownPeer`],
    /// [`Error::DegreeMismatch`] and every [`Topology`] invariant.
    pub fn from_json_str(text: &str) -> Result<Self> {
        let j: JsonTopology = serde_json::from_str(text).map_err(|e| Error::Parse {
            format: "JSON",
            message: e.to_string(),
        })?;
        let p = j.out.len();
        if let Some(declared) = j.peers
            && declared != p
        {
            return Err(Error::MissingPeer {
                peer: p.min(declared),
                peers: declared,
            });
        }
        for (id, list) in j.out.iter().enumerate() {
            if let Some(&v) = list.iter().find(|&&v| v >= p) {
                return Err(Error::UnknownPeer {
                    peer: id,
                    neighbour: v,
                    peers: p,
                });
            }
        }
        let q = j
            .out_degree
            .unwrap_or_else(|| j.out.first().map_or(0, Vec::len));
        Topology::with_out_degree(q, j.out)
    }

    /// Parses the Graphviz DOT text [`to_dot`](Self::to_dot) writes, and the usual hand
    /// edits of it: one `digraph` whose statements are `a -> b;` or `a -> { b c … };`
    /// between numeric peer ids, `//` and `#` comments, optional `;`. The out-degree is the
    /// `out_degree = Q` of the header comment if present, else peer 0's.
    ///
    /// # Errors
    /// [`Error::Parse`] (format `"DOT"`) naming the line of anything else; every
    /// [`Topology`] invariant (a peer without arcs is a peer that sends to no one).
    pub fn from_dot_str(text: &str) -> Result<Self> {
        let bad = |line: usize, message: String| Error::Parse {
            format: "DOT",
            message: format!("line {line}: {message}"),
        };
        let mut arcs: Vec<(usize, usize)> = Vec::new();
        let mut declared_q: Option<usize> = None;
        let mut declared_p: Option<usize> = None;
        let mut opened = false;
        let mut closed = false;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let mut line = raw.trim();
            if let Some(c) = line.strip_prefix("//").or_else(|| line.strip_prefix('#')) {
                // The header comment `to_dot` writes: `// peers = P, out_degree = Q`.
                for part in c.split(',') {
                    let mut kv = part.split('=').map(str::trim);
                    match (kv.next(), kv.next().map(str::parse::<usize>)) {
                        (Some("peers"), Some(Ok(p))) => declared_p = Some(p),
                        (Some("out_degree"), Some(Ok(q))) => declared_q = Some(q),
                        _ => {}
                    }
                }
                continue;
            }
            if line.is_empty() {
                continue;
            }
            if !opened {
                let head = line
                    .strip_prefix("digraph")
                    .ok_or_else(|| bad(n, format!("expected `digraph NAME {{`, found `{line}`")))?;
                let rest = head.trim_start();
                let brace = rest
                    .find('{')
                    .ok_or_else(|| bad(n, "expected `{` after `digraph NAME`".into()))?;
                opened = true;
                line = rest[brace + 1..].trim();
                if line.is_empty() {
                    continue;
                }
            }
            if closed {
                return Err(bad(n, format!("`{line}` after the graph's closing `}}`")));
            }
            for stmt in line.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                if stmt == "}" {
                    closed = true;
                    continue;
                }
                let (from, to) = stmt.split_once("->").ok_or_else(|| {
                    bad(
                        n,
                        format!("expected `a -> b` or `a -> {{ b c }}`, found `{stmt}`"),
                    )
                })?;
                let id = |s: &str| {
                    s.trim().parse::<usize>().map_err(|_| {
                        bad(
                            n,
                            format!("`{}` is not a peer id (a number from 0)", s.trim()),
                        )
                    })
                };
                let src = id(from)?;
                let to = to.trim();
                let targets = match to.strip_prefix('{') {
                    Some(inner) => inner
                        .strip_suffix('}')
                        .ok_or_else(|| bad(n, format!("unclosed `{{` in `{stmt}`")))?,
                    None => to,
                };
                for t in targets.split(|c: char| c.is_whitespace() || c == ',') {
                    if !t.is_empty() {
                        arcs.push((src, id(t)?));
                    }
                }
            }
        }
        if !opened {
            return Err(bad(1, "no `digraph` in the file".into()));
        }
        if !closed {
            return Err(bad(
                text.lines().count(),
                "the graph's `}` is missing".into(),
            ));
        }
        let p = arcs
            .iter()
            .map(|&(a, b)| a.max(b) + 1)
            .max()
            .unwrap_or(0)
            .max(declared_p.unwrap_or(0));
        if let Some(declared) = declared_p
            && declared != p
        {
            return Err(Error::UnknownPeer {
                peer: arcs
                    .iter()
                    .find(|&&(a, b)| a.max(b) >= declared)
                    .map_or(0, |a| a.0),
                neighbour: p - 1,
                peers: declared,
            });
        }
        let mut out = vec![Vec::new(); p];
        for (a, b) in arcs {
            out[a].push(b);
        }
        let q = declared_q.unwrap_or_else(|| out.first().map_or(0, Vec::len));
        Topology::with_out_degree(q, out)
    }

    /// The first of the figures a run gives (`peers`, `out_degree`; `None`: not given)
    /// that this topology does not have, in words naming both: `"it has 6 peers, but
    /// --peers 5 was given"`. For every command that takes a topology file.
    pub fn disagreement(&self, peers: Option<usize>, out_degree: Option<usize>) -> Option<String> {
        if let Some(p) = peers
            && p != self.peers()
        {
            return Some(format!(
                "it has {} peers, but --peers {p} was given",
                self.peers()
            ));
        }
        match out_degree {
            Some(q) if q != self.out_degree() => Some(format!(
                "its out-degree is {}, but --out-degree {q} was given",
                self.out_degree()
            )),
            _ => None,
        }
    }

    /// Graphviz DOT text (`digraph sfb { 0 -> 1; … }`).
    pub fn to_dot(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "digraph sfb {{\n  // peers = {}, out_degree = {}",
            self.peers(),
            self.out_degree()
        );
        for p in 0..self.peers() {
            let targets: Vec<String> = self.out(p).iter().map(ToString::to_string).collect();
            let _ = writeln!(s, "  {p} -> {{ {} }};", targets.join(" "));
        }
        s.push_str("}\n");
        s
    }
}

/// The human-readable summary `sfb topology` prints: size and `method`, cost against the
/// Moore-type bound, optimality, the reference constructions at the same out-degree, the
/// `notes` (source, search, repair) and the build time.
pub fn describe(
    t: &Topology,
    r: &Report,
    method: &str,
    notes: &[String],
    build_time: std::time::Duration,
) -> String {
    use std::fmt::Write as _;

    use crate::{Method, gap, generate, lower_bound};
    let (p, q) = (t.peers(), t.out_degree());
    let mut s = String::new();
    let _ = writeln!(s, "topology   P = {p}, Q = {q}, method {method}");
    let _ = writeln!(
        s,
        "cost       {} (Σ hop distances), mean delay {:.4} hops, diameter {}",
        r.cost, r.mean_delay, r.diameter
    );
    let _ = writeln!(
        s,
        "bound      {} (Moore-type), gap {:.3} %",
        r.lower_bound,
        100.0 * gap(r.cost, r.lower_bound)
    );
    let proven = if r.proven_optimal {
        "proven"
    } else {
        "not proven"
    };
    let _ = writeln!(s, "optimal    {proven}");
    if let (Some(mode), Some(re), Some(mixing)) = (&r.paper_mode, r.paper_min_real_part, r.mixing) {
        let what = match mode.as_str() {
            "exact" => "every replica applies every update",
            "diverges" => "a disagreement mode never contracts: the objective rises as it trains",
            _ => "stable, but each replica settles near its own shard's minimizer",
        };
        let _ = writeln!(
            s,
            "learning   paper mode (--partial paper) {mode}: min Re λ(I + A_in) = {re:.4} ({what})"
        );
        let _ = writeln!(
            s,
            "           gossip mode (the default) mixes at {mixing:.4} a unit step"
        );
    }
    // Reference constructions at equal out-degree.
    let lb = lower_bound(p, q);
    let mut refs = Vec::new();
    for (name, m) in [
        ("kautz", Method::Kautz),
        ("exponential", Method::Exponential),
    ] {
        if let Ok(g) = generate(&m, p, q) {
            let c = g.cost();
            refs.push(format!("{name} {c} (gap {:.3} %)", 100.0 * gap(c, lb)));
        }
    }
    let _ = writeln!(s, "compare    at Q = {q}: {}", refs.join(", "));
    for n in notes {
        let _ = writeln!(s, "{n}");
    }
    let _ = writeln!(s, "time       {build_time:.3?}");
    s
}

impl Topology {
    /// Reads a topology file in any format `sfb topology` writes: the TOML
    /// cluster/topology file, the JSON report (a name ending in `.json`, or text starting
    /// with `{`) or Graphviz DOT (`.dot`/`.gv`, or text starting with `digraph`);
    /// validated like every topology.
    ///
    /// # Errors
    /// [`Error::ReadFile`]; [`Error::InFile`] wrapping the parse or validation error.
    pub fn read_file(path: &std::path::Path) -> Result<Topology> {
        let text = std::fs::read_to_string(path).map_err(|error| Error::ReadFile {
            path: path.to_path_buf(),
            error,
        })?;
        let t = Topology::from_str_as(&text, Format::of(path, &text));
        t.map_err(|e| Error::InFile {
            path: path.to_path_buf(),
            error: Box::new(e),
        })
    }
}

/// The three formats `sfb topology` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The TOML cluster/topology file.
    Toml,
    /// The JSON report (`out`, optionally `peers`/`out_degree`).
    Json,
    /// Graphviz DOT.
    Dot,
}

impl Format {
    /// The format of a file named `path` holding `text`: by extension (`.json`, `.dot` or
    /// `.gv`, `.toml`), else by its first word (`{`: JSON, `digraph`: DOT), else TOML.
    pub fn of(path: &std::path::Path, text: &str) -> Format {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("json") => return Format::Json,
            Some("dot" | "gv") => return Format::Dot,
            Some("toml") => return Format::Toml,
            _ => {}
        }
        let first = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with('#'))
            .unwrap_or("");
        if first.starts_with('{') {
            Format::Json
        } else if first.starts_with("digraph") {
            Format::Dot
        } else {
            Format::Toml
        }
    }
}

impl Topology {
    /// Parses `text` as `format`.
    ///
    /// # Errors
    /// As [`from_toml_str`](Self::from_toml_str), [`from_json_str`](Self::from_json_str) or
    /// [`from_dot_str`](Self::from_dot_str).
    pub fn from_str_as(text: &str, format: Format) -> Result<Self> {
        match format {
            Format::Toml => Topology::from_toml_str(text),
            Format::Json => Topology::from_json_str(text),
            Format::Dot => Topology::from_dot_str(text),
        }
    }
}
