//! `durasync compile MANIFEST…`: the cache filled ahead of time, so the
//! first `run` loads the plugin precompiled.

use super::*;

fn compile(manifests: &[&Path], cache: &Path) -> Output {
    Command::new(support::durasync())
        .arg("compile")
        .args(manifests)
        .env("XDG_CACHE_HOME", cache)
        .env("DURASYNC_LOG", "info")
        .output()
        .unwrap()
}

/// The compiled artifacts in a cache (beside them: remembered pins).
fn artifacts(cache: &Path) -> usize {
    std::fs::read_dir(cache.join("durasync"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "cwasm"))
        .count()
}

#[test]
fn compile_fills_the_cache_so_the_first_run_does_not_compile() {
    let a = Fixture::new("noop", "rw", "");
    let b = Fixture::new("hostile", "rw", "");
    let cache = a.path("cache");
    let out = compile(&[&a.manifest, &b.manifest], &cache);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with("compiled noop (") && lines[1].starts_with("compiled hostile ("),
        "{stdout}"
    );
    assert_eq!(artifacts(&cache), 2, "one artifact per component");
    // The first run loads it: nothing is compiled, nothing recompiled.
    let out = run_with_cache(&a, &cache);
    assert_eq!(out.status.code(), Some(OK), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("recompiling"), "{}", text(&out.stderr));
    assert_eq!(artifacts(&cache), 2);
    // Again: already there.
    let out = compile(&[&a.manifest], &cache);
    assert!(text(&out.stdout).starts_with("cached noop ("), "{}", text(&out.stdout));
}

#[test]
fn compile_refuses_a_wrong_pin_or_a_plugin_the_host_cannot_link_like_run() {
    let fx = Fixture::new("noop", "rw", "");
    let cache = fx.path("cache");
    let manifest = std::fs::read_to_string(&fx.manifest).unwrap();
    let real = sha256_of_file(&fx.path("plugin.wasm"));
    std::fs::write(&fx.manifest, manifest.replace(&real, &"0".repeat(64))).unwrap();
    let out = compile(&[&fx.manifest], &cache);
    assert_eq!(out.status.code(), Some(POLICY), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("refusing to load"), "{}", text(&out.stderr));
    assert!(!cache.exists(), "nothing is compiled for a wrong pin");

    let fx = Fixture::new("newer-minor", "rw", "");
    let out = compile(&[&fx.manifest], &cache);
    assert_eq!(out.status.code(), Some(POLICY), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("[method]dir.rename"), "{}", text(&out.stderr));
}

/// A runtime compiling misses in a child of the real binary, with its cache at `cache`.
fn out_of_process(cache: &Path, program: PathBuf, args: &[&str]) -> durasync::runtime::Runtime {
    use durasync::runtime::compiler::OutOfProcess;
    let mut runtime =
        durasync::runtime::Runtime::new(&durasync::runtime::CacheConfig::Dir(cache.into())).unwrap();
    runtime.compile_out_of_process(OutOfProcess {
        program,
        args: args.iter().map(Into::into).collect(),
        timeout: std::time::Duration::from_secs(120),
    });
    runtime
}

#[test]
fn a_compile_in_a_child_process_stores_an_artifact_this_process_loads_like_its_own() {
    let f = Fixture::new("noop", "rw", "");
    let cache = f.path("cache");
    let manifest = durasync::runtime::Manifest::load(&f.manifest).unwrap();
    let runtime = out_of_process(&cache, support::durasync(), &["__compile-artifact"]);
    runtime.load_manifest(&manifest).unwrap();
    // Winch's artifact, then the background compile's in its place.
    upgraded(&cache);
    assert_eq!(by_compiler(&cache), (1, 0), "the children stored one artifact");
    // An in-process runtime finds it usable: the same engine settings.
    let in_process =
        durasync::runtime::Runtime::new(&durasync::runtime::CacheConfig::Dir(cache.clone())).unwrap();
    let (status, _) = in_process.precompile(&manifest).unwrap();
    assert_eq!(status, durasync::runtime::CacheStatus::Hit);
}

#[test]
fn a_compile_child_that_dies_fails_the_load_with_how_it_ended_and_nothing_is_compiled_here() {
    let f = Fixture::new("noop", "rw", "");
    let manifest = durasync::runtime::Manifest::load(&f.manifest).unwrap();
    for (args, says) in [
        (vec!["-c", "kill -9 $$"], "killed (SIGKILL: out of memory"),
        (vec!["-c", "echo 'no room left' >&2; exit 3"], "no room left"),
        (vec!["-c", "cat >/dev/null; exit 0"], "left no artifact"),
    ] {
        let cache = f.path(&format!("cache-{}", says.len()));
        let runtime = out_of_process(&cache, "/bin/sh".into(), &args);
        let e = runtime.load_manifest(&manifest).err().expect("the load fails").to_string();
        assert!(e.contains("compiling noop") && e.contains(says), "{e}");
        let cwasm = std::fs::read_dir(&cache).map_or(0, |d| {
            d.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "cwasm")).count()
        });
        assert_eq!(cwasm, 0, "not compiled in this process instead");
    }
}

#[test]
fn a_compile_child_refuses_bytes_that_are_not_the_pinned_component() {
    let f = Fixture::new("noop", "rw", "");
    let artifact = f.path("x.cwasm");
    let mut child = Command::new(support::durasync())
        .args(["__compile-artifact", "--sha256", &"0".repeat(64), "--artifact"])
        .arg(&artifact)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&std::fs::read(f.path("plugin.wasm")).unwrap()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("sha256"), "{}", text(&out.stderr));
    assert!(!artifact.exists());
}

