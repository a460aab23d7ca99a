//! The shipped systemd unit under a real systemd: a minimal Debian rootfs
//! (`debootstrap --variant=minbase`, cached under `target/`) booted with
//! `systemd-nspawn -b` (systemd 252 as PID 1), with the unit bind-mounted
//! exactly as `contrib/systemd/durasync-agent.service` ships it, the
//! test-built `durasync` and the certsync component. `systemd/node.sh` runs
//! inside as a oneshot unit and ends the container with `systemctl exit N`;
//! this side gives it its files, reads its `ok: ID` lines and checks the
//! trees it left on the host-side `/etc/kubernetes`.
//!
//! Needs root, `debootstrap` and `systemd-nspawn` (`systemd-container`);
//! without them `support::cannot_check` (a failure under CI).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{certsync_wasm, generation_of, leftovers, list, sha256_of_file, support};

/// The Debian release of the rootfs (the one this project's machines run).
const SUITE: &str = "bookworm";
const MIRROR: &str = "http://deb.debian.org/debian";

/// One boot and its checks may take this long before the test fails (a
/// failure bound, not a timing: a boot and both scripts take ~15 s here).
const BOOT_DEADLINE: Duration = Duration::from_secs(600);

/// One boot at a time: two containers on a 2-core machine only make each
/// slower, and the first one builds the rootfs.
static BOOTS: Mutex<()> = Mutex::new(());

/// Why this machine cannot boot the rootfs, if it cannot.
fn missing_prerequisite() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("booting a container with systemd-nspawn needs root".into());
    }
    for (tool, package) in [("debootstrap", "debootstrap"), ("systemd-nspawn", "systemd-container")] {
        if !support::on_path(tool) {
            return Some(format!("{tool} is not installed (apt-get install {package})"));
        }
    }
    None
}

