//! Running independent steps from several threads: the file writes and
//! fsyncs of a sync, the unlinks of an old tree.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::error::{Error, Result};

/// Threads for work that never waits for the disk (copies in the page
/// cache, directory operations): at most `max`, and never more than the
/// CPUs this process may use, since more would only take turns.
pub(crate) fn cpu_threads(max: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    max.min(cpus).max(1)
}

/// From this many files on, reading or comparing file contents (page-cache
/// copies: CPU work) is spread over threads.
const PER_FILE_PARALLEL_MIN: usize = 64;

/// Most threads reading or comparing file contents.
const PER_FILE_THREADS: usize = 4;

/// The threads that read or compare the contents of `files` files: one for
/// a few, else [`PER_FILE_THREADS`] but never more than the CPUs (the
/// thread counts of the unchanged check are measured in BENCHMARKS.md).
pub(crate) fn per_file_threads(files: usize) -> usize {
    if files < PER_FILE_PARALLEL_MIN { 1 } else { cpu_threads(PER_FILE_THREADS) }
}

/// Call `step` on every item from up to `threads` scoped threads, each
/// taking the next item as it finishes one. Stops handing out items at the
/// first error and returns it (the first one recorded); steps already
/// running finish. With one thread (or one item) everything runs on the
/// calling thread, in order.
pub(crate) fn try_for_each<T: Sync>(
    items: &[T],
    threads: usize,
    step: impl Fn(&T) -> Result<()> + Sync,
) -> Result<()> {
    let workers = threads.clamp(1, items.len().max(1));
    if workers == 1 {
        return items.iter().try_for_each(step);
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while !failed.load(Ordering::Relaxed) {
                    let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
                    if let Err(e) = step(item) {
                        failed.store(true, Ordering::Relaxed);
                        first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
                        break;
                    }
                }
            });
        }
    });
    match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;
    use crate::durable::Step;

    #[test]
    fn every_item_is_visited_once() {
        let items: Vec<u32> = (0..1000).collect();
        let sum = AtomicU32::new(0);
        try_for_each(&items, 16, |i| {
            sum.fetch_add(*i, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        assert_eq!(sum.into_inner(), 999 * 1000 / 2);
    }

    #[test]
    fn the_first_error_is_returned_and_stops_the_rest() {
        let items: Vec<u32> = (0..10_000).collect();
        let visited = AtomicU32::new(0);
        let err = try_for_each(&items, 4, |i| {
            visited.fetch_add(1, Ordering::Relaxed);
            if *i == 10 { Err(Error::io(Step::Write, "x", std::io::Error::other("boom"))) } else { Ok(()) }
        })
        .unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
        assert!(visited.into_inner() < 10_000);
    }
}
