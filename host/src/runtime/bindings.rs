//! The host side of `wit/durasync.wit`, world `plugin`: one `bindgen!`.
//!
//! Every import is `trappable`: a host method returns
//! `wasmtime::Result<T>`, where an `Err` is a trap (a host bug, a bad
//! handle, an exhausted limit) and the WIT `error` variant travels inside
//! `T` as an ordinary value the plugin can handle.

wasmtime::component::bindgen!({
    path: "../wit/durasync.wit",
    world: "plugin",
    imports: { default: trappable },
    with: {
        // A `dir` handle is a host directory fd plus the root it came from
        // and its access; the guest only ever holds an index into the table.
        "durasync:plugin/fs.dir": crate::services::Dir,
    },
});
