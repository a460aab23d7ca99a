//! durasync against the upstream (library-go) sequence and the physical
//! floor, in one run, on one file system, interleaved; plus start-up.
//!
//! ```text
//! cargo bench -p durasync --bench sync                  # the full run (BENCHMARKS.md)
//! cargo bench -p durasync --bench sync -- --quick       # a few rounds, to check the harness
//! cargo bench -p durasync --bench sync -- --n 100 --rounds 20 --no-startup --no-strace
//! cargo bench -p durasync --bench sync -- --no-sync --no-startup --changed 1,10,100   # partial changes only
//! ```
//!
//! For each N (files of 4 KiB, fresh contents every round) every round runs
//! each variant once, in an order rotated by one every round (A B C D E,
//! B C D E A, …), so drift on this disk (freed-inode slowness, other
//! people's builds) hits all alike. Ratios are taken per round (two numbers
//! measured seconds apart) and summarised as median [p10–p90].

mod partial;
mod startup;
mod stats;
mod strace;
mod upstream;
mod variants;
mod wasm;

use std::fmt::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use durasync::digest::sha256_hex;
use durasync::durable::Outcome;
use durasync::runtime::{CacheConfig, Manifest, Plugin, Runtime};

use stats::{Summary, fmt_num, fmt_summary, ms, ratios, summarize};
use variants::{Sample, contents, plugin_input};

/// Every file is this big.
pub(crate) const FILE_SIZE: usize = 4096;

#[derive(Debug)]
struct Args {
    quick: bool,
    ns: Vec<usize>,
    rounds: Option<usize>,
    warmup: Option<usize>,
    sync: bool,
    startup: bool,
    strace: Option<bool>,
    settle_rounds: Option<usize>,
    settle_secs: f64,
    /// K of the partial-change runs (K changed files of the largest N).
    changed: Vec<usize>,
    partial_rounds: Option<usize>,
    partial_settle_rounds: Option<usize>,
}

fn parse_args() -> Args {
    let mut a = Args {
        quick: false,
        ns: vec![10, 100, 1000],
        rounds: None,
        warmup: None,
        sync: true,
        startup: true,
        strace: None,
        settle_rounds: None,
        settle_secs: 5.5,
        changed: vec![1, 10, 100],
        partial_rounds: None,
        partial_settle_rounds: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().unwrap_or_else(|| panic!("{name} needs a value"));
        match arg.as_str() {
            // cargo bench passes --bench to harness = false targets.
            "--bench" => {}
            "--quick" => a.quick = true,
            "--n" => {
                a.ns = value("--n").split(',').map(|s| s.trim().parse().expect("--n 10,100,1000")).collect()
            }
            "--rounds" => a.rounds = Some(value("--rounds").parse().expect("--rounds K")),
            "--warmup" => a.warmup = Some(value("--warmup").parse().expect("--warmup K")),
            "--no-sync" => a.sync = false,
            "--no-startup" => a.startup = false,
            "--strace" => a.strace = Some(true),
            "--no-strace" => a.strace = Some(false),
            "--settle-rounds" => {
                a.settle_rounds = Some(value("--settle-rounds").parse().expect("--settle-rounds K"))
            }
            "--settle-secs" => a.settle_secs = value("--settle-secs").parse().expect("--settle-secs S"),
            "--changed" => {
                let v = value("--changed");
                a.changed = if v == "none" {
                    Vec::new()
                } else {
                    v.split(',').map(|s| s.trim().parse().expect("--changed 1,10,100")).collect()
                }
            }
            "--partial-rounds" => {
                a.partial_rounds = Some(value("--partial-rounds").parse().expect("--partial-rounds K"))
            }
            "--partial-settle-rounds" => {
                a.partial_settle_rounds =
                    Some(value("--partial-settle-rounds").parse().expect("--partial-settle-rounds K"))
            }
            "-h" | "--help" => {
                println!(
                    "usage: cargo bench -p durasync --bench sync -- [--quick] [--n 10,100,1000] \
                     [--rounds K] [--warmup K] [--no-sync] [--no-startup] [--strace|--no-strace] \
                     [--settle-rounds K] [--settle-secs S] [--changed 1,10,100|none] \
                     [--partial-rounds K] [--partial-settle-rounds K]"
                );
                std::process::exit(0);
            }
            other => panic!("unknown argument {other:?} (try --help)"),
        }
    }
    a
}

