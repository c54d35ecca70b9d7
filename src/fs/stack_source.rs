//! The real [`RefSource`]: a reftable stack opened from a git directory.

use std::path::Path;

use crate::fs::source::RefSource;
use crate::fs::MountOptions;
use crate::{Error, Result};

/// Opens the stack of `gitdir` (whose tables are in `reftable_dir`).
pub fn open(
    gitdir: &Path,
    reftable_dir: &Path,
    _opts: &MountOptions,
) -> Result<Box<dyn RefSource>> {
    let _ = reftable_dir;
    Err(Error::Api(format!(
        "cannot serve {}: this build has no reftable stack reader yet (branch `stack` not merged)",
        gitdir.display()
    )))
}
