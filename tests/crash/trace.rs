//! Recording what the durable core does: a [`Probe`] that keeps every
//! mutating system call the core made (the same `sys.rs` calls the binary
//! makes), and the reduction of a recorded sync to its durable sequence,
//! which the strace audit compares with the real binary.

use std::collections::BTreeSet;
use std::sync::Mutex;

use durasync::durable::names::{is_gen, is_leftover, parse_keep};
use durasync::durable::{Probe, SysOp};

/// One recorded operation, owned, with paths relative to the explored root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ROp {
    Lock {
        dir: String,
    },
    Mkdir {
        path: String,
    },
    Create {
        path: String,
    },
    Write {
        path: String,
        data: Vec<u8>,
    },
    Chmod {
        path: String,
        mode: u32,
    },
    /// `fchown` (`None`: that id is left as it is).
    Chown {
        path: String,
        uid: Option<u32>,
        gid: Option<u32>,
    },
    /// `fsetxattr` of one extended attribute.
    SetXattr {
        path: String,
        name: String,
        value: Vec<u8>,
    },
    FsyncFile {
        path: String,
    },
    FsyncDir {
        path: String,
    },
    /// An fsync that failed (EIO). Under the "fsyncgate" behaviour it
    /// persists nothing of that inode's pending changes, ever.
    FsyncFail {
        path: String,
    },
    /// `syncfs` of the file system (through the fd of the directory at
    /// `path`): every pending change of every inode becomes durable.
    Syncfs {
        path: String,
    },
    /// A `syncfs` that failed (EIO): under "fsyncgate" it may have dropped
    /// any inode's pending changes, which then never persist.
    SyncfsFail {
        path: String,
    },
    /// A new name for an existing inode (an unchanged file carried).
    Link {
        from: String,
        to: String,
    },
    Exchange {
        a: String,
        b: String,
    },
    Rename {
        from: String,
        to: String,
        replace: bool,
    },
    Unlink {
        path: String,
    },
    Rmdir {
        path: String,
    },
    /// A new symbolic link holding `target` (the symlink layout).
    Symlink {
        path: String,
        target: String,
    },
}

impl ROp {
    /// Whether this is the swap of a sync (exchange or rename).
    pub fn is_swap(&self) -> bool {
        matches!(self, ROp::Exchange { .. } | ROp::Rename { .. })
    }
}

impl std::fmt::Display for ROp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = short;
        match self {
            ROp::Lock { dir } => write!(f, "lock {}", s(dir)),
            ROp::Mkdir { path } => write!(f, "mkdir {}", s(path)),
            ROp::Create { path } => write!(f, "create {}", s(path)),
            ROp::Write { path, data } => write!(f, "write {} ({} B)", s(path), data.len()),
            ROp::Chmod { path, mode } => write!(f, "chmod {} {mode:04o}", s(path)),
            ROp::Chown { path, uid, gid } => {
                let id = |i: &Option<u32>| i.map_or_else(|| "-".to_owned(), |i| i.to_string());
                write!(f, "chown {} {}:{}", s(path), id(uid), id(gid))
            }
            ROp::SetXattr { path, name, value } => {
                write!(f, "setxattr {} {name}={}", s(path), crate::model::show_value(value))
            }
            ROp::FsyncFile { path } => write!(f, "fsync-file {}", s(path)),
            ROp::FsyncDir { path } => write!(f, "fsync-dir {}", s(path)),
            ROp::FsyncFail { path } => write!(f, "FAILED fsync {} (EIO)", s(path)),
            ROp::Syncfs { path } => write!(f, "syncfs via {}", s(path)),
            ROp::SyncfsFail { path } => write!(f, "FAILED syncfs via {} (EIO)", s(path)),
            ROp::Link { from, to } => write!(f, "link {} -> {}", s(from), s(to)),
            ROp::Exchange { a, b } => write!(f, "exchange {} <-> {}", s(a), s(b)),
            ROp::Rename { from, to, replace } => {
                let how = if *replace { "replace" } else { "noreplace" };
                write!(f, "rename({how}) {} -> {}", s(from), s(to))
            }
            ROp::Unlink { path } => write!(f, "unlink {}", s(path)),
            ROp::Rmdir { path } => write!(f, "rmdir {}", s(path)),
            ROp::Symlink { path, target } => write!(f, "symlink {} -> {}", s(path), s(target)),
        }
    }
}

