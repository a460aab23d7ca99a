//! WIT `info` (what `describe` returns) and `level` (of a log message).

use alloc::string::String;
use alloc::vec::Vec;

/// What a plugin says about itself (`describe`, `durasync inspect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    /// A short machine-friendly name (`certsync`).
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// One sentence for a person.
    pub summary: String,
    /// The root names the plugin opens, so an operator knows what to grant.
    pub roots: Vec<String>,
}

impl Info {
    /// A plugin called `name`, at `version`, that does `summary` and opens no roots.
    pub fn new(name: impl Into<String>, version: impl Into<String>, summary: impl Into<String>) -> Self {
        Info { name: name.into(), version: version.into(), summary: summary.into(), roots: Vec::new() }
    }

    /// The same, opening the roots `roots`.
    #[must_use]
    pub fn roots<I, S>(mut self, roots: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.roots = roots.into_iter().map(Into::into).collect();
        self
    }
}

/// How important a log message is (WIT `level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Detail for whoever debugs the plugin.
    Debug,
    /// Normal progress.
    Info,
    /// Something an operator should look at.
    Warn,
    /// Something failed.
    Error,
}

impl Level {
    /// The lowercase WIT name (`debug`, `info`, `warn`, `error`).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }

    /// The level whose WIT name is `word`, if any.
    pub fn from_word(word: &str) -> Option<Level> {
        [Level::Debug, Level::Info, Level::Warn, Level::Error].into_iter().find(|l| l.as_str() == word)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_round_trip_through_their_wit_names() {
        for l in [Level::Debug, Level::Info, Level::Warn, Level::Error] {
            assert_eq!(Level::from_word(l.as_str()), Some(l));
        }
        assert_eq!(Level::from_word("trace"), None);
    }

    #[test]
    fn info_lists_the_roots_it_was_given() {
        let i = Info::new("n", "1", "s").roots(["a", "b"]);
        assert_eq!(i.roots, ["a", "b"]);
    }
}
