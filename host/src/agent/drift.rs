//! Drift: a target an instance wrote, changed by something other than
//! durasync (a person's `echo x >> tls.crt`, another tool), seen with
//! inotify, reported, and (`drift = "repair"`, the default) written back by
//! running the instance at once.
//!
//! What is watched: after each run, every target the instance has written
//! (each `sync` directory with all its subdirectories, each `write-file`
//! file) in its `rw` roots; a target it removed is dropped. Not the rest of
//! a root: what the plugin never wrote is not its desired state. A target's
//! parent is watched for events naming the target only (it is removed,
//! moved or replaced).
//!
//! How durasync's own writes never count (the exact rule):
//! - Names durasync gives its own entries ([`names::is_reserved`]: staging,
//!   temporary and trash siblings, the lock file, the unsynced marker, a
//!   kept previous tree) never count, whenever they change.
//! - Everything else an instance's own run does happens *during* that run.
//!   The agent's loop is the only reader of the drift inotify queue, and it
//!   drains the queue when the run's `Done` arrives, before it marks the
//!   instance idle: every event of the run's system calls (they returned
//!   before the run thread sent `Done`) is in the kernel's queue by then, so
//!   each is classified as a run-window event. A run-window event is kept
//!   only when its target is one the run did not change (an `unchanged`
//!   target, or one the run did not touch): that is the re-check of the
//!   run's own result. An event inside a target the run created, replaced
//!   or removed cannot be told apart from the run's own writes and is
//!   dropped; a change someone makes there between that target's commit and
//!   the end of the run is left to the next run.
//! - `RENAME_EXCHANGE` moves the watched inode of a replaced directory aside
//!   (it becomes the old tree, then is removed, and its watch ends). After
//!   every run, and after every report, the instance's watches are armed
//!   again from the paths, so they follow the new inodes.
//!
//! Bounds: [`MAX_WATCHED_DIRS`] directories and [`MAX_TARGETS`] targets per
//! instance (beyond them: a warning, and the rest is seen only by the next
//! run); [`MAX_REPORT_PATHS`] paths per report (and a count of the rest); a
//! burst of events is one report ([`Drift::settle`], [`Drift::max_delay`]),
//! and drift starts at most one run per [`Drift::min_gap`]. The kernel's
//! queue overflowing (`IN_Q_OVERFLOW`) is drift of every watched target of
//! every instance.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::{Instant, SystemTime};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use super::config::Drift;
use crate::durable::names;
use crate::runtime::Manifest;
use crate::services::{Ended, Op, Operation};

/// The most directories one instance's drift watch holds. Each is one
/// kernel inotify watch (about 1 KiB of kernel memory, and the node-wide
/// `fs.inotify.max_user_watches` is shared by every program); the trees
/// durasync writes (certificates, static pod revisions) hold a few dozen.
pub const MAX_WATCHED_DIRS: usize = 1024;
/// The most targets (synced directories, written files) tracked per
/// instance: a plugin that writes more has its first ones watched.
pub const MAX_TARGETS: usize = 1024;
/// The most paths one drift report names (log line, `/status`); the rest
/// are counted.
pub const MAX_REPORT_PATHS: usize = 16;

/// What is watched for drift: every change of an entry's contents, mode or
/// name. `MODIFY` as well as `CLOSE_WRITE`: a writer that keeps a file open
/// is seen too (a burst is coalesced into one report anyway).
fn mask() -> WatchFlags {
    WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::MOVED_TO
        | WatchFlags::MOVED_FROM
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::ONLYDIR
        | WatchFlags::DONT_FOLLOW
        | WatchFlags::EXCL_UNLINK
}

/// A target an instance wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A directory replaced by `sync`: everything inside counts.
    Dir,
    /// A file replaced by `write-file`.
    File,
}