/// A path with every leftover name shortened to its kind (`<stage>`), for
/// messages and for comparing runs whose random names differ.
pub fn short(path: &str) -> String {
    path.split('/')
        .map(|c| {
            if is_leftover(c) {
                let kind = c.trim_start_matches(".durasync-").split('-').next().unwrap_or("leftover");
                format!("<{kind}>")
            } else if is_gen(c) {
                // A generation's name is random, as a leftover's.
                "<gen>".to_owned()
            } else if parse_keep(c).is_some() {
                // A keep entry's name states an inode number, different each run.
                "<keep>".to_owned()
            } else {
                c.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A probe that records every successful mutating call, under a mutex.
///
/// Calls are recorded in `after`, i.e. once they took effect. File writes
/// and fsyncs run on several threads, so two overlapping calls may be
/// recorded in either order; ordering by completion is always a valid
/// linearisation (each effect lies inside its call), and the threads touch
/// distinct files, so any recorded interleaving is one that could happen.
pub struct Recorder {
    prefix: String,
    ops: Mutex<Vec<ROp>>,
    /// A directory whose next fsync fails with EIO (once), recorded as
    /// [`ROp::FsyncFail`].
    fail_fsync_of: Mutex<Option<String>>,
    /// Whether the next `syncfs` fails with EIO (once), recorded as
    /// [`ROp::SyncfsFail`].
    fail_syncfs: Mutex<bool>,
}

impl Recorder {
    /// A recorder for calls anchored at the explored root.
    pub fn new() -> Self {
        Self::under("")
    }

    /// A recorder for calls anchored at `prefix` beneath the explored root.
    pub fn under(prefix: &str) -> Self {
        Recorder {
            prefix: prefix.to_owned(),
            ops: Mutex::new(Vec::new()),
            fail_fsync_of: Mutex::new(None),
            fail_syncfs: Mutex::new(false),
        }
    }

    /// A recorder whose first fsync of the directory `dir` (a recorded
    /// path, `.` for the anchor) fails with EIO.
    pub fn failing_fsync_of(dir: &str) -> Self {
        let r = Self::new();
        *r.fail_fsync_of.lock().unwrap() = Some(dir.to_owned());
        r
    }

    /// A recorder whose first `syncfs` fails with EIO.
    pub fn failing_syncfs() -> Self {
        let r = Self::new();
        *r.fail_syncfs.lock().unwrap() = true;
        r
    }

    /// Everything recorded so far.
    pub fn take(&self) -> Vec<ROp> {
        std::mem::take(&mut *self.ops.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn p(&self, path: &str) -> String {
        match (self.prefix.as_str(), path) {
            ("", p) => p.to_owned(),
            (pre, "." | "") => pre.to_owned(),
            (pre, p) => format!("{pre}/{p}"),
        }
    }
}

impl Probe for Recorder {
    fn before(&self, op: &SysOp<'_>) -> std::io::Result<()> {
        if let SysOp::Syncfs { path } = *op {
            let mut fail = self.fail_syncfs.lock().unwrap_or_else(|p| p.into_inner());
            if *fail {
                *fail = false;
                let path = self.p(path);
                self.ops.lock().unwrap_or_else(|e| e.into_inner()).push(ROp::SyncfsFail { path });
                return Err(std::io::Error::from_raw_os_error(5));
            }
        }
        if let SysOp::FsyncDir { path } = *op {
            let mut fail = self.fail_fsync_of.lock().unwrap_or_else(|p| p.into_inner());
            if fail.as_deref() == Some(path) {
                *fail = None;
                let path = self.p(path);
                self.ops.lock().unwrap_or_else(|e| e.into_inner()).push(ROp::FsyncFail { path });
                return Err(std::io::Error::from_raw_os_error(5));
            }
        }
        Ok(())
    }

    fn after(&self, op: &SysOp<'_>) {
        let p = |s: &str| self.p(s);
        let rop = match *op {
            SysOp::Lock { dir } => ROp::Lock { dir: p(dir) },
            SysOp::Mkdir { path } => ROp::Mkdir { path: p(path) },
            SysOp::Create { path } => ROp::Create { path: p(path) },
            SysOp::Write { path, data } => ROp::Write { path: p(path), data: data.to_vec() },
            SysOp::Chmod { path, mode } => ROp::Chmod { path: p(path), mode },
            SysOp::Chown { path, uid, gid } => ROp::Chown { path: p(path), uid, gid },
            SysOp::SetXattr { path, name, value } => {
                ROp::SetXattr { path: p(path), name: name.to_owned(), value: value.to_vec() }
            }
            SysOp::FsyncFile { path } => ROp::FsyncFile { path: p(path) },
            SysOp::FsyncDir { path } => ROp::FsyncDir { path: p(path) },
            SysOp::Syncfs { path } => ROp::Syncfs { path: p(path) },
            SysOp::Link { from, to } => ROp::Link { from: p(from), to: p(to) },
            SysOp::Exchange { a, b } => ROp::Exchange { a: p(a), b: p(b) },
            SysOp::Rename { from, to, replace } => ROp::Rename { from: p(from), to: p(to), replace },
            SysOp::Unlink { path } => ROp::Unlink { path: p(path) },
            SysOp::Rmdir { path } => ROp::Rmdir { path: p(path) },
            SysOp::Symlink { path, target } => ROp::Symlink { path: p(path), target: target.to_owned() },
        };
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).push(rop);
    }
}

/// The durable sequence of one directory sync, with the random staging name
/// taken out: what must match between the explored trace and the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableSeq {
    /// Files fsynced before the swap, relative to the staging root.
    pub file_fsyncs: BTreeSet<String>,
    /// Unchanged files carried into staging by a link before the swap,
    /// relative to the staging root.
    pub links: BTreeSet<String>,
    /// Directories fsynced before the swap, in order, relative to the
    /// staging root (`.` is the staging root itself).
    pub dir_fsyncs: Vec<String>,
    /// `syncfs` calls before the swap, by the directory whose fd was used
    /// (`.`: the staging root).
    pub syncfs: Vec<String>,
    /// Whether a `syncfs` (if any) was the last flush before the swap, after
    /// every file and directory fsync.
    pub syncfs_last: bool,
    /// `RENAME_EXCHANGE` or `RENAME_NOREPLACE`.
    pub swap: String,
    /// Directories fsynced after the swap (`<parent>` is the target's parent).
    pub after_swap: Vec<String>,
    /// Whether every file fsync completed before the first directory fsync.
    pub files_before_dirs: bool,
    /// Whether the staging root's fsync is the last one before the swap.
    pub root_fsync_last: bool,
    /// How many swaps there were (must be exactly one).
    pub swaps: usize,
}

impl DurableSeq {
    /// Total fsyncs: N + D + 2 for N new or changed files and D new
    /// subdirectories (with a syncfs flush: only the parent's).
    pub fn fsyncs(&self) -> usize {
        self.file_fsyncs.len() + self.dir_fsyncs.len() + self.after_swap.len()
    }

    /// Reduce classified events, in completion order, to a `DurableSeq`.
    pub fn from_events(events: &[Event]) -> DurableSeq {
        let mut seq = DurableSeq {
            file_fsyncs: BTreeSet::new(),
            links: BTreeSet::new(),
            dir_fsyncs: Vec::new(),
            syncfs: Vec::new(),
            syncfs_last: false,
            swap: String::new(),
            after_swap: Vec::new(),
            files_before_dirs: true,
            root_fsync_last: false,
            swaps: 0,
        };
        let mut last_before_swap = None;
        for ev in events {
            match ev {
                Event::Swap(kind) => {
                    seq.swaps += 1;
                    seq.swap = kind.clone();
                }
                Event::Link(p) => {
                    assert_eq!(seq.swaps, 0, "a link after the swap: {p}");
                    seq.links.insert(p.clone());
                }
                Event::FsyncFile(p) if seq.swaps == 0 => {
                    if !seq.dir_fsyncs.is_empty() {
                        seq.files_before_dirs = false;
                    }
                    seq.file_fsyncs.insert(p.clone());
                    last_before_swap = Some(ev);
                }
                Event::FsyncDir(p) if seq.swaps == 0 => {
                    seq.dir_fsyncs.push(p.clone());
                    last_before_swap = Some(ev);
                }
                Event::Syncfs(p) => {
                    assert_eq!(seq.swaps, 0, "a syncfs after the swap: {p}");
                    seq.syncfs.push(p.clone());
                    last_before_swap = Some(ev);
                }
                Event::FsyncFile(p) | Event::FsyncDir(p) => seq.after_swap.push(p.clone()),
            }
        }
        seq.root_fsync_last = matches!(last_before_swap, Some(Event::FsyncDir(p)) if p == ".");
        seq.syncfs_last = matches!(last_before_swap, Some(Event::Syncfs(_)));
        seq
    }

    /// The durable sequence of a recorded sync anchored at the target's parent.
    pub fn from_trace(trace: &[ROp]) -> DurableSeq {
        let events: Vec<Event> = trace
            .iter()
            .filter_map(|op| match op {
                ROp::FsyncFile { path } => Some(Event::FsyncFile(staging_rel(path))),
                ROp::FsyncDir { path } => Some(Event::FsyncDir(staging_rel(path))),
                ROp::Syncfs { path } => Some(Event::Syncfs(staging_rel(path))),
                ROp::Link { to, .. } => Some(Event::Link(staging_rel(to))),
                ROp::Exchange { .. } => Some(Event::Swap("RENAME_EXCHANGE".into())),
                ROp::Rename { replace: false, .. } => Some(Event::Swap("RENAME_NOREPLACE".into())),
                ROp::Rename { replace: true, .. } => Some(Event::Swap("plain rename".into())),
                _ => None,
            })
            .collect();
        DurableSeq::from_events(&events)
    }
}

/// A durable event, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A file of the target linked into staging (the staging-relative name).
    Link(String),
    FsyncFile(String),
    FsyncDir(String),
    /// A `syncfs` through the fd of this (staging-relative) directory.
    Syncfs(String),
    Swap(String),
}

/// `<stage>/a/b` → `a/b`, `<stage>` → `.`, the anchor `.` → `<parent>`.
pub fn staging_rel(path: &str) -> String {
    let mut parts = path.split('/');
    match parts.next() {
        Some(first) if is_leftover(first) => {
            let rest: Vec<&str> = parts.collect();
            if rest.is_empty() { ".".to_owned() } else { rest.join("/") }
        }
        Some(".") | Some("") | None => "<parent>".to_owned(),
        Some(_) => path.to_owned(),
    }
}
