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
//! * [`other_users_get_what_the_modes_give`]: `mount --over` lets other users in
//!   (`allow_other`) and has the kernel check their requests against the modes shown
//!   (`default_permissions`), the mount root and the ref view showing GITDIR's own. A user
//!   made for the test (`useradd`; the tests run as root here and in CI, elsewhere a
//!   visible SKIP line) gets `EACCES` for every name inside a mode-700 `.git`, also names
//!   the kernel holds for the owner; in a repository shared with a group
//!   (`git init --shared=0660`, the user in the group) it reads refs, objects and config,
//!   runs git 2.39, writes an object and a ref, while a file of mode 600 and the same user
//!   outside the group get `EACCES`. The user and its group are removed on every exit path.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::harness::{check, note, stage, Ctx, Mount, Repo, TestResult};

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

/// A user and a group made for a test, removed (`userdel`, `groupdel`) when dropped: on
/// every exit path, panics included.
struct TestUser {
    name: String,
    group: String,
    uid: u32,
    gid: u32,
    /// The extra group (the shared repository's).
    shared_gid: u32,
    made_user: bool,
    made_group: bool,
}

/// Runs a command as root with a bound; fails unless it exits 0; returns stdout.
fn admin(prog: &str, args: &[&str]) -> TestResult<String> {
    stage(&format!("{prog} {}", args.join(" ")));
    let out = Command::new("timeout")
        .arg("30")
        .arg(prog)
        .args(args)
        .stdin(Stdio::null())
        .env("LC_ALL", "C")
        .output()?;
    check(&out, &format!("{prog} {}", args.join(" ")))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether this process runs as root (effective uid 0).
fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

impl TestUser {
    /// A new user (with its own group) and a second group it may join; `None` (after a
    /// SKIP line) when this process cannot make users.
    fn create() -> TestResult<Option<TestUser>> {
        if !is_root() {
            note("SKIP other users: not root (useradd and setpriv need root; CI runs as root)");
            return Ok(None);
        }
        for tool in ["useradd", "userdel", "groupadd", "groupdel", "setpriv"] {
            if admin("sh", &["-c", &format!("command -v {tool}")]).is_err() {
                note(&format!("SKIP other users: {tool} is missing"));
                return Ok(None);
            }
        }
        let tag = format!(
            "{}{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_micros())
                .unwrap_or(0)
        );
        let mut u = TestUser {
            name: format!("rtfs-sec-{tag}"),
            group: format!("rtfs-shr-{tag}"),
            uid: 0,
            gid: 0,
            shared_gid: 0,
            made_user: false,
            made_group: false,
        };
        admin("groupadd", &[&u.group])?;
        u.made_group = true;
        admin(
            "useradd",
            &[
                "-M",
                "-U",
                "-s",
                "/usr/sbin/nologin",
                "-d",
                "/nonexistent",
                &u.name,
            ],
        )?;
        u.made_user = true;
        u.uid = admin("id", &["-u", &u.name])?.parse()?;
        u.gid = admin("id", &["-g", &u.name])?.parse()?;
        let entry = admin("getent", &["group", &u.group])?;
        u.shared_gid = entry.split(':').nth(2).unwrap_or("").parse()?;
        ensure!(
            u.uid != 0 && u.gid != 0,
            "the test user is root: {}",
            u.name
        );
        Ok(Some(u))
    }

    /// Runs `prog args` as this user (with the shared group when `in_group`, else with no
    /// extra group), from `/`, with an empty environment but `PATH`, bounded to 30 s.
    fn run(&self, in_group: bool, prog: &str, args: &[&str]) -> TestResult<Output> {
        stage(&format!("as {}: {prog} {}", self.name, args.join(" ")));
        let groups = if in_group {
            format!("--groups={}", self.shared_gid)
        } else {
            "--clear-groups".to_string()
        };
        Ok(Command::new("timeout")
            .arg("30")
            .arg("setpriv")
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg(groups)
            .arg("--")
            .arg(prog)
            .args(args)
            .current_dir("/")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LC_ALL", "C")
            .env("HOME", "/nonexistent")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::null())
            .output()?)
    }

    /// `prog args` as this user must fail with `EACCES` ("Permission denied").
    fn denied(&self, in_group: bool, prog: &str, args: &[&str]) -> Result<(), String> {
        let what = format!("{prog} {}", args.join(" "));
        let out = self
            .run(in_group, prog, args)
            .map_err(|e| format!("{what}: {e}"))?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            let printed = String::from_utf8_lossy(&out.stdout);
            let first = printed.lines().next().unwrap_or("").trim();
            return Err(format!("{what}: allowed (printed {first:?}…)"));
        }
        if !err.contains("Permission denied") {
            return Err(format!("{what}: failed, but not with EACCES: {err}"));
        }
        Ok(())
    }

    /// `prog args` as this user must succeed; returns its stdout.
    fn allowed(&self, in_group: bool, prog: &str, args: &[&str]) -> Result<String, String> {
        let what = format!("{prog} {}", args.join(" "));
        let out = self
            .run(in_group, prog, args)
            .map_err(|e| format!("{what}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{what}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        if self.made_user {
            let _ = admin("userdel", &[&self.name]);
        }
        if self.made_group {
            let _ = admin("groupdel", &[&self.group]);
        }
    }
}

