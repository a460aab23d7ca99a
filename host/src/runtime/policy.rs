//! The load-time import policy: a plugin may import only the interfaces
//! the host provides, checked on the component's own import section
//! **before anything is compiled**, so a refused plugin costs a parse of its
//! section headers (milliseconds, even for an 18 MB Python component) and
//! never reaches the compiler or the cache.
//!
//! The sandbox is a capability one — a plugin reaches nothing it was not
//! handed — not an import list. Language runtimes (componentize-py,
//! componentize-js, Rust's std) import `wasi:clocks`, `wasi:random`,
//! `wasi:filesystem` and `wasi:sockets` whether or not the plugin uses them,
//! so the host links them (see `runtime/wasi.rs`) over a context that grants
//! nothing:
//!
//! | interface | what a plugin gets |
//! |---|---|
//! | `durasync:plugin/*` | the contract: `dir` handles for the roots its manifest grants |
//! | `wasi:filesystem/*` | no preopened directory, so no descriptor can ever exist: every open fails |
//! | `wasi:sockets/*` | TCP, UDP and name lookup switched off: every socket and lookup fails |
//! | `wasi:cli/*` | no arguments, no environment, empty stdin; stdout/stderr captured through truncating sinks; `exit` ends the call |
//! | `wasi:random/*` | real randomness from the OS (a fixed seed would make every plugin's keys the same) |
//! | `wasi:clocks/*` | the real wall clock (certificate-expiry logic needs it) and a monotonic clock whose sleeps end at the call's deadline |
//! | `wasi:io/*` | streams and polling over the above |
//!
//! Anything else (`wasi:http/*`, `wasi:keyvalue/*`, another package, a
//! WASI version other than 0.2.x) is refused with an error naming each such
//! import and, where one exists, the toolchain flag that removes it.

use wasmparser::{Chunk, ComponentExternalKind, ComponentTypeRef, Parser, Payload};

/// The WASI 0.2 interfaces the host links, as `package/interface` without
/// the version. Any `0.2.x` import of these matches (wasmtime's linker
/// treats `0.2.x` and `0.2.y` as compatible).
pub const PROVIDED_WASI: &[&str] = &[
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/ip-name-lookup",
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
];

/// The WASI version range the host provides.
pub const WASI_VERSION_PREFIX: &str = "0.2.";

/// The contract's package prefix. Its version is checked when linking,
/// which names a function a newer minor needs and this host lacks.
pub const CONTRACT_PREFIX: &str = "durasync:plugin/";

/// Interfaces a toolchain adds by default that the host does not provide,
/// and how to build without them: the build the guide gives
/// (`guest-sdk/README.md`, JavaScript), the npm kit's
/// `durasync-componentize-js` (the componentize-js CLI's flags; not `jco
/// componentize`, which fails on a WIT folder).
pub const REMOVAL_HINTS: &[(&str, &str)] = &[(
    "wasi:http/",
    "componentize-js adds wasi:http by default: build without it as the guide does: \
     `durasync-componentize-js --wit WIT -n plugin -d http fetch-event -o app.wasm app.js`",
)];

/// The exports every plugin must have.
pub const REQUIRED_EXPORTS: &[&str] = &["describe", "run"];

/// The contract this host implements, as declared by `wit/durasync.wit`
/// (`durasync:plugin@0.1.0`): read from the WIT file at build time, so the
/// version lives in one place.
pub const HOST_WIT_PACKAGE: &str = wit_package(include_str!("../../../wit/durasync.wit"));

/// The version part of [`HOST_WIT_PACKAGE`] (`0.1.0`).
pub const HOST_WIT_VERSION: &str = after_at(HOST_WIT_PACKAGE);

/// The `package NAME@VERSION;` declaration of a WIT document.
const fn wit_package(wit: &str) -> &str {
    const KEY: &[u8] = b"package ";
    let bytes = wit.as_bytes();
    let mut i = 0;
    while i + KEY.len() <= bytes.len() {
        // A declaration starts a line.
        if (i == 0 || bytes[i - 1] == b'\n') && starts_with(bytes, i, KEY) {
            let start = i + KEY.len();
            let mut end = start;
            while end < bytes.len() && bytes[end] != b';' {
                end += 1;
            }
            let (_, rest) = bytes.split_at(start);
            let (decl, _) = rest.split_at(end - start);
            return match std::str::from_utf8(decl) {
                Ok(s) => s,
                Err(_) => panic!("the WIT package declaration is not UTF-8"),
            };
        }
        i += 1;
    }
    panic!("wit/durasync.wit has no package declaration")
}

const fn starts_with(bytes: &[u8], at: usize, key: &[u8]) -> bool {
    let mut j = 0;
    while j < key.len() {
        if bytes[at + j] != key[j] {
            return false;
        }
        j += 1;
    }
    true
}

const fn after_at(package: &str) -> &str {
    let bytes = package.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'@' {
            let (_, rest) = bytes.split_at(i + 1);
            return match std::str::from_utf8(rest) {
                Ok(s) => s,
                Err(_) => panic!("not UTF-8"),
            };
        }
        i += 1;
    }
    panic!("the WIT package has no version")
}

