//! Diagnosing a held `tables.list.lock` next to file systems that do not answer (issue
//! 23, item 2): the diagnosis reads who holds a lock from `/proc` and must never ask the
//! file system of anyone's descriptor.
//! * a second mount whose daemon is stopped (SIGSTOP) while a process holds a directory
//!   open on it: `reftablefs unlock --dry-run` on an unrelated repository answers within
//!   seconds, and so does a mount's batcher failing a batch on a stale lock;
//! * a descriptor open on the mount itself: the batcher's diagnosis does not wait for the
//!   mount's own request threads.
//!
//! The stopped mount is never looked at by this process, and no call of the test thread
//! waits for a mount that may not answer (an fsync that may hang runs on a helper
//! thread). [`Cleanup`] (a drop guard, so on every exit path: success, failure, panic)
//! aborts the stopped mount's FUSE connection (`/sys/fs/fuse/connections/N/abort`, N
//! read from mountinfo before the stop), resumes its daemon and ends the holder; on a
//! failure it aborts the other mounts' connections too: a mount whose batcher waits on
//! its own request threads cannot end otherwise (SIGKILL leaves the waiting thread, and
//! with it the connection, behind). The mounts' own guards then unmount them.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::harness::{check, note, signal, stage, Ctx, Mount, Repo, TestResult, BIN};

/// What "at once" means here: a diagnosis reads `/proc` in milliseconds; a wait for a
/// stopped daemon lasts as long as the stop.
const BOUND: Duration = Duration::from_secs(10);

/// Where the FUSE control file system lives.
const FUSECTL: &str = "/sys/fs/fuse/connections";

/// The mountinfo line of mountpoint `mnt`, split in fields.
fn mountinfo_fields(mnt: &Path) -> Option<Vec<String>> {
    let want = mnt
        .to_string_lossy()
        .replace('\\', "\\134")
        .replace(' ', "\\040")
        .replace('\t', "\\011")
        .replace('\n', "\\012");
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .map(|l| l.split(' ').map(str::to_owned).collect::<Vec<_>>())
        .find(|f| f.get(4) == Some(&want))
}

/// Whether the FUSE control file system is mounted at [`FUSECTL`].
fn fusectl_mounted() -> bool {
    mountinfo_fields(Path::new(FUSECTL)).is_some_and(|f| f.iter().any(|x| x == "fusectl"))
}

/// The state letter of `/proc/PID/stat` (`T`: stopped).
fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// What a test leaves behind, undone when dropped (declare it after the mounts, so that
/// it runs before their guards): the stopped daemon resumed (its connection aborted
/// first) and its holder ended, every other watched connection aborted unless the test
/// passed, and the FUSE control file system unmounted if this guard mounted it.
struct Cleanup {
    /// `/sys/fs/fuse/connections/N` of each watched mount, and whether it is aborted even
    /// when the test passes (the stopped mount's).
    conns: Vec<(PathBuf, bool)>,
    passed: bool,
    stopped: Option<u32>,
    holder: Option<Child>,
    mounted_fusectl: bool,
}

impl Cleanup {
    /// Mounts the FUSE control file system if it is not mounted (as root; without it a
    /// cleanup can only resume the stopped daemon).
    fn new() -> Cleanup {
        let mut me = Cleanup {
            conns: Vec::new(),
            passed: false,
            stopped: None,
            holder: None,
            mounted_fusectl: false,
        };
        if !fusectl_mounted() {
            me.mounted_fusectl = Command::new("mount")
                .args(["-t", "fusectl", "fusectl", FUSECTL])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        }
        me
    }

    /// Remembers `m`'s connection (N is the device minor of the mount in mountinfo), to
    /// abort it on a failure, or also on success with `always`.
    fn watch(&mut self, m: &Mount, always: bool) {
        let dev = mountinfo_fields(&m.mnt)
            .and_then(|f| f.get(2).cloned())
            .unwrap_or_default();
        match dev.split_once(':') {
            Some((_, n)) if Path::new(FUSECTL).join(n).join("abort").exists() => {
                self.conns.push((Path::new(FUSECTL).join(n), always));
            }
            _ => note(&format!(
                "no {FUSECTL}/N/abort for {} ({dev}): cleanup cannot abort it",
                m.mnt.display()
            )),
        }
    }

