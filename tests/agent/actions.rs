//! Actions after durable changes (docs/hooks.md, "Validators and actions"): a real
//! command appending to a file runs exactly once per changed run (one run
//! changing two directories owes it once); an agent killed with SIGKILL
//! while the action is blocked (on a fifo: a deterministic point between
//! the commit and the action's end) runs it after its restart, from the
//! ledger; a hung action is killed at its timeout, and meanwhile another
//! instance keeps syncing. The ledger's failures: a change refused by an
//! immutable (`chattr +i`) ledger directory is owed on disk when its retry
//! commits; a corrupt ledger blocks its instance only until it is fixed.
//! An action leaving a daemon that holds its output ends at its own exit.
//! Signal actions: a fifo pidfile is refused at once, a dead pid is named
//! by `/readyz`, a pidfile owned by `nobody` cannot name a root process.
//! HTTP actions: a real loopback server is asked after each commit (it
//! reads the committed file when asked), and an unexpected status is
//! retried, named by `/readyz`, until the server answers 2xx.

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
    let ok = "durasync_agent_actions_total{durasync_instance=\"a\",action=\"reload\",result=\"ok\"}";
    agent.wait_metric(ok, 1.0);
    assert_eq!(lines(&log), ["generation 1 ca.crt"]);
    agent.wait_metric("durasync_agent_actions_owed{durasync_instance=\"a\"}", 0.0);

    // One run changes both the secret and the configmap: one action.
    node.set_generation("a", 2);
    agent.wait_metric(ok, 2.0);
    assert_eq!(lines(&log), ["generation 1 ca.crt", "generation 2 ca.crt"]);

    // A run that changes nothing owes nothing.
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"a\",result=\"ok\"}", 2.0);
    node.set_generation("a", 2);
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"a\",result=\"ok\"}", 3.0);
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
    agent.wait_metric(
        "durasync_agent_actions_total{durasync_instance=\"a\",action=\"reload\",result=\"ok\"}",
        1.0,
    );
    agent.wait_metric("durasync_agent_actions_owed{durasync_instance=\"a\"}", 0.0);
    assert_eq!(lines(&log), ["start generation 1 ca.crt", "start generation 1 ca.crt", "done"]);
    assert_eq!(
        agent.metric("durasync_agent_operations_total{durasync_instance=\"a\",outcome=\"unchanged\"}"),
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
        agent.wait_metric(
            "durasync_agent_runs_total{durasync_instance=\"b\",result=\"ok\"}",
            f64::from(g - 1),
        );
        node.set_generation("b", g);
        node.wait_generation("b", g, &agent);
    }
    let timeout =
        "durasync_agent_actions_total{durasync_instance=\"slow\",action=\"reload\",result=\"timeout\"}";
    assert_eq!(
        agent.metric(timeout),
        None,
        "the action ended before b's syncs (timeout too short for this machine?)"
    );
    agent.wait_metric(timeout, 1.0);
    // Killed with its process group, and still owed (retried later).
    let alive = rustix::process::test_kill_process(rustix::process::Pid::from_raw(pid).unwrap());
    assert!(alive.is_err(), "the hung action {pid} is still alive");
    agent.wait_metric("durasync_agent_actions_owed{durasync_instance=\"slow\"}", 1.0);
    assert_eq!(std::fs::read_to_string(node.path("state/actions/slow.owed")).unwrap(), "reload\n");
}

const FAST_RETRY: &str = "[schedule]\ninterval = \"1h\"\nbackoff_min = \"50ms\"\nbackoff_max = \"200ms\"\n";

/// `chattr -i` on drop, so a failed test leaves a removable tempdir.
struct Immutable<'p>(&'p Path);

impl Drop for Immutable<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr").arg("-i").arg(self.0).status();
    }
}

