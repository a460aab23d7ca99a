//! One file system's lab: a golden image holding generation A, then rounds.
//! A round copies the golden image, serves the copy through a volatile disk,
//! attaches a buffered loop device to it, mounts, runs a workload, cuts the
//! power, tears everything down, attaches the backing copy directly, mounts
//! (the journal or log replays), runs `durasync recover` and judges what it
//! finds.

use std::fs;
use std::path::{Path, PathBuf};

use durasync_powerloss::{CutMode, CutPlan, PowerSwitch, Stats, VolatileDisk};

use crate::rig::{Fs, IMAGE_BYTES, Loop, Mounted, check, cmd, copy_image, describe, run};
use crate::support::{durasync, sha256_of_file};
use crate::trees::{self, Contents, Entry};

/// The directory inside each image that holds the target and the lone file
/// (so ext4's `lost+found` stays out of the listings).
const SRV: &str = "srv";

/// The owner and group every inode the workload writes gets (`--owner`,
/// `--group`; the plugin's root says the same), and the label of `srv/`,
/// which every inode beneath it carries (a new name takes its parent's,
/// a replacing one the replaced inode's). Checked after every cut.
const OWNER: u32 = 1000;
const LABEL: &[u8] = b"system_u:object_r:kubernetes_file_t:s0";

/// The flags that give a `sync` or `write` the policy's owner and group.
const OWNED: [&str; 4] = ["--owner", "1000", "--group", "1000"];

/// Attempts at mounting the volatile copy before a round starts.
const MOUNT_TRIES: usize = 3;

/// One file system's lab: its scratch directory, golden image, sources and
/// the expected contents of every generation.
pub struct Lab {
    /// The file system under test.
    pub fs: Fs,
    _scratch: tempfile::TempDir,
    dir: PathBuf,
    golden: PathBuf,
    /// Expected target contents for A, B, C.
    gens: [Contents; 3],
    /// The lone file's bytes: before and after the `write`.
    file: [Vec<u8>; 2],
    /// The plugin's manifest (the example plugin, granted `srv/` as `out`).
    manifest: PathBuf,
    /// Expected contents of the plugin's envdir, before and after its run.
    env: [Contents; 2],
    /// The `--flush` the workload's syncs and plugin run are given.
    pub flush: &'static str,
}

/// How a round ended, before judging.
#[derive(Debug, Default)]
pub struct Observed {
    /// The workload's steps that reported success, in order.
    pub succeeded: usize,
    /// The image's counts at the cut.
    pub stats: Stats,
    /// What broke the rules (empty: old-or-new held).
    pub violations: Vec<String>,
    /// Which generation the target came back as (0 A, 1 B, 2 C), if any.
    pub generation: Option<usize>,
}

/// The workload's steps, run as the real binary: A → B (a sync with every
/// kind of change), B → C (the one-file fast path), the lone file, a
/// plugin run (the example plugin's envdir, through `durasync run`), then
/// C → A keeping C as the target's previous (`sync --keep-previous`) and
/// the revert back to C (`rollback`); then A → B and B → C of a second
/// target in the symlink layout (`linked`, see `durable::layout`).
pub const STEPS: usize = 8;

/// The target's generation (0 A, 1 B, 2 C) once this many steps succeeded.
const GEN_AFTER: [usize; STEPS + 1] = [0, 1, 2, 2, 2, 0, 2, 2, 2];

/// The same for the target in the symlink layout.
const LINKED_GEN_AFTER: [usize; STEPS + 1] = [0, 0, 0, 0, 0, 0, 0, 1, 2];

/// Whether step `i` changes the target in the symlink layout.
fn changes_linked(step: usize) -> bool {
    matches!(step, 6 | 7)
}

/// Whether step `i` changes the target (the others change the lone file
/// and the envdir).
fn changes_target(step: usize) -> bool {
    matches!(step, 0 | 1 | 4 | 5)
}

/// A writer known to be wrong, run against the same rig.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Copy B beside the target, rename it over (via an old name), no fsync
    /// at all; then another program fsyncs an unrelated file, then the cut.
    CopyRename,
    /// The same with an fsync of every new directory and of the parent
    /// after the renames (but none of the files); the cut right after.
    CopyRenameDirFsync,
    /// Rewrite the target's files in place, each truncated, written and
    /// fsynced (like `rsync --inplace --fsync`), changed files first; the
    /// cut after the `upto`-th file's fsync returned.
    InPlace {
        /// Files rewritten before the cut (≥ 1, fewer than B has).
        upto: usize,
    },
    /// Not a wrong writer: [`Control::CopyRename`] followed by one
    /// `syncfs(2)` of the mounted file system, then the cut. It must come
    /// back new every time, with the volatile disk flushed during the
    /// `syncfs`: proof that a `syncfs` on this rig reaches the disk (the
    /// file system's commit flushes the loop device, which fsyncs the FUSE
    /// file), so the syncfs rounds test what they claim.
    CopyRenameSyncfs,
}

