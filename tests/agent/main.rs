//! agent tests (see tests/README.md): real `durasync agent` processes on
//! real config directories, with real inotify (inputs replaced with
//! `write tmp && rename`), real HTTP (`/metrics`, `/readyz`), real signals
//! and the real certsync plugin; the hostile plugin for the one that loops.

mod actions;
mod bench;
mod config_dir;
mod contrib;
mod daemonset_trust;
mod drift;
mod faults;
mod hardening;
mod hooks;
mod image;
mod image_memory;
mod once;
mod probation;
mod registry;
mod sync;
mod systemd;
mod upgrade;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durasync_test_support as support;
use support::{base64, sha256_of_file, shared_cache, strip_ansi};

/// Exit statuses (docs/cli.md, host/src/cli/exit.rs, host/src/cli/agent.rs).
const IO: i32 = 1;
const POLICY: i32 = 12;
const ONCE_FAILED: i32 = 13;

/// How long any one wait in these tests may take before it fails. Generous:
/// the machine is shared; the waits poll and end as soon as they can.
const DEADLINE: Duration = Duration::from_secs(30);

fn certsync_wasm() -> PathBuf {
    support::wasm::build("Cargo.toml", "certsync")
}

fn hostile_wasm() -> PathBuf {
    support::wasm::build("tests/hostile/plugins/Cargo.toml", "hostile")
}

/// A node: `agent.d/` (the config directory), `inputs/` (input files) and
/// `roots/<instance>/` (each instance's granted root), in a fresh tempdir.
struct Node {
    tmp: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let tmp = tempfile::Builder::new().prefix("durasync-agent-").tempdir().unwrap();
        for d in ["agent.d", "inputs", "roots"] {
            std::fs::create_dir(tmp.path().join(d)).unwrap();
        }
        Node { tmp }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn config_dir(&self) -> PathBuf {
        self.path("agent.d")
    }

    fn manifest(&self, name: &str) -> PathBuf {
        self.config_dir().join(format!("{name}.toml"))
    }

    fn input(&self, name: &str) -> PathBuf {
        self.path(&format!("inputs/{name}.json"))
    }

    fn root(&self, name: &str) -> PathBuf {
        self.path(&format!("roots/{name}"))
    }

    /// Write a file the way `kubectl … > tmp && mv tmp file` does.
    fn replace(&self, path: &Path, bytes: &[u8]) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    /// A certsync instance `name`: secret `tls` (tls.crt, tls.key) and
    /// configmap `ca` (ca.crt) from `inputs/<name>.json` (generation 1),
    /// written under `roots/<name>/`. `extra` is appended (e.g. `[schedule]`).
    fn certsync(&self, name: &str, extra: &str) -> String {
        std::fs::create_dir_all(self.root(name)).unwrap();
        self.set_generation(name, 1);
        let text = certsync_manifest(
            name,
            &self.root(name),
            &format!("[input]\nfile = \"{}\"\n{extra}", self.input(name).display()),
        );
        self.replace(&self.manifest(name), text.as_bytes());
        text
    }

    /// Replace instance `name`'s input with generation `generation`.
    fn set_generation(&self, name: &str, generation: u32) {
        self.replace(&self.input(name), &list(generation));
    }

    /// The generation on disk under instance `name`'s root, if the tree is
    /// complete and from one generation; panics on a mixed tree.
    fn generation(&self, name: &str) -> Option<u32> {
        generation_of(&self.root(name), 0)
    }

    /// Wait until instance `name`'s files are generation `g`; returns how long it took.
    #[track_caller]
    fn wait_generation(&self, name: &str, g: u32, agent: &Agent) -> Duration {
        let start = Instant::now();
        while start.elapsed() < DEADLINE {
            if self.generation(name) == Some(g) {
                return start.elapsed();
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!(
            "{name} never reached generation {g} (on disk: {:?}); log:\n{}",
            self.generation(name),
            agent.log()
        );
    }
}

/// A certsync manifest with root `certs` at `root`, syncing secret `tls`
/// and configmap `ca`.
fn certsync_manifest(name: &str, root: &Path, extra: &str) -> String {
    let wasm = certsync_wasm();
    format!(
        "name = \"{name}\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.certs]\npath = \"{}\"\naccess = \"rw\"\n\
         [config]\nsecrets = [{{ name = \"tls\" }}]\nconfigmaps = [{{ name = \"ca\" }}]\n{extra}",
        wasm.display(),
        sha256_of_file(&wasm),
        root.display()
    )
}

/// The bytes of key `key` in generation `g`.
fn key_bytes(g: u32, key: &str) -> String {
    format!("generation {g} {key}\n")
}

/// The keys of secret `tls` when it has `n` extra keys besides tls.crt/tls.key.
fn secret_keys(extra: usize) -> Vec<String> {
    let mut keys = vec!["tls.crt".to_owned(), "tls.key".to_owned()];
    keys.extend((0..extra).map(|i| format!("extra-{i:05}.pem")));
    keys
}

/// A `kubectl get configmaps,secrets -o json` List of generation `g`: secret
/// `tls` with tls.crt, tls.key and `extra` more keys (padded to `pad` bytes
/// each when larger), configmap `ca` with ca.crt.
fn list_sized(g: u32, extra: usize, pad: usize) -> Vec<u8> {
    let data: Vec<String> = secret_keys(extra)
        .iter()
        .map(|k| {
            let mut v = key_bytes(g, k);
            while v.len() < pad {
                v.push('.');
            }
            format!("{k:?}:{:?}", base64(v.as_bytes()))
        })
        .collect();
    let secret = format!(
        r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"tls","namespace":"ns"}},"data":{{{}}}}}"#,
        data.join(",")
    );
    let cm = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"ca","namespace":"ns"}},"data":{{"ca.crt":{:?}}}}}"#,
        key_bytes(g, "ca.crt")
    );
    format!(r#"{{"apiVersion":"v1","kind":"List","items":[{secret},{cm}],"metadata":{{}}}}"#).into_bytes()
}

