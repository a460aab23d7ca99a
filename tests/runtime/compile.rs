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
