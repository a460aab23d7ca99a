//! Threads that log where their starter logs.

/// Spawn a named thread that logs to the caller's `tracing` dispatcher (the
/// agent may run under a scoped one, e.g. for `--log-format json`).
pub(crate) fn spawn_traced<T: Send + 'static>(
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    let dispatch = tracing::dispatcher::get_default(|d| d.clone());
    std::thread::Builder::new().name(name).spawn(move || tracing::dispatcher::with_default(&dispatch, f))
}
