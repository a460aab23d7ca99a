//! The agent's container image, built by `contrib/image/build.sh` from the
//! test-built `durasync` with no base image and no plugin, run by podman the
//! way the DaemonSet (`contrib/kubernetes/daemonset.yaml`) runs it: its args
//! plus `--once`, its env, its volume mounts (the ConfigMap's manifest as the
//! config dir, the vendor's public key as the `durasync-keys` ConfigMap,
//! hostPath inputs and roots from a node directory, an emptyDir cache) and
//! its securityContext. The manifest names the plugin by manifest digest
//! with a `[verify]` key: it is pulled from a real registry on 127.0.0.1
//! standing in for `registry.example.com` (the mirror setting), where the
//! test pushed certsync and a cosign signature made by `openssl` and pushed
//! by `skopeo`. What it writes must equal what the native binary writes from
//! the same manifest and input. Run as a pod (detached, no `--once`) with a
//! validator and actions added to the manifest, a command action's owed
//! entry stays in the ledger's hostPath across the container's restart, and
//! an HTTP action reaches a server on the host's loopback.
//!
//! Podman 4.3 on these machines (root, cgroup v1 with a cgroup2 `unified`
//! mount): every podman call runs in a private mount namespace with that
//! mount detached ("cgroups in hybrid mode not supported"), with a
//! containers.conf lowering the default ulimits (crun cannot raise
//! RLIMIT_NOFILE past the caller's), and `--network=none --cgroups=disabled`.
//! Needs root and podman; without them `support::cannot_check`.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::support::oci_artifacts::{openssl_key, openssl_sign, payload, skopeo_push_signature};
use super::support::registry::Registry;
use super::support::snapshot::{Entry, snapshot};
use super::support::{have, on_path, output_text, strip_ansi};
use super::{certsync_wasm, support};

/// The non-root user the image runs as by default (build.sh's USER).
const IMAGE_UID: u32 = 65532;

pub(super) fn missing_prerequisite() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("podman run with host mounts and a private mount namespace needs root".into());
    }
    for (tool, package) in [("podman", "podman"), ("unshare", "util-linux"), ("ldd", "libc-bin")] {
        if !on_path(tool) {
            return Some(format!("{tool} is not installed (apt-get install {package})"));
        }
    }
    None
}

/// Podman with its own storage, run root and containers.conf, in a tempdir.
pub(super) struct Podman {
    tmp: tempfile::TempDir,
}

impl Podman {
    pub(super) fn new() -> Podman {
        let tmp = tempfile::Builder::new().prefix("durasync-podman-").tempdir().unwrap();
        std::fs::write(
            tmp.path().join("containers.conf"),
            "[containers]\ndefault_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n",
        )
        .unwrap();
        Podman { tmp }
    }

    /// The podman command line build.sh is given as `PODMAN`.
    fn podman(&self) -> String {
        let p = self.tmp.path();
        format!("podman --root {}/root --runroot {}/run", p.display(), p.display())
    }

    /// `program args…` in a private mount namespace without the cgroup2
    /// `unified` mount, with this podman's containers.conf.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--mount",
            "--propagation=private",
            "sh",
            "-c",
            "! mountpoint -q /sys/fs/cgroup/unified || umount /sys/fs/cgroup/unified || exit 125; exec \"$@\"",
            "sh",
            program,
        ]);
        cmd.env("CONTAINERS_CONF", self.tmp.path().join("containers.conf"));
        cmd
    }

    /// `podman ARGS`, with this podman's storage.
    pub(super) fn run(&self, args: &[String]) -> Output {
        self.run_with(self.command("podman"), args)
    }

    /// [`Podman::run`] with every process it starts (podman, conmon, the
    /// container: `--cgroups=disabled` keeps them where they start) in the
    /// cgroup whose `cgroup.procs` file is `procs`.
    pub(super) fn run_in_cgroup(&self, procs: &Path, args: &[String]) -> Output {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo $$ > \"$0\" && exec \"$@\""]).arg(procs);
        let inner = self.command("podman");
        cmd.arg(inner.get_program()).args(inner.get_args());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        self.run_with(cmd, args)
    }

    fn run_with(&self, mut cmd: Command, args: &[String]) -> Output {
        let p = self.tmp.path();
        cmd.arg("--root").arg(p.join("root")).arg("--runroot").arg(p.join("run")).args(args);
        cmd.output().unwrap()
    }
}

