//! The signals `exec` blocks and waits for, and which of them it passes on to COMMAND.

use std::time::Duration;

/// Signals forwarded to COMMAND (besides SIGCHLD, blocked to be waited for).
pub(super) const FORWARDED: &[libc::c_int] = &[
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
/// A set of signals blocked in this thread (and the threads and processes it starts
/// afterwards), to be taken with `sigtimedwait`.
pub(super) struct Signals {
    set: libc::sigset_t,
}

impl Signals {
    pub(super) fn block(sigs: &[libc::c_int]) -> Signals {
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
    pub(super) fn wait(&self, timeout: Duration) -> Option<(libc::c_int, libc::siginfo_t)> {
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
/// Whether a signal this process got should be sent on to COMMAND: not when COMMAND got
/// it too (the terminal signals the whole foreground group; a process of COMMAND's group
/// signalling its group), nor when COMMAND sent it.
pub(super) fn should_forward(info: &libc::siginfo_t, cmd: libc::pid_t) -> bool {
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
