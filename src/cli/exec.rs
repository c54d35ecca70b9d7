//! `reftablefs exec [-C DIR] [mount options] [--log=FILE] [--] COMMAND [ARGS]`: runs one
//! program (and its children) in a private mount namespace where the repository's git
//! directory is the files view, while every other process keeps the native reftable
//! repository.
//!
//! Three processes:
//!
//! 1. **This process** finds the repository (as git does, from `-C DIR` or the current
//!    directory), blocks the signals it forwards, and moves itself into a new private
//!    mount namespace (`userns.rs`: as root a mount namespace, as an ordinary user a user
//!    namespace with only its own uid and gid mapped, plus a mount namespace; every mount
//!    a slave, so nothing mounted inside is seen outside). It must still have one thread
//!    then (the kernel refuses a user namespace to a multi-threaded process).
//! 2. **The view** (forked while single-threaded, so inside the namespace): its own
//!    process group (a terminal's Ctrl-C never reaches it), stdin and stdout on
//!    `/dev/null`, stderr on the log; it opens the real git directory and mounts the view
//!    over it exactly as `mount --over` does (`fs::mount` on the directory, reached
//!    underneath through `/proc/self/fd/N`), without `auto_unmount` and `allow_other`
//!    (fusermount3 cannot work in a user namespace, and only the caller's processes are
//!    in this one). It watches a pipe from this process: at end of file without the
//!    "torn down" byte (this process was killed) it unmounts itself (SIGTERM: every
//!    pending update is written first).
//! 3. **COMMAND**, spawned once the view is listed in `/proc/self/mountinfo`: this
//!    process's environment (plus `REFTABLEFS_EXEC`, the mounted directory), stdin,
//!    stdout, stderr and process group (so it stays in the terminal's foreground group),
//!    the working directory resolved by path after the mount (a directory inside the git
//!    directory is the view's), no capabilities (an ordinary user's `execve` drops the
//!    namespace's), an empty signal mask.
//!
//! While COMMAND runs, this process waits in `sigwaitinfo`: SIGHUP, SIGINT, SIGQUIT,
//! SIGTERM, SIGUSR1, SIGUSR2 and SIGALRM are forwarded to COMMAND, unless COMMAND got
//! them already (sent by the terminal to the process group both are in, or by a process
//! of that group: `kill(0, …)`); SIGTSTP is not blocked, so Ctrl-Z stops this process
//! with COMMAND and `fg` resumes both. If the view's process dies, its dead mount is
//! detached, so COMMAND sees the real directory instead of `ENOTCONN`.
//!
//! When COMMAND exits (or is killed), its status is kept and the view is torn down: an
//! `fsync` of the mount's root writes every pending update (COMMAND may have been killed
//! between a rename and the batch's commit), the mount's status file says whether that
//! flush lost one, `umount2` (a busy mount, held by processes COMMAND left behind, is
//! retried for a second and then detached: they keep the view until they let go, and the
//! view's process writes their updates until then), and the view's process is waited for
//! (60 s; it writes what is left, compacts, releases its locks). Exit: COMMAND's status,
//! 128 + N when a signal N killed it (as git and shells report it), 127 when it cannot be
//! found, 126 when it cannot be run, and 128 when the view could not be made or an update
//! was not written (with the view's log on stderr).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use super::userns::{self, Kind, Step};
use crate::cli::{Args, Id};
use reftablefs::fs::{self, MountOptions};
use reftablefs::repo::Repo;
use reftablefs::{Error, Result};

/// Signals forwarded to COMMAND (besides SIGCHLD, blocked to be waited for).
const FORWARDED: &[libc::c_int] = &[
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
];

/// `si_code` of a signal the kernel sent (a terminal's Ctrl-C, a hangup).
const SI_KERNEL: libc::c_int = 0x80;

/// `si_code` of a signal sent by `tkill`/`tgkill` (the sender's pid is filled in).
const SI_TKILL: libc::c_int = -6;

/// How long the view may take to appear.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a mount held by processes COMMAND left behind is retried before it is detached.
const BUSY_RETRY: Duration = Duration::from_secs(1);