/// The variants, in their round-0 order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Durasync,
    Plugin,
    Upstream,
    UpstreamN3,
    Floor,
    Unchanged,
}

const VARIANTS: [Variant; 6] = [
    Variant::Durasync,
    Variant::Plugin,
    Variant::Upstream,
    Variant::UpstreamN3,
    Variant::Floor,
    Variant::Unchanged,
];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Durasync => "durasync",
            Variant::Plugin => "plugin",
            Variant::Upstream => "upstream",
            Variant::UpstreamN3 => "upstream-n3",
            Variant::Floor => "floor",
            Variant::Unchanged => "unchanged",
        }
    }
}

/// The bench-sync component and its sha256, for manifests.
static SYNC_WASM: OnceLock<(PathBuf, String)> = OnceLock::new();

/// A manifest granting the bench-sync plugin `root` as `bench` (rw).
pub(crate) fn sync_manifest_text(root: &Path) -> String {
    let (wasm, sha) = SYNC_WASM.get().expect("plugins built");
    format!(
        "name = \"bench-sync\"\nwasm = {:?}\nsha256 = \"{sha}\"\n[roots.bench]\npath = {:?}\naccess = \"rw\"\n",
        wasm.display().to_string(),
        root.display().to_string()
    )
}

fn mkdir_open(path: &Path) -> OwnedFd {
    std::fs::create_dir_all(path).expect("bench dir");
    rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .expect("open bench dir")
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// All samples of one N.
struct NResult {
    n: usize,
    /// `tight` (back to back) or `settled` (see [`Settle`]).
    regime: &'static str,
    rounds: usize,
    samples: Vec<(Variant, Vec<Sample>)>,
}

impl NResult {
    fn of(&self, v: Variant) -> &[Sample] {
        &self.samples.iter().find(|(x, _)| *x == v).expect("variant measured").1
    }
    fn total(&self, v: Variant) -> Vec<f64> {
        self.of(v).iter().map(|s| ms(s.total)).collect()
    }
    /// Commit time where the variant has one, else its total.
    fn commit(&self, v: Variant) -> Vec<f64> {
        self.of(v).iter().map(|s| ms(s.commit.unwrap_or(s.total))).collect()
    }
}

/// How long to let the file system settle before each variant (untimed).
///
/// ext4 without a journal skips, when it allocates an inode, every inode
/// of the group freed less than 5 s ago — 305 s while the freed inode's
/// table block is still dirty (`recently_deleted()` in fs/ext4/ialloc.c) —
/// looking each one up in the buffer cache, from the start of the group for
/// every new file. A tight loop that deletes thousands of files per round
/// makes every create scan thousands of such inodes (CPU time in the
/// kernel, `perf`: `find_inode_bit` → `recently_deleted`). The settled
/// regime writes those blocks back (`syncfs`) and waits past the 5 s, as a
/// node does between reconciles.
#[derive(Debug, Clone, Copy)]
struct Settle(std::time::Duration);

fn run_sync(
    n: usize,
    rounds: usize,
    warmup: usize,
    tmp: &Path,
    plugin: &Plugin,
    settle: Option<Settle>,
) -> NResult {
    let regime = if settle.is_some() { "settled" } else { "tight" };
    let dir = |v: Variant| tmp.join(format!("{}-{n}-{regime}", v.name()));
    let tmp_fd = mkdir_open(tmp);
    let fds: Vec<OwnedFd> = VARIANTS.iter().map(|v| mkdir_open(&dir(*v))).collect();
    let fd = |v: Variant| fds[VARIANTS.iter().position(|x| *x == v).expect("variant")].as_fd();
    let manifest_path = tmp.join(format!("bench-sync-{n}.toml"));
    std::fs::write(&manifest_path, sync_manifest_text(&dir(Variant::Plugin))).expect("manifest");
    let manifest = Manifest::load(&manifest_path).expect("bench manifest");
    // The plugin was loaded once for the process (a warm host); each round
    // makes a fresh request and a fresh instance.

    // Untimed set-up: every target exists, so every timed round is a replace.
    let setup = |seed| contents(n, FILE_SIZE, seed);
    variants::durasync_setup(fd(Variant::Durasync), setup(1));
    variants::durasync_setup(fd(Variant::Plugin), setup(2));
    variants::upstream(&dir(Variant::Upstream), &setup(3), false);
    variants::upstream(&dir(Variant::UpstreamN3), &setup(5), true);
    variants::floor_setup(fd(Variant::Floor), &setup(4));
    let same = setup(u64::MAX - n as u64);
    variants::durasync_setup(fd(Variant::Unchanged), same.clone());

    let mut samples: Vec<(Variant, Vec<Sample>)> = VARIANTS.iter().map(|v| (*v, Vec::new())).collect();
    let mut last: Vec<Option<variants::Files>> = vec![None; VARIANTS.len()];
    for r in 0..warmup + rounds {
        let mut order = VARIANTS;
        order.rotate_left(r % VARIANTS.len());
        for v in order {
            let idx = VARIANTS.iter().position(|x| *x == v).expect("variant");
            // Fresh contents every round and variant (untimed).
            let seed = ((n as u64) << 40) | ((r as u64) << 8) | (idx as u64 + 16);
            let files = if v == Variant::Unchanged { same.clone() } else { contents(n, FILE_SIZE, seed) };
            if let Some(Settle(pause)) = settle {
                rustix::fs::syncfs(&tmp_fd).expect("syncfs");
                std::thread::sleep(pause);
            }
            let sample = match v {
                Variant::Durasync => variants::durasync(fd(v), files.clone(), Outcome::Replaced),
                Variant::Plugin => variants::plugin(plugin, &manifest, plugin_input(&files)),
                Variant::Upstream => variants::upstream(&dir(v), &files, false),
                Variant::UpstreamN3 => variants::upstream(&dir(v), &files, true),
                Variant::Floor => variants::floor(fd(v), &files, durasync::durable::DEFAULT_THREADS),
                Variant::Unchanged => variants::durasync(fd(v), files.clone(), Outcome::Unchanged),
            };
            if r >= warmup {
                samples[idx].1.push(sample);
            }
            last[idx] = Some(files);
        }
        eprint!(".");
    }
    eprintln!(" N={n} {regime} done (load {})", loadavg());

    // Every variant really left its last contents in its target.
    for (idx, v) in VARIANTS.iter().enumerate() {
        let files = last[idx].as_ref().expect("ran");
        let target = dir(*v).join(variants::TARGET);
        let mut names: Vec<String> = std::fs::read_dir(&target)
            .expect("read target")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let expected: Vec<&String> = files.iter().map(|(name, _)| name).collect();
        assert_eq!(names.iter().collect::<Vec<_>>(), expected, "{} left other names", v.name());
        for (name, data) in files {
            assert_eq!(&std::fs::read(target.join(name)).expect("read back"), data, "{} {name}", v.name());
        }
    }
    NResult { n, regime, rounds, samples }
}

fn fsyncs_of(samples: &[Sample]) -> String {
    let counts: Vec<usize> = samples.iter().filter_map(|s| s.fsyncs).collect();
    match (counts.iter().min(), counts.iter().max()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) => format!("{a}–{b}"),
        _ => "(strace below)".into(),
    }
}

