//! The host side of interface `log`: guest messages go to `tracing` under
//! the target [`PLUGIN_LOG_TARGET`] with the plugin's name as a field,
//! capped per run by `limits.log_bytes`, with every control character
//! escaped (a plugin must not forge log lines or drive the operator's
//! terminal).

use super::bindings::durasync::plugin::log::{Host, Level};
use super::state::HostView;
use crate::services::LogVerdict;
use crate::services::text::escape_all;

/// The `tracing` target of a plugin's own messages, apart from the host's
/// (`durasync run` and `durasync test` show it at `info`; a filter such as
/// `DURASYNC_LOG=warn,durasync::plugin=debug` picks it out). The host's
/// notes about a plugin's log (a limit reached) keep this module's target.
pub const PLUGIN_LOG_TARGET: &str = "durasync::plugin";

impl Host for HostView<'_> {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        let s = &mut *self.session;
        if s.past_deadline() {
            // The call ends as timed out; its message is not forwarded.
            return Err(wasmtime::Error::msg("deadline reached"));
        }
        match s.admit_log(message.len() as u64) {
            LogVerdict::Forward => {}
            LogVerdict::DropFirst => {
                tracing::warn!(
                    plugin = %s.plugin(),
                    "log limit of {} bytes reached (limits.log_bytes); further messages are dropped",
                    s.limits().log_bytes
                );
                return Ok(());
            }
            LogVerdict::RateFirst => {
                tracing::warn!(
                    plugin = %s.plugin(),
                    "log rate limit reached (burst {} bytes, {} bytes/s for this instance); \
                     messages are dropped until it refills",
                    s.log_rate().map_or(0, |r| r.burst()),
                    s.log_rate().map_or(0, |r| r.per_second())
                );
                return Ok(());
            }
            LogVerdict::Drop => return Ok(()),
        }
        let plugin = s.plugin();
        let message = escape_all(&message);
        match level {
            Level::Debug => tracing::debug!(target: PLUGIN_LOG_TARGET, plugin, "{message}"),
            Level::Info => tracing::info!(target: PLUGIN_LOG_TARGET, plugin, "{message}"),
            Level::Warn => tracing::warn!(target: PLUGIN_LOG_TARGET, plugin, "{message}"),
            Level::Error => tracing::error!(target: PLUGIN_LOG_TARGET, plugin, "{message}"),
        }
        Ok(())
    }
}