/// The artifacts of a cache directory by compiler: (Cranelift's, Winch's).
fn by_compiler(cache: &Path) -> (usize, usize) {
    let names: Vec<String> = std::fs::read_dir(cache)
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    let winch = names.iter().filter(|n| n.ends_with("-winch.cwasm")).count();
    (names.iter().filter(|n| n.ends_with(".cwasm")).count() - winch, winch)
}

/// Wait until the background compile in `cache` is over: no Winch artifact
/// left, or a failure note beside the Cranelift artifact's path. The bound
/// is a stuck upgrade, not a slow one.
pub(crate) fn upgraded(cache: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let noted = std::fs::read_dir(cache)
            .map(|d| d.filter_map(Result::ok).any(|e| e.file_name().to_string_lossy().ends_with(".failed")))
            .unwrap_or(false);
        if noted || by_compiler(cache).1 == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the background compile in {} never ended",
            cache.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn an_artifact_loads_only_into_an_engine_of_the_compiler_that_made_it() {
    use durasync::runtime::compiler::{Compiler, engine};
    use wasmtime::component::Component;
    let f = Fixture::new("noop", "rw", "");
    let wasm = std::fs::read(f.path("plugin.wasm")).unwrap();
    let cranelift = engine(Compiler::Cranelift).unwrap();
    let winch = engine(Compiler::Winch).unwrap();
    let by_cranelift = cranelift.precompile_component(&wasm).unwrap();
    let by_winch = winch.precompile_component(&wasm).unwrap();
    assert_ne!(by_cranelift, by_winch);
    for (engine, own, other) in [(&cranelift, &by_cranelift, &by_winch), (&winch, &by_winch, &by_cranelift)] {
        // SAFETY: both artifacts were made by wasmtime in this test.
        assert!(unsafe { Component::deserialize(engine, own) }.is_ok());
        let refused = unsafe { Component::deserialize(engine, other) };
        assert!(refused.is_err(), "an artifact of the other compiler was loaded");
    }
}

#[test]
fn a_first_load_runs_winchs_artifact_until_the_background_compile_replaces_it_with_cranelifts() {
    use durasync::runtime::compiler::Compiler;
    let f = Fixture::new("noop", "rw", "");
    let cache = f.path("cache");
    let manifest = durasync::runtime::Manifest::load(&f.manifest).unwrap();
    let runtime = out_of_process(&cache, support::durasync(), &["__compile-artifact"]);
    let plugin = runtime.load_manifest(&manifest).unwrap();
    assert_eq!(plugin.compiler, Compiler::Winch, "a miss is compiled by Winch first");
    plugin.describe("noop").expect("Winch's code runs");
    upgraded(&cache);
    assert_eq!(by_compiler(&cache), (1, 0), "Cranelift's artifact replaced Winch's");
    // A later load, in another process's runtime as in this one, uses it.
    for runtime in [&runtime, &out_of_process(&cache, support::durasync(), &["__compile-artifact"])] {
        let plugin = runtime.load_manifest(&manifest).unwrap();
        assert_eq!(plugin.compiler, Compiler::Cranelift);
    }
    assert_eq!(by_compiler(&cache), (1, 0), "nothing compiled again");
    // The CLI's run takes the same path: Winch, then Cranelift.
    let fresh = f.path("cache-run");
    let out = run_with_cache(&f, &fresh);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(OK), "{stderr}");
    assert!(stderr.contains("compiler=\"winch\""), "{stderr}");
    upgraded(&fresh.join("durasync"));
    assert_eq!(by_compiler(&fresh.join("durasync")), (1, 0));
    let out = run_with_cache(&f, &fresh);
    assert!(!text(&out.stderr).contains("compiled in a child"), "{}", text(&out.stderr));
}

#[test]
fn a_failed_background_compile_leaves_winchs_artifact_in_use_and_is_not_retried() {
    use durasync::runtime::compiler::Compiler;
    let f = Fixture::new("noop", "rw", "");
    let manifest = durasync::runtime::Manifest::load(&f.manifest).unwrap();
    // Learn the Cranelift artifact's name in one cache...
    let good = f.path("good");
    durasync::runtime::Runtime::new(&durasync::runtime::CacheConfig::Dir(good.clone()))
        .unwrap()
        .precompile(&manifest)
        .unwrap();
    let name = std::fs::read_dir(&good)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .find(|n| n.to_string_lossy().ends_with(".cwasm"))
        .unwrap();
    // ...and block it in another: a directory where the artifact goes.
    let cache = f.path("cache");
    std::fs::create_dir_all(cache.join(&name)).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    let runtime = out_of_process(&cache, support::durasync(), &["__compile-artifact"]);
    assert_eq!(runtime.load_manifest(&manifest).unwrap().compiler, Compiler::Winch);
    upgraded(&cache);
    let mut note = name.clone();
    note.push(".failed");
    assert!(cache.join(&note).is_file(), "the failure is noted");
    assert_eq!(by_compiler(&cache).1, 1, "Winch's artifact stays");
    // The next load uses it and starts nothing: a child would leave `started`.
    let started = f.path("started");
    let again = out_of_process(&cache, "/bin/sh".into(), &["-c", "touch \"$0\"", started.to_str().unwrap()]);
    assert_eq!(again.load_manifest(&manifest).unwrap().compiler, Compiler::Winch);
    assert!(!started.exists(), "a compile or an upgrade was started again");
    assert_eq!(by_compiler(&cache).1, 1);
}
