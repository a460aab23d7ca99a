//! The committed manifests pin exactly what a fresh build produces, here
//! and in a copy of the repository in another folder (as CI builds it).

use std::process::Command;

use super::{sha256_of_file, support, wasm};

const PLUGINS: [&str; 3] = ["certsync", "installer", "example"];

fn manifest(package: &str) -> toml::Table {
    let path = support::workspace_root().join("plugins").join(package).join("plugin.toml");
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn committed_manifests_pin_the_sha256_of_the_components_the_build_produces() {
    for package in PLUGINS {
        let m = manifest(package);
        assert_eq!(m["name"].as_str(), Some(package));
        assert_eq!(
            m["wasm"].as_str().unwrap(),
            format!("../../target/wasm/wasm32-wasip2/release/{package}.wasm"),
            "plugins/{package}/plugin.toml names where demo.sh and the tests put the component"
        );
        let built = sha256_of_file(&wasm(package));
        assert_eq!(
            m["sha256"].as_str().unwrap(),
            built,
            "plugins/{package}/plugin.toml pins another build: set sha256 = \"{built}\""
        );
    }
}

#[test]
fn a_copy_of_the_repository_in_another_folder_builds_byte_identical_components() {
    let root = support::workspace_root();
    // A fixed place beside the target dir, so later runs build incrementally.
    let base = support::wasm::target_dir().parent().unwrap().join("pins-copy");
    let src = base.join("src");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).unwrap();
    let copy = format!(
        "tar --exclude=./target --exclude=./.git --exclude=./demo -C '{}' -cf - . | tar -xf - -C '{}'",
        root.display(),
        src.display()
    );
    assert!(Command::new("bash").args(["-c", &copy]).status().unwrap().success());
    let flags = support::wasm::reproducible_rustflags()
        .replace(&format!("={}=", root.display()), &format!("={}=", src.display()));
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(&src)
        .args(["build", "--quiet", "--release", "--locked", "--target", "wasm32-wasip2"])
        .args(PLUGINS.iter().flat_map(|p| ["-p", p]))
        .arg("--target-dir")
        .arg(base.join("target"))
        .env_remove("RUSTFLAGS")
        .env("CARGO_ENCODED_RUSTFLAGS", flags)
        .output()
        .unwrap();
    assert!(out.status.success(), "building in {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
    for package in PLUGINS {
        let there = base.join("target/wasm32-wasip2/release").join(format!("{package}.wasm"));
        let here = wasm(package);
        assert_eq!(
            sha256_of_file(&there),
            sha256_of_file(&here),
            "{package}: {} vs {}",
            there.display(),
            here.display()
        );
    }
}
