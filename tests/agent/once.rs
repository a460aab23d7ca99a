//! `durasync agent --once`: one run per instance, a line each, the exit
//! status; and `--log-format json`.

use super::{Node, ONCE_FAILED, once};

#[test]
fn once_runs_every_instance_and_exits_0_when_all_succeed() {
    let node = Node::new();
    node.certsync("a", "");
    node.certsync("b", "");
    let (status, stdout, stderr) = once(&node, &[]);
    assert_eq!(status, 0, "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].starts_with("ok a: certsync: 2 object(s) in sync"), "{stdout}");
    assert!(lines[0].contains("(2 operations: 2 created; "), "{stdout}");
    assert!(lines[1].starts_with("ok b: "), "{stdout}");
    assert_eq!(node.generation("a"), Some(1));
    assert_eq!(node.generation("b"), Some(1));
    // Again: nothing to do.
    let (status, stdout, _) = once(&node, &[]);
    assert_eq!(status, 0);
    assert!(stdout.lines().all(|l| l.contains("(2 operations: 2 unchanged; ")), "{stdout}");
}

#[test]
fn once_exits_13_when_an_instance_fails_to_run_or_load_and_still_runs_the_others() {
    let node = Node::new();
    node.certsync("a", "");
    let good_b = node.certsync("b", "");
    // b's input is not a List: certsync returns an error.
    node.replace(&node.input("b"), b"not json");
    let (status, stdout, stderr) = once(&node, &[]);
    assert_eq!(status, ONCE_FAILED, "{stdout}{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with("ok a: ")), "{stdout}");
    let b = stdout.lines().find(|l| l.starts_with("failed b: ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(b.contains("plugin b failed: "), "{b}");
    assert!(stderr.contains("1 of 2 instances failed"), "{stderr}");

    // A manifest that does not load fails too, naming its file.
    node.set_generation("b", 1);
    let sha_line = good_b.lines().find(|l| l.starts_with("sha256")).unwrap();
    node.replace(
        &node.manifest("b"),
        good_b.replace(sha_line, &format!("sha256 = \"{}\"", "f".repeat(64))).as_bytes(),
    );
    let (status, stdout, _) = once(&node, &[]);
    assert_eq!(status, ONCE_FAILED, "{stdout}");
    let b = stdout.lines().find(|l| l.starts_with("failed ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(b.contains("b.toml: not loaded: ") && b.contains("but the manifest pins ffff"), "{b}");

    // An input command that fails.
    node.replace(
        &node.manifest("b"),
        good_b
            .replace(&format!("file = \"{}\"", node.input("b").display()), "command = [\"false\"]")
            .as_bytes(),
    );
    let (status, stdout, _) = once(&node, &[]);
    assert_eq!(status, ONCE_FAILED, "{stdout}");
    assert!(stdout.contains("failed b: run skipped: input command false exited with status 1"), "{stdout}");
}

#[test]
fn json_logs_are_one_object_per_line_with_the_instance_name() {
    let node = Node::new();
    node.certsync("a", "");
    let (status, stdout, stderr) = once(&node, &["--log-format", "json"]);
    assert_eq!(status, 0, "{stdout}{stderr}");
    let mut about_a = 0;
    for line in stderr.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}\n{stderr}"));
        let message = v["fields"]["message"].as_str().unwrap_or_default();
        if message.contains("run ok")
            || message.contains("created certs:")
            || message.contains("secret tls")
            || message.contains("configmap ca")
        {
            about_a += 1;
            assert_eq!(v["span"]["instance"], "a", "{line}");
        }
    }
    // The run's result, two operations, and certsync's own two log lines.
    assert_eq!(about_a, 5, "{stderr}");
}
