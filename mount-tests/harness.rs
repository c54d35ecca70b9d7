//! The mount-test harness: the tests run through libtest-mimic (filters, `--list`,
//! `--format json`, as `cargo test` gives them), one at a time, each under a watchdog; a
//! `Mount` guard that always unmounts; small helpers for git, errno assertions and file
//! trees.
//!
//! Why a watchdog (`harness = false`): a hung FUSE request hangs the thread that made it,
//! and libtest can neither time a test out nor clean up after it. Here every test runs in
//! its own thread; the trial waits for it with a deadline. On timeout it kills every
//! mount the test registered (SIGKILL + `fusermount3 -uz`), which makes the blocked
//! syscalls fail with ENOTCONN so the thread can finish, and reports the test as failed.
//! Panics and assertion failures unwind through the `Mount` guard's `Drop`.

use std::collections::BTreeMap;
use std::error::Error;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

/// What a test returns: `Err` carries the failure message.
pub type TestResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

/// Fails the test with a formatted message.
macro_rules! bail {
    ($($arg:tt)+) => { return Err(format!($($arg)+).into()) };
}

/// Fails the test with a formatted message unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+).into());
        }
    };
}

/// The `reftablefs` binary built by cargo for this test target.
pub const BIN: &str = env!("CARGO_BIN_EXE_reftablefs");

/// One test, registered by [`mount_test!`] next to its function: the runner finds every
/// registered test (there is no list to keep).
pub struct Test {
    /// `module_path!()` of the test's module (`mount::read_path`).
    pub module: &'static str,
    /// The test function's name.
    pub func: &'static str,
    pub needs_mount: bool,
    pub timeout_secs: u64,
    pub run: fn(&Ctx) -> TestResult,
}

impl Test {
    /// `module::function`, as filters and reports name it (`read_path::no_torn_reads`); a test
    /// of `main.rs` is named by its function alone.
    pub fn name(&self) -> String {
        match self.module.split_once("::") {
            Some((_, module)) => format!("{module}::{}", self.func),
            None => self.func.to_string(),
        }
    }
}

inventory::collect!(Test);

/// Registers the function just above as a mount test:
/// `mount_test!(name, timeout = SECS)`, or `mount_test!(name, timeout = SECS, no_mount)` for
/// a test that needs no FUSE mount (it runs even where mounting is impossible).
macro_rules! mount_test {
    ($f:ident, timeout = $secs:expr) => {
        mount_test!(@ $f, $secs, true);
    };
    ($f:ident, timeout = $secs:expr, no_mount) => {
        mount_test!(@ $f, $secs, false);
    };
    (@ $f:ident, $secs:expr, $needs:expr) => {
        inventory::submit! {
            $crate::harness::Test {
                module: module_path!(),
                func: stringify!($f),
                needs_mount: $needs,
                timeout_secs: $secs,
                run: $f,
            }
        }
    };
}

/// Every registered test with its name, ordered by name (registration order is the
/// linker's).
pub fn all_tests() -> Vec<(String, &'static Test)> {
    let mut tests: Vec<(String, &'static Test)> = inventory::iter::<Test>
        .into_iter()
        .map(|t| (t.name(), t))
        .collect();
    tests.sort_by(|a, b| a.0.cmp(&b.0));
    tests
}

/// Per-test context: a private temporary directory (removed after the test).
pub struct Ctx {
    dir: tempfile::TempDir,
}

impl Ctx {
    /// A path inside the test's temporary directory.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
}

/// The start of an error that [`within_bound_attempts`] does not retry: a wrong result
/// (a torn read, an unexpected value), not a missed timing bound.
pub const NOT_A_BOUND: &str = "not a timing bound: ";

/// Runs a test whose verdict rests on a wall-clock bound (a freshness or latency limit) up
/// to `attempts` times, each in a fresh temporary directory, and passes when one attempt
/// passes. A scheduling stall of a loaded machine can push one attempt over its bound; a
/// real defect (a missed invalidation, a lock held across a commit) misses every attempt.
/// Every failed attempt is printed, so a recurring miss stays visible in the log.
pub fn within_bound_attempts(
    ctx: &Ctx,
    attempts: usize,
    body: fn(&Ctx) -> TestResult,
) -> TestResult {
    let mut last = None;
    for attempt in 1..=attempts {
        let sub = Ctx {
            dir: tempfile::Builder::new()
                .prefix(&format!("attempt{attempt}-"))
                .tempdir_in(ctx.dir.path())?,
        };
        match body(&sub) {
            Ok(()) => return Ok(()),
            // A wrong result is never retried: only a missed timing bound is.
            Err(e) if e.to_string().starts_with(NOT_A_BOUND) => return Err(e),
            Err(e) => {
                note(&format!("attempt {attempt} of {attempts} missed: {e}"));
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| "no attempt ran".into()))
}

/// Prints a line on the real stderr (never captured), for notes and SKIP lines.
pub fn note(msg: &str) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "    {msg}");
}