/// At most this many top-level imports plus exports are read from a
/// component: the plugin chooses the count, and the host's memory for
/// the names must stay bounded. Real plugins have about 40.
pub const MAX_NAMES: usize = 4096;

/// A component's imports and exports, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    /// Imported instance and function names (`wasi:cli/stdout@0.2.4`).
    pub imports: Vec<String>,
    /// Exported names (`run`, `describe`).
    pub exports: Vec<String>,
}

impl Interface {
    /// Read a compiled component's imports and exports.
    pub fn of(component: &wasmtime::component::Component, engine: &wasmtime::Engine) -> Self {
        let ty = component.component_type();
        Interface {
            imports: ty.imports(engine).map(|(name, _)| name.to_owned()).collect(),
            exports: ty.exports(engine).map(|(name, _)| name.to_owned()).collect(),
        }
    }

    /// Read a component's top-level imports and exports from its binary,
    /// without compiling it: only the section headers are walked (nested
    /// core modules and components are skipped unread). Refuses a
    /// precompiled artifact, a core module and anything that is not wasm,
    /// each with a message saying which.
    pub fn parse(wasm: &[u8]) -> Result<Self, String> {
        if wasm.starts_with(b"\x7fELF") {
            return Err("the file is a precompiled artifact, not a component".into());
        }
        if !wasm.starts_with(b"\0asm") {
            return Err("it is not a WebAssembly file (no `\\0asm` header)".into());
        }
        if wasm.len() >= 8 && wasm[4..8] == [1, 0, 0, 0] {
            return Err("the file is a core wasm module, not a component".into());
        }
        let invalid = |e: wasmparser::BinaryReaderError| format!("it is not a valid component: {e}");
        let mut out = Interface::default();
        let mut parser = Parser::new(0);
        let mut data = wasm;
        loop {
            let (payload, consumed) = match parser.parse(data, true).map_err(invalid)? {
                Chunk::Parsed { consumed, payload } => (payload, consumed),
                // Not possible with `eof = true`; treated as a truncated file.
                Chunk::NeedMoreData(_) => return Err("it is not a valid component: truncated".into()),
            };
            data = &data[consumed..];
            match payload {
                Payload::ComponentImportSection(reader) => {
                    for import in reader {
                        let import = import.map_err(invalid)?;
                        // A type import (`use types.{info}` in a world) names a
                        // type, not something the host links.
                        if !matches!(import.ty, ComponentTypeRef::Type(_)) {
                            out.push_bounded(Side::Import, import.name.name)?;
                        }
                    }
                }
                Payload::ComponentExportSection(reader) => {
                    for export in reader {
                        let export = export.map_err(invalid)?;
                        if export.kind != ComponentExternalKind::Type {
                            out.push_bounded(Side::Export, export.name.name)?;
                        }
                    }
                }
                // A nested module or component: its own imports are not the
                // plugin's. The parent parser has already moved past it.
                Payload::ModuleSection { unchecked_range, .. }
                | Payload::ComponentSection { unchecked_range, .. } => {
                    data = data.get(unchecked_range.len()..).ok_or_else(|| {
                        "it is not a valid component: a nested section runs past the end".to_owned()
                    })?;
                }
                Payload::End(_) => return Ok(out),
                _ => {}
            }
        }
    }

    fn push_bounded(&mut self, side: Side, name: &str) -> Result<(), String> {
        if self.imports.len() + self.exports.len() >= MAX_NAMES {
            return Err(format!("it has more than {MAX_NAMES} top-level imports and exports"));
        }
        let list = match side {
            Side::Import => &mut self.imports,
            Side::Export => &mut self.exports,
        };
        list.push(name.to_owned());
        Ok(())
    }

    /// The version of the `durasync:plugin` package the plugin was built
    /// against, from its imports (`0.1.0`).
    pub fn wit_version(&self) -> Option<&str> {
        self.imports.iter().find_map(|i| i.strip_prefix(CONTRACT_PREFIX)?.split_once('@').map(|(_, v)| v))
    }

    /// Every violation of the policy, each naming the import or export.
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        let forbidden: Vec<&String> = self.imports.iter().filter(|i| !is_provided(i)).collect();
        if !forbidden.is_empty() {
            let names: Vec<String> = forbidden.iter().map(|i| format!("`{i}`")).collect();
            let mut message = format!(
                "it imports {}, which this host does not provide (plugins may import {}*, and \
                 wasi:io, wasi:clocks, wasi:random, wasi:filesystem, wasi:sockets and wasi:cli \
                 at {}x over a sandbox that grants nothing)",
                names.join(", "),
                CONTRACT_PREFIX,
                WASI_VERSION_PREFIX
            );
            for (prefix, hint) in REMOVAL_HINTS {
                if forbidden.iter().any(|i| i.starts_with(prefix)) {
                    message.push_str("; ");
                    message.push_str(hint);
                }
            }
            out.push(message);
        }
        for e in REQUIRED_EXPORTS {
            if !self.exports.iter().any(|x| x == e) {
                out.push(format!("it does not export `{e}` (world durasync:plugin/plugin)"));
            }
        }
        out
    }
}

