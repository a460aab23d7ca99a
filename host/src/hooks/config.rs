//! The manifest's hook tables: `[[validate]]`, `[[action]]` (and, per root, the
//! guardrail keys of `[roots.NAME]`). Parsed strictly: an unknown key or a
//! bad value names its key (`validate[0].timeout_ms`).
//!
//! ```toml
//! [roots.conf]
//! path = "/etc/app/conf.d"
//! access = "rw"
//! min_files = 1                      # a sync below this root must keep at least 1 file
//! max_removed_fraction = 0.5         # and may remove at most half of the files it replaces
//! [[validate]]                       # run on the staged tree before the swap
//! name = "json"                      # optional (default: the program's name)
//! root = "conf"                      # a granted root
//! path = "**"                        # glob on the changed path below the root (default "**")
//! command = ["python3", "-m", "json.tool", "{staged}/app.json"]  # {staged}, {target}
//! timeout_ms = 30_000                # default 30 s, at most 1 h
//! [[action]]                         # run after matching changes are durable (agent only)
//! name = "reload"                    # optional (default: the program's name, or SIGHUP)
//! root = "conf"
//! path = "**"
//! command = ["systemctl", "reload", "app"]   # or: signal = "HUP" and pidfile = "/run/app.pid"
//! timeout_ms = 30_000
//! [[action]]                         # or an HTTP request (the FROM-scratch image has no programs)
//! root = "conf"
//! url = "http://127.0.0.1:9090/-/reload"   # loopback only, unless allow_remote = true
//! method = "POST"                    # default POST
//! expect = 200                       # a status or a list of them; default any 2xx
//! ```

use std::collections::BTreeMap;

use super::command::{DEFAULT_TIMEOUT_MS, MAX_ARG_BYTES, MAX_ARGS, MAX_TIMEOUT_MS};
use super::pattern;

/// The most validators (and, separately, actions) one manifest may declare:
/// each runs a process per matching change.
pub const MAX_HOOKS: usize = 32;

/// A command run before the swap; a failure refuses the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validator {
    /// Its name in messages and metrics.
    pub name: String,
    /// The root whose changes it checks.
    pub root: String,
    /// Which changed paths below the root (see [`pattern`]).
    pub path: String,
    /// The program and its arguments, `{staged}` and `{target}` substituted.
    pub command: Vec<String>,
    /// How long it may run before it is killed (and the change refused).
    pub timeout_ms: u64,
}

/// Per-root guardrails against a plugin fed an empty or truncated input.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Guard {
    /// A sync below the root must leave at least this many files.
    pub min_files: Option<u64>,
    /// One run's syncs and removals may remove at most this fraction, from
    /// 0 to 1, of the root's files as the run found them (durasync's own
    /// files never counted; see `RunState`).
    pub max_removed_fraction: Option<f64>,
}

impl Guard {
    /// Whether it checks anything.
    pub fn is_empty(&self) -> bool {
        self.min_files.is_none() && self.max_removed_fraction.is_none()
    }
}

/// A manifest key and what is wrong with it.
pub type Bad = (String, String);

/// The guardrail keys of a `[roots.NAME]` table.
pub const GUARD_KEYS: &[&str] = &["min_files", "max_removed_fraction"];

/// The guardrail keys of one `[roots.NAME]` table (`key` is `roots.NAME`).
pub fn parse_guard(rt: &toml::Table, key: &str) -> Result<Guard, Bad> {
    let mut guard = Guard::default();
    if let Some(v) = rt.get("min_files") {
        match v {
            toml::Value::Integer(n) if *n >= 0 => guard.min_files = Some(*n as u64),
            other => {
                return Err((format!("{key}.min_files"), format!("must be a count of files, not {other}")));
            }
        }
    }
    if let Some(v) = rt.get("max_removed_fraction") {
        let f = match v {
            toml::Value::Float(f) => *f,
            toml::Value::Integer(n) => *n as f64,
            _ => f64::NAN,
        };
        if !(0.0..=1.0).contains(&f) {
            return Err((
                format!("{key}.max_removed_fraction"),
                format!("must be a number from 0 to 1, not {v}"),
            ));
        }
        guard.max_removed_fraction = Some(f);
    }
    Ok(guard)
}

const VALIDATE_KEYS: &[&str] = &["name", "root", "path", "command", "timeout_ms"];

