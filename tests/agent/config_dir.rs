//! The config directory: manifests added and removed while the agent runs,
//! duplicate names, and directories the agent cannot use.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use super::{Agent, IO, Node, POLICY, once, support};

#[test]
fn a_manifest_added_while_running_starts_and_a_removed_one_stops() {
    let node = Node::new();
    node.certsync("a", "");
    let mut agent = Agent::start(&node, &[]);
    node.wait_generation("a", 1, &agent);

    // Added: loaded and run without a restart.
    node.certsync("b", "");
    node.wait_generation("b", 1, &agent);
    agent.wait_metric("durasync_agent_triggers_total{durasync_instance=\"b\",trigger=\"config\"}", 1.0);
    agent.wait_metric("durasync_agent_instances", 2.0);
    node.set_generation("b", 2);
    node.wait_generation("b", 2, &agent);
    agent.wait_metric("durasync_agent_runs_total{durasync_instance=\"b\",result=\"ok\"}", 2.0);

    // Removed: stopped; its input is no longer followed, a's still is.
    std::fs::remove_file(node.manifest("b")).unwrap();
    let line = agent.wait_log("manifest removed");
    assert!(line.contains("instance=b"), "{line}");
    agent.wait_metric("durasync_agent_instances", 1.0);
    // Events, not a pause: b's input is replaced before a's, in the one
    // directory both are watched through, so the agent's loop handles b's
    // inotify event before a's, and a run is counted as triggered
    // (`triggers_total`) when the loop starts it. Once a's run of that
    // event (and of a later one) is done, b's event was handled long ago:
    // had b still been an instance, its input trigger count would be up.
    let b_input = "durasync_agent_triggers_total{durasync_instance=\"b\",trigger=\"input\"}";
    let a_input = "durasync_agent_triggers_total{durasync_instance=\"a\",trigger=\"input\"}";
    let b_before = agent.metric(b_input);
    assert_eq!(b_before, Some(1.0), "b ran once from its input before it was removed");
    node.set_generation("b", 3);
    node.set_generation("a", 2);
    node.wait_generation("a", 2, &agent);
    agent.wait_metric(a_input, 1.0);
    node.set_generation("a", 3);
    node.wait_generation("a", 3, &agent);
    agent.wait_metric(a_input, 2.0);
    assert_eq!(agent.metric(b_input), b_before, "a removed instance was triggered: {}", agent.log());
    assert_eq!(node.generation("b"), Some(2), "a removed instance ran: {}", agent.log());
    let (_, metrics) = agent.get("/metrics");
    assert!(!metrics.contains("plugin_info{durasync_instance=\"b\""), "{metrics}");
    let ready = agent.wait_ready(200);
    assert_eq!(ready["instances"].as_array().unwrap().len(), 1, "{ready}");
}

#[test]
fn duplicate_plugin_names_are_refused_naming_both_files() {
    let node = Node::new();
    node.certsync("a", "");
    let a = std::fs::read_to_string(node.manifest("a")).unwrap();
    std::fs::write(node.manifest("z-copy"), &a).unwrap();

    // At start: a clear error naming both files, nothing runs.
    let out = Command::new(support::durasync())
        .arg("agent")
        .arg("--config-dir")
        .arg(node.config_dir())
        .env("XDG_CACHE_HOME", super::shared_cache())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(POLICY), "{stderr}");
    let a_path = node.manifest("a").canonicalize().unwrap();
    let z_path = node.manifest("z-copy").canonicalize().unwrap();
    assert!(
        stderr.contains(&format!("plugin name `a` is used by {} and {}", a_path.display(), z_path.display())),
        "{stderr}"
    );
    assert_eq!(node.generation("a"), None, "nothing ran");
    let (status, _, stderr) = once(&node, &[]);
    assert_eq!(status, POLICY, "{stderr}");

    // While running: the newcomer is refused, the running one keeps going.
    std::fs::remove_file(node.manifest("z-copy")).unwrap();
    let mut agent = Agent::start(&node, &[]);
    node.wait_generation("a", 1, &agent);
    node.replace(&node.manifest("z-copy"), a.as_bytes());
    let line = agent.wait_log("plugin name `a` is used by");
    assert!(
        line.contains(&a_path.display().to_string()) && line.contains(&z_path.display().to_string()),
        "{line}"
    );
    agent.wait_not_ready(&["z-copy.toml"]);
    node.set_generation("a", 2);
    node.wait_generation("a", 2, &agent);
}

