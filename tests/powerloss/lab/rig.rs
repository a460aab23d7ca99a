//! The devices of one round: loop devices, mounts and file systems, each a
//! guard that tears itself down on drop (so a failing round leaves no mount
//! or loop device behind), and the external tools run with a failure bound.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upper bound on any one tool (mkfs, mount, fsck, durasync): a failure
/// bound on a hung device, never a timing assertion.
const TOOL_BOUND: Duration = Duration::from_secs(180);

/// Unmount attempts on EBUSY before a lazy detach (a failure bound).
const UNMOUNT_TRIES: usize = 250;

/// `losetup --find` picks a free device and claims it in two steps; lab
/// tests running in parallel take turns.
static LOSETUP: Mutex<()> = Mutex::new(());

/// A file system the lab formats and cuts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fs {
    /// ext4 with its journal (data=ordered, the default).
    Ext4,
    /// xfs (its log).
    Xfs,
    /// btrfs (copy-on-write, log tree for fsync).
    Btrfs,
}

impl Fs {
    /// The name `mount -t` takes.
    pub fn name(self) -> &'static str {
        match self {
            Fs::Ext4 => "ext4",
            Fs::Xfs => "xfs",
            Fs::Btrfs => "btrfs",
        }
    }

    /// The tools a round needs: mkfs and the read-only checker.
    pub fn tools(self) -> [&'static str; 2] {
        match self {
            Fs::Ext4 => ["mkfs.ext4", "e2fsck"],
            Fs::Xfs => ["mkfs.xfs", "xfs_repair"],
            Fs::Btrfs => ["mkfs.btrfs", "btrfs"],
        }
    }

    /// Format the plain file `image` (quietly, forced: it is a fresh file).
    pub fn mkfs(self, image: &Path) {
        let mut cmd = match self {
            // -E nodiscard: nothing to discard on a fresh sparse file.
            Fs::Ext4 => cmd("mkfs.ext4", &["-q", "-F", "-E", "nodiscard"]),
            Fs::Xfs => cmd("mkfs.xfs", &["-q", "-f", "-K"]),
            Fs::Btrfs => cmd("mkfs.btrfs", &["-q", "-f", "-K"]),
        };
        cmd.arg(image);
        check(&mut cmd);
    }

    /// A read-only consistency check of the unmounted device: the output
    /// when it reports a problem.
    pub fn fsck(self, dev: &Path) -> Result<(), String> {
        let mut cmd = match self {
            Fs::Ext4 => cmd("e2fsck", &["-n", "-f"]),
            Fs::Xfs => cmd("xfs_repair", &["-n"]),
            Fs::Btrfs => cmd("btrfs", &["check", "--readonly"]),
        };
        cmd.arg(dev);
        let out = run(&mut cmd);
        if out.status.success() { Ok(()) } else { Err(describe(&cmd, &out)) }
    }
}

/// Images hold 320 MiB (xfs's minimum is 300 MiB); they are sparse, so a
/// copy costs what the file system wrote, not the size.
pub const IMAGE_BYTES: u64 = 320 << 20;

/// A loop device attached to a file; detached on drop.
#[derive(Debug)]
pub struct Loop {
    dev: PathBuf,
}

impl Loop {
    /// Attach `file` to a free loop device, buffered (no direct I/O): the
    /// device's flushes become `fsync` of `file`.
    pub fn attach(file: &Path) -> Loop {
        let _turn = LOSETUP.lock().unwrap_or_else(|p| p.into_inner());
        let mut c = cmd("losetup", &["--find", "--show", "--direct-io=off"]);
        c.arg(file);
        let out = check(&mut c);
        let dev = String::from_utf8(out.stdout).expect("losetup prints a path").trim().to_string();
        assert!(dev.starts_with("/dev/loop"), "losetup printed {dev:?}");
        Loop { dev: PathBuf::from(dev) }
    }

    /// The device node, e.g. `/dev/loop3`.
    pub fn dev(&self) -> &Path {
        &self.dev
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        // A device still held by a lazily unmounted file system is released
        // by the kernel once that lets go (losetup -d sets autoclear).
        let _ = run(cmd("losetup", &["-d"]).arg(&self.dev));
    }
}

/// A mounted file system; unmounted on drop (lazily if it is busy or dead).
#[derive(Debug)]
pub struct Mounted {
    at: PathBuf,
    mounted: bool,
}

impl Mounted {
    /// Mount `dev` as `fs` at `at`: the output when mount refuses.
    pub fn mount(fs: Fs, dev: &Path, at: &Path) -> Result<Mounted, String> {
        let mut c = cmd("mount", &["-t", fs.name()]);
        c.arg(dev).arg(at);
        let out = run(&mut c);
        if out.status.success() {
            Ok(Mounted { at: at.to_path_buf(), mounted: true })
        } else {
            Err(format!("{}--- kernel log (tail)\n{}", describe(&c, &out), kernel_log_tail()))
        }
    }

    /// Unmount now; a file system that cannot be unmounted cleanly (its
    /// disk is gone) is detached lazily. Returns whether the plain unmount
    /// worked.
    pub fn unmount(&mut self) -> bool {
        if !self.mounted {
            return true;
        }
        self.mounted = false;
        // EBUSY can be fleeting: a child another test thread forks holds a
        // copy of our fds (close-on-exec or not) until it execs. Retry a
        // bounded number of times, then detach lazily.
        for _ in 0..UNMOUNT_TRIES {
            match rustix::mount::unmount(&self.at, rustix::mount::UnmountFlags::empty()) {
                Ok(()) => return true,
                Err(rustix::io::Errno::BUSY) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break,
            }
        }
        let _ = rustix::mount::unmount(&self.at, rustix::mount::UnmountFlags::DETACH);
        false
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// The kernel log's last lines (why a mount failed), or why not readable.
pub fn kernel_log_tail() -> String {
    match cmd("dmesg", &[]).output() {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(15)..].join("\n")
        }
        Err(e) => format!("(dmesg: {e})"),
    }
}

/// A command with arguments (the program found by [`program`]).
pub fn cmd(name: &str, args: &[&str]) -> Command {
    let mut c = Command::new(program(name).unwrap_or_else(|| PathBuf::from(name)));
    c.args(args);
    c
}

/// Run to completion with [`TOOL_BOUND`] as a failure bound (the process
/// is killed and the test fails past it).
pub fn run(c: &mut Command) -> Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {c:?}: {e}"));
    // Drain the pipes on threads so a chatty tool cannot block on a full one.
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut buf);
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut buf);
        buf
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for a child") {
            break status;
        }
        if start.elapsed() > TOOL_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{c:?} did not finish within {TOOL_BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output { status, stdout: out_reader.join().expect("reader"), stderr: err_reader.join().expect("reader") }
}

/// Run and insist on success.
pub fn check(c: &mut Command) -> Output {
    let out = run(c);
    assert!(out.status.success(), "{}", describe(c, &out));
    out
}

/// The command and its outcome, for a failure message.
pub fn describe(c: &Command, out: &Output) -> String {
    format!(
        "{c:?}: {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Copy an image, keeping it sparse (the golden image into a round's).
pub fn copy_image(from: &Path, to: &Path) {
    check(cmd("cp", &["--sparse=always"]).arg(from).arg(to));
}

/// Where the tool `name` is: on the PATH, or in the sbin directories a
/// non-login root shell may leave off it (mkfs, losetup, fsck live there).
pub fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