/// This build's certsync pushed to `registry` as `repo` by `durasync push`
/// (its cache in `vendor_cache`), as a vendor publishes it: its manifest
/// digest must be `digest`, the one the DaemonSet pins.
pub(super) fn push_pinned_certsync(registry: &Registry, repo: &str, digest: &str, vendor_cache: &Path) {
    let out = Command::new(support::durasync())
        .arg("push")
        .arg(certsync_wasm())
        .arg(format!("oci://{}/{repo}:{}", registry.registry(), env!("CARGO_PKG_VERSION")))
        .env("XDG_CACHE_HOME", vendor_cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "durasync push:\n{}", text(&out));
    let pushed = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("manifest digest: ").map(str::to_owned))
        .unwrap_or_else(|| panic!("durasync push printed no digest:\n{}", text(&out)));
    assert_eq!(
        pushed, digest,
        "this build's certsync is published as {pushed}; contrib/kubernetes/daemonset.yaml names \
         {digest} (update it with the digest `durasync push` prints)"
    );
}

pub(super) fn text(out: &Output) -> String {
    strip_ansi(&output_text(out))
}

/// The DaemonSet as far as running its container goes: read with a small
/// line reader of the file's own layout (the file is ours; kubernetes-validate
/// checks it is valid, tests/agent/contrib.rs).
#[derive(Debug, Default)]
pub(super) struct DaemonSet {
    pub(super) image: String,
    pub(super) args: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    /// (volume name, mountPath, readOnly)
    pub(super) mounts: Vec<(String, String, bool)>,
    /// volume name → hostPath path, `configMap:NAME` or `emptyDir`.
    pub(super) volumes: BTreeMap<String, String>,
    /// The ConfigMap's data: file name → contents.
    pub(super) config_map: BTreeMap<String, String>,
    /// The ConfigMap's name.
    pub(super) config_map_name: String,
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The lines of the block under the key line `key:` (the first one at any
/// indentation), as (indentation, trimmed text).
fn block<'a>(lines: &[&'a str], key: &str) -> Vec<(usize, &'a str)> {
    let at =
        lines.iter().position(|l| l.trim() == key).unwrap_or_else(|| panic!("no {key} in the DaemonSet"));
    let base = indent(lines[at]);
    lines[at + 1..]
        .iter()
        .take_while(|l| {
            l.trim().is_empty() || indent(l) > base || l.trim_start().starts_with("- ") && indent(l) == base
        })
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| (indent(l), l.trim()))
        .collect()
}

/// `block` split into list items (each starting with `- `), each a map of
/// its `key: value` lines, nested keys flattened to `outer.inner`.
fn items(block: &[(usize, &str)]) -> Vec<BTreeMap<String, String>> {
    let mut out: Vec<BTreeMap<String, String>> = Vec::new();
    let mut outer: Option<(usize, String)> = None;
    for (ind, line) in block {
        let (ind, line) = match line.strip_prefix("- ") {
            Some(rest) => {
                out.push(BTreeMap::new());
                outer = None;
                (ind + 2, rest)
            }
            None => (*ind, *line),
        };
        let Some(map) = out.last_mut() else { continue };
        let (k, v) = line.split_once(':').unwrap_or((line, ""));
        let v = v.trim().trim_matches('"');
        if outer.as_ref().is_some_and(|(i, _)| ind <= *i) {
            outer = None;
        }
        let key = match &outer {
            Some((_, o)) => format!("{o}.{k}"),
            None => k.to_owned(),
        };
        if v.is_empty() {
            outer = Some((ind, key.clone()));
        }
        map.insert(key, v.to_owned());
    }
    out
}

