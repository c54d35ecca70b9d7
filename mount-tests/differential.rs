//! Differential tests of the write path: the same files-backend system calls — made by
//! git 2.47 in files mode and replayed in the patterns of libgit2, dulwich, GitPython and
//! shells — are applied to a files-backend `.git` on disk and through the mount of a
//! reftable repository. git 2.47 must then read the same refs and the same reflogs from
//! both (timestamps are equal too: both sides get the same clock).
//!
//! [`Pair`] holds the two sides; `random_client_sequences` runs seeded random sequences
//! (`RTFS_SEED=N` replays one seed, `RTFS_ROUNDS=N` sets the number of seeds,
//! `RTFS_COMPARE_EVERY=N` compares after every N steps (6); the seed is printed on
//! failure). The named regression tests in `write_path.rs` use [`Pair`] too.

use crate::harness::{check, note, stage, Ctx, Mount, Rng, TestResult};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const ZERO: &str = "0000000000000000000000000000000000000000";
const EPOCH: u64 = 1_750_000_000;

/// A files-backend repository and a mounted reftable repository that receive the same
/// calls. Objects live in the reftable repository; both sides use them.
pub struct Pair {
    /// The files-backend `.git`.
    pub files: PathBuf,
    /// The reftable repository's `.git` (read by git 2.47 directly for comparisons).
    pub reftable: PathBuf,
    /// The mount of `reftable`.
    pub m: Mount,
    objects: PathBuf,
    home: PathBuf,
    clock: u64,
    /// Commits made at setup, oldest first.
    pub commits: Vec<String>,
}

impl Pair {
    /// Two empty repositories (HEAD → refs/heads/main, unborn) with `n` commits as
    /// objects only, and the mount of the reftable one (with `mount_args`).
    pub fn new(base: &Path, n: usize, mount_args: &[&str]) -> TestResult<Pair> {
        fs::create_dir_all(base)?;
        let home = base.join("home");
        fs::create_dir_all(&home)?;
        for (dir, format) in [("files", "files"), ("reftable", "reftable")] {
            let out = Command::new("git")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("HOME", &home)
                .args(["init", "-q", "-b", "main"])
                .arg(format!("--ref-format={format}"))
                .arg(base.join(dir))
                .output()?;
            check(&out, "git init")?;
        }
        let reftable = base.join("reftable/.git");
        let m = Mount::start(&reftable, &base.join("mnt"), mount_args)?;
        let mut pair = Pair {
            files: base.join("files/.git"),
            objects: reftable.join("objects"),
            reftable,
            m,
            home,
            clock: 0,
            commits: Vec::new(),
        };
        let tree = pair.git_at(&pair.files.clone(), &["mktree"], b"")?;
        let tree = tree.trim().to_string();
        let mut parent: Option<String> = None;
        for i in 0..n {
            let mut args = vec!["commit-tree", tree.as_str(), "-m"];
            let msg = format!("c{i}");
            args.push(&msg);
            let p;
            if let Some(par) = &parent {
                p = par.clone();
                args.push("-p");
                args.push(&p);
            }
            let id = pair
                .git_at(&pair.files.clone(), &args, b"")?
                .trim()
                .to_string();
            pair.commits.push(id.clone());
            parent = Some(id);
        }
        Ok(pair)
    }

    /// The next tick of the shared clock (reflog timestamps).
    pub fn tick(&mut self) -> u64 {
        self.clock += 1;
        EPOCH + 60 * self.clock
    }

    fn command(&self, gitdir: &Path, date: u64) -> Command {
        let date = format!("{date} +0200");
        let mut cmd = Command::new("git");
        crate::harness::git_env(&mut cmd, &self.home, &date)
            .current_dir(&self.home)
            .env("GIT_DIR", gitdir)
            .env("GIT_OBJECT_DIRECTORY", &self.objects)
            .args(["-c", "core.logAllRefUpdates=true"]);
        cmd
    }

