//! core tests (see tests/README.md): the durable core and the native CLI.

mod common;

mod atime;
mod attrs;
mod bad_input;
mod cancel;
mod cli;
mod command_exit;
mod concurrency;
mod deep;
mod doctor;
mod faults;
mod flush;
mod fsync_count;
mod gate;
mod incremental;
mod layout;
mod leftovers;
mod modes;
mod non_utf8;
mod previous;
mod retry;
mod stream;
mod unchanged_from;
mod upstream_matrix;

use durasync_test_support as support;
