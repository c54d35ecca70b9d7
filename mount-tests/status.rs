//! `reftablefs status` against live mounts: each is listed with its repository, pid,
//! mode and options, and one mount's details are its status file's when it serves one,
//! else "details not available from this mount".

use crate::harness::{expect_errno, Ctx, Mount, Repo, TestResult, BIN};
use crate::shells;
use serde_json::Value;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn status(args: &[&str]) -> TestResult<Output> {
    Ok(Command::new("timeout")
        .arg("20")
        .arg(BIN)
        .arg("status")
        .args(args)
        .stdin(Stdio::null())
        .output()?)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// An array's items (none for anything else).
fn items(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// The `--json` entry of `mnt` in the list of every mount.
fn listed(mnt: &Path) -> TestResult<Value> {
    let out = status(&["--json"])?;
    ensure!(out.status.success(), "status --json: {}", text(&out.stderr));
    let doc = serde_json::from_str::<Value>(&text(&out.stdout))
        .map_err(|e| format!("status --json: {e}"))?;
    let want = mnt.to_string_lossy();
    doc.get("mounts")
        .map(items)
        .unwrap_or_default()
        .iter()
        .find(|m| m.get("mountpoint").and_then(Value::as_str) == Some(&want))
        .cloned()
        .ok_or_else(|| format!("{want} not listed by status --json: {}", text(&out.stdout)).into())
}

/// Two live mounts (one read-only) are listed with repository, pid, mode and options;
/// `status MNT` shows one with its details or says they are not available; a directory
/// that is not a mount is an error (exit 1).
pub fn lists_live_mounts(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("one")?;
    let rw = Mount::start(&repo.gitdir, &ctx.path("rw"), &["--batch-window", "50"])?;
    let ro = Mount::start(
        &repo.gitdir,
        &ctx.path("ro"),
        &["--read-only", "--no-follow-cpu"],
    )?;
    let rw_mnt = rw.mnt.canonicalize()?;
    let ro_mnt = ro.mnt.canonicalize()?;

    let e = listed(&rw_mnt)?;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    ensure!(s(&e, "mode").as_deref() == Some("rw"), "rw mount: {}", e);
    ensure!(
        e.get("pid").and_then(Value::as_u64) == rw.pid().map(u64::from),
        "rw mount pid: {} vs {:?}",
        e,
        rw.pid()
    );
    ensure!(
        s(&e, "repository").as_deref() == Some(&*repo.gitdir.to_string_lossy()),
        "rw mount repository: {}",
        e
    );
    // `make mount-test-uring` adds `--io-uring` to every mount.
    let mut options = e.get("options").map(items).unwrap_or_default().to_vec();
    options.retain(|o| o.as_str() != Some("--io-uring"));
    ensure!(
        options == [Value::String("--batch-window=50".into())],
        "rw mount options: {}",
        e
    );
    let e = listed(&ro_mnt)?;
    ensure!(s(&e, "mode").as_deref() == Some("ro"), "ro mount: {}", e);
    ensure!(
        e.get("pid").and_then(Value::as_u64) == ro.pid().map(u64::from),
        "ro mount pid: {}",
        e
    );

    let out = status(&[])?;
    let listing = text(&out.stdout);
    for m in [&rw_mnt, &ro_mnt] {
        ensure!(
            listing.contains(&format!(
                "{}\n    repository:      {}\n",
                m.display(),
                repo.gitdir.display()
            )),
            "text listing lacks {}:\n{listing}",
            m.display()
        );
    }

    // One mount: details from its status file.
    let status_file = std::str::from_utf8(reftablefs::fs::status::DIR_NAME)?.to_owned()
        + "/"
        + std::str::from_utf8(reftablefs::fs::status::FILE_NAME)?;
    ensure!(
        rw_mnt.join(&status_file).exists(),
        "the mount serves no {status_file}"
    );
    let out = status(&[&rw_mnt.to_string_lossy()])?;
    ensure!(out.status.success(), "status MNT: {}", text(&out.stderr));
    let one = text(&out.stdout);
    ensure!(
        one.contains("pending edits:   0\n") && one.contains("last commit:     none since mount"),
        "status MNT:\n{one}"
    );
    // The inode table and a readable mount time.
    let cap = format!("(cap {})", reftablefs::fs::inode::INODE_CAP);
    ensure!(
        one.lines()
            .any(|l| l.trim_start().starts_with("known names:") && l.contains(&cap))
            && one.contains(" UTC ("),
        "status MNT shows no inode table or no UTC mount time:\n{one}"
    );
    let out = status(&["--json", &rw_mnt.to_string_lossy()])?;
    let doc = serde_json::from_str::<Value>(&text(&out.stdout))
        .map_err(|e| format!("status --json MNT: {e}"))?;
    let d = doc.get("details").cloned().unwrap_or(Value::Null);
    ensure!(
        d.get("inode_cap").and_then(Value::as_u64)
            == u64::try_from(reftablefs::fs::inode::INODE_CAP).ok()
            && d.get("known_names").and_then(Value::as_u64).is_some(),
        "status --json MNT: no inode table in {d:?}"
    );
    // Request threads follow their clients' CPU unless --no-follow-cpu (the ro mount).
    ensure!(
        d.get("follow_cpu").and_then(Value::as_bool) == Some(true)
            && one.contains("request threads: on their clients' CPU"),
        "status MNT: request threads do not follow their clients: {d:?}\n{one}"
    );
    ensure!(
        d.get("version").and_then(Value::as_u64) == Some(1)
            && d.get("pid").and_then(Value::as_u64) == rw.pid().map(u64::from)
            && s(&d, "mode").as_deref() == Some("rw")
            && s(&d, "repository").as_deref()
                == Some(&*repo.gitdir.canonicalize()?.to_string_lossy()),
        "status --json MNT: {}",
        doc
    );
    let out = status(&["--json", &ro_mnt.to_string_lossy()])?;
    let doc = serde_json::from_str::<Value>(&text(&out.stdout))
        .map_err(|e| format!("status --json MNT: {e}"))?;
    ensure!(
        doc.get("details").and_then(|d| s(d, "mode")).as_deref() == Some("ro")
            && doc
                .get("details")
                .and_then(|d| d.get("follow_cpu"))
                .and_then(Value::as_bool)
                == Some(false),
        "status --json of the read-only --no-follow-cpu mount: {}",
        doc
    );

    let out = status(&[&ctx.path("repo").to_string_lossy()])?;
    ensure!(
        out.status.code() == Some(1),
        "status on a plain directory: {:?}",
        out.status
    );
    ensure!(
        text(&out.stderr).contains("is not a reftablefs mount"),
        "{}",
        text(&out.stderr)
    );

    rw.unmount()?;
    ro.unmount()?;
    let out = status(&["--json"])?;
    let after = text(&out.stdout);
    ensure!(
        !after.contains(&*rw_mnt.to_string_lossy()),
        "unmounted, still listed: {after}"
    );
    Ok(())
}
mount_test!(lists_live_mounts, timeout = 120);

/// The details of `status --json MNT`.
fn details(mnt: &Path) -> TestResult<Value> {
    let out = status(&["--json", &mnt.to_string_lossy()])?;
    ensure!(
        out.status.success(),
        "status --json MNT: {}",
        text(&out.stderr)
    );
    let doc = serde_json::from_str::<Value>(&text(&out.stdout))
        .map_err(|e| format!("status --json MNT: {e}"))?;
    doc.get("details")
        .filter(|d| **d != Value::Null)
        .cloned()
        .ok_or_else(|| format!("no details: {}", doc).into())
}

/// A live mount with a pending edit (long batch window) and refused writes: `status`
/// shows the pending edit and the open batch's age, each refusal with its path,
/// operation, errno and reason; once the batch is written, the last commit names a
/// table of the stack. `.reftablefs` is found but not listed, refuses every change and
/// never reaches the git directory.
pub fn shows_pending_and_refused_writes(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let id = repo.commit("one")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &["--batch-window", "30000"])?;
    let mnt = m.mnt.canonicalize()?;

    // The status directory: found, not listed, read-only, not passed through.
    let names: Vec<String> = std::fs::read_dir(&mnt)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    ensure!(
        !names.iter().any(|n| n == ".reftablefs"),
        "the root lists .reftablefs: {names:?}"
    );
    ensure!(mnt.join(".reftablefs").is_dir(), ".reftablefs not found");
    let inside: Vec<String> = std::fs::read_dir(mnt.join(".reftablefs"))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    ensure!(inside == ["status"], ".reftablefs lists {inside:?}");
    let eacces = |r: std::io::Result<()>, what: &str| -> TestResult {
        match r {
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => Ok(()),
            other => bail!("{what}: {other:?}, want EACCES"),
        }
    };
    eacces(
        std::fs::write(mnt.join(".reftablefs/x"), b"x"),
        "create .reftablefs/x",
    )?;
    eacces(
        std::fs::write(mnt.join(".reftablefs/status"), b"x"),
        "write .reftablefs/status",
    )?;
    eacces(
        std::fs::remove_file(mnt.join(".reftablefs/status")),
        "rm status",
    )?;
    eacces(
        std::fs::create_dir(mnt.join(".reftablefs/d")),
        "mkdir in .reftablefs",
    )?;
    eacces(
        std::fs::rename(mnt.join(".reftablefs"), mnt.join("elsewhere")),
        "mv .reftablefs",
    )?;
    ensure!(
        !repo.gitdir.join(".reftablefs").exists(),
        ".reftablefs reached the git directory"
    );

    // A refused ref write and a pending one.
    // (A bad name below refs/ and junk in HEAD are kept as broken refs; HEAD pointing
    // outside refs/ is refused at the commit, here the fsync.)
    let bad = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(mnt.join("HEAD"))
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, b"ref: foo/bar\n")?;
            f.sync_all()
        });
    ensure!(
        bad.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::EINVAL),
        "write a HEAD outside refs/: {bad:?}"
    );
    ensure!(
        std::fs::read(mnt.join("HEAD"))? == b"ref: refs/heads/main\n",
        "the refused write changed HEAD"
    );
    std::fs::write(mnt.join("refs/heads/pending"), format!("{id}\n"))?;
    // Refusals that are not about a ref's name or content are recorded too: the
    // passed-through config, packed-refs, a file over its size bound.
    {
        use std::os::unix::fs::FileExt;
        let config = std::fs::OpenOptions::new()
            .write(true)
            .open(mnt.join("config"))?;
        expect_errno(
            config.write_all_at(b"#", 16 << 20),
            &[libc::EFBIG],
            "a byte at 16 MiB into config",
        )?;
    }
    expect_errno(
        std::fs::create_dir(mnt.join("packed-refs")),
        &[libc::EPERM],
        "mkdir packed-refs",
    )?;
    expect_errno(
        std::fs::write(mnt.join("refs/heads/huge.lock"), vec![b'0'; 70_000]),
        &[libc::EFBIG],
        "70,000 bytes into refs/heads/huge.lock",
    )?;
    let _ = std::fs::remove_file(mnt.join("refs/heads/huge.lock"));

    let d = details(&mnt)?;
    let u = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
    ensure!(
        u(&d, "pending_edits") == Some(1) && u(&d, "open_batch_age_ms").is_some(),
        "pending edit not shown: {}",
        d
    );
    let refused = d.get("refused").map(items).unwrap_or_default();
    let has = |path: &str, op: &str, errno: &str| {
        refused.iter().any(|e| {
            e.get("path").and_then(Value::as_str) == Some(path)
                && e.get("op").and_then(Value::as_str) == Some(op)
                && e.get("errno").and_then(Value::as_str) == Some(errno)
                && e.get("reason")
                    .and_then(Value::as_str)
                    .is_some_and(|r| !r.is_empty())
                && e.get("time").and_then(Value::as_u64).is_some()
        })
    };
    for (path, op, errno) in [
        ("HEAD", "write", "EINVAL"),
        (".reftablefs/x", "create", "EACCES"),
        (".reftablefs/status", "open", "EACCES"),
        (".reftablefs/status", "unlink", "EACCES"),
        (".reftablefs/d", "mkdir", "EACCES"),
        ("config", "write", "EFBIG"),
        ("packed-refs", "mkdir", "EPERM"),
        ("refs/heads/huge.lock", "write", "EFBIG"),
    ] {
        ensure!(
            has(path, op, errno),
            "refused {path} [{op}] {errno} not shown: {}",
            d
        );
    }
    ensure!(
        u(&d, "refused_total") == Some(refused.len() as u64) && refused.len() >= 6,
        "refused_total: {}",
        d
    );
    ensure!(
        d.get("last_commit") == Some(&Value::Null) && u(&d, "commits") == Some(0),
        "nothing committed yet: {}",
        d
    );
    let out = status(&[&mnt.to_string_lossy()])?;
    let shown = text(&out.stdout);
    for want in [
        "pending edits:   1 (open batch ",
        "HEAD [write] EINVAL: ",
        ".reftablefs/x [create] EACCES: the mount's status directory is read-only",
    ] {
        ensure!(shown.contains(want), "{want:?} not in status MNT:\n{shown}");
    }

    // fsync writes the batch now: the last commit names a table of the stack.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(mnt.join("refs/heads/pending"))?;
    f.sync_all()?;
    drop(f);
    let d = details(&mnt)?;
    ensure!(
        u(&d, "pending_edits") == Some(0)
            && d.get("open_batch_age_ms") == Some(&Value::Null)
            && u(&d, "commits") == Some(1),
        "after fsync: {}",
        d
    );
    let last = d.get("last_commit").cloned().unwrap_or(Value::Null);
    let table = last
        .get("table")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let list = String::from_utf8_lossy(&repo.tables_list()?).into_owned();
    ensure!(
        !table.is_empty()
            && list.lines().any(|l| l == table)
            && u(&last, "update_index").is_some()
            && u(&last, "time").is_some(),
        "last commit {} not in tables.list:\n{list}",
        last
    );
    m.unmount()?;
    ensure!(
        repo.rev_parse("refs/heads/pending")? == id,
        "the pending edit was not written"
    );
    Ok(())
}
mount_test!(shows_pending_and_refused_writes, timeout = 120);