/// The cached rootfs: `target/systemd-rootfs/bookworm`, built once by
/// debootstrap and never written afterwards (every boot is `--volatile=overlay`).
/// It is built in a temporary sibling and renamed into place when
/// debootstrap succeeded, so an interrupted or failed build is never
/// reused; a file lock serialises test processes that race for it.
fn rootfs() -> PathBuf {
    let dir = support::wasm::target_dir().parent().unwrap().join("systemd-rootfs");
    std::fs::create_dir_all(&dir).unwrap();
    let root = dir.join(SUITE);
    let lock = std::fs::File::create(dir.join(".lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    // Leftovers of a build that did not finish (killed: the lock is ours,
    // so no build is running).
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with(&format!("{SUITE}.partial-")) {
            remove_partial(&path);
        }
    }
    if root.join("usr/lib/os-release").is_file() {
        return root;
    }
    let partial = dir.join(format!("{SUITE}.partial-{}", std::process::id()));
    let start = Instant::now();
    // Three tries: a mirror's hiccup must not fail the suite; a failed try's
    // tree is removed before the next.
    let mut failures = Vec::new();
    for _ in 0..3 {
        // `timeout`: a stalled download fails the try instead of the suite's clock.
        let out = Command::new("timeout")
            .args([
                "600",
                "debootstrap",
                "--variant=minbase",
                "--include=systemd,systemd-sysv,dbus,procps",
                SUITE,
            ])
            .arg(&partial)
            .arg(MIRROR)
            .output()
            .unwrap();
        if out.status.success() {
            break;
        }
        failures.push(format!(
            "debootstrap failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
        if partial.exists() {
            remove_partial(&partial);
        }
    }
    assert!(failures.len() < 3, "{}", failures.join("\n"));
    std::fs::rename(&partial, &root).unwrap();
    eprintln!("debootstrap {SUITE} into {}: {:.1} s", root.display(), start.elapsed().as_secs_f64());
    root
}

/// The mount points at or beneath `dir`, deepest first.
fn mounts_beneath(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| Path::new(p).starts_with(dir))
        .map(str::to_owned)
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points
}

/// Remove a debootstrap target that did not finish. debootstrap mounts
/// /proc and /sys (and may bind the host's /dev) inside it: detach those
/// first, and never remove while anything is still mounted there (that
/// would delete through the mount).
fn remove_partial(dir: &Path) {
    for p in mounts_beneath(dir) {
        let _ = Command::new("umount").arg("--lazy").arg(&p).status();
    }
    let left = mounts_beneath(dir);
    assert!(left.is_empty(), "cannot remove {}: still mounted beneath it: {left:?}", dir.display());
    std::fs::remove_dir_all(dir).unwrap_or_else(|e| panic!("removing {}: {e}", dir.display()));
}

/// The "Install the unit" commands of docs/agent.md, as a script run from a
/// checkout at /src.
fn documented_install_commands() -> String {
    let page = std::fs::read_to_string(support::workspace_root().join("docs/agent.md")).unwrap();
    let start =
        page.find("```sh\n# Install the unit\n").expect("docs/agent.md: no \"# Install the unit\" block");
    let block = &page[start + "```sh\n".len()..];
    let block = &block[..block.find("```").unwrap()];
    assert!(block.contains("systemctl enable --now durasync-agent"), "{block}");
    format!("set -eux\ncd /src\n{block}")
}

/// A node to boot: the files bind-mounted into it and its `/etc/kubernetes`.
struct Node {
    tmp: tempfile::TempDir,
}

impl Node {
    /// `kube_dirs`: the subdirectories of the node's `/etc/kubernetes`.
    fn new(kube_dirs: &[&str]) -> Node {
        let tmp = tempfile::Builder::new().prefix("durasync-systemd-").tempdir().unwrap();
        let node = Node { tmp };
        for d in ["test", "results", "kubernetes"] {
            std::fs::create_dir(node.path(d)).unwrap();
        }
        for d in kube_dirs {
            std::fs::create_dir_all(node.path("kubernetes").join(d)).unwrap();
        }
        // The rootfs's users read what is bind-mounted (the unit runs as root).
        std::fs::set_permissions(node.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let test = node.path("test");
        std::fs::copy(support::workspace_root().join("tests/agent/systemd/node.sh"), test.join("node.sh"))
            .unwrap();
        let wasm = certsync_wasm();
        std::fs::write(test.join("certsync.sha256"), sha256_of_file(&wasm)).unwrap();
        std::fs::write(test.join("install.sh"), documented_install_commands()).unwrap();
        for g in 1..=3 {
            std::fs::write(test.join(format!("gen{g}.json")), list(g)).unwrap();
        }
        // node.sh's exit status becomes nspawn's (`systemctl exit`); a
        // script that hangs is ended by `timeout` all the same.
        std::fs::write(
            test.join("node-test.service"),
            "[Unit]\nDescription=durasync node test\nAfter=multi-user.target\n\
             [Service]\nType=oneshot\nEnvironmentFile=/durasync-test/mode\n\
             ExecStart=/bin/bash -c 'timeout 480 /durasync-test/node.sh \"$MODE\" >/results/log 2>&1; systemctl exit $?'\n",
        )
        .unwrap();
        node
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// Boot the rootfs with this node's files and run `node.sh MODE`:
    /// (exit status, node.sh's output, the journal it saved, the console).
    fn boot(&self, mode: &str) -> (i32, String, String, String) {
        std::fs::write(self.path("test/mode"), format!("MODE={mode}\n")).unwrap();
        let _one = BOOTS.lock().unwrap_or_else(|p| p.into_inner());
        let root = rootfs();
        let bind = |host: &Path, guest: &str, ro: bool| {
            format!("--bind{}={}:{guest}", if ro { "-ro" } else { "" }, host.display())
        };
        let unit = support::workspace_root().join("contrib/systemd/durasync-agent.service");
        let console = std::fs::File::create(self.path("console")).unwrap();
        let start = Instant::now();
        let mut child = Command::new("systemd-nspawn")
            .arg("-D")
            .arg(&root)
            .args(["-b", "--register=no", "--keep-unit", "--private-network", "-q", "--console=read-only"])
            // The cached tree stays pristine: every write goes to a tmpfs.
            .arg("--volatile=overlay")
            .args(if mode == "bare" {
                // A checkout at /src (docs/agent.md's commands install from it)…
                vec![
                    bind(&unit, "/src/contrib/systemd/durasync-agent.service", true),
                    bind(&support::durasync(), "/src/target/release/durasync", true),
                    bind(&certsync_wasm(), "/src/target/wasm/wasm32-wasip2/release/certsync.wasm", true),
                ]
            } else {
                // … or installed: the unit exactly as shipped, read-only.
                vec![
                    bind(&unit, "/etc/systemd/system/durasync-agent.service", true),
                    bind(&support::durasync(), "/usr/local/bin/durasync", true),
                    bind(&certsync_wasm(), "/usr/lib/durasync/certsync.wasm", true),
                ]
            })
            .arg(bind(&self.path("test"), "/durasync-test", true))
            .arg(bind(&self.path("test/node-test.service"), "/etc/systemd/system/node-test.service", true))
            .arg(bind(&self.path("results"), "/results", false))
            .arg(bind(&self.path("kubernetes"), "/etc/kubernetes", false))
            .arg("systemd.wants=node-test.service")
            .stdin(Stdio::null())
            .stdout(console.try_clone().unwrap())
            .stderr(console)
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > BOOT_DEADLINE {
                // SIGTERM makes nspawn power the container off.
                let pid = rustix::process::Pid::from_child(&child);
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                let stop = Instant::now();
                while child.try_wait().unwrap().is_none() && stop.elapsed() < Duration::from_secs(60) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the container did not finish within {BOOT_DEADLINE:?}; node.sh says:\n{}\nconsole:\n{}",
                    self.read("results/log"),
                    self.read("console")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        eprintln!("boot + node.sh {mode}: {:.1} s", start.elapsed().as_secs_f64());
        (
            status.code().unwrap_or(-1),
            self.read("results/log"),
            self.read("results/journal.txt"),
            self.read("console"),
        )
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_default()
    }
}

/// Boot `node` in `mode` and require exit 0 and every check in `ids`.
fn boot_and_check(node: &Node, mode: &str, ids: &[&str]) {
    let (status, log, journal, console) = node.boot(mode);
    let report = format!("node.sh {mode} exited {status}:\n{log}\njournal:\n{journal}\nconsole:\n{console}");
    assert_eq!(status, 0, "{report}");
    for id in ids {
        assert!(log.lines().any(|l| l == format!("ok: {id}")), "no `ok: {id}`: {report}");
    }
    assert!(log.lines().any(|l| l == format!("done: {mode}")), "{report}");
}

#[test]
fn the_unit_runs_under_a_real_systemd_notify_status_reload_hardening_stop_and_watchdog() {
    if let Some(why) = missing_prerequisite() {
        support::cannot_check(&format!("the_unit_runs_under_a_real_systemd: {why}"));
        return;
    }
    let node = Node::new(&["static-pod-resources", "manifests"]);
    boot_and_check(
        &node,
        "control-plane",
        &[
            "programs-essential",
            "activating-during-first-round",
            "active-after-first-round",
            "status-text",
            "action-and-validator",
            "hardening-enforced",
            "reload",
            "stop-during-run",
            "action-owed-across-restart",
            "watchdog-restart",
        ],
    );
    // From the host: the last generation, whole, and no leftovers.
    let certs = node.path("kubernetes/static-pod-resources/certs");
    assert_eq!(generation_of(&certs, 0), Some(3));
    assert_eq!(leftovers(&certs), Vec::<PathBuf>::new());
}

#[test]
fn the_unit_starts_on_a_node_without_the_optional_kubernetes_directories() {
    if let Some(why) = missing_prerequisite() {
        support::cannot_check(&format!("the_unit_starts_on_a_node_without_the_optional_directories: {why}"));
        return;
    }
    let node = Node::new(&[]);
    boot_and_check(
        &node,
        "bare",
        &[
            "installed-as-documented-starts-without-kubernetes-dirs",
            "without-dash-fails-226",
            "starts-without-manifests-dir",
        ],
    );
    let kube = node.path("kubernetes");
    assert_eq!(generation_of(&kube.join("static-pod-resources/certs"), 0), Some(1));
    assert!(!kube.join("manifests").exists());
}