pub(super) fn daemonset() -> DaemonSet {
    let yaml =
        std::fs::read_to_string(support::workspace_root().join("contrib/kubernetes/daemonset.yaml")).unwrap();
    let lines: Vec<&str> = yaml.lines().collect();
    let mut ds = DaemonSet::default();
    let image =
        lines.iter().find_map(|l| l.trim().strip_prefix("image: ")).expect("no image: in the DaemonSet");
    ds.image = image.to_owned();
    ds.args = block(&lines, "args:").iter().map(|(_, l)| l.strip_prefix("- ").unwrap().to_owned()).collect();
    for item in items(&block(&lines, "env:")) {
        ds.env.push((item["name"].clone(), item["value"].clone()));
    }
    for item in items(&block(&lines, "volumeMounts:")) {
        let ro = item.get("readOnly").is_some_and(|v| v == "true");
        ds.mounts.push((item["name"].clone(), item["mountPath"].clone(), ro));
    }
    for item in items(&block(&lines, "volumes:")) {
        let source = if let Some(p) = item.get("hostPath.path") {
            p.clone()
        } else if let Some(n) = item.get("configMap.name") {
            format!("configMap:{n}")
        } else if item.contains_key("emptyDir") {
            "emptyDir".into()
        } else {
            panic!("a volume of a kind this test does not mount: {item:?}");
        };
        ds.volumes.insert(item["name"].clone(), source);
    }
    ds.config_map_name = lines
        .iter()
        .skip_while(|l| l.trim() != "kind: ConfigMap")
        .find_map(|l| l.trim().strip_prefix("name: "))
        .expect("the ConfigMap has no name")
        .to_owned();
    // The ConfigMap's data: `name: |` blocks.
    let data = block(&lines, "data:");
    let mut current: Option<(String, usize)> = None;
    for l in yaml[yaml.find("\ndata:\n").unwrap() + 7..].lines() {
        if !l.trim().is_empty() && indent(l) == 0 {
            break;
        }
        if let Some(name) = l.trim().strip_suffix(": |").filter(|_| indent(l) == data[0].0) {
            current = Some((name.to_owned(), indent(l) + 2));
            ds.config_map.insert(name.to_owned(), String::new());
        } else if let Some((name, ind)) = &current
            && (l.trim().is_empty() || indent(l) >= *ind)
        {
            let body = ds.config_map.get_mut(name).unwrap();
            body.push_str(l.get(*ind..).unwrap_or(""));
            body.push('\n');
        }
    }
    ds
}

/// A node's file system for the DaemonSet's volumes: hostPath `P` is
/// `node/P`, a ConfigMap's data is `node/configmap-NAME/` (the DaemonSet's
/// own, or one of `others` that the operator makes with `kubectl create
/// configmap`), an emptyDir is `node/emptydir/NAME`. Returns podman's `-v`
/// arguments.
pub(super) fn node_volumes(
    ds: &DaemonSet,
    node: &Path,
    others: &BTreeMap<&str, BTreeMap<&str, String>>,
) -> Vec<String> {
    let mut args = Vec::new();
    for (name, mount_path, ro) in &ds.mounts {
        let source = &ds.volumes[name];
        let host = if let Some(cm) = source.strip_prefix("configMap:") {
            let dir = node.join(format!("configmap-{cm}"));
            std::fs::create_dir_all(&dir).unwrap();
            let data: Vec<(&str, &String)> = if cm == ds.config_map_name {
                ds.config_map.iter().map(|(k, v)| (k.as_str(), v)).collect()
            } else {
                let data = others
                    .get(cm)
                    .unwrap_or_else(|| panic!("the DaemonSet mounts ConfigMap {cm}, unknown here"));
                data.iter().map(|(k, v)| (*k, v)).collect()
            };
            for (file, body) in data {
                std::fs::write(dir.join(file), body).unwrap();
            }
            dir
        } else if source == "emptyDir" {
            node.join("emptydir").join(name)
        } else {
            node.join(source.trim_start_matches('/'))
        };
        std::fs::create_dir_all(&host).unwrap();
        args.push(format!("--volume={}:{mount_path}{}", host.display(), if *ro { ":ro" } else { "" }));
    }
    args
}

fn tree(root: &Path) -> BTreeMap<String, Entry> {
    snapshot(root).unwrap_or_else(|| panic!("{} does not exist", root.display()))
}

/// Every regular file beneath `dir`, relative.
fn files(dir: &Path, rel: &Path, out: &mut BTreeSet<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            files(&e.path(), &rel.join(e.file_name()), out);
        } else {
            out.insert(rel.join(e.file_name()));
        }
    }
}

/// `contrib/image/build.sh`, exactly as docs/agent.md runs it, with this test's
/// binary and podman; the build context is kept in `context`.
pub(super) fn build(podman: &Podman, tag: &str, context: &Path) {
    let out = podman
        .command("bash")
        .arg(support::workspace_root().join("contrib/image/build.sh"))
        .env("DURASYNC", support::durasync())
        .env_remove("COMPONENTS")
        .env("TAG", tag)
        .env("PODMAN", podman.podman())
        .env("CONTEXT", context)
        .output()
        .unwrap();
    assert!(out.status.success(), "build.sh failed:\n{}", text(&out));
}

