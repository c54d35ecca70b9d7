//! Files the mount keeps beside the stack (the broken refs' store, the packed layer, the
//! `packed-refs` link, a link's target written back), replaced durably: a temporary file
//! of a fixed name in the same directory, written and `fsync`ed, renamed over the file,
//! the directory `fsync`ed. No link is followed at the temporary name.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Replaces `dir/name` with `content` through `dir/temp` (mode 0644); the temporary file
/// is removed again when it cannot be renamed.
pub fn replace(dir: &Path, temp: &Path, name: &Path, content: &[u8]) -> io::Result<()> {
    let tmp = dir.join(temp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(content).and_then(|()| f.sync_all()));
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, dir.join(name))) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// `fsync` of the directory `dir` (a name in it was made or removed).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
