//! The native commands: `sync`, `write`, `rollback`, `recover`. No plugin involved;
//! they drive the durable core directly, for scripts and for auditing it.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;

use durasync::durable::{self, Options, Report};
use durasync::hooks::{Validator, validator_gate};

/// `durasync sync TARGET --from SRC_DIR [--keep-previous]`, `durasync sync --to-previous TARGET`
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The directory to replace atomically (created if missing; its parent must exist).
    pub target: PathBuf,
    /// The directory whose regular files and subdirectories (bytes and
    /// permission bits) TARGET must hold exactly. Links, fifos and devices in
    /// it are refused.
    #[arg(long = "from", value_name = "SRC_DIR", required_unless_present = "to_previous")]
    pub from: Option<PathBuf>,
    /// Keep the tree this sync replaces beside TARGET as its previous (an
    /// older previous is removed), so `--to-previous` or `durasync rollback`
    /// can put it back with one atomic exchange.
    #[arg(long)]
    pub keep_previous: bool,
    /// Put TARGET's previous tree back instead of syncing (the same as
    /// `durasync rollback TARGET`); exit status 3 when none is kept.
    #[arg(long, conflicts_with_all = ["from", "keep_previous", "validate"])]
    pub to_previous: bool,
    /// How the staged tree is made durable before the swap: `auto` picks
    /// `syncfs` or per-file `fsync` from the file system and its other dirty
    /// data; `syncfs` is refused (exit 5) where it cannot be trusted.
    #[arg(long, value_name = "auto|fsync|syncfs", default_value_t = durable::Flush::Auto)]
    pub flush: durable::Flush,
    /// How TARGET is replaced: `exchange` swaps it with the staged tree
    /// (`RENAME_EXCHANGE`); `symlink` keeps TARGET and renames a link inside
    /// it to a new generation, for file systems where the exchange fails
    /// (overlayfs for a directory of a lower layer, NFS, FUSE). A target
    /// already in the symlink layout stays in it.
    #[arg(long, value_name = "exchange|symlink", default_value_t = durable::Layout::Exchange)]
    pub layout: durable::Layout,
    /// Print the result as a JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub attrs: AttrsArgs,
    #[command(flatten)]
    pub validate: ValidateArgs,
}

/// What every file and directory written gets besides bytes and mode.
#[derive(Debug, Args)]
pub struct AttrsArgs {
    /// Owner of every file and directory written: `keep` (the replaced
    /// file's; a new one takes its parent's), a user name or a uid.
    /// Default: this process's user.
    #[arg(long, value_name = "keep|NAME|UID", value_parser = |s: &str| durable::attrs::parse_id(s, "owner"))]
    pub owner: Option<durable::IdRule>,
    /// Group of every file and directory written (same forms as `--owner`).
    #[arg(long, value_name = "keep|NAME|GID", value_parser = |s: &str| durable::attrs::parse_id(s, "group"))]
    pub group: Option<durable::IdRule>,
    /// SELinux label: `keep` (default: the replaced file's, a new one its
    /// parent's), `kernel` (whatever the kernel gives the staged name), or a context.
    #[arg(long, value_name = "keep|kernel|CONTEXT", value_parser = durable::attrs::parse_label)]
    pub label: Option<durable::LabelRule>,
    /// Carry the replaced file's extended attributes (`xattrs`) and POSIX
    /// ACLs (`acl`) to its new inode; comma-separated or repeated.
    #[arg(long, value_name = "xattrs,acl", value_delimiter = ',', value_parser = ["xattrs", "acl"])]
    pub preserve: Vec<String>,
}

impl AttrsArgs {
    /// The policy these flags give.
    pub fn policy(&self) -> durable::Attrs {
        let mut attrs = durable::Attrs::default();
        if let Some(o) = self.owner {
            attrs.owner = o;
        }
        if let Some(g) = self.group {
            attrs.group = g;
        }
        if let Some(l) = &self.label {
            attrs.label = l.clone();
        }
        attrs.xattrs = self.preserve.iter().any(|p| p == "xattrs");
        attrs.acl = self.preserve.iter().any(|p| p == "acl");
        attrs
    }
}

/// `--validate CMD…`: a command run on the staged copy before the swap.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Run this command (no shell; `{staged}` becomes the staged copy,
    /// complete and durable, `{target}` the final path) before the swap; if
    /// it fails, nothing changes (exit status 6). Takes the rest of the
    /// command line, so it comes last.
    #[arg(long, value_name = "CMD", num_args = 1.., allow_hyphen_values = true)]
    pub validate: Vec<String>,
    /// How long the validator may run before it is killed and the change refused.
    #[arg(long, value_name = "MS", default_value_t = durasync::hooks::command::DEFAULT_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=durasync::hooks::command::MAX_TIMEOUT_MS))]
    pub validate_timeout_ms: u64,
}

impl ValidateArgs {
    /// The validator for `target` (a path whose last component is `name`, in `parent`).
    fn validator(&self) -> Option<Validator> {
        let program = self.validate.first()?;
        let name = program.rsplit('/').next().unwrap_or(program).to_owned();
        Some(Validator {
            name,
            root: String::new(),
            path: "**".into(),
            command: self.validate.clone(),
            timeout_ms: self.validate_timeout_ms,
        })
    }
}

