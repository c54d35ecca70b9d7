//! The view's process itself (forked by `exec`): its streams and signals, its watch on
//! `exec`'s process, and the mount it serves until unmounted.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use super::process::TORN_DOWN;
use reftablefs::fs::{self, MountOptions};
use reftablefs::{Error, Result};

/// The view's process: never returns.
pub(super) fn view_process(
    pipe: OwnedFd,
    log: std::fs::File,
    target: &Path,
    opts: &MountOptions,
) -> ! {
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
    // This process serves the view: its log lines (and fuser's) are timestamped.
    crate::cli::logger::install(false);
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
            log::error!("reftablefs exec: {e}");
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
        log::info!("reftablefs exec: the exec process is gone: unmounting");
        // SAFETY: a signal to this very process; SIGTERM is blocked in every thread and
        // taken by fs::mount's signal thread.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    } else {
        log::warn!("reftablefs exec: the exec process is gone before the view was mounted");
        // SAFETY: ends this process; nothing was served, so nothing is pending.
        unsafe { libc::_exit(128) }
    }
}

/// Mounts the view over `dotgit` as `mount --over` does and serves it until unmounted.
fn serve(dotgit: &Path, opts: &MountOptions) -> Result<()> {
    let real = std::fs::File::open(dotgit).map_err(|e| Error::io(dotgit, e))?;
    let gitdir = PathBuf::from(format!("/proc/self/fd/{}", real.as_raw_fd()));
    let reftable_dir = crate::cli::mount::reftable_dir(&gitdir)?;
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
