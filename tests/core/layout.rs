//! The symlink layout (`durable::layout`): syncs through the library and
//! the CLI on the scratch file system, a directory baked into a real
//! overlayfs lower layer (refused without the layout, naming it; taken over
//! with it), a real FUSE file system that refuses every `renameat2` flag
//! (`bindfs`), reads through the layout's links and no other, and what
//! stays refused.

use std::os::fd::AsFd;
use std::path::Path;

use durasync::durable::names::DATA_LINK;
use durasync::durable::{self, Cancel, Error, Layout, Options, ReadLimits, Tree};

use crate::common::{Mounted, Scratch, durasync, open_dir, tree};

const UNSUPPORTED: i32 = 5;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn linked() -> Options<'static> {
    Options { layout: Layout::Symlink, ..Options::default() }
}

/// What a reader sees under `dir`: every regular file by relative path,
/// following links (as a consumer of the target does), durasync's own
/// names left out.
fn seen(dir: &Path) -> std::collections::BTreeMap<String, (u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = std::collections::BTreeMap::new();
    fn walk(dir: &Path, rel: &str, out: &mut std::collections::BTreeMap<String, (u32, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if name.starts_with(".durasync") {
                continue;
            }
            let path = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            let meta = std::fs::metadata(e.path()).unwrap(); // follows links
            if meta.is_dir() {
                walk(&e.path(), &path, out);
            } else {
                out.insert(path, (meta.permissions().mode() & 0o7777, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    walk(dir, "", &mut out);
    out
}

fn want(files: &[(&str, &[u8], u32)]) -> std::collections::BTreeMap<String, (u32, Vec<u8>)> {
    files.iter().map(|(p, b, m)| ((*p).to_owned(), (*m, b.to_vec()))).collect()
}

/// The generation directories in `dir`.
fn generations(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| durable::names::is_gen(n))
        .collect()
}

#[test]
fn a_sync_in_the_symlink_layout_creates_replaces_carries_and_answers_unchanged_through_links() {
    let s = Scratch::new();
    let one = tree(&[("a", b"a1", 0o644), ("sub/b", b"b1", 0o600), ("c", b"same", 0o644)]);
    let r = durable::sync_dir(s.fd(), "t", &one, &linked()).unwrap();
    assert_eq!(r.outcome, durable::Outcome::Created);
    let t = s.join("t");
    assert!(std::fs::symlink_metadata(t.join(DATA_LINK)).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_link(t.join("a")).unwrap(), Path::new(".durasync-data/a"));
    assert_eq!(seen(&t), want(&[("a", b"a1", 0o644), ("c", b"same", 0o644), ("sub/b", b"b1", 0o600)]));
    let c_ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(t.join("c")).unwrap());

    // A change: `a` removed, `sub/b` rewritten, `c` carried, `d` added. The
    // default layout on a target in the symlink layout keeps it there.
    let two = tree(&[("sub/b", b"b2", 0o600), ("c", b"same", 0o644), ("d", b"d", 0o640)]);
    let r = durable::sync_dir(s.fd(), "t", &two, &Options::default()).unwrap();
    assert_eq!((r.outcome, r.removed), (durable::Outcome::Replaced, 1));
    assert_eq!(seen(&t), want(&[("c", b"same", 0o644), ("d", b"d", 0o640), ("sub/b", b"b2", 0o600)]));
    assert!(std::fs::symlink_metadata(t.join("a")).is_err(), "the link of a removed name stays");
    assert_eq!(generations(&t).len(), 1, "the old generation stays: {:?}", generations(&t));
    let carried = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(t.join("c")).unwrap());
    assert_eq!(carried, c_ino, "the unchanged file was rewritten, not carried");

    let r = durable::sync_dir(s.fd(), "t", &two, &linked()).unwrap();
    assert_eq!(r.outcome, durable::Outcome::Unchanged);
    // The dry run compares what a reader sees.
    assert!(durable::plan_sync(s.fd(), "t", &two, &linked()).unwrap().is_unchanged());
    assert!(crate::common::leftovers(s.path()).is_empty());
}

#[test]
fn the_cli_takes_over_a_directory_of_files_and_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new();
    std::fs::create_dir(s.join("t")).unwrap();
    std::fs::write(s.join("t/f"), "old f").unwrap();
    std::fs::write(s.join("t/g"), "old g").unwrap();
    std::fs::set_permissions(s.join("t"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::fs::create_dir_all(s.join("src/sub")).unwrap();
    std::fs::write(s.join("src/f"), "new f").unwrap();
    std::fs::write(s.join("src/sub/h"), "h").unwrap();
    let out = durasync(&["sync", "t", "--from", "src", "--layout", "symlink"], s.path());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(seen(&s.join("t")), want(&[("f", b"new f", 0o644), ("sub/h", b"h", 0o644)]));
    let mode = std::fs::metadata(s.join("t")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o750, "the target directory keeps its mode");
    assert_eq!(generations(&s.join("t")).len(), 1);
    let again = durasync(&["sync", "t", "--from", "src"], s.path());
    assert!(String::from_utf8_lossy(&again.stdout).starts_with("unchanged"), "{again:?}");
}

#[test]
fn taking_over_a_directory_with_a_subdirectory_in_place_is_refused_naming_it_and_changes_nothing() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.join("t/sub")).unwrap();
    std::fs::write(s.join("t/f"), "old").unwrap();
    let before = crate::common::names(&s.join("t"));
    let err = durable::sync_dir(s.fd(), "t", &tree(&[("f", b"new", 0o644)]), &linked()).unwrap_err();
    assert!(matches!(err, Error::Layout { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("t/sub") && msg.contains("a directory in place"), "{msg}");
    assert_eq!(std::fs::read_to_string(s.join("t/f")).unwrap(), "old");
    let mut after = crate::common::names(&s.join("t"));
    after.remove(durable::names::LOCK_NAME);
    assert_eq!(after, before, "a refused take-over changed the directory");
}

#[test]
fn an_entry_that_is_not_the_layouts_is_refused_and_nothing_changes() {
    let s = Scratch::new();
    durable::sync_dir(s.fd(), "t", &tree(&[("a", b"a", 0o644)]), &linked()).unwrap();
    std::fs::write(s.join("t/stray"), "someone else's").unwrap();
    let err = durable::sync_dir(s.fd(), "t", &tree(&[("a", b"b", 0o644)]), &linked()).unwrap_err();
    assert!(err.to_string().contains("t/stray") && err.to_string().contains("not the layout's"), "{err}");
    assert_eq!(std::fs::read_to_string(s.join("t/a")).unwrap(), "a");
    assert_eq!(std::fs::read_to_string(s.join("t/stray")).unwrap(), "someone else's");
}

#[test]
fn reads_follow_the_layouts_own_links_and_refuse_any_other() {
    let s = Scratch::new();
    let t = tree(&[("a", b"a", 0o644), ("sub/b", b"b", 0o644)]);
    durable::sync_dir(s.fd(), "t", &t, &linked()).unwrap();
    let limits = ReadLimits::default();
    let read = |rel: &str| durable::read_file(s.fd(), rel, &limits, &Cancel::NEVER);
    assert_eq!(read("t/a").unwrap().as_deref(), Some(&b"a"[..]));
    assert_eq!(read("t/sub/b").unwrap().as_deref(), Some(&b"b"[..]));
    assert_eq!(read("t/missing").unwrap(), None);
    let names: Vec<String> = durable::list_dir(s.fd(), "t", &limits, &Cancel::NEVER)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["a", "sub"], "the listing is the current generation's, without durasync's names");
    let sub = durable::list_dir(s.fd(), "t/sub", &limits, &Cancel::NEVER).unwrap();
    assert_eq!(sub.len(), 1);
    // A link of another form, in the target or in a generation, stays refused.
    std::os::unix::fs::symlink("/etc/passwd", s.join("t/.durasync-data/sub/evil")).unwrap();
    assert!(matches!(read("t/sub/evil"), Err(Error::Symlink { .. })));
    std::os::unix::fs::symlink("sub", s.join("t/alias")).unwrap();
    assert!(matches!(read("t/alias/b"), Err(Error::Symlink { .. })));
    // Writes: inside the current generation, atomically; not beside the links.
    let sub_fd = durable::open_beneath(s.fd(), "t/sub").unwrap();
    durable::write_file(sub_fd.as_fd(), "b", b"b2", None, &Options::default()).unwrap();
    assert_eq!(std::fs::read(s.join("t/sub/b")).unwrap(), b"b2");
    let t_fd = open_dir(&s.join("t"));
    let err = durable::write_file(t_fd.as_fd(), "new", b"x", None, &Options::default()).unwrap_err();
    assert!(matches!(err, Error::Layout { .. }), "{err}");
    assert!(std::fs::symlink_metadata(s.join("t/new")).is_err());
}

#[test]
fn recovery_removes_older_generations_and_dangling_links_but_not_while_marked() {
    let s = Scratch::new();
    durable::sync_dir(s.fd(), "t", &tree(&[("a", b"a", 0o644)]), &linked()).unwrap();
    let t = s.join("t");
    // What a crash after a switch leaves: an older generation, a dangling link.
    std::fs::create_dir(t.join(".durasync-gen.00000000000000ff")).unwrap();
    std::os::unix::fs::symlink(".durasync-data/gone", t.join("gone")).unwrap();
    let marker = t.join(format!(".durasync-unsynced-{:016x}", fnv1a(DATA_LINK)));
    std::fs::write(&marker, "").unwrap();
    durable::recover(s.fd(), &Options::default()).unwrap();
    assert_eq!(generations(&t).len(), 2, "marked: what may be on disk stays");
    std::fs::remove_file(&marker).unwrap();
    let removed = durable::recover(s.fd(), &Options::default()).unwrap();
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert_eq!(generations(&t).len(), 1);
    assert!(std::fs::symlink_metadata(t.join("gone")).is_err());
    assert_eq!(seen(&t), want(&[("a", b"a", 0o644)]));
}

/// The marker name `marker.rs` gives (FNV-1a of the target's name).
fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[test]
fn keeping_the_previous_contents_is_refused_in_the_symlink_layout() {
    let s = Scratch::new();
    let opts = Options { keep_previous: true, ..linked() };
    let err = durable::sync_dir(s.fd(), "t", &tree(&[("a", b"a", 0o644)]), &opts).unwrap_err();
    assert!(matches!(err, Error::Layout { .. }), "{err}");
    assert!(!s.join("t").exists());
}

/// `lower/target` with two files, mounted as overlayfs at `merged`.
fn overlay(s: &Scratch) -> Option<Mounted> {
    for d in ["lower/target", "upper", "work", "merged", "src"] {
        std::fs::create_dir_all(s.join(d)).unwrap();
    }
    std::fs::write(s.join("lower/target/f"), "baked f").unwrap();
    std::fs::write(s.join("lower/target/g"), "baked g").unwrap();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={},redirect_dir=off",
        s.join("lower").display(),
        s.join("upper").display(),
        s.join("work").display()
    );
    Mounted::new(&["-t", "overlay", "overlay", "-o", &opts], &s.join("merged"))
}

#[test]
fn a_directory_baked_into_an_overlayfs_lower_layer_is_refused_naming_the_layout_and_synced_with_it() {
    if !is_root() {
        return crate::support::cannot_check("mounting overlayfs needs root");
    }
    let s = Scratch::on_tmpfs();
    let Some(_m) = overlay(&s) else {
        return crate::support::cannot_check("mount -t overlay failed (no overlay module?)");
    };
    let merged = s.join("merged");
    std::fs::write(s.join("src/f"), "new f").unwrap();
    std::fs::write(s.join("src/h"), "new h").unwrap();
    let src = s.join("src");
    let src = src.to_str().unwrap();
    let out = durasync(&["sync", "target", "--from", src], &merged);
    assert_eq!(out.status.code(), Some(UNSUPPORTED), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in ["overlayfs", "os error 18", "layout = \"symlink\"", "--layout symlink"] {
        assert!(err.contains(needle), "the refusal does not name {needle:?}: {err}");
    }
    assert_eq!(seen(&merged.join("target")), want(&[("f", b"baked f", 0o644), ("g", b"baked g", 0o644)]));

    // `doctor` agrees: the exchange fails there, the symlink layout works.
    let doctor = |layout: &str| {
        let out = durasync(&["doctor", "--json", "--layout", layout, "target"], &merged);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), v)
    };
    let (code, v) = doctor("exchange");
    assert_eq!(code, Some(15), "{v:#}");
    let (code, v) = doctor("symlink");
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v[0]["checks"]["layout"]["result"], "ok", "{v:#}");
    assert_eq!(v[0]["checks"]["overlayfs"]["result"], "ok", "{v:#}");
    assert_eq!(v[0]["checks"]["links and rename"]["result"], "ok", "{v:#}");

    let out = durasync(&["sync", "target", "--from", src, "--layout", "symlink"], &merged);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(seen(&merged.join("target")), want(&[("f", b"new f", 0o644), ("h", b"new h", 0o644)]));
    let (code, v) = doctor("exchange");
    assert_eq!(code, Some(0), "a target in the layout is examined in it: {v:#}");
    assert_eq!(v[0]["checks"]["layout"]["detail"], "in the symlink layout", "{v:#}");
    std::fs::write(s.join("src/f"), "newer f").unwrap();
    let out = durasync(&["sync", "target", "--from", src], &merged);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(seen(&merged.join("target")), want(&[("f", b"newer f", 0o644), ("h", b"new h", 0o644)]));
    assert_eq!(generations(&merged.join("target")).len(), 1);
}

