//! The stack under a live mount against crashes and foreign hands:
//! * `tables.list` moved away: reads fail with EIO, no table is deleted, moving it back
//!   restores everything (for the mount and for git);
//! * a table rewritten on disk (one flipped bit in an object id, then restored): the
//!   mount serves what the file holds, without a remount;
//! * kill -9 of the mount at random points while clients write through it with fsync
//!   acknowledgements, 20 rounds: no acknowledged update lost, `reftablefs verify`
//!   passes and git reads every ref, and `reftablefs unlock` leaves no orphan.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{check, note, wait_for, Ctx, Mount, Repo, Rng, TestResult, BIN};

fn listing(dir: &Path) -> TestResult<Vec<String>> {
    let mut v: Vec<String> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    Ok(v)
}

/// `reftablefs verify` in the repository: exit 0.
fn verify(repo: &Repo) -> TestResult {
    let out = Command::new(BIN)
        .arg("--git-dir")
        .arg(&repo.gitdir)
        .arg("verify")
        .output()?;
    check(&out, "reftablefs verify")
}

fn read_value(m: &Mount, name: &str) -> Result<String, String> {
    match fs::read_to_string(m.path(name)) {
        Ok(v) => Ok(v.trim().to_owned()),
        Err(e) => Err(format!("read {name}: {e}")),
    }
}

