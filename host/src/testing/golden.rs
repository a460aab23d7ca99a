//! Golden tests of a built plugin (`durasync test MANIFEST CASES_DIR`), in
//! any language: each case is an input, a config, a starting tree and the
//! expected tree and result, run through the real runtime (the component
//! the manifest pins, its limits and grants), like `opa test` or
//! Kubewarden's request fixtures.
//!
//! A case is a folder of CASES_DIR:
//!
//! ```text
//! case.toml        result = "…" (exact) or error = "…" (the run fails, its
//!                  message contains this); optional [config] (replaces the
//!                  manifest's), optional [modes] ("path" = 0o600: expected
//!                  permission bits of files of `after/`)
//! input            the input bytes (empty when absent)
//! before/ROOT/…    each root's starting tree (empty when absent)
//! after/ROOT/…     each root's expected tree (names and bytes; the host's
//!                  `.durasync*` entries aside); a root without one must
//!                  end as it started
//! ```
//!
//! The fixture files are the operator's, yet bounded: [`MAX_CASES`],
//! [`MAX_TREE_FILES`] and [`MAX_TREE_BYTES`]; links and special files in a
//! fixture are refused naming them, and no link is followed (not `before`,
//! `after` or a root's folder). Anything in CASES_DIR that is not a folder
//! (a link to one, a fifo, a file) is a failed case naming it, never
//! skipped: a case that did not run must not read as passed.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::runtime::{self, Manifest, Plugin, RunRequest};

/// The most cases one CASES_DIR may hold.
pub const MAX_CASES: usize = 1000;
/// The most entries one fixture tree (or a root after a run) may hold.
pub const MAX_TREE_FILES: usize = 10_000;
/// The most bytes of files one fixture tree (or a root after a run) may hold.
pub const MAX_TREE_BYTES: u64 = 64 << 20;
/// The largest `case.toml` or `input` read.
pub const MAX_CASE_FILE_BYTES: u64 = 16 << 20;

/// Why the cases could not be run at all (a failing case is a [`Verdict`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A fixture breaks the layout above.
    #[error("{path}: {reason}")]
    Fixture {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading a fixture or setting up a root failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The plugin could not be loaded or a root granted.
    #[error(transparent)]
    Runtime(#[from] runtime::Error),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

fn fixture(path: &Path, reason: impl Into<String>) -> Error {
    Error::Fixture { path: path.to_owned(), reason: reason.into() }
}

/// What a case expects of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Success with exactly this result.
    Result(String),
    /// A plugin error whose message contains this.
    Error(String),
}

/// One parsed case.
#[derive(Debug, Clone)]
pub struct Case {
    /// The folder's name.
    pub name: String,
    /// Why this entry of CASES_DIR is no case (it fails without running).
    refused: Option<String>,
    dir: PathBuf,
    expect: Expect,
    config_json: Option<String>,
    modes: BTreeMap<String, u32>,
    input: Vec<u8>,
}

/// A tree as compared: `path` → file (mode, bytes) or directory (`None`).
pub type Snapshot = BTreeMap<String, Option<(u32, Vec<u8>)>>;

/// How one case went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Everything as expected.
    Pass,
    /// What differed, one line each.
    Fail(Vec<String>),
}

/// The cases of `dir`, sorted by name. An entry that is not a folder (a
/// link, even to a folder, a fifo, a file) is a case that fails naming
/// what it is: nothing in CASES_DIR is skipped silently.
pub fn load_cases(dir: &Path) -> Result<Vec<Case>, Error> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(format!("reading cases {}", dir.display())))? {
        let entry = entry.map_err(io(format!("reading cases {}", dir.display())))?;
        // The entry's own type (lstat): a link is not followed.
        let kind = entry.file_type().map_err(io("reading a case"))?;
        let name = entry.file_name().into_string().map_err(|n| fixture(&dir.join(&n), "is not UTF-8"))?;
        let refused = (!kind.is_dir()).then(|| not_a_case(&dir.join(&name), kind));
        names.push((name, refused));
        if names.len() > MAX_CASES {
            return Err(fixture(dir, format!("holds more than {MAX_CASES} cases")));
        }
    }
    if names.is_empty() {
        return Err(fixture(dir, "holds no case (a folder with case.toml)"));
    }
    names.sort();
    names
        .into_iter()
        .map(|(n, refused)| match refused {
            None => load_case(&dir.join(&n), &n),
            Some(why) => Ok(Case {
                name: n,
                refused: Some(why),
                dir: PathBuf::new(),
                expect: Expect::Error(String::new()),
                config_json: None,
                modes: BTreeMap::new(),
                input: Vec::new(),
            }),
        })
        .collect()
}