/// The entries of the `[[key]]` array of tables, at most [`MAX_HOOKS`]
/// (`what` names them in the error); none when the key is absent.
fn hook_tables<'a>(v: Option<&'a toml::Value>, key: &str, what: &str) -> Result<&'a [toml::Value], Bad> {
    let Some(v) = v else { return Ok(&[]) };
    let toml::Value::Array(items) = v else {
        return Err((key.into(), format!("must be an array of `[[{key}]]` tables")));
    };
    if items.len() > MAX_HOOKS {
        return Err((key.into(), format!("may declare at most {MAX_HOOKS} {what}")));
    }
    Ok(items)
}

/// The `[[validate]]` array; `roots` are the granted root names.
pub fn parse_validators(v: Option<&toml::Value>, roots: &[&str]) -> Result<Vec<Validator>, Bad> {
    let items = hook_tables(v, "validate", "validators")?;
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = format!("validate[{i}]");
        let common = parse_common(item, &key, VALIDATE_KEYS, roots)?;
        let command = common.command.ok_or_else(|| (format!("{key}.command"), "is required".to_owned()))?;
        let name = common.name.unwrap_or_else(|| program_name(&command));
        if out.iter().any(|v: &Validator| v.name == name) {
            return Err((
                format!("{key}.name"),
                format!("`{name}` is used twice; give each validator a name"),
            ));
        }
        out.push(Validator {
            name,
            root: common.root,
            path: common.path,
            command,
            timeout_ms: common.timeout_ms,
        });
    }
    Ok(out)
}

/// The keys validators and actions share.
pub(super) struct Common {
    pub name: Option<String>,
    pub root: String,
    pub path: String,
    pub command: Option<Vec<String>>,
    pub timeout_ms: u64,
}

pub(super) fn parse_common(
    item: &toml::Value,
    key: &str,
    known: &[&str],
    roots: &[&str],
) -> Result<Common, Bad> {
    let toml::Value::Table(t) = item else { return Err((key.to_owned(), "must be a table".into())) };
    if let Some(k) = t.keys().find(|k| !known.contains(&k.as_str())) {
        return Err((format!("{key}.{k}"), format!("unknown key (known keys: {})", known.join(", "))));
    }
    let string = |k: &str| -> Result<Option<String>, Bad> {
        match t.get(k) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err((format!("{key}.{k}"), format!("must be a string, not {}", other.type_str()))),
        }
    };
    let name = string("name")?;
    if let Some(n) = &name
        && (n.is_empty() || n.len() > 64 || n.chars().any(|c| c.is_control() || c == '"'))
    {
        return Err((
            format!("{key}.name"),
            "must be 1 to 64 characters, no quotes or control characters".into(),
        ));
    }
    let root =
        string("root")?.ok_or_else(|| (format!("{key}.root"), "is required: a granted root".to_owned()))?;
    if !roots.contains(&root.as_str()) {
        return Err((
            format!("{key}.root"),
            format!("`{root}` is not a granted root (granted: {})", roots.join(", ")),
        ));
    }
    let path = string("path")?.unwrap_or_else(|| "**".to_owned());
    pattern::check(&path).map_err(|w| (format!("{key}.path"), w))?;
    let command = match t.get("command") {
        None => None,
        Some(toml::Value::Array(a)) if !a.is_empty() && a.len() <= MAX_ARGS => {
            let mut argv = Vec::new();
            for v in a {
                match v.as_str() {
                    Some(s) if s.len() <= MAX_ARG_BYTES && !s.contains('\0') => argv.push(s.to_owned()),
                    _ => {
                        return Err((
                            format!("{key}.command"),
                            format!("must hold strings of at most {MAX_ARG_BYTES} bytes without NUL"),
                        ));
                    }
                }
            }
            if argv[0].is_empty() {
                return Err((format!("{key}.command"), "must name a program first".into()));
            }
            Some(argv)
        }
        Some(_) => {
            return Err((format!("{key}.command"), format!("must be a list of 1 to {MAX_ARGS} strings")));
        }
    };
    let timeout_ms = match t.get("timeout_ms") {
        None => DEFAULT_TIMEOUT_MS,
        Some(toml::Value::Integer(n)) if *n > 0 && (*n as u64) <= MAX_TIMEOUT_MS => *n as u64,
        Some(other) => {
            return Err((
                format!("{key}.timeout_ms"),
                format!("must be 1 to {MAX_TIMEOUT_MS} ms, not {other}"),
            ));
        }
    };
    Ok(Common { name, root, path, command, timeout_ms })
}

