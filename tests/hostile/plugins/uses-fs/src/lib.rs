//! Uses std::fs, so the component imports wasi:filesystem: refused at load.

wit_bindgen::generate!({ path: "../../../../wit/durasync.wit", world: "plugin" });

struct UsesFs;

impl Guest for UsesFs {
    fn describe() -> Info {
        Info {
            name: "uses-fs".into(),
            version: "0".into(),
            summary: "writes with std::fs".into(),
            roots: vec![],
        }
    }

    fn run(_config: String, _input: Vec<u8>) -> Result<String, String> {
        std::fs::write("/etc/durasync-escape", b"escaped").map_err(|e| e.to_string())?;
        Ok("wrote /etc/durasync-escape".into())
    }
}

export!(UsesFs);
