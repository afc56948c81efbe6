//! The FMS (parameter server, full matrix sync) options of `sfb run`, `sfb peer` and
//! `sfb server`.

/// What FMS clients push to the server each clock (`--fms-push`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Push {
    /// Sufficient factors, O(K·(J+D)) floats (Project Adam style).
    #[default]
    Factors,
    /// The dense ΔW, J·D floats (the paper's FMS).
    Dense,
}

impl From<Push> for sfb_harness::Push {
    fn from(p: Push) -> Self {
        match p {
            Push::Factors => sfb_harness::Push::Factors,
            Push::Dense => sfb_harness::Push::Dense,
        }
    }
}

/// When FMS clients get W (`--fms-sync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Sync {
    /// The server pushes W to every client as soon as a clock completes (ESSP).
    #[default]
    Eager,
    /// A client fetches W only when the one it holds is too stale for the consistency
    /// bound (the lazy SSPTable ESSP compares with).
    Lazy,
}

impl From<Sync> for sfb_harness::SyncSpec {
    fn from(s: Sync) -> Self {
        match s {
            Sync::Eager => sfb_harness::SyncSpec::Eager,
            Sync::Lazy => sfb_harness::SyncSpec::Lazy,
        }
    }
}
