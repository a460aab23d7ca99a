//! A hand-made component for tests of the import policy (the library's
//! unit tests of `runtime::policy` and the runtime tests): no toolchain
//! needed.

/// A minimal component importing one empty instance per name and exporting
/// nothing (a type section with one empty instance type, then the import
/// section): a plugin that needs interfaces the host does not provide,
/// without any toolchain.
pub fn component_importing(names: &[&str]) -> Vec<u8> {
    let mut imports = leb128(names.len());
    for n in names {
        imports.push(0x00);
        imports.extend(leb128(n.len()));
        imports.extend(n.as_bytes());
        imports.extend([0x05, 0x00]); // an instance of type 0
    }
    let mut wasm = b"\0asm\x0d\x00\x01\x00".to_vec();
    wasm.extend([0x07, 0x03, 0x01, 0x42, 0x00]);
    wasm.push(0x0a);
    wasm.extend(leb128(imports.len()));
    wasm.extend(imports);
    wasm
}

fn leb128(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}
