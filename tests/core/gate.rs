//! The gate before the swap (`durable::Gate`): it sees the complete staged
//! tree (also when one file changed, and carried files included) or the
//! staged file of a write, with the counts the guardrails use; a refusal
//! leaves the target byte for byte as it was and no staging behind; an
//! unchanged target asks no gate.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::sync::Mutex;

use durasync::durable::{self, Gate, NoProbe, Refusal, Staged, StagedKind};

use crate::common::*;

/// What one call showed: kind, files, old files, removed files, contents.
type Call = (StagedKind, u64, Option<u64>, u64, BTreeMap<String, Vec<u8>>);

/// A gate that reads what it is shown (every file of the staged tree, by
/// relative path, or the staged file) and accepts unless told to refuse.
#[derive(Default)]
struct Seen {
    refuse: bool,
    calls: Mutex<Vec<Call>>,
}

impl Gate for Seen {
    fn check(&self, s: &Staged<'_>) -> Result<(), Refusal> {
        let dir = std::path::PathBuf::from(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            s.parent.as_raw_fd()
        }))
        .join(s.staging);
        let mut files = BTreeMap::new();
        match s.kind {
            StagedKind::Dir => {
                for e in walk(&dir) {
                    let rel = e.strip_prefix(&dir).unwrap().to_string_lossy().into_owned();
                    files.insert(rel, std::fs::read(&e).unwrap());
                }
            }
            StagedKind::File => {
                files.insert(String::new(), std::fs::read(&dir).unwrap());
            }
        }
        self.calls.lock().unwrap().push((s.kind, s.files, s.old_files, s.removed_files, files));
        if self.refuse {
            return Err(Refusal { by: "test gate".into(), reason: "no thanks".into() });
        }
        Ok(())
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out.sort();
    out
}

fn with_gate<'a>(gate: &'a dyn Gate) -> durable::Options<'a> {
    durable::Options { gate: Some(gate), ..opts(&NoProbe, 4) }
}

fn files(t: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
    t.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect()
}

#[test]
fn a_refused_sync_leaves_the_target_byte_for_byte_unchanged_and_no_staging() {
    let s = Scratch::new();
    let old = tree(&[("a", b"old a", 0o644), ("sub/b", b"old b", 0o600)]);
    write_tree(&s.join("target"), &old, 0o750);
    let before = snapshot(&s.join("target"));
    let gate = Seen { refuse: true, ..Seen::default() };
    let new = tree(&[("a", b"new a", 0o644), ("c", b"c", 0o644)]);
    let err = durable::sync_dir(s.fd(), "target", &new, &with_gate(&gate)).unwrap_err();
    assert_eq!(err.to_string(), "target: refused by test gate: no thanks; nothing was changed");
    assert!(matches!(err, durable::Error::Refused { .. }));
    assert_eq!(snapshot(&s.join("target")), before);
    assert!(leftovers(s.path()).is_empty(), "{:?}", leftovers(s.path()));
    // The gate saw the whole new tree, with the counts guardrails use:
    // 2 files now, 2 before, 1 removed (sub/b).
    let calls = gate.calls.lock().unwrap();
    assert_eq!(calls.len(), 1);
    let (kind, n, old_n, removed, seen) = &calls[0];
    assert_eq!((*kind, *n, *old_n, *removed), (StagedKind::Dir, 2, Some(2), 1));
    assert_eq!(seen, &files(&[("a", b"new a"), ("c", b"c")]));
}

#[test]
fn with_a_gate_a_one_file_change_is_staged_whole_with_the_carried_files() {
    let s = Scratch::new();
    let old = tree(&[("same", b"same", 0o644), ("changed", b"v1", 0o644), ("d/deep", b"deep", 0o644)]);
    write_tree(&s.join("target"), &old, 0o755);
    let gate = Seen::default();
    let new = tree(&[("same", b"same", 0o644), ("changed", b"v2", 0o644), ("d/deep", b"deep", 0o644)]);
    let r = durable::sync_dir(s.fd(), "target", &new, &with_gate(&gate)).unwrap();
    assert_eq!(r.outcome, durable::Outcome::Replaced);
    assert_eq!(snapshot(&s.join("target")), expected(&new, 0o755));
    let calls = gate.calls.lock().unwrap();
    let (_, n, old_n, removed, seen) = &calls[0];
    assert_eq!((*n, *old_n, *removed), (3, Some(3), 0));
    assert_eq!(seen, &files(&[("changed", b"v2"), ("d/deep", b"deep"), ("same", b"same")]));
    assert!(leftovers(s.path()).is_empty());
}