struct Check {
    what: String,
    value: String,
    target: String,
    ok: bool,
}

fn report_sync(results: &[NResult], out: &mut String, checks: &mut Vec<Check>) {
    let _ = writeln!(out, "### Per variant: milliseconds, median [p10–p90]\n");
    let _ = writeln!(out, "| N | variant | total ms | commit ms | min–max total | fsyncs/sync (counted) |");
    let _ = writeln!(out, "|---:|---|---|---|---|---:|");
    for r in results {
        for v in VARIANTS {
            let total = summarize(&r.total(v));
            let commit = if r.of(v).iter().any(|s| s.commit.is_some()) {
                fmt_summary(&summarize(&r.commit(v)))
            } else {
                "–".into()
            };
            let _ = writeln!(
                out,
                "| {} {} | {} | {} | {} | {}–{} | {} |",
                r.n,
                r.regime,
                v.name(),
                fmt_summary(&total),
                commit,
                fmt_num(total.min),
                fmt_num(total.max),
                fsyncs_of(r.of(v))
            );
        }
    }
    let _ = writeln!(out, "\n### Ratios, per round, median [p10–p90]\n");
    let _ = writeln!(
        out,
        "| N | rounds | durasync/upstream | durasync/upstream-n3 | durasync/floor | durasync/upstream (commit) | durasync/upstream-n3 (commit) | durasync/floor (commit) | plugin/native | unchanged/changed |"
    );
    let _ = writeln!(out, "|---:|---:|---|---|---|---|---|---|---|---|");
    for r in results {
        let d = r.total(Variant::Durasync);
        let dc = r.commit(Variant::Durasync);
        let up = summarize(&ratios(&d, &r.total(Variant::Upstream)));
        let up3 = summarize(&ratios(&d, &r.total(Variant::UpstreamN3)));
        let up3c = summarize(&ratios(&dc, &r.commit(Variant::UpstreamN3)));
        let fl = summarize(&ratios(&d, &r.total(Variant::Floor)));
        let upc = summarize(&ratios(&dc, &r.commit(Variant::Upstream)));
        let flc = summarize(&ratios(&dc, &r.commit(Variant::Floor)));
        let pl = summarize(&ratios(&r.total(Variant::Plugin), &d));
        let un = summarize(&ratios(&r.total(Variant::Unchanged), &d));
        let _ = writeln!(
            out,
            "| {} {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.n,
            r.regime,
            r.rounds,
            fmt_summary(&up),
            fmt_summary(&up3),
            fmt_summary(&fl),
            fmt_summary(&upc),
            fmt_summary(&up3c),
            fmt_summary(&flc),
            fmt_summary(&pl),
            fmt_summary(&un)
        );
        let check = |what: &str, s: &Summary, limit: f64| Check {
            what: format!("N={} {}: {what}", r.n, r.regime),
            value: fmt_summary(s),
            target: format!("≤ {limit}"),
            ok: s.median <= limit,
        };
        if r.n == 1000 {
            checks.push(check("durasync/upstream (total)", &up, 0.35));
            checks.push(check("durasync/upstream (commit)", &upc, 0.35));
            checks.push(check("durasync/upstream-n3 (total)", &up3, 0.35));
            checks.push(check("durasync/floor (total)", &fl, 1.3));
            checks.push(check("durasync/floor (commit)", &flc, 1.3));
            checks.push(check("unchanged/changed", &un, 0.05));
            let unchanged_fsyncs: usize = r.of(Variant::Unchanged).iter().filter_map(|s| s.fsyncs).sum();
            checks.push(Check {
                what: format!("N={} {}: unchanged fsyncs (all rounds, counted)", r.n, r.regime),
                value: unchanged_fsyncs.to_string(),
                target: "0".into(),
                ok: unchanged_fsyncs == 0,
            });
        }
        if r.n == 100 {
            checks.push(check("plugin/native", &pl, 1.10));
        }
    }
}

