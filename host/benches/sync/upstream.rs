//! The upstream sequences durasync is measured against, the one copy used
//! by the bench (`host/benches/sync/main.rs`) and the example
//! (`host/examples/upstream_vs_durasync.rs`).
//!
//! Both are library-go's `atomicdir.Sync` with fsyncs added by
//! openshift/library-go PR #2176 (OCPBUGS-84258, "fsync static pod cert and
//! manifest writes for crash durability"), re-implemented through paths as
//! the Go code works: `MkdirAll(target)`, `MkdirTemp` beside it, write the
//! files, `renameat2(RENAME_EXCHANGE)`, fsync both parents (the same
//! directory here, fsynced twice as upstream does), `RemoveAll` of the old
//! tree. Every fsync is sequential.
//!
//! - [`sync_2n2`]: the seed form, `fsutil.WriteFileFsync` per file: write
//!   (`O_WRONLY|O_CREAT|O_TRUNC`), reopen and fsync the file, open and
//!   fsync the staging directory. 2N + 2 fsyncs.
//! - [`sync_n3`]: the later form from the same PR's review: write every
//!   file, then fsync each file, then the staging directory once, then the
//!   two parents. N + 3 fsyncs.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{CWD, RenameFlags};

/// What one upstream sync cost.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Until the last parent fsync returned (the commit).
    pub commit: Duration,
    /// The whole call, the old tree removed.
    pub total: Duration,
    /// fsyncs issued, counted.
    pub fsyncs: usize,
}

/// A fresh sibling name for the staging directory (`MkdirTemp`).
fn staging_of(parent: &Path, target: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    parent.join(format!("{target}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)))
}

fn write_file(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(path)?;
    f.write_all(data)
}

fn fsync_path(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

/// The seed form: `WriteFileFsync` per file, 2N + 2 fsyncs.
pub fn sync_2n2(parent: &Path, target: &str, files: &[(String, Vec<u8>)]) -> io::Result<Timing> {
    let start = Instant::now();
    let mut fsyncs = 0;
    let target_path = parent.join(target);
    std::fs::create_dir_all(&target_path)?;
    let staging = staging_of(parent, target);
    std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    for (name, data) in files {
        let path = staging.join(name);
        write_file(&path, data)?;
        // fsutil.WriteFileFsync reopens the file to fsync it, and its directory.
        fsync_path(&path)?;
        fsync_path(&staging)?;
        fsyncs += 2;
    }
    swap_and_commit(parent, &target_path, &staging, start, fsyncs)
}

/// The later form: every file written, then each fsynced, then the staging
/// directory once, then both parents. N + 3 fsyncs.
pub fn sync_n3(parent: &Path, target: &str, files: &[(String, Vec<u8>)]) -> io::Result<Timing> {
    let start = Instant::now();
    let target_path = parent.join(target);
    std::fs::create_dir_all(&target_path)?;
    let staging = staging_of(parent, target);
    std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    for (name, data) in files {
        write_file(&staging.join(name), data)?;
    }
    for (name, _) in files {
        fsync_path(&staging.join(name))?;
    }
    fsync_path(&staging)?;
    swap_and_commit(parent, &target_path, &staging, start, files.len() + 1)
}

/// Exchange, fsync both parents (the commit), remove the old tree.
fn swap_and_commit(
    parent: &Path,
    target: &Path,
    staging: &Path,
    start: Instant,
    mut fsyncs: usize,
) -> io::Result<Timing> {
    rustix::fs::renameat_with(CWD, staging, CWD, target, RenameFlags::EXCHANGE)?;
    // The target's parent and the staging directory's parent: the same here.
    for dir in [target.parent().unwrap_or(parent), staging.parent().unwrap_or(parent)] {
        fsync_path(dir)?;
        fsyncs += 1;
    }
    let commit = start.elapsed();
    std::fs::remove_dir_all(staging)?;
    Ok(Timing { commit, total: start.elapsed(), fsyncs })
}
