//! Linked worktrees through the mount (issue 10, item 4): `MNT/worktrees/<id>/` serves the
//! worktree's `HEAD`, root refs and per-worktree refs (`refs/bisect/`, `refs/worktree/`)
//! with their reflogs from the worktree's own stack, the rest passed through.
//!
//! `git239_session_in_linked_worktree`: git 2.39 (`/usr/bin/git`, files only) works in a
//! linked worktree whose `.git` file points at `MNT/worktrees/wt` — commits, a branch and
//! a tag (shared refs), switches, a reset (`ORIG_HEAD`), `update-ref refs/worktree/…`, a
//! bisect left in progress (`refs/bisect/*`, `BISECT_EXPECTED_REV`) — and the same session
//! runs on a files-backend repository made with the same commands and dates. git 2.47 then
//! compares both sides, from the linked worktree and from the main one: refs with root
//! refs and symrefs, every reflog, the raw reflogs of the worktree (old and new ids,
//! identities, messages), status, bisect log, `worktree list`.
//!
//! `worktree_added_while_mounted`: a worktree that git 2.47 adds on the real directory
//! while mounted is served at once and takes a commit through the mount; one git 2.39 adds
//! through the mount gets its own stack and is served too; the worktree's `reftable/` is
//! neither visible nor creatable.
//!
//! `worktree_commands_equal_git247` (issue 25.4): git 2.39's `worktree add`, `lock`,
//! `unlock`, `move`, `remove` and `prune` through `mount --over` leave GITDIR as git 2.47
//! doing the same on a reftable copy.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{check, expect_errno, read_tree, stage, Ctx, Mount, TestResult, Tree};

/// Git 2.39 (files only).
const GIT239: &str = "/usr/bin/git";

/// A command with a private HOME, no system or global config, a fixed identity, locale
/// and date (`t`, seconds), bounded to 120 s by timeout(1).
fn cmd(home: &Path, cwd: &Path, t: u64, prog: &str, args: &[&str]) -> Command {
    let date = format!("{t} +0100");
    let mut c = Command::new("timeout");
    c.arg("120").arg(prog).args(args).current_dir(cwd);
    crate::harness::git_env(&mut c, home, &date);
    c
}

