//! The FUSE driver (feature `fuse`): serves a reftable stack as git's files-backend layout
//! (`HEAD`, `refs/…`, `logs/…`, `packed-refs`). See `docs/fuse.md` for the path mapping,
//! TTLs, errno table and policies.
//!
//! Its files, from the bottom up (each imports only files listed above it):
//!
//! | file | its one job |
//! | --- | --- |
//! | [`error`] | the one error type and its errno; a refusal (errno and reason) |
//! | [`ino`] | the inode number space: which tree each number belongs to |
//! | [`procfs`], [`cpu`] | what is read of a client in `/proc`; request threads near their clients |
//! | [`uring`] | FUSE over io_uring: a queue per CPU beside `/dev/fuse`, served by threads on that CPU |
//! | [`budget`], [`reserve`] | the bounds on what clients make the mount hold; disk space held for staged edits |
//! | [`record`] | refusals, conflicts and commits recorded for `status`; the one place a refusal is made |
//! | [`backend`] | the one trait every tree under the mount implements |
//! | [`source`] | the seam to the stack: reading (`RefSource`) and writing (`RefWriter`, batch edits), with an in-memory store for tests |
//! | [`view`] | pure path mapping, listing by reseek, rendering as the files backend stores |
//! | [`attr`], [`config_view`], [`ref_times`] | attributes and GITDIR's modes; `config` without the extension; ref times |
//! | [`inode`] | the ref view's inode table (stable numbers, sizes, the kernel's pages) |
//! | [`queue`] | the batch queue (its own lock): sealed batches, written, failed, waiters |
//! | [`protocol`] | the files-backend protocol, pure: the overlay, commit points staged as edits, which refs are loose or packed (the layout) |
//! | `durable` | files the mount keeps beside the stack, replaced through a temporary file with `fsync`s |
//! | [`broken`] | the store of broken refs (bad names, content that is no ref value, junk reflogs) and symbolic links kept beside the stack, as a files `.git` keeps them |
//! | [`passthrough`] | everything else of the git directory, resolved beneath it |
//! | `state` | one ref view: its caches behind one mutex (`mod.rs`), open files (`handles.rs`), directory listings (`listing.rs`), what each call on a file's content means (`calls.rs`) and each call on names (`names.rs`), the times it shows (`times.rs`), what went stale (`invalidate.rs`), what a linked worktree's view also allows (`linked.rs`), broken refs and symbolic links kept (`broken.rs`), the packed layer saved (`packed_state.rs`), `packed-refs` as a symbolic link (`packed_link.rs`) |
//! | `batch`, `watch`, [`stack_source`] | the batcher thread; inotify → reload → invalidation; the real stack |
//! | [`lifecycle`] | a ref view made, started and stopped the same way (main and worktrees) |
//! | [`worktree`] | linked worktrees' ref views; their stacks made and removed for a files-backend `git worktree add/remove/prune` |
//! | [`ref_backend`], [`pass_backend`], [`status`] | the trees as backends: a ref view, the passthrough, the status node |
//! | [`router`] | each request to its tree, once; the root both share |
//! | `fuse` | `impl Filesystem`: translation between the kernel's requests and the backends |
//! | `test_support` | helpers the unit tests share (tests only) |
//!
//! # Errors
//!
//! The layer's functions (`state`, [`passthrough`], `batch`, [`worktree`], `fuse`) fail
//! with one type, [`error::FsError`]: a plain errno (`FsError::ENOENT`, …), a refusal
//! (errno and reason, logged and recorded for `reftablefs status` by `Recorder::refuse`,
//! the only place that makes one), a storage error ([`crate::Error`]) or an I/O error of the
//! real git directory. [`error::FsError::errno`] is the one mapping to the errno the
//! kernel gets; `fuse.rs` replies with it. The protocol's own checks (`protocol/`)
//! return an [`error::Refusal`] (errno and reason, not yet recorded), which `state` turns
//! into a recorded refusal with the operation and path it concerns.

