//! `durasync-go`: builds a Go durasync plugin into a component.
//!
//! ```text
//! durasync-go build PLUGIN_DIR OUT.wasm
//! durasync-go test PLUGIN_DIR [GO TEST FLAGS…]
//! durasync-go bindings DIR
//! durasync-go --help | --version
//! ```
//!
//! `PLUGIN_DIR` holds the plugin's `*.go` files, package `export_wit_world`
//! (they implement the world's exports, `Describe` and `Run`). In a
//! temporary folder beside `OUT.wasm` it assembles the module
//! `wit_component`:
//!
//! - the Go bindings of the `plugin` world of the WIT (`wit/durasync.wit`,
//!   compiled into this tool; what `wit-bindgen go` 0.63 writes, in its
//!   standalone layout);
//! - the plugin's files as `wit_component/export_wit_world`;
//! - the helper package `guest-sdk/go/durasync` as `wit_component/durasync`
//!   (compiled into this tool);
//! - `go.bytecodealliance.org/pkg`, the one module the bindings import, which
//!   no registry these machines reach serves: its source ships inside the
//!   crates.io crate `wit-bindgen-go` (`src/pkg/`), which `build.rs` embeds
//!   in this tool, and a `go.mod` whose `replace` points at the copy;
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
//!
//! `bindings DIR` writes the same module without a plugin, for an editor:
//! put the plugin's files in `DIR/export_wit_world` and open `DIR`.
//!
//! Everything it writes comes from its own binary: it runs with no cargo on
//! the `PATH` and no durasync checkout.

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

/// The WIT the plugins are built against (the repository's `wit/`).
const WIT: &str = include_str!("../../../../wit/durasync.wit");

// `PKG`: the files of `go.bytecodealliance.org/pkg` (see build.rs).
include!(concat!(env!("OUT_DIR"), "/pkg.rs"));

const USAGE: &str = "\
usage: durasync-go build PLUGIN_DIR OUT.wasm
       durasync-go test PLUGIN_DIR [GO TEST FLAGS...]
       durasync-go bindings DIR
       durasync-go --help | --version

build     builds the plugin in PLUGIN_DIR (its *.go files, package export_wit_world)
          into the component OUT.wasm, with GOOS=wasip1 GOARCH=wasm go build
test      runs the plugin's *_test.go files under go test, natively, its calls
          served by `durasync harness` ($DURASYNC, else durasync on PATH)
bindings  writes the module a plugin is built in, without the plugin: the Go
          bindings of the WIT, the helper package wit_component/durasync and
          go.bytecodealliance.org/pkg; put the plugin's files in
          DIR/export_wit_world and open DIR in an editor

The Go binary is $GO, else go on PATH. The WIT, the helper and the bindings'
Go sources are inside this binary: no cargo and no durasync checkout needed.
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["build", plugin, out] => build(Path::new(plugin), Path::new(out)),
        ["test", plugin, ref flags @ ..] => test(Path::new(plugin), flags),
        ["bindings", dir] => bindings(Path::new(dir)),
        ["--help" | "-h" | "help"] => {
            print!("{USAGE}");
            Ok(())
        }
        ["--version" | "-V"] => {
            let (resolve, world) = resolve()?;
            let pkg = resolve.worlds[world].package.context("the world has no package")?;
            println!(
                "durasync-go {} (WIT {}, wit-bindgen-go 0.63.0, {})",
                env!("CARGO_PKG_VERSION"),
                resolve.packages[pkg].name,
                wit_bindgen_go::remote_pkg_version()
            );
            Ok(())
        }
        _ => {
            eprint!("{USAGE}");
            std::process::exit(2)
        }
    }
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

/// `bindings DIR`: the module without a plugin, for an editor.
fn bindings(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir.join("export_wit_world"))?;
    assemble(&[], dir)?;
    println!(
        "wrote the module wit_component to {} (the plugin's files go in {})",
        dir.display(),
        dir.join("export_wit_world").display()
    );
    Ok(())
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
    for (name, bytes) in PKG {
        write(&stage.join("_pkg").join(name), bytes)?;
    }
    let pkg_mod = PKG.iter().find(|(name, _)| *name == "go.mod").context("no go.mod in the embedded pkg")?;
    let go_version = std::str::from_utf8(pkg_mod.1)?
        .lines()
        .find_map(|l| l.strip_prefix("go "))
        .context("no `go` line in go.bytecodealliance.org/pkg's go.mod")?;
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
    let mut resolve = Resolve::default();
    let pkg = resolve.push_str("durasync.wit", WIT).context("parsing the embedded WIT")?;
    let world = resolve.select_world(&[pkg], Some(WORLD))?;
    Ok((resolve, world))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::create_dir_all(path.parent().unwrap())?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}
