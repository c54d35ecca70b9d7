//! `reftablefs unmount [--timeout=<seconds>] MOUNTPOINT`: flushes pending writes, unmounts,
//! and returns only once the mount's process has finished and exited.
//!
//! After the kernel lets go of the mount point, the serving process still writes what is
//! pending and compacts the stack (holding `tables.list.lock` and table locks, writing a
//! temporary table), which can take seconds on a big stack; a caller that goes on (or
//! kills it) as soon as the mount point is free races that work. So `unmount`:
//!
//! 1. finds the serving process: the pid in the mount's status file, else the
//!    `reftablefs mount` command line under `/proc` (as `reftablefs status`), with its
//!    start time, so that a reused pid is never taken for it;
//! 2. listens on an abstract Unix socket named after that process ([`exit_socket`]), on
//!    which the process reports how it ended ([`report_exit`]) just before it exits;
//! 3. fsyncs the mount's root (every pending batch is committed), then unmounts
//!    (`fusermount3 -u`, else a lazy unmount);
//! 4. waits, at most `--timeout` seconds, until the process has exited (a pidfd, else
//!    polling `/proc`).
//!
//! It exits 0 only when the flush succeeded, the process exited in time and reported that
//! it wrote everything; otherwise 128 with a message saying which of these failed.

use std::io::Read;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use crate::cli::table::Id;
use crate::cli::Args;
use reftablefs::fs;
use reftablefs::Result;

/// How long `unmount` waits for the mount's process by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest exit report read.
const MAX_REPORT: u64 = 64 << 10;

/// A running process, identified beyond its pid by its start time (`/proc/<pid>/stat`
/// field 22, clock ticks since boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub start: u64,
}

/// The start time of process `pid`, `None` when it is gone or a zombie.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_start(&stat)
}

/// Field 22 (start time) of a `/proc/<pid>/stat` line, `None` for a zombie or a dead
/// process (states `Z`, `X`) or a line that does not parse. The command name (field 2)
/// may hold spaces and parentheses: fields are counted after its last `)`.
pub fn parse_stat_start(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat
        .get(close + 1..)?
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    // After the name: state (field 3) ... start time (field 22), the 20th from here.
    let state = fields.next()?;
    if state == b"Z" || state == b"X" {
        return None;
    }
    let start = fields.nth(18)?;
    std::str::from_utf8(start).ok()?.parse().ok()
}

impl Process {
    /// Process `pid` as it runs now.
    pub fn find(pid: u32) -> Option<Process> {
        Some(Process {
            pid,
            start: start_time(pid)?,
        })
    }

    /// This process.
    pub fn current() -> Option<Process> {
        Process::find(std::process::id())
    }

    /// Whether it still runs (neither gone, nor a zombie, nor its pid reused).
    pub fn alive(&self) -> bool {
        start_time(self.pid) == Some(self.start)
    }
}

/// The abstract socket name on which `unmount` waits for the report of process `p`.
pub fn exit_socket(p: &Process) -> String {
    format!("reftablefs-exit.{}.{}", p.pid, p.start)
}

/// Called by a mount's process once its mount is over: tells a waiting `reftablefs
/// unmount` (if one listens) whether every pending update was written. Never fails: with
/// nobody listening this is one refused `connect`.
pub fn report_exit(outcome: &Result<()>) {
    use std::io::Write;
    let Some(me) = Process::current() else { return };
    let Ok(addr) = SocketAddr::from_abstract_name(exit_socket(&me).as_bytes()) else {
        return;
    };
    let Ok(mut s) = UnixStream::connect_addr(&addr) else {
        return;
    };
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let msg = match outcome {
        Ok(()) => "ok\n".to_owned(),
        Err(e) => format!("error {e}\n"),
    };
    let _ = s.write_all(msg.as_bytes());
}

/// How the mount's process said it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitReport {
    /// Every pending update written, every lock released.
    Ok,
    /// It ended with this error.
    Failed(String),
}

/// Parses what [`report_exit`] sent.
pub fn parse_report(text: &str) -> Option<ExitReport> {
    let line = text.strip_suffix('\n').unwrap_or(text);
    if line == "ok" {
        return Some(ExitReport::Ok);
    }
    line.strip_prefix("error ")
        .map(|m| ExitReport::Failed(m.to_owned()))
}

