//! core tests (see tests/README.md): the durable core and the native CLI.

#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

#[allow(dead_code)]
mod common;

mod atime;
mod bad_input;
mod cancel;
mod cli;
mod command_exit;
mod concurrency;
mod deep;
mod faults;
mod flush;
mod fsync_count;
mod gate;
mod incremental;
mod leftovers;
mod modes;
mod non_utf8;
mod previous;
mod retry;
mod unchanged_from;
mod upstream_matrix;