#[test]
fn a_change_refused_by_an_immutable_ledger_dir_is_owed_on_disk_when_its_retry_commits() {
    let node = Node::new();
    let (log, fifo, pids) = (node.path("actions.log"), node.path("hold"), node.path("pids"));
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o600), 0)
        .unwrap();
    let actions = node.path("state/actions");
    std::fs::create_dir_all(&actions).unwrap();
    let chattr = std::process::Command::new("chattr").arg("+i").arg(&actions).status();
    if !chattr.is_ok_and(|s| s.success()) {
        return crate::support::cannot_check("chattr +i (root, a file system with the immutable flag)");
    }
    let immutable = Immutable(&actions);
    // Blocks on the fifo (no writer): the commit is behind it, the action not done.
    let script =
        format!("echo $$ >> {}; echo start >> {}; cat {}", pids.display(), log.display(), fifo.display());
    let action = format!(
        "[[action]]\nname = \"reload\"\nroot = \"certs\"\npath = \"**\"\ncommand = [\"sh\", \"-c\", {script:?}]\n\
         timeout_ms = 600000\n"
    );
    node.certsync("a", &format!("{FAST_RETRY}{action}"));
    let agent = start(&node);
    // The ledger cannot be written: the change is refused, nothing goes live.
    agent.wait_metric_min("durasync_agent_runs_total{durasync_instance=\"a\",result=\"rejected\"}", 1.0);
    assert_eq!(node.generation("a"), None);
    assert!(lines(&log).is_empty());
    drop(immutable);
    // A retry commits only once the ledger naming the action is on disk
    // (it was owed in memory by the refused attempt, never written).
    assert_eq!(wait_lines(&log, 1, &agent), ["start"]);
    assert_eq!(node.generation("a"), Some(1));
    assert_eq!(std::fs::read_to_string(actions.join("a.owed")).unwrap(), "reload\n", "{}", agent.log());
    drop(agent);
    let pid: i32 = lines(&pids)[0].parse().unwrap();
    let _ = rustix::process::kill_process_group(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    );
}

#[test]
fn an_instance_blocked_by_a_corrupt_ledger_recovers_by_itself_once_it_is_fixed() {
    let node = Node::new();
    let log = node.path("actions.log");
    let script = format!("echo ran >> {}", log.display());
    let action = format!(
        "[[action]]\nname = \"reload\"\nroot = \"certs\"\npath = \"**\"\ncommand = [\"sh\", \"-c\", {script:?}]\n"
    );
    node.certsync("a", &format!("{FAST_RETRY}{action}"));
    let ledger = node.path("state/actions/a.owed");
    std::fs::create_dir_all(ledger.parent().unwrap()).unwrap();
    std::fs::write(&ledger, b"reload\n\xff\xfe\n").unwrap();
    let mut agent = start(&node);
    agent.wait_metric_min("durasync_agent_runs_total{durasync_instance=\"a\",result=\"io_error\"}", 2.0);
    agent.wait_log("line 2 is not UTF-8");
    assert_eq!(node.generation("a"), None);
    // Fixed by hand, no signal: the next retry opens it and syncs, and
    // the action it owed (and the new change's) runs.
    std::fs::write(&ledger, b"reload\n").unwrap();
    node.wait_generation("a", 1, &agent);
    agent.wait_metric(
        "durasync_agent_actions_total{durasync_instance=\"a\",action=\"reload\",result=\"ok\"}",
        1.0,
    );
    agent.wait_metric("durasync_agent_actions_owed{durasync_instance=\"a\"}", 0.0);
    assert_eq!(lines(&log), ["ran"]);
}

/// `node.certsync(name)` with one signal action (SIGHUP to `pidfile`).
fn with_signal_action(node: &Node, name: &str, pidfile: &Path) {
    let action = format!(
        "[[action]]\nname = \"reload\"\nroot = \"certs\"\npath = \"**\"\nsignal = \"HUP\"\npidfile = {:?}\n\
         timeout_ms = 5000\n",
        pidfile.display().to_string()
    );
    node.certsync(name, &format!("{FAST_RETRY}{action}"));
}

