//! Containment (issue 10, item 4): a hostile plugin can neither keep the
//! host working past its deadline or budgets, nor drive the operator's
//! terminal or forge the host's lines, nor plant setuid files, nor get an
//! error that names the wrong cause.

use super::*;

/// Raw output must hold no escape character (ESC, CSI as C1, BEL) and no
/// line a plugin forged at the start of a line.
fn assert_clean(what: &str, raw: &[u8]) {
    let s = String::from_utf8_lossy(raw);
    for bad in ['\x1b', '\u{9b}', '\x07', '\r'] {
        // The log's own colour codes are the host's; none of the plugin's get through.
        if bad == '\x1b' {
            let plugin_escapes = ["\x1b]0;", "\x1b[2J", "\x1b[31m red"];
            for e in plugin_escapes {
                assert!(!s.contains(e), "{what}: a raw escape from the plugin got through: {s:?}");
            }
            continue;
        }
        assert!(!s.contains(bad), "{what}: raw {bad:?} got through: {s:?}");
    }
    for line in s.lines() {
        let line = text(line.as_bytes());
        assert!(
            !line.starts_with("durasync: forged") && !line.trim_start().starts_with("WARN durasync: forged"),
            "{what}: a forged line: {line:?}"
        );
    }
}

#[test]
fn a_host_call_is_never_started_after_the_deadline_and_what_committed_is_reported() {
    let fx = Fixture::new("hostile", "rw", "fuel = \"unlimited\"\ntimeout_ms = 50");
    let out = fx.run("slow-then-write", &[], "warn");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(PLUGIN_TRAP), "stdout {stdout}\nstderr {stderr}");
    assert!(stderr.contains("timed out after 50 ms (limits.timeout_ms)"), "{stderr}");
    assert!(!stderr.contains("ESCAPED") && !stdout.contains("ESCAPED"), "{stdout}{stderr}");
    // The call after the deadline was never made: the guest was stopped
    // before it, or the host refused to start it (and says so).
    assert!(!fx.path("data/second").exists(), "a host call ran after the deadline");
    for line in stdout.lines().filter(|l| l.contains("second")) {
        assert!(
            line.starts_with("failed data:second: 0 written") && line.contains("was not started"),
            "{line}"
        );
    }
    // What committed before the deadline is reported as committed.
    if fx.path("data/many").exists() {
        assert!(stdout.contains("created data:many: 4000 written, 0 removed"), "{stdout}");
    }
}

#[test]
fn a_long_sync_is_stopped_at_the_deadline_before_its_commit_point() {
    let fx = Fixture::new("hostile", "rw", "fuel = \"unlimited\"\ntimeout_ms = 400");
    let out = fx.run("huge-sync", &[], "warn");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(PLUGIN_TRAP), "stdout {stdout}\nstderr {stderr}");
    assert!(stderr.contains("timed out after 400 ms (limits.timeout_ms)"), "{stderr}");
    assert!(!stdout.contains("ESCAPED") && !stderr.contains("ESCAPED"), "{stdout}{stderr}");
    // The sync was started and cancelled by the core before its swap:
    // reported as such, nothing committed, nothing left beside the target.
    let line = stdout.lines().find(|l| l.contains("data:many")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("cancelled") && line.contains("nothing was changed"), "{line}");
    assert!(!fx.path("data/many").exists(), "the cancelled sync committed");
    let leftovers: Vec<_> = std::fs::read_dir(fx.path("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".durasync-"))
        .collect();
    assert!(leftovers.is_empty(), "staging left behind: {leftovers:?}");
}

#[test]
fn control_characters_from_a_plugin_are_escaped_in_text_and_json() {
    let fx = Fixture::new("hostile", "rw", "");
    let out = fx.run("terminal", &[], "warn");
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    assert_clean("stdout", &out.stdout);
    assert_clean("stderr", &out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("ok\\u{1b}]0;pwned\\u{7}\n  durasync: forged result line\n  \\u{9b}2J"),
        "{stdout}"
    );
    assert!(stdout.contains("created data:evil\\u{1b}[2Jname: 1 written"), "{stdout}");
    assert!(stderr.contains("forging\\r\\nWARN durasync: forged log line\\u{1b}[31m red"), "{stderr}");
    // The plugin's name for the file is its own business inside its root.
    assert!(fx.path("data/evil\x1b[2Jname").is_file());

    let out = fx.run("terminal", &["--json"], "warn");
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    assert_clean("json stdout", &out.stdout);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["result"], "ok\x1b]0;pwned\x07\r\ndurasync: forged result line\n\u{9b}2J",
        "JSON keeps the value"
    );

    let out = fx.run("terminal-error", &[], "warn");
    assert_eq!(out.status.code(), Some(PLUGIN_ERROR), "{}", text(&out.stderr));
    assert_clean("error stderr", &out.stderr);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("failed: bad\\u{1b}[2J\\rdurasync: forged error line\n  \\u{9b}31m"), "{stderr}");
}

