//! The real-time [`TimeSource`] the threaded drivers hand to their nodes.

use std::time::{Duration, Instant};

use sfb_core::{Stragglers, TimeSource, Work};

/// Wall-clock time since the driver's start, with injected straggler delay: after a
/// node's compute the clock sleeps for the delay [`Stragglers`] gives that node at that
/// clock, so the delay is real time counted as the node's compute time, as on a slow
/// machine.
#[derive(Debug, Clone)]
pub struct WallClock {
    start: Instant,
    stragglers: Stragglers,
}

impl WallClock {
    /// A clock whose zero is `start`, slowing nodes as `stragglers` says.
    pub fn new(start: Instant, stragglers: Stragglers) -> Self {
        Self { start, stragglers }
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
        if let Work::Compute { peer, clock, .. } = work {
            let delay = self.stragglers.delay(peer, clock);
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
        }
        self.now()
    }
}
