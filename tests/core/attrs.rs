//! What a node's files carry besides bytes: every inode a sync, a one-file
//! change or a `write` creates gets the root's owner and group, the label of
//! what it replaces (or of its new parent) and, on request, the replaced
//! inode's extended attributes and ACLs. Checked as root with real ids and
//! real attributes (`user.*`, `security.selinux`, `system.posix_acl_access`),
//! cross-checked with `getfattr` and `getfacl`; `.ci/run` runs them again on
//! ext4, xfs and btrfs.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use crate::common::*;

const ETC: &str = "system_u:object_r:etc_t:s0";
const CERT: &str = "system_u:object_r:cert_t:s0";
const SUB: &str = "system_u:object_r:kubernetes_file_t:s0";

/// Whether the real checks can run: root (to give files other owners and
/// set `security.*`), `getfattr`/`setfattr` and `getfacl`/`setfacl`, and a
/// file system under test that stores `security.*` and `user.*` attributes.
fn can_check(test: &str, dir: &Path) -> bool {
    let tools = ["getfattr", "setfattr", "getfacl", "setfacl"]
        .iter()
        .all(|t| Command::new(t).arg("--version").output().is_ok_and(|o| o.status.success()));
    let why = if !rustix::process::geteuid().is_root() {
        "needs root"
    } else if !tools {
        "needs getfattr/setfattr and getfacl/setfacl (attr, acl)"
    } else {
        let probe = dir.join(".xattr-probe");
        std::fs::write(&probe, b"").unwrap();
        let ok =
            rustix::fs::setxattr(&probe, "security.selinux", ETC.as_bytes(), rustix::fs::XattrFlags::empty())
                .and_then(|()| {
                    rustix::fs::setxattr(&probe, "user.probe", b"1", rustix::fs::XattrFlags::empty())
                });
        std::fs::remove_file(&probe).unwrap();
        if ok.is_ok() {
            return true;
        }
        "the file system under test refuses security.* or user.* attributes"
    };
    cannot_check(&format!("{test}: {why}"));
    false
}

fn set(path: &Path, name: &str, value: &str) {
    rustix::fs::lsetxattr(path, name, value.as_bytes(), rustix::fs::XattrFlags::empty())
        .unwrap_or_else(|e| panic!("setxattr {name} on {}: {e}", path.display()));
}

/// One attribute as `getfattr` reads it (`None`: absent).
fn getfattr(path: &Path, name: &str) -> Option<String> {
    let out = Command::new("getfattr")
        .args(["--absolute-names", "--only-values", "-h", "-n", name])
        .arg(path)
        .output()
        .unwrap();
    out.status.success().then(|| String::from_utf8(out.stdout).unwrap())
}

/// Every attribute name `getfattr` lists (all namespaces), sorted.
fn xattr_names(path: &Path) -> Vec<String> {
    let out =
        Command::new("getfattr").args(["--absolute-names", "-h", "-m", "-"]).arg(path).output().unwrap();
    let mut names: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

/// The ACL's named entries as `getfacl` prints them (numeric ids).
fn acl_entries(path: &Path) -> Vec<String> {
    let out = Command::new("getfacl").args(["-n", "-p", "-c"]).arg(path).output().unwrap();
    assert!(out.status.success(), "getfacl {}", path.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("user:") && !l.starts_with("user::"))
        .map(str::to_owned)
        .collect()
}

fn ids(path: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.uid(), m.gid())
}

fn ino(path: &Path) -> u64 {
    std::fs::symlink_metadata(path).unwrap().ino()
}

fn write(path: &Path, bytes: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, bytes).unwrap();
}

