//! The ledger of owed actions: one small file per instance listing the
//! actions owed for changes that are committed (or about to be), so that
//! an agent killed between a change and its action runs the action at its
//! next start.
//!
//! # Ordering (the whole point of this file)
//!
//! 1. **Owe before the commit point.** [`Ledger::owe`] is called by the gate
//!    after the validators accepted the staged tree and *before* the core
//!    marks and swaps it; it returns only once the ledger naming the action
//!    is durable (`durable::write_file`: temporary file, fsync, rename,
//!    directory fsync). So at any crash after the swap, the owed entry is
//!    already on disk. A crash before the swap leaves an entry for a change
//!    that did not happen: the action then runs once more than needed
//!    (at least once, never "lost").
//! 2. **Run only after the commit point.** The runner is handed an action
//!    only after the run that committed the change ended (every commit fsync
//!    returned), or, for entries found at start, after the instance's first
//!    successful run (which leaves every target durable as the plugin wants
//!    it: an unchanged target was compared, a marked one rewritten).
//! 3. **Clear after success.** [`Ledger::done`] removes an entry after its
//!    action succeeded, durably, and only if no change owed it again
//!    meanwhile (a sequence number per entry). A crash before the clear is
//!    durable runs the action again: at least once.
//!
//! The in-memory state and the file change under one mutex, so an `owe`
//! racing a `done` never loses an entry.
//!
//! # Probation records
//!
//! The same file holds the instance's probations (`probation.rs`): a
//! change on probation ([`ProbationRecord`]: root, path, content digest,
//! opened, until) and contents that failed their probe ([`FailedRecord`],
//! at most [`MAX_FAILED`], the oldest forgotten first). A record is one
//! JSON object on its own line (`{"probation":{…}}`, `{"failed":{…}}`); an
//! action name never holds a `"` (`config.rs`), so a line starting with `{`
//! is a record, and one that does not parse as one is refused naming its
//! line, like any other corrupt line. A ledger of names only (before
//! probation existed) reads as before.
//!
//! Ordering: a probation is recorded, durably, by the gate before the
//! swap (like an owed action), so a crash after the swap always finds it;
//! a revert first records the failed digest and owes the root's actions
//! ([`Ledger::fail`]), then reverts (its commit fsync), then closes the
//! probation ([`Ledger::close_probation`]). A crash between them finds the
//! probation still open and decides again from the disk
//! (`durable::previous_of`).

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;

use crate::durable::{self, Options};

/// The largest ledger read back or written. Its content is bounded by the
/// manifest ([`super::config::MAX_HOOKS`] action names of 64 bytes), by
/// [`MAX_PROBATIONS`] and [`MAX_FAILED`] records (a path of at most a few
/// KiB, a digest, times, an output tail of at most [`MAX_FAILED_TAIL`]
/// bytes): well under this; anything larger is not ours.
pub const MAX_LEDGER_BYTES: u64 = 1024 * 1024;
/// The most probations one instance may have open at once (one per
/// synced path a probe covers); a change that would open one more is
/// refused.
pub const MAX_PROBATIONS: usize = 32;
/// The most failed contents remembered per instance (the oldest is
/// forgotten first: its input may then be written, and probed, again).
pub const MAX_FAILED: usize = 16;
/// The most bytes of a probe's output tail kept in a failed record.
pub const MAX_FAILED_TAIL: usize = 512;

/// A change on probation: committed (or about to be), its previous tree
/// kept, its probe not yet passed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbationRecord {
    /// The root.
    pub root: String,
    /// The synced path below the root.
    pub path: String,
    /// The probe that decides it.
    pub probe: String,
    /// `sha256:HEX` of the new contents (`digest::tree_digest`).
    pub digest: String,
    /// When the gate opened it (Unix milliseconds).
    pub opened_ms: u64,
    /// When it ends: the probe must have succeeded by then (Unix ms).
    pub until_ms: u64,
    /// Whether a previous tree is kept to go back to (`false`: the change
    /// created the target).
    pub kept: bool,
}

