//! The deployment examples under `contrib/`: the systemd unit passes
//! `systemd-analyze verify` and scores ≤ 2.5 in `systemd-analyze security`, the Kubernetes objects pass
//! `kubernetes-validate --strict`, and the manifests they carry parse with
//! the agent's own parser and pin the plugin the build produces (the
//! DaemonSet's by manifest digest from a registry, with a signature policy).

use std::path::Path;
use std::process::Command;

use durasync::agent::{Input, Spec};

use super::support;

fn contrib(rel: &str) -> std::path::PathBuf {
    support::workspace_root().join("contrib").join(rel)
}

/// The sha256 that plugins/certsync/plugin.toml pins (tests/plugins checks
/// it against a fresh build).
fn pinned_certsync_sha256() -> String {
    let path = support::workspace_root().join("plugins/certsync/plugin.toml");
    let table: toml::Table = std::fs::read_to_string(path).unwrap().parse().unwrap();
    table["sha256"].as_str().unwrap().to_owned()
}

fn tool(name: &str, probe: &[&str]) -> bool {
    Command::new(name).args(probe).output().is_ok_and(|o| o.status.success())
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    if !tool("systemd-analyze", &["--version"]) {
        support::cannot_check(
            "the_systemd_unit_passes_systemd_analyze_verify: systemd-analyze is not installed",
        );
        return;
    }
    let unit = std::fs::read_to_string(contrib("systemd/durasync-agent.service")).unwrap();
    assert!(unit.contains("\nType=notify\n") && unit.contains("\nWatchdogSec="), "{unit}");
    assert!(unit.contains("\nExecReload=/bin/sh -c 'kill -HUP $MAINPID'\n"), "{unit}");
    // verify checks that ExecStart's binary exists: point it at this build.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("durasync-agent.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/durasync", &support::durasync().display().to_string()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&copy).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // verify only warns (exit 0) about unknown keys and bad values: any line
    // about the unit is a failure.
    let about_unit: Vec<&str> = text.lines().filter(|l| l.contains("durasync-agent.service")).collect();
    assert!(out.status.success() && about_unit.is_empty(), "systemd-analyze verify:\n{text}");
    // The hardening, scored offline: exposure 2.0 of 10 ("OK") when written;
    // a change that loosens it past 2.5 fails here.
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--threshold=25"])
        .arg(&copy)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "systemd-analyze security scores the unit above 2.5:\n{text}");
}

#[test]
fn the_kubernetes_objects_pass_kubernetes_validate_and_carry_a_valid_manifest() {
    let yaml_path = contrib("kubernetes/daemonset.yaml");
    let yaml = std::fs::read_to_string(&yaml_path).unwrap();
    // The manifest inside the ConfigMap: the indented block after `|`.
    let start = yaml.find("kube-apiserver-certs.toml: |\n").unwrap();
    let block: Vec<&str> = yaml[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("    ") || l.is_empty())
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect();
    // The plugin comes from the vendor's registry by manifest digest with a
    // signature policy (tests/agent/image.rs pulls and verifies it): no
    // component in the image (contrib/image/build.sh bakes none in) nor in
    // the ConfigMap. The key file it names is mounted from the
    // `durasync-keys` ConfigMap; parsed here with a key made by openssl.
    let wasm = block.iter().find_map(|l| l.strip_prefix("wasm = \"")).unwrap_or_default();
    let digest = wasm
        .strip_prefix("oci://registry.example.com/durasync/certsync@sha256:")
        .map(|d| d.trim_end_matches('"'));
    assert!(
        digest.is_some_and(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit())),
        "the plugin is not named by manifest digest: {wasm}"
    );
    assert!(
        block.contains(&"[verify]") && block.contains(&"keys = [\"/etc/durasync/keys/vendor.pub\"]"),
        "{}",
        block.join("\n")
    );
    assert!(yaml.contains("            - name: keys\n              mountPath: /etc/durasync/keys\n              readOnly: true\n"), "{yaml}");
    assert!(
        yaml.contains("        - name: keys\n          configMap:\n            name: durasync-keys\n"),
        "{yaml}"
    );
    assert!(
        !yaml.contains("binaryData") && !yaml.contains(".wasm"),
        "the DaemonSet carries or names a component file"
    );
    let build = std::fs::read_to_string(contrib("image/build.sh")).unwrap();
    assert!(build.contains("COMPONENTS=${COMPONENTS:-}\n"), "build.sh bakes a component in by default");
    if !tool("openssl", &["version"]) {
        support::cannot_check(
            "the DaemonSet's manifest cannot be parsed with a key: openssl is not installed",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("vendor.pub");
    let out = Command::new("sh")
        .arg("-c")
        .arg("openssl ecparam -name prime256v1 -genkey -noout | openssl ec -pubout -out \"$1\" 2>/dev/null")
        .args(["sh", key.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    let text = block.join("\n").replace("/etc/durasync/keys/vendor.pub", key.to_str().unwrap());
    let spec = Spec::parse(&text, Path::new("/etc/durasync/agent.d/kube-apiserver-certs.toml"))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        spec.manifest.sha256,
        Some(pinned_certsync_sha256()),
        "contrib/kubernetes pins another certsync"
    );
    assert_eq!(spec.manifest.verify.keys.len(), 1);
    assert_eq!(spec.input, Input::File("/var/lib/durasync/kube-apiserver-certs.json".into()));

    if !tool("kubernetes-validate", &["--version"]) {
        support::cannot_check(
            "the_kubernetes_objects_pass_kubernetes_validate_and_carry_a_valid_manifest: kubernetes-validate is not installed (pip install kubernetes-validate)",
        );
        return;
    }
    let out = Command::new("kubernetes-validate").arg("--strict").arg(&yaml_path).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kubernetes-validate --strict:\n{text}");
    for kind in ["namespace/durasync", "configmap/durasync-agent", "daemonset/durasync-agent"] {
        assert!(text.contains(&format!("passed for resource {kind}")), "{kind} not validated:\n{text}");
    }
}

#[test]
fn the_demo_config_dir_parses_and_pins_the_built_certsync() {
    let path = contrib("agent.d/certsync.toml");
    let spec = Spec::parse(&std::fs::read_to_string(&path).unwrap(), &path).unwrap();
    assert_eq!(spec.manifest.sha256, Some(pinned_certsync_sha256()), "contrib/agent.d pins another certsync");
    let table: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
    assert_eq!(table["wasm"].as_str(), Some("../../target/wasm/wasm32-wasip2/release/certsync.wasm"));
    let Input::File(input) = &spec.input else { panic!("{:?}", spec.input) };
    assert!(input.is_file(), "{} is missing", input.display());
}
