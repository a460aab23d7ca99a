//! Verified pins, remembered: a warm start of a plugin whose component file
//! is unchanged neither reads nor hashes it.
//!
//! After a component file's bytes were read and found to hash to its
//! manifest's pinned sha256, a record is written in the private cache,
//! keyed by the file's device and inode, holding its size, its modification
//! time, its change time and the sha256. A later load whose `stat` of the
//! path gives the same device, inode, size, mtime and ctime, for the same
//! pinned sha256, skips reading and hashing and loads the precompiled
//! artifact that the cache holds for that sha256.
//!
//! Why this cannot be fooled by replacing the file: any write to the inode
//! (or a chmod, or a rename onto it creating a new inode) changes its ctime,
//! which no system call lets a process set back (`utimensat` sets mtime and
//! atime, and ctime to now); a new file under the name is another inode or
//! has another ctime. The record is only written when the file's metadata
//! was the same before and after its bytes were read through one fd, so
//! the sha256 it names belongs to exactly that state. Records live in the
//! cache directory, under the same rules as the compiled artifacts (owned
//! by this user, writable by no one else, never a link).
//!
//! Not promised: a file system whose timestamps cannot tell two writes
//! apart within its granularity (a rewrite of the same inode to the same
//! size within one timestamp tick) would reuse the record; on the local
//! file systems durasync supports ctime has nanosecond fields and the
//! kernel's tick (at most 10 ms) bounds that window. Someone who can write
//! the component file can, in any case, also write the manifest beside it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::artifact::trusted;

/// What identifies one state of a file: where it lives and when it last
/// changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileState {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileState {
    /// The state `meta` describes.
    pub(crate) fn of(meta: &std::fs::Metadata) -> FileState {
        FileState {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    fn line(&self, sha256: &str) -> String {
        format!(
            "{} {}.{:09} {}.{:09} {sha256}\n",
            self.size, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1
        )
    }
}

/// The remembered pins of one cache directory.
#[derive(Debug, Clone)]
pub(crate) struct Pins {
    dir: PathBuf,
}

impl Pins {
    /// The records under `cache_dir/pins/`.
    pub(crate) fn in_cache(cache_dir: &Path) -> Pins {
        Pins { dir: cache_dir.join("pins") }
    }

    fn record_path(&self, state: &FileState) -> PathBuf {
        self.dir.join(format!("{:x}-{:x}", state.dev, state.ino))
    }

    /// Whether the file in `state` was verified to hash to `sha256`.
    pub(crate) fn remembers(&self, state: &FileState, sha256: &str) -> bool {
        let path = self.record_path(state);
        let ok = std::fs::symlink_metadata(&path).is_ok_and(|m| trusted(&m, "pin record").is_ok())
            && std::fs::metadata(&self.dir).is_ok_and(|m| trusted(&m, "pin directory").is_ok());
        // A record is one short line: anything longer is not one of ours.
        ok && std::fs::read(&path).is_ok_and(|b| b.len() < 256 && b == state.line(sha256).as_bytes())
    }

    /// Remember that the file in `state` hashes to `sha256`. Best effort:
    /// a record that cannot be written only costs the next load a hash.
    pub(crate) fn remember(&self, state: &FileState, sha256: &str) {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let write = || -> std::io::Result<()> {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)?;
            let path = self.record_path(state);
            let tmp = self.dir.join(format!(".{:x}-{:x}.tmp-{}", state.dev, state.ino, std::process::id()));
            let mut f =
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            std::io::Write::write_all(&mut f, state.line(sha256).as_bytes())?;
            drop(f);
            // Atomic: a concurrent reader sees the old record or the new one.
            std::fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            tracing::debug!("cache: cannot remember a verified pin in {}: {e}", self.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_matches_only_the_same_state_and_sha() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let file = tmp.path().join("c.wasm");
        std::fs::write(&file, b"component").unwrap();
        let pins = Pins::in_cache(tmp.path());
        let state = FileState::of(&std::fs::metadata(&file).unwrap());
        assert!(!pins.remembers(&state, "aa"));
        pins.remember(&state, "aa");
        assert!(pins.remembers(&state, "aa"));
        assert!(!pins.remembers(&state, "bb"), "another pin");
        // Rewritten in place with bytes of the same size, mtime restored:
        // ctime still moves.
        let before = std::fs::metadata(&file).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&file, b"COMPONENT").unwrap();
        let mtime = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec { tv_sec: before.atime(), tv_nsec: before.atime_nsec() as _ },
            last_modification: rustix::fs::Timespec {
                tv_sec: before.mtime(),
                tv_nsec: before.mtime_nsec() as _,
            },
        };
        rustix::fs::utimensat(rustix::fs::CWD, &file, &mtime, rustix::fs::AtFlags::empty()).unwrap();
        let after = FileState::of(&std::fs::metadata(&file).unwrap());
        assert_eq!((after.mtime, after.size, after.ino), (state.mtime, state.size, state.ino));
        assert!(!pins.remembers(&after, "aa"), "ctime changed: {state:?} {after:?}");
    }
}
