//! The agent's configuration directory: every `*.toml` in it is one plugin
//! instance, in the manifest format of `durasync run` plus two tables.
//!
//! ```toml
//! [input]                               # optional; no input means empty bytes
//! file = "/var/lib/durasync/certs.json" # read before each run; a change triggers a run
//! # or: command = ["kubectl", "get", "configmaps,secrets", "-o", "json"]
//! # command_timeout_ms = 30_000         # stdout is the input; a failure skips the run
//! [schedule]                            # optional
//! interval = "10m"                      # resync period (also runs at start)
//! backoff_min = "1s"                    # first retry after a failure, doubled each time
//! backoff_max = "5m"                    # the longest wait between retries
//! drift = "repair"                      # optional: "repair" (default), "report" or "off"
//! # or, with its settings:
//! [drift]
//! mode = "repair"                       # as above
//! readyz = false                        # true: drift seen fails `/readyz` until a run after it succeeds
//! settle = "50ms"                       # a burst of changes is reported once it is this quiet …
//! max_delay = "500ms"                   # … or this long after its first change, whichever is first
//! min_gap = "1s"                        # at most one drift-triggered run per this long
//! ```
//!
//! `drift` is written at the top level, before any table (TOML puts a key
//! after a table header into that table).
//!
//! The two tables are split off the parsed TOML here and everything else
//! goes to [`Manifest::parse`], so an unknown key anywhere is still refused
//! by name (`input.fiel`, `limits.fule`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::runtime::{self, Manifest};

use super::Error;

/// The shortest `schedule.interval` and `schedule.backoff_min`: a shorter
/// period would make the agent a busy loop.
pub const MIN_PERIOD: Duration = Duration::from_millis(10);
/// The longest period any duration key accepts (one week).
pub const MAX_PERIOD: Duration = Duration::from_secs(7 * 24 * 3600);
/// The default resync period (upstream's cert syncer resyncs every 10 minutes).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(600);
/// The default first retry delay after a failure.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The default cap on the retry delay.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// The default time an input command may take.
pub const DEFAULT_COMMAND_TIMEOUT_MS: u64 = 30_000;
/// The longest `input.command_timeout_ms` (one hour).
pub const MAX_COMMAND_TIMEOUT_MS: u64 = 3_600_000;
/// The most arguments an input command may have.
pub const MAX_COMMAND_ARGS: usize = 1024;
/// The largest manifest file the agent reads (a manifest is a few KiB).
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// The most manifests one config directory may hold (each is a thread while
/// it runs and a set of metric series).
pub const MAX_INSTANCES: usize = 1000;

const INPUT_KEYS: &[&str] = &["file", "command", "command_timeout_ms"];
const SCHEDULE_KEYS: &[&str] = &["interval", "backoff_min", "backoff_max"];
const DRIFT_KEYS: &[&str] = &["mode", "readyz", "settle", "max_delay", "min_gap"];
const DRIFT_MODES: &str = "\"repair\", \"report\" or \"off\"";

/// Where an instance's input bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// No input: the plugin gets empty bytes.
    None,
    /// A file, read before each run; its directory is watched with inotify.
    File(PathBuf),
    /// A command whose standard output is the input.
    Command {
        /// The program and its arguments (no shell).
        argv: Vec<String>,
        /// How long it may run before it is killed and the run skipped.
        timeout: Duration,
    },
}

/// When an instance runs besides its triggers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Resync period after a success.
    pub interval: Duration,
    /// First retry delay after a failure.
    pub backoff_min: Duration,
    /// Cap on the retry delay.
    pub backoff_max: Duration,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            interval: DEFAULT_INTERVAL,
            backoff_min: DEFAULT_BACKOFF_MIN,
            backoff_max: DEFAULT_BACKOFF_MAX,
        }
    }
}

impl Schedule {
    /// The wait before retry number `failures` (1 for the first failure):
    /// `backoff_min` doubled per consecutive failure, capped at `backoff_max`.
    pub fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(32);
        self.backoff_min.saturating_mul(1u32 << doublings.min(31)).min(self.backoff_max)
    }
}

/// What the agent does when a granted target the instance wrote is changed
/// by something other than durasync (see `agent/drift.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DriftMode {
    /// Report it and run the instance at once, so the plugin's desired
    /// state is written back durably.
    #[default]
    Repair,
    /// Report it only; the next run (interval, input, …) writes it back.
    Report,
    /// Do not watch.
    Off,
}