//! # Locks and their order
//!
//! * `Shared::inner` — the state lock (`state::Inner`: reader source, caches, handles,
//!   write overlay with the open batch). Request handlers, the watcher and the batcher
//!   take it for moments; nothing that waits for the disk beyond one `stat` and the
//!   opening of a new table runs under it, and replies to the kernel are sent after it is
//!   dropped.
//! * `Shared::queue` — the batch queue's lock (`batch::BatchQueue`: sealed batches, the
//!   highest sequence number written, failed batches and processes, flush requests, the
//!   window start). Taken for moments, under the state lock (sealing a batch, waking the
//!   batcher after staging) or alone; the state lock is never taken while holding it.
//!   `fsync` waits on its condition variable (releasing it), never on the state lock;
//!   the batcher waits for work on it too.
//! * No lock guards the writer source: the batcher thread owns it (a commit with its
//!   fsyncs, compaction) and uses it holding no lock, so no request can wait for a
//!   commit (read-only is a plain flag).
//! * `stack_source::OwnTables` — which tables are the mount's own: a leaf lock, held for
//!   moments by the reader (under the state lock) and by the batcher's commit (never
//!   across it: the update index of the table being committed is recorded first).
//! * `Shared::tgids` — thread id → process cache: a leaf lock, taken before the state lock.
//! * `Shared::link` (`state/packed_link.rs`): the target of `packed-refs` as a symbolic link,
//!   a leaf lock read by the router alone and written under the state lock; its `io` mutex
//!   serializes the writes of the link's file and target, taken before the state lock.
//!
//! * `worktree::Worktrees::inner` — which linked worktrees are served (`worktree.rs`): taken
//!   by request handlers to find or start a worktree's view (opening its stack, starting
//!   its threads) and, for a retired view, to flush it; never under a state lock. Each
//!   worktree's `Shared` has its own locks, in the order above.
//!
//! * `crate::fs::attr::GitDirModes::seen` — GITDIR's mode and owner as last read (re-read at
//!   most once a second): a leaf lock, taken under the state lock to make attributes.
//!
//! * `passthrough::Passthrough`'s config lock (`passthrough/config.rs`: the open
//!   `config` contents) and its `inner` (nodes and handles): the config lock is held
//!   across a store of GITDIR's config (temporary file, fsync, rename, directory fsync),
//!   which only requests on `config` wait for; `inner` is taken under it for moments,
//!   never the reverse. Neither is taken with a ref view's locks.
//!
//! Order: worktrees → state; state → queue; state → own tables; never queue → state;
//! config → passthrough inner.

pub mod attr;
pub mod backend;
pub mod broken;
pub mod budget;
pub mod config_view;
mod durable;
pub mod error;
pub mod ino;
pub mod inode;
pub mod lifecycle;
pub mod pass_backend;
pub mod passthrough;
pub mod procfs;
pub mod protocol;
pub mod queue;
pub mod record;
pub mod ref_backend;
pub mod ref_times;
pub mod reserve;
pub mod router;
pub mod source;
pub mod stack_source;
pub mod status;
#[cfg(test)]
mod test_support;
pub mod uring;
pub mod view;
pub mod worktree;

mod batch;
pub mod cpu;
mod fuse;
mod state;
mod watch;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fuser::{Config, MountOption, Session};

use crate::{Error, Result};

pub use state::Shared;