/// Runs a command; fails with its output unless it exits 0; returns stdout.
fn run(home: &Path, cwd: &Path, t: u64, prog: &str, args: &[&str]) -> TestResult<String> {
    stage(&format!("{prog} {} (in {})", args.join(" "), cwd.display()));
    let out = cmd(home, cwd, t, prog, args).output()?;
    check(
        &out,
        &format!("{prog} {} in {}", args.join(" "), cwd.display()),
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command that may fail: its stdout, or "error: " and its stderr.
fn outcome(home: &Path, cwd: &Path, prog: &str, args: &[&str]) -> TestResult<String> {
    let out = cmd(home, cwd, T0, prog, args).output()?;
    Ok(if out.status.success() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        format!("error: {}", String::from_utf8_lossy(&out.stderr))
    })
}

/// The date of the repositories' first commit.
const T0: u64 = 1_700_000_000;

/// One repository of the comparison: main work tree `work` with its git directory `git`
/// (separate), and the linked worktree `wt` (id `wt`).
struct Side {
    home: PathBuf,
    work: PathBuf,
    git: PathBuf,
    wt: PathBuf,
}

impl Side {
    /// A repository of `format` (`reftable` or `files`) named `name` made by git 2.47 with
    /// fixed dates: one commit on `main`, then `git worktree add -b wt`.
    fn new(ctx: &Ctx, name: &str, format: &str) -> TestResult<Side> {
        let s = Side {
            home: ctx.path("home"),
            work: ctx.path(name),
            git: ctx.path(&format!("{name}.git")),
            wt: ctx.path(&format!("{name}-wts/wt")),
        };
        fs::create_dir_all(&s.home)?;
        let top = ctx.path("");
        run(
            &s.home,
            &top,
            T0,
            "git",
            &[
                "init",
                "-q",
                "-b",
                "main",
                &format!("--ref-format={format}"),
                &format!("--separate-git-dir={}", s.git.display()),
                &s.work.to_string_lossy(),
            ],
        )?;
        let git = |t: u64, args: &[&str]| run(&s.home, &s.work, t, "git", args);
        git(T0, &["config", "user.name", "C O Mitter"])?;
        git(T0, &["config", "user.email", "committer@example.com"])?;
        fs::write(s.work.join("f0"), "base\n")?;
        git(T0, &["add", "f0"])?;
        git(T0, &["commit", "-q", "-m", "init"])?;
        fs::create_dir_all(s.wt.parent().ok_or("no parent")?)?;
        git(
            T0 + 10,
            &["worktree", "add", "-q", "-b", "wt", &s.wt.to_string_lossy()],
        )?;
        Ok(s)
    }

    /// Points the linked worktree's `.git` file at `gitdir`.
    fn point_wt_at(&self, gitdir: &Path) -> TestResult {
        fs::write(
            self.wt.join(".git"),
            format!("gitdir: {}\n", gitdir.display()),
        )?;
        Ok(())
    }

    /// The session, by `prog` in the linked worktree; each step has its own date.
    fn session(&self, prog: &str) -> TestResult<String> {
        let mut printed = String::new();
        let mut t = T0 + 100;
        let mut step = |args: &[&str]| -> TestResult {
            t += 100;
            let out = run(&self.home, &self.wt, t, prog, args)?;
            printed.push_str(&format!("$ git {}\n{out}", args.join(" ")));
            Ok(())
        };
        step(&["status", "--porcelain=v2", "--branch"])?;
        for (i, f) in ["a", "b", "c"].iter().enumerate() {
            fs::write(self.wt.join(f), format!("{f}\n"))?;
            step(&["add", f])?;
            step(&["commit", "-q", "-m", &format!("wt-{}", i + 1)])?;
        }
        step(&["branch", "topic"])?;
        step(&["tag", "t1"])?;
        step(&["switch", "-q", "-c", "side"])?;
        fs::write(self.wt.join("s"), "s\n")?;
        step(&["add", "s"])?;
        step(&["commit", "-q", "-m", "side-1"])?;
        step(&["switch", "-q", "wt"])?;
        step(&["reset", "-q", "--hard", "HEAD~1"])?;
        step(&["update-ref", "refs/worktree/mark", "HEAD"])?;
        step(&["rev-parse", "HEAD", "ORIG_HEAD", "refs/worktree/mark"])?;
        step(&["bisect", "start"])?;
        step(&["bisect", "bad"])?;
        step(&["bisect", "good", "main"])?;
        step(&["rev-parse", "HEAD", "refs/bisect/bad"])?;
        step(&["for-each-ref", "refs/bisect/", "refs/worktree/"])?;
        Ok(printed)
    }

    /// What git 2.47 says about this side (the main work tree's path spelled `MAIN`).
    fn snapshot(&self, raw_wt_logs: &Tree) -> TestResult<BTreeMap<String, String>> {
        let mut s = BTreeMap::new();
        let norm = |text: String| {
            text.replace(&self.wt.to_string_lossy().into_owned(), "WT")
                .replace(&self.work.to_string_lossy().into_owned(), "MAIN")
        };
        for (label, dir) in [("wt", &self.wt), ("main", &self.work)] {
            let git = |args: &[&str]| -> TestResult<String> {
                Ok(norm(outcome(&self.home, dir, "git", args)?))
            };
            s.insert(
                format!("{label}: refs"),
                git(&[
                    "for-each-ref",
                    "--include-root-refs",
                    "--format=%(refname) %(objectname) %(symref)",
                ])?,
            );
            let list = git(&["reflog", "list"])?;
            let mut names: Vec<&str> = list.lines().collect();
            names.sort_unstable();
            s.insert(format!("{label}: reflog list"), names.join("\n"));
            for name in names {
                s.insert(
                    format!("{label}: reflog {name}"),
                    git(&[
                        "reflog",
                        "show",
                        "--format=%H%x09%gn <%ge>%x09%gs",
                        name,
                        "--",
                    ])?,
                );
            }
            s.insert(
                format!("{label}: status"),
                git(&["status", "--porcelain=v2", "--branch"])?,
            );
            s.insert(
                format!("{label}: HEAD"),
                git(&[
                    "rev-parse",
                    "HEAD",
                    "main-worktree/HEAD",
                    "worktrees/wt/HEAD",
                ])?,
            );
            s.insert(
                format!("{label}: worktree list"),
                git(&["worktree", "list", "--porcelain"])?,
            );
        }
        s.insert(
            "wt: bisect log".into(),
            norm(outcome(&self.home, &self.wt, "git", &["bisect", "log"])?),
        );
        for (path, content) in raw_wt_logs {
            s.insert(format!("raw {path}"), crate::harness::strip_times(content));
        }
        Ok(s)
    }
}

/// git 2.39 in a linked worktree through the mount, compared with the same session on a
/// files repository (see the module comment).
pub fn git239_session_in_linked_worktree(ctx: &Ctx) -> TestResult {
    compare_session(ctx, GIT239)
}
mount_test!(git239_session_in_linked_worktree, timeout = 240);

/// [`git239_session_in_linked_worktree`] by git 2.47, which sees a files repository
/// through the mount.
pub fn git247_files_session_in_linked_worktree(ctx: &Ctx) -> TestResult {
    compare_session(ctx, "git")
}
mount_test!(git247_files_session_in_linked_worktree, timeout = 240);

fn compare_session(ctx: &Ctx, prog: &str) -> TestResult {
    let r = Side::new(ctx, "r", "reftable")?;
    let f = Side::new(ctx, "f", "files")?;
    ensure!(
        r.git.join("worktrees/wt/reftable/tables.list").is_file(),
        "git 2.47 made no stack for the linked worktree"
    );
    let mnt = ctx.path("mnt");
    let m = Mount::start(&r.git, &mnt, &[])?;
    // Served from the worktree's stack: git 2.47's stub HEAD is not what one reads.
    let head = fs::read_to_string(mnt.join("worktrees/wt/HEAD"))?;
    ensure!(
        head == "ref: refs/heads/wt\n",
        "worktrees/wt/HEAD through the mount: {head:?}"
    );
    r.point_wt_at(&mnt.join("worktrees/wt"))?;
    let through = r.session(prog);
    let unmounted = m.unmount();
    r.point_wt_at(&r.git.join("worktrees/wt"))?;
    let through = through.map_err(|e| format!("session through the mount: {e}"))?;
    unmounted?;
    let files = f
        .session(prog)
        .map_err(|e| format!("session on the files repository: {e}"))?;

    let mut f_logs = Tree::new();
    read_tree(&f.git, "worktrees/wt/logs", &mut f_logs)?;
    let mut r_logs = Tree::new();
    {
        let m = Mount::start(&r.git, &ctx.path("mnt-ro"), &["--read-only"])?;
        read_tree(&m.mnt, "worktrees/wt/logs", &mut r_logs)?;
        m.unmount()?;
    }
    ensure!(
        r_logs.contains_key("worktrees/wt/logs/HEAD"),
        "no worktree HEAD reflog through the mount: {:?}",
        r_logs.keys().collect::<Vec<_>>()
    );
    let a = f.snapshot(&f_logs)?;
    let b = r.snapshot(&r_logs)?;
    let mut msg = String::new();
    if files != through {
        msg.push_str(&format!(
            "--- session output\nfiles:\n{files}\nthrough the mount:\n{through}\n"
        ));
    }
    for key in a.keys().chain(b.keys()) {
        let (x, y) = (a.get(key), b.get(key));
        if x != y && !msg.contains(&format!("--- {key}\n")) {
            msg.push_str(&format!(
                "--- {key}\nfiles:\n{}\nthrough the mount:\n{}\n",
                x.map_or("(missing)", String::as_str),
                y.map_or("(missing)", String::as_str)
            ));
        }
    }
    ensure!(
        msg.is_empty(),
        "the linked worktree differs from the files repository:\n{msg}"
    );
    // The session really reached the per-worktree refs and reflogs being compared.
    let wt_refs = b.get("wt: refs").cloned().unwrap_or_default();
    for want in [
        "refs/bisect/bad ",
        "refs/worktree/mark ",
        "ORIG_HEAD ",
        "HEAD ",
    ] {
        ensure!(
            wt_refs.lines().any(|l| l.starts_with(want)),
            "{want:?} missing from the worktree's refs:\n{wt_refs}"
        );
    }
    // Per-worktree refs are the worktree's: the main worktree does not see them.
    let main_refs = b.get("main: refs").cloned().unwrap_or_default();
    ensure!(
        !main_refs.contains("refs/bisect/") && !main_refs.contains("refs/worktree/"),
        "per-worktree refs leaked into the main worktree:\n{main_refs}"
    );
    // git 2.47 on the real repository afterwards.
    run(&r.home, &r.wt, T0, "git", &["status"])?;
    run(&r.home, &r.work, T0, "git", &["worktree", "list"])?;
    run(&r.home, &r.work, T0, "git", &["fsck", "--no-progress"])?;
    Ok(())
}

/// A worktree git 2.47 adds while mounted is served at once, and so is one git 2.39 adds
/// through the mount; `worktrees/<id>/reftable` stays out of reach.
pub fn worktree_added_while_mounted(ctx: &Ctx) -> TestResult {
    let r = Side::new(ctx, "r", "reftable")?;
    let mnt = ctx.path("mnt");
    let m = Mount::start(&r.git, &mnt, &[])?;
    // The existing worktree's listing: its refs from the stack, its stack hidden.
    let mut names: Vec<String> = fs::read_dir(mnt.join("worktrees/wt"))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    names.sort();
    for want in ["HEAD", "commondir", "gitdir", "index", "logs", "refs"] {
        ensure!(
            names.iter().any(|n| n == want),
            "{want} missing from worktrees/wt: {names:?}"
        );
    }
    ensure!(
        !names.iter().any(|n| n == "reftable"),
        "worktrees/wt lists reftable: {names:?}"
    );
    expect_errno(
        fs::metadata(mnt.join("worktrees/wt/reftable")),
        &[libc::ENOENT],
        "stat worktrees/wt/reftable",
    )?;
    expect_errno(
        fs::create_dir(mnt.join("worktrees/wt/reftable")),
        &[libc::EPERM, libc::EEXIST],
        "mkdir worktrees/wt/reftable",
    )?;

    // A shared ref written into the worktree's view would be ignored by git: refused.
    let head = fs::read_to_string(mnt.join("HEAD"))?;
    let main_id = fs::read_to_string(mnt.join(head.trim().trim_start_matches("ref: ")))?;
    expect_errno(
        fs::write(mnt.join("worktrees/wt/refs/shared-x"), &main_id),
        &[libc::EPERM],
        "write worktrees/wt/refs/shared-x",
    )?;
    expect_errno(
        fs::create_dir(mnt.join("worktrees/wt/refs/heads2")),
        &[libc::EPERM],
        "mkdir worktrees/wt/refs/heads2",
    )?;
    // A per-worktree ref written as a file lands in the worktree's stack.
    fs::create_dir_all(mnt.join("worktrees/wt/refs/worktree"))?;
    fs::write(mnt.join("worktrees/wt/refs/worktree/by-hand"), &main_id)?;

    // Added by git 2.47 on the real directory while mounted.
    let wt2 = ctx.path("r-wts/wt2");
    run(
        &r.home,
        &r.work,
        T0 + 20,
        "git",
        &["worktree", "add", "-q", "-b", "wt2", &wt2.to_string_lossy()],
    )?;
    let head = fs::read_to_string(mnt.join("worktrees/wt2/HEAD"))?;
    ensure!(
        head == "ref: refs/heads/wt2\n",
        "worktrees/wt2/HEAD through the mount: {head:?}"
    );
    fs::write(
        wt2.join(".git"),
        format!("gitdir: {}\n", mnt.join("worktrees/wt2").display()),
    )?;
    fs::write(wt2.join("n"), "n\n")?;
    run(&r.home, &wt2, T0 + 30, GIT239, &["add", "n"])?;
    run(
        &r.home,
        &wt2,
        T0 + 40,
        GIT239,
        &["commit", "-q", "-m", "in wt2"],
    )?;

    // Created through the mount by git 2.39: the worktree gets its own stack, as git
    // 2.47 makes it, and is served at once.
    fs::write(r.work.join(".git"), format!("gitdir: {}\n", mnt.display()))?;
    let wt3 = ctx.path("r-wts/wt3");
    let added = run(
        &r.home,
        &r.work,
        T0 + 50,
        GIT239,
        &["worktree", "add", "-q", "-b", "wt3", &wt3.to_string_lossy()],
    );
    fs::write(
        r.work.join(".git"),
        format!("gitdir: {}\n", r.git.display()),
    )?;
    added.map_err(|e| format!("git 2.39 worktree add through the mount: {e}"))?;
    let head = fs::read_to_string(mnt.join("worktrees/wt3/HEAD"))?;
    ensure!(
        head == "ref: refs/heads/wt3\n",
        "worktrees/wt3/HEAD through the mount: {head:?}"
    );
    m.unmount()?;
    ensure!(
        r.git.join("worktrees/wt3/reftable/tables.list").is_file(),
        "the worktree added through the mount has no stack of its own"
    );
    // Its `.git` file names the mountpoint (where git 2.39 made it): the real one now.
    fs::write(
        wt3.join(".git"),
        format!("gitdir: {}\n", r.git.join("worktrees/wt3").display()),
    )?;
    let branch = run(
        &r.home,
        &wt3,
        T0,
        "git",
        &["rev-parse", "--symbolic-full-name", "HEAD"],
    )?;
    ensure!(branch == "refs/heads/wt3\n", "wt3's HEAD: {branch:?}");
    run(&r.home, &wt3, T0, "git", &["status"])?;

    // git 2.47 on the real repository: wt2's commit, its reflog, both worktrees.
    fs::write(
        wt2.join(".git"),
        format!("gitdir: {}\n", r.git.join("worktrees/wt2").display()),
    )?;
    let subject = run(&r.home, &wt2, T0, "git", &["log", "-1", "--format=%s"])?;
    ensure!(subject == "in wt2\n", "wt2's last commit: {subject:?}");
    let reflog = run(
        &r.home,
        &wt2,
        T0,
        "git",
        &["reflog", "show", "--format=%gs", "HEAD"],
    )?;
    ensure!(
        reflog.lines().next() == Some("commit: in wt2"),
        "wt2's HEAD reflog: {reflog:?}"
    );
    let branch = run(
        &r.home,
        &r.work,
        T0,
        "git",
        &["rev-parse", "wt2", "worktrees/wt2/HEAD"],
    )?;
    let ids: Vec<&str> = branch.lines().collect();
    ensure!(
        ids.len() == 2 && ids.first() == ids.get(1),
        "branch wt2 and wt2's HEAD disagree: {branch:?}"
    );
    let list = run(
        &r.home,
        &r.work,
        T0,
        "git",
        &["worktree", "list", "--porcelain"],
    )?;
    ensure!(
        list.contains("branch refs/heads/wt2") && list.contains("branch refs/heads/wt3"),
        "git worktree list: {list}"
    );
    run(&r.home, &wt2, T0, "git", &["status"])?;
    let by_hand = run(
        &r.home,
        &r.wt,
        T0,
        "git",
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            "refs/worktree/",
        ],
    )?;
    ensure!(
        by_hand == format!("refs/worktree/by-hand {main_id}"),
        "refs/worktree/by-hand written through the mount, seen by git 2.47 in wt: {by_hand:?}"
    );

    Ok(())
}
mount_test!(worktree_added_while_mounted, timeout = 180);

