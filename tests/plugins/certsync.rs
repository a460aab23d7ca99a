//! certsync end to end through `durasync run`: the issue's matrix, once for
//! configmaps and once for secrets, plus the bundled example.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::{Fixture, base64, files, run_manifest, support, wasm};

#[derive(Clone, Copy)]
enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    fn folder(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        }
    }

    fn mode(self) -> u32 {
        match self {
            Kind::ConfigMap => 0o644,
            Kind::Secret => 0o600,
        }
    }

    /// One object of this kind as kubectl prints it.
    fn object(self, name: &str, keys: &[(&str, &str)]) -> String {
        let data: Vec<String> = keys
            .iter()
            .map(|(k, v)| match self {
                Kind::ConfigMap => format!("{k:?}:{v:?}"),
                Kind::Secret => format!("{k:?}:{:?}", base64(v.as_bytes())),
            })
            .collect();
        let kind = match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
        };
        format!(
            r#"{{"apiVersion":"v1","kind":"{kind}","metadata":{{"name":"{name}","namespace":"ns"}},"data":{{{}}}}}"#,
            data.join(",")
        )
    }

    /// The `[config]` table naming `required` and `optional` objects of this kind.
    fn config(self, required: &[&str], optional: &[&str]) -> String {
        let mut entries: Vec<String> = required.iter().map(|n| format!("{{ name = \"{n}\" }}")).collect();
        entries.extend(optional.iter().map(|n| format!("{{ name = \"{n}\", optional = true }}")));
        format!("{} = [{}]", self.folder(), entries.join(", "))
    }

    fn path(self, name: &str) -> String {
        format!("{}/{name}", self.folder())
    }
}

fn list(objects: &[String]) -> Vec<u8> {
    format!(r#"{{"apiVersion":"v1","kind":"List","items":[{}],"metadata":{{}}}}"#, objects.join(","))
        .into_bytes()
}

fn fixture(config: &str) -> Fixture {
    Fixture::new("certsync", &["certs"], config)
}

fn op(op: &str, path: &str, outcome: &str, written: u64, removed: u64) -> (String, String, String, u64, u64) {
    (op.into(), path.into(), outcome.into(), written, removed)
}

fn first_object_is_created_with_its_keys_and_the_kind_s_mode(k: Kind) {
    let f = fixture(&k.config(&["a"], &[]));
    let done = f.run(&list(&[k.object("a", &[("tls.crt", "CRT"), ("tls.key", "KEY")])]));
    assert!(done.ok().contains("a: created (2 written, 0 removed)"), "{done:#?}");
    assert_eq!(done.ops(), [op("sync", &k.path("a"), "created", 2, 0)]);
    let files = f.files("certs");
    assert_eq!(files[&format!("{}/tls.crt", k.path("a"))], (k.mode(), b"CRT".to_vec()));
    assert_eq!(files[&format!("{}/tls.key", k.path("a"))], (k.mode(), b"KEY".to_vec()));
    assert_eq!(files.len(), 2);
}

fn adding_an_object_creates_it_and_leaves_the_first_unchanged(k: Kind) {
    let f = fixture(&k.config(&["a"], &[]));
    let a = k.object("a", &[("ca.crt", "A")]);
    f.run(&list(std::slice::from_ref(&a))).ok();
    f.set_config(&k.config(&["a", "b"], &[]));
    let done = f.run(&list(&[a, k.object("b", &[("ca.crt", "B")])]));
    done.ok();
    assert_eq!(
        done.ops(),
        [op("sync", &k.path("a"), "unchanged", 0, 0), op("sync", &k.path("b"), "created", 1, 0)]
    );
    assert_eq!(f.files("certs")[&format!("{}/ca.crt", k.path("b"))], (k.mode(), b"B".to_vec()));
}

fn updating_an_object_replaces_its_directory_as_a_whole(k: Kind) {
    let f = fixture(&k.config(&["a"], &[]));
    f.run(&list(&[k.object("a", &[("tls.crt", "old crt"), ("tls.key", "old key"), ("extra", "x")])])).ok();
    let done = f.run(&list(&[k.object("a", &[("tls.crt", "new crt"), ("tls.key", "new key")])]));
    done.ok();
    assert_eq!(done.ops(), [op("sync", &k.path("a"), "replaced", 2, 1)]);
    let files = f.files("certs");
    let p = k.path("a");
    assert_eq!(files[&format!("{p}/tls.crt")], (k.mode(), b"new crt".to_vec()));
    assert_eq!(files[&format!("{p}/tls.key")], (k.mode(), b"new key".to_vec()));
    assert_eq!(files.len(), 2, "{files:?}");
}

fn missing_optional_object_succeeds_and_writes_nothing(k: Kind) {
    let f = fixture(&k.config(&[], &["a"]));
    let done = f.run(&list(&[]));
    assert!(done.ok().contains("a: absent (optional, not in the input)"), "{done:#?}");
    assert!(done.ops().iter().all(|o| o.2 == "unchanged" && o.3 == 0), "{:?}", done.ops());
    assert!(!f.root("certs").join(k.path("a")).exists());
    assert!(f.files("certs").is_empty());
}

fn missing_required_object_fails_for_it_and_the_others_are_written(k: Kind) {
    let f = fixture(&k.config(&["a", "b", "c"], &[]));
    let done = f.run(&list(&[k.object("a", &[("f", "A")]), k.object("c", &[("f", "C")])]));
    let err = done.plugin_error();
    assert!(err.contains("1 of 3 object(s) failed"), "{err}");
    assert!(err.contains(" b: required, but not in the input"), "{err}");
    assert_eq!(
        done.ops(),
        [op("sync", &k.path("a"), "created", 1, 0), op("sync", &k.path("c"), "created", 1, 0)],
        "what was written is reported even though the run failed"
    );
    let files = f.files("certs");
    assert_eq!(
        files.keys().cloned().collect::<Vec<_>>(),
        [format!("{}/f", k.path("a")), format!("{}/f", k.path("c"))]
    );
}

fn deleted_optional_object_has_its_directory_removed(k: Kind) {
    let f = fixture(&k.config(&["a"], &["b"]));
    f.run(&list(&[k.object("a", &[("f", "A")]), k.object("b", &[("f", "B"), ("g", "G")])])).ok();
    assert!(f.root("certs").join(k.path("b")).is_dir());
    let done = f.run(&list(&[k.object("a", &[("f", "A")])]));
    assert!(done.ok().contains("b: removed (optional, not in the input)"), "{done:#?}");
    assert_eq!(
        done.ops(),
        [op("sync", &k.path("a"), "unchanged", 0, 0), op("remove", &k.path("b"), "removed", 0, 2)]
    );
    assert!(!f.root("certs").join(k.path("b")).exists());
    let leftovers: Vec<_> = std::fs::read_dir(f.root("certs").join(k.folder()))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != ".durasync.lock")
        .collect();
    assert_eq!(leftovers, ["a"], "no trash left beside the removed directory");
}

