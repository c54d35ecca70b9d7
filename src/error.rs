//! One error type for the crate. Corruption errors say which file and which byte offset.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure the library reports. Variants mirror git's reftable error classes
/// (IO, FORMAT, NOT_EXIST, LOCK, API, ZLIB, EMPTY_TABLE, REFNAME, ENTRY_TOO_BIG, OUTDATED).
#[derive(Debug)]
pub enum Error {
    /// An I/O error, with the path it concerns when known.
    Io {
        path: Option<PathBuf>,
        source: io::Error,
    },
    /// Bytes on disk that are not a valid reftable: `file` (may be empty for in-memory
    /// data), byte `offset` in that file, and what was wrong.
    Format {
        file: String,
        offset: u64,
        what: String,
    },
    /// A zlib stream in a log block could not be inflated.
    Zlib {
        file: String,
        offset: u64,
        what: String,
    },
    /// A table listed in `tables.list` does not exist.
    NotExist(PathBuf),
    /// A lock file is held by someone else ("data is locked").
    Lock(PathBuf),
    /// Misuse of the API (out-of-order keys, update index outside limits, …).
    Api(String),
    /// A writer was closed without any record; nothing to add.
    EmptyTable,
    /// A single record does not fit into an empty block ("entry too large").
    EntryTooBig,
    /// An invalid ref name.
    Refname { name: String, reason: String },
    /// The stack changed underneath us ("data concurrently modified").
    Outdated,
    /// A transaction precondition failed (D/F conflict, duplicate update, …).
    Transaction(String),
    /// A transaction's expected old value of `refname` does not hold (someone else
    /// changed the ref): what the edit expected (as its caller gave it), what the stack
    /// holds under the lock (`None`: no such ref), and git's message naming both.
    Conflict {
        refname: Vec<u8>,
        expected: Box<crate::transaction::Expected>,
        found: Option<Box<crate::format::RefValue>>,
        message: String,
    },
    /// Repository discovery or configuration problem (not a repository, bad config
    /// line, unsupported extension); the message says what and where.
    Repo(String),
}

impl Error {
    /// Builds a format error.
    pub fn format(file: impl Into<String>, offset: u64, what: impl Into<String>) -> Self {
        Error::Format {
            file: file.into(),
            offset,
            what: what.into(),
        }
    }

    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            path: Some(path.into()),
            source,
        }
    }

    /// The errno that best describes this error to a FUSE client.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Format { .. } | Error::Zlib { .. } | Error::NotExist(_) => libc::EIO,
            Error::Lock(_) => libc::EEXIST,
            Error::Refname { .. } | Error::Api(_) | Error::EntryTooBig | Error::Repo(_) => {
                libc::EINVAL
            }
            Error::EmptyTable => 0,
            Error::Outdated | Error::Transaction(_) | Error::Conflict { .. } => libc::EAGAIN,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io {
                path: Some(p),
                source,
            } => write!(f, "{}: {}", p.display(), source),
            Error::Io { path: None, source } => write!(f, "{source}"),
            Error::Format { file, offset, what } => {
                write!(f, "corrupt reftable file {file} at offset {offset}: {what}")
            }
            Error::Zlib { file, offset, what } => {
                write!(f, "zlib error in {file} at offset {offset}: {what}")
            }
            Error::NotExist(p) => write!(f, "{}: table does not exist", p.display()),
            Error::Lock(p) => write!(f, "data is locked: {}", p.display()),
            Error::Api(m) => write!(f, "reftable API misuse: {m}"),
            Error::EmptyTable => write!(f, "empty table"),
            Error::EntryTooBig => write!(f, "entry too large"),
            Error::Refname { name, reason } => write!(f, "invalid ref name '{name}': {reason}"),
            Error::Outdated => write!(f, "data concurrently modified"),
            Error::Transaction(m) => write!(f, "{m}"),
            Error::Conflict { message, .. } => write!(f, "{message}"),
            Error::Repo(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(source: io::Error) -> Self {
        Error::Io { path: None, source }
    }
}