/// `mount --over` the main work tree's `.git`: a linked worktree's `.git` file names
/// `.git/worktrees/<id>`, so git 2.39 works in it through the mount with nothing changed;
/// git 2.47 sees its commit, bisect and per-worktree refs afterwards.
pub fn linked_worktree_over_dotgit(ctx: &Ctx) -> TestResult {
    let home = ctx.path("home");
    fs::create_dir_all(&home)?;
    let work = ctx.path("r");
    let wt = ctx.path("r-wts/wt");
    run(
        &home,
        &ctx.path(""),
        T0,
        "git",
        &["init", "-q", "-b", "main", "--ref-format=reftable", "r"],
    )?;
    fs::write(work.join("f0"), "base\n")?;
    run(&home, &work, T0, "git", &["add", "f0"])?;
    run(&home, &work, T0, "git", &["commit", "-q", "-m", "init"])?;
    fs::create_dir_all(ctx.path("r-wts"))?;
    run(
        &home,
        &work,
        T0 + 10,
        "git",
        &["worktree", "add", "-q", "-b", "wt", &wt.to_string_lossy()],
    )?;
    let m = Mount::start_over(&work)?;
    let session = (|| -> TestResult {
        fs::write(wt.join("a"), "a\n")?;
        run(&home, &wt, T0 + 20, GIT239, &["add", "a"])?;
        run(
            &home,
            &wt,
            T0 + 30,
            GIT239,
            &["commit", "-q", "-m", "over-1"],
        )?;
        run(
            &home,
            &wt,
            T0 + 40,
            GIT239,
            &["update-ref", "refs/worktree/x", "HEAD"],
        )?;
        run(&home, &wt, T0 + 50, GIT239, &["bisect", "start"])?;
        run(&home, &wt, T0 + 60, GIT239, &["bisect", "bad"])?;
        Ok(())
    })();
    let unmounted = m.unmount();
    session.map_err(|e| format!("git 2.39 in the linked worktree over .git: {e}"))?;
    unmounted?;
    let git = |dir: &Path, args: &[&str]| run(&home, dir, T0, "git", args);
    let subject = git(&wt, &["log", "-1", "--format=%s"])?;
    ensure!(subject == "over-1\n", "wt's last commit: {subject:?}");
    let reflog = git(&wt, &["reflog", "show", "--format=%gs", "HEAD"])?;
    ensure!(
        reflog.lines().next() == Some("commit: over-1"),
        "wt's HEAD reflog: {reflog:?}"
    );
    let head = git(&wt, &["rev-parse", "HEAD"])?;
    let refs = git(&wt, &["for-each-ref", "--format=%(refname) %(objectname)"])?;
    for want in ["refs/bisect/bad", "refs/worktree/x", "refs/heads/wt"] {
        ensure!(
            refs.contains(&format!("{want} {}", head.trim())),
            "{want} missing from wt's refs:\n{refs}"
        );
    }
    let main_refs = git(&work, &["for-each-ref", "--format=%(refname)"])?;
    ensure!(
        !main_refs.contains("refs/bisect/") && !main_refs.contains("refs/worktree/"),
        "per-worktree refs in the main worktree:\n{main_refs}"
    );
    git(&wt, &["status"])?;
    git(&work, &["worktree", "list"])?;
    Ok(())
}
mount_test!(linked_worktree_over_dotgit, timeout = 180);

