//! Start-up: `durasync run` of the no-op plugin with a warm cache versus
//! `durasync --version` (the real release binary, interleaved, order
//! rotated every round), and inside one process the pieces `durasync run`
//! is made of: a new runtime, loading the plugin from the warm cache, and a
//! warm instantiate + call.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use durasync::runtime::{CacheConfig, Manifest, RunRequest, Runtime};

use crate::stats::ms;

/// Milliseconds per round of each start-up series.
pub struct Startup {
    /// `durasync run noop.toml --cache-dir …` (warm cache), whole process.
    pub run: Vec<f64>,
    /// `durasync --version`, whole process.
    pub version: Vec<f64>,
    /// `Runtime::new` (engine + linker).
    pub runtime_new: Vec<f64>,
    /// `Runtime::load_manifest` with a warm cache (read, sha256, deserialize, link).
    pub load: Vec<f64>,
    /// `Plugin::run` of the no-op plugin: fresh store, instantiate, call.
    pub call: Vec<f64>,
}

fn time_process(cmd: &mut Command) -> f64 {
    let start = Instant::now();
    let status = cmd.stdout(Stdio::null()).stderr(Stdio::inherit()).status().expect("spawning durasync");
    let t = ms(start.elapsed());
    assert!(status.success(), "{cmd:?} failed: {status}");
    t
}

pub fn measure(bin: &Path, manifest_path: &Path, cache: &Path, rounds: usize, calls: usize) -> Startup {
    let run = || {
        let mut c = Command::new(bin);
        c.arg("run").arg(manifest_path).arg("--cache-dir").arg(cache);
        c
    };
    let version = || {
        let mut c = Command::new(bin);
        c.arg("--version");
        c
    };
    // Warm the cache (the first run compiles and stores) and the page cache.
    for _ in 0..3 {
        time_process(&mut run());
        time_process(&mut version());
    }
    let (mut run_ms, mut version_ms) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        // Rotate the order every round: A B, then B A.
        if r % 2 == 0 {
            run_ms.push(time_process(&mut run()));
            version_ms.push(time_process(&mut version()));
        } else {
            version_ms.push(time_process(&mut version()));
            run_ms.push(time_process(&mut run()));
        }
    }

    let manifest = Manifest::load(manifest_path).expect("noop manifest");
    let config = CacheConfig::Dir(cache.to_path_buf());
    let (mut runtime_new, mut load) = (Vec::new(), Vec::new());
    for _ in 0..calls.min(50) + 2 {
        let start = Instant::now();
        let runtime = Runtime::new(&config).expect("runtime");
        runtime_new.push(ms(start.elapsed()));
        let start = Instant::now();
        let plugin = runtime.load_manifest(&manifest).expect("load noop");
        load.push(ms(start.elapsed()));
        drop(plugin);
    }
    // The first two include one-time process costs (page faults, lazy init).
    runtime_new.drain(..2);
    load.drain(..2);

    let runtime = Runtime::new(&config).expect("runtime");
    let plugin = runtime.load_manifest(&manifest).expect("load noop");
    let mut call = Vec::new();
    for i in 0..calls + 5 {
        let start = Instant::now();
        let request = RunRequest::from_manifest(&manifest, Vec::new(), false).expect("request");
        let outcome = plugin.run(&request).expect("noop run");
        let t = ms(start.elapsed());
        assert_eq!(outcome.result, "nothing to do");
        if i >= 5 {
            call.push(t);
        }
    }
    Startup { run: run_ms, version: version_ms, runtime_new, load, call }
}