/// `path` as a string, for command lines.
fn s(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

pub fn other_users_get_what_the_modes_give(ctx: &Ctx) -> TestResult {
    let Some(user) = TestUser::create()? else {
        return Ok(());
    };
    // The test's own directory is private (0700): let the user reach the work trees.
    fs::set_permissions(ctx.path(""), fs::Permissions::from_mode(0o755))?;
    let mut failures: Vec<String> = Vec::new();

    // A private repository: `.git` of mode 700.
    let private = Repo::init(&ctx.path("private"), "reftable")?;
    private.commit("one")?;
    fs::set_permissions(&private.gitdir, fs::Permissions::from_mode(0o700))?;
    let m = Mount::start_over(&private.work)?;
    let mode = fs::metadata(&m.mnt)?.permissions().mode() & 0o7777;
    if mode != 0o700 {
        failures.push(format!(
            "private .git: the mount root shows mode {mode:o}, not the real .git's 700"
        ));
    }
    // Before each check the owner (root) reads or lists the name and stats it, so the
    // kernel holds it and its attributes: the other user must not get them either.
    stage("another user on the private .git");
    for (prog, rel) in [
        ("stat", "HEAD"),
        ("stat", "refs/heads/main"),
        ("stat", "refs/heads"),
        ("stat", "config"),
        ("stat", "objects"),
        ("stat", "index"),
        ("stat", "logs/HEAD"),
        ("cat", "HEAD"),
        ("cat", "refs/heads/main"),
        ("cat", "logs/HEAD"),
        ("cat", "config"),
        ("ls", "objects"),
        ("ls", "refs/heads"),
        ("ls", ""),
        ("touch", "objects/by-another-user"),
        ("mkdir", "refs/heads/x"),
    ] {
        let path = m.path(rel);
        // What the owner holds: the name, or for a creation the directory it goes in.
        let held = if matches!(prog, "touch" | "mkdir") {
            path.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            path.clone()
        };
        // Reading or listing marks the atime stale: the stat comes last, so the kernel
        // holds fresh attributes.
        if fs::symlink_metadata(&held)?.is_dir() {
            fs::read_dir(&held)?.count();
        } else {
            fs::read(&held)?;
        }
        fs::metadata(&held).map_err(|e| format!("the owner stats {rel}: {e}"))?;
        if let Err(e) = user.denied(false, prog, &[&s(&path)]) {
            failures.push(format!("private .git: {e}"));
        }
    }
    let git = user.run(
        false,
        "/usr/bin/git",
        &[
            "-c",
            "safe.directory=*",
            "-C",
            &s(&private.work),
            "rev-parse",
            "HEAD",
        ],
    )?;
    if git.status.success() {
        failures.push("private .git: git 2.39 rev-parse HEAD worked for another user".into());
    }
    m.unmount()?;
    ensure!(
        !private.gitdir.join("objects/by-another-user").exists(),
        "another user created a file in the private .git"
    );

    // A repository shared with a group: directories 2770, files 660, group `shared`.
    stage("a shared repository");
    let shared = Repo::init_with(&ctx.path("shared"), "reftable", &["--shared=0660"])?;
    let id = shared.commit("one")?;
    admin("chgrp", &["-R", &user.group, &s(&shared.gitdir)])?;
    fs::write(shared.gitdir.join("private-note"), b"owner only\n")?;
    fs::set_permissions(
        shared.gitdir.join("private-note"),
        fs::Permissions::from_mode(0o600),
    )?;
    let m = Mount::start_over(&shared.work)?;
    let g = |rel: &str| s(&m.path(rel));
    let in_group = |prog: &str, args: &[&str]| user.allowed(true, prog, args);
    let mut expect = |what: &str, got: Result<String, String>, want: Option<&str>| match got {
        Err(e) => failures.push(format!("shared, in the group: {what}: {e}")),
        Ok(out) => {
            if let Some(want) = want {
                if out.trim() != want {
                    failures.push(format!(
                        "shared, in the group: {what}: printed {out:?}, not {want:?}"
                    ));
                }
            }
        }
    };
    expect("ls .git", in_group("ls", &[&g("")]), None);
    expect(
        "cat .git/HEAD",
        in_group("cat", &[&g("HEAD")]),
        Some("ref: refs/heads/main"),
    );
    expect(
        "cat .git/refs/heads/main",
        in_group("cat", &[&g("refs/heads/main")]),
        Some(&id),
    );
    expect("cat .git/config", in_group("cat", &[&g("config")]), None);
    expect("ls .git/objects", in_group("ls", &[&g("objects")]), None);
    expect(
        "git 2.39 rev-parse HEAD",
        in_group(
            "/usr/bin/git",
            &[
                "-c",
                "safe.directory=*",
                "-C",
                &s(&shared.work),
                "rev-parse",
                "HEAD",
            ],
        ),
        Some(&id),
    );
    expect(
        "write a file in .git/objects",
        in_group(
            "sh",
            &["-c", &format!("echo x > '{}'", g("objects/by-member"))],
        ),
        None,
    );
    expect(
        "git 2.39 update-ref refs/heads/by-member HEAD",
        in_group(
            "/usr/bin/git",
            &[
                "-c",
                "safe.directory=*",
                "-C",
                &s(&shared.work),
                "update-ref",
                "refs/heads/by-member",
                "HEAD",
            ],
        ),
        None,
    );
    if let Err(e) = user.denied(true, "cat", &[&g("private-note")]) {
        failures.push(format!("shared, in the group, a file of mode 600: {e}"));
    }
    for (prog, rel) in [("ls", ""), ("cat", "HEAD"), ("stat", "refs/heads/main")] {
        if let Err(e) = user.denied(false, prog, &[&g(rel)]) {
            failures.push(format!("shared, not in the group: {e}"));
        }
    }
    let fsynced = fs::File::open(&m.mnt).and_then(|d| d.sync_all());
    m.unmount()?;
    fsynced?;
    if fs::read(shared.gitdir.join("objects/by-member"))
        .ok()
        .as_deref()
        != Some(b"x\n")
    {
        failures.push("shared: the member's object file is not in the real .git".into());
    }
    let by_member = shared.git_output(&["rev-parse", "--verify", "-q", "refs/heads/by-member"])?;
    if String::from_utf8_lossy(&by_member.stdout).trim() != id {
        failures.push("shared: the member's ref is not in the stack (git 2.47)".into());
    }
    ensure!(
        failures.is_empty(),
        "other users did not get what the modes give:\n  {}",
        failures.join("\n  ")
    );
    Ok(())
}
mount_test!(other_users_get_what_the_modes_give, timeout = 240);

/// A linked worktree's stack is reached beneath GITDIR too: `worktrees/<id>` swapped for a
/// link to another repository's worktree (outside GITDIR) while the kernel holds its entry
/// is not followed by the mount's worktree view — neither when the view starts after the
/// swap nor when a view started before it reloads. Reads never show the outside
/// worktree's HEAD or refs, and a per-worktree ref written through the view never lands
/// in the outside stack.
pub fn worktree_swap_reaches_nothing_outside(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("base")?;
    let outside = Repo::init(&ctx.path("outside"), "reftable")?;
    let oid = outside.commit("outside")?;
    outside.git(&["branch", "outside-marker"])?;
    // Worktrees named `wt` in both (git names a worktree after its directory).
    for (r, dir) in [(&repo, "in/wt"), (&outside, "out/wt")] {
        let dir = ctx.path(dir);
        r.git(&["worktree", "add", "-q", "--detach", &dir.to_string_lossy()])?;
    }
    // The outside worktree's HEAD names a branch that only exists outside.
    outside.git(&[
        "-C",
        &ctx.path("out/wt").to_string_lossy(),
        "symbolic-ref",
        "HEAD",
        "refs/heads/outside-marker",
    ])?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    // The view starts (and the kernel holds the directories) before the swap.
    fs::create_dir_all(m.path("worktrees/wt/refs/bisect"))?;
    let before = fs::read(m.path("worktrees/wt/HEAD"))?;
    ensure!(
        !String::from_utf8_lossy(&before).contains("outside"),
        "HEAD before the swap: {before:?}"
    );
    // From GITDIR/worktrees/ this reaches the outside repository's worktree; from the
    // mountpoint (two levels less deep) it names nothing.
    swap(
        &repo.gitdir,
        "worktrees/wt",
        "../../../outside/.git/worktrees/wt",
    )?;
    // At once, within the kernel's entry TTL (1 s): the kernel still sends these to the
    // view (after the TTL it resolves the link itself, to nothing).
    let mut seen = Vec::new();
    for _ in 0..5 {
        if let Ok(head) = fs::read(m.path("worktrees/wt/HEAD")) {
            seen.push(String::from_utf8_lossy(&head).into_owned());
        }
        if let Ok(entries) = fs::read_dir(m.path("worktrees/wt/refs")) {
            for e in entries.flatten() {
                seen.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    ensure!(
        !seen.iter().any(|s| s.contains("outside")),
        "the view served the outside worktree: {seen:?}"
    );
    let _ = fs::write(
        m.path("worktrees/wt/refs/bisect/planted"),
        format!("{oid}\n"),
    );
    let _ = fs::File::open(&m.mnt).and_then(|f| f.sync_all());
    m.unmount()?;
    let refs = outside.git_output(&[
        "-C",
        &ctx.path("out/wt").to_string_lossy(),
        "for-each-ref",
        "--format=%(refname)",
        "refs/bisect/",
    ])?;
    ensure!(
        !String::from_utf8_lossy(&refs.stdout).contains("planted"),
        "a ref written through the view landed in the outside worktree's stack"
    );
    Ok(())
}
mount_test!(worktree_swap_reaches_nothing_outside, timeout = 120);
