//! The few object-database questions the CLI needs (object types for
//! `for-each-ref`'s `%(objecttype)`, peeling annotated tags during `migrate`), answered
//! by one `git cat-file` process per command: refs are our business,
//! objects stay git's. Everything is sent in one batch, so the cost is one process
//! start whatever the number of refs.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use reftablefs::format::{HashKind, ObjectId};
use reftablefs::{Error, Result};

/// Starts `git --git-dir GIT_DIR cat-file MODE --buffer`, its questions on the returned
/// stdin and its answers on the returned stdout (its stderr is ours).
fn cat_file(git_dir: &Path, mode: &str) -> Result<(Child, ChildStdin, ChildStdout)> {
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .arg("cat-file")
        .arg(mode)
        .arg("--buffer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| Error::io("git cat-file", e))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(Error::Api("git cat-file: no pipes".into()));
    };
    Ok((child, stdin, stdout))
}

/// Runs `git cat-file --batch-check=<format>` on `inputs` (one object name per line)
/// and returns one output line per input, in order.
pub fn batch_check(git_dir: &Path, format: &str, inputs: Vec<Vec<u8>>) -> Result<Vec<String>> {
    if inputs.is_empty() {
        return Ok(Vec::new());
    }
    let (mut child, mut stdin, stdout) = cat_file(git_dir, &format!("--batch-check={format}"))?;
    let n = inputs.len();
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut w = std::io::BufWriter::new(&mut stdin);
        for line in inputs {
            w.write_all(&line)?;
            w.write_all(b"\n")?;
        }
        w.flush()
    });
    let mut out = Vec::with_capacity(n);
    for line in BufReader::new(stdout).lines() {
        out.push(line.map_err(|e| Error::io("git cat-file", e))?);
    }
    let wrote = writer
        .join()
        .map_err(|_| Error::Api("git cat-file writer panicked".into()))?;
    wrote.map_err(|e| Error::io("git cat-file", e))?;
    let status = child.wait().map_err(|e| Error::io("git cat-file", e))?;
    if !status.success() || out.len() != n {
        return Err(Error::Api(format!(
            "git cat-file --batch-check answered {} of {n} queries ({status})",
            out.len()
        )));
    }
    Ok(out)
}

/// The type of a loose object, read from its zlib-compressed header
/// (`<type> <size>\0`), as git itself does; `None` when the object is not loose (packed,
/// in an alternate) or the header cannot be read — the caller then asks git.
pub fn loose_object_type(objects_dir: &Path, id: &ObjectId) -> Option<&'static str> {
    use std::io::Read;
    let hex = id.to_hex();
    let path = objects_dir.join(hex.get(..2)?).join(hex.get(2..)?);
    let mut file = std::fs::File::open(path).ok()?;
    let mut input = [0u8; 512];
    let mut filled = 0;
    while filled < input.len() {
        match file.read(input.get_mut(filled..)?) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(_) => return None,
        }
    }
    let mut out = [0u8; 40];
    let mut z = flate2::Decompress::new(true);
    // A partial stream is fine: only the first bytes of output are needed.
    let _ = z.decompress(
        input.get(..filled)?,
        &mut out,
        flate2::FlushDecompress::None,
    );
    let produced = usize::try_from(z.total_out()).ok()?;
    let header = out.get(..produced)?;
    let space = header.iter().position(|&b| b == b' ')?;
    // The header must be complete enough to be sure of the type: size digits, then NUL.
    header.get(space + 1..)?.iter().position(|&b| b == 0)?;
    match header.get(..space)? {
        b"commit" => Some("commit"),
        b"tree" => Some("tree"),
        b"blob" => Some("blob"),
        b"tag" => Some("tag"),
        _ => None,
    }
}

/// The object type of each id (`commit`, `tag`, …; `missing` when absent). Each
/// distinct id is looked up once: loose objects in-process, the rest (packed objects,
/// alternates) with one `git cat-file` process.
pub fn object_types(git_dir: &Path, ids: &[ObjectId]) -> Result<Vec<String>> {
    TypeLookup::new(git_dir).types(ids)
}