impl Lab {
    /// Build the sources and the golden image: mkfs on a plain sparse file,
    /// then the real binary syncs A and writes the lone file into it.
    pub fn new(fs: Fs, flush: &'static str) -> Lab {
        let scratch =
            tempfile::Builder::new().prefix(&format!("durasync-powerloss-{}-", fs.name())).tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        for d in ["fuse", "mnt", "src"] {
            fs::create_dir(dir.join(d)).unwrap();
        }
        for g in ['A', 'B', 'C'] {
            trees::materialise(&trees::generation(g), &dir.join("src").join(g.to_string()), false);
        }
        for g in ['A', 'B'] {
            fs::write(dir.join("src").join(format!("file-{g}")), trees::lone_file(g)).unwrap();
        }
        let manifest = plugin_manifest(&dir);
        let env = ['A', 'B'].map(|g| {
            let input = env_input(g);
            fs::write(dir.join("src").join(format!("env-{g}")), &input).unwrap();
            let entries: Vec<Entry> = input
                .lines()
                .map(|l| l.split_once('=').unwrap())
                .map(|(k, v)| (k.to_string(), format!("{v}\n").into_bytes(), 0o644))
                .collect();
            trees::expected(&entries, &dir.join("scratch"))
        });
        let gens = ['A', 'B', 'C'].map(|g| trees::expected(&trees::generation(g), &dir.join("scratch")));
        let golden = dir.join("golden.img");
        fs::File::create(&golden).unwrap().set_len(IMAGE_BYTES).unwrap();
        fs.mkfs(&golden);
        {
            let lp = Loop::attach(&golden);
            let mut m = Mounted::mount(fs, lp.dev(), &dir.join("mnt")).unwrap_or_else(|e| panic!("{e}"));
            let srv = dir.join("mnt").join(SRV);
            fs::create_dir(&srv).unwrap();
            rustix::fs::setxattr(&srv, "security.selinux", LABEL, rustix::fs::XattrFlags::empty())
                .unwrap_or_else(|e| panic!("labelling srv/ on {}: {e}", fs.name()));
            check(
                cmd(durasync().to_str().unwrap(), &["sync"])
                    .arg(srv.join("target"))
                    .arg("--from")
                    .arg(dir.join("src/A"))
                    .args(OWNED),
            );
            check(
                cmd(durasync().to_str().unwrap(), &["sync"])
                    .arg(srv.join("linked"))
                    .arg("--from")
                    .arg(dir.join("src/A"))
                    .args(["--layout", "symlink"])
                    .args(OWNED),
            );
            check(
                cmd(durasync().to_str().unwrap(), &["write"])
                    .arg(srv.join("file"))
                    .arg("--from")
                    .arg(dir.join("src/file-A"))
                    .args(OWNED),
            );
            check(&mut plugin_run(&manifest, &dir.join("src/env-A")));
            assert!(m.unmount(), "unmounting the golden image");
        }
        Lab {
            fs,
            _scratch: scratch,
            dir,
            golden,
            gens,
            file: [trees::lone_file('A'), trees::lone_file('B')],
            manifest,
            env,
            flush,
        }
    }

