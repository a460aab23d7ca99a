//! A Go module proxy in a directory, as `GOPROXY=file://DIR` reads it: for
//! each module `DIR/PATH/@v/list` (its versions), `VERSION.info`,
//! `VERSION.mod` (its `go.mod`) and `VERSION.zip` (its files under
//! `PATH@VERSION/`, stored uncompressed). `go mod download` reads these
//! files and nothing else, so a test serves modules with no network.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Publish the module in `src` (a folder with its `go.mod`) as `module` at
/// `version` in the proxy `proxy`.
pub fn publish(proxy: &Path, module: &str, version: &str, src: &Path) {
    // The proxy protocol escapes capitals as `!x`; these tests need none.
    assert!(!module.chars().any(|c| c.is_ascii_uppercase()), "{module}: capitals need escaping");
    let dir = proxy.join(module).join("@v");
    std::fs::create_dir_all(&dir).unwrap();
    let mut list = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("list")).unwrap();
    writeln!(list, "{version}").unwrap();
    std::fs::write(
        dir.join(format!("{version}.info")),
        format!("{{\"Version\":\"{version}\",\"Time\":\"2026-01-01T00:00:00Z\"}}\n"),
    )
    .unwrap();
    std::fs::copy(src.join("go.mod"), dir.join(format!("{version}.mod"))).unwrap();
    let mut files = Vec::new();
    walk(src, &mut files);
    files.sort();
    let entries: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(src).unwrap().to_string_lossy().into_owned();
            (format!("{module}@{version}/{rel}"), std::fs::read(p).unwrap())
        })
        .collect();
    std::fs::write(dir.join(format!("{version}.zip")), zip(&entries)).unwrap();
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() { walk(&p, out) } else { out.push(p) }
    }
}

/// A zip archive of `entries` (name, contents), stored (no compression),
/// dated 1980-01-01: the same files give the same bytes.
fn zip(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    const DATE: u16 = (1 << 5) | 1; // 1980-01-01
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let offset = u32::try_from(out.len()).unwrap();
        let crc = crc32fast::hash(data);
        let size = u32::try_from(data.len()).unwrap();
        let name_len = u16::try_from(name.len()).unwrap();
        // Local file header: version 2.0, no flags, stored, time 0.
        out.extend(0x0403_4b50u32.to_le_bytes());
        for v in [20u16, 0, 0, 0, DATE] {
            out.extend(v.to_le_bytes());
        }
        for v in [crc, size, size] {
            out.extend(v.to_le_bytes());
        }
        out.extend(name_len.to_le_bytes());
        out.extend(0u16.to_le_bytes());
        out.extend(name.as_bytes());
        out.extend(data);
        // Its central directory record.
        central.extend(0x0201_4b50u32.to_le_bytes());
        for v in [20u16, 20, 0, 0, 0, DATE] {
            central.extend(v.to_le_bytes());
        }
        for v in [crc, size, size] {
            central.extend(v.to_le_bytes());
        }
        for v in [name_len, 0, 0, 0, 0] {
            central.extend(v.to_le_bytes());
        }
        central.extend(0u32.to_le_bytes()); // external attributes
        central.extend(offset.to_le_bytes());
        central.extend(name.as_bytes());
    }
    let central_offset = u32::try_from(out.len()).unwrap();
    let central_len = u32::try_from(central.len()).unwrap();
    out.extend(central);
    let count = u16::try_from(entries.len()).unwrap();
    out.extend(0x0605_4b50u32.to_le_bytes());
    for v in [0u16, 0, count, count] {
        out.extend(v.to_le_bytes());
    }
    out.extend(central_len.to_le_bytes());
    out.extend(central_offset.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out
}
