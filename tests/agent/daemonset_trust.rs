//! The DaemonSet's manifest (`contrib/kubernetes/daemonset.yaml`, the
//! `kube-apiserver-certs.toml` of its ConfigMap) pulled and verified end to
//! end by `durasync agent` run with the DaemonSet's own args plus `--once`:
//! once in its key form as shipped (`[verify] keys`, a cosign key's Sigstore
//! bundle) and once in the keyless form its comments give (`identities` and
//! `trusted_root`, a bundle whose Fulcio-style certificate names the release
//! workflow the identity policy names, issued by GitHub's issuer). Both
//! bundles are attached as OCI referrers through the referrers tag schema
//! of a real registry (`docker-registry` on 127.0.0.1) holding certsync as
//! `durasync push` publishes it, at the manifest digest the DaemonSet pins.
//! Both forms sync, then sync again from the cache with the registry
//! stopped. The keyless form refuses a certificate of another workflow, of
//! another issuer, a bundle over another artifact and a component changed
//! in the registry's storage: exit 13, the reason named, nothing compiled
//! (no `.cwasm` in the cache) and nothing written.
//!
//! The test material is the Sigstore test PKI of `support::sigstore` (an
//! `openssl` CA with Fulcio's extensions, a Rekor-like log, its trusted
//! root); no Sigstore service is asked.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use durasync::digest::oci_digest;

use super::contrib::keyless_form;
use super::image::{daemonset, plugin_reference, push_pinned_certsync, text};
use super::support::referrers::attach_by_tag_as;
use super::support::registry::{Registry, free_port};
use super::support::sigstore::{self as sig, By, GITHUB, Leaf, Log, Make, Pki, WORKFLOW};
use super::support::snapshot::snapshot;
use super::{ONCE_FAILED, support};

/// The ConfigMap's manifest file.
const MANIFEST: &str = "kube-apiserver-certs.toml";
/// The granted root the manifest names on the node.
const NODE_ROOT: &str = "/etc/kubernetes/static-pod-resources/kube-apiserver-certs";

/// A node as the DaemonSet's volumes give it to the agent, in a tempdir:
/// `agent.d/` (the ConfigMap), `keys/` (the `durasync-keys` ConfigMap),
/// `trust/` (the `durasync-trust` ConfigMap), `inputs/` (the hostPath
/// `/var/lib/durasync`), `root/` (the static-pod-resources hostPath),
/// `state/` (the ledger's hostPath) and `cache/` (the emptyDir).
struct Node {
    dir: PathBuf,
}