/// Contents that failed their probe and were reverted: never written
/// again by a later run, until the input changes (a different digest).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailedRecord {
    /// The root.
    pub root: String,
    /// The synced path below the root.
    pub path: String,
    /// The probe that failed.
    pub probe: String,
    /// `sha256:HEX` of the contents that failed.
    pub digest: String,
    /// When it failed (Unix milliseconds).
    pub at_ms: u64,
    /// The end of the probe's last output (at most [`MAX_FAILED_TAIL`] bytes).
    pub tail: String,
}

/// One record line.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
enum Record {
    Probation(ProbationRecord),
    Failed(FailedRecord),
}
/// The ledger file's mode: only the agent's user reads what it owes.
const LEDGER_MODE: u32 = 0o600;

/// The owed actions of one instance.
#[derive(Debug)]
pub struct Ledger {
    dir: OwnedFd,
    file: String,
    state: Mutex<State>,
}

#[derive(Debug, Default, Clone)]
struct State {
    /// Owed action names and the sequence number of their last `owe`.
    owed: BTreeMap<String, u64>,
    seq: u64,
    /// Open probations by (root, path).
    probations: BTreeMap<(String, String), ProbationRecord>,
    /// Failed contents, oldest first.
    failed: Vec<FailedRecord>,
}

/// Why the ledger could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The state directory could not be made or opened.
    #[error("action ledger directory {dir}: {source}")]
    Dir {
        /// The directory.
        dir: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Reading or writing the ledger failed.
    #[error("action ledger {file}: {source}")]
    Io {
        /// The ledger file.
        file: String,
        /// The cause.
        source: durable::Error,
    },
    /// A record would pass one of the ledger's bounds.
    #[error("action ledger {file}: not written: {what}")]
    Full {
        /// The ledger file.
        file: String,
        /// Which bound.
        what: String,
    },
    /// The ledger holds something that is not a list of action names.
    #[error("action ledger {file}: {reason}")]
    Corrupt {
        /// The ledger file.
        file: String,
        /// What is wrong.
        reason: String,
    },
}

impl Ledger {
    /// The ledger of `instance` in the directory `dir` (created if missing),
    /// with what it already owes.
    pub fn open(dir: &Path, instance: &str) -> Result<Ledger, LedgerError> {
        let fd = open_or_create_dir(dir)?;
        // A crash in an earlier ledger write may have left its temporary
        // file (never the ledger itself, which is replaced atomically).
        durable::recover(fd.as_fd(), &Options::default())
            .map_err(|e| LedgerError::Io { file: dir.display().to_string(), source: e })?;
        Ledger::open_at(fd, &file_name(instance))
    }

