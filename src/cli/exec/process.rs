//! Processes and wait statuses: the pipe to the view, reaping, `exec`'s exit code, and
//! COMMAND when it cannot be run.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::process::{Command, ExitCode};

use reftablefs::{Error, Result};

/// The byte this process writes to the view's pipe once the view is unmounted: from then
/// on an end of file means nothing.
pub(super) const TORN_DOWN: u8 = b'd';

/// `Command::exec` under a name that says what it does.
pub(super) trait ExecReplacing {
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
pub(super) fn cannot_run(prog: &std::ffi::OsStr, e: &std::io::Error) -> ExitCode {
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
pub(super) fn exit_code(status: libc::c_int) -> ExitCode {
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
pub(super) fn describe(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exit status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("wait status {status}")
    }
}

/// A pipe whose ends are closed on exec (COMMAND never holds them).
pub(super) fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::io("pipe", std::io::Error::last_os_error()));
    }
    // SAFETY: two descriptors just returned to us, owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `waitpid(pid, WNOHANG)`: the status once it has exited.
pub(super) fn try_reap(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid writes the status into a local.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    (r == pid).then_some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_as_git_and_shells_report_them() {
        assert_eq!(status_byte(0), 0);
        assert_eq!(status_byte(7 << 8), 7);
        assert_eq!(status_byte(libc::SIGTERM), 128 + 15);
        assert_eq!(status_byte(libc::SIGKILL), 137);
        assert_eq!(status_byte(libc::SIGINT | 0x80), 130);
    }
}
