//! The volatile disk mounted for real (its logic alone is unit-tested in
//! tests/powerloss/src/image.rs): writes through the FUSE file reach the
//! backing file only at fsync, a cut fails every later request with EIO, and
//! a loop device's flush arrives as that fsync.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::MutexGuard;

use durasync_powerloss::{CutMode, CutPlan, VolatileDisk};

use crate::rig::Loop;
use crate::{can_run, serial};

/// A volatile disk serving a `len`-byte backing file of dots, mounted in a
/// fresh directory; `None` (after `cannot_check`) where it cannot run. Holds
/// this binary's turn until dropped (the disk is unmounted first).
struct Served {
    disk: VolatileDisk,
    backing: PathBuf,
    _dir: tempfile::TempDir,
    _turn: MutexGuard<'static, ()>,
}

fn serve(len: usize) -> Option<Served> {
    let turn = serial();
    if !can_run(None) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing.img");
    fs::write(&backing, vec![b'.'; len]).unwrap();
    fs::create_dir(dir.path().join("fuse")).unwrap();
    let disk = VolatileDisk::mount(&backing, &dir.path().join("fuse")).unwrap();
    Some(Served { disk, backing, _dir: dir, _turn: turn })
}

#[test]
fn a_write_through_the_served_file_persists_only_at_its_fsync() {
    let Some(served) = serve(1 << 20) else {
        return;
    };
    let (disk, path) = (&served.disk, &served.backing);
    let f = File::options().read(true).write(true).open(disk.image_path()).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    f.write_all_at(b"cached", 4090).unwrap();
    let mut back = [0u8; 8];
    f.read_exact_at(&mut back, 4089).unwrap();
    assert_eq!(&back, b".cached.");
    assert_eq!(&fs::read(path).unwrap()[4089..4097], b"........", "persisted before any fsync");
    f.sync_all().unwrap();
    assert_eq!(&fs::read(path).unwrap()[4089..4097], b".cached.");
    assert_eq!(disk.switch().stats().flushes, 1);
    drop(f);
}

#[test]
fn after_a_cut_unflushed_writes_are_gone_and_every_request_fails_with_eio() {
    let Some(served) = serve(1 << 20) else {
        return;
    };
    let (disk, path) = (&served.disk, &served.backing);
    let mut f = File::options().read(true).write(true).open(disk.image_path()).unwrap();
    f.write_all(b"kept").unwrap();
    f.sync_data().unwrap();
    f.write_all(b"lost").unwrap();
    disk.switch().cut().unwrap();
    let eio =
        |r: std::io::Result<()>| r.unwrap_err().raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error());
    let mut buf = [0u8; 4];
    assert!(eio(f.seek(SeekFrom::Start(0)).map(drop).and_then(|()| f.read_exact(&mut buf))));
    assert!(eio(f.write_all(b"more")));
    assert!(eio(f.sync_all()));
    assert_eq!(&fs::read(path).unwrap()[..8], b"kept....");
    assert_eq!(disk.switch().stats().dropped_pages, 1);
}

#[test]
fn a_loop_device_flush_reaches_the_image_as_a_persisting_fsync() {
    let Some(served) = serve(4 << 20) else {
        return;
    };
    let (disk, path) = (&served.disk, &served.backing);
    {
        let lp = Loop::attach(&disk.image_path());
        // Armed after attaching: configuring a loop device may flush its file.
        disk.switch().arm(CutPlan::AfterFlush(1), CutMode::DropAll);
        let mut dev = File::options().write(true).open(lp.dev()).unwrap();
        dev.seek(SeekFrom::Start(8192)).unwrap();
        dev.write_all(&[b'L'; 4096]).unwrap();
        // The block device's page cache, then the loop device, then the
        // served file: fsync of the device must persist the page.
        dev.sync_all().unwrap();
        let s = disk.switch().stats();
        assert!(s.flushes >= 1 && s.cut, "the device's fsync flushed the image: {s:?}");
        assert!(fs::read(path).unwrap()[8192..12288].iter().all(|&b| b == b'L'));
        drop(dev);
    }
}
