//! Packaging (issue 10, item 6): `contrib/mount.fuse.reftablefs`, the helper mount(8)
//! runs for `mount -t fuse.reftablefs` and fstab lines, run here directly with the
//! arguments mount(8) gives it (mount(8) only looks for helpers in /sbin, which a test
//! does not install into): beside `.git` with options, over `.git` (`-o over`), and its
//! refusals. The systemd units are checked with `systemd-analyze verify` by hand (no
//! systemd manager in the test environment; see the report in `contrib/`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::harness::{
    check, force_unmount, is_mounted, register, stage, unregister, Ctx, TestResult, BIN,
};

const HELPER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/contrib/mount.fuse.reftablefs");

/// Unmounts `mnt` on drop (the helper's daemon is not a child of the test).
struct Guard {
    mnt: PathBuf,
    pid: Option<u32>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = Command::new(BIN)
                .arg("unmount")
                .arg(&self.mnt)
                .stdin(Stdio::null())
                .output();
            force_unmount(&self.mnt);
        }
        if let Some(pid) = self.pid {
            unregister(pid);
        }
    }
}

/// Runs the helper as mount(8) would: `mount.fuse.reftablefs SRC MNT -o OPTS`.
fn helper(src: &Path, mnt: &Path, opts: &str) -> TestResult<Output> {
    stage(&format!(
        "mount.fuse.reftablefs {} {} -o {opts}",
        src.display(),
        mnt.display()
    ));
    Ok(Command::new("timeout")
        .arg("60")
        .arg("sh")
        .arg(HELPER)
        .arg(src)
        .arg(mnt)
        .arg("-o")
        .arg(opts)
        .env("REFTABLEFS", BIN)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .output()?)
}

/// Mounts through the helper and returns the guard; the daemon's pid is taken from its
/// "mounted on … (pid N, …)" line.
fn mount_with(src: &Path, mnt: &Path, opts: &str) -> TestResult<Guard> {
    let out = helper(src, mnt, opts)?;
    let mut g = Guard {
        mnt: mnt.to_path_buf(),
        pid: None,
    };
    check(&out, "mount.fuse.reftablefs")?;
    let err = String::from_utf8_lossy(&out.stderr);
    g.pid = err
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok());
    if let Some(pid) = g.pid {
        register(pid, mnt);
    }
    ensure!(
        is_mounted(mnt),
        "{} not mounted after the helper: {err}",
        mnt.display()
    );
    Ok(g)
}

fn git(cwd: &Path, prog: &str, args: &[&str]) -> TestResult<String> {
    let out = Command::new("timeout")
        .arg("60")
        .arg(prog)
        .args(args)
        .current_dir(cwd)
        .env_remove("GIT_DIR")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.com")
        .stdin(Stdio::null())
        .output()?;
    check(&out, &format!("{prog} {}", args.join(" ")))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The helper beside `.git` (with options), over `.git` (`-o over`), and its refusals.
// mount-test: timeout=120
pub fn mount_helper(ctx: &Ctx) -> TestResult {
    let work = ctx.path("r");
    git(
        &ctx.path(""),
        "git",
        &["init", "-q", "-b", "main", "--ref-format=reftable", "r"],
    )?;
    fs::write(work.join("f"), "f\n")?;
    git(&work, "git", &["add", "f"])?;
    git(&work, "git", &["commit", "-q", "-m", "one"])?;
    let head = git(&work, "git", &["rev-parse", "HEAD"])?;

    // Beside .git, as an fstab line `GITDIR MNT fuse.reftablefs rw,nodev,batch_window=5`.
    let mnt = ctx.path("mnt");
    fs::create_dir_all(&mnt)?;
    let log = ctx.path("beside.log");
    {
        let _g = mount_with(
            &work.join(".git"),
            &mnt,
            &format!("rw,nodev,noauto,batch_window=5,log={}", log.display()),
        )?;
        let served = fs::read_to_string(mnt.join("refs/heads/main"))?;
        ensure!(
            served == head,
            "refs/heads/main through the mount: {served:?}"
        );
        ensure!(
            !fs::read_to_string(mnt.join("config"))?.contains("refstorage"),
            "config served with the extension"
        );
    }
    ensure!(!is_mounted(&mnt), "still mounted");

    // Over .git: `WORKTREE WORKTREE/.git fuse.reftablefs over`; git 2.39 works in the work
    // tree with nothing else changed, and its commit is in the stack afterwards.
    let dotgit = work.join(".git");
    let log = ctx.path("over.log");
    {
        let _g = mount_with(&work, &dotgit, &format!("over,log={}", log.display()))?;
        fs::write(work.join("g"), "g\n")?;
        git(&work, "/usr/bin/git", &["add", "g"])?;
        git(
            &work,
            "/usr/bin/git",
            &["commit", "-q", "-m", "over the helper"],
        )?;
    }
    ensure!(!is_mounted(&dotgit), "still mounted over .git");
    let subject = git(&work, "git", &["log", "-1", "--format=%s"])?;
    ensure!(
        subject == "over the helper\n",
        "after unmounting, git 2.47 sees {subject:?}"
    );

    // Refusals: an unknown option, an over mountpoint that is not WORKTREE/.git.
    let out = helper(&work.join(".git"), &mnt, "frobnicate")?;
    ensure!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("unknown option 'frobnicate'"),
        "unknown option: {out:?}"
    );
    let out = helper(&work, &mnt, "over")?;
    ensure!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("MOUNTPOINT must be")
            && !is_mounted(&mnt)
            && !is_mounted(&dotgit),
        "over with another mountpoint: {out:?}"
    );
    Ok(())
}
