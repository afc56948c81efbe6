//! Quiet logs under attack: refused connections are counted and summarized, never logged
//! one line each.
//!
//! The first refusal after a quiet period is logged at once, with its reason (a
//! misconfigured dialer is easy to diagnose); the refusals that follow are held, and a
//! summary line ("dropped N unauthenticated connections in the last 10 s …") is due one
//! [`REFUSAL_LOG_WINDOW`] after the previous line. A window without refusals ends the
//! summaries; the next refusal is logged at once again. A run of T seconds under a
//! flood therefore logs at most `2 + T / 10` lines per kind, whatever the flood's rate.
//!
//! Sans-IO: the caller says what time it is and logs the lines returned.

use std::time::{Duration, Instant};

/// Longest interval between two summary lines about refused connections.
pub const REFUSAL_LOG_WINDOW: Duration = Duration::from_secs(10);

/// What is being counted.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// Incoming connections refused before authentication.
    Refused,
    /// Errors accepting connections on the listening socket.
    AcceptError,
}

/// Counts one kind of refusal and says which lines to log.
#[derive(Debug)]
pub(super) struct RefusalLog {
    kind: Kind,
    window: Duration,
    /// When the last line was logged, while summarizing (None: quiet, the next refusal
    /// is logged at once).
    last_line: Option<Instant>,
    /// Refusals since the last line.
    held: u64,
    /// The latest held refusal's detail.
    latest: String,
    /// Refusals since the start.
    total: u64,
}

impl RefusalLog {
    pub(super) fn new(kind: Kind, window: Duration) -> Self {
        Self {
            kind,
            window,
            last_line: None,
            held: 0,
            latest: String::new(),
            total: 0,
        }
    }

    /// Counts one refusal at `now`; `detail` (where from, why) is only called for the
    /// lines that mention it. Returns the line to log now, if any.
    pub(super) fn note(&mut self, now: Instant, detail: impl FnOnce() -> String) -> Option<String> {
        self.total += 1;
        if self.last_line.is_none() {
            self.last_line = Some(now);
            let secs = secs(self.window);
            return Some(match self.kind {
                Kind::Refused => format!(
                    "refused an unauthenticated connection {}; further refusals are summarized every {secs}",
                    detail()
                ),
                Kind::AcceptError => format!(
                    "accepting a connection failed: {}; further errors are summarized every {secs}",
                    detail()
                ),
            });
        }
        self.held += 1;
        self.latest = detail();
        None
    }

    /// When [`tick`](Self::tick) has something to do.
    pub(super) fn due(&self) -> Option<Instant> {
        self.last_line.map(|t| t + self.window)
    }

    /// At or after [`due`](Self::due): the summary of the held refusals, if any (and the
    /// next window starts), or nothing (and the log goes quiet).
    pub(super) fn tick(&mut self, now: Instant) -> Option<String> {
        let due = self.due()?;
        if now < due {
            return None;
        }
        if self.held == 0 {
            self.last_line = None;
            return None;
        }
        let line = self.summary(now);
        self.last_line = Some(now);
        Some(line)
    }

    /// At shutdown: the summary of the refusals still held, if any.
    pub(super) fn finish(&mut self, now: Instant) -> Option<String> {
        (self.held > 0).then(|| self.summary(now))
    }

    fn summary(&mut self, now: Instant) -> String {
        let since = self.last_line.map_or(Duration::ZERO, |t| now - t);
        let (n, total) = (self.held, self.total);
        self.held = 0;
        let latest = std::mem::take(&mut self.latest);
        let secs = secs(since);
        match self.kind {
            Kind::Refused => format!(
                "dropped {n} unauthenticated connection{} in the last {secs} ({total} since start; latest {latest})",
                plural(n)
            ),
            Kind::AcceptError => format!(
                "{n} more error{} accepting connections in the last {secs} ({total} since start; latest: {latest})",
                plural(n)
            ),
        }
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `10 s`, `2.5 s`.
fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 9.95 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = REFUSAL_LOG_WINDOW;

    #[test]
    fn a_flood_logs_one_line_then_one_summary_per_window() {
        let t0 = Instant::now();
        let mut log = RefusalLog::new(Kind::Refused, W);
        let mut lines = Vec::new();
        // 100,000 refusals spread over 35 s, the caller ticking whenever one is due.
        for k in 0..100_000u64 {
            let now = t0 + Duration::from_micros(k * 350);
            while let Some(due) = log.due().filter(|d| *d <= now) {
                match log.tick(due) {
                    Some(l) => lines.push(l),
                    None => break,
                }
            }
            lines.extend(log.note(now, || format!("from /ip4/1.2.3.4/tcp/{k}: garbage")));
        }
        lines.extend(log.finish(t0 + Duration::from_secs(35)));
        assert_eq!(lines.len(), 1 + 3 + 1, "{lines:#?}");
        assert!(
            lines[0].starts_with(
                "refused an unauthenticated connection from /ip4/1.2.3.4/tcp/0: garbage"
            ),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with("dropped 28571 unauthenticated connections in the last 10 s"),
            "{}",
            lines[1]
        );
        let dropped: u64 = lines[1..]
            .iter()
            .map(|l| l.split(' ').nth(1).unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(dropped + 1, 100_000, "every refusal is counted once");
        assert!(
            lines[4].contains(
                "in the last 5.0 s (100000 since start; latest from /ip4/1.2.3.4/tcp/99999"
            ),
            "{}",
            lines[4]
        );
    }

    #[test]
    fn a_quiet_window_ends_the_summaries() {
        let t0 = Instant::now();
        let mut log = RefusalLog::new(Kind::AcceptError, W);
        assert!(log.note(t0, || "EMFILE".into()).is_some());
        assert_eq!(log.tick(t0 + W / 2), None, "not due yet");
        assert_eq!(log.tick(t0 + W), None, "nothing held");
        assert_eq!(log.due(), None, "quiet again");
        let l = log.note(t0 + 3 * W, || "EMFILE".into()).unwrap();
        assert!(
            l.starts_with("accepting a connection failed: EMFILE"),
            "{l}"
        );
        assert_eq!(log.note(t0 + 3 * W, || "ENFILE".into()), None);
        let s = log.tick(t0 + 4 * W).unwrap();
        assert!(
            s.starts_with("1 more error accepting connections in the last 10 s"),
            "{s}"
        );
        assert!(s.ends_with("latest: ENFILE)"), "{s}");
        assert_eq!(log.finish(t0 + 4 * W), None);
    }
}
