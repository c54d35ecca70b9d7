//! Issue 25.6, root refs, links and reflogs: a broken `HEAD` (t1450's
//! `echo $ZERO_OID >.git/HEAD`) is read back as written and reported by git 2.39's fsck
//! while the stack keeps its last real value, survives a remount, yields to a real value
//! written by git 2.47 on the stack or by git 2.39 through the mount; a linked worktree's
//! `HEAD` made a symbolic link into `refs/` (t2400) is that symref, a reflog made a
//! symbolic link elsewhere (t3200) is kept and shown as a link, and reflogs that hold no
//! reflog line (t1407) are kept as written — the same outcomes as git 2.39 on a files
//! `.git` twin, and kept across a remount.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::harness::{check, git_env, stage, wait_for, Ctx, Mount, Repo, TestResult};

/// The null object id and a line of it.
const ZERO: &str = "0000000000000000000000000000000000000000";

/// git 2.39 on the git directory `gitdir`, in `cwd`: its output whatever the exit status.
fn git239(ctx: &Ctx, gitdir: &Path, args: &[&str]) -> TestResult<std::process::Output> {
    stage(&format!("git 2.39 {}", args.join(" ")));
    let home = ctx.path("home239");
    fs::create_dir_all(&home)?;
    let mut cmd = Command::new("/usr/bin/git");
    git_env(&mut cmd, &home, "1700500000 +0000");
    Ok(cmd.env("GIT_DIR", gitdir).args(args).output()?)
}

/// What the broken refs' file of `dir` holds, as `<name> <kind>` (undecoded contents).
fn store_entries(dir: &Path) -> Vec<String> {
    let Ok(store) = fs::read(dir.join("reftablefs-broken-refs")) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&store).into_owned();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let h = f.first()?;
            let name: Vec<u8> = (0..h.len() / 2)
                .filter_map(|i| u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok())
                .collect();
            Some(format!("{} {}", String::from_utf8_lossy(&name), f.get(2)?))
        })
        .collect()
}

