//! The agent's own hardening: a slow load never stalls its loop, runs in
//! flight are bounded, a plugin's log volume is bounded across runs.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use super::{Agent, DEADLINE, Node, certsync_manifest, certsync_wasm, hostile_wasm, sha256_of_file};

/// Datagrams received on `socket` until `until` holds or the deadline.
fn receive_until(socket: &UnixDatagram, messages: &mut Vec<String>, until: impl Fn(&[String]) -> bool) {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while !until(messages) {
        assert!(start.elapsed() < DEADLINE, "{messages:?}");
        if let Ok(n) = socket.recv(&mut buf) {
            messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
}

#[test]
fn a_manifest_that_takes_long_to_load_never_stalls_the_loop_or_the_other_instances() {
    let node = Node::new();
    node.certsync("a", "");
    let socket_path = node.path("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut agent = Agent::start_env(
        &node,
        &["--start-jitter", "0s"],
        &[("NOTIFY_SOCKET", socket_path.to_str().unwrap()), ("WATCHDOG_USEC", "400000")],
    );
    node.wait_generation("a", 1, &agent);
    // A manifest whose component is a fifo: loading it blocks until the
    // test writes the bytes, like a compile that takes as long as we like.
    let fifo = node.path("slow.wasm");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o600), 0)
        .unwrap();
    std::fs::create_dir_all(node.root("slow")).unwrap();
    node.set_generation("slow", 1);
    let text = certsync_manifest(
        "slow",
        &node.root("slow"),
        &format!("[input]\nfile = \"{}\"\n", node.input("slow").display()),
    )
    .replace(&format!("wasm = \"{}\"", certsync_wasm().display()), &format!("wasm = \"{}\"", fifo.display()));
    node.replace(&node.manifest("slow"), text.as_bytes());
    // While it loads: the loop serves, pings the watchdog, runs the others.
    let loading = agent.wait_not_ready(&["slow.toml"]);
    assert_eq!(loading[0]["problem"], "loading", "{loading:?}");
    let mut messages = Vec::new();
    let pings = |m: &[String]| m.iter().filter(|m| m.contains("WATCHDOG=1")).count();
    let before = pings(&messages);
    for g in 2..=3 {
        node.set_generation("a", g);
        node.wait_generation("a", g, &agent);
    }
    receive_until(&socket, &mut messages, |m| pings(m) >= before + 3);
    let (status, body) = agent.get("/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    assert_eq!(agent.get("/readyz").0, 503, "slow is still loading");
    // The bytes arrive: it loads, runs and the agent is ready.
    std::fs::write(&fifo, std::fs::read(certsync_wasm()).unwrap()).unwrap();
    node.wait_generation("slow", 1, &agent);
    agent.wait_ready(200);
    agent.signal(rustix::process::Signal::TERM);
    assert_eq!(agent.wait_exit().code(), Some(0), "{}", agent.log());
}

/// The most runs in flight at once, from the `run started` and `run ok` /
/// `run failed` lines of a debug log.
fn most_in_flight(log: &str) -> usize {
    let (mut now, mut most) = (0usize, 0usize);
    for line in log.lines() {
        if line.contains("run started") {
            now += 1;
            most = most.max(now);
        } else if line.contains(": run ok in ") || line.contains(": run failed in ") {
            now = now.saturating_sub(1);
        }
    }
    most
}

#[test]
fn runs_in_flight_never_exceed_the_bound_even_when_every_instance_is_due_at_once() {
    let node = Node::new();
    let names = ["a", "b", "c", "d"];
    for name in names {
        node.certsync(name, "[schedule]\ninterval = \"1h\"\n");
    }
    let mut agent = Agent::start(&node, &["--max-concurrent-runs", "1", "--start-jitter", "0s"]);
    for name in names {
        node.wait_generation(name, 1, &agent);
    }
    // Every instance's input changes at once: all due together again.
    for name in names {
        node.set_generation(name, 2);
    }
    for name in names {
        node.wait_generation(name, 2, &agent);
    }
    agent.signal(rustix::process::Signal::TERM);
    assert_eq!(agent.wait_exit().code(), Some(0));
    let log = agent.log();
    assert!(log.matches("run started").count() >= 8, "{log}");
    assert_eq!(most_in_flight(&log), 1, "{log}");
}

#[test]
fn the_in_flight_count_of_a_log_sees_overlapping_runs() {
    // The check above must be able to fail.
    let log = "x: run started\ny: run started\nx: run ok in 1 ms\ny: run failed in 2 ms\n";
    assert_eq!(most_in_flight(log), 2);
}

#[test]
fn a_plugin_flooding_its_log_every_run_is_held_to_the_instance_s_rate() {
    let node = Node::new();
    let wasm = hostile_wasm();
    std::fs::create_dir_all(node.root("flood")).unwrap();
    std::fs::write(node.path("inputs/flood.txt"), "log-flood").unwrap();
    std::fs::write(
        node.manifest("flood"),
        format!(
            "name = \"flood\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.data]\npath = \"{}\"\naccess = \"rw\"\n\
             [input]\nfile = \"{}\"\n[schedule]\ninterval = \"50ms\"\n",
            wasm.display(),
            sha256_of_file(&wasm),
            node.root("flood").display(),
            node.path("inputs/flood.txt").display()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let mut agent = Agent::start(
        &node,
        &["--log-burst-bytes", "20000", "--log-rate-bytes", "2000", "--start-jitter", "0s"],
    );
    agent.wait_log_count("run ok in", 4);
    // Each run tries 20 MB; its per-run cap alone would let 1 MiB through.
    agent.wait_metric_min("durasync_agent_runs_total{durasync_instance=\"flood\",result=\"ok\"}", 4.0);
    let dropped =
        agent.metric("durasync_agent_log_messages_dropped_total{durasync_instance=\"flood\"}").unwrap_or(0.0);
    let elapsed = started.elapsed().as_secs_f64();
    agent.signal(rustix::process::Signal::TERM);
    assert_eq!(agent.wait_exit().code(), Some(0));
    let log = agent.log();
    // Every message is over 1000 bytes: at most the burst plus the rate's
    // worth of them got through (before: 1 MiB each run, ~1000 lines).
    let forwarded = log.lines().filter(|l| l.contains("xxxxxxxxxx")).count();
    let bound = (20_000.0 + 2000.0 * elapsed) / 1000.0 + 1.0;
    assert!(
        (forwarded as f64) <= bound,
        "{forwarded} of the plugin's lines in {elapsed:.1} s (bound {bound})"
    );
    assert!(log.contains("log rate limit reached"), "{log}");
    assert!(dropped > 50_000.0, "{dropped}");
}

/// The instance a log line of a run belongs to (`run{instance=NAME}`).
fn run_instance(line: &str) -> Option<&str> {
    let rest = &line[line.find("instance=")? + "instance=".len()..];
    Some(rest.split(['}', ' ', ':']).next().unwrap_or(rest))
}

/// The most runs in flight at once of instances that had not succeeded
/// last (failed, timed out or never ran), from a debug log: what
/// `agent/fair.rs` keeps below the bound.
fn most_unproven_in_flight(log: &str) -> usize {
    let mut last_ok: std::collections::HashMap<&str, bool> = Default::default();
    let mut in_flight: std::collections::HashMap<&str, bool> = Default::default();
    let mut most = 0;
    for line in log.lines() {
        let Some(name) = run_instance(line) else { continue };
        if line.contains("run started") {
            in_flight.insert(name, !last_ok.get(name).copied().unwrap_or(false));
            most = most.max(in_flight.values().filter(|u| **u).count());
        } else if line.contains(": run ok in ") || line.contains(": run failed in ") {
            in_flight.remove(name);
            last_ok.insert(name, line.contains(": run ok in "));
        }
    }
    most
}

#[test]
fn failing_instances_never_take_the_run_slot_kept_for_healthy_ones() {
    let node = Node::new();
    let wasm = hostile_wasm();
    // Three instances that spin until their timeout and fail, due again
    // almost at once: without a reserve they hold both slots all the time.
    for name in ["hang-a", "hang-b", "hang-c"] {
        std::fs::create_dir_all(node.root(name)).unwrap();
        std::fs::write(node.path(&format!("inputs/{name}.txt")), "loop").unwrap();
        std::fs::write(
            node.manifest(name),
            format!(
                "name = \"{name}\"\nwasm = \"{}\"\nsha256 = \"{}\"\n[roots.data]\npath = \"{}\"\naccess = \"rw\"\n\
                 [limits]\nfuel = \"unlimited\"\ntimeout_ms = 700\n[input]\nfile = \"{}\"\n\
                 [schedule]\nbackoff_min = \"10ms\"\nbackoff_max = \"20ms\"\n",
                wasm.display(),
                sha256_of_file(&wasm),
                node.root(name).display(),
                node.path(&format!("inputs/{name}.txt")).display()
            ),
        )
        .unwrap();
    }
    node.certsync("good", "[schedule]\ninterval = \"1h\"\n");
    let mut agent = Agent::start(&node, &["--max-concurrent-runs", "2", "--start-jitter", "0s"]);
    node.wait_generation("good", 1, &agent);
    agent.wait_log_count("run failed in", 6);
    for g in 2..=4 {
        node.set_generation("good", g);
        node.wait_generation("good", g, &agent);
    }
    agent.signal(rustix::process::Signal::TERM);
    assert_eq!(agent.wait_exit().code(), Some(0), "{}", agent.log());
    let log = agent.log();
    assert!(log.matches("run failed in").count() >= 6, "{log}");
    assert_eq!(most_in_flight(&log), 2, "the bound is used and holds: {log}");
    // Two slots keep one for instances that succeeded last.
    assert_eq!(most_unproven_in_flight(&log), 1, "{log}");
}

#[test]
fn the_unproven_count_of_a_log_sees_failing_runs_overlap() {
    let log = "run{instance=a}: run started\nrun{instance=b}: run started\n\
               run{instance=a}: run failed in 1 ms\nrun{instance=b}: run ok in 2 ms\n\
               run{instance=a}: run started\nrun{instance=b}: run started\n";
    assert_eq!(most_unproven_in_flight(log), 2, "never-run instances are unproven");
    let log = "run{instance=a}: run ok in 1 ms\nrun{instance=b}: run failed in 1 ms\n\
               run{instance=a}: run started\nrun{instance=b}: run started\n";
    assert_eq!(most_unproven_in_flight(log), 1);
}
