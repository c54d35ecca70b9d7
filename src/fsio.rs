//! The file-system calls of the stack and its lock files, in one place, with a
//! fault-injection seam for tests.
//!
//! Every call the stack makes to change or read its directory goes through a function
//! here (open, create, read, write, fsync, directory fsync, rename, unlink, chmod,
//! directory listing). Normally each is the plain `std` call behind one relaxed atomic
//! load. Inside [`record`] the calls made by the current thread are listed as
//! [`Step`]s; inside [`inject`] the n-th call fails with a chosen errno (a failed write
//! first writes half of its buffer, as a full disk does). Tests use the two together to
//! fail every step of a commit or a compaction in turn.
//!
//! For a whole process (a mount under test, whose writes run on its own threads), the
//! environment variable `REFTABLEFS_FAULTS` holds a comma-separated list of
//! `OP:N[:ERRNO]` (OP one of `open create read write fsync fsync_dir rename unlink chmod
//! read_dir`): the N-th call of that kind in the process (from 1) fails once with ERRNO
//! (default EIO). It is read once, at the first call.

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// A kind of file-system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Opening an existing file for reading (`tables.list`, a table).
    Open,
    /// Creating a new file with `O_EXCL` (a lock, a temporary table).
    Create,
    /// Reading a file's content.
    Read,
    /// Writing a file's content.
    Write,
    /// fsync of a file.
    Fsync,
    /// fsync of a directory.
    FsyncDir,
    /// Renaming a file.
    Rename,
    /// Unlinking a file.
    Unlink,
    /// Changing a file's permission bits.
    Chmod,
    /// Listing a directory.
    ReadDir,
}

/// One call seen by [`record`] or [`inject`]: its kind and the path it concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The kind of call.
    pub op: Op,
    /// The file (or directory) it concerned.
    pub path: PathBuf,
}

struct Plan {
    steps: Vec<Step>,
    fail_at: Option<usize>,
    errno: i32,
}

/// Threads that currently have a plan; 0 keeps every call on the fast path.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static PLAN: RefCell<Option<Plan>> = const { RefCell::new(None) };
}

fn with_plan<R>(fail_at: Option<usize>, errno: i32, f: impl FnOnce() -> R) -> (R, Vec<Step>) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            PLAN.with(|p| p.borrow_mut().take());
            ACTIVE.fetch_sub(1, Ordering::SeqCst);
        }
    }
    PLAN.with(|p| {
        *p.borrow_mut() = Some(Plan {
            steps: Vec::new(),
            fail_at,
            errno,
        })
    });
    ACTIVE.fetch_add(1, Ordering::SeqCst);
    let reset = Reset;
    let r = f();
    let steps = PLAN.with(|p| {
        p.borrow_mut()
            .as_mut()
            .map(|p| std::mem::take(&mut p.steps))
    });
    drop(reset);
    (r, steps.unwrap_or_default())
}

/// Runs `f` and returns what it returned with the file-system calls this thread made.
pub fn record<R>(f: impl FnOnce() -> R) -> (R, Vec<Step>) {
    with_plan(None, 0, f)
}

/// Runs `f` with its `step`-th file-system call (0-based, as listed by [`record`])
/// failing with `errno`; returns what `f` returned and the calls made, the failed one
/// included.
pub fn inject<R>(step: usize, errno: i32, f: impl FnOnce() -> R) -> (R, Vec<Step>) {
    with_plan(Some(step), errno, f)
}

/// One fault of `REFTABLEFS_FAULTS`: the `nth` call of `op` fails with `errno`.
struct EnvFault {
    op: Op,
    nth: u64,
    errno: i32,
    seen: AtomicU64,
}

fn parse_op(s: &str) -> Option<Op> {
    Some(match s {
        "open" => Op::Open,
        "create" => Op::Create,
        "read" => Op::Read,
        "write" => Op::Write,
        "fsync" => Op::Fsync,
        "fsync_dir" => Op::FsyncDir,
        "rename" => Op::Rename,
        "unlink" => Op::Unlink,
        "chmod" => Op::Chmod,
        "read_dir" => Op::ReadDir,
        _ => return None,
    })
}

/// Parses `OP:N[:ERRNO],...`; malformed entries are reported on stderr and ignored.
fn parse_env_faults(spec: &str) -> Vec<EnvFault> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mut parts = item.split(':');
        let op = parts.next().and_then(parse_op);
        let nth = parts.next().and_then(|n| n.parse::<u64>().ok());
        let errno = match parts.next() {
            Some(e) => e.parse::<i32>().ok(),
            None => Some(libc::EIO),
        };
        match (op, nth, errno) {
            (Some(op), Some(nth), Some(errno)) if nth > 0 => out.push(EnvFault {
                op,
                nth,
                errno,
                seen: AtomicU64::new(0),
            }),
            _ => eprintln!("reftablefs: REFTABLEFS_FAULTS: ignoring malformed {item:?}"),
        }
    }
    out
}

