//! Probation after commit (docs/hooks.md, "Probation"): a change a `[[probe]]`
//! covers commits with its previous tree kept; a probe failing for the new
//! contents (a real HTTP server in the test, or a real command) makes the
//! agent revert within `within` plus one interval, the consumer's action
//! runs for the revert, the same bad input is refused by digest (never
//! written again), a fixed input goes live and passes. An agent killed
//! with SIGKILL during probation resumes it from the ledger after its
//! restart and reverts too.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Agent, DEADLINE, Node};

/// No resync while a test watches (runs come from input changes only), and
/// a refused run is retried quickly.
const SCHEDULE: &str = "[schedule]\ninterval = \"1h\"\nbackoff_min = \"200ms\"\nbackoff_max = \"400ms\"\n";

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}

fn start(node: &Node) -> Agent {
    let state = node.path("state").display().to_string();
    Agent::start(node, &["--state-dir", &state])
}

/// An action appending what the consumer would load now (ca.crt) to `log`.
fn reload_action(node: &Node, name: &str, log: &Path) -> String {
    let script = format!("cat {}/configmaps/ca/ca.crt >> {}", node.root(name).display(), log.display());
    format!(
        "[[action]]\nname = \"reload\"\nroot = \"certs\"\npath = \"**\"\ncommand = [\"sh\", \"-c\", {script:?}]\n"
    )
}