/// The last component of a program path (`/usr/bin/python3` → `python3`).
fn program_name(argv: &[String]) -> String {
    let p = argv[0].rsplit('/').next().unwrap_or(&argv[0]);
    p.chars().take(64).collect()
}

/// Guards by root name, only those that check something.
pub fn guards(parsed: impl IntoIterator<Item = (String, Guard)>) -> BTreeMap<String, Guard> {
    parsed.into_iter().filter(|(_, g)| !g.is_empty()).collect()
}

/// What an action does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionRun {
    /// Run a command (argv, no shell).
    Command(Vec<String>),
    /// Send a signal to the process whose pid is in a pidfile.
    Signal {
        /// `HUP`, `USR1`, `USR2`, `TERM` or `INT`.
        signal: String,
        /// The pidfile (the pid on its first line).
        pidfile: std::path::PathBuf,
    },
    /// Send an HTTP request ([`super::http`]) and expect a status.
    Http {
        /// One of [`super::http::METHODS`] (default `POST`).
        method: String,
        /// The URL, checked by [`super::http::check_url`].
        url: String,
        /// The statuses that mean success; empty: any 2xx.
        expect: Vec<u16>,
        /// Whether a host other than a loopback one may be asked.
        allow_remote: bool,
    },
}

impl ActionRun {
    /// What it does, in one line (`durasync run --dry-run`, messages).
    pub fn describe(&self) -> String {
        match self {
            ActionRun::Command(argv) => argv.join(" "),
            ActionRun::Signal { signal, pidfile } => {
                format!("SIG{signal} to the pid in {}", pidfile.display())
            }
            ActionRun::Http { method, url, expect, .. } => {
                format!("{method} {url} (expects {})", expects(expect))
            }
        }
    }
}

/// `2xx`, `200`, `200 or 204`.
pub fn expects(expect: &[u16]) -> String {
    if expect.is_empty() {
        "2xx".to_owned()
    } else {
        expect.iter().map(u16::to_string).collect::<Vec<_>>().join(" or ")
    }
}

/// The most statuses an HTTP action's `expect` may list.
pub const MAX_EXPECT: usize = 16;

/// Run after a matching change is committed and durable (see `ledger.rs`
/// for when exactly, and `actions.rs` for how).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// Its name in the ledger, messages and metrics.
    pub name: String,
    /// The root whose changes owe it.
    pub root: String,
    /// Which changed paths below the root (see [`pattern`]).
    pub path: String,
    /// What it does.
    pub run: ActionRun,
    /// How long it may run before it is killed (and retried).
    pub timeout_ms: u64,
}

/// The signals an action may send: the ones daemons reload or reopen on.
pub const SIGNALS: &[&str] = &["HUP", "USR1", "USR2", "TERM", "INT"];

const ACTION_KEYS: &[&str] = &[
    "name",
    "root",
    "path",
    "command",
    "signal",
    "pidfile",
    "url",
    "method",
    "expect",
    "allow_remote",
    "timeout_ms",
];

/// The keys only an HTTP action has.
const HTTP_KEYS: &[&str] = &["method", "expect", "allow_remote"];

