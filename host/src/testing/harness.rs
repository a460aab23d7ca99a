//! The harness protocol (`durasync harness`): a plugin's `fs` and `log`
//! calls served as JSON lines over a byte stream, so Python, JavaScript and
//! Go vendors test plugin logic under their own runner (CPython, Node,
//! `go test`) against the host's real rules, in milliseconds, without
//! building a component.
//!
//! Every call goes through [`Session`] exactly as the wasmtime runtime's
//! adapter sends it (`runtime/fs.rs`): the grants, access, path, mode and
//! depth rules, the per-run budgets, dry runs, the operation records and
//! the log budget all live in [`crate::services`], once. This file only
//! decodes requests, keeps the handle table and encodes answers.
//!
//! One request a line, one answer a line, in order:
//!
//! ```text
//! → {"call":"open-root","name":"out"}
//! ← {"ok":1}
//! → {"call":"sync","dir":1,"path":"env","files":[{"name":"A","contents":"MQo=","mode":420}]}
//! ← {"ok":{"outcome":"created","written":1,"removed":0}}
//! → {"call":"read-file","dir":1,"path":"nope"}
//! ← {"ok":null}
//! → {"call":"write-file","dir":1,"path":"../x","contents":"","mode":420}
//! ← {"err":{"kind":"invalid-path","message":"…"}}
//! ```
//!
//! Bytes are standard base64 strings. The calls are the WIT's (`open-root`,
//! and the `dir` methods `sync`, `write-file`, `read-file`, `list-dir`,
//! `remove`, `exchange`, `fsync`, `open-dir`, `drop`, with the WIT's
//! parameter names; `log` with `level` and `message`) plus two of the
//! harness's own: `harness:operations` (the records `durasync run --json`
//! prints) and `harness:logs` (the messages the log budget let through).
//!
//! What the sandbox would trap on (an unknown handle, a malformed request,
//! more data in one call than `limits.call_bytes`) is answered
//! `{"trap":"…"}` and ends the session, as a trap ends a run. A request
//! line is bounded ([`Harness::max_line_bytes`]) and decoded without
//! building what is not read (unknown keys, nested values, the files of a
//! `sync` past one more than `limits.write_files` or the core's
//! `max_files`, which the services then refuse as the runtime does):
//! memory stays near the line's own size. Not modelled:
//! fuel, memory, the run's deadline and the output cap (they limit the
//! plugin's own code, which runs natively under a harness).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use crate::services::text::escape_all;
use crate::services::{self, Dir, File, LogVerdict, Session};
use durasync_contract::Level;

/// Slack over the base64 of `limits.call_bytes` for a request line's JSON
/// (keys, names, paths, numbers).
pub const LINE_SLACK_BYTES: u64 = 64 << 10;

/// Default cap on the calls one session serves (a plugin's test looping
/// forever ends with a trap, not a full disk or memory).
pub const DEFAULT_MAX_CALLS: u64 = 1_000_000;

/// Why a session ended other than at the end of its input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin side did something the sandbox traps on.
    #[error("trap: {0}")]
    Trap(String),
    /// Reading requests or writing answers failed.
    #[error("harness stream: {0}")]
    Io(#[from] std::io::Error),
}

/// One harness session: a plugin run's [`Session`] and its handle table.
pub struct Harness {
    session: Session,
    handles: BTreeMap<u64, Dir>,
    next_handle: u64,
    calls: u64,
    max_calls: u64,
    logs: Vec<Value>,
}

impl Harness {
    /// Serve `session` for at most `max_calls` calls.
    pub fn new(session: Session, max_calls: u64) -> Self {
        Harness { session, handles: BTreeMap::new(), next_handle: 1, calls: 0, max_calls, logs: Vec::new() }
    }

    /// The longest request line accepted: the base64 of
    /// `limits.call_bytes` plus [`LINE_SLACK_BYTES`].
    pub fn max_line_bytes(&self) -> u64 {
        self.session.limits().call_bytes.div_ceil(3) * 4 + LINE_SLACK_BYTES
    }