#[test]
fn a_fuse_file_system_refusing_every_renameat2_flag_is_synced_in_the_symlink_layout() {
    if !is_root() {
        return crate::support::cannot_check("mounting a FUSE file system (bindfs) needs root here");
    }
    if !crate::support::on_path("bindfs") {
        return crate::support::cannot_check("bindfs is not installed (apt-get install bindfs)");
    }
    let s = Scratch::new();
    for d in ["back", "mnt"] {
        std::fs::create_dir(s.join(d)).unwrap();
    }
    let back = s.join("back");
    let Some(_m) = Mounted::fuse("bindfs", &[back.to_str().unwrap()], &s.join("mnt")) else {
        return crate::support::cannot_check("bindfs failed to mount");
    };
    let mnt = open_dir(&s.join("mnt"));
    let one: Tree = tree(&[("a", b"a1", 0o644), ("sub/b", b"b1", 0o600)]);
    let err = durable::sync_dir(mnt.as_fd(), "t", &one, &Options::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, Error::Unsupported { .. }) && msg.contains("fuse") && msg.contains("symlink"),
        "{msg}"
    );
    assert!(!s.join("mnt/t").exists());
    durable::sync_dir(mnt.as_fd(), "t", &one, &linked()).unwrap();
    assert_eq!(seen(&s.join("mnt/t")), want(&[("a", b"a1", 0o644), ("sub/b", b"b1", 0o600)]));
    let two: Tree = tree(&[("a", b"a2", 0o644)]);
    durable::sync_dir(mnt.as_fd(), "t", &two, &Options::default()).unwrap();
    assert_eq!(seen(&s.join("mnt/t")), want(&[("a", b"a2", 0o644)]));
    // A directory of files already there is taken over too.
    std::fs::create_dir(s.join("mnt/u")).unwrap();
    std::fs::write(s.join("mnt/u/x"), "x").unwrap();
    durable::sync_dir(mnt.as_fd(), "u", &two, &linked()).unwrap();
    assert_eq!(seen(&s.join("mnt/u")), want(&[("a", b"a2", 0o644)]));
}

