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

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;

use crate::durable::{self, Options};

/// The largest ledger read back (a few names; anything larger is not ours).
pub const MAX_LEDGER_BYTES: u64 = 64 * 1024;
/// The ledger file's mode: only the agent's user reads what it owes.
const LEDGER_MODE: u32 = 0o600;

/// The owed actions of one instance.
#[derive(Debug)]
pub struct Ledger {
    dir: OwnedFd,
    file: String,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Owed action names and the sequence number of their last `owe`.
    owed: BTreeMap<String, u64>,
    seq: u64,
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
        let err = |e: std::io::Error| LedgerError::Dir { dir: dir.display().to_string(), source: e };
        std::fs::create_dir_all(dir).map_err(err)?;
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| err(e.into()))?;
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
        let fresh: Vec<&String> = names.iter().filter(|n| !st.owed.contains_key(*n)).collect();
        if !fresh.is_empty() {
            let mut listed: Vec<&str> = st.owed.keys().map(String::as_str).collect();
            listed.extend(fresh.iter().map(|n| n.as_str()));
            listed.sort_unstable();
            listed.dedup();
            // Durable before the caller goes on to the swap (see "Ordering").
            self.write(listed.into_iter(), opts)?;
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
        self.write(st.owed.keys().map(String::as_str).filter(|n| *n != name), opts)?;
        st.owed.remove(name);
        Ok(true)
    }

    fn write<'n>(&self, names: impl Iterator<Item = &'n str>, opts: &Options<'_>) -> Result<(), LedgerError> {
        let mut text = String::new();
        for name in names {
            text.push_str(name);
            text.push('\n');
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
        use sha2::Digest;
        format!("{}.owed", &hex::encode(sha2::Sha256::digest(instance.as_bytes()))[..32])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(s.as_bytes()))[..32].to_owned()
    }
}