/// Why an entry of CASES_DIR of type `kind` is no case.
fn not_a_case(path: &Path, kind: std::fs::FileType) -> String {
    use std::os::unix::fs::FileTypeExt;
    let what = if kind.is_symlink() {
        "a symbolic link (links are not followed)"
    } else if kind.is_fifo() {
        "a fifo"
    } else if kind.is_file() {
        "a regular file"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a device"
    };
    format!("{}: is {what}, not a case folder; the case was not run", path.display())
}

/// Whether the fixture folder `path` exists: a real directory, never
/// through a link (a link or anything else there is refused).
fn fixture_dir(path: &Path) -> Result<bool, Error> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io(format!("reading {}", path.display()))(e)),
        Ok(m) if m.is_dir() => Ok(true),
        Ok(m) if m.is_symlink() => {
            Err(fixture(path, "is a symbolic link; a fixture folder must be a directory"))
        }
        Ok(_) => Err(fixture(path, "must be a directory")),
    }
}

fn read_small(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(format!("reading {}", path.display()))(e)),
        Ok(m) if !m.is_file() => Err(fixture(path, "must be a regular file")),
        Ok(m) if m.len() > MAX_CASE_FILE_BYTES => {
            Err(fixture(path, format!("is over the limit of {MAX_CASE_FILE_BYTES} bytes")))
        }
        Ok(_) => std::fs::read(path).map(Some).map_err(io(format!("reading {}", path.display()))),
    }
}

fn load_case(dir: &Path, name: &str) -> Result<Case, Error> {
    let toml_path = dir.join("case.toml");
    let text = read_small(&toml_path)?.ok_or_else(|| fixture(&toml_path, "is missing"))?;
    let (expect, config_json, modes) = parse_case(&text, &toml_path)?;
    let input = read_small(&dir.join("input"))?.unwrap_or_default();
    Ok(Case { name: name.to_owned(), refused: None, dir: dir.to_owned(), expect, config_json, modes, input })
}

/// What a case's `case.toml` holds: the expectation, the `[config]` as
/// JSON, the `[modes]`.
type CaseToml = (Expect, Option<String>, BTreeMap<String, u32>);

/// Parse the bytes of `case.toml` (at `toml_path`, named in errors).
pub(crate) fn parse_case(text: &[u8], toml_path: &Path) -> Result<CaseToml, Error> {
    let text = std::str::from_utf8(text).map_err(|_| fixture(toml_path, "is not UTF-8"))?;
    let table: toml::Table = toml::from_str(text).map_err(|e| fixture(toml_path, e.to_string()))?;
    for key in table.keys() {
        if !["result", "error", "config", "modes"].contains(&key.as_str()) {
            return Err(fixture(toml_path, format!("unknown key `{key}` (result, error, config, modes)")));
        }
    }
    let text_of = |key: &str| match table.get(key) {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(fixture(toml_path, format!("`{key}` must be a string"))),
    };
    let expect = match (text_of("result")?, text_of("error")?) {
        (Some(r), None) => Expect::Result(r),
        (None, Some(e)) if !e.is_empty() => Expect::Error(e),
        _ => return Err(fixture(toml_path, "needs exactly one of `result` or a non-empty `error`")),
    };
    let config_json = match table.get("config") {
        None => None,
        Some(toml::Value::Table(t)) => {
            Some(serde_json::to_string(t).map_err(|e| fixture(toml_path, format!("[config]: {e}")))?)
        }
        Some(_) => return Err(fixture(toml_path, "`config` must be a table")),
    };
    let mut modes = BTreeMap::new();
    if let Some(m) = table.get("modes") {
        let m = m.as_table().ok_or_else(|| fixture(toml_path, "`modes` must be a table"))?;
        for (path, v) in m {
            let mode =
                v.as_integer().and_then(|n| u32::try_from(n).ok()).filter(|n| *n <= 0o7777).ok_or_else(
                    || fixture(toml_path, format!("modes.\"{path}\" must be permission bits (0o644)")),
                )?;
            modes.insert(path.clone(), mode);
        }
    }
    Ok((expect, config_json, modes))
}

