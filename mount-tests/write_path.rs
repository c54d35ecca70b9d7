//! Issue 5: the write path. git's files-backend sequences (files-backend-protocol.md
//! §3–§8) replayed with plain file operations through the mount; the underlying reftable
//! repository, read by git 2.47, must then hold exactly the expected refs and reflogs.
//! Also: parallel writers plus git, bad inputs (errno, nothing written), kill -9.

use crate::expected::{build_scenario, expected_tree};
use crate::harness::{
    ensure_same_tree, expect_errno, note, read_tree, stage, Ctx, Mount, Repo, Rng, TestResult, Tree,
};
use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `reftablefs verify` of the repository's stack exits 0 and says nothing on stderr.
fn verify_stack(repo: &Repo) -> TestResult {
    let out = Command::new(crate::harness::BIN)
        .arg("verify")
        .current_dir(&repo.work)
        .env("GIT_DIR", &repo.gitdir)
        .output()?;
    crate::harness::check(&out, "reftablefs verify")?;
    ensure!(
        out.stderr.is_empty(),
        "reftablefs verify warns: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Adds the failing operation and its source line to an I/O error.
fn at<T>(r: io::Result<T>, op: &str, line: u32) -> TestResult<T> {
    r.map_err(|e| format!("{op} (write_path.rs:{line}): {e}").into())
}

const IDENT: &str = "Re Player <replay@example.com>";

/// A reflog line as git's files backend appends it.
fn log_line(old: &str, new: &str, ts: u64, msg: &str) -> String {
    format!("{old} {new} {IDENT} {ts} +0200\t{msg}\n")
}

/// `open(path, O_RDWR|O_CREAT|O_EXCL)`: takes a lock file.
fn lock(path: &Path) -> io::Result<File> {
    stage(&format!("lock {}", path.display()));
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
}

/// Writes a ref value into a lock the way git does (hex, then "\n": two writes).
fn write_lock(mut f: File, value: &str) -> io::Result<()> {
    if let Some(hex) = value.strip_suffix('\n') {
        f.write_all(hex.as_bytes())?;
        f.write_all(b"\n")?;
    } else {
        f.write_all(value.as_bytes())?;
    }
    Ok(())
}

/// Appends one reflog line with one write (O_WRONLY|O_APPEND|O_CREAT).
fn append_log(path: &Path, line: &str) -> io::Result<()> {
    stage(&format!("append to {}", path.display()));
    let mut f = OpenOptions::new().append(true).create(true).open(path)?;
    f.write_all(line.as_bytes())
}

/// fsync on a ref file: waits for the batch that holds the ref's last update.
fn sync_ref(m: &Mount, rel: &str) -> TestResult {
    stage(&format!("fsync {rel}"));
    File::open(m.path(rel))
        .and_then(|f| f.sync_all())
        .map_err(|e| format!("fsync {rel} through the mount: {e}"))?;
    Ok(())
}

/// The mount's view (everything but `packed-refs`).
fn mount_tree(m: &Mount) -> TestResult<Tree> {
    let mut tree = Tree::new();
    read_tree(&m.mnt, "", &mut tree)?;
    tree.remove("packed-refs");
    Ok(tree)
}

/// Both views (the mount, and git on the underlying repository after an fsync) equal the model.
fn check_model(m: &Mount, repo: &Repo, model: &Tree, sync_on: &str, what: &str) -> TestResult {
    ensure_same_tree(model, &mount_tree(m)?, &format!("{what}: mount view"))?;
    sync_ref(m, sync_on)?;
    ensure_same_tree(
        model,
        &expected_tree(repo)?,
        &format!("{what}: git on the stack after fsync"),
    )
}

/// A reftable repo with the standard scenario, mounted read-write.
fn setup(ctx: &Ctx, extra: &[&str]) -> TestResult<(Repo, Mount, Tree)> {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    build_scenario(&repo)?;
    let model = expected_tree(&repo)?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), extra)?;
    Ok((repo, m, model))
}

fn content(model: &Tree, rel: &str) -> TestResult<String> {
    let Some(v) = model.get(rel) else {
        bail!("model has no {rel}")
    };
    Ok(String::from_utf8_lossy(v).into_owned())
}

fn append_model(model: &mut Tree, rel: &str, line: &str) {
    model
        .entry(rel.to_string())
        .or_default()
        .extend_from_slice(line.as_bytes());
}

/// §3: update an existing ref that HEAD points at: lock, two writes, HEAD.lock (empty),
/// reflog append, rename over the ref, HEAD reflog append, unlink HEAD.lock.
pub fn replay_update_existing(ctx: &Ctx) -> TestResult {
    let (repo, m, mut model) = setup(ctx, &[])?;
    let old = content(&model, "refs/heads/main")?.trim().to_string();
    let new = repo.rev_parse("refs/heads/main~2")?;
    let l = at(lock(&m.path("refs/heads/main.lock")), "lock", line!())?;
    at(write_lock(l, &format!("{new}\n")), "write_lock", line!())?;
    let head_lock = at(lock(&m.path("HEAD.lock")), "lock", line!())?;
    drop(head_lock);
    let line = log_line(&old, &new, 1_800_000_000, "update-ref: replayed");
    at(
        append_log(&m.path("logs/refs/heads/main"), &line),
        "append_log",
        line!(),
    )?;
    at(
        fs::rename(m.path("refs/heads/main.lock"), m.path("refs/heads/main")),
        "rename",
        line!(),
    )?;
    // Read-your-writes at once, before any batch is written.
    ensure!(
        at(
            fs::read_to_string(m.path("refs/heads/main")),
            "read_to_string",
            line!()
        )? == format!("{new}\n"),
        "the rename is not visible at once"
    );
    at(
        append_log(&m.path("logs/HEAD"), &line),
        "append_log",
        line!(),
    )?;
    at(fs::remove_file(m.path("HEAD.lock")), "remove_file", line!())?;

    model.insert("refs/heads/main".into(), format!("{new}\n").into_bytes());
    append_model(&mut model, "logs/refs/heads/main", &line);
    append_model(&mut model, "logs/HEAD", &line);
    check_model(&m, &repo, &model, "refs/heads/main", "§3 update")?;
    m.unmount()?;
    ensure_same_tree(&model, &expected_tree(&repo)?, "§3 after unmount")
}
mount_test!(replay_update_existing, timeout = 120);

/// §4: create a ref in new directories (mkdir per level), reflog directories created too.
pub fn replay_create_in_new_dirs(ctx: &Ctx) -> TestResult {
    let (repo, m, mut model) = setup(ctx, &[])?;
    let value = repo.rev_parse("HEAD~1")?;
    for d in ["refs/heads/feature/deep", "refs/heads/feature/deep/x"] {
        // feature/ exists already; deep/ and x/ are new (x/ becomes the directory for y).
        match fs::create_dir(m.path(d)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && m.path(d).is_dir() => {}
            Err(e) => bail!("mkdir {d}: {e}"),
        }
    }
    ensure!(
        m.path("refs/heads/feature/deep/x").is_dir(),
        "a new empty directory must exist until rmdir"
    );
    let rel = "refs/heads/feature/deep/x/y";
    expect_errno(
        lock(&m.path("refs/heads/nonexistent/dir/z.lock")),
        &[libc::ENOENT],
        "lock in a missing directory",
    )?;
    at(
        write_lock(
            lock(&m.path(&format!("{rel}.lock")))?,
            &format!("{value}\n"),
        ),
        "write_lock",
        line!(),
    )?;
    for d in [
        "logs/refs/heads/feature/deep",
        "logs/refs/heads/feature/deep/x",
    ] {
        match fs::create_dir(m.path(d)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => bail!("mkdir {d}: {e}"),
        }
    }
    let null = "0".repeat(value.len());
    let line = log_line(&null, &value, 1_800_000_100, "branch: Created from HEAD~1");
    at(
        append_log(&m.path(&format!("logs/{rel}")), &line),
        "append_log",
        line!(),
    )?;
    at(
        fs::rename(m.path(&format!("{rel}.lock")), m.path(rel)),
        "rename",
        line!(),
    )?;
    model.insert(rel.into(), format!("{value}\n").into_bytes());
    model.insert(format!("logs/{rel}"), line.into_bytes());
    check_model(&m, &repo, &model, rel, "§4 create")?;

    // An empty directory can be removed; a non-empty one cannot.
    at(
        fs::create_dir(m.path("refs/heads/empty-dir")),
        "create_dir",
        line!(),
    )?;
    expect_errno(
        fs::remove_dir(m.path("refs/heads/feature")),
        &[libc::ENOTEMPTY],
        "rmdir of a directory with refs",
    )?;
    fs::remove_dir(m.path("refs/heads/empty-dir"))?;
    expect_errno(
        fs::metadata(m.path("refs/heads/empty-dir")),
        &[libc::ENOENT],
        "removed directory",
    )?;
    m.unmount()?;
    ensure_same_tree(&model, &expected_tree(&repo)?, "§4 after unmount")
}
mount_test!(replay_create_in_new_dirs, timeout = 120);