/// How long the view's process may take to exit after a detached (busy) unmount before it
/// is left to serve the processes that hold it.
const BUSY_GRACE: Duration = Duration::from_secs(2);

/// The byte this process writes to the view's pipe once the view is unmounted: from then
/// on an end of file means nothing.
const TORN_DOWN: u8 = b'd';

/// The environment variable COMMAND gets: the directory the view is mounted on.
pub const ENV_MARK: &str = "REFTABLEFS_EXEC";

fn usage(msg: &str) -> ExitCode {
    crate::cli::common::usage_error(msg, "exec")
}

/// What the command line asked for.
#[derive(Debug)]
struct Request {
    /// `-C DIR` (joined, as git's), relative to the process's directory.
    cwd: Option<PathBuf>,
    opts: MountOptions,
    log: Option<PathBuf>,
    command: Vec<OsString>,
}

fn parse(args: Args) -> std::result::Result<Request, ExitCode> {
    let mut cwd: Option<PathBuf> = None;
    for v in args.values(Id::ChangeDir) {
        let v = PathBuf::from(v);
        cwd = Some(match cwd.take() {
            Some(prev) => prev.join(v),
            None => v,
        });
    }
    let mut opts = MountOptions {
        read_only: args.flag(Id::ReadOnly),
        ..MountOptions::default()
    };
    if args.flag(Id::NoKernelPassthrough) {
        opts.kernel_passthrough = false;
    }
    if args.flag(Id::NoFollowCpu) {
        opts.follow_cpu = false;
    }
    if args.flag(Id::NoFsync) {
        opts.fsync = false;
    }
    for v in args.values(Id::BatchWindow) {
        match v.to_str().and_then(|s| s.parse::<u64>().ok()) {
            Some(ms) => opts.batch_window = Duration::from_millis(ms),
            None => return Err(usage("--batch-window takes a number of milliseconds")),
        }
    }
    for v in args.values(Id::BatchMax) {
        match v
            .to_str()
            .and_then(|s| s.parse::<usize>().ok())
            .filter(|&n| n > 0)
        {
            Some(n) => opts.batch_max = n,
            None => return Err(usage("--batch-max takes a positive number")),
        }
    }
    for v in args.values(Id::InodeCap) {
        match v
            .to_str()
            .and_then(|s| s.parse::<usize>().ok())
            .filter(|&n| n >= reftablefs::fs::inode::MIN_CAP)
        {
            Some(n) => opts.inode_cap = n,
            None => {
                return Err(usage(&format!(
                    "--inode-cap takes a number of at least {}",
                    reftablefs::fs::inode::MIN_CAP
                )))
            }
        }
    }
    let log = args.value(Id::Log).map(PathBuf::from);
    // COMMAND and its arguments, word for word.
    let command = args.into_operands();
    if command.is_empty() {
        return Err(usage(
            "expected a COMMAND to run (reftablefs exec [options] -- COMMAND [ARGS])",
        ));
    }
    Ok(Request {
        cwd,
        opts,
        log,
        command,
    })
}

