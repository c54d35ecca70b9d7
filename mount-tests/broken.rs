//! Issue 25.6: broken names and broken refs, as a files `.git` keeps them. t1430-,
//! t6301- and t1450-like steps by git 2.39 through a `--over` mount and on a files `.git`
//! twin give the same outcomes (exit codes, warnings, `for-each-ref`, `fsck`); broken refs
//! survive a remount, are kept beside the stack (never in it), and a ref written by git
//! 2.47 on the stack drops the broken one of its name. A branch overwritten with junk, read,
//! repaired and emptied in place reads as on disk at every step (the kernel's inode of
//! the ref file turns into the broken file's and back).

use std::fs;
use std::process::Command;

use crate::harness::{check, stage, Ctx, Mount, Repo, TestResult};

/// The steps, run by bash in a work tree whose `.git` is a files git directory or the
/// mount. Every outcome is printed: the command, its exit code, its stdout, its stderr
/// (`! ` lines); `main`'s id is shown as MAIN (abbreviated: SHORT) and the work tree as
/// WORK.
const STEPS: &str = r#"
G=/usr/bin/git
main=$($G rev-parse refs/heads/main)
short=$($G rev-parse --short refs/heads/main)
err=$(mktemp)
trap 'rm -f "$err"' EXIT
run() {
    out=$("$@" 2>"$err"); rc=$?
    echo "\$ $* -> $rc" | sed "s/$main/MAIN/g"
    [ -n "$out" ] && echo "$out" | sed -e "s/$main/MAIN/g" -e "s/$short/SHORT/g"
    sed -e "s#$PWD#WORK#g" -e "s/$main/MAIN/g" -e 's/^/! /' "$err"
}
heads() { ls .git/refs/heads | grep -v '^main$'; }
cp .git/refs/heads/main .git/refs/heads/broken...ref; echo "cp rc=$?"
run $G branch
run $G for-each-ref
run $G branch -D broken...ref
run test -e .git/refs/heads/broken...ref
cp .git/refs/heads/main .git/refs/heads/broken...ref
run $G update-ref -d refs/heads/broken...ref
run test -e .git/refs/heads/broken...ref
mkdir -p .git/refs/heads/dir.lock; echo "mkdir rc=$?"
cp .git/refs/heads/main .git/refs/heads/dir.lock/x; echo "cp rc=$?"
cp .git/refs/heads/main .git/refs/heads/at@{x; echo "cp rc=$?"
run $G for-each-ref
run rm -r .git/refs/heads/dir.lock .git/refs/heads/at@{x
printf "ref: refs/heads/broken...ref\n" >.git/refs/heads/badname; echo "printf rc=$?"
run $G rev-parse --verify badname
run $G for-each-ref
run $G update-ref --no-deref -d refs/heads/badname
run test -e .git/refs/heads/badname
: > .git/refs/heads/empty; echo "empty rc=$?"
echo 0000000000000000000000000000000000000000 > .git/refs/heads/zero; echo "zero rc=$?"
echo gobbledigook > .git/refs/heads/junk; echo "junk rc=$?"
run heads
run cat .git/refs/heads/junk
run wc -c .git/refs/heads/empty
run $G for-each-ref
run $G fsck
run $G update-ref refs/heads/junk $main
run $G pack-refs --all
run grep -c -e junk -e zero -e empty .git/packed-refs
mv .git/refs/heads/zero .git/refs/heads/zero2; echo "mv rc=$?"
run heads
echo gobbledigook > .git/refs/heads/main.lock; echo "lock rc=$?"
mv .git/refs/heads/main.lock .git/refs/heads/junk2; echo "mv lock rc=$?"
run cat .git/refs/heads/junk2
echo $main > .git/refs/heads/junk2; echo "repair rc=$?"
run $G rev-parse --verify junk2
run rm .git/refs/heads/empty .git/refs/heads/zero2 .git/refs/heads/junk .git/refs/heads/junk2
$G branch b
echo junk > .git/refs/heads/b; echo "over rc=$?"
run cat .git/refs/heads/b
run $G for-each-ref
$G rev-parse main > .git/refs/heads/b; echo "repair rc=$?"
run cat .git/refs/heads/b
run $G for-each-ref
: > .git/refs/heads/b; echo "trunc rc=$?"
run wc -c .git/refs/heads/b
run $G branch -D b
run test -e .git/refs/heads/b
run rm .git/refs/heads/b
run $G branch -D b
$G branch c
mv .git/refs/heads/c .git/refs/heads/c..d; echo "mv ref rc=$?"
run heads
run cat .git/refs/heads/c..d
run $G rev-parse --verify -q c
mv .git/refs/heads/c..d .git/refs/heads/c; echo "mv back rc=$?"
run $G rev-parse --verify c
run $G branch -D c
run heads
run heads
run $G for-each-ref
run $G fsck
rm -f "$err"
"#;

/// The names a broken refs' file holds (`<hex name> <hex content> …` lines).
fn store_names(store: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(store);
    text.lines()
        .skip(1)
        .filter_map(|l| l.split(' ').next())
        .map(|h| {
            let bytes: Vec<u8> = (0..h.len() / 2)
                .filter_map(|i| u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok())
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .collect()
}

pub fn broken_refs_as_on_a_files_gitdir(ctx: &Ctx) -> TestResult {
    let (on_disk, through, repo) = crate::harness::on_files_and_mount(ctx, "t1430-like", STEPS)?;
    // The steps did meet what they test (else both sides could agree on nothing).
    crate::harness::same_as_files(
        "t1430-like",
        &on_disk,
        &through,
        &[
            "ignoring ref with broken name refs/heads/broken...ref",
            "ignoring broken ref refs/heads/junk",
            "refs/heads/zero: invalid sha1 pointer",
            "reference broken",
            "$ /usr/bin/git rev-parse --verify junk2 -> 0",
        ],
    )?;
    // Everything was removed again: no store file is left.
    let left = fs::read(repo.gitdir.join("reftablefs-broken-refs")).map(|s| store_names(&s));
    ensure!(
        left.is_err(),
        "the broken refs' file outlived its last ref: {left:?}"
    );
    Ok(())
}
mount_test!(broken_refs_as_on_a_files_gitdir, timeout = 300);

pub fn broken_refs_survive_remount_and_yield_to_the_stack(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("r"), "reftable")?;
    let main = repo.commit("one")?;
    let mnt = ctx.path("mnt");
    let gitdir = repo.gitdir.to_string_lossy().into_owned();
    let m = Mount::start(&repo.gitdir, &mnt, &[])?;
    let heads = mnt.join("refs/heads");
    let r = (|| -> TestResult {
        fs::write(heads.join("junk"), b"junk\n")?;
        fs::write(heads.join("broken...ref"), format!("{main}\n"))?;
        fs::write(heads.join("empty"), b"")?;
        Ok(())
    })();
    m.unmount()?;
    r?;
    // Beside the stack, never in it: git 2.47 sees only main.
    let refs = repo.git(&["for-each-ref", "--format=%(refname)"])?;
    ensure!(refs == "refs/heads/main\n", "the stack holds {refs:?}");
    let store = fs::read(repo.gitdir.join("reftablefs-broken-refs"))?;
    ensure!(
        store.starts_with(b"# reftablefs broken refs v2\n"),
        "store file: {store:?}"
    );
    let m = Mount::start(&repo.gitdir, &mnt, &[])?;
    let r = (|| -> TestResult {
        let mut names: Vec<String> = fs::read_dir(&heads)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        names.sort();
        ensure!(
            names == ["broken...ref", "empty", "junk", "main"],
            "after a remount: {names:?}"
        );
        ensure!(fs::read(heads.join("junk"))? == b"junk\n", "junk's bytes");
        ensure!(fs::read(heads.join("empty"))?.is_empty(), "empty's bytes");
        // Nothing was packed: packed-refs is absent (as in a files .git), or without it.
        let packed = match fs::read(mnt.join("packed-refs")) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            r => r?,
        };
        ensure!(
            !packed.windows(4).any(|w| w == b"junk"),
            "packed-refs shows a broken ref"
        );
        // git 2.47 writes junk on the stack: the real ref shadows and drops the broken one.
        stage("git 2.47 update-ref refs/heads/junk on the stack");
        let out = Command::new("git")
            .args(["--git-dir", &gitdir, "update-ref", "refs/heads/junk", &main])
            .output()?;
        check(&out, "git update-ref on the stack")?;
        let want = format!("{main}\n");
        let seen = crate::harness::wait_for(std::time::Duration::from_secs(5), || {
            match fs::read(heads.join("junk")) {
                Ok(c) if c == want.as_bytes() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
        ensure!(seen.is_ok(), "junk still reads {seen:?}");
        // A valid write through the mount replaces another.
        let mut f = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(heads.join("empty"))?;
        std::io::Write::write_all(&mut f, format!("{main}\n").as_bytes())?;
        f.sync_all()?;
        drop(f);
        let refs = repo.git(&["for-each-ref", "--format=%(refname)"])?;
        ensure!(
            refs == "refs/heads/empty\nrefs/heads/junk\nrefs/heads/main\n",
            "the stack after the repairs: {refs:?}"
        );
        Ok(())
    })();
    m.unmount()?;
    r?;
    let store = fs::read(repo.gitdir.join("reftablefs-broken-refs"))?;
    let left = store_names(&store);
    ensure!(
        left == ["refs/heads/broken...ref"],
        "the store keeps {left:?}"
    );
    Ok(())
}
mount_test!(
    broken_refs_survive_remount_and_yield_to_the_stack,
    timeout = 120
);
