//! The packaging in `contrib/`: the mount(8) helper (`mount -t fuse.reftablefs`, fstab)
//! run as mount(8) runs it — options, `ro`, `over`, a refused unknown option — and the
//! systemd user unit's start and stop commands, run as systemd would with its specifiers
//! filled in (systemd itself does not run in the test machine).

use crate::harness::{
    check, expect_errno, git_env, is_mounted, wait_for, Ctx, Daemon, Repo, TestResult, BIN,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn contrib(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("contrib")
        .join(name)
}

/// Runs the mount(8) helper `sh contrib/mount.fuse.reftablefs SRC MNT -o OPTS` with
/// `REFTABLEFS` naming this build (mount(8) passes exactly these arguments).
fn helper(ctx: &Ctx, src: &Path, mnt: &Path, opts: &str) -> TestResult<Output> {
    // The daemon's default log goes to $TMPDIR: the test's own directory, not /tmp.
    let tmp = ctx.path("helper-tmp");
    fs::create_dir_all(&tmp)?;
    Ok(Command::new("timeout")
        .arg("40")
        .arg("sh")
        .arg(contrib("mount.fuse.reftablefs"))
        .arg(src)
        .arg(mnt)
        .arg("-o")
        .arg(opts)
        .env("REFTABLEFS", BIN)
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .output()?)
}

/// Debian's git 2.39 (files backend only) with the test identity.
fn legacy_git(
    home: &Path,
    cwd: &Path,
    git_dir: Option<&Path>,
    args: &[&str],
) -> TestResult<String> {
    let mut cmd = Command::new("/usr/bin/git");
    git_env(&mut cmd, home, "1700000000 +0000")
        .current_dir(cwd)
        .args(args);
    if let Some(d) = git_dir {
        cmd.env("GIT_DIR", d);
    }
    let out = cmd.output()?;
    check(&out, &format!("/usr/bin/git {args:?}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn unmount(mnt: &Path, daemon: &Daemon) -> TestResult {
    let out = Command::new("timeout")
        .arg("20")
        .arg(BIN)
        .arg("unmount")
        .arg(mnt)
        .output()?;
    check(&out, "reftablefs unmount")?;
    wait_for(Duration::from_secs(10), || {
        if is_mounted(mnt) || daemon.alive() {
            Err("still mounted or running".into())
        } else {
            Ok(())
        }
    })
    .map_err(|e| format!("10 s after reftablefs unmount: {e}"))?;
    Ok(())
}

/// `mount -t fuse.reftablefs GITDIR MNT -o …` as mount(8) runs the helper: mount's own
/// options and `x-*` are ignored, ours are passed on, the mount is ready when the helper
/// returns, git 2.39 writes through it, and git 2.47 sees the write after unmount; `ro`
/// refuses writes with EROFS; an unknown option is refused and mounts nothing.
pub fn mount_helper_options(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let head = repo.commit("one")?;
    let mnt = ctx.path("mnt");
    fs::create_dir_all(&mnt)?;

    let out = helper(
        ctx,
        &repo.gitdir,
        &mnt,
        "rw,nosuid,nodev,noauto,user,batch_window=5,batch_max=100,x-systemd.automount",
    )?;
    let daemon = Daemon::find(&mnt, &mnt);
    check(&out, "mount.fuse.reftablefs -o rw,…")?;
    let daemon = daemon.ok_or("no mount process found after the helper returned")?;
    ensure!(
        is_mounted(&mnt),
        "the helper returned before the mount was ready"
    );
    // The daemon logs to its default file in $TMPDIR (here the test's own directory).
    let logs = fs::read_dir(ctx.path("helper-tmp"))?
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("reftablefs-mount.")
        })
        .count();
    ensure!(
        logs == 1,
        "{logs} daemon logs in the helper's TMPDIR, expected 1"
    );
    ensure!(
        fs::read_to_string(mnt.join("refs/heads/main"))? == format!("{head}\n"),
        "the mount does not serve refs/heads/main"
    );
    legacy_git(
        &ctx.path("home"),
        &repo.work,
        Some(&mnt),
        &["update-ref", "refs/heads/via-helper", &head],
    )?;
    unmount(&mnt, &daemon)?;
    drop(daemon);
    ensure!(
        repo.rev_parse("refs/heads/via-helper")? == head,
        "git 2.47 does not see the update made through the helper's mount"
    );

    let out = helper(ctx, &repo.gitdir, &mnt, "ro")?;
    let daemon = Daemon::find(&mnt, &mnt);
    check(&out, "mount.fuse.reftablefs -o ro")?;
    let daemon = daemon.ok_or("no mount process found after -o ro")?;
    expect_errno(
        fs::write(mnt.join("refs/heads/ro.lock"), format!("{head}\n")),
        &[libc::EROFS],
        "create a lock on a ro mount",
    )?;
    unmount(&mnt, &daemon)?;
    drop(daemon);

    let out = helper(ctx, &repo.gitdir, &mnt, "rw,frobnicate")?;
    let daemon = Daemon::find(&mnt, &mnt);
    ensure!(
        out.status.code() == Some(1) && daemon.is_none() && !is_mounted(&mnt),
        "an unknown option was not refused: {:?}, mounted: {}",
        out.status,
        is_mounted(&mnt)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("unknown option 'frobnicate'"),
        "the refusal does not name the option: {err}"
    );
    Ok(())
}
mount_test!(mount_helper_options, timeout = 120);

/// `-o over` (fstab: `WORKTREE WORKTREE/.git fuse.reftablefs over`): the helper mounts the
/// view over the work tree's own `.git`; git 2.39 works in the work tree with no
/// environment variable; after unmount the real `.git` is back and git 2.47 sees the branch
/// git 2.39 made.
pub fn mount_helper_over(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("work"), "reftable")?;
    let head = repo.commit("one")?;
    let dotgit = repo.work.join(".git");
    let out = helper(ctx, &repo.work, &dotgit, "over")?;
    let daemon = Daemon::find(&repo.work, &dotgit);
    check(&out, "mount.fuse.reftablefs -o over")?;
    let daemon = daemon.ok_or("no mount process found after -o over")?;
    ensure!(is_mounted(&dotgit), "WORKTREE/.git is not a mount");
    ensure!(
        fs::read_to_string(dotgit.join("HEAD"))? == "ref: refs/heads/main\n",
        ".git/HEAD is not the stack's"
    );
    legacy_git(
        &ctx.path("home"),
        &repo.work,
        None,
        &["branch", "from-legacy"],
    )?;
    let status = legacy_git(
        &ctx.path("home"),
        &repo.work,
        None,
        &["status", "--porcelain=v1", "-b"],
    )?;
    ensure!(status.starts_with("## main"), "git 2.39 status: {status}");
    unmount(&dotgit, &daemon)?;
    drop(daemon);
    ensure!(
        fs::read_to_string(dotgit.join("HEAD"))? == "ref: refs/heads/.invalid\n",
        "the real .git is not back after unmount"
    );
    ensure!(
        repo.rev_parse("refs/heads/from-legacy")? == head,
        "git 2.47 does not see the branch git 2.39 made over .git"
    );
    // An fstab line whose MOUNTPOINT is not WORKTREE/.git is refused, and nothing mounts.
    let elsewhere = ctx.path("elsewhere");
    fs::create_dir_all(&elsewhere)?;
    let out = helper(ctx, &repo.work, &elsewhere, "over")?;
    ensure!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("MOUNTPOINT must be")
            && !is_mounted(&elsewhere)
            && !is_mounted(&dotgit),
        "-o over with another mountpoint: {out:?}"
    );
    Ok(())
}
mount_test!(mount_helper_over, timeout = 120);

