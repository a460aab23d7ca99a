//! Makes N `read-file` calls of the 4 KiB file `blob` in the root `data`
//! (input: N): the per-call cost of a host call from Rust
//! (`host/benches/host_calls.py`, beside its Python, JavaScript and Go twins).

wit_bindgen::generate!({ path: "../../../../wit/durasync.wit", world: "plugin" });

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
        for i in 0..calls {
            match root.read_file("blob") {
                Ok(Some(b)) if b.len() == 4096 => bytes += b.len(),
                other => return Err(format!("call {i}: {other:?}")),
            }
        }
        Ok(format!("{calls} calls, {bytes} bytes"))
    }
}

export!(Calls);
