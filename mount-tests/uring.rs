//! Issue 26.6: FUSE over io_uring (`src/fs/uring.rs`) and its fallback to `/dev/fuse`.
//!
//! The fuse module's `enable_uring` parameter decides whether the kernel offers the
//! transport to a new mount; each test sets it for its mounts and gives it back its value
//! on every exit path (the runner runs one test at a time). The same git 2.39 session —
//! writes of every kind the files backend knows, `pack-refs`, deletions, reflogs — runs
//! through the mount and on a files `.git` twin, with the same output, in three setups:
//! io_uring asked for (`--io-uring`) and offered, so used (its threads run, `status`
//! counts the requests it served); offered and not asked for; asked for and not offered
//! (the fallback). git 2.47, reading the stack alone after each unmount, sees the refs
//! git 2.39 sees on the twin.

use std::fs;
use std::process::Command;

use crate::harness::{
    check, note, refs239, signal, stage, steps239, Ctx, Mount, Repo, TestResult, BIN,
};

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// `enable_uring` set for the test, given back its value when dropped.
struct UringParam {
    old: String,
}

impl UringParam {
    /// Sets the parameter; `None` when this kernel has no FUSE over io_uring at all, or
    /// io_uring is switched off for every process (`kernel.io_uring_disabled` 2).
    fn set(on: bool) -> TestResult<Option<UringParam>> {
        let Ok(old) = fs::read_to_string(PARAM) else {
            return Ok(None);
        };
        let disabled = fs::read_to_string("/proc/sys/kernel/io_uring_disabled").unwrap_or_default();
        if disabled.trim() == "2" {
            return Ok(None);
        }
        fs::write(PARAM, if on { "1" } else { "0" })
            .map_err(|e| format!("cannot set {PARAM}: {e}"))?;
        Ok(Some(UringParam {
            old: old.trim().to_string(),
        }))
    }
}

impl Drop for UringParam {
    fn drop(&mut self) {
        let v = if self.old == "Y" || self.old == "1" {
            "1"
        } else {
            "0"
        };
        let _ = fs::write(PARAM, v);
    }
}

/// git 2.39's session: every kind of write the files backend knows, and reads.
const SESSION: &str = r#"
G=/usr/bin/git
$G update-ref refs/heads/topic HEAD
$G branch side
$G symbolic-ref HEAD refs/heads/side
$G commit -q --allow-empty -m two
$G tag -a -m t v1
$G tag light
$G pack-refs --all
$G update-ref refs/heads/topic HEAD
$G branch -D topic >/dev/null
$G update-ref -d refs/tags/light
for i in 1 2 3 4 5 6 7 8; do $G branch b$i; done
$G branch -D b3 b5 | sed -E "s/[0-9a-f]{7,}/ID/"
$G for-each-ref --format='%(refname) %(objecttype)'
$G reflog show side --format='%gs' | cat
cat "$GIT_DIR/HEAD"
ls "$GIT_DIR/refs/heads" | wc -l
$G rev-parse --symbolic-full-name HEAD
"#;

/// [`SESSION`] with `gitdir` as git's directory and the current directory as the work tree.
fn session_in(gitdir: &std::path::Path) -> String {
    format!(
        "export GIT_DIR='{}' GIT_WORK_TREE=\"$PWD\"\n{SESSION}",
        gitdir.display()
    )
}

/// `reftablefs status` of the mount: its `transport:` line.
fn transport(m: &Mount) -> TestResult<String> {
    let out = Command::new(BIN).arg("status").arg(m.path("")).output()?;
    check(&out, "reftablefs status")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("transport:"))
        .ok_or_else(|| format!("no transport line in status:\n{text}"))?;
    Ok(line.trim().to_string())
}

/// The requests `status` says io_uring served ("io_uring, Q CPU queues, T threads, N
/// requests ...").
fn uring_requests(line: &str) -> Option<u64> {
    let before = line.split(" requests").next()?;
    before.rsplit(' ').next()?.parse().ok()
}

