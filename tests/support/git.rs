//! The git oracle shared by the integration tests: git run with a fixed identity and clock
//! and no user or system config, throw-away repositories with reftable stacks, and
//! commits to point refs at. Included by path as `util`, by tests/all/main.rs and the CLI's
//! test binaries.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use reftablefs::stack::{Stack, StackOptions};
use reftablefs::transaction::Identity;
use reftablefs::{HashKind, ObjectId};

/// A temporary repository.
pub struct Repo {
    pub tmp: tempfile::TempDir,
    pub hash: HashKind,
}

/// The git that PATH names (the first executable `git` on it, as the shell finds it),
/// looked up once. Spawned by its path, git starts through posix_spawn: named `git` with
/// PATH set by the command, std forks the whole test process for every git run instead,
/// which costs in proportion to that process's memory.
fn git_path() -> &'static Path {
    static GIT: OnceLock<PathBuf> = OnceLock::new();
    GIT.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join("git"))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| PathBuf::from("git"))
    })
}

/// Runs git in `dir` with a fixed identity and no user/system config.
pub fn git_cmd(dir: &Path) -> Command {
    let mut c = Command::new(git_path());
    c.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.com")
        .env("GIT_AUTHOR_DATE", "1112912053 -0700")
        .env("GIT_COMMITTER_DATE", "1112912053 -0700");
    c
}

/// Runs git and returns its output, whatever the status.
pub fn git_out(dir: &Path, args: &[&str]) -> Output {
    git_cmd(dir).args(args).output().expect("git runs")
}

/// Runs git, asserts success, returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    succeeded(git_out(dir, args), args)
}

/// Runs git without auto-compaction (each command leaves its own table), asserts
/// success.
pub fn git_no_compaction(dir: &Path, args: &[&str]) {
    let out = git_cmd(dir)
        .env("GIT_TEST_REFTABLE_AUTOCOMPACTION", "false")
        .args(args)
        .output()
        .expect("git runs");
    succeeded(out, args);
}

/// The stdout of git run with `args`, after asserting that it succeeded.
fn succeeded(out: Output, args: &[&str]) -> String {
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Runs git with stdin.
pub fn git_stdin(dir: &Path, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = git_cmd(dir)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("git runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write stdin");
    child.wait_with_output().expect("git finishes")
}

impl Repo {
    /// `git init --ref-format=reftable` (SHA-1 or SHA-256).
    pub fn new(hash: HashKind) -> Repo {
        let tmp = tempfile::tempdir().expect("tempdir");
        git(
            tmp.path(),
            &[
                "init",
                "-q",
                "--ref-format=reftable",
                "--initial-branch=main",
                &format!("--object-format={}", hash.name()),
            ],
        );
        Repo { tmp, hash }
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    pub fn reftable_dir(&self) -> PathBuf {
        self.tmp.path().join(".git/reftable")
    }

    pub fn git(&self, args: &[&str]) -> String {
        git(self.path(), args)
    }

    pub fn git_out(&self, args: &[&str]) -> Output {
        git_out(self.path(), args)
    }

    /// Test options: fsync off, no lock timeout beyond git's default.
    pub fn options(&self) -> StackOptions {
        StackOptions {
            hash: self.hash,
            ..StackOptions::default()
        }
    }

    pub fn open(&self) -> Stack {
        Stack::open(self.reftable_dir(), self.options()).expect("open stack")
    }

    pub fn open_with(&self, f: impl FnOnce(&mut StackOptions)) -> Stack {
        let mut o = self.options();
        f(&mut o);
        Stack::open(self.reftable_dir(), o).expect("open stack")
    }

    /// `n` distinct commit objects (empty tree, messages c0..).
    pub fn commits(&self, n: usize) -> Vec<ObjectId> {
        let tree = self.git(&["hash-object", "-t", "tree", "-w", "/dev/null"]);
        let tree = tree.trim();
        (0..n)
            .map(|i| {
                let out = self.git(&["commit-tree", tree, "-m", &format!("c{i}")]);
                ObjectId::from_hex(out.trim().as_bytes(), self.hash).expect("commit id")
            })
            .collect()
    }

    /// Table names listed in tables.list.
    pub fn tables(&self) -> Vec<String> {
        std::fs::read_to_string(self.reftable_dir().join("tables.list"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The stack is intact: `verify_stack` (what `reftablefs verify` runs: every block
    /// walked; `git refs verify` passes corrupt tables) finds no error, and every ref
    /// that holds an object id reads the same through a fresh stack and through git.
    pub fn verify_integrity(&self) {
        let rep = reftablefs::stack::verify::verify_stack(&self.reftable_dir(), self.hash)
            .expect("verify runs");
        assert!(rep.errors.is_empty(), "verify: {:?}", rep.errors);
        let theirs: std::collections::BTreeMap<String, String> = self
            .git(&["for-each-ref", "--format=%(refname) %(objectname)"])
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .collect();
        let mut st = self.open();
        let mut ours = Vec::new();
        st.for_each_ref(b"refs/", |r| {
            if let Some(id) = reftablefs::stack::ref_value_id(&r.value) {
                ours.push((String::from_utf8_lossy(&r.name).into_owned(), id.to_hex()));
            }
            true
        })
        .expect("scan");
        for (name, id) in ours {
            assert_eq!(theirs.get(&name), Some(&id), "git reads {name} differently");
        }
    }

    /// `git for-each-ref` lines `name oid` (symrefs resolved), root refs excluded.
    pub fn git_refs(&self) -> Vec<(String, String)> {
        self.git(&["for-each-ref", "--format=%(refname) %(objectname)"])
            .lines()
            .filter_map(|l| l.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())))
            .collect()
    }
}

/// The test identity.
pub fn ident() -> Identity {
    Identity {
        name: b"C O Mitter".to_vec(),
        email: b"committer@example.com".to_vec(),
        time: 1_112_912_053,
        tz_offset: -700,
    }
}