/// The completion scripts offer live mounts as operands of `unmount` and `status`: in bash,
/// zsh and fish, the start of a live mount's path completes to the whole path.
pub fn completions_offer_live_mounts(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("one")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt-completion-probe"), &[])?;
    let mnt = m.mnt.canonicalize()?.to_string_lossy().into_owned();
    let partial = &mnt[..mnt.len() - "completion-probe".len()];
    let bin_dir = Path::new(BIN).parent().ok_or("no binary directory")?;
    let script = |shell: &str| -> TestResult<std::path::PathBuf> {
        let out = Command::new(BIN).args(["completions", shell]).output()?;
        ensure!(out.status.success(), "completions {shell}");
        let f = ctx.path(&format!("reftablefs.{shell}"));
        std::fs::write(&f, out.stdout)?;
        Ok(f)
    };
    for cmd in ["unmount", "status"] {
        let got = shells::bash(&script("bash")?, bin_dir, &["reftablefs", cmd, partial]);
        ensure!(
            got == mnt,
            "bash: {cmd} {partial} offered {got:?}, not {mnt}"
        );
        if shells::have("zsh") {
            let got = shells::zsh(
                &script("zsh")?,
                bin_dir,
                &format!("reftablefs {cmd} {partial}"),
            );
            ensure!(
                got == format!("reftablefs {cmd} {mnt} "),
                "zsh: {cmd} {partial} completed to {got:?}"
            );
        }
        if shells::have("fish") {
            let got = shells::fish(
                &script("fish")?,
                bin_dir,
                &format!("reftablefs {cmd} {partial}"),
            );
            ensure!(
                got == [mnt.clone()],
                "fish: {cmd} {partial} offered {got:?}"
            );
        }
    }
    m.unmount()
}
mount_test!(completions_offer_live_mounts, timeout = 120);

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: the kernel fills a zeroed set of the size given; 0 is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// `Cpus_allowed_list:` of each event-loop thread (`fuser-N`) of process `pid`.
fn event_loop_cpus(pid: u32) -> TestResult<Vec<String>> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let t = t?.path();
        let comm = std::fs::read_to_string(t.join("comm")).unwrap_or_default();
        if !comm.starts_with("fuser-") {
            continue;
        }
        let status = std::fs::read_to_string(t.join("status"))?;
        if let Some(l) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            out.push(l.trim().to_owned());
        }
    }
    Ok(out)
}

