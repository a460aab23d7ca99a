//! The agent's image under the DaemonSet's memory limit: the container
//! runs, from an empty compile cache, one instance of the example plugin in
//! each language (Rust, Python, JavaScript, Go), every process podman
//! starts held by a memory cgroup limited to the DaemonSet's
//! `resources.limits.memory`, as a kubelet holds a pod's. Every instance
//! must load (its component compiled in a child process, one at a time) and
//! run. A second container under a limit too small for the Python and
//! JavaScript compiles shows that the limit is real: their compile children
//! are killed by the kernel's OOM killer, named as such, and the agent
//! itself lives on and runs the others.
//!
//! Podman on these machines runs with `--cgroups=disabled` (see
//! `image.rs`): it does not make the cgroup, so the test makes one below its
//! own (cgroup v1's memory controller, or v2's) and starts podman in it;
//! podman, conmon and the container stay there. Needs root, podman and a
//! memory controller the test may write; without them `support::cannot_check`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use super::image::{DaemonSet, Podman, build, daemonset, missing_prerequisite, node_volumes, text};
use super::support::toolchains::{self, Lang, Source};
use super::support::{self, sha256_of_file};

/// The example plugin in the three languages built by a toolchain, as
/// tests/plugins builds them.
const EXAMPLES: [Source; 3] = [
    Source { name: "example-py", lang: Lang::Python, dir: "plugins/example-py", flags: &[] },
    Source {
        name: "example-js",
        lang: Lang::JavaScript,
        dir: "plugins/example-js",
        flags: &["-d", "http", "fetch-event"],
    },
    Source { name: "example-go", lang: Lang::Go, dir: "plugins/example-go", flags: &[] },
];

/// A memory cgroup made by the test below its own, removed on drop.
struct MemoryCgroup {
    dir: PathBuf,
    v2: bool,
}

impl MemoryCgroup {
    /// A new cgroup limited to `limit` bytes, or why there cannot be one.
    fn new(name: &str, limit: u64) -> Result<MemoryCgroup, String> {
        let own =
            std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let v1 = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers.split(',').any(|c| c == "memory").then(|| path.to_owned())
        });
        let (base, v2) = match v1 {
            Some(path) => (Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')), false),
            None => {
                let path = own.lines().find_map(|l| l.strip_prefix("0::")).ok_or("no memory cgroup")?;
                (Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')), true)
            }
        };
        let dir = base.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot make the cgroup {}: {e}", dir.display()))?;
        let cgroup = MemoryCgroup { dir, v2 };
        let file = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
        std::fs::write(cgroup.dir.join(file), limit.to_string())
            .map_err(|e| format!("cannot limit {}/{file}: {e}", cgroup.dir.display()))?;
        Ok(cgroup)
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The most memory the cgroup held (page cache included), in bytes.
    fn peak(&self) -> u64 {
        let file = if self.v2 { "memory.peak" } else { "memory.max_usage_in_bytes" };
        std::fs::read_to_string(self.dir.join(file)).map_or(0, |t| t.trim().parse().unwrap_or(0))
    }

    /// How many processes the kernel's OOM killer killed in it.
    fn oom_kills(&self) -> u64 {
        let file = if self.v2 { "memory.events" } else { "memory.oom_control" };
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")).map_or(0, |n| n.trim().parse().unwrap_or(0))
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // The container's processes are gone once `podman run --rm` returned;
        // a straggler is given a moment.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// `resources.limits.memory` of the DaemonSet's container, in bytes.
fn daemonset_memory_limit() -> u64 {
    let yaml =
        std::fs::read_to_string(support::workspace_root().join("contrib/kubernetes/daemonset.yaml")).unwrap();
    let value = yaml
        .lines()
        .skip_while(|l| l.trim() != "limits:")
        .find_map(|l| l.trim().strip_prefix("memory: "))
        .expect("the DaemonSet sets no resources.limits.memory");
    let (number, unit) = value.split_at(value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len()));
    let shift = match unit {
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        other => panic!("a memory unit this test does not read: {other:?} in {value:?}"),
    };
    number.parse::<u64>().unwrap() << shift
}

/// Where each plugin writes, below the DaemonSet's static-pod-resources mount.
const ROOTS: &str = "/etc/kubernetes/static-pod-resources/memory-test";

/// The DaemonSet with its ConfigMap holding one manifest per component in
/// `plugins` (name → .wasm on the host), the components copied to the
/// node's `/var/lib/durasync/plugins/`, the input beside them.
fn with_examples(mut ds: DaemonSet, node: &Path, plugins: &BTreeMap<String, PathBuf>) -> DaemonSet {
    let lib = node.join("var/lib/durasync");
    std::fs::create_dir_all(lib.join("plugins")).unwrap();
    std::fs::write(lib.join("env.txt"), "GREETING=hello\nTARGET=world\n").unwrap();
    ds.config_map.clear();
    for (name, wasm) in plugins {
        std::fs::copy(wasm, lib.join("plugins").join(format!("{name}.wasm"))).unwrap();
        std::fs::create_dir_all(node.join(ROOTS.trim_start_matches('/')).join(name)).unwrap();
        ds.config_map.insert(
            format!("{name}.toml"),
            format!(
                "name = \"{name}\"\nwasm = \"/var/lib/durasync/plugins/{name}.wasm\"\nsha256 = \"{}\"\n\
                 [roots.out]\npath = \"{ROOTS}/{name}\"\naccess = \"rw\"\n\
                 [input]\nfile = \"/var/lib/durasync/env.txt\"\n",
                sha256_of_file(wasm)
            ),
        );
    }
    ds
}

/// The DaemonSet's container once (`--once`) on `node`, as root, in `cgroup`.
fn run_once(podman: &Podman, tag: &str, ds: &DaemonSet, node: &Path, cgroup: &MemoryCgroup) -> Output {
    let keys = BTreeMap::from([("durasync-keys", BTreeMap::from([("vendor.pub", String::new())]))]);
    let mut args: Vec<String> =
        ["run", "--rm", "--network=none", "--cgroups=disabled", "--read-only"].map(String::from).into();
    args.extend(["--cap-drop=all", "--security-opt=no-new-privileges", "--user=0"].map(String::from));
    for (k, v) in &ds.env {
        args.push(format!("--env={k}={v}"));
    }
    args.push("--env=NO_COLOR=1".into());
    args.extend(node_volumes(ds, node, &keys));
    args.push(tag.to_owned());
    args.extend(ds.args.iter().filter(|a| !a.starts_with("--log-format")).cloned());
    args.push("--once".into());
    podman.run_in_cgroup(&cgroup.procs(), &args)
}

/// The `--once` summary line of `name`.
fn summary<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("ok {name}:")) || l.starts_with("failed") && l.contains(name))
        .unwrap_or_else(|| panic!("no summary line for {name}:\n{stdout}"))
}

