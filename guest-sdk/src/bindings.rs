//! The bindings generated from `wit/durasync.wit` (wasm32 only). Plugins
//! normally use the API at the crate root instead.
//!
//! They live in their own module with a public export macro and
//! `default_bindings_module`, so that the macro resolves from a plugin crate
//! and its `export` alias cannot collide with anything at the crate root
//! (E0255).

wit_bindgen::generate!({
    world: "plugin",
    path: "../wit",
    pub_export_macro: true,
    default_bindings_module: "durasync_guest::bindings",
    runtime_path: "durasync_guest::bindings::__rt",
});

// Plugin crates reach the runtime through this crate, so they need no
// direct dependency on wit-bindgen.
#[doc(hidden)]
pub use wit_bindgen::rt as __rt;