    /// Run the durasync workload on a volatile copy of the golden image,
    /// cutting by `plan` in `mode` (and in any case once the workload has
    /// ended), then judge what replay and recovery leave: the target is the
    /// generation of the last step that reported success or of the step the
    /// cut interrupted, the lone file likewise, nothing is left over, and
    /// the file system checks clean.
    pub fn durasync_round(&self, plan: CutPlan, mode: CutMode) -> Observed {
        let src = self.dir.join("src");
        let ((succeeded, attempted, mut violations), stats, unmounted) =
            self.powered(plan, mode, |switch, srv| {
                let mut succeeded = 0;
                let mut violations = Vec::new();
                for step in 0..STEPS {
                    let (verb, target, from) = match step {
                        0 => ("sync", srv.join("target"), src.join("B")),
                        1 => ("sync", srv.join("target"), src.join("C")),
                        2 => ("write", srv.join("file"), src.join("file-B")),
                        3 => ("run", self.manifest.clone(), src.join("env-B")),
                        4 => ("sync", srv.join("target"), src.join("A")),
                        5 => ("rollback", srv.join("target"), PathBuf::new()),
                        6 => ("sync", srv.join("linked"), src.join("B")),
                        _ => ("sync", srv.join("linked"), src.join("C")),
                    };
                    let mut c = match verb {
                        "run" => plugin_run(&target, &from),
                        "rollback" => {
                            let mut c = cmd(durasync().to_str().unwrap(), &[verb]);
                            c.arg(target);
                            c
                        }
                        _ => {
                            let mut c = cmd(durasync().to_str().unwrap(), &[verb]);
                            c.arg(target).arg("--from").arg(from).args(OWNED);
                            c
                        }
                    };
                    if step == 4 {
                        c.arg("--keep-previous");
                    }
                    // Step 7 shows that a target in the layout stays in it.
                    if step == 6 {
                        c.args(["--layout", "symlink"]);
                    }
                    if verb != "write" && verb != "rollback" {
                        // The flush decision is logged at debug level.
                        c.arg("--flush").arg(self.flush);
                        c.env("DURASYNC_LOG", "durasync::durable=debug").env("NO_COLOR", "1");
                    }
                    let out = run(&mut c);
                    if out.status.success() {
                        // A forced syncfs must really be the primitive: the
                        // full syncs (A→B, the plugin's envdir) say so.
                        let full_sync = matches!(step, 0 | 3 | 4 | 6);
                        let log = crate::support::strip_ansi(&String::from_utf8_lossy(&out.stderr));
                        if self.flush == "syncfs" && full_sync && !log.contains("syncfs=true") {
                            let skip = log.chars().count().saturating_sub(400);
                            let tail: String = log.chars().skip(skip).collect();
                            violations.push(format!("step {step} did not flush with syncfs: {tail:?}"));
                        }
                        succeeded += 1;
                        continue;
                    }
                    // A step may fail only because the power is gone.
                    if !switch.stats().cut {
                        violations.push(format!("failed with the power on: {}", describe(&c, &out)));
                    }
                    return (succeeded, step + 1, violations);
                }
                (succeeded, STEPS, violations)
            });
        if !unmounted {
            violations.push("the dead file system would not unmount (round void)".into());
        }
        let found = self.after_cut(true);
        violations.extend(found.problems);
        let mut generation = None;
        if let Some(target) = &found.target {
            // The generation of the steps that succeeded, or of the target
            // step the cut interrupted.
            let done = GEN_AFTER[succeeded];
            let interrupted = attempted > succeeded && changes_target(succeeded);
            let allowed = if interrupted { vec![done, GEN_AFTER[succeeded + 1]] } else { vec![done] };
            generation = self.gens.iter().position(|g| g == target);
            match generation {
                Some(g) if allowed.contains(&g) => {}
                Some(g) => violations.push(format!(
                    "target came back as generation {} after {succeeded} step(s) reported success (allowed {allowed:?})",
                    ['A', 'B', 'C'][g]
                )),
                None => violations.push(format!(
                    "target is no generation (neither old nor new): vs {}: {}",
                    ['A', 'B', 'C'][done],
                    trees::diff(target, &self.gens[done])
                )),
            }
            // The kept previous: C exactly while the target is the A that
            // step 4 (the keep-sync C → A) put there; none otherwise (before
            // that swap its staging is stale, after the revert it is gone).
            let want_previous = generation == Some(0) && attempted > 4;
            match (&found.previous[..], want_previous) {
                ([], false) => {}
                ([prev], true) if prev == &self.gens[2] => {}
                ([prev], true) => {
                    violations.push(format!("the kept previous is not C: {}", trees::diff(prev, &self.gens[2])))
                }
                (kept, want) => violations.push(format!(
                    "{} valid previous(es) of the target after {succeeded} step(s) (want {}), the target {:?}",
                    kept.len(),
                    if want { "C" } else { "none" },
                    generation.map(|g| ['A', 'B', 'C'][g])
                )),
            }
        }
        if let Some(linked) = &found.linked {
            let done = LINKED_GEN_AFTER[succeeded];
            let interrupted = attempted > succeeded && changes_linked(succeeded);
            let allowed = if interrupted { vec![done, LINKED_GEN_AFTER[succeeded + 1]] } else { vec![done] };
            match self.gens.iter().position(|g| g == linked) {
                Some(g) if allowed.contains(&g) => {}
                Some(g) => violations.push(format!(
                    "the target in the symlink layout came back as generation {} after {succeeded} step(s) (allowed {allowed:?})",
                    ['A', 'B', 'C'][g]
                )),
                None => violations.push(format!(
                    "the target in the symlink layout is no generation: vs {}: {}",
                    ['A', 'B', 'C'][done],
                    trees::diff(linked, &self.gens[done])
                )),
            }
        }
        // The lone file is step 2, the envdir step 3: before its step it
        // must be old, during it old or new, after its success new.
        let allowed = |step: usize| -> &[usize] {
            if succeeded > step {
                &[1]
            } else if attempted > step {
                &[0, 1]
            } else {
                &[0]
            }
        };
        if let Some(file) = &found.file
            && !allowed(2).iter().any(|&i| &self.file[i] == file)
        {
            violations.push(format!("the lone file is neither allowed version ({} bytes)", file.len()));
        }
        if let Some(env) = &found.env
            && !allowed(3).iter().any(|&i| &self.env[i] == env)
        {
            violations.push(format!(
                "the plugin's envdir is neither allowed version: vs new: {}",
                trees::diff(env, &self.env[1])
            ));
        }
        Observed { succeeded, stats, violations, generation }
    }

