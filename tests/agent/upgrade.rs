//! A first start from an empty cache: the agent runs Winch's code, and the
//! first run after the background Cranelift compile stored its artifact
//! runs Cranelift's code, as `/status` and the log say.

use std::time::{Duration, Instant};

use super::{Agent, Node};

/// How long Cranelift's compile of certsync may take in the background: a
/// debug build's compile child, at low priority, on a loaded machine.
const COMPILE_DEADLINE: Duration = Duration::from_secs(300);

/// The compiler whose code instance `name` runs, from `/status`.
fn compiler(agent: &Agent, name: &str) -> Option<String> {
    let (code, body) = agent.get("/status");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let instances = v["instances"].as_array().unwrap();
    let i = instances.iter().find(|i| i["instance"] == name).unwrap_or_else(|| panic!("{name} in {v}"));
    i["plugin"]["compiler"].as_str().map(str::to_owned)
}

/// The compiled artifacts in the cache directory `dir`, by name.
fn artifacts(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.retain(|n| n.ends_with(".cwasm"));
    names.sort();
    names
}

#[test]
fn a_first_start_runs_winchs_code_and_the_first_run_after_the_background_compile_runs_cranelifts() {
    let node = Node::new();
    node.certsync("a", "[schedule]\ninterval = \"1h\"\n");
    // A cache of its own: empty, so the first load compiles. No start
    // jitter: the first run starts as soon as the plugin is loaded, long
    // before the background compile (at low priority) can have ended.
    let cache = node.path("cache");
    let env = [("XDG_CACHE_HOME", cache.to_str().unwrap())];
    let mut agent = Agent::start_env(&node, &["--start-jitter", "0s"], &env);
    node.wait_generation("a", 1, &agent);
    assert_eq!(compiler(&agent, "a").as_deref(), Some("winch"), "{}", agent.log());

    // The background compile stores Cranelift's artifact and removes Winch's.
    let dir = cache.join("durasync");
    let start = Instant::now();
    while artifacts(&dir).iter().any(|n| n.ends_with("-winch.cwasm")) || artifacts(&dir).is_empty() {
        assert!(
            start.elapsed() < COMPILE_DEADLINE,
            "no Cranelift artifact: {:?}\n{}",
            artifacts(&dir),
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(artifacts(&dir).len(), 1, "{:?}", artifacts(&dir));

    // A run now (an input change; the agent may also have run again on its
    // own, after an input event of the set-up) runs Cranelift's code.
    node.set_generation("a", 2);
    node.wait_generation("a", 2, &agent);
    agent.wait_log("now running Cranelift's code");
    assert_eq!(compiler(&agent, "a").as_deref(), Some("cranelift"));
    // The swap is one `stat` of the artifact: the component is not read
    // again, and no compile is started.
    assert_eq!(
        agent.log().matches("compiling with Cranelift in the background").count(),
        1,
        "{}",
        agent.log()
    );
}
