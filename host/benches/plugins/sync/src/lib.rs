//! Syncs the files it is given into `target` under the root `bench`, with
//! one `dir.sync` host call: the plugin-driven variant of the benchmark.
//!
//! Input: a header line `<count> <size>\n`, then `count * size` bytes, the
//! contents of the files `f0000`, `f0001`, … (mode 0644) in order. The
//! contents come from the host (as certsync's come from its input) so the
//! plugin variant does the same work as the native one plus what the
//! plugin path adds: instantiation, copying the bytes in and out of the
//! guest, and the host call.

wit_bindgen::generate!({ path: "../../../../wit/durasync.wit", world: "plugin" });

use durasync::plugin::fs::open_root;
use durasync::plugin::types::File;

struct BenchSync;

impl Guest for BenchSync {
    fn describe() -> Info {
        Info {
            name: "bench-sync".into(),
            version: "0".into(),
            summary: "syncs the files given as input into target/ of root bench".into(),
            roots: vec!["bench".into()],
        }
    }

    fn run(_config: String, input: Vec<u8>) -> Result<String, String> {
        let newline = input.iter().position(|&b| b == b'\n').ok_or("input: missing header line")?;
        let header = std::str::from_utf8(&input[..newline]).map_err(|e| format!("input header: {e}"))?;
        let (count, size) = header.split_once(' ').ok_or("input header: expected `<count> <size>`")?;
        let count: usize = count.parse().map_err(|e| format!("input count: {e}"))?;
        let size: usize = size.parse().map_err(|e| format!("input size: {e}"))?;
        let body = &input[newline + 1..];
        if count.checked_mul(size) != Some(body.len()) {
            return Err(format!("input: expected {count} × {size} bytes, got {}", body.len()));
        }
        let files: Vec<File> = body
            .chunks(size.max(1))
            .take(count)
            .enumerate()
            .map(|(i, contents)| File { name: format!("f{i:04}"), contents: contents.to_vec(), mode: 0o644 })
            .collect();
        let root = open_root("bench").map_err(|e| format!("open-root bench: {e:?}"))?;
        let report = root.sync("target", &files).map_err(|e| format!("sync target: {e:?}"))?;
        Ok(format!("{:?} written={} removed={}", report.outcome, report.written, report.removed))
    }
}

export!(BenchSync);
