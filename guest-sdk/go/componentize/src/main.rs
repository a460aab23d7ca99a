//! `durasync-go`: builds a Go durasync plugin into a component.
//!
//! ```text
//! durasync-go build PLUGIN_DIR OUT.wasm
//! durasync-go test PLUGIN_DIR [GO TEST FLAGS…]
//! ```
//!
//! `PLUGIN_DIR` holds the plugin's `*.go` files, package `export_wit_world`
//! (they implement the world's exports, `Describe` and `Run`). In a
//! temporary folder beside `OUT.wasm` it assembles the module
//! `wit_component`:
//!
//! - the Go bindings of the `plugin` world of `wit/` (what `wit-bindgen go`
//!   0.63 writes, in its standalone layout);
//! - the plugin's files as `wit_component/export_wit_world`;
//! - the helper package `guest-sdk/go/durasync` as `wit_component/durasync`
//!   (compiled into this tool);
//! - `go.bytecodealliance.org/pkg`, the one module the bindings import, which
//!   no registry these machines reach serves: its source ships inside the
//!   crates.io crate `wit-bindgen-go` (`src/pkg/`), found with `cargo
//!   metadata` and copied, and a `go.mod` whose `replace` points at the copy;
//!
//! then runs `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared` (the Go
//! binary of `$GO`, else `go` on the `PATH`; no network, no other toolchain)
//! and turns the module into a component: the world's type information is
//! embedded (`wasm-tools component embed`) and the WASI preview-1 *reactor*
//! adapter of wasmtime 48 links its WASI imports (`wasm-tools component new
//! --adapt`). The build is reproducible (`-trimpath`, no VCS stamp): the same
//! sources and versions give the same bytes.
//!
//! `test` assembles the same module in a temporary folder and runs `go test
//! -count=1 ./export_wit_world/` natively (the host's GOOS): the helper's
//! `harness.go` then serves the plugin's calls through `durasync harness`
//! (`$DURASYNC`), so the plugin's `*_test.go` files run against the host's
//! own rules without a component.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use wit_parser::Resolve;

const WORLD: &str = "plugin";

/// The helper package, as plugins import it (`wit_component/durasync`).
/// `durasync.go` is shared; `wasm.go` (GOOS=wasip1) wraps the bindings,
/// `harness.go` (any other GOOS) talks to `durasync harness` under `go test`.
const HELPER: &[(&str, &str)] = &[
    ("durasync.go", include_str!("../../durasync/durasync.go")),
    ("wasm.go", include_str!("../../durasync/wasm.go")),
    ("harness.go", include_str!("../../durasync/harness.go")),
];

/// The `go.mod` of the assembled module, for the `go` version `go` (the
/// one the copied module declares: Go refuses a lower one). The required
/// version is the one wit-bindgen-go 0.63 names (`remote_pkg_version`); the
/// `replace` makes Go read it from the copy instead of the network.
fn go_mod(go: &str) -> String {
    let require = wit_bindgen_go::remote_pkg_version();
    format!(
        "module wit_component\n\ngo {go}\n\nrequire {require}\n\nreplace go.bytecodealliance.org/pkg => ./_pkg\n"
    )
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["build", plugin, out] => build(Path::new(plugin), Path::new(out)),
        ["test", plugin, ref flags @ ..] => test(Path::new(plugin), flags),
        _ => bail!(
            "usage: durasync-go build PLUGIN_DIR OUT.wasm | durasync-go test PLUGIN_DIR [GO TEST FLAGS]"
        ),
    }
}

/// The repository's `wit/` folder (this crate is `guest-sdk/go/componentize`).
fn wit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../wit")
}

/// The plugin's `*.go` files (its `*_test.go` files too: `go build` leaves
/// them out).
fn plugin_sources(plugin: &Path) -> Result<Vec<PathBuf>> {
    let sources: Vec<PathBuf> = std::fs::read_dir(plugin)
        .with_context(|| format!("reading {}", plugin.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "go"))
        .collect();
    if sources.is_empty() {
        bail!("no *.go file in {} (the plugin's package export_wit_world)", plugin.display());
    }
    Ok(sources)
}

fn build(plugin: &Path, out: &Path) -> Result<()> {
    let sources = plugin_sources(plugin)?;
    let out = &std::path::absolute(out)?;
    let out_dir = out.parent().context("the output has no folder")?;
    let stage = out_dir.join(format!(".{}.durasync-go-build", out.file_name().unwrap().to_string_lossy()));
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(stage.join("export_wit_world"))?;
    let result = assemble(&sources, &stage).and_then(|resolve| build_in(&resolve, &stage, out));
    let _ = std::fs::remove_dir_all(&stage);
    result
}

