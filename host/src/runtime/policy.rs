//! The load-time import policy: a plugin may import only the interfaces
//! the host chooses to provide, checked on the component's type before it
//! is ever instantiated.
//!
//! Allowed: `durasync:plugin/*` (the contract), `wasi:io/*` and `wasi:cli/*`
//! (what Rust's std needs for stdio and panics; stdin is empty, stdout and
//! stderr are captured, there are no environment variables or arguments).
//! Everything else — `wasi:filesystem/*`, `wasi:sockets/*`, `wasi:clocks/*`,
//! `wasi:random/*`, any other package — is refused with an error naming it.

use wasmtime::Engine;
use wasmtime::component::Component;

/// Interface-name prefixes a plugin may import.
pub const ALLOWED_IMPORTS: &[&str] = &["durasync:plugin/", "wasi:io/", "wasi:cli/"];

/// The exports every plugin must have.
pub const REQUIRED_EXPORTS: &[&str] = &["describe", "run"];

/// The WIT package this host implements.
pub const HOST_WIT_PACKAGE: &str = crate::services::WIT_PACKAGE;

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
    pub fn of(component: &Component, engine: &Engine) -> Self {
        let ty = component.component_type();
        Interface {
            imports: ty.imports(engine).map(|(name, _)| name.to_owned()).collect(),
            exports: ty.exports(engine).map(|(name, _)| name.to_owned()).collect(),
        }
    }

    /// The version of the `durasync:plugin` package the plugin was built
    /// against, from its imports (`0.1.0`).
    pub fn wit_version(&self) -> Option<&str> {
        self.imports.iter().find_map(|i| i.strip_prefix("durasync:plugin/")?.split_once('@').map(|(_, v)| v))
    }

    /// Every violation of the policy, each naming the import or export.
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        let forbidden: Vec<String> = self
            .imports
            .iter()
            .filter(|i| !ALLOWED_IMPORTS.iter().any(|p| i.starts_with(p)))
            .map(|i| format!("`{i}`"))
            .collect();
        if !forbidden.is_empty() {
            let allowed: Vec<String> = ALLOWED_IMPORTS.iter().map(|p| format!("{p}*")).collect();
            out.push(format!(
                "it imports {}, which {} not allowed (plugins may import only {})",
                forbidden.join(", "),
                if forbidden.len() == 1 { "is" } else { "are" },
                allowed.join(", ")
            ));
        }
        for e in REQUIRED_EXPORTS {
            if !self.exports.iter().any(|x| x == e) {
                out.push(format!("it does not export `{e}` (world durasync:plugin/plugin)"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_imports_are_named() {
        let i = Interface {
            imports: vec!["wasi:cli/stdout@0.2.4".into(), "wasi:filesystem/types@0.2.4".into()],
            exports: vec!["run".into()],
        };
        let v = i.violations();
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("which is not allowed"), "{v:?}");
        assert!(v[0].contains("`wasi:filesystem/types@0.2.4`"));
        assert!(v[1].contains("`describe`"));
    }

    #[test]
    fn the_wit_version_comes_from_the_imports() {
        let i = Interface { imports: vec!["durasync:plugin/fs@0.1.1".into()], exports: vec![] };
        assert_eq!(i.wit_version(), Some("0.1.1"));
    }
}
