//! Security of the mount (issue 23, item 6): nothing outside GITDIR is ever reached through
//! it, and other users get what GITDIR's modes give them, no more.
//!
//! * [`symlink_swap_reaches_nothing_outside`]: a directory of GITDIR swapped for a symbolic
//!   link to a directory outside while the kernel still holds its entry (within the 1 s
//!   entry TTL of passed-through names) is not followed by the mount: reading, listing,
//!   creating, removing, renaming and changing modes through it fail, and nothing outside
//!   is read or changed. The links point outside by a relative target that, seen from the
//!   mountpoint (two levels deeper), names nothing: only the mount itself following them
//!   could reach the outside files, so the test cannot pass by the kernel's own resolution
//!   and does not depend on timing.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use crate::harness::{stage, Ctx, Mount, Repo, TestResult};

/// What every file outside GITDIR holds.
const SECRET: &[u8] = b"SECRET outside GITDIR\n";

/// Replaces `GITDIR/rel` by a symbolic link to `target` (relative to `rel`'s directory),
/// keeping the original as `rel.orig`.
fn swap(gitdir: &Path, rel: &str, target: &str) -> TestResult {
    let at = gitdir.join(rel);
    fs::rename(&at, gitdir.join(format!("{rel}.orig")))?;
    symlink(target, &at)?;
    Ok(())
}

/// What an operation that should have failed gave instead.
trait Shown {
    fn shown(&self) -> String;
}

impl Shown for () {
    fn shown(&self) -> String {
        "succeeded".into()
    }
}

impl Shown for Vec<u8> {
    fn shown(&self) -> String {
        format!("read {:?}", String::from_utf8_lossy(self))
    }
}

impl Shown for Vec<String> {
    fn shown(&self) -> String {
        format!("listed {self:?}")
    }
}

/// `None` when `r` failed (through a swapped directory an error is the only right
/// answer), else what it did.
fn went_through<T: Shown>(r: std::io::Result<T>) -> Option<String> {
    r.ok().map(|v| v.shown())
}

/// Every name in `dir` (sorted).
fn names(dir: &Path) -> TestResult<Vec<String>> {
    let mut n: Vec<String> = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    n.sort();
    Ok(n)
}