/// What the running test is doing now (reported when it times out).
static STAGE: Mutex<String> = Mutex::new(String::new());

/// Records the running test's current step, for the timeout report.
pub fn stage(what: &str) {
    if let Ok(mut s) = STAGE.lock() {
        what.clone_into(&mut s);
    }
}

fn current_stage() -> String {
    STAGE.lock().map(|s| s.clone()).unwrap_or_default()
}

/// Mounts registered by the running test, so the watchdog can kill them: (pid, mountpoint).
static LIVE_MOUNTS: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

/// Registers a mount process for the watchdog (kill + detach on timeout).
pub fn register(pid: u32, mnt: &Path) {
    if let Ok(mut live) = LIVE_MOUNTS.lock() {
        live.push((pid, mnt.to_path_buf()));
    }
}

/// Forgets a mount process once it is gone.
pub fn unregister(pid: u32) {
    if let Ok(mut live) = LIVE_MOUNTS.lock() {
        live.retain(|(p, _)| *p != pid);
    }
}

/// Kills every registered mount and detaches its mountpoint (watchdog path).
fn kill_all_mounts() {
    let live = match LIVE_MOUNTS.lock() {
        Ok(mut live) => std::mem::take(&mut *live),
        Err(_) => return,
    };
    for (pid, mnt) in live {
        signal(pid, "KILL");
        force_unmount(&mnt);
    }
}

/// Sends a signal through kill(1) (the crate forbids no unsafe, but we need none).
pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// The environment every git (2.47, /usr/bin/git 2.39) and client library runs with in
/// the mount tests: no inherited repository variables, a private `HOME`, no system or
/// global config, the test identity, commit dates `date`, the C locale, stdin closed.
pub fn git_env<'c>(cmd: &'c mut Command, home: &Path, date: &str) -> &'c mut Command {
    cmd.env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .env_remove("GIT_COMMON_DIR")
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.com")
        .env("GIT_AUTHOR_DATE", date)
        .env("GIT_COMMITTER_DATE", date)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
}

/// Whether process `pid` runs (exists and is not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

/// A mount daemonised by `reftablefs mount --daemon` (or the mount(8) helper): killed and
/// detached on every exit path.
pub struct Daemon {
    pub pid: u32,
    mnt: PathBuf,
}

impl Daemon {
    /// The mount process one of whose arguments is `arg` (its mountpoint, or the work tree
    /// of `--over`), serving `mnt`; registered with the watchdog.
    pub fn find(arg: &Path, mnt: &Path) -> Option<Daemon> {
        let want = arg.to_string_lossy();
        let pid = fs::read_dir("/proc")
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| {
                fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| {
                        let c = String::from_utf8_lossy(&c);
                        c.contains("mount") && c.split('\0').any(|a| a == want)
                    })
                    .unwrap_or(false)
            })?;
        register(pid, mnt);
        Some(Daemon {
            pid,
            mnt: mnt.to_path_buf(),
        })
    }

    /// Whether the process still runs.
    pub fn alive(&self) -> bool {
        pid_alive(self.pid)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        signal(self.pid, "KILL");
        force_unmount(&self.mnt);
        unregister(self.pid);
    }
}