    fn run(&self, gitdir: &Path, date: u64, args: &[&str], input: &[u8]) -> TestResult<Output> {
        let mut child = self
            .command(gitdir, date)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input)?;
        }
        Ok(child.wait_with_output()?)
    }

    /// git in `gitdir`; fails unless it exits 0; stdout.
    fn git_at(&mut self, gitdir: &Path, args: &[&str], input: &[u8]) -> TestResult<String> {
        let date = self.tick();
        let out = self.run(gitdir, date, args, input)?;
        check(&out, &format!("git {}", args.join(" ")))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// git 2.47 on the reftable repository directly (bypassing the mount).
    #[allow(dead_code)]
    pub fn git_stack(&mut self, args: &[&str]) -> TestResult<String> {
        let dir = self.reftable.clone();
        self.git_at(&dir, args, b"")
    }

    /// The same git command (files backend) on both sides at the same time stamp; both
    /// must succeed or both fail. Returns whether it succeeded.
    pub fn git(&mut self, args: &[&str]) -> TestResult<bool> {
        self.git_input(args, b"")
    }

    /// [`Pair::git`] with `input` on stdin.
    pub fn git_input(&mut self, args: &[&str], input: &[u8]) -> TestResult<bool> {
        stage(&format!("both: git {}", args.join(" ")));
        let date = self.tick();
        let files = self.run(&self.files, date, args, input)?;
        let mount = self.run(&self.m.mnt, date, args, input)?;
        if files.status.success() != mount.status.success() {
            bail!(
                "git {} through the mount {} but on the files backend {}:\n\
                 mount stderr: {}\nfiles stderr: {}",
                args.join(" "),
                if mount.status.success() {
                    "succeeded"
                } else {
                    "failed"
                },
                if files.status.success() {
                    "succeeded"
                } else {
                    "failed"
                },
                String::from_utf8_lossy(&mount.stderr),
                String::from_utf8_lossy(&files.stderr)
            );
        }
        Ok(files.status.success())
    }

    /// The two roots: the files-backend `.git`, then the mount.
    pub fn roots(&self) -> [PathBuf; 2] {
        [self.files.clone(), self.m.mnt.clone()]
    }

    /// Applies the same file operations to both roots; both must succeed or both fail.
    pub fn raw(
        &mut self,
        what: &str,
        op: impl Fn(&Path) -> std::io::Result<()>,
    ) -> TestResult<bool> {
        stage(&format!("both: {what}"));
        let [files, mount] = self.roots();
        let a = op(&files);
        let b = op(&mount);
        if a.is_ok() != b.is_ok() {
            bail!("{what}: files backend {a:?}, through the mount {b:?}");
        }
        Ok(a.is_ok())
    }

    /// A reflog line as git writes it, stamped with the next tick.
    pub fn line(&mut self, old: &str, new: &str, msg: &str) -> String {
        let t = self.tick();
        format!("{old} {new} C O Mitter <committer@example.com> {t} +0200\t{msg}\n")
    }

    /// The value of `name` on the files side (`None` when missing), for old ids.
    pub fn value(&mut self, name: &str) -> TestResult<Option<String>> {
        let date = self.tick();
        let files = self.files.clone();
        let out = self.run(&files, date, &["rev-parse", "-q", "--verify", name], b"")?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }

    /// fsync of the mount's root: every staged update is written (must succeed).
    pub fn sync(&self) -> TestResult {
        stage("fsync of the mount root");
        File::open(&self.m.mnt)
            .and_then(|f| f.sync_all())
            .map_err(|e| format!("fsync of the mount root: {e}"))?;
        Ok(())
    }

    /// What git 2.47 reads from a repository: refs (root refs included), HEAD, the list
    /// of reflogs, and every reflog (`reflog show` where the ref exists; the raw file
    /// otherwise, read from the files side and through the mount).
    fn state(&mut self, gitdir: &Path, raw_logs: &Path) -> TestResult<BTreeMap<String, String>> {
        let mut st = BTreeMap::new();
        let date = self.tick();
        let q = |this: &Self, args: &[&str]| -> TestResult<String> {
            let out = this.run(gitdir, date, args, b"")?;
            Ok(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                if out.status.success() { "" } else { "(failed)" }
            ))
        };
        let refs = q(
            self,
            &[
                "for-each-ref",
                "--include-root-refs",
                "--format=%(refname) %(objectname) %(symref)",
            ],
        )?;
        st.insert("for-each-ref".into(), refs.clone());
        st.insert("HEAD".into(), q(self, &["symbolic-ref", "-q", "HEAD"])?);
        let logs = q(self, &["reflog", "list"])?;
        st.insert("reflog list".into(), logs.clone());
        let existing: Vec<&str> = refs.lines().filter_map(|l| l.split(' ').next()).collect();
        for name in logs.lines() {
            if existing.contains(&name) || name == "HEAD" {
                let shown = q(
                    self,
                    &[
                        "reflog",
                        "show",
                        "--no-abbrev",
                        "--format=%H|%gs|%gn|%ge",
                        name,
                        "--",
                    ],
                )?;
                st.insert(format!("reflog show {name}"), shown);
            }
            let raw = fs::read(raw_logs.join("logs").join(name))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|e| format!("({e})"));
            st.insert(format!("logs/{name}"), raw);
        }
        Ok(st)
    }

    /// git 2.47 reads the same from the stack as from the files-backend repository.
    pub fn compare(&mut self, what: &str) -> TestResult {
        self.sync()?;
        let files = self.files.clone();
        let reftable = self.reftable.clone();
        let mnt = self.m.mnt.clone();
        let want = self.state(&files, &files)?;
        let got = self.state(&reftable, &mnt)?;
        if want != got {
            let mut diff = String::new();
            for (k, v) in &want {
                match got.get(k) {
                    Some(g) if g == v => {}
                    Some(g) => {
                        diff.push_str(&format!("{k}:\n  files:   {v:?}\n  stack:   {g:?}\n"))
                    }
                    None => diff.push_str(&format!("{k}: missing from the stack side\n")),
                }
            }
            for k in got.keys().filter(|k| !want.contains_key(*k)) {
                diff.push_str(&format!("{k}: only on the stack side: {:?}\n", got[k]));
            }
            let log = self.m.log();
            let tail = log.get(log.len().saturating_sub(3000)..).unwrap_or(&log);
            bail!("{what}: the stack differs from the files backend:\n{diff}mount log:\n{tail}");
        }
        Ok(())
    }
}