#[test]
fn setuid_setgid_and_sticky_bits_are_refused_unless_the_root_grants_them() {
    let stderr =
        refused("hostile", "rw", "", "setuid", PLUGIN_ERROR, &["sets setuid", "sets setgid", "sets sticky"]);
    let lines = attempt_lines(&stderr);
    assert_eq!(lines.len(), 3, "{stderr}");
    for line in &lines {
        assert!(line.contains("InvalidPath") && line.contains("special_modes = true"), "{line}");
    }
    assert!(lines[0].contains("mode 0o4777"), "the mode is named: {}", lines[0]);

    let fx = Fixture::new("hostile", "rw", "");
    let manifest = std::fs::read_to_string(&fx.manifest).unwrap();
    let granted = manifest.replace("access = \"rw\"\n", "access = \"rw\"\nspecial_modes = true\n");
    std::fs::write(&fx.manifest, granted).unwrap();
    let out = fx.run("setuid-granted", &[], "warn");
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    let mode = std::fs::metadata(fx.path("data/suid")).unwrap().mode() & 0o7777;
    assert_eq!(mode & 0o4000, 0o4000, "granted: the setuid bit is applied ({mode:o})");
}

#[test]
fn exchanging_an_entry_with_its_own_descendant_is_invalid_path_naming_both() {
    let stderr = refused("hostile", "rw", "", "exchange-child", PLUGIN_ERROR, &["one contains the other"]);
    let lines = attempt_lines(&stderr);
    assert_eq!(lines.len(), 2, "{stderr}");
    for line in lines {
        assert!(
            line.contains("InvalidPath") && line.contains("\\\"sub\\\"") && line.contains("sub/f"),
            "{line}"
        );
        assert!(!line.contains("RENAME_EXCHANGE"), "{line}");
    }
}

#[test]
fn too_much_data_in_one_call_names_the_durasync_limit() {
    refused(
        "hostile",
        "rw",
        "call_bytes = 1_048_576",
        "big-call",
        PLUGIN_TRAP,
        &["handed the host more than 1 MiB of data in one call (limits.call_bytes)"],
    );
}

#[test]
fn wasi_exit_is_a_plugin_error_naming_its_status_and_exit_0_is_not_a_trap() {
    let stderr =
        refused("hostile", "rw", "", "exit3", PLUGIN_ERROR, &["exited with status", "wasi:cli/exit"]);
    assert!(!stderr.contains("trapped"), "{stderr}");
    let fx = Fixture::new("hostile", "rw", "");
    let out = fx.run("exit0", &[], "warn");
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("exited with status 0"), "{}", text(&out.stdout));
}

#[test]
fn a_handle_whose_directory_was_removed_is_not_found() {
    let fx = Fixture::new("hostile", "rw", "");
    let out = fx.run("removed-handle", &[], "warn");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(PLUGIN_ERROR), "{stderr}");
    let lines = attempt_lines(&stderr);
    assert_eq!(lines.len(), 2, "{stderr}");
    for line in lines {
        assert!(
            line.contains("NotFound") && line.contains("`data:sub` of this handle was removed"),
            "{line}"
        );
        assert!(!line.contains("lock"), "{line}");
    }
    assert!(!fx.path("data/sub").exists());
}

