//! Format-core benchmark: write 1M refs to one table, seek 100k random names in it, scan
//! it; ns/record and allocations/record (counting global allocator), side by side with
//! git doing comparable work on the same refs in the same run.
//!
//! Run: `cargo bench --bench table_core` (env `REFS=<n>` to change the 1,000,000).
//!
//! git's figures:
//! - write: `git refs migrate --ref-format=reftable` of a files repo whose packed-refs
//!   holds the refs (no reflogs): one table with every ref (includes process start-up and
//!   parsing packed-refs; ours is the writer alone, from decoded records to bytes in a file);
//! - seek: `git update-ref --stdin` with one `verify <ref> <oid>` line per name (each is a
//!   point read through git's cached reftable iterator);
//! - scan: `git for-each-ref --format=%(objectname)` (includes formatting and output).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use reftablefs::table::{RefIter, Table, TableWriter, WriteOptions};
use reftablefs::RefRecord;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocs;
#[path = "../tests/support/rng.rs"]
mod rng;

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.com");
    c
}

fn run(c: &mut Command) -> String {
    let out = c.stderr(Stdio::inherit()).output().expect("run git");
    assert!(out.status.success(), "{c:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn main() {
    let n: usize = std::env::var("REFS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let seeks = 100_000.min(n);
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("r");
    run(git(dir.path()).args([
        "init",
        "-q",
        "--ref-format=files",
        "--initial-branch",
        "master",
        "r",
    ]));
    run(git(&repo).args(["commit", "-q", "--allow-empty", "-m", "base"]));
    let oid = run(git(&repo).args(["rev-parse", "HEAD"]))
        .trim()
        .to_string();
    // git 2.47 cannot migrate reflogs: drop the commit's.
    std::fs::remove_dir_all(repo.join(".git/logs")).unwrap();
    // packed-refs with n refs in the files backend, names spread over 1000 directories.
    let mut names: Vec<String> = (0..n)
        .map(|i| format!("refs/heads/d{:03}/branch-{i:07}", i % 1000))
        .collect();
    names.sort();
    {
        let mut f =
            std::io::BufWriter::new(std::fs::File::create(repo.join(".git/packed-refs")).unwrap());
        writeln!(f, "# pack-refs with: peeled fully-peeled sorted ").unwrap();
        for name in &names {
            writeln!(f, "{oid} {name}").unwrap();
        }
    }

    // git: write.
    let t0 = Instant::now();
    run(git(&repo).args(["refs", "migrate", "--ref-format=reftable"]));
    let git_write = t0.elapsed();
    let list = std::fs::read_to_string(repo.join(".git/reftable/tables.list")).unwrap();
    let tables: Vec<&str> = list.lines().collect();
    assert_eq!(tables.len(), 1, "git wrote one table");
    let path = repo.join(".git/reftable").join(tables[0]);
    let git_bytes = std::fs::read(&path).unwrap();

    // Ours: write the same records (decoded from git's table) to a file.
    let git_table = Table::from_bytes("git", git_bytes.clone()).unwrap();
    let mut records: Vec<RefRecord> = Vec::with_capacity(n + 2);
    let mut it = git_table.ref_iter();
    it.seek(b"").unwrap();
    while let Some(r) = it.next().unwrap() {
        records.push(r.clone());
    }
    let mut w = TableWriter::new(WriteOptions::default());
    let out_path = dir.path().join("ours.ref");
    let a0 = allocs();
    let t0 = Instant::now();
    w.begin(git_table.min_update_index(), git_table.max_update_index())
        .unwrap();
    for r in &records {
        w.add_ref(r).unwrap();
    }
    let bytes = w.finish().unwrap();
    std::fs::write(&out_path, bytes).unwrap();
    let our_write = t0.elapsed();
    let write_allocs = allocs() - a0;
    let identical = bytes == git_bytes.as_slice();
    // A second table with the same writer: buffers are warm, so this shows the steady state.
    let a0 = allocs();
    let t0 = Instant::now();
    w.begin(git_table.min_update_index(), git_table.max_update_index())
        .unwrap();
    for r in &records {
        w.add_ref(r).unwrap();
    }
    w.finish().unwrap();
    let our_write_warm = t0.elapsed();
    let warm_allocs = allocs() - a0;

    // Seek: 100k random existing names, all different.
    let mut rng = rng::Rng::new(0x9e37_79b9_7f4a_7c15);
    // Distinct names in random order (git refuses two updates of one ref).
    let mut order: Vec<usize> = (0..n).collect();
    for i in 0..seeks {
        let j = i + rng.below(n - i);
        order.swap(i, j);
    }
    let picks: Vec<&String> = order[..seeks].iter().map(|&i| &names[i]).collect();
    let table = Table::open(&out_path).unwrap();
    let mut it = table.ref_iter();
    let a0 = allocs();
    let t0 = Instant::now();
    let mut found = 0usize;
    for name in &picks {
        it.seek(name.as_bytes()).unwrap();
        if let Some(r) = it.next().unwrap() {
            found += usize::from(r.name == name.as_bytes());
        }
    }
    let our_seek = t0.elapsed();
    let seek_allocs = allocs() - a0;
    assert_eq!(found, seeks);
    // The same names in key order: the difference to random order is cache misses.
    let mut sorted = picks.clone();
    sorted.sort();
    let t0 = Instant::now();
    for name in &sorted {
        it.seek(name.as_bytes()).unwrap();
        std::hint::black_box(it.next().unwrap());
    }
    let our_seek_sorted = t0.elapsed();
    let mut input = Vec::new();
    for name in &picks {
        writeln!(input, "verify {name} {oid}").unwrap();
    }
    let t0 = Instant::now();
    let mut child = git(&repo)
        .args(["update-ref", "--stdin"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    assert!(child.wait().unwrap().success());
    let git_seek = t0.elapsed();

    // Scan.
    let a0 = allocs();
    let t0 = Instant::now();
    it.seek(b"").unwrap();
    let mut count = 0usize;
    while let Some(r) = it.next().unwrap() {
        count += r.name.len() & 1;
    }
    let our_scan = t0.elapsed();
    let scan_allocs = allocs() - a0;
    std::hint::black_box(count);
    let t0 = Instant::now();
    let out = git(&repo)
        .args(["for-each-ref", "--format=%(objectname)"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(out.success());
    let git_scan = t0.elapsed();

    let recs = records.len() as f64;
    let ns = |d: std::time::Duration, k: f64| d.as_nanos() as f64 / k;
    println!(
        "## table_core: {n} refs (+HEAD, master), table {} bytes, identical to git's: {identical}",
        bytes_len(&out_path)
    );
    println!("| work | ours ns/rec | allocs/rec | git ns/rec | ours/git |");
    println!("|---|---|---|---|---|");
    let row = |what: &str, o: std::time::Duration, allocs: u64, k: f64, g: std::time::Duration| {
        println!(
            "| {what} | {:.1} | {:.4} | {:.1} | {:.3} |",
            ns(o, k),
            allocs as f64 / k,
            ns(g, k),
            o.as_secs_f64() / g.as_secs_f64()
        );
    };
    row(
        "write (cold writer) vs refs migrate",
        our_write,
        write_allocs,
        recs,
        git_write,
    );
    row(
        "write (warm writer) vs refs migrate",
        our_write_warm,
        warm_allocs,
        recs,
        git_write,
    );
    row(
        "seek 100k random vs update-ref verify",
        our_seek,
        seek_allocs,
        seeks as f64,
        git_seek,
    );
    row(
        "seek 100k in key order vs update-ref verify (random)",
        our_seek_sorted,
        0,
        seeks as f64,
        git_seek,
    );
    row(
        "full scan vs for-each-ref",
        our_scan,
        scan_allocs,
        recs,
        git_scan,
    );
}

fn bytes_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}
