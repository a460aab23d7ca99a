//! What durasync reads keeps its access time: the source of `sync --from`
//! and the target files it compares are opened with `O_NOATIME`, so a
//! sync never dirties the inode of every file it reads (with `relatime`,
//! the first read after a change would, and the sync's flush would then
//! write them all back).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::{AtFlags, CWD, Timestamps, UTIME_OMIT};
use rustix::time::Timespec;

use crate::common::*;

/// An access time long before any file here was written: `relatime` gives
/// such a file a new one on its next read.
const OLD: i64 = 1_000_000;

fn make_old(path: &Path) {
    let times = Timestamps {
        last_access: Timespec { tv_sec: OLD, tv_nsec: 0 },
        last_modification: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
    };
    rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

fn atime(path: &Path) -> i64 {
    std::fs::symlink_metadata(path).unwrap().atime()
}

#[test]
fn a_sync_and_an_unchanged_check_leave_the_access_times_of_what_they_read_alone() {
    let s = Scratch::new();
    // The control: on this file system, does a plain read set a new access
    // time on such a file? Not under `noatime`: nothing would be shown.
    let control = s.join("control");
    std::fs::write(&control, b"x").unwrap();
    make_old(&control);
    std::fs::read(&control).unwrap();
    if atime(&control) == OLD {
        cannot_check("a read here sets no access time (mounted noatime?); nothing to keep");
        return;
    }
    // `sub/d` is opened beneath its root in one call (`openat2`), the
    // others by name in their directory.
    for dir in ["src/sub", "target/sub"] {
        std::fs::create_dir_all(s.join(dir)).unwrap();
    }
    for (name, bytes) in [("a", "same"), ("b", "new b"), ("c", "new c"), ("sub/d", "same d")] {
        std::fs::write(s.join("src").join(name), bytes).unwrap();
    }
    for (name, bytes) in [("a", "same"), ("b", "old b"), ("c", "old c"), ("sub/d", "same d")] {
        std::fs::write(s.join("target").join(name), bytes).unwrap();
    }
    let read = ["src/a", "src/b", "src/c", "src/sub/d", "target/a", "target/sub/d"];
    for path in read {
        make_old(&s.join(path));
    }
    // Two files changed: the full sequence, `a` carried as the same inode.
    let out = durasync(&["sync", "target", "--from", "src"], s.path());
    assert!(ok_stdout(&out).starts_with("replaced target"), "{}", ok_stdout(&out));
    for path in read {
        assert_eq!(atime(&s.join(path)), OLD, "{path} was read without a new access time");
    }
    // Unchanged now: both trees read, nothing written.
    for path in ["target/b", "target/c"] {
        make_old(&s.join(path));
    }
    let out = durasync(&["sync", "target", "--from", "src"], s.path());
    assert!(ok_stdout(&out).starts_with("unchanged target"), "{}", ok_stdout(&out));
    for path in ["src/a", "src/b", "src/c", "src/sub/d", "target/a", "target/b", "target/c", "target/sub/d"] {
        assert_eq!(atime(&s.join(path)), OLD, "{path} was read without a new access time");
    }
}
