//! `agent --once`: every manifest of the config directory loaded and run
//! once, in file order.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::runtime::Runtime;
use crate::services::LogRate;

use super::AgentSettings;
use super::config;
use super::error::Error;
use super::run::{Loaded, RunReport, load, log_report, run_instance};

/// What a one-shot run (`durasync run`, `agent --once`) says of a
/// manifest's probes.
pub const PROBES_SKIPPED: &str = "skipped: probation ([[probe]]): only `durasync agent` probes a change and keeps \
     its previous tree; this run did not wait for a probe, and its changes are live unprobed";

/// One summary per manifest of `--once`, in file order.
#[derive(Debug)]
pub struct OnceSummary {
    /// The manifest.
    pub file: PathBuf,
    /// The run, or why the manifest did not load.
    pub outcome: Result<RunReport, String>,
    /// What the run skipped (its manifest's probes and actions: `--once`
    /// keeps no ledger).
    pub skipped: Vec<String>,
}

impl OnceSummary {
    /// Whether the instance loaded and its run succeeded.
    pub fn ok(&self) -> bool {
        matches!(&self.outcome, Ok(r) if r.ok())
    }

    /// The line `--once` prints.
    pub fn line(&self) -> String {
        let line = match &self.outcome {
            Ok(r) => r.summary_line(),
            Err(e) => format!("failed {}: not loaded: {e}", self.file.display()),
        };
        self.skipped.iter().fold(line, |l, s| format!("{l}; {s}"))
    }
}

/// `--once`: load every manifest, run every loaded instance once (in
/// parallel, one thread each), and return a summary per manifest. A missing
/// or unreadable directory and duplicate names are errors; a manifest that
/// does not load is a failed summary.
pub fn run_once(opts: &AgentSettings) -> Result<Vec<OnceSummary>, Error> {
    let files = config::manifest_files(&opts.config_dir)?;
    let mut runtime = Runtime::new(&opts.cache).map_err(Error::Runtime)?;
    if let Some(compiler) = &opts.compiler {
        runtime.compile_out_of_process(compiler.clone());
    }
    runtime.set_registry_settings(opts.registry.clone());
    let mut loaded: Vec<(PathBuf, Result<Arc<Loaded>, String>)> = Vec::new();
    for file in files {
        let (_, result) = load(&runtime, &file, opts.flush);
        let result = result.map(Arc::new).map_err(|e| {
            tracing::error!(file = %file.display(), "not loaded: {e}");
            e.to_string()
        });
        loaded.push((file, result));
    }
    check_duplicates(loaded.iter().filter_map(|(f, l)| l.as_ref().ok().map(|l| (f.as_path(), l))))?;
    // At most `max_runs` at once: a pool of that many threads takes the
    // instances in file order.
    let jobs: Vec<(usize, Arc<Loaded>)> =
        loaded.iter().enumerate().filter_map(|(i, (_, l))| l.as_ref().ok().map(|l| (i, l.clone()))).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let reports: std::sync::Mutex<Vec<Option<Result<RunReport, String>>>> =
        std::sync::Mutex::new((0..loaded.len()).map(|_| None).collect());
    let dispatch = tracing::dispatcher::get_default(|d| d.clone());
    std::thread::scope(|scope| {
        for _ in 0..opts.max_runs.clamp(1, jobs.len().max(1)) {
            scope.spawn(|| {
                tracing::dispatcher::with_default(&dispatch, || {
                    loop {
                        let Some((i, l)) = jobs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                        else {
                            return;
                        };
                        let span = tracing::info_span!("run", instance = %l.spec.manifest.name);
                        let _enter = span.enter();
                        let rate = Arc::new(LogRate::new(opts.log_burst_bytes, opts.log_rate_bytes));
                        let run = std::panic::AssertUnwindSafe(|| run_instance(l, Some(rate), None));
                        let outcome = std::panic::catch_unwind(run)
                            .map_err(|_| "the run's thread panicked".to_owned())
                            .inspect(log_report);
                        reports.lock().unwrap_or_else(|p| p.into_inner())[*i] = Some(outcome);
                    }
                })
            });
        }
    });
    let mut reports = reports.into_inner().unwrap_or_else(|p| p.into_inner());
    let out = loaded
        .into_iter()
        .enumerate()
        .map(|(i, (file, l))| {
            let skipped = match &l {
                Ok(l) if !l.spec.manifest.hooks.probes.is_empty() => vec![PROBES_SKIPPED.to_owned()],
                _ => Vec::new(),
            };
            let outcome = match l {
                Ok(_) => reports[i].take().unwrap_or_else(|| Err("the run's thread panicked".to_owned())),
                Err(e) => Err(e),
            };
            OnceSummary { file, outcome, skipped }
        })
        .collect();
    Ok(out)
}

fn check_duplicates<'a>(loaded: impl Iterator<Item = (&'a Path, &'a Arc<Loaded>)>) -> Result<(), Error> {
    let names: Vec<(&Path, &str)> = loaded.map(|(f, l)| (f, l.spec.manifest.name.as_str())).collect();
    match config::duplicate_names(names).into_iter().next() {
        Some((name, files)) => Err(Error::DuplicateName { name, files }),
        None => Ok(()),
    }
}
