//! Driver for the lock-create latency benchmark: while a writer thread keeps the mount's
//! batcher busy (lock + rename + fsync of a new ref, in a loop), the main thread creates
//! and removes `probe.lock` files for SECONDS and reports the latency of the `open` that
//! creates each lock (p50, p99, max, in ms). Run it against a mount started with
//! `RTFS_TEST_COMMIT_DELAY_MS=1000` to see whether requests wait for a slow commit.
//!
//! usage: lock_latency MOUNT_ROOT OID SECONDS

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(root), Some(oid), Some(secs)) = (
        args.first().map(PathBuf::from),
        args.get(1).cloned(),
        args.get(2).and_then(|s| s.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: lock_latency MOUNT_ROOT OID SECONDS");
        return ExitCode::from(129);
    };
    match run(&root, &oid, Duration::from_secs(secs)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lock_latency: {e}");
            ExitCode::FAILURE
        }
    }
}

fn update(root: &Path, name: &str, oid: &str) -> std::io::Result<()> {
    let lock = root.join(format!("{name}.lock"));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)?;
    f.write_all(format!("{oid}\n").as_bytes())?;
    drop(f);
    std::fs::rename(&lock, root.join(name))?;
    File::open(root.join(name))?.sync_all()
}

fn run(root: &Path, oid: &str, dur: Duration) -> std::io::Result<()> {
    std::fs::create_dir_all(root.join("refs/heads/bg"))?;
    std::fs::create_dir_all(root.join("refs/heads/probe"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let (r, o, s) = (root.to_path_buf(), oid.to_string(), stop.clone());
    let bg = std::thread::spawn(move || -> std::io::Result<u64> {
        let mut n = 0;
        while !s.load(Ordering::SeqCst) {
            update(&r, &format!("refs/heads/bg/u{n}"), &o)?;
            n += 1;
        }
        Ok(n)
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut lat = Vec::new();
    let end = Instant::now() + dur;
    let mut k = 0u64;
    while Instant::now() < end {
        let p = root.join(format!("refs/heads/probe/p{k}.lock"));
        let t = Instant::now();
        let f = OpenOptions::new().write(true).create_new(true).open(&p)?;
        lat.push(t.elapsed());
        drop(f);
        std::fs::remove_file(&p)?;
        k += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, Ordering::SeqCst);
    let commits = bg
        .join()
        .map_err(|_| std::io::Error::other("writer panicked"))??;
    lat.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let pct = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize];
    println!(
        "n={} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} background_commits={commits}",
        lat.len(),
        ms(pct(0.5)),
        ms(pct(0.99)),
        ms(*lat.last().unwrap_or(&Duration::ZERO))
    );
    Ok(())
}