#[test]
fn a_missing_or_unusable_config_dir_is_a_clear_error() {
    let node = Node::new();
    let run = |dir: &std::path::Path, setpriv: bool| {
        let mut cmd = if setpriv {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(support::durasync());
            c
        } else {
            Command::new(support::durasync())
        };
        let out = cmd.arg("agent").arg("--config-dir").arg(dir).arg("--once").output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let missing = node.path("missing");
    let (status, stderr) = run(&missing, false);
    assert_eq!(status, Some(IO), "{stderr}");
    assert!(
        stderr.contains(&format!("config directory {}: No such file or directory", missing.display())),
        "{stderr}"
    );

    let file = node.path("inputs/a-file");
    std::fs::write(&file, "").unwrap();
    let (status, stderr) = run(&file, false);
    assert_eq!(status, Some(IO), "{stderr}");
    assert!(
        stderr.contains(&format!("config directory {}: Not a directory (os error 20)", file.display())),
        "{stderr}"
    );

    // Unreadable: only a user other than root can be refused.
    let can_drop = rustix::process::geteuid().is_root()
        && Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "true"])
            .status()
            .is_ok_and(|s| s.success());
    if !can_drop {
        support::cannot_check(
            "a_missing_or_unusable_config_dir_is_a_clear_error (unreadable): needs root and setpriv",
        );
        return;
    }
    std::fs::set_permissions(node.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(node.config_dir(), std::fs::Permissions::from_mode(0o311)).unwrap();
    let (status, stderr) = run(&node.config_dir(), true);
    assert_eq!(status, Some(IO), "{stderr}");
    assert!(
        stderr.contains(&format!("config directory {}: Permission denied", node.config_dir().display())),
        "{stderr}"
    );
}

#[test]
fn a_bad_manifest_is_refused_by_key_and_does_not_stop_the_others() {
    let node = Node::new();
    node.certsync("a", "");
    let good = node.certsync("b", "");
    node.replace(&node.manifest("b"), good.replace("[input]", "[input]\nfiel = \"x\"").as_bytes());
    let agent = Agent::start(&node, &[]);
    node.wait_generation("a", 1, &agent);
    let not_ready = agent.wait_not_ready(&["b.toml"]);
    let problem = not_ready[0]["problem"].as_str().unwrap();
    assert!(problem.starts_with("not loaded: manifest "), "{problem}");
    assert!(problem.contains("`input.fiel` unknown key"), "{problem}");
    agent.wait_metric("durasync_agent_reload_failures_total{durasync_instance=\"b.toml\"}", 1.0);
    // Fixed: it loads and runs.
    node.replace(&node.manifest("b"), good.as_bytes());
    node.wait_generation("b", 1, &agent);
    agent.wait_ready(200);
}

#[test]
fn a_metrics_address_in_use_is_a_clear_error_before_anything_runs() {
    let node = Node::new();
    node.certsync("a", "");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(support::durasync())
        .arg("agent")
        .arg("--config-dir")
        .arg(node.config_dir())
        .args(["--metrics-addr", &addr])
        .env("XDG_CACHE_HOME", super::shared_cache())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(IO), "{stderr}");
    assert!(stderr.contains(&format!("serving metrics on {addr}: ")), "{stderr}");
    assert_eq!(node.generation("a"), None, "nothing ran");
}

/// Kubelet's atomic writer, step by step as it updates a mounted
/// ConfigMap: the new version's files in a fresh `..<timestamp>`
/// directory, a `..data_tmp` symlink to it renamed over `..data`, the
/// top-level symlinks of added keys created, then the old version removed.
fn kubelet_update(dir: &Path, version: &str, files: &[(&str, &str)]) {
    let ts = dir.join(version);
    std::fs::create_dir(&ts).unwrap();
    for (name, text) in files {
        std::fs::write(ts.join(name), text).unwrap();
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    std::os::unix::fs::symlink(version, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    for (name, _) in files {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), link).unwrap();
        }
    }
    if let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old)).unwrap();
    }
}

#[test]
fn a_configmap_update_of_the_config_dir_reloads_the_changed_manifest_without_a_sighup() {
    let node = Node::new();
    std::fs::create_dir_all(node.root("a")).unwrap();
    std::fs::create_dir_all(node.root("moved")).unwrap();
    node.set_generation("a", 1);
    let input = format!("[input]\nfile = \"{}\"\n", node.input("a").display());
    let first = super::certsync_manifest("a", &node.root("a"), &input);
    kubelet_update(&node.config_dir(), "..2026_12_02_10_00_00.1", &[("a.toml", &first)]);
    let mut agent = Agent::start(&node, &[]);
    node.wait_generation("a", 1, &agent);

    // The manifest's own name never changes: only `..data` is swapped.
    let second = super::certsync_manifest("a", &node.root("moved"), &input);
    kubelet_update(&node.config_dir(), "..2026_12_02_10_01_00.2", &[("a.toml", &second)]);
    node.wait_generation("moved", 1, &agent);
    agent.wait_log_count("loaded", 2);
    agent.wait_metric("durasync_agent_instances", 1.0);

    // A key added to the ConfigMap is a new instance, through the same swap.
    std::fs::create_dir_all(node.root("b")).unwrap();
    node.set_generation("b", 1);
    let b = super::certsync_manifest(
        "b",
        &node.root("b"),
        &format!("[input]\nfile = \"{}\"\n", node.input("b").display()),
    );
    kubelet_update(&node.config_dir(), "..2026_12_02_10_02_00.3", &[("a.toml", &second), ("b.toml", &b)]);
    node.wait_generation("b", 1, &agent);
    agent.wait_metric("durasync_agent_instances", 2.0);
}