/// One repository of [`worktree_commands_equal_git247`]: a reftable repository `r` made by
/// git 2.47 with fixed dates (one commit on `main`, `user.*` set), in its own directory,
/// so both sides' worktrees have the same names (`<top>/wt-…`) and ids.
struct WtRepo {
    home: PathBuf,
    top: PathBuf,
    work: PathBuf,
}

impl WtRepo {
    fn new(ctx: &Ctx, side: &str, shared: Option<&str>) -> TestResult<WtRepo> {
        let r = WtRepo {
            home: ctx.path("home"),
            top: ctx.path(side),
            work: ctx.path(&format!("{side}/r")),
        };
        fs::create_dir_all(&r.home)?;
        fs::create_dir_all(&r.top)?;
        run(
            &r.home,
            &r.top,
            T0,
            "git",
            &["init", "-q", "-b", "main", "--ref-format=reftable", "r"],
        )?;
        if let Some(mode) = shared {
            run(
                &r.home,
                &r.work,
                T0,
                "git",
                &["config", "core.sharedRepository", mode],
            )?;
        }
        fs::write(r.work.join("f0"), "base\n")?;
        run(&r.home, &r.work, T0, "git", &["add", "f0"])?;
        run(&r.home, &r.work, T0, "git", &["commit", "-q", "-m", "init"])?;
        Ok(r)
    }

