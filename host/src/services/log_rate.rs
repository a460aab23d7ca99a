//! A bound on a plugin's log volume across runs: a token bucket of bytes,
//! as journald's `RateLimitBurst`/`RateLimitIntervalSec` bound a service.
//!
//! The per-run cap (`limits.log_bytes`) stops one run from flooding the
//! log; it does not stop a plugin that floods every run of an instance run
//! every second. One [`LogRate`] per instance, shared by its runs, does:
//! at most `burst` bytes at once and `per_second` bytes a second on
//! average. Messages over it are dropped (never fatal) and counted.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Default burst: 1 MiB, one run's default `limits.log_bytes`.
pub const DEFAULT_LOG_BURST_BYTES: u64 = 1 << 20;

/// Default sustained rate: 16 KiB a second (about 1.4 GB a day at the very
/// most, per instance); a plugin that logs a few lines per change is far
/// below it.
pub const DEFAULT_LOG_RATE_BYTES_PER_SEC: u64 = 16 << 10;

/// The bucket of one instance, shared by its runs (threads).
#[derive(Debug)]
pub struct LogRate {
    burst: u64,
    per_second: u64,
    bucket: Mutex<Bucket>,
    dropped: AtomicU64,
    dropped_bytes: AtomicU64,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl LogRate {
    /// A full bucket of `burst` bytes refilled at `per_second` bytes a second.
    pub fn new(burst: u64, per_second: u64) -> LogRate {
        LogRate {
            burst,
            per_second,
            bucket: Mutex::new(Bucket { tokens: burst as f64, refilled: Instant::now() }),
            dropped: AtomicU64::new(0),
            dropped_bytes: AtomicU64::new(0),
        }
    }

    /// Take `len` bytes from the bucket at `now`: `true` if the message may
    /// be forwarded, `false` (and counted as dropped) if it may not.
    pub fn admit_at(&self, len: u64, now: Instant) -> bool {
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.saturating_duration_since(b.refilled).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.per_second as f64).min(self.burst as f64);
        b.refilled = now.max(b.refilled);
        if len as f64 <= b.tokens {
            b.tokens -= len as f64;
            return true;
        }
        self.dropped.fetch_add(1, Ordering::Relaxed);
        self.dropped_bytes.fetch_add(len, Ordering::Relaxed);
        false
    }

    /// [`LogRate::admit_at`] now.
    pub fn admit(&self, len: u64) -> bool {
        self.admit_at(len, Instant::now())
    }

    /// Messages and bytes dropped since the last call (the counters restart
    /// at zero), for a caller that adds them to its own totals.
    pub fn take_dropped(&self) -> (u64, u64) {
        (self.dropped.swap(0, Ordering::Relaxed), self.dropped_bytes.swap(0, Ordering::Relaxed))
    }

    /// The burst, in bytes.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The sustained rate, in bytes a second.
    pub fn per_second(&self) -> u64 {
        self.per_second
    }
}

impl Default for LogRate {
    fn default() -> Self {
        LogRate::new(DEFAULT_LOG_BURST_BYTES, DEFAULT_LOG_RATE_BYTES_PER_SEC)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_burst_passes_then_only_the_rate_and_drops_are_counted() {
        let rate = LogRate::new(1000, 100);
        let t0 = Instant::now();
        assert!(rate.admit_at(600, t0));
        assert!(rate.admit_at(400, t0));
        assert!(!rate.admit_at(1, t0));
        assert_eq!(rate.take_dropped(), (1, 1));
        assert_eq!(rate.take_dropped(), (0, 0));
        // Two seconds refill 200 bytes, never more than the burst.
        assert!(rate.admit_at(200, t0 + Duration::from_secs(2)));
        assert!(!rate.admit_at(10, t0 + Duration::from_secs(2)));
        assert!(rate.admit_at(1000, t0 + Duration::from_secs(3600)));
        assert!(!rate.admit_at(1, t0 + Duration::from_secs(3600)));
    }

    #[test]
    fn a_flood_over_a_minute_forwards_at_most_the_burst_plus_the_rate() {
        let rate = LogRate::new(1 << 20, 16 << 10);
        let t0 = Instant::now();
        let mut forwarded = 0u64;
        // 60 runs, one a second, each trying 1 MiB in 1 KiB messages.
        for run in 0..60u64 {
            for _ in 0..1024 {
                if rate.admit_at(1024, t0 + Duration::from_secs(run)) {
                    forwarded += 1024;
                }
            }
        }
        assert!(forwarded <= (1 << 20) + 60 * (16 << 10), "{forwarded}");
        let (dropped, _) = rate.take_dropped();
        assert!(dropped > 50_000, "{dropped}");
    }
}