/// The `[[action]]` array; `roots` are the granted root names and `base`
/// the manifest's folder (a relative pidfile is resolved against it).
pub fn parse_actions(
    v: Option<&toml::Value>,
    roots: &[&str],
    base: &std::path::Path,
) -> Result<Vec<Action>, Bad> {
    let items = hook_tables(v, "action", "actions")?;
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = format!("action[{i}]");
        let common = parse_common(item, &key, ACTION_KEYS, roots)?;
        let t = item.as_table().expect("checked by parse_common");
        let signal = t.get("signal").map(|v| v.as_str().map(str::to_owned));
        let pidfile = t.get("pidfile").map(|v| v.as_str().map(str::to_owned));
        let one_of = "needs exactly one of `command`, both `signal` and `pidfile` (strings), or `url`";
        if t.contains_key("url") {
            if ["command", "signal", "pidfile"].iter().any(|k| t.contains_key(*k)) {
                return Err((key, one_of.into()));
            }
        } else if let Some(k) = HTTP_KEYS.iter().find(|k| t.contains_key(**k)) {
            return Err((format!("{key}.{k}"), "is a key of an HTTP action, which needs `url`".into()));
        }
        let run = match (common.command, signal, pidfile) {
            _ if t.contains_key("url") => parse_http(t, &key)?,
            (Some(argv), None, None) => ActionRun::Command(argv),
            (None, Some(Some(signal)), Some(Some(pidfile))) if !pidfile.is_empty() => {
                let signal = signal.trim_start_matches("SIG").to_owned();
                if !SIGNALS.contains(&signal.as_str()) {
                    return Err((format!("{key}.signal"), format!("must be one of {}", SIGNALS.join(", "))));
                }
                ActionRun::Signal { signal, pidfile: base.join(pidfile) }
            }
            _ => return Err((key, one_of.into())),
        };
        let name = common.name.unwrap_or_else(|| match &run {
            ActionRun::Command(argv) => program_name(argv),
            ActionRun::Signal { signal, .. } => format!("SIG{signal}"),
            ActionRun::Http { url, .. } => url_name(url),
        });
        if out.iter().any(|a: &Action| a.name == name) {
            return Err((format!("{key}.name"), format!("`{name}` is used twice; give each action a name")));
        }
        out.push(Action { name, root: common.root, path: common.path, run, timeout_ms: common.timeout_ms });
    }
    Ok(out)
}

/// The shortest interval between two attempts of a probe: a probe is a
/// process (or a request) per attempt, and faster than this it only loads
/// the node it is meant to observe.
pub const MIN_PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest probation window: the previous tree is kept (disk space, and
/// a change the fleet cannot roll further) for at most this long. One hour,
/// twelve times OpenShift's startup monitor default of 300 s.
pub const MAX_PROBE_WITHIN: std::time::Duration = std::time::Duration::from_secs(3600);
/// The default probation window (OpenShift's `--fallback-timeout-duration`).
pub const DEFAULT_PROBE_WITHIN: std::time::Duration = std::time::Duration::from_secs(300);
/// The default interval between attempts.
pub const DEFAULT_PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);
/// The default per-attempt timeout.
pub const DEFAULT_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What one attempt of a probe does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeCheck {
    /// Run a command (argv, no shell, `{target}` substituted); exit 0 is healthy.
    Command(Vec<String>),
    /// GET this loopback URL; a 2xx status is healthy.
    Http(String),
}

/// A health check after a matching change committed: until it succeeds,
/// the change is on probation and the previous tree is kept; if it has
/// not succeeded `within` the window, the change is reverted (see
/// `probation.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Its name in messages, the ledger and metrics.
    pub name: String,
    /// The root whose changes it checks.
    pub root: String,
    /// Which changed paths below the root (see [`pattern`]).
    pub path: String,
    /// What an attempt does.
    pub check: ProbeCheck,
    /// Time between the start of one attempt and the next.
    pub interval: std::time::Duration,
    /// How long after the commit the probe may take to succeed.
    pub within: std::time::Duration,
    /// How long one attempt may take before it is killed (a failure).
    pub timeout: std::time::Duration,
}

const PROBE_KEYS: &[&str] = &["name", "root", "path", "command", "http", "interval", "within", "timeout"];

/// A duration key of a probe table: `default` when absent.
fn probe_duration(
    t: &toml::Table,
    key: &str,
    k: &str,
    default: std::time::Duration,
) -> Result<std::time::Duration, Bad> {
    match t.get(k) {
        None => Ok(default),
        Some(toml::Value::String(s)) => humantime::parse_duration(s)
            .map_err(|e| (format!("{key}.{k}"), format!("{s:?} is not a duration ({e})"))),
        Some(other) => Err((
            format!("{key}.{k}"),
            format!("must be a duration such as \"2s\", not {}", other.type_str()),
        )),
    }
}