impl DriftMode {
    /// The manifest's word.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftMode::Repair => "repair",
            DriftMode::Report => "report",
            DriftMode::Off => "off",
        }
    }
}

/// The drift watch of one instance (`drift = "…"` or `[drift]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drift {
    /// What to do.
    pub mode: DriftMode,
    /// Whether drift seen makes the instance not ready until a run that
    /// started after it succeeds (default no: a repair takes milliseconds,
    /// and a node must not leave a load balancer because someone typed).
    pub readyz: bool,
    /// A burst of changes is reported once no change came for this long.
    pub settle: Duration,
    /// … or this long after its first change, whichever comes first (a
    /// continuous stream of writes is still reported).
    pub max_delay: Duration,
    /// The shortest time between two runs that drift starts (a writer that
    /// fights the plugin costs at most one run per `min_gap`).
    pub min_gap: Duration,
}

/// The default of [`Drift::settle`].
pub const DEFAULT_DRIFT_SETTLE: Duration = Duration::from_millis(50);
/// The default of [`Drift::max_delay`].
pub const DEFAULT_DRIFT_MAX_DELAY: Duration = Duration::from_millis(500);
/// The default of [`Drift::min_gap`].
pub const DEFAULT_DRIFT_MIN_GAP: Duration = Duration::from_secs(1);

impl Default for Drift {
    fn default() -> Self {
        Drift {
            mode: DriftMode::Repair,
            readyz: false,
            settle: DEFAULT_DRIFT_SETTLE,
            max_delay: DEFAULT_DRIFT_MAX_DELAY,
            min_gap: DEFAULT_DRIFT_MIN_GAP,
        }
    }
}

/// One parsed agent manifest.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The `durasync run` part.
    pub manifest: Manifest,
    /// `[input]`.
    pub input: Input,
    /// `[schedule]`.
    pub schedule: Schedule,
    /// `drift` / `[drift]`.
    pub drift: Drift,
}

impl Spec {
    /// Parse an agent manifest's `text`; relative paths are resolved against
    /// the folder of `source`. Errors name the key.
    pub fn parse(text: &str, source: &Path) -> Result<Spec, Error> {
        let bad = |key: &str, reason: String| {
            Error::Runtime(runtime::Error::Manifest {
                manifest: source.display().to_string(),
                key: key.to_owned(),
                reason,
            })
        };
        let mut table: toml::Table =
            text.parse().map_err(|e: toml::de::Error| bad("(syntax)", e.message().to_owned()))?;
        let input = table.remove("input");
        let schedule = table.remove("schedule");
        let drift = table.remove("drift");
        let manifest = Manifest::parse(&table.to_string(), source).map_err(Error::Runtime)?;
        let base = source.parent().map(Path::to_path_buf).unwrap_or_default();
        let input = match input {
            None => Input::None,
            Some(toml::Value::Table(t)) => parse_input(&t, &base).map_err(|(k, r)| bad(&k, r))?,
            Some(_) => return Err(bad("input", "must be a table".into())),
        };
        let schedule = match schedule {
            None => Schedule::default(),
            Some(toml::Value::Table(t)) => parse_schedule(&t).map_err(|(k, r)| bad(&k, r))?,
            Some(_) => return Err(bad("schedule", "must be a table".into())),
        };
        let drift = match drift {
            None => Drift::default(),
            Some(toml::Value::String(m)) => {
                Drift { mode: drift_mode(&m).map_err(|r| bad("drift", r))?, ..Drift::default() }
            }
            Some(toml::Value::Table(t)) => parse_drift(&t).map_err(|(k, r)| bad(&k, r))?,
            Some(other) => {
                return Err(bad(
                    "drift",
                    format!("must be {DRIFT_MODES} or a table, not {}", other.type_str()),
                ));
            }
        };
        Ok(Spec { manifest, input, schedule, drift })
    }
}

fn drift_mode(m: &str) -> Result<DriftMode, String> {
    match m {
        "repair" => Ok(DriftMode::Repair),
        "report" => Ok(DriftMode::Report),
        "off" => Ok(DriftMode::Off),
        other => Err(format!("must be {DRIFT_MODES}, not {other:?}")),
    }
}

