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
//! `{"trap":"…"}` and ends the session, as a trap ends a run. Not modelled:
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
            "wit": services::WIT_PACKAGE,
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
        let req: Value = serde_json::from_slice(line).map_err(|e| format!("a request is not JSON: {e}"))?;
        let call = req.get("call").and_then(Value::as_str).ok_or("a request has no \"call\" string")?;
        let call = call.to_owned();
        let r = Request { v: &req, call: &call };
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

/// One decoded request; a missing or mistyped argument is a trap naming it.
struct Request<'a> {
    v: &'a Value,
    call: &'a str,
}

impl Request<'_> {
    fn field(&self, key: &str) -> Result<&Value, String> {
        self.v.get(key).ok_or_else(|| format!("{}: missing argument {key:?}", self.call))
    }

    fn str(&self, key: &str) -> Result<String, String> {
        let v = self.field(key)?;
        v.as_str().map(str::to_owned).ok_or_else(|| format!("{}: {key:?} must be a string", self.call))
    }

    fn u64(&self, key: &str) -> Result<u64, String> {
        let v = self.field(key)?;
        v.as_u64().ok_or_else(|| format!("{}: {key:?} must be a non-negative integer", self.call))
    }

    fn u32(&self, key: &str) -> Result<u32, String> {
        u32::try_from(self.u64(key)?).map_err(|_| format!("{}: {key:?} is over u32", self.call))
    }

    fn bytes(&self, key: &str) -> Result<Vec<u8>, String> {
        let s = self.str(key)?;
        B64.decode(s.as_bytes()).map_err(|e| format!("{}: {key:?} is not base64: {e}", self.call))
    }

    /// `files` of a `sync`, refused past `call_bytes` of names and bytes.
    fn files(&self, call_bytes: u64) -> Result<Vec<File>, String> {
        let list = self
            .field("files")?
            .as_array()
            .ok_or_else(|| format!("{}: \"files\" must be a list", self.call))?;
        let mut total = 0u64;
        let mut files = Vec::with_capacity(list.len());
        for f in list {
            let r = Request { v: f, call: self.call };
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
        assert_eq!(got[0]["ready"]["wit"], services::WIT_PACKAGE);
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
            ("not json", "not JSON"),
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
}
