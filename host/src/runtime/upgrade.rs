//! Replacing a component's Winch artifact with a Cranelift one, in the
//! background.
//!
//! The first load of a component the cache does not hold runs the artifact
//! Winch compiled (`cache.rs`) and calls `start`: a detached process of
//! the same binary (the compile child's subcommand with `--upgrade`):
//!
//! 1. takes the cache directory's upgrade lock (`.upgrade.lock`, `flock`):
//!    one upgrade at a time per cache. A busy lock ends this one; a later
//!    load of the Winch artifact starts it again. Holding it, the process
//!    says so on stdout and reads the component on stdin; `start` returns
//!    then, and the rest runs with nobody waiting for it. While the lock is
//!    held, a load of a remembered component runs the Winch artifact
//!    without reading the component (`under_way`);
//! 2. compiles with Cranelift in a compile child, with that child's deadline
//!    and lower priority (`OutOfProcess::compile`), which stores the
//!    artifact atomically. Like every compile child it waits for the cache's
//!    compile lock ([`compiler::COMPILE_LOCK`]): one compile at a time, so
//!    a node's memory holds one compile's peak, and a first start of
//!    another component may wait behind this compile;
//! 3. removes the Winch artifact. A process that loaded it keeps its
//!    mapping; later loads find the Cranelift artifact.
//!
//! A failed compile leaves a note beside the Cranelift artifact's path
//! (`….cwasm.failed`, holding the reason): the Winch artifact stays in use
//! and no later load retries. `durasync compile` compiles with Cranelift
//! whatever the note says.
//!
//! `durasync run` exits while the upgrade compiles; the agent reaps the
//! process from a thread. The process runs in its own process group, so a
//! signal to the caller's group does not end it.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::artifact;
use super::compiler::{self, Compiler, OutOfProcess};
use super::errors::Error;

/// The lock file in the cache directory that one upgrade holds.
const LOCK: &str = ".upgrade.lock";

/// How long a load waits for the upgrade process to take the lock and the
/// component: a start of the binary and a pipe copy, on a loaded node.
const ACK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// The note a failed upgrade leaves for the Cranelift artifact `artifact`.
fn note(artifact: &Path) -> PathBuf {
    let mut name = artifact.as_os_str().to_owned();
    name.push(".failed");
    PathBuf::from(name)
}

/// Why the upgrade to the Cranelift artifact `artifact` failed, when one did.
pub(crate) fn failed(artifact: &Path) -> Option<String> {
    std::fs::read_to_string(note(artifact)).ok().map(|s| s.trim().to_owned())
}

/// Whether an upgrade holds the upgrade lock of the cache directory `dir`.
///
/// A load that sees one under way runs the Winch artifact without reading
/// the component (nothing to start). The probe holds a shared lock for the
/// length of one system call; an upgrade that starts in that instant finds
/// the lock busy and ends, and the next load starts it again.
pub(crate) fn under_way(dir: &Path) -> bool {
    let Ok(lock) = std::fs::File::open(dir.join(LOCK)) else { return false };
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockShared)
        == Err(rustix::io::Errno::WOULDBLOCK)
}

/// Start the upgrade of the Winch artifact `replaces` to a Cranelift one at
/// `artifact` in a detached process (`child`'s program and arguments with
/// `--upgrade`). Returns once the process holds the upgrade lock and has
/// read the component (or has ended because another upgrade holds the
/// lock), so a load right after this one sees the upgrade under way; a
/// failure to start it is logged, and the Winch artifact stays in use.
pub(crate) fn start(child: &OutOfProcess, wasm: &[u8], sha256: &str, artifact: &Path, replaces: &Path) {
    start_within(child, wasm, sha256, artifact, replaces, ACK_DEADLINE);
}

