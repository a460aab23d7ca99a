//! Actions after durable changes (README, "Validators and actions"): a real
//! command appending to a file runs exactly once per changed run (one run
//! changing two directories owes it once); an agent killed with SIGKILL
//! while the action is blocked (on a fifo: a deterministic point between
//! the commit and the action's end) runs it after its restart, from the
//! ledger; a hung action is killed at its timeout, and meanwhile another
//! instance keeps syncing.

use std::path::Path;

use super::{Agent, DEADLINE, Node};

const SCHEDULE: &str = "[schedule]\ninterval = \"1h\"\nbackoff_min = \"1h\"\nbackoff_max = \"1h\"\n";

/// `node.certsync(name)` plus one action running `script` with `sh -c`.
fn with_action(node: &Node, name: &str, script: &str, timeout_ms: u64) {
    let action = format!(
        "[[action]]\nname = \"reload\"\nroot = \"certs\"\npath = \"**\"\ncommand = [\"sh\", \"-c\", {script:?}]\n\
         timeout_ms = {timeout_ms}\n"
    );
    node.certsync(name, &format!("{SCHEDULE}{action}"));
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// Wait until `path` has at least `n` lines; returns them.
#[track_caller]
fn wait_lines(path: &Path, n: usize, agent: &Agent) -> Vec<String> {
    let start = std::time::Instant::now();
    loop {
        let l = lines(path);
        if l.len() >= n {
            return l;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{} never had {n} lines: {l:?}\nlog:\n{}",
            path.display(),
            agent.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn state_args(node: &Node) -> Vec<String> {
    vec!["--state-dir".into(), node.path("state").display().to_string()]
}

fn start(node: &Node) -> Agent {
    let args = state_args(node);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Agent::start(node, &args)
}

#[test]
fn an_action_appending_to_a_file_runs_exactly_once_per_changed_run() {
    let node = Node::new();
    let log = node.path("actions.log");
    // It also records what it saw: the action runs after the change.
    let script = format!("cat {}/configmaps/ca/ca.crt >> {}", node.root("a").display(), log.display());
    with_action(&node, "a", &script, 30_000);
    let agent = start(&node);
    let ok = "durasync_agent_actions_total{instance=\"a\",action=\"reload\",result=\"ok\"}";
    agent.wait_metric(ok, 1.0);
    assert_eq!(lines(&log), ["generation 1 ca.crt"]);
    agent.wait_metric("durasync_agent_actions_owed{instance=\"a\"}", 0.0);

    // One run changes both the secret and the configmap: one action.
    node.set_generation("a", 2);
    agent.wait_metric(ok, 2.0);
    assert_eq!(lines(&log), ["generation 1 ca.crt", "generation 2 ca.crt"]);

    // A run that changes nothing owes nothing.
    agent.wait_metric("durasync_agent_runs_total{instance=\"a\",result=\"ok\"}", 2.0);
    node.set_generation("a", 2);
    agent.wait_metric("durasync_agent_runs_total{instance=\"a\",result=\"ok\"}", 3.0);
    node.set_generation("a", 3);
    agent.wait_metric(ok, 3.0);
    assert_eq!(lines(&log), ["generation 1 ca.crt", "generation 2 ca.crt", "generation 3 ca.crt"]);
    assert_eq!(std::fs::read_to_string(node.path("state/actions/a.owed")).unwrap(), "");
}

#[test]
fn an_agent_killed_between_the_commit_and_the_action_runs_it_after_restart() {
    let node = Node::new();
    let (log, fifo, released, pids) =
        (node.path("actions.log"), node.path("hold"), node.path("released"), node.path("pids"));
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o600), 0)
        .unwrap();
    // Blocks on the fifo (no writer) until `released` exists: the agent is
    // killed while the first run's action is in flight.
    let script = format!(
        "echo $$ >> {pids}; echo start $(cat {ca}) >> {log}; [ -e {released} ] || cat {fifo}; echo done >> {log}",
        pids = pids.display(),
        ca = node.root("a").join("configmaps/ca/ca.crt").display(),
        log = log.display(),
        released = released.display(),
        fifo = fifo.display()
    );
    with_action(&node, "a", &script, 600_000);
    let agent = start(&node);
    assert_eq!(wait_lines(&log, 1, &agent), ["start generation 1 ca.crt"]);
    // The commit is behind us, the action not done: the ledger owes it.
    assert_eq!(std::fs::read_to_string(node.path("state/actions/a.owed")).unwrap(), "reload\n");
    agent.signal(rustix::process::Signal::KILL);
    let mut agent = agent;
    agent.wait_exit();
    // The orphaned action (its own process group) goes too.
    let pid: i32 = lines(&pids)[0].parse().unwrap();
    let _ = rustix::process::kill_process_group(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    );
    std::fs::write(&released, b"").unwrap();

    // Restart with the same input: the run changes nothing, and then the
    // owed action runs (and only then: after a successful run).
    let agent = start(&node);
    agent.wait_metric("durasync_agent_actions_total{instance=\"a\",action=\"reload\",result=\"ok\"}", 1.0);
    agent.wait_metric("durasync_agent_actions_owed{instance=\"a\"}", 0.0);
    assert_eq!(lines(&log), ["start generation 1 ca.crt", "start generation 1 ca.crt", "done"]);
    assert_eq!(
        agent.metric("durasync_agent_operations_total{instance=\"a\",outcome=\"unchanged\"}"),
        Some(2.0)
    );
    assert_eq!(std::fs::read_to_string(node.path("state/actions/a.owed")).unwrap(), "");
}

#[test]
fn a_hung_action_is_killed_at_its_timeout_and_another_instance_keeps_syncing() {
    let node = Node::new();
    let (pids, fifo) = (node.path("pids"), node.path("hold"));
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o600), 0)
        .unwrap();
    let script = format!("echo $$ >> {}; cat {}", pids.display(), fifo.display());
    with_action(&node, "slow", &script, 10_000);
    node.certsync("b", SCHEDULE);
    let agent = start(&node);
    let pid: i32 = wait_lines(&pids, 1, &agent)[0].parse().unwrap();
    // While slow's action hangs, b follows three input changes.
    for g in 2..=4 {
        agent.wait_metric("durasync_agent_runs_total{instance=\"b\",result=\"ok\"}", f64::from(g - 1));
        node.set_generation("b", g);
        node.wait_generation("b", g, &agent);
    }
    let timeout = "durasync_agent_actions_total{instance=\"slow\",action=\"reload\",result=\"timeout\"}";
    assert_eq!(
        agent.metric(timeout),
        None,
        "the action ended before b's syncs (timeout too short for this machine?)"
    );
    agent.wait_metric(timeout, 1.0);
    // Killed with its process group, and still owed (retried later).
    let alive = rustix::process::test_kill_process(rustix::process::Pid::from_raw(pid).unwrap());
    assert!(alive.is_err(), "the hung action {pid} is still alive");
    agent.wait_metric("durasync_agent_actions_owed{instance=\"slow\"}", 1.0);
    assert_eq!(std::fs::read_to_string(node.path("state/actions/slow.owed")).unwrap(), "reload\n");
}