enum Side {
    Import,
    Export,
}

/// Whether the host provides an imported interface (by its full name,
/// `wasi:cli/stdout@0.2.4`).
pub fn is_provided(import: &str) -> bool {
    if import.starts_with(CONTRACT_PREFIX) {
        return true;
    }
    let Some((interface, version)) = import.split_once('@') else { return false };
    version.starts_with(WASI_VERSION_PREFIX) && PROVIDED_WASI.contains(&interface)
}

#[cfg(test)]
mod tests {
    use durasync_test_support::component::component_importing;

    use super::*;

    #[test]
    fn the_wit_package_comes_from_the_wit_file() {
        assert!(HOST_WIT_PACKAGE.starts_with("durasync:plugin@0.1."), "{HOST_WIT_PACKAGE}");
        assert_eq!(format!("durasync:plugin@{HOST_WIT_VERSION}"), HOST_WIT_PACKAGE);
    }

    fn iface(imports: &[&str], exports: &[&str]) -> Interface {
        Interface {
            imports: imports.iter().map(|s| s.to_string()).collect(),
            exports: exports.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_wasi_interfaces_language_runtimes_import_are_provided_at_any_0_2_patch() {
        for i in [
            "wasi:filesystem/types@0.2.9",
            "wasi:sockets/tcp-create-socket@0.2.12",
            "wasi:clocks/wall-clock@0.2.0",
            "wasi:random/random@0.2.3",
            "wasi:cli/environment@0.2.9",
            "wasi:io/poll@0.2.12",
            "durasync:plugin/fs@0.1.0",
        ] {
            assert!(is_provided(i), "{i}");
        }
    }

    #[test]
    fn other_interfaces_versions_and_unversioned_names_are_not_provided() {
        for i in [
            "wasi:http/types@0.2.10",
            "wasi:clocks/timezone@0.2.9",
            "wasi:cli/stdout@0.3.0",
            "wasi:cli/stdout",
            "wasi:keyvalue/store@0.2.0",
            "acme:evil/net@1.0.0",
        ] {
            assert!(!is_provided(i), "{i}");
        }
    }

    #[test]
    fn forbidden_imports_are_named_with_the_flag_that_removes_them() {
        let i = iface(
            &["wasi:cli/stdout@0.2.4", "wasi:http/types@0.2.10", "wasi:http/outgoing-handler@0.2.10"],
            &["run"],
        );
        let v = i.violations();
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("`wasi:http/types@0.2.10`, `wasi:http/outgoing-handler@0.2.10`"), "{v:?}");
        assert!(v[0].contains("which this host does not provide"), "{v:?}");
        assert!(
            v[0].contains("componentize-js --wit WIT -n plugin -d http fetch-event -o app.wasm app.js"),
            "{v:?}"
        );
        assert!(!v[0].contains("jco"), "the guide says not to use jco: {v:?}");
        assert!(!v[0].contains("stdout"), "{v:?}");
        assert!(v[1].contains("`describe`"));
    }

    #[test]
    fn the_wit_version_comes_from_the_imports() {
        let i = iface(&["durasync:plugin/fs@0.1.1"], &[]);
        assert_eq!(i.wit_version(), Some("0.1.1"));
    }

    #[test]
    fn imports_are_read_from_the_binary_without_compiling() {
        let wasm = component_importing(&["wasi:http/types@0.2.10", "wasi:cli/stdout@0.2.4"]);
        let i = Interface::parse(&wasm).unwrap();
        assert_eq!(i.imports, ["wasi:http/types@0.2.10", "wasi:cli/stdout@0.2.4"]);
        assert!(i.exports.is_empty());
    }

    #[test]
    fn a_core_module_an_elf_file_garbage_and_a_truncated_component_are_refused_saying_which() {
        assert!(Interface::parse(b"\0asm\x01\0\0\0").unwrap_err().contains("core wasm module"));
        assert!(Interface::parse(b"\x7fELF\x02\x01").unwrap_err().contains("precompiled artifact"));
        assert!(Interface::parse(b"hello").unwrap_err().contains("not a WebAssembly file"));
        let wasm = component_importing(&["wasi:http/types@0.2.10"]);
        let err = Interface::parse(&wasm[..wasm.len() - 3]).unwrap_err();
        assert!(err.contains("not a valid component"), "{err}");
    }

    #[test]
    fn a_component_with_too_many_imports_is_refused_not_read_without_bound() {
        let names: Vec<String> = (0..200).map(|i| format!("a:b/c{i}@1.0.0")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let one = component_importing(&refs);
        // Many import sections of 200 each, past MAX_NAMES in total.
        let sections = &one[13..];
        let mut wasm = one[..13].to_vec();
        for _ in 0..(MAX_NAMES / 200 + 1) {
            wasm.extend(sections);
        }
        let err = Interface::parse(&wasm).unwrap_err();
        assert!(err.contains("more than 4096"), "{err}");
    }
}
