//! Carrying out a [`RunSpec`].

use crate::cluster::{Cluster, Outcome, Progress};
use crate::spec::{Backend, RunSpec, Transport};
use crate::{Error, Result};

/// Runs `spec` to completion and returns its summary and records; `progress`, if given,
/// hears every clock every node completes.
///
/// # Errors
/// [`RunSpec::validate`]'s errors before anything runs; [`Error::Transport`] for the
/// libp2p transport (run by the `sfb` binary's launcher for now); then data, build and
/// driver errors.
pub fn run(spec: &RunSpec, progress: Option<Progress>) -> Result<Outcome> {
    spec.validate()?;
    if spec.transport != Transport::Mem {
        return Err(Error::Transport {
            transport: spec.transport.name(),
        });
    }
    let mut builder = Cluster::from_spec(spec)?;
    if let Some(p) = progress {
        builder = builder.progress(p);
    }
    Ok(match spec.backend {
        Backend::Sfb => builder.run_mem()?.into_outcome(),
        Backend::Fms => builder.run_fms_mem(spec.fms_push)?.into_outcome(),
    })
}
