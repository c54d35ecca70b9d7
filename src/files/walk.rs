//! Reading a whole files-backend ref store from disk, as `git refs migrate` does: the
//! `packed-refs` file, the loose refs under `refs/` and the root refs in the git dir
//! (loose over packed), and the reflogs under `logs/`. The text of each file is parsed
//! by the parent module's pure functions.

use crate::format::{HashKind, LogRecord};
use crate::refname::is_root_ref;
use crate::Error;

use super::{parse_loose_ref, parse_packed_refs, parse_reflog, LooseRef};

/// Every ref and reflog of a files-backend repository, as `git refs migrate` sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilesRefs {
    /// Effective refs (loose over packed), sorted by name; `update_index` is 0.
    pub refs: Vec<crate::format::RefRecord>,
    /// Reflogs sorted by ref name, each oldest entry first; `update_index` is 0.
    pub reflogs: Vec<(Vec<u8>, Vec<LogRecord>)>,
}

/// Progress callback: called with the number of refs read so far.
pub type Progress<'a> = &'a mut dyn FnMut(usize);

fn io_err(path: &std::path::Path, e: std::io::Error) -> Error {
    Error::io(path, e)
}

/// Reads the files backend of `git_dir`: `packed-refs`, loose refs under `refs/`
/// (skipping names that begin with `.` or end in `.lock`, as git's `loose_fill_ref_dir`),
/// root refs in the git dir (`HEAD`, `ORIG_HEAD`, …; pseudorefs excluded) and, when
/// `with_reflogs`, every reflog under `logs/`. Loose values override packed ones; a
/// peeled value from `packed-refs` is kept only while the loose file does not override
/// the ref. Errors name the file and line.
pub fn read_files_backend(
    git_dir: &std::path::Path,
    hash: HashKind,
    with_reflogs: bool,
    progress: Progress<'_>,
) -> crate::Result<FilesRefs> {
    use crate::format::{RefRecord, RefValue};

    let packed_path = git_dir.join("packed-refs");
    let packed = match std::fs::read(&packed_path) {
        Ok(buf) => parse_packed_refs(&buf, hash)
            .map_err(|e| e.in_file(packed_path.display().to_string()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_err(&packed_path, e)),
    };
    progress(packed.len());
    let loose = read_loose_refs(git_dir, hash, progress, packed.len())?;

    let mut refs = Vec::with_capacity(packed.len() + loose.len());
    let mut merge = LooseOverPacked::new(loose);
    for p in packed {
        if merge.overrides(&p.name, &mut |l| refs.push(l)) {
            continue;
        }
        let value = match p.peeled {
            Some(peeled) => RefValue::Val2 {
                value: p.id,
                peeled,
            },
            None => RefValue::Val1(p.id),
        };
        refs.push(RefRecord {
            name: p.name,
            update_index: 0,
            value,
        });
    }
    merge.rest(&mut |l| refs.push(l));

    let reflogs = if with_reflogs {
        read_reflogs(git_dir, hash)?
    } else {
        Vec::new()
    };
    Ok(FilesRefs { refs, reflogs })
}

/// The loose refs under `refs/` (skipping names that begin with `.` or end in `.lock`)
/// and the root refs of the git dir, sorted by name. `progress` gets `base` plus the
/// number read so far.
pub fn read_loose_refs(
    git_dir: &std::path::Path,
    hash: HashKind,
    progress: Progress<'_>,
    base: usize,
) -> crate::Result<Vec<crate::format::RefRecord>> {
    let mut loose = Vec::new();
    let mut name = b"refs/".to_vec();
    walk_loose(
        &git_dir.join("refs"),
        &mut name,
        hash,
        &mut loose,
        progress,
        base,
    )?;
    // Root refs: regular files directly in the git dir.
    let entries = std::fs::read_dir(git_dir).map_err(|e| io_err(git_dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_err(git_dir, e))?;
        let fname = entry.file_name();
        let fname = fname.as_encoded_bytes();
        if !is_root_ref(fname) {
            continue;
        }
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        loose.push(read_loose_file(&path, fname, hash)?);
    }
    loose.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Ok(loose)
}

/// Every reflog under `logs/` (ref logs and root refs' logs), sorted by ref name, each
/// oldest entry first.
pub fn read_reflogs(
    git_dir: &std::path::Path,
    hash: HashKind,
) -> crate::Result<Vec<(Vec<u8>, Vec<LogRecord>)>> {
    let mut reflogs = Vec::new();
    let logs = git_dir.join("logs");
    let mut name = Vec::new();
    walk_logs(&logs, &mut name, hash, &mut reflogs, true)?;
    reflogs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(reflogs)
}

/// Merges sorted loose refs into a sorted stream of packed refs: a loose ref overrides
/// the packed ref of the same name.
pub struct LooseOverPacked {
    loose: std::iter::Peekable<std::vec::IntoIter<crate::format::RefRecord>>,
}

impl LooseOverPacked {
    /// Loose refs sorted by name.
    pub fn new(loose: Vec<crate::format::RefRecord>) -> Self {
        LooseOverPacked {
            loose: loose.into_iter().peekable(),
        }
    }

    /// Called with each packed name in order: hands `out` the loose refs that sort before
    /// `name`, and returns whether a loose ref of that name overrides the packed one (the
    /// loose ref then comes out before the next packed name).
    pub fn overrides(
        &mut self,
        name: &[u8],
        out: &mut dyn FnMut(crate::format::RefRecord),
    ) -> bool {
        while let Some(l) = self.loose.next_if(|l| l.name.as_slice() < name) {
            out(l);
        }
        self.loose.peek().is_some_and(|l| l.name == name)
    }

    /// Hands `out` the loose refs left after the last packed name.
    pub fn rest(self, out: &mut dyn FnMut(crate::format::RefRecord)) {
        self.loose.for_each(out);
    }
}

fn read_loose_file(
    path: &std::path::Path,
    name: &[u8],
    hash: HashKind,
) -> crate::Result<crate::format::RefRecord> {
    use crate::format::{RefRecord, RefValue};
    let content = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let value =
        match parse_loose_ref(&content, hash).map_err(|e| e.in_file(path.display().to_string()))? {
            LooseRef::Oid(id) => RefValue::Val1(id),
            LooseRef::Symref(t) => RefValue::Symref(t),
        };
    Ok(RefRecord {
        name: name.to_vec(),
        update_index: 0,
        value,
    })
}

fn walk_loose(
    dir: &std::path::Path,
    name: &mut Vec<u8>,
    hash: HashKind,
    out: &mut Vec<crate::format::RefRecord>,
    progress: Progress<'_>,
    base: usize,
) -> crate::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(dir, e)),
    };
    let mut list: Vec<(std::ffi::OsString, std::fs::FileType)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let ft = entry.file_type().map_err(|e| io_err(&entry.path(), e))?;
        list.push((entry.file_name(), ft));
    }
    list.sort_by(|a, b| a.0.cmp(&b.0));
    for (fname, ft) in list {
        let bytes = fname.as_encoded_bytes();
        if bytes.starts_with(b".") || bytes.ends_with(b".lock") {
            continue;
        }
        let path = dir.join(&fname);
        let len = name.len();
        name.extend_from_slice(bytes);
        let is_dir = if ft.is_symlink() {
            path.is_dir()
        } else {
            ft.is_dir()
        };
        if is_dir {
            name.push(b'/');
            walk_loose(&path, name, hash, out, progress, base)?;
        } else {
            out.push(read_loose_file(&path, name, hash)?);
            if out.len() % 4096 == 0 {
                progress(base + out.len());
            }
        }
        name.truncate(len);
    }
    Ok(())
}

