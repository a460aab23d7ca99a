//! The agent's numbers for BENCHMARKS.md, in one run (ignored by `cargo
//! test`; nothing here is asserted, it only measures and prints):
//!
//! ```sh
//! cargo build --release -p durasync
//! DURASYNC_BENCH_BIN=target/release/durasync \
//!     cargo test -p durasync --test agent -- --ignored --nocapture agent_benchmark
//! ```
//!
//! 1. the certsync example (plugins/certsync: its config and example List):
//!    input change → on disk, over 60 changes of one object (`client-ca`);
//! 2. interleaved, 50 times each: a warm unchanged reconcile inside the
//!    agent (its own `run ok in X ms`: input read, roots opened, fresh
//!    store, plugin run, every object compared) next to a one-shot
//!    `durasync run` of the same manifest (process wall time, warm cache);
//! 3. RSS with 1 instance (the agent above) and with 20;
//! 4. CPU of the idle agent with 20 loaded instances over 60 s.
//!
//! And, separately (`agent_chaos_benchmark`, same invocation with that
//! name), the fair run slots under hostile neighbours: a certsync instance
//! whose input changes every ~300 ms beside twelve hostile instances (four
//! that spin to their 2 s timeout, two memory hogs, two that trap, two log
//! floods, two reading a 64 GiB sparse file; all retried after 100 ms–1 s),
//! input change → new bytes visible, for `DURASYNC_CHAOS_SECS` (60) with the
//! default `--max-concurrent-runs 4` and with 16 (more slots than
//! instances: unbounded), one after the other; with `DURASYNC_BENCH_BIN_BEFORE`
//! set, that binary's default-bound row too (the policy before fair slots).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{DEADLINE, certsync_wasm, sha256_of_file, shared_cache, support};

fn bin() -> PathBuf {
    std::env::var_os("DURASYNC_BENCH_BIN").map(PathBuf::from).unwrap_or_else(support::durasync)
}

/// The `[config]` table of plugins/certsync/plugin.toml, as TOML text.
fn example_config() -> String {
    let text =
        std::fs::read_to_string(support::workspace_root().join("plugins/certsync/plugin.toml")).unwrap();
    let start = text.find("[config]").unwrap();
    text[start..].to_owned()
}

/// The example List with `client-ca`'s bundle made unique to generation `g`.
fn example_list(g: u32) -> Vec<u8> {
    let path = support::workspace_root().join("plugins/certsync/example/list.json");
    let mut list: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    for item in list["items"].as_array_mut().unwrap() {
        if item["metadata"]["name"] == "client-ca" {
            let bundle = item["data"]["ca-bundle.crt"].as_str().unwrap().to_owned();
            item["data"]["ca-bundle.crt"] = format!("{bundle}# generation {g}\n").into();
        }
    }
    serde_json::to_vec_pretty(&list).unwrap()
}

fn run_manifest(root: &Path) -> String {
    let wasm = certsync_wasm();
    format!(
        "name = \"certsync\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.certs]\npath = \"{}\"\naccess = \"rw\"\n{}",
        wasm.display(),
        sha256_of_file(&wasm),
        root.display(),
        example_config()
    )
}

/// The agent manifest: the run manifest plus `[input]` and `[schedule]`
/// (tables may follow `[config]` in TOML).
fn agent_manifest(name: &str, root: &Path, input: &Path) -> String {
    run_manifest(root).replacen("name = \"certsync\"", &format!("name = \"{name}\""), 1)
        + &format!("\n[input]\nfile = \"{}\"\n[schedule]\ninterval = \"10m\"\n", input.display())
}