    /// Opens `m`'s `refs` directory in a child process, stops `m`'s daemon and waits
    /// until it is stopped and the directory's attributes (1 s TTL) have expired: from
    /// then on a `stat` through the holder's descriptor waits for the daemon.
    fn stop(&mut self, m: &Mount) -> TestResult {
        let daemon = m.pid().ok_or("the mount has no process")?;
        // Everything about the mount is read before the stop.
        self.watch(m, true);
        let held = File::open(m.path("refs"))?;
        self.holder = Some(
            Command::new("sleep")
                .arg("120")
                .stdin(held)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        stage("stopping the second mount's daemon");
        self.stopped = Some(daemon);
        signal(daemon, "STOP");
        let start = Instant::now();
        while proc_state(daemon) != Some('T') {
            if start.elapsed() > BOUND {
                return Err("the daemon did not stop".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(1500));
        Ok(())
    }

    fn holder_pid(&self) -> u32 {
        self.holder.as_ref().map_or(0, Child::id)
    }

    /// Aborts the connections due (all of them unless the test passed), resumes the
    /// stopped daemon and ends the holder. Idempotent.
    fn release(&mut self) {
        for (conn, always) in std::mem::take(&mut self.conns) {
            if always || !self.passed {
                let _ = fs::write(conn.join("abort"), b"1");
            }
        }
        if let Some(pid) = self.stopped.take() {
            signal(pid, "CONT");
        }
        if let Some(mut h) = self.holder.take() {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.release();
        if self.mounted_fusectl {
            let _ = Command::new("umount")
                .arg(FUSECTL)
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Runs `cmd`, killing it if it has not exited within `bound`: `Err` then.
fn run_within(mut cmd: Command, bound: Duration, what: &str) -> TestResult<Output> {
    stage(what);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let start = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            return Ok(child.wait_with_output()?);
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{what}: no answer within {bound:?} (killed)").into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Opens `path` and fsyncs it on a helper thread (it may wait for a mount that does not
/// answer, until the caller's [`Cleanup`] aborts that mount); `Err` if that has not
/// returned within [`BOUND`].
fn fsync_within(path: PathBuf) -> TestResult<std::io::Result<()>> {
    stage(&format!("fsync {}", path.display()));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(File::open(path).and_then(|f| f.sync_all()));
    });
    rx.recv_timeout(BOUND)
        .map_err(|_| format!("fsync did not return within {BOUND:?}: the batcher hangs").into())
}

/// Writes `value` into `refs/heads/NAME` through `m` as git does: `NAME.lock` created
/// with `O_EXCL`, written, renamed (the commit point: the batcher may start from here).
fn write_ref(m: &Mount, name: &str, value: &str) -> TestResult {
    stage(&format!("writing refs/heads/{name} through the mount"));
    let lock = m.path(&format!("refs/heads/{name}.lock"));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)?;
    f.write_all(format!("{value}\n").as_bytes())?;
    drop(f);
    fs::rename(&lock, m.path(&format!("refs/heads/{name}")))?;
    Ok(())
}

/// A `tables.list.lock` in `repo`'s stack as a killed writer leaves it: empty, a minute
/// old, held by nobody.
fn stale_lock(repo: &Repo) -> TestResult<PathBuf> {
    let lock = repo.gitdir.join("reftable/tables.list.lock");
    fs::write(&lock, b"")?;
    let status = Command::new("touch")
        .args(["-d", "-1 minute"])
        .arg(&lock)
        .status()?;
    if !status.success() {
        return Err("touch -d".into());
    }
    Ok(lock)
}

/// Writes `refs/heads/topic` through `m` and fsyncs it while this process holds `m`'s
/// `refs/heads` open, whose attributes have expired (1 s TTL, and the create in it
/// invalidates them): a `stat` through that descriptor asks the mount. The fsync must
/// fail with EIO (the batch meets a stale `tables.list.lock`) within [`BOUND`], and the
/// mount's log must name the lock, diagnosed as held by nobody. The lock is gone after.
fn write_meets_stale_lock(repo: &Repo, m: &Mount) -> TestResult {
    let oid = repo.rev_parse("HEAD")?;
    let lock = stale_lock(repo)?;
    let own = File::open(m.path("refs/heads"))?;
    std::thread::sleep(Duration::from_millis(1500));
    write_ref(m, "topic", &oid)?;
    let start = Instant::now();
    let r = fsync_within(m.path("refs/heads/topic"))?;
    let took = start.elapsed();
    drop(own);
    match r {
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
        other => return Err(format!("fsync: {other:?}, expected EIO").into()),
    }
    let log = m.log();
    if !(log.contains("tables.list.lock")
        && log.contains("held open by no process")
        && log.contains("reftablefs unlock"))
    {
        return Err(format!("no log line diagnosing the stale lock:\n{log}").into());
    }
    note(&format!("fsync failed with EIO after {took:?}"));
    fs::remove_file(&lock)?;
    Ok(())
}

/// A stopped second mount with a directory held open on it: `reftablefs unlock
/// --dry-run` of an unrelated repository diagnoses its stale `tables.list.lock` within
/// [`BOUND`] (c66e224's waited for the stopped daemon for as long as the stop lasted),
/// `reftablefs status` lists the mounts, and a mount's batcher meeting a stale lock
/// answers the fsync with EIO.
pub fn a_stopped_mount_stalls_no_diagnosis(ctx: &Ctx) -> TestResult {
    let other = Repo::init(&ctx.path("other"), "reftable")?;
    other.commit("c")?;
    let m2 = Mount::start(&other.gitdir, &ctx.path("other-mnt"), &[])?;
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("c")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let unrelated = Repo::init(&ctx.path("unrelated"), "reftable")?;
    unrelated.commit("c")?;
    let lock = stale_lock(&unrelated)?;

    // Declared after the mounts: dropped (the daemon resumed) before their guards run.
    let mut cleanup = Cleanup::new();
    cleanup.watch(&m, false);
    cleanup.stop(&m2)?;
    // The stop is real: a `stat` through the holder's descriptor (by a child, killed
    // after 2 s) does not return.
    let mut probe = Command::new("stat");
    probe
        .arg("-L")
        .arg(format!("/proc/{}/fd/0", cleanup.holder_pid()));
    if run_within(
        probe,
        Duration::from_secs(2),
        "stat through the held descriptor",
    )
    .is_ok()
    {
        return Err("a stat through a descriptor on the stopped mount returned".into());
    }

    let mut cmd = Command::new(BIN);
    cmd.args(["unlock", "--dry-run"]).arg(&unrelated.gitdir);
    let start = Instant::now();
    let out = run_within(cmd, BOUND, "reftablefs unlock --dry-run")?;
    let took = start.elapsed();
    check(&out, "reftablefs unlock --dry-run")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !(text.contains("would remove") && text.contains("held open by no process")) {
        return Err(format!("unlock --dry-run did not diagnose the stale lock:\n{text}").into());
    }
    if !lock.exists() {
        return Err("--dry-run removed the lock".into());
    }
    note(&format!("unlock --dry-run answered in {took:?}"));

    let mut cmd = Command::new(BIN);
    cmd.arg("status");
    let out = run_within(cmd, BOUND, "reftablefs status")?;
    check(&out, "reftablefs status")?;
    let text = String::from_utf8_lossy(&out.stdout);
    for mnt in [&m.mnt, &m2.mnt] {
        if !text.contains(&*mnt.to_string_lossy()) {
            return Err(format!("status does not list {}:\n{text}", mnt.display()).into());
        }
    }

    write_meets_stale_lock(&repo, &m)?;
    cleanup.passed = true;
    cleanup.release();
    m.unmount()
}
mount_test!(a_stopped_mount_stalls_no_diagnosis, timeout = 120);

/// A descriptor open on the mount itself while its batcher diagnoses a stale
/// `tables.list.lock`: the diagnosis asks the mount nothing (c66e224's `stat` through
/// that descriptor waited for a request thread, which waited for the state lock the
/// batcher held), so the writer's fsync fails with EIO within [`BOUND`]; once the lock
/// is gone, a write is committed.
pub fn the_batcher_diagnoses_without_its_own_requests(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let c = repo.commit("c")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let mut cleanup = Cleanup::new();
    cleanup.watch(&m, false);
    write_meets_stale_lock(&repo, &m)?;
    write_ref(&m, "after", &c)?;
    fsync_within(m.path("refs/heads/after"))?
        .map_err(|e| format!("fsync after the lock was removed: {e}"))?;
    if repo.rev_parse("refs/heads/after")? != c {
        return Err("the write after the lock was removed is lost".into());
    }
    cleanup.passed = true;
    drop(cleanup);
    m.unmount()
}
mount_test!(
    the_batcher_diagnoses_without_its_own_requests,
    timeout = 120
);
