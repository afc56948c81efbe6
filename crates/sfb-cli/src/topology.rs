//! `sfb topology`: build, optimize, check, convert and repair Q-out broadcast topologies.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use sfb_harness::preflight;
use sfb_topology::{Method, Options, Report, Topology, generate, optimize};

use super::train::cli_error;

/// How to build the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MethodArg {
    /// Minimize Σ shortest-path lengths: exact branch-and-bound for small P, local search
    /// from the best construction otherwise.
    Optimal,
    /// Generalized Kautz (Imase–Itoh) graph.
    Kautz,
    /// i → i + 2^k.
    Exponential,
    /// i → i+1, …, i+Q.
    Ring,
    /// Everyone to everyone (needs Q = P − 1).
    Full,
    /// Seeded random Q-out graph (a random Hamiltonian cycle plus random arcs).
    Random,
    /// i → i + j for the given --jumps.
    Circulant,
}

/// What `--method optimal` optimizes besides eq. 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GoalArg {
    /// The SFB paper's eq. 3 alone: the least Σ hop distances.
    Hops,
    /// The least Σ hop distances on which the paper's no-forwarding mode (--partial paper)
    /// does not diverge (min Re λ(I + A_in) > 0), or the nearest to it.
    PaperStable,
    /// The fastest consensus of the gossip mode (the default partial broadcast), then the
    /// least Σ hop distances.
    Mixing,
}

impl From<GoalArg> for sfb_topology::Goal {
    fn from(g: GoalArg) -> Self {
        match g {
            GoalArg::Hops => sfb_topology::Goal::Hops,
            GoalArg::PaperStable => sfb_topology::Goal::PaperStable,
            GoalArg::Mixing => sfb_topology::Goal::Mixing,
        }
    }
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// The human-edited cluster/topology file (`[[peer]] id, addr, out`).
    Toml,
    /// `peers, out_degree, out, cost, lower_bound, proven_optimal, diameter, mean_delay`.
    Json,
    /// Graphviz.
    Dot,
}

/// `sfb topology` options.
#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// Number of peers P (≥ 2).
    #[arg(long, required_unless_present = "input")]
    pub peers: Option<usize>,
    /// Out-degree Q: each peer sends to Q others (1 ≤ Q < P).
    #[arg(long, required_unless_present = "input")]
    pub out_degree: Option<usize>,
    /// Construction or optimizer.
    #[arg(long, value_enum, default_value_t = MethodArg::Optimal)]
    pub method: MethodArg,
    /// Comma-separated jumps for --method circulant (Q of them).
    #[arg(long, value_delimiter = ',')]
    pub jumps: Vec<usize>,
    /// Seed for --method random and the optimizer's local search.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Time budget in seconds for --method optimal (positive, at most one year).
    #[arg(long, default_value_t = 10.0)]
    pub time_limit: f64,
    /// What --method optimal optimizes: eq. 3's hop distances alone, or also a learning
    /// figure (the summary prints both for the result and for eq. 3's optimum).
    #[arg(long, value_enum, default_value_t = GoalArg::Hops)]
    pub goal: GoalArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = FormatArg::Toml)]
    pub format: FormatArg,
    /// Write the topology here (the summary then goes to stdout); default: topology to
    /// stdout, summary to stderr.
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
    /// Read a topology file (TOML cluster file, or JSON if it ends in .json) instead of
    /// building one: it is validated, analyzed and converted to --format.
    #[arg(short = 'i', long)]
    pub input: Option<PathBuf>,
    /// With --input: comma-separated ids of failed peers; the survivors get a repaired
    /// topology that changes as few arcs as possible.
    #[arg(long, value_delimiter = ',', requires = "input")]
    pub fail: Vec<usize>,
}