/// The session through a mount of a fresh reftable repository (`name`) with `extra`
/// options (beside its `.git`: `--over` never uses io_uring), on the files twin too; both
/// outputs equal, git 2.47 agrees after unmounting.
/// Returns the `transport:` line read before and after the session, and how many
/// `fuse-uring-*` threads the mount ran.
fn session(ctx: &Ctx, name: &str, extra: &[&str]) -> TestResult<(String, String, usize, char)> {
    let twin = Repo::init(&ctx.path(&format!("{name}-files")), "files")?;
    twin.commit("one")?;
    let on_disk = steps239(
        ctx,
        name,
        "files .git",
        &twin.work,
        &session_in(&twin.gitdir),
    )?;
    let repo = Repo::init(&ctx.path(name), "reftable")?;
    repo.commit("one")?;
    let m = Mount::start(&repo.gitdir, &ctx.path(&format!("{name}-mnt")), extra)?;
    let threads = (0..64)
        .map(|q| m.threads_named(&format!("fuse-uring-{q}")))
        .sum::<TestResult<usize>>()?;
    let before = transport(&m)?;
    let through = steps239(ctx, name, "mount", &repo.work, &session_in(&m.path("")));
    let after = transport(&m);
    // A terminal's ^Z: the mount's state after it (`T`: stopped).
    let pid = m.pid().ok_or("the mount process is gone")?;
    signal(pid, "TSTP");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let state = process_state(pid);
    signal(pid, "CONT");
    m.unmount()?;
    let (through, after) = (through?, after?);
    crate::harness::same_as_files(
        name,
        &on_disk,
        &through,
        &[
            "refs/heads/b8 commit",
            "refs/tags/v1 tag",
            "ref: refs/heads/side",
        ],
    )?;
    let (want, have) = (
        refs239(ctx, &twin)?,
        repo.git(&["for-each-ref", "--format=%(refname) %(objecttype)"])?,
    );
    ensure!(
        want == have,
        "{name}: git 2.47 on the stack:\n{have}\ngit 2.39 on the twin:\n{want}"
    );
    Ok((before, after, threads, state))
}

/// The state letter of process `pid` (`/proc/PID/stat`, field 3; `?` if unreadable).
fn process_state(pid: u32) -> char {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .unwrap_or('?')
}

/// Asked for and offered by the kernel, the mount serves its requests over io_uring: two
/// threads per CPU queue, the requests of a whole git session counted there, the session's
/// result as on a files `.git`; `^Z` does not stop it. With `--over` it is not used, with
/// a log line.
pub fn requests_go_over_io_uring(ctx: &Ctx) -> TestResult {
    let Some(_param) = UringParam::set(true)? else {
        note("SKIP: no FUSE over io_uring here (no enable_uring parameter, or kernel.io_uring_disabled=2)");
        return Ok(());
    };
    stage("io_uring offered");
    let (before, after, threads, state) = session(ctx, "uring", &["--io-uring"])?;
    ensure!(
        state != 'T' && state != '?',
        "a mount serving io_uring was stopped by SIGTSTP (state {state})"
    );
    ensure!(
        before.starts_with("io_uring,"),
        "the mount does not serve io_uring: {before}"
    );
    let queues: usize = before
        .split(", ")
        .nth(1)
        .and_then(|q| q.split(' ').next())
        .and_then(|q| q.parse().ok())
        .ok_or_else(|| format!("no queue count in {before:?}"))?;
    ensure!(
        threads == queues * 2,
        "{threads} fuse-uring threads for {queues} queues"
    );
    let (b, a) = (uring_requests(&before), uring_requests(&after));
    ensure!(
        matches!((b, a), (Some(b), Some(a)) if a >= b + 200),
        "the session's requests did not go over io_uring: {before} -> {after}"
    );
    // `--over` never uses it (a killed mount would stay over .git), and says so.
    stage("--io-uring --over");
    let repo = Repo::init(&ctx.path("over"), "reftable")?;
    repo.commit("one")?;
    let m = Mount::start_over_with(&repo.work, &["--io-uring"])?;
    let t = transport(&m);
    let log = m.log();
    m.unmount()?;
    let t = t?;
    ensure!(t == "/dev/fuse", "--io-uring --over: transport {t}");
    ensure!(
        log.contains("--io-uring is not used with an auto-unmounting mount"),
        "--io-uring --over ignored without a word:\n{log}"
    );
    Ok(())
}
mount_test!(requests_go_over_io_uring, timeout = 180);

