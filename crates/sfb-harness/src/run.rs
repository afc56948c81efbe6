//! Carrying out a [`RunSpec`].

use crate::Result;
use crate::cluster::{Cluster, Outcome, Progress};
use crate::launch::Launcher;
use crate::spec::{Backend, RunSpec, Transport};

/// Runs `spec` to completion and returns its summary and records; `progress`, if given,
/// hears every clock every node completes.
///
/// # Errors
/// [`RunSpec::validate`]'s errors before anything runs; then data, build and driver
/// errors; for the libp2p transport the launcher's ([`Error::Launch`]).
///
/// The libp2p transport runs one process per node through [`Launcher::from_env`]: the
/// `sfb` executable named by `SFB_EXE`, else this process's own (right in the `sfb`
/// binary); use a [`Launcher`] to name another.
///
/// A run that fails after it started still leaves its per-clock records in
/// `output.metrics` and a summary marked `failed` in `output.summary` (the figures of each
/// node's last record: [`write_partial_summary`](crate::records::write_partial_summary)).
pub fn run(spec: &RunSpec, progress: Option<Progress>) -> Result<Outcome> {
    spec.validate()?;
    let out = run_validated(spec, progress);
    if let Err(e) = &out {
        crate::records::write_partial_summary(spec, &e.to_string());
    }
    out
}

fn run_validated(spec: &RunSpec, progress: Option<Progress>) -> Result<Outcome> {
    if spec.transport == Transport::Libp2p {
        let mut launcher = Launcher::from_env()?;
        if let Some(p) = progress {
            launcher = launcher.progress(p);
        }
        return launcher.run(spec);
    }
    let mut builder = Cluster::from_spec(spec)?;
    if let Some(p) = progress {
        builder = builder.progress(p);
    }
    if spec.transport == Transport::Sim {
        let fms = (spec.backend == Backend::Fms).then_some(spec.fms_push);
        let mut sim = spec.sim.clone();
        if sim.costs == crate::sim::CostModel::Calibrate {
            crate::sim::calibrate_compute(spec)?.fill(&mut sim);
        }
        return builder.run_sim(&sim, spec.net.bandwidth, fms);
    }
    Ok(match spec.backend {
        Backend::Sfb => builder.run_mem()?.into_outcome(),
        Backend::Fms => builder.run_fms_mem(spec.fms_push)?.into_outcome(),
    })
}