/// A running `git cat-file --batch-command=%(objecttype) --buffer`, asked in batches.
struct CatFile {
    child: std::process::Child,
    /// `None` only while dropping (closing it ends git).
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl CatFile {
    fn spawn(git_dir: &Path) -> Result<CatFile> {
        let (child, stdin, stdout) = cat_file(git_dir, "--batch-command=%(objecttype)")?;
        Ok(CatFile {
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
        })
    }

    /// One answer line per id, in order: `info <id>` for each, then `flush`, which
    /// makes git write its buffered answers. The questions are written from another
    /// thread, so neither side can block the other on a full pipe.
    fn ask(&mut self, ids: &[ObjectId]) -> Result<Vec<String>> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(Error::Api("git cat-file: stdin closed".into()));
        };
        let stdout = &mut self.stdout;
        std::thread::scope(|scope| {
            let writer = scope.spawn(move || -> std::io::Result<()> {
                let mut w = std::io::BufWriter::new(stdin);
                for id in ids {
                    w.write_all(b"info ")?;
                    w.write_all(id.to_hex().as_bytes())?;
                    w.write_all(b"\n")?;
                }
                w.write_all(b"flush\n")?;
                w.flush()
            });
            let mut out = Vec::with_capacity(ids.len());
            let mut line = String::new();
            while out.len() < ids.len() {
                line.clear();
                let n = stdout
                    .read_line(&mut line)
                    .map_err(|e| Error::io("git cat-file", e))?;
                if n == 0 {
                    break;
                }
                out.push(line.trim_end_matches('\n').to_owned());
            }
            let wrote = writer
                .join()
                .map_err(|_| Error::Api("git cat-file writer panicked".into()))?;
            wrote.map_err(|e| Error::io("git cat-file", e))?;
            if out.len() != ids.len() {
                return Err(Error::Api(format!(
                    "git cat-file --batch-command answered {} of {} queries",
                    out.len(),
                    ids.len()
                )));
            }
            Ok(out)
        })
    }
}

