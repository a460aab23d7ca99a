//! Every limit a plugin runs under, as named constants with the reason for
//! each default, and the [`PluginLimits`] a manifest may override.
//!
//! All of them bound a resource the guest controls: a plugin is untrusted
//! code, and without a cap each of these is a way to hang, starve or fill
//! the host it runs on.

/// Default CPU budget per call, in wasmtime fuel units (about one unit per
/// WebAssembly instruction). Ten billion instructions is tens of seconds of
/// honest work on any machine — far more than rendering a few thousand
/// certificates — yet a `loop {}` runs out of it deterministically, on a
/// fast or a slow machine alike, which a wall-clock limit cannot promise.
pub const DEFAULT_FUEL: u64 = 10_000_000_000;

/// Default wall-clock limit per call, in milliseconds. Fuel does not count
/// time spent in host calls or a guest that is unlimited in fuel; the
/// deadline (epoch interruption) catches those. Thirty seconds is well
/// beyond a reconcile loop's period, so it only ever stops a stuck plugin.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// Default cap on a plugin's linear memories, in bytes (256 MiB). A guest
/// that allocates without bound would otherwise take the host's memory with
/// it; a plugin that renders configuration files needs a few MiB.
pub const DEFAULT_MEMORY_BYTES: u64 = 256 << 20;

/// Default cap on bytes a plugin may have the host write in one run
/// (1 GiB). Writes go to the operator's disk through durable operations; a
/// runaway plugin must not be able to fill it.
pub const DEFAULT_WRITE_BYTES: u64 = 1 << 30;

/// Default cap on files a plugin may have the host write in one run. Each
/// file costs an inode and an fsync; 100 000 is far above any certificate
/// or manifest set.
pub const DEFAULT_WRITE_FILES: u64 = 100_000;

/// Default cap on the bytes of log messages per run (1 MiB). Messages past
/// it are dropped and counted, never fatal: a chatty plugin must not flood
/// the journal, nor be killed for talking.
pub const DEFAULT_LOG_BYTES: u64 = 1 << 20;

/// Default cap on the size of the result (or error) string a plugin returns
/// (1 MiB). It is printed to the operator's terminal and JSON consumers.
pub const DEFAULT_OUTPUT_BYTES: u64 = 1 << 20;

/// Default cap on the data a plugin hands the host in one call (64 MiB):
/// the bytes of a `sync`'s files or a `write-file`'s contents, plus names.
/// wasmtime copies every argument out of the guest before the host sees it
/// and stops at its own "hostcall fuel" (128 MiB by default) with a message
/// that names no durasync limit; ours is set as that fuel, lower, so the
/// operator reads `limits.call_bytes`. A list may name the same guest bytes
/// many times, so the guest's memory cap alone does not bound this.
pub const DEFAULT_CALL_BYTES: u64 = 64 << 20;

/// Default cap on the bytes one `read-file` returns (16 MiB). The file's
/// size is the file system's say, not the plugin's: a sparse file claims
/// 64 GiB for free, and reading it whole would take the host's memory (and
/// then the guest's). The effective cap is the smallest of this,
/// `call_bytes` and half of `memory_bytes` ([`PluginLimits::read_bytes_cap`]): the
/// bytes must fit in the guest, with room to use them. Certificates and
/// manifests are kilobytes.
pub const DEFAULT_READ_BYTES: u64 = 16 << 20;

/// Most entries one `list-dir` returns. Each is a name of up to 255 bytes
/// the host holds and copies into the guest; 100 000 (the most files one
/// sync writes) keeps that under ~25 MiB. A directory with more is refused
/// with a `limit` error as soon as the listing passes this many.
pub const MAX_LIST_ENTRIES: u64 = 100_000;

/// Bytes of guest stdout and of guest stderr kept per call: the first half
/// and the last half of what was written (a panic message comes last).
/// Writes past it are accepted and discarded, so a full buffer never fails
/// a write and never kills the guest.
pub const STDIO_CAPTURE_BYTES: usize = 64 << 10;