fn report_partial(
    results: &[partial::KResult],
    traced: &[(usize, strace::Counts)],
    out: &mut String,
    checks: &mut Vec<Check>,
) {
    let _ = writeln!(
        out,
        "\n### Partial changes: K changed files of N, total ms and per-round ratios, median [p10–p90]\n"
    );
    let _ = writeln!(
        out,
        "| K of N | rounds | durasync ms | durasync-full ms | upstream ms | upstream-n3 ms | floor ms | durasync/durasync-full | durasync/upstream | durasync/upstream-n3 | durasync/floor | fsyncs counted (durasync, full, upstream, n3, floor) |"
    );
    let _ = writeln!(out, "|---|---:|---|---|---|---|---|---|---|---|---|---|");
    for r in results {
        let d = r.total("durasync");
        let s = |v: &str| fmt_summary(&summarize(&r.total(v)));
        let ratio = |v: &str| summarize(&ratios(&d, &r.total(v)));
        let full = ratio("durasync-full");
        let _ = writeln!(
            out,
            "| {} of {} {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}, {}, {}, {}, {} |",
            r.k,
            r.n,
            r.regime,
            r.rounds,
            s("durasync"),
            s("durasync-full"),
            s("upstream"),
            s("upstream-n3"),
            s("floor"),
            fmt_summary(&full),
            fmt_summary(&ratio("upstream")),
            fmt_summary(&ratio("upstream-n3")),
            fmt_summary(&ratio("floor")),
            r.fsyncs("durasync"),
            r.fsyncs("durasync-full"),
            r.fsyncs("upstream"),
            r.fsyncs("upstream-n3"),
            r.fsyncs("floor"),
        );
        if r.k == 1 {
            checks.push(Check {
                what: format!("1 of {} changed, {}: durasync / full replace", r.n, r.regime),
                value: fmt_summary(&full),
                target: "≤ 0.1".into(),
                ok: full.median <= 0.10,
            });
        }
    }
    for (k, c) in traced {
        let _ = writeln!(out, "\nstrace -f -c of `durasync sync`, {k} changed: {}", c.show());
    }
}

