//! `durasync doctor`: for each target or root, whether a sync works there
//! (`durasync::durable::doctor`), one verdict line each, with the checks
//! below it; `--json` for scripts.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use durasync::durable::doctor::{self, Examination};
use durasync::runtime::Manifest;
use durasync::services::text::escape_all;

use super::exit;

/// `durasync doctor [PATH…] [--manifest M…] [--config-dir D] [--json]`
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Targets to examine: a directory `sync` would replace (or create), a
    /// file `write` would replace.
    pub paths: Vec<PathBuf>,
    /// Examine every root of this plugin manifest (repeatable): the
    /// directories its targets are synced into.
    #[arg(long = "manifest", value_name = "MANIFEST")]
    pub manifests: Vec<PathBuf>,
    /// Examine every root of every instance manifest (`*.toml`) of this
    /// agent config directory.
    #[arg(long, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// Print one JSON document instead of lines.
    #[arg(long)]
    pub json: bool,
    /// Examine the targets given as PATH for a sync in this layout
    /// (`symlink`: links into generations, for file systems where the
    /// exchange fails); a manifest's roots are examined in their own.
    #[arg(long, value_name = "exchange|symlink", default_value_t = durasync::durable::Layout::Exchange)]
    pub layout: durasync::durable::Layout,
}

/// What is examined: a target, or a plugin's root (named by its manifest).
enum Subject {
    Target(PathBuf),
    Root { manifest: PathBuf, name: String, path: PathBuf, layout: durasync::durable::Layout },
}

pub fn doctor(args: &DoctorArgs) -> Result<()> {
    let mut subjects: Vec<Subject> = args.paths.iter().cloned().map(Subject::Target).collect();
    for m in &args.manifests {
        let manifest = Manifest::load(m)?;
        subjects.extend(roots_of(m, &manifest));
    }
    if let Some(dir) = &args.config_dir {
        // The manifests the agent would load there, as it lists them.
        let files = durasync::agent::config::manifest_files(dir)?;
        if files.is_empty() && subjects.is_empty() {
            // A node before its first instance: nothing is wrong yet.
            println!(
                "{}: no instance manifests (*.toml): nothing to examine",
                escape_all(&dir.display().to_string())
            );
            return Ok(());
        }
        for file in files {
            let text = durasync::agent::config::read_manifest(&file)?;
            let spec = durasync::agent::config::Spec::parse(&text, &file)?;
            subjects.extend(roots_of(&file, &spec.manifest));
        }
    }
    if subjects.is_empty() && args.config_dir.is_none() {
        return Err(anyhow::Error::new(exit::Status(exit::USAGE)))
            .context("nothing to examine: give target paths, --manifest or --config-dir");
    }
    let results: Vec<(Subject, Examination)> = subjects
        .into_iter()
        .map(|s| {
            let e = match &s {
                Subject::Target(p) => doctor::examine_with(p, args.layout),
                Subject::Root { path, layout, .. } => doctor::examine_root(path, *layout),
            };
            (s, e)
        })
        .collect();
    if args.json {
        let doc: Vec<serde_json::Value> = results.iter().map(|(s, e)| json_of(s, e)).collect();
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        for (s, e) in &results {
            let of = match s {
                Subject::Target(_) => String::new(),
                Subject::Root { manifest, name, .. } => format!(" (root {name} of {})", manifest.display()),
            };
            println!("{}{}", escape_all(&e.summary()), escape_all(&of));
            for (name, f) in &e.checks {
                println!("    {:<4} {name}: {}", f.severity(), escape_all(f.text()));
            }
        }
    }
    let failed = results.iter().filter(|(_, e)| e.verdict() == "fail").count();
    if failed > 0 {
        return Err(anyhow::Error::new(exit::Status(exit::DOCTOR_FAILED)))
            .context(format!("{failed} of {} places would fail a sync", results.len()));
    }
    Ok(())
}

fn roots_of(file: &Path, manifest: &Manifest) -> Vec<Subject> {
    manifest
        .roots
        .iter()
        .map(|(name, r)| Subject::Root {
            manifest: file.to_owned(),
            name: name.clone(),
            path: r.path.clone(),
            layout: r.layout,
        })
        .collect()
}

fn json_of(s: &Subject, e: &Examination) -> serde_json::Value {
    let checks: serde_json::Map<String, serde_json::Value> = e
        .checks
        .iter()
        .map(|(n, f)| ((*n).to_owned(), serde_json::json!({ "result": f.severity(), "detail": f.text() })))
        .collect();
    let mut v = serde_json::json!({
        "path": e.path.display().to_string(),
        "verdict": e.verdict(),
        "checks": checks,
    });
    if let Subject::Root { manifest, name, .. } = s {
        v["manifest"] = serde_json::json!(manifest.display().to_string());
        v["root"] = serde_json::json!(name);
    }
    v
}
