//! `durasync doctor` against real places: the scratch file system (ext4,
//! xfs or btrfs in CI's runs on loop devices), a mount point, an overlayfs
//! lower-layer directory, a missing parent and a manifest's roots. Where it
//! says a sync fails, a real `durasync sync` there fails too.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{Mounted, Scratch, durasync};

const DOCTOR_FAILED: i32 = 15;
const UNSUPPORTED: i32 = 5;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The file system type `stat -f` names for `path` (GNU coreutils'
/// table, independent of durasync's).
fn stat_fs_type(path: &Path) -> String {
    let out = Command::new("stat").args(["-f", "-c", "%T"]).arg(path).output().expect("stat -f");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn json(path: &Path, extra: &[&str]) -> (Output, serde_json::Value) {
    let mut args = vec!["doctor", "--json"];
    args.extend_from_slice(extra);
    let p = path.to_str().unwrap();
    if !p.is_empty() {
        args.push(p);
    }
    let out = durasync(&args, Path::new("/"));
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    (out, v)
}

#[test]
fn doctor_on_the_scratch_file_system_names_it_and_finds_renameat2_working() {
    let s = Scratch::new();
    std::fs::create_dir(s.join("target")).unwrap();
    std::fs::write(s.join("target/a"), "a").unwrap();
    let (out, v) = json(&s.join("target"), &[]);
    let e = &v[0];
    assert_eq!(e["checks"]["renameat2"]["result"], "ok", "{v:#}");
    assert_eq!(e["checks"]["write permission"]["result"], "ok", "{v:#}");
    assert_eq!(e["checks"]["mount point"]["result"], "ok", "{v:#}");
    let fs = e["checks"]["file system"]["detail"].as_str().unwrap();
    let want = match stat_fs_type(s.path()).as_str() {
        "ext2/ext3" => "ext2/3/4",
        "xfs" => "xfs",
        "btrfs" => "btrfs",
        "tmpfs" => "tmpfs",
        "overlayfs" => "overlayfs",
        other => panic!("a scratch file system this test does not know: {other}"),
    };
    assert!(fs.starts_with(want), "{fs} is not {want}");
    // tmpfs is a warning (nothing survives a power loss), never a failure.
    assert_ne!(e["verdict"], "fail", "{v:#}");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The probe left nothing but the lock file a sync also makes.
    let mut left: Vec<String> =
        std::fs::read_dir(s.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(left, vec![".durasync.lock", "target"]);
}

#[test]
fn doctor_of_a_target_whose_parent_is_missing_fails_with_its_own_status() {
    let s = Scratch::new();
    let out = durasync(&["doctor", s.join("no/such/target").to_str().unwrap()], s.path());
    assert_eq!(out.status.code(), Some(DOCTOR_FAILED), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.starts_with("fail: ") && text.contains("cannot be opened"), "{text}");
    let none = durasync(&["doctor"], s.path());
    assert_eq!(none.status.code(), Some(2), "nothing to examine is a usage error");
}

#[test]
fn doctor_fails_a_target_that_is_a_mount_point_and_sync_fails_there_too() {
    if !is_root() {
        return crate::support::cannot_check("mounting needs root");
    }
    let s = Scratch::new();
    std::fs::create_dir(s.join("target")).unwrap();
    let Some(_m) = Mounted::new(&["-t", "tmpfs", "-o", "size=1m", "tmpfs"], &s.join("target")) else {
        return crate::support::cannot_check("mount -t tmpfs failed");
    };
    std::fs::write(s.join("target/old"), "old").unwrap();
    let (out, v) = json(&s.join("target"), &[]);
    assert_eq!(out.status.code(), Some(DOCTOR_FAILED), "{v:#}");
    assert_eq!(v[0]["checks"]["mount point"]["result"], "fail", "{v:#}");
    std::fs::create_dir(s.join("src")).unwrap();
    std::fs::write(s.join("src/new"), "new").unwrap();
    let sync = durasync(&["sync", "target", "--from", "src"], s.path());
    assert!(!sync.status.success(), "a sync onto a mount point cannot swap it");
    assert_eq!(std::fs::read_to_string(s.join("target/old")).unwrap(), "old", "the target stays as it was");
}

#[test]
fn doctor_fails_an_overlayfs_lower_layer_directory_where_sync_is_refused_and_passes_a_new_one() {
    if !is_root() {
        return crate::support::cannot_check("mounting overlayfs needs root");
    }
    let s = Scratch::on_tmpfs();
    for d in ["lower/target", "upper", "work", "merged"] {
        std::fs::create_dir_all(s.join(d)).unwrap();
    }
    std::fs::write(s.join("lower/target/old"), "old").unwrap();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={},redirect_dir=off",
        s.join("lower").display(),
        s.join("upper").display(),
        s.join("work").display()
    );
    let Some(_m) = Mounted::new(&["-t", "overlay", "overlay", "-o", &opts], &s.join("merged")) else {
        return crate::support::cannot_check("mount -t overlay failed (no overlay module?)");
    };
    let merged = s.join("merged");
    let (out, v) = json(&merged.join("target"), &[]);
    assert_eq!(out.status.code(), Some(DOCTOR_FAILED), "{v:#}");
    assert_eq!(v[0]["checks"]["overlayfs"]["result"], "fail", "{v:#}");
    assert!(v[0]["checks"]["overlayfs"]["detail"].as_str().unwrap().contains("lower layer"), "{v:#}");
    // The real sync agrees: refused as unsupported, nothing changed.
    std::fs::create_dir(merged.join("src")).unwrap();
    std::fs::write(merged.join("src/new"), "new").unwrap();
    let sync = durasync(&["sync", "target", "--from", "src"], &merged);
    assert_eq!(sync.status.code(), Some(UNSUPPORTED), "{}", String::from_utf8_lossy(&sync.stderr));
    assert_eq!(std::fs::read_to_string(merged.join("target/old")).unwrap(), "old");
    // A new target in the merged directory is an upper-layer one: fine.
    let (out, v) = json(&merged.join("fresh"), &[]);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v[0]["checks"]["renameat2"]["result"], "ok", "{v:#}");
    let sync = durasync(&["sync", "fresh", "--from", "src"], &merged);
    assert!(sync.status.success(), "{}", String::from_utf8_lossy(&sync.stderr));
}

#[test]
fn doctor_examines_every_root_of_a_manifest() {
    let s = Scratch::new();
    std::fs::create_dir(s.join("certs")).unwrap();
    std::fs::write(s.join("plugin.wasm"), b"\0asm").unwrap();
    let manifest = format!(
        "name = \"m\"\nwasm = \"plugin.wasm\"\nsha256 = \"{}\"\n[roots.certs]\npath = \"{}\"\naccess = \"rw\"\n",
        durasync::digest::sha256_hex(b"\0asm"),
        s.join("certs").display()
    );
    std::fs::write(s.join("plugin.toml"), manifest).unwrap();
    let (out, v) = json(Path::new(""), &["--manifest", s.join("plugin.toml").to_str().unwrap()]);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v[0]["root"], "certs", "{v:#}");
    assert_eq!(v[0]["checks"]["root"]["result"], "ok", "{v:#}");
    assert_eq!(v[0]["checks"]["renameat2"]["result"], "ok", "{v:#}");
}

#[test]
fn doctor_warns_on_tmpfs_where_nothing_survives_a_power_loss() {
    if !is_root() {
        return crate::support::cannot_check("mounting tmpfs needs root");
    }
    let s = Scratch::new();
    std::fs::create_dir(s.join("mnt")).unwrap();
    let Some(_m) = Mounted::new(&["-t", "tmpfs", "-o", "size=1m", "tmpfs"], &s.join("mnt")) else {
        return crate::support::cannot_check("mount -t tmpfs failed");
    };
    let (out, v) = json(&s.join("mnt/target"), &[]);
    assert!(out.status.success(), "a warning is not a failure: {v:#}");
    assert_eq!(v[0]["verdict"], "warn", "{v:#}");
    assert_eq!(v[0]["checks"]["file system"]["result"], "warn", "{v:#}");
    assert!(v[0]["checks"]["file system"]["detail"].as_str().unwrap().starts_with("tmpfs"), "{v:#}");
    assert_eq!(v[0]["checks"]["renameat2"]["result"], "ok", "{v:#}");
}
