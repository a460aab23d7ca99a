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
    assert_eq!(
        std::fs::read_dir(&cache)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "cwasm"))
            .count(),
        1,
        "the child stored one artifact"
    );
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
