//! `durasync-go`: builds a Go durasync plugin into a component.
//!
//! ```text
//! durasync-go build PLUGIN_DIR OUT.wasm
//! durasync-go test PLUGIN_DIR [GO TEST FLAGS…]
//! durasync-go bindings DIR
//! durasync-go module DIR
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
//! A `PLUGIN_DIR` with its own `go.mod` is an ordinary Go module (any module
//! path, a `go.sum`, third-party requires and replaces). It imports the
//! helper as `durasync.dev/guest` and the bindings as
//! `durasync.dev/guest/durasync_plugin_types` and so on, from the Go module
//! `durasync.dev/guest` (what `module DIR` writes; `go` gets it like any
//! other module, from `GOPROXY` or a `replace`). Its package is the module's
//! root package, any name. `test` then runs `go test -count=1 .` in the
//! folder; `build` runs `go build` in the folder, the one generated file the
//! module lacks (the export glue, package `main`, which imports the
//! plugin's package) laid over a directory that does not exist on disk
//! (`go build -overlay`): the plugin's folder stays as it is, and its
//! `go.mod`, `go.sum` and the `GOPROXY`, `GOFLAGS`, `GOSUMDB` of the
//! environment decide where every module comes from.
//!
//! `module DIR` writes the two modules a plugin with its own `go.mod`
//! requires, as `go mod download` unpacks them:
//! `DIR/durasync.dev/guest@vVERSION` (the helper and the bindings) and
//! `DIR/go.bytecodealliance.org/pkg@vVERSION`.
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

/// The Go module of the kit a plugin with its own `go.mod` requires: the
/// helper package at its root, the bindings' packages beside it.
const KIT_MODULE: &str = "durasync.dev/guest";

/// The kit module's version: this tool's.
fn kit_version() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// Where the plugin's build, with its own `go.mod`, finds the export glue:
/// a directory of the plugin's module that exists only in the overlay.
const GLUE_DIR: &str = "_durasync_go_main";

/// The WIT the plugins are built against (the repository's `wit/`).
const WIT: &str = include_str!("../../../../wit/durasync.wit");

// `PKG`: the files of `go.bytecodealliance.org/pkg` (see build.rs).
include!(concat!(env!("OUT_DIR"), "/pkg.rs"));

const USAGE: &str = "\
usage: durasync-go build PLUGIN_DIR OUT.wasm
       durasync-go test PLUGIN_DIR [GO TEST FLAGS...]
       durasync-go bindings DIR
       durasync-go module DIR
       durasync-go --help | --version

build     builds the plugin in PLUGIN_DIR (its *.go files, package export_wit_world)
          into the component OUT.wasm, with GOOS=wasip1 GOARCH=wasm go build
test      runs the plugin's *_test.go files under go test, natively, its calls
          served by `durasync harness` ($DURASYNC, else durasync on PATH)

          A PLUGIN_DIR with a go.mod is a Go module: its root package is the
          plugin (any name), it requires durasync.dev/guest (the helper and
          the bindings), and go.mod, go.sum, GOPROXY, GOFLAGS and GOSUMDB
          decide where modules come from, as for any go build
bindings  writes the module a plugin is built in, without the plugin: the Go
          bindings of the WIT, the helper package wit_component/durasync and
          go.bytecodealliance.org/pkg; put the plugin's files in
          DIR/export_wit_world and open DIR in an editor
module    writes the modules a PLUGIN_DIR with a go.mod requires, as go mod
          download unpacks them: DIR/durasync.dev/guest@VERSION and
          DIR/go.bytecodealliance.org/pkg@VERSION (serve them from a GOPROXY
          or point a replace at them)

The Go binary is $GO, else go on PATH. The WIT, the helper and the bindings'
Go sources are inside this binary: no cargo and no durasync checkout needed.
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["build", plugin, out] => build(Path::new(plugin), Path::new(out)),
        ["test", plugin, ref flags @ ..] => test(Path::new(plugin), flags),
        ["bindings", dir] => bindings(Path::new(dir)),
        ["module", dir] => module(Path::new(dir)),
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

/// Whether `plugin` is a Go module of its own (it has a `go.mod`).
fn has_go_mod(plugin: &Path) -> bool {
    plugin.join("go.mod").is_file()
}

