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
