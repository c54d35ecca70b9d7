//! The mount's lifecycle and repository variants: failed mounts say why, `--daemon`
//! returns once ready and `reftablefs unmount` ends it, SIGINT and SIGHUP flush pending updates and
//! unmounts cleanly, and a SHA-256 repository is served with 64-hex ids.

use crate::expected::{build_scenario, expected_tree};
use crate::harness::{
    ensure_same_tree, is_mounted, pid_alive, read_tree, signal, wait_for, Ctx, Daemon, Mount, Repo,
    TestResult, Tree, BIN,
};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `reftablefs mount ARGS` expecting it to fail within 20 s; returns its stderr.
fn mount_must_fail(args: &[&Path], what: &str) -> TestResult<String> {
    let out = Command::new("timeout")
        .arg("20")
        .arg(BIN)
        .arg("mount")
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(
        !out.status.success() && out.status.code() != Some(124),
        "{what}: mount should fail at once, got {} with stderr {err:?}",
        out.status
    );
    ensure!(!err.trim().is_empty(), "{what}: failed without saying why");
    Ok(err)
}

/// A failed mount says why: not a reftable repository, no such git dir, missing
/// mountpoint, mountpoint busy (and the existing mount keeps serving).
pub fn mount_failures_say_why(ctx: &Ctx) -> TestResult {
    let files = Repo::init(&ctx.path("files"), "files")?;
    files.commit("x")?;
    let mnt = ctx.path("mnt");
    fs::create_dir_all(&mnt)?;
    let err = mount_must_fail(&[&files.gitdir, &mnt], "files-format repository")?;
    ensure!(
        err.contains("reftable"),
        "files-format repo: message does not mention reftable: {err:?}"
    );
    ensure!(!is_mounted(&mnt), "a failed mount left a mountpoint");

    let missing = ctx.path("no-such-repo/.git");
    let err = mount_must_fail(&[&missing, &mnt], "missing git dir")?;
    ensure!(
        err.contains("no-such-repo"),
        "missing git dir: message does not name it: {err:?}"
    );

    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("x")?;
    let err = mount_must_fail(
        &[&repo.gitdir, &ctx.path("no-such-dir")],
        "missing mountpoint",
    )?;
    ensure!(
        err.contains("no-such-dir"),
        "missing mountpoint: message does not name it: {err:?}"
    );

    let m = Mount::start(&repo.gitdir, &mnt, &[])?;
    let err = mount_must_fail(&[&repo.gitdir, &mnt], "busy mountpoint")?;
    ensure!(
        err.contains("busy") || err.contains("already"),
        "busy mountpoint: message does not say so: {err:?}"
    );
    ensure!(
        fs::read_to_string(m.path("HEAD"))? == "ref: refs/heads/main\n",
        "the first mount stopped serving after a refused second mount"
    );
    m.unmount()
}
mount_test!(mount_failures_say_why, timeout = 120);

/// `--daemon` returns once the mount is ready; `reftablefs unmount` ends the daemon.
pub fn daemon_then_unmount(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let head = repo.commit("x")?;
    let mnt = ctx.path("mnt");
    fs::create_dir_all(&mnt)?;
    // Plain pipes, as `$(reftablefs mount --daemon …)` uses: the daemon must not keep
    // them open, or reading them to EOF would never finish. Its log goes to --log.
    let log = ctx.path("daemon.log");
    let out = Command::new("timeout")
        .arg("40")
        .arg(BIN)
        .args(["mount", "--daemon", "--log"])
        .arg(&log)
        .arg(&repo.gitdir)
        .arg(&mnt)
        .stdin(Stdio::null())
        .output()?;
    let status = out.status;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(
        err.contains(&*log.to_string_lossy()),
        "mount --daemon did not name its log file: {err}"
    );
    let guard = Daemon::find(&mnt, &mnt);
    ensure!(status.success(), "mount --daemon failed ({status}): {err}");
    ensure!(
        is_mounted(&mnt),
        "mount --daemon returned before the mount was ready"
    );
    ensure!(
        fs::read_to_string(mnt.join("refs/heads/main"))? == format!("{head}\n"),
        "daemon mount does not serve refs/heads/main"
    );
    let Some(guard) = guard else {
        bail!("no daemon process found for {}", mnt.display())
    };
    let out = Command::new("timeout")
        .arg("20")
        .arg(BIN)
        .arg("unmount")
        .arg(&mnt)
        .output()?;
    crate::harness::check(&out, "reftablefs unmount")?;
    wait_for(Duration::from_secs(10), || {
        if is_mounted(&mnt) || guard.alive() {
            Err("still mounted or running".into())
        } else {
            Ok(())
        }
    })
    .map_err(|_| {
        format!(
            "daemon {} still running or mounted 10 s after unmount",
            guard.pid
        )
    })?;
    Ok(())
}
mount_test!(daemon_then_unmount, timeout = 120);

/// SIGINT with an update still pending in a long batch window: the mount flushes it,
/// unmounts and exits 0; git then sees the update and its reflog entry.
pub fn sigint_flushes_and_unmounts(ctx: &Ctx) -> TestResult {
    signal_flushes_and_unmounts(ctx, "INT")
}
mount_test!(sigint_flushes_and_unmounts, timeout = 120);