/// Runs `reftablefs exec`.
pub fn run(args: Args) -> Result<ExitCode> {
    let req = match parse(args) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let global = crate::cli::common::global_options();
    let mut discover = global.clone();
    discover.cwd = match (global.cwd, &req.cwd) {
        (Some(g), Some(c)) => Some(g.join(c)),
        (g, c) => c.clone().or(g),
    };
    let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let workdir = match &discover.cwd {
        Some(c) => here.join(c),
        None => logical_cwd(&here),
    };
    let repo = Repo::discover(&discover)?;
    let target = repo.common_dir.clone();
    let mut command = Command::new(&req.command[0]);
    command.args(&req.command[1..]).current_dir(&workdir);
    if discover.cwd.is_some() {
        command.env("PWD", &workdir);
    }
    if let Some(g) = &global.git_dir {
        // As git does for its subprocesses: the directory `--git-dir` named.
        command.env("GIT_DIR", here.join(g));
    }
    // Already a files view here (`mount --over`, or inside another `exec`): nothing to
    // mount, COMMAND runs as it is.
    if served_already(&target) {
        let e = command.exec_replacing();
        return Ok(cannot_run(&req.command[0], &e));
    }
    repo.require_reftable()?;
    super::mount::reftable_dir(&target)?;
    fs::check_mountpoint(&target)?;
    command.env(ENV_MARK, &target);
    // What to use where exec cannot work: a mount every process sees, made through
    // fusermount3 (whose `allow_other` a user's `--over` needs `user_allow_other` for).
    let instead = match &repo.work_tree {
        Some(wt) if target == wt.join(".git") => format!(
            "reftablefs mount --daemon --over {}{}",
            shell_word(wt),
            if is_root() {
                ""
            } else {
                " (needs user_allow_other in /etc/fuse.conf)"
            }
        ),
        _ => format!(
            "reftablefs mount --daemon {} MOUNTPOINT",
            shell_word(&target)
        ),
    };
    if !is_root() {
        if let Err(msg) = userns::check_dev_fuse(Path::new("/dev/fuse"), &instead) {
            eprintln!("fatal: {msg}");
            return Ok(ExitCode::from(128));
        }
    }
    let (log_path, log_is_default) = match &req.log {
        Some(p) => (here.join(p), false),
        None => (
            std::env::temp_dir().join(format!("reftablefs-exec.{}.log", std::process::id())),
            true,
        ),
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| Error::io(&log_path, e))?;

    // From here until the fork this process must keep a single thread (checked: the
    // kernel checks it only for a user namespace).
    let threads = thread_count();
    if threads != 1 {
        return Err(fs::fail(format!(
            "reftablefs exec: {threads} threads before the fork (expected 1)"
        )));
    }
    let signals = Signals::block(&[FORWARDED, &[libc::SIGCHLD]].concat());
    let kind = match userns::enter() {
        Ok(k) => k,
        Err((step, e)) => {
            let msg = if step == Step::Unshare && e.raw_os_error() == Some(libc::EINVAL) {
                format!("cannot create a private mount namespace: {e} (more than one thread?)")
            } else if matches!(step, Step::Unshare) && is_root() {
                format!(
                    "cannot create a private mount namespace as root: {e} (a container \
                     without CAP_SYS_ADMIN?). Use instead: {instead}"
                )
            } else {
                userns::diagnose(step, &e, &userns::sysctl, &instead)
            };
            eprintln!("fatal: {msg}");
            if log_is_default {
                let _ = std::fs::remove_file(&log_path);
            }
            return Ok(ExitCode::from(128));
        }
    };
    let (pipe_r, pipe_w) = pipe()?;
    // SAFETY: this process has one thread (checked above, and by the kernel for a user
    // namespace), so the child's copy of memory is consistent; the child only runs
    // `view_process`, which never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Error::io("fork", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(pipe_w);
        view_process(pipe_r, log, &target, &req.opts);
    }
    drop(pipe_r);
    drop(log);
    let mut view = View {
        pid,
        status: None,
        pipe: Some(pipe_w),
        target: target.clone(),
        log: log_path.clone(),
    };
    let show_log = |view: &View| {
        let text = std::fs::read_to_string(&view.log).unwrap_or_default();
        eprint!("{text}");
        eprintln!("reftablefs exec: the view's log: {}", view.log.display());
    };

    match view.wait_ready(&signals) {
        Ready::Yes => {}
        Ready::Exited(status) => {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            eprint!("{text}");
            if matches!(kind, Kind::User { .. }) && text.contains("cannot mount on") {
                let err = std::io::Error::from_raw_os_error(libc::EPERM);
                eprintln!(
                    "fatal: {}",
                    userns::diagnose(Step::FuseMount, &err, &userns::sysctl, &instead)
                );
            } else {
                eprintln!(
                    "fatal: the view could not be mounted ({})",
                    describe(status)
                );
            }
            if log_is_default {
                let _ = std::fs::remove_file(&log_path);
            }
            return Ok(ExitCode::from(128));
        }
        Ready::Signal(sig) => {
            view.abandon();
            if log_is_default && view.status == Some(0) {
                let _ = std::fs::remove_file(&log_path);
            }
            return Ok(ExitCode::from(u8::try_from(128 + sig).unwrap_or(128)));
        }
        Ready::TimedOut => {
            eprintln!(
                "fatal: the view did not appear on {} within {} s",
                target.display(),
                READY_TIMEOUT.as_secs()
            );
            view.abandon();
            show_log(&view);
            return Ok(ExitCode::from(128));
        }
    }

    // COMMAND starts with no signal blocked (std's spawn keeps this thread's mask).
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only calls
        // sigemptyset and pthread_sigmask, which are async-signal-safe, on a local set.
        unsafe {
            command.pre_exec(|| {
                let mut empty: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut empty);
                libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
                Ok(())
            });
        }
    }
    let code = match command.spawn() {
        Ok(child) => {
            let st = supervise(child.id() as libc::pid_t, &mut view, &signals);
            exit_code(st)
        }
        Err(e) => cannot_run(&req.command[0], &e),
    };
    let ok = view.tear_down(&signals);
    if !ok {
        show_log(&view);
        return Ok(ExitCode::from(128));
    }
    if log_is_default && view.status.is_some() {
        let _ = std::fs::remove_file(&log_path);
    }
    Ok(code)
}

