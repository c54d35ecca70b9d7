//! `reftablefs mount [--read-only] [--refs-only] [--no-kernel-passthrough] [--no-follow-cpu] [--daemon] [--batch-window MS] [--batch-max N] [--inode-cap N] [--no-fsync]
//! (GITDIR MOUNTPOINT | --over WORKTREE)` (`reftablefs unmount` is in `unmount.rs`).
//!
//! Foreground by default, one log line per error on stderr; exits 0 after a clean unmount.
//! `--daemon` starts the same command in the background and returns once the mount is
//! ready (listed in `/proc/self/mountinfo`), or fails with the child's reason. The daemon
//! runs in its own process group with no terminal streams: its log lines go to
//! `--log FILE` (default `$TMPDIR/reftablefs-mount.<pid>.log`, printed at start), so
//! `$(reftablefs mount --daemon …)` returns and a terminal's Ctrl-C does not reach it.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::cli::Args;
use reftablefs::fs::{self, MountOptions};
use reftablefs::{Error, Result};

fn usage(msg: &str) -> Result<ExitCode> {
    Ok(crate::cli::common::usage_error(msg, "mount"))
}

/// Runs `reftablefs mount`.
pub fn run(mut args: Args) -> Result<ExitCode> {
    let mut opts = MountOptions::default();
    let mut daemon = false;
    let mut over = false;
    let mut log: Option<PathBuf> = None;
    let mut positional: Vec<PathBuf> = Vec::new();
    while !args.is_empty() {
        if args.flag("--read-only") {
            opts.read_only = true;
        } else if args.flag("--refs-only") {
            opts.refs_only = true;
        } else if args.flag("--over") {
            over = true;
        } else if args.flag("--no-kernel-passthrough") {
            opts.kernel_passthrough = false;
        } else if args.flag("--no-follow-cpu") {
            opts.follow_cpu = false;
        } else if args.flag("--daemon") {
            daemon = true;
        } else if let Some(v) = args.value("--log") {
            log = Some(PathBuf::from(v));
        } else if args.flag("--no-fsync") {
            opts.fsync = false;
        } else if let Some(v) = args.value("--batch-window") {
            match v.to_str().and_then(|s| s.parse::<u64>().ok()) {
                Some(ms) => opts.batch_window = Duration::from_millis(ms),
                None => return usage("--batch-window takes a number of milliseconds"),
            }
        } else if let Some(v) = args.value("--batch-max") {
            match v
                .to_str()
                .and_then(|s| s.parse::<usize>().ok())
                .filter(|&n| n > 0)
            {
                Some(n) => opts.batch_max = n,
                None => return usage("--batch-max takes a positive number"),
            }
        } else if let Some(v) = args.value("--inode-cap") {
            match v
                .to_str()
                .and_then(|s| s.parse::<usize>().ok())
                .filter(|&n| n >= reftablefs::fs::inode::MIN_CAP)
            {
                Some(n) => opts.inode_cap = n,
                None => {
                    return usage(&format!(
                        "--inode-cap takes a number of at least {}",
                        reftablefs::fs::inode::MIN_CAP
                    ))
                }
            }
        } else if args.peek_is_option() {
            return Ok(crate::cli::common::unknown_option(&args, "mount"));
        } else if let Some(p) = args.next_path() {
            positional.push(p);
        }
    }
    if over {
        let [worktree] = positional.as_slice() else {
            return usage("--over takes one WORKTREE (its .git directory is mounted over)");
        };
        if opts.refs_only {
            return usage("--over serves the whole .git: it cannot be --refs-only");
        }
        let dotgit = worktree.join(".git");
        if daemon {
            return spawn_daemon(&dotgit, log);
        }
        return run_over(&dotgit, opts);
    }
    let [gitdir, mountpoint] = positional.as_slice() else {
        return usage("expected GITDIR and MOUNTPOINT");
    };
    if daemon {
        return spawn_daemon(mountpoint, log);
    }
    let reftable_dir = reftable_dir(gitdir)?;
    fs::check_mountpoint(mountpoint)?;
    let o = reftablefs::fs::stack_source::open(gitdir, &opts)?;
    let r = fs::mount(o.reader, o.writer, o.log, &reftable_dir, mountpoint, &opts);
    // Everything is written and every lock released: tell a waiting `unmount`.
    crate::cli::unmount::report_exit(&r);
    r?;
    Ok(ExitCode::SUCCESS)
}