fn walk_logs(
    dir: &std::path::Path,
    name: &mut Vec<u8>,
    hash: HashKind,
    out: &mut Vec<(Vec<u8>, Vec<LogRecord>)>,
    top: bool,
) -> crate::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let fname = entry.file_name();
        let bytes = fname.as_encoded_bytes();
        if bytes.starts_with(b".") || bytes.ends_with(b".lock") {
            continue;
        }
        let path = entry.path();
        let len = name.len();
        name.extend_from_slice(bytes);
        if path.is_dir() {
            // At the top only `logs/refs/` holds ref logs.
            if !top || bytes == b"refs" {
                name.push(b'/');
                walk_logs(&path, name, hash, out, false)?;
            }
        } else if !top || is_root_ref(bytes) {
            let content = std::fs::read(&path).map_err(|e| io_err(&path, e))?;
            let recs = parse_reflog(&content, name, hash)
                .map_err(|e| e.in_file(path.display().to_string()))?;
            out.push((name.clone(), recs));
        }
        name.truncate(len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &std::path::Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=T", "-c", "user.email=t@x"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn reads_a_real_files_repository_like_git() {
        use crate::format::RefValue;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        git(dir, &["init", "-q", "--ref-format=files", "-b", "main"]);
        git(dir, &["commit", "-q", "--allow-empty", "-m", "one"]);
        git(dir, &["tag", "-a", "-m", "annotated", "v1"]);
        git(dir, &["branch", "packed-only"]);
        git(dir, &["branch", "dir/nested"]);
        git(dir, &["pack-refs", "--all"]);
        git(dir, &["commit", "-q", "--allow-empty", "-m", "two"]); // main loose again, overrides packed
        git(dir, &["branch", "loose-only"]);
        git(dir, &["update-ref", "ORIG_HEAD", "HEAD~1"]);
        git(dir, &["symbolic-ref", "refs/heads/sym", "refs/heads/main"]);
        std::fs::write(dir.join(".git/refs/heads/stale.lock"), "garbage").unwrap();

        let got = read_files_backend(&dir.join(".git"), HashKind::Sha1, true, &mut |_| {}).unwrap();
        let mut ours = String::new();
        for r in &got.refs {
            let name = String::from_utf8_lossy(&r.name);
            match &r.value {
                RefValue::Val1(id) => ours += &format!("{name} {id}\n"),
                RefValue::Val2 { value, peeled } => ours += &format!("{name} {value} {peeled}\n"),
                RefValue::Symref(t) => {
                    ours += &format!("{name} -> {}\n", String::from_utf8_lossy(t))
                }
                RefValue::Deletion => panic!("no tombstones in a files repo"),
            }
        }
        let head = git(dir, &["rev-parse", "HEAD"]);
        let orig = git(dir, &["rev-parse", "ORIG_HEAD"]);
        let mut want = format!("HEAD -> refs/heads/main\nORIG_HEAD {}", orig);
        for line in git(
            dir,
            &[
                "for-each-ref",
                "--format=%(refname) %(objectname) %(*objectname)%(symref)",
            ],
        )
        .lines()
        {
            let line = line.trim_end();
            if line.starts_with("refs/heads/sym ") {
                want += "refs/heads/sym -> refs/heads/main\n";
            } else {
                want += &format!("{line}\n");
            }
        }
        assert_eq!(ours, want);
        assert!(
            ours.contains(&format!("refs/heads/main {}", head.trim())),
            "loose overrides packed"
        );

        let names: Vec<&[u8]> = got.reflogs.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(
            names,
            [
                b"HEAD".as_slice(),
                b"refs/heads/dir/nested",
                b"refs/heads/loose-only",
                b"refs/heads/main",
                b"refs/heads/packed-only",
                b"refs/heads/sym"
            ]
        );
        let (_, main_log) = &got.reflogs[3];
        let git_log = git(
            dir,
            &["reflog", "show", "--format=%H %gs", "refs/heads/main"],
        );
        let ours: Vec<String> = main_log
            .iter()
            .rev()
            .map(|r| {
                format!(
                    "{} {}",
                    r.new_id,
                    String::from_utf8_lossy(&r.message).trim_end()
                )
            })
            .collect();
        assert_eq!(ours, git_log.lines().collect::<Vec<_>>());
        assert_eq!(main_log[0].name, b"T");
    }

    #[test]
    fn broken_loose_ref_is_reported_with_its_path() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        git(dir, &["init", "-q", "--ref-format=files"]);
        std::fs::write(dir.join(".git/refs/heads/bad"), "not an id\n").unwrap();
        let e =
            read_files_backend(&dir.join(".git"), HashKind::Sha1, false, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("refs/heads/bad"), "{e}");
    }
}