fn list(g: u32) -> Vec<u8> {
    list_sized(g, 0, 0)
}

/// The generation of the certsync tree under `root`, if complete: every
/// file of `secrets/tls/` and `configmaps/ca/` must be from one generation
/// (a mixed tree panics: that is the failure the durable core rules out).
/// The secret must hold tls.crt, tls.key and `extra` more keys.
fn generation_of(root: &Path, extra: usize) -> Option<u32> {
    // Every file is read through one fd of its directory: a sync swapping
    // the tree while this reads must not make the reader mix two trees (by
    // path, a listing of the old tree and files of the new one would).
    let read_dir = |d: &Path| -> Option<BTreeMap<String, Vec<u8>>> {
        use rustix::fs::{Mode, OFlags};
        let dir = rustix::fs::open(d, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).ok()?;
        let mut out = BTreeMap::new();
        for e in rustix::fs::Dir::read_from(&dir).ok()? {
            let e = e.ok()?;
            let name = e.file_name().to_str().unwrap().to_owned();
            if name == "." || name == ".." {
                continue;
            }
            let fd =
                rustix::fs::openat(&dir, name.as_str(), OFlags::RDONLY | OFlags::NOFOLLOW, Mode::empty())
                    .ok()?;
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut bytes).ok()?;
            out.insert(name, bytes);
        }
        Some(out)
    };
    let secret = read_dir(&root.join("secrets/tls"))?;
    let ca = read_dir(&root.join("configmaps/ca"))?;
    let gen_of = |key: &str, bytes: &[u8]| -> u32 {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches('.');
        let rest = text.strip_prefix("generation ").unwrap_or_else(|| panic!("{key}: {text:?}"));
        let (g, k) = rest.split_once(' ').unwrap();
        assert_eq!(k.trim_end(), key, "file {key} holds another key's bytes");
        g.parse().unwrap()
    };
    let g = gen_of("ca.crt", &ca["ca.crt"]);
    let gens: Vec<u32> = secret.iter().map(|(k, v)| gen_of(k, v)).collect();
    // The secret and the configmap are two syncs: each is atomic on its own.
    let sg = gens[0];
    assert!(gens.iter().all(|x| *x == sg), "secrets/tls mixes generations: {gens:?}");
    let expected: Vec<String> = secret_keys(extra);
    let mut names: Vec<&String> = secret.keys().collect();
    names.sort();
    let mut want: Vec<&String> = expected.iter().collect();
    want.sort();
    assert_eq!(names, want, "secrets/tls does not hold exactly its keys");
    (g == sg).then_some(g)
}

/// Every `.durasync-*` entry beneath `dir` (the lock, `.durasync.lock`, is
/// not one).
fn leftovers(dir: &Path) -> Vec<PathBuf> {
    let mut found = support::durasync_entries(dir);
    found.retain(|p| p.file_name().is_some_and(|n| n.as_encoded_bytes().starts_with(b".durasync-")));
    found
}

/// A running `durasync agent`, its log collected line by line.
struct Agent {
    child: Child,
    log: Arc<Mutex<String>>,
    addr: Option<String>,
}

impl Agent {
    /// `durasync agent --config-dir DIR --metrics-addr 127.0.0.1:0 ARGS`,
    /// once it serves HTTP (its address is read from the log).
    fn start(node: &Node, args: &[&str]) -> Agent {
        Agent::start_env(node, args, &[])
    }

