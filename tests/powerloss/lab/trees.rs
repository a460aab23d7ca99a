//! The trees a round moves between and how a recovered target is judged:
//! generation A (the golden image's), B (a sync with carried, changed,
//! mode-only, added and removed files and new subdirectories), C (B with
//! one file changed: the one-file fast path), and the lone file F.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::snapshot::{self, snapshot};

/// One file of a tree: relative path, bytes, permission bits.
pub type Entry = (String, Vec<u8>, u32);

/// What a directory holds beneath it, by relative path ([`contents`]).
pub type Contents = BTreeMap<String, snapshot::Entry>;

/// Bytes of a file: a header naming it and its generation, padded to `len`
/// so some files span many blocks.
fn bytes(name: &str, tag: &str, len: usize) -> Vec<u8> {
    let mut out = format!("{name} @ {tag}\n").into_bytes();
    let mut i = 0u32;
    while out.len() < len {
        out.extend_from_slice(format!("{tag}{i:06} ").as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// The target's three generations.
pub fn generation(which: char) -> Vec<Entry> {
    let mut t: Vec<Entry> = Vec::new();
    // Carried: the same in A, B and C.
    for (i, len) in [(1, 40_000), (2, 300), (3, 9_000), (4, 0)] {
        let n = format!("carried-{i}");
        t.push((n.clone(), bytes(&n, "A", len), 0o644));
    }
    t.push(("sub/kept".into(), bytes("sub/kept", "A", 5_000), 0o644));
    match which {
        'A' => {
            t.push(("changed-1".into(), bytes("changed-1", "A", 12_000), 0o644));
            t.push(("changed-2".into(), bytes("changed-2", "A", 100), 0o600));
            t.push(("mode-only".into(), bytes("mode-only", "A", 2_000), 0o644));
            t.push(("removed-1".into(), bytes("removed-1", "A", 7_000), 0o644));
            t.push(("removed-2".into(), bytes("removed-2", "A", 10), 0o755));
            t.push(("sub/changed".into(), bytes("sub/changed", "A", 4_096), 0o640));
        }
        'B' | 'C' => {
            let one = if which == 'C' { "C" } else { "B" };
            t.push(("changed-1".into(), bytes("changed-1", one, 20_000), 0o644));
            t.push(("changed-2".into(), bytes("changed-2", "B", 90), 0o600));
            t.push(("mode-only".into(), bytes("mode-only", "A", 2_000), 0o600));
            t.push(("added-1".into(), bytes("added-1", "B", 33_000), 0o644));
            t.push(("added-2".into(), bytes("added-2", "B", 1), 0o400));
            t.push(("sub/changed".into(), bytes("sub/changed", "B", 4_097), 0o640));
            t.push(("newdir/a".into(), bytes("newdir/a", "B", 6_000), 0o644));
            t.push(("newdir/deeper/b".into(), bytes("newdir/deeper/b", "B", 500), 0o644));
        }
        _ => unreachable!("generations are A, B, C"),
    }
    t
}

/// The lone file's two generations (a `durasync write`).
pub fn lone_file(which: char) -> Vec<u8> {
    bytes("file", &which.to_string(), if which == 'A' { 3_000 } else { 5_000 })
}

/// Write `tree` under `dir` (created), subdirectories 0755, exact modes;
/// with `fsync`, each file is fsynced on the fd that wrote it.
pub fn materialise(tree: &[Entry], dir: &Path, fsync: bool) {
    fs::create_dir_all(dir).unwrap();
    for (rel, data, mode) in tree {
        let path = dir.join(rel);
        let parent = path.parent().unwrap();
        if !parent.exists() {
            fs::create_dir_all(parent).unwrap();
            set_mode_tree(dir, parent);
        }
        let mut f = File::create(&path).unwrap();
        f.write_all(data).unwrap();
        f.set_permissions(fs::Permissions::from_mode(*mode)).unwrap();
        if fsync {
            f.sync_all().unwrap();
        }
    }
}

/// Give every directory from `root` (exclusive) down to `dir` mode 0755.
fn set_mode_tree(root: &Path, dir: &Path) {
    let mut d = dir;
    while d != root {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
        d = d.parent().unwrap();
    }
}

/// What `dir` holds beneath it (names, kinds, bytes, modes), without the
/// entry for `dir` itself.
pub fn contents(dir: &Path) -> Contents {
    let mut out = snapshot(dir).unwrap_or_else(|| panic!("{} does not exist", dir.display()));
    out.remove("");
    out
}

/// The contents a tree materialises to (through a scratch directory, so
/// the comparison uses the one snapshot function).
pub fn expected(tree: &[Entry], scratch: &Path) -> Contents {
    let _ = fs::remove_dir_all(scratch);
    materialise(tree, scratch, false);
    let c = contents(scratch);
    fs::remove_dir_all(scratch).unwrap();
    c
}

/// The "unsynced" marker's prefix (host/src/durable/marker.rs): the marker
/// is deliberately not fsynced, so after a power cut it may come back; it
/// then costs the next sync one full rewrite and is not a leftover.
pub const MARKER_PREFIX: &str = ".durasync-unsynced-";

/// Whether `name` is one of durasync's own entries that may stay: its lock
/// or an "unsynced" marker.
pub fn kept(name: &str) -> bool {
    use durasync::durable::names::{DATA_LINK, LOCK_NAME, is_gen};
    // In a directory in the symlink layout its data link and generations
    // are its contents ([`linked_contents`] checks there is one).
    name == LOCK_NAME || name.starts_with(MARKER_PREFIX) || name == DATA_LINK || is_gen(name)
}

/// What a reader sees in `dir`, a directory in the symlink layout
/// (`durable::layout`), after `durasync recover`: the contents of the
/// generation `.durasync-data` names, once every entry is checked to be
/// the layout's link to a name that generation has (a dangling one is
/// allowed only while the directory is marked unsynced: recovery leaves
/// it then), every name of the generation has its link, and no other
/// generation remains (again unless marked).
pub fn linked_contents(dir: &Path) -> Result<Contents, String> {
    use durasync::durable::names::{DATA_LINK, entry_link, is_gen, is_reserved};
    let data = fs::read_link(dir.join(DATA_LINK)).map_err(|e| format!("{DATA_LINK}: {e}"))?;
    let current = dir.join(&data);
    if !current.is_dir() {
        return Err(format!("{DATA_LINK} names {}, not a generation directory", data.display()));
    }
    let names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let marked = names.iter().any(|n| n.starts_with(MARKER_PREFIX));
    let generations = names.iter().filter(|n| is_gen(n)).count();
    if generations != 1 && !marked {
        return Err(format!("{generations} generations after recover"));
    }
    for name in names.iter().filter(|n| !is_reserved(n)) {
        let link = fs::read_link(dir.join(name)).map_err(|e| format!("{name} is not a link: {e}"))?;
        if link != Path::new(&entry_link(name)) {
            return Err(format!("{name} -> {}, not the layout's link", link.display()));
        }
        if !current.join(name).exists() && !marked {
            return Err(format!("{name}: a dangling link after recover"));
        }
    }
    for e in fs::read_dir(&current).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if !names.contains(&name) {
            return Err(format!("{name} of the generation has no link: a reader does not see it"));
        }
    }
    Ok(contents(&current))
}

/// Every name under `dir` (recursively) that is durasync's but neither its
/// lock nor a marker: leftovers `durasync recover` should have removed.
pub fn leftovers(dir: &Path) -> Vec<String> {
    crate::support::durasync_entries(dir)
        .into_iter()
        // A kept previous tree is durasync's own, not a leftover.
        .filter(|p| !kept(&p.file_name().unwrap().to_string_lossy()) && !is_previous(p))
        .map(|p| p.display().to_string())
        .collect()
}

/// A short description of how `got` differs from `want`.
pub fn diff(got: &Contents, want: &Contents) -> String {
    let mut out = Vec::new();
    for (k, v) in want {
        match got.get(k) {
            None => out.push(format!("missing {k}")),
            Some(g) if g != v => {
                out.push(format!("{k}: {}", format!("{g:?}").chars().take(40).collect::<String>()))
            }
            Some(_) => {}
        }
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        out.push(format!("extra {k}"));
    }
    out.truncate(6);
    out.join("; ")
}

/// Whether `path` is a valid kept previous (host/src/durable/previous.rs):
/// a directory or file with a keep name stating its own inode number.
pub fn is_previous(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let Some(ino) = durasync::durable::names::parse_keep(&name) else { return false };
    fs::symlink_metadata(path).is_ok_and(|m| (m.is_dir() || m.is_file()) && m.ino() == ino)
}
