//! Puts the Go module the generated bindings import,
//! `go.bytecodealliance.org/pkg`, inside `durasync-go`: its sources ship in
//! the crates.io crate `wit-bindgen-go` (`src/pkg/`), located here with
//! `cargo metadata` (offline, from the lock file) and embedded with
//! `include_bytes!`, so the built tool reads neither cargo nor a checkout.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=Cargo.lock");
    let pkg = pkg_source();
    let mut files = Vec::new();
    go_tree(&pkg, &pkg, &mut files);
    files.sort();
    assert!(files.iter().any(|(rel, _)| rel == "go.mod"), "no go.mod in {}", pkg.display());
    let mut out = String::from("/// `go.bytecodealliance.org/pkg`: (path in the module, contents).\n");
    out += "const PKG: &[(&str, &[u8])] = &[\n";
    for (rel, abs) in &files {
        writeln!(out, "    ({rel:?}, include_bytes!({:?})),", abs.display().to_string()).unwrap();
    }
    out += "];\n";
    let dest = Path::new(&std::env::var_os("OUT_DIR").unwrap()).join("pkg.rs");
    std::fs::write(dest, out).unwrap();
}

/// `src/pkg` of the `wit-bindgen-go` crate this tool is built with.
fn pkg_source() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("Cargo.toml");
    let out = Command::new(cargo)
        .args(["metadata", "--offline", "--locked", "--format-version", "1", "--manifest-path"])
        .arg(&manifest)
        .output()
        .expect("running cargo metadata (to find wit-bindgen-go's source)");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let manifest = meta["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "wit-bindgen-go"))
        .and_then(|p| p["manifest_path"].as_str())
        .expect("wit-bindgen-go is not among durasync-go's packages");
    Path::new(manifest).parent().unwrap().join("src/pkg")
}

/// `go.mod` and the `*.go` / `*.s` files beneath `dir`, relative to `root`.
fn go_tree(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let e = e.unwrap();
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            go_tree(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "go" || x == "s") || e.file_name() == "go.mod" {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            out.push((rel, std::fs::canonicalize(&p).unwrap()));
        }
    }
}