/// `durasync write FILE --from SRC_FILE|-`
#[derive(Debug, Args)]
pub struct WriteArgs {
    /// The file to replace atomically (created if missing; its directory must exist).
    pub file: PathBuf,
    /// Where the new bytes come from: a file, or `-` for standard input.
    #[arg(long = "from", value_name = "SRC_FILE|-")]
    pub from: String,
    /// Exact permission bits in octal (`0600`); default: keep the existing
    /// file's mode, 0644 for a new file.
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<u32>,
    /// Keep the file this write replaces beside FILE as its previous, for
    /// `durasync rollback FILE`.
    #[arg(long)]
    pub keep_previous: bool,
    /// Print the result as a JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub attrs: AttrsArgs,
    #[command(flatten)]
    pub validate: ValidateArgs,
}

/// `durasync rollback TARGET`
#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The directory or file whose previous contents (kept by `sync
    /// --keep-previous` or `write --keep-previous`, or by the agent while a
    /// change is on probation) are put back, atomically and durably; exit
    /// status 3 when none are kept. With `--manifest`: ROOT:PATH, a path
    /// below one of the manifest's roots.
    pub target: PathBuf,
    /// The manifest naming ROOT (the agent's instance manifest); the
    /// manifest's actions covering ROOT:PATH are run once after the revert
    /// (the consumer reloads the old contents).
    #[arg(long, value_name = "MANIFEST")]
    pub manifest: Option<PathBuf>,
    /// Print the result as a JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `durasync recover DIR`
#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// The directory to clean, with its subdirectories.
    pub dir: PathBuf,
    /// Print the removed paths as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// Parse an octal mode: `0600`, `600` or `0o600`, permission bits only.
pub fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    let mode = u32::from_str_radix(digits, 8).map_err(|_| format!("`{s}` is not an octal mode like 0644"))?;
    if mode > 0o7777 {
        return Err(format!("`{s}` has bits outside the permission bits 07777"));
    }
    Ok(mode)
}

pub fn sync(args: &SyncArgs) -> Result<()> {
    if args.to_previous {
        return rollback(&RollbackArgs { target: args.target.clone(), manifest: None, json: args.json });
    }
    let Some(from) = &args.from else { bail!("--from SRC_DIR is required") };
    let validator = args.validate.validator();
    let (parent, name) = split_target(&args.target)?;
    let gate = validator.as_ref().map(|v| validator_gate(v, &parent, &name));
    let attrs = args.attrs.policy();
    let opts = Options {
        flush: args.flush,
        gate: gate.as_ref().map(|g| g as &dyn durable::Gate),
        keep_previous: args.keep_previous,
        attrs: &attrs,
        layout: args.layout,
        ..Options::default()
    };
    let (src_parent, src_name) = split_target(from)?;
    let src_dir = open_dir(&src_parent)?;
    let parent_fd = open_dir(&parent)?;
    let src_path = from.display().to_string();
    let tree = durable::read_tree(src_dir.as_fd(), &src_name, &src_path, &opts.limits)
        .with_context(|| format!("reading source {}", from.display()))?;
    let report = durable::sync_dir(parent_fd.as_fd(), &name, &tree, &opts)
        .with_context(|| format!("syncing {}", args.target.display()))?;
    print_report(&args.target, &report, args.json);
    Ok(())
}

pub fn write(args: &WriteArgs) -> Result<()> {
    let validator = args.validate.validator();
    let (parent, name) = split_target(&args.file)?;
    let gate = validator.as_ref().map(|v| validator_gate(v, &parent, &name));
    let attrs = args.attrs.policy();
    let opts = Options {
        gate: gate.as_ref().map(|g| g as &dyn durable::Gate),
        keep_previous: args.keep_previous,
        attrs: &attrs,
        ..Options::default()
    };
    let contents = if args.from == "-" {
        let mut buf = Vec::new();
        std::io::stdin().lock().read_to_end(&mut buf).context("reading standard input")?;
        buf
    } else {
        let meta = std::fs::metadata(&args.from).with_context(|| format!("reading source {}", args.from))?;
        if !meta.is_file() {
            bail!("reading source {}: not a regular file", args.from);
        }
        std::fs::read(&args.from).with_context(|| format!("reading source {}", args.from))?
    };
    let dir = open_dir(&parent)?;
    let report = durable::write_file(dir.as_fd(), &name, &contents, args.mode, &opts)
        .with_context(|| format!("writing {}", args.file.display()))?;
    print_report(&args.file, &report, args.json);
    Ok(())
}

