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
    /// A sync may remove at most this fraction (0 to 1) of the files of the
    /// directory it replaces.
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
}

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

const ACTION_KEYS: &[&str] = &["name", "root", "path", "command", "signal", "pidfile", "timeout_ms"];

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
        let run = match (common.command, signal, pidfile) {
            (Some(argv), None, None) => ActionRun::Command(argv),
            (None, Some(Some(signal)), Some(Some(pidfile))) if !pidfile.is_empty() => {
                let signal = signal.trim_start_matches("SIG").to_owned();
                if !SIGNALS.contains(&signal.as_str()) {
                    return Err((format!("{key}.signal"), format!("must be one of {}", SIGNALS.join(", "))));
                }
                ActionRun::Signal { signal, pidfile: base.join(pidfile) }
            }
            _ => {
                return Err((key, "needs either `command` or both `signal` and `pidfile` (strings)".into()));
            }
        };
        let name = common.name.unwrap_or_else(|| match &run {
            ActionRun::Command(argv) => program_name(argv),
            ActionRun::Signal { signal, .. } => format!("SIG{signal}"),
        });
        if out.iter().any(|a: &Action| a.name == name) {
            return Err((format!("{key}.name"), format!("`{name}` is used twice; give each action a name")));
        }
        out.push(Action { name, root: common.root, path: common.path, run, timeout_ms: common.timeout_ms });
    }
    Ok(out)
}
