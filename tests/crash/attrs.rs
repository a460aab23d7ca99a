//! Owners, labels and carried attributes (`durable::Attrs`), explored at
//! every crash point: under a policy that gives every staged inode the
//! owner and group 1000 (`fchown`), the label of what it replaces or of its
//! new parent and the `user.*` attributes of what it replaces (`fsetxattr`),
//! each recovered target is the old tree or the new one *with* the new
//! tree's owners and attributes: no crash state shows a new inode without
//! them.
//!
//! The old trees carry `security.selinux` and `user.*` values on the target
//! directory, its files and a subdirectory; the expected new trees are
//! written out by durasync's rules (`host/src/durable/attrs.rs`): a replaced
//! inode keeps the label and `user.*` attributes of the one it replaces, a
//! new name takes its new parent's label and nothing else, and a carried
//! (hard-linked) unchanged file is its own inode, attributes and all.
//!
//! These scenarios set owners and `security.*` attributes: they need root,
//! and a kernel without SELinux (which would refuse their made-up labels).

use std::os::fd::BorrowedFd;

use durasync::durable::{self, Attrs, Flush, IdRule, LabelRule, Options};

use crate::explorer::{Explorer, Scenario};
use crate::model::Disk;
use crate::scenarios::{assert_commit_window, dir, explore_ok, file, record, to_tree};
use crate::trace::{ROp, Recorder};

/// The owner and group the policy gives every new inode.
const ID: u32 = 1000;
/// The label attribute.
const LABEL: &str = "security.selinux";

/// Owner and group 1000, the replaced inode's label, its `user.*`
/// attributes carried.
fn policy() -> Attrs {
    Attrs { owner: IdRule::Id(ID), group: IdRule::Id(ID), label: LabelRule::Keep, xattrs: true, acl: false }
}

/// `None` when this process may set owners and any `security.selinux`
/// value and the model follows it, else why not.
pub fn cannot_set_attrs() -> Option<&'static str> {
    if !rustix::process::geteuid().is_root() {
        return Some("giving files another owner and a security.selinux label needs root");
    }
    crate::model::selinux_enabled()
        .then_some("SELinux runs here: it labels every new inode and refuses the scenarios' made-up contexts")
}

/// A context for the label attribute of `kind`.
fn label(kind: &str) -> String {
    format!("system_u:object_r:{kind}_t:s0")
}

/// What the scenarios give a file or directory beyond [`Disk::owned`] and
/// [`Disk::xattr`].
trait Attributed {
    /// Labelled `kind` (see [`label`]).
    fn labelled(self, kind: &str) -> Disk;
    /// Owned as the policy says.
    fn policy_owned(self) -> Disk;
}

impl Attributed for Disk {
    fn labelled(self, kind: &str) -> Disk {
        self.xattr(LABEL, &label(kind))
    }

    fn policy_owned(self) -> Disk {
        self.owned(ID, ID)
    }
}

/// A sync of `new` into `t` under [`policy`], flushed as `flush` says.
fn sync_call(new: &Disk, flush: Flush) -> impl FnOnce(BorrowedFd<'_>) -> Vec<ROp> {
    let tree = to_tree(new);
    move |root| {
        let rec = Recorder::new();
        let policy = policy();
        let opts = Options { probe: &rec, flush, attrs: &policy, ..Options::default() };
        durable::sync_dir(root, "t", &tree, &opts).expect("sync");
        rec.take()
    }
}

/// An unchanged file owned as the policy says: a sync carries it into
/// staging by a link, its own inode with its own label and attributes.
fn carried() -> Disk {
    file("same bytes", 0o644).labelled("same").xattr("user.note", "carried").policy_owned()
}

/// The new tree of a sync must be `want`: the policy's owners, the kept labels.
fn assert_new(sc: &Scenario, want: &Disk) {
    assert_eq!(sc.expect.new.as_ref(), Some(want), "{}: the policy's owners and the kept labels", sc.name);
}

