//! A volatile disk for power-loss testing: a FUSE file system serving one
//! image file whose writes stay in memory until the file is fsynced, and a
//! power switch that drops every unpersisted write and fails every later
//! request with EIO. Attach a loop device to the served file, format it with
//! a real file system, and a cut is a power loss at the block level.
//!
//! Test-only: this crate is never linked into the `durasync` binary (it is a
//! dev-dependency of the power-loss lab, `tests/powerloss/lab/`).

#![deny(missing_docs)]

pub mod disk;
pub mod image;

pub use disk::{IMAGE_NAME, PowerSwitch, VolatileDisk};
pub use image::{CutMode, CutPlan, Error, Stats, VolatileImage};