/// The pid of the process whose connection `s` is (`SO_PEERCRED`).
fn peer_pid(s: &UnixStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, a local of that size.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then(|| u32::try_from(cred.pid).ok()).flatten()
}

/// Takes the report of `p` from `listener` (connections from any other process are
/// ignored).
fn take_report(listener: &UnixListener, p: &Process) -> Option<ExitReport> {
    while let Ok((s, _)) = listener.accept() {
        if peer_pid(&s) != Some(p.pid) {
            continue;
        }
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut text = String::new();
        if s.take(MAX_REPORT).read_to_string(&mut text).is_ok() {
            return parse_report(&text);
        }
    }
    None
}

/// Waits until `p` has exited or `deadline` passes; true when it exited.
fn wait_exit(p: &Process, deadline: Instant) -> bool {
    if let Some(exited) = wait_pidfd(p, deadline) {
        return exited;
    }
    // No pidfd (ESRCH: already gone; ENOSYS: an old kernel): poll /proc.
    loop {
        if !p.alive() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// [`wait_exit`] on a pidfd, which turns readable when the process exits (a zombie
/// counts), whoever its parent is. `None` when no pidfd can be had or polled.
fn wait_pidfd(p: &Process, deadline: Instant) -> Option<bool> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p.pid as libc::pid_t, 0) };
    let fd = libc::c_int::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: a descriptor just returned to us, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // Opened on the pid: it must still be our process (not a reused pid).
    if !p.alive() {
        return Some(true);
    }
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Some(true);
        }
        if Instant::now() >= deadline {
            return Some(false);
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return None;
        }
    }
}

/// The process serving `mountpoint`, its repository and its status report: the pid from
/// the mount's own status file, else from the `reftablefs mount` command lines under
/// `/proc`.
fn serving_process(
    mountpoint: &Path,
) -> (
    Option<Process>,
    Option<String>,
    Option<reftablefs::status_file::Report>,
) {
    let report = super::status::report_of(mountpoint);
    if let Some(r) = &report {
        let p = r
            .pid
            .and_then(|p| u32::try_from(p).ok())
            .and_then(Process::find);
        if p.is_some() {
            return (p, r.repository.clone(), report);
        }
    }
    let Ok(canon) = mountpoint.canonicalize() else {
        return (None, None, report);
    };
    let mounts = super::status::list_mounts().unwrap_or_default();
    let Some(m) = mounts.into_iter().find(|m| m.mountpoint == canon) else {
        return (None, None, report);
    };
    (
        m.pid.and_then(Process::find),
        m.repository.map(|r| r.display().to_string()),
        report,
    )
}

