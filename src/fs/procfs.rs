//! What the mount reads about its clients from `/proc/<tid>/`: a thread's thread group,
//! a process's start time, the CPU a thread last ran on.
//!
//! `/proc/<tid>/stat` takes the thread group's `exec_update_lock`, which a process holds
//! through part of `execve` — where it may close a descriptor of the mount
//! (`O_CLOEXEC`) and so wait for a `FLUSH`. A request handler reading a client's `stat`
//! can therefore wait for the client that waits for it (a mount test hung that way);
//! `cpu.rs` reads it from a thread of its own. The `fsync` path reads [`start_time`] of
//! the calling process only after a failed batch, and a process waiting in `fsync` is
//! in no `execve` (which ends its other threads before it takes the lock).

/// The `Tgid:` of `/proc/<pid>/status`.
pub fn tgid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// A process's start time (`/proc/<pid>/stat` field 22, clock ticks since boot).
pub fn start_time(pid: u32) -> Option<u64> {
    stat_field(&std::fs::read(format!("/proc/{pid}/stat")).ok()?, 22)
}

/// The CPU thread `tid` last ran on (`/proc/<tid>/stat` field 39).
pub fn processor(tid: u32) -> Option<usize> {
    stat_field(&std::fs::read(format!("/proc/{tid}/stat")).ok()?, 39)
}

/// Field `n` (counted from 1, `n >= 3`) of a `/proc/<tid>/stat` line: the fields are
/// counted after the command name, which is in parentheses and may hold anything.
pub fn stat_field<T: std::str::FromStr>(stat: &[u8], n: usize) -> Option<T> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    // `rest` starts with field 3 (the state).
    rest.split_ascii_whitespace()
        .nth(n.checked_sub(3)?)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_found_after_any_command_name() {
        let fields: String = (4..=52).map(|i| format!(" {i}")).collect();
        // Field k holds k here: the name's spaces and parentheses do not shift it.
        for name in ["cat", "a b) c", "x)", "((", ""] {
            let line = format!("1234 ({name}) S{fields}\n");
            assert_eq!(stat_field::<usize>(line.as_bytes(), 39), Some(39), "{line}");
            assert_eq!(stat_field::<u64>(line.as_bytes(), 22), Some(22), "{line}");
        }
        assert_eq!(stat_field::<usize>(b"1234 (cat) S 1 2", 39), None);
        assert_eq!(stat_field::<usize>(b"no parenthesis", 39), None);
        assert_eq!(stat_field::<usize>(b"", 39), None);
    }

    #[test]
    fn a_threads_own_entries_are_read() {
        // SAFETY: gettid and getpid have no arguments.
        let (tid, pid) = unsafe { (libc::gettid(), libc::getpid()) };
        let (tid, pid) = (u32::try_from(tid).unwrap(), u32::try_from(pid).unwrap());
        let cpu = processor(tid).expect("own /proc/<tid>/stat");
        // SAFETY: sysconf has no pointers.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        assert!((cpu as i64) < online.max(1), "cpu {cpu} of {online}");
        assert_eq!(tgid(tid), Some(pid));
        assert!(start_time(pid).is_some());
        assert_eq!(processor(u32::MAX), None);
    }
}