fn already_synchronized_objects_are_not_written_again(k: Kind) {
    let f = fixture(&k.config(&["a", "b"], &[]));
    let input = list(&[k.object("a", &[("f", "A")]), k.object("b", &[("f", "B")])]);
    f.run(&input).ok();
    let dir = f.root("certs").join(k.path("a"));
    let (ino, mtime) =
        (std::fs::metadata(&dir).unwrap().ino(), std::fs::metadata(dir.join("f")).unwrap().mtime_nsec());
    let done = f.run(&input);
    assert!(done.ok().contains("a: unchanged"), "{done:#?}");
    assert_eq!(
        done.ops(),
        [op("sync", &k.path("a"), "unchanged", 0, 0), op("sync", &k.path("b"), "unchanged", 0, 0)]
    );
    assert_eq!(std::fs::metadata(&dir).unwrap().ino(), ino, "the directory was not swapped");
    assert_eq!(std::fs::metadata(dir.join("f")).unwrap().mtime_nsec(), mtime, "the file was not rewritten");
}

fn several_objects_sync_at_once_one_operation_each(k: Kind) {
    let names = ["a", "b", "c", "d", "e"];
    let f = fixture(&k.config(&names, &[]));
    let objects: Vec<String> = names
        .iter()
        .map(|n| k.object(n, &[("tls.crt", &format!("crt {n}")), ("tls.key", &format!("key {n}"))]))
        .collect();
    let done = f.run(&list(&objects));
    done.ok();
    let expected: Vec<_> = names.iter().map(|n| op("sync", &k.path(n), "created", 2, 0)).collect();
    assert_eq!(done.ops(), expected);
    let files = f.files("certs");
    assert_eq!(files.len(), 10);
    for n in names {
        assert_eq!(files[&format!("{}/tls.key", k.path(n))], (k.mode(), format!("key {n}").into_bytes()));
    }
}