/// How many threads this process has (`Threads:` in `/proc/self/status`; 0 unknown).
fn thread_count() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Whether the current process runs as root.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The working directory as the caller sees it: `$PWD` when it names this very
/// directory (a path through a symbolic link stays as typed), else the real path.
fn logical_cwd(real: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let same =
        |a: &std::fs::Metadata, b: &std::fs::Metadata| a.dev() == b.dev() && a.ino() == b.ino();
    if let Some(pwd) = std::env::var_os("PWD").map(PathBuf::from) {
        if pwd.is_absolute() {
            if let (Ok(a), Ok(b)) = (std::fs::metadata(&pwd), std::fs::metadata(".")) {
                if same(&a, &b) {
                    return pwd;
                }
            }
        }
    }
    real.to_path_buf()
}

/// A path as one shell word (for the messages' suggested commands).
fn shell_word(p: &Path) -> String {
    let s = p.to_string_lossy();
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:,@%".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Whether `dir` is already a reftablefs mount in this mount namespace.
fn served_already(dir: &Path) -> bool {
    let Ok(text) = std::fs::read("/proc/self/mountinfo") else {
        return false;
    };
    super::status::parse_mountinfo(&text)
        .iter()
        .any(|m| m.mountpoint == dir)
}

/// `Command::exec` under a name that says what it does.
trait ExecReplacing {
    fn exec_replacing(&mut self) -> std::io::Error;
}

impl ExecReplacing for Command {
    fn exec_replacing(&mut self) -> std::io::Error {
        use std::os::unix::process::CommandExt;
        self.exec()
    }
}

/// The message and status (127 not found, 126 not runnable, as shells) when COMMAND
/// cannot be started.
fn cannot_run(prog: &std::ffi::OsStr, e: &std::io::Error) -> ExitCode {
    eprintln!(
        "reftablefs exec: cannot run '{}': {e}",
        prog.to_string_lossy()
    );
    ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}

/// A wait status as `exec` exits with it: the exit code, or 128 + N for a signal N.
fn exit_code(status: libc::c_int) -> ExitCode {
    ExitCode::from(status_byte(status))
}

fn status_byte(status: libc::c_int) -> u8 {
    if libc::WIFEXITED(status) {
        (libc::WEXITSTATUS(status) & 0xff) as u8
    } else if libc::WIFSIGNALED(status) {
        (128 + (libc::WTERMSIG(status) & 0x7f)) as u8
    } else {
        128
    }
}

/// A wait status in words.
fn describe(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exit status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("wait status {status}")
    }
}

/// A pipe whose ends are closed on exec (COMMAND never holds them).
fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::io("pipe", std::io::Error::last_os_error()));
    }
    // SAFETY: two descriptors just returned to us, owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `waitpid(pid, WNOHANG)`: the status once it has exited.
fn try_reap(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid writes the status into a local.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    (r == pid).then_some(status)
}

