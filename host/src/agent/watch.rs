//! inotify on directories (the config directory and each input file's
//! directory), through rustix. Watching the directory rather than the file
//! sees a file replaced by `rename` (`kubectl … > tmp && mv tmp file`) and
//! Kubernetes' atomic writer (`..data` swapped), which a watch on the file's
//! inode would miss.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::SyncSender;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

/// What the reader thread forwards.
#[derive(Debug)]
pub enum Change {
    /// `name` in the directory of watch `wd` was written, moved or removed.
    Entry {
        /// The watch.
        wd: i32,
        /// The entry's name.
        name: OsString,
        /// Whether new contents are complete (`CLOSE_WRITE` or `MOVED_TO`).
        complete: bool,
    },
    /// The watch went away (its directory was removed or unmounted).
    Gone {
        /// The watch.
        wd: i32,
    },
    /// The kernel's queue overflowed: anything may have changed.
    Overflow,
}

/// Every event the agent cares about in a watched directory.
fn mask() -> WatchFlags {
    WatchFlags::CLOSE_WRITE
        | WatchFlags::MOVED_TO
        | WatchFlags::MOVED_FROM
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::ONLYDIR
}

/// The watched directories and their watch descriptors.
pub struct Watcher {
    fd: Arc<OwnedFd>,
    by_dir: HashMap<PathBuf, i32>,
    by_wd: HashMap<i32, PathBuf>,
    /// Directories that could not be watched, to log each once.
    failed: BTreeSet<PathBuf>,
}

impl Watcher {
    /// An inotify instance whose events a reader thread sends to `tx`
    /// (mapped by `map`) until the receiver is gone.
    pub fn start<E: Send + 'static>(
        tx: SyncSender<E>,
        map: impl Fn(Change) -> E + Send + 'static,
    ) -> std::io::Result<Watcher> {
        let fd = Arc::new(inotify::init(CreateFlags::CLOEXEC)?);
        let reader_fd = fd.clone();
        crate::spawn::spawn_traced("inotify".into(), move || {
            // Room for many events with names up to NAME_MAX.
            let mut buf = vec![MaybeUninit::<u8>::uninit(); 64 * 1024];
            let mut reader = inotify::Reader::new(&*reader_fd, &mut buf);
            loop {
                let change = match reader.next() {
                    Ok(ev) => {
                        let flags = ev.events();
                        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                            Change::Overflow
                        } else if flags.contains(ReadFlags::IGNORED) {
                            Change::Gone { wd: ev.wd() }
                        } else if let Some(name) = ev.file_name() {
                            Change::Entry {
                                wd: ev.wd(),
                                name: std::ffi::OsStr::from_bytes(name.to_bytes()).to_owned(),
                                complete: flags.intersects(ReadFlags::CLOSE_WRITE | ReadFlags::MOVED_TO),
                            }
                        } else {
                            continue;
                        }
                    }
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        tracing::error!("reading inotify events failed, changes are no longer seen: {e}");
                        return;
                    }
                };
                if tx.send(map(change)).is_err() {
                    return;
                }
            }
        })?;
        Ok(Watcher { fd, by_dir: HashMap::new(), by_wd: HashMap::new(), failed: BTreeSet::new() })
    }

    /// The directory of watch `wd`.
    pub fn dir_of(&self, wd: i32) -> Option<&Path> {
        self.by_wd.get(&wd).map(PathBuf::as_path)
    }

    /// Forget a watch the kernel dropped (so the next [`Self::set`] re-adds it).
    pub fn forget(&mut self, wd: i32) {
        if let Some(dir) = self.by_wd.remove(&wd) {
            self.by_dir.remove(&dir);
        }
    }

    /// Watch exactly `dirs`: add the missing watches, remove the others.
    /// A directory that cannot be watched is logged (once until it works)
    /// and retried on the next call; returns whether all are watched.
    pub fn set(&mut self, dirs: &BTreeSet<PathBuf>) -> bool {
        let stale: Vec<PathBuf> = self.by_dir.keys().filter(|d| !dirs.contains(*d)).cloned().collect();
        for dir in stale {
            if let Some(wd) = self.by_dir.remove(&dir) {
                self.by_wd.remove(&wd);
                let _ = inotify::remove_watch(&*self.fd, wd);
            }
        }
        let mut all = true;
        for dir in dirs {
            if self.by_dir.contains_key(dir) {
                continue;
            }
            match inotify::add_watch(&*self.fd, dir, mask()) {
                Ok(wd) => {
                    if self.failed.remove(dir) {
                        tracing::info!("watching {} again", dir.display());
                    }
                    // Hard links and bind mounts can give two paths one watch.
                    if let Some(other) = self.by_wd.insert(wd, dir.clone()) {
                        self.by_dir.remove(&other);
                    }
                    self.by_dir.insert(dir.clone(), wd);
                }
                Err(e) => {
                    all = false;
                    if self.failed.insert(dir.clone()) {
                        tracing::warn!(
                            "cannot watch {} ({e}); changes in it are seen only at the next interval or retry",
                            dir.display()
                        );
                    }
                }
            }
        }
        all
    }
}