    /// The ledger in the file `file` of the directory `dir`.
    pub fn open_at(dir: OwnedFd, file: &str) -> Result<Ledger, LedgerError> {
        let limits = durable::ReadLimits { max_bytes: MAX_LEDGER_BYTES, ..durable::ReadLimits::default() };
        let io = |e| LedgerError::Io { file: file.to_owned(), source: e };
        let text = durable::read_file(dir.as_fd(), file, &limits, &durable::Cancel::NEVER).map_err(io)?;
        let mut state = State::default();
        if let Some(bytes) = text {
            // Each line is one name. A line that is not UTF-8 (or holds a
            // control character) is not something this host wrote: refuse
            // the whole ledger, naming the line, rather than drop an owed
            // action silently or run a garbled name. Nothing is rewritten,
            // so the other owed actions stay on disk for when it is fixed.
            for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
                if line.is_empty() {
                    continue;
                }
                let corrupt = |what: &str| LedgerError::Corrupt {
                    file: file.to_owned(),
                    reason: format!(
                        "line {} {what}; fix or remove that line (the other lines are owed actions)",
                        i + 1
                    ),
                };
                let name = std::str::from_utf8(line).map_err(|_| corrupt("is not UTF-8"))?;
                if name.chars().any(char::is_control) {
                    return Err(corrupt("holds a control character"));
                }
                if name.starts_with('{') {
                    match serde_json::from_str::<Record>(name) {
                        Ok(Record::Probation(p)) => {
                            state.probations.insert((p.root.clone(), p.path.clone()), p);
                        }
                        Ok(Record::Failed(f)) => state.failed.push(f),
                        Err(e) => return Err(corrupt(&format!("is not a probation record ({e})"))),
                    }
                    continue;
                }
                if name.contains('"') {
                    return Err(corrupt("is neither an action name nor a record"));
                }
                state.seq += 1;
                state.owed.insert(name.to_owned(), state.seq);
            }
        }
        Ok(Ledger { dir, file: file.to_owned(), state: Mutex::new(state) })
    }

    /// Owe `names`; returns once the ledger naming them is durable. Names
    /// already owed are owed again (their sequence moves on: a `done` for
    /// the earlier change no longer clears them), without a write.
    pub fn owe(&self, names: &[String], opts: &Options<'_>) -> Result<(), LedgerError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // The memory follows the disk, never leads it: the new names are
        // written (durably) from a copy first, and only once that write
        // returned are they owed in memory. A failed write leaves the
        // state as it was, so the caller's retry writes again instead of
        // finding the name "already owed" and committing with nothing on
        // disk (an action lost at the next crash).
        if names.iter().any(|n| !st.owed.contains_key(n)) {
            let mut next = st.clone();
            for n in names {
                next.owed.entry(n.clone()).or_insert(0);
            }
            // Durable before the caller goes on to the swap (see "Ordering").
            self.write(&next, opts)?;
        }
        for name in names {
            st.seq += 1;
            let seq = st.seq;
            st.owed.insert(name.clone(), seq);
        }
        Ok(())
    }

    /// What is owed now, with each entry's sequence number.
    pub fn owed(&self) -> Vec<(String, u64)> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.owed.iter().map(|(n, s)| (n.clone(), *s)).collect()
    }

    /// How many actions are owed.
    pub fn len(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).owed.len()
    }

    /// Whether nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The action `name` owed at sequence `seq` succeeded: clear it durably,
    /// unless it was owed again since (then `false`: it must run again).
    pub fn done(&self, name: &str, seq: u64, opts: &Options<'_>) -> Result<bool, LedgerError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.owed.get(name) != Some(&seq) {
            return Ok(false);
        }
        // Cleared only after the action succeeded; a crash before this write
        // is durable runs the action again (at least once). Memory follows
        // the disk here too: a failed clear leaves it owed (it runs again).
        let mut next = st.clone();
        next.owed.remove(name);
        self.write(&next, opts)?;
        *st = next;
        Ok(true)
    }

    /// Open (or, for a path already on probation, renew with the new
    /// contents' digest and window) the probation `rec`; returns once it is
    /// durable (before the caller's swap: see "Probation records"). Refused
    /// when [`MAX_PROBATIONS`] are open for other paths.
    pub fn open_probation(&self, rec: ProbationRecord, opts: &Options<'_>) -> Result<(), LedgerError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let key = (rec.root.clone(), rec.path.clone());
        if !st.probations.contains_key(&key) && st.probations.len() >= MAX_PROBATIONS {
            return Err(LedgerError::Full {
                file: self.file.clone(),
                what: format!("{MAX_PROBATIONS} probations are open already"),
            });
        }
        let mut next = st.clone();
        next.probations.insert(key, rec);
        self.write(&next, opts)?;
        *st = next;
        Ok(())
    }

    /// The open probation of `root`:`path`, if any.
    pub fn probation(&self, root: &str, path: &str) -> Option<ProbationRecord> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.probations.get(&(root.to_owned(), path.to_owned())).cloned()
    }

    /// Every open probation.
    pub fn probations(&self) -> Vec<ProbationRecord> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.probations.values().cloned().collect()
    }

    /// Close the probation `rec`, durably, unless a later change renewed it
    /// meanwhile (then `false`: the later contents are on probation now).
    pub fn close_probation(&self, rec: &ProbationRecord, opts: &Options<'_>) -> Result<bool, LedgerError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let key = (rec.root.clone(), rec.path.clone());
        if st.probations.get(&key) != Some(rec) {
            return Ok(false);
        }
        let mut next = st.clone();
        next.probations.remove(&key);
        self.write(&next, opts)?;
        *st = next;
        Ok(true)
    }

    /// Remember `failed` (replacing an older record of the same contents,
    /// forgetting the oldest past [`MAX_FAILED`]) and owe `names`, in one
    /// durable write, before the caller reverts (see "Probation records").
    pub fn fail(
        &self,
        mut failed: FailedRecord,
        names: &[String],
        opts: &Options<'_>,
    ) -> Result<(), LedgerError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if failed.tail.len() > MAX_FAILED_TAIL {
            let mut cut = failed.tail.len() - MAX_FAILED_TAIL;
            while !failed.tail.is_char_boundary(cut) {
                cut += 1;
            }
            failed.tail = format!("…{}", &failed.tail[cut..]);
        }
        let mut next = st.clone();
        next.failed
            .retain(|f| !(f.root == failed.root && f.path == failed.path && f.digest == failed.digest));
        next.failed.push(failed);
        let over = next.failed.len().saturating_sub(MAX_FAILED);
        next.failed.drain(..over);
        for n in names {
            next.owed.entry(n.clone()).or_insert(0);
        }
        self.write(&next, opts)?;
        for n in names {
            next.seq += 1;
            let seq = next.seq;
            next.owed.insert(n.clone(), seq);
        }
        *st = next;
        Ok(())
    }

    /// Whether the contents `digest` of `root`:`path` failed their probe.
    pub fn failed(&self, root: &str, path: &str, digest: &str) -> Option<FailedRecord> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.failed.iter().find(|f| f.root == root && f.path == path && f.digest == digest).cloned()
    }

    /// Every remembered failure, oldest first.
    pub fn failures(&self) -> Vec<FailedRecord> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).failed.clone()
    }

    fn write(&self, st: &State, opts: &Options<'_>) -> Result<(), LedgerError> {
        let mut text = String::new();
        for name in st.owed.keys() {
            text.push_str(name);
            text.push('\n');
        }
        let records = st
            .probations
            .values()
            .map(|p| Record::Probation(p.clone()))
            .chain(st.failed.iter().map(|f| Record::Failed(f.clone())));
        for r in records {
            // JSON escapes every control character: one line per record.
            text.push_str(&serde_json::to_string(&r).expect("plain strings and numbers"));
            text.push('\n');
        }
        if text.len() as u64 > MAX_LEDGER_BYTES {
            return Err(LedgerError::Full {
                file: self.file.clone(),
                what: format!("it would pass {MAX_LEDGER_BYTES} bytes"),
            });
        }
        durable::write_file(self.dir.as_fd(), &self.file, text.as_bytes(), Some(LEDGER_MODE), opts)
            .map(drop)
            .map_err(|e| LedgerError::Io { file: self.file.clone(), source: e })
    }
}

