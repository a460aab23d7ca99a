//! One hostile plugin, many behaviours: `input` names what it does.
//! Each behaviour that probes the sandbox returns `Err` with one line per
//! attempt (`write-file ../x: InvalidPath(..)`), or `ESCAPED` on a line when
//! an attempt that must fail succeeded.

wit_bindgen::generate!({ path: "../../../../wit/durasync.wit", world: "plugin" });

use durasync::plugin::fs::{Dir, open_root};
use durasync::plugin::log::{Level, log};
use durasync::plugin::types::File;

struct Hostile;

fn file(name: &str) -> File {
    File { name: name.into(), contents: b"evil".to_vec(), mode: 0o644 }
}

/// Try every path operation on `path`; record how each ended. With
/// `unlink` false, `remove` and `exchange` are skipped: on a link inside the
/// root they would legitimately act on the link itself.
fn probe(dir: &Dir, path: &str, unlink: bool, out: &mut Vec<String>) {
    let mut line = |op: &str, r: Result<String, String>| match r {
        Ok(v) => out.push(format!("{op} {path:?}: ESCAPED {v}")),
        Err(e) => out.push(format!("{op} {path:?}: {e}")),
    };
    line("sync", dir.sync(path, &[file("f")]).map(|r| format!("{r:?}")).map_err(|e| format!("{e:?}")));
    line(
        "write-file",
        dir.write_file(path, b"evil", 0o644).map(|r| format!("{r:?}")).map_err(|e| format!("{e:?}")),
    );
    line(
        "read-file",
        dir.read_file(path).map(|r| format!("{:?}", r.map(|b| b.len()))).map_err(|e| format!("{e:?}")),
    );
    line(
        "list-dir",
        dir.list_dir(path).map(|r| format!("{} entries", r.len())).map_err(|e| format!("{e:?}")),
    );
    line("open-dir", dir.open_dir(path).map(|_| "a handle".to_owned()).map_err(|e| format!("{e:?}")));
    line("fsync", dir.fsync(path).map(|_| "fsynced".to_owned()).map_err(|e| format!("{e:?}")));
    if !unlink {
        return;
    }
    line("remove", dir.remove(path).map(|r| format!("{r}")).map_err(|e| format!("{e:?}")));
    line(
        "exchange",
        dir.exchange(path, "inside").map(|_| "exchanged".to_owned()).map_err(|e| format!("{e:?}")),
    );
}

fn root(name: &str) -> Result<Dir, String> {
    open_root(name).map_err(|e| format!("{e:?}"))
}

impl Guest for Hostile {
    fn describe() -> Info {
        Info {
            name: "hostile".into(),
            version: "0".into(),
            summary: "tries to escape its sandbox".into(),
            roots: vec!["data".into()],
        }
    }

