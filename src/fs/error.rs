//! The fs layer's one error type: what a request handler of the mount (ref view,
//! passthrough, batch queue, worktrees) fails with, and [`FsError::errno`], the one place
//! it becomes the errno the kernel gets (`fuse.rs` replies with it).

use std::fmt;
use std::io;

/// Why a request of the mount failed.
#[derive(Debug)]
pub enum FsError {
    /// A plain errno, the answer itself (`ENOENT` for a name that is not there,
    /// `EEXIST`, `ENOTDIR`, …): nothing is logged. Build it with the named constants
    /// ([`FsError::ENOENT`], …).
    Errno(i32),
    /// A refused operation, logged and recorded for `reftablefs status` when it was made
    /// (`state::refuse`, once): its errno and the reason.
    Refused { errno: i32, reason: String },
    /// The ref storage failed (the errno is [`crate::Error::errno`]'s).
    Storage(crate::Error),
    /// A system call on the real git directory failed (its OS error; `EIO` without one).
    Io(io::Error),
}

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {
        impl FsError {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub const $name: FsError = FsError::Errno(libc::$name);
            )*
        }
    };
}

errnos!(
    EACCES,
    EBADF,
    EBUSY,
    EEXIST,
    EFBIG,
    EINVAL,
    EIO,
    EISDIR,
    ELOOP,
    ENAMETOOLONG,
    ENOENT,
    ENOSPC,
    ENOTDIR,
    ENOTEMPTY,
    ENOTSUP,
    EPERM,
    EROFS,
    ESTALE,
    EXDEV,
);

impl FsError {
    /// The errno the kernel gets for this error: the one mapping.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Errno(e) | FsError::Refused { errno: e, .. } => *e,
            FsError::Storage(e) => e.errno(),
            FsError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    /// The calling thread's last OS error (after a failed `libc` call).
    pub fn last_os_error() -> FsError {
        FsError::Io(io::Error::last_os_error())
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsError::Errno(e) => write!(f, "{}", io::Error::from_raw_os_error(*e)),
            FsError::Refused { reason, .. } => write!(f, "{reason}"),
            FsError::Storage(e) => write!(f, "{e}"),
            FsError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FsError::Storage(e) => Some(e),
            FsError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<crate::Error> for FsError {
    fn from(e: crate::Error) -> Self {
        FsError::Storage(e)
    }
}

impl From<io::Error> for FsError {
    fn from(e: io::Error) -> Self {
        FsError::Io(e)
    }
}

/// Unit tests compare errors by what the kernel gets.
#[cfg(test)]
impl PartialEq for FsError {
    fn eq(&self, other: &FsError) -> bool {
        self.errno() == other.errno()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_maps_to_its_errno() {
        assert_eq!(FsError::ENOENT.errno(), libc::ENOENT);
        let refused = FsError::Refused {
            errno: libc::EPERM,
            reason: "no".into(),
        };
        assert_eq!(refused.errno(), libc::EPERM);
        assert_eq!(FsError::from(crate::Error::Outdated).errno(), libc::EAGAIN);
        assert_eq!(
            FsError::from(io::Error::from_raw_os_error(libc::ENOSPC)).errno(),
            libc::ENOSPC
        );
        assert_eq!(FsError::from(io::Error::other("x")).errno(), libc::EIO);
    }
}

/// A refusal: the errno for the caller and the reason for the log line. Not recorded yet:
/// `Recorder::refuse` logs and records it with its operation and path, making it an
/// [`FsError::Refused`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub errno: i32,
    pub reason: String,
}

impl Refusal {
    pub(crate) fn new(errno: i32, reason: impl Into<String>) -> Refusal {
        Refusal {
            errno,
            reason: reason.into(),
        }
    }
}
