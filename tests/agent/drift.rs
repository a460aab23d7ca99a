//! Drift (a target an instance wrote, changed by hand) seen, reported and
//! repaired or only reported; the agent's own syncs never counted; a flood
//! coalesced; and `durasync status` against a running agent.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{Agent, Node, key_bytes, sha256_of_file};

const SLOW_SCHEDULE: &str = "[schedule]\ninterval = \"1h\"\n";

fn drift_total(name: &str) -> String {
    format!("durasync_agent_drift_total{{durasync_instance=\"{name}\"}}")
}

fn drift_runs(name: &str) -> String {
    format!("durasync_agent_triggers_total{{durasync_instance=\"{name}\",trigger=\"drift\"}}")
}

/// `echo x >> path`.
fn append(path: &Path) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(b"x\n").unwrap();
}

/// A started agent whose instance `name` wrote generation 1 and whose drift
/// watch is armed (its drift series exists, at 0).
fn started(node: &Node, name: &str, extra: &str) -> Agent {
    node.certsync(name, &format!("{SLOW_SCHEDULE}{extra}"));
    let agent = Agent::start(node, &[]);
    node.wait_generation(name, 1, &agent);
    agent.wait_metric(&drift_total(name), 0.0);
    agent
}

/// Wait until `path` holds `bytes`.
#[track_caller]
fn wait_bytes(path: &Path, bytes: &[u8], agent: &Agent) {
    let start = Instant::now();
    while std::fs::read(path).ok().as_deref() != Some(bytes) {
        assert!(
            start.elapsed() < super::DEADLINE,
            "{} never held {bytes:?}; log:\n{}",
            path.display(),
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn drift_by_hand_is_reported_within_a_second_and_repaired_by_default() {
    let node = Node::new();
    let mut agent = started(&node, "a", "");
    let crt = node.root("a").join("secrets/tls/tls.crt");
    let start = Instant::now();
    append(&crt);
    let line = agent.wait_log("drift: changed by something other than durasync, repairing");
    let seen = start.elapsed();
    assert!(seen < Duration::from_secs(1), "reported after {seen:?}");
    assert!(line.contains(&crt.display().to_string()), "the line names the path: {line}");
    wait_bytes(&crt, key_bytes(1, "tls.crt").as_bytes(), &agent);
    eprintln!(
        "drift reported {:.1} ms after the write, repaired {:.1} ms after it",
        seen.as_secs_f64() * 1e3,
        start.elapsed().as_secs_f64() * 1e3
    );
    agent.wait_metric(&drift_runs("a"), 1.0);
    agent.wait_metric(&drift_total("a"), 1.0);
    // The repair run has ended (the start's run and the repair's), so its
    // old contents are removed: the trigger's count rises when it starts.
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"a\",result=\"ok\"}", 2.0);
    assert_eq!(node.generation("a"), Some(1));
    assert!(super::leftovers(&node.root("a")).is_empty(), "{:?}", super::leftovers(&node.root("a")));
    // The repair's own writes are not drift, and the watch follows the new
    // tree: a second edit is seen and repaired as well.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(agent.metric(&drift_total("a")), Some(1.0), "log:\n{}", agent.log());
    append(&node.root("a").join("configmaps/ca/ca.crt"));
    agent.wait_metric(&drift_total("a"), 2.0);
    wait_bytes(&node.root("a").join("configmaps/ca/ca.crt"), key_bytes(1, "ca.crt").as_bytes(), &agent);
    agent.wait_metric(&drift_runs("a"), 2.0);
    agent.wait_ready(200);
}

#[test]
fn drift_report_only_reports_and_leaves_the_file_as_it_was_changed() {
    let node = Node::new();
    let mut agent = started(&node, "a", "[drift]\nmode = \"report\"\nreadyz = true\n");
    let crt = node.root("a").join("secrets/tls/tls.crt");
    append(&crt);
    let line = agent.wait_log("(reported only)");
    assert!(line.contains(&crt.display().to_string()), "{line}");
    agent.wait_metric(&drift_total("a"), 1.0);
    // `readyz = true`: not ready until a run after the drift succeeds.
    let not_ready = agent.wait_not_ready(&["a"]);
    let problem = not_ready[0]["problem"].as_str().unwrap();
    assert!(problem.starts_with("drift seen and not repaired yet"), "{problem}");
    std::thread::sleep(Duration::from_millis(300));
    let edited = format!("{}x\n", key_bytes(1, "tls.crt"));
    assert_eq!(std::fs::read_to_string(&crt).unwrap(), edited, "report only: nothing was written back");
    assert_eq!(agent.metric(&drift_runs("a")), None);
    // The next run (here: a new input) writes the desired state and clears it.
    node.set_generation("a", 2);
    // The edited file is no generation at all until that run replaced it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&crt).unwrap() == edited {
        assert!(std::time::Instant::now() < deadline, "the edit was never replaced; log:\n{}", agent.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    node.wait_generation("a", 2, &agent);
    agent.wait_ready(200);
    assert_eq!(agent.metric(&drift_total("a")), Some(1.0), "log:\n{}", agent.log());
}

#[test]
fn the_agent_s_own_syncs_never_count_as_drift() {
    let node = Node::new();
    let agent = started(&node, "a", "");
    for g in 2..=8 {
        let runs = "durasync_agent_runs_total{durasync_instance=\"a\",result=\"ok\"}";
        agent.wait_metric(runs, f64::from(g - 1));
        node.set_generation("a", g);
        node.wait_generation("a", g, &agent);
    }
    agent.wait_metric("durasync_agent_operations_total{durasync_instance=\"a\",outcome=\"replaced\"}", 14.0);
    // Longer than a report's settle and longest delay: anything seen would
    // have been reported by now.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(agent.metric(&drift_total("a")), Some(0.0), "log:\n{}", agent.log());
    assert_eq!(agent.metric(&drift_runs("a")), None);
    assert!(!agent.log().contains("drift:"), "{}", agent.log());
}

#[test]
fn a_flood_of_a_thousand_writes_coalesces_into_few_repair_runs() {
    let node = Node::new();
    let agent = started(&node, "a", "");
    let crt = node.root("a").join("secrets/tls/tls.crt");
    let start = Instant::now();
    for _ in 0..1000 {
        append(&crt);
    }
    let flood = start.elapsed();
    wait_bytes(&crt, key_bytes(1, "tls.crt").as_bytes(), &agent);
    agent.wait_metric_min(&drift_runs("a"), 1.0);
    std::thread::sleep(Duration::from_millis(1500));
    let runs = agent.metric(&drift_runs("a")).unwrap();
    let reports = agent.metric(&drift_total("a")).unwrap();
    eprintln!(
        "1000 writes in {:.1} ms: {reports} drift reports, {runs} repair runs",
        flood.as_secs_f64() * 1e3
    );
    assert!(runs <= 3.0 && reports <= 3.0, "{reports} reports, {runs} runs; log:\n{}", agent.log());
    assert_eq!(node.generation("a"), Some(1));
}

/// `durasync status ARGS`: (status, stdout, stderr).
fn status(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(super::support::durasync())
        .arg("status")
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn durasync_status_shows_a_running_agent_s_instances_as_a_table_and_as_json() {
    let node = Node::new();
    node.certsync("a", SLOW_SCHEDULE);
    node.certsync("b", &format!("{SLOW_SCHEDULE}[drift]\nmode = \"off\"\n"));
    let agent = Agent::start(&node, &[]);
    node.wait_generation("a", 1, &agent);
    node.wait_generation("b", 1, &agent);
    agent.wait_ready(200);
    let addr = agent.addr.clone().unwrap();

    let (code, out, err) = status(&["--address", &addr, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let instances = v["instances"].as_array().unwrap();
    let names: Vec<&str> = instances.iter().map(|i| i["instance"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"]);
    let sha = sha256_of_file(&super::certsync_wasm());
    for (i, name) in instances.iter().zip(["a", "b"]) {
        assert_eq!(i["plugin"]["sha256"], sha.as_str());
        assert_eq!(i["problem"], serde_json::Value::Null);
        assert_eq!(i["last_run"]["result"], "ok");
        assert_eq!(i["last_run"]["trigger"], "start");
        let digest = durasync::agent::status::root_digest(&node.root(name)).unwrap();
        assert_eq!(i["last_commit"]["roots"]["certs"], digest.as_str(), "{out}");
        assert_eq!(i["owed_actions"].as_array().unwrap().len(), 0);
    }
    assert_eq!(instances[0]["drift"]["mode"], "repair");
    assert_eq!(instances[0]["drift"]["targets"], 2, "secrets/tls and configmaps/ca: {out}");
    assert_eq!(instances[1]["drift"]["mode"], "off");
    assert_eq!(instances[1]["drift"]["targets"], 0);
    // `/status` itself is the same document.
    let (code, body) = agent.get("/status");
    assert_eq!(code, 200);
    let served: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(served["instances"].as_array().unwrap().len(), 2);

    // Drift shows up in both forms.
    append(&node.root("a").join("secrets/tls/tls.key"));
    agent.wait_metric(&drift_runs("a"), 1.0);
    let (_, out, _) = status(&["--address", &addr, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let d = &v["instances"][0]["drift"];
    assert_eq!(d["seen"], 1);
    let tls_key = node.root("a").join("secrets/tls/tls.key");
    assert_eq!(d["last_paths"][0], tls_key.display().to_string().as_str(), "{out}");

    let (code, table, err) = status(&["--address", &addr]);
    assert_eq!(code, 0, "{err}");
    let header = table.lines().nth(1).unwrap();
    for col in ["INSTANCE", "PLUGIN", "LAST RUN", "LAST COMMIT", "OWED", "DRIFT", "STATE"] {
        assert!(header.contains(col), "{table}");
    }
    let row_a = table.lines().find(|l| l.starts_with("a ")).unwrap();
    assert!(row_a.contains(&format!("sha256:{}", &sha[..12])) && row_a.contains("ready"), "{table}");
    assert!(row_a.contains("repair: 1"), "{table}");
    let row_b = table.lines().find(|l| l.starts_with("b ")).unwrap();
    assert!(row_b.contains("off"), "{table}");
    assert!(table.contains(&format!("last drift: {}", tls_key.display())), "{table}");

    // Nobody listening: a clear error and a failure status.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (code, out, err) = status(&["--address", &format!("127.0.0.1:{port}")]);
    assert_eq!((code, out.as_str()), (super::IO, ""), "{err}");
    assert!(err.contains(&format!("no durasync agent answers on 127.0.0.1:{port}")), "{err}");
}