#[test]
fn an_unchanged_target_asks_no_gate_and_a_new_one_has_no_old_count() {
    let s = Scratch::new();
    let t = tree(&[("a", b"a", 0o644)]);
    let gate = Seen::default();
    let r = durable::sync_dir(s.fd(), "target", &t, &with_gate(&gate)).unwrap();
    assert_eq!(r.outcome, durable::Outcome::Created);
    let r = durable::sync_dir(s.fd(), "target", &t, &with_gate(&gate)).unwrap();
    assert_eq!(r.outcome, durable::Outcome::Unchanged);
    let calls = gate.calls.lock().unwrap();
    assert_eq!(calls.len(), 1, "the unchanged sync asked no gate");
    assert_eq!((calls[0].1, calls[0].2), (1, None));
}

#[test]
fn a_write_shows_its_staged_file_and_a_refusal_keeps_the_old_bytes() {
    let s = Scratch::new();
    std::fs::write(s.join("f.json"), b"{\"old\": 1}").unwrap();
    let gate = Seen { refuse: true, ..Seen::default() };
    let dir = open_dir(s.path());
    let err =
        durable::write_file(dir.as_fd(), "f.json", b"{broken", Some(0o644), &with_gate(&gate)).unwrap_err();
    assert!(matches!(err, durable::Error::Refused { .. }), "{err}");
    assert_eq!(std::fs::read(s.join("f.json")).unwrap(), b"{\"old\": 1}");
    assert!(leftovers(s.path()).is_empty(), "{:?}", leftovers(s.path()));
    let calls = gate.calls.lock().unwrap();
    let (kind, n, old_n, removed, seen) = &calls[0];
    assert_eq!((*kind, *n, *old_n, *removed), (StagedKind::File, 1, Some(1), 0));
    assert_eq!(seen, &files(&[("", b"{broken")]));
}

#[test]
fn sync_and_write_validate_refuse_with_status_6_and_change_nothing() {
    if std::process::Command::new("python3").args(["-c", "import json"]).output().is_err() {
        return crate::support::cannot_check("python3 is not installed");
    }
    let s = Scratch::new();
    let check = ["python3", "-c", "import json, sys; json.load(open(sys.argv[1]))"];
    std::fs::create_dir(s.join("src")).unwrap();
    std::fs::write(s.join("src/app.json"), b"{\"v\": 1}").unwrap();
    let ok = durasync(
        &[&["sync", "target", "--from", "src", "--validate"][..], &check, &["{staged}/app.json"]].concat(),
        s.path(),
    );
    assert!(ok.status.success(), "{}", stderr(&ok));
    let before = snapshot(&s.join("target"));

    std::fs::write(s.join("src/app.json"), b"{\"v\": ").unwrap();
    let bad = durasync(
        &[&["sync", "target", "--from", "src", "--validate"][..], &check, &["{staged}/app.json"]].concat(),
        s.path(),
    );
    assert_eq!(bad.status.code(), Some(6), "{}", stderr(&bad));
    let err = stderr(&bad);
    assert!(
        err.contains("refused by validator python3: `python3` exited with status 1")
            && err.contains("Expecting value"),
        "{err}"
    );
    assert_eq!(snapshot(&s.join("target")), before);
    assert!(leftovers(s.path()).is_empty(), "{:?}", leftovers(s.path()));

    // write: the staged file itself is `{staged}`.
    let bad = durasync(
        &[&["write", "target/app.json", "--from", "src/app.json", "--validate"][..], &check, &["{staged}"]]
            .concat(),
        s.path(),
    );
    assert_eq!(bad.status.code(), Some(6), "{}", stderr(&bad));
    // The write took its lock beside the file; nothing else changed.
    let mut after = snapshot(&s.join("target")).unwrap();
    after.remove(".durasync.lock");
    assert_eq!(Some(after), before);
    assert!(leftovers(&s.join("target")).is_empty());
    std::fs::write(s.join("src/app.json"), b"{\"v\": 2}").unwrap();
    let ok = durasync(
        &[&["write", "target/app.json", "--from", "src/app.json", "--validate"][..], &check, &["{staged}"]]
            .concat(),
        s.path(),
    );
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert_eq!(std::fs::read(s.join("target/app.json")).unwrap(), b"{\"v\": 2}");
}

/// `durasync sync target --from src --validate sh -c SCRIPT _ {staged}` in `dir`.
fn sync_validated(dir: &std::path::Path, target: &str, script: &str) -> std::process::Output {
    durasync(&["sync", target, "--from", "src", "--validate", "sh", "-c", script, "_", "{staged}"], dir)
}

/// A target `t` synced (through an accepting validator) from `src` with
/// files `f1` and `f2`, and its snapshot.
fn validated_f1_f2() -> (Scratch, Snapshot) {
    let s = Scratch::new();
    std::fs::create_dir(s.join("src")).unwrap();
    std::fs::write(s.join("src/f1"), b"one\n").unwrap();
    std::fs::write(s.join("src/f2"), b"two\n").unwrap();
    assert!(sync_validated(s.path(), "t", "exit 0").status.success());
    let before = snapshot(&s.join("t"));
    (s, before)
}