/// Mount settings (the `reftablefs mount` flags).
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Refuse every write (mount read-only).
    pub read_only: bool,
    /// How long a batch may wait for more commit points.
    pub batch_window: Duration,
    /// A batch is written as soon as it holds this many edits.
    pub batch_max: usize,
    /// fsync tables and `tables.list` (off only for benchmarks).
    pub fsync: bool,
    /// Number of FUSE event-loop threads (at least 2).
    pub threads: usize,
    /// How many names the kernel may hold before the mount has it drop the oldest
    /// (`inode::INODE_CAP` by default; `--inode-cap`).
    pub inode_cap: usize,
    /// The block cache every stack of the mount shares (by default one of
    /// [`MOUNT_BLOCK_CACHE_BYTES`]).
    pub block_cache: std::sync::Arc<crate::table::BlockCache>,
    /// Serve only the ref view (`HEAD`, `refs/`, `logs/`, `packed-refs`); by default
    /// everything else of the git directory is passed through (`passthrough.rs`).
    pub refs_only: bool,
    /// Use the kernel's FUSE passthrough for passed-through regular files when the kernel
    /// offers it (off: every read and write is forwarded by the mount).
    pub kernel_passthrough: bool,
    /// Event-loop threads run on their clients' CPU (`cpu.rs`; `--no-follow-cpu` clears it).
    pub follow_cpu: bool,
    /// Serve requests over io_uring, a queue per CPU, when the kernel offers it (`uring.rs`;
    /// the fuse module's `enable_uring` parameter; `--io-uring` sets it). Off by default:
    /// a client of a stopped daemon cannot be killed then (docs/fuse.md).
    pub io_uring: bool,
    /// Unmount when the mount process dies (fusermount3's `auto_unmount`; needs
    /// `allow_root` or `allow_other`, so `user_allow_other` in /etc/fuse.conf for a
    /// non-root user). Used by `mount --over`, where a dead mount would hide the real
    /// `.git`.
    pub auto_unmount: bool,
    /// How refs show (`--layout`): every ref a loose file (the default), or as after
    /// `git gc`, in `packed-refs` only (`protocol::Layout`; docs/fuse.md, "Loose and packed
    /// refs").
    pub layout: protocol::Layout,
    /// Other users may use the mount (`allow_other`) as GITDIR's modes allow them: the
    /// kernel checks every request against the modes shown (`default_permissions`, always
    /// with `allow_other`), the mount root and its ref views showing GITDIR's own
    /// (`crate::fs::attr::GitDirModes`). Used by `mount --over`: the mount is the work tree's
    /// `.git`, which its group may share.
    pub allow_other: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            batch_window: Duration::from_millis(5),
            batch_max: 10_000,
            fsync: true,
            threads: 4,
            inode_cap: inode::INODE_CAP,
            refs_only: false,
            kernel_passthrough: true,
            follow_cpu: true,
            io_uring: false,
            auto_unmount: false,
            layout: protocol::Layout::Loose,
            allow_other: false,
            block_cache: crate::table::BlockCache::new(MOUNT_BLOCK_CACHE_BYTES),
        }
    }
}

/// Whether `path` is currently a mount point (listed in `/proc/self/mountinfo`).
pub fn is_mounted(path: &Path) -> bool {
    let Ok(canon) = path.canonicalize() else {
        return false;
    };
    let Ok(info) = std::fs::read("/proc/self/mountinfo") else {
        return false;
    };
    let want = canon.as_os_str().as_bytes();
    info.split(|&b| b == b'\n').any(|line| {
        line.split(|&b| b == b' ')
            .nth(4)
            .is_some_and(|mp| crate::mountinfo::unescape(mp) == want)
    })
}

/// An error that is only a message (mount preconditions, lifecycle).
pub fn fail(what: String) -> Error {
    Error::Io {
        path: None,
        source: std::io::Error::other(what),
    }
}