fn build(plugin: &Path, out: &Path) -> Result<()> {
    if has_go_mod(plugin) {
        return build_module(plugin, out);
    }
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
    if has_go_mod(plugin) {
        return test_module(plugin, flags);
    }
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
    // A plugin module imports the bindings from durasync.dev/guest: its
    // folder gets none (and keeps its own go.mod).
    let go_mod = dir.join("go.mod");
    if go_mod.is_file() && module_path(&go_mod)? != "wit_component" {
        bail!(
            "{} is the Go module {}: a plugin module imports the bindings from {KIT_MODULE} \
             (`durasync-go module DIR` writes it) and needs none in its folder",
            dir.display(),
            module_path(&go_mod)?
        );
    }
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
    let (resolve, world, files) = generate()?;
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
    write(&stage.join("go.mod"), go_mod(pkg_go_version()?).as_bytes())?;
    Ok((resolve, world))
}

/// The Go bindings of the world, in wit-bindgen-go's standalone layout
/// (module `wit_component`): (path, contents).
fn generate() -> Result<(Resolve, wit_parser::WorldId, wit_bindgen_core::Files)> {
    let (mut resolve, world) = resolve()?;
    let opts =
        wit_bindgen_go::Opts { format: wit_bindgen_go::Format::False, quiet: true, ..Default::default() };
    let mut files = wit_bindgen_core::Files::default();
    opts.build().generate(&mut resolve, world, &mut files)?;
    Ok((resolve, world, files))
}

/// The `go` version `go.bytecodealliance.org/pkg` declares (Go refuses a
/// module that requires it with a lower one).
fn pkg_go_version() -> Result<&'static str> {
    let pkg_mod = PKG.iter().find(|(name, _)| *name == "go.mod").context("no go.mod in the embedded pkg")?;
    Ok(std::str::from_utf8(pkg_mod.1)?
        .lines()
        .find_map(|l| l.strip_prefix("go "))
        .context("no `go` line in go.bytecodealliance.org/pkg's go.mod")?
        .trim())
}

/// A generated or helper Go file as the kit module holds it: its imports of
/// the standalone layout's `wit_component/…` become `durasync.dev/guest/…`
/// (the helper, `wit_component/durasync`, is the module's root package).
fn in_kit(text: &[u8]) -> Result<String> {
    Ok(std::str::from_utf8(text)?
        .replace("\"wit_component/durasync\"", &format!("\"{KIT_MODULE}\""))
        .replace("\"wit_component/", &format!("\"{KIT_MODULE}/")))
}

/// `module DIR`: the kit module and `go.bytecodealliance.org/pkg`, each in
/// the folder `go mod download` would unpack it to.
fn module(dir: &Path) -> Result<()> {
    let (_, _, files) = generate()?;
    let guest = dir.join(format!("{KIT_MODULE}@{}", kit_version()));
    let require = wit_bindgen_go::remote_pkg_version();
    let (pkg_path, pkg_version) = require.split_once(' ').context("wit-bindgen-go's pkg has no version")?;
    let pkg = dir.join(format!("{pkg_path}@{pkg_version}"));
    for d in [&guest, &pkg] {
        if d.exists() {
            std::fs::remove_dir_all(d).with_context(|| format!("replacing {}", d.display()))?;
        }
    }
    for (name, bytes) in files.iter() {
        // The glue imports the plugin's package: `build` writes it per plugin.
        if name != "go.mod" && name != "wit_exports.go" {
            write(&guest.join(name), in_kit(bytes)?.as_bytes())?;
        }
    }
    for (name, text) in HELPER {
        write(&guest.join(name), in_kit(text.as_bytes())?.as_bytes())?;
    }
    let go = pkg_go_version()?;
    write(
        &guest.join("go.mod"),
        format!("module {KIT_MODULE}\n\ngo {go}\n\nrequire {require}\n").as_bytes(),
    )?;
    for (name, bytes) in PKG {
        write(&pkg.join(name), bytes)?;
    }
    println!("wrote {} and {}", guest.display(), pkg.display());
    Ok(())
}

/// The module path the `go.mod` at `path` declares.
fn module_path(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("module "))
        .with_context(|| format!("no `module` line in {}", path.display()))?;
    let line = line.split("//").next().unwrap_or_default().trim();
    Ok(line.trim_matches(|c| c == '"' || c == '`').to_owned())
}

