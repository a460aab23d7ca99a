//! crash tests (see tests/README.md): the crash-state explorer over a weak
//! persistence model, mutation checks proving every fsync and the ordering
//! are needed, a strace audit of the real binary and a kill -9 soak.
//!
//! `cargo test -p durasync --test crash -- --nocapture` prints the numbers.

#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

mod explorer;
mod model;
mod mutations;
mod scenarios;
mod soak;
mod strace;
mod trace;

use std::path::PathBuf;

pub use support::cannot_check;

/// Where crash states are materialised: `$DURASYNC_CRASH_TMP`, else
/// `/dev/shm` when it is a writable tmpfs (thousands of tiny trees are
/// written and deleted; the model, not the disk, decides what is durable),
/// else the system temp dir.
pub fn tmp_base() -> PathBuf {
    if let Some(dir) = std::env::var_os("DURASYNC_CRASH_TMP") {
        return PathBuf::from(dir);
    }
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() && tempfile::tempdir_in(&shm).is_ok() {
        return shm;
    }
    std::env::temp_dir()
}