/// A set of signals blocked in this thread (and the threads and processes it starts
/// afterwards), to be taken with `sigtimedwait`.
struct Signals {
    set: libc::sigset_t,
}

impl Signals {
    fn block(sigs: &[libc::c_int]) -> Signals {
        // SAFETY: sigset manipulation on a local set; pthread_sigmask on this thread.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &s in sigs {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Signals { set }
        }
    }

    /// The next pending signal of the set, waiting at most `timeout`.
    fn wait(&self, timeout: Duration) -> Option<(libc::c_int, libc::siginfo_t)> {
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            // Below 10^9: fits a 32-bit long too.
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: an all-zero siginfo_t is a valid value to be overwritten.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: the set, the info and the timeout are valid locals.
        let sig = unsafe { libc::sigtimedwait(&self.set, &mut info, &ts) };
        (sig > 0).then_some((sig, info))
    }
}

/// How the view's start ended.
enum Ready {
    Yes,
    Exited(libc::c_int),
    Signal(libc::c_int),
    TimedOut,
}

/// The view's process, seen from this one.
struct View {
    pid: libc::pid_t,
    /// Its wait status, once reaped.
    status: Option<libc::c_int>,
    /// The write end of its pipe; closed (or sent [`TORN_DOWN`]) at the end.
    pipe: Option<OwnedFd>,
    target: PathBuf,
    log: PathBuf,
}

impl View {
    fn reap(&mut self) -> Option<libc::c_int> {
        if self.status.is_none() {
            self.status = try_reap(self.pid);
        }
        self.status
    }

