//! The `reftablefs` binary side by side with git 2.47 on the same repositories: the
//! outputs, exit codes and (where git writes the same thing) table bytes must be equal.
//!
//! This file holds the oracle the tests share: git and our binary run in one fixed
//! environment, repositories to compare on, and byte-for-byte comparisons of stacks.
//! The tests are grouped by command, one file each.

mod migrate;
mod options;
mod random;
mod reading;
mod repository;
mod symrefs;
mod update_ref;
mod verify;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_reftablefs");

/// A fixed, isolated environment so that git and we compute the same identities.
fn env(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.com")
        .env("GIT_COMMITTER_DATE", "1112911993 -0700")
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_AUTHOR_DATE", "1112911993 -0700")
        .env("GIT_TEST_REFTABLE_AUTOCOMPACTION", "false")
}

fn run(program: &str, dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(program);
    env(&mut cmd).current_dir(dir).args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    if let Some(input) = stdin {
        use std::io::Write;
        let mut w = child.stdin.take().unwrap();
        w.write_all(input).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = run("git", dir, args, None);
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn ours(dir: &Path, args: &[&str]) -> Output {
    run(BIN, dir, args, None)
}

/// stdout + exit code of both tools must be equal.
fn same(dir: &Path, ours_args: &[&str], git_args: &[&str]) {
    let a = ours(dir, ours_args);
    let b = run("git", dir, git_args, None);
    assert_eq!(
        (String::from_utf8_lossy(&a.stdout), a.status.code()),
        (String::from_utf8_lossy(&b.stdout), b.status.code()),
        "reftablefs {ours_args:?} vs git {git_args:?}\nour stderr: {}\ngit stderr: {}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
}

/// The stack is intact: `reftablefs verify` passes (it walks every block; `git refs
/// verify` passes corrupt tables) and git reads the same refs as we do.
fn verify_integrity(dir: &Path) {
    let v = ours(dir, &["verify"]);
    assert!(
        v.status.success(),
        "reftablefs verify: {}",
        String::from_utf8_lossy(&v.stderr)
    );
    same(dir, &["for-each-ref"], &["for-each-ref"]);
}

fn tables(dir: &Path) -> Vec<PathBuf> {
    let list = std::fs::read_to_string(dir.join(".git/reftable/tables.list")).unwrap();
    list.lines()
        .map(|l| dir.join(".git/reftable").join(l))
        .collect()
}

/// A reftable repository with branches, tags (light and annotated), symrefs (one
/// dangling), remotes, a root ref and nested names.
fn rich_repo(dir: &Path) {
    git(dir, &["init", "-q", "--ref-format=reftable", "-b", "main"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "one"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "two"]);
    git(dir, &["tag", "light"]);
    git(dir, &["tag", "-a", "-m", "annotated", "v1", "HEAD~1"]);
    git(dir, &["branch", "feature/deep/x"]);
    git(dir, &["branch", "main-2"]);
    git(dir, &["update-ref", "refs/remotes/origin/main", "HEAD~1"]);
    git(
        dir,
        &[
            "symbolic-ref",
            "refs/remotes/origin/HEAD",
            "refs/remotes/origin/main",
        ],
    );
    git(
        dir,
        &["symbolic-ref", "refs/heads/dangling", "refs/heads/nowhere"],
    );
    git(dir, &["update-ref", "ORIG_HEAD", "HEAD~1"]);
    git(dir, &["update-ref", "refs/tags/main", "HEAD~1"]); // makes "main" ambiguous
    git(dir, &["checkout", "-q", "-b", "topic"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "three"]);
}

/// Copies `a` (a git repository) to `b` with `cp -a`.
fn copy_repo(a: &Path, b: &Path) {
    assert!(Command::new("cp")
        .args(["-a"])
        .arg(a)
        .arg(b)
        .status()
        .unwrap()
        .success());
}

/// The stack's table names without their random suffix, and every table's bytes.
fn stack_bytes(dir: &Path) -> (Vec<String>, Vec<Vec<u8>>) {
    let list = std::fs::read_to_string(dir.join(".git/reftable/tables.list")).unwrap();
    let names = list
        .lines()
        .map(|l| l.get(..l.len().saturating_sub(13)).unwrap_or(l).to_owned())
        .collect();
    let bytes = tables(dir)
        .iter()
        .map(|t| std::fs::read(t).unwrap())
        .collect();
    (names, bytes)
}

/// Runs `args` with `input` on stdin in `a` with our binary and in `b` with git (both with
/// auto-compaction on), and returns both outputs: ours first.
fn run_both(
    a: &Path,
    b: &Path,
    args: &[&str],
    input: &str,
) -> (std::process::Output, std::process::Output) {
    let run = |mut cmd: Command, dir: &Path| {
        env(&mut cmd)
            .env("GIT_TEST_REFTABLE_AUTOCOMPACTION", "true")
            .current_dir(dir)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    (run(Command::new(BIN), a), run(Command::new("git"), b))
}

/// The same tables, in the same order, with the same bytes, in `a` and `b` (`what` says
/// which step wrote them); on a difference, both tables are dumped.
fn same_tables(a: &Path, b: &Path, what: &str) {
    let (ta, tb) = (tables(a), tables(b));
    assert_eq!(ta.len(), tb.len(), "{what}: table count");
    for (x, y) in ta.iter().zip(&tb) {
        if std::fs::read(x).unwrap() != std::fs::read(y).unwrap() {
            let dump = |t: &Path| {
                let o = Command::new("python3")
                    .arg(concat!(
                        env!("CARGO_MANIFEST_DIR"),
                        "/../shared/tools/rtdump.py"
                    ))
                    .arg(t)
                    .output();
                o.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default()
            };
            panic!(
                "{what}: {} differs\nours:\n{}\ngit:\n{}",
                x.display(),
                dump(x),
                dump(y)
            );
        }
    }
}

/// The random tests' generator (xorshift64): the same seed, the same run.
struct Rng(u64);

impl Rng {
    /// A number in `0..n` (0 for `n == 0`).
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}