/// Rewrites the mount's `packed-refs` without `refname` the way git does (lock, .new,
/// rename); returns whether the ref was listed there.
fn packed_refs_without(m: &Mount, refname: &str) -> TestResult<bool> {
    drop(at(lock(&m.path("packed-refs.lock")), "lock", line!())?);
    // No packed-refs (nothing packed yet, as in a files repository): nothing to drop.
    let packed = match fs::read_to_string(m.path("packed-refs")) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        r => at(r, "read_to_string", line!())?,
    };
    let mut out = String::new();
    let mut skipping = false;
    let mut listed = false;
    for line in packed.lines() {
        if line.starts_with('^') {
            if !skipping {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        skipping = line.split_once(' ').map(|(_, n)| n) == Some(refname);
        listed |= skipping;
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    if listed {
        let mut f = at(lock(&m.path("packed-refs.new")), "lock", line!())?;
        f.write_all(out.as_bytes())?;
        drop(f);
        at(
            fs::rename(m.path("packed-refs.new"), m.path("packed-refs")),
            "rename",
            line!(),
        )?;
    }
    Ok(listed)
}

/// §5: delete a ref: x.lock (empty), packed-refs dance, unlink the reflog, unlink the ref,
/// unlink the locks, rmdir empty parents.
pub fn replay_delete(ctx: &Ctx) -> TestResult {
    let (repo, m, mut model) = setup(ctx, &[])?;
    let rel = "refs/heads/topic/deep/nested/branch";
    drop(at(lock(&m.path(&format!("{rel}.lock"))), "lock", line!())?);
    let _ = at(fs::read(m.path(rel)), "read", line!())?;
    let listed = packed_refs_without(&m, rel)?;
    match fs::remove_file(m.path(&format!("logs/{rel}"))) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => bail!("unlink reflog: {e}"),
    }
    for d in [
        "logs/refs/heads/topic/deep/nested",
        "logs/refs/heads/topic/deep",
        "logs/refs/heads/topic",
    ] {
        if fs::remove_dir(m.path(d)).is_err() {
            break;
        }
    }
    at(fs::remove_file(m.path(rel)), "remove_file", line!())?;
    at(
        fs::remove_file(m.path(&format!("{rel}.lock"))),
        "remove_file",
        line!(),
    )?;
    at(
        fs::remove_file(m.path("packed-refs.lock")),
        "remove_file",
        line!(),
    )?;
    for d in [
        "refs/heads/topic/deep/nested",
        "refs/heads/topic/deep",
        "refs/heads/topic",
    ] {
        if fs::remove_dir(m.path(d)).is_err() {
            break;
        }
    }
    note(&format!(
        "deleted ref was {}listed in the served packed-refs",
        if listed { "" } else { "not " }
    ));
    model.remove(rel);
    model.remove(&format!("logs/{rel}"));
    check_model(&m, &repo, &model, "refs/heads/main", "§5 delete")?;
    expect_errno(
        fs::metadata(m.path("refs/heads/topic")),
        &[libc::ENOENT],
        "emptied directory after rmdir",
    )?;
    m.unmount()?;
    ensure!(
        repo.git_output(&["rev-parse", "--verify", "-q", rel])?
            .stdout
            .is_empty(),
        "ref still resolves"
    );
    ensure_same_tree(&model, &expected_tree(&repo)?, "§5 after unmount")
}
mount_test!(replay_delete, timeout = 120);

/// §6: HEAD becomes a symref to another branch: HEAD.lock with one write, reflog, rename.
pub fn replay_head_symref_change(ctx: &Ctx) -> TestResult {
    let (repo, m, mut model) = setup(ctx, &[])?;
    let old = repo.rev_parse("HEAD")?;
    let new = repo.rev_parse("refs/heads/topic/deep/nested/branch")?;
    let mut l = at(lock(&m.path("HEAD.lock")), "lock", line!())?;
    l.write_all(b"ref: refs/heads/topic/deep/nested/branch\n")?;
    drop(l);
    let line = log_line(
        &old,
        &new,
        1_800_000_200,
        "checkout: moving from main to topic/deep/nested/branch",
    );
    at(
        append_log(&m.path("logs/HEAD"), &line),
        "append_log",
        line!(),
    )?;
    at(
        fs::rename(m.path("HEAD.lock"), m.path("HEAD")),
        "rename",
        line!(),
    )?;
    model.insert(
        "HEAD".into(),
        b"ref: refs/heads/topic/deep/nested/branch\n".to_vec(),
    );
    append_model(&mut model, "logs/HEAD", &line);
    check_model(&m, &repo, &model, "HEAD", "§6 HEAD symref")?;
    m.terminate()?; // SIGTERM unmounts cleanly
    ensure!(
        repo.git(&["symbolic-ref", "HEAD"])?.trim() == "refs/heads/topic/deep/nested/branch",
        "git symbolic-ref HEAD disagrees"
    );
    ensure_same_tree(&model, &expected_tree(&repo)?, "§6 after unmount")
}
mount_test!(replay_head_symref_change, timeout = 120);

fn walk_loose(root: &Path, rel: &str, out: &mut Vec<(String, String)>) -> TestResult {
    for e in fs::read_dir(root.join(rel))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name.ends_with(".lock") {
            continue;
        }
        let path = format!("{rel}/{name}");
        if e.file_type()?.is_dir() {
            walk_loose(root, &path, out)?;
        } else {
            let v = at(fs::read_to_string(e.path()), "read_to_string", line!())?;
            if !v.starts_with("ref:") {
                out.push((path, v.trim().to_string()));
            }
        }
    }
    Ok(())
}