    /// Waits until the view is mounted, its process ended, a signal came or the time ran
    /// out.
    fn wait_ready(&mut self, signals: &Signals) -> Ready {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if fs::is_mounted(&self.target) {
                return Ready::Yes;
            }
            if let Some(st) = self.reap() {
                return Ready::Exited(st);
            }
            if Instant::now() > deadline {
                return Ready::TimedOut;
            }
            if let Some((sig, _)) = signals.wait(Duration::from_millis(5)) {
                if sig != libc::SIGCHLD {
                    return Ready::Signal(sig);
                }
            }
        }
    }

    /// Ends a view COMMAND never used: the pipe closes, so the view unmounts itself (or
    /// its process ends before mounting); waited for a bounded time.
    fn abandon(&mut self) {
        self.pipe = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.reap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The view's process ended while COMMAND runs: its dead mount is detached, so
    /// COMMAND sees the real directory rather than `ENOTCONN`.
    fn ended_early(&mut self, status: libc::c_int) {
        if fs::is_mounted(&self.target) {
            fs::lazy_unmount(&self.target);
        }
        if status != 0 {
            eprintln!(
                "reftablefs exec: the view's process ended ({}); {} is the real directory \
                 again (log: {})",
                describe(status),
                self.target.display(),
                self.log.display()
            );
        }
    }

    /// Flushes, unmounts and waits for the view's process; false when an update may not
    /// have been written or the process did not end as it should (said on stderr).
    fn tear_down(&mut self, signals: &Signals) -> bool {
        let mut ok = true;
        let mut gone = Unmounted::Gone;
        if self.reap().is_none() && fs::is_mounted(&self.target) {
            ok &= self.flush();
            gone = self.unmount();
        }
        match (&gone, self.pipe.take()) {
            // Unmounted (or detached): an end of file from now on means nothing.
            (Unmounted::Gone | Unmounted::Detached, Some(p)) => {
                let mut f = std::fs::File::from(p);
                let _ = f.write_all(&[TORN_DOWN]);
            }
            // Still mounted: the pipe closes without the byte, so the view unmounts
            // itself (fs::mount's own unmount, then its flush).
            (Unmounted::Failed(e), p) => {
                eprintln!(
                    "reftablefs exec: cannot unmount {}: {e}; the view unmounts itself",
                    self.target.display()
                );
                drop(p);
            }
            (_, None) => {}
        }
        let busy = matches!(gone, Unmounted::Detached);
        let budget = if busy {
            BUSY_GRACE
        } else {
            super::unmount::DEFAULT_TIMEOUT
        };
        let deadline = Instant::now() + budget;
        while self.reap().is_none() && Instant::now() < deadline {
            // Signals that come now are not COMMAND's any more: the teardown goes on.
            let _ = signals.wait(Duration::from_millis(10));
        }
        match self.status {
            Some(0) => ok,
            Some(st) => {
                eprintln!(
                    "reftablefs exec: the view's process ended with {}: some pending ref \
                     updates may not have been written",
                    describe(st)
                );
                false
            }
            None if busy => {
                eprintln!(
                    "reftablefs exec: {} is still in use by processes the command left \
                     behind; the view is detached from it and its process (pid {}) serves \
                     them and writes their updates until they let go (log: {})",
                    self.target.display(),
                    self.pid,
                    self.log.display()
                );
                ok
            }
            None => {
                eprintln!(
                    "reftablefs exec: the view's process (pid {}) is still running after {} \
                     s (writing pending updates or compacting the stack)",
                    self.pid,
                    budget.as_secs()
                );
                false
            }
        }
    }

    /// `fsync` of the mount's root: every pending batch is committed. The mount's own
    /// record of updates not written says whether the flush lost one (the fsync reports a
    /// failed update to its writer, not to us).
    fn flush(&self) -> bool {
        let before = report_of(&self.target);
        let root = self.target.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        // The thread is left behind if the mount never answers; the process exits anyway.
        let spawned = std::thread::Builder::new()
            .name("reftablefs-exec-flush".into())
            .spawn(move || {
                let r = std::fs::File::open(&root).and_then(|d| d.sync_all());
                let _ = tx.send(r);
            });
        let mut ok = true;
        match spawned.map(|_| rx.recv_timeout(super::unmount::DEFAULT_TIMEOUT)) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                eprintln!(
                    "reftablefs exec: flushing {}: {e}: some pending ref updates were not written",
                    self.target.display()
                );
                ok = false;
            }
            Ok(Err(_)) | Err(_) => {
                eprintln!(
                    "reftablefs exec: flushing {} did not finish",
                    self.target.display()
                );
                ok = false;
            }
        }
        if let (Some(b), Some(a)) = (before, report_of(&self.target)) {
            let lost = a.conflicts_total.saturating_sub(b.conflicts_total);
            if lost > 0 {
                eprintln!(
                    "reftablefs exec: {lost} pending ref update(s) not written while flushing {}:",
                    self.target.display()
                );
                let shown = usize::try_from(lost).unwrap_or(usize::MAX);
                for e in a.conflicts.iter().rev().take(shown).rev() {
                    eprintln!("  {}: {}", e.what, e.reason);
                }
                ok = false;
            }
        }
        ok
    }

    /// Unmounts the view: a busy mount (held by processes COMMAND left behind) is tried
    /// again for [`BUSY_RETRY`], then detached.
    fn unmount(&self) -> Unmounted {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c) = std::ffi::CString::new(self.target.as_os_str().as_bytes()) else {
            return Unmounted::Failed(std::io::ErrorKind::InvalidInput.into());
        };
        let deadline = Instant::now() + BUSY_RETRY;
        loop {
            // SAFETY: a NUL-terminated path.
            if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
                return Unmounted::Gone;
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBUSY) {
                // Unmounted by someone else meanwhile (EINVAL), or refused.
                return if fs::is_mounted(&self.target) {
                    Unmounted::Failed(e)
                } else {
                    Unmounted::Gone
                };
            }
            if Instant::now() > deadline {
                return if fs::lazy_unmount(&self.target) {
                    Unmounted::Detached
                } else {
                    Unmounted::Failed(std::io::Error::last_os_error())
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How [`View::unmount`] ended.
enum Unmounted {
    /// The mount is gone.
    Gone,
    /// It was busy and is detached: its process serves those who hold it.
    Detached,
    /// It could not be unmounted.
    Failed(std::io::Error),
}

/// What the mount says about itself in its status file.
fn report_of(mountpoint: &Path) -> Option<super::status::Report> {
    use super::status;
    let text = status::read_status(mountpoint, status::READ_TIMEOUT).ok()??;
    let v = reftablefs::json::parse(&text).ok()?;
    status::Report::from_json(&v).ok()
}

/// Waits for COMMAND, forwarding signals to it; returns its wait status.
fn supervise(cmd: libc::pid_t, view: &mut View, signals: &Signals) -> libc::c_int {
    loop {
        let Some((sig, info)) = signals.wait(Duration::from_secs(1)) else {
            // A SIGCHLD is never lost (it stays pending), but check anyway.
            if let Some(st) = try_reap(cmd) {
                return st;
            }
            continue;
        };
        if sig == libc::SIGCHLD {
            if view.status.is_none() {
                if let Some(st) = view.reap() {
                    view.ended_early(st);
                }
            }
            if let Some(st) = try_reap(cmd) {
                return st;
            }
            continue;
        }
        if should_forward(&info, cmd) {
            // SAFETY: kill with a pid of our own child (not yet reaped, so not reused).
            unsafe { libc::kill(cmd, sig) };
        }
    }
}

/// Whether a signal this process got should be sent on to COMMAND: not when COMMAND got
/// it too (the terminal signals the whole foreground group; a process of COMMAND's group
/// signalling its group), nor when COMMAND sent it.
fn should_forward(info: &libc::siginfo_t, cmd: libc::pid_t) -> bool {
    // SAFETY: getpgrp and getpgid have no memory preconditions.
    let (ours, cmd_group) = unsafe { (libc::getpgrp(), libc::getpgid(cmd)) };
    let same_group = cmd_group == ours;
    if info.si_code == SI_KERNEL {
        return !same_group;
    }
    if info.si_code == libc::SI_USER || info.si_code == libc::SI_QUEUE || info.si_code == SI_TKILL {
        // SAFETY: for these codes the kernel filled in the sender's pid.
        let sender = unsafe { info.si_pid() };
        if sender == cmd {
            return false;
        }
        if sender > 0 && same_group {
            // SAFETY: as above.
            let sender_group = unsafe { libc::getpgid(sender) };
            if sender_group == cmd_group {
                return false;
            }
        }
    }
    true
}

/// The view's process: never returns.
fn view_process(pipe: OwnedFd, log: std::fs::File, target: &Path, opts: &MountOptions) -> ! {
    // SAFETY: plain system calls on this (single-threaded, just forked) process: its own
    // process group, standard streams replaced by /dev/null and the log, `/` as working
    // directory (it holds nothing of the repository), and only SIGINT and SIGTERM blocked
    // (fs::mount's signal thread waits for them; the rest as COMMAND would have it).
    unsafe {
        libc::setpgid(0, 0);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            if null > 2 {
                libc::close(null);
            }
        }
        libc::dup2(log.as_raw_fd(), 2);
        libc::chdir(c"/".as_ptr());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
    drop(log);
    close_other_descriptors(pipe.as_raw_fd());
    let watched = target.to_path_buf();
    let watcher = std::thread::Builder::new()
        .name("reftablefs-exec-parent".into())
        .spawn(move || watch_parent(pipe, &watched));
    let r = match watcher {
        Ok(_) => serve(target, opts),
        Err(e) => Err(Error::io("thread", e)),
    };
    // Everything is written and every lock released: tell a waiting `unmount`.
    crate::cli::unmount::report_exit(&r);
    let code = match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("reftablefs exec: {e}");
            128
        }
    };
    let _ = std::io::stderr().flush();
    // SAFETY: ends this process without running the forked parent's exit path.
    unsafe { libc::_exit(code) }
}

