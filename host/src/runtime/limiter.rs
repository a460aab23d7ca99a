//! The memory limiter and the wall-clock watchdog of a call.

use std::sync::mpsc;
use std::time::Duration;

use wasmtime::{Engine, ResourceLimiter};

use crate::services::limits;

/// Caps memories and tables; remembers that a memory grow was refused, so
/// the trap that follows is reported as the memory limit.
pub(crate) struct MemoryLimiter {
    pub memory_bytes: usize,
    pub hit: bool,
}

impl MemoryLimiter {
    pub fn new(memory_bytes: u64) -> Self {
        MemoryLimiter { memory_bytes: usize::try_from(memory_bytes).unwrap_or(usize::MAX), hit: false }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.hit = true;
            // Trap right here rather than let the guest's allocator abort
            // later with a less precise message.
            return Err(wasmtime::Error::msg("memory limit reached"));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= limits::MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        limits::MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        limits::MAX_TABLES
    }

    fn memories(&self) -> usize {
        limits::MAX_MEMORIES
    }
}

/// Bumps the engine's epoch once a call's deadline passes, and again every
/// [`limits::EPOCH_RETRY_MS`] until the call ends (dropping it stops it).
pub(crate) struct Watchdog {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(engine: &Engine, timeout: Duration) -> Self {
        let (tx, rx) = mpsc::channel::<()>();
        let engine = engine.clone();
        let thread = std::thread::spawn(move || {
            let mut wait = timeout;
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(wait) {
                engine.increment_epoch();
                wait = Duration::from_millis(limits::EPOCH_RETRY_MS);
            }
        });
        Watchdog { stop: Some(tx), thread: Some(thread) }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