/// Most wasm tables, memories and instances a plugin may create. A Rust
/// component needs a handful of each; these stop a pathological component
/// from making the host allocate bookkeeping without bound.
pub const MAX_INSTANCES: usize = 100;
/// See [`MAX_INSTANCES`].
pub const MAX_TABLES: usize = 100;
/// See [`MAX_INSTANCES`].
pub const MAX_MEMORIES: usize = 100;

/// Most elements a table may grow to. Tables hold function references (a
/// pointer each); a million is megabytes, far more than any real program.
pub const MAX_TABLE_ELEMENTS: usize = 1_000_000;

/// Most `dir` handles a plugin may hold at once. Each holds an open file
/// descriptor of the host process; an unbounded number would exhaust the
/// process's descriptor limit.
pub const MAX_OPEN_DIRS: usize = 256;

/// How often, once a call's deadline has passed, the watchdog thread bumps
/// the engine's epoch again (in case the guest was inside a host call at
/// the first bump). Small enough to stop a guest promptly.
pub const EPOCH_RETRY_MS: u64 = 10;

/// The limits of one plugin, after the manifest's `[limits]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginLimits {
    /// CPU budget per call in fuel units; `None` is unlimited (the
    /// timeout still applies).
    pub fuel: Option<u64>,
    /// Wall-clock limit per call, in milliseconds.
    pub timeout_ms: u64,
    /// Cap on linear memory, in bytes.
    pub memory_bytes: u64,
    /// Bytes a plugin may write per run.
    pub write_bytes: u64,
    /// Files a plugin may write per run.
    pub write_files: u64,
    /// Bytes of log messages per run.
    pub log_bytes: u64,
    /// Bytes of the returned result or error message.
    pub output_bytes: u64,
    /// Bytes of data the plugin may hand the host in one call.
    pub call_bytes: u64,
    /// Bytes one `read-file` may return (see [`PluginLimits::read_bytes_cap`]).
    pub read_bytes: u64,
}

impl PluginLimits {
    /// The bytes one `read-file` may return: `read_bytes`, but never more
    /// than `call_bytes` nor half the guest's memory cap.
    pub fn read_bytes_cap(&self) -> u64 {
        self.read_bytes.min(self.call_bytes).min(self.memory_bytes / 2)
    }

    /// What the durable core may read for one call of this plugin.
    pub fn read_limits(&self) -> crate::durable::ReadLimits {
        crate::durable::ReadLimits { max_bytes: self.read_bytes_cap(), max_entries: MAX_LIST_ENTRIES }
    }
}

impl Default for PluginLimits {
    fn default() -> Self {
        PluginLimits {
            fuel: Some(DEFAULT_FUEL),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            write_bytes: DEFAULT_WRITE_BYTES,
            write_files: DEFAULT_WRITE_FILES,
            log_bytes: DEFAULT_LOG_BYTES,
            output_bytes: DEFAULT_OUTPUT_BYTES,
            call_bytes: DEFAULT_CALL_BYTES,
            read_bytes: DEFAULT_READ_BYTES,
        }
    }
}

/// A byte count for a person: `256 MiB`, `1.5 KiB`, `12 bytes`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size {
            return if n.is_multiple_of(size) {
                format!("{} {unit}", n / size)
            } else {
                format!("{:.1} {unit}", n as f64 / size as f64)
            };
        }
    }
    format!("{n} bytes")
}

/// A duration in milliseconds for a person: `30 s`, `1.5 s`, `250 ms`.
pub fn human_ms(ms: u64) -> String {
    if ms >= 1000 {
        if ms.is_multiple_of(1000) {
            format!("{} s", ms / 1000)
        } else {
            format!("{:.1} s", ms as f64 / 1000.0)
        }
    } else {
        format!("{ms} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_read_well() {
        assert_eq!(human_bytes(DEFAULT_MEMORY_BYTES), "256 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(12), "12 bytes");
        assert_eq!(human_ms(30_000), "30 s");
        assert_eq!(human_ms(1500), "1.5 s");
        assert_eq!(human_ms(250), "250 ms");
    }
}