/// What one instance's subscription to one watched directory counts.
#[derive(Debug, Clone, Default)]
struct Filter {
    /// Inside a synced tree: every entry counts, for this target.
    all: Option<Arc<Path>>,
    /// Entries by name that are targets (or contain one).
    names: BTreeMap<OsString, Arc<Path>>,
}

struct Watched {
    dir: PathBuf,
    subs: BTreeMap<PathBuf, Filter>,
}

/// One drift event, classified: which instance, which target, which path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seen {
    /// `path` of `target` of instance `instance` changed.
    Path {
        /// The instance (its manifest file).
        instance: PathBuf,
        /// The target it belongs to.
        target: Arc<Path>,
        /// The changed entry.
        path: PathBuf,
    },
    /// The kernel queue overflowed: anything may have changed.
    Overflow,
}

/// The agent's drift watch: one inotify instance for every instance's
/// targets, read by the agent's loop only (see the module docs for why);
/// a doorbell thread tells the loop when there is something to read.
pub(super) struct Watches {
    fd: Arc<OwnedFd>,
    by_wd: HashMap<i32, Watched>,
    buf: Vec<MaybeUninit<u8>>,
    ack: SyncSender<()>,
}

impl Watches {
    /// A non-blocking inotify instance and its doorbell thread, which sends
    /// `ready()` to `tx` when events wait and then waits for [`Self::ack`].
    pub(super) fn start<E: Send + 'static>(
        tx: SyncSender<E>,
        ready: impl Fn() -> E + Send + 'static,
    ) -> std::io::Result<Watches> {
        let fd = Arc::new(inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?);
        let (ack, acked): (SyncSender<()>, Receiver<()>) = std::sync::mpsc::sync_channel(1);
        let bell_fd = fd.clone();
        crate::spawn::spawn_traced("drift".into(), move || {
            loop {
                let mut fds = [rustix::event::PollFd::new(&*bell_fd, rustix::event::PollFlags::IN)];
                match rustix::event::poll(&mut fds, None) {
                    Ok(_) => {}
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        tracing::error!("polling the drift watch failed, drift is no longer seen: {e}");
                        return;
                    }
                }
                if tx.send(ready()).is_err() || acked.recv().is_err() {
                    return;
                }
            }
        })?;
        Ok(Watches { fd, by_wd: HashMap::new(), buf: vec![MaybeUninit::uninit(); 64 * 1024], ack })
    }

    /// The loop drained the queue after a doorbell: the bell may ring again.
    pub(super) fn ack(&self) {
        let _ = self.ack.try_send(());
    }

    /// Read every event waiting (never blocks) and classify it.
    pub(super) fn drain(&mut self) -> Vec<Seen> {
        let mut out = Vec::new();
        let mut gone = Vec::new();
        let mut reader = inotify::Reader::new(&*self.fd, &mut self.buf);
        loop {
            let ev = match reader.next() {
                Ok(ev) => ev,
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => break,
                Err(e) => {
                    tracing::error!("reading drift events failed: {e}");
                    break;
                }
            };
            let flags = ev.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                out.push(Seen::Overflow);
                continue;
            }
            if flags.contains(ReadFlags::IGNORED) {
                gone.push(ev.wd());
                continue;
            }
            let Some(name) = ev.file_name() else { continue };
            let name = OsStr::from_bytes(name.to_bytes());
            if name.to_str().is_some_and(names::is_reserved) {
                continue;
            }
            let Some(w) = self.by_wd.get(&ev.wd()) else { continue };
            for (instance, f) in &w.subs {
                let target = f.names.get(name).or(f.all.as_ref());
                if let Some(target) = target {
                    out.push(Seen::Path {
                        instance: instance.clone(),
                        target: target.clone(),
                        path: w.dir.join(name),
                    });
                }
            }
        }
        for wd in gone {
            self.by_wd.remove(&wd);
        }
        out
    }

    /// Watch exactly `targets` for `instance` (none: stop watching it).
    /// Returns how many directories could not be watched (over
    /// [`MAX_WATCHED_DIRS`], or refused by the kernel).
    pub(super) fn arm(&mut self, instance: &Path, targets: &BTreeMap<PathBuf, Kind>) -> usize {
        let (desired, mut missed) = plan(targets);
        let held: Vec<i32> =
            self.by_wd.iter().filter(|(_, w)| w.subs.contains_key(instance)).map(|(wd, _)| *wd).collect();
        for wd in &held {
            if let Some(w) = self.by_wd.get_mut(wd) {
                w.subs.remove(instance);
            }
        }
        // Added before the old ones are removed: a directory whose inode is
        // still watched gets the same descriptor back and is never unwatched.
        for (dir, filter) in desired {
            match inotify::add_watch(&*self.fd, &dir, mask()) {
                Ok(wd) => {
                    let w = self
                        .by_wd
                        .entry(wd)
                        .or_insert_with(|| Watched { dir: dir.clone(), subs: BTreeMap::new() });
                    w.dir = dir;
                    w.subs.insert(instance.to_path_buf(), filter);
                }
                Err(e) => {
                    missed += 1;
                    tracing::debug!("cannot watch {} for drift: {e}", dir.display());
                }
            }
        }
        let empty: Vec<i32> =
            self.by_wd.iter().filter(|(_, w)| w.subs.is_empty()).map(|(wd, _)| *wd).collect();
        for wd in empty {
            self.by_wd.remove(&wd);
            let _ = inotify::remove_watch(self.fd.as_fd(), wd);
        }
        missed
    }

    /// How many directories are watched, for any instance.
    #[cfg(test)]
    fn watched(&self) -> usize {
        self.by_wd.len()
    }
}