/// The `[[probe]]` array; `roots` are the granted root names.
pub fn parse_probes(v: Option<&toml::Value>, roots: &[&str]) -> Result<Vec<Probe>, Bad> {
    let items = hook_tables(v, "probe", "probes")?;
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = format!("probe[{i}]");
        // `timeout` is a duration here (like `interval` and `within`), so
        // it is read below; `parse_common` must not see it as `timeout_ms`.
        let common = parse_common(item, &key, PROBE_KEYS, roots)?;
        let t = item.as_table().expect("checked by parse_common");
        let check = match (common.command, t.get("http")) {
            (Some(argv), None) => {
                if argv.iter().any(|a| a.contains("{staged}")) {
                    return Err((
                        format!("{key}.command"),
                        "a probe checks the live target: use {target}, not {staged}".into(),
                    ));
                }
                ProbeCheck::Command(argv)
            }
            (None, Some(toml::Value::String(url))) => {
                // Loopback only: a probe checks the node it runs on, and a
                // remote URL would let a network outage revert a healthy node.
                super::http::check_url(url, false).map_err(|e| (format!("{key}.http"), e.to_string()))?;
                ProbeCheck::Http(url.clone())
            }
            (None, Some(_)) => return Err((format!("{key}.http"), "must be a string (a URL)".into())),
            _ => return Err((key, "needs either `command` or `http` (not both)".into())),
        };
        let interval = probe_duration(t, &key, "interval", DEFAULT_PROBE_INTERVAL)?;
        let within = probe_duration(t, &key, "within", DEFAULT_PROBE_WITHIN)?;
        let timeout = probe_duration(t, &key, "timeout", DEFAULT_PROBE_TIMEOUT.min(within))?;
        let show = |d| humantime::format_duration(d).to_string();
        if interval < MIN_PROBE_INTERVAL {
            return Err((
                format!("{key}.interval"),
                format!("must be at least {}", show(MIN_PROBE_INTERVAL)),
            ));
        }
        if within.is_zero() || within > MAX_PROBE_WITHIN {
            return Err((
                format!("{key}.within"),
                format!("must be more than 0 and at most {}", show(MAX_PROBE_WITHIN)),
            ));
        }
        if interval > within {
            return Err((
                format!("{key}.interval"),
                format!("must not be longer than `within` ({})", show(within)),
            ));
        }
        if timeout.is_zero() || timeout > within {
            return Err((
                format!("{key}.timeout"),
                format!("must be more than 0 and at most `within` ({})", show(within)),
            ));
        }
        let name = common.name.unwrap_or_else(|| match &check {
            ProbeCheck::Command(argv) => program_name(argv),
            ProbeCheck::Http(_) => "http".to_owned(),
        });
        if out.iter().any(|p: &Probe| p.name == name) {
            return Err((format!("{key}.name"), format!("`{name}` is used twice; give each probe a name")));
        }
        out.push(Probe { name, root: common.root, path: common.path, check, interval, within, timeout });
    }
    Ok(out)
}

/// An HTTP action's default name: its URL's last path segment
/// (`http://127.0.0.1:9090/-/reload` → `reload`), or `http`.
fn url_name(url: &str) -> String {
    let last = url::Url::parse(url)
        .ok()
        .and_then(|u| u.path_segments().and_then(|mut s| s.rfind(|s| !s.is_empty()).map(str::to_owned)));
    last.map_or_else(|| "http".to_owned(), |l| l.chars().take(64).collect())
}