/// Read the tree at `dir` (missing: empty), skipping the host's `.durasync*`
/// entries; links (`dir` itself too) and special files are refused, sizes
/// bounded.
pub fn snapshot(dir: &Path) -> Result<Snapshot, Error> {
    let mut out = Snapshot::new();
    if !fixture_dir(dir)? {
        return Ok(out);
    }
    let mut bytes = 0u64;
    let mut stack = vec![(dir.to_owned(), String::new())];
    while let Some((path, rel)) = stack.pop() {
        for entry in std::fs::read_dir(&path).map_err(io(format!("reading {}", path.display())))? {
            let entry = entry.map_err(io(format!("reading {}", path.display())))?;
            let name = entry.file_name().into_string().map_err(|n| fixture(&path.join(n), "is not UTF-8"))?;
            if name.starts_with(".durasync") {
                continue;
            }
            let (p, r) = (entry.path(), if rel.is_empty() { name } else { format!("{rel}/{name}") });
            let meta = std::fs::symlink_metadata(&p).map_err(io(format!("reading {}", p.display())))?;
            if out.len() >= MAX_TREE_FILES {
                return Err(fixture(dir, format!("holds more than {MAX_TREE_FILES} entries")));
            }
            if meta.is_dir() {
                out.insert(r.clone(), None);
                stack.push((p, r));
            } else if meta.is_file() {
                bytes += meta.len();
                if bytes > MAX_TREE_BYTES {
                    return Err(fixture(dir, format!("holds more than {MAX_TREE_BYTES} bytes")));
                }
                let data = std::fs::read(&p).map_err(io(format!("reading {}", p.display())))?;
                out.insert(r, Some((meta.permissions().mode() & 0o7777, data)));
            } else {
                return Err(fixture(&p, "is neither a regular file nor a directory"));
            }
        }
    }
    Ok(out)
}

/// Write `tree` into the empty directory `dir`.
fn plant(tree: &Snapshot, dir: &Path) -> Result<(), Error> {
    // BTreeMap order puts every directory before what it holds.
    for (rel, node) in tree {
        let p = dir.join(rel);
        match node {
            None => std::fs::create_dir(&p).map_err(io(format!("creating {}", p.display())))?,
            Some((mode, data)) => {
                std::fs::write(&p, data).map_err(io(format!("writing {}", p.display())))?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode))
                    .map_err(io(format!("setting the mode of {}", p.display())))?;
            }
        }
    }
    Ok(())
}

/// The root names of a case: the manifest's (every one gets a fresh folder).
fn fixture_roots(case: &Case, manifest: &Manifest) -> Result<(), Error> {
    for sub in ["before", "after"] {
        let d = case.dir.join(sub);
        if !fixture_dir(&d)? {
            continue;
        }
        for entry in std::fs::read_dir(&d).map_err(io(format!("reading {}", d.display())))? {
            let name = entry.map_err(io("reading a fixture"))?.file_name();
            let name = name.to_string_lossy();
            if !manifest.roots.contains_key(name.as_ref()) {
                let granted: Vec<&str> = manifest.roots.keys().map(String::as_str).collect();
                return Err(fixture(
                    &d.join(name.as_ref()),
                    format!("names a root the manifest does not grant (granted: {})", granted.join(", ")),
                ));
            }
        }
    }
    Ok(())
}

