//! The two commands for testing a plugin:
//!
//! - `durasync harness`: serve a plugin's `fs` and `log` calls as JSON lines
//!   on standard input/output (the protocol: `durasync::testing::harness`),
//!   for the Python, JavaScript and Go shims of `guest-sdk/`;
//! - `durasync test MANIFEST CASES_DIR`: the golden cases of a built plugin
//!   (`durasync::testing::golden`), through the real runtime; its `--help`
//!   gives the layout and the guide's section ([`CASES_HELP`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use durasync::runtime::{CacheConfig, Manifest, Runtime};
use durasync::services::text::escape_all;
use durasync::services::{Access, Grant, PluginLimits, Session};
use durasync::testing::golden::{self, Verdict};
use durasync::testing::harness::{DEFAULT_MAX_CALLS, Error, Harness};

use super::exit;

/// `durasync harness [MANIFEST] --root NAME=PATH…`
#[derive(Debug, Args)]
pub struct HarnessArgs {
    /// A plugin manifest whose name, roots (with their access) and limits the
    /// session takes; the component it names is not read.
    pub manifest: Option<PathBuf>,
    /// Point root NAME at PATH (a manifest's root keeps its access; any other
    /// root is granted rw).
    #[arg(long = "root", value_name = "NAME=PATH")]
    pub roots: Vec<String>,
    /// Plan every change instead of making it (as `durasync run --dry-run`).
    #[arg(long)]
    pub dry_run: bool,
    /// The most calls the session serves; one more is a trap.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CALLS)]
    pub max_calls: u64,
}

pub fn harness(args: &HarnessArgs) -> Result<()> {
    let (name, mut roots, limits) = match &args.manifest {
        Some(path) => {
            let m = Manifest::load(path)?;
            let roots: BTreeMap<_, _> = m
                .roots
                .iter()
                .map(|(n, r)| (n.clone(), (r.path.clone(), r.access, r.special_modes, r.attrs.clone())))
                .collect();
            (m.name, roots, m.limits)
        }
        None => ("under test".to_owned(), BTreeMap::new(), PluginLimits::default()),
    };
    for spec in &args.roots {
        let Some((root, path)) = spec.split_once('=') else {
            return Err(anyhow::Error::new(exit::Status(exit::USAGE)))
                .context(format!("--root {spec}: expected NAME=PATH"));
        };
        let (access, special, attrs) = roots
            .get(root)
            .map_or((Access::ReadWrite, false, Default::default()), |r| (r.1, r.2, r.3.clone()));
        roots.insert(root.to_owned(), (PathBuf::from(path), access, special, attrs));
    }
    let mut grants = BTreeMap::new();
    for (root, (path, access, special, attrs)) in roots {
        let grant = Grant::open(&path, access, special)
            .with_context(|| format!("root {root}: opening {}", path.display()))?
            .with_attrs(attrs);
        grants.insert(root, grant);
    }
    let session = Session::new(&name, grants, limits, args.dry_run);
    let mut harness = Harness::new(session, args.max_calls);
    let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
    match harness.serve(&mut stdin.lock(), &mut stdout.lock()) {
        Ok(()) => Ok(()),
        Err(e @ Error::Trap(_)) => {
            Err(anyhow::Error::new(exit::Status(exit::PLUGIN_TRAP))).context(e.to_string())
        }
        Err(e) => Err(e.into()),
    }
}

/// The end of `durasync test --help`: a case's layout in two lines and
/// where the guide describes it (a section of docs/plugins.md, the page a
/// vendor has; `tests/plugins/golden.rs` checks that its heading exists).
pub const CASES_HELP: &str = "\
A case is a folder of CASES_DIR: case.toml (result = \"…\" or error = \"…\"; optional [config], [modes]),
input (bytes), before/ROOT/… (each root's starting files), after/ROOT/… (each root's expected files).
The layout, [modes] and the report: docs/plugins.md#golden-cases-durasync-test";

/// `durasync test MANIFEST CASES_DIR`
#[derive(Debug, Args)]
#[command(after_help = CASES_HELP)]
pub struct TestArgs {
    /// The plugin's manifest: the component it pins, its roots, limits and config.
    pub manifest: PathBuf,
    /// A folder of cases, one folder each (the layout is below).
    #[arg(value_name = "CASES_DIR")]
    pub cases: PathBuf,
    /// Where compiled plugins are cached (default `$XDG_CACHE_HOME/durasync`).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

pub fn test(args: &TestArgs) -> Result<()> {
    let manifest = Manifest::load(&args.manifest)?;
    let cases = golden::load_cases(&args.cases)?;
    let cache = args.cache_dir.clone().map_or(CacheConfig::Default, CacheConfig::Dir);
    let runtime = Runtime::new(&cache)?;
    let plugin = runtime.load_manifest(&manifest)?;
    let mut failed = 0;
    for case in &cases {
        let work = tempfile::Builder::new()
            .prefix("durasync-test-")
            .tempdir()
            .context("creating a temporary directory for the roots")?;
        match golden::run_case(&plugin, &manifest, case, work.path())? {
            Verdict::Pass => println!("ok {}", case.name),
            Verdict::Fail(diffs) => {
                failed += 1;
                println!("FAILED {}", case.name);
                for d in diffs {
                    // Text a plugin chose: control characters escaped.
                    println!("    {}", escape_all(&d.summary));
                    for line in &d.detail {
                        println!("      {}", escape_all(line));
                    }
                }
            }
        }
    }
    println!("{} passed, {failed} failed", cases.len() - failed);
    if failed > 0 {
        return Err(anyhow::Error::new(exit::Status(exit::TEST_FAILED)))
            .context(format!("{failed} of {} cases failed", cases.len()));
    }
    Ok(())
}