fn parse_drift(t: &toml::Table) -> Result<Drift, (String, String)> {
    if let Some(k) = t.keys().find(|k| !DRIFT_KEYS.contains(&k.as_str())) {
        return Err((format!("drift.{k}"), unknown(DRIFT_KEYS)));
    }
    let mut d = Drift::default();
    match t.get("mode") {
        None => {}
        Some(toml::Value::String(m)) => d.mode = drift_mode(m).map_err(|r| ("drift.mode".to_owned(), r))?,
        Some(other) => return Err(("drift.mode".into(), format!("must be {DRIFT_MODES}, not {other}"))),
    }
    match t.get("readyz") {
        None => {}
        Some(toml::Value::Boolean(b)) => d.readyz = *b,
        Some(other) => return Err(("drift.readyz".into(), format!("must be true or false, not {other}"))),
    }
    for (key, slot) in
        [("settle", &mut d.settle), ("max_delay", &mut d.max_delay), ("min_gap", &mut d.min_gap)]
    {
        if let Some(v) = t.get(key) {
            *slot = period(v).map_err(|r| (format!("drift.{key}"), r))?;
        }
    }
    if d.max_delay < d.settle {
        return Err(("drift.max_delay".into(), "must not be shorter than `drift.settle`".into()));
    }
    Ok(d)
}

fn parse_input(t: &toml::Table, base: &Path) -> Result<Input, (String, String)> {
    if let Some(k) = t.keys().find(|k| !INPUT_KEYS.contains(&k.as_str())) {
        return Err((format!("input.{k}"), unknown(INPUT_KEYS)));
    }
    let timeout_ms = match t.get("command_timeout_ms") {
        None => DEFAULT_COMMAND_TIMEOUT_MS,
        Some(toml::Value::Integer(n)) if *n > 0 && (*n as u64) <= MAX_COMMAND_TIMEOUT_MS => *n as u64,
        Some(other) => {
            return Err((
                "input.command_timeout_ms".into(),
                format!("must be an integer from 1 to {MAX_COMMAND_TIMEOUT_MS}, not {other}"),
            ));
        }
    };
    match (t.get("file"), t.get("command")) {
        (Some(_), Some(_)) => Err(("input".into(), "takes `file` or `command`, not both".into())),
        (None, None) => Err(("input".into(), "needs `file` or `command`".into())),
        (Some(toml::Value::String(f)), None) if !f.is_empty() => {
            if t.contains_key("command_timeout_ms") {
                return Err(("input.command_timeout_ms".into(), "applies only to `command`".into()));
            }
            Ok(Input::File(base.join(f)))
        }
        (Some(_), None) => Err(("input.file".into(), "must be a non-empty path".into())),
        (None, Some(toml::Value::Array(items))) => {
            if items.is_empty() || items.len() > MAX_COMMAND_ARGS {
                return Err((
                    "input.command".into(),
                    format!("must hold the program and 0 to {} arguments", MAX_COMMAND_ARGS - 1),
                ));
            }
            let mut argv = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    toml::Value::String(s) if !s.contains('\0') => argv.push(s.clone()),
                    _ => return Err(("input.command".into(), "must be an array of strings".into())),
                }
            }
            if argv[0].is_empty() {
                return Err(("input.command".into(), "must name a program first".into()));
            }
            Ok(Input::Command { argv, timeout: Duration::from_millis(timeout_ms) })
        }
        (None, Some(_)) => Err(("input.command".into(), "must be an array of strings".into())),
    }
}

fn parse_schedule(t: &toml::Table) -> Result<Schedule, (String, String)> {
    if let Some(k) = t.keys().find(|k| !SCHEDULE_KEYS.contains(&k.as_str())) {
        return Err((format!("schedule.{k}"), unknown(SCHEDULE_KEYS)));
    }
    let mut s = Schedule::default();
    for (key, slot) in [
        ("interval", &mut s.interval),
        ("backoff_min", &mut s.backoff_min),
        ("backoff_max", &mut s.backoff_max),
    ] {
        if let Some(v) = t.get(key) {
            *slot = period(v).map_err(|r| (format!("schedule.{key}"), r))?;
        }
    }
    if !t.contains_key("backoff_max") {
        s.backoff_max = s.backoff_max.max(s.backoff_min);
    }
    if s.backoff_max < s.backoff_min {
        return Err((
            "schedule.backoff_max".into(),
            "must not be shorter than `schedule.backoff_min`".into(),
        ));
    }
    Ok(s)
}