/// Checks the mount's preconditions and says why one fails.
pub fn check_mountpoint(mountpoint: &Path) -> Result<()> {
    if !Path::new("/dev/fuse").exists() {
        return Err(fail(
            "cannot mount: /dev/fuse does not exist (is the fuse module loaded?)".into(),
        ));
    }
    match std::fs::metadata(mountpoint) {
        Err(e) => {
            return Err(fail(format!(
                "cannot mount on {}: {e}",
                mountpoint.display()
            )))
        }
        Ok(m) if !m.is_dir() => {
            return Err(fail(format!(
                "cannot mount on {}: not a directory",
                mountpoint.display()
            )))
        }
        Ok(_) => {}
    }
    if is_mounted(mountpoint) {
        return Err(fail(format!(
            "cannot mount on {}: already a mount point (busy)",
            mountpoint.display()
        )));
    }
    Ok(())
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and so in every thread it spawns
/// afterwards), so that one dedicated thread can wait for them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local set; pthread_sigmask on the current thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        // A foreground mount whose terminal closes: flush and unmount, as on SIGTERM.
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// The mount's block cache budget (the library's default is
/// [`crate::table::DEFAULT_BLOCK_CACHE_BYTES`]). A request pays a FUSE round trip of tens
/// of microseconds; a block missing from the cache costs one `pread` from the kernel's
/// page cache (a few), so the mount keeps less: the 1M-ref stat walk's peak RSS is what
/// this bounds most (docs/benchmarks.md, "Issue 11").
pub const MOUNT_BLOCK_CACHE_BYTES: usize = 16 << 20;

/// Mounts `src` (whose tables live in `reftable_dir`) on `mountpoint` and serves until
/// unmounted (by `reftablefs unmount`, `fusermount3 -u`, SIGINT or SIGTERM). Pending
/// writes are flushed before it returns.
///
/// `reader` serves requests; `writer` (another source over the same stack, `None` for a
/// read-only mount) is used by the batcher only, so writing never blocks readers.
pub fn mount(
    reader: Box<dyn source::RefSource>,
    writer: Option<Box<dyn source::RefWriter>>,
    log: source::LogSettings,
    reftable_dir: &Path,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<()> {
    check_mountpoint(mountpoint)?;
    let sigset = block_signals();
    let writer = if opts.read_only { None } else { writer };
    // What the mount records for `reftablefs status`, handed to every tree it serves.
    let rec = std::sync::Arc::new(record::Recorder::default());
    rec.mounted(
        reftable_dir
            .parent()
            .map(|g| g.canonicalize().unwrap_or_else(|_| g.to_path_buf()))
            .map(|g| g.to_string_lossy().into_owned()),
        reftable_dir.to_path_buf(),
        writer.is_none(),
    );
    // The mount root and the ref view show GITDIR's mode and owner.
    let modes = match reftable_dir.parent() {
        Some(gitdir) => Some(std::sync::Arc::new(
            crate::fs::attr::GitDirModes::open(gitdir).map_err(|e| Error::io(gitdir, e))?,
        )),
        None => None,
    };
    let shared = lifecycle::new_view(
        reader,
        writer.is_none(),
        log,
        reftable_dir,
        opts,
        modes.clone(),
        rec.clone(),
    );
    shared.set_layout(opts.layout);
    if let Some(gitdir) = reftable_dir.parent() {
        shared.keep_packed_state_in(gitdir);
    }
    // Broken refs kept beside the stack (`broken.rs`); each linked worktree's view keeps
    // its own beside its stack (`worktree.rs`).
    if let Some(gitdir) = reftable_dir.parent() {
        shared
            .keep_broken_refs(broken::BrokenRefs::open(gitdir).map_err(|e| Error::io(gitdir, e))?);
    }
    // The real git directory, opened before mounting: passthrough never goes through
    // the mount.
    let pass = match (opts.refs_only, reftable_dir.parent()) {
        (false, Some(gitdir)) => Some(std::sync::Arc::new(
            passthrough::Passthrough::new(gitdir)
                .map_err(|e| Error::io(gitdir, e))?
                .recording(rec.clone()),
        )),
        _ => None,
    };
    // Linked worktrees' ref views, started at their first request (`worktree.rs`).
    let wts =
        match (&pass, &modes, reftable_dir.parent()) {
            (Some(p), Some(m), Some(gitdir)) => Some(std::sync::Arc::new(
                worktree::Worktrees::new(gitdir, p.clone(), m.clone(), opts, rec.clone())?,
            )),
            _ => None,
        };
    let fs = fuse::RefFs {
        router: router::Router {
            main: shared.clone(),
            pass,
            wts: wts.clone(),
            status_docs: Default::default(),
        },
        kernel_passthrough: opts.kernel_passthrough,
        uring: uring_wanted(opts).then(Default::default),
    };
    let uring_plan = fs.uring.clone();
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("reftablefs".into()),
        MountOption::Subtype("reftable".into()),
        MountOption::NoDev,
        MountOption::NoSuid,
        if opts.read_only {
            MountOption::RO
        } else {
            MountOption::RW
        },
    ];
    if opts.auto_unmount {
        config.mount_options.push(MountOption::AutoUnmount);
        config.acl = fuser::SessionACL::RootAndOwner;
    }
    if opts.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    if config.acl != fuser::SessionACL::Owner {
        // The kernel is told `allow_other` (for `RootAndOwner` too: fuser filters requests
        // by uid itself, but the kernel answers from its caches without asking), so it
        // checks every user's requests against the modes shown.
        config.mount_options.push(MountOption::DefaultPermissions);
    }
    config.n_threads = Some(opts.threads.max(2));
    // One /dev/fuse descriptor per event-loop thread (FUSE_DEV_IOC_CLONE): the threads
    // do not contend on one descriptor's queue.
    config.clone_fd = true;
    // Before the event-loop threads start (they are spawned by `session.run`).
    cpu::enable(opts.follow_cpu);
    let mut session = Session::new(fs, mountpoint, &config)
        .map_err(|e| fail(format!("cannot mount on {}: {e}", mountpoint.display())))?;
    let notifier = session.notifier();
    if let Some(w) = &wts {
        w.set_notifier(notifier.clone());
    }
    let mut unmounter = session.unmount_callable();
    let threads = lifecycle::start(
        &shared,
        writer,
        reftable_dir,
        Some(notifier),
        Box::new(|ino| ino),
    )
    .map_err(|e| Error::io(reftable_dir, e))?;
    let mp: PathBuf = mountpoint.to_path_buf();
    // The signal thread: on SIGINT/SIGTERM/SIGHUP, unmount; the session loop then ends.
    std::thread::Builder::new()
        .name("reftablefs-signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: waiting on the signal set blocked above.
            let r = unsafe { libc::sigwait(&sigset, &mut sig) };
            if r == 0 {
                log::info!("reftablefs: signal {sig}: unmounting {}", mp.display());
                if let Err(e) = unmounter.unmount() {
                    log::warn!(
                        "reftablefs: unmount {}: {e}; trying a lazy unmount",
                        mp.display()
                    );
                    lazy_unmount(&mp);
                }
            }
        })
        .map_err(|e| Error::io(mountpoint, e))?;
    // FUSE over io_uring, when `init` prepared it and the kernel agreed (`uring.rs`).
    let dev = std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(&session));
    let plan = uring_plan.and_then(|p| p.lock().unwrap_or_else(|e| e.into_inner()).take());
    let abort = plan.as_ref().and_then(|_| uring::abort_path(mountpoint));
    if plan.is_some() {
        // A stopped mount's io_uring clients cannot be killed (docs/fuse.md): a terminal's
        // ^Z (and a background read or write of the terminal) does not stop this one.
        for sig in [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
            // SAFETY: sets the disposition of a job-control signal to "ignore".
            unsafe { libc::signal(sig, libc::SIG_IGN) };
        }
    }
    let result = session.run_with(
        |d| plan.map(|p| p.start(dev, abort, d)),
        |running| {
            if let Some(r) = running {
                r.stop();
            }
        },
    );
    // Unmounted: write what is still pending, then stop the helpers.
    let flushed = threads.stop(&shared);
    shared.save_packed_state(true);
    let wt_flushed = wts.as_deref().map_or(Ok(()), worktree::Worktrees::stop_all);
    if flushed.is_err() || wt_flushed.is_err() {
        return Err(fail(
            "some pending ref updates could not be written (see the log lines above)".into(),
        ));
    }
    result.map_err(|e| {
        fail(format!(
            "FUSE session on {} ended with an error: {e}",
            mountpoint.display()
        ))
    })
}

/// Whether the mount asks for FUSE over io_uring (`--io-uring`). Not with
/// `auto_unmount` (`mount --over`): a killed daemon's rings keep its connection alive
/// for a moment after the process is gone, fusermount3 finds it alive then and leaves the
/// dead mount over the real `.git` (measured: the mount stayed, answering `ENOTCONN`).
fn uring_wanted(opts: &MountOptions) -> bool {
    if opts.io_uring && opts.auto_unmount {
        log::warn!(
            "reftablefs: --io-uring is not used with an auto-unmounting mount (--over): a killed mount would stay over .git; serving /dev/fuse"
        );
        return false;
    }
    opts.io_uring
}

/// `umount2(MNT_DETACH)`, the last resort.
pub fn lazy_unmount(mountpoint: &Path) -> bool {
    let Ok(c) = CString::new(mountpoint.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) == 0 }
}