/// Run `case` with `plugin` (loaded from `manifest`), each root a fresh
/// folder under `work`, and compare.
pub fn run_case(plugin: &Plugin, manifest: &Manifest, case: &Case, work: &Path) -> Result<Verdict, Error> {
    if let Some(why) = &case.refused {
        return Ok(Verdict::Fail(vec![why.clone()]));
    }
    fixture_roots(case, manifest)?;
    let mut m = manifest.clone();
    let mut roots = BTreeMap::new();
    for name in manifest.roots.keys() {
        let before = snapshot(&case.dir.join("before").join(name))?;
        let dir = work.join(name);
        std::fs::create_dir(&dir).map_err(io(format!("creating {}", dir.display())))?;
        plant(&before, &dir)?;
        m.override_root(name, dir.clone())?;
        roots.insert(name.clone(), (dir, before));
    }
    if let Some(config) = &case.config_json {
        m.config_json = config.clone();
    }
    let request = RunRequest::from_manifest(&m, case.input.clone(), false)?;
    let mut diffs = Vec::new();
    match (plugin.run(&request), &case.expect) {
        (Ok(out), Expect::Result(want)) if out.result == *want => {}
        (Ok(out), want) => diffs.push(format!("expected {want:?}, the run succeeded with {:?}", out.result)),
        (Err(runtime::Error::Plugin { message, .. }), Expect::Error(want))
            if message.contains(want.as_str()) => {}
        (Err(e), want) => diffs.push(format!("expected {want:?}, the run failed: {e}")),
    }
    for (name, (dir, before)) in &roots {
        let after_dir = case.dir.join("after").join(name);
        let want = if fixture_dir(&after_dir)? { snapshot(&after_dir)? } else { before.clone() };
        let got = snapshot(dir)?;
        diffs.extend(compare(name, &want, &got, &case.modes));
    }
    Ok(if diffs.is_empty() { Verdict::Pass } else { Verdict::Fail(diffs) })
}

