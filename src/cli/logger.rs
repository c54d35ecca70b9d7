//! The daemon's logger: every record logged through the `log` crate — the mount's own and
//! fuser's — as one line on stderr (the mount's log file under `--daemon` and `exec`),
//! `YYYY-MM-DDTHH:MM:SS.mmmZ LEVEL message` in UTC, so a log says when.
//!
//! One line is dropped: fuser's `Failed to umount filesystem: EINVAL` warning, which it
//! logs after every clean unmount (the mount is gone already: [`is_already_unmounted`]).
//!
//! The level: `info` by default; `RUST_LOG` set to a level name (`error`, `warn`, `info`,
//! `debug`, `trace`, `off`) sets it; `mount --debug` (`-o debug`) raises it to at least
//! `debug`.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Writes each record as one line on stderr.
struct Logger;

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) || is_already_unmounted(record) {
            return;
        }
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let line = format!(
            "{} {:<5} {}\n",
            reftablefs::repo::utc_timestamp_millis(millis),
            record.level(),
            record.args()
        );
        // One write a line, so the lines of concurrent threads never mix; a line that
        // cannot be written has nowhere else to go.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// Whether `record` is fuser's warning that its own unmount, when its session ends, found
/// no mount (`EINVAL`): after a clean unmount (`reftablefs unmount`, `fusermount3 -u`, a
/// signal) the kernel has unmounted it already, so this says nothing. Only that warning
/// of fuser's, with that errno: any other failure to unmount is still logged.
fn is_already_unmounted(record: &Record<'_>) -> bool {
    let target = record.target();
    record.level() == Level::Warn
        && (target == "fuser" || target.starts_with("fuser::"))
        && record.args().to_string()
            == format!(
                "Failed to umount filesystem: {}",
                std::io::Error::from_raw_os_error(libc::EINVAL)
            )
}

/// Installs the logger for this process (once; later calls change nothing).
pub fn install(debug: bool) {
    let level = level(std::env::var("RUST_LOG").ok().as_deref(), debug);
    if log::set_logger(&Logger).is_ok() {
        log::set_max_level(level);
    }
}

/// The level from `RUST_LOG`'s value and `--debug`.
fn level(rust_log: Option<&str>, debug: bool) -> LevelFilter {
    let given = rust_log.and_then(|v| v.trim().parse().ok());
    let level = given.unwrap_or(LevelFilter::Info);
    if debug {
        level.max(LevelFilter::Debug)
    } else {
        level
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_from_the_environment_and_the_command_line() {
        assert_eq!(level(None, false), LevelFilter::Info);
        assert_eq!(level(Some("WARN"), false), LevelFilter::Warn);
        assert_eq!(level(Some("fuser=debug"), false), LevelFilter::Info);
        assert_eq!(level(Some("warn"), true), LevelFilter::Debug);
        assert_eq!(level(Some("trace"), true), LevelFilter::Trace);
        assert_eq!(level(Some("off"), false), LevelFilter::Off);
    }

    /// fuser's EINVAL after a clean unmount is dropped; the same words from another
    /// target, at another level or with another errno are kept.
    #[test]
    fn only_fusers_einval_at_unmount_is_dropped() {
        let dropped = |target: &str, level: Level, errno: i32| {
            let e = std::io::Error::from_raw_os_error(errno);
            is_already_unmounted(
                &Record::builder()
                    .args(format_args!("Failed to umount filesystem: {e}"))
                    .level(level)
                    .target(target)
                    .build(),
            )
        };
        assert!(dropped("fuser::session", Level::Warn, libc::EINVAL));
        assert!(!dropped("fuser::session", Level::Warn, libc::EBUSY));
        assert!(!dropped("fuser::session", Level::Error, libc::EINVAL));
        assert!(!dropped("reftablefs", Level::Warn, libc::EINVAL));
        assert!(!dropped("fuserx", Level::Warn, libc::EINVAL));
        let other = Record::builder()
            .args(format_args!("Failed to umount filesystem"))
            .level(Level::Warn)
            .target("fuser::session")
            .build();
        assert!(!is_already_unmounted(&other));
    }
}