    /// The worktree commands of the comparison, by `prog` in the main work tree (and in
    /// the worktree `wt-b` for its commit and per-worktree refs); each has its own date.
    fn add_and_use(&self, prog: &str) -> TestResult {
        let mut t = T0 + 100;
        let mut git = |dir: &Path, args: &[&str]| -> TestResult {
            t += 10;
            run(&self.home, dir, t, prog, args).map(|_| ())
        };
        let w = &self.work;
        git(w, &["worktree", "add", "-q", "-b", "wtb", "../wt-b"])?;
        git(w, &["worktree", "add", "-q", "--detach", "../wt-d"])?;
        git(
            w,
            &[
                "worktree", "add", "-q", "--lock", "--reason", "why", "../wt-l", "main",
            ],
        )
        .or_else(|_| {
            // "main" is checked out in the main worktree: git refuses; `-f` is what the
            // suite's tests use.
            run(
                &self.home,
                w,
                T0 + 135,
                prog,
                &[
                    "worktree", "add", "-q", "-f", "--lock", "--reason", "why", "../wt-l", "main",
                ],
            )
            .map(|_| ())
        })?;
        git(w, &["worktree", "lock", "--reason", "busy", "../wt-b"])?;
        git(w, &["worktree", "unlock", "../wt-b"])?;
        git(w, &["worktree", "lock", "../wt-d"])?;
        git(w, &["worktree", "unlock", "../wt-d"])?;
        git(w, &["worktree", "move", "../wt-d", "../wt-d2"])?;
        let b = self.top.join("wt-b");
        fs::write(b.join("b"), "b\n")?;
        git(&b, &["add", "b"])?;
        git(&b, &["commit", "-q", "-m", "in wt-b"])?;
        git(&b, &["update-ref", "refs/worktree/mark", "HEAD~1"])?;
        git(&b, &["bisect", "start"])?;
        git(&b, &["bisect", "bad"])?;
        git(&b, &["bisect", "good", "main"])?;
        Ok(())
    }

