//! `durasync test MANIFEST CASES_DIR`: the golden cases of a built plugin
//! (`durasync::golden`), through the real runtime.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use durasync::golden::{self, Verdict};
use durasync::runtime::{CacheConfig, Manifest, Runtime};
use durasync::services::text::escape_all;

use super::exit;

/// `durasync test MANIFEST CASES_DIR`
#[derive(Debug, Args)]
pub struct TestArgs {
    /// The plugin's manifest: the component it pins, its roots, limits and config.
    pub manifest: PathBuf,
    /// A folder of cases (see `durasync::golden`: case.toml, input, before/, after/).
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
                    println!("    {}", escape_all(&d));
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