/// Closes every descriptor but the standard streams and `keep` (a forked copy of the
/// caller's extra descriptors would keep pipes open that the caller's readers wait on).
fn close_other_descriptors(keep: RawFd) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<RawFd> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2 && fd != keep)
        .collect();
    for fd in fds {
        // SAFETY: closing a descriptor no Rust object of this process owns any more (the
        // listing's own descriptor is closed already; a close of it again fails harmlessly).
        unsafe { libc::close(fd) };
    }
}

/// Reads the pipe from `exec`'s process: [`TORN_DOWN`] ends the watch; an end of file
/// before it (that process was killed) unmounts the view, which writes what is pending
/// (SIGTERM to this process: `fs::mount`'s signal thread), or ends this process if the view
/// is not mounted yet (nothing was served).
fn watch_parent(pipe: OwnedFd, target: &Path) {
    let mut f = std::fs::File::from(pipe);
    let mut b = [0u8; 1];
    loop {
        match f.read(&mut b) {
            Ok(1) if b[0] == TORN_DOWN => return,
            Ok(1) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            _ => break,
        }
    }
    if fs::is_mounted(target) {
        eprintln!("reftablefs exec: the exec process is gone: unmounting");
        // SAFETY: a signal to this very process; SIGTERM is blocked in every thread and
        // taken by fs::mount's signal thread.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    } else {
        eprintln!("reftablefs exec: the exec process is gone before the view was mounted");
        // SAFETY: ends this process; nothing was served, so nothing is pending.
        unsafe { libc::_exit(128) }
    }
}

