//! A compaction streams its new table to disk: the peak memory of `reftablefs compact`
//! over a stack of 2M refs (a 52 MB table) stays within the block cache and a bounded
//! output buffer above what the same command needs for a tiny stack, where writing the
//! table in memory first took its whole size again. The table is byte-identical to the one
//! `git pack-refs` writes. Each child's peak RSS is read by `wait4`; the test runs alone
//! in a process of its own, which stays small (a child's peak RSS counts its parent's
//! pages, see two_table_repo).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::alone::alone;
use crate::util::git;

const BIN: &str = env!("CARGO_BIN_EXE_reftablefs");

/// Runs `cmd` to completion: its exit success and peak RSS in KiB.
fn peak_rss_kib(cmd: &mut Command) -> (bool, i64) {
    let child = cmd.stdout(Stdio::null()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into the two locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4");
    std::mem::forget(child); // already reaped
    (
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        ru.ru_maxrss,
    )
}

/// A reftable repository of `dirs` × 1000 refs (one table made by `reftablefs migrate`)
/// plus one more ref written by git (a second table): what `compact` merges.
fn two_table_repo(dir: &Path, dirs: usize) {
    std::fs::create_dir_all(dir).unwrap();
    git(
        dir,
        &["init", "-q", "--ref-format=files", "-b", "main", "."],
    );
    git(dir, &["commit", "-q", "--allow-empty", "-m", "base"]);
    let oid = git(dir, &["rev-parse", "HEAD"]).trim().to_string();
    std::fs::remove_dir_all(dir.join(".git/logs")).unwrap();
    // Written as a stream: the test process stays small, and so do its children before
    // they exec (a forked child's peak RSS counts the parent's pages).
    let f = std::fs::File::create(dir.join(".git/packed-refs")).unwrap();
    let mut packed = std::io::BufWriter::new(f);
    writeln!(packed, "# pack-refs with: peeled fully-peeled sorted ").unwrap();
    for i in 0..dirs {
        for j in 0..1000 {
            writeln!(packed, "{oid} refs/heads/d{i:05}/r{j:03}").unwrap();
        }
    }
    packed.flush().unwrap();
    let ok = Command::new(BIN)
        .args(["migrate", "--no-progress"])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(ok.success(), "migrate");
    git(dir, &["update-ref", "refs/heads/zzz", "HEAD"]);
}

fn table_bytes(dir: &Path) -> Vec<u8> {
    let rt = dir.join(".git/reftable");
    let list = std::fs::read_to_string(rt.join("tables.list")).unwrap();
    let names: Vec<&str> = list.lines().collect();
    assert_eq!(names.len(), 1, "compacted into one table");
    std::fs::read(rt.join(names[0])).unwrap()
}

#[test]
fn compaction_streams_its_table() {
    if !alone(module_path!(), "compaction_streams_its_table") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small");
    let big = tmp.path().join("big");
    let by_git = tmp.path().join("by-git");
    two_table_repo(&small, 1);
    two_table_repo(&big, 2000);
    // The same stack for git: a copy of the big repository before compaction.
    let ok = Command::new("cp")
        .arg("-a")
        .arg(&big)
        .arg(&by_git)
        .status()
        .unwrap();
    assert!(ok.success());

    let (ok, small_kib) = peak_rss_kib(Command::new(BIN).arg("compact").current_dir(&small));
    assert!(ok, "compact (small)");
    let (ok, big_kib) = peak_rss_kib(Command::new(BIN).arg("compact").current_dir(&big));
    assert!(ok, "compact (big)");
    git(&by_git, &["pack-refs"]);
    let ours = table_bytes(&big);
    assert!(ours.len() > 48 << 20, "a table of {} bytes", ours.len());
    assert!(
        ours == table_bytes(&by_git),
        "the compacted table differs from git's"
    );
    drop(ours);
    // The block cache (32 MiB) plus a bounded output buffer; writing the table in memory
    // first added the table's size (52 MB) again.
    let extra_mib = (big_kib - small_kib) / 1024;
    eprintln!("compact: peak RSS {small_kib} KiB for 1k refs, {big_kib} KiB for 2M refs");
    assert!(
        extra_mib < 44,
        "compacting 2M refs took {extra_mib} MiB more than 1k refs"
    );
}