/// `mkdir -p` of the parent of `root/rel`, as git's `safe_create_leading_directories`.
fn parents(root: &Path, rel: &str) -> std::io::Result<()> {
    match root.join(rel).parent() {
        Some(dir) => fs::create_dir_all(dir),
        None => Ok(()),
    }
}

/// `open(O_CREAT|O_EXCL)` of `rel.lock` and one write of `content`.
fn lock_with(root: &Path, rel: &str, content: &str) -> std::io::Result<File> {
    parents(root, rel)?;
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(root.join(format!("{rel}.lock")))?;
    f.write_all(content.as_bytes())?;
    Ok(f)
}

/// One `O_APPEND` write of `line` to `logs/<name>`.
fn append(root: &Path, name: &str, line: &str) -> std::io::Result<()> {
    let rel = format!("logs/{name}");
    parents(root, &rel)?;
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(root.join(rel))?
        .write_all(line.as_bytes())
}

fn rename_lock(root: &Path, rel: &str) -> std::io::Result<()> {
    fs::rename(root.join(format!("{rel}.lock")), root.join(rel))
}

/// How a client updates a ref (see `client-syscall-patterns.md`).
#[derive(Clone, Copy, Debug)]
pub enum Style {
    /// git: lock, write, append the reflog line, rename.
    Git,
    /// dulwich: lock, write, append, fsync the lock, rename.
    Dulwich,
    /// GitPython: lock, write, rename, then append.
    GitPython,
    /// A script: lock, write, rename, no reflog line.
    Mv,
    /// A shell: `echo <id> > refs/heads/x`, no reflog line.
    Echo,
}

/// Updates `name` to `new` on both sides the way `style` does.
pub fn update(pair: &mut Pair, style: Style, name: &str, new: &str, msg: &str) -> TestResult {
    let old = pair.value(name)?.unwrap_or_else(|| ZERO.to_string());
    let line = pair.line(&old, new, msg);
    let content = format!("{new}\n");
    let n = name.to_string();
    let ok = pair.raw(
        &format!("{style:?} update of {name}"),
        move |root| match style {
            Style::Git => {
                drop(lock_with(root, &n, &content)?);
                append(root, &n, &line)?;
                rename_lock(root, &n)
            }
            Style::Dulwich => {
                let f = lock_with(root, &n, &content)?;
                append(root, &n, &line)?;
                f.sync_all()?;
                drop(f);
                rename_lock(root, &n)
            }
            Style::GitPython => {
                drop(lock_with(root, &n, &content)?);
                rename_lock(root, &n)?;
                append(root, &n, &line)
            }
            Style::Mv => {
                drop(lock_with(root, &n, &content)?);
                rename_lock(root, &n)
            }
            Style::Echo => {
                parents(root, &n)?;
                let mut f = File::create(root.join(&n))?;
                f.write_all(content.as_bytes())
            }
        },
    )?;
    if !ok {
        bail!("{style:?} update of {name} failed on both sides");
    }
    Ok(())
}

