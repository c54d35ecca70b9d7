//! Driver for the mount write benchmarks: performs COUNT ref updates the way git's files
//! backend does (open `x.lock` with O_CREAT|O_EXCL, write the hex id and "\n" as two writes,
//! close, rename over `x`) below ROOT/DIR, then optionally fsyncs the last ref (group
//! commit on a mount). Prints the elapsed seconds of the updates and of the fsync.
//!
//! usage: lock_rename ROOT DIR COUNT OID [--fsync-last]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(root), Some(dir), Some(count), Some(oid)) = (
        args.first().map(PathBuf::from),
        args.get(1),
        args.get(2).and_then(|c| c.parse::<usize>().ok()),
        args.get(3),
    ) else {
        eprintln!("usage: lock_rename ROOT DIR COUNT OID [--fsync-last]");
        return ExitCode::from(129);
    };
    let fsync_last = args.iter().any(|a| a == "--fsync-last");
    match run(&root.join(dir), count, oid, fsync_last) {
        Ok((updates, sync)) => {
            println!("updates_s={updates:.6} fsync_s={sync:.6}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lock_rename: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(
    dir: &std::path::Path,
    count: usize,
    oid: &str,
    fsync_last: bool,
) -> std::io::Result<(f64, f64)> {
    std::fs::create_dir_all(dir)?;
    let start = Instant::now();
    let mut last = None;
    for i in 0..count {
        let name = dir.join(format!("r{i:06}"));
        let lock = dir.join(format!("r{i:06}.lock"));
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&lock)?;
        f.write_all(oid.as_bytes())?;
        f.write_all(b"\n")?;
        drop(f);
        std::fs::rename(&lock, &name)?;
        last = Some(name);
    }
    let updates = start.elapsed().as_secs_f64();
    let sync_start = Instant::now();
    if let (true, Some(name)) = (fsync_last, last) {
        File::open(name)?.sync_all()?;
    }
    Ok((updates, sync_start.elapsed().as_secs_f64()))
}