pub fn symlink_swap_reaches_nothing_outside(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("one")?;
    let git = repo.gitdir.clone();
    // Outside GITDIR: ctx/outside, `../../../outside` from GITDIR/objects; from
    // MNT/objects (MNT = ctx/m/n/mnt) the same target names ctx/m/outside, which does not
    // exist.
    let out = ctx.path("outside");
    fs::create_dir_all(out.join("deep/b"))?;
    for f in ["secret.txt", "victim", "victim2", "deep/b/secret.txt"] {
        fs::write(out.join(f), SECRET)?;
    }
    fs::set_permissions(out.join("secret.txt"), fs::Permissions::from_mode(0o600))?;
    let outside_before = names(&out)?;
    // Inside GITDIR: one directory per attack (a swapped name stays a link in the
    // kernel's cache for a while), each holding one file.
    const ATTACKS: usize = 8;
    for i in 0..ATTACKS {
        fs::create_dir_all(git.join(format!("objects/sub{i}")))?;
        fs::write(git.join(format!("objects/sub{i}/inside")), b"inside\n")?;
    }
    fs::create_dir_all(git.join("objects/a/b"))?;
    fs::write(git.join("objects/a/b/inside"), b"inside\n")?;
    fs::write(git.join("objects/mine"), b"mine\n")?;
    fs::write(git.join("objects/f"), b"f\n")?;
    // A link GITDIR may have on purpose: hooks kept in the work tree.
    fs::create_dir_all(repo.work.join("githooks"))?;
    fs::write(
        repo.work.join("githooks/pre-commit"),
        b"#!/bin/sh\nexit 0\n",
    )?;
    fs::remove_dir_all(git.join("hooks"))?;
    symlink(repo.work.join("githooks"), git.join("hooks"))?;

    let m = Mount::start(&git, &ctx.path("m/n/mnt"), &[])?;
    let mo = |rel: &str| m.path(&format!("objects/{rel}"));
    // Each attack: the kernel takes the directory's entry (a listing that shows its
    // file), the directory is swapped for a link to `outside`, then the attack runs at
    // once, through the entry the kernel holds. Every attack runs; all that went through
    // is reported at the end.
    type Attack<'a> = (&'a str, &'a dyn Fn(&str) -> Option<String>);
    let attacks: [Attack; ATTACKS] = [
        ("cat MNT/objects/sub/secret.txt", &|s| {
            went_through(fs::read(mo(&format!("{s}/secret.txt"))))
        }),
        ("ls MNT/objects/sub", &|s| {
            went_through(names(&mo(s)).map_err(std::io::Error::other))
        }),
        ("echo x > MNT/objects/sub/p", &|s| {
            went_through(fs::write(mo(&format!("{s}/p")), "x\n"))
        }),
        ("mkdir MNT/objects/sub/d", &|s| {
            went_through(fs::create_dir(mo(&format!("{s}/d"))))
        }),
        ("rm MNT/objects/sub/victim", &|s| {
            went_through(fs::remove_file(mo(&format!("{s}/victim"))))
        }),
        ("mv MNT/objects/sub/victim2 MNT/objects/stolen", &|s| {
            went_through(fs::rename(mo(&format!("{s}/victim2")), mo("stolen")))
        }),
        ("mv MNT/objects/mine MNT/objects/sub/mine", &|s| {
            went_through(fs::rename(mo("mine"), mo(&format!("{s}/mine"))))
        }),
        ("ln -s x MNT/objects/sub/l", &|s| {
            went_through(symlink("x", mo(&format!("{s}/l"))))
        }),
    ];
    let mut leaks: Vec<String> = Vec::new();
    for (i, (what, attack)) in attacks.iter().enumerate() {
        let sub = format!("sub{i}");
        stage(&format!("symlink swap: {what}"));
        let listed = names(&mo(&sub)).map_err(|e| format!("{what}: ls {sub}: {e}"))?;
        ensure!(listed == ["inside"], "{sub} lists {listed:?}");
        swap(&git, &format!("objects/{sub}"), "../../../outside")?;
        if let Some(got) = attack(&sub) {
            leaks.push(format!("{what}: {got}"));
        }
    }
    // A directory higher up swapped: objects/a (its child b is held) for outside/deep,
    // which has b/secret.txt.
    stage("symlink swap of an intermediate directory");
    ensure!(names(&mo("a/b"))? == ["inside"], "a/b does not list inside");
    swap(&git, "objects/a", "../../../outside/deep")?;
    let below = [
        (
            "cat MNT/objects/a/b/secret.txt",
            went_through(fs::read(mo("a/b/secret.txt"))),
        ),
        (
            "echo x > MNT/objects/a/b/p",
            went_through(fs::write(mo("a/b/p"), "x\n")),
        ),
        (
            "rm MNT/objects/a/b/secret.txt",
            went_through(fs::remove_file(mo("a/b/secret.txt"))),
        ),
    ];
    // The last component swapped: chmod through the held entry of a file now a link.
    stage("symlink swap of a file, then chmod");
    fs::metadata(mo("f"))?;
    swap(&git, "objects/f", "../../../outside/secret.txt")?;
    let chmod = (
        "chmod 666 MNT/objects/f (now a link)",
        went_through(fs::set_permissions(
            mo("f"),
            fs::Permissions::from_mode(0o666),
        )),
    );
    for (what, got) in below.into_iter().chain([chmod]) {
        if let Some(got) = got {
            leaks.push(format!("{what}: {got}"));
        }
    }
    // Nothing outside was made, removed or changed either.
    stage("checking outside");
    let outside_after = names(&out)?;
    if outside_after != outside_before {
        leaks.push(format!(
            "the directory outside GITDIR changed: {outside_before:?} -> {outside_after:?}"
        ));
    }
    for f in ["secret.txt", "victim", "victim2", "deep/b/secret.txt"] {
        match fs::read(out.join(f)) {
            Ok(now) if now == SECRET => {}
            Ok(_) => leaks.push(format!("outside {f} was written")),
            Err(e) => leaks.push(format!("outside {f}: {e}")),
        }
    }
    let mode = fs::metadata(out.join("secret.txt"))?.permissions().mode() & 0o777;
    if mode != 0o600 {
        leaks.push(format!("outside secret.txt's mode became {mode:o}"));
    }
    if !git.join("objects/mine").exists() || git.join("objects/stolen").exists() {
        leaks.push("a rename moved a file across GITDIR's boundary".into());
    }
    ensure!(
        leaks.is_empty(),
        "reached outside GITDIR through the mount:\n  {}",
        leaks.join("\n  ")
    );
    // Links in GITDIR are links through the mount, resolved by the client's kernel.
    ensure!(
        fs::symlink_metadata(m.path("hooks"))?
            .file_type()
            .is_symlink(),
        "hooks is not a link through the mount"
    );
    ensure!(
        fs::read_link(m.path("hooks"))? == repo.work.join("githooks"),
        "readlink hooks"
    );
    ensure!(
        fs::read(m.path("hooks/pre-commit"))? == b"#!/bin/sh\nexit 0\n",
        "the hook through the link"
    );
    // The mount still serves the repository.
    ensure!(
        fs::read_to_string(m.path("HEAD"))? == "ref: refs/heads/main\n",
        "HEAD"
    );
    ensure!(
        fs::read(mo("sub0.orig/inside"))? == b"inside\n",
        "an ordinary file"
    );
    m.unmount()
}
mount_test!(symlink_swap_reaches_nothing_outside, timeout = 120);
