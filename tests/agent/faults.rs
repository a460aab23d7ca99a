//! Failures the agent must survive: a reload that fails its sha256 pin,
//! input commands that fail or hang, SIGTERM during a long sync, kill -9
//! during runs; and systemd's notify protocol.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use super::{Agent, DEADLINE, Node, generation_of, leftovers, list_sized};

#[test]
fn a_manifest_with_a_wrong_sha256_keeps_its_last_good_version_and_readyz_names_it_until_fixed() {
    let node = Node::new();
    node.certsync("a", "");
    let good_b = node.certsync("b", "");
    let mut agent = Agent::start(&node, &[]);
    node.wait_generation("a", 1, &agent);
    node.wait_generation("b", 1, &agent);
    agent.wait_ready(200);

    let sha_line = good_b.lines().find(|l| l.starts_with("sha256")).unwrap();
    let broken = good_b.replace(sha_line, &format!("sha256 = \"{}\"", "0".repeat(64)));
    assert!(!broken.contains(sha_line));
    node.replace(&node.manifest("b"), broken.as_bytes());
    agent.wait_log("reload failed, the previous version keeps running");
    agent.wait_metric("durasync_agent_reload_failures_total{durasync_instance=\"b\"}", 1.0);
    let not_ready = agent.wait_not_ready(&["b"]);
    let problem = not_ready[0]["problem"].as_str().unwrap();
    assert!(problem.contains("reload failed, still running the previous version"), "{problem}");
    assert!(problem.contains("but the manifest pins 0000000000"), "{problem}");

    // Both keep working: a as ever, b on its previous version.
    for g in 2..=3 {
        for name in ["a", "b"] {
            node.set_generation(name, g);
            node.wait_generation(name, g, &agent);
        }
    }
    // Fixing the manifest reloads it, runs it, and b is ready again.
    node.replace(&node.manifest("b"), good_b.as_bytes());
    agent.wait_metric("durasync_agent_triggers_total{durasync_instance=\"b\",trigger=\"config\"}", 1.0);
    let ready = agent.wait_ready(200);
    assert_eq!(ready["not_ready"].as_array().unwrap().len(), 0, "{ready}");
    agent.wait_metric("durasync_agent_reload_failures_total{durasync_instance=\"b\"}", 1.0);
}

#[test]
fn an_input_command_that_fails_or_hangs_skips_the_run_backs_off_and_recovers_by_itself() {
    let node = Node::new();
    let source = node.path("inputs/source.json");
    let pidfile = node.path("hung.pid");
    // Fails (no source yet) until the file appears.
    std::fs::create_dir_all(node.root("cmd")).unwrap();
    std::fs::write(
        node.manifest("cmd"),
        super::certsync_manifest(
            "cmd",
            &node.root("cmd"),
            &format!(
                "[input]\ncommand = [\"sh\", \"-c\", \"cat {} 2>/dev/null || {{ echo 'no such list' >&2; exit 3; }}\"]\n\
                 [schedule]\ninterval = \"1h\"\nbackoff_min = \"20ms\"\nbackoff_max = \"200ms\"\n",
                source.display()
            ),
        ),
    )
    .unwrap();
    // Hangs past its timeout, every time.
    std::fs::create_dir_all(node.root("hung")).unwrap();
    std::fs::write(
        node.manifest("hung"),
        super::certsync_manifest(
            "hung",
            &node.root("hung"),
            &format!(
                "[input]\ncommand = [\"sh\", \"-c\", \"echo $$ > {}; exec sleep 60\"]\ncommand_timeout_ms = 300\n\
                 [schedule]\ninterval = \"1h\"\nbackoff_min = \"1h\"\n",
                pidfile.display()
            ),
        ),
    )
    .unwrap();
    let mut agent = Agent::start(&node, &[]);
    // Failures back off: 20, 40, 80, 160, 200, 200 ms … so several retries
    // happen quickly, each a skipped run.
    agent.wait_metric_min("durasync_agent_runs_total{durasync_instance=\"cmd\",result=\"input_error\"}", 4.0);
    agent.wait_metric_min("durasync_agent_triggers_total{durasync_instance=\"cmd\",trigger=\"retry\"}", 3.0);
    agent.wait_log("input command sh exited with status 3: no such list");
    let ready = agent.wait_ready(503);
    let problems: Vec<String> =
        ready["not_ready"].as_array().unwrap().iter().map(|i| i["problem"].to_string()).collect();
    assert!(problems.iter().any(|p| p.contains("exited with status 3")), "{ready}");
    assert_eq!(node.generation("cmd"), None, "a skipped run writes nothing");

    // The hung command is killed at its deadline, and its process is gone.
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"hung\",result=\"input_error\"}", 1.0);
    agent.wait_log("input command sh timed out after 300 ms (input.command_timeout_ms) and was killed");
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    let pid = rustix::process::Pid::from_raw(pid).unwrap();
    assert!(rustix::process::test_kill_process(pid).is_err(), "the hung command {pid:?} still exists");
    // It did not hold up the other instance's retries.
    let retries =
        agent.metric("durasync_agent_triggers_total{durasync_instance=\"cmd\",trigger=\"retry\"}").unwrap();
    assert!(retries >= 3.0);

    // The cause goes away: the next retry succeeds without any help.
    std::fs::write(&source, list_sized(7, 0, 0)).unwrap();
    node.wait_generation("cmd", 7, &agent);
    let line = agent.wait_log("recovered after");
    assert!(line.contains("instance=cmd"), "{line}");
}