/// An old target `t` with labels, a user attribute, an ACL and a file
/// capability, and a source `src` that changes `a` and `sub/b`, adds `n`
/// and `sub/new/x`, and keeps `same` (already owned as the policy says).
fn labelled_target(s: &Scratch) {
    let t = s.join("t");
    write(&t.join("a"), "old a");
    write(&t.join("sub/b"), "old b");
    write(&t.join("same"), "same");
    set(&t, "security.selinux", ETC);
    set(&t.join("a"), "security.selinux", CERT);
    set(&t.join("a"), "user.origin", "vendor");
    set(&t.join("a"), "trusted.note", "root only");
    set(&t.join("sub"), "security.selinux", SUB);
    set(&t.join("same"), "security.selinux", CERT);
    std::os::unix::fs::lchown(t.join("same"), Some(1000), Some(1001)).unwrap();
    let acl = Command::new("setfacl").args(["-m", "u:1234:r"]).arg(t.join("a")).status().unwrap();
    assert!(acl.success());
    let src = s.join("src");
    write(&src.join("a"), "new a");
    write(&src.join("sub/b"), "new b");
    write(&src.join("n"), "new file");
    write(&src.join("sub/new/x"), "deeper");
    write(&src.join("same"), "same");
    for d in ["", "sub", "sub/new"] {
        std::fs::set_permissions(src.join(d), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(t.join("same"), std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::set_permissions(src.join("same"), std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
}

#[test]
fn a_sync_gives_every_new_inode_the_roots_owner_and_group_and_the_replaced_labels_and_attributes() {
    let s = Scratch::new();
    if !can_check("a_sync_gives_every_new_inode_…", s.path()) {
        return;
    }
    labelled_target(&s);
    let t = s.join("t");
    let same_ino = ino(&t.join("same"));
    let out = durasync(
        &["sync", "t", "--from", "src", "--owner", "1000", "--group", "1001", "--preserve", "xattrs,acl"],
        s.path(),
    );
    assert!(ok_stdout(&out).contains("replaced"), "{}", stderr(&out));

    // Owner and group: every file and directory, the target itself included.
    for rel in ["", "a", "n", "same", "sub", "sub/b", "sub/new", "sub/new/x"] {
        assert_eq!(ids(&t.join(rel)), (1000, 1001), "{rel:?}");
    }
    // Labels: the replaced inode's; a new name its new parent's.
    for (rel, label) in [
        ("", Some(ETC)),
        ("a", Some(CERT)),
        ("n", Some(ETC)),
        ("sub", Some(SUB)),
        ("sub/new", Some(SUB)),
        ("sub/new/x", Some(SUB)),
    ] {
        assert_eq!(getfattr(&t.join(rel), "security.selinux").as_deref(), label, "label of {rel:?}");
    }
    // sub/b replaced an unlabelled file: it stays unlabelled.
    assert_eq!(getfattr(&t.join("sub/b"), "security.selinux"), None);
    // Carried attributes and the ACL, cross-checked with getfattr/getfacl.
    assert_eq!(getfattr(&t.join("a"), "user.origin").as_deref(), Some("vendor"));
    assert_eq!(getfattr(&t.join("a"), "trusted.note").as_deref(), Some("root only"));
    assert_eq!(acl_entries(&t.join("a")), ["user:1234:r--"]);
    assert_eq!(std::fs::read(t.join("a")).unwrap(), b"new a");
    // An unchanged file already as the policy wants is carried: same inode.
    assert_eq!(ino(&t.join("same")), same_ino, "carried, not rewritten");
    assert!(leftovers(s.path()).is_empty(), "{:?}", leftovers(s.path()));

    // A second identical sync changes nothing.
    let again = durasync(
        &["sync", "t", "--from", "src", "--owner", "1000", "--group", "1001", "--preserve", "xattrs,acl"],
        s.path(),
    );
    assert!(ok_stdout(&again).contains("unchanged"), "{}", ok_stdout(&again));
}

#[test]
fn without_preserve_only_the_label_is_carried_and_capabilities_never_are() {
    let s = Scratch::new();
    if !can_check("without_preserve_…", s.path()) {
        return;
    }
    let t = s.join("t");
    write(&t.join("tool"), "old program");
    set(&t.join("tool"), "security.selinux", CERT);
    set(&t.join("tool"), "user.origin", "vendor");
    // A file capability (cap_net_bind_service): never given to new bytes.
    let cap = Command::new("setfattr")
        .args(["-n", "security.capability", "-v", "0sAQAAAgAEAAAAAAAAAAAAAAAAAAA="])
        .arg(t.join("tool"))
        .status()
        .unwrap();
    assert!(cap.success(), "setfattr security.capability");
    write(&s.join("src/tool"), "new program");
    ok_stdout(&durasync(&["sync", "t", "--from", "src"], s.path()));
    assert_eq!(xattr_names(&t.join("tool")), ["security.selinux"], "only the label, by default");
    assert_eq!(getfattr(&t.join("tool"), "security.selinux").as_deref(), Some(CERT));

    write(&s.join("src/tool"), "newer program");
    let cap = Command::new("setfattr")
        .args(["-n", "security.capability", "-v", "0sAQAAAgAEAAAAAAAAAAAAAAAAAAA="])
        .arg(t.join("tool"))
        .status()
        .unwrap();
    assert!(cap.success());
    set(&t.join("tool"), "user.origin", "vendor");
    ok_stdout(&durasync(&["sync", "t", "--from", "src", "--preserve", "xattrs"], s.path()));
    assert_eq!(xattr_names(&t.join("tool")), ["security.selinux", "user.origin"], "no security.capability");
}

#[test]
fn a_one_file_change_keeps_the_replaced_files_owner_label_and_attributes() {
    let s = Scratch::new();
    if !can_check("a_one_file_change_…", s.path()) {
        return;
    }
    let t = s.join("t");
    for f in ["a", "b", "c"] {
        write(&t.join(f), f);
        write(&s.join("src").join(f), f);
    }
    std::fs::set_permissions(&t, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(s.join("src"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::os::unix::fs::lchown(t.join("b"), Some(1234), Some(4321)).unwrap();
    set(&t.join("b"), "security.selinux", CERT);
    set(&t.join("b"), "user.k", "v");
    let (a, c) = (ino(&t.join("a")), ino(&t.join("c")));
    write(&s.join("src/b"), "b changed");
    let out = durasync(
        &["sync", "t", "--from", "src", "--owner", "keep", "--group", "keep", "--preserve", "xattrs"],
        s.path(),
    );
    ok_stdout(&out);
    // The one-file path: the other files keep their inodes.
    assert_eq!((ino(&t.join("a")), ino(&t.join("c"))), (a, c));
    assert_eq!(std::fs::read(t.join("b")).unwrap(), b"b changed");
    assert_eq!(ids(&t.join("b")), (1234, 4321));
    assert_eq!(getfattr(&t.join("b"), "security.selinux").as_deref(), Some(CERT));
    assert_eq!(getfattr(&t.join("b"), "user.k").as_deref(), Some("v"));
}

#[test]
fn write_gives_a_replaced_file_its_label_and_a_new_file_its_directorys() {
    let s = Scratch::new();
    if !can_check("write_gives_…", s.path()) {
        return;
    }
    let d = s.join("manifests");
    std::fs::create_dir(&d).unwrap();
    set(&d, "security.selinux", SUB);
    write(&d.join("pod.yaml"), "old");
    set(&d.join("pod.yaml"), "security.selinux", ETC);
    write(&s.join("new.yaml"), "new");
    for (file, label) in [("pod.yaml", ETC), ("fresh.yaml", SUB)] {
        let target = format!("manifests/{file}");
        ok_stdout(&durasync(
            &["write", &target, "--from", "new.yaml", "--owner", "root", "--group", "2000"],
            s.path(),
        ));
        assert_eq!(getfattr(&d.join(file), "security.selinux").as_deref(), Some(label), "{file}");
        assert_eq!(ids(&d.join(file)), (0, 2000), "{file}");
    }
}

#[test]
fn a_wrong_owner_under_a_fixed_policy_is_rewritten_not_left_unchanged() {
    let s = Scratch::new();
    if !can_check("a_wrong_owner_…", s.path()) {
        return;
    }
    for f in ["a", "b"] {
        write(&s.join("src").join(f), f);
    }
    let args = ["sync", "t", "--from", "src", "--owner", "1000", "--group", "1000"];
    ok_stdout(&durasync(&args, s.path()));
    assert!(ok_stdout(&durasync(&args, s.path())).contains("unchanged"));
    std::os::unix::fs::lchown(s.join("t/b"), Some(7), None).unwrap();
    let out = ok_stdout(&durasync(&args, s.path()));
    assert!(out.contains("replaced"), "{out}");
    assert_eq!(ids(&s.join("t/b")), (1000, 1000));
    // The same through `write`.
    write(&s.join("one"), "b");
    std::os::unix::fs::lchown(s.join("t/b"), Some(7), None).unwrap();
    let out = ok_stdout(&durasync(&["write", "t/b", "--from", "one", "--owner", "1000"], s.path()));
    assert!(out.contains("replaced"), "{out}");
    assert_eq!(ids(&s.join("t/b")).0, 1000);
}

#[test]
fn a_fixed_label_goes_on_every_inode_and_kernel_sets_none() {
    let s = Scratch::new();
    if !can_check("a_fixed_label_…", s.path()) {
        return;
    }
    write(&s.join("src/a"), "a");
    write(&s.join("src/d/b"), "b");
    ok_stdout(&durasync(&["sync", "t", "--from", "src", "--label", SUB], s.path()));
    for rel in ["", "a", "d", "d/b"] {
        assert_eq!(getfattr(&s.join("t").join(rel), "security.selinux").as_deref(), Some(SUB), "{rel:?}");
    }
    write(&s.join("src/a"), "a2");
    ok_stdout(&durasync(&["sync", "t", "--from", "src", "--label", "kernel"], s.path()));
    // The kernel without SELinux gives a new inode no label at all.
    assert_eq!(getfattr(&s.join("t/a"), "security.selinux"), None);
}

#[test]
fn without_the_right_to_give_files_an_owner_the_sync_is_refused_and_nothing_changes() {
    let s = Scratch::new();
    if !can_check("without_the_right_…", s.path()) {
        return;
    }
    let setpriv =
        Command::new("setpriv").args(["--reuid=65534", "--regid=65534", "--clear-groups", "true"]).status();
    if !setpriv.is_ok_and(|st| st.success()) {
        cannot_check("without_the_right_…: needs setpriv");
        return;
    }
    std::fs::set_permissions(s.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let w = s.join("w");
    write(&w.join("t/a"), "old");
    write(&w.join("src/a"), "new");
    for p in ["", "t", "t/a", "src", "src/a"] {
        std::os::unix::fs::lchown(w.join(p), Some(65534), Some(65534)).unwrap();
    }
    let before = snapshot(&w.join("t"));
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(crate::support::durasync())
        .args(["sync", "t", "--from", "src", "--owner", "0"])
        .current_dir(&w)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("cannot set owner 0:-")
            && err.contains("CAP_CHOWN")
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(snapshot(&w.join("t")), before, "the target is unchanged");
    assert!(leftovers(&w).is_empty(), "{:?}", leftovers(&w));
}

#[test]
fn too_many_attributes_to_carry_are_refused_before_anything_is_staged() {
    let s = Scratch::new();
    if !can_check("too_many_attributes_…", s.path()) {
        return;
    }
    let t = s.join("t");
    write(&t.join("a"), "old");
    let max = durasync::durable::attrs::MAX_XATTRS;
    for i in 0..=max {
        set(&t.join("a"), &format!("user.a{i}"), "1");
    }
    write(&s.join("src/a"), "new");
    let before = snapshot(&t);
    let out = durasync(&["sync", "t", "--from", "src", "--preserve", "xattrs"], s.path());
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("extended attributes to carry") && err.contains(&max.to_string()), "{err}");
    assert_eq!(snapshot(&t), before);
    assert!(leftovers(s.path()).is_empty());
}

#[test]
fn bad_owner_group_label_and_preserve_values_are_refused_with_the_reason() {
    let s = Scratch::new();
    write(&s.join("src/a"), "a");
    for (flag, value, says) in [
        ("--owner", "no-such-user-here", "no user named"),
        ("--group", "no-such-group-here", "no group named"),
        ("--owner", "4294967295", "not a valid id"),
        ("--label", "etc_t", "SELinux context"),
        ("--preserve", "everything", "xattrs"),
    ] {
        let out = durasync(&["sync", "t", "--from", "src", flag, value], s.path());
        assert!(!out.status.success(), "{flag} {value}");
        assert!(stderr(&out).contains(says), "{flag} {value}: {}", stderr(&out));
        assert!(!s.join("t").exists());
    }
}

#[test]
fn an_entry_replacing_one_of_another_kind_takes_its_parents_label() {
    let s = Scratch::new();
    if !can_check("an_entry_replacing_one_of_another_kind_…", s.path()) {
        return;
    }
    let t = s.join("t");
    // `x` was an unlabelled directory, `y` a labelled file; both change kind.
    std::fs::create_dir_all(t.join("x")).unwrap();
    write(&t.join("y"), "a file");
    set(&t, "security.selinux", ETC);
    set(&t.join("y"), "security.selinux", CERT);
    write(&s.join("src/x"), "now a file");
    write(&s.join("src/y/inner"), "now a directory");
    ok_stdout(&durasync(&["sync", "t", "--from", "src"], s.path()));
    assert_eq!(getfattr(&t.join("x"), "security.selinux").as_deref(), Some(ETC), "a new name: the parent's");
    assert_eq!(getfattr(&t.join("y"), "security.selinux").as_deref(), Some(ETC), "not the file's label");
    assert_eq!(getfattr(&t.join("y/inner"), "security.selinux").as_deref(), Some(ETC));
}
