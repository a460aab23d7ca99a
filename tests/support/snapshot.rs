//! What a directory tree holds, for "nothing changed" and "both sides
//! agree" assertions: kind, permission bits and bytes (or link target) of
//! every entry, links never followed, fifos and devices never opened.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Add every entry beneath `path` (shown as `rel`) to `out`.
pub fn snapshot(path: &Path, rel: &str, out: &mut BTreeMap<String, String>) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    let mode = meta.mode() & 0o7777;
    let ft = meta.file_type();
    if ft.is_symlink() {
        out.insert(rel.into(), format!("link -> {}", std::fs::read_link(path).unwrap().display()));
    } else if ft.is_dir() {
        out.insert(rel.into(), format!("dir {mode:o}"));
        for e in std::fs::read_dir(path).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            snapshot(&e.path(), &format!("{rel}/{name}"), out);
        }
    } else if ft.is_file() {
        let bytes = std::fs::read(path).unwrap();
        out.insert(rel.into(), format!("file {mode:o} {}", String::from_utf8_lossy(&bytes)));
    } else {
        out.insert(rel.into(), format!("other {mode:o}"));
    }
}