/// Mounts the view over `dotgit` as `mount --over` does and serves it until unmounted.
fn serve(dotgit: &Path, opts: &MountOptions) -> Result<()> {
    let real = std::fs::File::open(dotgit).map_err(|e| Error::io(dotgit, e))?;
    let gitdir = PathBuf::from(format!("/proc/self/fd/{}", real.as_raw_fd()));
    let reftable_dir = super::mount::reftable_dir(&gitdir)?;
    let mut opts = opts.clone();
    // Only this namespace sees the mount, and fusermount3 (which auto_unmount needs)
    // cannot work in a user namespace: the exec process detaches a dead view instead.
    opts.auto_unmount = false;
    opts.allow_other = false;
    let o = reftablefs::fs::stack_source::open(&gitdir, &opts)?;
    let r = fs::mount(o.reader, o.writer, o.log, &reftable_dir, dotgit, &opts);
    drop(real);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(words: &[&str]) -> std::result::Result<Request, ExitCode> {
        use crate::cli::parse::{parse as parse_line, Grammar};
        let words: Vec<OsString> = words.iter().map(OsString::from).collect();
        let cmd = crate::cli::table::find("exec").expect("exec is in the table");
        match parse_line(&Grammar::of(cmd), &words) {
            Ok(a) => parse(a),
            Err(_) => Err(ExitCode::from(129)),
        }
    }

    #[test]
    fn options_then_the_command_word_for_word() {
        let r = parsed(&[
            "-C",
            "a",
            "-C",
            "b",
            "--read-only",
            "--batch-window=9",
            "--",
            "git",
            "-C",
            "x",
            "--",
            "y",
        ])
        .unwrap();
        assert_eq!(r.cwd, Some(PathBuf::from("a/b")));
        assert!(r.opts.read_only);
        assert_eq!(r.opts.batch_window, Duration::from_millis(9));
        assert_eq!(r.command, ["git", "-C", "x", "--", "y"].map(OsString::from));
        // Without `--`, the first word that is not an option starts COMMAND.
        let r = parsed(&["--no-fsync", "sh", "-c", "exit 3"]).unwrap();
        assert!(!r.opts.fsync);
        assert_eq!(r.command, ["sh", "-c", "exit 3"].map(OsString::from));
        assert!(parsed(&["--read-only"]).is_err());
        assert!(parsed(&["--"]).is_err());
        assert!(parsed(&["--batch-max=0", "true"]).is_err());
    }

    #[test]
    fn statuses_as_git_and_shells_report_them() {
        assert_eq!(status_byte(0), 0);
        assert_eq!(status_byte(7 << 8), 7);
        assert_eq!(status_byte(libc::SIGTERM), 128 + 15);
        assert_eq!(status_byte(libc::SIGKILL), 137);
        assert_eq!(status_byte(libc::SIGINT | 0x80), 130);
    }

    #[test]
    fn words_for_messages() {
        assert_eq!(shell_word(Path::new("/src/p")), "/src/p");
        assert_eq!(shell_word(Path::new("/a b/it's")), "'/a b/it'\\''s'");
    }
}
