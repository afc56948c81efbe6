//! Carrying out a [`RunSpec`].

use std::sync::Arc;

use crate::Result;
use crate::cluster::{Builder, Cluster, ModelSource, Outcome, Progress};
use crate::launch::Launcher;
use crate::records::RecordSink;
use crate::spec::{Backend, RunSpec, Transport};

/// Runs `spec` to completion and returns its summary and records; `progress`, if given,
/// hears every clock every node completes.
///
/// # Errors
/// [`RunSpec::validate`]'s errors before anything runs; then data, build and driver
/// errors; for the libp2p transport the launcher's ([`Error::Launch`](crate::Error::Launch)).
///
/// The libp2p transport runs one process per node through [`Launcher::from_env`]: the
/// `sfb` executable named by `SFB_EXE`; [`run_with`] names it.
///
/// A run that fails after it started still leaves its per-clock records in
/// `output.metrics` and a summary marked `failed` in `output.summary` (the figures of each
/// node's last record: [`write_partial_summary`](crate::records::write_partial_summary)).
/// A run whose metrics file cannot be written (a full disk) is stopped at once, every node
/// at one clock, and returned with its summary's `failed` saying why.
pub fn run(spec: &RunSpec, progress: Option<Progress>) -> Result<Outcome> {
    run_with(spec, progress, None, Cluster::from_spec)
}

/// [`run`] for any model: `make` builds the run's builder from the spec (the built-in
/// models: [`Cluster::from_spec`]; a program's own: its builder
/// [`with_spec`](crate::cluster::Builder::with_spec)), in this process and, over libp2p,
/// in every node the `launcher` starts (the program's own executable, which must build
/// the same model for the spec's [`custom_model`](RunSpec::custom_model)); `None`:
/// [`Launcher::from_env`].
///
/// # Errors
/// As [`run`].
pub fn run_with<K: ModelSource>(
    spec: &RunSpec,
    progress: Option<Progress>,
    launcher: Option<&Launcher>,
    make: impl Fn(&RunSpec) -> Result<Builder<K>>,
) -> Result<Outcome>
where
    K::Model: Send + 'static,
{
    spec.validate()?;
    // In memory and on the simulator the drivers keep the records a run returns; the
    // launcher keeps them in the sink.
    let keep = spec.transport == Transport::Libp2p && spec.output.keep_records;
    let sink = Arc::new(RecordSink::create(spec.output.metrics.as_deref())?.keep_all(keep));
    let out = run_validated(spec, progress, launcher, &sink, &make);
    if let Err(e) = &out {
        crate::records::write_partial_summary(spec, &e.to_string(), &sink.last());
    }
    out
}

fn run_validated<K: ModelSource>(
    spec: &RunSpec,
    progress: Option<Progress>,
    launcher: Option<&Launcher>,
    sink: &Arc<RecordSink>,
    make: &dyn Fn(&RunSpec) -> Result<Builder<K>>,
) -> Result<Outcome>
where
    K::Model: Send + 'static,
{
    let (out, prep) = if spec.transport == Transport::Libp2p {
        let launcher = match launcher {
            Some(l) => l.clone(),
            None => Launcher::from_env()?,
        };
        let mut launcher = launcher.record_sink(Arc::clone(sink));
        if let Some(p) = progress {
            launcher = launcher.progress(p);
        }
        let out = launcher.run_with(spec, make)?;
        // The nodes prepared their data in their own processes: the same again here.
        let prep = match spec.output.save_model {
            Some(_) => make(spec)?.preprocessing(),
            None => None,
        };
        (out, prep)
    } else {
        let mut builder = make(spec)?.record_sink(Arc::clone(sink));
        if let Some(p) = progress {
            builder = builder.progress(p);
        }
        let prep = builder.preprocessing();
        let out = if spec.transport == Transport::Sim {
            let fms = (spec.backend == Backend::Fms).then_some(spec.fms_push);
            let mut sim = spec.sim.clone();
            // A registered model is measured by `run_sim` itself.
            if sim.costs == crate::sim::CostModel::Calibrate && spec.custom_model.is_none() {
                crate::calibrate::calibrate_compute(spec)?.fill(&mut sim);
            }
            builder.run_sim(&sim, spec.net.bandwidth, fms)?
        } else {
            match spec.backend {
                Backend::Sfb => builder.run_mem()?.into_outcome(),
                Backend::Fms => builder.run_fms_mem(spec.fms_push)?.into_outcome(),
            }
        };
        (out, prep)
    };
    if let (Some(path), Some(w)) = (&spec.output.save_model, &out.w) {
        crate::records::save_model(path, spec, prep, w.view())?;
    }
    Ok(out)
}