/// The DaemonSet's plugin reference, `oci://REGISTRY/REPO@sha256:…`, split:
/// (registry, repository, manifest digest).
pub(super) fn plugin_reference(manifest: &str) -> (String, String, String) {
    let wasm = manifest
        .lines()
        .find_map(|l| l.strip_prefix("wasm = \""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no wasm = \"…\" line in the ConfigMap's manifest:\n{manifest}"));
    let rest =
        wasm.strip_prefix("oci://").unwrap_or_else(|| panic!("the plugin is not from a registry: {wasm}"));
    let (name, digest) =
        rest.split_once('@').unwrap_or_else(|| panic!("the plugin is not pinned by manifest digest: {wasm}"));
    let (registry, repo) = name.split_once('/').unwrap();
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{wasm}");
    (registry.to_owned(), repo.to_owned(), digest.to_owned())
}

#[test]
fn the_image_is_built_from_scratch_without_a_plugin_and_syncs_with_the_daemonsets_mounts_pulling_the_signed_plugin_as_root_and_as_its_own_user()
 {
    if let Some(why) = missing_prerequisite() {
        support::cannot_check(&format!("the_image_is_built_from_scratch: {why}"));
        return;
    }
    if !have("skopeo") || !have("openssl") {
        return;
    }
    let ds = daemonset();
    let manifest = &ds.config_map["kube-apiserver-certs.toml"];
    let (plugin_registry, plugin_repo, plugin_digest) = plugin_reference(manifest);
    let keys_dir = "/etc/durasync/keys";
    assert!(manifest.contains(&format!("keys = [\"{keys_dir}/vendor.pub\"]")), "{manifest}");
    assert!(
        ds.mounts
            .iter()
            .any(|(name, path, ro)| path == keys_dir && *ro && ds.volumes[name] == "configMap:durasync-keys"),
        "the vendor's key is not mounted from the durasync-keys ConfigMap: {:?}",
        ds.mounts
    );
    let podman = Podman::new();
    let work = tempfile::Builder::new().prefix("durasync-image-").tempdir().unwrap();
    let tag = format!("localhost/durasync:test-{}", std::process::id());

    let context = work.path().join("context");
    build(&podman, &tag, &context);

    // What went in: the binary, passwd/group and exactly the libraries ldd
    // names (the loader included), nothing else: no component.
    let mut got = BTreeSet::new();
    files(&context.join("rootfs"), Path::new("/"), &mut got);
    let ldd = Command::new("ldd").arg(support::durasync()).output().unwrap();
    let mut want: BTreeSet<PathBuf> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(PathBuf::from)
        .collect();
    assert!(!want.is_empty(), "ldd names no library: {}", String::from_utf8_lossy(&ldd.stdout));
    for f in ["/usr/local/bin/durasync", "/etc/passwd", "/etc/group"] {
        want.insert(f.into());
    }
    assert_eq!(got, want, "the image's files");

    // One layer (FROM scratch), its user, labels and entrypoint.
    let out = podman.run(&["image".into(), "inspect".into(), tag.clone()]);
    assert!(out.status.success(), "{}", text(&out));
    let inspect: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let image = &inspect[0];
    assert_eq!(image["RootFS"]["Layers"].as_array().map(Vec::len), Some(1), "{image:#}");
    assert_eq!(image["Config"]["User"], format!("{IMAGE_UID}:{IMAGE_UID}"));
    assert_eq!(image["Config"]["Entrypoint"][0], "/usr/local/bin/durasync");
    let labels = &image["Config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], env!("CARGO_PKG_VERSION"), "{labels:#}");
    assert_eq!(labels["org.opencontainers.image.base.name"], "scratch");
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(labels["org.opencontainers.image.revision"].as_str().map(str::len), Some(40), "{labels:#}");

    // The vendor's side: certsync pushed as `durasync push` publishes it
    // (its manifest digest is the one the DaemonSet names), signed with a
    // key made by openssl, the signature pushed by skopeo. A loopback
    // registry stands in for the vendor's: the node reaches it as a mirror
    // of the name the manifest keeps.
    let Some(registry) = Registry::start() else { return };
    push_pinned_certsync(&registry, &plugin_repo, &plugin_digest, &work.path().join("vendor-cache"));
    let (vendor_key, vendor_pub) = openssl_key(work.path(), "vendor");
    let signed = payload(&format!("{plugin_registry}/{plugin_repo}"), &plugin_digest, serde_json::json!({}));
    let sig = openssl_sign(work.path(), &vendor_key, &signed);
    skopeo_push_signature(work.path(), &registry.registry(), &plugin_repo, &plugin_digest, signed, &sig);
    let mirror = format!("{plugin_registry}={}", registry.registry());
    let key_config_map = |public: &Path| {
        BTreeMap::from([(
            "durasync-keys",
            BTreeMap::from([("vendor.pub", std::fs::read_to_string(public).unwrap())]),
        )])
    };

    // The DaemonSet's container, as podman flags: its securityContext…
    let yaml =
        std::fs::read_to_string(support::workspace_root().join("contrib/kubernetes/daemonset.yaml")).unwrap();
    for setting in [
        "runAsUser: 0",
        "allowPrivilegeEscalation: false",
        "readOnlyRootFilesystem: true",
        "drop: [\"ALL\"]",
        "type: RuntimeDefault",
    ] {
        assert!(yaml.contains(setting), "the DaemonSet's securityContext lost {setting:?}");
    }
    assert!(ds.image.starts_with("registry.example.com/durasync:"), "{}", ds.image);
    let input_name = "kube-apiserver-certs.json";
    assert!(manifest.contains(&format!("file = \"/var/lib/durasync/{input_name}\"")), "{manifest}");
    let root_in_node = "etc/kubernetes/static-pod-resources/kube-apiserver-certs";
    assert!(manifest.contains(&format!("path = \"/{root_in_node}\"")), "{manifest}");

    // Everything after `podman run …` but `--once`: the DaemonSet's
    // container on `node` as `user` (the image's own when `None`).
    let container_args = |node: &Path, user: Option<u32>| -> Vec<String> {
        let example = support::workspace_root().join("plugins/certsync/example/list.json");
        let inputs = node.join("var/lib/durasync");
        std::fs::create_dir_all(&inputs).unwrap();
        std::fs::copy(&example, inputs.join(input_name)).unwrap();
        std::fs::create_dir_all(node.join(root_in_node)).unwrap();
        // The host's network (no bridge, no firewall change): the registry
        // is on its loopback.
        let mut args: Vec<String> =
            ["--network=host", "--cgroups=disabled", "--read-only"].map(String::from).into();
        args.extend(["--cap-drop=all".into(), "--security-opt=no-new-privileges".into()]);
        if let Some(uid) = user {
            args.push(format!("--user={uid}"));
        }
        for (k, v) in &ds.env {
            args.push(format!("--env={k}={v}"));
        }
        args.push(format!("--env=DURASYNC_REGISTRY_MIRRORS={mirror}"));
        args.extend(node_volumes(&ds, node, &key_config_map(&vendor_pub)));
        if user.is_none() {
            // The roots and the cache belong to the image's user.
            for dir in [node.join(root_in_node), node.join("emptydir/cache")] {
                std::os::unix::fs::chown(&dir, Some(IMAGE_UID), Some(IMAGE_UID)).unwrap();
            }
        }
        args.push(tag.clone());
        args.extend(ds.args.iter().cloned());
        args
    };
    let run_once = |node: &Path, user: Option<u32>| -> Output {
        let mut args: Vec<String> = vec!["run".into(), "--rm".into()];
        args.extend(container_args(node, user));
        args.push("--once".into());
        podman.run(&args)
    };

    // The reference: the native binary on the same manifest and input,
    // pulling the same way.
    let native = work.path().join("native");
    let native_root = native.join("root");
    std::fs::create_dir_all(&native_root).unwrap();
    std::fs::create_dir(native.join("agent.d")).unwrap();
    let native_keys = native.join("keys");
    std::fs::create_dir(&native_keys).unwrap();
    std::fs::copy(&vendor_pub, native_keys.join("vendor.pub")).unwrap();
    std::fs::write(
        native.join("agent.d/kube-apiserver-certs.toml"),
        manifest
            .replace(&format!("{keys_dir}/"), &format!("{}/", native_keys.display()))
            .replace(&format!("/{root_in_node}"), &native_root.display().to_string())
            .replace(
                "/var/lib/durasync/",
                &format!("{}/", support::workspace_root().join("plugins/certsync/example").display()),
            )
            .replace(input_name, "list.json"),
    )
    .unwrap();
    let native_agent = || {
        Command::new(support::durasync())
            .arg("agent")
            .arg("--config-dir")
            .arg(native.join("agent.d"))
            .args(["--once", "--no-cache"])
            .env("DURASYNC_REGISTRY_MIRRORS", &mirror)
            .output()
            .unwrap()
    };
    let out = native_agent();
    assert!(out.status.success(), "the native agent failed:\n{}", text(&out));
    let expected = tree(&native_root);
    assert!(expected.keys().any(|k| k.starts_with("secrets/aggregator-client/")), "{expected:#?}");

    // The signature policy holds: with another key in place of the
    // vendor's, the plugin is refused and nothing is written.
    let (_, other_pub) = openssl_key(work.path(), "other");
    std::fs::copy(&other_pub, native_keys.join("vendor.pub")).unwrap();
    std::fs::remove_dir_all(&native_root).unwrap();
    std::fs::create_dir(&native_root).unwrap();
    let out = native_agent();
    assert_eq!(out.status.code(), Some(super::ONCE_FAILED), "another key was accepted:\n{}", text(&out));
    assert!(text(&out).contains(&plugin_digest), "the refusal does not name the digest:\n{}", text(&out));
    let left = tree(&native_root);
    assert_eq!(left.keys().collect::<Vec<_>>(), [""], "a refused plugin wrote {left:#?}");

    // As the DaemonSet runs it: root without capabilities, read-only image.
    let node = work.path().join("node-root");
    let out = run_once(&node, Some(0));
    assert!(out.status.success(), "podman run as root:\n{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ok kube-apiserver-certs:"),
        "podman run as root:\n{}",
        text(&out)
    );
    assert_eq!(tree(&node.join(root_in_node)), expected, "the image as root wrote another tree");
    let blob = node.join("emptydir/cache/durasync/oci/blobs/sha256").join(pinned_sha256(manifest));
    assert!(blob.is_file(), "the plugin was not pulled into the emptyDir cache ({})", blob.display());

    // As a pod runs it (no `--once`): the same instance with a validator
    // and two actions. The validator copies the staged certificate it was
    // shown out of the sandbox; the command action (the image's one
    // program) copies a token the node provides, and fails while there is
    // none: it stays owed in the ledger on the node's disk, across the
    // pod's restart, and runs in the next pod once the token is there. The
    // HTTP action (what a FROM-scratch image can do without a program)
    // reaches a server this test runs on the host's loopback (the pod is
    // on the host's network), named `localhost`, which the image has no
    // /etc/hosts for; the server reads the committed certificate when it
    // is asked.
    let node = work.path().join("node-hooks");
    let spr = "/etc/kubernetes/static-pod-resources";
    let committed_crt = node.join(root_in_node).join("secrets/aggregator-client/tls.crt");
    let consumer = support::http_server::HttpServer::start(move |_| {
        (200, std::fs::read_to_string(&committed_crt).unwrap_or_else(|e| format!("unreadable: {e}")))
    });
    let hooked = format!(
        "{manifest}[[validate]]\nname = \"copy\"\nroot = \"certs\"\npath = \"secrets/aggregator-client/**\"\n\
         command = [\"/usr/local/bin/durasync\", \"write\", \"{spr}/validated.crt\", \"--from\", \"{{staged}}/tls.crt\"]\n\
         [[action]]\nname = \"reload\"\nroot = \"certs\"\n\
         command = [\"/usr/local/bin/durasync\", \"write\", \"{spr}/reloaded\", \"--from\", \"/var/lib/durasync/token\"]\n\
         [[action]]\nname = \"http-reload\"\nroot = \"certs\"\nurl = \"http://localhost:{}/-/reload\"\n",
        consumer.port()
    );
    // A pod: the container detached, as root (the DaemonSet's runAsUser),
    // with the ConfigMap's manifest as the operator changed it.
    let pod = |name: &str| -> Pod<'_> {
        let mut args: Vec<String> = vec!["run".into(), "--detach".into(), format!("--name={name}")];
        // On the host's network the DaemonSet's fixed port may be taken:
        // this pod serves its metrics on a free loopback port instead.
        args.extend(container_args(&node, Some(0)).into_iter().map(|a| {
            if a.starts_with("--metrics-addr=") { "--metrics-addr=127.0.0.1:0".to_owned() } else { a }
        }));
        let config = node.join(format!("configmap-{}", ds.config_map_name));
        std::fs::write(config.join("kube-apiserver-certs.toml"), &hooked).unwrap();
        let out = podman.run(&args);
        assert!(out.status.success(), "podman run --detach:\n{}", text(&out));
        Pod { podman: &podman, name: name.to_owned() }
    };
    let ledger = node.join("var/lib/durasync/actions/kube-apiserver-certs.owed");
    let first = pod(&format!("durasync-pod1-{}", std::process::id()));
    // The run ended (its last object written), and its action failed and is owed.
    let run_ok = |pod: &str| text(&podman.run(&["logs".into(), pod.into()])).contains("run ok in");
    let owed = || std::fs::read_to_string(&ledger).is_ok_and(|t| t == "reload\n");
    wait_for(&first, "the run ended and its failing action is owed in the node's ledger", || {
        owed() && run_ok(&first.name)
    });
    let synced = node.join(root_in_node);
    assert_eq!(tree(&synced), expected, "the pod with hooks wrote another tree");
    assert_eq!(
        std::fs::read(node.join("etc/kubernetes/static-pod-resources/validated.crt")).unwrap(),
        std::fs::read(synced.join("secrets/aggregator-client/tls.crt")).unwrap(),
        "the validator did not see the staged certificate"
    );
    let asked = consumer.wait_requests(1, std::time::Duration::from_secs(10));
    assert_eq!(asked.len(), 1, "the HTTP action's requests: {asked:?}\nthe pod's log:\n{}", first.logs());
    assert_eq!(asked[0].line, "POST /-/reload HTTP/1.1");
    assert_eq!(
        asked[0].answer.1.as_bytes(),
        std::fs::read(synced.join("secrets/aggregator-client/tls.crt")).unwrap(),
        "the HTTP action ran before the certificate was committed"
    );
    first.stop();
    assert_eq!(std::fs::read_to_string(&ledger).unwrap(), "reload\n", "the ledger did not survive the pod");
    std::fs::write(node.join("var/lib/durasync/token"), b"reloaded by the second pod\n").unwrap();
    let second = pod(&format!("durasync-pod2-{}", std::process::id()));
    let reloaded = node.join("etc/kubernetes/static-pod-resources/reloaded");
    wait_for(&second, "the owed action ran in the next pod", || reloaded.is_file());
    let cleared = || std::fs::read_to_string(&ledger).is_ok_and(|t| t.is_empty());
    wait_for(&second, "the ledger is cleared", cleared);
    assert_eq!(std::fs::read(&reloaded).unwrap(), b"reloaded by the second pod\n");
    // The second pod changed nothing: the HTTP action was not owed again.
    assert_eq!(consumer.seen().len(), 1, "{:?}", consumer.seen());
    second.stop();

    // As the image's own user, on roots that user owns.
    let node = work.path().join("node-user");
    let out = run_once(&node, None);
    assert!(out.status.success(), "podman run as {IMAGE_UID}:\n{}", text(&out));
    let written = node.join(root_in_node).join("secrets/aggregator-client");
    assert_eq!(std::fs::metadata(&written).unwrap().uid(), IMAGE_UID, "not written by the image's user");
    assert_eq!(tree(&node.join(root_in_node)), expected, "the image as {IMAGE_UID} wrote another tree");
}

