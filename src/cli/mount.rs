//! `reftablefs mount [--read-only] [--refs-only] [--layout=loose|packed] [--no-kernel-passthrough] [--no-follow-cpu] [--daemon] [--debug] [--batch-window MS] [--batch-max N] [--inode-cap N] [--no-fsync]
//! [-o OPTIONS] (GITDIR MOUNTPOINT | --over WORKTREE [WORKTREE/.git])` (`reftablefs unmount`
//! is in `unmount.rs`). `-o ro,batch_window=5,over` gives the same options as mount(8) and
//! fstab give them (the parser expands the list: `table::MOUNT_SUB_OPTIONS`).
//!
//! Foreground by default, one log line per error on stderr, timestamped (`logger.rs`;
//! `--debug` for more); exits 0 after a clean unmount.
//! `--daemon` starts the same command in the background and returns once the mount is
//! ready (listed in `/proc/self/mountinfo`), or fails with the child's reason. The daemon
//! runs in its own process group with no terminal streams: its log lines go to
//! `--log FILE` (default `$TMPDIR/reftablefs-mount.<pid>.log`, printed at start), so
//! `$(reftablefs mount --daemon …)` returns and a terminal's Ctrl-C does not reach it.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::cli::table::Id;
use crate::cli::Args;
use reftablefs::fs::{self, MountOptions};
use reftablefs::{Error, Result};

fn usage(msg: &str) -> Result<ExitCode> {
    Ok(crate::cli::common::usage_error(msg, "mount"))
}

/// The mount's options as the command line gives them (in its own words, or as `-o`
/// items), or the usage error to exit with.
struct Given {
    opts: MountOptions,
    daemon: bool,
    debug: bool,
    over: bool,
    log: Option<PathBuf>,
}

fn given(args: &Args) -> std::result::Result<Given, String> {
    let mut opts = MountOptions {
        refs_only: args.flag(Id::RefsOnly),
        ..options(args)?
    };
    // The last one counts.
    for v in args.values(Id::Layout) {
        opts.layout = layout(v)?;
    }
    Ok(Given {
        opts,
        daemon: args.flag(Id::Daemon),
        debug: args.flag(Id::Debug),
        over: args.flag(Id::Over),
        log: args.value(Id::Log).map(PathBuf::from),
    })
}

/// The mount options `mount` and `exec` share, as the command line gives them, or the
/// usage message for a bad value.
pub fn options(args: &Args) -> std::result::Result<MountOptions, String> {
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
    if args.flag(Id::IoUring) {
        opts.io_uring = true;
    }
    if args.flag(Id::NoFsync) {
        opts.fsync = false;
    }
    // Each value is checked as it is read; the last one counts.
    for v in args.values(Id::BatchWindow) {
        let ms = v.to_str().and_then(|s| s.parse::<u64>().ok());
        opts.batch_window = Duration::from_millis(ms.ok_or_else(|| BATCH_WINDOW.to_owned())?);
    }
    for v in args.values(Id::BatchMax) {
        let n = v.to_str().and_then(|s| s.parse::<usize>().ok());
        opts.batch_max = n.filter(|&n| n > 0).ok_or_else(|| BATCH_MAX.to_owned())?;
    }
    for v in args.values(Id::InodeCap) {
        let n = v.to_str().and_then(|s| s.parse::<usize>().ok());
        opts.inode_cap = n.filter(|&n| n >= fs::inode::MIN_CAP).ok_or_else(|| {
            format!(
                "--inode-cap takes a number of at least {}",
                fs::inode::MIN_CAP
            )
        })?;
    }
    Ok(opts)
}

/// The value of `--layout`.
fn layout(v: &std::ffi::OsStr) -> std::result::Result<fs::protocol::Layout, String> {
    match v.to_str() {
        Some("loose") => Ok(fs::protocol::Layout::Loose),
        Some("packed") => Ok(fs::protocol::Layout::Packed),
        _ => Err(format!(
            "--layout takes loose or packed (got '{}')",
            v.to_string_lossy()
        )),
    }
}

const BATCH_WINDOW: &str = "--batch-window takes a number of milliseconds";
const BATCH_MAX: &str = "--batch-max takes a positive number";

/// Runs `reftablefs mount`.
pub fn run(args: Args) -> Result<ExitCode> {
    let Given {
        opts,
        daemon,
        debug,
        over,
        log,
    } = match given(&args) {
        Ok(g) => g,
        Err(msg) => return usage(&msg),
    };
    if !daemon {
        // This process serves the mount: its log lines (and fuser's) are timestamped.
        super::logger::install(debug);
    }
    let positional: Vec<PathBuf> = args.operands().iter().map(PathBuf::from).collect();
    if over {
        let worktree = match positional.as_slice() {
            [worktree] => worktree,
            // As fstab and mount(8) give it (`WORKTREE WORKTREE/.git ... over`): a second
            // operand naming anything else is a mistake, not a place to mount elsewhere.
            [worktree, mountpoint] if names_dotgit_of(worktree, mountpoint) => worktree,
            [worktree, mountpoint] => {
                return usage(&format!(
                    "--over mounts on <worktree>/.git: MOUNTPOINT must be {}/.git (got {})",
                    worktree.display(),
                    mountpoint.display()
                ))
            }
            _ => return usage("--over takes one WORKTREE (its .git directory is mounted over)"),
        };
        if opts.refs_only {
            return usage("--over serves the whole .git: it cannot be --refs-only");
        }
        let dotgit = worktree.join(".git");
        if daemon {
            return spawn_daemon(&args, &dotgit, log);
        }
        return run_over(&dotgit, opts);
    }
    let [gitdir, mountpoint] = positional.as_slice() else {
        return usage("expected GITDIR and MOUNTPOINT");
    };
    if daemon {
        return spawn_daemon(&args, mountpoint, log);
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

/// Whether `mountpoint` is `worktree/.git` (both resolved, else as written).
fn names_dotgit_of(worktree: &Path, mountpoint: &Path) -> bool {
    match (worktree.canonicalize(), mountpoint.canonicalize()) {
        (Ok(w), Ok(m)) => w.join(".git") == m,
        _ => worktree.join(".git") == mountpoint,
    }
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

/// The command line of the daemon's child: this one without `--daemon`, each option in
/// its canonical spelling (however it was abbreviated, bundled or listed in `-o`), so
/// that the child does not daemonize again and `status` reads it as `mount` did.
fn child_argv(args: &Args) -> Vec<OsString> {
    let mut argv = args.invocation().to_vec();
    argv.extend(args.canonical(&[Id::Daemon]));
    if args
        .operands()
        .iter()
        .any(|o| o.as_bytes().starts_with(b"-"))
    {
        argv.push("--".into());
    }
    argv.extend(args.operands().iter().cloned());
    argv
}

/// Re-runs this command without `--daemon`, detached (own process group, no terminal
/// streams, log lines appended to `log`), and waits until the mount is ready.
fn spawn_daemon(args: &Args, mountpoint: &Path, log: Option<PathBuf>) -> Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| Error::io("current_exe", e))?;
    let argv = child_argv(args);
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
