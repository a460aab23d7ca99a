//! `volatile-disk BACKING MOUNTPOINT`: serve BACKING as MOUNTPOINT/disk.img
//! until SIGINT/SIGTERM; SIGUSR1 cuts the power (drops every unpersisted
//! write, answers every later request with EIO). For cutting power by hand
//! from a shell; the lab drives the same disk in-process.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

use durasync_powerloss::{CutMode, CutPlan, VolatileDisk};

#[derive(Debug, Parser)]
#[command(about = "Serve an image file whose writes persist only at fsync; SIGUSR1 cuts the power")]
struct Args {
    /// The image's backing file (its length is the disk's size).
    backing: PathBuf,
    /// Where to mount the FUSE file system serving `disk.img`.
    mountpoint: PathBuf,
    /// Cut the power by itself right after the N-th persisted flush.
    #[arg(long, value_name = "N", conflicts_with = "cut_at_write")]
    cut_after_flush: Option<u64>,
    /// Cut the power by itself when the N-th write arrives.
    #[arg(long, value_name = "N")]
    cut_at_write: Option<u64>,
    /// At the cut, persist a pseudo-random half of the unpersisted pages
    /// (chosen by SEED) instead of dropping them all.
    #[arg(long, value_name = "SEED")]
    tear: Option<u64>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let plan = match (args.cut_after_flush, args.cut_at_write) {
        (Some(n), _) => CutPlan::AfterFlush(n.max(1)),
        (_, Some(n)) => CutPlan::AtWrite(n.max(1)),
        _ => CutPlan::Never,
    };
    let mode = args.tear.map_or(CutMode::DropAll, CutMode::Tear);
    let mut signals = Signals::new([SIGUSR1, SIGINT, SIGTERM]).context("installing signal handlers")?;
    let disk = VolatileDisk::mount(&args.backing, &args.mountpoint)
        .with_context(|| format!("mounting the volatile disk on {}", args.mountpoint.display()))?;
    let switch = disk.switch();
    switch.arm(plan, mode);
    println!("serving {}", disk.image_path().display());
    for signal in signals.forever() {
        if signal == SIGUSR1 {
            switch.cut().context("cutting the power")?;
            println!("power cut: {:?}", switch.stats());
        } else {
            break;
        }
    }
    println!("stopping: {:?}", switch.stats());
    drop(disk);
    Ok(())
}