/// After a client pinned to one CPU opened a file through the mount a few hundred times,
/// an event-loop thread of the mount runs on that CPU alone; with `--no-follow-cpu` none
/// was moved (docs/fuse.md, "Request threads follow their clients' CPU").
pub fn request_threads_follow_their_client(ctx: &Ctx) -> TestResult {
    let cpus = allowed_cpus();
    let Some(&target) = cpus.last().filter(|_| cpus.len() >= 2) else {
        println!("SKIP: one CPU only: nothing to follow");
        return Ok(());
    };
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("one")?;
    let on = Mount::start(&repo.gitdir, &ctx.path("on"), &[])?;
    let off = Mount::start(&repo.gitdir, &ctx.path("off"), &["--no-follow-cpu"])?;
    let files = [on.path("HEAD"), off.path("HEAD")];
    let client = std::thread::spawn(move || -> std::io::Result<()> {
        pin_to(target)?;
        for _ in 0..500 {
            for f in &files {
                std::fs::read(f)?;
            }
        }
        Ok(())
    });
    client.join().map_err(|_| "client thread panicked")??;
    let (on_pid, off_pid) = (on.pid().ok_or("no pid")?, off.pid().ok_or("no pid")?);
    let want = target.to_string();
    let on_cpus = event_loop_cpus(on_pid)?;
    ensure!(
        on_cpus.contains(&want),
        "no event-loop thread of the mount moved to the client's CPU {target}: {on_cpus:?}"
    );
    let off_cpus = event_loop_cpus(off_pid)?;
    ensure!(
        !off_cpus.is_empty() && off_cpus.iter().all(|c| *c != want),
        "--no-follow-cpu: an event-loop thread was moved to CPU {target}: {off_cpus:?}"
    );
    on.unmount()?;
    off.unmount()?;
    Ok(())
}
mount_test!(request_threads_follow_their_client, timeout = 60);

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a local cpu set; 0 is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A client that moves to another CPU after the request threads followed it is not
/// followed there: the threads go back to every CPU the mount may use (`fs/cpu.rs`,
/// `Chase`; following such a client made every request cross CPUs, docs/benchmarks.md
/// "Issue 11, round 6").
pub fn request_threads_stop_following_a_client_that_moves(ctx: &Ctx) -> TestResult {
    let cpus = allowed_cpus();
    let (Some(&first), Some(&second)) = (cpus.first(), cpus.last()) else {
        println!("SKIP: no CPU list");
        return Ok(());
    };
    if first == second {
        println!("SKIP: one CPU only: nothing to follow");
        return Ok(());
    }
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("one")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let head = m.path("HEAD");
    let pid = m.pid().ok_or("no pid")?;
    let client = std::thread::spawn(move || -> TestResult<(Vec<String>, Vec<String>)> {
        pin_to(first)?;
        for _ in 0..500 {
            std::fs::read(&head)?;
        }
        let followed = event_loop_cpus(pid)?;
        pin_to(second)?;
        for _ in 0..1500 {
            std::fs::read(&head)?;
        }
        Ok((followed, event_loop_cpus(pid)?))
    });
    let (followed, after) = client.join().map_err(|_| "client thread panicked")??;
    let (first, second) = (first.to_string(), second.to_string());
    ensure!(
        followed.contains(&first),
        "no event-loop thread followed the client to CPU {first}: {followed:?}"
    );
    ensure!(
        !after.contains(&second),
        "an event-loop thread chased the client to CPU {second}: {after:?}"
    );
    ensure!(
        after.iter().any(|c| *c != first),
        "every event-loop thread stayed on CPU {first}, the client's old one: {after:?}"
    );
    m.unmount()?;
    Ok(())
}
mount_test!(
    request_threads_stop_following_a_client_that_moves,
    timeout = 60
);

/// A rename across the boundary between the ref view and the passed-through files is
/// refused (EXDEV, as across file systems: `mv` then copies) and, as every refusal,
/// recorded in `status` (it was only logged).
pub fn a_rename_across_trees_is_recorded(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let id = repo.commit("one")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let mnt = m.mnt.canonicalize()?;
    std::fs::write(mnt.join("refs/heads/x.lock"), format!("{id}\n"))?;
    expect_errno(
        std::fs::rename(mnt.join("refs/heads/x.lock"), mnt.join("description2")),
        &[libc::EXDEV],
        "rename refs/heads/x.lock to description2",
    )?;
    let d = details(&mnt)?;
    let refused = d.get("refused").map(items).unwrap_or_default();
    ensure!(
        refused.iter().any(|e| {
            e.get("path").and_then(Value::as_str) == Some("x.lock")
                && e.get("op").and_then(Value::as_str) == Some("rename")
                && e.get("errno").and_then(Value::as_str) == Some("EXDEV")
        }),
        "the refused rename is not recorded: {}",
        d
    );
    let _ = std::fs::remove_file(mnt.join("refs/heads/x.lock"));
    m.unmount()
}
mount_test!(a_rename_across_trees_is_recorded, timeout = 60);
