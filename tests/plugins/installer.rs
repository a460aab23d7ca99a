//! installer end to end through `durasync run`.

use super::{Fixture, base64};

const CONFIG: &str = r#"pod = "kube-apiserver"
revision = REV
configmaps = [{ name = "config" }, { name = "optional-cm", optional = true }]
secrets = [{ name = "serving-cert" }]"#;

fn fixture(revision: u64) -> Fixture {
    Fixture::new("installer", &["resources", "manifests"], &CONFIG.replace("REV", &revision.to_string()))
}

fn list(revision: u64) -> Vec<u8> {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  labels:\n    revision: \"REVISION\"\n";
    format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[
        {{"kind":"ConfigMap","metadata":{{"name":"kube-apiserver-pod-{revision}"}},"data":{{"pod.yaml":{pod:?}}}}},
        {{"kind":"ConfigMap","metadata":{{"name":"config-{revision}"}},"data":{{"config.yaml":"rev: {revision}","setup.sh":"echo"}}}},
        {{"kind":"Secret","metadata":{{"name":"serving-cert-{revision}"}},"data":{{"tls.key":"{}","check.sh":"{}"}}}}]}}"#,
        base64(format!("key {revision}").as_bytes()),
        base64(b"exit 0"),
    )
    .into_bytes()
}

#[test]
fn a_revision_s_tree_and_both_manifest_copies_are_written_with_exact_modes() {
    let f = fixture(5);
    let done = f.run(&list(5));
    done.ok();
    let pod =
        b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  labels:\n    revision: \"5\"\n"
            .to_vec();
    let res = f.files("resources");
    let expected = [
        ("kube-apiserver-5/configmaps/config/config.yaml", 0o600, b"rev: 5".to_vec()),
        ("kube-apiserver-5/configmaps/config/setup.sh", 0o755, b"echo".to_vec()),
        ("kube-apiserver-5/kube-apiserver-pod.yaml", 0o600, pod.clone()),
        ("kube-apiserver-5/secrets/serving-cert/check.sh", 0o700, b"exit 0".to_vec()),
        ("kube-apiserver-5/secrets/serving-cert/tls.key", 0o600, b"key 5".to_vec()),
    ];
    let expected: std::collections::BTreeMap<_, _> =
        expected.into_iter().map(|(p, m, b)| (p.to_owned(), (m, b))).collect();
    assert_eq!(res, expected);
    assert_eq!(f.files("manifests"), [("kube-apiserver-pod.yaml".to_owned(), (0o600, pod))].into());
    let ops: Vec<_> = done.ops().into_iter().map(|o| (o.0, o.1, o.2)).collect();
    let o = |op: &str, path: &str| (op.to_owned(), path.to_owned(), "created".to_owned());
    assert_eq!(
        ops,
        [
            o("sync", "kube-apiserver-5/configmaps/config"),
            o("sync", "kube-apiserver-5/secrets/serving-cert"),
            o("write-file", "kube-apiserver-5/kube-apiserver-pod.yaml"),
            o("write-file", "kube-apiserver-pod.yaml"),
        ],
        "resources first, the kubelet's manifest last"
    );
}

#[test]
fn a_second_revision_leaves_the_first_intact_and_replaces_the_kubelet_manifest() {
    let f = fixture(5);
    f.run(&list(5)).ok();
    let first: Vec<_> = f.files("resources").into_iter().collect();
    f.set_config(&CONFIG.replace("REV", "6"));
    let done = f.run(&list(6));
    done.ok();
    let all = f.files("resources");
    let still: Vec<_> = all.clone().into_iter().filter(|(p, _)| p.starts_with("kube-apiserver-5/")).collect();
    assert_eq!(still, first, "revision 5 is byte-for-byte and mode-for-mode what it was");
    assert_eq!(all["kube-apiserver-6/secrets/serving-cert/tls.key"], (0o600, b"key 6".to_vec()));
    let manifest = &f.files("manifests")["kube-apiserver-pod.yaml"];
    assert!(String::from_utf8_lossy(&manifest.1).contains("revision: \"6\""));
    let last = done.ops().pop().unwrap();
    assert_eq!(
        (last.0.as_str(), last.1.as_str(), last.2.as_str()),
        ("write-file", "kube-apiserver-pod.yaml", "replaced")
    );
}

#[test]
fn an_incomplete_revision_is_refused_and_nothing_is_written() {
    let f = fixture(7);
    let done = f.run(&list(6));
    let err = done.plugin_error();
    assert!(err.contains("revision 7 is incomplete, nothing written"), "{err}");
    assert!(done.ops().is_empty());
    assert!(f.files("resources").is_empty() && f.files("manifests").is_empty());
}

/// The plugin's `info!` reaches the operator's log with no `DURASYNC_LOG`
/// set, and standard error, a pipe here, carries no colour codes.
#[test]
fn the_plugins_info_log_is_shown_by_default_without_colour_codes_on_a_pipe() {
    let f = fixture(7);
    let mut cmd = std::process::Command::new(super::support::durasync());
    cmd.arg("run").arg(f.manifest()).args(["--input", "-"]);
    cmd.env("XDG_CACHE_HOME", super::shared_cache()).env_remove("DURASYNC_LOG").env_remove("NO_COLOR");
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), &list(7)).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let line = stderr.lines().find(|l| l.contains("optional-cm-7: optional, not in the input, skipped"));
    let line = line.unwrap_or_else(|| panic!("no info line from the plugin: {stderr}"));
    assert!(line.contains("INFO") && line.contains("plugin=\"installer\""), "{line}");
    assert!(!stderr.contains('\x1b'), "colour codes on a pipe: {stderr:?}");
}