/// The directories to watch for `targets`, each with what counts there,
/// and how many were left out over [`MAX_WATCHED_DIRS`].
fn plan(targets: &BTreeMap<PathBuf, Kind>) -> (BTreeMap<PathBuf, Filter>, usize) {
    let mut out: BTreeMap<PathBuf, Filter> = BTreeMap::new();
    let mut missed = 0;
    for (target, kind) in targets {
        let key: Arc<Path> = Arc::from(target.as_path());
        if let (Some(parent), Some(name)) = (target.parent(), target.file_name()) {
            if out.len() < MAX_WATCHED_DIRS || out.contains_key(parent) {
                out.entry(parent.to_path_buf()).or_default().names.insert(name.to_owned(), key.clone());
            } else {
                missed += 1;
            }
        }
        if *kind == Kind::File {
            continue;
        }
        // The tree, breadth first (shallow directories first when the
        // bound cuts it); symbolic links and durasync's own entries are
        // not followed.
        let mut queue = std::collections::VecDeque::from([target.clone()]);
        while let Some(dir) = queue.pop_front() {
            if out.len() >= MAX_WATCHED_DIRS && !out.contains_key(&dir) {
                missed += 1 + queue.len();
                break;
            }
            let f = out.entry(dir.clone()).or_default();
            f.all.get_or_insert_with(|| key.clone());
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                let reserved = e.file_name().to_str().is_some_and(names::is_reserved);
                if !reserved && e.file_type().is_ok_and(|t| t.is_dir()) {
                    queue.push_back(e.path());
                }
            }
        }
    }
    (out, missed)
}