/// A detached container (a pod's), removed on drop.
struct Pod<'p> {
    podman: &'p Podman,
    name: String,
}

impl Pod<'_> {
    fn logs(&self) -> String {
        text(&self.podman.run(&["logs".into(), self.name.clone()]))
    }

    /// Stop it as a kubelet does (SIGTERM, then the grace) and require
    /// that the agent exited 0.
    fn stop(self) {
        let out = self.podman.run(&["stop".into(), "--time=45".into(), self.name.clone()]);
        assert!(out.status.success(), "podman stop:\n{}", text(&out));
        let out =
            self.podman.run(&["inspect".into(), "--format={{.State.ExitCode}}".into(), self.name.clone()]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "0",
            "the agent's exit; its log:\n{}",
            self.logs()
        );
    }
}

impl Drop for Pod<'_> {
    fn drop(&mut self) {
        let _ = self.podman.run(&["rm".into(), "--force".into(), "--time=0".into(), self.name.clone()]);
    }
}

/// Wait (at most a minute) until `done()`, failing with the pod's log.
#[track_caller]
fn wait_for(pod: &Pod<'_>, what: &str, done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "timed out waiting until {what}; the pod's log:\n{}",
            pod.logs()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The manifest's `sha256` pin.
fn pinned_sha256(manifest: &str) -> String {
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("sha256 = \"").and_then(|l| l.strip_suffix('"')))
        .unwrap_or_else(|| panic!("no sha256 pin:\n{manifest}"))
        .to_owned()
}