fn malformed_list_is_a_clear_error_and_writes_nothing(k: Kind) {
    let f = fixture(&k.config(&["a"], &[]));
    f.run(&list(&[k.object("a", &[("f", "old")])])).ok();
    let before = f.files("certs");
    let bad_data = match k {
        Kind::ConfigMap => r#"{"kind":"ConfigMap","metadata":{"name":"a"},"binaryData":{"f":"%%%"}}"#,
        Kind::Secret => r#"{"kind":"Secret","metadata":{"name":"a"},"data":{"f":"%%%"}}"#,
    };
    let cases: [(&[u8], &str); 5] = [
        (b"", "the input is empty"),
        (b"{\"kind\":\"List\",\"items\":[", "the input is not a Kubernetes List"),
        (b"{\"kind\":\"ConfigMap\",\"items\":[]}", "not a List"),
        (b"{\"kind\":\"List\",\"items\":[{\"kind\":\"Secret\"}]}", "missing field `metadata`"),
        (&list(&[bad_data.to_owned()]), "not valid base64"),
    ];
    for (input, message) in cases {
        let done = f.run(input);
        let err = done.plugin_error();
        assert!(err.contains(message), "input {:?}: {err}", String::from_utf8_lossy(input));
        assert!(done.ops().is_empty(), "{:?}", done.ops());
        assert_eq!(f.files("certs"), before, "nothing was written");
    }
}