/// Wait until `/readyz` names instance `name` with a problem containing `needle`.
#[track_caller]
fn wait_problem(agent: &Agent, name: &str, needle: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        let (_, body) = agent.get("/readyz");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let problem = v["not_ready"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["instance"] == name)
            .and_then(|i| i["problem"].as_str())
            .unwrap_or_default()
            .to_owned();
        if problem.contains(needle) {
            return problem;
        }
        assert!(start.elapsed() < DEADLINE, "/readyz never said {needle:?}: {body}\nlog:\n{}", agent.log());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A `sleep` child, killed on drop.
struct Sleeper(std::process::Child);

impl Sleeper {
    fn start(uid: Option<u32>) -> Sleeper {
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("1000");
        if let Some(uid) = uid {
            std::os::unix::process::CommandExt::uid(&mut cmd, uid);
        }
        Sleeper(cmd.spawn().unwrap())
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn hup_received(&mut self) -> bool {
        let start = std::time::Instant::now();
        while start.elapsed() < DEADLINE {
            if let Some(status) = self.0.try_wait().unwrap() {
                return std::os::unix::process::ExitStatusExt::signal(&status) == Some(1);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        false
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_signal_action_never_blocks_on_a_fifo_pidfile_and_readyz_names_a_dead_pid() {
    let node = Node::new();
    let pidfile = node.path("app.pid");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &pidfile,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from(0o600),
        0,
    )
    .unwrap();
    with_signal_action(&node, "a", &pidfile);
    let agent = start(&node);
    let failed = "durasync_agent_actions_total{durasync_instance=\"a\",action=\"reload\",result=\"failed\"}";
    agent.wait_metric_min(failed, 1.0);
    wait_problem(&agent, "a", "is not a regular file");
    // A dead pid: not ready, naming the action and the cause.
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let pid = dead.id();
    dead.wait().unwrap();
    node.replace(&pidfile, format!("{pid}\n").as_bytes());
    let problem = wait_problem(&agent, "a", "No such process");
    assert!(problem.starts_with(&format!("action reload failed: SIGHUP to pid {pid}")), "{problem}");
    // The process is back: the retry reaches it and the instance is ready.
    let mut app = Sleeper::start(None);
    node.replace(&pidfile, format!("{}\n", app.pid()).as_bytes());
    assert!(app.hup_received(), "log:\n{}", agent.log());
    agent.wait_ready(200);
    agent.wait_metric("durasync_agent_actions_owed{durasync_instance=\"a\"}", 0.0);
}

#[test]
fn a_pidfile_owned_by_nobody_cannot_make_a_root_agent_signal_a_root_process() {
    if !rustix::process::geteuid().is_root() {
        return crate::support::cannot_check(
            "root (to run an agent as root beside a pidfile owned by nobody)",
        );
    }
    const NOBODY: u32 = 65534;
    let node = Node::new();
    let pidfile = node.path("app.pid");
    let mut victim = Sleeper::start(None);
    std::fs::write(&pidfile, format!("{}\n", victim.pid())).unwrap();
    std::os::unix::fs::chown(&pidfile, Some(NOBODY), Some(NOBODY)).unwrap();
    with_signal_action(&node, "a", &pidfile);
    let agent = start(&node);
    let problem = wait_problem(&agent, "a", "is owned by uid 65534");
    assert!(problem.contains(&format!("names pid {} of uid 0: refused", victim.pid())), "{problem}");
    let failed = "durasync_agent_actions_total{durasync_instance=\"a\",action=\"reload\",result=\"failed\"}";
    agent.wait_metric_min(failed, 2.0);
    assert!(victim.alive(), "the root process named by nobody's pidfile was signalled");
    // nobody's own process: the same pidfile may name it.
    let mut own = Sleeper::start(Some(NOBODY));
    std::fs::write(&pidfile, format!("{}\n", own.pid())).unwrap();
    assert!(own.hup_received(), "log:\n{}", agent.log());
    agent.wait_ready(200);
    assert!(victim.alive());
}

#[test]
fn an_action_that_leaves_a_daemon_holding_its_output_succeeds_at_its_own_exit() {
    let node = Node::new();
    let (log, pids) = (node.path("actions.log"), node.path("pids"));
    // An init script's `restart`: the daemon (a session of its own)
    // inherits standard output and keeps it open.
    let script =
        format!("setsid sleep 60 & echo $! >> {}; echo restarted >> {}", pids.display(), log.display());
    with_action(&node, "a", &script, 5_000);
    let agent = start(&node);
    let start_at = std::time::Instant::now();
    let ok = "durasync_agent_actions_total{durasync_instance=\"a\",action=\"reload\",result=\"ok\"}";
    agent.wait_metric(ok, 1.0);
    let took = start_at.elapsed();
    let daemons: Vec<i32> = lines(&pids).iter().filter_map(|l| l.parse().ok()).collect();
    for pid in &daemons {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(*pid).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    let timeout =
        "durasync_agent_actions_total{durasync_instance=\"a\",action=\"reload\",result=\"timeout\"}";
    assert_eq!(agent.metric(timeout), None, "log:\n{}", agent.log());
    assert!(took < std::time::Duration::from_secs(4), "took {took:?}");
    assert_eq!(lines(&log), ["restarted"]);
    assert_eq!(daemons.len(), 1, "one daemon, no retry: {daemons:?}");
    agent.wait_metric("durasync_agent_actions_owed{durasync_instance=\"a\"}", 0.0);
}

#[test]
fn an_http_action_asks_a_loopback_server_after_each_commit_and_retries_an_unexpected_status() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let node = Node::new();
    let ca = node.root("a").join("configmaps/ca/ca.crt");
    let healthy = Arc::new(AtomicBool::new(false));
    let healthy_in_server = healthy.clone();
    // The consumer: it "reloads" the committed file when asked, and fails
    // (503) until the test lets it succeed.
    let server = crate::support::http_server::HttpServer::start(move |_| {
        let content = std::fs::read_to_string(&ca).unwrap_or_else(|e| format!("unreadable: {e}"));
        if healthy_in_server.load(Ordering::SeqCst) {
            (200, content)
        } else {
            (503, format!("not yet: {content}"))
        }
    });
    // Named after the URL's last segment: `reload`.
    let action =
        format!("[[action]]\nroot = \"certs\"\nurl = {:?}\ntimeout_ms = 5000\n", server.url("/-/reload"));
    node.certsync("a", &format!("{FAST_RETRY}{action}"));
    let agent = start(&node);
    let failed = "durasync_agent_actions_total{durasync_instance=\"a\",action=\"reload\",result=\"failed\"}";
    agent.wait_metric_min(failed, 2.0);
    let problem = wait_problem(&agent, "a", "answered 503");
    assert_eq!(problem, "action reload failed: answered 503 (expected 2xx): not yet: generation 1 ca.crt");
    assert_eq!(std::fs::read_to_string(node.path("state/actions/a.owed")).unwrap(), "reload\n");
    healthy.store(true, Ordering::SeqCst);
    let ok = "durasync_agent_actions_total{durasync_instance=\"a\",action=\"reload\",result=\"ok\"}";
    agent.wait_metric(ok, 1.0);
    agent.wait_metric("durasync_agent_actions_owed{durasync_instance=\"a\"}", 0.0);
    agent.wait_ready(200);
    // Every request came after the commit (the server read the new file),
    // as a POST to the URL; only the last one succeeded.
    let seen = server.seen();
    assert!(seen.len() >= 3, "{seen:?}");
    for s in &seen {
        assert_eq!(s.line, "POST /-/reload HTTP/1.1");
        assert_eq!(s.answer.1.trim_end().rsplit(": ").next(), Some("generation 1 ca.crt"), "{s:?}");
    }
    assert_eq!(seen.iter().filter(|s| s.answer.0 == 200).count(), 1, "{seen:?}");

    // The next change: one more request, which sees it.
    node.set_generation("a", 2);
    agent.wait_metric(ok, 2.0);
    let seen = server.seen();
    assert_eq!(seen.last().unwrap().answer, (200, "generation 2 ca.crt\n".to_owned()));
    assert_eq!(std::fs::read_to_string(node.path("state/actions/a.owed")).unwrap(), "");
}
