//! Issue 25, t3210 30 ("pack symlinked packed-refs"): `packed-refs` made a symbolic link
//! to another file of `.git` is adopted by the ref view (`src/fs/state/packed_link.rs`).
//! git 2.39 runs the test's sequence through a mount over `.git` and on a files `.git`
//! twin, with the same output: the refs come back through the link, `pack-refs --all
//! --prune` writes the link's target (locking `T.lock`), `readlink` names it. The link
//! survives a remount; deleting a packed ref rewrites the target; `rm packed-refs` leaves
//! the target a plain file with what it held and deletes the refs only packed; a dangling
//! link is written through and `rm` of its target keeps it. git 2.47, reading the stack
//! alone after each unmount, sees the refs git 2.39 sees on the twin. Both layouts.

use std::fs;
use std::path::Path;

use crate::harness::{check, refs239, stage, steps239, Ctx, Mount, Repo, TestResult};

/// Shell helpers: `run` prints a command's exit status and its output with object ids
/// masked (the twin's commits are not the mount's).
const PRELUDE: &str = r#"
G=/usr/bin/git
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {
    out=$("$@" 2>"$tmp/err"); rc=$?
    echo "\$ $* -> $rc" | sed -E -e "s#$tmp#TMP#g" -e "s/[0-9a-f]{40}/ID/g"
    [ -n "$out" ] && echo "$out" | sed -E 's/[0-9a-f]{40}/ID/g'
    sed -E -e "s#$PWD#WORK#g" -e 's/[0-9a-f]{40}/ID/g' -e 's/^/! /' "$tmp/err"
}
"#;

/// t3210 30 with the refs it finds there (some packed only, an annotated tag).
const PHASE_A: &str = r#"
$G branch b1; $G tag t1; $G tag -a -m msg t2
run $G pack-refs --all --prune
run $G update-ref refs/heads/lossy refs/heads/main
$G for-each-ref >"$tmp/before"
run mv .git/packed-refs .git/my-deviant-packed-refs
run $G for-each-ref
run ln -s my-deviant-packed-refs .git/packed-refs
$G for-each-ref >"$tmp/linked"; run cmp "$tmp/before" "$tmp/linked"
run $G pack-refs --all --prune
$G for-each-ref >"$tmp/packed"; run cmp "$tmp/before" "$tmp/packed"
run test -h .git/packed-refs
run readlink .git/packed-refs
run cat .git/my-deviant-packed-refs
run ls .git/refs/heads .git/refs/tags
run sh -c 'ls -A .git | grep -e packed -e deviant'
"#;

/// After a remount: the link is still there; a packed ref deleted through it; the link
/// removed; a dangling link written through, its target removed, the link removed.
const PHASE_B: &str = r#"
main=$($G rev-parse HEAD)
run test -h .git/packed-refs
run readlink .git/packed-refs
run $G for-each-ref
run $G update-ref -d refs/tags/t1
run $G for-each-ref
run cat .git/my-deviant-packed-refs
run rm .git/packed-refs
run test -e .git/packed-refs
run cat .git/my-deviant-packed-refs
run $G for-each-ref
$G update-ref refs/heads/main $main
run $G update-ref refs/heads/c1 $main
run ln -s gone .git/packed-refs
run $G for-each-ref
run test -e .git/gone
run $G pack-refs --all --prune
run cat .git/gone
run test -h .git/packed-refs
run rm .git/gone
run test -h .git/packed-refs
run test -e .git/gone
run $G for-each-ref
run $G update-ref refs/heads/main $main
run $G pack-refs --all
run cat .git/gone
run rm .git/packed-refs
run cat .git/gone
run $G for-each-ref
run sh -c 'ls -A .git | grep -e packed -e deviant -e gone'
"#;

/// The same by git 2.47 on the reftable repository (the stack alone: it is unmounted).
fn refs247(repo: &Repo) -> TestResult<String> {
    repo.git(&["for-each-ref", "--format=%(refname) %(objecttype)"])
}