fn env_faults() -> &'static [EnvFault] {
    static FAULTS: OnceLock<Vec<EnvFault>> = OnceLock::new();
    FAULTS.get_or_init(|| {
        std::env::var("REFTABLEFS_FAULTS")
            .map(|s| parse_env_faults(&s))
            .unwrap_or_default()
    })
}

/// Notes one call; `Err` when the plan fails it.
fn check(op: Op, path: &Path) -> io::Result<()> {
    for f in env_faults() {
        if f.op == op && f.seen.fetch_add(1, Ordering::Relaxed) + 1 == f.nth {
            return Err(io::Error::from_raw_os_error(f.errno));
        }
    }
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        return Ok(());
    }
    PLAN.with(|p| {
        let mut p = p.borrow_mut();
        let Some(plan) = p.as_mut() else {
            return Ok(());
        };
        let n = plan.steps.len();
        plan.steps.push(Step {
            op,
            path: path.to_path_buf(),
        });
        if plan.fail_at == Some(n) {
            return Err(io::Error::from_raw_os_error(plan.errno));
        }
        Ok(())
    })
}

/// Opens an existing file for reading.
pub fn open(path: &Path) -> io::Result<File> {
    check(Op::Open, path)?;
    File::open(path)
}

/// Notes an open of `path` done by other code (a table opened by its reader).
pub fn before_open(path: &Path) -> io::Result<()> {
    check(Op::Open, path)
}

/// Creates `path` for writing with `O_CREAT|O_EXCL` and `mode` (minus the umask).
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    check(Op::Create, path)?;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
}

/// Reads the rest of `f` (at `path`) into `buf`.
pub fn read_to_end(f: &mut File, path: &Path, buf: &mut Vec<u8>) -> io::Result<usize> {
    check(Op::Read, path)?;
    f.read_to_end(buf)
}

/// Reads into `buf` from `offset` of `f` (at `path`), `pread`.
pub fn read_at(f: &File, path: &Path, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    check(Op::Read, path)?;
    f.read_at(buf, offset)
}

/// Writes all of `bytes` to `f` (at `path`). An injected failure writes the first half
/// of `bytes`, then fails.
pub fn write_all(f: &mut File, path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Err(e) = check(Op::Write, path) {
        let half = bytes.get(..bytes.len() / 2).unwrap_or_default();
        f.write_all(half)?;
        return Err(e);
    }
    f.write_all(bytes)
}

/// fsyncs `f` (at `path`).
pub fn fsync(f: &File, path: &Path) -> io::Result<()> {
    check(Op::Fsync, path)?;
    f.sync_all()
}

/// fsyncs the directory `dir` (so that renames and unlinks in it are durable).
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    check(Op::FsyncDir, dir)?;
    File::open(dir)?.sync_all()
}

/// Renames `from` to `to` (atomic within a directory).
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    check(Op::Rename, to)?;
    fs::rename(from, to)
}

/// Unlinks `path`.
pub fn remove_file(path: &Path) -> io::Result<()> {
    check(Op::Unlink, path)?;
    fs::remove_file(path)
}

/// Sets the permission bits of `path`.
pub fn chmod(path: &Path, mode: u32) -> io::Result<()> {
    check(Op::Chmod, path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// Lists `dir`.
pub fn read_dir(dir: &Path) -> io::Result<fs::ReadDir> {
    check(Op::ReadDir, dir)?;
    fs::read_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_fails_the_chosen_call() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let ((), steps) = record(|| {
            let mut f = create_new(&a, 0o644).unwrap();
            write_all(&mut f, &a, b"abcd").unwrap();
            fsync(&f, &a).unwrap();
        });
        let ops: Vec<Op> = steps.iter().map(|s| s.op).collect();
        assert_eq!(ops, [Op::Create, Op::Write, Op::Fsync]);
        let b = dir.path().join("b");
        let (r, steps) = inject(1, libc::ENOSPC, || {
            let mut f = create_new(&b, 0o644)?;
            write_all(&mut f, &b, b"abcd")
        });
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(steps.len(), 2);
        assert_eq!(
            fs::read(&b).unwrap(),
            b"ab",
            "a failed write is a short write"
        );
        // Outside a plan nothing is recorded or failed.
        remove_file(&b).unwrap();
    }

    #[test]
    fn env_fault_specs_parse() {
        let f = parse_env_faults("fsync_dir:2, write:1:28,bogus:1,rename:0");
        assert_eq!(f.len(), 2);
        assert_eq!(
            (f[0].op, f[0].nth, f[0].errno),
            (Op::FsyncDir, 2, libc::EIO)
        );
        assert_eq!(
            (f[1].op, f[1].nth, f[1].errno),
            (Op::Write, 1, libc::ENOSPC)
        );
    }
}
