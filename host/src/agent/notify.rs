//! systemd's notify protocol (`Type=notify`), through `sd-notify`: nothing
//! happens unless `NOTIFY_SOCKET` is set.

use std::time::{Duration, Instant};

use sd_notify::NotifyState;

/// Tells systemd about readiness, status and liveness.
pub struct Notifier {
    enabled: bool,
    /// Half the watchdog period systemd asked for (`WATCHDOG_USEC`), if any.
    watchdog_every: Option<Duration>,
    next_ping: Option<Instant>,
    last_status: String,
}

impl Notifier {
    /// Read `NOTIFY_SOCKET` and `WATCHDOG_USEC` (and `WATCHDOG_PID`).
    pub fn from_env() -> Notifier {
        let enabled = std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty());
        let mut usec = 0u64;
        let watchdog_every = (enabled && sd_notify::watchdog_enabled(false, &mut usec) && usec > 0)
            .then(|| Duration::from_micros(usec) / 2);
        if let Some(every) = watchdog_every {
            tracing::info!("systemd watchdog: pinging every {}", humantime::format_duration(every));
        }
        Notifier {
            enabled,
            watchdog_every,
            next_ping: watchdog_every.map(|_| Instant::now()),
            last_status: String::new(),
        }
    }

    fn send(&self, states: &[NotifyState<'_>]) {
        if !self.enabled {
            return;
        }
        if let Err(e) = sd_notify::notify(false, states) {
            tracing::warn!("notifying systemd: {e}");
        }
    }

    /// `READY=1` with a status line.
    pub fn ready(&mut self, status: &str) {
        self.last_status = status.to_owned();
        self.send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// `STATUS=…`, when it changed.
    pub fn status(&mut self, status: &str) {
        if status != self.last_status {
            self.last_status = status.to_owned();
            self.send(&[NotifyState::Status(status)]);
        }
    }

    /// `STOPPING=1` with a status line.
    pub fn stopping(&mut self, status: &str) {
        self.send(&[NotifyState::Stopping, NotifyState::Status(status)]);
    }

    /// When the next `WATCHDOG=1` is due.
    pub fn next_ping(&self) -> Option<Instant> {
        self.next_ping
    }

    /// Send `WATCHDOG=1` if it is due. Called from the agent's loop, so a
    /// stuck loop stops the pings and systemd restarts the agent.
    pub fn ping_if_due(&mut self, now: Instant) {
        if let (Some(at), Some(every)) = (self.next_ping, self.watchdog_every)
            && now >= at
        {
            self.send(&[NotifyState::Watchdog]);
            self.next_ping = Some(now + every);
        }
    }
}
