//! Mount-level tests of the FUSE read path over an in-memory ref source (no stack needed).
//! They need /dev/fuse and root (or fusermount3); without them they print SKIP and pass.
#![cfg(feature = "fuse")]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reftablefs::format::{LogRecord, ObjectId, RefValue};
use reftablefs::fs::source::{MemSource, RefWriter, SharedMem};
use reftablefs::fs::{self, MountOptions};

fn id(n: u8) -> ObjectId {
    ObjectId::from_bytes(&[n; 20]).unwrap()
}

fn can_mount() -> bool {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP: /dev/fuse missing");
        return false;
    }
    true
}

struct Mounted {
    mp: PathBuf,
    thread: Option<std::thread::JoinHandle<reftablefs::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Mounted {
    fn new(mem: SharedMem) -> Mounted {
        let dir = tempfile::tempdir().unwrap();
        let mp = dir.path().join("mnt");
        let rt = dir.path().join("reftable");
        std::fs::create_dir(&mp).unwrap();
        std::fs::create_dir(&rt).unwrap();
        let (mp2, rt2) = (mp.clone(), rt.clone());
        let thread = std::thread::spawn(move || {
            let writer: Box<dyn RefWriter> = Box::new(mem.clone());
            fs::mount(
                Box::new(mem),
                Some(writer),
                Default::default(),
                &rt2,
                &mp2,
                // The in-memory source has no git directory to pass through.
                &MountOptions {
                    refs_only: true,
                    ..MountOptions::default()
                },
            )
        });
        let start = Instant::now();
        while !fs::is_mounted(&mp) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "mount did not come up"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Mounted {
            mp,
            thread: Some(thread),
            _dir: dir,
        }
    }

    fn unmount(mut self) -> reftablefs::Result<()> {
        assert!(fs::lazy_unmount(&self.mp) || !fs::is_mounted(&self.mp));
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.thread.is_some() {
            fs::lazy_unmount(&self.mp);
        }
    }
}

/// Writes a file and closes it, reporting close()'s error (Rust's drop ignores it).
fn write_close(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::fd::IntoRawFd;
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    let fd = f.into_raw_fd();
    // SAFETY: closing the descriptor we own, once.
    if unsafe { libc::close(fd) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn sample() -> MemSource {
    let mut m = MemSource::new();
    m.set("HEAD", RefValue::Symref(b"refs/heads/main".to_vec()));
    m.set("refs/heads/main", RefValue::Val1(id(0x11)));
    m.set("refs/heads/feature/deep/x", RefValue::Val1(id(0x22)));
    m.set(
        "refs/tags/v1",
        RefValue::Val2 {
            value: id(0x33),
            peeled: id(0x11),
        },
    );
    m.add_log(LogRecord {
        refname: b"refs/heads/main".to_vec(),
        update_index: 1,
        new_id: id(0x11),
        name: b"A U Thor".to_vec(),
        email: b"a@example.com".to_vec(),
        time: 1_112_911_993,
        tz_offset: -700,
        message: b"commit (initial): one\n".to_vec(),
        ..Default::default()
    });
    m
}

#[test]
fn serves_refs_logs_and_packed_refs_and_sees_changes() {
    if !can_mount() {
        return;
    }
    let mem = Arc::new(Mutex::new(sample()));
    let m = Mounted::new(mem.clone());
    let mp = &m.mp;
    let read = |p: &str| std::fs::read_to_string(mp.join(p)).unwrap();
    assert_eq!(read("HEAD"), "ref: refs/heads/main\n");
    assert_eq!(read("refs/heads/main"), format!("{}\n", "11".repeat(20)));
    assert_eq!(read("refs/tags/v1"), format!("{}\n", "33".repeat(20)));
    assert_eq!(
        std::fs::metadata(mp.join("refs/heads/main")).unwrap().len(),
        41
    );
    assert!(std::fs::metadata(mp.join("refs/heads/feature/deep"))
        .unwrap()
        .is_dir());
    assert_eq!(
        read("logs/refs/heads/main"),
        format!(
            "{} {} A U Thor <a@example.com> 1112911993 -0700\tcommit (initial): one\n",
            "0".repeat(40),
            "11".repeat(20)
        )
    );
    // Nothing was ever packed: no packed-refs, as in a fresh files repository.
    assert_eq!(
        std::fs::metadata(mp.join("packed-refs"))
            .unwrap_err()
            .kind(),
        std::io::ErrorKind::NotFound
    );
    let mut root: Vec<String> = std::fs::read_dir(mp)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    root.sort();
    assert_eq!(root, ["HEAD", "logs", "refs"]);
    let heads = std::fs::read_dir(mp.join("refs/heads")).unwrap();
    let mut kinds: Vec<(String, bool)> = heads
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                e.file_type().unwrap().is_dir(),
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [("feature".to_string(), true), ("main".to_string(), false)]
    );
    assert!(std::fs::metadata(mp.join("refs/heads/nope")).is_err());

    // A change underneath: the content is visible at once (every open reaches the
    // mount, and a read is never capped at the old, shorter size); `stat` shows the new
    // size once the watcher has invalidated the name (it polls every 200 ms here, as
    // nothing changes in the reftable directory of an in-memory source).
    mem.lock().unwrap().set(
        "HEAD",
        RefValue::Symref(b"refs/heads/feature/deep/x".to_vec()),
    );
    assert_eq!(read("HEAD"), "ref: refs/heads/feature/deep/x\n");
    let start = Instant::now();
    while std::fs::metadata(mp.join("HEAD")).unwrap().len() != 31 {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "stat of HEAD still shows the old size"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Deleting a ref and turning its name into a directory.
    {
        let mut g = mem.lock().unwrap();
        g.refs.remove(&b"refs/heads/main"[..]);
        g.set("refs/heads/main/sub", RefValue::Val1(id(0x44)));
    }
    let start = Instant::now();
    loop {
        match std::fs::metadata(mp.join("refs/heads/main")) {
            Ok(md) if md.is_dir() => break,
            _ => {
                assert!(
                    start.elapsed() < Duration::from_millis(1500),
                    "file->dir flip not visible"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    eprintln!("file->dir flip visible after {:?}", start.elapsed());
    assert_eq!(
        read("refs/heads/main/sub"),
        format!("{}\n", "44".repeat(20))
    );

    // A corrupt store: EIO, and the mount serves again once repaired.
    mem.lock().unwrap().fail = true;
    let err = std::fs::read_to_string(mp.join("refs/tags/v1")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    mem.lock().unwrap().fail = false;
    assert_eq!(read("refs/tags/v1"), format!("{}\n", "33".repeat(20)));

    m.unmount().unwrap();
}

#[test]
fn files_backend_write_protocol() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if !can_mount() {
        return;
    }
    let mem = Arc::new(Mutex::new(sample()));
    let m = Mounted::new(mem.clone());
    let mp = m.mp.clone();
    let read = |p: &str| std::fs::read_to_string(mp.join(p)).unwrap();
    let excl = |p: &str| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(mp.join(p))
    };
    // Lock, write in two calls, second lock attempt fails with EEXIST, rename commits.
    let mut lock = excl("refs/heads/main.lock").unwrap();
    assert_eq!(
        excl("refs/heads/main.lock").unwrap_err().raw_os_error(),
        Some(libc::EEXIST)
    );
    lock.write_all("55".repeat(20).as_bytes()).unwrap();
    lock.write_all(b"\n").unwrap();
    drop(lock);
    // The reflog line first, then the rename (git's order).
    let line = format!(
        "{} {} C O Mitter <c@o.m> 1700000000 +0000\tcommit: two\n",
        "11".repeat(20),
        "55".repeat(20)
    );
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(mp.join("logs/refs/heads/main"))
        .unwrap();
    log.write_all(line.as_bytes()).unwrap();
    drop(log);
    std::fs::rename(mp.join("refs/heads/main.lock"), mp.join("refs/heads/main")).unwrap();
    assert_eq!(read("refs/heads/main"), format!("{}\n", "55".repeat(20)));
    assert!(!mp.join("refs/heads/main.lock").exists());
    // New ref in new directories.
    std::fs::create_dir(mp.join("refs/heads/new")).unwrap();
    std::fs::create_dir(mp.join("refs/heads/new/deep")).unwrap();
    std::fs::write(
        mp.join("refs/heads/new/deep/x"),
        format!("{}\n", "66".repeat(20)),
    )
    .unwrap();
    assert_eq!(
        read("refs/heads/new/deep/x"),
        format!("{}\n", "66".repeat(20))
    );
    // Bad content: kept as a broken ref, as a files .git keeps the file (issue 25.6);
    // a valid value written after it makes it a ref again.
    write_close(&mp.join("refs/heads/main"), b"not a ref\n").unwrap();
    assert_eq!(read("refs/heads/main"), "not a ref\n");
    write_close(
        &mp.join("refs/heads/main"),
        format!("{}\n", "55".repeat(20)).as_bytes(),
    )
    .unwrap();
    assert_eq!(read("refs/heads/main"), format!("{}\n", "55".repeat(20)));
    // D/F: a ref cannot become a directory, a directory cannot become a ref.
    assert_eq!(
        std::fs::create_dir(mp.join("refs/heads/main"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EEXIST)
    );
    assert!(write_close(&mp.join("refs/heads/main/x"), b"x").is_err());
    // rmdir of a non-empty directory; an empty virtual one goes away.
    assert_eq!(
        std::fs::remove_dir(mp.join("refs/heads/new"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOTEMPTY)
    );
    std::fs::create_dir(mp.join("refs/heads/empty")).unwrap();
    std::fs::remove_dir(mp.join("refs/heads/empty")).unwrap();
    // HEAD symref change.
    std::fs::write(mp.join("HEAD.lock"), "ref: refs/heads/new/deep/x\n").unwrap();
    std::fs::rename(mp.join("HEAD.lock"), mp.join("HEAD")).unwrap();
    assert_eq!(read("HEAD"), "ref: refs/heads/new/deep/x\n");
    // Delete.
    std::fs::remove_file(mp.join("refs/heads/feature/deep/x")).unwrap();
    assert!(!mp.join("refs/heads/feature/deep/x").exists());
    let heads: Vec<String> = std::fs::read_dir(mp.join("refs/heads"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(!heads.contains(&"feature".to_string()), "{heads:?}");
    // fsync of the root waits for the batch: everything is in the store now.
    std::fs::File::open(&mp).unwrap().sync_all().unwrap();
    // Again with nothing pending (this once panicked on an empty sequence range).
    std::fs::File::open(mp.join("HEAD"))
        .unwrap()
        .sync_all()
        .unwrap();
    std::fs::File::open(&mp).unwrap().sync_all().unwrap();
    {
        let g = mem.lock().unwrap();
        assert_eq!(
            g.refs.get(&b"refs/heads/main"[..]),
            Some(&RefValue::Val1(id(0x55)))
        );
        assert_eq!(
            g.refs.get(&b"refs/heads/new/deep/x"[..]),
            Some(&RefValue::Val1(id(0x66)))
        );
        assert_eq!(
            g.refs.get(&b"HEAD"[..]),
            Some(&RefValue::Symref(b"refs/heads/new/deep/x".to_vec()))
        );
        assert!(!g.refs.contains_key(&b"refs/heads/feature/deep/x"[..]));
        let main_log: Vec<_> = g
            .logs
            .values()
            .filter(|l| l.refname == b"refs/heads/main")
            .collect();
        assert_eq!(main_log.len(), 2);
        assert!(main_log
            .iter()
            .any(|l| l.message == b"commit: two\n" && l.name == b"C O Mitter"));
        // Five changes reached the store (main's rename with its reflog line, x, main
        // again, HEAD, the delete): at most one table each, however the batcher's window
        // fell on a loaded machine (it merges neighbours when it can, so an idle run
        // makes fewer). A reflog line and the rename after it are one table, not two.
        assert!(g.commits <= 5, "{} tables for five updates", g.commits);
    }
    m.unmount().unwrap();
}
