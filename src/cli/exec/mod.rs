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
//!
//! Files, each with one job:
//!
//! | file | job |
//! | --- | --- |
//! | `mod.rs` | the command line and the run: repository, namespace, fork, COMMAND and its supervision, exit status |
//! | `signals.rs` | the signals this process blocks and waits for, and which it passes on to COMMAND |
//! | `view.rs` | the view's process as this one sees it: ready, flushed, unmounted, waited for |
//! | `serve.rs` | the view's process itself: its streams, its watch on this process, the mount |
//! | `process.rs` | processes and wait statuses: pipes, reaping, exit codes, COMMAND not runnable |

mod process;
mod serve;
mod signals;
mod view;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use super::userns::{self, Kind, Step};
use crate::cli::{Args, Id};
use process::{cannot_run, describe, exit_code, pipe, try_reap, ExecReplacing};
use reftablefs::fs::{self, MountOptions};
use reftablefs::repo::Repo;
use reftablefs::{Error, Result};
use signals::{should_forward, Signals, FORWARDED};
use view::{Ready, View, READY_TIMEOUT};

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
    let opts = super::mount::options(&args).map_err(|msg| usage(&msg))?;
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
        serve::view_process(pipe_r, log, &target, &req.opts);
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
    fn words_for_messages() {
        assert_eq!(shell_word(Path::new("/src/p")), "/src/p");
        assert_eq!(shell_word(Path::new("/a b/it's")), "'/a b/it'\\''s'");
    }
}
