//! The few object-database questions the CLI needs (object types for
//! `for-each-ref`'s `%(objecttype)`, peeling annotated tags during `migrate`), answered
//! by one `git cat-file --batch-check` process per command: refs are our business,
//! objects stay git's. Everything is sent in one batch, so the cost is one process
//! start whatever the number of refs.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::format::{HashKind, ObjectId};
use crate::{Error, Result};

/// Runs `git cat-file --batch-check=<format>` on `inputs` (one object name per line)
/// and returns one output line per input, in order.
pub fn batch_check(git_dir: &Path, format: &str, inputs: Vec<Vec<u8>>) -> Result<Vec<String>> {
    if inputs.is_empty() {
        return Ok(Vec::new());
    }
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .arg("cat-file")
        .arg(format!("--batch-check={format}"))
        .arg("--buffer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| Error::io("git cat-file", e))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| Error::Api("git cat-file: no stdin".into()))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::Api("git cat-file: no stdout".into()))?;
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

/// The object type of each id (`commit`, `tag`, …; `missing` when absent). Each
/// distinct id is asked once.
pub fn object_types(git_dir: &Path, ids: &[ObjectId]) -> Result<Vec<String>> {
    let mut distinct: Vec<ObjectId> = ids.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let inputs = distinct.iter().map(|id| id.to_hex().into_bytes()).collect();
    let lines = batch_check(git_dir, "%(objecttype)", inputs)?;
    let types: Vec<String> = lines
        .into_iter()
        .map(|l| {
            if l.ends_with(" missing") {
                "missing".to_owned()
            } else {
                l
            }
        })
        .collect();
    Ok(ids
        .iter()
        .map(|id| match distinct.binary_search(id) {
            Ok(i) => types.get(i).cloned().unwrap_or_default(),
            Err(_) => String::new(),
        })
        .collect())
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
    }
}
