//! One summary for every backend and transport.

use ndarray::ArrayView2;
use sfb_core::fms::Client;
use sfb_core::metrics::{
    ClockRecord, PeerMetrics, PeerReport, RunInfo, Summary, max_divergence, mean_extras,
};
use sfb_core::{Engine, Extras, Model};

/// What [`summarize`] needs of one worker (SFB peer or FMS client) at the end of a run.
#[derive(Debug, Clone)]
pub struct NodeOutcome<'a> {
    /// Its report (counters, final objective, checksum).
    pub report: PeerReport,
    /// Its final W.
    pub w: ArrayView2<'a, f32>,
    /// Model-specific figures of its final evaluation, if it evaluated.
    pub extra: Option<Extras>,
}

impl<'a> NodeOutcome<'a> {
    fn new(
        report: (u32, &PeerMetrics, Option<sfb_core::Evaluation>, String),
        w: ArrayView2<'a, f32>,
        records: &[ClockRecord],
    ) -> Self {
        let (peer, metrics, e, checksum) = report;
        Self {
            report: PeerReport {
                peer,
                wall_s: records.last().map_or(0.0, |x| x.wall_s),
                metrics: metrics.clone(),
                objective: e.as_ref().map(|e| e.objective),
                test_accuracy: e.as_ref().and_then(|e| e.accuracy),
                checksum,
            },
            w,
            extra: e.map(|e| e.extra),
        }
    }

    /// A finished SFB engine with its records.
    pub fn from_engine<M: Model>(engine: &'a Engine<M>, records: &[ClockRecord]) -> Self {
        let r = (
            engine.config().id.0,
            engine.metrics(),
            engine.last_evaluation().cloned(),
            engine.replica().checksum(),
        );
        Self::new(r, engine.replica().w(), records)
    }

    /// A finished FMS client with its records.
    pub fn from_client<M: Model>(client: &'a Client<M>, records: &[ClockRecord]) -> Self {
        let r = (
            client.id().0,
            client.metrics(),
            client.last_evaluation().cloned(),
            client.checksum(),
        );
        Self::new(r, client.w(), records)
    }
}

/// The summary of a run from its workers' outcomes (and, for FMS, the server's counters,
/// whose full-W pushes count in `bytes_sent`): [`Summary::aggregate`] or
/// [`Summary::aggregate_with_server`], the replicas' divergence, and the mean of the
/// model-specific figures over the workers that evaluated. Every backend and transport
/// reports through this one function.
pub fn summarize(
    info: RunInfo,
    workers: &[NodeOutcome<'_>],
    server: Option<&PeerMetrics>,
) -> Summary {
    let reports: Vec<PeerReport> = workers.iter().map(|n| n.report.clone()).collect();
    let ws: Vec<ArrayView2<'_, f32>> = workers.iter().map(|n| n.w).collect();
    let divergence = max_divergence(&ws);
    let mut summary = match server {
        Some(m) => Summary::aggregate_with_server(info, &reports, m, divergence),
        None => Summary::aggregate(info, &reports, divergence),
    };
    summary.extra = mean_extras(workers.iter().filter_map(|n| n.extra.as_ref()));
    summary
}
