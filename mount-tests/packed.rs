//! Packed refs through the mount (issue 25 item 3, issue 26 item 2). Each test compares the
//! mount of a reftable repository with a files-backend twin: a files `.git` holding the
//! same refs and reflogs as loose files (the tree `expected::expected_tree` derives from
//! git, which `expected::generator_matches_files_backend` proves equal to a files `.git`),
//! sharing its objects. git 2.39 (`/usr/bin/git`, files backend only) runs the same commands
//! on both; the trees of ref names and contents (`HEAD`, root refs, `refs/**`, `logs/**`,
//! `packed-refs`) must then be equal, and git 2.47 on the reftable stack must agree.
//!
//! * `prune_leaves_what_a_files_git_leaves`: `pack-refs --all --prune` leaves the refs in
//!   `packed-refs` only; `rm` of a pruned name fails with ENOENT; the stack is unchanged;
//!   so it stays after an unmount and a mount (`GITDIR/reftablefs-packed`).
//! * `branch_d_of_a_packed_ref_deletes_it`: git 2.39's `branch -D` and `tag -d` of packed-only
//!   refs (a rewrite of `packed-refs`) delete them from the stack.
//! * `a_ref_written_after_packing_is_loose`: a later update shows a loose file over the
//!   old packed entry; `pack-refs --prune` packs it again.
//! * `packed_refs_rewritten_in_place`: `packed-refs` opened read-write and locked with
//!   `flock` (go-git), rewritten in place without one entry: that ref is deleted; go-git's
//!   other way (a `._packed-refs*` temporary file renamed over it) works too.
//! * `packed_refs_absent_until_written`: no `packed-refs` on a fresh mount, nor after
//!   git 2.39 writes and deletes loose refs; `pack-refs` makes it.
//! * `junk_in_packed_refs_is_kept_and_read_back`: junk appended to `packed-refs` reads
//!   back byte for byte (git 2.39 fails on it as on the twin), the stack unchanged, across
//!   a remount; `mv` of a saved copy over it (across devices) restores it.
//! * `rm_packed_refs_deletes_packed_only_refs`: `rm packed-refs` deletes the packed-only
//!   refs (reflogs stay), keeps loose ones, and it stays absent across a remount.
//! * `packed_layout_is_a_gc_ed_files_git`: `mount --layout=packed` shows what git 2.39's
//!   `pack-refs --all` makes of the files twin; git 2.39's `for-each-ref`, `branch -a`,
//!   `show-ref -d` and `rev-parse` print the same; a write shows loose, a prune packs it.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::expected::{build_scenario, expected_tree};
use crate::harness::{
    check, ensure_same_tree, expect_errno, git_env, read_tree, run_cmd, stage, Ctx, Mount, Repo,
    TestResult, Tree,
};

/// Debian's git 2.39: the files-only git the mount is for.
const GIT239: &str = "/usr/bin/git";

/// The reftable repository (mounted) and its files twin.
struct Twins {
    repo: Repo,
    m: Mount,
    /// The files `.git` of the twin.
    files: PathBuf,
    home: PathBuf,
}