struct Proc {
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Proc {
    fn agent(config_dir: &Path) -> Proc {
        Proc::agent_with(&bin(), config_dir, &[])
    }

    fn agent_with(binary: &Path, config_dir: &Path, args: &[&str]) -> Proc {
        let mut child = Command::new(binary)
            .arg("agent")
            .arg("--config-dir")
            .arg(config_dir)
            .args(args)
            .env("XDG_CACHE_HOME", shared_cache())
            .env("DURASYNC_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                sink.lock().unwrap().push((Instant::now(), super::support::strip_ansi(&line)));
            }
        });
        Proc { child, lines }
    }

    fn count(&self, needle: &str) -> usize {
        self.lines.lock().unwrap().iter().filter(|(_, l)| l.contains(needle)).count()
    }

    /// Wait for the `n`th line containing `needle`: (when it arrived, the line).
    fn wait(&self, needle: &str, n: usize) -> (Instant, String) {
        let start = Instant::now();
        loop {
            if let Some(hit) =
                self.lines.lock().unwrap().iter().filter(|(_, l)| l.contains(needle)).nth(n - 1).cloned()
            {
                return hit;
            }
            assert!(start.elapsed() < DEADLINE, "no {needle:?} x{n}");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// utime + stime, in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
        // After the command: state is field 3, utime 14, stime 15 (1-based).
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `X ms` from `run ok in X ms`.
fn run_ms(line: &str) -> f64 {
    let rest = &line[line.find("run ok in ").unwrap() + "run ok in ".len()..];
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

fn stats(label: &str, ms: &mut [f64]) -> f64 {
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    println!(
        "{label}: n={} median {:.2} ms, p10 {:.2}, p90 {:.2}, p99 {:.2}, max {:.2}",
        ms.len(),
        pct(0.5),
        pct(0.1),
        pct(0.9),
        pct(0.99),
        ms[ms.len() - 1]
    );
    pct(0.5)
}

/// Publish generation `g` of the example List as `input` (a rename) and
/// wait until `bundle` shows it: when it was published, and the
/// milliseconds until the new bytes were visible.
fn publish(dir: &Path, input: &Path, bundle: &Path, g: u32) -> (Instant, f64) {
    let want = format!("# generation {g}\n");
    let tmp_input = dir.join("list.json.tmp");
    std::fs::write(&tmp_input, example_list(g)).unwrap();
    let start = Instant::now();
    std::fs::rename(&tmp_input, input).unwrap();
    loop {
        if std::fs::read_to_string(bundle).is_ok_and(|b| b.ends_with(&want)) {
            return (start, start.elapsed().as_secs_f64() * 1000.0);
        }
        assert!(start.elapsed() < DEADLINE, "generation {g} never became visible");
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// A scratch node under the target dir: `agent.d/NAME.toml`, a certsync
/// instance writing `certs/` from `list.json` (the example List, generation 0).
fn certsync_node(prefix: &str, name: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(support::wasm::target_dir().parent().unwrap())
        .unwrap();
    let dir = tmp.path();
    let config = dir.join("agent.d");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::create_dir_all(dir.join("certs")).unwrap();
    let input = dir.join("list.json");
    std::fs::write(&input, example_list(0)).unwrap();
    std::fs::write(config.join(format!("{name}.toml")), agent_manifest(name, &dir.join("certs"), &input))
        .unwrap();
    (tmp, config, input)
}

#[test]
#[ignore = "a benchmark: run it by hand (see the module's doc)"]
fn agent_benchmark() {
    println!("binary: {}", bin().display());
    println!("load at start: {}", std::fs::read_to_string("/proc/loadavg").unwrap().trim());
    let (tmp, config, input) = certsync_node("durasync-agent-bench-", "certsync");
    let dir = tmp.path();
    std::fs::write(dir.join("run.toml"), run_manifest(&dir.join("certs"))).unwrap();

    let agent = Proc::agent(&config);
    agent.wait("run ok in", 1);
    let bundle = dir.join("certs/configmaps/client-ca/ca-bundle.crt");

    // 1. Input change → on disk (the file shows the new bytes; the swap is
    //    committed by the parent fsync that ends the same sync call) and →
    //    the run's end reported (every operation durable).
    let (mut visible, mut reported) = (Vec::new(), Vec::new());
    for g in 1..=60u32 {
        let runs = agent.count("run ok in");
        let (start, ms) = publish(dir, &input, &bundle, g);
        visible.push(ms);
        let (at, _) = agent.wait("run ok in", runs + 1);
        reported.push(at.duration_since(start).as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(20));
    }
    stats("input change -> new bytes visible in the target", &mut visible);
    stats("input change -> run reported done (durable)", &mut reported);

    // 2. Warm unchanged reconcile in the agent vs one-shot `durasync run`,
    //    interleaved, alternating which goes first.
    let (mut inside, mut oneshot) = (Vec::new(), Vec::new());
    let same = std::fs::read(&input).unwrap();
    for i in 0..50 {
        let mut agent_round = || {
            let runs = agent.count("run ok in");
            let tmp_input = dir.join("list.json.tmp");
            std::fs::write(&tmp_input, &same).unwrap();
            std::fs::rename(&tmp_input, &input).unwrap();
            let (_, line) = agent.wait("run ok in", runs + 1);
            assert!(line.contains("unchanged"), "{line}");
            inside.push(run_ms(&line));
        };
        let mut run_round = || {
            let start = Instant::now();
            let out = Command::new(bin())
                .arg("run")
                .arg(dir.join("run.toml"))
                .arg("--input")
                .arg(&input)
                .env("XDG_CACHE_HOME", shared_cache())
                .output()
                .unwrap();
            oneshot.push(start.elapsed().as_secs_f64() * 1000.0);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        };
        if i % 2 == 0 {
            agent_round();
            run_round();
        } else {
            run_round();
            agent_round();
        }
    }
    let a = stats("warm unchanged reconcile inside the agent (its run time)", &mut inside);
    let b = stats("one-shot `durasync run`, warm cache (process wall time)", &mut oneshot);
    println!("one-shot / agent: {:.1}x (medians)", b / a);

    // 3. RSS with 1 instance.
    println!("RSS, 1 instance: {} KiB", agent.rss_kib());
    drop(agent);

    // 3–4. 20 instances: RSS, then idle CPU over 60 s.
    let config20 = dir.join("agent20.d");
    std::fs::create_dir_all(&config20).unwrap();
    for i in 0..20 {
        let root = dir.join(format!("certs20/{i:02}"));
        std::fs::create_dir_all(&root).unwrap();
        let input = dir.join(format!("inputs20/{i:02}.json"));
        std::fs::create_dir_all(input.parent().unwrap()).unwrap();
        std::fs::write(&input, example_list(0)).unwrap();
        std::fs::write(
            config20.join(format!("c{i:02}.toml")),
            agent_manifest(&format!("c{i:02}"), &root, &input),
        )
        .unwrap();
    }
    let agent = Proc::agent(&config20);
    agent.wait("first round done", 1);
    std::thread::sleep(Duration::from_secs(1));
    println!("RSS, 20 instances after the first round: {} KiB", agent.rss_kib());
    let ticks = rustix::param::clock_ticks_per_second();
    let (t0, c0) = (Instant::now(), agent.cpu_ticks());
    std::thread::sleep(Duration::from_secs(60));
    let (secs, used) = (t0.elapsed().as_secs_f64(), agent.cpu_ticks() - c0);
    println!(
        "idle CPU, 20 instances, {secs:.0} s: {used} ticks of 1/{ticks} s = {:.3} % of one core",
        used as f64 / ticks as f64 / secs * 100.0
    );
    println!("RSS, 20 instances after 60 s idle: {} KiB", agent.rss_kib());
    println!("load at end: {}", std::fs::read_to_string("/proc/loadavg").unwrap().trim());
}

/// One chaos configuration: the good instance's input → visible latencies
/// (ms) over `secs` seconds with `binary` and `args`.
fn chaos_round(binary: &Path, args: &[&str], secs: u64) -> Vec<f64> {
    let (tmp, config, input) = certsync_node("durasync-chaos-bench-", "good");
    let dir = tmp.path();
    let wasm = super::hostile_wasm();
    let modes = [
        "loop",
        "loop",
        "loop",
        "loop",
        "alloc",
        "alloc",
        "panic",
        "panic",
        "log-flood",
        "log-flood",
        "read-sparse",
        "read-sparse",
    ];
    for (i, mode) in modes.iter().enumerate() {
        let name = format!("hostile-{i}-{mode}");
        let root = dir.join(&name);
        std::fs::create_dir_all(&root).unwrap();
        // A 64 GiB sparse file for the readers (refused by its size).
        std::fs::File::create(root.join("sparse")).unwrap().set_len(64 << 30).unwrap();
        let input = dir.join(format!("{name}.txt"));
        std::fs::write(&input, mode).unwrap();
        std::fs::write(
            config.join(format!("{name}.toml")),
            format!(
                "name = \"{name}\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.data]\npath = \"{}\"\naccess = \"rw\"\n\
                 [limits]\nfuel = \"unlimited\"\ntimeout_ms = 2000\n[input]\nfile = \"{}\"\n\
                 [schedule]\nbackoff_min = \"100ms\"\nbackoff_max = \"1s\"\n",
                wasm.display(),
                sha256_of_file(&wasm),
                root.display(),
                input.display()
            ),
        )
        .unwrap();
    }
    let agent = Proc::agent_with(binary, &config, args);
    agent.wait("instance=good", 1);
    let bundle = dir.join("certs/configmaps/client-ca/ca-bundle.crt");
    let mut visible = Vec::new();
    let begin = Instant::now();
    let mut g = 0u32;
    while begin.elapsed() < Duration::from_secs(secs) {
        g += 1;
        visible.push(publish(dir, &input, &bundle, g).1);
        std::thread::sleep(Duration::from_millis(300));
    }
    let failed = agent.count("run failed in");
    println!("  ({} hostile runs failed meanwhile)", failed);
    visible
}

#[test]
#[ignore = "a benchmark: run it by hand (see the module's doc)"]
fn agent_chaos_benchmark() {
    let secs = std::env::var("DURASYNC_CHAOS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    println!("binary: {}; {secs} s per row", bin().display());
    println!("load at start: {}", std::fs::read_to_string("/proc/loadavg").unwrap().trim());
    let mut rows: Vec<(String, PathBuf, Vec<&str>)> = vec![
        ("default bound (4 slots)".into(), bin(), vec![]),
        ("unbounded (16 slots)".into(), bin(), vec!["--max-concurrent-runs", "16"]),
    ];
    if let Some(before) = std::env::var_os("DURASYNC_BENCH_BIN_BEFORE") {
        rows.push(("before fair slots, default bound (4 slots)".into(), PathBuf::from(before), vec![]));
    }
    for (label, binary, args) in rows {
        let mut ms = chaos_round(&binary, &args, secs);
        stats(&format!("chaos, {label}: input change -> visible"), &mut ms);
    }
}
