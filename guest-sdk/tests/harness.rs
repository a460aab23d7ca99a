//! The native harness gives plugins the host's rules: the same path checks,
//! outcomes and error variants that `durasync run` gives them.

use durasync_guest::testing::{Host, Op};
use durasync_guest::{Dir, EntryKind, Error, File, Outcome, Root};

fn rw() -> Host {
    Host::new().root("data")
}

#[test]
fn paths_that_leave_the_root_are_invalid_path_and_touch_nothing() {
    let host = rw();
    host.enter(|| {
        let root = Root::open("data").unwrap();
        for path in ["../x", "/etc", "a/../b", "", "a//b"] {
            let err = root.sync(path, [File::new("f", "x")]).unwrap_err();
            assert!(matches!(err, Error::InvalidPath(_)), "{path:?}: {err}");
        }
        let err = root.sync("d", [File::new("../f", "x")]).unwrap_err();
        assert!(matches!(err, Error::InvalidPath(_)), "{err}");
        let err = root.write_file("../f", "x", 0o644).unwrap_err();
        assert!(matches!(err, Error::InvalidPath(_)), "{err}");
    });
    assert!(host.files("data").is_empty());
}

#[test]
fn a_symlink_on_the_way_is_invalid_path_never_followed() {
    let host = rw();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), host.path("data").join("link")).unwrap();
    let err = host.enter(|| Root::open("data").unwrap().sync("link/d", [File::new("f", "x")])).unwrap_err();
    assert!(matches!(err, Error::InvalidPath(_)), "{err}");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn an_ungranted_root_is_not_granted_and_a_read_only_root_refuses_writes() {
    let host = Host::new().read_only_root("src");
    std::fs::write(host.path("src").join("in"), b"bytes").unwrap();
    host.enter(|| {
        let err = Root::open("other").unwrap_err();
        assert!(matches!(err, Error::NotGranted(ref m) if m.contains("granted: src")), "{err}");
        let src = Root::open("src").unwrap();
        assert_eq!(src.read_file("in").unwrap().as_deref(), Some(&b"bytes"[..]));
        assert!(matches!(src.write_file("in", "x", 0o644), Err(Error::ReadOnly(_))));
        assert!(matches!(src.sync("d", []), Err(Error::ReadOnly(_))));
        assert!(matches!(src.remove("in"), Err(Error::ReadOnly(_))));
        src.fsync("in").unwrap();
    });
    assert_eq!(std::fs::read(host.path("src").join("in")).unwrap(), b"bytes");
}

#[test]
fn sync_reports_created_unchanged_replaced_and_applies_modes_exactly() {
    let host = rw();
    let root = host.enter(|| Root::open("data").unwrap());
    let files = || [File::new("a", "1").mode(0o600), File::new("sub/b", "2").mode(0o755)];
    let r = root.sync("t", files()).unwrap();
    assert_eq!((r.outcome, r.written, r.removed), (Outcome::Created, 2, 0));
    assert_eq!(root.sync("t", files()).unwrap().outcome, Outcome::Unchanged);
    let r = root.sync("t", [File::new("a", "1").mode(0o644)]).unwrap();
    assert_eq!((r.outcome, r.written, r.removed), (Outcome::Replaced, 1, 1));
    assert_eq!(host.files("data"), [("t/a".to_owned(), (0o644, b"1".to_vec()))].into());
    // The handle keeps working after `enter` returned: it belongs to the host.
    assert_eq!(host.operations().len(), 3);
}

#[test]
fn write_read_list_remove_and_open_dir_behave_like_the_host() {
    let host = rw();
    host.enter(|| {
        let root = Root::open("data").unwrap();
        assert_eq!(root.write_file("m/pod.yaml", "v1", 0o600).unwrap().outcome, Outcome::Created);
        assert_eq!(root.write_file("m/pod.yaml", "v1", 0o600).unwrap().outcome, Outcome::Unchanged);
        assert_eq!(root.write_file("m/pod.yaml", "v2", 0o600).unwrap().outcome, Outcome::Replaced);
        assert!(matches!(root.write_file("m/x", "", 0o10000), Err(Error::InvalidPath(_))));
        assert_eq!(root.read_file("m/pod.yaml").unwrap().as_deref(), Some(&b"v2"[..]));
        assert_eq!(root.read_file("m/none").unwrap(), None);
        let entries = root.list_dir("").unwrap();
        assert_eq!(entries.len(), 1, "no lock files or leftovers: {entries:?}");
        assert_eq!((entries[0].name.as_str(), entries[0].kind), ("m", EntryKind::Directory));
        assert!(matches!(root.list_dir("none"), Err(Error::NotFound(_))));
        assert!(matches!(root.list_dir("m/pod.yaml"), Err(Error::NotADirectory(_))));
        let m: Dir = root.open_dir("m").unwrap();
        assert!(m.remove("pod.yaml").unwrap());
        assert!(!m.remove("pod.yaml").unwrap());
        assert!(!root.remove("no/such/parent").unwrap());
    });
    let ops: Vec<_> = host.operations().into_iter().map(|o| (o.op, o.path, o.result.is_ok())).collect();
    assert_eq!(ops[4], (Op::Remove, "m/pod.yaml".to_owned(), true), "paths are shown from the root");
}

#[test]
fn exchange_swaps_two_entries() {
    let host = rw();
    host.enter(|| {
        let root = Root::open("data").unwrap();
        root.sync("a", [File::new("f", "A")]).unwrap();
        root.sync("b", [File::new("f", "B")]).unwrap();
        root.exchange("a", "b").unwrap();
        assert_eq!(root.read_file("a/f").unwrap().as_deref(), Some(&b"B"[..]));
        assert!(matches!(root.exchange("a", "missing"), Err(Error::NotFound(_))));
    });
}

#[test]
fn outside_a_host_open_root_says_how_to_test() {
    let err = Root::open("data").unwrap_err();
    assert!(matches!(err, Error::NotGranted(ref m) if m.contains("testing::Host")), "{err}");
}

#[test]
fn logs_reach_the_host_in_order() {
    let host = rw();
    host.enter(|| {
        durasync_guest::info!("one {}", 1);
        durasync_guest::warn!("two");
    });
    let logs = host.logs();
    assert_eq!(
        logs,
        [(durasync_guest::Level::Info, "one 1".to_owned()), (durasync_guest::Level::Warn, "two".to_owned())]
    );
}

#[test]
fn errors_display_their_wit_kind() {
    assert_eq!(Error::ReadOnly("root `x`".into()).to_string(), "read-only: root `x`");
    assert_eq!(Error::Committed("m".into()).kind(), "committed");
}