#[test]
fn a_refusing_validator_cannot_change_the_live_target_through_a_carried_file() {
    use std::os::unix::fs::PermissionsExt;
    let (s, before) = validated_f1_f2();
    // f1 is unchanged (a sync would carry it), f2 changes.
    std::fs::write(s.join("src/f2"), b"two, changed\n").unwrap();
    let out = sync_validated(s.path(), "t", r#"echo INJECTED >> "$1/f1"; chmod 600 "$1/f1"; exit 1"#);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert!(stderr(&out).contains("nothing was changed"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(s.join("t/f1")).unwrap(),
        b"one\n",
        "the live file was written through {{staged}}"
    );
    assert_eq!(std::fs::metadata(s.join("t/f1")).unwrap().permissions().mode() & 0o777, 0o644);
    assert_eq!(snapshot(&s.join("t")), before);
    assert!(leftovers(s.path()).is_empty(), "{:?}", leftovers(s.path()));
}

#[test]
fn a_validator_that_changes_what_it_was_shown_is_refused_and_nothing_changes() {
    let (s, before) = validated_f1_f2();
    std::fs::write(s.join("src/f2"), b"two, changed\n").unwrap();
    // Accepting after an edit, a chmod, a new file, an emptied tree: what
    // would go live is not what was checked.
    for script in [
        r#"echo EDITED >> "$1/f2""#,
        r#"chmod 600 "$1/f1""#,
        r#"echo new > "$1/extra""#,
        r#"rm -f "$1/f1" "$1/f2""#,
        r#"ln -sf /etc/passwd "$1/f1""#,
        // Undone edits: the same bytes again, but not what was made durable.
        r#"cp "$1/f1" "$1/copy" && mv "$1/copy" "$1/f1""#,
        r#"cp "$1/f1" "$1/copy" && cat "$1/copy" > "$1/f1" && rm "$1/copy""#,
    ] {
        let out = sync_validated(s.path(), "t", script);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(6), "{script}: {err}");
        assert!(err.contains("changed the staged contents"), "{script}: {err}");
        assert_eq!(snapshot(&s.join("t")), before, "{script}");
        assert!(leftovers(s.path()).is_empty(), "{script}: {:?}", leftovers(s.path()));
    }
    // write: the staged file itself.
    let out = durasync(
        &[
            "write",
            "t/f2",
            "--from",
            "src/f2",
            "--validate",
            "sh",
            "-c",
            r#"echo EDITED >> "$1""#,
            "_",
            "{staged}",
        ],
        s.path(),
    );
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert!(stderr(&out).contains("changed the staged contents"), "{}", stderr(&out));
    assert_eq!(std::fs::read(s.join("t/f2")).unwrap(), b"two\n");
    // A validator that only reads is accepted and its tree goes live.
    let out = sync_validated(s.path(), "t", r#"cat "$1/f1" "$1/f2" > /dev/null"#);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read(s.join("t/f2")).unwrap(), b"two, changed\n");
}

#[test]
fn a_directory_named_like_a_placeholder_is_not_substituted_again() {
    let s = Scratch::new();
    std::fs::create_dir(s.join("src")).unwrap();
    std::fs::write(s.join("src/app.conf"), b"BAD\n").unwrap();
    std::fs::create_dir(s.join("{target}")).unwrap();
    // The staged path holds `{target}`: substituted again, it would name a
    // path that does not exist, grep would fail to read it, and `!` would
    // accept.
    let out = sync_validated(s.path(), "{target}/conf", r#"test -f "$1/app.conf" && ! grep -rq BAD "$1""#);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert!(!s.join("{target}/conf").exists());
    std::fs::write(s.join("src/app.conf"), b"good\n").unwrap();
    let out = sync_validated(s.path(), "{target}/conf", r#"test -f "$1/app.conf" && ! grep -rq BAD "$1""#);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn validator_output_is_logged_with_its_control_characters_escaped() {
    let s = Scratch::new();
    std::fs::create_dir(s.join("src")).unwrap();
    std::fs::write(s.join("src/f"), b"x").unwrap();
    let out = sync_validated(s.path(), "t", r#"printf 'bad\rINFO forged line\033[2K'; exit 1"#);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    let err = stderr(&out);
    // (The log's own colours are ESC sequences; the validator's is not kept raw.)
    assert!(!err.contains('\r') && !err.contains("\u{1b}[2K"), "{err:?}");
    assert!(err.contains(r"bad\rINFO forged line\u{1b}[2K"), "{err:?}");
}