    /// Answer requests from `input` on `output` until the input ends (Ok)
    /// or the plugin side traps (the trap is answered, then returned).
    pub fn serve(&mut self, input: &mut impl BufRead, output: &mut impl Write) -> Result<(), Error> {
        let hello = json!({"ready": {
            "wit": crate::runtime::policy::HOST_WIT_PACKAGE,
            "plugin": self.session.plugin(),
            "dry_run": self.session.dry_run(),
        }});
        writeln!(output, "{hello}")?;
        output.flush()?;
        let max = self.max_line_bytes();
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = std::io::Read::take(&mut *input, max + 1).read_until(b'\n', &mut line)?;
            if n == 0 {
                return Ok(());
            }
            let answer = if line.len() as u64 > max && line.last() != Some(&b'\n') {
                Err(self.too_much_data())
            } else {
                self.answer(&line)
            };
            match answer {
                Ok(v) => {
                    writeln!(output, "{v}")?;
                    output.flush()?;
                }
                Err(why) => {
                    writeln!(output, "{}", json!({ "trap": why }))?;
                    output.flush()?;
                    return Err(Error::Trap(why));
                }
            }
        }
    }

    fn too_much_data(&self) -> String {
        format!(
            "handed the host more than {} of data in one call (limits.call_bytes)",
            services::limits::human_bytes(self.session.limits().call_bytes)
        )
    }

    /// The answer to one request line: `{"ok":…}` or `{"err":…}`; a trap
    /// is `Err(message)`.
    pub fn answer(&mut self, line: &[u8]) -> Result<Value, String> {
        self.calls += 1;
        if self.calls > self.max_calls {
            return Err(format!(
                "made more than {} calls in one harness session (durasync harness --max-calls)",
                self.max_calls
            ));
        }
        // One more file than a sync may write (per run, or per call in the
        // core) is enough for the services to refuse it with the runtime's
        // own `limit` error; the rest of a longer list is walked, not kept.
        let most = self.session.limits().write_files.min(self.session.core_options().limits.max_files);
        let req = parse_request(line, most.saturating_add(1))?;
        let call = match req.args.get("call") {
            Some(Arg::Str(c)) => c.clone(),
            _ => return Err("a request has no \"call\" string".to_owned()),
        };
        let r = Request { args: &req.args, files: req.files.as_ref(), call: &call };
        let result: services::Result<Value> = match call.as_str() {
            "open-root" => {
                let name = r.str("name")?;
                let dir = self.session.open_root(&name);
                dir.map(|d| self.push(d))
            }
            "open-dir" => {
                let path = r.str("path")?;
                let dir = self.session.open_dir(lookup(&self.handles, &r)?, &path);
                dir.map(|d| self.push(d))
            }
            "drop" => {
                let id = r.u64("dir")?;
                self.handles.remove(&id).ok_or_else(|| unknown_handle(id))?;
                self.session.handle_dropped();
                Ok(Value::Null)
            }
            "sync" => {
                let path = r.str("path")?;
                let files = r.files(self.session.limits().call_bytes)?;
                let dir = lookup(&self.handles, &r)?;
                self.session.sync(dir, &path, files).map(report)
            }
            "write-file" => {
                let (path, mode) = (r.str("path")?, r.u32("mode")?);
                let contents = r.bytes("contents")?;
                if contents.len() as u64 > self.session.limits().call_bytes {
                    return Err(self.too_much_data());
                }
                let dir = lookup(&self.handles, &r)?;
                self.session.write_file(dir, &path, &contents, mode).map(report)
            }
            "read-file" => {
                let path = r.str("path")?;
                let dir = lookup(&self.handles, &r)?;
                self.session.read_file(dir, &path).map(|b| b.map_or(Value::Null, |b| B64.encode(b).into()))
            }
            "list-dir" => {
                let path = r.str("path")?;
                let dir = lookup(&self.handles, &r)?;
                self.session.list_dir(dir, &path).map(|entries| {
                    let entries: Vec<Value> =
                        entries.iter().map(|e| json!({"name": e.name, "kind": e.kind.as_str()})).collect();
                    Value::Array(entries)
                })
            }
            "remove" => {
                let path = r.str("path")?;
                let dir = lookup(&self.handles, &r)?;
                self.session.remove(dir, &path).map(Value::Bool)
            }
            "exchange" => {
                let (a, b) = (r.str("a")?, r.str("b")?);
                let dir = lookup(&self.handles, &r)?;
                self.session.exchange(dir, &a, &b).map(|()| Value::Null)
            }
            "fsync" => {
                let path = r.str("path")?;
                let dir = lookup(&self.handles, &r)?;
                self.session.fsync(dir, &path).map(|()| Value::Null)
            }
            "log" => {
                let level = r.str("level")?;
                if Level::from_word(&level).is_none() {
                    return Err(format!("log: level {level:?} is not debug, info, warn or error"));
                }
                let message = r.str("message")?;
                self.log(level, &message);
                Ok(Value::Null)
            }
            "harness:operations" => Ok(json!(self.session.operations())),
            "harness:logs" => Ok(Value::Array(self.logs.clone())),
            other => return Err(format!("unknown call {other:?}")),
        };
        Ok(match result {
            Ok(v) => json!({ "ok": v }),
            Err(e) => json!({ "err": { "kind": e.kind(), "message": e.message() } }),
        })
    }

    fn push(&mut self, dir: Dir) -> Value {
        let id = self.next_handle;
        self.next_handle += 1;
        self.handles.insert(id, dir);
        id.into()
    }

    /// The log rule of the runtime (`runtime/log.rs`): the run's budget
    /// decides, every control character is escaped; what passes is kept
    /// for `harness:logs`.
    fn log(&mut self, level: String, message: &str) {
        match self.session.admit_log(message.len() as u64) {
            LogVerdict::Forward => self.logs.push(json!({"level": level, "message": escape_all(message)})),
            LogVerdict::DropFirst => {
                let limit = self.session.limits().log_bytes;
                tracing::warn!(
                    plugin = %self.session.plugin(),
                    "log limit of {limit} bytes reached (limits.log_bytes); further messages are dropped"
                );
            }
            LogVerdict::RateFirst | LogVerdict::Drop => {}
        }
    }
}

