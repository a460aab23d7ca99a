//! Cross-check of the counted fsyncs with `strace -c -f` on the real
//! release binary: `durasync sync` (a replace, then the same contents
//! again) and `durasync run` of the bench-sync plugin (a replace).

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Command;

use crate::variants::{contents, plugin_input};

/// The sync-family system calls strace counted in one run of the binary.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub fsync: u64,
    pub fdatasync: u64,
    pub syncfs: u64,
    pub sync: u64,
}

impl Counts {
    pub fn show(&self) -> String {
        let mut s = format!("fsync {}", self.fsync);
        for (name, n) in [("fdatasync", self.fdatasync), ("syncfs", self.syncfs), ("sync", self.sync)] {
            if n > 0 {
                s.push_str(&format!(", {name} {n}"));
            }
        }
        s
    }
}

/// Whether `strace` can trace a child here (it may be present but denied).
pub fn available() -> bool {
    Command::new("strace")
        .args(["-f", "-c", "-o", "/dev/null", "true"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Run `cmd` under `strace -f -c` limited to the sync-family calls.
fn traced(bin: &Path, args: &[OsString], out: &Path) -> Counts {
    let status = Command::new("strace")
        .args(["-f", "-c", "-e", "trace=fsync,fdatasync,syncfs,sync,sync_file_range", "-o"])
        .arg(out)
        .arg(bin)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("running strace");
    assert!(status.success(), "strace {} {args:?} failed: {status}", bin.display());
    let text = std::fs::read_to_string(out).expect("strace output");
    let mut c = Counts::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // `% time  seconds  usecs/call  calls  [errors]  syscall`
        let (Some(name), Some(calls)) = (f.last(), f.get(3).and_then(|v| v.parse::<u64>().ok())) else {
            continue;
        };
        match *name {
            "fsync" => c.fsync = calls,
            "fdatasync" => c.fdatasync = calls,
            "syncfs" => c.syncfs = calls,
            "sync" => c.sync = calls,
            _ => {}
        }
    }
    c
}

fn write_src(dir: &Path, files: &[(String, Vec<u8>)]) {
    std::fs::create_dir_all(dir).expect("src dir");
    for (name, data) in files {
        std::fs::write(dir.join(name), data).expect("src file");
    }
}

fn os(s: &str) -> &OsStr {
    s.as_ref()
}

/// `(replace, unchanged, plugin replace)` counts for `n` files of `size`.
pub fn cross_check(bin: &Path, tmp: &Path, cache: &Path, n: usize, size: usize) -> (Counts, Counts, Counts) {
    let base = tmp.join("strace");
    let (src_a, src_b) = (base.join("src-a"), base.join("src-b"));
    write_src(&src_a, &contents(n, size, 0xA));
    write_src(&src_b, &contents(n, size, 0xB));
    let native = base.join("native");
    std::fs::create_dir_all(&native).expect("native parent");
    let target = native.join("target");
    let sync =
        |src: &Path| [os("sync"), target.as_os_str(), os("--from"), src.as_os_str()].map(OsStr::to_os_string);
    // Untimed set-up: the target exists, so the traced run is a replace.
    let status = Command::new(bin).args(sync(&src_a)).stdout(std::process::Stdio::null()).status();
    assert!(status.expect("durasync sync").success());
    let replace = traced(bin, &sync(&src_b), &base.join("replace.txt"));
    let unchanged = traced(bin, &sync(&src_b), &base.join("unchanged.txt"));

    let root = base.join("plugin");
    std::fs::create_dir_all(&root).expect("plugin root");
    let manifest = base.join("sync.toml");
    std::fs::write(&manifest, crate::sync_manifest_text(&root)).expect("manifest");
    let (in_a, in_b) = (base.join("input-a"), base.join("input-b"));
    std::fs::write(&in_a, plugin_input(&contents(n, size, 0xC))).expect("input");
    std::fs::write(&in_b, plugin_input(&contents(n, size, 0xD))).expect("input");
    let run = |input: &Path| {
        [
            os("run"),
            manifest.as_os_str(),
            os("--cache-dir"),
            cache.as_os_str(),
            os("--input"),
            input.as_os_str(),
        ]
        .map(OsStr::to_os_string)
    };
    let status = Command::new(bin).args(run(&in_a)).stdout(std::process::Stdio::null()).status();
    assert!(status.expect("durasync run").success());
    let plugin = traced(bin, &run(&in_b), &base.join("plugin.txt"));
    (replace, unchanged, plugin)
}

/// Counts for `durasync sync` of a change of `k` files' bytes among `n`
/// (the set-up sync of all `n` is untraced).
pub fn partial_counts(bin: &Path, tmp: &Path, n: usize, k: usize, size: usize) -> Counts {
    let base = tmp.join(format!("strace-partial-{k}"));
    let old = contents(n, size, 0xE0 + k as u64);
    let new = crate::partial::change(&old, &crate::partial::changed_indexes(n, k, 1), 0xE1);
    let (src_a, src_b) = (base.join("src-a"), base.join("src-b"));
    write_src(&src_a, &old);
    write_src(&src_b, &new);
    let parent = base.join("native");
    std::fs::create_dir_all(&parent).expect("native parent");
    let target = parent.join("target");
    let sync =
        |src: &Path| [os("sync"), target.as_os_str(), os("--from"), src.as_os_str()].map(OsStr::to_os_string);
    let status = Command::new(bin).args(sync(&src_a)).stdout(std::process::Stdio::null()).status();
    assert!(status.expect("durasync sync").success());
    traced(bin, &sync(&src_b), &base.join("partial.txt"))
}
