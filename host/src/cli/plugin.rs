//! The plugin commands: `run` (one run of a plugin's `run` export) and
//! `inspect` (what a component is and whether it would be loaded).

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;

use durasync::runtime::distribution::reference::SCHEME as REF_SCHEME;
use durasync::runtime::{
    self, CacheConfig, CacheStatus, Component, Interface, Manifest, Operation, RunRequest, Runtime, trust,
};
use durasync::services::Ended;
use durasync::services::text::{escape_all, escape_json_c1, escape_lines};

use super::exit;
use super::registry::TlsArgs;

/// `durasync run MANIFEST`
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The plugin's manifest (`plugin.toml`).
    pub manifest: PathBuf,
    /// Bytes handed to the plugin's `run` as `input`: a file, or `-` for
    /// standard input (empty when absent).
    #[arg(long, value_name = "FILE|-")]
    pub input: Option<String>,
    /// Point granted root NAME at PATH (relative to the current directory),
    /// keeping the manifest's access; a root the manifest lacks is granted rw.
    #[arg(long = "root", value_name = "NAME=PATH")]
    pub roots: Vec<String>,
    /// Change nothing on disk: show what each operation would add, change
    /// and remove (the plugin sees the reports as if it had happened).
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Where compiled plugins are cached (default `$XDG_CACHE_HOME/durasync`).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile the plugin every time; never read or write the cache.
    #[arg(long, conflicts_with = "cache_dir")]
    pub no_cache: bool,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// How the plugin's syncs make their staged trees durable (overrides
    /// the manifest's `flush`; default `auto`).
    #[arg(long, value_name = "auto|fsync|syncfs")]
    pub flush: Option<durasync::durable::Flush>,
}

/// `durasync compile MANIFEST...`
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// The plugins' manifests (`plugin.toml`).
    #[arg(required = true)]
    pub manifests: Vec<PathBuf>,
    /// Where compiled plugins are cached (default `$XDG_CACHE_HOME/durasync`).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// `durasync inspect PLUGIN.wasm|MANIFEST|oci://REF`
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A component (`.wasm`), a manifest (`.toml`) or an `oci://` reference
    /// (trusted by its digest or by `--key`).
    pub target: PathBuf,
    /// For an `oci://` reference: a cosign public key (PEM) whose signature is required.
    #[arg(long = "key", value_name = "FILE")]
    pub keys: Vec<PathBuf>,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// A runtime whose registry client takes `tls` (an error names a bad CA
/// file before anything is loaded).
fn runtime_with(cache: &CacheConfig, tls: &TlsArgs) -> Result<Runtime> {
    let mut runtime = Runtime::new(cache)?;
    runtime.set_registry_settings(tls.apply(Default::default())?);
    Ok(runtime)
}

pub fn run(args: &RunArgs) -> Result<()> {
    let mut manifest = Manifest::load(&args.manifest)?;
    for spec in &args.roots {
        let Some((name, path)) = spec.split_once('=') else {
            return Err(anyhow::Error::new(exit::Status(exit::USAGE)))
                .context(format!("--root {spec}: expected NAME=PATH"));
        };
        manifest.override_root(name, PathBuf::from(path))?;
    }
    let input = match args.input.as_deref() {
        None => Vec::new(),
        Some("-") => {
            let mut buf = Vec::new();
            std::io::stdin().lock().read_to_end(&mut buf).context("reading standard input")?;
            buf
        }
        Some(file) => std::fs::read(file).with_context(|| format!("reading input {file}"))?,
    };
    let cache = if args.no_cache {
        CacheConfig::Disabled
    } else {
        args.cache_dir.clone().map_or(CacheConfig::Default, CacheConfig::Dir)
    };
    manifest.override_flush(args.flush);
    if !args.dry_run && !manifest.hooks.actions.is_empty() {
        tracing::warn!(
            "the manifest's [[action]]s are run by `durasync agent` only (it keeps their ledger); not run here"
        );
    }
    let skipped_probes = !args.dry_run && !manifest.hooks.probes.is_empty();
    let request = RunRequest::from_manifest(&manifest, input, args.dry_run)?;
    let mut runtime = runtime_with(&cache, &args.tls)?;
    // A miss compiles in a child: Winch first, Cranelift in the background.
    runtime.compile_out_of_process(durasync::runtime::compiler::OutOfProcess::this_binary(COMPILE_CHILD));
    let plugin = runtime.load_manifest(&manifest)?;
    match plugin.run(&request) {
        Ok(outcome) => {
            if args.json {
                let would_run: Vec<_> =
                    if args.dry_run { would_run(&manifest, &outcome.operations) } else { Vec::new() };
                let v = json!({
                    "plugin": outcome.plugin,
                    "result": outcome.result,
                    "dry_run": args.dry_run,
                    "operations": outcome.operations,
                    "would_run": would_run,
                    "skipped": if skipped_probes { vec![durasync::agent::PROBES_SKIPPED] } else { Vec::new() },
                });
                println!("{}", escape_json_c1(&v.to_string()));
            } else {
                if args.dry_run {
                    println!("dry run: nothing was changed on disk");
                }
                println!("{}", escape_lines(&outcome.result, RESULT_INDENT));
                print_operations(&outcome.operations);
                if skipped_probes {
                    println!("{}", durasync::agent::PROBES_SKIPPED);
                }
                if args.dry_run {
                    for w in would_run(&manifest, &outcome.operations) {
                        let field = |k: &str| escape_all(w[k].as_str().unwrap_or_default());
                        println!("would check {}:{} with {}", field("root"), field("path"), field("hook"));
                    }
                }
            }
            Ok(())
        }
        Err(e) => {
            // What already happened is on disk: say so before the error.
            if !e.operations().is_empty() {
                if args.json {
                    let v = json!({ "plugin": manifest.name, "operations": e.operations() });
                    println!("{}", escape_json_c1(&v.to_string()));
                } else {
                    print_operations(e.operations());
                }
            }
            Err(e.into())
        }
    }
}

