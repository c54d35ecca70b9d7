//! Issue 25 item 5 and issue 26 item 3: files-backend behaviours the mount got wrong, each
//! checked the way a files-only tool meets it. Reflog lines with timestamp 0 (a
//! `SOURCE_DATE_EPOCH=0` commit by git 2.39), `open(O_TRUNC)` of a reflog, reflog lines
//! written in pieces (and one never finished), `rm -rf logs` and the directories of an
//! emptied repository, `tar` right after a ref update, `HEAD`'s mtime across a switch that
//! writes no reflog line, a reflog holding a bare object id, and deletions whose `rmdir`s
//! must not cost a directory listing each.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::IntoRawFd;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{check, git_env, run_cmd, stage, Ctx, Mount, Repo, TestResult};

/// git 2.39, the files-only git the mount is for.
const GIT239: &str = "/usr/bin/git";

static TICK: AtomicU64 = AtomicU64::new(0);

/// The commit date of the next git 2.39 call: a clock that advances 60 s a call.
fn next_date() -> String {
    let t = 1_700_500_000 + 60 * TICK.fetch_add(1, Ordering::Relaxed);
    format!("{t} +0000")
}

/// git 2.39 in work tree `work` with git directory `gitdir`, commit dates `date`, bounded
/// by timeout(1). The output whatever the exit status.
fn git239_in(
    ctx: &Ctx,
    work: &Path,
    gitdir: &Path,
    date: &str,
    args: &[&str],
) -> TestResult<Output> {
    stage(&format!("git 2.39 {} (dated {date})", args.join(" ")));
    let home = ctx.path("home239");
    fs::create_dir_all(&home)?;
    let mut c = Command::new("timeout");
    git_env(&mut c, &home, date)
        .args(["120", GIT239, "-c", "core.logAllRefUpdates=true"])
        .args(args)
        .env("GIT_DIR", gitdir)
        .current_dir(work);
    Ok(c.output()?)
}

/// git 2.39 in `repo`'s work tree with the mount as its git directory (see [`git239_in`]).
fn git239_at(ctx: &Ctx, repo: &Repo, m: &Mount, date: &str, args: &[&str]) -> TestResult<Output> {
    git239_in(ctx, &repo.work, &m.mnt, date, args)
}

