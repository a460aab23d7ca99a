//! The host side of interface `log`: guest messages go to `tracing` with the
//! plugin's name as a field, capped per run by `limits.log_bytes`.

use super::bindings::durasync::plugin::log::{Host, Level};
use super::fs::HostView;

/// What a run's log budget has taken so far.
#[derive(Debug, Default)]
pub(crate) struct LogBudget {
    /// Bytes of messages forwarded.
    pub used: u64,
    /// Messages dropped because the budget was spent.
    pub dropped: u64,
    /// Bytes of the dropped messages.
    pub dropped_bytes: u64,
}

impl Host for HostView<'_> {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        let s = &mut *self.state;
        let len = message.len() as u64;
        if s.log.used + len > s.limits.log_bytes {
            if s.log.dropped == 0 {
                tracing::warn!(
                    plugin = %s.plugin,
                    "log limit of {} bytes reached (limits.log_bytes); further messages are dropped",
                    s.limits.log_bytes
                );
            }
            s.log.dropped += 1;
            s.log.dropped_bytes += len;
            return Ok(());
        }
        s.log.used += len;
        let plugin = s.plugin.as_str();
        match level {
            Level::Debug => tracing::debug!(plugin, "{message}"),
            Level::Info => tracing::info!(plugin, "{message}"),
            Level::Warn => tracing::warn!(plugin, "{message}"),
            Level::Error => tracing::error!(plugin, "{message}"),
        }
        Ok(())
    }
}