impl Drop for CatFile {
    fn drop(&mut self) {
        // End of input ends git; then reap it.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Object types for a command: loose objects are read in-process, the rest go to one
/// `git cat-file --batch-command --buffer` process, started on first need and kept for the
/// command's later batches (an `update-ref --stdin` session with many transactions
/// starts one process, not one per transaction).
pub struct TypeLookup {
    git_dir: std::path::PathBuf,
    /// Which `objects/xx/` fan-out directories exist (read once): a fully packed
    /// repository has none, and then no id is probed as a loose file at all.
    fanout: Option<Box<[bool; 256]>>,
    cat_file: Option<CatFile>,
}

impl TypeLookup {
    /// A lookup in the repository whose (common) git dir is `git_dir`.
    pub fn new(git_dir: &Path) -> TypeLookup {
        TypeLookup {
            git_dir: git_dir.to_path_buf(),
            fanout: None,
            cat_file: None,
        }
    }

    fn fanout(&mut self) -> &[bool; 256] {
        let objects = self.git_dir.join("objects");
        self.fanout.get_or_insert_with(|| {
            let mut fanout = Box::new([false; 256]);
            if let Ok(entries) = std::fs::read_dir(&objects) {
                for e in entries.flatten() {
                    let name = e.file_name();
                    if let Some(b) = name
                        .to_str()
                        .filter(|n| n.len() == 2)
                        .and_then(|n| u8::from_str_radix(n, 16).ok())
                    {
                        fanout[usize::from(b)] = true;
                    }
                }
            }
            fanout
        })
    }

    /// The type of each id (`commit`, `tree`, `blob`, `tag`; `missing` when the object
    /// does not exist). Each distinct id is looked up once.
    pub fn types(&mut self, ids: &[ObjectId]) -> Result<Vec<String>> {
        let mut distinct: Vec<ObjectId> = ids.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let objects = self.git_dir.join("objects");
        let fanout = *self.fanout();
        let mut types: Vec<Option<String>> = distinct
            .iter()
            .map(|id| {
                let first = id.as_bytes().first().copied().unwrap_or(0);
                if fanout[usize::from(first)] {
                    loose_object_type(&objects, id).map(str::to_owned)
                } else {
                    None
                }
            })
            .collect();
        let unknown: Vec<usize> = (0..distinct.len())
            .filter(|&i| types.get(i).is_some_and(Option::is_none))
            .collect();
        if !unknown.is_empty() {
            let ask: Vec<ObjectId> = unknown
                .iter()
                .filter_map(|&i| distinct.get(i).copied())
                .collect();
            if self.cat_file.is_none() {
                self.cat_file = Some(CatFile::spawn(&self.git_dir)?);
            }
            let answers = match self.cat_file.as_mut() {
                Some(c) => c.ask(&ask),
                None => Err(Error::Api("git cat-file did not start".into())),
            };
            let answers = match answers {
                Ok(a) => a,
                Err(e) => {
                    // A process that failed once is not asked again.
                    self.cat_file = None;
                    return Err(e);
                }
            };
            for (&i, l) in unknown.iter().zip(answers) {
                let t = if l.ends_with(" missing") {
                    "missing".to_owned()
                } else {
                    l
                };
                if let Some(slot) = types.get_mut(i) {
                    *slot = Some(t);
                }
            }
        }
        Ok(ids
            .iter()
            .map(|id| match distinct.binary_search(id) {
                Ok(i) => types.get(i).cloned().flatten().unwrap_or_default(),
                Err(_) => String::new(),
            })
            .collect())
    }
}

/// For each id, the fully peeled id when it is an annotated tag that peels, else `None`
/// (git writes a peeled value only for tags that peel successfully).
pub fn peel_tags(
    git_dir: &Path,
    ids: &[ObjectId],
    hash: HashKind,
) -> Result<Vec<Option<ObjectId>>> {
    let inputs = ids
        .iter()
        .map(|id| {
            let mut v = id.to_hex().into_bytes();
            v.extend_from_slice(b"^{}");
            v
        })
        .collect();
    let lines = batch_check(git_dir, "%(objectname)", inputs)?;
    Ok(ids
        .iter()
        .zip(lines)
        .map(|(id, line)| {
            let peeled = ObjectId::from_hex(line.trim().as_bytes(), hash)?;
            (peeled != *id).then_some(peeled)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_peeling_through_git() {
        let tmp = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let o = Command::new("git")
                .current_dir(tmp.path())
                .args(["-c", "user.name=T", "-c", "user.email=t@x"])
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "{args:?}");
            String::from_utf8(o.stdout).unwrap().trim().to_owned()
        };
        run(&["init", "-q"]);
        run(&["commit", "-q", "--allow-empty", "-m", "c"]);
        run(&["tag", "-a", "-m", "t", "v1"]);
        let commit =
            ObjectId::from_hex(run(&["rev-parse", "HEAD"]).as_bytes(), HashKind::Sha1).unwrap();
        let tag = ObjectId::from_hex(run(&["rev-parse", "v1"]).as_bytes(), HashKind::Sha1).unwrap();
        let missing = ObjectId::from_bytes(&[0xab; 20]).unwrap();
        let git_dir = tmp.path().join(".git");
        assert_eq!(
            object_types(&git_dir, &[commit, tag, missing]).unwrap(),
            ["commit", "tag", "missing"]
        );
        assert_eq!(
            object_types(&git_dir, &[tag, commit, tag]).unwrap(),
            ["tag", "commit", "tag"]
        );
        assert_eq!(
            peel_tags(&git_dir, &[commit, tag, missing], HashKind::Sha1).unwrap(),
            [None, Some(commit), None]
        );
        assert!(object_types(&git_dir, &[]).unwrap().is_empty());
        // Loose objects are read in-process; after `git gc` they are packed and git answers.
        assert_eq!(
            loose_object_type(&git_dir.join("objects"), &commit),
            Some("commit")
        );
        assert_eq!(
            loose_object_type(&git_dir.join("objects"), &tag),
            Some("tag")
        );
        assert_eq!(loose_object_type(&git_dir.join("objects"), &missing), None);
        run(&["gc", "-q"]);
        assert_eq!(loose_object_type(&git_dir.join("objects"), &commit), None);
        assert_eq!(
            object_types(&git_dir, &[commit, tag, missing]).unwrap(),
            ["commit", "tag", "missing"]
        );
        // One lookup, several batches: the same cat-file process answers them all.
        let mut lookup = TypeLookup::new(&git_dir);
        assert_eq!(lookup.types(&[commit]).unwrap(), ["commit"]);
        let pid = lookup.cat_file.as_ref().map(|c| c.child.id());
        assert_eq!(lookup.types(&[missing, tag]).unwrap(), ["missing", "tag"]);
        assert_eq!(lookup.cat_file.as_ref().map(|c| c.child.id()), pid);
        assert!(pid.is_some());
    }
}
