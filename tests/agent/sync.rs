//! The agent keeping instances in sync: first sync, input changes through
//! inotify, the metrics they leave, isolation from a plugin that loops,
//! SIGHUP.

use std::time::{Duration, Instant};

use super::{Agent, Node, hostile_wasm, median_max, sha256_of_file};

const SLOW_SCHEDULE: &str = "[schedule]\ninterval = \"1h\"\n";

#[test]
fn two_instances_sync_at_start_and_every_input_change_reaches_disk_and_the_metrics() {
    let node = Node::new();
    node.certsync("a", SLOW_SCHEDULE);
    node.certsync("b", SLOW_SCHEDULE);
    let agent = Agent::start(&node, &[]);
    node.wait_generation("a", 1, &agent);
    node.wait_generation("b", 1, &agent);
    agent.wait_ready(200);

    let mut latencies = Vec::new();
    for g in 2..=6 {
        for name in ["a", "b"] {
            // A change seen while a run is in flight runs it again right
            // after (it may have read the old input): wait for the run's
            // end so each change is exactly one run.
            let runs = format!("durasync_agent_runs_total{{durasync_instance=\"{name}\",result=\"ok\"}}");
            agent.wait_metric(&runs, f64::from(g - 1));
            let start = Instant::now();
            node.set_generation(name, g);
            node.wait_generation(name, g, &agent);
            latencies.push(start.elapsed());
        }
    }
    let (median, max) = median_max(&latencies);
    eprintln!("input change → on disk, 10 changes: median {median:.1} ms, max {max:.1} ms");

    // Counters against what happened: per instance, 1 start + 5 input
    // runs, each syncing the secret (2 files) and the configmap (1 file):
    // created twice by the first, replaced twice by each change; the
    // same names every time, so nothing is removed.
    for name in ["a", "b"] {
        let l = format!("durasync_instance=\"{name}\"");
        agent.wait_metric(&format!("durasync_agent_runs_total{{{l},result=\"ok\"}}"), 6.0);
        agent.wait_metric(&format!("durasync_agent_triggers_total{{{l},trigger=\"start\"}}"), 1.0);
        agent.wait_metric(&format!("durasync_agent_triggers_total{{{l},trigger=\"input\"}}"), 5.0);
        agent.wait_metric(&format!("durasync_agent_operations_total{{{l},outcome=\"created\"}}"), 2.0);
        agent.wait_metric(&format!("durasync_agent_operations_total{{{l},outcome=\"replaced\"}}"), 10.0);
        agent.wait_metric(&format!("durasync_agent_files_written_total{{{l}}}"), 18.0);
        agent.wait_metric(&format!("durasync_agent_files_removed_total{{{l}}}"), 0.0);
        // Every file certsync writes holds bytes: at least one per file written.
        let bytes = agent.metric(&format!("durasync_agent_bytes_written_total{{{l}}}")).unwrap_or(0.0);
        assert!(bytes >= 18.0, "bytes written {bytes} for 18 files written");
        agent.wait_metric(&format!("durasync_agent_run_duration_seconds_count{{{l}}}"), 6.0);
        let sha = sha256_of_file(&super::certsync_wasm());
        agent.wait_metric(
            &format!("durasync_agent_plugin_info{{{l},sha256=\"{sha}\",manifest_digest=\"\"}}"),
            1.0,
        );
        let last = agent.metric(&format!("durasync_agent_last_success_timestamp_seconds{{{l}}}")).unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!((now - last).abs() < 120.0, "last success {last} is not recent (now {now})");
        assert_eq!(agent.metric(&format!("durasync_agent_runs_total{{{l},result=\"trap\"}}")), None);
    }
    agent.wait_metric("durasync_agent_instances", 2.0);
    let (_, metrics) = agent.get("/metrics");
    assert_no_label_prometheus_reserves(&metrics);
    let (status, body) = agent.get("/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, _) = agent.get("/nothing");
    assert_eq!(status, 404);
    // The text log names the instance on every line about a run.
    let log = agent.log();
    let runs: Vec<&str> = log.lines().filter(|l| l.contains("run ok in")).collect();
    assert_eq!(runs.len(), 12, "{log}");
    assert!(runs.iter().all(|l| l.contains("instance=a") || l.contains("instance=b")), "{log}");
}

#[test]
fn a_plugin_that_loops_forever_does_not_delay_the_other_instance() {
    let node = Node::new();
    node.certsync("a", SLOW_SCHEDULE);
    let wasm = hostile_wasm();
    std::fs::create_dir_all(node.root("loop")).unwrap();
    std::fs::write(node.path("inputs/loop.txt"), "loop").unwrap();
    let timeout_ms = 6000;
    std::fs::write(
        node.manifest("loop"),
        format!(
            "name = \"loop\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.data]\npath = \"{}\"\naccess = \"rw\"\n\
             [limits]\nfuel = \"unlimited\"\ntimeout_ms = {timeout_ms}\n[input]\nfile = \"{}\"\n\
             [schedule]\ninterval = \"1h\"\nbackoff_min = \"1h\"\n",
            wasm.display(),
            sha256_of_file(&wasm),
            node.root("loop").display(),
            node.path("inputs/loop.txt").display()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let mut agent = Agent::start(&node, &[]);
    agent.wait_log("instance=loop");
    node.wait_generation("a", 1, &agent);
    let mut latencies = Vec::new();
    for g in 2..=4 {
        let start = Instant::now();
        node.set_generation("a", g);
        node.wait_generation("a", g, &agent);
        latencies.push(start.elapsed());
    }
    // The looping run is still in flight: a's updates did not wait for it.
    let still_looping =
        agent.metric("durasync_agent_runs_total{durasync_instance=\"loop\",result=\"trap\"}").is_none();
    let elapsed = started.elapsed();
    assert!(
        still_looping || elapsed > Duration::from_millis(timeout_ms),
        "the loop ended before its timeout: {}",
        agent.log()
    );
    let (median, max) = median_max(&latencies);
    eprintln!("while another instance loops: median {median:.1} ms, max {max:.1} ms");
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"loop\",result=\"trap\"}", 1.0);
    agent.wait_log("timed out after 6 s (limits.timeout_ms)");
    agent.wait_metric_min("durasync_agent_runs_total{durasync_instance=\"a\",result=\"ok\"}", 4.0);
    let not_ready = agent.wait_not_ready(&["loop"]);
    let problem = not_ready[0]["problem"].as_str().unwrap();
    assert!(
        problem.starts_with("last run failed (1 in a row): plugin loop timed out after 6 s"),
        "{problem}"
    );
}

#[test]
fn sighup_reloads_and_runs_every_instance() {
    let node = Node::new();
    node.certsync("a", SLOW_SCHEDULE);
    node.certsync("b", SLOW_SCHEDULE);
    let mut agent = Agent::start(&node, &[]);
    node.wait_generation("a", 1, &agent);
    node.wait_generation("b", 1, &agent);
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"a\",result=\"ok\"}", 1.0);
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"b\",result=\"ok\"}", 1.0);
    agent.signal(rustix::process::Signal::HUP);
    agent.wait_log("SIGHUP: reloading every manifest");
    for name in ["a", "b"] {
        agent.wait_metric(
            &format!("durasync_agent_triggers_total{{durasync_instance=\"{name}\",trigger=\"reload\"}}"),
            1.0,
        );
        agent.wait_metric(
            &format!("durasync_agent_runs_total{{durasync_instance=\"{name}\",result=\"ok\"}}"),
            2.0,
        );
        agent.wait_metric(
            &format!("durasync_agent_operations_total{{durasync_instance=\"{name}\",outcome=\"unchanged\"}}"),
            2.0,
        );
    }
}

