//! Messages for the operator, forwarded by the host with the plugin's name.

use crate::Level;

/// Send one message to the host's log. The host caps log volume per run;
/// messages past the cap are dropped, never an error. Prefer the macros
/// ([`info!`](crate::info) and friends).
pub fn log(level: Level, message: &str) {
    crate::backend::log(level, message);
}

/// Log a `format!`-style message at [`Level::Debug`].
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log($crate::Level::Debug, &::std::format!($($arg)+)) };
}

/// Log a `format!`-style message at [`Level::Info`].
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log($crate::Level::Info, &::std::format!($($arg)+)) };
}

/// Log a `format!`-style message at [`Level::Warn`].
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log($crate::Level::Warn, &::std::format!($($arg)+)) };
}

/// Log a `format!`-style message at [`Level::Error`].
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log($crate::Level::Error, &::std::format!($($arg)+)) };
}