/// A full sync under [`policy`] over a target owned by the process (root):
/// a file and a file in a subdirectory rewritten, a file removed, a new
/// file at the top and one in the subdirectory, an unchanged file carried.
pub fn full_sync(ex: &mut Explorer) -> Scenario {
    let old_z = file("old z", 0o640).labelled("z").xattr("user.z", "zed");
    let old = dir(
        0o755,
        &[
            ("x", file("old x", 0o644).labelled("x").xattr("user.x", "ex")),
            ("gone", file("removed", 0o644).labelled("gone")),
            ("same", carried()),
            ("sub", dir(0o750, &[("z", old_z)]).labelled("sub").xattr("user.dir", "sub")),
        ],
    )
    .labelled("t")
    .xattr("user.role", "config");
    let plain = dir(
        0o755,
        &[
            ("x", file("new x", 0o644)),
            ("a", file("new a", 0o600)),
            ("same", file("same bytes", 0o644)),
            ("sub", dir(0o750, &[("z", file("new z", 0o640)), ("n", file("new n", 0o644))])),
        ],
    );
    // What the rules give each inode of `plain`: a replaced inode's label
    // and `user.*` attributes; a new name its new parent's label only.
    let new_sub = dir(
        0o750,
        &[
            ("z", file("new z", 0o640).labelled("z").xattr("user.z", "zed").policy_owned()),
            ("n", file("new n", 0o644).labelled("sub").policy_owned()),
        ],
    );
    let new = dir(
        0o755,
        &[
            ("x", file("new x", 0o644).labelled("x").xattr("user.x", "ex").policy_owned()),
            ("a", file("new a", 0o600).labelled("t").policy_owned()),
            ("same", carried()),
            ("sub", new_sub.labelled("sub").xattr("user.dir", "sub").policy_owned()),
        ],
    )
    .labelled("t")
    .xattr("user.role", "config")
    .policy_owned();
    let name = "sync under an owner and label policy";
    let sc = record(ex, name, dir(0o755, &[("t", old)]), "t", sync_call(&plain, Flush::Fsync));
    assert_new(&sc, &new);
    let linked: Vec<String> = sc
        .steps
        .iter()
        .filter_map(|s| match &s.rop {
            ROp::Link { from, .. } => Some(from.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(linked, ["t/same"], "the unchanged file is carried");
    sc
}

/// [`full_sync`] with the syncfs flush, on a smaller tree (every inode of
/// the staging tree is pending at once until the syncfs; see
/// `scenarios::syncfs_nested`): a file rewritten, a new file, an unchanged
/// file carried.
pub fn syncfs_sync(ex: &mut Explorer) -> Scenario {
    let old =
        dir(0o755, &[("x", file("old x", 0o644).labelled("x").xattr("user.x", "ex")), ("same", carried())])
            .labelled("t")
            .xattr("user.role", "config");
    let plain = dir(
        0o755,
        &[("x", file("new x", 0o644)), ("a", file("new a", 0o600)), ("same", file("same bytes", 0o644))],
    );
    let new = dir(
        0o755,
        &[
            ("x", file("new x", 0o644).labelled("x").xattr("user.x", "ex").policy_owned()),
            ("a", file("new a", 0o600).labelled("t").policy_owned()),
            ("same", carried()),
        ],
    )
    .labelled("t")
    .xattr("user.role", "config")
    .policy_owned();
    let name = "sync under an owner and label policy (syncfs)";
    let sc = record(ex, name, dir(0o755, &[("t", old)]), "t", sync_call(&plain, Flush::Syncfs));
    assert_new(&sc, &new);
    let syncfs = sc.steps.iter().filter(|s| matches!(s.rop, ROp::Syncfs { .. })).count();
    assert_eq!(syncfs, 1, "{name}: one syncfs");
    sc
}

/// A one-file change under [`policy`] (the fast path: a temporary file in
/// the parent renamed over the file): every other file already has the
/// policy's owner, so only `sub/key` changes; the new inode gets the
/// owner, the label and the `user.*` attribute of the one it replaces.
pub fn one_file(ex: &mut Explorer) -> Scenario {
    let key = |data: &str| file(data, 0o600).labelled("key").xattr("user.k", "rotated").policy_owned();
    let top = file("top", 0o644).labelled("top").policy_owned();
    let sub = dir(0o750, &[("key", key("old key")), ("same", carried())]).labelled("sub");
    let old = dir(0o755, &[("top", top), ("sub", sub)]).labelled("t");
    let mut new = old.clone();
    new.insert("sub/key", key("new key, longer"));
    let name = "one-file sync under an owner and label policy";
    let sc = record(ex, name, dir(0o755, &[("t", old)]), "t", sync_call(&new, Flush::Fsync));
    assert_new(&sc, &new);
    assert!(!sc.steps.iter().any(|s| matches!(s.rop, ROp::Exchange { .. })), "the fast path: no exchange");
    sc
}

/// `durable::write_file` under [`policy`] replacing a labelled file with a
/// `user.*` attribute, owned by the process (root).
pub fn write_replace(ex: &mut Explorer) -> Scenario {
    let f = |data: &str| file(data, 0o644).labelled("manifest").xattr("user.f", "v");
    let name = "single-file replace under an owner and label policy";
    let sc = record(ex, name, dir(0o755, &[("f", f("old manifest"))]), "f", |root| {
        let rec = Recorder::new();
        let policy = policy();
        let opts = Options { probe: &rec, attrs: &policy, ..Options::default() };
        durable::write_file(root, "f", b"new manifest", None, &opts).expect("write");
        rec.take()
    });
    assert_new(&sc, &f("new manifest").policy_owned());
    sc
}

/// Every `chown` and `setxattr` of the trace comes before an fsync (or a
/// syncfs) of the same path, before the swap: what the mutations in
/// `mutations.rs` move or drop.
fn assert_set_before_flush(sc: &Scenario) {
    let swap = sc.steps.iter().position(|s| s.rop.is_swap()).expect("a swap");
    let mut set = 0;
    for (i, step) in sc.steps.iter().enumerate() {
        let path = match &step.rop {
            ROp::Chown { path, .. } | ROp::SetXattr { path, .. } => path,
            _ => continue,
        };
        set += 1;
        let flushed = sc.steps[i + 1..swap].iter().any(|s| match &s.rop {
            ROp::FsyncFile { path: p } | ROp::FsyncDir { path: p } => p == path,
            ROp::Syncfs { .. } => true,
            _ => false,
        });
        assert!(flushed, "{}: `{}` is not flushed before the swap", sc.name, step.what);
    }
    assert!(set > 0, "{}: the policy sets owners and attributes", sc.name);
}

#[test]
fn a_sync_is_old_or_new_with_the_policys_owners_and_labels_at_every_crash_point() {
    if let Some(why) = cannot_set_attrs() {
        return crate::cannot_check(why);
    }
    let mut ex = Explorer::new();
    for sc in [full_sync(&mut ex), syncfs_sync(&mut ex)] {
        assert_set_before_flush(&sc);
        let out = explore_ok(&mut ex, &sc);
        assert_commit_window(&sc, &out, ".");
    }
}

#[test]
fn a_one_file_change_is_old_or_new_with_the_policys_owners_and_labels_at_every_crash_point() {
    if let Some(why) = cannot_set_attrs() {
        return crate::cannot_check(why);
    }
    let mut ex = Explorer::new();
    let sc = one_file(&mut ex);
    assert_set_before_flush(&sc);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, "t/sub");
}

#[test]
fn a_single_file_write_is_old_or_new_with_the_policys_owners_and_labels_at_every_crash_point() {
    if let Some(why) = cannot_set_attrs() {
        return crate::cannot_check(why);
    }
    let mut ex = Explorer::new();
    let sc = write_replace(&mut ex);
    assert_set_before_flush(&sc);
    let out = explore_ok(&mut ex, &sc);
    assert_commit_window(&sc, &out, ".");
}
