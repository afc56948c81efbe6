//! The real-time [`TimeSource`] the threaded drivers hand to their nodes.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sfb_core::{Stragglers, TimeSource, Work};

/// A run-wide stop signal: once [`stop`](Self::stop) is called, every [`WallClock`]
/// holding a clone cuts its injected delay short, so a run that failed elsewhere does not
/// wait out a straggler's sleep.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<(Mutex<bool>, Condvar)>);

impl Stop {
    /// Signals every holder.
    pub fn stop(&self) {
        let (flag, cv) = &*self.0;
        *flag.lock().unwrap_or_else(PoisonError::into_inner) = true;
        cv.notify_all();
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        *self.0.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps for `d`, or until stopped.
    fn sleep(&self, d: Duration) {
        let (flag, cv) = &*self.0;
        let guard = flag.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = cv
            .wait_timeout_while(guard, d, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

/// Wall-clock time since the driver's start, with injected straggler delay: after a
/// node's compute the clock sleeps for the delay [`Stragglers`] gives that node at that
/// clock, so the delay is real time counted as the node's compute time, as on a slow
/// machine.
#[derive(Debug, Clone)]
pub struct WallClock {
    start: Instant,
    stragglers: Stragglers,
    stop: Stop,
}

impl WallClock {
    /// A clock whose zero is `start`, slowing nodes as `stragglers` says.
    pub fn new(start: Instant, stragglers: Stragglers) -> Self {
        Self {
            start,
            stragglers,
            stop: Stop::default(),
        }
    }

    /// The same clock, its delays cut short by `stop`.
    pub fn with_stop(mut self, stop: Stop) -> Self {
        self.stop = stop;
        self
    }

    /// A clock starting now with no stragglers.
    pub fn start() -> Self {
        Self::new(Instant::now(), Stragglers::None)
    }
}

impl TimeSource for WallClock {
    fn now(&mut self) -> Duration {
        self.start.elapsed()
    }

    fn after(&mut self, work: Work) -> Duration {
        if let Work::Compute {
            peer,
            clock,
            started,
            ..
        } = work
        {
            let compute = self.now().saturating_sub(started);
            let delay = self.stragglers.delay(peer, clock, compute);
            if !delay.is_zero() {
                self.stop.sleep(delay);
            }
        }
        self.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_cuts_a_straggler_delay_short() {
        let stop = Stop::default();
        let mut clock = WallClock::new(
            Instant::now(),
            Stragglers::Fixed {
                peer: sfb_core::PeerId(0),
                delay: Duration::from_secs(3600),
            },
        )
        .with_stop(stop.clone());
        let signal = std::thread::spawn(move || stop.stop());
        // Returns once the other thread has stopped the run, not after an hour.
        clock.after(Work::Compute {
            peer: sfb_core::PeerId(0),
            started: Duration::ZERO,
            clock: 0,
            samples: 1,
        });
        signal.join().unwrap();
    }
}