/// The validators and guardrails of the manifest that a real run would
/// apply to the planned changes (`--dry-run`): one entry per change and hook.
fn would_run(manifest: &Manifest, ops: &[Operation]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for op in ops.iter().filter(|o| o.op.writes_contents() && o.outcome != Ended::Unchanged) {
        for hook in manifest.hooks.describe(&op.root, &op.path) {
            out.push(json!({ "root": op.root, "path": op.path, "hook": hook }));
        }
    }
    out
}

fn print_operations(ops: &[Operation]) {
    for op in ops {
        let error = op.error.as_deref().map(|e| format!(": {}", escape_all(e))).unwrap_or_default();
        println!(
            "{} {}:{}: {} written, {} removed ({} ms){error}",
            op.outcome,
            op.root,
            escape_all(&op.path),
            op.written,
            op.removed,
            op.ms
        );
        if let Some(plan) = &op.plan {
            for (mark, names) in [("+", &plan.added), ("~", &plan.changed), ("-", &plan.removed)] {
                for name in names {
                    println!("  {mark} {}", escape_all(name));
                }
            }
        }
    }
}

/// Where the second and later lines of a plugin's multi-line result start:
/// indented, so no line a plugin writes can pass for one of the host's.
pub const RESULT_INDENT: &str = "  ";

/// Precompile each manifest's component into the cache (checking its pin
/// and the policy first), one line per manifest; stops at the first failure.
/// The hidden subcommand the agent's compile child runs.
pub const COMPILE_CHILD: &str = "__compile-artifact";

/// `durasync __compile-artifact [--compiler NAME] --artifact PATH --sha256 HEX`
/// (stdin: the component); with `--upgrade --replaces WINCH_ARTIFACT`, the
/// background compile that replaces a Winch artifact (`runtime/upgrade.rs`).
#[derive(Debug, clap::Args)]
pub struct CompileChildArgs {
    /// The compiler: cranelift or winch.
    #[arg(long, default_value = "cranelift")]
    pub compiler: durasync::runtime::compiler::Compiler,
    /// Replace the Winch artifact `--replaces` in the background.
    #[arg(long, requires = "replaces")]
    pub upgrade: bool,
    /// The Winch artifact an upgrade replaces.
    #[arg(long)]
    pub replaces: Option<PathBuf>,
    /// Where to store the compiled artifact (atomically).
    #[arg(long)]
    pub artifact: PathBuf,
    /// The sha256 the component on stdin must have.
    #[arg(long)]
    pub sha256: String,
}

pub fn compile_child(args: &CompileChildArgs) -> Result<()> {
    use durasync::runtime::{compiler, upgrade};
    match &args.replaces {
        Some(replaces) if args.upgrade => {
            let child = compiler::OutOfProcess::this_binary(COMPILE_CHILD);
            upgrade::serve(&child, &args.artifact, &args.sha256, replaces)?;
        }
        _ => compiler::serve(args.compiler, &args.artifact, &args.sha256)?,
    }
    Ok(())
}

pub fn compile(args: &CompileArgs) -> Result<()> {
    let cache = args.cache_dir.clone().map_or(CacheConfig::Default, CacheConfig::Dir);
    let runtime = runtime_with(&cache, &args.tls)?;
    for path in &args.manifests {
        let manifest = Manifest::load(path)?;
        let start = std::time::Instant::now();
        let (status, artifact) = runtime.precompile(&manifest)?;
        let ms = start.elapsed().as_millis();
        let what = match status {
            CacheStatus::Hit => "cached".to_owned(),
            CacheStatus::Stale(why) => format!("recompiled ({})", escape_all(&why)),
            CacheStatus::Miss | CacheStatus::Disabled => "compiled".to_owned(),
        };
        println!("{what} {} ({}) in {ms} ms: {}", manifest.name, path.display(), artifact.display());
    }
    Ok(())
}