/// `mount --over WORKTREE`: mounts the view on `WORKTREE/.git` itself. The real directory
/// is opened before mounting and reached as `/proc/self/fd/N` from then on (the stack,
/// the watcher and the passthrough never go through the mount); the mount unmounts itself
/// if the process dies (`auto_unmount`), so a killed mount gives the real `.git` back.
fn run_over(dotgit: &Path, mut opts: MountOptions) -> Result<ExitCode> {
    use std::os::fd::AsRawFd;
    let meta = std::fs::symlink_metadata(dotgit).map_err(|e| Error::io(dotgit, e))?;
    if !meta.is_dir() {
        return Err(fs::fail(format!(
            "cannot mount over {}: not a directory (a linked worktree's or submodule's .git file is not supported)",
            dotgit.display()
        )));
    }
    fs::check_mountpoint(dotgit)?;
    let real = std::fs::File::open(dotgit).map_err(|e| Error::io(dotgit, e))?;
    let gitdir = PathBuf::from(format!("/proc/self/fd/{}", real.as_raw_fd()));
    let reftable_dir = reftable_dir(&gitdir)?;
    opts.auto_unmount = true;
    // The work tree's `.git`: the users its modes let in (a shared repository's group)
    // keep using it; the kernel enforces those modes (`default_permissions`).
    opts.allow_other = true;
    let o = reftablefs::fs::stack_source::open(&gitdir, &opts)?;
    let r = fs::mount(o.reader, o.writer, o.log, &reftable_dir, dotgit, &opts);
    drop(real);
    crate::cli::unmount::report_exit(&r);
    r?;
    Ok(ExitCode::SUCCESS)
}

/// `GITDIR/reftable`, after checking that GITDIR is a repository using reftable.
pub fn reftable_dir(gitdir: &Path) -> Result<PathBuf> {
    let not_reftable = |why: &str| {
        fs::fail(format!(
            "{} is not a reftable repository: {why}",
            gitdir.display()
        ))
    };
    let config = std::fs::read(gitdir.join("config"))
        .map_err(|e| not_reftable(&format!("cannot read config: {e}")))?;
    let config = String::from_utf8_lossy(&config).to_ascii_lowercase();
    let uses_reftable = config.lines().any(|l| {
        let l: String = l.chars().filter(|c| !c.is_whitespace()).collect();
        l == "refstorage=reftable"
            || l.starts_with("refstorage=reftable#")
            || l.starts_with("refstorage=reftable;")
    });
    if !uses_reftable {
        return Err(not_reftable("extensions.refStorage is not reftable"));
    }
    let dir = gitdir.join("reftable");
    if !dir.join("tables.list").is_file() {
        return Err(not_reftable("reftable/tables.list is missing"));
    }
    Ok(dir)
}

/// Re-runs this command without `--daemon`, detached (own process group, no terminal
/// streams, log lines appended to `log`), and waits until the mount is ready.
fn spawn_daemon(mountpoint: &Path, log: Option<PathBuf>) -> Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| Error::io("current_exe", e))?;
    let argv: Vec<std::ffi::OsString> = std::env::args_os()
        .skip(1)
        .filter(|a| a != "--daemon")
        .collect();
    let log = log.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("reftablefs-mount.{}.log", std::process::id()))
    });
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| Error::io(&log, e))?;
    let mut child = Command::new(exe)
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .process_group(0)
        .spawn()
        .map_err(|e| Error::io("spawn", e))?;
    let start = Instant::now();
    loop {
        if fs::is_mounted(mountpoint) {
            eprintln!(
                "reftablefs: mounted on {} (pid {}, log {})",
                mountpoint.display(),
                child.id(),
                log.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let why = std::fs::read_to_string(&log).unwrap_or_default();
            eprint!("{why}");
            eprintln!(
                "reftablefs: mount failed ({status}); log: {}",
                log.display()
            );
            return Ok(ExitCode::from(128));
        }
        if start.elapsed() > Duration::from_secs(30) {
            eprintln!("reftablefs: mount not ready after 30 s; giving up");
            let _ = child.kill();
            return Ok(ExitCode::from(128));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