fn packed_refs_link(ctx: &Ctx, layout: &[&str]) -> TestResult {
    let twin = Repo::init(&ctx.path("files"), "files")?;
    twin.commit("one")?;
    let repo = Repo::init(&ctx.path("r"), "reftable")?;
    repo.commit("one")?;
    let mut phases = Vec::new();
    for (label, script) in [("t3210.30", PHASE_A), ("after a remount", PHASE_B)] {
        let script = format!("{PRELUDE}{script}");
        let on_disk = steps239(ctx, label, "files .git", &twin.work, &script)?;
        let m = Mount::start_over_with(&repo.work, layout)?;
        let through = steps239(ctx, label, "mount", &repo.work, &script);
        // Where nothing links: a link anywhere else is refused at the call.
        let refused = if label == PHASE_B_LABEL {
            refusals(&repo.gitdir)
        } else {
            Ok(())
        };
        m.unmount()?;
        let through = through?;
        refused?;
        crate::harness::same_as_files(label, &on_disk, &through, &[])?;
        let (want, have) = (refs239(ctx, &twin)?, refs247(&repo)?);
        ensure!(
            want == have,
            "{label}: git 2.47 on the stack:\n{have}\ngit 2.39 on the twin:\n{want}"
        );
        phases.push(on_disk);
    }
    // The steps did meet what they are about (else both sides could agree on nothing).
    let a = phases.first().cloned().unwrap_or_default();
    for want in [
        "$ cmp TMP/before TMP/linked -> 0",
        "$ cmp TMP/before TMP/packed -> 0",
        "$ readlink .git/packed-refs -> 0\nmy-deviant-packed-refs",
        "refs/tags/t2\n^ID",
    ] {
        ensure!(a.contains(want), "phase A misses {want:?}:\n{a}");
    }
    let b = phases.get(1).cloned().unwrap_or_default();
    for want in [
        "$ rm .git/gone -> 0\n$ test -h .git/packed-refs -> 0\n$ test -e .git/gone -> 1",
        "$ test -e .git/packed-refs -> 1",
    ] {
        ensure!(b.contains(want), "phase B misses {want:?}:\n{b}");
    }
    ensure!(
        !repo.gitdir.join("reftablefs-packed-link").exists(),
        "the link's file outlived the link"
    );
    Ok(())
}

const PHASE_B_LABEL: &str = "after a remount";

/// Links at `packed-refs` the view does not adopt: refused (`EPERM`), nothing made.
fn refusals(mnt: &Path) -> TestResult {
    for bad in ["../x", "HEAD", "refs", "config", "sub/x"] {
        stage(&format!("ln -s {bad} packed-refs (refused)"));
        let r = std::os::unix::fs::symlink(bad, mnt.join("packed-refs"));
        ensure!(
            r.as_ref().map_err(|e| e.raw_os_error()) == Err(Some(libc::EPERM)),
            "ln -s {bad} packed-refs: {r:?}"
        );
        ensure!(
            fs::symlink_metadata(mnt.join("packed-refs")).is_err(),
            "a refused link shows"
        );
    }
    let out = std::process::Command::new("/usr/bin/git")
        .arg("--git-dir")
        .arg(mnt)
        .args(["for-each-ref"])
        .output()?;
    check(&out, "git 2.39 for-each-ref after the refusals")
}

pub fn packed_refs_link_as_on_files(ctx: &Ctx) -> TestResult {
    packed_refs_link(ctx, &[])
}
mount_test!(packed_refs_link_as_on_files, timeout = 300);

pub fn packed_refs_link_in_the_packed_layout(ctx: &Ctx) -> TestResult {
    packed_refs_link(ctx, &["--layout=packed"])
}
mount_test!(packed_refs_link_in_the_packed_layout, timeout = 300);
