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
//!                  manifest's), optional [modes] ("before/ROOT/PATH" =
//!                  "0600": the mode a starting file is given;
//!                  "after/ROOT/PATH" = "0600": the mode a file must end
//!                  with)
//! input            the input bytes (empty when absent)
//! before/ROOT/…    each root's starting tree (empty when absent)
//! after/ROOT/…     each root's expected tree (names and bytes; the host's
//!                  `.durasync*` entries aside); a root without one must
//!                  end as it started
//! ```
//!
//! Modes come from `[modes]` because git keeps only 0644 and 0755: a
//! starting file's mode is its mode on disk unless `[modes]` sets it, and
//! an ending file's mode is compared only where `[modes]` names it (for a
//! root without `after/`, where it names the starting file).
//!
//! A failed case says what differs in text a vendor reads without this
//! crate's types: the expected and the actual result or error, each
//! differing file as a unified diff (at most [`MAX_DIFF_LINES`] lines),
//! and each wrong mode (`mode 0644, expected 0600`).
//!
//! The fixture files are the operator's, yet bounded: [`MAX_CASES`],
//! [`MAX_TREE_FILES`] and [`MAX_TREE_BYTES`]; links and special files in a
//! fixture are refused naming them, and no link is followed (not `before`,
//! `after` or a root's folder). Anything in CASES_DIR that is not a folder
//! (a link to one, a fifo, a file) is a failed case naming it, never
//! skipped: a case that did not run must not read as passed.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::runtime::{self, Manifest, Plugin, RunRequest};

/// The most cases one CASES_DIR may hold.
pub const MAX_CASES: usize = 1000;
/// The most entries one fixture tree (or a root after a run) may hold.
pub const MAX_TREE_FILES: usize = 10_000;
/// The most bytes of files one fixture tree (or a root after a run) may hold.
pub const MAX_TREE_BYTES: u64 = 64 << 20;
/// The largest `case.toml` or `input` read.
pub const MAX_CASE_FILE_BYTES: u64 = 16 << 20;
/// The most lines of one diff a failed case shows; the rest are counted
/// (`… 12 more lines`), so one large file cannot bury the other differences.
pub const MAX_DIFF_LINES: usize = 40;
/// The most characters of one line of a diff or text shown; the rest are
/// counted (a minified file is one line).
pub const MAX_SHOWN_LINE_CHARS: usize = 300;
/// How long one diff may search for the smallest edit before it settles for
/// a larger one (still a correct diff), so a large file cannot stall a run.
const DIFF_TIMEOUT: Duration = Duration::from_millis(500);

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
    modes: Modes,
    input: Vec<u8>,
}

/// The modes a case's `[modes]` sets, `(root, path)` → permission bits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Modes {
    /// The modes starting files are given (`"before/ROOT/PATH"`).
    pub before: BTreeMap<(String, String), u32>,
    /// The modes files must end with (`"after/ROOT/PATH"`).
    pub after: BTreeMap<(String, String), u32>,
}

impl Modes {
    /// Every entry as its `[modes]` key (`before/out/key.pem`) and mode.
    fn entries(&self) -> impl Iterator<Item = (String, u32)> + '_ {
        self.before
            .iter()
            .map(|((r, p), m)| (format!("before/{r}/{p}"), *m))
            .chain(self.after.iter().map(|((r, p), m)| (format!("after/{r}/{p}"), *m)))
    }
}

/// A tree as compared: `path` → file (mode, bytes) or directory (`None`).
pub type Snapshot = BTreeMap<String, Option<(u32, Vec<u8>)>>;

/// How one case went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Everything as expected.
    Pass,
    /// What differed.
    Fail(Vec<Difference>),
}

/// One way a run differs from what its case expects, as plain text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// One line saying what differs (`out:env/A: contents differ`).
    pub summary: String,
    /// The lines that show it (a unified diff, the two texts); may be empty.
    /// Their text may be a plugin's: a printer escapes control characters.
    pub detail: Vec<String>,
}