#[test]
fn the_image_is_pushed_to_a_loopback_registry_and_runs_pulled_by_the_digest_the_daemonset_names() {
    if let Some(why) = missing_prerequisite() {
        support::cannot_check(&format!("the_image_is_pushed_to_a_loopback_registry: {why}"));
        return;
    }
    if !have("docker-registry") {
        return;
    }
    let work = tempfile::Builder::new().prefix("durasync-image-").tempdir().unwrap();
    let builder = Podman::new();
    let tag = format!("localhost/durasync:test-{}", std::process::id());
    build(&builder, &tag, &work.path().join("context"));
    let Some(registry) = Registry::start() else { return };

    // Push, exactly as docs/agent.md says: the pinned reference comes back.
    let dest = format!("{}/durasync:{}", registry.registry(), env!("CARGO_PKG_VERSION"));
    let out = builder
        .command("bash")
        .arg(support::workspace_root().join("contrib/image/push.sh"))
        .arg(&tag)
        .arg(&dest)
        .env("PODMAN", builder.podman())
        .env("PUSH_FLAGS", "--tls-verify=false")
        .output()
        .unwrap();
    assert!(out.status.success(), "push.sh failed:\n{}", text(&out));
    let reference = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let prefix = format!("{}/durasync@sha256:", registry.registry());
    let hex = reference.strip_prefix(&prefix).unwrap_or_else(|| panic!("push.sh printed {reference:?}"));
    assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{reference}");

    // The registry serves that manifest under the tag.
    let mut stream = std::net::TcpStream::connect(registry.registry()).unwrap();
    use std::io::{Read, Write};
    write!(
        stream,
        "HEAD /v2/durasync/manifests/{} HTTP/1.0\r\nHost: {}\r\nAccept: application/vnd.oci.image.manifest.v1+json\r\n\r\n",
        env!("CARGO_PKG_VERSION"),
        registry.registry()
    )
    .unwrap();
    let mut head = String::new();
    stream.read_to_string(&mut head).unwrap();
    assert!(
        head.to_ascii_lowercase().contains(&format!("docker-content-digest: sha256:{hex}")),
        "the registry's tag is not {reference}:\n{head}"
    );

    // A node with empty storage pulls by digest (podman checks the bytes
    // against it) and runs it.
    let node = Podman::new();
    let out = node.run(&["pull".into(), "--quiet".into(), "--tls-verify=false".into(), reference.clone()]);
    assert!(out.status.success(), "podman pull {reference}:\n{}", text(&out));
    let out = node.run(
        &["run", "--rm", "--network=none", "--cgroups=disabled", "--read-only", &reference, "--version"]
            .map(String::from),
    );
    assert!(out.status.success(), "podman run {reference}:\n{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("durasync {}", env!("CARGO_PKG_VERSION"))
    );

    // The DaemonSet with that reference, as docs/agent.md renders it, is valid.
    let yaml =
        std::fs::read_to_string(support::workspace_root().join("contrib/kubernetes/daemonset.yaml")).unwrap();
    let ds = daemonset();
    assert_eq!(yaml.matches(&format!("image: {}", ds.image)).count(), 1);
    // docs/agent.md's own `sed` line, run in a directory whose `contrib` is
    // this checkout's, with `ref` set as push.sh printed it.
    let page = std::fs::read_to_string(support::workspace_root().join("docs/agent.md")).unwrap();
    let sed_line = page
        .lines()
        .find(|l| l.starts_with("sed \"s#image: registry.example.com/durasync:"))
        .expect("docs/agent.md: no sed line pinning the DaemonSet");
    let cwd = work.path().join("apply");
    std::fs::create_dir(&cwd).unwrap();
    std::os::unix::fs::symlink(support::workspace_root().join("contrib"), cwd.join("contrib")).unwrap();
    let rendered = cwd.join("daemonset.yaml");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("set -e; ref=\"$1\"; {sed_line}"))
        .args(["sh", &reference])
        .current_dir(&cwd)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let rendered_text = std::fs::read_to_string(&rendered).unwrap();
    assert!(rendered_text.contains(&format!("image: {reference}\n")), "{rendered_text}");
    let validate = Command::new("kubernetes-validate").arg("--strict").arg(&rendered).output();
    match validate {
        Ok(out) => assert!(
            out.status.success(),
            "kubernetes-validate --strict on the pinned DaemonSet:\n{}",
            text(&out)
        ),
        Err(e) => support::cannot_check(&format!(
            "the pinned DaemonSet is not validated: kubernetes-validate cannot run ({e}; pip install kubernetes-validate)"
        )),
    }
}