fn test(plugin: &Path, flags: &[&str]) -> Result<()> {
    let sources = plugin_sources(plugin)?;
    let stage = std::env::temp_dir().join(format!("durasync-go-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(stage.join("export_wit_world"))?;
    let result = assemble(&sources, &stage).and_then(|_| {
        let go = std::env::var_os("GO").unwrap_or_else(|| "go".into());
        let status = Command::new(&go)
            .current_dir(&stage)
            // Every run runs: `go test` does not see that $DURASYNC changed.
            .args(["test", "-count=1"])
            .args(flags)
            .arg("./export_wit_world/")
            .env("CGO_ENABLED", "0")
            .env("GOPROXY", "off")
            .env("GOTOOLCHAIN", "local")
            .env("GOWORK", "off")
            .env("GOFLAGS", "")
            .env_remove("GOOS")
            .env_remove("GOARCH")
            .status()
            .with_context(|| format!("running {} (set GO to the Go binary)", go.to_string_lossy()))?;
        if !status.success() {
            bail!("go test failed ({status})");
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&stage);
    result
}

/// Lay out the module `wit_component` in `stage` (see the crate's docs).
fn assemble(sources: &[PathBuf], stage: &Path) -> Result<(Resolve, wit_parser::WorldId)> {
    let (mut resolve, world) = resolve()?;
    let opts =
        wit_bindgen_go::Opts { format: wit_bindgen_go::Format::False, quiet: true, ..Default::default() };
    let mut files = wit_bindgen_core::Files::default();
    opts.build().generate(&mut resolve, world, &mut files)?;
    for (name, bytes) in files.iter() {
        if name != "go.mod" {
            write(&stage.join(name), bytes)?;
        }
    }
    for src in sources {
        std::fs::copy(src, stage.join("export_wit_world").join(src.file_name().unwrap()))
            .with_context(|| format!("copying {}", src.display()))?;
    }
    for (name, text) in HELPER {
        write(&stage.join("durasync").join(name), text.as_bytes())?;
    }
    let pkg = pkg_source()?;
    copy_go_tree(&pkg, &stage.join("_pkg"))?;
    let pkg_mod = std::fs::read_to_string(pkg.join("go.mod"))?;
    let go_version = pkg_mod
        .lines()
        .find_map(|l| l.strip_prefix("go "))
        .with_context(|| format!("no `go` line in {}", pkg.join("go.mod").display()))?;
    write(&stage.join("go.mod"), go_mod(go_version.trim()).as_bytes())?;
    Ok((resolve, world))
}

fn build_in((resolve, world): &(Resolve, wit_parser::WorldId), stage: &Path, out: &Path) -> Result<()> {
    let (resolve, world) = (resolve, *world);
    let core = stage.join("core.wasm");
    let go = std::env::var_os("GO").unwrap_or_else(|| "go".into());
    let status = Command::new(&go)
        .current_dir(stage)
        .args(["build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false"])
        // The bindings' runtime links `runtime.sbrk` (allocations made before
        // the Go runtime is initialised); Go 1.23+ refuses that by default.
        .arg("-ldflags=-checklinkname=0")
        .arg("-o")
        .arg(&core)
        .arg(".")
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm")
        .env("CGO_ENABLED", "0")
        // No network, no other toolchain, no workspace or flags from outside.
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .env("GOWORK", "off")
        .env("GOFLAGS", "")
        .status()
        .with_context(|| format!("running {} (set GO to the Go binary)", go.to_string_lossy()))?;
    if !status.success() {
        bail!("go build failed ({status})");
    }

    let mut module = std::fs::read(&core).with_context(|| format!("reading {}", core.display()))?;
    wit_component::embed_component_metadata(
        &mut module,
        resolve,
        world,
        wit_component::StringEncoding::UTF8,
        false,
    )?;
    let component = wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&module)?
        .adapter(
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .encode()
        .context("encoding the component")?;
    // A temporary name, then a rename: a failed build never leaves half a file.
    let tmp = stage.join("component.wasm");
    write(&tmp, &component)?;
    std::fs::rename(&tmp, out).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

fn resolve() -> Result<(Resolve, wit_parser::WorldId)> {
    let wit = wit_dir();
    let mut resolve = Resolve::default();
    let (pkg, _) =
        resolve.push_path(&wit).with_context(|| format!("reading the WIT in {}", wit.display()))?;
    let world = resolve.select_world(&[pkg], Some(WORLD))?;
    Ok((resolve, world))
}

/// `src/pkg` of the `wit-bindgen-go` crate this tool was built with, where
/// cargo unpacked it.
fn pkg_source() -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--offline", "--locked", "--format-version", "1", "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .output()
        .context("running cargo metadata (to find wit-bindgen-go's source)")?;
    if !out.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let manifest = meta["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "wit-bindgen-go"))
        .and_then(|p| p["manifest_path"].as_str())
        .context("wit-bindgen-go is not among durasync-go's packages")?;
    let pkg = Path::new(manifest).parent().unwrap().join("src/pkg");
    if !pkg.join("go.mod").is_file() {
        bail!("no go.mod in {}", pkg.display());
    }
    Ok(pkg)
}

/// Copy `go.mod` and the `*.go` / `*.s` files beneath `from` to `to`.
fn copy_go_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type()?.is_dir() {
            copy_go_tree(&src, &dst)?;
        } else if src.extension().is_some_and(|x| x == "go" || x == "s") || e.file_name() == "go.mod" {
            std::fs::copy(&src, &dst).with_context(|| format!("copying {}", src.display()))?;
        }
    }
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::create_dir_all(path.parent().unwrap())?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}
