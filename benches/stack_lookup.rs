//! Point lookups through a stack: the one cached, reseeked merged iterator vs a fresh
//! merged iterator per lookup, vs git 2.47 resolving the same names
//! (`git cat-file --batch-check`, one process), at 100k and 1M refs.
//! Reports lookups/s and heap allocations per lookup (counting global allocator).
//!
//! Run: `cargo bench --bench stack_lookup` (`BENCH_SCALE=10` divides the sizes by 10).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use reftablefs::stack::{Stack, StackOptions};
use reftablefs::table::RefIter;
use reftablefs::transaction::RefEdit;
use reftablefs::{HashKind, ObjectId, RefRecord, RefValue};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocs;
#[path = "../tests/support/rng.rs"]
mod rng;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "a")
        .env("GIT_AUTHOR_EMAIL", "a@x")
        .env("GIT_COMMITTER_NAME", "a")
        .env("GIT_COMMITTER_EMAIL", "a@x")
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn name(i: u64) -> Vec<u8> {
    format!("refs/heads/feature/branch-{i:07}").into_bytes()
}

struct Row {
    refs: u64,
    lookups: usize,
    cached_rate: f64,
    cached_allocs: f64,
    fresh_rate: f64,
    fresh_allocs: f64,
    git_rate: f64,
}

fn run(n: u64) -> Row {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    git(dir, &["init", "-q", "--ref-format=reftable"]);
    let tree = git(dir, &["hash-object", "-t", "tree", "-w", "/dev/null"]);
    let commit = git(dir, &["commit-tree", tree.trim(), "-m", "x"]);
    let id = ObjectId::from_hex(commit.trim().as_bytes(), HashKind::Sha1).expect("id");
    let opts = StackOptions {
        auto_compact: false,
        ..StackOptions::default()
    };
    let mut st = Stack::open(dir.join(".git/reftable"), opts).expect("open");
    // One big table (written directly), then three small transactions on top, so that
    // every lookup merges four tables plus git's init table.
    let ui = st.next_update_index();
    st.add_table(ui, ui, |w| {
        let mut rec = RefRecord {
            update_index: ui,
            value: RefValue::Val1(id),
            ..RefRecord::default()
        };
        for i in 0..n {
            rec.name = name(i * 2);
            w.add_ref(&rec)?;
        }
        Ok(())
    })
    .expect("base table");
    for t in 0..3u64 {
        let mut tx = st.transaction();
        for i in 0..10 {
            tx.edit(RefEdit::update(name(t * 1000 + i * 2), id));
        }
        tx.commit().expect("small table");
    }
    // Lookups: random names, 1 in 8 missing (odd numbers are never written).
    let lookups = (n as usize * 2).min(400_000);
    let mut rng = rng::Rng::new(0x9e37_79b9_7f4a_7c15);
    let names: Vec<Vec<u8>> = (0..lookups)
        .map(|_| {
            let x = rng.next_u64();
            let i = x % n;
            name(if x % 8 == 0 { i * 2 + 1 } else { i * 2 })
        })
        .collect();

    // Cached iterator: warm up, then measure.
    for nm in names.iter().take(1000) {
        st.lookup(nm, |r| r.is_some()).expect("lookup");
    }
    // Three interleaved rounds of each; the best round counts (the machine is shared).
    let fresh_n = names.len();
    let mut cached = std::time::Duration::MAX;
    let mut fresh = std::time::Duration::MAX;
    let mut cached_allocs = 0.0;
    let mut fresh_allocs = 0.0;
    let mut found = 0usize;
    for _ in 0..3 {
        let a0 = allocs();
        let t0 = Instant::now();
        found = 0;
        for nm in &names {
            if st.lookup(nm, |r| r.is_some()).expect("lookup") {
                found += 1;
            }
        }
        cached = cached.min(t0.elapsed());
        cached_allocs = (allocs() - a0) as f64 / names.len() as f64;

        let a0 = allocs();
        let t0 = Instant::now();
        let mut found_fresh = 0usize;
        for nm in &names[..fresh_n] {
            let mut it = st.ref_iter();
            it.seek(nm).expect("seek");
            if let Some(r) = it.next().expect("next") {
                if r.name == *nm && !r.is_deletion() {
                    found_fresh += 1;
                }
            }
        }
        fresh = fresh.min(t0.elapsed());
        fresh_allocs = (allocs() - a0) as f64 / fresh_n as f64;
        assert!(found_fresh > 0);
    }
    assert!(found > names.len() / 2, "most names exist");

    // git: the same names through `git cat-file --batch-check` (one process, its own
    // cached iterator), process start included.
    let mut input = Vec::with_capacity(names.len() * 40);
    for nm in &names {
        input.extend_from_slice(nm);
        input.push(b'\n');
    }
    let mut gitt = std::time::Duration::MAX;
    let mut git_found = 0;
    for _ in 0..3 {
        let t0 = Instant::now();
        let mut child = Command::new("git")
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .args([
                "-c",
                "core.warnAmbiguousRefs=false",
                "cat-file",
                "--batch-check=%(objectname)",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("git cat-file");
        let mut stdin = child.stdin.take().expect("stdin");
        let feed = input.clone();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&feed);
        });
        let out = child.wait_with_output().expect("git finishes");
        let _ = writer.join();
        gitt = gitt.min(t0.elapsed());
        git_found = out
            .stdout
            .split(|&b| b == b'\n')
            .filter(|l| l.len() == 40)
            .count();
    }
    assert_eq!(git_found, found, "git and we find the same names");

    Row {
        refs: n,
        lookups: names.len(),
        cached_rate: names.len() as f64 / cached.as_secs_f64(),
        cached_allocs,
        fresh_rate: fresh_n as f64 / fresh.as_secs_f64(),
        fresh_allocs,
        git_rate: names.len() as f64 / gitt.as_secs_f64(),
    }
}

fn main() {
    if std::env::args().any(|a| a == "--test") {
        // `cargo bench -- --test` / CI smoke: tiny size only.
        let r = run(2_000);
        assert!(
            r.cached_allocs < 0.01,
            "cached lookups allocate: {}",
            r.cached_allocs
        );
        println!("ok");
        return;
    }
    let scale: u64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    println!("| refs | lookups | cached: lookups/s | allocs/lookup | fresh iterator: lookups/s | allocs/lookup | git cat-file: lookups/s | cached / fresh | cached / git |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for n in [100_000u64, 1_000_000] {
        let r = run(n / scale);
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.0} | {:.1} | {:.0} | {:.2}x | {:.2}x |",
            r.refs,
            r.lookups,
            r.cached_rate,
            r.cached_allocs,
            r.fresh_rate,
            r.fresh_allocs,
            r.git_rate,
            r.cached_rate / r.fresh_rate,
            r.cached_rate / r.git_rate
        );
    }
}