/// [`git239_at`] with the next date; fails unless git exits 0.
fn git239(ctx: &Ctx, repo: &Repo, m: &Mount, args: &[&str]) -> TestResult<String> {
    let out = git239_at(ctx, repo, m, &next_date(), args)?;
    check(
        &out,
        &format!("git 2.39 {} through the mount", args.join(" ")),
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `sh -c SCRIPT` in `cwd` with `args` as `$1…`, bounded to 60 s; the output.
fn sh(cwd: &Path, script: &str, args: &[&str], input: Option<&[u8]>) -> TestResult<Output> {
    stage(&format!("sh -c {script:?} {args:?} (in {})", cwd.display()));
    let mut c = Command::new("timeout");
    c.args(["60", "sh", "-c", script, "sh"])
        .args(args)
        .current_dir(cwd)
        .env("LC_ALL", "C")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn()?;
    if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(data)?;
    }
    Ok(child.wait_with_output()?)
}

/// Waits until everything the mount acknowledged is written (fsync of a ref file).
fn sync(m: &Mount) -> TestResult {
    stage("fsync HEAD");
    File::open(m.path("HEAD"))?.sync_all()?;
    Ok(())
}

/// The status file's text (refusals with their reasons).
fn status(m: &Mount) -> TestResult<String> {
    Ok(fs::read_to_string(m.path(".reftablefs/status"))?)
}

/// `close(2)` of `f`, with its result (Rust's drop ignores it; close is where a
/// files-backend write is refused when its last line never ended).
fn close(f: File) -> std::io::Result<()> {
    let fd = f.into_raw_fd();
    // SAFETY: closing a descriptor we own, once.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A reflog line as the files backend writes it.
fn line(old: &str, new: &str, time: u64, msg: &str) -> String {
    format!("{old} {new} Pi Eces <p@example.com> {time} +0000\t{msg}\n")
}

const ZERO: &str = "0000000000000000000000000000000000000000";

/// A commit dated `@0` by git 2.39 through the mount (what a `SOURCE_DATE_EPOCH=0` build
/// does) is accepted: its reflog lines say time 0, and git 2.47 on the stack reads them
/// back, as it stores them on reftable itself. Before, the append to `logs/HEAD` was
/// refused ("unable to append to '.git/logs/HEAD': Invalid argument").
pub fn epoch_zero_reflog_lines_are_kept(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("one")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let out = git239_at(
        ctx,
        &repo,
        &m,
        "@0 +0000",
        &["commit", "-q", "--allow-empty", "-m", "epoch"],
    )?;
    check(&out, "git 2.39 commit dated @0 through the mount")?;
    for log in ["logs/HEAD", "logs/refs/heads/main"] {
        let text = fs::read_to_string(m.path(log))?;
        let last = text.lines().last().unwrap_or_default();
        ensure!(
            last.contains("> 0 +0000\tcommit: epoch"),
            "{log}'s last line: {last:?}"
        );
    }
    sync(&m)?;
    for r in ["HEAD", "refs/heads/main"] {
        let got = repo.git(&["log", "-g", "-1", "--date=raw", "--format=%gd %gs", r])?;
        let want = format!(
            "{}@{{0 +0000}} commit: epoch\n",
            r.trim_start_matches("refs/heads/")
        );
        ensure!(
            got == want,
            "git 2.47 log -g -1 {r}: {got:?}, want {want:?}"
        );
    }
    m.unmount()
}
mount_test!(epoch_zero_reflog_lines_are_kept, timeout = 120);

/// `cat > logs/refs/heads/main` (open with `O_TRUNC`) replaces the reflog, as on a files
/// repository; before, the lines were appended after the ones already there.
pub fn o_trunc_replaces_a_reflog(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let a = repo.commit("one")?;
    let b = repo.commit("two")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let log = m.path("logs/refs/heads/main");
    let text = format!(
        "{}{}",
        line(ZERO, &a, 1_112_911_993, "handwritten one"),
        line(&a, &b, 1_112_912_053, "handwritten two")
    );
    let out = sh(
        &m.mnt,
        "cat > \"$1\"",
        &["logs/refs/heads/main"],
        Some(text.as_bytes()),
    )?;
    check(&out, "cat > logs/refs/heads/main")?;
    let got = fs::read_to_string(&log)?;
    ensure!(got == text, "after cat >: {got:?}, want {text:?}");
    sync(&m)?;
    let got = repo.git(&["reflog", "show", "--format=%H %gs", "refs/heads/main"])?;
    let want = format!("{b} handwritten two\n{a} handwritten one\n");
    ensure!(
        got == want,
        "git 2.47 reflog of main: {got:?}, want {want:?}"
    );
    // The same through an open of an existing reflog with O_TRUNC and no O_CREAT.
    let one = line(ZERO, &b, 1_112_912_113, "only");
    let mut f = OpenOptions::new().write(true).truncate(true).open(&log)?;
    f.write_all(one.as_bytes())?;
    close(f)?;
    ensure!(
        fs::read_to_string(&log)? == one,
        "after O_TRUNC without O_CREAT"
    );
    m.unmount()?;
    let got = repo.git(&["reflog", "show", "--format=%gs", "refs/heads/main"])?;
    ensure!(got == "only\n", "git 2.47 after unmount: {got:?}");
    Ok(())
}
mount_test!(o_trunc_replaces_a_reflog, timeout = 120);

/// A reflog line written in pieces (three `write()`s; a shell loop of `printf`s with a
/// command substitution in the middle of a line, whose child closes the descriptor
/// mid-line) is one entry, as on a files repository; a line that never ends is refused at
/// `close`, with its reason in the status file, and nothing of it is stored.
pub fn reflog_lines_written_in_pieces(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let a = repo.commit("one")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let log = m.path("logs/refs/heads/main");
    let mut want = fs::read_to_string(&log)?;

    let l1 = line(&a, &a, 1_700_000_300, "in three pieces");
    let mut f = OpenOptions::new().append(true).open(&log)?;
    for piece in [&l1[..20], &l1[20..57], &l1[57..]] {
        stage(&format!("write {piece:?}"));
        f.write_all(piece.as_bytes())
            .map_err(|e| format!("write of the piece {piece:?}: {e}"))?;
    }
    close(f).map_err(|e| format!("close after a line in three pieces: {e}"))?;
    want.push_str(&l1);
    ensure!(fs::read_to_string(&log)? == want, "after three pieces");

    // As t1410's BUFSIZ test writes: one printf per piece, `$(seq …)` in mid-line.
    let script =
        "for i in 1 2; do printf '%s %s %s\\t' \"$2\" \"$2\" 'Sh Ell <s@h> 1700000400 +0000'; \
                  for j in $(seq 1 3); do printf X; done; printf '\\n'; done >> \"$1\"";
    let out = sh(&m.mnt, script, &["logs/refs/heads/main", &a], None)?;
    check(&out, "a printf loop appending two lines in pieces")?;
    for _ in 0..2 {
        want.push_str(&format!("{a} {a} Sh Ell <s@h> 1700000400 +0000\tXXX\n"));
    }
    ensure!(
        fs::read_to_string(&log)? == want,
        "after the printf loop: {:?}",
        fs::read_to_string(&log)?
    );

    // A line that never ends: the write is taken, the close refuses it.
    let mut f = OpenOptions::new().append(true).open(&log)?;
    f.write_all(format!("{a} {a} Pi Eces <p@example.com> 1700000500 +0000\tnever").as_bytes())?;
    match close(f) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
        other => bail!("close after an unfinished reflog line: {other:?}, want EINVAL"),
    }
    ensure!(
        fs::read_to_string(&log)? == want,
        "the unfinished line was stored"
    );
    let st = status(&m)?;
    ensure!(
        st.contains("logs/refs/heads/main") && st.contains("never ended"),
        "the refusal is not in the status file: {st}"
    );
    sync(&m)?;
    let n = repo
        .git(&["reflog", "show", "--format=%gs", "refs/heads/main"])?
        .lines()
        .count();
    ensure!(n == 4, "git 2.47 sees {n} entries of main, want 4");
    m.unmount()
}
mount_test!(reflog_lines_written_in_pieces, timeout = 120);

/// `rm -rf .git/logs` succeeds and `logs` is gone until git makes it again; in a
/// repository whose refs were all deleted, `rm -rf refs logs` succeeds as on a files
/// repository (the same steps run on one), `mkdir refs` makes it again, and a ref git
/// 2.47 then writes on the stack shows. Before, the final `rmdir logs` was EBUSY.
pub fn logs_and_refs_are_removable_when_empty(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let id = repo.commit("one")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    run_cmd(&m.mnt, "rm", &["-rf", "logs"])?;
    ensure!(!m.path("logs").exists(), "logs still exists after rm -rf");
    let ls = run_cmd(&m.mnt, "ls", &["-A"])?;
    ensure!(!ls.lines().any(|l| l == "logs"), "ls lists logs: {ls}");
    git239(
        ctx,
        &repo,
        &m,
        &["commit", "-q", "--allow-empty", "-m", "two"],
    )?;
    ensure!(
        fs::read_to_string(m.path("logs/HEAD"))?.lines().count() == 1,
        "logs/HEAD after git made logs again"
    );

    // An emptied repository, and the same steps on a files one.
    let files = Repo::init(&ctx.path("files"), "files")?;
    files.commit("one")?;
    git239(ctx, &repo, &m, &["update-ref", "-d", "refs/heads/main"])?;
    files.git(&["update-ref", "-d", "refs/heads/main"])?;
    for (dir, what) in [(&files.gitdir, "files"), (&m.mnt, "mount")] {
        let out = sh(dir, "rm -rf refs logs", &[], None)?;
        check(&out, &format!("rm -rf refs logs on the {what} repository"))?;
        for d in ["refs", "logs"] {
            ensure!(!dir.join(d).exists(), "{what}: {d} exists after rm -rf");
        }
    }
    fs::create_dir(m.path("refs"))?;
    ensure!(
        fs::read_dir(m.path("refs"))?.next().is_none(),
        "refs made again is not empty"
    );
    repo.git(&["update-ref", "refs/heads/again", &id])?;
    let start = Instant::now();
    while !m.path("refs/heads/again").exists() {
        ensure!(
            start.elapsed() < Duration::from_secs(3),
            "a ref written on the stack does not show"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    m.unmount()
}
mount_test!(logs_and_refs_are_removable_when_empty, timeout = 120);

/// A reflog written as a bare object id (`echo $ZERO_OID > logs/refs/bisect/random`, as
/// git's t1407 makes one) is kept as written beside the stack (`fs/broken.rs`); the same
/// line appended to a reflog that holds lines is refused at the write with its true
/// reason (the line ends after an object id), not "bad old object id".
pub fn a_bare_object_id_reflog_is_kept_and_refused_when_appended(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("one")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let out = sh(
        &m.mnt,
        "mkdir -p logs/refs/bisect && echo \"$1\" > logs/refs/bisect/random",
        &[ZERO],
        None,
    )?;
    check(&out, "a bare object id written as a new reflog")?;
    ensure!(
        fs::read_to_string(m.mnt.join("logs/refs/bisect/random"))? == format!("{ZERO}\n"),
        "the new reflog does not read back as written"
    );
    let main = fs::read_to_string(m.mnt.join("logs/refs/heads/main"))?;
    let out = sh(&m.mnt, "echo \"$1\" >> logs/refs/heads/main", &[ZERO], None)?;
    ensure!(
        !out.status.success(),
        "a bare object id was appended to a reflog holding lines"
    );
    ensure!(
        fs::read_to_string(m.mnt.join("logs/refs/heads/main"))? == main,
        "the refused append changed the reflog"
    );
    let st = status(&m)?;
    let Some(entry) = st.split('{').rfind(|e| e.contains("logs/refs/heads/main")) else {
        bail!("no refusal of logs/refs/heads/main in the status file: {st}")
    };
    ensure!(
        !entry.contains("bad old object id") && entry.contains("ends after an object id"),
        "the reason given: {entry}"
    );
    m.unmount()
}
mount_test!(
    a_bare_object_id_reflog_is_kept_and_refused_when_appended,
    timeout = 120
);

/// Deleting 200 of 3,000 remote-tracking refs with git 2.39 through the mount (`branch -D
/// -r`: per ref a lock, the unlinks and an `rmdir` of `refs/remotes/origin` and of its
/// reflog directory, ENOTEMPTY) takes at most 5× what the same deletions take on a files
/// clone, plus 3 s. Before, each `rmdir` built the whole listing of the 3,000-entry
/// directory (the listing cache goes with every written batch) to see it was not empty.
pub fn deletions_and_their_rmdirs_stay_cheap(ctx: &Ctx) -> TestResult {
    const REFS: usize = 3000;
    const DELETE: usize = 200;
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let id = repo.commit("one")?;
    let files = Repo::init(&ctx.path("files"), "files")?;
    let fid = files.commit("one")?;
    for (r, id) in [(&repo, &id), (&files, &fid)] {
        let mut input = String::new();
        for i in 0..REFS {
            input.push_str(&format!("create refs/remotes/origin/b{i:04} {id}\n"));
        }
        r.git_stdin(
            &["update-ref", "--create-reflog", "--stdin"],
            input.as_bytes(),
        )?;
    }
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let names: Vec<String> = (0..DELETE)
        .map(|i| format!("origin/b{:04}", i * 7))
        .collect();
    let mut args = vec!["branch", "-q", "-D", "-r"];
    args.extend(names.iter().map(String::as_str));

    let t = Instant::now();
    let out = git239_in(ctx, &files.work, &files.gitdir, &next_date(), &args)?;
    check(&out, "git 2.39 branch -D -r on the files clone")?;
    let on_files = t.elapsed();

    let t = Instant::now();
    git239(ctx, &repo, &m, &args)?;
    let through = t.elapsed();
    crate::harness::note(&format!(
        "{DELETE} deletions of {REFS}: files {on_files:?}, through the mount {through:?}"
    ));
    sync(&m)?;
    let left = repo
        .git(&["for-each-ref", "refs/remotes/origin"])?
        .lines()
        .count();
    ensure!(left == REFS - DELETE, "{left} remote refs left");
    let bound = on_files * 5 + Duration::from_secs(3);
    ensure!(
        through <= bound,
        "{DELETE} deletions through the mount took {through:?}, files {on_files:?} (bound {bound:?})"
    );
    m.unmount()
}
mount_test!(deletions_and_their_rmdirs_stay_cheap, timeout = 300);

/// `tar cf x.tar .git` right after git 2.39 updates a ref through the mount exits 0, as
/// on a files repository (the same steps run on one): a directory's time moves only when
/// a name appears in it or goes from it, at the call that does it, and a file's time only
/// with its content. Before, every directory took the time the batch was written (a few
/// milliseconds after `update-ref` returned, while tar read the tree), and tar said
/// "file changed as we read it" (exit 1). The root's time also moves when a passed-through
/// name appears there (it showed the ref view's alone).
pub fn tar_right_after_a_ref_update_sees_nothing_change(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let id = repo.commit("one")?;
    let files = Repo::init(&ctx.path("files"), "files")?;
    let fid = files.commit("one")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let tar = |gitdir: &Path, what: &str, step: &str| -> TestResult {
        let out = sh(
            gitdir.parent().unwrap_or(gitdir),
            "tar cf \"$1\" \"$2\"",
            &[
                &ctx.path("x.tar").to_string_lossy(),
                &gitdir.file_name().unwrap_or_default().to_string_lossy(),
            ],
            None,
        )?;
        check(
            &out,
            &format!("tar of the {what} git directory right after {step}"),
        )
    };
    for i in 0..12 {
        // A new branch, an update of it, its deletion: names appear, content changes,
        // names go.
        let name = format!("refs/heads/t{}", i % 4);
        let step = match i % 3 {
            0 => vec!["update-ref".to_string(), name.clone(), "{id}".into()],
            1 => vec!["update-ref".into(), "HEAD".into(), "{id}".into()],
            _ => vec![
                "update-ref".into(),
                "-d".into(),
                format!("refs/heads/t{}", (i - 2) % 4),
            ],
        };
        for (gitdir, work, oid, what) in [
            (&files.gitdir, &files.work, &fid, "files"),
            (&m.mnt, &repo.work, &id, "mount"),
        ] {
            let args: Vec<String> = step.iter().map(|a| a.replace("{id}", oid)).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = git239_in(ctx, work, gitdir, &next_date(), &args)?;
            check(
                &out,
                &format!("git 2.39 {} on the {what} repository", args.join(" ")),
            )?;
            tar(gitdir, what, &args.join(" "))?;
        }
    }
    // A new passed-through name at the root moves the root's time, as on disk.
    let before = times_ns(&m.mnt)?;
    std::thread::sleep(Duration::from_millis(20));
    fs::write(m.path("gc.log"), "x\n")?;
    let after = times_ns(&m.mnt)?;
    ensure!(
        after.0 > before.0 && after.1 > before.1,
        "the root's times after gc.log was made: {after:?}, before {before:?}"
    );
    m.unmount()
}
mount_test!(
    tar_right_after_a_ref_update_sees_nothing_change,
    timeout = 180
);

/// (mtime, ctime) of `path` in nanoseconds.
fn times_ns(path: &Path) -> TestResult<(i128, i128)> {
    use std::os::unix::fs::MetadataExt;
    let md = fs::metadata(path)?;
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    Ok((
        ns(md.mtime(), md.mtime_nsec()),
        ns(md.ctime(), md.ctime_nsec()),
    ))
}

/// A ref file's mtime through the mount never goes back (editors and vim-fugitive
/// compare it with the one they saw): git 2.39 updates `main` with commit dates that go
/// back (a date before the last, `@0`), git 2.47 updates it on the stack with an older
/// date, and after each update — before and after the batch is written — `refs/heads/main`
/// and `HEAD` show a time no older than before, and a newer one once the value changed.
/// Before, a time went back to the reflog line's once the batch was written.
pub fn a_ref_mtime_never_goes_back(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let a = repo.commit("one")?;
    let b = repo.commit("two")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let watched = [m.path("refs/heads/main"), m.path("HEAD")];
    let mut last: Vec<(i128, i128)> = watched
        .iter()
        .map(|p| times_ns(p))
        .collect::<TestResult<_>>()?;
    let mut look = |step: &str, moved: bool| -> TestResult {
        for (p, before) in watched.iter().zip(last.iter_mut()) {
            let now = times_ns(p)?;
            ensure!(
                now.0 >= before.0 && now.1 >= before.1,
                "{step}: {} went back from {before:?} to {now:?}",
                p.display()
            );
            if moved && p.ends_with("main") {
                ensure!(
                    now.0 > before.0,
                    "{step}: main's mtime did not move ({now:?})"
                );
            }
            *before = now;
        }
        Ok(())
    };
    let dates = [
        "1700600000 +0000",
        "1600000000 +0000",
        "@0 +0000",
        "1700600100 +0000",
    ];
    for (i, date) in dates.iter().enumerate() {
        let to = if i % 2 == 0 { &a } else { &b };
        let out = git239_at(ctx, &repo, &m, date, &["update-ref", "refs/heads/main", to])?;
        check(
            &out,
            &format!("git 2.39 update-ref dated {date} through the mount"),
        )?;
        look(&format!("update dated {date}"), true)?;
        sync(&m)?;
        look(&format!("update dated {date}, written"), false)?;
    }
    // git 2.47 on the stack, dated before everything above.
    let mut c = repo.cmd(&["update-ref", "refs/heads/main", &a]);
    c.env("GIT_COMMITTER_DATE", "1500000000 +0000");
    check(&c.output()?, "git 2.47 update-ref on the stack")?;
    let start = Instant::now();
    loop {
        let got = fs::read_to_string(&watched[0])?;
        if got.trim() == a {
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(3),
            "the update on the stack does not show"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    look("update on the stack dated 2017", true)?;
    // A switch of HEAD that writes no reflog line (a script, go-git): HEAD moves forward
    // and stays there once written, although logs/HEAD's newest line is older.
    let head_before = times_ns(&watched[1])?;
    let out = sh(
        &m.mnt,
        "printf 'ref: refs/heads/other\\n' > HEAD",
        &[],
        None,
    )?;
    check(&out, "HEAD written in place through the mount")?;
    let head_now = times_ns(&watched[1])?;
    ensure!(
        head_now.0 > head_before.0,
        "HEAD's mtime after a switch without a reflog line: {head_now:?}, before {head_before:?}"
    );
    look("HEAD switched in place", false)?;
    sync(&m)?;
    look("HEAD switched in place, written", false)?;
    m.unmount()
}
mount_test!(a_ref_mtime_never_goes_back, timeout = 120);