    fn start_env(node: &Node, args: &[&str], env: &[(&str, &str)]) -> Agent {
        // systemd sets WATCHDOG_PID to the service's pid: `exec` from a
        // shell that exports its own pid does the same.
        let mut cmd = if env.iter().any(|(k, _)| *k == "WATCHDOG_USEC") {
            let mut sh = Command::new("sh");
            sh.args(["-c", "WATCHDOG_PID=$$ exec \"$0\" \"$@\""]).arg(support::durasync());
            sh
        } else {
            Command::new(support::durasync())
        };
        cmd.arg("agent").arg("--config-dir").arg(node.config_dir());
        cmd.args(["--metrics-addr", "127.0.0.1:0"]).args(args);
        cmd.env("XDG_CACHE_HOME", shared_cache()).env("DURASYNC_LOG", "debug").env("NO_COLOR", "1");
        cmd.env_remove("NOTIFY_SOCKET").env_remove("WATCHDOG_USEC");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let mut agent = Agent { child, log, addr: None };
        let line = agent.wait_log("serving /metrics");
        let addr = line.rsplit("http://").next().unwrap().trim().to_owned();
        agent.addr = Some(addr);
        agent
    }

    fn log(&self) -> String {
        strip_ansi(&self.log.lock().unwrap())
    }

    /// Wait for a log line containing `needle`; returns it.
    #[track_caller]
    fn wait_log(&mut self, needle: &str) -> String {
        self.wait_log_count(needle, 1)
    }

    /// Wait until `n` log lines contain `needle`; returns the last.
    #[track_caller]
    fn wait_log_count(&mut self, needle: &str, n: usize) -> String {
        let start = Instant::now();
        loop {
            let log = self.log();
            let hits: Vec<&str> = log.lines().filter(|l| l.contains(needle)).collect();
            if hits.len() >= n {
                return hits[n - 1].to_owned();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(50));
                panic!("the agent exited ({status}) before logging {needle:?}; log:\n{}", self.log());
            }
            assert!(start.elapsed() < DEADLINE, "no {needle:?} ({n}x) in the log:\n{log}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// `GET path` over HTTP/1.0: (status, body).
    fn get(&self, path: &str) -> (u16, String) {
        http_get(self.addr.as_deref().unwrap(), path)
    }

    /// The value of the series `series` (`name{labels}`), if present.
    fn metric(&self, series: &str) -> Option<f64> {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        metric_in(&body, series)
    }

    /// Wait until series `series` equals `value`.
    #[track_caller]
    fn wait_metric(&self, series: &str, value: f64) {
        let start = Instant::now();
        loop {
            if self.metric(series) == Some(value) {
                return;
            }
            if start.elapsed() > DEADLINE {
                panic!(
                    "{series} never became {value}; /metrics:\n{}\nlog:\n{}",
                    self.get("/metrics").1,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait until series `series` is at least `value`; returns it.
    #[track_caller]
    fn wait_metric_min(&self, series: &str, value: f64) -> f64 {
        let start = Instant::now();
        loop {
            if let Some(v) = self.metric(series).filter(|v| *v >= value) {
                return v;
            }
            if start.elapsed() > DEADLINE {
                panic!(
                    "{series} never reached {value}; /metrics:\n{}\nlog:\n{}",
                    self.get("/metrics").1,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait until `/readyz` answers `status`; returns its body.
    #[track_caller]
    fn wait_ready(&self, status: u16) -> serde_json::Value {
        let start = Instant::now();
        loop {
            let (s, body) = self.get("/readyz");
            if s == status {
                return serde_json::from_str(&body).unwrap();
            }
            assert!(
                start.elapsed() < DEADLINE,
                "/readyz never answered {status}: {s} {body}\nlog:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait until `/readyz` names exactly `names` as not ready (503);
    /// returns their entries.
    #[track_caller]
    fn wait_not_ready(&self, names: &[&str]) -> Vec<serde_json::Value> {
        let start = Instant::now();
        loop {
            let (s, body) = self.get("/readyz");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            let not_ready = v["not_ready"].as_array().cloned().unwrap_or_default();
            let got: Vec<&str> = not_ready.iter().filter_map(|i| i["instance"].as_str()).collect();
            if s == 503 && got == names {
                return not_ready;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "/readyz never named {names:?}: {s} {body}\nlog:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, sig).unwrap();
    }

    /// Wait for the agent to exit.
    #[track_caller]
    fn wait_exit(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the log reader drain the pipe.
                std::thread::sleep(Duration::from_millis(50));
                return status;
            }
            assert!(start.elapsed() < DEADLINE, "the agent did not exit; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, body.to_owned())
}

/// The value of `series` in an OpenMetrics text.
fn metric_in(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// `durasync agent --once` on `node`: (status, stdout, stderr).
fn once(node: &Node, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(support::durasync())
        .arg("agent")
        .arg("--config-dir")
        .arg(node.config_dir())
        .arg("--once")
        .args(args)
        .env("XDG_CACHE_HOME", shared_cache())
        .env_remove("DURASYNC_LOG")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        strip_ansi(&String::from_utf8_lossy(&out.stderr)),
    )
}

/// Median and maximum of some durations, in milliseconds.
fn median_max(d: &[Duration]) -> (f64, f64) {
    let mut ms: Vec<f64> = d.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    (ms[ms.len() / 2], ms[ms.len() - 1])
}