    /// Removes what [`Self::add_and_use`] made: `remove --force` of the worktree under
    /// bisect, `prune` of one whose directory is gone, `remove` of the locked one.
    fn remove(&self, prog: &str) -> TestResult {
        let w = &self.work;
        run(
            &self.home,
            w,
            T0 + 500,
            prog,
            &["worktree", "remove", "--force", "../wt-b"],
        )?;
        fs::remove_dir_all(self.top.join("wt-d2"))?;
        run(&self.home, w, T0 + 510, prog, &["worktree", "prune"])?;
        run(
            &self.home,
            w,
            T0 + 520,
            prog,
            &["worktree", "unlock", "../wt-l"],
        )?;
        run(
            &self.home,
            w,
            T0 + 530,
            prog,
            &["worktree", "remove", "../wt-l"],
        )?;
        Ok(())
    }

    /// What is on disk under `.git/worktrees` and what git 2.47 says about every worktree
    /// (paths spelled `TOP`; table files named `TABLE`, their number left out: batching and
    /// auto-compaction differ, the refs and reflogs in them are compared through git).
    fn snapshot(&self) -> TestResult<BTreeMap<String, String>> {
        let mut s = BTreeMap::new();
        let top = self.top.to_string_lossy().into_owned();
        let norm = |t: String| t.replace(&top, "TOP");
        let wts = self.work.join(".git/worktrees");
        let mut disk = Vec::new();
        if wts.exists() {
            let mut stack = vec![wts.clone()];
            while let Some(d) = stack.pop() {
                for e in fs::read_dir(&d)? {
                    let e = e?;
                    let p = e.path();
                    let rel = p.strip_prefix(&wts)?.to_string_lossy().into_owned();
                    let m = fs::symlink_metadata(&p)?;
                    let mode = std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777;
                    if m.is_dir() {
                        disk.push(format!("{rel}/ {mode:o}"));
                        stack.push(p);
                    } else if rel.contains("/reftable/") && rel.ends_with(".ref") {
                        let d = rel.rsplit_once('/').map_or("", |x| x.0);
                        disk.push(format!("{d}/TABLE {mode:o}"));
                    } else if rel.ends_with("/index") || rel.ends_with("tables.list") {
                        disk.push(format!("{rel} {mode:o}"));
                    } else {
                        let text = norm(fs::read_to_string(&p)?);
                        disk.push(format!("{rel} {mode:o}: {text:?}"));
                    }
                }
            }
        }
        disk.sort();
        disk.dedup();
        s.insert("disk".into(), disk.join("\n"));
        let git = |dir: &Path, args: &[&str]| -> TestResult<String> {
            Ok(norm(outcome(&self.home, dir, "git", args)?))
        };
        s.insert(
            "worktree list".into(),
            git(&self.work, &["worktree", "list", "--porcelain"])?,
        );
        let mut dirs = vec![("main".to_string(), self.work.clone())];
        for name in ["wt-b", "wt-d2", "wt-l"] {
            let d = self.top.join(name);
            if d.exists() {
                dirs.push((name.to_string(), d));
            }
        }
        for (label, dir) in dirs {
            s.insert(
                format!("{label}: refs"),
                git(
                    &dir,
                    &[
                        "for-each-ref",
                        "--include-root-refs",
                        "--format=%(refname) %(objectname) %(symref)",
                    ],
                )?,
            );
            s.insert(
                format!("{label}: HEAD"),
                git(&dir, &["rev-parse", "HEAD", "--symbolic-full-name", "HEAD"])?,
            );
            s.insert(
                format!("{label}: status"),
                git(&dir, &["status", "--porcelain=v2", "--branch"])?,
            );
            let list = git(&dir, &["reflog", "list"])?;
            let mut names: Vec<&str> = list.lines().collect();
            names.sort_unstable();
            s.insert(format!("{label}: reflog list"), names.join("\n"));
            for name in names {
                s.insert(
                    format!("{label}: reflog {name}"),
                    git(
                        &dir,
                        &[
                            "reflog",
                            "show",
                            "--format=%H %H%x09%gn <%ge>%x09%gs",
                            name,
                            "--",
                        ],
                    )?,
                );
            }
        }
        Ok(s)
    }
}