#[test]
fn a_plugin_error_or_trap_shows_the_reason_then_the_guest_stderr_then_the_backtrace() {
    let stderr = refused("hostile", "rw", "", "stderr-then-fail", PLUGIN_ERROR, &["ValueError: bad input"]);
    let reason = stderr.find("failed: failed after writing a traceback").expect("the reason");
    let tail = stderr.find("Traceback (most recent call last)").expect("the stderr tail");
    assert!(reason < tail, "reason first: {stderr}");

    let stderr = refused("hostile", "rw", "", "stderr-then-trap", PLUGIN_TRAP, &["ValueError: bad input"]);
    let reason = stderr.find("trapped: wasm trap:").expect("the reason");
    let tail = stderr.find("Traceback (most recent call last)").expect("the stderr tail");
    let backtrace = stderr.find("wasm backtrace:").expect("the backtrace");
    assert!(reason < tail && tail < backtrace, "reason, stderr, backtrace: {stderr}");
    let frames = stderr[backtrace..].lines().count();
    assert!(frames <= 2 + 12 + 1, "the backtrace is trimmed: {frames} lines\n{stderr}");
}

/// A 64 GiB sparse file costs nothing on disk and claims 64 GiB in `fstat`.
fn sparse_file(fx: &Fixture) -> PathBuf {
    let path = fx.path("data/sparse");
    std::fs::File::create(&path).unwrap().set_len(64 << 30).unwrap();
    path
}

#[test]
fn reading_a_huge_sparse_file_is_a_limit_error_and_never_aborts_the_host() {
    let fx = Fixture::new("hostile", "ro", "");
    sparse_file(&fx);
    let out = fx.run("read-sparse", &[], "warn");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    // Before: "memory allocation of 68719476736 bytes failed", signal 6.
    assert_eq!(out.status.code(), Some(PLUGIN_ERROR), "stdout {stdout}\nstderr {stderr}");
    assert!(stderr.contains("read-file sparse: Error::Limit("), "{stderr}");
    assert!(
        stderr.contains(
            "sparse: bytes in one read: 68719476736 is over the limit of 16777216 (limits.read_bytes)"
        ),
        "{stderr}"
    );
    assert!(!stdout.contains("ESCAPED") && !stderr.contains("ESCAPED"), "{stdout}{stderr}");
}

#[test]
fn the_read_limit_follows_the_manifest_and_never_exceeds_half_the_guest_memory() {
    let fx = Fixture::new("hostile", "ro", "read_bytes = 1_000_000_000\nmemory_bytes = 8_388_608");
    sparse_file(&fx);
    let out = fx.run("read-sparse", &[], "warn");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(PLUGIN_ERROR), "{stderr}");
    assert!(stderr.contains("is over the limit of 4194304 (limits.read_bytes)"), "{stderr}");
}

#[test]
fn a_dry_run_write_over_a_huge_sparse_file_compares_without_reading_it() {
    let fx = Fixture::new("hostile", "rw", "");
    let sparse = sparse_file(&fx);
    let out = fx.run("write-over-sparse", &["--dry-run"], "warn");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(OK), "stdout {stdout}\nstderr {stderr}");
    assert!(stdout.contains("write-file sparse: Report { outcome: Outcome::Replaced"), "{stdout}");
    assert_eq!(std::fs::metadata(sparse).unwrap().len(), 64 << 30, "a dry run changed the file");
}

#[test]
fn listing_a_directory_of_more_than_the_entry_limit_is_a_limit_error() {
    let fx = Fixture::new("hostile", "ro", "");
    let many = fx.path("data/many");
    std::fs::create_dir(&many).unwrap();
    for i in 0..=durasync::services::limits::MAX_LIST_ENTRIES {
        std::fs::File::create(many.join(i.to_string())).unwrap();
    }
    let out = fx.run("list-many", &[], "warn");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(PLUGIN_ERROR), "stdout {stdout}\nstderr {stderr}");
    assert!(stderr.contains("list-dir many: Error::Limit("), "{stderr}");
    assert!(stderr.contains("entries in one listing: 100001 is over the limit of 100000"), "{stderr}");
}