/// The ledger's file name for an instance: its name where that is a plain
/// file name, else a digest of it.
fn file_name(instance: &str) -> String {
    let plain = !instance.is_empty()
        && instance.len() <= 128
        && !instance.starts_with('.')
        && instance.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if plain {
        format!("{instance}.owed")
    } else {
        format!("{}.owed", &crate::digest::sha256_hex(instance.as_bytes())[..32])
    }
}

/// The directory `dir`, opened; what is missing of it is created by the
/// core beneath its deepest existing ancestor, so each new directory's
/// entry is durable (fsynced with its parent) before a ledger is written
/// into it: an owed action recorded there survives a power loss.
fn open_or_create_dir(dir: &Path) -> Result<OwnedFd, LedgerError> {
    use rustix::fs::{Mode, OFlags};
    let err = |e: std::io::Error| LedgerError::Dir { dir: dir.display().to_string(), source: e };
    let open = |p: &Path| {
        let p = if p.as_os_str().is_empty() { Path::new(".") } else { p };
        rustix::fs::open(p, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
    };
    let mut existing = dir;
    let mut missing = Vec::new();
    let anchor = loop {
        match open(existing) {
            Ok(fd) => break fd,
            Err(rustix::io::Errno::NOENT) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    missing.push(name);
                    existing = parent;
                }
                _ => return Err(err(rustix::io::Errno::NOENT.into())),
            },
            Err(e) => return Err(err(e.into())),
        }
    };
    if missing.is_empty() {
        return Ok(anchor);
    }
    let rel = missing.iter().rev().map(|n| n.to_str()).collect::<Option<Vec<_>>>().ok_or_else(|| {
        err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "the directory's name is not UTF-8"))
    })?;
    durable::create_dirs_beneath(anchor.as_fd(), &rel.join("/"), &Options::default())
        .map_err(|e| LedgerError::Io { file: dir.display().to_string(), source: e })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_directory_that_is_missing_is_created_with_its_parents_and_a_file_in_its_way_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state/actions");
        let l = Ledger::open(&dir, "app").unwrap();
        assert!(l.is_empty());
        assert!(dir.is_dir());
        // Opened again: the directory is there, nothing is created.
        Ledger::open(&dir, "app").unwrap();
        std::fs::write(tmp.path().join("file"), "x").unwrap();
        let err = Ledger::open(&tmp.path().join("file/actions"), "app").unwrap_err();
        assert!(err.to_string().contains("file/actions"), "{err}");
    }

    #[test]
    fn a_failed_owe_leaves_nothing_owed_in_memory_so_its_retry_writes_again() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("actions");
        std::fs::create_dir(&dir).unwrap();
        let fd = rustix::fs::open(&dir, rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY, 0.into())
            .unwrap();
        let l = Ledger::open_at(fd, "app.owed").unwrap();
        // The directory is gone: every write fails (ENOENT), as a
        // read-only or immutable state dir would make it fail.
        std::fs::remove_dir(&dir).unwrap();
        let o = Options::default();
        assert!(l.owe(&["reload".into()], &o).is_err());
        assert!(l.is_empty(), "owed in memory though never written: {:?}", l.owed());
        // The retry writes again (and fails again) instead of finding the
        // name owed and letting the change commit with nothing on disk.
        assert!(l.owe(&["reload".into()], &o).is_err());
        assert!(l.is_empty());
    }

    #[test]
    fn a_ledger_line_that_is_not_utf8_is_refused_naming_its_line() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(file_name("app")), b"reload\n\xff\xfe\n").unwrap();
        let err = Ledger::open(tmp.path(), "app").unwrap_err().to_string();
        assert!(err.contains("line 2 is not UTF-8"), "{err}");
        // Fixed by hand: the next open reads the owed action.
        std::fs::write(tmp.path().join(file_name("app")), b"reload\n").unwrap();
        let l = Ledger::open(tmp.path(), "app").unwrap();
        assert_eq!(l.owed().into_iter().map(|(n, _)| n).collect::<Vec<_>>(), ["reload"]);
    }

    #[test]
    fn owed_actions_survive_a_reopen_and_a_reowed_one_is_not_cleared_by_an_old_done() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Ledger::open(tmp.path(), "app").unwrap();
        let o = Options::default();
        l.owe(&["reload".into(), "notify".into()], &o).unwrap();
        let seq = l.owed().into_iter().find(|(n, _)| n == "reload").unwrap().1;
        // Owed again by a later change while it runs: the old run's success does not clear it.
        l.owe(&["reload".into()], &o).unwrap();
        assert!(!l.done("reload", seq, &o).unwrap());
        let again = Ledger::open(tmp.path(), "app").unwrap();
        let names: Vec<String> = again.owed().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["notify", "reload"]);
        let (name, seq) = again.owed().remove(0);
        assert!(again.done(&name, seq, &o).unwrap());
        assert_eq!(std::fs::read_to_string(tmp.path().join("app.owed")).unwrap(), "reload\n");
        assert_eq!(file_name("a/b"), format!("{}.owed", &file_name_digest("a/b")));
    }

    fn file_name_digest(s: &str) -> String {
        crate::digest::sha256_hex(s.as_bytes())[..32].to_owned()
    }

    fn probation(path: &str, digest: &str) -> ProbationRecord {
        ProbationRecord {
            root: "conf".into(),
            path: path.into(),
            probe: "web".into(),
            digest: digest.into(),
            opened_ms: 1_000,
            until_ms: 301_000,
            kept: true,
        }
    }

    fn failed(digest: &str, tail: &str) -> FailedRecord {
        FailedRecord {
            root: "conf".into(),
            path: "app".into(),
            probe: "web".into(),
            digest: digest.into(),
            at_ms: 2_000,
            tail: tail.into(),
        }
    }

    #[test]
    fn probations_and_failures_survive_a_reopen_beside_owed_actions() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Ledger::open(tmp.path(), "app").unwrap();
        let o = Options::default();
        l.owe(&["reload".into()], &o).unwrap();
        l.open_probation(probation("app", "sha256:aa"), &o).unwrap();
        // A control character in a tail stays on its line (JSON escapes it).
        l.fail(failed("sha256:bb", "bad\nthing"), &["notify".into()], &o).unwrap();
        let again = Ledger::open(tmp.path(), "app").unwrap();
        assert_eq!(again.probation("conf", "app"), Some(probation("app", "sha256:aa")));
        assert_eq!(again.failed("conf", "app", "sha256:bb"), Some(failed("sha256:bb", "bad\nthing")));
        assert_eq!(again.failed("conf", "app", "sha256:aa"), None);
        let names: Vec<String> = again.owed().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["notify", "reload"]);
        let text = std::fs::read_to_string(tmp.path().join("app.owed")).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        // Closed only as recorded: a renewed probation is not closed by the old record.
        again.open_probation(probation("app", "sha256:cc"), &o).unwrap();
        assert!(!again.close_probation(&probation("app", "sha256:aa"), &o).unwrap());
        assert!(again.close_probation(&probation("app", "sha256:cc"), &o).unwrap());
        assert!(Ledger::open(tmp.path(), "app").unwrap().probations().is_empty());
    }

    #[test]
    fn an_old_ledger_of_action_names_still_reads() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("app.owed"), b"reload\nSIGHUP\n").unwrap();
        let l = Ledger::open(tmp.path(), "app").unwrap();
        assert_eq!(l.len(), 2);
        assert!(l.probations().is_empty() && l.failures().is_empty());
    }

    #[test]
    fn a_corrupt_record_line_is_refused_naming_its_line() {
        let tmp = tempfile::tempdir().unwrap();
        let good = serde_json::to_string(&Record::Probation(probation("app", "sha256:aa"))).unwrap();
        for (text, line, what) in [
            (format!("reload\n{}\n", &good[..good.len() - 2]), 2, "is not a probation record"),
            (format!("{good}\n{{\"probation\":{{\"root\":\"c\"}}}}\n"), 2, "is not a probation record"),
            (format!("{good}\n{{\"unknown\":{{}}}}\n"), 2, "is not a probation record"),
            ("reload\nre\"load\n".to_owned(), 2, "is neither an action name nor a record"),
        ] {
            std::fs::write(tmp.path().join("app.owed"), &text).unwrap();
            let err = Ledger::open(tmp.path(), "app").unwrap_err().to_string();
            assert!(err.contains(&format!("line {line} {what}")), "{text}: {err}");
        }
    }

    #[test]
    fn failures_are_bounded_the_oldest_forgotten_and_tails_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Ledger::open(tmp.path(), "app").unwrap();
        let o = Options::default();
        for i in 0..MAX_FAILED + 3 {
            l.fail(failed(&format!("sha256:{i:02}"), &"x".repeat(MAX_FAILED_TAIL * 2)), &[], &o).unwrap();
        }
        let kept = Ledger::open(tmp.path(), "app").unwrap().failures();
        assert_eq!(kept.len(), MAX_FAILED);
        assert_eq!(kept[0].digest, "sha256:03");
        assert!(kept.iter().all(|f| f.tail.len() <= MAX_FAILED_TAIL + "…".len()));
        // The same contents failing again replace their record.
        l.fail(failed("sha256:05", "again"), &[], &o).unwrap();
        assert_eq!(l.failures().len(), MAX_FAILED);
        assert_eq!(l.failed("conf", "app", "sha256:05").unwrap().tail, "again");
    }

    #[test]
    fn probations_are_bounded_per_instance() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Ledger::open(tmp.path(), "app").unwrap();
        let o = Options::default();
        for i in 0..MAX_PROBATIONS {
            l.open_probation(probation(&format!("p{i}"), "sha256:aa"), &o).unwrap();
        }
        let err = l.open_probation(probation("one-more", "sha256:aa"), &o).unwrap_err();
        assert!(err.to_string().contains("probations are open already"), "{err}");
        // Renewing an open one is not one more.
        l.open_probation(probation("p0", "sha256:bb"), &o).unwrap();
    }
}