/// `build` of a plugin with its own `go.mod`: `go build` in the plugin's
/// folder, the export glue (package `main`, importing the plugin's root
/// package) laid over `PLUGIN_DIR/_durasync_go_main` with `-overlay`.
fn build_module(plugin: &Path, out: &Path) -> Result<()> {
    let plugin = &std::path::absolute(plugin)?;
    let module = module_path(&plugin.join("go.mod"))?;
    let glue_dir = plugin.join(GLUE_DIR);
    if glue_dir.exists() {
        bail!("{} exists: durasync-go build lays the export glue over that path", glue_dir.display());
    }
    let out = &std::path::absolute(out)?;
    let out_dir = out.parent().context("the output has no folder")?;
    let stage = out_dir.join(format!(".{}.durasync-go-build", out.file_name().unwrap().to_string_lossy()));
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage)?;
    let result = (|| {
        let (resolve, world, files) = generate()?;
        let glue =
            files.iter().find(|(name, _)| *name == "wit_exports.go").context("no export glue generated")?.1;
        let plugin_import = "\"wit_component/export_wit_world\"";
        let glue = std::str::from_utf8(glue)?;
        if !glue.contains(plugin_import) {
            bail!("the generated export glue does not import {plugin_import}");
        }
        let glue = in_kit(
            glue.replace(plugin_import, &format!("export_wit_world {}", go_string(&module))).as_bytes(),
        )?;
        let glue_file = stage.join("wit_exports.go");
        write(&glue_file, glue.as_bytes())?;
        let overlay = stage.join("overlay.json");
        let replace = format!(
            "{{\"Replace\":{{{}:{}}}}}\n",
            go_string(&glue_dir.join("wit_exports.go").to_string_lossy()),
            go_string(&glue_file.to_string_lossy())
        );
        write(&overlay, replace.as_bytes())?;
        let core = stage.join("core.wasm");
        let overlay_flag = format!("-overlay={}", overlay.display());
        // The environment's GOPROXY, GOFLAGS, GOSUMDB, GOWORK stand, as for
        // any `go build` of the vendor's module.
        run_go(&mut go_build(plugin, &[overlay_flag.as_ref()], &format!("./{GLUE_DIR}"), &core), "go build")?;
        componentize(&resolve, world, &core, &stage, out)
    })();
    let _ = std::fs::remove_dir_all(&stage);
    result
}

/// `test` of a plugin with its own `go.mod`: `go test -count=1` of its
/// root package, natively, in its folder.
fn test_module(plugin: &Path, flags: &[&str]) -> Result<()> {
    let go = std::env::var_os("GO").unwrap_or_else(|| "go".into());
    run_go(
        Command::new(go)
            .current_dir(plugin)
            // Every run runs: `go test` does not see that $DURASYNC changed.
            .args(["test", "-count=1"])
            .args(flags)
            .arg(".")
            .env("CGO_ENABLED", "0")
            .env_remove("GOOS")
            .env_remove("GOARCH"),
        "go test",
    )
}

/// `s` as a quoted Go (and JSON) string.
fn go_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `go build` of the wasip1 module (`-buildmode=c-shared`, reproducible),
/// run in `dir`, writing `core`; `package` and `extra` are the rest of its
/// arguments.
fn go_build(dir: &Path, extra: &[&std::ffi::OsStr], package: &str, core: &Path) -> Command {
    let go = std::env::var_os("GO").unwrap_or_else(|| "go".into());
    let mut cmd = Command::new(go);
    cmd.current_dir(dir)
        .args(["build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false"])
        // The bindings' runtime links `runtime.sbrk` (allocations made before
        // the Go runtime is initialised); Go 1.23+ refuses that by default.
        .arg("-ldflags=-checklinkname=0")
        .args(extra)
        .arg("-o")
        .arg(core)
        .arg(package)
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm")
        .env("CGO_ENABLED", "0");
    cmd
}

/// Run `cmd` (a `go` command); fail unless it succeeds.
fn run_go(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd.status().with_context(|| {
        format!("running {} (set GO to the Go binary)", cmd.get_program().to_string_lossy())
    })?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn build_in((resolve, world): &(Resolve, wit_parser::WorldId), stage: &Path, out: &Path) -> Result<()> {
    let core = stage.join("core.wasm");
    run_go(
        go_build(stage, &[], ".", &core)
            // No network, no other toolchain, no workspace or flags from outside.
            .env("GOPROXY", "off")
            .env("GOTOOLCHAIN", "local")
            .env("GOWORK", "off")
            .env("GOFLAGS", ""),
        "go build",
    )?;
    componentize(resolve, *world, &core, stage, out)
}

/// The core module `core` as a component at `out`: the world's type
/// information embedded, the WASI preview-1 reactor adapter linked.
fn componentize(
    resolve: &Resolve,
    world: wit_parser::WorldId,
    core: &Path,
    stage: &Path,
    out: &Path,
) -> Result<()> {
    let mut module = std::fs::read(core).with_context(|| format!("reading {}", core.display()))?;
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