/// Whether `mnt` is a mountpoint in this mount namespace.
pub fn is_mounted(mnt: &Path) -> bool {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = escape_mountinfo(mnt);
    info.lines()
        .any(|line| line.split(' ').nth(4) == Some(want.as_str()))
}

fn escape_mountinfo(p: &Path) -> String {
    let s = p.to_string_lossy();
    s.replace('\\', "\\134")
        .replace(' ', "\\040")
        .replace('\t', "\\011")
        .replace('\n', "\\012")
}

/// `fusermount3 -uz`, then `umount -l` as a fallback; used on every teardown path.
pub fn force_unmount(mnt: &Path) {
    if !is_mounted(mnt) {
        return;
    }
    let _ = Command::new("fusermount3")
        .arg("-uz")
        .arg(mnt)
        .stderr(Stdio::null())
        .status();
    if is_mounted(mnt) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(mnt)
            .stderr(Stdio::null())
            .status();
    }
}

/// Whether this machine can run real mounts: /dev/fuse and fusermount3.
fn fuse_available() -> Result<(), String> {
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse is missing".into());
    }
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join("fusermount3").is_file()))
        .unwrap_or(false);
    if !found {
        return Err("fusermount3 is not installed (package fuse3)".into());
    }
    Ok(())
}

/// Whether the built binary has the `mount` subcommand (it lands on the `fs` branch).
fn binary_has_mount() -> bool {
    Command::new(BIN)
        .arg("help")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim_start().starts_with("mount "))
        })
        .unwrap_or(false)
}

/// Runs the registered tests through libtest-mimic (filters, `--exact`, `--list`,
/// `--format`, `--ignored` as `cargo test` gives them), one at a time (mounts are
/// timed, and the watchdog's state is global), each under its watchdog ([`run_one`]).
/// Where no mount can be made, the tests that need one are ignored with the reason.
pub fn run_all() -> ExitCode {
    let mut args = libtest_mimic::Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = Some(1);
    }
    let mount_skip: Option<String> =
        if std::env::var("REFTABLEFS_MOUNT_TESTS").as_deref() != Ok("1") {
            Some("mount tests run through `make mount-test` (REFTABLEFS_MOUNT_TESTS=1)".into())
        } else if let Err(why) = fuse_available() {
            Some(why)
        } else if !binary_has_mount() {
            Some("this reftablefs build has no `mount` subcommand (fs branch not merged)".into())
        } else {
            None
        };
    if let Some(why) = &mount_skip {
        eprintln!("SKIP mount tests that need a mount: {why}");
    }
    let trials = all_tests()
        .into_iter()
        .map(|(name, test)| {
            let ignored = test.needs_mount && mount_skip.is_some();
            let n = name.clone();
            libtest_mimic::Trial::test(name, move || {
                run_one(&n, test).map_err(|msg| indent(&msg).into())
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}

/// Runs one test in its own thread under a watchdog.
fn run_one(name: &str, test: &Test) -> Result<(), String> {
    stage("start");
    let (tx, rx) = mpsc::channel::<Result<(), String>>();
    let body = test.run;
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let outcome = std::panic::catch_unwind(move || -> Result<(), String> {
                let prefix = format!("rtfs-mt-{}-", run_id());
                let dir = tempfile::Builder::new()
                    .prefix(&prefix)
                    .tempdir()
                    .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
                let ctx = Ctx { dir };
                let result = body(&ctx).map_err(|e| e.to_string());
                // A mount left inside the directory would make its removal walk the mount.
                kill_all_mounts();
                result
            });
            let result = match outcome {
                Ok(r) => r,
                Err(panic) => {
                    let msg = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "(non-string panic)".into());
                    kill_all_mounts();
                    Err(format!("panicked: {msg}"))
                }
            };
            let _ = tx.send(result);
        });
    if let Err(e) = spawned {
        return Err(format!("cannot spawn the test thread: {e}"));
    }
    let budget = Duration::from_secs(test.timeout_secs);
    match rx.recv_timeout(budget) {
        Ok(result) => result,
        Err(_) => {
            let at = current_stage();
            kill_all_mounts();
            // Give the thread a moment to notice ENOTCONN and clean up its directory.
            let late = rx.recv_timeout(Duration::from_secs(15));
            Err(format!(
                "TIMEOUT after {}s during: {at}\nkilled its mounts (thread then {})",
                test.timeout_secs,
                if late.is_ok() {
                    "finished"
                } else {
                    "still stuck; leaked"
                }
            ))
        }
    }
}