#[test]
fn a_validator_sees_the_new_generation_and_its_refusal_or_a_change_behind_its_back_changes_nothing() {
    let s = Scratch::new();
    std::fs::create_dir(s.join("src")).unwrap();
    std::fs::write(s.join("src/f"), "one").unwrap();
    let sync = |validate: &[&str]| {
        let mut args = vec!["sync", "t", "--from", "src", "--layout", "symlink", "--validate"];
        args.extend_from_slice(validate);
        durasync(&args, s.path())
    };
    let out = sync(&[
        "sh",
        "-c",
        "test \"$(cat \"$0\"/f)\" = one && case $0 in */.durasync-gen.*) ;; *) exit 1;; esac",
        "{staged}",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(s.join("src/f"), "two").unwrap();
    let refused = sync(&["false"]);
    assert_eq!(refused.status.code(), Some(6), "{}", String::from_utf8_lossy(&refused.stderr));
    assert_eq!(std::fs::read_to_string(s.join("t/f")).unwrap(), "one");
    assert_eq!(generations(&s.join("t")).len(), 1, "the refused generation is removed");
    let sneaky = sync(&["sh", "-c", "echo changed > \"$0\"/f", "{staged}"]);
    assert!(!sneaky.status.success(), "a generation changed after its check went live");
    assert!(String::from_utf8_lossy(&sneaky.stderr).contains("changed"), "{sneaky:?}");
    assert_eq!(std::fs::read_to_string(s.join("t/f")).unwrap(), "one");
    let ok = sync(&["true"]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert_eq!(std::fs::read_to_string(s.join("t/f")).unwrap(), "two");
}