impl Difference {
    /// A difference that one line says all of.
    fn line(summary: impl Into<String>) -> Self {
        Difference { summary: summary.into(), detail: Vec::new() }
    }
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
                modes: Modes::default(),
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
    // A mode must name a file the case has (a typo must not pass silently).
    for (key, _) in modes.entries() {
        let path = dir.join(&key);
        let problem = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => continue,
            Ok(_) => "is not a regular file of the case (modes apply to files)",
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "names no file of the case",
            Err(e) => return Err(io(format!("reading {}", path.display()))(e)),
        };
        return Err(fixture(&toml_path, format!("[modes] \"{key}\": {problem}")));
    }
    let input = read_small(&dir.join("input"))?.unwrap_or_default();
    Ok(Case { name: name.to_owned(), refused: None, dir: dir.to_owned(), expect, config_json, modes, input })
}

/// What a case's `case.toml` holds: the expectation, the `[config]` as
/// JSON, the `[modes]`.
type CaseToml = (Expect, Option<String>, Modes);

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
    let modes = match table.get("modes") {
        None => Modes::default(),
        Some(m) => parse_modes(m, toml_path)?,
    };
    Ok((expect, config_json, modes))
}

/// Parse `[modes]`: each key `before/ROOT/PATH` or `after/ROOT/PATH` (a
/// file of the case), each value a string of octal digits. Whether the file
/// exists is checked by the caller, which has the case's folder.
fn parse_modes(value: &toml::Value, toml_path: &Path) -> Result<Modes, Error> {
    let table = value.as_table().ok_or_else(|| fixture(toml_path, "`modes` must be a table"))?;
    let mut modes = Modes::default();
    for (key, v) in table {
        let bad = |problem: String| fixture(toml_path, format!("[modes] \"{key}\": {problem}"));
        let Some((before, root, path)) = mode_key(key) else {
            return Err(bad("must be before/ROOT/PATH or after/ROOT/PATH, a file of the case".into()));
        };
        let mode = match v {
            toml::Value::String(text) => octal_mode(text).map_err(bad)?,
            _ => return Err(bad("must be a string of octal digits, as \"0600\"".into())),
        };
        let side = if before { &mut modes.before } else { &mut modes.after };
        side.insert((root.to_owned(), path.to_owned()), mode);
    }
    Ok(modes)
}

/// A `[modes]` key's parts: whether it is of `before/`, the root, the path
/// in the root. `None` unless it is `before/` or `after/`, a root, and a
/// path of plain names (no empty, `.` or `..` part, not absolute).
fn mode_key(key: &str) -> Option<(bool, &str, &str)> {
    let (side, rest) = key.split_once('/')?;
    let before = match side {
        "before" => true,
        "after" => false,
        _ => return None,
    };
    let (root, path) = rest.split_once('/')?;
    let plain = |part: &str| !part.is_empty() && part != "." && part != "..";
    (plain(root) && path.split('/').all(plain)).then_some((before, root, path))
}

/// The permission bits a `[modes]` value spells: octal digits as `chmod`
/// takes them (`"0600"`, `"755"`), at most 7777.
pub fn octal_mode(text: &str) -> Result<u32, String> {
    if text.is_empty() || !text.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(format!("\"{text}\" is not an octal mode (digits 0 to 7, as \"0600\")"));
    }
    match u32::from_str_radix(text, 8) {
        Ok(mode) if mode <= 0o7777 => Ok(mode),
        _ => Err(format!("\"{text}\" is over 7777 (permission bits only)")),
    }
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
        return Ok(Verdict::Fail(vec![Difference::line(why.clone())]));
    }
    fixture_roots(case, manifest)?;
    let mut m = manifest.clone();
    let mut roots = BTreeMap::new();
    for name in manifest.roots.keys() {
        let mut before = snapshot(&case.dir.join("before").join(name))?;
        set_modes(&mut before, name, &case.modes.before);
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
    let run = plugin.run(&request);
    let got = match &run {
        Ok(out) => Got::Result(&out.result),
        Err(e @ runtime::Error::Plugin { message, .. }) => Got::PluginError { message, shown: e.to_string() },
        Err(e) => Got::Failure(e.to_string()),
    };
    let mut diffs: Vec<Difference> = outcome_difference(&case.expect, got).into_iter().collect();
    for (name, (dir, before)) in &roots {
        let after_dir = case.dir.join("after").join(name);
        // A root without `after/` must end as it began, with the modes
        // `[modes]` gave its starting files.
        let (want, modes) = if fixture_dir(&after_dir)? {
            let mut want = snapshot(&after_dir)?;
            set_modes(&mut want, name, &case.modes.after);
            (want, &case.modes.after)
        } else {
            (before.clone(), &case.modes.before)
        };
        let checked: BTreeSet<String> =
            modes.keys().filter(|(root, _)| root == name).map(|(_, path)| path.clone()).collect();
        let got = snapshot(dir)?;
        diffs.extend(compare(name, &want, &got, &checked));
    }
    Ok(if diffs.is_empty() { Verdict::Pass } else { Verdict::Fail(diffs) })
}

