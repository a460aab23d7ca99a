//! Makes N `read-file` calls of the 4 KiB file `blob` in the root `data`
//! (input: N): the per-call cost of a host call from Rust
//! (`host/benches/host_calls.py`, beside its Python, JavaScript and Go twins).
//! The message gives the loop's time by the guest's monotonic clock
//! (`std::time::Instant`), all N calls and the first 100.

wit_bindgen::generate!({ path: "../../../../wit/durasync.wit", world: "plugin" });

use std::time::{Duration, Instant};

use durasync::plugin::fs::open_root;

struct Calls;

impl Guest for Calls {
    fn describe() -> Info {
        Info {
            name: "bench-calls".into(),
            version: "0".into(),
            summary: "N read-file calls".into(),
            roots: vec!["data".into()],
        }
    }

    fn run(_config: String, input: Vec<u8>) -> Result<String, String> {
        let text = String::from_utf8_lossy(&input);
        let calls: u32 = text.trim().parse().map_err(|_| format!("not a number of calls: {text:?}"))?;
        let root = open_root("data").map_err(|e| format!("{e:?}"))?;
        let mut bytes = 0;
        let mut start = 0;
        let began = Instant::now();
        let mut marks = [Duration::ZERO; 2];
        for (mark, end) in marks.iter_mut().zip([calls.min(100), calls]) {
            for i in start..end {
                match root.read_file("blob") {
                    Ok(Some(b)) if b.len() == 4096 => bytes += b.len(),
                    other => return Err(format!("call {i}: {other:?}")),
                }
            }
            *mark = began.elapsed();
            start = end;
        }
        Ok(format!(
            "{calls} calls, {bytes} bytes; in the guest: {} ns, the first 100: {} ns",
            marks[1].as_nanos(),
            marks[0].as_nanos()
        ))
    }
}

export!(Calls);