    /// Run a known-wrong writer instead of durasync (B over A), cut as the
    /// control says, and judge: old (0), new (1) or a violation.
    pub fn control_round(&self, control: Control) -> Observed {
        let tree = trees::generation('B');
        let ((), stats, unmounted) =
            self.powered(CutPlan::Never, CutMode::DropAll, |switch, srv| match control {
                Control::CopyRename | Control::CopyRenameDirFsync | Control::CopyRenameSyncfs => {
                    let fsync_dirs = control == Control::CopyRenameDirFsync;
                    let new = srv.join(".target.new");
                    trees::materialise(&tree, &new, false);
                    if fsync_dirs {
                        for d in ["newdir/deeper", "newdir", "sub", ""] {
                            fs::File::open(new.join(d)).unwrap().sync_all().unwrap();
                        }
                    }
                    fs::rename(srv.join("target"), srv.join(".target.old")).unwrap();
                    fs::rename(&new, srv.join("target")).unwrap();
                    fs::remove_dir_all(srv.join(".target.old")).unwrap();
                    if control == Control::CopyRenameSyncfs {
                        let before = switch.stats().flushes;
                        let dir = fs::File::open(srv).unwrap();
                        rustix::fs::syncfs(&dir).unwrap();
                        assert!(switch.stats().flushes > before, "a syncfs that flushed nothing to the disk");
                    } else if fsync_dirs {
                        fs::File::open(srv).unwrap().sync_all().unwrap();
                    } else {
                        // Another program's fsync: commits whatever the file
                        // system batches with it, nothing it does not.
                        let mut f = fs::File::create(srv.join("unrelated")).unwrap();
                        std::io::Write::write_all(&mut f, b"someone else's data\n").unwrap();
                        f.sync_all().unwrap();
                    }
                    switch.cut().unwrap();
                }
                Control::InPlace { upto } => {
                    // Changed files first, so the first rewrite already differs
                    // from A; A's removed files would go last.
                    let a = trees::generation('A');
                    let mut order: Vec<&Entry> = tree.iter().collect();
                    order.sort_by_key(|e| a.contains(e));
                    for (rel, data, mode) in order.into_iter().take(upto) {
                        let path = srv.join("target").join(rel);
                        fs::create_dir_all(path.parent().unwrap()).unwrap();
                        let mut f = fs::File::create(&path).unwrap();
                        std::io::Write::write_all(&mut f, data).unwrap();
                        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(*mode)).unwrap();
                        f.sync_all().unwrap();
                    }
                    switch.cut().unwrap();
                }
            });
        let found = self.after_cut(false);
        let mut violations = found.problems;
        if !unmounted {
            violations.push("the dead file system would not unmount (round void)".into());
        }
        let mut generation = None;
        if let Some(target) = &found.target {
            generation = self.gens[..2].iter().position(|g| g == target);
            if generation.is_none() {
                violations.push(format!("neither old nor new: vs B: {}", trees::diff(target, &self.gens[1])));
            }
        }
        Observed { succeeded: 0, stats, violations, generation }
    }

    /// Copy the golden image, serve it through a volatile disk, attach,
    /// mount, arm the cut, run `work` on the mounted `srv/`, cut, and tear
    /// it all down. Returns what `work` returned, the counts at the cut and
    /// whether the dead file system unmounted (a lazily detached one could
    /// still be alive when its copy is mounted: the round is then void).
    fn powered<T>(
        &self,
        plan: CutPlan,
        mode: CutMode,
        work: impl FnOnce(&PowerSwitch, &Path) -> T,
    ) -> (T, Stats, bool) {
        let image = self.round_image();
        let _ = fs::remove_file(&image);
        copy_image(&self.golden, &image);
        let disk = VolatileDisk::mount(&image, &self.dir.join("fuse")).expect("mounting the volatile disk");
        let switch = disk.switch();
        let lp = Loop::attach(&disk.image_path());
        // Nothing is armed yet, so a failed mount here is no outcome of any
        // cut: try again (bounded), then give up loudly.
        let mut tries = 0;
        let mut m = loop {
            match Mounted::mount(self.fs, lp.dev(), &self.dir.join("mnt")) {
                Ok(m) => break m,
                Err(e) if tries < MOUNT_TRIES => {
                    tries += 1;
                    eprintln!("{}: mounting the volatile copy failed, trying again: {e}", self.fs.name());
                }
                Err(e) => panic!("{e}"),
            }
        };
        switch.arm(plan, mode);
        let out = work(&switch, &self.dir.join("mnt").join(SRV));
        // The cut comes at the latest here: whatever was not flushed by now
        // is lost, as it would be if the power went right after the workload.
        switch.cut().expect("cutting the power");
        let stats = switch.stats();
        // Teardown order: the dead file system, then the loop device, then
        // the FUSE mount (the guards also do this on a panic).
        let unmounted = m.unmount();
        drop(m);
        drop(lp);
        drop(disk);
        (out, stats, unmounted)
    }

    /// After the cut: attach the backing copy directly, mount (replay), run
    /// `durasync recover`, read the target and the lone file, look for
    /// leftovers, unmount and run the read-only checker.
    fn after_cut(&self, policy: bool) -> Found {
        let mut found = Found::default();
        let lp = Loop::attach(&self.round_image());
        let mnt = self.dir.join("mnt");
        let mut m = match Mounted::mount(self.fs, lp.dev(), &mnt) {
            Ok(m) => m,
            Err(e) => {
                found.problems.push(format!("does not mount after the cut: {e}"));
                return found;
            }
        };
        let srv = mnt.join(SRV);
        let mut c = cmd(durasync().to_str().unwrap(), &["recover"]);
        c.arg(&srv);
        let out = run(&mut c);
        if !out.status.success() {
            found.problems.push(format!("recover failed: {}", describe(&c, &out)));
        }
        let listing: Vec<String> = fs::read_dir(&srv)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let left = trees::leftovers(&srv);
        if !left.is_empty() {
            found.problems.push(format!("leftovers after recover: {left:?}"));
        }
        let extra: Vec<&String> = listing
            .iter()
            .filter(|n| {
                !["target", "linked", "file", "env", "unrelated"].contains(&n.as_str()) && !trees::kept(n)
            })
            .filter(|n| !trees::is_previous(&srv.join(n)))
            .filter(|n| !n.starts_with(".target."))
            .collect();
        if !extra.is_empty() {
            found.problems.push(format!("unexpected entries beside the target: {extra:?}"));
        }
        found.previous = listing
            .iter()
            .filter(|n| durasync::durable::names::keep_of(n, "target").is_some())
            .map(|n| srv.join(n))
            .filter(|p| trees::is_previous(p) && p.is_dir())
            .map(|p| trees::contents(&p))
            .collect();
        // Every inode of the target, the lone file and the envdir (and a
        // kept previous) has the policy's owner and the label of srv/.
        // (The known-wrong writers of the control rounds have no policy.)
        let keep_of_target = |n: &str| durasync::durable::names::keep_of(n, "target").is_some();
        for name in listing.iter().filter(|n| {
            policy && (["target", "linked", "file", "env"].contains(&n.as_str()) || keep_of_target(n))
        }) {
            found.problems.extend(owner_and_label_problems(&srv.join(name), name));
        }
        let target = srv.join("target");
        if target.is_dir() {
            found.target = Some(trees::contents(&target));
        } else {
            found.problems.push("the target is gone".into());
        }
        // Only the durasync workload makes it (the controls' golden image too).
        match trees::linked_contents(&srv.join("linked")) {
            Ok(c) => found.linked = Some(c),
            Err(e) => found.problems.push(format!("the target in the symlink layout: {e}")),
        }
        found.file = fs::read(srv.join("file")).ok();
        let env = srv.join("env");
        if env.is_dir() {
            found.env = Some(trees::contents(&env));
        } else {
            found.problems.push("the plugin's envdir is gone".into());
        }
        if found.file.is_none() {
            found.problems.push("the lone file is gone".into());
        }
        if !m.unmount() {
            found.problems.push("the recovered file system would not unmount".into());
        }
        drop(m);
        if let Err(e) = self.fs.fsck(lp.dev()) {
            found.problems.push(format!("fsck after replay: {e}"));
        }
        found
    }

    fn round_image(&self) -> PathBuf {
        self.dir.join("round.img")
    }
}