/// Names this run's temporary directories (`rtfs-mt-<id>-…`), so `cleanup.sh` after a
/// killed run detaches only this run's mounts, never those of a concurrent run.
fn run_id() -> String {
    std::env::var("RTFS_RUN_ID").unwrap_or_else(|_| std::process::id().to_string())
}

static MOUNT_SEQ: AtomicU64 = AtomicU64::new(0);

/// A live `reftablefs mount` child. Dropping it always unmounts: SIGTERM (clean
/// unmount), then SIGKILL after a grace period, then `fusermount3 -uz` if the mountpoint is
/// still there.
pub struct Mount {
    pub mnt: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Mount {
    /// Starts `reftablefs mount [extra] GITDIR MNT` (creating MNT) and waits until MNT is
    /// in /proc/self/mountinfo (10 s at most). Stderr and stdout go to a log file.
    pub fn start(gitdir: &Path, mnt: &Path, extra: &[&str]) -> TestResult<Mount> {
        Mount::start_env(gitdir, mnt, extra, &[])
    }

    /// [`Mount::start`] with extra environment variables for the mount process.
    pub fn start_env(
        gitdir: &Path,
        mnt: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> TestResult<Mount> {
        fs::create_dir_all(mnt)?;
        let mut args: Vec<std::ffi::OsString> = extra.iter().map(Into::into).collect();
        args.push(gitdir.into());
        args.push(mnt.into());
        Mount::spawn(&args, mnt, mnt, env)
    }

    /// Starts `reftablefs mount --over WORKTREE` (the mount is `WORKTREE/.git`; the log
    /// goes beside WORKTREE, not into it).
    pub fn start_over(worktree: &Path) -> TestResult<Mount> {
        Mount::start_over_with(worktree, &[])
    }

    /// [`Mount::start_over`] with the options `extra` (`--layout=packed`).
    pub fn start_over_with(worktree: &Path, extra: &[&str]) -> TestResult<Mount> {
        let mut args: Vec<std::ffi::OsString> = extra.iter().map(Into::into).collect();
        args.extend(["--over".into(), worktree.as_os_str().to_owned()]);
        Mount::spawn(&args, &worktree.join(".git"), worktree, &[])
    }

    /// Starts `reftablefs mount ARGS` (environment plus `env`) whose mountpoint is `mnt`;
    /// the log file is named after `log_near`, beside it.
    fn spawn(
        args: &[std::ffi::OsString],
        mnt: &Path,
        log_near: &Path,
        env: &[(&str, &str)],
    ) -> TestResult<Mount> {
        stage(&format!(
            "reftablefs mount {}",
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        ));
        let seq = MOUNT_SEQ.fetch_add(1, Ordering::Relaxed);
        let log = log_near.with_file_name(format!(
            "{}.mount{seq}.log",
            log_near
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        let logf = fs::File::create(&log)?;
        // `make mount-test-uring`: every mount asks for FUSE over io_uring.
        let uring = std::env::var_os("REFTABLEFS_TEST_IO_URING").is_some();
        let child = Command::new(BIN)
            .envs(env.iter().copied())
            .arg("mount")
            .args(uring.then_some("--io-uring"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf)
            .spawn()?;
        register(child.id(), mnt);
        let mut m = Mount {
            mnt: mnt.to_path_buf(),
            log,
            child: Some(child),
        };
        m.wait_ready()?;
        Ok(m)
    }

    fn wait_ready(&mut self) -> TestResult {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if is_mounted(&self.mnt) {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    bail!(
                        "reftablefs mount exited before the mount was ready ({status}); log:\n{}",
                        self.log()
                    );
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "mount not in /proc/self/mountinfo after 10 s; log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A path inside the mount.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// The mount process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// How many of the mount process's threads are named `name` (as the kernel keeps a
    /// thread's name: its first 15 bytes), counted once the mount has started every
    /// thread it starts at mount time (its signal thread, started last, runs; 10 s at most).
    pub fn threads_named(&self, name: &str) -> TestResult<usize> {
        let pid = self.pid().ok_or("the mount process is gone")?;
        let count = |name: &str| -> usize {
            let short = &name.as_bytes()[..name.len().min(15)];
            let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
                return 0;
            };
            tasks
                .flatten()
                .filter_map(|t| fs::read(t.path().join("comm")).ok())
                .filter(|comm| comm.strip_suffix(b"\n").unwrap_or(comm) == short)
                .count()
        };
        wait_for(Duration::from_secs(10), || {
            match count("reftablefs-signals") {
                0 => Err("the mount's signal thread never started".into()),
                _ => Ok(()),
            }
        })?;
        Ok(count(name))
    }

    /// The mount's log so far (stderr and stdout).
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(no log: {e})"))
    }

    /// Whether the mount process is still running.
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// `reftablefs unmount MNT`, then waits (10 s) for the mount process to exit 0.
    pub fn unmount(mut self) -> TestResult {
        stage(&format!("reftablefs unmount {}", self.mnt.display()));
        let out = Command::new(BIN).arg("unmount").arg(&self.mnt).output()?;
        ensure!(
            out.status.success(),
            "reftablefs unmount failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        self.wait_exit(Duration::from_secs(10), "after `reftablefs unmount`")
    }

    /// SIGTERM, then waits (10 s) for the mount process to exit 0 and the mountpoint to go.
    pub fn terminate(mut self) -> TestResult {
        if let Some(pid) = self.pid() {
            signal(pid, "TERM");
        }
        self.wait_exit(Duration::from_secs(10), "after SIGTERM")
    }

    fn wait_exit(&mut self, budget: Duration, when: &str) -> TestResult {
        let deadline = Instant::now() + budget;
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                bail!("mount process still running {when}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        unregister(child.id());
        self.child = None;
        ensure!(
            status.success(),
            "mount process exited with {status} {when}; log:\n{}",
            self.log()
        );
        ensure!(!is_mounted(&self.mnt), "mountpoint still mounted {when}");
        Ok(())
    }

    /// kill -9 of the mount process and nothing else (a mount that detaches itself is
    /// checked by the caller; `Drop` still detaches whatever is left).
    pub fn kill9_only(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            unregister(child.id());
        }
    }

    /// kill -9 of the mount process; detaches the dead mountpoint.
    pub fn kill9(mut self) -> TestResult {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            unregister(child.id());
        }
        force_unmount(&self.mnt);
        ensure!(!is_mounted(&self.mnt), "dead mount could not be detached");
        Ok(())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
            unregister(child.id());
        }
        force_unmount(&self.mnt);
    }
}

// ---------------------------------------------------------------------------------------
// git

static TICK: AtomicU64 = AtomicU64::new(0);

/// Runs the bash `script` (git 2.39 steps, `label` names them) in a files repository
/// with one commit and through a mount over `.git` of a reftable one with one commit;
/// returns what each printed (files, mount) and the reftable repository. The mount is
/// gone when it returns, whatever the steps did.
pub fn on_files_and_mount(
    ctx: &Ctx,
    label: &str,
    script: &str,
) -> TestResult<(String, String, Repo)> {
    let twin = Repo::init(&ctx.path("files"), "files")?;
    twin.commit("one")?;
    let on_disk = steps239(ctx, label, "files .git", &twin.work, script)?;
    let repo = Repo::init(&ctx.path("r"), "reftable")?;
    repo.commit("one")?;
    let m = Mount::start_over(&repo.work)?;
    let through = steps239(ctx, label, "mount", &repo.work, script);
    m.unmount()?;
    Ok((on_disk, through?, repo))
}

/// What git 2.39's steps printed through the mount (`through`) equals what they printed
/// on a files `.git` (`on_disk`), which shows every line of `wants` (the steps did meet
/// what the test is about: else both sides could agree on nothing). `label` names them.
pub fn same_as_files(label: &str, on_disk: &str, through: &str, wants: &[&str]) -> TestResult {
    for want in wants {
        ensure!(
            on_disk.contains(want),
            "{label}: the files twin misses {want:?}:\n{on_disk}"
        );
    }
    ensure!(
        through == on_disk,
        "{label}: git 2.39 through the mount differs from a files .git:\n--- files\n\
         {on_disk}\n--- mount\n{through}"
    );
    Ok(())
}

/// The refs of the files twin `twin` as `<name> <type>` lines, by git 2.39.
pub fn refs239(ctx: &Ctx, twin: &Repo) -> TestResult<String> {
    steps239(
        ctx,
        "twin",
        "for-each-ref",
        &twin.work,
        "/usr/bin/git for-each-ref --format='%(refname) %(objecttype)'",
    )
}

/// Runs the bash `script` (git 2.39 steps, `label` names them, `what` says where) in the
/// work tree `work`: what it printed (it must exit 0).
pub fn steps239(
    ctx: &Ctx,
    label: &str,
    what: &str,
    work: &Path,
    script: &str,
) -> TestResult<String> {
    stage(&format!("{label} steps, {what}"));
    let home = ctx.path("home239");
    std::fs::create_dir_all(&home)?;
    let mut cmd = Command::new("bash");
    git_env(&mut cmd, &home, "1700500000 +0000");
    let out = cmd.arg("-c").arg(script).current_dir(work).output()?;
    check(&out, &format!("steps ({what})"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A repository driven through the machine's git, with a fixed identity and a clock that
/// advances 60 s per git call (so reflog timestamps are distinct and deterministic).
pub struct Repo {
    pub work: PathBuf,
    pub gitdir: PathBuf,
    home: PathBuf,
}

/// Base of the fake clock: 2023-11-14.
const EPOCH: u64 = 1_700_000_000;

impl Repo {
    /// `git init --ref-format=<format> -b main <dir>` (format: "reftable" or "files").
    pub fn init(dir: &Path, format: &str) -> TestResult<Repo> {
        Repo::init_with(dir, format, &[])
    }

    /// `git init --ref-format=<format> -b main [extra…] <dir>`.
    pub fn init_with(dir: &Path, format: &str, extra: &[&str]) -> TestResult<Repo> {
        let home = dir.with_file_name(format!(
            "{}.home",
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        fs::create_dir_all(&home)?;
        let repo = Repo {
            work: dir.to_path_buf(),
            gitdir: dir.join(".git"),
            home,
        };
        let parent = dir.parent().unwrap_or(Path::new("/"));
        let out = repo
            .command(parent)
            .args(["init", "-q", "-b", "main"])
            .arg(format!("--ref-format={format}"))
            .args(extra)
            .arg(dir)
            .output()?;
        check(&out, "git init")?;
        Ok(repo)
    }

    fn command(&self, cwd: &Path) -> Command {
        let tick = EPOCH + 60 * TICK.fetch_add(1, Ordering::Relaxed);
        let date = format!("{tick} +0130");
        let mut cmd = Command::new("git");
        git_env(&mut cmd, &self.home, &date).current_dir(cwd);
        cmd
    }

    /// A git command in the work tree (not yet run).
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.command(&self.work);
        c.args(args);
        c
    }

    /// Runs git; fails the test unless it exits 0. Returns stdout.
    pub fn git(&self, args: &[&str]) -> TestResult<String> {
        stage(&format!("git {}", args.join(" ")));
        let out = self.cmd(args).output()?;
        check(&out, &format!("git {}", args.join(" ")))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs git with `input` on stdin; fails unless it exits 0. Returns stdout.
    pub fn git_stdin(&self, args: &[&str], input: &[u8]) -> TestResult<String> {
        let mut child = self
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input)?;
        }
        let out = child.wait_with_output()?;
        check(&out, &format!("git {}", args.join(" ")))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs git and returns the raw output whatever the exit status.
    pub fn git_output(&self, args: &[&str]) -> TestResult<Output> {
        Ok(self.cmd(args).output()?)
    }

    /// An empty commit on the current branch; returns its id.
    pub fn commit(&self, msg: &str) -> TestResult<String> {
        self.git(&["commit", "-q", "--allow-empty", "-m", msg])?;
        self.rev_parse("HEAD")
    }

    /// `git rev-parse --verify <rev>`.
    pub fn rev_parse(&self, rev: &str) -> TestResult<String> {
        Ok(self
            .git(&["rev-parse", "--verify", "-q", rev])?
            .trim()
            .to_string())
    }

    /// The bytes of `reftable/tables.list`.
    pub fn tables_list(&self) -> TestResult<Vec<u8>> {
        Ok(fs::read(self.gitdir.join("reftable/tables.list"))?)
    }
}

/// Fails with the command's stderr unless it exited 0.
pub fn check(out: &Output, what: &str) -> TestResult {
    ensure!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Runs a plain command (ls, cat, find, stat, …) in `cwd` with a 60 s bound; returns stdout.
pub fn run_cmd(cwd: &Path, prog: &str, args: &[&str]) -> TestResult<String> {
    stage(&format!("{prog} {} (in {})", args.join(" "), cwd.display()));
    let out = Command::new("timeout")
        .arg("60")
        .arg(prog)
        .args(args)
        .current_dir(cwd)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()?;
    check(&out, &format!("{prog} {}", args.join(" ")))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

// ---------------------------------------------------------------------------------------
// errno and trees

/// Asserts that `r` failed with one of the `allowed` errnos.
pub fn expect_errno<T>(r: io::Result<T>, allowed: &[i32], what: &str) -> TestResult {
    match r {
        Ok(_) => bail!("{what}: succeeded, expected errno {}", errno_names(allowed)),
        Err(e) => {
            let got = e.raw_os_error().unwrap_or(0);
            ensure!(
                allowed.contains(&got),
                "{what}: failed with {e} (errno {got}), expected {}",
                errno_names(allowed)
            );
            Ok(())
        }
    }
}

fn errno_names(list: &[i32]) -> String {
    list.iter()
        .map(|e| io::Error::from_raw_os_error(*e).to_string())
        .collect::<Vec<_>>()
        .join(" or ")
}

/// A file tree: relative path -> content.
pub type Tree = BTreeMap<String, Vec<u8>>;

/// Every regular file below `root/rel` (recursively), keyed by its path relative to `root`.
/// Fails on anything that is neither a file nor a directory, and checks that the d_type
/// reported by readdir agrees with stat. At the top of a mount (`rel` empty) only the ref
/// part of the git directory is walked (`refs`, `logs`, `packed-refs`, root refs); the
/// rest (`objects`, `config`, …) is passed through and not compared.
pub fn read_tree(root: &Path, rel: &str, tree: &mut Tree) -> TestResult {
    let dir = root.join(rel);
    stage(&format!("walking {}", dir.display()));
    for entry in fs::read_dir(&dir).map_err(|e| format!("readdir {}: {e}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if rel.is_empty() && !reftablefs::fs::passthrough::is_ref_name_at_root(name.as_bytes()) {
            continue;
        }
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let dtype = entry.file_type()?;
        let meta = fs::symlink_metadata(entry.path())?;
        ensure!(
            dtype.is_dir() == meta.is_dir() && dtype.is_file() == meta.is_file(),
            "{path}: readdir type {dtype:?} disagrees with stat type {:?}",
            meta.file_type()
        );
        if meta.is_dir() {
            read_tree(root, &path, tree)?;
        } else if meta.is_file() {
            let content = fs::read(entry.path()).map_err(|e| format!("read {path}: {e}"))?;
            ensure!(
                meta.len() == content.len() as u64,
                "{path}: stat size {} but read {} bytes",
                meta.len(),
                content.len()
            );
            tree.insert(path, content);
        } else {
            bail!(
                "{path}: neither a file nor a directory ({:?})",
                meta.file_type()
            );
        }
    }
    Ok(())
}

/// Writes `tree` below `root` as plain files (the loose-ref layout on local disk).
pub fn write_tree(root: &Path, tree: &Tree) -> TestResult {
    for (path, content) in tree {
        let p = root.join(path);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&p, content)?;
    }
    Ok(())
}

/// A readable description of how two trees differ ("" when equal).
pub fn tree_diff(expected: &Tree, actual: &Tree) -> String {
    let mut out = String::new();
    for (path, want) in expected {
        match actual.get(path) {
            None => out.push_str(&format!("missing: {path}\n")),
            Some(got) if got != want => out.push_str(&format!(
                "differs: {path}\n  expected: {:?}\n  actual:   {:?}\n",
                String::from_utf8_lossy(want),
                String::from_utf8_lossy(got)
            )),
            Some(_) => {}
        }
    }
    for path in actual.keys() {
        if !expected.contains_key(path) {
            out.push_str(&format!("unexpected: {path}\n"));
        }
    }
    out
}

/// Fails with a readable diff unless the trees are equal.
pub fn ensure_same_tree(expected: &Tree, actual: &Tree, what: &str) -> TestResult {
    let diff = tree_diff(expected, actual);
    ensure!(diff.is_empty(), "{what}: trees differ\n{diff}");
    Ok(())
}

/// A small deterministic PRNG (SplitMix64) for picking refs and interleavings.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// Polls `cond` every millisecond until it holds or `budget` passes; returns the time it
/// took, or the last observation as the error.
pub fn wait_for(
    budget: Duration,
    mut cond: impl FnMut() -> Result<(), String>,
) -> Result<Duration, String> {
    let start = Instant::now();
    loop {
        match cond() {
            Ok(()) => return Ok(start.elapsed()),
            Err(last) => {
                if start.elapsed() > budget {
                    return Err(last);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A files-backend reflog without each line's timestamp and zone (the differential tests
/// compare reflogs written at different times).
pub fn strip_times(content: &[u8]) -> String {
    String::from_utf8_lossy(content)
        .lines()
        .map(|l| {
            let (head, msg) = l.split_once('\t').unwrap_or((l, ""));
            let fields: Vec<&str> = head.split(' ').collect();
            let keep = fields.len().saturating_sub(2);
            format!(
                "{}\t{msg}",
                fields.get(..keep).unwrap_or_default().join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tmpfs of a given size mounted on a directory (root only), unmounted on drop: a small
/// file system to fill for the no-space tests.
pub struct SmallFs(pub std::path::PathBuf);

impl SmallFs {
    /// Mounts a tmpfs of `size` (`"20m"`) on `dir`; `None` when not root.
    pub fn mount(dir: &Path, size: &str) -> TestResult<Option<SmallFs>> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
        std::fs::create_dir_all(dir)?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()?;
        check(&out, "mount -t tmpfs")?;
        Ok(Some(SmallFs(dir.to_path_buf())))
    }

    /// Fills the file system, to the last byte, with a file it returns; called again, it
    /// takes what was freed since (say by the mount's compaction merging small tables).
    pub fn fill(&self) -> TestResult<std::path::PathBuf> {
        let path = self.0.join("filler");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        for chunk in [1 << 20, 4096, 512, 1] {
            let buf = vec![b'x'; chunk];
            loop {
                match f.write_all(&buf) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(path)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