/// Give the files of root `root` in `tree` the modes `modes` sets.
fn set_modes(tree: &mut Snapshot, root: &str, modes: &BTreeMap<(String, String), u32>) {
    for ((r, path), mode) in modes {
        if r == root
            && let Some(Some((m, _))) = tree.get_mut(path)
        {
            *m = *mode;
        }
    }
}

/// What a run ended with, as [`outcome_difference`] compares it.
enum Got<'a> {
    /// It succeeded with this result.
    Result(&'a str),
    /// The plugin returned an error: its message (what `error = "…"` is
    /// matched against) and the whole error as shown.
    PluginError { message: &'a str, shown: String },
    /// It failed otherwise (a trap, a limit, a refusal), as shown.
    Failure(String),
}

/// How the run's result or error differs from what the case expects, in
/// plain text (`None` when it is as expected).
fn outcome_difference(expect: &Expect, got: Got<'_>) -> Option<Difference> {
    let (summary, detail) = match (expect, got) {
        (Expect::Result(want), Got::Result(got)) if got == want => return None,
        (Expect::Result(want), Got::Result(got)) if want.contains('\n') || got.contains('\n') => {
            ("result differs", text_diff(want, got))
        }
        (Expect::Result(want), Got::Result(got)) => {
            ("result differs", two_texts(("expected", want), ("got", got)))
        }
        (Expect::Result(want), Got::PluginError { shown, .. } | Got::Failure(shown)) => (
            "the run failed; the case expects a result",
            two_texts(("expected result", want), ("got", &shown)),
        ),
        (Expect::Error(want), Got::PluginError { message, .. }) if message.contains(want.as_str()) => {
            return None;
        }
        (Expect::Error(want), Got::PluginError { shown, .. } | Got::Failure(shown)) => {
            ("error differs", two_texts(("expected an error containing", want), ("got", &shown)))
        }
        (Expect::Error(want), Got::Result(got)) => (
            "the run succeeded; the case expects an error",
            two_texts(("expected an error containing", want), ("got result", got)),
        ),
    };
    Some(Difference { summary: summary.to_owned(), detail })
}

/// Two labelled texts, one under the other: `label: text` on one line each
/// when both are one line (labels aligned), else each label followed by its
/// text's lines indented.
fn two_texts(a: (&str, &str), b: (&str, &str)) -> Vec<String> {
    if !a.1.contains('\n') && !b.1.contains('\n') {
        let width = a.0.len().max(b.0.len()) + 1;
        return [a, b]
            .iter()
            .map(|(label, text)| shown(&format!("{:width$} {text}", format!("{label}:"))))
            .collect();
    }
    let mut lines = Vec::new();
    for (label, text) in [a, b] {
        lines.push(format!("{label}:"));
        lines.extend(text.split('\n').map(|l| shown(&format!("  {l}"))));
    }
    capped(lines)
}

/// The lines showing how file contents `want` and `got` differ: a unified
/// diff when both are text (UTF-8 without NUL), else their sizes and the
/// first differing byte.
pub fn file_diff(want: &[u8], got: &[u8]) -> Vec<String> {
    let text = |b| std::str::from_utf8(b).ok().filter(|t| !t.contains('\0'));
    match (text(want), text(got)) {
        (Some(w), Some(g)) => text_diff(w, g),
        _ => {
            let at = want.iter().zip(got).position(|(a, b)| a != b).unwrap_or(want.len().min(got.len()));
            vec![format!(
                "binary contents: {} bytes expected, {} bytes found, first difference at byte {at}",
                want.len(),
                got.len()
            )]
        }
    }
}

/// A unified diff of two texts, `-` expected and `+` got, three lines of
/// context, capped at [`MAX_DIFF_LINES`].
fn text_diff(want: &str, got: &str) -> Vec<String> {
    let diff = similar::TextDiff::configure().timeout(DIFF_TIMEOUT).diff_lines(want, got);
    let text = diff.unified_diff().context_radius(3).header("expected", "got").to_string();
    capped(text.strip_suffix('\n').unwrap_or(&text).split('\n').map(shown).collect())
}

/// At most [`MAX_DIFF_LINES`] of `lines`, then how many more there were.
fn capped(mut lines: Vec<String>) -> Vec<String> {
    if lines.len() > MAX_DIFF_LINES {
        let more = lines.len() - MAX_DIFF_LINES;
        lines.truncate(MAX_DIFF_LINES);
        lines.push(format!("… {more} more lines"));
    }
    lines
}

/// One line as shown: at most [`MAX_SHOWN_LINE_CHARS`] characters, then
/// how many more there were.
fn shown(line: &str) -> String {
    match line.char_indices().nth(MAX_SHOWN_LINE_CHARS) {
        None => line.to_owned(),
        Some((cut, _)) => {
            format!("{}… ({} more characters)", &line[..cut], line[cut..].chars().count())
        }
    }
}

/// What differs between the expected and the actual tree of root `root`:
/// names, kinds and bytes (text as a unified diff); modes of the paths in
/// `checked`, the expected mode being `want`'s.
pub fn compare(root: &str, want: &Snapshot, got: &Snapshot, checked: &BTreeSet<String>) -> Vec<Difference> {
    let mut diffs = Vec::new();
    for (path, w) in want {
        let at = |what: &str| Difference::line(format!("{root}:{path}: {what}"));
        match (w, got.get(path)) {
            (_, None) => diffs.push(at("expected, missing")),
            (None, Some(Some(_))) => diffs.push(at("expected a directory, found a file")),
            (Some(_), Some(None)) => diffs.push(at("expected a file, found a directory")),
            (Some((_, wb)), Some(Some((_, gb)))) if wb != gb => {
                diffs.push(Difference { detail: file_diff(wb, gb), ..at("contents differ") })
            }
            _ => {}
        }
    }
    for path in got.keys().filter(|p| !want.contains_key(*p)) {
        diffs.push(Difference::line(format!("{root}:{path}: not expected, present")));
    }
    for path in checked {
        if let (Some(Some((w, _))), Some(Some((g, _)))) = (want.get(path), got.get(path))
            && w != g
        {
            diffs.push(Difference::line(format!("{root}:{path}: mode {g:04o}, expected {w:04o}")));
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

    fn lines(diffs: &[Difference]) -> Vec<String> {
        diffs
            .iter()
            .flat_map(|d| std::iter::once(d.summary.clone()).chain(d.detail.iter().map(|l| format!("  {l}"))))
            .collect()
    }

    #[test]
    fn every_difference_is_named_contents_as_a_diff_and_modes_only_where_asked() {
        let want = tree(&[("env", None), ("env/A", Some((0o644, "1\n"))), ("env/B", Some((0o644, "2\n")))]);
        let got = tree(&[("env", None), ("env/A", Some((0o600, "9\n"))), ("env/C", Some((0o644, "")))]);
        let diffs = compare("out", &want, &got, &BTreeSet::new());
        assert_eq!(
            lines(&diffs),
            [
                "out:env/A: contents differ",
                "  --- expected",
                "  +++ got",
                "  @@ -1 +1 @@",
                "  -1",
                "  +9",
                "out:env/B: expected, missing",
                "out:env/C: not expected, present"
            ]
        );
        let same = tree(&[("env", None), ("env/A", Some((0o600, "1\n")))]);
        let want = tree(&[("env", None), ("env/A", Some((0o644, "1\n")))]);
        assert!(compare("out", &want, &same, &BTreeSet::new()).is_empty());
        let checked = ["env/A".to_owned()].into();
        assert_eq!(lines(&compare("out", &want, &same, &checked)), ["out:env/A: mode 0600, expected 0644"]);
    }

    #[test]
    fn a_file_diff_shows_context_and_is_capped_saying_how_many_lines_more() {
        let want: String = (1..=10).map(|n| format!("line {n}\n")).collect();
        let got = want.replace("line 5\n", "line five\n");
        assert_eq!(
            file_diff(want.as_bytes(), got.as_bytes()),
            [
                "--- expected",
                "+++ got",
                "@@ -2,7 +2,7 @@",
                " line 2",
                " line 3",
                " line 4",
                "-line 5",
                "+line five",
                " line 6",
                " line 7",
                " line 8"
            ]
        );
        let want: String = (0..100).map(|n| format!("{n}\n")).collect();
        let got: String = (0..100).map(|n| format!("{}\n", n * 2)).collect();
        let diff = file_diff(want.as_bytes(), got.as_bytes());
        assert_eq!(diff.len(), MAX_DIFF_LINES + 1);
        let last = diff.last().unwrap();
        assert!(last.starts_with("… ") && last.ends_with(" more lines"), "{last}");
        let long = "x".repeat(MAX_SHOWN_LINE_CHARS + 5);
        let diff = file_diff(b"a\n", format!("{long}\n").as_bytes());
        assert_eq!(diff[4], format!("+{}… (6 more characters)", &long[..MAX_SHOWN_LINE_CHARS - 1]));
    }

    #[test]
    fn binary_contents_differ_by_sizes_and_first_differing_byte() {
        assert_eq!(
            file_diff(b"\0\x01\x02", b"\0\x01\x03\x04"),
            ["binary contents: 3 bytes expected, 4 bytes found, first difference at byte 2"]
        );
        assert_eq!(
            file_diff(&[0xff, 0], &[0xff]),
            ["binary contents: 2 bytes expected, 1 bytes found, first difference at byte 1"]
        );
    }

    #[test]
    fn a_wrong_result_or_error_is_shown_as_plain_text_without_rust_type_names() {
        let r = |s: &str| Expect::Result(s.to_owned());
        let e = |s: &str| Expect::Error(s.to_owned());
        let show = |expect: &Expect, got: Got<'_>| outcome_difference(expect, got).map(|d| lines(&[d]));
        assert_eq!(show(&r("env: created"), Got::Result("env: created")), None);
        assert_eq!(
            show(&r("env: replaced"), Got::Result("env: created (1 written, 0 removed)")).unwrap(),
            [
                "result differs",
                "  expected: env: replaced",
                "  got:      env: created (1 written, 0 removed)"
            ]
        );
        assert_eq!(
            show(&r("a\nb\n"), Got::Result("a\nc\n")).unwrap(),
            ["result differs", "  --- expected", "  +++ got", "  @@ -1,2 +1,2 @@", "   a", "  -b", "  +c"]
        );
        assert_eq!(
            show(&e("not KEY=value"), Got::Result("env: created")).unwrap(),
            [
                "the run succeeded; the case expects an error",
                "  expected an error containing: not KEY=value",
                "  got result:                   env: created"
            ]
        );
        let failed = || Got::PluginError {
            message: "invalid-path: x",
            shown: "plugin p failed: invalid-path: x".into(),
        };
        assert_eq!(show(&e("invalid-path"), failed()), None);
        assert_eq!(
            show(&e("not KEY"), failed()).unwrap(),
            [
                "error differs",
                "  expected an error containing: not KEY",
                "  got:                          plugin p failed: invalid-path: x"
            ]
        );
        assert_eq!(
            show(&r("ok"), Got::Failure("plugin p trapped: unreachable\nwasm backtrace:\n  0: f".into()))
                .unwrap(),
            [
                "the run failed; the case expects a result",
                "  expected result:",
                "    ok",
                "  got:",
                "    plugin p trapped: unreachable",
                "    wasm backtrace:",
                "      0: f"
            ]
        );
        for expect in [r("x"), e("x")] {
            for got in [Got::Result("y"), Got::Failure("y".into())] {
                let text = show(&expect, got).unwrap().join("\n");
                assert!(
                    !text.contains("Result(") && !text.contains("Error(") && !text.contains('"'),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn modes_are_octal_strings_of_before_or_after_files_of_the_case() {
        for (text, want) in
            [("0600", Ok(0o600)), ("755", Ok(0o755)), ("4755", Ok(0o4755)), ("07777", Ok(0o7777))]
        {
            assert_eq!(octal_mode(text), want, "{text}");
        }
        for (text, says) in [
            ("", "is not an octal mode"),
            ("0800", "\"0800\" is not an octal mode (digits 0 to 7, as \"0600\")"),
            ("0o600", "is not an octal mode"),
            ("-600", "is not an octal mode"),
            ("10000", "\"10000\" is over 7777"),
            ("77777777777777", "is over 7777"),
        ] {
            let err = octal_mode(text).unwrap_err();
            assert!(err.contains(says), "{text:?}: {err}");
        }
        assert_eq!(mode_key("before/out/key.pem"), Some((true, "out", "key.pem")));
        assert_eq!(mode_key("after/out/env/A"), Some((false, "out", "env/A")));
        for bad in [
            "env/A",
            "before/out",
            "before//x",
            "after/out/../x",
            "after/out/./x",
            "/before/out/x",
            "during/out/x",
        ] {
            assert_eq!(mode_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_bad_modes_entry_is_refused_naming_the_case_the_key_and_the_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let case = tmp.path().join("keys");
        std::fs::create_dir_all(case.join("before/out/dir")).unwrap();
        std::fs::write(case.join("before/out/key.pem"), "k").unwrap();
        for (modes, says) in [
            (
                "\"before/out/nokey.pem\" = \"0600\"",
                "[modes] \"before/out/nokey.pem\": names no file of the case",
            ),
            (
                "\"before/out/dir\" = \"0700\"",
                "[modes] \"before/out/dir\": is not a regular file of the case",
            ),
            ("\"after/out/key.pem\" = \"0600\"", "[modes] \"after/out/key.pem\": names no file of the case"),
            (
                "\"before/out/key.pem\" = \"0900\"",
                "[modes] \"before/out/key.pem\": \"0900\" is not an octal mode",
            ),
            ("\"before/out/key.pem\" = \"20000\"", "[modes] \"before/out/key.pem\": \"20000\" is over 7777"),
            (
                "\"before/out/key.pem\" = 0o600",
                "[modes] \"before/out/key.pem\": must be a string of octal digits",
            ),
            ("\"key.pem\" = \"0600\"", "[modes] \"key.pem\": must be before/ROOT/PATH or after/ROOT/PATH"),
        ] {
            std::fs::write(case.join("case.toml"), format!("result = \"ok\"\n[modes]\n{modes}\n")).unwrap();
            let err = load_case(&case, "keys").unwrap_err().to_string();
            assert!(err.contains("/keys/case.toml: ") && err.contains(says), "{modes}: {err}");
        }
        std::fs::write(
            case.join("case.toml"),
            "result = \"ok\"\n[modes]\n\"before/out/key.pem\" = \"0600\"\n",
        )
        .unwrap();
        let loaded = load_case(&case, "keys").unwrap();
        assert_eq!(loaded.modes.before, [(("out".to_owned(), "key.pem".to_owned()), 0o600)].into());
        let mut before = snapshot(&case.join("before/out")).unwrap();
        set_modes(&mut before, "out", &loaded.modes.before);
        assert_eq!(before["key.pem"], Some((0o600, b"k".to_vec())));
    }

    #[test]
    fn a_case_needs_exactly_one_expectation_and_known_keys() {
        let tmp = tempfile::tempdir().unwrap();
        for (text, says) in [
            ("", "exactly one of"),
            ("result = \"a\"\nerror = \"b\"\n", "exactly one of"),
            ("error = \"\"\n", "exactly one of"),
            ("result = \"a\"\nexpect = 1\n", "unknown key `expect`"),
            ("result = \"a\"\n[modes]\n\"after/out/f\" = \"70000\"\n", "over 7777"),
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
