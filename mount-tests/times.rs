//! Times that mean something: a ref file's and a reflog's mtime is the time of the ref's
//! newest reflog entry, so `ls -t refs/heads` lists branches in the order they were
//! updated (as on a files repository) and a tool polling `HEAD`'s mtime sees it move,
//! also when the content stays (a symref whose branch moved, a ref reset to its value).

use crate::harness::{run_cmd, stage, Ctx, Mount, Repo, TestResult};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// git through the mount (a files-backend git on the mount as its git directory), with
/// the repository's clock and identity.
fn through(repo: &Repo, m: &Mount, args: &[&str]) -> TestResult {
    let mut full = vec!["-c", "core.logAllRefUpdates=true"];
    full.extend_from_slice(args);
    let out = repo
        .cmd(&full)
        .env("GIT_DIR", &m.mnt)
        .env("GIT_OBJECT_DIRECTORY", repo.gitdir.join("objects"))
        .output()?;
    crate::harness::check(&out, &format!("git {} through the mount", args.join(" ")))
}

/// Waits until the mount's batches are written (fsync of a ref file).
fn sync(m: &Mount) -> TestResult {
    std::fs::File::open(m.path("HEAD"))?.sync_all()?;
    Ok(())
}

/// (mtime, ctime) in seconds.
fn times(p: &Path) -> TestResult<(i64, i64)> {
    let md = std::fs::metadata(p)?;
    Ok((md.mtime(), md.ctime()))
}

/// The time of the newest line of a reflog in files format.
fn newest_line_time(log: &Path) -> TestResult<i64> {
    let text = std::fs::read_to_string(log)?;
    let line = text.lines().last().ok_or("empty reflog")?;
    let head = line.split('\t').next().unwrap_or_default();
    let t = head
        .split(' ')
        .rev()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| format!("no time in {line:?}"))?;
    Ok(t)
}

/// Polls `p`'s mtime until it differs from `old` (at most 3 s: well under the 10 s the
/// kernel may cache a ref file's attributes, so only an invalidation makes it in time).
fn wait_mtime_change(p: &Path, old: i64, what: &str) -> TestResult<i64> {
    stage(what);
    let start = Instant::now();
    loop {
        let (mt, ct) = times(p)?;
        if mt != old {
            ensure!(mt == ct, "{what}: mtime {mt} but ctime {ct}");
            return Ok(mt);
        }
        ensure!(
            start.elapsed() < Duration::from_secs(3),
            "{what}: {} mtime still {old} after 3 s",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ls_t(dir: &Path) -> TestResult<Vec<String>> {
    Ok(run_cmd(dir, "ls", &["-t", "refs/heads"])?
        .lines()
        .map(str::to_owned)
        .collect())
}

/// Branches updated one after another (each git call a minute later on the repository's
/// clock; by git on the stack and through the mount, interleaved) list newest first
/// under `ls -t`, as the same sequence does on a files repository.
pub fn ls_t_lists_branches_in_update_order(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("one")?;
    repo.commit("two")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    // (branch, its new value, through the mount)
    let steps = [
        ("s1", "HEAD", false),
        ("m1", "HEAD", true),
        ("s2", "HEAD", false),
        ("m2", "HEAD", true),
        ("s1", "HEAD~1", false),
        ("s3", "HEAD", false),
    ];
    for (b, to, via_mount) in steps {
        let args = ["branch", "-f", b, to];
        if via_mount {
            through(&repo, &m, &args)?;
            sync(&m)?;
        } else {
            repo.git(&args)?;
        }
    }
    let want = ["s3", "s1", "m2", "s2", "m1", "main"];
    // The mount sees the stack's last change within its bound.
    let start = Instant::now();
    let got = loop {
        let got = ls_t(&m.mnt)?;
        if got == want || start.elapsed() > Duration::from_secs(3) {
            break got;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    ensure!(
        got == want,
        "ls -t refs/heads through the mount: {got:?}, want {want:?}"
    );
    for b in ["s3", "m1", "main"] {
        let (mt, ct) = times(&m.path(&format!("refs/heads/{b}")))?;
        let lt = newest_line_time(&m.path(&format!("logs/refs/heads/{b}")))?;
        let (lmt, _) = times(&m.path(&format!("logs/refs/heads/{b}")))?;
        ensure!(
            mt == lt && ct == lt && lmt == lt,
            "refs/heads/{b}: mtime {mt}, ctime {ct}, its reflog's mtime {lmt}, newest entry {lt}"
        );
    }

    // The same sequence on a files repository (its clock is the real one: a pause
    // between updates keeps their mtimes apart).
    let files = Repo::init(&ctx.path("files"), "files")?;
    files.commit("one")?;
    files.commit("two")?;
    std::thread::sleep(Duration::from_millis(50));
    for (b, to, _) in steps {
        files.git(&["branch", "-f", b, to])?;
        std::thread::sleep(Duration::from_millis(50));
    }
    let on_files = ls_t(&files.gitdir)?;
    ensure!(
        on_files == want,
        "ls -t refs/heads on the files repository: {on_files:?}, want {want:?}"
    );
    m.unmount()
}
mount_test!(ls_t_lists_branches_in_update_order, timeout = 120);

/// `HEAD`'s mtime moves with every update that moves HEAD (a commit on its branch by git
/// on the stack and through the mount, a reset to the same commit: same content, new
/// reflog entry) within 3 s although the kernel may cache its attributes for 10 s; it is
/// the time of the newest entry of `logs/HEAD`.
pub fn head_mtime_moves_when_head_changes(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("one")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let head = m.path("HEAD");
    let main = m.path("refs/heads/main");
    let (mut t, _) = times(&head)?;
    let check_log = |t: i64, what: &str| -> TestResult {
        let lt = newest_line_time(&m.path("logs/HEAD"))?;
        ensure!(
            t == lt,
            "{what}: HEAD's mtime {t}, newest logs/HEAD entry {lt}"
        );
        Ok(())
    };
    check_log(t, "at mount")?;

    repo.commit("two")?;
    t = wait_mtime_change(&head, t, "commit on the stack")?;
    check_log(t, "commit on the stack")?;

    // Same content, new reflog entry (git writes none for main: it keeps its value).
    let (main_t, _) = times(&main)?;
    repo.git(&["reset", "--soft", "HEAD"])?;
    t = wait_mtime_change(&head, t, "reset to the same commit on the stack")?;
    check_log(t, "reset on the stack")?;
    ensure!(
        times(&main)?.0 == main_t,
        "main's mtime moved without an update"
    );

    through(&repo, &m, &["commit", "-q", "--allow-empty", "-m", "three"])?;
    sync(&m)?;
    t = wait_mtime_change(&head, t, "commit through the mount")?;
    check_log(t, "commit through the mount")?;
    wait_mtime_change(&main, main_t, "main after a commit through the mount")?;

    through(&repo, &m, &["reset", "--soft", "HEAD"])?;
    sync(&m)?;
    t = wait_mtime_change(&head, t, "reset to the same commit through the mount")?;
    check_log(t, "reset through the mount")?;
    m.unmount()
}
mount_test!(head_mtime_moves_when_head_changes, timeout = 120);
