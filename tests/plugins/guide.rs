//! The authoring guide (`guest-sdk/README.md`), run exactly as written: its
//! `sh` blocks are run in order and its file blocks (```` ```lang PATH ````)
//! are written, in a copy of the repository with `durasync` on `PATH`. The
//! other languages' kit commands are `shell` blocks, not steps of this walk:
//! `kits.rs` builds, installs and runs each kit outside the checkout.

use std::path::Path;
use std::process::Command;

use super::{files, support};

enum Step {
    Shell(String),
    File { path: String, contents: String },
}

/// The guide's steps, in order: `sh` blocks and blocks whose info string
/// names a file. Other blocks (sample output) are not steps.
fn steps(readme: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else { continue };
        let mut block = String::new();
        for l in lines.by_ref() {
            if l == "```" {
                break;
            }
            block.push_str(l);
            block.push('\n');
        }
        let words: Vec<&str> = info.split_whitespace().collect();
        match words[..] {
            ["sh"] => steps.push(Step::Shell(block)),
            [_, path] => steps.push(Step::File { path: path.to_owned(), contents: block }),
            _ => {}
        }
    }
    steps
}

fn sh(dir: &Path, script: &str) -> std::process::Output {
    let durasync_dir = support::durasync().parent().unwrap().to_path_buf();
    let path = format!("{}:{}", durasync_dir.display(), std::env::var("PATH").unwrap_or_default());
    Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        // The outer test build's settings are not the guide reader's.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_MANIFEST_DIR")
        .output()
        .unwrap()
}

/// A copy of the repository's sources (no `target/`, `.git/` or `demo/`) in
/// `dest`, whose `target/` is a folder beside the outer target dir that
/// persists between runs, so only the first run builds everything.
fn copy_repository(dest: &Path, target: &Path) {
    let root = support::workspace_root();
    let copy = format!(
        "tar --exclude=./target --exclude=./.git --exclude=./demo -C '{}' -cf - . | tar -xf - -C '{}'",
        root.display(),
        dest.display()
    );
    let out = sh(&root, &copy);
    assert!(out.status.success(), "copying the repository: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::create_dir_all(target).unwrap();
    std::os::unix::fs::symlink(target, dest.join("target")).unwrap();
}

#[test]
fn the_guide_runs_as_written_on_the_example_plugin_from_cargo_new_to_durasync_run() {
    let root = support::workspace_root();
    let readme = std::fs::read_to_string(root.join("guest-sdk/README.md")).unwrap();
    let steps = steps(&readme);
    let shells = steps.iter().filter(|s| matches!(s, Step::Shell(_))).count();
    assert!(shells >= 5 && steps.len() <= 12, "the guide has {} steps", steps.len());
    // The guide's plugin is the example plugin, byte for byte.
    for step in &steps {
        if let Step::File { path, contents } = step
            && let Some(rel) = path.strip_prefix("plugins/hello/src/")
        {
            let example = std::fs::read_to_string(root.join("plugins/example/src").join(rel)).unwrap();
            assert_eq!(contents, &example, "the guide's {path} differs from plugins/example/src/{rel}");
        }
    }

    let tmp = tempfile::Builder::new().prefix("durasync-guide-").tempdir().unwrap();
    let target = support::wasm::target_dir().parent().unwrap().join("guide");
    copy_repository(tmp.path(), &target);
    // A previous run's component must not count: step 5 must build it.
    let _ = std::fs::remove_file(target.join("wasm32-wasip2/release/hello.wasm"));

    let mut outputs = Vec::new();
    for step in &steps {
        match step {
            Step::Shell(script) => {
                let out = sh(tmp.path(), script);
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                assert!(
                    out.status.success(),
                    "guide step failed:\n{script}\nstdout:\n{stdout}\nstderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                outputs.push(stdout);
            }
            Step::File { path, contents } => std::fs::write(tmp.path().join(path), contents).unwrap(),
        }
    }

    let members = std::fs::read_to_string(tmp.path().join("Cargo.toml")).unwrap();
    assert!(members.contains("\"plugins/hello\""), "cargo new added the crate to the workspace");
    let written = files(&tmp.path().join("demo/hello"));
    assert_eq!(written["env/GREETING"], (0o644, b"hello\n".to_vec()));
    assert_eq!(written["env/TARGET"], (0o644, b"world\n".to_vec()));
    let first_run = &outputs[outputs.len() - 2];
    assert!(
        first_run.starts_with("env: created (2 written, 0 removed)\ncreated out:env: 2 written"),
        "{first_run}"
    );
    let again: serde_json::Value = serde_json::from_str(outputs.last().unwrap().trim()).unwrap();
    assert_eq!(again["result"], "env: unchanged (0 written, 0 removed)");
    assert_eq!(again["operations"][0]["outcome"], "unchanged");
}