/// [`start`], waiting at most `deadline` for the process's answer.
fn start_within(
    child: &OutOfProcess,
    wasm: &[u8],
    sha256: &str,
    artifact: &Path,
    replaces: &Path,
    deadline: std::time::Duration,
) {
    let spawned = Command::new(&child.program)
        .args(&child.args)
        .arg("--upgrade")
        .arg("--replaces")
        .arg(replaces)
        .arg("--compiler")
        .arg(Compiler::Cranelift.name())
        .arg("--artifact")
        .arg(artifact)
        .arg("--sha256")
        .arg(sha256)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env("DURASYNC_LOG", "warn")
        .env("NO_COLOR", "1")
        .process_group(0)
        .spawn();
    let mut process = match spawned {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(
                "cache: cannot start the Cranelift compile of {sha256} ({}): {e}",
                child.program.display()
            );
            return;
        }
    };
    // The process takes the lock, says so with one byte on stdout, then
    // reads the whole component before it compiles: this returns within a
    // pipe copy. A process that found the lock busy ends without reading
    // (the write fails, the byte never comes). One that neither answers nor
    // reads within ACK_DEADLINE is killed (its group), which ends the
    // write and the read: a load never waits longer for it.
    let (mut stdin, mut stdout) =
        (process.stdin.take().expect("piped"), process.stdout.take().expect("piped"));
    let (done, answered) = std::sync::mpsc::channel();
    let (wrote, locked) = std::thread::scope(|scope| {
        let talk = scope.spawn(move || {
            let wrote = stdin.write_all(wasm);
            drop(stdin);
            let mut ack = [0u8; 1];
            let locked = stdout.read(&mut ack).is_ok_and(|n| n == 1);
            let _ = done.send(());
            (wrote, locked)
        });
        if answered.recv_timeout(deadline).is_err() {
            tracing::warn!("cache: the Cranelift compile of {sha256} did not answer in {deadline:?}; ended");
            crate::spawn::child::kill_group(&mut process);
        }
        talk.join().unwrap_or_else(|_| (Err(std::io::Error::other("panicked")), false))
    });
    match (locked, wrote) {
        (true, Ok(())) => {
            tracing::info!(sha256, pid = process.id(), "cache: compiling with Cranelift in the background")
        }
        (true, Err(e)) => {
            tracing::warn!("cache: the Cranelift compile of {sha256} did not take the component: {e}")
        }
        (false, _) => tracing::info!(
            "cache: another Cranelift compile holds the cache's upgrade lock; a later load upgrades {sha256}"
        ),
    }
    // Reaped when it ends (a one-shot caller exits first; init reaps it).
    std::thread::spawn(move || process.wait());
}

/// The upgrade process's side (`--upgrade`): read the component (checked
/// against `sha256`), then the steps of the module docs, compiling in a
/// child started as `child` says.
pub fn serve(child: &OutOfProcess, artifact: &Path, sha256: &str, replaces: &Path) -> Result<(), Error> {
    // It holds the whole component until its compile child has it.
    compiler::be_the_first_oom_victim();
    let dir = artifact.parent().unwrap_or(Path::new("."));
    let io = |what: String| move |e: std::io::Error| Error::Io { what, source: e };
    // Only a Winch artifact beside the one this stores is ever removed.
    let winch = replaces.parent() == Some(dir)
        && replaces.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with("-winch.cwasm"));
    if !winch {
        let why = format!("{} is not a Winch artifact beside {}", replaces.display(), artifact.display());
        return Err(io("checking --replaces".into())(std::io::Error::other(why)));
    }
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(dir.join(LOCK))
        .map_err(io(format!("opening {}", dir.join(LOCK).display())))?;
    match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        // Another upgrade is under way.
        Err(rustix::io::Errno::WOULDBLOCK) => return Ok(()),
        Err(e) => return Err(io(format!("locking {}", dir.join(LOCK).display()))(e.into())),
    }
    // The caller waits for this byte: from here a load sees the upgrade
    // under way (`under_way`) and does not start another.
    let mut stdout = std::io::stdout();
    let _ = stdout.write_all(b"L").and_then(|()| stdout.flush());
    let wasm = compiler::read_component(sha256)?;
    if failed(artifact).is_some() {
        // An earlier upgrade failed: Winch's artifact stays.
        return Ok(());
    }
    let engine = compiler::engine(Compiler::Cranelift)?;
    let done = matches!(artifact::try_load(&engine, artifact), Ok(Some(_)));
    if !done && let Err(why) = child.compile(Compiler::Cranelift, &wasm, sha256, artifact) {
        let _ = write_note(artifact, &why);
        return Err(Error::Io {
            what: format!("compiling {sha256} with Cranelift"),
            source: std::io::Error::other(why),
        });
    }
    match std::fs::remove_file(replaces) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(io(format!("removing {}", replaces.display()))(e))
        }
        _ => Ok(()),
    }
}

/// Write the failure note for `artifact` (temporary file, rename).
fn write_note(artifact: &Path, why: &str) -> std::io::Result<()> {
    let path = note(artifact);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    writeln!(f, "{why}")?;
    std::fs::rename(&tmp, &path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_ends_an_upgrade_process_that_neither_reads_nor_answers_by_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        // A process that records its pid and then sleeps, never reading
        // stdin: a component larger than a pipe's buffer blocks the write.
        let script = format!("echo $$ > {}; exec sleep 600", pid_file.display());
        let child = OutOfProcess {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into(), "sh".into()],
            timeout: std::time::Duration::from_secs(600),
        };
        let wasm = vec![0u8; 4 << 20];
        let (artifact, replaces) = (dir.path().join("a.cwasm"), dir.path().join("a-winch.cwasm"));
        let started = std::time::Instant::now();
        start_within(&child, &wasm, "00", &artifact, &replaces, std::time::Duration::from_secs(2));
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "{:?}", started.elapsed());
        let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        let pid = rustix::process::Pid::from_raw(pid).unwrap();
        // Killed and reaped: no such process any more.
        assert_eq!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH));
    }
}