/// The keys of an HTTP action (`t` has a `url`; `key` is `action[i]`).
fn parse_http(t: &toml::Table, key: &str) -> Result<ActionRun, Bad> {
    let allow_remote = match t.get("allow_remote") {
        None => false,
        Some(toml::Value::Boolean(b)) => *b,
        Some(other) => {
            return Err((format!("{key}.allow_remote"), format!("must be true or false, not {other}")));
        }
    };
    let Some(toml::Value::String(url)) = t.get("url") else {
        return Err((format!("{key}.url"), "must be a string: an http:// or https:// URL".into()));
    };
    let url = match super::http::check_url(url, allow_remote) {
        Ok(u) => u.to_string(),
        Err(super::http::HttpError::Refused { reason, .. }) => return Err((format!("{key}.url"), reason)),
        Err(e) => return Err((format!("{key}.url"), e.to_string())),
    };
    let method = match t.get("method") {
        None => "POST".to_owned(),
        Some(toml::Value::String(m)) => {
            let m = m.to_ascii_uppercase();
            super::http::check_method(&m).map_err(|w| (format!("{key}.method"), w))?;
            m
        }
        Some(other) => return Err((format!("{key}.method"), format!("must be a string, not {other}"))),
    };
    let status = |v: &toml::Value| match v {
        toml::Value::Integer(n) if (100..=599).contains(n) => Ok(*n as u16),
        other => {
            Err((format!("{key}.expect"), format!("must be HTTP statuses from 100 to 599, not {other}")))
        }
    };
    let expect = match t.get("expect") {
        None => Vec::new(),
        Some(toml::Value::Array(a)) if !a.is_empty() && a.len() <= MAX_EXPECT => {
            a.iter().map(status).collect::<Result<Vec<_>, _>>()?
        }
        Some(toml::Value::Array(_)) => {
            return Err((format!("{key}.expect"), format!("must list 1 to {MAX_EXPECT} statuses")));
        }
        Some(v) => vec![status(v)?],
    };
    Ok(ActionRun::Http { method, url, expect, allow_remote })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn probes(text: &str) -> Result<Vec<Probe>, Bad> {
        let t: toml::Table = toml::from_str(text).unwrap();
        parse_probes(t.get("probe"), &["conf"])
    }

    #[test]
    fn a_probe_table_parses_with_its_defaults_and_durations() {
        let p = probes(
            "[[probe]]\nroot = \"conf\"\npath = \"app/*\"\ncommand = [\"/bin/check\", \"{target}\"]\n",
        )
        .unwrap();
        assert_eq!(p[0].name, "check");
        assert_eq!(p[0].check, ProbeCheck::Command(vec!["/bin/check".into(), "{target}".into()]));
        assert_eq!(
            (p[0].interval, p[0].within, p[0].timeout),
            (DEFAULT_PROBE_INTERVAL, DEFAULT_PROBE_WITHIN, DEFAULT_PROBE_TIMEOUT)
        );
        let p = probes(
            "[[probe]]\nname = \"web\"\nroot = \"conf\"\nhttp = \"http://127.0.0.1:8080/healthz\"\n\
             interval = \"250ms\"\nwithin = \"3s\"\ntimeout = \"1s\"\n",
        )
        .unwrap();
        assert_eq!(p[0].check, ProbeCheck::Http("http://127.0.0.1:8080/healthz".into()));
        assert_eq!(
            (p[0].interval, p[0].within, p[0].timeout),
            (Duration::from_millis(250), Duration::from_secs(3), Duration::from_secs(1))
        );
    }

    #[test]
    fn a_bad_probe_is_refused_naming_its_key() {
        let head = "[[probe]]\nroot = \"conf\"\n";
        let cmd = "command = [\"c\"]\n";
        let table = [
            (head.to_owned(), "probe[0]"),
            (format!("{head}{cmd}http = \"http://127.0.0.1/\"\n"), "probe[0]"),
            (format!("{head}http = \"http://example.com/healthz\"\n"), "probe[0].http"),
            (format!("{head}http = 3\n"), "probe[0].http"),
            (format!("{head}{cmd}interval = \"50ms\"\n"), "probe[0].interval"),
            (format!("{head}{cmd}interval = 2\n"), "probe[0].interval"),
            (format!("{head}{cmd}within = \"2h\"\n"), "probe[0].within"),
            (format!("{head}{cmd}within = \"1s\"\ninterval = \"2s\"\n"), "probe[0].interval"),
            (format!("{head}{cmd}timeout = \"10m\"\nwithin = \"1m\"\n"), "probe[0].timeout"),
            (format!("{head}{cmd}timeout = \"soon\"\n"), "probe[0].timeout"),
            (format!("{head}{cmd}timeout_ms = 5\n"), "probe[0].timeout_ms"),
            (format!("{head}command = [\"c\", \"{{staged}}\"]\n"), "probe[0].command"),
            (format!("[[probe]]\nroot = \"other\"\n{cmd}"), "probe[0].root"),
            (format!("{head}{cmd}{head}{cmd}"), "probe[1].name"),
        ];
        for (text, key) in table {
            let (k, why) = probes(&text).unwrap_err();
            assert_eq!(k, key, "{text}: {why}");
        }
        let many = format!("{head}{cmd}").repeat(MAX_HOOKS + 1);
        assert_eq!(probes(&many).unwrap_err().0, "probe");
    }
}