/// libgit2's branch rename: unlink the old ref, move its reflog, write the new ref
/// (lock + rename) and append the rename line.
pub fn libgit2_rename(pair: &mut Pair, from: &str, to: &str) -> TestResult<bool> {
    // Only a loose ref (on disk every ref of the mount is loose; a packed one would
    // make libgit2 rewrite packed-refs too, which this pattern does not cover).
    let packed = fs::read_to_string(pair.files.join("packed-refs")).unwrap_or_default();
    if !pair.files.join(from).exists() || packed.lines().any(|l| l.ends_with(&format!(" {from}"))) {
        return Ok(false);
    }
    let Some(id) = pair.value(from)? else {
        return Ok(false);
    };
    if pair.value(to)?.is_some() {
        return Ok(false);
    }
    let line = pair.line(&id, &id, &format!("branch: renamed {from} to {to}"));
    let (f, t) = (from.to_string(), to.to_string());
    pair.raw(&format!("libgit2 rename {from} -> {to}"), move |root| {
        fs::remove_file(root.join(&f))?;
        let (lf, lt) = (format!("logs/{f}"), format!("logs/{t}"));
        if root.join(&lf).exists() {
            parents(root, &lt)?;
            fs::rename(root.join(&lf), root.join(&lt))?;
        }
        drop(lock_with(root, &t, &format!("{id}\n"))?);
        rename_lock(root, &t)?;
        append(root, &t, &line)
    })
}

/// dulwich's reflog entry drop: open the reflog `rb+`, read it, rewrite it in place
/// without its newest line (seek, truncate, write).
pub fn dulwich_drop_newest(pair: &mut Pair, name: &str) -> TestResult<bool> {
    let n = name.to_string();
    pair.raw(
        &format!("dulwich drop of the newest entry of {name}"),
        move |root| {
            let mut f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(root.join(format!("logs/{n}")))?;
            let mut text = String::new();
            f.read_to_string(&mut text)?;
            let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
            lines.pop();
            f.seek(SeekFrom::Start(0))?;
            f.set_len(0)?;
            f.write_all(lines.concat().as_bytes())
        },
    )
}

/// git's reflog rewrite through `logs/<name>.lock` (reflog delete/expire), keeping
/// every line but the newest.
pub fn lock_rewrite_drop_newest(pair: &mut Pair, name: &str) -> TestResult<bool> {
    let n = name.to_string();
    pair.raw(
        &format!("reflog rewrite of {name} via its lock"),
        move |root| {
            let rel = format!("logs/{n}");
            let text = fs::read_to_string(root.join(&rel))?;
            let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
            lines.pop();
            drop(lock_with(root, &rel, &lines.concat())?);
            rename_lock(root, &rel)
        },
    )
}

const BRANCHES: [&str; 6] = [
    "refs/heads/main",
    "refs/heads/dev",
    "refs/heads/topic/a",
    "refs/heads/topic/b",
    "refs/tags/v1",
    "refs/heads/x",
];