/// The systemd user unit's `ExecStart` and `ExecStop`, with `%f`, `%h`, `%i` and the
/// environment file filled in as systemd does for the documented instance: start mounts
/// (in the foreground, as `Type=simple` wants), an update through the mount is pending in a
/// long batch window, stop flushes it and unmounts, and the start command then exits 0.
pub fn systemd_unit_commands(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let head = repo.commit("one")?;
    let mnt = ctx.path("mnt");
    fs::create_dir_all(&mnt)?;
    let unit = fs::read_to_string(contrib("reftablefs@.service"))?;
    let line = |key: &str| -> TestResult<String> {
        unit.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::to_owned)
            .ok_or_else(|| format!("the unit has no {key} line").into())
    };
    ensure!(
        line("Type=")? == "simple",
        "the unit is not Type=simple (the mount runs in the foreground)"
    );
    // systemd's specifiers for instance `systemd-escape --path MNT`: %f is the unescaped
    // path, %h the home directory, %i the escaped instance; GITDIR comes from
    // EnvironmentFile=%h/.config/reftablefs/%i.env, as the unit's comment says to write it.
    let home = ctx.path("home");
    let instance = mnt
        .to_string_lossy()
        .trim_start_matches('/')
        .replace('-', "\\x2d")
        .replace('/', "-");
    let env_file = line("EnvironmentFile=")?
        .replace("%h", &home.to_string_lossy())
        .replace("%i", &instance);
    ensure!(
        env_file == format!("{}/.config/reftablefs/{instance}.env", home.display()),
        "EnvironmentFile is {env_file}"
    );
    let fill = |cmd: String| -> Vec<String> {
        cmd.replace("%f", &mnt.to_string_lossy())
            .replace("${GITDIR}", &repo.gitdir.to_string_lossy())
            .split(' ')
            .map(str::to_owned)
            .collect()
    };
    let start = fill(line("ExecStart=")?);
    let stop = fill(line("ExecStop=")?);
    // systemd finds `reftablefs` on its own PATH (/usr/local/bin, /usr/bin, …): here, this
    // build's directory.
    let bin_dir = Path::new(BIN).parent().ok_or("no binary directory")?;
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (prog, args) = start.split_first().ok_or("empty ExecStart")?;
    let log = fs::File::create(ctx.path("unit.log"))?;
    let mut child = Command::new(prog)
        .args(args)
        .args(["--batch-window", "60000"])
        .env("PATH", &path)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    crate::harness::register(child.id(), &mnt);
    let guard = scopeguard(child.id(), &mnt);
    wait_for(Duration::from_secs(10), || {
        if is_mounted(&mnt) {
            Ok(())
        } else {
            Err("not mounted".into())
        }
    })
    .map_err(|e| format!("ExecStart did not mount within 10 s: {e}"))?;
    legacy_git(
        &ctx.path("home"),
        &repo.work,
        Some(&mnt),
        &["update-ref", "refs/heads/pending", &head],
    )?;
    std::thread::sleep(Duration::from_millis(200));
    ensure!(
        repo.git_output(&["rev-parse", "--verify", "-q", "refs/heads/pending"])?
            .stdout
            .is_empty(),
        "written before the stop: the 60 s window was not used"
    );
    let (prog, args) = stop.split_first().ok_or("empty ExecStop")?;
    let out = Command::new("timeout")
        .arg("30")
        .arg(prog)
        .args(args)
        .env("PATH", &path)
        .output()?;
    check(&out, "ExecStop")?;
    let status = wait_exit(&mut child, Duration::from_secs(20))?;
    drop(guard);
    ensure!(status.success(), "ExecStart's process exited {status}");
    ensure!(!is_mounted(&mnt), "still mounted after ExecStop");
    ensure!(
        repo.rev_parse("refs/heads/pending")? == head,
        "the pending update was not flushed by ExecStop"
    );
    Ok(())
}
mount_test!(systemd_unit_commands, timeout = 120);

/// Kills and detaches the unit's mount process if the test ends early.
fn scopeguard(pid: u32, mnt: &Path) -> impl Drop {
    struct Guard(u32, PathBuf);
    impl Drop for Guard {
        fn drop(&mut self) {
            if crate::harness::pid_alive(self.0) {
                crate::harness::signal(self.0, "KILL");
            }
            crate::harness::force_unmount(&self.1);
            crate::harness::unregister(self.0);
        }
    }
    Guard(pid, mnt.to_path_buf())
}

fn wait_exit(
    child: &mut std::process::Child,
    limit: Duration,
) -> TestResult<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(s);
        }
        if std::time::Instant::now() > deadline {
            bail!("the unit's mount process still runs {limit:?} after ExecStop");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