impl Node {
    /// A node under `parent/name` whose config dir holds `manifest`, with
    /// only the paths that must be local rewritten (each said below).
    fn new(parent: &Path, name: &str, manifest: &str, key: &Path, trusted_root: &Path) -> Node {
        let dir = parent.join(name);
        for d in ["agent.d", "keys", "trust", "inputs", "root", "state", "cache"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        // durasync wants its cache private (mode 0700), as an emptyDir
        // mounted for the container's root user is.
        std::fs::set_permissions(dir.join("cache"), std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        std::fs::copy(key, dir.join("keys/vendor.pub")).unwrap();
        std::fs::copy(trusted_root, dir.join("trust/trusted_root.json")).unwrap();
        // The input the node's cert-syncer writes: the plugin's example List.
        let example = support::workspace_root().join("plugins/certsync/example/list.json");
        std::fs::copy(example, dir.join("inputs/kube-apiserver-certs.json")).unwrap();
        // The mounted paths become this node's directories; the `wasm`
        // reference stays as shipped: the registry on loopback is reached
        // as the mirror of `registry.example.com` (DURASYNC_REGISTRY_MIRRORS,
        // what an air-gapped node sets), so the pinned digest is the one
        // verified.
        let local = manifest
            .replace("/etc/durasync/keys/", &format!("{}/", dir.join("keys").display()))
            .replace("/etc/durasync/trust/", &format!("{}/", dir.join("trust").display()))
            .replace("/var/lib/durasync/", &format!("{}/", dir.join("inputs").display()))
            .replace(NODE_ROOT, &dir.join("root").display().to_string());
        assert!(
            !local.contains("\"/etc/") && !local.contains("\"/var/"),
            "a path of the node left unrewritten:\n{local}"
        );
        std::fs::write(dir.join("agent.d").join(MANIFEST), local).unwrap();
        Node { dir }
    }

    /// `durasync` with the DaemonSet's args and env plus `--once`: the
    /// config dir, the cache (XDG_CACHE_HOME) and the ledger (`--state-dir`,
    /// the default being the node's `/var/lib/durasync`) this node's, the
    /// metrics on a free loopback port instead of the pod's 9464.
    fn agent_once(&self, args: &[String], env: &[(String, String)], mirror: &str) -> Output {
        let args: Vec<String> = args
            .iter()
            .map(|a| match a.split_once('=') {
                Some(("--config-dir", _)) => format!("--config-dir={}", self.dir.join("agent.d").display()),
                Some(("--metrics-addr", _)) => format!("--metrics-addr=127.0.0.1:{}", free_port("127.0.0.1")),
                _ => a.clone(),
            })
            .collect();
        let mut cmd = Command::new(support::durasync());
        cmd.args(&args).arg("--once").arg(format!("--state-dir={}", self.dir.join("state").display()));
        for (k, v) in env {
            let v =
                if k == "XDG_CACHE_HOME" { self.dir.join("cache").display().to_string() } else { v.clone() };
            cmd.env(k, v);
        }
        cmd.env("DURASYNC_REGISTRY_MIRRORS", mirror)
            .env("HOME", &self.dir)
            .env_remove("DOCKER_CONFIG")
            .env_remove("REGISTRY_AUTH_FILE")
            .env_remove("DURASYNC_INSECURE_REGISTRIES")
            .env_remove("DURASYNC_REGISTRY_CA")
            .output()
            .unwrap()
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    /// Compiled components in the node's cache.
    fn compiled(&self) -> usize {
        fn count(dir: &Path) -> usize {
            std::fs::read_dir(dir).map_or(0, |entries| {
                entries
                    .map(|e| e.unwrap().path())
                    .map(|p| {
                        if p.is_dir() {
                            count(&p)
                        } else {
                            usize::from(p.extension().is_some_and(|e| e == "cwasm"))
                        }
                    })
                    .sum()
            })
        }
        count(&self.dir.join("cache"))
    }

    /// Every path under the granted root (empty: nothing written).
    fn written(&self) -> Vec<String> {
        snapshot(&self.root()).unwrap().into_keys().filter(|k| !k.is_empty()).collect()
    }
}

/// A Sigstore bundle over `digest` by `by`, logged now in `log`: a message
/// signature, as `cosign sign` v3 makes it.
fn bundle(by: By<'_>, digest: &str, log: &Log) -> Vec<u8> {
    sig::bundle(&Make { by, digest: digest.to_owned(), dsse: false, time: sig::now(), log, v01: false })
        .to_string()
        .into_bytes()
}

#[test]
fn the_daemonsets_manifest_verifies_a_key_signed_and_a_keyless_plugin_through_referrers_then_offline_and_refuses_other_signers()
 {
    let Some(mut registry) = Registry::start() else { return };
    if !sig::have_openssl() {
        support::cannot_check("the DaemonSet's keyless form: openssl is not installed");
        return;
    }
    let ds = daemonset();
    let manifest = &ds.config_map[MANIFEST];
    let keyless = keyless_form(manifest);
    let (plugin_registry, repo, digest) = plugin_reference(manifest);
    assert!(ds.args.first().is_some_and(|a| a == "agent"), "{:?}", ds.args);
    let mirror = format!("{plugin_registry}={}", registry.registry());
    let tmp = tempfile::Builder::new().prefix("durasync-daemonset-trust-").tempdir().unwrap();
    let work = tmp.path();

    // The vendor's side: certsync pushed as `durasync push` publishes it,
    // at the manifest digest the DaemonSet pins.
    push_pinned_certsync(&registry, &repo, &digest, &work.join("vendor-cache"));

    // The vendor's cosign key and the Sigstore test PKI with its trusted root.
    let vendor = p256::ecdsa::SigningKey::from_slice(&[42; 32]).unwrap();
    let vendor_pub = work.join("vendor.pub");
    {
        use p256::pkcs8::EncodePublicKey as _;
        std::fs::write(&vendor_pub, vendor.verifying_key().to_public_key_pem(Default::default()).unwrap())
            .unwrap();
    }
    std::fs::create_dir(work.join("pki")).unwrap();
    let pki = Pki::new(&work.join("pki"));
    let log = Log::new(7);
    let trusted_root = work.join("trusted_root.json");
    std::fs::write(&trusted_root, pki.trusted_root(&[&log])).unwrap();
    let leaf =
        |subject: &str, issuer: &str| -> Leaf { pki.leaf(&format!("URI:{subject}"), issuer, false, 1) };
    let release = leaf(WORKFLOW, GITHUB);
    let attach =
        |bundle: &[u8]| attach_by_tag_as(&registry.registry(), &repo, &digest, &[(bundle, sig::V03)]);

    let run = |node: &Node| node.agent_once(&ds.args, &ds.env, &mirror);
    let synced = |name: &str, node: &Node, out: &Output| {
        assert!(out.status.success(), "{name}: the agent failed:\n{}", text(out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("ok kube-apiserver-certs:"),
            "{name}:\n{}",
            text(out)
        );
        let written = node.written();
        assert!(written.iter().any(|p| p.starts_with("secrets/aggregator-client/")), "{name}: {written:?}");
        assert!(node.compiled() > 0, "{name}: nothing compiled in {}", node.dir.display());
        snapshot(&node.root()).unwrap()
    };

    // The key form as shipped: the key's bundle through the referrers tag.
    attach(&bundle(By::Key(&vendor), &digest, &log));
    let by_key = Node::new(work, "key", manifest, &vendor_pub, &trusted_root);
    let key_tree = synced("key", &by_key, &run(&by_key));

    // The keyless form: the release workflow's bundle replaces it.
    attach(&bundle(By::Cert(&release), &digest, &log));
    let by_identity = Node::new(work, "keyless", &keyless, &vendor_pub, &trusted_root);
    assert_eq!(
        synced("keyless", &by_identity, &run(&by_identity)),
        key_tree,
        "the two forms wrote different trees"
    );

    // Refusals of the keyless form, each on a fresh node (an empty cache):
    // exit 13, the reason named, nothing compiled, nothing written.
    let refused = |name: &str, why: &str| {
        let node = Node::new(work, name, &keyless, &vendor_pub, &trusted_root);
        let out = run(&node);
        assert_eq!(out.status.code(), Some(ONCE_FAILED), "{name}: expected exit 13:\n{}", text(&out));
        assert!(text(&out).contains(why), "{name}: the refusal does not say {why:?}:\n{}", text(&out));
        assert_eq!((node.written(), node.compiled()), (vec![], 0), "{name}: written, compiled");
    };
    let test_workflow = "https://github.com/vendor/plugins/.github/workflows/test.yml@refs/heads/main";
    attach(&bundle(By::Cert(&leaf(test_workflow, GITHUB)), &digest, &log));
    refused("identity", &format!("{test_workflow} (issuer {GITHUB}) is none of the policy's"));
    let gitlab = "https://gitlab.com";
    attach(&bundle(By::Cert(&leaf(WORKFLOW, gitlab)), &digest, &log));
    refused("issuer", &format!("{WORKFLOW} (issuer {gitlab}) is none of the policy's"));
    // The release workflow's bundle, but over another artifact.
    let other = format!("sha256:{}", "0".repeat(64));
    attach(&bundle(By::Cert(&release), &other, &log));
    refused("artifact", &format!("the bundle signs digest {other}, not {digest}"));
    // The release workflow's bundle over this digest, but the component's
    // bytes changed in the registry's storage (the registry serves them
    // unchecked): the layer digest the manifest names no longer matches.
    attach(&bundle(By::Cert(&release), &digest, &log));
    let component = manifest
        .lines()
        .find_map(|l| l.strip_prefix("sha256 = \""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap_or_else(|| panic!("the manifest pins no component sha256:\n{manifest}"));
    let blob = registry
        .dir()
        .join(format!("storage/docker/registry/v2/blobs/sha256/{}/{component}/data", &component[..2]));
    let mut bytes = std::fs::read(&blob).unwrap_or_else(|e| panic!("{}: {e}", blob.display()));
    *bytes.last_mut().unwrap() ^= 1;
    let changed = oci_digest(&bytes);
    std::fs::write(&blob, bytes).unwrap();
    refused(
        "tampered",
        &format!("wasm layer: the registry sent content whose digest is {changed}, not sha256:{component}"),
    );

    // The registry goes away: both forms verify and sync again from their
    // nodes' caches (the bundle found before, the verified blob).
    registry.stop();
    for (name, node) in [("key offline", &by_key), ("keyless offline", &by_identity)] {
        std::fs::remove_dir_all(node.root()).unwrap();
        std::fs::create_dir(node.root()).unwrap();
        assert_eq!(synced(name, node, &run(node)), key_tree, "{name}");
    }
}