pub fn rollback(args: &RollbackArgs) -> Result<()> {
    let Some(manifest) = &args.manifest else {
        let (parent, name) = split_target(&args.target)?;
        let parent_fd = open_dir(&parent)?;
        let report = durable::revert(parent_fd.as_fd(), &name, &Options::default())
            .with_context(|| format!("reverting {}", args.target.display()))?;
        print_report(&args.target, &report, args.json);
        return Ok(());
    };
    // A `durasync run` manifest or an agent's (its `[input]` and
    // `[schedule]` are read and not used here).
    let text = durasync::agent::config::read_manifest(manifest).map_err(super::agent::into_anyhow)?;
    let m = durasync::agent::Spec::parse(&text, manifest).map_err(super::agent::into_anyhow)?.manifest;
    let spec = args.target.to_string_lossy();
    let usage = |why: String| anyhow::Error::new(super::exit::Status(super::exit::USAGE)).context(why);
    let Some((root, path)) = spec.split_once(':') else {
        return Err(usage(format!("{spec}: with --manifest, the target is ROOT:PATH")));
    };
    let Some(granted) = m.roots.get(root) else {
        let names: Vec<&str> = m.roots.keys().map(String::as_str).collect();
        return Err(usage(format!(
            "{spec}: `{root}` is not a root of {} (roots: {})",
            manifest.display(),
            names.join(", ")
        )));
    };
    durable::names::split_rel_path(path).map_err(|e| usage(format!("{spec}: {e}")))?;
    let (parent, name) = durasync::hooks::probation::open_parent(&granted.path, path)
        .with_context(|| format!("opening {spec}"))?;
    let target = granted.path.join(path);
    let report = durable::revert(parent.as_fd(), &name, &Options::default())
        .with_context(|| format!("reverting {spec} ({})", target.display()))?;
    print_report(&target, &report, args.json);
    // After the revert's commit point: the consumer reloads the old contents.
    let mut failed = Vec::new();
    for action in m
        .hooks
        .actions
        .iter()
        .filter(|a| a.root == root && durasync::hooks::pattern::may_cover_below(&a.path, path))
    {
        match durasync::hooks::actions::run_action(action) {
            Ok(()) => eprintln!("action {} ran", action.name),
            Err(f) => failed.push(format!("action {} {f}", action.name)),
        }
    }
    if !m.hooks.probes.is_empty() {
        eprintln!(
            "note: an agent's probation of {spec}, if open, closes at its next attempt (its previous tree is gone)"
        );
    }
    if !failed.is_empty() {
        bail!("reverted, but {}", failed.join("; "));
    }
    Ok(())
}

pub fn recover(args: &RecoverArgs) -> Result<()> {
    let dir = open_dir(&args.dir)?;
    let removed = durable::recover(dir.as_fd(), &Options::default())
        .with_context(|| format!("recovering {}", args.dir.display()))?;
    let shown: Vec<String> = removed.iter().map(|p| args.dir.join(p).display().to_string()).collect();
    if args.json {
        println!("{}", json!({ "dir": args.dir.display().to_string(), "removed": shown }));
    } else if shown.is_empty() {
        println!("nothing to recover in {}", args.dir.display());
    } else {
        for path in shown {
            println!("removed {path}");
        }
    }
    Ok(())
}

fn print_report(target: &Path, report: &Report, as_json: bool) {
    if as_json {
        println!(
            "{}",
            json!({
                "target": target.display().to_string(),
                "outcome": report.outcome.as_str(),
                "written": report.written,
                "removed": report.removed,
            })
        );
    } else {
        println!(
            "{} {}: {} written, {} removed",
            report.outcome.as_str(),
            target.display(),
            report.written,
            report.removed
        );
    }
}

/// Split a target path into the directory that holds it and its final name.
/// `/`, `..` and paths ending in `.` are refused: they have no name of their own.
pub fn split_target(path: &Path) -> Result<(PathBuf, String)> {
    let text = path.to_str().with_context(|| format!("{}: the path is not valid UTF-8", path.display()))?;
    let trimmed = text.trim_end_matches('/');
    let (parent, name) = match trimmed.rsplit_once('/') {
        Some(("", name)) => ("/", name),
        Some((parent, name)) => (parent, name),
        None => (".", trimmed),
    };
    if name.is_empty() || name == "." || name == ".." {
        bail!("{}: the path must end in a file or directory name", path.display());
    }
    Ok((PathBuf::from(parent), name.to_owned()))
}

/// Open a directory named by the operator (links in this path are followed:
/// it is the operator's own path, not a plugin's).
pub fn open_dir(path: &Path) -> Result<OwnedFd> {
    rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(std::io::Error::from)
    .with_context(|| format!("opening directory {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_in_octal_forms() {
        assert_eq!(parse_mode("0600"), Ok(0o600));
        assert_eq!(parse_mode("755"), Ok(0o755));
        assert_eq!(parse_mode("0o4755"), Ok(0o4755));
        assert!(parse_mode("0800").is_err());
        assert!(parse_mode("10000").is_err());
    }

    #[test]
    fn targets_split_into_parent_and_name() {
        assert_eq!(split_target(Path::new("a/b/")).unwrap(), (PathBuf::from("a"), "b".into()));
        assert_eq!(split_target(Path::new("/x")).unwrap(), (PathBuf::from("/"), "x".into()));
        assert_eq!(split_target(Path::new("x")).unwrap(), (PathBuf::from("."), "x".into()));
        for bad in ["/", "a/..", ".", ""] {
            assert!(split_target(Path::new(bad)).is_err(), "{bad}");
        }
    }
}