/// The host paths a run's operations changed (created, replaced, removed,
/// exchanged; a failure counts, as it may have changed something), and the
/// instance's targets after it: `sync` adds a directory, `write-file` a
/// file, `remove` drops one.
pub(super) fn apply_run(
    manifest: &Manifest,
    ops: &[Operation],
    targets: &mut BTreeMap<PathBuf, Kind>,
) -> BTreeSet<PathBuf> {
    let mut changed = BTreeSet::new();
    for op in ops {
        let Some(root) = manifest.roots.get(&op.root) else { continue };
        let host = |p: &str| {
            let p = p.trim();
            if p.is_empty() || p == "." { root.path.clone() } else { root.path.join(p) }
        };
        let paths: Vec<PathBuf> = match op.op {
            Op::Exchange => op.path.split(" <-> ").map(host).collect(),
            _ => vec![host(&op.path)],
        };
        if !matches!(op.outcome, Ended::Unchanged | Ended::Fsynced) {
            changed.extend(paths.iter().cloned());
        }
        let path = paths.into_iter().next().expect("one path at least");
        match (op.op, op.outcome) {
            (_, Ended::Failed) => {}
            (Op::Sync, _) if targets.len() < MAX_TARGETS || targets.contains_key(&path) => {
                targets.insert(path, Kind::Dir);
            }
            (Op::WriteFile, _) if targets.len() < MAX_TARGETS || targets.contains_key(&path) => {
                targets.insert(path, Kind::File);
            }
            (Op::Remove, _) => {
                targets.retain(|t, _| !t.starts_with(&path));
            }
            _ => {}
        }
    }
    changed
}

/// One instance's drift: what it watches, what is waiting to be reported,
/// and what was seen (for `/status`).
#[derive(Debug, Default)]
pub(super) struct State {
    /// The targets it wrote.
    pub(super) targets: BTreeMap<PathBuf, Kind>,
    /// Directories that could not be watched at the last arming.
    pub(super) unwatched: usize,
    /// Events that came during its run, by target (checked at its end).
    during_run: BTreeMap<Arc<Path>, Vec<PathBuf>>,
    /// The queue overflowed during its run.
    overflow_during_run: bool,
    /// Waiting to be reported.
    pending: Option<Pending>,
    /// Reports so far.
    pub(super) seen: u64,
    /// The last report's paths, the count of the others, and when.
    pub(super) last: Option<(Vec<PathBuf>, u64, SystemTime)>,
    /// A report not yet followed by a successful run that started after it
    /// (what `readyz = true` fails on).
    pub(super) unrepaired: Option<Instant>,
    /// When a run drift started last began (for [`Drift::min_gap`]).
    pub(super) last_drift_run: Option<Instant>,
}

/// The most paths beyond [`MAX_REPORT_PATHS`] a report tells apart to
/// count them; past it, each further event counts as one more path.
const MAX_COUNTED_PATHS: usize = 4096;

#[derive(Debug)]
struct Pending {
    paths: BTreeSet<PathBuf>,
    /// Paths beyond the reported ones, to count each once.
    extra: BTreeSet<PathBuf>,
    /// Events past [`MAX_COUNTED_PATHS`].
    more: u64,
    first: Instant,
    latest: Instant,
}

impl State {
    /// A drift event for this instance (`running`: its run is in flight).
    pub(super) fn seen(&mut self, target: Arc<Path>, path: PathBuf, running: bool, now: Instant) {
        if running {
            let paths = self.during_run.entry(target).or_default();
            if paths.len() < MAX_REPORT_PATHS {
                paths.push(path);
            }
        } else {
            self.add_pending([path], now);
        }
    }

    /// The queue overflowed: every watched target may have changed.
    pub(super) fn overflowed(&mut self, running: bool, now: Instant) {
        if running {
            self.overflow_during_run = true;
        } else {
            let all: Vec<PathBuf> = self.targets.keys().cloned().collect();
            self.add_pending(all, now);
        }
    }

    fn add_pending(&mut self, paths: impl IntoIterator<Item = PathBuf>, now: Instant) {
        let p = self.pending.get_or_insert_with(|| Pending {
            paths: BTreeSet::new(),
            extra: BTreeSet::new(),
            more: 0,
            first: now,
            latest: now,
        });
        p.latest = now;
        for path in paths {
            if p.paths.contains(&path) || p.extra.contains(&path) {
                continue;
            }
            if p.paths.len() < MAX_REPORT_PATHS {
                p.paths.insert(path);
            } else if p.extra.len() < MAX_COUNTED_PATHS {
                p.extra.insert(path);
            } else {
                p.more = p.more.saturating_add(1);
            }
        }
    }