pub fn inspect(args: &InspectArgs) -> Result<()> {
    let target = args.target.to_string_lossy();
    let is_manifest = args.target.extension().is_some_and(|e| e == "toml");
    let manifest = if is_manifest { Some(Manifest::load(&args.target)?) } else { None };
    let mut problems = Vec::new();
    let mut manifest_digest = None;
    // Who signed the component, when its signatures were verified.
    let mut signed_by = None;
    let (wasm_path, wasm) = match manifest.as_ref().map(|m| &m.wasm) {
        Some(Component::Oci(_)) => {
            let m = manifest.as_ref().expect("matched");
            let fetched = runtime_with(&CacheConfig::Default, &args.tls)?.read_component(m)?;
            manifest_digest = fetched.manifest_digest;
            signed_by = fetched.signed_by;
            (m.wasm.to_string(), fetched.bytes)
        }
        Some(Component::File(path)) => {
            let wasm = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            (path.display().to_string(), wasm)
        }
        None if target.starts_with(REF_SCHEME) => {
            let r = super::registry::reference(&target)?;
            let policy = super::registry::key_policy(&args.keys)?;
            let runtime = runtime_with(&CacheConfig::Default, &args.tls)?;
            let v =
                trust::verified_component(runtime.registry()?, &r, &policy).map_err(runtime::Error::from)?;
            let bytes = v.read().map_err(runtime::Error::from)?;
            manifest_digest = Some(v.manifest_digest);
            signed_by = v.signed_by;
            (r.to_string(), bytes)
        }
        None => {
            let wasm = std::fs::read(&args.target).with_context(|| format!("reading {target}"))?;
            (target.to_string(), wasm)
        }
    };
    let label = manifest.as_ref().map_or_else(|| wasm_path.clone(), |m| m.name.clone());
    let sha256 = durasync::digest::sha256_hex(&wasm);
    if let Some(m) = &manifest
        && let Some(pin) = &m.sha256
        && pin != &sha256
    {
        problems.push(format!("sha256 mismatch: the manifest pins {pin}"));
    }
    // Imports and exports come from the binary: a plugin the policy refuses
    // is reported without being compiled.
    let interface =
        Interface::parse(&wasm).map_err(|reason| runtime::Error::Policy { plugin: label.clone(), reason })?;
    problems.extend(interface.violations());
    let mut describe = None;
    if problems.is_empty() {
        let runtime = Runtime::new(&CacheConfig::Default)?;
        match runtime
            .compile(&label, &wasm)
            .and_then(|c| runtime.link(&label, c))
            .and_then(|p| p.describe(&label))
        {
            Ok(info) => describe = Some(info),
            Err(e) => problems.push(e.to_string()),
        }
    }
    let version = interface.wit_version().unwrap_or("unknown").to_owned();
    if args.json {
        let v = json!({
            "file": wasm_path,
            "sha256": sha256,
            "manifest_digest": manifest_digest,
            "signed_by": signed_by,
            "wit_version": version,
            "imports": interface.imports,
            "exports": interface.exports,
            "policy": if problems.is_empty() { "pass" } else { "fail" },
            "problems": problems,
            "describe": describe.as_ref().map(|i| json!({
                "name": i.name, "version": i.version, "summary": i.summary, "roots": i.roots,
            })),
        });
        println!("{}", escape_json_c1(&v.to_string()));
    } else {
        println!("file:        {}", escape_all(&wasm_path));
        println!("sha256:      {sha256}");
        if let Some(d) = &manifest_digest {
            println!("manifest:    {d}");
        }
        if let Some(who) = &signed_by {
            println!("signed by:   {}", escape_all(who));
        }
        println!("wit version: durasync:plugin@{version}");
        println!("imports:");
        for i in &interface.imports {
            println!("  {}", escape_all(i));
        }
        println!("exports:");
        for e in &interface.exports {
            println!("  {}", escape_all(e));
        }
        if problems.is_empty() {
            println!("policy:      pass");
        } else {
            println!("policy:      FAIL");
            for p in &problems {
                println!("  {}", escape_lines(p, "    "));
            }
        }
        if let Some(info) = &describe {
            println!("describe:");
            println!("  name:    {}", escape_all(&info.name));
            println!("  version: {}", escape_all(&info.version));
            println!("  summary: {}", escape_all(&info.summary));
            println!("  roots:   {}", escape_all(&info.roots.join(", ")));
        }
    }
    if !problems.is_empty() {
        return Err(anyhow::Error::new(exit::Status(exit::POLICY)))
            .context(format!("{label}: refused by policy"));
    }
    if describe.is_none() {
        bail!("{label}: describe failed");
    }
    Ok(())
}