impl Twins {
    /// The standard scenario in a reftable repository, its files twin, and the mount
    /// (with `mount_args`).
    fn new(ctx: &Ctx, mount_args: &[&str]) -> TestResult<Twins> {
        let repo = Repo::init(&ctx.path("repo"), "reftable")?;
        build_scenario(&repo)?;
        let files = ctx.path("files.git");
        let home = ctx.path("home");
        fs::create_dir_all(&home)?;
        let out = Command::new("git")
            .args(["init", "-q", "--bare", "--ref-format=files"])
            .arg(&files)
            .env("HOME", &home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()?;
        check(&out, "git init --ref-format=files")?;
        // Its objects are the repository's; its refs and reflogs the loose files git's
        // files backend stores for the same refs.
        fs::write(
            files.join("objects/info/alternates"),
            format!("{}\n", repo.gitdir.join("objects").display()),
        )?;
        fs::remove_dir_all(files.join("refs"))?;
        fs::create_dir_all(files.join("refs/heads"))?;
        fs::create_dir_all(files.join("refs/tags"))?;
        for (name, content) in expected_tree(&repo)? {
            let path = files.join(&name);
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            fs::write(path, content)?;
        }
        let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), mount_args)?;
        Ok(Twins {
            repo,
            m,
            files,
            home,
        })
    }

    /// git 2.39 with `dir` as its git directory; fails unless it exits 0. Returns stdout.
    fn git239(&self, dir: &Path, args: &[&str]) -> TestResult<String> {
        stage(&format!("git 2.39 {} in {}", args.join(" "), dir.display()));
        let mut cmd = Command::new("timeout");
        git_env(&mut cmd, &self.home, "1700000000 +0000")
            .arg("120")
            .arg(GIT239)
            // The twin is bare, the mount's repository is not: both write reflogs.
            .args(["-c", "core.logAllRefUpdates=true"])
            .args(args)
            .env("GIT_DIR", dir)
            .current_dir(&self.repo.work);
        let out = cmd.output()?;
        check(
            &out,
            &format!("git 2.39 {} in {}", args.join(" "), dir.display()),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// git 2.39 with `dir` as its git directory, which must fail. Returns stderr with `dir`
    /// written as `GITDIR`.
    fn git239_fails(&self, dir: &Path, args: &[&str]) -> TestResult<String> {
        stage(&format!(
            "git 2.39 {} in {} (must fail)",
            args.join(" "),
            dir.display()
        ));
        let mut cmd = Command::new("timeout");
        git_env(&mut cmd, &self.home, "1700000000 +0000")
            .arg("120")
            .arg(GIT239)
            .args(args)
            .env("GIT_DIR", dir)
            .current_dir(&self.repo.work);
        let out = cmd.output()?;
        ensure!(
            !out.status.success() && out.status.code() != Some(124),
            "git 2.39 {} in {}: {:?}, expected a failure",
            args.join(" "),
            dir.display(),
            out.status
        );
        Ok(String::from_utf8_lossy(&out.stderr).replace(&*dir.to_string_lossy(), "GITDIR"))
    }

    /// The same git 2.39 command through the mount and on the twin; their output must be
    /// equal.
    fn both(&self, args: &[&str]) -> TestResult<String> {
        let via = self.git239(&self.m.mnt, args)?;
        let files = self.git239(&self.files, args)?;
        ensure!(
            via == files,
            "git 2.39 {}: through the mount\n{via}\non the files twin\n{files}",
            args.join(" ")
        );
        Ok(via)
    }

    /// The ref files of the mount and of the twin are the same; `what` names the step.
    fn same_trees(&self, what: &str) -> TestResult {
        let (mut view, mut files) = (Tree::new(), Tree::new());
        read_tree(&self.m.mnt, "", &mut view)?;
        read_tree(&self.files, "", &mut files)?;
        ensure_same_tree(
            &files,
            &view,
            &format!("{what}: the mount vs the files twin"),
        )
    }

    /// git 2.47 on the reftable stack (after an fsync of the mount) reads what git 2.39
    /// reads from the twin: every ref with its value.
    fn stack_agrees(&self, what: &str) -> TestResult {
        File::open(self.m.path("HEAD"))?.sync_all()?;
        let fmt = "--format=%(refname) %(objectname) %(symref)";
        let stack = self.repo.git(&["for-each-ref", fmt])?;
        let files = self.git239(&self.files, &["for-each-ref", fmt])?;
        ensure!(
            stack == files,
            "{what}: git 2.47 on the stack\n{stack}\ngit 2.39 on the files twin\n{files}"
        );
        Ok(())
    }

    /// `git pack-refs --all --prune` by git 2.39 on both; the trees are equal after.
    fn pack_both(&self, what: &str) -> TestResult {
        self.both(&["pack-refs", "--all", "--prune"])?;
        self.same_trees(what)
    }
}

/// Whether `git rev-parse --verify` by git 2.47 on the stack finds `name`.
fn on_stack(repo: &Repo, name: &str) -> TestResult<bool> {
    Ok(repo
        .git_output(&["rev-parse", "-q", "--verify", name])?
        .status
        .success())
}

/// 25.3: after `pack-refs --all --prune` through the mount the view is the files twin's
/// after the same command: every ref below `refs/` in `packed-refs` only (symrefs stay
/// loose), their directories gone, and `rm` of a pruned name fails with ENOENT, as in the
/// files `.git`. The stack is not written.
pub fn prune_leaves_what_a_files_git_leaves(ctx: &Ctx) -> TestResult {
    let t = Twins::new(ctx, &[])?;
    t.same_trees("before")?;
    let tables = t.repo.tables_list()?;
    t.pack_both("pack-refs --all --prune")?;
    // Pruned refs and the directories they emptied are gone, as in the twin.
    for gone in ["refs/heads/main", "refs/heads/topic", "refs/tags/v1.1"] {
        let (view, files) = (
            fs::symlink_metadata(t.m.path(gone)).is_ok(),
            fs::symlink_metadata(t.files.join(gone)).is_ok(),
        );
        ensure!(
            !view && !files,
            "{gone} after the prune: through the mount {view}, in the files twin {files}"
        );
    }
    ensure!(
        t.m.path("refs/remotes/origin/HEAD").is_file(),
        "the symref refs/remotes/origin/HEAD must stay loose"
    );
    for name in ["refs/heads/feature/login", "refs/tags/v1.0"] {
        expect_errno(
            fs::remove_file(t.m.path(name)),
            &[libc::ENOENT],
            &format!("rm {name} through the mount"),
        )?;
        expect_errno(
            fs::remove_file(t.files.join(name)),
            &[libc::ENOENT],
            &format!("rm {name} in the files twin"),
        )?;
    }
    t.both(&["show-ref", "-d"])?;
    t.stack_agrees("after the prune")?;
    ensure!(
        t.repo.tables_list()? == tables,
        "pack-refs --all --prune through the mount wrote a table"
    );
    // Unmounted and mounted again: still the files twin (the packed layer is kept beside
    // the stack, never in it, and never shown), and git 2.47 reads every ref.
    t.m.unmount()?;
    let state = t.repo.gitdir.join("reftablefs-packed");
    ensure!(state.is_file(), "no {} after the unmount", state.display());
    for e in fs::read_dir(t.repo.gitdir.join("reftable"))? {
        let name = e?.file_name().to_string_lossy().into_owned();
        ensure!(
            name == "tables.list" || name.ends_with(".ref"),
            "{name} in the stack's directory"
        );
    }
    ensure!(t.repo.tables_list()? == tables, "the unmount wrote a table");
    let m = Mount::start(&t.repo.gitdir, &ctx.path("mnt"), &[])?;
    let (mut view, mut files) = (Tree::new(), Tree::new());
    read_tree(&m.mnt, "", &mut view)?;
    read_tree(&t.files, "", &mut files)?;
    ensure_same_tree(
        &files,
        &view,
        "after a remount: the mount vs the files twin",
    )?;
    ensure!(
        fs::symlink_metadata(m.path("reftablefs-packed")).is_err(),
        "the packed layer's file shows through the mount"
    );
    expect_errno(
        fs::remove_file(m.path("refs/heads/main")),
        &[libc::ENOENT],
        "rm of a packed ref after a remount",
    )?;
    let via = Command::new(GIT239)
        .args(["for-each-ref", "--format=%(refname) %(objectname)"])
        .env("GIT_DIR", &m.mnt)
        .output()?;
    check(&via, "git 2.39 for-each-ref after a remount")?;
    m.unmount()?;
    let stack = t
        .repo
        .git(&["for-each-ref", "--format=%(refname) %(objectname)"])?;
    ensure!(
        stack == String::from_utf8_lossy(&via.stdout),
        "git 2.47 on the stack\n{stack}\ngit 2.39 through the mount\n{}",
        String::from_utf8_lossy(&via.stdout)
    );
    Ok(())
}
mount_test!(prune_leaves_what_a_files_git_leaves, timeout = 180);

/// 25.3: git 2.39 deletes packed-only refs (`branch -D`, `tag -d`, `update-ref -d`) by
/// rewriting `packed-refs` without them: they are deleted from the stack, their reflogs
/// too, and the view is the files twin's.
pub fn branch_d_of_a_packed_ref_deletes_it(ctx: &Ctx) -> TestResult {
    let t = Twins::new(ctx, &[])?;
    t.pack_both("pack-refs --all --prune")?;
    t.both(&["branch", "-D", "feature/login"])?;
    t.both(&["tag", "-d", "v1.0"])?;
    t.both(&["update-ref", "-d", "refs/heads/topic/deep/nested/branch"])?;
    t.same_trees("after branch -D, tag -d, update-ref -d")?;
    t.stack_agrees("after the deletions")?;
    for gone in [
        "refs/heads/feature/login",
        "refs/tags/v1.0",
        "refs/heads/topic/deep/nested/branch",
    ] {
        ensure!(!on_stack(&t.repo, gone)?, "{gone} is still in the stack");
    }
    ensure!(
        on_stack(&t.repo, "refs/heads/with-dash_under.score")?,
        "a packed ref nobody deleted went"
    );
    t.m.unmount()?;
    crate::harness::check(
        &Command::new(crate::harness::BIN)
            .arg("verify")
            .env("GIT_DIR", &t.repo.gitdir)
            .output()?,
        "reftablefs verify",
    )
}
mount_test!(branch_d_of_a_packed_ref_deletes_it, timeout = 180);

/// 25.3: a ref written after packing shows as a loose file over its old packed entry
/// (which `packed-refs` keeps, as in the files twin); a plain `rm` of that loose file
/// brings the packed value back; `pack-refs --prune` packs it again.
pub fn a_ref_written_after_packing_is_loose(ctx: &Ctx) -> TestResult {
    let t = Twins::new(ctx, &[])?;
    t.pack_both("pack-refs --all --prune")?;
    let old = t.repo.rev_parse("refs/heads/with-dash_under.score")?;
    let main = t.repo.rev_parse("refs/heads/main")?;
    t.both(&[
        "update-ref",
        "-m",
        "after packing",
        "refs/heads/with-dash_under.score",
        &main,
    ])?;
    t.same_trees("update-ref of a packed ref")?;
    ensure!(
        fs::read_to_string(t.m.path("refs/heads/with-dash_under.score"))? == format!("{main}\n"),
        "the written ref is not a loose file"
    );
    t.stack_agrees("after the update")?;
    // A plain rm of the loose file: the packed value is in force again.
    fs::remove_file(t.m.path("refs/heads/with-dash_under.score"))?;
    fs::remove_file(t.files.join("refs/heads/with-dash_under.score"))?;
    t.same_trees("rm of the loose file")?;
    t.stack_agrees("after the rm")?;
    ensure!(
        t.repo.rev_parse("refs/heads/with-dash_under.score")? == old,
        "rm of the loose file did not fall back to the packed value"
    );
    // Written again, then packed again.
    t.both(&["branch", "-f", "with-dash_under.score", &main])?;
    t.both(&["branch", "brand-new", &main])?;
    t.same_trees("branch -f, branch")?;
    t.pack_both("pack-refs --all --prune again")?;
    t.stack_agrees("after packing again")?;
    t.m.unmount()
}
mount_test!(a_ref_written_after_packing_is_loose, timeout = 180);

/// `flock(fd, op)`.
fn flock(f: &File, op: i32) -> std::io::Result<()> {
    // SAFETY: a plain syscall on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `content` without the record of `name` (and its `^` line).
fn without(content: &str, name: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in content.lines() {
        if line.starts_with('^') {
            if !skipping {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        skipping = line.split_once(' ').map(|(_, n)| n) == Some(name);
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// 25.3: `packed-refs` opened read-write and locked with `flock`, as go-git does, then
/// rewritten in place (truncated, written) without one entry: at the close that ref is
/// deleted from the stack, and `packed-refs` is what was written. go-git's rename of a
/// temporary `._packed-refs*` over it, with `packed-refs` held open and locked, deletes
/// another.
pub fn packed_refs_rewritten_in_place(ctx: &Ctx) -> TestResult {
    let t = Twins::new(ctx, &[])?;
    t.pack_both("pack-refs --all --prune")?;
    // In place.
    let mut pr = OpenOptions::new()
        .read(true)
        .write(true)
        .open(t.m.path("packed-refs"))?;
    flock(&pr, libc::LOCK_EX)?;
    let other = File::open(t.m.path("packed-refs"))?;
    expect_errno(
        flock(&other, libc::LOCK_EX | libc::LOCK_NB),
        &[libc::EWOULDBLOCK],
        "a second flock of packed-refs",
    )?;
    drop(other);
    let mut content = String::new();
    pr.read_to_string(&mut content)?;
    ensure!(
        content.contains(" refs/tags/v1.0\n"),
        "packed-refs read through the locked handle lacks refs/tags/v1.0:\n{content}"
    );
    let rewritten = without(&content, "refs/tags/v1.0");
    pr.seek(SeekFrom::Start(0))?;
    pr.set_len(0)?;
    pr.write_all(rewritten.as_bytes())?;
    flock(&pr, libc::LOCK_UN)?;
    drop(pr);
    ensure!(
        fs::read_to_string(t.m.path("packed-refs"))? == rewritten,
        "packed-refs is not what was written in place"
    );
    File::open(t.m.path("HEAD"))?.sync_all()?;
    ensure!(
        !on_stack(&t.repo, "refs/tags/v1.0")?,
        "the entry dropped in place is still in the stack"
    );
    ensure!(
        on_stack(&t.repo, "refs/tags/v1.1")?,
        "an entry kept in place was lost"
    );
    // go-git's way on Linux: packed-refs open and locked, a temporary file beside it
    // renamed over it.
    let pr = OpenOptions::new()
        .read(true)
        .write(true)
        .open(t.m.path("packed-refs"))?;
    flock(&pr, libc::LOCK_EX)?;
    let tmp = t.m.path("._packed-refs3141592");
    fs::write(&tmp, without(&rewritten, "refs/tags/v1.1"))?;
    fs::rename(&tmp, t.m.path("packed-refs"))?;
    drop(pr);
    File::open(t.m.path("HEAD"))?.sync_all()?;
    ensure!(
        !on_stack(&t.repo, "refs/tags/v1.1")?,
        "the entry dropped by go-git's rename is still in the stack"
    );
    t.m.unmount()
}
mount_test!(packed_refs_rewritten_in_place, timeout = 180);

/// 26.2: `mount --layout=packed` shows the repository as git 2.39's `pack-refs --all`
/// leaves the files twin (a gc'ed files `.git`): the same `packed-refs`, byte for byte
/// (peeled lines of annotated tags included), no loose file for a packed ref (directories
/// only where a loose ref lives), the root refs and the symref loose. git 2.39's listings
/// and lookups print the same on both; a ref written through the mount shows loose over
/// its old entry, and `pack-refs --prune` packs it again.
pub fn packed_layout_is_a_gc_ed_files_git(ctx: &Ctx) -> TestResult {
    let t = Twins::new(ctx, &["--layout=packed"])?;
    t.git239(&t.files, &["pack-refs", "--all"])?;
    t.same_trees("the packed layout vs pack-refs --all")?;
    let listing: Vec<String> = fs::read_dir(t.m.path("refs"))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    ensure!(
        listing == ["remotes"],
        "refs/ lists {listing:?}, expected only the directory of the loose symref"
    );
    expect_errno(
        fs::metadata(t.m.path("refs/heads/main")),
        &[libc::ENOENT],
        "stat of a packed ref's loose name",
    )?;
    for args in [
        &["for-each-ref"][..],
        &["branch", "-a"],
        &["show-ref", "-d"],
        &["tag", "-l"],
        &[
            "rev-parse",
            "main",
            "v1.1",
            "v1.1^{}",
            "rel/2024/v2-annotated",
        ],
        &["describe", "--tags", "--exact-match", "HEAD"],
    ] {
        t.both(args)?;
    }
    // A write shows loose, then packs again; a deletion rewrites packed-refs.
    let first = t.repo.rev_parse("HEAD~1")?;
    t.both(&["update-ref", "refs/heads/main", &first])?;
    t.both(&["branch", "new/branch", &first])?;
    t.same_trees("writes in the packed layout")?;
    t.both(&["branch", "-D", "feature/login"])?;
    t.same_trees("a deletion in the packed layout")?;
    t.stack_agrees("after writes in the packed layout")?;
    t.pack_both("pack-refs --all --prune in the packed layout")?;
    t.both(&["for-each-ref"])?;
    t.stack_agrees("after packing")?;
    // A ref written loose, then an unmount and a mount with the same layout: the same view.
    t.both(&["branch", "after/packing", &first])?;
    t.same_trees("a write after packing")?;
    t.m.unmount()?;
    let m = Mount::start(&t.repo.gitdir, &ctx.path("mnt"), &["--layout=packed"])?;
    let (mut view, mut files) = (Tree::new(), Tree::new());
    read_tree(&m.mnt, "", &mut view)?;
    read_tree(&t.files, "", &mut files)?;
    ensure_same_tree(&files, &view, "the packed layout after a remount")?;
    m.unmount()
}
mount_test!(packed_layout_is_a_gc_ed_files_git, timeout = 180);

/// 25.3: `packed-refs` exists as in a files `.git`: absent on a fresh (loose-layout) mount,
/// still absent after git 2.39 creates, updates and deletes a loose ref (it takes
/// `packed-refs.lock` for a deletion and drops it), present once `pack-refs` wrote it,
/// absent after `rm`, present and empty after a plain create, also after a kill -9.
pub fn packed_refs_absent_until_written(ctx: &Ctx) -> TestResult {
    let t = Twins::new(ctx, &[])?;
    let absent = |what: &str| -> TestResult {
        expect_errno(
            fs::metadata(t.m.path("packed-refs")),
            &[libc::ENOENT],
            &format!("stat of packed-refs {what}"),
        )?;
        let listed = fs::read_dir(&t.m.mnt)?
            .filter_map(Result::ok)
            .any(|e| e.file_name() == "packed-refs");
        ensure!(!listed, "packed-refs listed at the root {what}");
        t.same_trees(what)
    };
    absent("on a fresh mount")?;
    let main = t.repo.rev_parse("refs/heads/main")?;
    t.both(&["update-ref", "refs/heads/foo", &main])?;
    t.both(&["update-ref", "refs/heads/foo", &main, &main])?;
    t.both(&["update-ref", "-d", "refs/heads/foo"])?;
    absent("after update-ref of a loose ref and its deletion")?;
    t.pack_both("pack-refs --all --prune")?;
    ensure!(
        t.m.path("packed-refs").is_file(),
        "no packed-refs after pack-refs"
    );
    t.stack_agrees("after packing")?;
    // Removed, then made empty by a plain create (`: >packed-refs`): it exists, empty; so
    // it stays after a kill -9 (that it exists is kept at the call, not within a second).
    fs::remove_file(t.m.path("packed-refs"))?;
    fs::remove_file(t.files.join("packed-refs"))?;
    absent("after rm packed-refs")?;
    File::create(t.m.path("packed-refs"))?;
    File::create(t.files.join("packed-refs"))?;
    t.same_trees("after an empty packed-refs was made")?;
    File::open(t.m.path("HEAD"))?.sync_all()?;
    t.m.kill9()?;
    let m = Mount::start(&t.repo.gitdir, &ctx.path("mnt"), &[])?;
    let t = Twins { m, ..t };
    ensure!(
        fs::read(t.m.path("packed-refs"))?.is_empty(),
        "the empty packed-refs did not survive a kill -9"
    );
    t.same_trees("after a kill -9 and a mount")?;
    t.stack_agrees("after a kill -9 and a mount")?;
    t.m.unmount()
}
mount_test!(packed_refs_absent_until_written, timeout = 180);

/// 25.3: content written to `packed-refs` that does not parse (a line of junk appended,
/// as t3210 does) is kept and read back byte for byte: git 2.39 fails on it as on the
/// files twin, while the stack keeps every packed ref (git 2.47 reads them). It survives
/// an unmount and a mount (kept beside the stack, never shown); `mv` of the saved copy
/// back over it (across devices: `mv` removes it, then writes a new one) restores the refs
/// and drops the junk.
pub fn junk_in_packed_refs_is_kept_and_read_back(ctx: &Ctx) -> TestResult {
    let t = Twins::new(ctx, &[])?;
    t.pack_both("pack-refs --all --prune")?;
    let fmt = "--format=%(refname) %(objectname)";
    let stack_before = t.repo.git(&["for-each-ref", fmt])?;
    let good = fs::read(t.m.path("packed-refs"))?;
    let (bak, twin_bak) = (
        ctx.path("packed-refs.bak"),
        ctx.path("twin-packed-refs.bak"),
    );
    fs::write(&bak, &good)?;
    fs::copy(t.files.join("packed-refs"), &twin_bak)?;
    for dir in [&t.m.mnt, &t.files] {
        OpenOptions::new()
            .append(true)
            .open(dir.join("packed-refs"))?
            .write_all(b"bogus content\n")?;
    }
    let mut junk = good.clone();
    junk.extend_from_slice(b"bogus content\n");
    ensure!(
        fs::read(t.m.path("packed-refs"))? == junk,
        "packed-refs does not read back what was appended"
    );
    let via = t.git239_fails(&t.m.mnt, &["for-each-ref"])?;
    let files = t.git239_fails(&t.files, &["for-each-ref"])?;
    ensure!(
        via == files && via.contains("unexpected line in GITDIR/packed-refs: bogus content"),
        "git 2.39 on junk: through the mount\n{via}\non the files twin\n{files}"
    );
    File::open(t.m.path("HEAD"))?.sync_all()?;
    ensure!(
        t.repo.git(&["for-each-ref", fmt])? == stack_before,
        "the junk changed the refs of the stack"
    );
    // Unmounted and mounted again: still the junk, kept beside the stack, never shown.
    t.m.unmount()?;
    let kept = t.repo.gitdir.join("reftablefs-packed.junk");
    ensure!(kept.is_file(), "no {} after the unmount", kept.display());
    let m = Mount::start(&t.repo.gitdir, &ctx.path("mnt"), &[])?;
    ensure!(
        fs::read(m.path("packed-refs"))? == junk,
        "the junk did not survive a remount"
    );
    ensure!(
        fs::symlink_metadata(m.path("reftablefs-packed.junk")).is_err(),
        "the junk's file shows through the mount"
    );
    // Restored by mv across devices (through the mount) and by mv on the twin.
    run_cmd(
        &t.repo.work,
        "mv",
        &[
            &*bak.to_string_lossy(),
            &*m.path("packed-refs").to_string_lossy(),
        ],
    )?;
    fs::rename(&twin_bak, t.files.join("packed-refs"))?;
    ensure!(
        fs::read(m.path("packed-refs"))? == good,
        "packed-refs is not what mv wrote"
    );
    let t = Twins { m, ..t };
    t.both(&["for-each-ref"])?;
    t.same_trees("after mv of the saved packed-refs")?;
    t.stack_agrees("after mv of the saved packed-refs")?;
    ensure!(
        !kept.exists(),
        "{} stays after a valid packed-refs",
        kept.display()
    );
    t.m.unmount()
}
mount_test!(junk_in_packed_refs_is_kept_and_read_back, timeout = 180);

/// 25.3: `rm packed-refs` does what it does to a files `.git`: every ref that is packed
/// only is deleted from the stack (their reflogs stay), a loose ref written after packing
/// keeps its value, and `packed-refs` is absent, also after an unmount and a mount, until
/// `pack-refs` writes it again.
pub fn rm_packed_refs_deletes_packed_only_refs(ctx: &Ctx) -> TestResult {
    let t = Twins::new(ctx, &[])?;
    t.pack_both("pack-refs --all --prune")?;
    let main = t.repo.rev_parse("refs/heads/main")?;
    t.both(&["update-ref", "refs/heads/with-dash_under.score", &main])?;
    fs::remove_file(t.m.path("packed-refs"))?;
    fs::remove_file(t.files.join("packed-refs"))?;
    t.same_trees("after rm packed-refs")?;
    t.stack_agrees("after rm packed-refs")?;
    ensure!(
        !on_stack(&t.repo, "refs/tags/v1.0")?
            && on_stack(&t.repo, "refs/heads/with-dash_under.score")?,
        "rm packed-refs: a packed-only ref stayed or the loose one went"
    );
    ensure!(
        t.m.path("logs/refs/heads/main").is_file(),
        "the reflog of a deleted packed-only ref went"
    );
    expect_errno(
        fs::remove_file(t.m.path("packed-refs")),
        &[libc::ENOENT],
        "a second rm of packed-refs",
    )?;
    t.m.unmount()?;
    let m = Mount::start(&t.repo.gitdir, &ctx.path("mnt"), &[])?;
    let t = Twins { m, ..t };
    t.same_trees("after rm packed-refs and a remount")?;
    t.pack_both("pack-refs --all --prune after rm packed-refs")?;
    t.stack_agrees("after packing again")?;
    t.m.unmount()
}
mount_test!(rm_packed_refs_deletes_packed_only_refs, timeout = 180);

/// `packed-refs` read the way git 2.39 reads it: `mmap`ed whole (every page touched), or
/// only its first and last pages (a binary search touches few): the bytes read. `known_len`:
/// its length, when known (no `stat` then).
fn mmap_packed_refs(path: &Path, whole: bool, known_len: Option<usize>) -> TestResult<Vec<u8>> {
    let f = File::open(path)?;
    // Without a `stat` when the length is known: a `stat` that shows another mtime makes
    // the kernel drop the pages by itself (FUSE_AUTO_INVAL_DATA), which would hide whether
    // the open kept the right ones.
    let len = match known_len {
        Some(n) => n,
        None => f.metadata()?.len() as usize,
    };
    ensure!(len > 0, "packed-refs is empty");
    // SAFETY: a private read-only mapping of `len` bytes of an open file, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            f.as_raw_fd(),
            0,
        )
    };
    ensure!(p != libc::MAP_FAILED, "mmap of packed-refs failed");
    // SAFETY: the mapping is `len` readable bytes until munmap below.
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    let out = if whole {
        bytes.to_vec()
    } else {
        let mut v = bytes[..len.min(4096)].to_vec();
        v.extend_from_slice(&bytes[len.saturating_sub(4096)..]);
        v
    };
    // SAFETY: unmaps the mapping made above, no longer used.
    unsafe { libc::munmap(p, len) };
    Ok(out)
}

/// The value `packed-refs` content `text` gives ref `name`.
fn packed_value<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_suffix(name).and_then(|id| id.strip_suffix(' ')))
}

/// Issue 26.3: `packed-refs` is an inode per content (`Inodes::remember_version`), whose
/// pages the kernel keeps. With git 2.47 changing two packed refs at once directly on the
/// stack (one on the first page, one on the last), every read through the mount that
/// starts after git returned shows both new values (never the old pages, never one old
/// and one new), whether it maps every page or only the first and last, and reads with
/// nothing changed in between agree with each other; a reader looping beside, whose opens
/// straddle the changes, never sees the two refs disagree (it did when one inode's pages
/// were refilled at each open: a reader that opened before a change filled pages from its
/// snapshot after a later open had dropped them). Each change is a new inode number, as a
/// `packed-refs` renamed over on a disk.
pub fn kept_pages_follow_every_change(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("r"), "reftable")?;
    let one = repo.commit("one")?;
    let two = repo.commit("two")?;
    let mut stdin = String::new();
    for i in 0..3000 {
        stdin.push_str(&format!("create refs/heads/n{i:05} {one}\n"));
    }
    repo.git_stdin(&["update-ref", "--stdin"], stdin.as_bytes())?;
    let (first, last) = ("refs/heads/n00000", "refs/heads/n02999");
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &["--layout=packed"])?;
    let pr = m.path("packed-refs");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let looper = {
        let (pr, stop) = (pr.clone(), stop.clone());
        std::thread::spawn(move || -> Result<u64, String> {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let text = mmap_packed_refs(&pr, n % 2 == 0, None).map_err(|e| e.to_string())?;
                let text = String::from_utf8_lossy(&text);
                let (a, b) = (packed_value(&text, first), packed_value(&text, last));
                if a.is_none() || a != b {
                    return Err(format!("a reader saw {first} = {a:?}, {last} = {b:?}"));
                }
                n += 1;
            }
            Ok(n)
        })
    };
    // Every value has the same length: so has `packed-refs` throughout.
    let len = fs::metadata(&pr)?.len() as usize;
    let mut ino = fs::metadata(&pr)?.ino();
    let mut result = Ok(());
    for round in 0..60 {
        let want = if round % 2 == 0 { &two } else { &one };
        let r = repo.git_stdin(
            &["update-ref", "--stdin"],
            format!("update {first} {want}\nupdate {last} {want}\n").as_bytes(),
        );
        if let Err(e) = r {
            result = Err(e);
            break;
        }
        let mut seen = Vec::new();
        for whole in [true, false, true, false] {
            let text = match mmap_packed_refs(&pr, whole, Some(len)) {
                Ok(t) => String::from_utf8_lossy(&t).into_owned(),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            seen.push((
                packed_value(&text, first).map(str::to_owned),
                packed_value(&text, last).map(str::to_owned),
            ));
        }
        if let Some(bad) = seen.iter().find(|(a, b)| {
            a.as_deref() != Some(want.as_str()) || b.as_deref() != Some(want.as_str())
        }) {
            result =
                Err(format!("round {round}: read {bad:?} after git set both to {want}").into());
            break;
        }
        let now = match fs::metadata(&pr) {
            Ok(st) => st.ino(),
            Err(e) => {
                result = Err(e.into());
                break;
            }
        };
        if now == ino {
            result = Err(format!("round {round}: a new content kept inode {ino}").into());
            break;
        }
        ino = now;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let looped = looper.join().map_err(|_| "the looping reader panicked")?;
    m.unmount()?;
    result?;
    let n = looped?;
    ensure!(n > 20, "the looping reader read only {n} times");
    Ok(())
}
mount_test!(kept_pages_follow_every_change, timeout = 240);
