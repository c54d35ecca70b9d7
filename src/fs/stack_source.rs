//! The real [`RefSource`]: a reftable stack opened from a git directory.

use std::path::Path;

use crate::fs::source::RefSource;
use crate::fs::write::LogSettings;
use crate::fs::MountOptions;
use crate::{Error, Result};

/// What the mount needs from a repository: a reader and a writer over its stack, and how
/// generated reflog entries are written.
pub struct Opened {
    pub reader: Box<dyn RefSource>,
    pub writer: Option<Box<dyn RefSource>>,
    pub log: LogSettings,
}

/// Opens the stack of `gitdir` (whose tables are in `reftable_dir`).
pub fn open(gitdir: &Path, reftable_dir: &Path, _opts: &MountOptions) -> Result<Opened> {
    let _ = reftable_dir;
    Err(Error::Api(format!(
        "cannot serve {}: this build has no reftable stack reader yet (branch `stack` not merged)",
        gitdir.display()
    )))
}