#[test]
fn the_interval_resyncs_and_repairs_a_target_changed_behind_the_agent_s_back() {
    let node = Node::new();
    // Drift repair would put the file back first (it is on by default);
    // this test is about the interval alone.
    node.certsync("a", "[schedule]\ninterval = \"300ms\"\n[drift]\nmode = \"off\"\n");
    let agent = Agent::start(&node, &[]);
    node.wait_generation("a", 1, &agent);
    // Someone edits a synced file by hand: the next resync puts it back.
    std::fs::write(node.root("a").join("secrets/tls/tls.crt"), "generation 1 tls.crt\n".repeat(2)).unwrap();
    let start = Instant::now();
    while std::fs::read_to_string(node.root("a").join("secrets/tls/tls.crt")).unwrap()
        != "generation 1 tls.crt\n"
    {
        assert!(start.elapsed() < super::DEADLINE, "never repaired: {}", agent.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    agent.wait_metric("durasync_agent_operations_total{durasync_instance=\"a\",outcome=\"replaced\"}", 1.0);
    agent.wait_metric_min("durasync_agent_triggers_total{durasync_instance=\"a\",trigger=\"interval\"}", 1.0);
    assert_eq!(
        agent.metric("durasync_agent_triggers_total{durasync_instance=\"a\",trigger=\"drift\"}"),
        None,
        "drift is off, so the repair was the interval's: {}",
        agent.log()
    );
}

#[test]
fn a_mounted_configmap_s_atomic_swap_of_data_triggers_a_run() {
    // Kubernetes' atomic writer: `file -> ..data/file`, `..data -> ..<ts>`;
    // an update writes a new `..<ts>` and renames a new `..data` link over
    // the old one. The input file's own name never changes.
    let node = Node::new();
    let mount = node.path("mount");
    std::fs::create_dir_all(mount.join("..v1")).unwrap();
    std::fs::write(mount.join("..v1/list.json"), super::list(1)).unwrap();
    std::os::unix::fs::symlink("..v1", mount.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/list.json", mount.join("list.json")).unwrap();
    std::fs::create_dir_all(node.root("cm")).unwrap();
    std::fs::write(
        node.manifest("cm"),
        super::certsync_manifest(
            "cm",
            &node.root("cm"),
            &format!("[input]\nfile = \"{}\"\n{SLOW_SCHEDULE}", mount.join("list.json").display()),
        ),
    )
    .unwrap();
    let agent = Agent::start(&node, &[]);
    node.wait_generation("cm", 1, &agent);
    for g in 2..=3 {
        let version = format!("..v{g}");
        std::fs::create_dir_all(mount.join(&version)).unwrap();
        std::fs::write(mount.join(&version).join("list.json"), super::list(g)).unwrap();
        std::os::unix::fs::symlink(&version, mount.join("..data_tmp")).unwrap();
        std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
        node.wait_generation("cm", g, &agent);
    }
    agent.wait_metric("durasync_agent_triggers_total{durasync_instance=\"cm\",trigger=\"input\"}", 2.0);
}

/// Every label name of every sample in an OpenMetrics text is one a
/// Prometheus scrape keeps as it is: not `instance` or `job` (which the
/// scrape sets on every series, renaming the exporter's to
/// `exported_instance` / `exported_job`) and not `__`-prefixed (reserved
/// for Prometheus' own use). Parsed from the text: `name{l="v",...} value`.
#[track_caller]
fn assert_no_label_prometheus_reserves(text: &str) {
    let mut labels = std::collections::BTreeSet::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let Some((_, rest)) = line.split_once('{') else { continue };
        let mut rest = rest;
        // label="value" pairs, values may hold escaped quotes.
        while let Some((name, after)) = rest.split_once("=\"") {
            labels.insert(name.trim_start_matches(',').to_owned());
            let mut escaped = false;
            let end = after
                .char_indices()
                .find(|&(_, c)| {
                    let close = c == '"' && !escaped;
                    escaped = c == '\\' && !escaped;
                    close
                })
                .map(|(i, _)| i)
                .unwrap_or_else(|| panic!("unterminated label value in {line:?}"));
            rest = &after[end + 1..];
            if rest.starts_with('}') {
                break;
            }
        }
    }
    assert!(labels.contains("durasync_instance"), "{labels:?}\n{text}");
    let reserved: Vec<&String> =
        labels.iter().filter(|l| *l == "instance" || *l == "job" || l.starts_with("__")).collect();
    assert!(reserved.is_empty(), "labels Prometheus reserves: {reserved:?}\n{text}");
}