pub fn broken_head_kept_and_restored(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("r"), "reftable")?;
    let main = repo.commit("one")?;
    let mnt = ctx.path("mnt");
    let zero = format!("{ZERO}\n");
    let m = Mount::start(&repo.gitdir, &mnt, &[])?;
    let r = (|| -> TestResult {
        stage("echo $ZERO_OID > HEAD");
        fs::write(mnt.join("HEAD"), &zero)?;
        ensure!(
            fs::read(mnt.join("HEAD"))? == zero.as_bytes(),
            "HEAD reads back"
        );
        let out = git239(ctx, &mnt, &["fsck"])?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && err.contains("HEAD: detached HEAD points at nothing"),
            "git 2.39 fsck of the broken HEAD: {}\n{err}",
            out.status
        );
        // The main view's HEAD is never deleted, broken or not.
        let rm = fs::remove_file(mnt.join("HEAD")).map_err(|e| e.raw_os_error());
        ensure!(rm == Err(Some(libc::EPERM)), "rm HEAD: {rm:?}");
        Ok(())
    })();
    m.unmount()?;
    r?;
    // The stack kept its last real value: git 2.47 still reads the repository.
    ensure!(
        repo.git(&["symbolic-ref", "HEAD"])? == "refs/heads/main\n",
        "git 2.47's HEAD under the broken one"
    );
    ensure!(
        store_entries(&repo.gitdir) == ["HEAD f"],
        "the store: {:?}",
        store_entries(&repo.gitdir)
    );
    let gitdir = repo.gitdir.to_string_lossy().into_owned();
    let m = Mount::start(&repo.gitdir, &mnt, &[])?;
    let r = (|| -> TestResult {
        ensure!(
            fs::read(mnt.join("HEAD"))? == zero.as_bytes(),
            "the broken HEAD after a remount"
        );
        // git 2.47 writes a real HEAD on the stack: the broken one yields to it.
        stage("git 2.47 update-ref --no-deref HEAD on the stack");
        let out = Command::new("git")
            .args([
                "--git-dir",
                &gitdir,
                "update-ref",
                "--no-deref",
                "HEAD",
                &main,
            ])
            .output()?;
        check(&out, "git 2.47 update-ref")?;
        let want = format!("{main}\n");
        let seen = wait_for(std::time::Duration::from_secs(5), || {
            match fs::read(mnt.join("HEAD")) {
                Ok(c) if c == want.as_bytes() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
        ensure!(seen.is_ok(), "HEAD still reads {seen:?}");
        // Broken again, then restored by git 2.39 through the mount.
        fs::write(mnt.join("HEAD"), &zero)?;
        ensure!(
            fs::read(mnt.join("HEAD"))? == zero.as_bytes(),
            "broken again"
        );
        let out = git239(ctx, &mnt, &["update-ref", "HEAD", &main])?;
        check(&out, "git 2.39 update-ref HEAD")?;
        ensure!(fs::read(mnt.join("HEAD"))? == want.as_bytes(), "restored");
        let out = git239(ctx, &mnt, &["fsck"])?;
        check(&out, "git 2.39 fsck after the repair")?;
        Ok(())
    })();
    m.unmount()?;
    r?;
    ensure!(
        repo.git(&["rev-parse", "HEAD"])?.trim() == main,
        "git 2.47's HEAD after the repair"
    );
    ensure!(
        !repo.gitdir.join("reftablefs-broken-refs").exists(),
        "the store outlived its last entry: {:?}",
        store_entries(&repo.gitdir)
    );
    Ok(())
}
mount_test!(broken_head_kept_and_restored, timeout = 120);

/// The steps, run by bash in a work tree whose `.git` is a files git directory or the
/// mount (as in `broken.rs`): every outcome printed, `main`'s id shown as MAIN and the
/// work tree as WORK.
const STEPS: &str = r#"
G=/usr/bin/git
main=$($G rev-parse refs/heads/main)
zero=0000000000000000000000000000000000000000
err=$(mktemp)
trap 'rm -f "$err"' EXIT
run() {
    out=$("$@" 2>"$err"); rc=$?
    echo "\$ $* -> $rc" | sed -e "s#$PWD#WORK#g" -e "s/$main/MAIN/g"
    [ -n "$out" ] && echo "$out" | sed -e "s#$PWD#WORK#g" -e "s/$main/MAIN/g"
    sed -e "s#$PWD#WORK#g" -e "s/$main/MAIN/g" -e 's/^/! /' "$err"
}
# t2400: a worktree's HEAD as a symbolic link into refs/ is a symref.
$G worktree add -q there 2>/dev/null; echo "add rc=$?"
head=$($G -C there rev-parse --git-path HEAD)
ref=$($G -C there symbolic-ref HEAD)
rm "$head" && ln -s "$ref" "$head"; echo "ln rc=$?"
run test -h "$head"
run readlink "$head"
run $G -C there symbolic-ref HEAD
run $G checkout -q there
run $G -C there checkout there
run test -h "$head"
run cat "$head"
$G worktree add -q -b side other 2>/dev/null; echo "add rc=$?"
h2=$($G -C other rev-parse --git-path HEAD)
rm "$h2" && ln -s refs/heads/side "$h2"; echo "ln rc=$?"
run $G -C other rev-parse --symbolic-full-name HEAD
# A symref as a link in the main view.
ln -s refs/heads/main .git/refs/heads/sym; echo "ln rc=$?"
run $G symbolic-ref refs/heads/sym
run $G rev-parse sym
# t3200: a reflog as a symbolic link.
$G branch --create-reflog u
mv .git/logs/refs/heads/u real-u; echo "mv rc=$?"
ln -s real-u .git/logs/refs/heads/u; echo "ln rc=$?"
run test -h .git/logs/refs/heads/u
run readlink .git/logs/refs/heads/u
run ls .git/logs/refs/heads
run $G branch -m u v
run rm .git/logs/refs/heads/u
run test -e .git/logs/refs/heads/u
run $G branch -m u v
# t1407: reflogs that hold no reflog line.
echo $zero > .git/logs/PSEUDO-MAIN; echo "pseudo rc=$?"
mkdir -p .git/logs/refs/bisect; echo "mkdir rc=$?"
echo $zero > .git/logs/refs/bisect/random; echo "random rc=$?"
run cat .git/logs/PSEUDO-MAIN .git/logs/refs/bisect/random
run ls .git/logs .git/logs/refs/bisect
run $G reflog exists refs/bisect/random
run $G for-each-ref
rm -f "$err"
"#;

pub fn broken_links_and_junk_reflogs_as_on_a_files_gitdir(ctx: &Ctx) -> TestResult {
    let (on_disk, through, repo) =
        crate::harness::on_files_and_mount(ctx, "t2400/t3200/t1407-like", STEPS)?;
    // The steps did meet what they test (else both sides could agree on nothing).
    crate::harness::same_as_files(
        "t2400/t3200/t1407-like",
        &on_disk,
        &through,
        &[
            "$ test -h WORK/.git/worktrees/there/HEAD -> 0",
            "is already checked out at 'WORK/there'",
            "$ test -h WORK/.git/worktrees/there/HEAD -> 1",
            "$ /usr/bin/git -C other rev-parse --symbolic-full-name HEAD -> 0\nrefs/heads/side",
            "$ /usr/bin/git symbolic-ref refs/heads/sym -> 0\nrefs/heads/main",
            "$ test -h .git/logs/refs/heads/u -> 0",
            "reflog for refs/heads/u is a symlink",
            "$ /usr/bin/git reflog exists refs/bisect/random -> 0",
            "PSEUDO-MAIN",
        ],
    )?;
    // Kept beside the stacks; the links to ref names are symrefs there (git 2.47).
    let main_store = store_entries(&repo.gitdir);
    ensure!(
        main_store
            == [
                "logs/PSEUDO-MAIN f",
                "logs/refs/bisect/random f",
                "refs/heads/sym l"
            ],
        "the main store: {main_store:?}"
    );
    let wt_store = store_entries(&repo.gitdir.join("worktrees/other"));
    ensure!(
        wt_store == ["HEAD l"],
        "worktree other's store: {wt_store:?}"
    );
    ensure!(
        repo.git(&["symbolic-ref", "refs/heads/sym"])? == "refs/heads/main\n",
        "git 2.47 reads the link as a symref"
    );
    let other = repo.work.join("other");
    let out = Command::new("git")
        .args(["-C"])
        .arg(&other)
        .args(["symbolic-ref", "HEAD"])
        .output()?;
    check(&out, "git 2.47 symbolic-ref HEAD in worktree other")?;
    ensure!(
        out.stdout == b"refs/heads/side\n",
        "worktree other's HEAD in its stack: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Everything kept survives a remount, shown as before.
    let m = Mount::start_over(&repo.work)?;
    let r = (|| -> TestResult {
        let dotgit = repo.work.join(".git");
        let link = |p: &str| -> TestResult<Vec<u8>> {
            let p = dotgit.join(p);
            ensure!(
                fs::symlink_metadata(&p)?.file_type().is_symlink(),
                "{} is no symbolic link after a remount",
                p.display()
            );
            Ok(fs::read_link(&p)?.into_os_string().into_encoded_bytes())
        };
        ensure!(
            link("refs/heads/sym")? == b"refs/heads/main",
            "sym's target"
        );
        ensure!(
            link("worktrees/other/HEAD")? == b"refs/heads/side",
            "other's HEAD target"
        );
        let zero = format!("{ZERO}\n");
        for p in ["logs/PSEUDO-MAIN", "logs/refs/bisect/random"] {
            ensure!(
                fs::read(dotgit.join(p))? == zero.as_bytes(),
                "{p} after a remount"
            );
        }
        // Unlinked, a link takes its symref along.
        fs::remove_file(dotgit.join("refs/heads/sym"))?;
        fs::remove_file(dotgit.join("logs/refs/bisect/random"))?;
        fs::remove_file(dotgit.join("logs/PSEUDO-MAIN"))?;
        Ok(())
    })();
    m.unmount()?;
    r?;
    let out = repo.git_output(&["rev-parse", "--verify", "-q", "refs/heads/sym"])?;
    ensure!(!out.status.success(), "refs/heads/sym outlived its link");
    ensure!(
        store_entries(&repo.gitdir).is_empty(),
        "the main store keeps {:?}",
        store_entries(&repo.gitdir)
    );
    Ok(())
}
mount_test!(
    broken_links_and_junk_reflogs_as_on_a_files_gitdir,
    timeout = 300
);