/// Runs `reftablefs unmount`.
pub fn run_unmount(args: Args) -> Result<ExitCode> {
    let mut timeout = DEFAULT_TIMEOUT;
    // Each value is checked as it is read; the last one counts.
    for v in args.values(Id::Timeout) {
        match v.to_str().and_then(|s| s.parse::<u64>().ok()) {
            Some(s) => timeout = Duration::from_secs(s),
            None => {
                return Ok(crate::cli::common::usage_error(
                    "--timeout takes a number of seconds",
                    "unmount",
                ))
            }
        }
    }
    let [mountpoint] = args.operands() else {
        return Ok(crate::cli::common::usage_error(
            "expected one <mountpoint>",
            "unmount",
        ));
    };
    let mountpoint = std::path::PathBuf::from(mountpoint);
    let mp = mountpoint.display();
    if !fs::is_mounted(&mountpoint) {
        eprintln!("reftablefs unmount: {mp} is not mounted");
        return Ok(ExitCode::from(1));
    }
    let (process, repository, before) = serving_process(&mountpoint);
    // Listening before the unmount: the report is sent just before the process exits.
    let listener = process.and_then(|p| {
        let addr = SocketAddr::from_abstract_name(exit_socket(&p).as_bytes()).ok()?;
        let l = UnixListener::bind_addr(&addr).ok()?;
        l.set_nonblocking(true).ok()?;
        Some(l)
    });
    let mut failed = false;
    if let Ok(dir) = std::fs::File::open(&mountpoint) {
        if let Err(e) = dir.sync_all() {
            eprintln!(
                "reftablefs unmount: flushing {mp}: {e}: some pending ref updates were not written"
            );
            failed = true;
        }
    }
    // The flush reports a failed edit to the process that made it, not to us: the
    // mount's record of edits not written says whether the flush lost any.
    if let (Some(b), Some(a)) = (before, super::status::report_of(&mountpoint)) {
        let lost = a.conflicts_total.saturating_sub(b.conflicts_total);
        if lost > 0 {
            let shown = usize::try_from(lost).unwrap_or(usize::MAX);
            eprintln!(
                "reftablefs unmount: {lost} pending ref update(s) not written while flushing {mp}:"
            );
            for e in a.conflicts.iter().rev().take(shown).rev() {
                eprintln!("  {}: {}", e.name, e.reason);
            }
            failed = true;
        }
    }
    let status = Command::new("fusermount3")
        .arg("-u")
        .arg(&mountpoint)
        .status();
    if !matches!(status, Ok(s) if s.success()) && !fs::lazy_unmount(&mountpoint) {
        return Err(fs::fail(format!(
            "cannot unmount {mp}: {}",
            std::io::Error::last_os_error()
        )));
    }
    let Some(p) = process else {
        eprintln!(
            "reftablefs unmount: {mp} is unmounted, but the process that served it was not \
             found: cannot tell whether it finished its work"
        );
        return Ok(ExitCode::from(128));
    };
    if !wait_exit(&p, Instant::now() + timeout) {
        eprintln!(
            "reftablefs unmount: {mp} is unmounted, but its process (pid {}) is still running \
             after {} s (writing pending updates or compacting the stack; it holds its locks \
             until it exits)",
            p.pid,
            timeout.as_secs()
        );
        return Ok(ExitCode::from(128));
    }
    let report = listener.as_ref().and_then(|l| take_report(l, &p));
    match report {
        Some(ExitReport::Ok) => {}
        Some(ExitReport::Failed(why)) => {
            eprintln!(
                "reftablefs unmount: the process that served {mp} (pid {}) ended with an \
                 error: {why}",
                p.pid
            );
            failed = true;
        }
        None => {
            let unlock = repository
                .map(|r| format!(" (`reftablefs unlock {r}` removes what it left behind)"))
                .unwrap_or_default();
            eprintln!(
                "reftablefs unmount: the process that served {mp} (pid {}) exited without \
                 saying how it ended: it was killed or crashed, and may have left locks or \
                 pending updates behind{unlock}",
                p.pid
            );
            failed = true;
        }
    }
    Ok(if failed {
        ExitCode::from(128)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_start_time() {
        let line = b"1234 (reftablefs) S 1 1234 1234 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 5 0 987654 1000 10";
        assert_eq!(parse_stat_start(line), Some(987_654));
        // A name with spaces and parentheses.
        let line = b"7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 42 1 1";
        assert_eq!(parse_stat_start(line), Some(42));
        let zombie = b"7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 42 0 0";
        assert_eq!(parse_stat_start(zombie), None);
        assert_eq!(parse_stat_start(b"garbage"), None);
        let me = Process::current().unwrap();
        assert!(me.alive());
        assert!(!Process {
            start: me.start + 1,
            ..me
        }
        .alive());
    }

    #[test]
    fn reports() {
        assert_eq!(parse_report("ok\n"), Some(ExitReport::Ok));
        assert_eq!(
            parse_report("error disk full\n"),
            Some(ExitReport::Failed("disk full".into()))
        );
        assert_eq!(parse_report(""), None);
        assert_eq!(parse_report("okay"), None);
    }

    #[test]
    fn a_report_reaches_the_listener_of_its_process() {
        // This process plays the mount: the report names it.
        let me = Process::current().unwrap();
        let addr = SocketAddr::from_abstract_name(exit_socket(&me).as_bytes()).unwrap();
        let l = UnixListener::bind_addr(&addr).unwrap();
        l.set_nonblocking(true).unwrap();
        report_exit(&Err(reftablefs::Error::Outdated));
        assert_eq!(
            take_report(&l, &me),
            Some(ExitReport::Failed("data concurrently modified".into()))
        );
        report_exit(&Ok(()));
        assert_eq!(take_report(&l, &me), Some(ExitReport::Ok));
        // From another process's point of view nothing arrives.
        report_exit(&Ok(()));
        let other = Process {
            pid: me.pid + 1,
            ..me
        };
        assert_eq!(take_report(&l, &other), None);
    }
}