/// A consumer's health endpoint on 127.0.0.1: 500 while the ca.crt under
/// `root` holds generation 2 (the consumer "cannot start" with it), else
/// 200. Counts the requests it answered.
struct Consumer {
    port: u16,
    requests: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Consumer {
    fn start(root: PathBuf) -> Consumer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (requests, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (count, stopped) = (requests.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                conn.set_nonblocking(false).unwrap();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                // The request line and headers, up to the blank line.
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                let ca = std::fs::read_to_string(root.join("configmaps/ca/ca.crt")).unwrap_or_default();
                let (status, body) = if ca.contains("generation 2") {
                    ("500 Internal Server Error", "consumer cannot load generation 2")
                } else {
                    ("200 OK", "ok")
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                count.fetch_add(1, Ordering::Relaxed);
            }
        });
        Consumer { port, requests, stop }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

const REVERTS: &str = "durasync_agent_probation_reverts_total{durasync_instance=\"a\"}";
const DRIFT: &str = "durasync_agent_drift_total{durasync_instance=\"a\"}";
const PASSED: &str = "durasync_agent_probations_total{durasync_instance=\"a\",result=\"passed\"}";
const ACTIONS_OK: &str =
    "durasync_agent_actions_total{durasync_instance=\"a\",action=\"reload\",result=\"ok\"}";

#[test]
fn probation_reverts_a_change_whose_http_probe_fails_and_refuses_the_same_contents_until_the_input_changes() {
    let node = Node::new();
    let consumer = Consumer::start(node.root("a"));
    let log = node.path("actions.log");
    let (interval, within) = (Duration::from_millis(200), Duration::from_secs(2));
    let probe = format!(
        "[[probe]]\nname = \"consumer\"\nroot = \"certs\"\npath = \"configmaps/**\"\n\
         http = \"http://127.0.0.1:{}/healthz\"\ninterval = \"200ms\"\nwithin = \"2s\"\ntimeout = \"1s\"\n",
        consumer.port
    );
    node.certsync("a", &format!("{SCHEDULE}{}{probe}", reload_action(&node, "a", &log)));
    let mut agent = start(&node);
    // Generation 1 is healthy: its probation passes, and the previous
    // (none: the target was created) is nothing to keep.
    node.wait_generation("a", 1, &agent);
    agent.wait_metric(PASSED, 1.0);
    agent.wait_metric(ACTIONS_OK, 1.0);
    agent.wait_ready(200);

    // Generation 2 goes live and fails its probe: reverted within `within`
    // plus one interval (and some slack for a shared machine).
    node.set_generation("a", 2);
    node.wait_generation("a", 2, &agent);
    let live = Instant::now();
    agent.wait_metric(REVERTS, 1.0);
    let took = live.elapsed();
    eprintln!("reverted {took:?} after generation 2 was seen live (within 2 s, interval 200 ms)");
    assert!(took <= within + interval + Duration::from_secs(2), "reverted after {took:?}");
    assert!(took >= within - Duration::from_millis(300), "reverted early, after {took:?}");
    // The secret was not covered by the probe: it stays at generation 2;
    // the configmap is back at generation 1, byte for byte.
    let ca = node.root("a").join("configmaps/ca/ca.crt");
    assert_eq!(std::fs::read_to_string(&ca).unwrap(), "generation 1 ca.crt\n");
    assert_eq!(
        std::fs::read_to_string(node.root("a").join("secrets/tls/tls.crt")).unwrap(),
        "generation 2 tls.crt\n"
    );
    // The consumer reloaded for the change and again for the revert.
    agent.wait_metric(ACTIONS_OK, 3.0);
    assert_eq!(lines(&log), ["generation 1 ca.crt", "generation 2 ca.crt", "generation 1 ca.crt"]);
    // Reported: /readyz names the revert and the probe's output, the log too.
    let ready = agent.wait_ready(503);
    let problem = ready["not_ready"][0]["problem"].as_str().unwrap().to_owned();
    assert!(problem.contains("failed its probe consumer") && problem.contains("answered 500"), "{problem}");
    agent.wait_log("consumer cannot load generation 2");
    // The revert is durasync's own change: the drift watch on the target
    // (on by default) saw it and reported nothing.
    assert_eq!(agent.metric(DRIFT), Some(0.0), "the revert was reported as drift");
    assert!(super::leftovers(&node.root("a")).is_empty(), "{:?}", super::leftovers(&node.root("a")));

    // The same input again: refused by digest, nothing written.
    let requests = consumer.requests.load(Ordering::Relaxed);
    node.set_generation("a", 2);
    agent.wait_metric_min("durasync_agent_runs_total{durasync_instance=\"a\",result=\"rejected\"}", 1.0);
    agent.wait_log("failed their probe at");
    assert_eq!(std::fs::read_to_string(&ca).unwrap(), "generation 1 ca.crt\n");
    assert_eq!(agent.metric(REVERTS), Some(1.0));
    assert_eq!(consumer.requests.load(Ordering::Relaxed), requests, "refused contents were probed");

    // A fixed input goes live and passes its probation: ready again.
    node.set_generation("a", 3);
    node.wait_generation("a", 3, &agent);
    agent.wait_metric(PASSED, 2.0);
    agent.wait_ready(200);
    assert_eq!(agent.metric(REVERTS), Some(1.0));
    assert_eq!(agent.metric(DRIFT), Some(0.0), "a probation's change was reported as drift");
    let text = std::fs::read_to_string(node.path("state/actions/a.owed")).unwrap();
    assert!(!text.contains("\"probation\""), "probation still open: {text}");
    assert_eq!(text.matches("\"failed\"").count(), 1, "{text}");
}

#[test]
fn probation_survives_a_kill_9_and_the_restarted_agent_reverts_the_failing_change() {
    let node = Node::new();
    let log = node.path("actions.log");
    // A command probe failing for generation 2 anywhere in its target.
    let script = "if grep -rq 'generation 2' \"$1\"; then echo \"bad contents in $1\"; exit 1; fi";
    let probe = format!(
        "[[probe]]\nname = \"check\"\nroot = \"certs\"\npath = \"configmaps/*\"\n\
         command = [\"sh\", \"-c\", {script:?}, \"probe\", \"{{target}}\"]\ninterval = \"200ms\"\nwithin = \"3s\"\n"
    );
    node.certsync("a", &format!("{SCHEDULE}{}{probe}", reload_action(&node, "a", &log)));
    let mut agent = start(&node);
    node.wait_generation("a", 1, &agent);
    agent.wait_metric(PASSED, 1.0);
    node.set_generation("a", 2);
    node.wait_generation("a", 2, &agent);
    agent.wait_log("probe failed (");
    // On probation, durably: the ledger says so, the previous tree is kept.
    let text = std::fs::read_to_string(node.path("state/actions/a.owed")).unwrap();
    assert!(text.contains("\"probation\"") && text.contains("configmaps/ca"), "{text}");
    let kept: Vec<String> = std::fs::read_dir(node.root("a").join("configmaps"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".durasync-keep."))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    agent.signal(rustix::process::Signal::KILL);
    agent.wait_exit();

    // Restarted with the same input: the run changes nothing, the
    // probation resumes and its window (long passed) ends in a revert.
    let mut agent = start(&node);
    agent.wait_metric(REVERTS, 1.0);
    let ca = node.root("a").join("configmaps/ca/ca.crt");
    assert_eq!(std::fs::read_to_string(&ca).unwrap(), "generation 1 ca.crt\n");
    agent.wait_log("bad contents in");
    agent.wait_metric(ACTIONS_OK, 1.0);
    assert_eq!(lines(&log).last().map(String::as_str), Some("generation 1 ca.crt"));
    let start_wait = Instant::now();
    while !super::leftovers(&node.root("a")).is_empty() && start_wait.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(super::leftovers(&node.root("a")).is_empty(), "{:?}", super::leftovers(&node.root("a")));
}

fn durasync(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(crate::support::durasync()).args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn probation_by_hand_rollback_root_path_with_the_manifest_puts_the_previous_back_and_runs_its_actions() {
    let node = Node::new();
    let log = node.path("actions.log");
    node.certsync("a", &format!("{SCHEDULE}{}", reload_action(&node, "a", &log)));
    let manifest = node.manifest("a").display().to_string();
    // Two syncs of the configmap's directory, the second keeping the first.
    let ca = node.root("a").join("configmaps/ca");
    std::fs::create_dir_all(ca.parent().unwrap()).unwrap();
    let src = node.path("src");
    std::fs::create_dir(&src).unwrap();
    let target = ca.display().to_string();
    for g in [1, 2] {
        std::fs::write(src.join("ca.crt"), super::key_bytes(g, "ca.crt")).unwrap();
        let from = src.display().to_string();
        let (code, _, stderr) = durasync(&["sync", &target, "--from", &from, "--keep-previous"]);
        assert_eq!(code, Some(0), "{stderr}");
    }
    // A root the manifest does not have, or no ROOT: a usage error, nothing changed.
    for bad in ["nope:configmaps/ca", "configmaps/ca", "certs:../ca"] {
        let (code, _, stderr) = durasync(&["rollback", bad, "--manifest", &manifest]);
        assert_eq!(code, Some(2), "{bad}: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(ca.join("ca.crt")).unwrap(), "generation 2 ca.crt\n");
    let (code, stdout, stderr) = durasync(&["rollback", "certs:configmaps/ca", "--manifest", &manifest]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(&target), "{stdout}");
    assert_eq!(std::fs::read_to_string(ca.join("ca.crt")).unwrap(), "generation 1 ca.crt\n");
    // The consumer's action ran after the revert, with the old contents.
    assert_eq!(lines(&log), ["generation 1 ca.crt"]);
    assert!(stderr.contains("action reload ran"), "{stderr}");
    // Nothing is kept any more: a second rollback is an invalid request.
    let (code, _, stderr) = durasync(&["rollback", "certs:configmaps/ca", "--manifest", &manifest]);
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(lines(&log).len(), 1);
}

#[test]
fn probation_is_skipped_by_agent_once_which_says_so_and_keeps_nothing() {
    let node = Node::new();
    let probe = "[[probe]]\nroot = \"certs\"\ncommand = [\"false\"]\nwithin = \"1s\"\ninterval = \"100ms\"\n";
    node.certsync("a", &format!("{SCHEDULE}{probe}"));
    let config = node.config_dir().display().to_string();
    let out = std::process::Command::new(crate::support::durasync())
        .args(["agent", "--once", "--config-dir", &config])
        .env("XDG_CACHE_HOME", super::shared_cache())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("ok a:") && stdout.contains("skipped: probation ([[probe]])"), "{stdout}");
    // Live, unprobed (the probe would fail), nothing kept.
    assert_eq!(node.generation("a"), Some(1));
    assert!(super::leftovers(&node.root("a")).is_empty(), "{:?}", super::leftovers(&node.root("a")));
}