/// The transport offered and not asked for (the default), and asked for where the kernel
/// does not offer it (the fallback): `/dev/fuse` serves everything, no io_uring thread
/// runs, the same session gives the same result; `^Z` stops the mount as before.
pub fn dev_fuse_unless_asked_for_and_offered(ctx: &Ctx) -> TestResult {
    for (name, offered, extra) in [
        ("not-asked-for", true, &[][..]),
        ("not-offered", false, &["--io-uring"][..]),
    ] {
        let Some(_param) = UringParam::set(offered)? else {
            note("SKIP: no FUSE over io_uring here (no enable_uring parameter, or kernel.io_uring_disabled=2)");
            return Ok(());
        };
        stage(name);
        let (before, after, threads, state) = session(ctx, name, extra)?;
        // Over /dev/fuse the mount stops at ^Z, as before (its clients stay killable).
        ensure!(
            state == 'T',
            "{name}: the mount's state after SIGTSTP: {state}"
        );
        ensure!(
            before == "/dev/fuse" && after == "/dev/fuse",
            "{name}: transport {before} -> {after}"
        );
        ensure!(threads == 0, "{name}: {threads} fuse-uring threads");
    }
    Ok(())
}
mount_test!(dev_fuse_unless_asked_for_and_offered, timeout = 240);

/// An entry the kernel refuses (a payload buffer smaller than it asks for, through the
/// test hook `RTFS_TEST_URING_SHORT_PAYLOAD`) makes it give the transport up for the
/// connection: the mount's requests, held until then, go over `/dev/fuse`, the session
/// equals the files twin, no io_uring thread is left serving.
pub fn a_refused_entry_falls_back_to_dev_fuse(ctx: &Ctx) -> TestResult {
    let Some(_param) = UringParam::set(true)? else {
        note("SKIP: no FUSE over io_uring here (no enable_uring parameter, or kernel.io_uring_disabled=2)");
        return Ok(());
    };
    let twin = Repo::init(&ctx.path("files"), "files")?;
    twin.commit("one")?;
    let on_disk = steps239(
        ctx,
        "refused",
        "files .git",
        &twin.work,
        &session_in(&twin.gitdir),
    )?;
    let repo = Repo::init(&ctx.path("r"), "reftable")?;
    repo.commit("one")?;
    let m = Mount::start_env(
        &repo.gitdir,
        &ctx.path("mnt"),
        &["--io-uring"],
        &[("RTFS_TEST_URING_SHORT_PAYLOAD", "1")],
    )?;
    let through = steps239(
        ctx,
        "refused",
        "mount",
        &repo.work,
        &session_in(&m.path("")),
    );
    let t = transport(&m);
    let log = m.log();
    m.unmount()?;
    let (through, t) = (through?, t?);
    crate::harness::same_as_files("refused", &on_disk, &through, &["refs/heads/b8 commit"])?;
    ensure!(t == "/dev/fuse", "after refused entries: transport {t}");
    ensure!(
        log.contains("io_uring queue") && log.contains("Invalid argument"),
        "the refused entries were not logged:\n{log}"
    );
    Ok(())
}
mount_test!(a_refused_entry_falls_back_to_dev_fuse, timeout = 180);
