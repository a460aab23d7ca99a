//! Built against the next version of durasync:plugin (its WIT is derived
//! from the host's by `build.rs`) and calls `dir.rename`, which the host
//! lacks: refused at load with an error naming the function.

wit_bindgen::generate!({ path: "wit/durasync.wit", world: "plugin" });

use durasync::plugin::fs::open_root;

struct NewerMinor;

impl Guest for NewerMinor {
    fn describe() -> Info {
        Info {
            name: "newer-minor".into(),
            version: "0".into(),
            summary: "needs the next version".into(),
            roots: vec![],
        }
    }

    fn run(_config: String, _input: Vec<u8>) -> Result<String, String> {
        let dir = open_root("data").map_err(|e| format!("{e:?}"))?;
        dir.rename("a", "b").map_err(|e| format!("{e:?}"))?;
        Ok("renamed".into())
    }
}

export!(NewerMinor);