/// §8: `pack-refs --all --prune` replayed: write packed-refs.new with every loose ref,
/// rename it, then lock + unlink each loose copy and rmdir empty parents. Changes nothing
/// in the stack (same refs, same reflogs, `tables.list` byte for byte); the view is a
/// files `.git` after the same calls: the pruned refs are in `packed-refs` only.
pub fn replay_pack_refs_prune_noop(ctx: &Ctx) -> TestResult {
    let (repo, m, model) = setup(ctx, &[])?;
    let tables_before = repo.tables_list()?;
    drop(at(lock(&m.path("packed-refs.lock")), "lock", line!())?);
    // git reads packed-refs under its lock; a fresh view has none (ENOENT), as on disk.
    match fs::read(m.path("packed-refs")) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        r => drop(at(r, "read", line!())?),
    }
    let mut loose = Vec::new();
    walk_loose(&m.mnt, "refs", &mut loose)?;
    loose.sort();
    let peeled: BTreeMap<String, String> = repo
        .git(&["for-each-ref", "--format=%(refname) %(*objectname)"])?
        .lines()
        .filter_map(|l| {
            l.split_once(' ')
                .filter(|(_, p)| !p.is_empty())
                .map(|(a, b)| (a.to_string(), b.to_string()))
        })
        .collect();
    let mut packed = String::from("# pack-refs with: peeled fully-peeled sorted \n");
    for (name, oid) in &loose {
        packed.push_str(&format!("{oid} {name}\n"));
        if let Some(p) = peeled.get(name) {
            packed.push_str(&format!("^{p}\n"));
        }
    }
    let mut f = at(lock(&m.path("packed-refs.new")), "lock", line!())?;
    f.write_all(packed.as_bytes())?;
    drop(f);
    at(
        fs::rename(m.path("packed-refs.new"), m.path("packed-refs")),
        "rename",
        line!(),
    )?;
    at(
        fs::remove_file(m.path("packed-refs.lock")),
        "remove_file",
        line!(),
    )?;
    for (name, oid) in &loose {
        drop(at(lock(&m.path(&format!("{name}.lock"))), "lock", line!())?);
        let v = at(fs::read_to_string(m.path(name)), "read_to_string", line!())?;
        ensure!(v.trim() == oid, "{name} changed under the pack lock: {v:?}");
        at(fs::remove_file(m.path(name)), "remove_file", line!())?;
        at(
            fs::remove_file(m.path(&format!("{name}.lock"))),
            "remove_file",
            line!(),
        )?;
        let mut dir = Path::new(name).parent();
        while let Some(d) = dir.filter(|d| d.components().count() > 2) {
            if fs::remove_dir(m.path(&d.to_string_lossy())).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
    // The pruned refs are in packed-refs only; git sees no change.
    let mut view = model.clone();
    for (name, _) in &loose {
        view.remove(name);
    }
    ensure_same_tree(&view, &mount_tree(&m)?, "§8 pack-refs --prune: mount view")?;
    ensure!(
        at(fs::read_to_string(m.path("packed-refs")), "read", line!())? == packed,
        "packed-refs is not what was renamed onto it"
    );
    sync_ref(&m, "HEAD")?;
    ensure_same_tree(
        &model,
        &expected_tree(&repo)?,
        "§8 pack-refs --prune: git on the stack",
    )?;
    m.unmount()?;
    ensure!(
        repo.tables_list()? == tables_before,
        "pack-refs + prune through the mount wrote a table"
    );
    ensure_same_tree(&model, &expected_tree(&repo)?, "§8 after unmount")
}
mount_test!(replay_pack_refs_prune_noop, timeout = 120);

/// §7.4: `git branch -m feature/login renamed/login` replayed: the reflog moves through
/// logs/refs/.tmp-renamed-log, the old ref is deleted, the new one created with a
/// "Branch: renamed" entry appended to the moved reflog.
pub fn replay_branch_rename(ctx: &Ctx) -> TestResult {
    let (repo, m, mut model) = setup(ctx, &[])?;
    let (old, new) = ("refs/heads/feature/login", "refs/heads/renamed/login");
    let value = content(&model, old)?.trim().to_string();
    at(
        fs::rename(
            m.path(&format!("logs/{old}")),
            m.path("logs/refs/.tmp-renamed-log"),
        ),
        "rename",
        line!(),
    )?;
    drop(at(lock(&m.path(&format!("{old}.lock"))), "lock", line!())?);
    packed_refs_without(&m, old)?;
    let _ = fs::remove_file(m.path(&format!("logs/{old}")));
    at(fs::remove_file(m.path(old)), "remove_file", line!())?;
    at(
        fs::remove_file(m.path(&format!("{old}.lock"))),
        "remove_file",
        line!(),
    )?;
    let _ = fs::remove_file(m.path("packed-refs.lock"));
    let _ = fs::remove_dir(m.path("refs/heads/feature"));
    at(
        fs::create_dir(m.path("refs/heads/renamed")),
        "create_dir",
        line!(),
    )?;
    at(
        fs::create_dir_all(m.path("logs/refs/heads/renamed")),
        "create_dir_all",
        line!(),
    )?;
    at(
        fs::rename(
            m.path("logs/refs/.tmp-renamed-log"),
            m.path(&format!("logs/{new}")),
        ),
        "rename",
        line!(),
    )?;
    at(
        write_lock(
            lock(&m.path(&format!("{new}.lock")))?,
            &format!("{value}\n"),
        ),
        "write_lock",
        line!(),
    )?;
    let line = log_line(
        &value,
        &value,
        1_800_000_300,
        &format!("Branch: renamed {old} to {new}"),
    );
    at(
        append_log(&m.path(&format!("logs/{new}")), &line),
        "append_log",
        line!(),
    )?;
    at(
        fs::rename(m.path(&format!("{new}.lock")), m.path(new)),
        "rename",
        line!(),
    )?;

    let moved = model.remove(&format!("logs/{old}")).unwrap_or_default();
    model.remove(old);
    model.insert(new.into(), format!("{value}\n").into_bytes());
    model.insert(format!("logs/{new}"), moved);
    append_model(&mut model, &format!("logs/{new}"), &line);
    check_model(&m, &repo, &model, new, "§7.4 branch rename")?;
    m.unmount()?;
    ensure_same_tree(&model, &expected_tree(&repo)?, "§7.4 after unmount")
}
mount_test!(replay_branch_rename, timeout = 120);

/// 1000 lock+rename updates from 4 writers (own refs and contended shared refs, EEXIST
/// retries) while git 2.47 writes other refs directly: final state equals the model, every
/// update has a reflog entry, `git fsck` and `reftablefs verify` are clean.
pub fn parallel_writers_and_git(ctx: &Ctx) -> TestResult {
    let repo = Arc::new(Repo::init(&ctx.path("repo"), "reftable")?);
    let mut oids = Vec::new();
    for i in 0..5 {
        oids.push(repo.commit(&format!("c{i}"))?);
    }
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let oids = Arc::new(oids);
    let ticket = Arc::new(AtomicU64::new(0));
    let held: Arc<Mutex<HashSet<String>>> = Arc::new(Mutex::new(HashSet::new()));
    at(
        fs::create_dir(m.path("refs/heads/shared")),
        "create_dir",
        line!(),
    )?;
    let mut writers = Vec::new();
    for t in 0..4u64 {
        let (root, oids, ticket, held) =
            (m.mnt.clone(), oids.clone(), ticket.clone(), held.clone());
        writers.push(std::thread::spawn(
            move || -> Result<Vec<(String, u64, String)>, String> {
                let mut rng = Rng::new(t + 1);
                let mut done = Vec::new();
                let own = format!("refs/heads/w{t}");
                match fs::create_dir(root.join(&own)) {
                    Ok(()) => {}
                    Err(e) => return Err(format!("mkdir {own}: {e}")),
                }
                for k in 0..250 {
                    let name = if k % 2 == 0 {
                        format!("{own}/r{}", k % 20)
                    } else {
                        format!("refs/heads/shared/s{}", rng.below(5))
                    };
                    let lockp = root.join(format!("{name}.lock"));
                    let started = Instant::now();
                    let f = loop {
                        match lock(&lockp) {
                            Ok(f) => break f,
                            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                                if started.elapsed() > Duration::from_secs(10) {
                                    return Err(format!("{name}.lock held for 10 s"));
                                }
                                std::thread::sleep(Duration::from_micros(
                                    200 + rng.below(800) as u64,
                                ));
                            }
                            Err(e) => return Err(format!("lock {name}: {e}")),
                        }
                    };
                    {
                        let mut h = held.lock().map_err(|_| "poisoned")?;
                        if !h.insert(name.clone()) {
                            return Err(format!(
                                "two writers hold {name}.lock at once (O_EXCL not atomic)"
                            ));
                        }
                    }
                    // Like git, read the current value under the lock; always change it,
                    // so every rename is a real update that must get a reflog entry.
                    let current = fs::read_to_string(root.join(&name)).unwrap_or_default();
                    let mut value = &oids[rng.below(oids.len())];
                    while current.trim() == value.as_str() {
                        value = &oids[rng.below(oids.len())];
                    }
                    write_lock(f, &format!("{value}\n"))
                        .map_err(|e| format!("write {name}.lock: {e}"))?;
                    // As git: the reflog line is appended before the rename.
                    let old = match current.trim() {
                        "" => "0".repeat(40),
                        v => v.to_string(),
                    };
                    let log_path = root.join(format!("logs/{name}"));
                    if let Some(dir) = log_path.parent() {
                        // As git: the leading directories first.
                        fs::create_dir_all(dir).map_err(|e| format!("mkdir -p logs/: {e}"))?;
                    }
                    append_log(
                        &log_path,
                        &log_line(&old, value, 1_800_000_000 + k, &format!("w{t} k{k}")),
                    )
                    .map_err(|e| format!("append to logs/{name}: {e}"))?;
                    let n = ticket.fetch_add(1, Ordering::SeqCst);
                    held.lock().map_err(|_| "poisoned")?.remove(&name);
                    fs::rename(&lockp, root.join(&name))
                        .map_err(|e| format!("rename {name}: {e}"))?;
                    done.push((name, n, value.clone()));
                }
                Ok(done)
            },
        ));
    }
    // git writes its own refs directly on the stack meanwhile.
    let git_repo = repo.clone();
    let git_oids = oids.clone();
    let git_writer = std::thread::spawn(move || -> Result<Vec<(String, String)>, String> {
        let mut done = Vec::new();
        for i in 0..40 {
            let name = format!("refs/heads/git/g{}", i % 10);
            let value = git_oids[i % git_oids.len()].clone();
            let mut ok = false;
            for _ in 0..20 {
                let out = git_repo
                    .git_output(&[
                        "-c",
                        "reftable.lockTimeout=5000",
                        "update-ref",
                        &name,
                        &value,
                    ])
                    .map_err(|e| e.to_string())?;
                if out.status.success() {
                    ok = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if !ok {
                return Err(format!("git update-ref {name} kept failing"));
            }
            done.push((name, value));
        }
        Ok(done)
    });
    let mut model: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for w in writers {
        for (name, n, value) in w.join().map_err(|_| "writer panicked")?? {
            *counts.entry(name.clone()).or_default() += 1;
            let e = model.entry(name).or_insert((n, value.clone()));
            if n >= e.0 {
                *e = (n, value);
            }
        }
    }
    let mut expected: BTreeMap<String, String> =
        model.into_iter().map(|(k, (_, v))| (k, v)).collect();
    for (name, value) in git_writer.join().map_err(|_| "git writer panicked")?? {
        expected.insert(name, value);
    }
    expected.insert("refs/heads/main".into(), oids[4].clone());
    sync_ref(&m, "refs/heads/shared/s0")?;
    m.unmount()?;

    let actual: BTreeMap<String, String> = repo
        .git(&["for-each-ref", "--format=%(refname) %(objectname)"])?
        .lines()
        .filter_map(|l| {
            l.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
        })
        .collect();
    if actual != expected {
        let mut diff = String::new();
        for (k, v) in &expected {
            if actual.get(k) != Some(v) {
                diff.push_str(&format!("{k}: expected {v}, got {:?}\n", actual.get(k)));
            }
        }
        for k in actual.keys().filter(|k| !expected.contains_key(*k)) {
            diff.push_str(&format!("unexpected {k}\n"));
        }
        bail!("final refs differ from the model:\n{diff}");
    }
    for (name, n) in &counts {
        let log = repo.git(&["log", "-g", "--format=%H", name, "--"])?;
        ensure!(
            log.lines().count() == *n,
            "{name}: {n} updates but {} reflog entries",
            log.lines().count()
        );
    }
    crate::harness::check(&repo.git_output(&["fsck", "--no-progress"])?, "git fsck")?;
    // `git refs verify` returns 0 on a corrupt table: `reftablefs verify` checks it.
    verify_stack(&repo)
}
mount_test!(parallel_writers_and_git, timeout = 300);

/// Runs `dd of=PATH` (O_WRONLY|O_CREAT|O_TRUNC) with `data`; dd checks write and close,
/// so an error at flush time (close) reaches us. Returns the errno-ish message on failure.
fn dd_write(path: &Path, data: &[u8], append: bool) -> TestResult<Result<(), String>> {
    let flags: &[&str] = if append {
        &["oflag=append", "conv=notrunc"]
    } else {
        &[]
    };
    let mut child = Command::new("timeout")
        .args(["20", "dd", "status=none"])
        .args(flags)
        .arg(format!("of={}", path.display()))
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(data)?;
    }
    let out = child.wait_with_output()?;
    Ok(if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

/// Every bad input gives the right errno and writes nothing: `tables.list` stays byte for
/// byte the same, the refs and reflogs keep their values. (Bad names below `refs/` and
/// content that is no ref value in HEAD are kept as broken refs beside the stack, as on
/// disk: `tables.list` stays the same too.)
pub fn bad_inputs_change_nothing(ctx: &Ctx) -> TestResult {
    let (repo, m, model) = setup(ctx, &[])?;
    let tables = repo.tables_list()?;
    let main = content(&model, "refs/heads/main")?;
    let p = |rel: &str| m.path(rel);
    let unchanged = |what: &str| -> TestResult {
        sync_ref(&m, "refs/heads/main")?;
        ensure!(repo.tables_list()? == tables, "{what}: tables.list changed");
        ensure!(
            at(
                fs::read_to_string(p("refs/heads/main")),
                "read_to_string",
                line!()
            )? == main,
            "{what}: refs/heads/main changed"
        );
        Ok(())
    };
    let rollback = |rel: &str| {
        let _ = fs::remove_file(p(rel));
    };

    // Content that is no ref value committed into HEAD, by rename or in place: kept as
    // written beside the stack, which keeps its HEAD (`fs/broken.rs`,
    // mount-tests/broken_links.rs); written back, HEAD is the ref again.
    let head = at(fs::read_to_string(p("HEAD")), "read_to_string", line!())?;
    let head_back = |what: &str| -> TestResult {
        at(
            write_lock(lock(&p("HEAD.lock"))?, &head),
            "write_lock",
            line!(),
        )?;
        at(fs::rename(p("HEAD.lock"), p("HEAD")), "rename", line!())?;
        ensure!(
            at(fs::read_to_string(p("HEAD")), "read_to_string", line!())? == head,
            "{what}: HEAD not restored"
        );
        ensure!(
            !repo.gitdir.join("reftablefs-broken-refs").exists(),
            "{what}: the broken refs' file outlived the broken HEAD"
        );
        Ok(())
    };
    for (i, bad) in [
        "not a hex id\n",
        "0123456789abcdef\n",
        "ref: refs/heads/bad..name\n",
        "ref: \n",
        "",
    ]
    .iter()
    .enumerate()
    {
        at(
            write_lock(lock(&p("HEAD.lock"))?, bad),
            "write_lock",
            line!(),
        )?;
        at(fs::rename(p("HEAD.lock"), p("HEAD")), "rename", line!())?;
        ensure!(
            at(fs::read_to_string(p("HEAD")), "read_to_string", line!())? == *bad,
            "bad content #{i}: HEAD does not read back as written"
        );
        unchanged(&format!("bad content #{i}"))?;
        head_back(&format!("bad content #{i}"))?;
        unchanged(&format!("bad content #{i} written back"))?;
    }
    let r = dd_write(&p("HEAD"), b"garbage\n", false)?;
    ensure!(r.is_ok(), "in-place write of garbage into HEAD: {r:?}");
    ensure!(
        at(fs::read_to_string(p("HEAD")), "read_to_string", line!())? == "garbage\n",
        "in-place garbage: HEAD does not read back as written"
    );
    unchanged("in-place garbage")?;
    head_back("in-place garbage")?;
    unchanged("in-place garbage written back")?;
    // Bad ref names: kept beside the stack as broken refs (`fs/broken.rs`), never in it
    // (tables.list unchanged), read back, removed again.
    let oid = main.trim().to_string();
    for bad in [
        "refs/heads/bad..name",
        "refs/heads/sp ace",
        "refs/heads/tilde~1",
        "refs/heads/end.",
        "refs/heads/x@{y",
    ] {
        let f = at(lock(&p(&format!("{bad}.lock"))), "lock", line!())?;
        at(write_lock(f, &format!("{oid}\n")), "write_lock", line!())?;
        at(
            fs::rename(p(&format!("{bad}.lock")), p(bad)),
            "rename",
            line!(),
        )?;
        ensure!(
            at(fs::read_to_string(p(bad)), "read_to_string", line!())? == format!("{oid}\n"),
            "{bad}: not kept as written"
        );
        unchanged(&format!("bad name {bad}"))?;
        at(fs::remove_file(p(bad)), "remove_file", line!())?;
        ensure!(
            !repo.gitdir.join("reftablefs-broken-refs").exists(),
            "{bad}: the broken refs' file outlived its last ref"
        );
    }
    // D/F conflicts.
    expect_errno(
        lock(&p("refs/heads/main/sub.lock")),
        &[libc::ENOTDIR],
        "lock below a ref",
    )?;
    expect_errno(
        fs::create_dir(p("refs/heads/main")),
        &[libc::EEXIST],
        "mkdir over a ref",
    )?;
    at(
        write_lock(lock(&p("refs/heads/feature.lock"))?, &format!("{oid}\n")),
        "write_lock",
        line!(),
    )?;
    expect_errno(
        fs::rename(p("refs/heads/feature.lock"), p("refs/heads/feature")),
        &[libc::EISDIR, libc::ENOTEMPTY, libc::EEXIST],
        "rename over a directory of refs",
    )?;
    rollback("refs/heads/feature.lock");
    expect_errno(
        fs::remove_dir(p("refs/heads/feature")),
        &[libc::ENOTEMPTY],
        "rmdir of a directory with refs",
    )?;
    unchanged("D/F conflicts")?;
    // A held lock: EEXIST, also between threads racing for it.
    let held = at(lock(&p("refs/heads/main.lock")), "lock", line!())?;
    expect_errno(
        lock(&p("refs/heads/main.lock")),
        &[libc::EEXIST],
        "second lock",
    )?;
    drop(held);
    rollback("refs/heads/main.lock");
    let winners = Arc::new(AtomicU64::new(0));
    let go = Arc::new(AtomicBool::new(false));
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let (path, winners, go) = (p("refs/heads/race.lock"), winners.clone(), go.clone());
            std::thread::spawn(move || -> Result<(), String> {
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                match lock(&path) {
                    Ok(_) => {
                        winners.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
                    Err(e) => Err(format!("racing lock: {e}")),
                }
            })
        })
        .collect();
    go.store(true, Ordering::Release);
    for r in racers {
        r.join().map_err(|_| "racer panicked")??;
    }
    ensure!(
        winners.load(Ordering::SeqCst) == 1,
        "{} racers got the same lock",
        winners.load(Ordering::SeqCst)
    );
    rollback("refs/heads/race.lock");
    unchanged("held lock")?;
    // A malformed reflog line.
    // (dd reports an error from write or from close, where a flush-time error lands.)
    let r = dd_write(
        &p("logs/refs/heads/main"),
        b"this is not a reflog line\n",
        true,
    )?;
    ensure!(
        r.as_ref()
            .is_err_and(|msg| msg.contains("Invalid argument")),
        "append of a malformed reflog line: expected EINVAL at write/close, got {r:?}"
    );
    unchanged("malformed reflog line")?;

    ensure_same_tree(&model, &mount_tree(&m)?, "mount view after bad inputs")?;
    m.unmount()?;
    ensure!(
        repo.tables_list()? == tables,
        "tables.list changed by the bad inputs (after unmount)"
    );
    ensure_same_tree(&model, &expected_tree(&repo)?, "git view after bad inputs")
}
mount_test!(bad_inputs_change_nothing, timeout = 180);

/// kill -9 of the mount during heavy writes: the stack stays readable by git, and after a
/// remount every update acknowledged by an fsync is present.
pub fn kill9_keeps_fsynced_updates(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let a = repo.commit("a")?;
    let b = repo.commit("b")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    at(
        fs::create_dir(m.path("refs/heads/crash")),
        "create_dir",
        line!(),
    )?;
    let root = m.mnt.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_w = stop.clone();
    let writer = std::thread::spawn(move || -> Vec<(String, String)> {
        let mut acked = Vec::new();
        let mut i = 0u64;
        while !stop_w.load(Ordering::Relaxed) {
            let name = format!("refs/heads/crash/c{i:06}");
            let value = if i % 2 == 0 { &a } else { &b };
            let step = lock(&root.join(format!("{name}.lock")))
                .and_then(|f| write_lock(f, &format!("{value}\n")))
                .and_then(|()| fs::rename(root.join(format!("{name}.lock")), root.join(&name)));
            if step.is_err() {
                break; // the mount is gone
            }
            if i % 10 == 9
                && File::open(root.join(&name))
                    .and_then(|f| f.sync_all())
                    .is_ok()
            {
                acked.push((name, value.clone()));
            }
            i += 1;
        }
        acked
    });
    std::thread::sleep(Duration::from_millis(1500));
    m.kill9()?;
    stop.store(true, Ordering::Relaxed);
    let acked = writer.join().map_err(|_| "writer panicked")?;
    ensure!(
        acked.len() >= 5,
        "only {} fsync-acknowledged updates before the kill; test proved nothing",
        acked.len()
    );

    crate::harness::check(
        &repo.git_output(&["for-each-ref"])?,
        "git for-each-ref after kill -9",
    )?;
    let lock_left = repo.gitdir.join("reftable/tables.list.lock").exists();
    // Like a killed git, a killed mount may leave tables.list.lock behind; git then refuses
    // to write until it is removed by hand. Reported, not asserted (no policy decided yet).
    let git_can_write = repo
        .git_output(&[
            "-c",
            "reftable.lockTimeout=200",
            "update-ref",
            "refs/heads/after-crash",
            "HEAD",
        ])?
        .status
        .success();
    note(&format!(
        "{} acknowledged updates; tables.list.lock left behind: {lock_left}; git can write afterwards: {git_can_write}",
        acked.len()
    ));
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let mut missing = Vec::new();
    for (name, value) in &acked {
        let via_git = repo.git_output(&["rev-parse", "--verify", "-q", name])?;
        let via_mount = fs::read_to_string(m.path(name)).unwrap_or_default();
        if String::from_utf8_lossy(&via_git.stdout).trim() != value || via_mount.trim() != value {
            missing.push(name.clone());
        }
    }
    ensure!(
        missing.is_empty(),
        "{} acknowledged updates lost after kill -9: {missing:?}",
        missing.len()
    );
    m.unmount()
}
mount_test!(kill9_keeps_fsynced_updates, timeout = 180);

/// A real files-backend git (2.47 on a files-format view: GIT_DIR=<mount>, objects from
/// the repository) runs update-ref, branch, branch -m, symbolic-ref, tag -d and
/// `pack-refs --all --prune` through the mount; git on the reftable stack agrees.
pub fn files_backend_git_through_mount(ctx: &Ctx) -> TestResult {
    let (repo, m, _) = setup(ctx, &[])?;
    let through = |args: &[&str]| -> TestResult<String> {
        let mut full = vec!["-c", "core.logAllRefUpdates=true"];
        full.extend_from_slice(args);
        let out = repo
            .cmd(&full)
            .env("GIT_DIR", &m.mnt)
            .env("GIT_OBJECT_DIRECTORY", repo.gitdir.join("objects"))
            .output()?;
        crate::harness::check(&out, &format!("git {} through the mount", args.join(" ")))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let tables_before = repo.tables_list()?;
    through(&["pack-refs", "--all", "--prune"])?;
    // Every ref below refs/ is packed only now; HEAD is still a file.
    ensure!(
        !m.path("refs/heads/main").exists(),
        "refs/heads/main still a loose file after pack-refs --prune"
    );
    sync_ref(&m, "HEAD")?;
    ensure!(
        repo.tables_list()? == tables_before,
        "files-backend `pack-refs --all --prune` changed the stack"
    );
    let c1 = repo.rev_parse("HEAD~1")?;
    through(&[
        "update-ref",
        "-m",
        "via files backend",
        "refs/heads/main",
        &c1,
    ])?;
    through(&["branch", "made/through/mount", "HEAD"])?;
    through(&["branch", "-m", "made/through/mount", "moved"])?;
    through(&[
        "symbolic-ref",
        "-m",
        "via mount",
        "HEAD",
        "refs/heads/moved",
    ])?;
    through(&["tag", "-d", "v1.0"])?;
    through(&["update-ref", "-d", "refs/heads/with-dash_under.score"])?;
    sync_ref(&m, "refs/heads/moved")?;
    let fmt = "--format=%(refname) %(objectname) %(symref)";
    let via_mount = through(&["for-each-ref", "--include-root-refs", fmt])?;
    let direct = repo.git(&["for-each-ref", "--include-root-refs", fmt])?;
    ensure!(
        via_mount == direct,
        "files-backend view vs stack:\n{via_mount}\nvs\n{direct}"
    );
    ensure!(
        repo.rev_parse("refs/heads/main")? == c1,
        "update-ref through the mount lost"
    );
    ensure!(
        repo.git(&["symbolic-ref", "HEAD"])?.trim() == "refs/heads/moved",
        "HEAD not moved"
    );
    ensure!(
        repo.git_output(&["rev-parse", "-q", "--verify", "refs/tags/v1.0"])?
            .stdout
            .is_empty(),
        "tag -d lost"
    );
    let log = repo.git(&["reflog", "show", "--format=%gs", "refs/heads/moved"])?;
    ensure!(
        log.lines()
            .next()
            .is_some_and(|l| l.starts_with("Branch: renamed")),
        "moved reflog: {log}"
    );
    m.unmount()?;
    verify_stack(&repo)
}
mount_test!(files_backend_git_through_mount, timeout = 180);

/// A concurrent git changes a ref that has an update pending in the mount's batch: the
/// documented policy is "first committer wins" — git's value stays, the mount's edit is
/// dropped with a log line naming the ref, an fsync waiting for that batch fails with EIO,
/// and the other edits of the batch are written.
pub fn conflict_with_git_first_committer_wins(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let a = repo.commit("a")?;
    let b = repo.commit("b")?;
    let c = repo.commit("c")?;
    repo.git(&["branch", "contested", &a])?;
    let m = Mount::start(
        &repo.gitdir,
        &ctx.path("mnt"),
        &["--batch-window", "60000", "--batch-max", "100000"],
    )?;
    for (name, value) in [("refs/heads/contested", &b), ("refs/heads/bystander", &b)] {
        let l = at(lock(&m.path(&format!("{name}.lock"))), "lock", line!())?;
        at(write_lock(l, &format!("{value}\n")), "write_lock", line!())?;
        at(
            fs::rename(m.path(&format!("{name}.lock")), m.path(name)),
            "rename",
            line!(),
        )?;
    }
    // git commits first, directly on the stack.
    repo.git(&["update-ref", "refs/heads/contested", &c, &a])?;
    stage("fsync of the contested ref");
    let synced = File::open(m.path("refs/heads/contested")).and_then(|f| f.sync_all());
    expect_errno(
        synced,
        &[libc::EIO],
        "fsync of a batch whose edit lost to git",
    )?;
    ensure!(
        repo.rev_parse("refs/heads/contested")? == c,
        "git's value was overwritten (first committer must win)"
    );
    ensure!(
        repo.rev_parse("refs/heads/bystander")? == b,
        "the non-conflicting edit of the same batch was not written"
    );
    ensure!(
        m.log().contains("refs/heads/contested"),
        "no log line names the dropped edit; log:\n{}",
        m.log()
    );
    crate::harness::wait_for(Duration::from_secs(2), || {
        match fs::read_to_string(m.path("refs/heads/contested")) {
            Ok(v) if v == format!("{c}\n") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .map_err(|last| format!("the mount still shows its dropped value: {last}"))?;
    m.unmount()
}
mount_test!(conflict_with_git_first_committer_wins, timeout = 120);

/// Orphaned locks (docs/fuse.md): a lock left by a process that exited stays (git then
/// gets EEXIST, as on disk) until it is unlinked by hand; nothing is written meanwhile.
pub fn orphaned_lock_stays_until_unlinked(ctx: &Ctx) -> TestResult {
    let (repo, m, model) = setup(ctx, &[])?;
    let tables = repo.tables_list()?;
    let lock_path = m.path("refs/heads/main.lock");
    let status = Command::new("sh")
        .arg("-c")
        .arg("printf '0123abc' > \"$1\"")
        .arg("sh")
        .arg(&lock_path)
        .status()?;
    ensure!(status.success(), "a process could not create the lock file");
    expect_errno(
        lock(&lock_path),
        &[libc::EEXIST],
        "lock held by a dead process",
    )?;
    let out = repo
        .cmd(&["update-ref", "refs/heads/main", "HEAD~1"])
        .env("GIT_DIR", &m.mnt)
        .env("GIT_OBJECT_DIRECTORY", repo.gitdir.join("objects"))
        .output()?;
    ensure!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("File exists"),
        "files-backend git should be refused by the orphaned lock: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    at(fs::remove_file(&lock_path), "remove_file", line!())?;
    drop(at(lock(&lock_path), "lock", line!())?);
    at(fs::remove_file(&lock_path), "remove_file", line!())?;
    ensure_same_tree(
        &model,
        &mount_tree(&m)?,
        "mount view after the orphaned lock",
    )?;
    m.unmount()?;
    ensure!(
        repo.tables_list()? == tables,
        "an orphaned lock caused a write"
    );
    Ok(())
}
mount_test!(orphaned_lock_stays_until_unlinked, timeout = 120);

// ---------------------------------------------------------------------------------------
// The mount is a files backend: named regression tests (one per measured case).

use crate::differential::{self as diff, Pair, Style};
use std::os::unix::io::IntoRawFd;

/// Case 1: `git update-ref HEAD <c> && git symbolic-ref HEAD refs/heads/dev` arrive in
/// one batch (HEAD and its referent: one reftable transaction refuses that); both land,
/// every round, as on a files `.git`.
pub fn case1_head_and_referent_in_one_batch(ctx: &Ctx) -> TestResult {
    let mut p = Pair::new(&ctx.path("pair"), 4, &[])?;
    let c = p.commits.clone();
    p.git(&["update-ref", "-m", "init", "refs/heads/main", &c[3]])?;
    p.git(&["update-ref", "-m", "init", "refs/heads/dev", &c[0]])?;
    for round in 0..12 {
        let to = if round % 2 == 0 {
            "refs/heads/dev"
        } else {
            "refs/heads/main"
        };
        p.git(&["update-ref", "-m", "reset", "HEAD", &c[round % 4]])?;
        p.git(&["symbolic-ref", "-m", "to other", "HEAD", to])?;
        p.compare(&format!("round {round}"))?;
    }
    let log = p.m.log();
    ensure!(
        !log.contains("not written"),
        "the mount refused edits:\n{log}"
    );
    p.m.unmount()
}
mount_test!(case1_head_and_referent_in_one_batch, timeout = 120);

/// Case 2: the value a lock holder saw when it took the lock is the expected old value:
/// git 2.47 on the stack changes the ref meanwhile, the rename fails (EBUSY) and git's
/// value stays.
pub fn case2_lock_then_foreign_update_fails_rename(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let x0 = repo.commit("x0")?;
    let x1 = repo.commit("x1")?;
    let x2 = repo.commit("x2")?;
    repo.git(&["branch", "shared", &x0])?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let l = at(lock(&m.path("refs/heads/shared.lock")), "lock", line!())?;
    let seen = at(
        fs::read_to_string(m.path("refs/heads/shared")),
        "read",
        line!(),
    )?;
    ensure!(seen.trim() == x0, "lock holder read {seen:?}, not X0");
    repo.git(&["update-ref", "refs/heads/shared", &x1, &x0])?;
    at(write_lock(l, &format!("{x2}\n")), "write_lock", line!())?;
    let renamed = fs::rename(
        m.path("refs/heads/shared.lock"),
        m.path("refs/heads/shared"),
    );
    let synced = File::open(m.path("refs/heads/shared")).and_then(|f| f.sync_all());
    ensure!(
        renamed.is_err() || synced.is_err(),
        "rename and fsync both returned 0 although git changed the ref under the lock"
    );
    if let Err(e) = &renamed {
        ensure!(
            e.raw_os_error() == Some(libc::EBUSY),
            "rename failed with {e}, expected EBUSY (docs/fuse.md)"
        );
        // The lock stays (as after a failed rename on disk); the holder removes it.
        at(
            fs::remove_file(m.path("refs/heads/shared.lock")),
            "unlink",
            line!(),
        )?;
    }
    ensure!(
        repo.rev_parse("refs/heads/shared")? == x1,
        "git's X1 was overwritten"
    );
    m.unmount()
}
mount_test!(case2_lock_then_foreign_update_fails_rename, timeout = 120);

/// A lock taken while another process's update is pending sees that value; git on the
/// stack then moves the ref past it, the pending update fails at its batch, and the view
/// falls back to git's value with no reload in between. The lock holder, which read the
/// pending value, renames exactly git's value onto the ref: that is a change under its
/// lock (EBUSY, or its fsync fails), not a no-op acknowledged with 0 while its update is
/// lost (`cas_increments_never_lost` once counted 1906 acknowledged increments on a
/// counter of 1904 this way).
pub fn lock_holder_sees_a_failed_batch_value_go(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let x0 = repo.commit("x0")?;
    let x1 = repo.commit("x1")?;
    let x2 = repo.commit("x2")?;
    repo.git(&["branch", "shared", &x0])?;
    let m = Mount::start(
        &repo.gitdir,
        &ctx.path("mnt"),
        &["--batch-window", "60000", "--batch-max", "100000"],
    )?;
    let py = |code: &str| -> TestResult {
        let out = Command::new("timeout")
            .args(["30", "python3", "-c", code])
            .arg(m.path("refs/heads/shared"))
            .stdin(Stdio::null())
            .output()?;
        crate::harness::check(&out, "python3")
    };
    // Another process: X0 -> X1 through the mount, pending (it exits without fsync).
    py(&format!(
        "import os, sys\np = sys.argv[1]\n\
         fd = os.open(p + '.lock', os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)\n\
         os.write(fd, b'{x1}\\n'); os.close(fd); os.rename(p + '.lock', p)\n"
    ))?;
    // git on the stack: X0 -> X2.
    repo.git(&["update-ref", "refs/heads/shared", &x2, &x0])?;
    let l = at(lock(&m.path("refs/heads/shared.lock")), "lock", line!())?;
    let seen = at(
        fs::read_to_string(m.path("refs/heads/shared")),
        "read",
        line!(),
    )?;
    ensure!(
        seen.trim() == x1,
        "lock holder read {seen:?}, not the pending X1"
    );
    // A third process's fsync writes the batch: X0 -> X1 conflicts with git's X2.
    py("import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nos.fsync(fd)\n")
        .map_err(|e| format!("the fsync that writes the batch: {e}"))?;
    ensure!(
        fs::read_to_string(m.path("refs/heads/shared"))?.trim() == x2,
        "after the failed batch the mount does not show git's X2"
    );
    // The holder read X1 and writes X2.
    at(write_lock(l, &format!("{x2}\n")), "write_lock", line!())?;
    let renamed = fs::rename(
        m.path("refs/heads/shared.lock"),
        m.path("refs/heads/shared"),
    );
    let synced = File::open(m.path("refs/heads/shared")).and_then(|f| f.sync_all());
    ensure!(
        renamed.is_err() || synced.is_err(),
        "rename and fsync both returned 0 for an update from X1 that was never written \
         (the ref is git's X2)"
    );
    if let Err(e) = &renamed {
        ensure!(
            e.raw_os_error() == Some(libc::EBUSY),
            "rename failed with {e}, expected EBUSY"
        );
        at(
            fs::remove_file(m.path("refs/heads/shared.lock")),
            "unlink",
            line!(),
        )?;
    }
    ensure!(
        repo.rev_parse("refs/heads/shared")? == x2,
        "git's X2 is not the ref's value"
    );
    m.unmount()
}
mount_test!(lock_holder_sees_a_failed_batch_value_go, timeout = 120);

/// Case 3: a conflict found only at batch commit: the edit is not written, the process
/// that staged it gets EIO from its next fsync (once) and from the close of its still
/// open lock handle, although another process's fsync wrote the batch first (and got 0).
pub fn case3_conflict_at_commit_reaches_the_stager(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let x0 = repo.commit("x0")?;
    let x1 = repo.commit("x1")?;
    let x2 = repo.commit("x2")?;
    repo.git(&["branch", "shared", &x0])?;
    let m = Mount::start(
        &repo.gitdir,
        &ctx.path("mnt"),
        &["--batch-window", "60000", "--batch-max", "100000"],
    )?;
    let mut l = at(lock(&m.path("refs/heads/shared.lock")), "lock", line!())?;
    at(l.write_all(format!("{x2}\n").as_bytes()), "write", line!())?;
    at(
        fs::rename(
            m.path("refs/heads/shared.lock"),
            m.path("refs/heads/shared"),
        ),
        "rename",
        line!(),
    )?;
    // git changes the ref directly before the batch is written.
    repo.git(&["update-ref", "refs/heads/shared", &x1, &x0])?;
    // Another process's fsync writes the batch: not failed for someone else's edit.
    let other = Command::new("python3")
        .arg("-c")
        .arg("import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)")
        .arg(&m.mnt)
        .status()?;
    ensure!(
        other.success(),
        "another process's fsync failed for this process's edit"
    );
    ensure!(
        repo.rev_parse("refs/heads/shared")? == x1,
        "the conflicting edit was written over git's value"
    );
    // This process: the still-open lock handle's close reports it…
    let fd = l.into_raw_fd();
    // SAFETY: closing the descriptor we own, once.
    let closed = unsafe { libc::close(fd) };
    let close_err = io::Error::last_os_error();
    ensure!(
        closed == -1 && close_err.raw_os_error() == Some(libc::EIO),
        "close of the still-open lock handle: {closed} ({close_err}), expected EIO; log:\n{}",
        m.log()
    );
    // …and its next fsync, once.
    expect_errno(
        File::open(m.path("refs/heads/main")).and_then(|f| f.sync_all()),
        &[libc::EIO],
        "fsync by the process whose edit was dropped",
    )?;
    sync_ref(&m, "refs/heads/main").map_err(|e| format!("second fsync (reported once): {e}"))?;
    ensure!(
        m.log().contains("refs/heads/shared"),
        "no log line names the dropped edit"
    );
    m.unmount()
}
mount_test!(case3_conflict_at_commit_reaches_the_stager, timeout = 120);

/// Case 4: reflogs exactly as the files backend keeps them, for each client pattern.
pub fn case4_reflogs_like_files_backend(ctx: &Ctx) -> TestResult {
    let mut p = Pair::new(&ctx.path("pair"), 5, &[])?;
    let c = p.commits.clone();
    p.git(&["update-ref", "-m", "init", "refs/heads/main", &c[4]])?;
    p.git(&["update-ref", "-m", "init", "refs/heads/dev", &c[0]])?;
    // A stale HEAD echo must not replace symbolic-ref's message.
    p.git(&["update-ref", "-m", "reset: moving to HEAD~1", "HEAD", &c[3]])?;
    p.git(&["symbolic-ref", "-m", "to dev", "HEAD", "refs/heads/dev"])?;
    p.compare("update-ref HEAD; symbolic-ref -m 'to dev' HEAD")?;
    // dulwich: fsync of the lock between the append and the rename: one entry.
    diff::update(&mut p, Style::Dulwich, "refs/heads/dev", &c[1], "dulwich")?;
    p.compare("dulwich update")?;
    // GitPython: the line after the rename: one entry, the real one.
    diff::update(
        &mut p,
        Style::GitPython,
        "refs/heads/dev",
        &c[2],
        "gitpython",
    )?;
    p.compare("GitPython update")?;
    // A script's `mv x.lock x` and a shell's `echo > x`: no entry.
    diff::update(&mut p, Style::Mv, "refs/heads/main", &c[1], "")?;
    diff::update(&mut p, Style::Echo, "refs/heads/new", &c[2], "")?;
    p.compare("mv and echo without a reflog line")?;
    // A line and its rename more than 100 ms apart: one entry.
    let line = p.line(&c[1], &c[2], "slow");
    let c2 = c[2].clone();
    p.raw(
        "git update with 150 ms between append and rename",
        move |root| {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(root.join("refs/heads/main.lock"))?;
            f.write_all(format!("{c2}\n").as_bytes())?;
            drop(f);
            fs::OpenOptions::new()
                .append(true)
                .open(root.join("logs/refs/heads/main"))?
                .write_all(line.as_bytes())?;
            std::thread::sleep(Duration::from_millis(150));
            fs::rename(
                root.join("refs/heads/main.lock"),
                root.join("refs/heads/main"),
            )
        },
    )?;
    p.compare("append and rename 150 ms apart")?;
    // libgit2's branch rename: unlink the ref first, then move its reflog.
    ensure!(
        diff::libgit2_rename(&mut p, "refs/heads/dev", "refs/heads/moved")?,
        "libgit2 rename did not run"
    );
    p.compare("libgit2 branch rename")?;
    // Unlinking a ref keeps its reflog.
    p.raw("rm refs/heads/moved", |root| {
        fs::remove_file(root.join("refs/heads/moved"))
    })?;
    p.compare("rm of a ref with a reflog")?;
    // dulwich rewrites a reflog through a read-write handle.
    diff::dulwich_drop_newest(&mut p, "refs/heads/main")?;
    p.compare("dulwich rb+ reflog drop")?;
    // A reflog rewritten to nothing stays, empty (stash pop of the last entry, expire).
    p.git(&["reflog", "expire", "--expire=now", "--all"])?;
    p.compare("reflog expire --expire=now --all")?;
    p.git_stack(&["reflog", "exists", "refs/heads/main"])
        .map_err(|e| format!("reflog of main gone after expire: {e}"))?;
    p.m.unmount()
}
mount_test!(case4_reflogs_like_files_backend, timeout = 120);

/// Case 5: files of the git directory that are not refs live as bounded scratch files;
/// a reflog opened read-write can be read.
pub fn case5_non_ref_root_files_and_rw_reflogs(ctx: &Ctx) -> TestResult {
    let (_repo, m, model) = setup(ctx, &[])?;
    for name in ["COMMIT_EDITMSG", "FETCH_HEAD", "MERGE_MSG", "gc.pid"] {
        at(fs::write(m.path(name), b"some text\n"), name, line!())?;
        let back = at(fs::read(m.path(name)), name, line!())?;
        ensure!(back == b"some text\n", "{name} read back {back:?}");
        at(fs::remove_file(m.path(name)), name, line!())?;
    }
    let mut f = at(
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.path("logs/refs/heads/main")),
        "open rb+",
        line!(),
    )?;
    let mut text = Vec::new();
    at(
        io::Read::read_to_end(&mut f, &mut text),
        "read rb+",
        line!(),
    )?;
    ensure!(
        Some(&text) == model.get("logs/refs/heads/main"),
        "a reflog read through a read-write handle: {:?}",
        String::from_utf8_lossy(&text)
    );
    drop(f);
    m.unmount()
}
mount_test!(case5_non_ref_root_files_and_rw_reflogs, timeout = 120);

/// Case 7: what would break git is refused, with an error a shell sees (junk written
/// into HEAD is kept beside the stack as a files `.git` keeps it, the stack keeping its
/// HEAD: `fs/broken.rs`).
pub fn case7_refusals(ctx: &Ctx) -> TestResult {
    let (repo, m, _) = setup(ctx, &[])?;
    let tables = repo.tables_list()?;
    expect_errno(fs::remove_file(m.path("HEAD")), &[libc::EPERM], "rm HEAD")?;
    at(
        write_lock(lock(&m.path("HEAD.lock"))?, "ref: foo/bar\n"),
        "write HEAD.lock",
        line!(),
    )?;
    expect_errno(
        fs::rename(m.path("HEAD.lock"), m.path("HEAD")),
        &[libc::EINVAL],
        "HEAD outside refs/",
    )?;
    at(fs::remove_file(m.path("HEAD.lock")), "unlink", line!())?;
    // Below refs/ a bad name or junk is kept beside the stack as a broken ref, as on disk
    // (`fs/broken.rs`, mount-tests/broken.rs): never in the stack.
    at(File::create(m.path("refs/heads/a..b")), "create", line!())?;
    at(
        fs::remove_file(m.path("refs/heads/a..b")),
        "unlink",
        line!(),
    )?;
    let out = Command::new("sh")
        .arg("-c")
        .arg("echo garbage > \"$1\" && cat \"$1\" && echo 'ref: refs/heads/main' > \"$1\"")
        .arg("sh")
        .arg(m.path("HEAD"))
        .output()?;
    ensure!(
        out.status.success() && out.stdout == b"garbage\n",
        "`echo garbage > HEAD`, read back, written back: {:?}",
        out
    );
    sync_ref(&m, "refs/heads/main")?;
    ensure!(
        repo.tables_list()? == tables,
        "a refused write, or a broken HEAD, changed the stack"
    );
    m.unmount()
}
mount_test!(case7_refusals, timeout = 120);

/// Resident memory of a process in KiB.
fn rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Scratch files are bounded: `truncate -s 1T` of a ref and an `ftruncate` of a lock to
/// 512 MiB are refused (EFBIG/EPERM), the mount lives on, its memory stays small.
pub fn scratch_files_are_bounded(ctx: &Ctx) -> TestResult {
    let (_repo, mut m, model) = setup(ctx, &[])?;
    let out = Command::new("truncate")
        .args(["-s", "1T"])
        .arg(m.path("refs/heads/main"))
        .output()?;
    ensure!(!out.status.success(), "truncate -s 1T of a ref succeeded");
    let l = at(lock(&m.path("refs/heads/main.lock")), "lock", line!())?;
    expect_errno(
        l.set_len(512 << 20),
        &[libc::EFBIG],
        "ftruncate of a lock to 512 MiB",
    )?;
    expect_errno(
        l.set_len(1 << 40),
        &[libc::EFBIG],
        "ftruncate of a lock to 1 TiB",
    )?;
    drop(l);
    let big = at(lock(&m.path("packed-refs.new")), "lock", line!())?;
    expect_errno(
        big.set_len(1 << 40),
        &[libc::EFBIG],
        "ftruncate of packed-refs.new to 1 TiB",
    )?;
    drop(big);
    at(
        fs::remove_file(m.path("packed-refs.new")),
        "unlink",
        line!(),
    )?;
    at(
        fs::remove_file(m.path("refs/heads/main.lock")),
        "unlink",
        line!(),
    )?;
    ensure!(m.alive(), "the mount died");
    let rss = m.pid().map(rss_kib).unwrap_or(0);
    ensure!(
        rss < 200 << 10,
        "mount RSS {rss} KiB after refused truncates"
    );
    ensure_same_tree(&model, &mount_tree(&m)?, "after refused truncates")?;
    m.unmount()
}
mount_test!(scratch_files_are_bounded, timeout = 120);

/// A `tables.list.lock` left by a killed writer: the batch fails within seconds (not a
/// minute) with EIO and one log line naming the lock, its age and `reftablefs unlock`;
/// once the lock is removed, writes work again.
pub fn stale_stack_lock_fails_fast(ctx: &Ctx) -> TestResult {
    let (repo, m, _) = setup(ctx, &[])?;
    let stack_lock = repo.gitdir.join("reftable/tables.list.lock");
    fs::write(&stack_lock, b"")?;
    let status = Command::new("touch")
        .args(["-d", "-1 minute"])
        .arg(&stack_lock)
        .status()?;
    ensure!(status.success(), "touch -d");
    let c = repo.rev_parse("HEAD~1")?;
    let l = at(lock(&m.path("refs/heads/main.lock")), "lock", line!())?;
    at(write_lock(l, &format!("{c}\n")), "write_lock", line!())?;
    at(
        fs::rename(m.path("refs/heads/main.lock"), m.path("refs/heads/main")),
        "rename",
        line!(),
    )?;
    let start = Instant::now();
    expect_errno(
        File::open(m.path("refs/heads/main")).and_then(|f| f.sync_all()),
        &[libc::EIO],
        "fsync while tables.list.lock is stale",
    )?;
    let took = start.elapsed();
    ensure!(took < Duration::from_secs(5), "fsync took {took:?} to fail");
    let log = m.log();
    ensure!(
        log.contains("tables.list.lock") && log.contains("reftablefs unlock"),
        "no clear log line about the stale lock:\n{log}"
    );
    fs::remove_file(&stack_lock)?;
    let l = at(lock(&m.path("refs/heads/main.lock")), "lock", line!())?;
    at(write_lock(l, &format!("{c}\n")), "write_lock", line!())?;
    at(
        fs::rename(m.path("refs/heads/main.lock"), m.path("refs/heads/main")),
        "rename",
        line!(),
    )?;
    sync_ref(&m, "refs/heads/main")?;
    ensure!(
        repo.rev_parse("refs/heads/main")? == c,
        "update after unlock lost"
    );
    m.unmount()
}
mount_test!(stale_stack_lock_fails_fast, timeout = 120);

/// Requests never wait for a commit: with every commit slowed to 1 s (test-only knob
/// `RTFS_TEST_COMMIT_DELAY_MS`), creating a lock stays fast. Prints p50/p99.
pub fn lock_create_latency_during_slow_commit(ctx: &Ctx) -> TestResult {
    if !cfg!(feature = "test-hooks") {
        // The knob is compiled in only with the feature (make mount-test builds with it).
        crate::harness::note(
            "SKIP lock_create_latency_during_slow_commit: built without the test-hooks feature",
        );
        return Ok(());
    }
    crate::harness::within_bound_attempts(ctx, 3, lock_create_latency_during_slow_commit_once)
}
mount_test!(lock_create_latency_during_slow_commit, timeout = 120);

fn lock_create_latency_during_slow_commit_once(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let c = repo.commit("c")?;
    let m = Mount::start_env(
        &repo.gitdir,
        &ctx.path("mnt"),
        &[],
        &[("RTFS_TEST_COMMIT_DELAY_MS", "1000")],
    )?;
    let root = m.mnt.clone();
    let c2 = c.clone();
    // A writer keeps the batcher committing (each commit takes 1 s).
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let writer = std::thread::spawn(move || -> Result<u32, String> {
        let mut n = 0;
        while !stop2.load(Ordering::SeqCst) {
            let name = format!("refs/heads/w{n}");
            let f = lock(&root.join(format!("{name}.lock"))).map_err(|e| e.to_string())?;
            write_lock(f, &format!("{c2}\n")).map_err(|e| e.to_string())?;
            fs::rename(root.join(format!("{name}.lock")), root.join(&name))
                .map_err(|e| e.to_string())?;
            File::open(root.join(&name))
                .and_then(|f| f.sync_all())
                .map_err(|e| e.to_string())?;
            n += 1;
        }
        Ok(n)
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut lat = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut k = 0;
    while Instant::now() < deadline {
        let p = m.path(&format!("refs/heads/probe{k}.lock"));
        let t = Instant::now();
        let f = at(lock(&p), "lock", line!())?;
        lat.push(t.elapsed());
        drop(f);
        at(fs::remove_file(&p), "unlink", line!())?;
        k += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::SeqCst);
    let commits = writer.join().map_err(|_| "writer panicked")??;
    lat.sort();
    let pct = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize];
    let (p50, p99) = (pct(0.5), pct(0.99));
    note(&format!(
        "lock create with 1 s commits: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms ({commits} commits)",
        lat.len(),
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        lat.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
    ));
    ensure!(commits >= 2, "the writer made {commits} commits");
    ensure!(
        p99 < Duration::from_millis(100),
        "lock creation waited for the commit: p99 {p99:?}"
    );
    m.unmount()
}

/// A compare-and-swap client through the mount (a process of its own, so that fsync
/// reports only its own failures): for SECONDS, lock the counter ref, read it, write the
/// next value, rename, fsync; prints how many increments had rename and fsync return 0.
const CAS_CLIENT: &str = r#"
import os, sys, time, errno
mnt, ref, secs = sys.argv[1], sys.argv[2], float(sys.argv[4])
ids = open(sys.argv[3]).read().split()
index = {v: i for i, v in enumerate(ids)}
path = os.path.join(mnt, ref); lock = path + '.lock'
ok = 0; failed = 0; end = time.time() + secs
while time.time() < end:
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as e:
        if e.errno == errno.EEXIST:
            time.sleep(0.001); continue
        raise
    try:
        with open(path) as f:
            k = index[f.read().strip()]
        if k + 1 >= len(ids):
            os.close(fd); os.unlink(lock); break
        os.write(fd, (ids[k + 1] + '\n').encode()); os.close(fd)
        try:
            os.rename(lock, path)
        except OSError:
            os.unlink(lock); failed += 1; continue
        try:
            rfd = os.open(path, os.O_RDONLY); os.fsync(rfd); os.close(rfd); ok += 1
        except OSError:
            failed += 1
    except Exception:
        try: os.unlink(lock)
        except OSError: pass
        raise
print(ok, failed)
"#;

/// Compare-and-swap increments of one counter ref by git 2.47 on the stack and by two
/// client processes through the mount, with two hot readers keeping the counter's page
/// cached (`RTFS_CAS_SECS`, default 8 s): the final counter
/// equals the number of increments whose rename and fsync (git: exit status) reported
/// success; every other attempt saw an error. Nothing acknowledged is lost, nothing is
/// silently overwritten.
pub fn cas_increments_never_lost(ctx: &Ctx) -> TestResult {
    let secs: f64 = std::env::var("RTFS_CAS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8.0);
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("base")?;
    // The counter's values: distinct blobs, value k = blob k.
    let dir = ctx.path("blobs");
    fs::create_dir_all(&dir)?;
    let n = 20_000;
    let mut list = String::new();
    for i in 0..n {
        let p = dir.join(format!("b{i}"));
        fs::write(&p, format!("{i}\n"))?;
        list.push_str(&format!("{}\n", p.display()));
    }
    let list_path = ctx.path("blobs.list");
    fs::write(&list_path, list)?;
    let out = repo
        .cmd(&["hash-object", "-w", "--stdin-paths"])
        .stdin(File::open(&list_path)?)
        .output()?;
    crate::harness::check(&out, "git hash-object")?;
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    ensure!(ids.len() == n, "hash-object gave {} ids", ids.len());
    let index: std::collections::HashMap<String, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, v)| (v.clone(), i))
        .collect();
    let counter = "refs/counter/c";
    repo.git(&["update-ref", counter, &ids[0]])?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let ids_path = ctx.path("ids.txt");
    fs::write(&ids_path, ids.join("\n"))?;
    // Readers keeping the counter's page hot (issue 23: with them, an open after an
    // update could read the older value and an increment was lost).
    let readers = hot_readers(&m.path(counter), 2)?;
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(
            Command::new("python3")
                .arg("-c")
                .arg(CAS_CLIENT)
                .arg(&m.mnt)
                .arg(counter)
                .arg(&ids_path)
                .arg(format!("{secs}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?,
        );
    }
    // git 2.47 on the stack, directly.
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut git_ok, mut git_failed) = (0usize, 0usize);
    while Instant::now() < end {
        let cur = repo.rev_parse(counter)?;
        let k = *index.get(&cur).ok_or("counter has an unknown value")?;
        if k + 1 >= n {
            break;
        }
        let out = repo.git_output(&["update-ref", counter, &ids[k + 1], &cur])?;
        if out.status.success() {
            git_ok += 1;
        } else {
            git_failed += 1;
        }
    }
    let mut mount_ok = 0usize;
    let mut mount_failed = 0usize;
    for c in clients {
        let out = c.wait_with_output()?;
        crate::harness::check(&out, "CAS client through the mount")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut it = text
            .split_whitespace()
            .map(|v| v.parse::<usize>().unwrap_or(0));
        mount_ok += it.next().unwrap_or(0);
        mount_failed += it.next().unwrap_or(0);
    }
    drop(readers);
    sync_ref(&m, counter)?;
    let log = m.log();
    m.unmount()?;
    let final_k = *index
        .get(&repo.rev_parse(counter)?)
        .ok_or("final counter has an unknown value")?;
    note(&format!(
        "{secs} s: git {git_ok} ok / {git_failed} failed, mount {mount_ok} ok / {mount_failed} failed, counter {final_k}"
    ));
    ensure!(
        final_k == git_ok + mount_ok,
        "counter {final_k}, but {} increments were acknowledged (git {git_ok}, mount {mount_ok}); \
         the mount's log:\n{}",
        git_ok + mount_ok,
        log.lines().rev().take(80).collect::<Vec<_>>().join("\n")
    );
    ensure!(mount_ok > 0 && git_ok > 0, "one side made no increment");
    Ok(())
}
mount_test!(cas_increments_never_lost, timeout = 180);

/// Hot readers of one ref through the mount: processes looping open/read/close/stat on it
/// until killed (argv: the file).
const HOT_READER: &str = r#"
import os, sys
p = sys.argv[1]
while True:
    try:
        fd = os.open(p, os.O_RDONLY); os.read(fd, 4096); os.close(fd); os.stat(p)
    except OSError:
        pass
"#;

/// Starts `n` [`HOT_READER`]s on `path`; they are killed when the returned guard drops.
fn hot_readers(path: &Path, n: usize) -> TestResult<Killer> {
    let mut kids = Vec::new();
    for _ in 0..n {
        kids.push(
            Command::new("python3")
                .arg("-c")
                .arg(HOT_READER)
                .arg(path)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
    }
    Ok(Killer(kids))
}

/// Kills and reaps its child processes when dropped (every exit path of a test).
struct Killer(Vec<std::process::Child>);

impl Drop for Killer {
    fn drop(&mut self) {
        for k in &mut self.0 {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

/// The race of issue 23 (a stale read after taking a lock): per round, git 2.47 on the
/// stack moves `refs/counters/c0` from k to k+1 (`update-ref --stdin`, "commit: ok"), then
/// a client through the mount takes `c0.lock`, reads `c0` — it must read k+1, since the
/// update returned before this open started — writes the next value, renames and fsyncs,
/// while two hot readers keep the ref's page cached. Before the fix about 1 round in 100
/// read k (an open answered "keep the page" while another open's drop of the old page
/// had not happened yet); 3,000 rounds (or 90 s) catch that rate, and the issue's 2 in
/// 1,500, with high probability. The counter ends at twice the rounds: no increment lost.
pub fn an_open_after_an_update_reads_it(ctx: &Ctx) -> TestResult {
    let rounds: usize = std::env::var("RTFS_RACE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("base")?;
    let dir = ctx.path("blobs");
    fs::create_dir_all(&dir)?;
    let n = 3 * rounds + 2;
    let mut list = String::new();
    for i in 0..n {
        let p = dir.join(format!("b{i}"));
        fs::write(&p, format!("{i}\n"))?;
        list.push_str(&format!("{}\n", p.display()));
    }
    let list_path = ctx.path("blobs.list");
    fs::write(&list_path, list)?;
    let out = repo
        .cmd(&["hash-object", "-w", "--stdin-paths"])
        .stdin(File::open(&list_path)?)
        .output()?;
    crate::harness::check(&out, "git hash-object")?;
    let ids_path = ctx.path("ids.txt");
    fs::write(&ids_path, &out.stdout)?;
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    ensure!(ids.len() == n, "hash-object gave {} ids", ids.len());
    let counter = "refs/counters/c0";
    repo.git(&["update-ref", counter, &ids[0]])?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let _readers = hot_readers(&m.path(counter), 2)?;
    let out = Command::new("python3")
        .arg("-c")
        .arg(RACE_DRIVER)
        .arg(&m.mnt)
        .arg(&repo.gitdir)
        .arg(&ids_path)
        .arg(rounds.to_string())
        .arg("150")
        .output()?;
    crate::harness::check(&out, "the race driver")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut it = text
        .split_whitespace()
        .map(|v| v.parse::<usize>().unwrap_or(0));
    let (done, stale) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    let (plain, last) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    drop(_readers);
    let final_id = repo.rev_parse(counter)?;
    m.unmount()?;
    note(&format!(
        "{plain} plain rounds, {done} lock rounds, {stale} stale reads"
    ));
    ensure!(
        plain >= 1000 && done >= 300,
        "only {plain} plain and {done} lock rounds ran: {text}"
    );
    ensure!(
        stale == 0,
        "{stale} opens after git's update returned read the older value:\n{text}"
    );
    ensure!(
        last == plain + 2 * done && final_id == ids[last],
        "the counter is not at {}: an increment was lost",
        plain + 2 * done
    );
    Ok(())
}
// The driver stops itself after 150 s (half for each phase: under a load average of 10,
// 75 s gives some 380 lock rounds, 45 s gave 230, below the 300 asked for); making and
// hashing the 9,002 blobs took most of 300 s under a load average of 12.
mount_test!(an_open_after_an_update_reads_it, timeout = 600);

/// The driver of [`an_open_after_an_update_reads_it`]: argv mnt, gitdir, ids file,
/// rounds, seconds at most; prints "rounds stale" and one line per stale read.
const RACE_DRIVER: &str = r#"
import os, sys, subprocess, time
mnt, gitdir, ids_path, rounds, secs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
ids = open(ids_path).read().split()
index = {v: i for i, v in enumerate(ids)}
ref = 'refs/counters/c0'
path = os.path.join(mnt, ref); lock = path + '.lock'
git = subprocess.Popen(['git', '--git-dir', gitdir, 'update-ref', '--stdin'],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
def git_cas(old, new):
    git.stdin.write(f'start\nupdate {ref} {new} {old}\ncommit\n'); git.stdin.flush()
    for want in ('start: ok', 'commit: ok'):
        line = git.stdout.readline().strip()
        if line != want:
            raise SystemExit(f'git update-ref --stdin: {line!r}, expected {want!r}')
k = 0; stale = 0; done = 0; notes = []
end = time.time() + secs
root = os.open(mnt, os.O_RDONLY)
# Phase 1: git's update, then a plain read (the mount writes nothing, so the name stays
# on its page-cached inode).
plain = 0
while plain < rounds and time.time() < end - secs / 2:
    git_cas(ids[k], ids[k + 1]); k += 1
    with open(path) as f:
        v = index[f.read().strip()]
    if v != k:
        stale += 1; notes.append(f'plain round {plain}: read {v} right after git wrote {k}')
    plain += 1
# Phase 2: git's update, then the client's lock, read, write, rename, fsync.
while done < rounds and time.time() < end:
    git_cas(ids[k], ids[k + 1]); k += 1
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    with open(path) as f:
        v = index[f.read().strip()]
    if v != k:
        stale += 1; notes.append(f'round {done}: read {v} under the lock, git had written {k}')
    os.write(fd, (ids[v + 1] + '\n').encode()); os.close(fd)
    os.rename(lock, path)
    os.fsync(root)
    k = v + 1; done += 1
git.stdin.close(); git.wait()
print(done, stale, plain, k)
for n in notes[:20]: print(n)
"#;

/// Issue 23, silent refusals, and issue 25.6: a value that can never become a ref is
/// never a success with nothing stored. Below `refs/` it is kept as written, beside the
/// stack (a broken ref, as a files `.git` keeps it: `fs/broken.rs`); a symref pointing to
/// itself is deleted.
/// - `echo <null id> > refs/heads/zero` and a program's write of it exit 0, and the file
///   holds the null id (git 2.39 reports it broken), never in the stack;
/// - an empty ref file (`touch`, a bare create and close) exits 0 and stays, empty;
/// - git 2.39's `branch -d self` of `refs/heads/self` → `refs/heads/self` (t3200) exits
///   0 and the symref is gone for good (git 2.47 reads the stack after fsync and again
///   after a second: it never comes back).
pub fn never_refs_fail_at_the_call(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("base")?;
    repo.git(&["symbolic-ref", "refs/heads/self", "refs/heads/self"])?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let null = "0".repeat(40);
    // The null id, written the way a shell does and the way a program does.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("echo {null} > refs/heads/zero"))
        .current_dir(&m.mnt)
        .output()?;
    crate::harness::check(&out, "echo <null id> > refs/heads/zero")?;
    at(
        File::create(m.path("refs/heads/zero2"))
            .and_then(|mut f| f.write_all(format!("{null}\n").as_bytes())),
        "write the null id into refs/heads/zero2",
        line!(),
    )?;
    // An empty ref file: `touch`, and a create closed with its status checked.
    let out = Command::new("touch")
        .arg(m.path("refs/heads/empty"))
        .output()?;
    crate::harness::check(&out, "touch refs/heads/empty")?;
    let out = Command::new("python3")
        .arg("-c")
        .arg("import os,sys; os.close(os.open(sys.argv[1], os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o644))")
        .arg(m.path("refs/heads/empty2"))
        .output()?;
    crate::harness::check(&out, "create and close of an empty refs/heads/empty2")?;
    // Kept as written in the mount, never in the stack.
    for (name, want) in [
        ("zero", format!("{null}\n")),
        ("zero2", format!("{null}\n")),
        ("empty", String::new()),
        ("empty2", String::new()),
    ] {
        let got = at(
            fs::read_to_string(m.path(&format!("refs/heads/{name}"))),
            "read_to_string",
            line!(),
        )?;
        ensure!(got == want, "refs/heads/{name} holds {got:?}");
    }
    let out = Command::new("/usr/bin/git")
        .args(["for-each-ref"])
        .env("GIT_DIR", &m.mnt)
        .output()?;
    crate::harness::check(&out, "git 2.39 for-each-ref")?;
    let err = String::from_utf8_lossy(&out.stderr);
    for name in ["zero", "zero2", "empty", "empty2"] {
        ensure!(
            err.contains(&format!("ignoring broken ref refs/heads/{name}\n")),
            "git 2.39 does not report refs/heads/{name} broken: {err}"
        );
    }
    for name in ["zero", "zero2", "empty", "empty2"] {
        at(
            fs::remove_file(m.path(&format!("refs/heads/{name}"))),
            "remove_file",
            line!(),
        )?;
    }
    // The self-referential symref, deleted by git 2.39 through the mount.
    let out = Command::new("/usr/bin/git")
        .args(["branch", "-d", "self"])
        .env("GIT_DIR", &m.mnt)
        .output()?;
    crate::harness::check(&out, "git 2.39 branch -d self")?;
    sync_ref(&m, "HEAD")?;
    for wait in [0, 1000] {
        std::thread::sleep(Duration::from_millis(wait));
        let refs = repo.git(&["for-each-ref", "--format=%(refname)"])?;
        ensure!(
            !refs.lines().any(|l| l.starts_with("refs/heads/zero")
                || l.starts_with("refs/heads/empty")
                || l == "refs/heads/self"),
            "after {wait} ms the stack holds: {refs}"
        );
    }
    let log = m.log();
    ensure!(!log.contains("not written"), "a batch failed:\n{log}");
    m.unmount()?;
    verify_stack(&repo)
}
mount_test!(never_refs_fail_at_the_call, timeout = 60);

/// Issue 23, a full disk: with the git directory on a full 20 MiB file system, every
/// update a client was told succeeded is in the stack and every other one failed at a
/// system call — clients that never fsync (git 2.39, dulwich, pygit2) included. A
/// client's lock/write/rename loop runs until a call fails (the mount held space when it
/// started, so the first ones succeed and are written); then git 2.39 (`branch`,
/// `update-ref`, `tag`), dulwich and pygit2 fail, `status` records ENOSPC, the stack
/// holds exactly the acknowledged refs, and once there is room again a write succeeds.
pub fn full_disk_fails_at_the_call(ctx: &Ctx) -> TestResult {
    let Some(small) = crate::harness::SmallFs::mount(&ctx.path("small"), "20m")? else {
        note("SKIP: needs root to mount a size-limited tmpfs");
        return Ok(());
    };
    let repo = Repo::init(&small.0.join("repo"), "reftable")?;
    let base = repo.commit("base")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let filler = small.fill()?;
    // A files-protocol client without fsync: lock, write, rename until a call fails.
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            r#"
import os, sys
mnt, val = sys.argv[1], sys.argv[2]
ok = 0
for i in range(20000):
    path = os.path.join(mnt, 'refs/heads/f%05d' % i)
    try:
        fd = os.open(path + '.lock', os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, (val + '\n').encode()); os.close(fd)
        os.rename(path + '.lock', path)
    except OSError as e:
        print(ok, e.errno); break
    ok += 1
"#,
        )
        .arg(&m.mnt)
        .arg(&base)
        .output()?;
    crate::harness::check(&out, "the lock/write/rename loop")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut it = text.split_whitespace();
    let acked: usize = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    let errno: i32 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    ensure!(
        errno == libc::ENOSPC && acked < 20_000,
        "the loop ended with {text:?}, want ENOSPC before 20,000 updates"
    );
    let home = ctx.path("home239");
    fs::create_dir_all(&home)?;
    let git239 = |args: &[&str]| -> TestResult<Output> {
        let mut c = Command::new("/usr/bin/git");
        crate::harness::git_env(&mut c, &home, "1700000000 +0000");
        Ok(c.args(args).env("GIT_DIR", &m.mnt).output()?)
    };
    // Every other client: success means written, failure means nothing written. The
    // mount may still hold room for some (what it holds is really written).
    let mut want: Vec<String> = (0..acked).map(|i| format!("refs/heads/f{i:05}")).collect();
    let mut failed = 0usize;
    for (args, name) in [
        (&["branch", "b"][..], "refs/heads/b"),
        (&["update-ref", "refs/heads/c", "HEAD"], "refs/heads/c"),
        (&["tag", "t"], "refs/tags/t"),
    ] {
        if git239(args)?.status.success() {
            want.push(name.into());
        } else {
            failed += 1;
        }
    }
    let py = |code: &str| -> TestResult<Output> {
        Ok(Command::new("python3")
            .arg("-c")
            .arg(code)
            .arg(&m.mnt)
            .arg(&base)
            .output()?)
    };
    for (code, name) in [
        ("import sys\nfrom dulwich.repo import Repo\nRepo(sys.argv[1]).refs[b'refs/heads/d'] = sys.argv[2].encode()", "refs/heads/d"),
        ("import sys, pygit2\npygit2.Repository(sys.argv[1]).references.create('refs/heads/e', sys.argv[2])", "refs/heads/e"),
    ] {
        if py(code)?.status.success() {
            want.push(name.into());
        } else {
            failed += 1;
        }
    }
    // git 2.39 until it fails: it must, within bounds, and the mount records ENOSPC for
    // the ref it refused.
    let mut git_ok = 0usize;
    let mut refused = None;
    for i in 0..3000 {
        let name = format!("refs/heads/g{i:04}");
        // Full again first: the mount's auto-compaction frees what the many small tables
        // of the loop above took (under load, batches are smaller and tables more: once
        // 3,000 updates fitted in what a compaction freed). The previous update is written
        // first (an fsync of the root waits for it): filling while its batch is written
        // would take the room the mount lends that write, the one window its reservation
        // leaves open (fs/reserve.rs), and the test would measure that instead.
        let _ = File::open(&m.mnt).and_then(|d| d.sync_all());
        small.fill()?;
        let out = git239(&["update-ref", &name, "HEAD"])?;
        if !out.status.success() {
            refused = Some(name);
            break;
        }
        want.push(name);
        git_ok += 1;
    }
    let Some(refused) = refused else {
        bail!("git 2.39 update-ref succeeded 3,000 times on a full disk");
    };
    let status = fs::read_to_string(m.path(".reftablefs/status"))?;
    ensure!(
        status
            .lines()
            .any(|l| l.contains(&refused[5..]) && l.contains("ENOSPC")),
        "status records no ENOSPC for {refused}:\n{status}"
    );
    let status = fs::read_to_string(m.path(".reftablefs/status"))?;
    ensure!(
        status.contains("ENOSPC"),
        "status records no ENOSPC:\n{status}"
    );
    // Exactly the acknowledged updates reached the stack (once everything pending is
    // written: the fsync of a reader reports nothing of the clients above).
    File::open(&m.mnt)?.sync_all()?;
    let refs = repo.git(&["for-each-ref", "--format=%(refname)"])?;
    want.push("refs/heads/main".into());
    want.sort();
    let have: Vec<String> = refs.lines().map(str::to_string).collect();
    ensure!(
        have == want,
        "{} updates were acknowledged; the stack holds {} refs: {:?}…\nthe mount's log:\n{}",
        want.len() - 1,
        have.len(),
        have.iter()
            .filter(|r| !want.contains(r))
            .take(5)
            .collect::<Vec<_>>(),
        m.log()
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Room again: the same write succeeds.
    fs::remove_file(&filler)?;
    let out = git239(&["branch", "room-again"])?;
    crate::harness::check(&out, "git 2.39 branch room-again with room again")?;
    sync_ref(&m, "refs/heads/room-again")?;
    ensure!(
        repo.rev_parse("refs/heads/room-again")? == base,
        "refs/heads/room-again not written once there was room"
    );
    note(&format!(
        "{acked} updates acknowledged and written before ENOSPC; then {failed} of 5 clients \
         failed, git 2.39 update-ref succeeded {git_ok} times before ENOSPC"
    ));
    m.unmount()?;
    verify_stack(&repo)?;
    drop(small);
    Ok(())
}
mount_test!(full_disk_fails_at_the_call, timeout = 120);