/// One random step of the sequence; returns what it did.
fn step(pair: &mut Pair, rng: &mut Rng) -> TestResult<String> {
    let pick = |rng: &mut Rng| BRANCHES[rng.below(BRANCHES.len())];
    let commit = |pair: &Pair, rng: &mut Rng| pair.commits[rng.below(pair.commits.len())].clone();
    let k = rng.below(17);
    let what = match k {
        0 | 1 => {
            let (r, c) = (pick(rng), commit(pair, rng));
            pair.git(&["update-ref", "-m", "set", r, &c])?;
            format!("update-ref {r}")
        }
        2 => {
            let c = commit(pair, rng);
            pair.git(&["update-ref", "-m", "via HEAD", "HEAD", &c])?;
            let b = pick(rng);
            pair.git(&["symbolic-ref", "-m", "to other", "HEAD", b])?;
            format!("update-ref HEAD && symbolic-ref HEAD {b}")
        }
        3 => {
            let b = ["refs/heads/main", "refs/heads/dev", "refs/heads/topic/a"][rng.below(3)];
            pair.git(&["symbolic-ref", "-m", "switch", "HEAD", b])?;
            format!("symbolic-ref HEAD {b}")
        }
        4 => {
            let r = pick(rng);
            pair.git(&["update-ref", "-m", "delete", "-d", r])?;
            format!("update-ref -d {r}")
        }
        5 => {
            let (a, b) = (pick(rng), pick(rng));
            let (a, b) = (
                a.strip_prefix("refs/heads/").unwrap_or("main"),
                b.strip_prefix("refs/heads/").unwrap_or("dev"),
            );
            pair.git(&["branch", "-m", a, b])?;
            format!("branch -m {a} {b}")
        }
        6 => {
            pair.git(&["pack-refs", "--all", "--prune"])?;
            "pack-refs --all --prune".into()
        }
        7 => {
            let r = pick(rng);
            pair.git(&["reflog", "delete", &format!("{r}@{{0}}")])?;
            format!("reflog delete {r}@{{0}}")
        }
        8 => {
            if rng.below(4) == 0 {
                pair.git(&["reflog", "expire", "--expire=now", "--all"])?;
                "reflog expire --expire=now --all".into()
            } else {
                let (r, c) = (pick(rng), commit(pair, rng));
                update(pair, Style::Git, r, &c, "raw git")?;
                format!("raw git update of {r}")
            }
        }
        9 => {
            let mut input = String::new();
            let mut names = Vec::new();
            for _ in 0..3 {
                let r = pick(rng);
                if names.contains(&r) {
                    continue;
                }
                names.push(r);
                input.push_str(&format!("update {r} {}\n", commit(pair, rng)));
            }
            pair.git_input(&["update-ref", "-m", "stdin", "--stdin"], input.as_bytes())?;
            format!("update-ref --stdin {names:?}")
        }
        10..=13 => {
            let style = [Style::Dulwich, Style::GitPython, Style::Mv, Style::Echo][k - 10];
            let (r, c) = (pick(rng), commit(pair, rng));
            update(pair, style, r, &c, &format!("{style:?}"))?;
            format!("{style:?} update of {r}")
        }
        14 => {
            let (a, b) = (pick(rng), pick(rng));
            if a != b && libgit2_rename(pair, a, b)? {
                format!("libgit2 rename {a} -> {b}")
            } else {
                "skipped libgit2 rename".into()
            }
        }
        15 => {
            let r = pick(rng);
            if pair.files.join("logs").join(r).exists() {
                dulwich_drop_newest(pair, r)?;
                format!("dulwich rb+ drop of {r}")
            } else {
                "skipped dulwich drop".into()
            }
        }
        _ => {
            let r = pick(rng);
            if pair.files.join("logs").join(r).exists() {
                lock_rewrite_drop_newest(pair, r)?;
                format!("lock rewrite of logs/{r}")
            } else {
                "skipped reflog rewrite".into()
            }
        }
    };
    Ok(what)
}

/// Seeded random sequences of client patterns, through the mount and on a files
/// `.git`: git 2.47 reads the same refs and reflogs from both after every few steps.
pub fn random_client_sequences(ctx: &Ctx) -> TestResult {
    let seeds: Vec<u64> = match std::env::var("RTFS_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(s) => vec![s],
        None => {
            let rounds = std::env::var("RTFS_ROUNDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(2u64);
            let base = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1);
            (0..rounds)
                .map(|i| base.wrapping_mul(31).wrapping_add(i))
                .collect()
        }
    };
    let budget = Instant::now() + Duration::from_secs(150);
    for (round, seed) in seeds.iter().enumerate() {
        note(&format!("seed {seed} (replay with RTFS_SEED={seed})"));
        let result = run_seed(&ctx.path(&format!("round{round}")), *seed);
        if let Err(e) = result {
            bail!("seed {seed} (replay with RTFS_SEED={seed}): {e}");
        }
        if Instant::now() > budget {
            note("time budget reached");
            break;
        }
    }
    Ok(())
}
mount_test!(random_client_sequences, timeout = 240);

fn run_seed(base: &Path, seed: u64) -> TestResult {
    let mut pair = Pair::new(base, 6, &[])?;
    let mut rng = Rng::new(seed);
    pair.git(&[
        "update-ref",
        "-m",
        "init",
        "refs/heads/main",
        &pair.commits[0].clone(),
    ])?;
    let every: usize = std::env::var("RTFS_COMPARE_EVERY")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
        .max(1);
    let mut done: Vec<String> = Vec::new();
    for i in 0..48 {
        let what =
            step(&mut pair, &mut rng).map_err(|e| format!("step {i} after steps {done:?}: {e}"))?;
        if std::env::var_os("RTFS_TRACE").is_some() {
            let main =
                fs::read_to_string(pair.files.join("logs/refs/heads/main")).unwrap_or_default();
            let via = fs::read_to_string(pair.m.path("logs/refs/heads/main")).unwrap_or_default();
            note(&format!(
                "step {i} {what}:\n files main log: {main:?}\n mount main log: {via:?}"
            ));
        }
        done.push(what);
        if i % every == every - 1 {
            pair.compare(&format!("after steps {done:?}"))?;
        }
    }
    pair.compare(&format!("after steps {done:?}"))?;
    pair.m.unmount()
}