#[test]
fn sigterm_during_a_long_sync_lets_it_finish_and_exits_0() {
    let node = Node::new();
    // A secret of 3000 keys of 2 KiB: a sync of a few hundred ms.
    const KEYS: usize = 3000;
    std::fs::create_dir_all(node.root("big")).unwrap();
    std::fs::write(node.input("big"), list_sized(1, KEYS, 2048)).unwrap();
    std::fs::write(
        node.manifest("big"),
        super::certsync_manifest(
            "big",
            &node.root("big"),
            &format!("[input]\nfile = \"{}\"\n[schedule]\ninterval = \"1h\"\n", node.input("big").display()),
        ),
    )
    .unwrap();
    let mut agent = Agent::start(&node, &[]);
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"big\",result=\"ok\"}", 1.0);
    assert_eq!(generation_of(&node.root("big"), KEYS), Some(1));

    node.replace(&node.input("big"), &list_sized(2, KEYS, 2048));
    agent.wait_log("run started trigger=\"input\"");
    agent.signal(rustix::process::Signal::TERM);
    let status = agent.wait_exit();
    let log = agent.log();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("SIGTERM: no new runs; waiting up to 30s for 1 in-flight run(s)"), "{log}");
    let term = log.find("SIGTERM").unwrap();
    assert!(log[term..].contains("run ok in"), "the in-flight run finished after SIGTERM: {log}");
    assert!(log[term..].contains("shut down: no run in flight"), "{log}");
    // Old or new, never a mix (generation_of panics on a mixed tree); here
    // the run was let finish, so new.
    assert_eq!(generation_of(&node.root("big"), KEYS), Some(2));
    assert_eq!(leftovers(&node.root("big")), Vec::<std::path::PathBuf>::new());
}

#[test]
fn kill_9_during_runs_leaves_old_or_new_and_a_restart_converges_without_leftovers() {
    let node = Node::new();
    const KEYS: usize = 300;
    std::fs::create_dir_all(node.root("k")).unwrap();
    std::fs::write(node.input("k"), list_sized(1, KEYS, 512)).unwrap();
    std::fs::write(
        node.manifest("k"),
        super::certsync_manifest(
            "k",
            &node.root("k"),
            &format!("[input]\nfile = \"{}\"\n[schedule]\ninterval = \"1h\"\n", node.input("k").display()),
        ),
    )
    .unwrap();
    let mut generation = 1;
    let mut seen_mid_run = 0;
    for round in 0..6u64 {
        let mut agent = Agent::start(&node, &[]);
        agent.wait_log_count("run started", 1);
        // Feed changes, then kill at a varying instant inside the runs.
        for _ in 0..3 {
            generation += 1;
            node.replace(&node.input("k"), &list_sized(generation, KEYS, 512));
            std::thread::sleep(Duration::from_millis(3 + (round * 7) % 20));
        }
        let runs_started = agent.log().matches("run started").count();
        let runs_done = agent.log().matches("run ok in").count();
        if runs_started > runs_done {
            seen_mid_run += 1;
        }
        agent.signal(rustix::process::Signal::KILL);
        agent.wait_exit();
        // Old or new: one complete generation, never a mix.
        let on_disk = generation_of(&node.root("k"), KEYS);
        assert!(on_disk.is_none_or(|g| g <= generation), "{on_disk:?}");
    }
    assert!(seen_mid_run >= 1, "no kill landed during a run");
    // A restart converges on the last input and leaves no leftovers.
    let agent = Agent::start(&node, &[]);
    let start = Instant::now();
    while generation_of(&node.root("k"), KEYS) != Some(generation) {
        assert!(start.elapsed() < DEADLINE, "never converged: {}", agent.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    agent.wait_metric_min("durasync_agent_runs_total{durasync_instance=\"k\",result=\"ok\"}", 1.0);
    assert_eq!(leftovers(&node.root("k")), Vec::<std::path::PathBuf>::new());
}

#[test]
fn systemd_hears_ready_status_watchdog_and_stopping() {
    let node = Node::new();
    node.certsync("a", "");
    let socket_path = node.path("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut agent = Agent::start_env(
        &node,
        &[],
        &[("NOTIFY_SOCKET", socket_path.to_str().unwrap()), ("WATCHDOG_USEC", "200000")],
    );
    let mut messages = Vec::new();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    let mut sent_term = false;
    while start.elapsed() < DEADLINE {
        if let Ok(n) = socket.recv(&mut buf) {
            messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        let pings = messages.iter().filter(|m| m.contains("WATCHDOG=1")).count();
        let ready = messages.iter().any(|m| m.contains("READY=1"));
        if ready && pings >= 3 && !sent_term {
            agent.signal(rustix::process::Signal::TERM);
            sent_term = true;
        }
        if messages.iter().any(|m| m.contains("STOPPING=1")) && sent_term {
            break;
        }
    }
    assert_eq!(agent.wait_exit().code(), Some(0), "{}", agent.log());
    let ready = messages.iter().find(|m| m.contains("READY=1")).unwrap_or_else(|| panic!("{messages:?}"));
    assert!(ready.contains("STATUS=1 instances, 1 ready, 0 not ready"), "{ready}");
    assert!(messages.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 3, "{messages:?}");
    assert!(messages.iter().any(|m| m.contains("STOPPING=1")), "{messages:?}");
    // READY=1 came after the first round: the instance had synced.
    let first = messages.iter().position(|m| m.contains("READY=1")).unwrap();
    assert!(messages[..first].iter().all(|m| !m.contains("READY")), "{messages:?}");
    assert_eq!(node.generation("a"), Some(1));
}
