//! A plugin that runs a script of host calls, one per line of its input,
//! and returns a transcript: each line followed by `->` and what the call
//! returned (the SDK's `Debug` of the value or the error). The parity test
//! runs the same script through `durasync`'s runtime (this crate as a
//! component) and through the SDK's native harness (this crate linked
//! natively); the transcripts must be identical.
//!
//! Script lines (fields separated by spaces; `''` is the empty string):
//!
//! - `open ROOT` — open a root; the handle gets the next number (0, 1, …)
//! - `dir H PATH` — open a directory beneath handle H
//! - `drop H` — drop handle H
//! - `sync H PATH [NAME=CONTENT:MODE]…` — CONTENT `@N` is N bytes of `x`
//! - `write H PATH CONTENT MODE`
//! - `read H PATH`, `list H PATH`, `remove H PATH`, `fsync H PATH`
//! - `exchange H A B`
//! - `deep H N` — N times: sync an empty `d` and open it; the first error

use durasync_guest::{Dir, File, Info, Plugin, Root, RunError};

/// The script plugin.
pub struct Script;

impl Plugin for Script {
    fn describe() -> Info {
        Info::new("parity", "0.1.0", "runs a script of host calls").roots(["data", "ro"])
    }

    fn run(_config: &str, input: &[u8]) -> Result<String, RunError> {
        let script = String::from_utf8(input.to_vec())?;
        let mut handles: Vec<Option<Dir>> = Vec::new();
        let mut out = Vec::new();
        for line in script.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let result = step(line, &mut handles);
            out.push(format!("{line} -> {result}"));
        }
        Ok(out.join("\n"))
    }
}

durasync_guest::export_plugin!(Script);

fn arg(s: &str) -> &str {
    if s == "''" { "" } else { s }
}

fn contents(s: &str) -> Vec<u8> {
    match s.strip_prefix('@') {
        Some(n) => vec![b'x'; n.parse().unwrap_or(0)],
        None => arg(s).as_bytes().to_vec(),
    }
}

fn mode(s: &str) -> u32 {
    u32::from_str_radix(s, 8).unwrap_or(0o644)
}

fn step(line: &str, handles: &mut Vec<Option<Dir>>) -> String {
    let words: Vec<&str> = line.split(' ').collect();
    let handle = |i: usize| -> Option<&Dir> {
        words.get(i)?.parse::<usize>().ok().and_then(|h| handles.get(h)?.as_ref())
    };
    let at = |i: usize| words.get(i).map_or("", |w| arg(w));
    match words[0] {
        "open" => match Root::open(at(1)) {
            Ok(d) => {
                handles.push(Some(d));
                format!("handle {}", handles.len() - 1)
            }
            Err(e) => format!("{e:?}"),
        },
        "drop" => {
            let h: usize = at(1).parse().unwrap_or(usize::MAX);
            match handles.get_mut(h) {
                Some(slot) => format!("dropped {}", slot.take().is_some()),
                None => "no such handle".into(),
            }
        }
        op => {
            let Some(dir) = handle(1) else { return "no such handle".into() };
            match op {
                "dir" => match dir.open_dir(at(2)) {
                    Ok(d) => {
                        handles.push(Some(d));
                        format!("handle {}", handles.len() - 1)
                    }
                    Err(e) => format!("{e:?}"),
                },
                "sync" => {
                    let files = words[3..].iter().map(|spec| {
                        let (name, rest) = spec.split_once('=').unwrap_or((spec, ""));
                        let (body, m) = rest.rsplit_once(':').unwrap_or((rest, "644"));
                        File::new(name, contents(body)).mode(mode(m))
                    });
                    format!("{:?}", dir.sync(at(2), files.collect::<Vec<_>>()))
                }
                "write" => format!("{:?}", dir.write_file(at(2), contents(at(3)), mode(at(4)))),
                "read" => format!(
                    "{:?}",
                    dir.read_file(at(2)).map(|b| b.map(|b| String::from_utf8_lossy(&b).into_owned()))
                ),
                "list" => format!("{:?}", dir.list_dir(at(2))),
                "remove" => format!("{:?}", dir.remove(at(2))),
                "fsync" => format!("{:?}", dir.fsync(at(2))),
                "exchange" => format!("{:?}", dir.exchange(at(2), at(3))),
                "deep" => {
                    let n: usize = at(2).parse().unwrap_or(0);
                    let mut current = match dir.open_dir("") {
                        Ok(d) => d,
                        Err(e) => return format!("{e:?}"),
                    };
                    for level in 0..n {
                        let next = current.sync("d", []).and_then(|_| current.open_dir("d"));
                        match next {
                            Ok(d) => current = d,
                            Err(e) => return format!("stopped at level {level}: {e:?}"),
                        }
                    }
                    format!("{n} levels")
                }
                other => format!("unknown call {other:?}"),
            }
        }
    }
}
