//! Writing through the stack: one transaction creating N refs (with reflog entries),
//! ours (library call, fsync off as in git's default config) vs `git update-ref --stdin`
//! on the same kind of repository, side by side.
//!
//! Run: `cargo bench --bench stack_write` (`BENCH_SCALE=10` divides the sizes by 10).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reftablefs::stack::{Stack, StackOptions};
use reftablefs::transaction::{Identity, RefEdit};
use reftablefs::{HashKind, ObjectId};

fn git_cmd(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "a")
        .env("GIT_AUTHOR_EMAIL", "a@x")
        .env("GIT_COMMITTER_NAME", "a")
        .env("GIT_COMMITTER_EMAIL", "a@x");
    c
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_cmd(dir).args(args).output().expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn repo() -> (tempfile::TempDir, ObjectId) {
    let tmp = tempfile::tempdir().expect("tempdir");
    git(tmp.path(), &["init", "-q", "--ref-format=reftable"]);
    let tree = git(
        tmp.path(),
        &["hash-object", "-t", "tree", "-w", "/dev/null"],
    );
    let commit = git(tmp.path(), &["commit-tree", tree.trim(), "-m", "x"]);
    let id = ObjectId::from_hex(commit.trim().as_bytes(), HashKind::Sha1).expect("id");
    (tmp, id)
}

fn name(i: usize) -> String {
    format!("refs/heads/feature/branch-{i:07}")
}

fn ours(n: usize) -> Duration {
    let (tmp, id) = repo();
    let t0 = Instant::now();
    let mut st =
        Stack::open(tmp.path().join(".git/reftable"), StackOptions::default()).expect("open");
    let mut tx = st.transaction();
    tx.identity(Identity::now("a", "a@x"));
    for i in 0..n {
        tx.edit(RefEdit::create(name(i), id).message("bench"));
    }
    tx.commit().expect("commit");
    let d = t0.elapsed();
    let count = git(
        tmp.path(),
        &["for-each-ref", "--format=x", "refs/heads/feature/"],
    )
    .lines()
    .count();
    assert_eq!(count, n, "git reads every ref we wrote");
    d
}

fn theirs(n: usize) -> Duration {
    let (tmp, id) = repo();
    let mut input = String::with_capacity(n * 90);
    for i in 0..n {
        input.push_str(&format!("create {} {id}\n", name(i)));
    }
    let t0 = Instant::now();
    let mut child = git_cmd(tmp.path())
        .args(["update-ref", "-m", "bench", "--stdin"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("git");
    let mut stdin = child.stdin.take().expect("stdin");
    let w = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let st = child.wait().expect("git finishes");
    let _ = w.join();
    assert!(st.success());
    t0.elapsed()
}

fn main() {
    let scale: usize = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    let quick = std::env::args().any(|a| a == "--test");
    let sizes: &[usize] = if quick { &[1_000] } else { &[10_000, 100_000] };
    println!("| refs in one transaction | ours (library) | git update-ref --stdin | ours / git |");
    println!("|---:|---:|---:|---:|");
    for &n in sizes {
        let n = if quick { n } else { n / scale };
        let mut best_ours = Duration::MAX;
        let mut best_git = Duration::MAX;
        for _ in 0..if quick { 1 } else { 3 } {
            best_ours = best_ours.min(ours(n));
            best_git = best_git.min(theirs(n));
        }
        println!(
            "| {n} | {:.1} ms | {:.1} ms | {:.2} |",
            best_ours.as_secs_f64() * 1e3,
            best_git.as_secs_f64() * 1e3,
            best_ours.as_secs_f64() / best_git.as_secs_f64()
        );
    }
}
