//! Turns `KEY=value` lines into an envdir (one file per key, like
//! daemontools' `envdir` reads), replaced atomically and durably.
use durasync_guest::{File, Info, Plugin, Root, RunError};

pub struct EnvDir;

impl Plugin for EnvDir {
    fn describe() -> Info {
        let summary = "Turns KEY=value lines into an envdir, atomically and durably";
        Info::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"), summary).roots(["out"])
    }

    fn run(_config: &str, input: &[u8]) -> Result<String, RunError> {
        let mut files = Vec::new();
        for line in std::str::from_utf8(input)?.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line.split_once('=').ok_or(format!("not KEY=value: {line:?}"))?;
            files.push(File::new(key.trim(), format!("{}\n", value.trim())));
        }
        // One atomic swap: readers see the old envdir or the new one, never a mix.
        let report = Root::open("out")?.sync("env", files)?;
        Ok(format!("env: {} ({} written, {} removed)", report.outcome, report.written, report.removed))
    }
}

durasync_guest::export_plugin!(EnvDir);

#[cfg(test)]
mod tests;