/// A duration written as `"10m"`, `"1h 30m"`, `"250ms"`, between
/// [`MIN_PERIOD`] and [`MAX_PERIOD`].
fn period(v: &toml::Value) -> Result<Duration, String> {
    let toml::Value::String(s) = v else {
        return Err(format!("must be a duration such as \"10m\" or \"500ms\", not {}", v.type_str()));
    };
    let d = humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration ({e})"))?;
    if d < MIN_PERIOD || d > MAX_PERIOD {
        return Err(format!(
            "{s:?} is out of range ({} to {})",
            humantime::format_duration(MIN_PERIOD),
            humantime::format_duration(MAX_PERIOD)
        ));
    }
    Ok(d)
}

fn unknown(known: &[&str]) -> String {
    format!("unknown key (known keys: {})", known.join(", "))
}

/// The `*.toml` files of the config directory, sorted. A missing or
/// unreadable directory is an error naming it.
pub fn manifest_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let io = |e: std::io::Error| Error::ConfigDir { dir: dir.to_path_buf(), source: e };
    let meta = std::fs::metadata(dir).map_err(io)?;
    if !meta.is_dir() {
        return Err(io(rustix::io::Errno::NOTDIR.into()));
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let path = entry.path();
        if is_manifest_name(&entry.file_name()) {
            if files.len() == MAX_INSTANCES {
                return Err(Error::TooManyInstances { dir: dir.to_path_buf(), max: MAX_INSTANCES });
            }
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// `*.toml`, not hidden (editors' and `kubectl cp`'s temporary files are).
pub fn is_manifest_name(name: &std::ffi::OsStr) -> bool {
    let name = name.as_encoded_bytes();
    name.ends_with(b".toml") && name.len() > b".toml".len() && !name.starts_with(b".")
}

/// Read one manifest file (bounded by [`MAX_MANIFEST_BYTES`]).
pub fn read_manifest(path: &Path) -> Result<String, Error> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |e: std::io::Error| {
        Error::Runtime(runtime::Error::Io { what: format!("reading manifest {}", path.display()), source: e })
    };
    // Non-blocking, and a regular file only: a fifo or a device in the
    // config directory must not stall the agent's loop.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(io)?;
    if !file.metadata().map_err(io)?.is_file() {
        return Err(io(std::io::Error::other("not a regular file")));
    }
    let mut text = String::new();
    file.take(MAX_MANIFEST_BYTES + 1).read_to_string(&mut text).map_err(io)?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(io(std::io::Error::other(format!("larger than {MAX_MANIFEST_BYTES} bytes"))));
    }
    Ok(text)
}

