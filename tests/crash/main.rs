//! crash tests (see tests/README.md): the crash-state explorer over a weak
//! persistence model, mutation checks proving every fsync and the ordering
//! are needed, a strace audit of the real binary and a kill -9 soak.
//!
//! `cargo test -p durasync --test crash -- --nocapture` prints the numbers.

mod attrs;
mod explorer;
mod keep;
mod layout;
mod ledger;
mod model;
mod mutations;
mod scenarios;
mod soak;
mod strace;
mod trace;
mod validator;

use std::path::PathBuf;

use durasync_test_support as support;
pub use support::cannot_check;

/// Where the explorer materialises crash states: `/dev/shm` when it is a
/// writable tmpfs (thousands of tiny trees are written and deleted; the
/// model, not the disk, decides what is durable, so [`support::TEST_DIR`]
/// does not move them), else the system temp dir.
pub fn states_base() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() && tempfile::tempdir_in(&shm).is_ok() {
        return shm;
    }
    std::env::temp_dir()
}

/// Where the real binary runs (the strace audits, the kill -9 soak):
/// `$DURASYNC_TEST_DIR`, the file system under test, when set (see
/// [`support::TEST_DIR`]), else [`states_base`].
pub fn tmp_base() -> PathBuf {
    support::test_dir().unwrap_or_else(states_base)
}