/// What the recovered file system held.
#[derive(Debug, Default)]
struct Found {
    target: Option<Contents>,
    /// What a reader sees through the links of the target in the symlink layout.
    linked: Option<Contents>,
    /// The contents of every valid kept previous of the target.
    previous: Vec<Contents>,
    file: Option<Vec<u8>>,
    env: Option<Contents>,
    problems: Vec<String>,
}

/// Every file and directory at or beneath `path` (shown as `shown`) whose
/// owner, group or label is not the workload's policy.
fn owner_and_label_problems(path: &Path, shown: &str) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut problems = Vec::new();
    let mut stack = vec![(path.to_path_buf(), shown.to_owned())];
    while let Some((p, shown)) = stack.pop() {
        let meta = fs::symlink_metadata(&p).unwrap();
        // The symlink layout's links carry the process's owner and the
        // kernel's label (`durable::layout`); what they lead to is checked.
        if meta.file_type().is_symlink() {
            continue;
        }
        if (meta.uid(), meta.gid()) != (OWNER, OWNER) {
            problems.push(format!(
                "{shown}: owner {}:{}, not the policy's {OWNER}:{OWNER}",
                meta.uid(),
                meta.gid()
            ));
        }
        let mut buf = vec![0u8; 256];
        match rustix::fs::lgetxattr(&p, "security.selinux", &mut buf[..]) {
            Ok(n) if &buf[..n] == LABEL => {}
            Ok(n) => {
                problems.push(format!("{shown}: label {:?}, not srv/'s", String::from_utf8_lossy(&buf[..n])))
            }
            Err(e) => problems.push(format!("{shown}: no label ({e}), not srv/'s")),
        }
        if meta.is_dir() {
            for e in fs::read_dir(&p).unwrap() {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                // durasync's bookkeeping (the lock, an "unsynced" marker of a
                // target in the symlink layout) is no file of the tree.
                if name != durasync::durable::names::LOCK_NAME && !name.starts_with(trees::MARKER_PREFIX) {
                    stack.push((e.path(), format!("{shown}/{name}")));
                }
            }
        }
    }
    problems
}