    fn run(_config: String, input: Vec<u8>) -> Result<String, String> {
        let mode = String::from_utf8_lossy(&input).trim().to_owned();
        match mode.as_str() {
            "paths" => {
                let dir = root("data")?;
                let mut out = Vec::new();
                for path in ["../x", "/etc/x", "a/../../x", "x\0y", "inside/../../x", "..", "/"] {
                    probe(&dir, path, true, &mut out);
                }
                // Bad names inside a sync's file list.
                for name in ["../x", "/etc/x", "a/../../x", "x\0y"] {
                    let r = dir.sync("inside", &[file(name)]);
                    out.push(match r {
                        Ok(r) => format!("sync file {name:?}: ESCAPED {r:?}"),
                        Err(e) => format!("sync file {name:?}: {e:?}"),
                    });
                }
                Err(out.join("\n"))
            }
            "symlink" => {
                let dir = root("data")?;
                let mut out = Vec::new();
                // `link` → a directory outside the root; `flink` → a file outside.
                for path in ["link/secret", "link/sub/x", "flink/x"] {
                    probe(&dir, path, true, &mut out);
                }
                for path in ["link", "flink"] {
                    probe(&dir, path, false, &mut out);
                }
                Err(out.join("\n"))
            }
            "ungranted" => match open_root("secret") {
                Ok(_) => Ok("ESCAPED: opened an ungranted root".into()),
                Err(e) => Err(format!("open-root secret: {e:?}")),
            },
            "readonly" => {
                let dir = root("data")?;
                let mut out = Vec::new();
                let mut line = |op: &str, r: Result<(), String>| {
                    out.push(match r {
                        Ok(()) => format!("{op}: ESCAPED"),
                        Err(e) => format!("{op}: {e}"),
                    })
                };
                line("sync", dir.sync("sub", &[file("f")]).map(drop).map_err(|e| format!("{e:?}")));
                line(
                    "write-file",
                    dir.write_file("inside", b"x", 0o644).map(drop).map_err(|e| format!("{e:?}")),
                );
                line("remove", dir.remove("inside").map(drop).map_err(|e| format!("{e:?}")));
                line("exchange", dir.exchange("inside", "other").map_err(|e| format!("{e:?}")));
                let sub = dir.open_dir("sub").map_err(|e| format!("{e:?}"))?;
                line(
                    "sub write-file",
                    sub.write_file("f", b"x", 0o644).map(drop).map_err(|e| format!("{e:?}")),
                );
                // Reading is allowed.
                match dir.read_file("inside") {
                    Ok(Some(_)) => out.push("read-file: allowed".into()),
                    other => out.push(format!("read-file: unexpected {other:?}")),
                }
                Err(out.join("\n"))
            }
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    let mut chunk = vec![0u8; 16 << 20];
                    chunk[4096] = 1;
                    hoard.push(std::hint::black_box(chunk));
                    if hoard.len() > 1 << 20 {
                        return Ok(format!("{}", hoard.len()));
                    }
                }
            }
            "panic" => panic!("hostile plugin panics on purpose"),
            "log-flood" => {
                let line = "x".repeat(1000);
                for i in 0..20_000 {
                    log(Level::Warn, &format!("{i} {line}"));
                }
                Ok("flooded the log".into())
            }
            "stderr-flood" => {
                let line = "y".repeat(1000);
                for _ in 0..10_000 {
                    eprintln!("{line}");
                }
                Ok("flooded stderr".into())
            }
            "huge-result" => Ok("z".repeat(8 << 20)),
            "bytes" => {
                let dir = root("data")?;
                // Ignores the limit error: the host must fail the run anyway.
                let r = dir.write_file("big", &vec![7u8; 2 << 20], 0o644);
                Ok(format!("ignored {r:?}"))
            }
            "files" => {
                let dir = root("data")?;
                let files: Vec<File> = (0..50).map(|i| file(&format!("f{i}"))).collect();
                let r = dir.sync("many", &files);
                Ok(format!("ignored {r:?}"))
            }
            "write" => {
                let dir = root("data")?;
                let r = dir
                    .sync(
                        "secrets/tls",
                        &[
                            file("tls.crt"),
                            File { name: "tls.key".into(), contents: b"k".to_vec(), mode: 0o600 },
                        ],
                    )
                    .map_err(|e| format!("{e:?}"))?;
                dir.write_file("manifest.yaml", b"kind: Pod\n", 0o644).map_err(|e| format!("{e:?}"))?;
                Ok(format!("synced: {r:?}"))
            }
            "slow-then-write" => {
                let dir = root("data")?;
                // One long host call, then another that must never start
                // once the deadline has passed.
                let files: Vec<File> = (0..4000).map(|i| file(&format!("f{i}"))).collect();
                let r = dir.sync("many", &files);
                let w = dir.write_file("second", b"too late", 0o644);
                Ok(format!("ESCAPED: both ran: {r:?} {w:?}"))
            }
            "huge-sync" => {
                let dir = root("data")?;
                // One host call far longer than the run's timeout: the host
                // must stop it before its commit point, not run it to the end.
                let files: Vec<File> = (0..20_000).map(|i| file(&format!("f{i}"))).collect();
                let r = dir.sync("many", &files);
                Ok(format!("ESCAPED: the sync returned to the guest: {r:?}"))
            }
            "terminal" => {
                let dir = root("data")?;
                log(Level::Warn, "forging\r\nWARN durasync: forged log line\x1b[31m red");
                dir.write_file("evil\x1b[2Jname", b"x", 0o644).map_err(|e| format!("{e:?}"))?;
                Ok("ok\x1b]0;pwned\x07\r\ndurasync: forged result line\n\u{9b}2J".into())
            }
            "terminal-error" => Err("bad\x1b[2J\rdurasync: forged error line\n\u{9b}31m".into()),
            "setuid" | "setuid-granted" => {
                let dir = root("data")?;
                let results = [
                    ("write-file suid 4777", dir.write_file("suid", b"#!/bin/sh\n", 0o4777).map(drop)),
                    (
                        "sync sgid 2755",
                        dir.sync("sgid", &[File { name: "f".into(), contents: b"x".to_vec(), mode: 0o2755 }])
                            .map(drop),
                    ),
                    ("write-file sticky 1644", dir.write_file("sticky", b"x", 0o1644).map(drop)),
                ];
                let out: Vec<String> = results.iter().map(|(what, r)| format!("{what}: {r:?}")).collect();
                if mode == "setuid" { Err(out.join("\n")) } else { Ok(out.join("\n")) }
            }
            "exchange-child" => {
                let dir = root("data")?;
                let a = dir.exchange("sub", "sub/f");
                let b = dir.exchange("sub/f", "sub");
                Err(format!("exchange sub sub/f: {a:?}\nexchange sub/f sub: {b:?}"))
            }
            "big-call" => {
                let dir = root("data")?;
                let r = dir.write_file("big", &vec![1u8; 2 << 20], 0o644);
                Ok(format!("ESCAPED: a 2 MiB call reached the host: {r:?}"))
            }
            "read-sparse" => {
                let dir = root("data")?;
                match dir.read_file("sparse") {
                    Ok(b) => Ok(format!("ESCAPED: read {:?} bytes of a sparse file", b.map(|b| b.len()))),
                    Err(e) => Err(format!("read-file sparse: {e:?}")),
                }
            }
            "list-many" => {
                let dir = root("data")?;
                match dir.list_dir("many") {
                    Ok(entries) => Ok(format!("ESCAPED: listed {} entries", entries.len())),
                    Err(e) => Err(format!("list-dir many: {e:?}")),
                }
            }
            "write-over-sparse" => {
                let dir = root("data")?;
                let r = dir.write_file("sparse", b"small", 0o644).map_err(|e| format!("{e:?}"))?;
                Ok(format!("write-file sparse: {r:?}"))
            }
            "exit3" => std::process::exit(3),
            "exit0" => std::process::exit(0),
            "removed-handle" => {
                let dir = root("data")?;
                let sub = dir.open_dir("sub").map_err(|e| format!("{e:?}"))?;
                dir.remove("sub").map_err(|e| format!("{e:?}"))?;
                let w = sub.write_file("f", b"x", 0o644);
                let l = sub.list_dir("");
                Err(format!("write-file: {w:?}\nlist-dir: {l:?}"))
            }
            "stderr-then-fail" | "stderr-then-trap" => {
                eprintln!("Traceback (most recent call last):");
                eprintln!("  File \"plugin.py\", line 3, in run");
                eprintln!("ValueError: bad input");
                if mode == "stderr-then-trap" {
                    std::process::abort();
                }
                Err("failed after writing a traceback".into())
            }
            other => Err(format!("unknown mode {other:?}")),
        }
    }
}

export!(Hostile);