/// The handle a request names (a free function: the session is borrowed
/// mutably beside it).
fn lookup<'h>(handles: &'h BTreeMap<u64, Dir>, r: &Request) -> Result<&'h Dir, String> {
    let id = r.u64("dir")?;
    handles.get(&id).ok_or_else(|| unknown_handle(id))
}

fn unknown_handle(id: u64) -> String {
    format!("unknown dir handle {id} (never opened, or dropped)")
}

fn report(r: services::Report) -> Value {
    json!({"outcome": r.outcome.as_str(), "written": r.written, "removed": r.removed})
}

/// The arguments a request may carry (the WIT's parameter names and the
/// harness's own); any other key is skipped unread.
const ARGS: [&str; 10] = ["call", "name", "path", "dir", "mode", "contents", "level", "message", "a", "b"];

/// One argument as decoded: only strings and non-negative integers are
/// kept; anything else is remembered by kind alone (a list or an object
/// is walked without being built, so a line cannot make the host hold
/// more than its own bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Arg {
    Str(String),
    U64(u64),
    Other,
}

impl<'de> serde::Deserialize<'de> for Arg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Arg;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an argument")
            }
            fn visit_str<E>(self, v: &str) -> Result<Arg, E> {
                Ok(Arg::Str(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Arg, E> {
                Ok(Arg::Str(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Arg, E> {
                Ok(Arg::U64(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Arg, E> {
                Ok(u64::try_from(v).map_or(Arg::Other, Arg::U64))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Arg, E> {
                Ok(Arg::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Arg, E> {
                Ok(Arg::Other)
            }
            fn visit_unit<E>(self) -> Result<Arg, E> {
                Ok(Arg::Other)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Arg, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Arg::Other)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Arg, A::Error> {
                while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
                Ok(Arg::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// The known arguments of one JSON object, by name.
type Args = BTreeMap<&'static str, Arg>;

/// A `files` list: the first `max` entries' arguments (the rest are
/// walked, not kept).
#[derive(Debug)]
enum Files {
    List(Vec<Args>),
    Other,
}

/// A decoded request line.
#[derive(Debug)]
struct Parsed {
    args: Args,
    files: Option<Files>,
}

/// Decode one request line. Memory is bounded by the line's length (the
/// known arguments' strings) and by `max_files` kept entries of a `files`
/// list; nothing else is built.
fn parse_request(line: &[u8], max_files: u64) -> Result<Parsed, String> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::fmt;

    /// An object's known arguments; `files` only where `files` is `Some`.
    struct Object {
        files: Option<u64>,
    }
    impl<'de> DeserializeSeed<'de> for Object {
        type Value = Parsed;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Parsed, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Object {
        type Value = Parsed;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
            let mut out = Parsed { args: Args::new(), files: None };
            while let Some(key) = map.next_key::<String>()? {
                if let Some(known) = ARGS.iter().find(|k| **k == key) {
                    out.args.insert(known, map.next_value()?);
                } else if let (Some(max), "files") = (self.files, key.as_str()) {
                    out.files = Some(map.next_value_seed(FileList { max })?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(out)
        }
    }

    struct FileList {
        max: u64,
    }
    impl<'de> DeserializeSeed<'de> for FileList {
        type Value = Files;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Files, D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for FileList {
        type Value = Files;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of files")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Files, A::Error> {
            let (mut kept, mut count) = (Vec::new(), 0u64);
            loop {
                if count < self.max {
                    match seq.next_element_seed(Object { files: None })? {
                        Some(file) => kept.push(file.args),
                        None => break,
                    }
                } else if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
                count += 1;
            }
            Ok(Files::List(kept))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Files, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Files::Other)
        }
        fn visit_str<E>(self, _: &str) -> Result<Files, E> {
            Ok(Files::Other)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Files, E> {
            Ok(Files::Other)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Files, E> {
            Ok(Files::Other)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Files, E> {
            Ok(Files::Other)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Files, E> {
            Ok(Files::Other)
        }
        fn visit_unit<E>(self) -> Result<Files, E> {
            Ok(Files::Other)
        }
    }

    let mut de = serde_json::Deserializer::from_slice(line);
    let parsed = Object { files: Some(max_files) }
        .deserialize(&mut de)
        .and_then(|p| de.end().map(|()| p))
        .map_err(|e| format!("a request is not a JSON object: {e}"))?;
    Ok(parsed)
}

/// One decoded request; a missing or mistyped argument is a trap naming it.
struct Request<'a> {
    args: &'a Args,
    files: Option<&'a Files>,
    call: &'a str,
}

impl Request<'_> {
    fn field(&self, key: &str) -> Result<&Arg, String> {
        self.args.get(key).ok_or_else(|| format!("{}: missing argument {key:?}", self.call))
    }

    fn str(&self, key: &str) -> Result<String, String> {
        match self.field(key)? {
            Arg::Str(s) => Ok(s.clone()),
            _ => Err(format!("{}: {key:?} must be a string", self.call)),
        }
    }

    fn u64(&self, key: &str) -> Result<u64, String> {
        match self.field(key)? {
            Arg::U64(n) => Ok(*n),
            _ => Err(format!("{}: {key:?} must be a non-negative integer", self.call)),
        }
    }

    fn u32(&self, key: &str) -> Result<u32, String> {
        u32::try_from(self.u64(key)?).map_err(|_| format!("{}: {key:?} is over u32", self.call))
    }

    fn bytes(&self, key: &str) -> Result<Vec<u8>, String> {
        let s = self.str(key)?;
        B64.decode(s.as_bytes()).map_err(|e| format!("{}: {key:?} is not base64: {e}", self.call))
    }

    /// `files` of a `sync` (as kept by [`parse_request`]), refused past
    /// `call_bytes` of names and bytes.
    fn files(&self, call_bytes: u64) -> Result<Vec<File>, String> {
        let Files::List(kept) =
            self.files.ok_or_else(|| format!("{}: missing argument \"files\"", self.call))?
        else {
            return Err(format!("{}: \"files\" must be a list", self.call));
        };
        let mut total = 0u64;
        let mut files = Vec::with_capacity(kept.len());
        for f in kept {
            let r = Request { args: f, files: None, call: self.call };
            let file = File { name: r.str("name")?, contents: r.bytes("contents")?, mode: r.u32("mode")? };
            total += (file.name.len() + file.contents.len()) as u64;
            if total > call_bytes {
                return Err(format!(
                    "handed the host more than {} of data in one call (limits.call_bytes)",
                    services::limits::human_bytes(call_bytes)
                ));
            }
            files.push(file);
        }
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::{Access, Grant, PluginLimits};

    fn harness(dir: &std::path::Path, limits: PluginLimits, max_calls: u64) -> Harness {
        let grant = Grant::open(dir, Access::ReadWrite, false).unwrap();
        Harness::new(Session::new("t", [("out".to_owned(), grant)].into(), limits, false), max_calls)
    }

    fn serve(h: &mut Harness, input: &str) -> (Result<(), Error>, Vec<Value>) {
        let mut out = Vec::new();
        let r = h.serve(&mut input.as_bytes(), &mut out);
        let lines = out.split(|b| *b == b'\n').filter(|l| !l.is_empty());
        (r, lines.map(|l| serde_json::from_slice(l).unwrap()).collect())
    }

    #[test]
    fn calls_go_through_the_services_rules_and_answer_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let mut h = harness(tmp.path(), PluginLimits::default(), DEFAULT_MAX_CALLS);
        let input = [
            r#"{"call":"open-root","name":"out"}"#,
            r#"{"call":"sync","dir":1,"path":"env","files":[{"name":"A","contents":"MQo=","mode":420}]}"#,
            r#"{"call":"sync","dir":1,"path":"env","files":[{"name":"A","contents":"MQo=","mode":420}]}"#,
            r#"{"call":"read-file","dir":1,"path":"env/A"}"#,
            r#"{"call":"write-file","dir":1,"path":"../x","contents":"","mode":420}"#,
            r#"{"call":"open-root","name":"nope"}"#,
            r#"{"call":"harness:operations"}"#,
        ]
        .join("\n");
        let (r, got) = serve(&mut h, &input);
        r.unwrap();
        assert_eq!(got[0]["ready"]["wit"], crate::runtime::policy::HOST_WIT_PACKAGE);
        assert_eq!(got[1], json!({"ok": 1}));
        assert_eq!(got[2]["ok"]["outcome"], "created");
        assert_eq!(got[3]["ok"]["outcome"], "unchanged");
        assert_eq!(got[4], json!({"ok": "MQo="}));
        assert_eq!(got[5]["err"]["kind"], "invalid-path");
        assert_eq!(got[6]["err"]["kind"], "not-granted");
        let ops = got[7]["ok"].as_array().unwrap();
        assert_eq!(ops.len(), 3, "{ops:?}");
        assert_eq!(ops[2]["outcome"], "failed");
        assert_eq!(std::fs::read(tmp.path().join("env/A")).unwrap(), b"1\n");
    }

    #[test]
    fn an_unknown_handle_or_a_malformed_request_traps_and_ends_the_session() {
        let tmp = tempfile::tempdir().unwrap();
        for (bad, says) in [
            (r#"{"call":"fsync","dir":7,"path":""}"#, "unknown dir handle 7"),
            ("not json", "not a JSON object"),
            ("[1]", "not a JSON object"),
            (r#"{"call":"open-root","name":["out"]}"#, "\"name\" must be a string"),
            (r#"{"call":"fsync","dir":-1,"path":""}"#, "\"dir\" must be a non-negative integer"),
            (r#"{"call":"sync","dir":1,"path":"e","files":{}}"#, "\"files\" must be a list"),
            (
                r#"{"call":"sync","dir":1,"path":"e","files":[{"name":"A","mode":420}]}"#,
                "missing argument \"contents\"",
            ),
            (r#"{"call":"teleport"}"#, "unknown call \"teleport\""),
            (r#"{"call":"open-root"}"#, "missing argument \"name\""),
            (r#"{"call":"write-file","dir":1,"path":"f","contents":"%%","mode":420}"#, "not base64"),
        ] {
            let mut h = harness(tmp.path(), PluginLimits::default(), DEFAULT_MAX_CALLS);
            let input = format!(
                "{{\"call\":\"open-root\",\"name\":\"out\"}}\n{bad}\n{{\"call\":\"harness:logs\"}}\n"
            );
            let (r, got) = serve(&mut h, &input);
            assert!(matches!(&r, Err(Error::Trap(m)) if m.contains(says)), "{bad}: {r:?}");
            assert_eq!(got.len(), 3, "the session ended at the trap: {got:?}");
            assert!(got[2]["trap"].as_str().unwrap().contains(says), "{got:?}");
        }
    }

    #[test]
    fn the_call_count_and_the_line_size_are_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let mut h = harness(tmp.path(), PluginLimits::default(), 2);
        let (r, got) = serve(&mut h, &"{\"call\":\"harness:logs\"}\n".repeat(3));
        assert!(matches!(&r, Err(Error::Trap(m)) if m.contains("more than 2 calls")), "{r:?}");
        assert_eq!(got.len(), 4);

        let limits = PluginLimits { call_bytes: 30, ..PluginLimits::default() };
        let mut h = harness(tmp.path(), limits, DEFAULT_MAX_CALLS);
        let long =
            format!("{{\"call\":\"log\",\"level\":\"info\",\"message\":\"{}\"}}\n", "x".repeat(70 << 10));
        let (r, _) = serve(&mut h, &long);
        assert!(matches!(&r, Err(Error::Trap(m)) if m.contains("limits.call_bytes")), "{r:?}");
        // Within the line but over call_bytes once decoded: refused too, nothing written.
        let mut h = harness(tmp.path(), limits, DEFAULT_MAX_CALLS);
        let big = B64.encode([7u8; 31]);
        let input = format!(
            "{{\"call\":\"open-root\",\"name\":\"out\"}}\n{{\"call\":\"write-file\",\"dir\":1,\"path\":\"f\",\"contents\":\"{big}\",\"mode\":420}}\n"
        );
        let (r, _) = serve(&mut h, &input);
        assert!(matches!(&r, Err(Error::Trap(m)) if m.contains("limits.call_bytes")), "{r:?}");
        assert!(!tmp.path().join("f").exists());
    }

    #[test]
    fn log_messages_are_escaped_and_held_to_the_log_budget() {
        let tmp = tempfile::tempdir().unwrap();
        let limits = PluginLimits { log_bytes: 10, ..PluginLimits::default() };
        let mut h = harness(tmp.path(), limits, DEFAULT_MAX_CALLS);
        let input = [
            r#"{"call":"log","level":"info","message":"a\u001b[2Jb"}"#,
            r#"{"call":"log","level":"warn","message":"over the budget"}"#,
            r#"{"call":"log","level":"loud","message":"x"}"#,
        ]
        .join("\n");
        let (r, _) = serve(&mut h, &input);
        assert!(matches!(&r, Err(Error::Trap(m)) if m.contains("level \"loud\"")), "{r:?}");
        assert_eq!(h.logs.len(), 1, "{:?}", h.logs);
        assert_eq!(h.logs[0]["message"], escape_all("a\u{1b}[2Jb"));
        assert_ne!(h.logs[0]["message"], "a\u{1b}[2Jb");
    }

    #[test]
    fn a_sync_of_more_files_than_a_run_may_write_is_refused_without_keeping_them() {
        let tmp = tempfile::tempdir().unwrap();
        let limits = PluginLimits { write_files: 3, ..PluginLimits::default() };
        let list = |n: usize| {
            let files: Vec<String> =
                (0..n).map(|i| format!(r#"{{"name":"f{i}","contents":"","mode":420}}"#)).collect();
            format!(r#"{{"call":"sync","dir":1,"path":"e","files":[{}]}}"#, files.join(","))
        };
        // Decoding keeps at most the bound; the rest is walked.
        let Some(Files::List(kept)) = parse_request(list(50).as_bytes(), 4).unwrap().files else { panic!() };
        assert_eq!(kept.len(), 4);
        // The services refuse the call as the runtime does (a `limit` error), nothing written.
        let mut h = harness(tmp.path(), limits, DEFAULT_MAX_CALLS);
        let (r, got) = serve(&mut h, &format!("{{\"call\":\"open-root\",\"name\":\"out\"}}\n{}\n", list(50)));
        r.unwrap();
        assert_eq!(got[2]["err"]["kind"], "limit", "{got:?}");
        assert!(got[2]["err"]["message"].as_str().unwrap().contains("limits.write_files"), "{got:?}");
        assert!(!tmp.path().join("e").exists());
        // At the limit: served.
        let mut h = harness(tmp.path(), limits, DEFAULT_MAX_CALLS);
        let (r, got) = serve(&mut h, &format!("{{\"call\":\"open-root\",\"name\":\"out\"}}\n{}\n", list(3)));
        r.unwrap();
        assert_eq!(got[2]["ok"]["outcome"], "created", "{got:?}");
    }

    #[test]
    fn unknown_keys_and_deep_values_are_walked_not_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let mut h = harness(tmp.path(), PluginLimits::default(), DEFAULT_MAX_CALLS);
        let junk = "[".repeat(100) + &"]".repeat(100);
        let input = format!(
            "{{\"call\":\"open-root\",\"junk\":{junk},\"name\":\"out\",\"more\":{{\"a\":[1,2.5,null,true]}}}}\n"
        );
        let (r, got) = serve(&mut h, &input);
        r.unwrap();
        assert_eq!(got[1], json!({"ok": 1}));
        // Deep nesting, in an unknown key or a known one: walked without
        // recursion, a trap naming the problem, never a stack overflow.
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        for (line, says) in [
            (format!("{{\"call\":\"log\",\"x\":{}\n", "[".repeat(100_000)), "not a JSON object"),
            (format!("{{\"call\":\"open-root\",\"name\":{deep}}}\n"), "\"name\" must be a string"),
        ] {
            let mut h = harness(tmp.path(), PluginLimits::default(), DEFAULT_MAX_CALLS);
            let (r, _) = serve(&mut h, &line);
            assert!(matches!(&r, Err(Error::Trap(m)) if m.contains(says)), "{r:?}");
        }
    }
}
