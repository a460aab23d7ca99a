//! Does nothing: the start-up measurement's plugin (`durasync run` with a
//! warm cache versus `durasync --version`, and warm instantiate + call).

wit_bindgen::generate!({ path: "../../../../wit/durasync.wit", world: "plugin" });

struct Noop;

impl Guest for Noop {
    fn describe() -> Info {
        Info { name: "bench-noop".into(), version: "0".into(), summary: "does nothing".into(), roots: vec![] }
    }

    fn run(_config: String, _input: Vec<u8>) -> Result<String, String> {
        Ok("nothing to do".into())
    }
}

export!(Noop);
