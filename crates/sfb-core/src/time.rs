//! Time, as the driver tells it.
//!
//! The core never reads a clock of its own. Every call that may take time
//! ([`Engine::on_tick`](crate::Engine::on_tick), [`Engine::on_message`](crate::Engine::on_message),
//! the FMS nodes' counterparts, evaluation and the final record) takes a
//! [`TimeSource`] argument, and every duration the core reports (compute, apply, wait,
//! evaluation, wall time) is a difference of two readings of it. A driver on real threads
//! passes a wall clock; a deterministic test or a simulator passes a virtual one
//! ([`ManualTime`], or its own) and decides what each piece of work costs through
//! [`TimeSource::after`].
//!
//! Times are [`Duration`]s since an epoch the time source chooses (the driver's start,
//! or virtual zero); only differences matter.

use std::time::Duration;

use crate::PeerId;

/// A piece of work the core has just finished, handed to [`TimeSource::after`] so that a
/// virtual time source can charge its modelled cost (and a real one can add a delay, such
/// as a straggler's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Work {
    /// `compute_sv` of `peer` for clock `clock` on `samples` samples, including the
    /// commit and validation of its factors.
    Compute {
        /// The computing node.
        peer: PeerId,
        /// The clock computed.
        clock: u64,
        /// Samples in the mini-batch.
        samples: usize,
        /// The time source's time when the compute began (a straggler slowed relative to
        /// its compute time, [`Stragglers::Controlled`](crate::Stragglers), is delayed in
        /// proportion to `now − started`).
        started: Duration,
    },
    /// One batched apply of `pairs` rank-one updates to a `j × d` replica, with `prox`.
    Apply {
        /// Stacked rank `R` of the update.
        pairs: usize,
        /// Rows of W.
        j: usize,
        /// Columns of W.
        d: usize,
    },
    /// Adding `matrices` dense `j × d` updates to W (the FMS server with dense push), or
    /// building one dense update from factors (an FMS client with dense push).
    Dense {
        /// Dense matrices added or built.
        matrices: usize,
        /// Rows of W.
        j: usize,
        /// Columns of W.
        d: usize,
    },
    /// Validating a received full `j × d` W (an FMS client).
    CheckW {
        /// Rows of W.
        j: usize,
        /// Columns of W.
        d: usize,
    },
    /// One run of the evaluator on held-out data.
    Evaluate,
}

/// Where the core reads the time.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use sfb_core::{ManualTime, TimeSource};
///
/// let mut t = ManualTime::default();
/// t.advance(Duration::from_millis(5));
/// assert_eq!(t.now(), Duration::from_millis(5));
/// ```
pub trait TimeSource {
    /// The current time.
    fn now(&mut self) -> Duration;

    /// The time right after `work` finished. A wall clock ignores `work` (the work took
    /// the time it took) or adds a deliberate delay to it; a virtual clock advances by the
    /// work's modelled cost. Default: [`now`](Self::now).
    fn after(&mut self, work: Work) -> Duration {
        let _ = work;
        self.now()
    }
}

impl<T: TimeSource + ?Sized> TimeSource for &mut T {
    fn now(&mut self) -> Duration {
        (**self).now()
    }
    fn after(&mut self, work: Work) -> Duration {
        (**self).after(work)
    }
}

/// A time source that only moves when told to: every piece of work is free. For tests,
/// doctests and drivers that keep virtual time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ManualTime {
    now: Duration,
}

impl ManualTime {
    /// A time source reading `now`.
    pub fn at(now: Duration) -> Self {
        Self { now }
    }

    /// Sets the time (which may go backwards; the core saturates negative differences at
    /// zero).
    pub fn set(&mut self, now: Duration) {
        self.now = now;
    }

    /// Moves the time forward by `by`.
    pub fn advance(&mut self, by: Duration) {
        self.now += by;
    }
}

impl TimeSource for ManualTime {
    fn now(&mut self) -> Duration {
        self.now
    }
}

/// Seconds from `since` to `until`, zero if `until` is earlier.
pub(crate) fn secs(since: Duration, until: Duration) -> f64 {
    until.saturating_sub(since).as_secs_f64()
}
