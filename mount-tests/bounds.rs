//! Issue 23, the memory bound: every in-memory structure a client can grow has a bound
//! (`src/fs/budget.rs`), enforced with the errno a files backend would give, and the
//! daemon's memory stays bounded while clients go past each bound.

use crate::harness::{note, Ctx, Mount, Repo, TestResult};
use std::process::Command;

/// The daemon's peak resident memory (VmHWM), in KiB.
fn peak_kib(m: &Mount) -> TestResult<u64> {
    let pid = m.pid().ok_or("no mount process")?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| "no VmHWM".into())
}

/// Runs one phase of [`CLIENT`]; returns its output line ("count errno").
fn phase(m: &Mount, what: &str, id: &str) -> TestResult<(usize, i32)> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(CLIENT)
        .arg(&m.mnt)
        .arg(what)
        .arg(id)
        .output()?;
    crate::harness::check(&out, &format!("the {what} client"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut it = text.split_whitespace();
    let n = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    let errno = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok((n, errno))
}

/// A client going past one bound: prints how many operations succeeded and the errno of
/// the first failure (0: none failed).
const CLIENT: &str = r#"
import os, sys, resource
mnt, what, oid = sys.argv[1], sys.argv[2], sys.argv[3]
n = 0; err = 0
try:
    if what == 'locks':
        for i in range(70000):
            fd = os.open(f'{mnt}/refs/heads/x{i:06d}.lock', os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, (oid + '\n').encode()); os.close(fd); n += 1
    elif what == 'unlock':
        for i in range(70000):
            try:
                os.unlink(f'{mnt}/refs/heads/x{i:06d}.lock'); n += 1
            except FileNotFoundError:
                pass
    elif what == 'bytes':
        chunk = b'x' * (1 << 20)
        for name in ('packed-refs.new', 'logs/refs/heads/a.lock', 'logs/refs/heads/b.lock'):
            with open(f'{mnt}/{name}', 'wb', buffering=0) as f:
                for _ in range(256):
                    f.write(chunk); n += 1
    elif what == 'opens':
        # Open files held by several processes (each within its own descriptor limit),
        # all at once, until the mount refuses one.
        import subprocess
        per = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 100000) - 100
        kids = []
        child = '''
import os, sys
mnt, per = sys.argv[1], int(sys.argv[2])
fds = []; err = 0
try:
    for i in range(per):
        fds.append(os.open(mnt + '/HEAD', os.O_RDONLY))
except OSError as e:
    err = e.errno
print(len(fds), err, flush=True)
sys.stdin.read()
'''
        while n < 140000 and err == 0:
            k = subprocess.Popen([sys.executable, '-c', child, mnt, str(per)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            kids.append(k)
            got, e = map(int, k.stdout.readline().split())
            n += got; err = e
        for k in kids:
            k.stdin.close(); k.wait()
    elif what == 'dirs':
        for i in range(70000):
            os.mkdir(f'{mnt}/refs/d{i:06d}'); n += 1
except OSError as e:
    err = e.errno
print(n, err)
"#;

/// Goes past each bound in turn on one mount: 70,000 lock files (65,536 allowed, then
/// ENOSPC), 768 MiB written into three scratch files (512 MiB held at most, then EFBIG),
/// 140,000 open files (131,072, then ENFILE), 70,000 `mkdir`s (65,536, then ENOSPC).
/// Each refusal is at the call; the daemon's peak memory stays under 768 MiB (the byte
/// budget plus the structures' own size), where 100,000 creates once took 806 MiB.
pub fn every_client_grown_structure_is_bounded(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    let oid = repo.commit("base")?;
    let m = Mount::start(&repo.gitdir, &ctx.path("mnt"), &[])?;
    let (locks, errno) = phase(&m, "locks", &oid)?;
    ensure!(
        locks == 65_536 && errno == libc::ENOSPC,
        "{locks} lock files, then errno {errno}: want 65,536 then ENOSPC"
    );
    let after_locks = peak_kib(&m)?;
    let (removed, _) = phase(&m, "unlock", &oid)?;
    ensure!(removed == locks, "removed {removed} of {locks} locks");
    let (mib, errno) = phase(&m, "bytes", &oid)?;
    ensure!(
        (500..=512).contains(&mib) && errno == libc::EFBIG,
        "{mib} MiB written, then errno {errno}: want about 512 then EFBIG"
    );
    let after_bytes = peak_kib(&m)?;
    for name in [
        "packed-refs.new",
        "logs/refs/heads/a.lock",
        "logs/refs/heads/b.lock",
    ] {
        let _ = std::fs::remove_file(m.path(name));
    }
    let (opens, errno) = phase(&m, "opens", &oid)?;
    ensure!(
        opens == 131_072 && errno == libc::ENFILE,
        "{opens} open files, then errno {errno}: want 131,072 then ENFILE"
    );
    let (dirs, errno) = phase(&m, "dirs", &oid)?;
    ensure!(
        dirs == 65_536 && errno == libc::ENOSPC,
        "{dirs} directories, then errno {errno}: want 65,536 then ENOSPC"
    );
    let peak = peak_kib(&m)?;
    note(&format!(
        "peak RSS: {} MiB after 65,536 locks, {} MiB after 512 MiB of scratch, {} MiB at the end",
        after_locks >> 10,
        after_bytes >> 10,
        peak >> 10
    ));
    ensure!(
        peak < 768 << 10,
        "the daemon's peak memory is {} MiB",
        peak >> 10
    );
    let status = std::fs::read_to_string(m.path(".reftablefs/status"))?;
    for errno in ["ENOSPC", "EFBIG", "ENFILE"] {
        ensure!(
            status.contains(errno),
            "status records no {errno}:\n{status}"
        );
    }
    m.unmount()
}
mount_test!(every_client_grown_structure_is_bounded, timeout = 600);