/// The differences between two snapshots, or an empty string.
fn differences(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> String {
    let mut msg = String::new();
    for key in a.keys().chain(b.keys()) {
        let (x, y) = (a.get(key), b.get(key));
        if x != y && !msg.contains(&format!("--- {key}\n")) {
            msg.push_str(&format!(
                "--- {key}\ngit 2.47 on the stack:\n{}\ngit 2.39 through the mount:\n{}\n",
                x.map_or("(missing)", String::as_str),
                y.map_or("(missing)", String::as_str)
            ));
        }
    }
    msg
}

/// Issue 25.4: `git worktree add -b`/`add --detach`/`add --lock --reason`/`lock`/
/// `unlock`/`move`/`remove`/`prune` by git 2.39 through `mount --over`, and work in the
/// new worktree (a commit, `refs/worktree/…`, a bisect), leave GITDIR as git 2.47 doing
/// the same on a reftable copy: the same files under `worktrees/` (a stack of its own per
/// worktree, the `HEAD` and `refs/heads` stubs, `gitdir`, `commondir`, `locked`, with the
/// same modes) and the same refs, HEADs, reflogs, statuses and `worktree list` as git 2.47
/// reads them; after `remove` and `prune` nothing is left of them, as with git 2.47. While
/// mounted, the mount serves each new worktree as a linked-worktree view.
pub fn worktree_commands_equal_git247(ctx: &Ctx) -> TestResult {
    compare_worktree_commands(ctx, None)
}
mount_test!(worktree_commands_equal_git247, timeout = 300);

/// [`worktree_commands_equal_git247`] with `core.sharedRepository = group`: the stack's
/// directories, stubs and tables get git 2.47's shared modes (group-writable, setgid
/// directories).
pub fn worktree_commands_equal_git247_shared(ctx: &Ctx) -> TestResult {
    compare_worktree_commands(ctx, Some("group"))
}
mount_test!(worktree_commands_equal_git247_shared, timeout = 300);

fn compare_worktree_commands(ctx: &Ctx, shared: Option<&str>) -> TestResult {
    let direct = WtRepo::new(ctx, "d", shared)?;
    let mounted = WtRepo::new(ctx, "m", shared)?;
    direct
        .add_and_use("git")
        .map_err(|e| format!("git 2.47 on the stack: {e}"))?;
    let m = Mount::start_over(&mounted.work)?;
    let through = (|| -> TestResult {
        mounted.add_and_use(GIT239)?;
        // Served as a linked worktree's view: HEAD from its stack, not the stub.
        let head = fs::read_to_string(m.path("worktrees/wt-b/HEAD"))?;
        ensure!(
            head == "ref: refs/heads/wtb\n",
            "worktrees/wt-b/HEAD through the mount: {head:?}"
        );
        let names: Vec<String> = fs::read_dir(m.path("worktrees/wt-b"))?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        ensure!(
            !names.iter().any(|n| n == "reftable" || n == "packed-refs"),
            "worktrees/wt-b lists the stack or packed-refs: {names:?}"
        );
        // The directory of a live worktree is not empty: rmdir fails as on disk, and its
        // stack stays (compared below).
        expect_errno(
            fs::remove_dir(m.path("worktrees/wt-b")),
            &[libc::ENOTEMPTY],
            "rmdir worktrees/wt-b",
        )?;
        Ok(())
    })();
    let unmounted = m.unmount();
    through.map_err(|e| format!("git 2.39 through the mount: {e}"))?;
    unmounted?;
    let a = direct.snapshot()?;
    let b = mounted.snapshot()?;
    let msg = differences(&a, &b);
    ensure!(
        msg.is_empty(),
        "after add, lock, unlock, move and a session in a worktree:\n{msg}"
    );
    // What the comparison covers is really there.
    let disk = b.get("disk").cloned().unwrap_or_default();
    for want in [
        "wt-b/reftable/TABLE",
        "wt-b/HEAD ",
        "\"ref: refs/heads/.invalid\\n\"",
        "wt-l/locked ",
        "\"why\\n\"",
        "wt-d/gitdir ",
        "\"TOP/wt-d2/.git\\n\"",
    ] {
        ensure!(disk.contains(want), "{want:?} not on disk:\n{disk}");
    }
    if shared.is_some() {
        ensure!(
            disk.contains("wt-b/HEAD 66") && disk.contains("wt-b/reftable/ 27"),
            "no shared modes on disk:\n{disk}"
        );
    }
    let refs = b.get("wt-b: refs").cloned().unwrap_or_default();
    for want in ["refs/bisect/bad ", "refs/worktree/mark ", "HEAD "] {
        ensure!(
            refs.lines().any(|l| l.starts_with(want)),
            "{want:?} missing from wt-b's refs:\n{refs}"
        );
    }

    direct
        .remove("git")
        .map_err(|e| format!("git 2.47 on the stack: {e}"))?;
    let m = Mount::start_over(&mounted.work)?;
    let through = mounted.remove(GIT239);
    let unmounted = m.unmount();
    through.map_err(|e| format!("git 2.39 through the mount: {e}"))?;
    unmounted?;
    let a = direct.snapshot()?;
    let b = mounted.snapshot()?;
    let msg = differences(&a, &b);
    ensure!(msg.is_empty(), "after remove and prune:\n{msg}");
    ensure!(
        !mounted.work.join(".git/worktrees").exists(),
        "worktrees/ left behind: {}",
        b.get("disk").cloned().unwrap_or_default()
    );
    run(
        &mounted.home,
        &mounted.work,
        T0,
        "git",
        &["fsck", "--no-progress"],
    )?;
    Ok(())
}
