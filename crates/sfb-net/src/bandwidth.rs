//! Outbound bandwidth budget (Bösen's managed communication): a token bucket shared by all
//! of a peer's sends.

use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A rate in bytes per second, parsed from `1gbit`, `100mbit`, `10MB`, `500kbit`, `123`
/// (bytes/s), … (`bit` units are bits per second, decimal prefixes; `B` units are bytes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate(pub f64);

impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let lower = t.to_ascii_lowercase();
        let split = lower
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(lower.len());
        let (num, unit) = lower.split_at(split);
        let n: f64 = num
            .parse()
            .map_err(|_| format!("bandwidth {t:?}: {num:?} is not a number"))?;
        let bytes_per_s = match unit.trim() {
            "" | "b" | "bps" => n,
            "kb" => n * 1e3,
            "mb" => n * 1e6,
            "gb" => n * 1e9,
            "bit" => n / 8.0,
            "kbit" => n * 1e3 / 8.0,
            "mbit" => n * 1e6 / 8.0,
            "gbit" => n * 1e9 / 8.0,
            other => {
                return Err(format!(
                    "bandwidth {t:?}: unknown unit {other:?} (use bit, kbit, mbit, gbit, B, KB, MB, GB)"
                ));
            }
        };
        if !(bytes_per_s.is_finite() && bytes_per_s > 0.0) {
            return Err(format!("bandwidth {t:?} must be positive"));
        }
        Ok(Rate(bytes_per_s))
    }
}

#[derive(Debug)]
struct State {
    tokens: f64,
    last: Instant,
}

/// A token bucket: `rate` bytes/s, at most `burst` bytes at once. Senders reserve before
/// writing; a reservation larger than the tokens available goes into debt and the sender
/// waits until the debt is repaid, so concurrent senders share the rate fairly in order.
#[derive(Debug)]
pub struct Bucket {
    rate: f64,
    burst: f64,
    state: Mutex<State>,
}

impl Bucket {
    /// A full bucket.
    pub fn new(rate: Rate, burst: usize) -> Self {
        Self {
            rate: rate.0,
            burst: burst as f64,
            state: Mutex::new(State {
                tokens: burst as f64,
                last: Instant::now(),
            }),
        }
    }

    /// Reserves `n` bytes; returns how long the caller must wait before sending them.
    pub fn reserve(&self, n: usize) -> Duration {
        self.reserve_held(n).0
    }

    /// [`reserve`](Self::reserve), also returning how many of the `n` bytes the bucket
    /// holds back (those beyond its tokens; the rest go through at once, from its burst
    /// or what idle time refilled). Those bytes over the wait are the rate the bucket
    /// lets through, which is what a link meter reads from it.
    pub fn reserve_held(&self, n: usize) -> (Duration, usize) {
        let mut s = self.state.lock().expect("bucket lock");
        let now = Instant::now();
        let refill = now.saturating_duration_since(s.last).as_secs_f64() * self.rate;
        s.tokens = (s.tokens + refill).min(self.burst);
        s.last = now;
        s.tokens -= n as f64;
        if s.tokens >= 0.0 {
            (Duration::ZERO, 0)
        } else {
            let held = (-s.tokens).min(n as f64).ceil() as usize;
            (Duration::from_secs_f64(-s.tokens / self.rate), held)
        }
    }

    /// Bytes per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!("1gbit".parse::<Rate>().unwrap().0, 125e6);
        assert_eq!("100mbit".parse::<Rate>().unwrap().0, 12.5e6);
        assert_eq!("10MB".parse::<Rate>().unwrap().0, 10e6);
        assert_eq!("123".parse::<Rate>().unwrap().0, 123.0);
        assert!("1 parsec".parse::<Rate>().is_err());
        assert!("0gbit".parse::<Rate>().is_err());
        assert!("fast".parse::<Rate>().is_err());
    }

    #[test]
    fn debt_is_charged_at_the_rate() {
        let b = Bucket::new(Rate(1000.0), 100);
        assert_eq!(b.reserve(100), Duration::ZERO);
        // 500 bytes more with an empty bucket: about half a second of debt.
        let wait = b.reserve(500).as_secs_f64();
        assert!((0.45..=0.5).contains(&wait), "{wait}");
        // A second reservation queues behind the first.
        let wait2 = b.reserve(500).as_secs_f64();
        assert!(wait2 > wait + 0.45, "{wait2}");
    }

    /// What a bucket holds back of a reservation: the bytes beyond its tokens, at most
    /// the reservation (a debt left by earlier ones makes the wait longer, not the bytes
    /// held more).
    #[test]
    fn the_bytes_held_back_are_those_beyond_the_tokens() {
        let b = Bucket::new(Rate(1.0), 100);
        assert_eq!(b.reserve_held(60), (Duration::ZERO, 0));
        // 40 tokens left (a rate of 1 B/s refills nothing that counts here).
        let (wait, held) = b.reserve_held(100);
        assert!((60..=61).contains(&held), "{held}");
        assert!(wait.as_secs_f64() > 59.0, "{wait:?}");
        let (_, held) = b.reserve_held(10);
        assert_eq!(held, 10);
    }
}