    /// The run ended having changed `changed`: what came during it is kept
    /// only for targets it did not change (see the module docs).
    pub(super) fn run_ended(&mut self, changed: &BTreeSet<PathBuf>, now: Instant) {
        let during = std::mem::take(&mut self.during_run);
        let overflow = std::mem::take(&mut self.overflow_during_run);
        let ours = |t: &Path| changed.iter().any(|c| t.starts_with(c) || c.starts_with(t));
        let kept: Vec<PathBuf> =
            during.into_iter().filter(|(t, _)| !ours(t)).flat_map(|(_, paths)| paths).collect();
        if !kept.is_empty() {
            self.add_pending(kept, now);
        }
        if overflow {
            let all: Vec<PathBuf> = self.targets.keys().filter(|t| !ours(t)).cloned().collect();
            if !all.is_empty() {
                self.add_pending(all, now);
            }
        }
    }

    /// Drop what is waiting (or came during a run) inside `target` or on
    /// its name: durasync changed it outside a run (a probation's revert).
    pub(super) fn forget_under(&mut self, target: &Path) {
        let inside = |p: &Path| p.starts_with(target);
        if let Some(p) = &mut self.pending {
            p.paths.retain(|x| !inside(x));
            p.extra.retain(|x| !inside(x));
            if p.paths.is_empty() && p.extra.is_empty() && p.more == 0 {
                self.pending = None;
            }
        }
        self.during_run.retain(|t, _| !inside(t));
    }

    /// When the waiting events are to be reported.
    pub(super) fn report_at(&self, cfg: &Drift) -> Option<Instant> {
        self.pending.as_ref().map(|p| (p.latest + cfg.settle).min(p.first + cfg.max_delay))
    }

    /// Report the waiting events if their time has come: the paths and
    /// the count of the others.
    pub(super) fn take_due(&mut self, cfg: &Drift, now: Instant) -> Option<(Vec<PathBuf>, u64)> {
        if self.report_at(cfg)? > now {
            return None;
        }
        let p = self.pending.take()?;
        let paths: Vec<PathBuf> = p.paths.into_iter().collect();
        let more = p.more.saturating_add(p.extra.len() as u64);
        self.seen += 1;
        self.last = Some((paths.clone(), more, SystemTime::now()));
        self.unrepaired.get_or_insert(now);
        Some((paths, more))
    }

    /// Stop watching (drift off, or the instance went): what was waiting
    /// is dropped.
    pub(super) fn clear_pending(&mut self) {
        self.pending = None;
        self.during_run.clear();
        self.overflow_during_run = false;
    }
}