fn main() {
    let args = parse_args();
    let rounds_for = |n: usize| match (args.rounds, args.quick) {
        (Some(k), _) => k,
        (None, true) => 4,
        (None, false) if n >= 1000 => 25,
        (None, false) => 40,
    };
    let warmup = args.warmup.unwrap_or(if args.quick { 1 } else { 3 });
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_durasync"));
    let load_start = loadavg();

    let tmp = tempfile::Builder::new()
        .prefix("durasync-bench-")
        .tempdir_in(wasm::target_root())
        .expect("bench temp dir");
    let cache = tmp.path().join("cache");
    let do_strace = args.strace.unwrap_or(!args.quick);
    // The plugins are built only for what uses them (a partial-changes-only
    // run needs none).
    let plugins = (args.sync || args.startup || do_strace).then(|| {
        eprintln!("building the bench plugins (target/wasm-bench)…");
        let built = wasm::build(&["bench-sync", "bench-noop"]);
        let sha = |p: &Path| sha256_hex(&std::fs::read(p).expect("read wasm"));
        SYNC_WASM.set((built[0].clone(), sha(&built[0]))).expect("once");
        let runtime = Runtime::new(&CacheConfig::Dir(cache.clone())).expect("runtime");
        let warm_manifest = tmp.path().join("bench-sync-load.toml");
        std::fs::create_dir_all(tmp.path().join("load-root")).expect("dir");
        std::fs::write(&warm_manifest, sync_manifest_text(&tmp.path().join("load-root"))).expect("manifest");
        let plugin =
            runtime.load_manifest(&Manifest::load(&warm_manifest).expect("manifest")).expect("load plugin");
        (built, plugin)
    });
    let sha = |p: &Path| sha256_hex(&std::fs::read(p).expect("read wasm"));

    let mut out = String::new();
    let mut checks = Vec::new();
    let _ = writeln!(
        out,
        "## durasync bench: {} ({} files of {FILE_SIZE} B, rounds {}, warm-up {warmup})\n",
        if args.quick { "quick" } else { "full" },
        args.ns.iter().map(usize::to_string).collect::<Vec<_>>().join("/"),
        args.ns.iter().map(|n| rounds_for(*n).to_string()).collect::<Vec<_>>().join("/"),
    );
    let _ = writeln!(out, "scratch dir: {} (same file system as the repository)\n", tmp.path().display());

    if args.sync {
        let plugin = &plugins.as_ref().expect("plugins built").1;
        let mut results: Vec<NResult> =
            args.ns.iter().map(|n| run_sync(*n, rounds_for(*n), warmup, tmp.path(), plugin, None)).collect();
        // The largest N again, with the file system settled before each variant.
        let settle_rounds = args.settle_rounds.unwrap_or(if args.quick { 0 } else { 6 });
        if let (Some(&n), true) = (args.ns.iter().max(), settle_rounds > 0) {
            let pause = Settle(std::time::Duration::from_secs_f64(args.settle_secs));
            results.push(run_sync(n, settle_rounds, 1, tmp.path(), plugin, Some(pause)));
        }
        report_sync(&results, &mut out, &mut checks);
    }

    if !args.changed.is_empty() {
        let n = args.ns.iter().copied().max().unwrap_or(1000);
        let rounds = args.partial_rounds.unwrap_or(if args.quick { 2 } else { 10 });
        let settled = args.partial_settle_rounds.unwrap_or(if args.quick { 0 } else { 3 });
        let mut results: Vec<partial::KResult> =
            args.changed.iter().map(|k| partial::run(n, *k, rounds, warmup, tmp.path(), None)).collect();
        if settled > 0 {
            let pause = std::time::Duration::from_secs_f64(args.settle_secs);
            for k in &args.changed {
                results.push(partial::run(n, *k, settled, 1, tmp.path(), Some(pause)));
            }
        }
        let partial_strace: Vec<(usize, strace::Counts)> = if do_strace && strace::available() {
            args.changed
                .iter()
                .map(|k| (*k, strace::partial_counts(&bin, tmp.path(), n, *k, FILE_SIZE)))
                .collect()
        } else {
            Vec::new()
        };
        report_partial(&results, &partial_strace, &mut out, &mut checks);
    }

    if do_strace && plugins.is_some() {
        if strace::available() {
            let n = args.ns.iter().copied().max().unwrap_or(1000);
            eprintln!("strace cross-check at N={n}…");
            let (replace, unchanged, plugin_counts) =
                strace::cross_check(&bin, tmp.path(), &cache, n, FILE_SIZE);
            let _ = writeln!(out, "\n### strace -f -c of the release binary, N={n}\n");
            let _ = writeln!(out, "| run | sync-family calls |\n|---|---|");
            let _ = writeln!(out, "| `durasync sync` (replace) | {} |", replace.show());
            let _ = writeln!(out, "| `durasync sync` (same contents again) | {} |", unchanged.show());
            let _ = writeln!(out, "| `durasync run` bench-sync (replace) | {} |", plugin_counts.show());
            checks.push(Check {
                what: format!("strace: unchanged `durasync sync` N={n}"),
                value: unchanged.show(),
                target: "fsync 0".into(),
                ok: unchanged.fsync + unchanged.fdatasync + unchanged.syncfs + unchanged.sync == 0,
            });
        } else {
            let _ = writeln!(out, "\n(strace not usable here: no cross-check)");
        }
    }

    if args.startup {
        let built = &plugins.as_ref().expect("plugins built").0;
        let noop_manifest = tmp.path().join("bench-noop.toml");
        std::fs::write(
            &noop_manifest,
            format!(
                "name = \"bench-noop\"\nwasm = {:?}\nsha256 = \"{}\"\n",
                built[1].display().to_string(),
                sha(&built[1])
            ),
        )
        .expect("noop manifest");
        let (rounds, calls) = if args.quick { (10, 50) } else { (60, 500) };
        eprintln!("start-up ({rounds} interleaved process rounds)…");
        let s = startup::measure(&bin, &noop_manifest, &cache, rounds, calls);
        let (run, version) = (summarize(&s.run), summarize(&s.version));
        let ratio = summarize(&ratios(&s.run, &s.version));
        let _ = writeln!(out, "\n### Start-up, milliseconds, median [p10–p90]\n");
        let _ = writeln!(out, "| what | ms | runs |\n|---|---|---:|");
        let _ = writeln!(
            out,
            "| `durasync run noop.toml` (warm cache), process | {} | {} |",
            fmt_summary(&run),
            run.n
        );
        let _ =
            writeln!(out, "| `durasync --version`, process | {} | {} |", fmt_summary(&version), version.n);
        let _ = writeln!(out, "| run/version, per round | {} | {} |", fmt_summary(&ratio), ratio.n);
        for (what, v) in [
            ("`Runtime::new` (engine + linker), in process", &s.runtime_new),
            ("`load_manifest`, warm cache, in process", &s.load),
            ("warm instantiate + `run` call of noop, in process", &s.call),
        ] {
            let x = summarize(v);
            let _ = writeln!(out, "| {what} | {} | {} |", fmt_summary(&x), x.n);
        }
        checks.push(Check {
            what: "`durasync run` noop / `durasync --version`".into(),
            value: fmt_summary(&ratio),
            target: "≤ 3".into(),
            ok: ratio.median <= 3.0,
        });
    }

    let _ = writeln!(out, "\n### Targets (medians of per-round ratios)\n");
    let _ = writeln!(out, "| target | measured | limit | met |\n|---|---|---|---|");
    for c in &checks {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            c.what,
            c.value,
            c.target,
            if c.ok { "yes" } else { "**no**" }
        );
    }
    let _ = writeln!(
        out,
        "\nload average: {load_start} at start, {} at end; {} CPUs",
        loadavg(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("{out}");
}