/// Each behaviour above, once for configmaps and once for secrets.
macro_rules! for_both_kinds {
    ($($case:ident),* $(,)?) => {
        mod configmaps {
            $( #[test] fn $case() { super::$case(super::Kind::ConfigMap) } )*
        }
        mod secrets {
            $( #[test] fn $case() { super::$case(super::Kind::Secret) } )*
        }
    };
}

for_both_kinds!(
    first_object_is_created_with_its_keys_and_the_kind_s_mode,
    adding_an_object_creates_it_and_leaves_the_first_unchanged,
    updating_an_object_replaces_its_directory_as_a_whole,
    missing_optional_object_succeeds_and_writes_nothing,
    missing_required_object_fails_for_it_and_the_others_are_written,
    deleted_optional_object_has_its_directory_removed,
    already_synchronized_objects_are_not_written_again,
    several_objects_sync_at_once_one_operation_each,
    malformed_list_is_a_clear_error_and_writes_nothing,
);

#[test]
fn configmaps_and_secrets_sync_together_and_one_failure_does_not_stop_the_other_kind() {
    let config =
        format!("{}\n{}", Kind::ConfigMap.config(&["ca", "gone"], &[]), Kind::Secret.config(&["tls"], &[]));
    let f = fixture(&config);
    let done = f.run(&list(&[
        Kind::ConfigMap.object("ca", &[("ca.crt", "CA")]),
        Kind::Secret.object("tls", &[("tls.key", "KEY")]),
    ]));
    assert!(done.plugin_error().contains("configmap gone: required, but not in the input"), "{done:#?}");
    let files = f.files("certs");
    assert_eq!(files["configmaps/ca/ca.crt"], (0o644, b"CA".to_vec()));
    assert_eq!(files["secrets/tls/tls.key"], (0o600, b"KEY".to_vec()));
}

#[test]
fn the_committed_manifest_syncs_the_bundled_example_list() {
    let root = support::workspace_root();
    let committed = std::fs::read_to_string(root.join("plugins/certsync/plugin.toml")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // The committed manifest, pointed at this test's build and a temp root.
    let text = committed.replace(
        "wasm = \"../../target/wasm/wasm32-wasip2/release/certsync.wasm\"",
        &format!("wasm = \"{}\"", wasm("certsync").display()),
    );
    assert_ne!(text, committed, "the committed manifest names the built component");
    std::fs::write(tmp.path().join("plugin.toml"), text).unwrap();
    std::fs::create_dir(tmp.path().join("certs")).unwrap();
    let input = std::fs::read(root.join("plugins/certsync/example/list.json")).unwrap();
    let certs = format!("certs={}", tmp.path().join("certs").display());
    let done = run_manifest(&tmp.path().join("plugin.toml"), &input, &["--root", &certs]);
    assert!(done.ok().starts_with("certsync: 7 object(s) in sync"), "{done:#?}");
    let files = files(&tmp.path().join("certs"));
    assert_eq!(files.len(), 9, "{:?}", files.keys());
    assert_eq!(files["secrets/localhost-serving-cert-certkey/tls.key"].0, 0o600);
    assert_eq!(files["configmaps/client-ca/ca-bundle.crt"].0, 0o644);
    assert!(
        files["configmaps/trusted-ca-bundle/ca-bundle.crt"].1.starts_with(b"-----BEGIN CERTIFICATE-----\n")
    );
    let again = run_manifest(&tmp.path().join("plugin.toml"), &input, &["--root", &certs]);
    assert!(again.ops().iter().all(|o| o.2 == "unchanged"), "{:?}", again.ops());
}

/// A root's owner, group and label are the operator's: every file and
/// directory the plugin's sync creates gets them before it is durable,
/// whatever the plugin asked (it can only choose modes).
#[test]
fn a_plugins_files_get_the_roots_owner_group_and_label() {
    if !rustix::process::geteuid().is_root() {
        support::cannot_check("a_plugins_files_get_the_roots_owner_group_and_label: needs root (fchown)");
        return;
    }
    let k = Kind::Secret;
    let f = fixture(&k.config(&["a"], &[]));
    let label = "system_u:object_r:kubernetes_file_t:s0";
    let flags = rustix::fs::XattrFlags::empty();
    if rustix::fs::setxattr(f.root("certs"), "security.selinux", label.as_bytes(), flags).is_err() {
        support::cannot_check(
            "a_plugins_files_get_…: the temporary directory's file system refuses security.*",
        );
        return;
    }
    let manifest = std::fs::read_to_string(f.manifest()).unwrap();
    let manifest = manifest.replace(
        "[roots.certs]\npath = \"certs\"\naccess = \"rw\"\n",
        "[roots.certs]\npath = \"certs\"\naccess = \"rw\"\nowner = \"1000\"\ngroup = \"1001\"\n",
    );
    assert!(manifest.contains("owner = \"1000\""), "{manifest}");
    std::fs::write(f.manifest(), manifest).unwrap();
    f.run(&list(&[k.object("a", &[("tls.crt", "CRT"), ("tls.key", "KEY")])])).ok();
    for rel in ["secrets", "secrets/a", "secrets/a/tls.crt", "secrets/a/tls.key"] {
        let path = f.root("certs").join(rel);
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (1000, 1001), "{rel}");
        let mut buf = vec![0u8; 256];
        let n = rustix::fs::lgetxattr(&path, "security.selinux", &mut buf[..])
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(&buf[..n], label.as_bytes(), "{rel}: the label of the root it was created under");
    }
    assert_eq!(f.files("certs")["secrets/a/tls.key"], (0o600, b"KEY".to_vec()), "the plugin's mode stays");
}

/// A root in the symlink layout: every directory the plugin syncs keeps a
/// link per name into its current generation; a reader follows them to the
/// plugin's files, a repeat changes nothing, a change switches generations.
#[test]
fn a_plugins_syncs_into_a_root_in_the_symlink_layout_are_seen_through_its_links() {
    let k = Kind::Secret;
    let f = fixture(&k.config(&["a"], &[]));
    let manifest = std::fs::read_to_string(f.manifest()).unwrap();
    let manifest = manifest.replace(
        "[roots.certs]\npath = \"certs\"\naccess = \"rw\"\n",
        "[roots.certs]\npath = \"certs\"\naccess = \"rw\"\nlayout = \"symlink\"\n",
    );
    assert!(manifest.contains("layout = \"symlink\""), "{manifest}");
    std::fs::write(f.manifest(), manifest).unwrap();
    let a = f.root("certs").join("secrets/a");
    f.run(&list(&[k.object("a", &[("tls.crt", "CRT"), ("tls.key", "KEY")])])).ok();
    assert_eq!(std::fs::read_link(a.join("tls.crt")).unwrap(), Path::new(".durasync-data/tls.crt"));
    assert_eq!(std::fs::read(a.join("tls.crt")).unwrap(), b"CRT");
    let key = std::fs::metadata(a.join("tls.key")).unwrap();
    assert_eq!(key.permissions().mode() & 0o7777, 0o600, "the plugin's mode, through the link");
    let again = f.run(&list(&[k.object("a", &[("tls.crt", "CRT"), ("tls.key", "KEY")])]));
    assert!(again.ops().iter().all(|o| o.2 == "unchanged"), "{:?}", again.ops());
    f.run(&list(&[k.object("a", &[("tls.crt", "CRT2"), ("tls.key", "KEY")])])).ok();
    assert_eq!(std::fs::read(a.join("tls.crt")).unwrap(), b"CRT2");
    let generations = std::fs::read_dir(&a)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".durasync-gen."))
        .count();
    assert_eq!(generations, 1, "the old generation is removed after the switch");
}