/// `a, b, c (and 3 more)`.
pub(super) fn list_paths(paths: &[PathBuf], more: u64) -> String {
    let mut s: String = paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    if more > 0 {
        s.push_str(&format!(" (and {more} more)"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn drain_until(w: &mut Watches, want: impl Fn(&[Seen]) -> bool) -> Vec<Seen> {
        let mut all = Vec::new();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            all.extend(w.drain());
            if want(&all) {
                return all;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        all
    }

    fn watches() -> (Watches, Receiver<()>) {
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        (Watches::start(tx, || ()).unwrap(), rx)
    }

    #[test]
    fn a_write_inside_a_synced_tree_is_seen_and_durasync_s_own_names_are_not() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("secrets/tls");
        std::fs::create_dir_all(target.join("sub")).unwrap();
        std::fs::write(target.join("sub/a"), "a").unwrap();
        let (mut w, _rx) = watches();
        let me = PathBuf::from("/agent.d/a.toml");
        let targets = BTreeMap::from([(target.clone(), Kind::Dir)]);
        assert_eq!(w.arm(&me, &targets), 0);
        assert_eq!(w.watched(), 3, "the parent, the target and its subdirectory");
        std::fs::write(tmp.path().join("secrets/.durasync.lock"), "").unwrap();
        std::fs::create_dir(tmp.path().join("secrets/.durasync-stage-0123456789abcdef")).unwrap();
        std::fs::write(tmp.path().join("secrets/unrelated"), "x").unwrap();
        std::fs::write(target.join("sub/a"), "changed").unwrap();
        let seen = drain_until(&mut w, |s| !s.is_empty());
        assert!(!seen.is_empty());
        for s in &seen {
            let Seen::Path { instance, target: t, path } = s else { panic!("{s:?}") };
            assert_eq!(instance, &me);
            assert_eq!(&**t, target.as_path());
            assert_eq!(path, &target.join("sub/a"), "only the write inside the tree counts");
        }
        // Disarmed: nothing more is seen, and nothing stays watched.
        assert_eq!(w.arm(&me, &BTreeMap::new()), 0);
        assert_eq!(w.watched(), 0);
        std::fs::write(target.join("sub/a"), "again").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(w.drain().iter().all(|s| !matches!(s, Seen::Path { .. })));
    }

    #[test]
    fn a_tree_larger_than_the_watch_bound_is_watched_up_to_it_and_the_rest_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("t");
        for i in 0..(MAX_WATCHED_DIRS + 10) {
            std::fs::create_dir_all(target.join(format!("d{i}"))).unwrap();
        }
        let (mut w, _rx) = watches();
        let missed = w.arm(Path::new("/a.toml"), &BTreeMap::from([(target, Kind::Dir)]));
        assert_eq!(w.watched(), MAX_WATCHED_DIRS);
        assert_eq!(missed, 12, "the tree holds the bound + 10 + 1 (itself) + 1 (its parent) directories");
    }

    #[test]
    fn events_during_a_run_count_only_for_targets_the_run_did_not_change() {
        let t0 = Instant::now();
        let cfg = Drift::default();
        let mut s = State::default();
        let a: Arc<Path> = Arc::from(Path::new("/r/secrets/a"));
        let b: Arc<Path> = Arc::from(Path::new("/r/secrets/b"));
        s.seen(a.clone(), "/r/secrets/a/tls.crt".into(), true, t0);
        s.seen(b.clone(), "/r/secrets/b/tls.crt".into(), true, t0);
        assert_eq!(s.report_at(&cfg), None, "nothing is reported while the run is in flight");
        s.run_ended(&BTreeSet::from([PathBuf::from("/r/secrets/a")]), t0);
        let (paths, more) = s.take_due(&cfg, t0 + cfg.settle).unwrap();
        assert_eq!(paths, [PathBuf::from("/r/secrets/b/tls.crt")]);
        assert_eq!((more, s.seen), (0, 1));
    }

    #[test]
    fn a_burst_is_one_report_after_it_settles_or_at_its_longest_delay() {
        let t0 = Instant::now();
        let cfg = Drift::default();
        let mut s = State::default();
        let t: Arc<Path> = Arc::from(Path::new("/r/t"));
        let mut now = t0;
        for i in 0..1000 {
            now = t0 + Duration::from_millis(i / 4);
            s.seen(t.clone(), format!("/r/t/f{}", i % 40).into(), false, now);
            assert!(s.take_due(&cfg, now).is_none() || now >= t0 + cfg.max_delay);
        }
        assert_eq!(s.report_at(&cfg), Some(now + cfg.settle));
        let (paths, more) = s.take_due(&cfg, now + cfg.settle).unwrap();
        assert_eq!((paths.len(), more), (MAX_REPORT_PATHS, 40 - MAX_REPORT_PATHS as u64));
        assert_eq!(s.seen, 1);
        // A stream that never settles is still reported at its longest delay.
        for i in 0..100u64 {
            s.seen(
                t.clone(),
                "/r/t/x".into(),
                false,
                t0 + Duration::from_secs(10) + Duration::from_millis(i * 10),
            );
        }
        assert_eq!(s.report_at(&cfg), Some(t0 + Duration::from_secs(10) + cfg.max_delay));
    }
}