/// Files that share a plugin name: every name held by more than one file,
/// with those files in order.
pub fn duplicate_names<'a>(
    specs: impl IntoIterator<Item = (&'a Path, &'a str)>,
) -> BTreeMap<String, Vec<PathBuf>> {
    let mut by_name: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for (file, name) in specs {
        by_name.entry(name.to_owned()).or_default().push(file.to_path_buf());
    }
    by_name.retain(|_, files| files.len() > 1);
    by_name
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "abababababababababababababababababababababababababababababababab";

    fn parse(extra: &str) -> Result<Spec, Error> {
        let text = format!("name = \"x\"\nwasm = \"x.wasm\"\nsha256 = \"{SHA}\"\n{extra}");
        Spec::parse(&text, Path::new("/etc/durasync/agent.d/x.toml"))
    }

    fn key_of(e: &Error) -> String {
        match e {
            Error::Runtime(runtime::Error::Manifest { key, .. }) => key.clone(),
            other => panic!("not a manifest error: {other}"),
        }
    }

    #[test]
    fn input_and_schedule_are_split_off_and_the_rest_is_a_run_manifest() {
        let s = parse(
            "[input]\nfile = \"in.json\"\n[schedule]\ninterval = \"250ms\"\nbackoff_min = \"20ms\"\n\
             backoff_max = \"1s\"\n[config]\na = 1\n",
        )
        .unwrap();
        assert_eq!(s.input, Input::File("/etc/durasync/agent.d/in.json".into()));
        assert_eq!(s.schedule.interval, Duration::from_millis(250));
        assert_eq!(s.schedule.backoff_min, Duration::from_millis(20));
        assert_eq!(s.manifest.name, "x");
        assert_eq!(s.manifest.config_json, r#"{"a":1}"#);
        let s = parse("[input]\ncommand = [\"kubectl\", \"get\"]\ncommand_timeout_ms = 5\n").unwrap();
        assert_eq!(
            s.input,
            Input::Command { argv: vec!["kubectl".into(), "get".into()], timeout: Duration::from_millis(5) }
        );
        assert_eq!(s.schedule, Schedule::default());
        assert_eq!(parse("").unwrap().input, Input::None);
    }

    #[test]
    fn bad_agent_keys_are_named() {
        let table = [
            ("[input]\nfiel = \"a\"\n", "input.fiel"),
            ("[input]\n", "input"),
            ("[input]\nfile = \"a\"\ncommand = [\"b\"]\n", "input"),
            ("[input]\nfile = 3\n", "input.file"),
            ("[input]\ncommand = []\n", "input.command"),
            ("[input]\ncommand = [\"a\", 1]\n", "input.command"),
            ("[input]\ncommand = [\"a\"]\ncommand_timeout_ms = 0\n", "input.command_timeout_ms"),
            ("[input]\nfile = \"a\"\ncommand_timeout_ms = 5\n", "input.command_timeout_ms"),
            ("input = 3\n", "input"),
            ("[schedule]\ninterval = \"soon\"\n", "schedule.interval"),
            ("[schedule]\ninterval = 10\n", "schedule.interval"),
            ("[schedule]\ninterval = \"1ms\"\n", "schedule.interval"),
            ("[schedule]\ninterval = \"30d\"\n", "schedule.interval"),
            ("[schedule]\nbackoff_min = \"2s\"\nbackoff_max = \"1s\"\n", "schedule.backoff_max"),
            ("[schedule]\nevery = \"1s\"\n", "schedule.every"),
            ("[limits]\nfule = 1\n", "limits.fule"),
            ("colour = 1\n", "colour"),
            ("drift = \"fix\"\n", "drift"),
            ("drift = 1\n", "drift"),
            ("[drift]\nmode = \"fix\"\n", "drift.mode"),
            ("[drift]\nreadyz = \"yes\"\n", "drift.readyz"),
            ("[drift]\nsettle = \"1ms\"\n", "drift.settle"),
            ("[drift]\nsettle = \"1s\"\nmax_delay = \"100ms\"\n", "drift.max_delay"),
            ("[drift]\nmodus = \"off\"\n", "drift.modus"),
        ];
        for (extra, key) in table {
            let err = parse(extra).unwrap_err();
            assert_eq!(key_of(&err), key, "{extra}: {err}");
            assert!(err.to_string().contains(key), "{err}");
        }
    }

    #[test]
    fn drift_is_repair_by_default_and_takes_a_word_or_a_table() {
        assert_eq!(parse("").unwrap().drift, Drift::default());
        assert_eq!(parse("").unwrap().drift.mode, DriftMode::Repair);
        assert_eq!(parse("drift = \"report\"\n").unwrap().drift.mode, DriftMode::Report);
        assert_eq!(parse("drift = \"off\"\n").unwrap().drift.mode, DriftMode::Off);
        let d = parse("[drift]\nmode = \"report\"\nreadyz = true\nsettle = \"20ms\"\nmin_gap = \"5s\"\n")
            .unwrap()
            .drift;
        assert_eq!(
            d,
            Drift {
                mode: DriftMode::Report,
                readyz: true,
                settle: Duration::from_millis(20),
                max_delay: DEFAULT_DRIFT_MAX_DELAY,
                min_gap: Duration::from_secs(5),
            }
        );
    }

    #[test]
    fn backoff_doubles_from_its_minimum_up_to_its_cap() {
        let s = Schedule {
            interval: Duration::from_secs(60),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
        };
        let waits: Vec<u128> = (1..=7).map(|n| s.backoff(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(s.backoff(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn only_visible_toml_files_are_manifests() {
        use std::ffi::OsStr;
        assert!(is_manifest_name(OsStr::new("certsync.toml")));
        assert!(!is_manifest_name(OsStr::new(".certsync.toml")));
        assert!(!is_manifest_name(OsStr::new(".toml")));
        assert!(!is_manifest_name(OsStr::new("certsync.toml.swp")));
        assert!(!is_manifest_name(OsStr::new("certsync.json")));
    }

    #[test]
    fn duplicate_names_list_every_file_that_shares_one() {
        let a = PathBuf::from("/d/a.toml");
        let b = PathBuf::from("/d/b.toml");
        let c = PathBuf::from("/d/c.toml");
        let d = duplicate_names([(a.as_path(), "x"), (b.as_path(), "y"), (c.as_path(), "x")]);
        assert_eq!(d.len(), 1);
        assert_eq!(d["x"], [a, c]);
    }
}
