//! runtime tests (see tests/README.md).

#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;