#[test]
fn the_image_under_the_daemonsets_memory_limit_loads_and_runs_a_plugin_of_each_language_from_a_cold_cache() {
    if let Some(why) = missing_prerequisite() {
        support::cannot_check(&format!("the_image_under_the_daemonsets_memory_limit: {why}"));
        return;
    }
    let limit = daemonset_memory_limit();
    let cgroup = match MemoryCgroup::new("durasync-image-memory", limit) {
        Ok(c) => c,
        Err(why) => {
            support::cannot_check(&format!("the_image_under_the_daemonsets_memory_limit: {why}"));
            return;
        }
    };
    let mut plugins =
        BTreeMap::from([("example-rust".to_owned(), support::wasm::build("Cargo.toml", "example"))]);
    for source in &EXAMPLES {
        plugins.insert(source.name.to_owned(), toolchains::build(source).wasm);
    }
    let podman = Podman::new();
    let work = tempfile::Builder::new().prefix("durasync-image-memory-").tempdir().unwrap();
    let tag = format!("localhost/durasync:memory-{}", std::process::id());
    build(&podman, &tag, &work.path().join("context"));

    // Under the shipped limit, from an empty cache (a fresh emptyDir).
    let node = work.path().join("node");
    let ds = with_examples(daemonset(), &node, &plugins);
    let out = run_once(&podman, &tag, &ds, &node, &cgroup);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "the container's peak under {} MiB: {} MiB (page cache included), OOM kills: {}",
        limit >> 20,
        cgroup.peak() >> 20,
        cgroup.oom_kills()
    );
    assert!(out.status.success(), "the agent under {} MiB:\n{}", limit >> 20, text(&out));
    assert_eq!(cgroup.oom_kills(), 0, "the OOM killer ran under the shipped limit:\n{}", text(&out));
    for name in plugins.keys() {
        let line = summary(&stdout, name);
        assert!(line.starts_with(&format!("ok {name}: env: created (2 written")), "{line}\n{}", text(&out));
        let env = node.join(ROOTS.trim_start_matches('/')).join(name).join("env");
        assert_eq!(std::fs::read(env.join("GREETING")).unwrap(), b"hello\n", "{name}");
        assert_eq!(std::fs::read(env.join("TARGET")).unwrap(), b"world\n", "{name}");
    }
    drop(cgroup);

    // The limit is real: under 128 MiB the big compiles are killed, named,
    // and the agent runs what it could load.
    let small = match MemoryCgroup::new("durasync-image-memory-small", 128 << 20) {
        Ok(c) => c,
        Err(why) => panic!("a second cgroup could not be made: {why}"),
    };
    let node = work.path().join("node-small");
    let ds = with_examples(daemonset(), &node, &plugins);
    let out = run_once(&podman, &tag, &ds, &node, &small);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(super::ONCE_FAILED), "under 128 MiB:\n{}", text(&out));
    assert!(small.oom_kills() > 0, "no OOM kill under 128 MiB:\n{}", text(&out));
    let py = summary(&stdout, "example-py");
    assert!(py.starts_with("failed") && py.contains("killed"), "{py}\n{}", text(&out));
    let rust = summary(&stdout, "example-rust");
    assert!(rust.starts_with("ok example-rust:"), "the agent did not live on: {rust}\n{}", text(&out));
}