/// SIGHUP (a foreground mount whose terminal closed) is handled as SIGINT and SIGTERM:
/// the pending update is flushed before the mount exits 0 (it used to die at once and
/// lose it).
pub fn sighup_flushes_and_unmounts(ctx: &Ctx) -> TestResult {
    signal_flushes_and_unmounts(ctx, "HUP")
}
mount_test!(sighup_flushes_and_unmounts, timeout = 120);

fn signal_flushes_and_unmounts(ctx: &Ctx, sig: &str) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let first = repo.commit("first")?;
    repo.commit("second")?;
    let tables = repo.tables_list()?;
    let m = Mount::start(
        &repo.gitdir,
        &ctx.path("mnt"),
        &["--batch-window", "60000", "--batch-max", "100000"],
    )?;
    let lock = m.path("refs/heads/pending.lock");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&lock)?;
    f.write_all(format!("{first}\n").as_bytes())?;
    drop(f);
    // As git: the reflog line is appended before the rename (the mount writes exactly
    // the lines clients append, as the files backend keeps them).
    fs::create_dir_all(m.path("logs/refs/heads"))?;
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(m.path("logs/refs/heads/pending"))?
        .write_all(
            format!(
                "{} {first} A U Thor <a@example.com> 1700000000 +0000\tbranch: Created\n",
                "0".repeat(40)
            )
            .as_bytes(),
        )?;
    fs::rename(&lock, m.path("refs/heads/pending"))?;
    ensure!(
        fs::read_to_string(m.path("refs/heads/pending"))? == format!("{first}\n"),
        "pending update not visible through the mount"
    );
    std::thread::sleep(Duration::from_millis(200));
    ensure!(
        repo.tables_list()? == tables,
        "the 60 s batch window was not honoured (written at once)"
    );
    let pid = m.pid().ok_or("no mount pid")?;
    signal(pid, sig);
    // Mount::terminate sends SIGTERM; here the signal was sent already: wait for the exit.
    wait_for(Duration::from_secs(10), || {
        if pid_alive(pid) || is_mounted(&m.mnt) {
            Err("running".into())
        } else {
            Ok(())
        }
    })
    .map_err(|_| format!("mount still running 10 s after SIG{sig}; log:\n{}", m.log()))?;
    m.terminate()?; // reaps the child and checks exit status 0
    ensure!(
        repo.rev_parse("refs/heads/pending")? == first,
        "the pending update was lost at SIG{sig}"
    );
    let log = repo.git(&["reflog", "show", "--format=%H", "refs/heads/pending"])?;
    ensure!(
        log.lines().count() == 1,
        "expected one reflog entry for the flushed update: {log}"
    );
    Ok(())
}

/// A SHA-256 repository: the tree matches git's, 64-hex ids are accepted, 40-hex refused.
pub fn sha256_repository(ctx: &Ctx) -> TestResult {
    let repo = Repo::init_with(&ctx.path("repo"), "reftable", &["--object-format=sha256"])?;
    build_scenario(&repo)?;
    let expected = expected_tree(&repo)?;
    ensure!(
        expected
            .get("refs/heads/main")
            .is_some_and(|v| v.len() == 65),
        "not a SHA-256 repository"
    );
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let mut actual = Tree::new();
    read_tree(&m.mnt, "", &mut actual)?;
    actual.remove("packed-refs");
    ensure_same_tree(&expected, &actual, "SHA-256 mount vs git")?;
    let tables = repo.tables_list()?;
    let lock = m.path("refs/heads/short.lock");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&lock)?;
    // A 40-hex id is no SHA-256 ref value: kept as a broken ref, as a files `.git` keeps
    // it (`fs/broken.rs`), never in the stack (tables.list is compared below).
    f.write_all(format!("{}\n", "a".repeat(40)).as_bytes())?;
    drop(f);
    fs::rename(&lock, m.path("refs/heads/short"))?;
    ensure!(
        fs::read(m.path("refs/heads/short"))? == format!("{}\n", "a".repeat(40)).as_bytes(),
        "a 40-hex id in a SHA-256 repo is not kept as written"
    );
    fs::remove_file(m.path("refs/heads/short"))?;
    let c = repo.rev_parse("HEAD~1")?;
    let lock = m.path("refs/heads/long.lock");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&lock)?;
    f.write_all(format!("{c}\n").as_bytes())?;
    drop(f);
    fs::rename(&lock, m.path("refs/heads/long"))?;
    m.unmount()?;
    ensure!(
        repo.tables_list()? != tables,
        "the valid SHA-256 update was not written"
    );
    ensure!(
        repo.rev_parse("refs/heads/long")? == c,
        "refs/heads/long wrong after unmount"
    );
    ensure!(
        repo.git_output(&["rev-parse", "-q", "--verify", "refs/heads/short"])?
            .stdout
            .is_empty(),
        "the refused 40-hex update was written"
    );
    Ok(())
}
mount_test!(sha256_repository, timeout = 120);