/// The example plugin's input for generation `g`: `KEY=value` lines, some
/// keys kept, changed, added and removed between A and B.
fn env_input(g: char) -> String {
    match g {
        'A' => "KEPT=same\nCHANGED=old value\nREMOVED=gone in B\n".into(),
        _ => "KEPT=same\nCHANGED=new value\nADDED=only in B\n".into(),
    }
}

/// Write a manifest for the example plugin (built for wasm32-wasip2 by the
/// test, pinned by its sha256) granting the mounted `srv/` as its root `out`.
fn plugin_manifest(dir: &Path) -> PathBuf {
    let wasm = crate::support::wasm::build("Cargo.toml", "example");
    let sha = sha256_of_file(&wasm);
    let text = format!(
        "name = \"example\"\nwasm = \"{}\"\nsha256 = \"{sha}\"\n[roots.out]\npath = \"{}\"\naccess = \"rw\"\n\
         owner = \"1000\"\ngroup = \"1000\"\n",
        wasm.display(),
        dir.join("mnt").join(SRV).display()
    );
    let manifest = dir.join("plugin.toml");
    fs::write(&manifest, text).unwrap();
    manifest
}

/// `durasync run MANIFEST --input INPUT`, with a compile cache shared by
/// the lab's runs (only the first one compiles the component).
fn plugin_run(manifest: &Path, input: &Path) -> std::process::Command {
    let mut c = cmd(durasync().to_str().unwrap(), &["run"]);
    c.arg(manifest).arg("--input").arg(input);
    c.env("XDG_CACHE_HOME", crate::support::shared_cache());
    c
}