/// What differs between the expected and the actual tree of root `root`:
/// names, kinds and bytes; modes where `modes` names the path.
pub fn compare(root: &str, want: &Snapshot, got: &Snapshot, modes: &BTreeMap<String, u32>) -> Vec<String> {
    let mut diffs = Vec::new();
    for (path, w) in want {
        match (w, got.get(path)) {
            (_, None) => diffs.push(format!("{root}:{path}: expected, missing")),
            (None, Some(Some(_))) => diffs.push(format!("{root}:{path}: expected a directory, found a file")),
            (Some(_), Some(None)) => diffs.push(format!("{root}:{path}: expected a file, found a directory")),
            (Some((_, wb)), Some(Some((_, gb)))) if wb != gb => diffs.push(format!(
                "{root}:{path}: expected {:?}, found {:?}",
                String::from_utf8_lossy(wb),
                String::from_utf8_lossy(gb)
            )),
            _ => {}
        }
    }
    for path in got.keys().filter(|p| !want.contains_key(*p)) {
        diffs.push(format!("{root}:{path}: not expected, present"));
    }
    for (path, mode) in modes {
        if let Some(Some((m, _))) = got.get(path)
            && m != mode
            && want.contains_key(path)
        {
            diffs.push(format!("{root}:{path}: expected mode {mode:04o}, found {m:04o}"));
        }
    }
    diffs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(entries: &[(&str, Option<(u32, &str)>)]) -> Snapshot {
        entries.iter().map(|(p, n)| (p.to_string(), n.map(|(m, b)| (m, b.as_bytes().to_vec())))).collect()
    }

    #[test]
    fn every_difference_is_named_and_modes_only_where_asked() {
        let want = tree(&[("env", None), ("env/A", Some((0o644, "1\n"))), ("env/B", Some((0o644, "2\n")))]);
        let got = tree(&[("env", None), ("env/A", Some((0o600, "9\n"))), ("env/C", Some((0o644, "")))]);
        let diffs = compare("out", &want, &got, &BTreeMap::new());
        assert_eq!(
            diffs,
            [
                "out:env/A: expected \"1\\n\", found \"9\\n\"",
                "out:env/B: expected, missing",
                "out:env/C: not expected, present"
            ]
        );
        let same = tree(&[("env", None), ("env/A", Some((0o600, "1\n")))]);
        let want = tree(&[("env", None), ("env/A", Some((0o644, "1\n")))]);
        assert!(compare("out", &want, &same, &BTreeMap::new()).is_empty());
        let modes = [("env/A".to_owned(), 0o644)].into();
        assert_eq!(compare("out", &want, &same, &modes), ["out:env/A: expected mode 0644, found 0600"]);
    }

    #[test]
    fn a_case_needs_exactly_one_expectation_and_known_keys() {
        let tmp = tempfile::tempdir().unwrap();
        for (text, says) in [
            ("", "exactly one of"),
            ("result = \"a\"\nerror = \"b\"\n", "exactly one of"),
            ("error = \"\"\n", "exactly one of"),
            ("result = \"a\"\nexpect = 1\n", "unknown key `expect`"),
            ("result = \"a\"\n[modes]\n\"f\" = 70000\n", "permission bits"),
        ] {
            std::fs::write(tmp.path().join("case.toml"), text).unwrap();
            let err = load_case(tmp.path(), "c").unwrap_err().to_string();
            assert!(err.contains(says), "{text:?}: {err}");
        }
        std::fs::write(tmp.path().join("case.toml"), "result = \"ok\"\n[config]\nn = 1\n").unwrap();
        std::fs::write(tmp.path().join("input"), "x").unwrap();
        let case = load_case(tmp.path(), "c").unwrap();
        assert_eq!(case.config_json.as_deref(), Some("{\"n\":1}"));
        assert_eq!(case.input, b"x");
    }

    #[test]
    fn a_fixture_with_a_link_is_refused_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("l")).unwrap();
        let err = snapshot(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("/l: is neither a regular file nor a directory"), "{err}");
    }

    fn mkfifo(path: &Path) {
        let mode = rustix::fs::Mode::from(0o600);
        rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, mode, 0).unwrap();
    }

    #[test]
    fn a_case_folder_that_is_a_link_or_a_fifo_is_a_failed_case_not_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("real")).unwrap();
        std::fs::write(tmp.path().join("real/case.toml"), "result = \"ok\"\n").unwrap();
        std::os::unix::fs::symlink("real", tmp.path().join("link")).unwrap();
        mkfifo(&tmp.path().join("pipe"));
        let cases = load_cases(tmp.path()).unwrap();
        let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["link", "pipe", "real"]);
        let why = |c: &Case| c.refused.clone().unwrap_or_default();
        assert!(
            why(&cases[0]).ends_with(
                "/link: is a symbolic link (links are not followed), not a case folder; the case was not run"
            ),
            "{}",
            why(&cases[0])
        );
        assert!(
            why(&cases[1]).ends_with("/pipe: is a fifo, not a case folder; the case was not run"),
            "{}",
            why(&cases[1])
        );
        assert_eq!(cases[2].refused, None);
    }

    #[test]
    fn a_fixture_folder_that_is_a_link_is_refused_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("secret"), "s").unwrap();
        let root = tmp.path().join("case/before/out");
        std::fs::create_dir_all(root.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &root).unwrap();
        let err = snapshot(&root).unwrap_err().to_string();
        assert!(
            err.contains("before/out: is a symbolic link; a fixture folder must be a directory"),
            "{err}"
        );
        mkfifo(&tmp.path().join("fifo"));
        let err = snapshot(&tmp.path().join("fifo")).unwrap_err().to_string();
        assert!(err.contains("fifo: must be a directory"), "{err}");
        assert_eq!(snapshot(&tmp.path().join("missing")).unwrap(), Snapshot::new());
    }
}
