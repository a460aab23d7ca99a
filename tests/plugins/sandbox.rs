//! The import policy is checked before compiling: a plugin importing an
//! interface the host does not provide — here componentize-js's fully
//! default build, which imports `wasi:http` — is refused by name, with the
//! flag that removes it, in milliseconds, and leaves no cache file.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{sha256, support};
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
        format!(
            "name = \"refused\"\nwasm = \"{}\"\nsha256 = \"{}\"\n",
            wasm.display(),
            sha256(&std::fs::read(wasm).unwrap())
        ),
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

fn check_refused_fast_without_compiling(wasm: &Path, needles: &[&str]) {
    // The other tests' big compiles first: two cores busy compiling a
    // Python component would time the machine, not the refusal.
    for source in
        [&super::languages::EXAMPLE_PY, &super::languages::EXAMPLE_JS, &super::hostile_python::HOSTILE_PY]
    {
        super::languages::ready(source);
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let size = std::fs::metadata(wasm).unwrap().len();
    let mut batches = Vec::new();
    // Batches of five whole `durasync run` processes, until the fastest of
    // one is under 50 ms (a compile of this component takes seconds, a
    // refusal milliseconds); a pause between batches lets a burst of
    // other tests' load pass. Every run must be refused, none may compile.
    for _ in 0..20 {
        let mut times = Vec::new();
        for _ in 0..5 {
            let (status, stderr, elapsed) = run_refused(wasm, tmp.path(), &cache);
            assert_eq!(status, POLICY, "{stderr}");
            for needle in needles {
                assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
            }
            times.push(elapsed);
        }
        assert_eq!(files_in(&cache), Vec::<String>::new(), "a refused plugin left a cache file");
        times.sort();
        eprintln!(
            "refusing {} ({size} bytes): fastest {:?}, median {:?}",
            wasm.display(),
            times[0],
            times[2]
        );
        if times[0] < Duration::from_millis(50) {
            return;
        }
        batches.push(times);
        std::thread::sleep(Duration::from_secs(1));
    }
    panic!("refusing never took under 50 ms: {batches:?}");
}

#[test]
fn the_default_javascript_build_is_refused_naming_wasi_http_and_the_flag_before_compiling() {
    let built = toolchains::build(&EXAMPLE_JS_DEFAULT);
    check_refused_fast_without_compiling(
        &built.wasm,
        &[
            "refused",
            "`wasi:http/types@0.2.",
            "`wasi:http/outgoing-handler@0.2.",
            "which this host does not provide",
            "componentize-js -d http fetch-event",
        ],
    );
}

#[test]
fn a_component_importing_an_unknown_interface_is_refused_before_compiling() {
    let tmp = tempfile::tempdir().unwrap();
    let wasm = tmp.path().join("kv.wasm");
    let imports = ["wasi:keyvalue/store@0.2.0", "wasi:cli/stdout@0.3.0", "wasi:cli/stdout@0.2.4"];
    std::fs::write(&wasm, toolchains::component_importing(&imports)).unwrap();
    check_refused_fast_without_compiling(
        &wasm,
        &["`wasi:keyvalue/store@0.2.0`, `wasi:cli/stdout@0.3.0`, which this host does not provide"],
    );
}