/// Runs `sfb topology`.
pub fn run(args: &TopologyArgs) -> Result<()> {
    let time_limit =
        preflight::seconds("--time-limit", args.time_limit, false).map_err(cli_error)?;
    if let Some(path) = &args.out {
        preflight::output_file("-o", path).map_err(cli_error)?;
    }
    let started = Instant::now();
    let mut notes: Vec<String> = Vec::new();
    let mut proven = false;
    let topology = if let Some(path) = &args.input {
        let mut t = Topology::read_file(path)?;
        if let Some(why) = t.disagreement(args.peers, args.out_degree) {
            bail!("{}: {why}", path.display());
        }
        notes.push(format!("source     {}", path.display()));
        if !args.fail.is_empty() {
            let r = sfb_topology::repair(&t, &args.fail)
                .with_context(|| format!("cannot repair {}", path.display()))?;
            notes.push(format!(
                "repair     removed {:?}; {} survivors, out-degree {}, {} arcs changed{}; new id i = old id survivors[i] = {:?}",
                args.fail,
                r.survivors.len(),
                r.topology.out_degree(),
                r.changed_arcs,
                if r.rebuilt { " (rebuilt)" } else { "" },
                r.survivors
            ));
            t = r.topology;
        }
        t
    } else {
        let p = args.peers.expect("clap requires --peers");
        let q = args.out_degree.expect("clap requires --out-degree");
        sfb_topology::check_params(p, q)?;
        if args.goal != GoalArg::Hops && args.method != MethodArg::Optimal {
            bail!("--goal is for --method optimal (a construction has no choice to make)");
        }
        match args.method {
            MethodArg::Optimal if args.goal != GoalArg::Hops => {
                let opts = Options::default().time_limit(time_limit).seed(args.seed);
                let goal = sfb_topology::Goal::from(args.goal);
                let c = sfb_topology::optimize_for(p, q, &opts, goal)?;
                let eq3 = sfb_topology::Learning::of(&c.hops.topology);
                proven = false;
                notes.push(format!(
                    "goal       {}: {}; eq. 3's optimum: cost {}, paper mode min Re λ {:.4}, mixing {:.4}; chosen: cost {}, min Re λ {:.4}, mixing {:.4}; {} candidates' learning figures computed",
                    goal.name(),
                    if c.meets { "met" } else { "not met (the nearest found)" },
                    c.hops.cost,
                    eq3.paper_min_real_part,
                    eq3.mixing,
                    c.cost,
                    c.learning.paper_min_real_part,
                    c.learning.mixing,
                    c.evaluated
                ));
                c.topology
            }
            MethodArg::Optimal => {
                let opts = Options::default().time_limit(time_limit).seed(args.seed);
                let r = optimize(p, q, &opts)?;
                proven = r.proven_optimal;
                notes.push(format!(
                    "search     started from {} (cost {}); {} local-search moves, {} branch-and-bound nodes; proof: {}",
                    r.start,
                    r.start_cost,
                    r.moves,
                    r.nodes,
                    match r.proof {
                        sfb_topology::Proof::MetBound => "meets the lower bound",
                        sfb_topology::Proof::Exhausted => "search exhausted",
                        _ => "none (time limit or P too large for the exact search)",
                    }
                ));
                r.topology
            }
            MethodArg::Kautz => generate(&Method::Kautz, p, q)?,
            MethodArg::Exponential => generate(&Method::Exponential, p, q)?,
            MethodArg::Ring => generate(&Method::Ring, p, q)?,
            MethodArg::Full => generate(&Method::Full, p, q)?,
            MethodArg::Random => generate(&Method::Random { seed: args.seed }, p, q)?,
            MethodArg::Circulant => {
                if args.jumps.is_empty() {
                    bail!("--method circulant needs --jumps J1,J2,… ({q} of them)");
                }
                generate(&Method::Circulant(args.jumps.clone()), p, q)?
            }
        }
    };
    let build_time = started.elapsed();
    let analysis = topology.analyze();
    let report = Report::new(&topology, &analysis, proven)
        .with_learning(&sfb_topology::Learning::of(&topology));
    let text = match args.format {
        FormatArg::Toml => topology.to_toml(),
        FormatArg::Json => report.to_json() + "\n",
        FormatArg::Dot => topology.to_dot(),
    };
    let method = match &args.input {
        Some(_) => "file".to_string(),
        None if args.goal != GoalArg::Hops => {
            format!("optimal for {}", sfb_topology::Goal::from(args.goal).name())
        }
        None => format!("{:?}", args.method).to_lowercase(),
    };
    let summary = sfb_topology::describe(&topology, &report, &method, &notes, build_time);
    match &args.out {
        Some(path) => {
            std::fs::write(path, &text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            out!("{summary}");
            outln!("wrote      {}", path.display());
        }
        None => {
            out!("{text}");
            eprint!("{summary}");
        }
    }
    Ok(())
}