/// Moves `tables.list` away under a live mount and back.
pub fn moved_tables_list_is_eio_and_deletes_nothing(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let main = repo.commit("a")?;
    for i in 0..20 {
        repo.git(&["branch", &format!("b{i:02}")])?;
    }
    let refs_before = repo.git(&["for-each-ref"])?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    ensure!(read_value(&m, "refs/heads/main")? == main, "initial read");
    let dir = repo.gitdir.join("reftable");
    let saved = ctx.path("saved.list");
    fs::rename(dir.join("tables.list"), &saved)?;
    let files = listing(&dir)?;
    let waited = wait_for(Duration::from_secs(5), || {
        match fs::read(m.path("refs/heads/b07")) {
            Err(e) if e.raw_os_error() == Some(libc::EIO) => Ok(()),
            other => Err(format!("read gave {other:?}")),
        }
    })
    .map_err(|last| format!("no EIO with tables.list gone: {last}"))?;
    note(&format!(
        "EIO {} ms after the list was moved",
        waited.as_millis()
    ));
    // The mount emptied reftable/ within 0.5 s: give it well over that.
    std::thread::sleep(Duration::from_millis(1500));
    let _ = fs::read(m.path("refs/heads/main"));
    let _ = fs::read_dir(m.path("refs/heads")).map(|d| d.count());
    ensure!(
        listing(&dir)? == files,
        "reftable/ changed while tables.list was gone: {:?} -> {:?}",
        files,
        listing(&dir)?
    );
    ensure!(
        m.log().contains("tables.list"),
        "the log does not name tables.list:\n{}",
        m.log()
    );
    fs::rename(&saved, dir.join("tables.list"))?;
    wait_for(Duration::from_secs(5), || {
        match read_value(&m, "refs/heads/b07") {
            Ok(v) if v == main => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .map_err(|last| format!("not readable after the list came back: {last}"))?;
    ensure!(
        repo.git(&["for-each-ref"])? == refs_before,
        "git reads different refs after the list came back"
    );
    verify(&repo)?;
    m.unmount()
}
mount_test!(moved_tables_list_is_eio_and_deletes_nothing, timeout = 120);

/// Rewrites a table with one flipped bit in an object id, then restores it, under a live
/// mount: the mount follows the file both times.
pub fn changed_table_is_reread(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("a")?;
    let tree = repo.git(&["hash-object", "-t", "tree", "-w", "/dev/null"])?;
    let id = repo.git(&["commit-tree", tree.trim(), "-m", "flip"])?;
    let id = id.trim().to_owned();
    repo.git(&["update-ref", "refs/heads/flip", &id])?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    ensure!(read_value(&m, "refs/heads/flip")? == id, "initial read");

    let dir = repo.gitdir.join("reftable");
    let raw: Vec<u8> = (0..id.len() / 2)
        .map(|i| u8::from_str_radix(&id[2 * i..2 * i + 2], 16))
        .collect::<Result<_, _>>()?;
    let list = String::from_utf8(repo.tables_list()?)?;
    let mut found = None;
    for name in list.lines() {
        let bytes = fs::read(dir.join(name))?;
        if let Some(pos) = bytes.windows(raw.len()).position(|w| w == raw) {
            found = Some((name.to_owned(), bytes, pos));
        }
    }
    let Some((name, good, pos)) = found else {
        bail!("object id {id} not found raw in any table")
    };
    let mut bad = good.clone();
    let last = pos + raw.len() - 1;
    bad[last] ^= 1;
    let mut flipped = raw.clone();
    if let Some(b) = flipped.last_mut() {
        *b ^= 1;
    }
    let flipped: String = flipped.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(&name);
    let tmp = dir.join("flip.tmp");
    fs::write(&tmp, &bad)?;
    fs::rename(&tmp, &path)?;
    let took = wait_for(Duration::from_secs(10), || {
        match read_value(&m, "refs/heads/flip") {
            Ok(v) if v == flipped => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .map_err(|last| format!("the mount never served the changed table: {last}"))?;
    note(&format!(
        "changed table served after {} ms",
        took.as_millis()
    ));
    // Restored in place (same inode, new mtime), as `cp saved table` does.
    fs::write(&path, &good)?;
    let took = wait_for(Duration::from_secs(10), || {
        match read_value(&m, "refs/heads/flip") {
            Ok(v) if v == id => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .map_err(|last| format!("the mount still serves the flipped id after 10 s: {last}"))?;
    note(&format!(
        "restored table served after {} ms",
        took.as_millis()
    ));
    ensure!(
        repo.rev_parse("refs/heads/flip")? == id,
        "git reads the restored id"
    );
    verify(&repo)?;
    m.unmount()
}
mount_test!(changed_table_is_reread, timeout = 120);

/// One client: lock, write, rename, and every few updates an fsync of the ref
/// (acknowledged when it returns 0). Returns the acknowledged `(name, value)` pairs.
fn writer(
    root: &Path,
    (round, client): (u32, u32),
    values: &[String; 2],
    stop: &AtomicBool,
) -> (Vec<(String, String)>, u64, Option<String>) {
    let mut acked = Vec::new();
    let mut end = None;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("refs/heads/crash/r{round:02}/w{client}-{i:05}");
        let value = &values[(i % 2) as usize];
        let lock = root.join(format!("{name}.lock"));
        let step = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
            .and_then(|mut f| f.write_all(format!("{value}\n").as_bytes()))
            .and_then(|()| fs::rename(&lock, root.join(&name)));
        if let Err(e) = step {
            end = Some(format!("{name}: {e}")); // the mount is gone
            break;
        }
        if i % 3 == 2 {
            match File::open(root.join(&name)).and_then(|f| f.sync_all()) {
                Ok(()) => acked.push((name, value.clone())),
                Err(e) => {
                    end = Some(format!("fsync {name}: {e}"));
                    break;
                }
            }
        }
        i += 1;
    }
    (acked, i, end)
}

/// Leftovers in reftable/ that only a crash leaves.
fn orphans(dir: &Path) -> TestResult<Vec<String>> {
    Ok(listing(dir)?
        .into_iter()
        .filter(|n| n.ends_with(".lock") || n.contains(".temp."))
        .collect())
}

/// kill -9 of the mount at random points during fsync-acknowledged writes, 20 rounds.
pub fn kill9_loop_loses_no_acknowledged_update(ctx: &Ctx) -> TestResult {
    let seed = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(7)
        });
    note(&format!("seed {seed} (replay: CRASH_SEED={seed})"));
    let mut rng = Rng::new(seed);
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let values = [repo.commit("a")?, repo.commit("b")?];
    let dir = repo.gitdir.join("reftable");
    let mut all_acked: Vec<(String, String)> = Vec::new();
    let mut locks_left = 0;
    let mut orphans_left = 0;
    let mut total_writes = 0;
    let start = Instant::now();
    let rounds = 20;
    for round in 0..rounds {
        let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
        fs::create_dir_all(m.path(&format!("refs/heads/crash/r{round:02}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..2)
            .map(|c| {
                let root = m.mnt.clone();
                let stop = Arc::clone(&stop);
                let values = values.clone();
                std::thread::spawn(move || writer(&root, (round, c), &values, &stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50 + rng.below(450) as u64));
        m.kill9()?;
        stop.store(true, Ordering::Relaxed);
        let mut writes = 0;
        for c in clients {
            let (acked, n, end) = c.join().map_err(|_| "client panicked")?;
            writes += n;
            all_acked.extend(acked);
            if round == 0 {
                note(&format!("round 0: a client ended with {end:?}"));
            }
        }
        total_writes += writes;

        // Right after the crash: the stack is whole, for git and for us.
        verify(&repo)?;
        check(
            &repo.git_output(&["for-each-ref"])?,
            "git for-each-ref after kill -9",
        )?;
        let refs: std::collections::BTreeMap<String, String> = repo
            .git(&[
                "for-each-ref",
                "--format=%(refname) %(objectname)",
                "refs/heads/crash",
            ])?
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .collect();
        let lost: Vec<&String> = all_acked
            .iter()
            .filter(|(n, v)| refs.get(n) != Some(v))
            .map(|(n, _)| n)
            .collect();
        ensure!(
            lost.is_empty(),
            "round {round} (seed {seed}): {} acknowledged updates lost: {lost:?}",
            lost.len()
        );
        let left = orphans(&dir)?;
        if !left.is_empty() {
            orphans_left += 1;
            if left.iter().any(|n| n == "tables.list.lock") {
                locks_left += 1;
            }
            // The leftovers of a dead writer are provably stale.
            let out = Command::new(BIN)
                .args(["unlock", "--min-age", "0"])
                .arg(&repo.gitdir)
                .output()?;
            check(&out, "reftablefs unlock")?;
            let still = orphans(&dir)?;
            ensure!(
                still.is_empty(),
                "round {round} (seed {seed}): orphans after reftablefs unlock: {still:?}\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
    note(&format!("{total_writes} updates written"));
    ensure!(
        all_acked.len() >= rounds as usize,
        "only {} acknowledged updates in {rounds} rounds; the test proved little",
        all_acked.len()
    );
    note(&format!(
        "{rounds} rounds in {:.1} s: {total_writes} updates, {} acknowledged, none lost; \
         {orphans_left} rounds left orphans ({locks_left} a tables.list.lock), all removed by \
         reftablefs unlock",
        start.elapsed().as_secs_f64(),
        all_acked.len()
    ));
    // A last mount serves every acknowledged update.
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    for (name, value) in &all_acked {
        ensure!(
            read_value(&m, name).as_deref() == Ok(value.as_str()),
            "{name} through the final mount"
        );
    }
    m.unmount()
}
mount_test!(kill9_loop_loses_no_acknowledged_update, timeout = 300);

/// Writes `name` through the mount (lock, write, rename) and fsyncs it. `Ok` only when
/// every step, the fsync included, succeeded.
fn write_and_fsync(m: &Mount, name: &str, value: &str) -> std::io::Result<()> {
    let lock = m.path(&format!("{name}.lock"));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)?;
    f.write_all(format!("{value}\n").as_bytes())?;
    drop(f);
    fs::rename(&lock, m.path(name))?;
    File::open(m.path(name))?.sync_all()
}

/// Faults injected into the mount process (`REFTABLEFS_FAULTS`): the first directory
/// fsync, then (another mount) the first file write (ENOSPC). The write that hit the
/// fault is never acknowledged as durable without being there, the mount keeps serving,
/// later writes succeed, and the stack stays whole.
pub fn injected_faults_fail_the_batch_and_the_mount_keeps_serving(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let a = repo.commit("a")?;
    let b = repo.commit("b")?;
    for (round, spec) in ["fsync_dir:1", "write:1:28", "rename:1", "fsync:1"]
        .iter()
        .enumerate()
    {
        let mut m = Mount::start_env(
            &repo.gitdir,
            &ctx.path("mnt"),
            &[],
            &[("REFTABLEFS_FAULTS", spec)],
        )?;
        let first = format!("refs/heads/fault{round}-first");
        let r = write_and_fsync(&m, &first, &a);
        note(&format!("{spec}: first write + fsync gave {r:?}"));
        if r.is_ok() {
            ensure!(
                repo.rev_parse(&first)? == a,
                "{spec}: fsync acknowledged {first} but git does not read it"
            );
        }
        let second = format!("refs/heads/fault{round}-second");
        write_and_fsync(&m, &second, &b)
            .map_err(|e| format!("{spec}: the write after the fault failed: {e}"))?;
        ensure!(m.alive(), "{spec}: the mount died; log:\n{}", m.log());
        ensure!(
            read_value(&m, &second)? == b,
            "{spec}: mount serves the second write"
        );
        ensure!(
            repo.rev_parse(&second)? == b,
            "{spec}: git reads the second write"
        );
        ensure!(
            read_value(&m, "refs/heads/main")? == b,
            "{spec}: main still served"
        );
        verify(&repo)?;
        let list = String::from_utf8(repo.tables_list()?)?;
        for t in list.lines() {
            ensure!(
                repo.gitdir.join("reftable").join(t).exists(),
                "{spec}: listed table {t} missing"
            );
        }
        m.unmount()?;
    }
    Ok(())
}
mount_test!(
    injected_faults_fail_the_batch_and_the_mount_keeps_serving,
    timeout = 180
);
