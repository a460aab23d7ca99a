//! The import policy is checked before compiling: a plugin importing an
//! interface the host does not provide — here componentize-js's fully
//! default build, which imports `wasi:http` — is refused by name, with the
//! flag that removes it, before anything is compiled: no cache file, where a
//! compile always leaves one.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{sha256_of_file, support};
use support::toolchains::{self, Lang, Source};

/// componentize-js with no flag at all: it imports wasi:http.
const EXAMPLE_JS_DEFAULT: Source =
    Source { name: "example-js-default", lang: Lang::JavaScript, dir: "plugins/example-js", flags: &[] };

const POLICY: i32 = 12;

/// `durasync run` of `wasm` with a fresh cache directory `cache`: the exit
/// status, stderr and the wall time of the whole process.
fn run_refused(wasm: &Path, dir: &Path, cache: &Path) -> (i32, String, Duration) {
    let manifest = dir.join("plugin.toml");
    std::fs::write(
        &manifest,
        format!("name = \"refused\"\nwasm = \"{}\"\nsha256 = \"{}\"\n", wasm.display(), sha256_of_file(wasm)),
    )
    .unwrap();
    let start = Instant::now();
    let out = Command::new(support::durasync())
        .arg("run")
        .arg(&manifest)
        .arg("--cache-dir")
        .arg(cache)
        .output()
        .unwrap();
    let elapsed = start.elapsed();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned(), elapsed)
}

/// Every file beneath `dir` (none when it does not exist).
fn files_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flat_map(|e| {
            let p = e.unwrap().path();
            if p.is_dir() { files_in(&p) } else { vec![p.display().to_string()] }
        })
        .collect()
}

/// A compile leaves an artifact in the cache directory (`run` stores what
/// it compiled before it runs it): so an empty cache directory after a run
/// proves nothing was compiled. Checked here with the example plugin, which
/// the policy allows, through the same `run` with a fresh cache directory.
fn assert_a_compile_leaves_a_cache_file() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let (status, stderr, _) = run_refused(&super::wasm("example"), tmp.path(), &cache);
    assert_ne!(status, POLICY, "{stderr}");
    // The compiled artifact (beside it, the pin remembered for the file; for
    // a moment, Winch's and Cranelift's both, see runtime/cache.rs).
    let artifacts = files_in(&cache).into_iter().filter(|f| f.ends_with(".cwasm")).count();
    assert!(artifacts >= 1, "a compiled component was not cached: {stderr}");
}

/// Every run of `wasm` is refused with `needles` in its message, and no run
/// compiled anything (no cache file: see [`assert_a_compile_leaves_a_cache_file`]).
/// The time is printed, not asserted: on a shared machine a wall-clock bound
/// measures the machine.
fn check_refused_without_compiling(wasm: &Path, needles: &[&str]) {
    assert_a_compile_leaves_a_cache_file();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let size = std::fs::metadata(wasm).unwrap().len();
    let mut times = Vec::new();
    for _ in 0..3 {
        let (status, stderr, elapsed) = run_refused(wasm, tmp.path(), &cache);
        assert_eq!(status, POLICY, "{stderr}");
        for needle in needles {
            assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
        }
        assert_eq!(files_in(&cache), Vec::<String>::new(), "a refused plugin was compiled (a cache file)");
        times.push(elapsed);
    }
    eprintln!("refusing {} ({size} bytes), whole process: {times:?}", wasm.display());
}

#[test]
fn the_default_javascript_build_is_refused_naming_wasi_http_and_the_flag_before_compiling() {
    let built = toolchains::build(&EXAMPLE_JS_DEFAULT);
    check_refused_without_compiling(
        &built.wasm,
        &[
            "refused",
            "`wasi:http/types@0.2.",
            "`wasi:http/outgoing-handler@0.2.",
            "which this host does not provide",
            "componentize-js --wit WIT -n plugin -d http fetch-event -o app.wasm app.js",
        ],
    );
}

#[test]
fn a_component_importing_an_unknown_interface_is_refused_before_compiling() {
    let tmp = tempfile::tempdir().unwrap();
    let wasm = tmp.path().join("kv.wasm");
    let imports = ["wasi:keyvalue/store@0.2.0", "wasi:cli/stdout@0.3.0", "wasi:cli/stdout@0.2.4"];
    std::fs::write(&wasm, support::component::component_importing(&imports)).unwrap();
    check_refused_without_compiling(
        &wasm,
        &["`wasi:keyvalue/store@0.2.0`, `wasi:cli/stdout@0.3.0`, which this host does not provide"],
    );
}
