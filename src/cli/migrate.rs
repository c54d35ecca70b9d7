//! `reftablefs migrate [--dry-run] [--ref-format=reftable] [--no-reflogs] [--[no-]progress]`:
//! converts a files-backend repository (loose refs, `packed-refs`, root refs and
//! reflogs) into a reftable stack and switches the repository over, the way
//! `git refs migrate --ref-format=reftable` does (git 2.47 `repo_migrate_ref_storage_format`):
//!
//! 1. the new store is built in `$GIT_DIR/ref_migration.XXXXXX` (`reftable/` with one
//!    table, `tables.list`, the `HEAD` and `refs/heads` stubs);
//! 2. `--dry-run` stops here and prints where the result is;
//! 3. otherwise `refs/`, `logs/`, the root ref files and `packed-refs` are removed, the
//!    new files moved into the git dir, and `core.repositoryformatversion = 1` plus
//!    `extensions.refStorage = reftable` written to the config.
//!
//! Unlike git 2.47 (which refuses), reflogs are migrated too, as newer git does: every
//! ref at update index 1, each reflog entry at its own update index `1 + n` (oldest
//! entry of each log first), messages truncated to `block_size / 2` and normalised.
//! Annotated tags among loose refs are peeled with one `git cat-file` batch; packed refs
//! keep the peeled values of `packed-refs`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::files::{read_files_backend, FilesRefs};
use crate::format::{LogRecord, RefValue};
use crate::repo::Repo;
use crate::table::{TableWriter, WriteOptions};
use crate::{Error, Result};

use super::progress::Progress;
use super::{common, objects, Args};

/// Runs the subcommand.
pub fn run(mut args: Args) -> Result<ExitCode> {
    let mut dry_run = false;
    let mut reflogs = true;
    let mut progress: Option<bool> = None;
    while args.peek_is_option() {
        if args.flag("--dry-run") {
            dry_run = true;
        } else if args.flag("--no-reflogs") {
            reflogs = false;
        } else if args.flag("--progress") {
            progress = Some(true);
        } else if args.flag("--no-progress") {
            progress = Some(false);
        } else if let Some(f) = args.value("--ref-format") {
            if f != "reftable" {
                eprintln!(
                    "error: unknown ref storage format '{}'",
                    f.to_string_lossy()
                );
                return Ok(ExitCode::from(129));
            }
        } else {
            return Ok(common::unknown_option(&args, "migrate"));
        }
    }
    if !args.is_empty() {
        return Ok(common::usage_error("too many arguments", "migrate"));
    }
    let repo = common::open_repo()?;
    let opts = MigrateOptions {
        dry_run,
        reflogs,
        progress,
    };
    match migrate(&repo, &opts)? {
        Outcome::DryRun(dir) => {
            println!(
                "Finished dry-run migration of refs, the result can be found at '{}'",
                dir.display()
            );
        }
        Outcome::Migrated => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Options of [`migrate`].
#[derive(Clone, Debug, Default)]
pub struct MigrateOptions {
    pub dry_run: bool,
    pub reflogs: bool,
    /// Force the progress line on or off (default: on when stderr is a terminal).
    pub progress: Option<bool>,
}

/// What [`migrate`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The new store was left at this directory.
    DryRun(PathBuf),
    /// The repository now uses reftable.
    Migrated,
}

fn fail(msg: impl Into<String>) -> Error {
    Error::Repo(msg.into())
}

/// Migrates `repo` from the files backend to reftable.
pub fn migrate(repo: &Repo, opts: &MigrateOptions) -> Result<Outcome> {
    if repo.is_reftable() {
        return Err(fail("current and new ref storage format are equal"));
    }
    let git_dir = repo.common_dir.clone();
    if has_linked_worktrees(&git_dir) {
        return Err(fail(
            "migrating repositories with worktrees is not supported yet",
        ));
    }
    let hash = repo.hash();

    let mut reading = Progress::new("Reading refs", None);
    if let Some(on) = opts.progress {
        reading.set_enabled(on);
    }
    let mut files = read_files_backend(&git_dir, hash, opts.reflogs, &mut |n| {
        reading.update(n as u64)
    })?;
    reading.update(files.refs.len() as u64);
    reading.finish();

    // Loose refs may point at annotated tags: peel them as git's reftable backend does.
    peel_loose_tags(&git_dir, &mut files, repo)?;

    let settings = &repo.settings;
    let wopts = WriteOptions {
        block_size: settings.block_size,
        restart_interval: settings.restart_interval,
        skip_index_objects: !settings.index_objects,
        hash,
        ..WriteOptions::default()
    };
    let mut writing = Progress::new(
        "Migrating refs",
        Some((files.refs.len() + log_count(&files)) as u64),
    );
    if let Some(on) = opts.progress {
        writing.set_enabled(on);
    }
    let (table, max_ui) = build_table(&files, wopts, &mut |n| writing.update(n as u64))?;
    writing.finish();

    let new_dir = make_migration_dir(&git_dir)?;
    let result = write_new_store(
        &new_dir,
        &table,
        max_ui,
        settings.default_permissions,
        settings.fsync_refs,
    );
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&new_dir);
        return Err(e);
    }
    if opts.dry_run {
        return Ok(Outcome::DryRun(new_dir));
    }
    let swap = || -> Result<()> {
        remove_files_backend(&git_dir)?;
        move_files(&new_dir, &git_dir)?;
        if let Err(e) = std::fs::remove_dir(&new_dir) {
            eprintln!(
                "warning: could not remove temporary migration directory '{}': {e}",
                new_dir.display()
            );
        }
        let config = git_dir.join("config");
        crate::repo::config_set(&config, "core", "repositoryformatversion", "1")?;
        crate::repo::config_set(&config, "extensions", "refstorage", "reftable")?;
        Ok(())
    };
    swap().map_err(|e| {
        fail(format!(
            "{e}\nmigrated refs can be found at '{}'",
            new_dir.display()
        ))
    })?;
    Ok(Outcome::Migrated)
}

fn has_linked_worktrees(git_dir: &Path) -> bool {
    std::fs::read_dir(git_dir.join("worktrees"))
        .map(|mut d| d.any(|e| e.is_ok_and(|e| e.path().is_dir())))
        .unwrap_or(false)
}

fn log_count(files: &FilesRefs) -> usize {
    files.reflogs.iter().map(|(_, l)| l.len()).sum()
}

fn peel_loose_tags(git_dir: &Path, files: &mut FilesRefs, repo: &Repo) -> Result<()> {
    // Packed refs come with their peeled values; only Val1 refs can still be tags. With
    // a fully-peeled packed-refs those are loose refs (few); ask git about all of them.
    let idx: Vec<usize> = files
        .refs
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            matches!(r.value, RefValue::Val1(_)) && !r.name.starts_with(b"refs/heads/")
        })
        .map(|(i, _)| i)
        .collect();
    if idx.is_empty() {
        return Ok(());
    }
    let ids: Vec<_> = idx
        .iter()
        .filter_map(|&i| match files.refs.get(i).map(|r| &r.value) {
            Some(RefValue::Val1(id)) => Some(*id),
            _ => None,
        })
        .collect();
    let peeled = match objects::peel_tags(git_dir, &ids, repo.hash()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("warning: cannot peel tags ({e}); refs are migrated without peeled values");
            return Ok(());
        }
    };
    for (&i, p) in idx.iter().zip(peeled) {
        if let (Some(r), Some(peeled)) = (files.refs.get_mut(i), p) {
            if let RefValue::Val1(value) = r.value {
                r.value = RefValue::Val2 { value, peeled };
            }
        }
    }
    Ok(())
}

/// Writes the single table of a migration: every ref at update index 1, then every
/// reflog entry at `1 + n` (n counting entries over all logs, oldest first). Returns the
/// table bytes and its max update index. `progress` gets the number of records written.
pub fn build_table(
    files: &FilesRefs,
    opts: WriteOptions,
    progress: &mut dyn FnMut(usize),
) -> Result<(Vec<u8>, u64)> {
    let min = 1u64;
    let logs = log_count(files) as u64;
    let max = min + logs.saturating_sub(1);
    let truncate_at = (opts.block_size / 2) as usize;
    let mut w = TableWriter::new(opts);
    w.begin(min, max)?;
    let mut rec = crate::format::RefRecord::default();
    let mut done = 0usize;
    for r in &files.refs {
        rec.name.clear();
        rec.name.extend_from_slice(&r.name);
        rec.update_index = min;
        rec.value.clone_from(&r.value);
        w.add_ref(&rec).map_err(|e| name_error(e, &r.name))?;
        done += 1;
        if done % 65536 == 0 {
            progress(done);
        }
    }
    // Assign indexes in (refname, oldest first) order, write newest first per ref.
    let mut log = LogRecord::default();
    let mut next = min;
    for (name, entries) in &files.reflogs {
        let first = next;
        next += entries.len() as u64;
        for (k, e) in entries.iter().enumerate().rev() {
            log.refname.clear();
            log.refname.extend_from_slice(name);
            log.update_index = first + k as u64;
            log.deleted = false;
            log.old_id = e.old_id;
            log.new_id = e.new_id;
            log.name.clone_from(&e.name);
            log.email.clone_from(&e.email);
            log.time = e.time;
            log.tz_offset = e.tz_offset;
            log.message.clear();
            let msg = e
                .message
                .get(..truncate_at.min(e.message.len()))
                .unwrap_or_default();
            log.message.extend_from_slice(msg);
            w.add_log(&log).map_err(|err| name_error(err, name))?;
            done += 1;
            if done % 65536 == 0 {
                progress(done);
            }
        }
    }
    progress(done);
    match w.finish() {
        Ok(bytes) => Ok((bytes.to_vec(), max)),
        // An empty repository: git writes no table either.
        Err(Error::EmptyTable) => Ok((Vec::new(), max)),
        Err(e) => Err(e),
    }
}

fn name_error(e: Error, name: &[u8]) -> Error {
    match e {
        Error::Api(m) => Error::Api(format!("{m} (ref '{}')", String::from_utf8_lossy(name))),
        other => other,
    }
}

fn make_migration_dir(git_dir: &Path) -> Result<PathBuf> {
    for _ in 0..100 {
        let suffix: String = {
            const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
            let mut r = crate::lockfile::rand_u32();
            (0..6)
                .map(|_| {
                    let c = CHARS
                        .get((r % CHARS.len() as u32) as usize)
                        .copied()
                        .unwrap_or(b'X');
                    r = crate::lockfile::rand_u32();
                    c as char
                })
                .collect()
        };
        let dir = git_dir.join(format!("ref_migration.{suffix}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(fail(format!("cannot create migration directory: {e}"))),
        }
    }
    Err(fail("cannot create migration directory: too many attempts"))
}

fn write_file(path: &Path, bytes: &[u8], mode: Option<u32>, fsync: bool) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let mut f = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    f.write_all(bytes).map_err(|e| Error::io(path, e))?;
    if fsync {
        f.sync_all().map_err(|e| Error::io(path, e))?;
    }
    if let Some(m) = mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(m))
            .map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

/// Lays out a reftable store in `dir` as `reftable_be_create_on_disk` + one commit do.
fn write_new_store(dir: &Path, table: &[u8], max_ui: u64, perm: u32, fsync: bool) -> Result<()> {
    let rt = dir.join("reftable");
    std::fs::create_dir(&rt).map_err(|e| Error::io(&rt, e))?;
    let mut list = String::new();
    if !table.is_empty() {
        let name = format!(
            "0x{:012x}-0x{:012x}-{:08x}.ref",
            1,
            max_ui,
            crate::lockfile::rand_u32()
        );
        write_file(&rt.join(&name), table, Some(perm), fsync)?;
        list.push_str(&name);
        list.push('\n');
    }
    write_file(&rt.join("tables.list"), list.as_bytes(), Some(perm), fsync)?;
    write_file(
        &dir.join("HEAD"),
        b"ref: refs/heads/.invalid\n",
        None,
        false,
    )?;
    let refs = dir.join("refs");
    std::fs::create_dir(&refs).map_err(|e| Error::io(&refs, e))?;
    write_file(
        &refs.join("heads"),
        b"this repository uses the reftable format\n",
        None,
        false,
    )?;
    if fsync {
        crate::lockfile::sync_dir(&rt)?;
    }
    Ok(())
}

/// git's `files_ref_store_remove_on_disk`: `refs/`, `logs/`, root ref files, `packed-refs`.
fn remove_files_backend(git_dir: &Path) -> Result<()> {
    for sub in ["refs", "logs"] {
        let p = git_dir.join(sub);
        match std::fs::remove_dir_all(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(format!("could not delete {sub}: {e}"))),
        }
    }
    let entries = std::fs::read_dir(git_dir).map_err(|e| Error::io(git_dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(git_dir, e))?;
        let name = entry.file_name();
        if crate::refname::is_root_ref(name.as_encoded_bytes()) && entry.path().is_file() {
            std::fs::remove_file(entry.path()).map_err(|e| Error::io(entry.path(), e))?;
        }
    }
    let packed = git_dir.join("packed-refs");
    match std::fs::remove_file(&packed) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(packed, e)),
    }
}

/// git's `move_files`: renames every entry of `from` into `to`.
fn move_files(from: &Path, to: &Path) -> Result<()> {
    let entries = std::fs::read_dir(from).map_err(|e| {
        fail(format!(
            "could not open source directory '{}': {e}",
            from.display()
        ))
    })?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(from, e))?;
        let target = to.join(entry.file_name());
        std::fs::rename(entry.path(), &target).map_err(|e| {
            fail(format!(
                "could not link file '{}' to '{}': {e}",
                entry.path().display(),
                target.display()
            ))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{HashKind, ObjectId, RefRecord};
    use crate::table::{LogIter, RefIter, Table};

    #[test]
    fn table_layout_matches_git_migration_rules() {
        let id = |n: u8| ObjectId::from_bytes(&[n; 20]).unwrap();
        let log = |n: u8, msg: &str| LogRecord {
            old_id: id(n - 1),
            new_id: id(n),
            name: b"T".to_vec(),
            email: b"t@x".to_vec(),
            time: 100 + u64::from(n),
            tz_offset: -700,
            message: msg.as_bytes().to_vec(),
            ..LogRecord::default()
        };
        let files = FilesRefs {
            refs: vec![
                RefRecord {
                    name: b"HEAD".to_vec(),
                    update_index: 0,
                    value: RefValue::Symref(b"refs/heads/main".to_vec()),
                },
                RefRecord {
                    name: b"refs/heads/main".to_vec(),
                    update_index: 0,
                    value: RefValue::Val1(id(3)),
                },
            ],
            reflogs: vec![
                (b"HEAD".to_vec(), vec![log(2, "one\n")]),
                (
                    b"refs/heads/main".to_vec(),
                    vec![log(2, "one\n"), log(3, &"x".repeat(3000))],
                ),
            ],
        };
        let (bytes, max) = build_table(&files, WriteOptions::default(), &mut |_| {}).unwrap();
        assert_eq!(max, 3);
        let t = Table::from_bytes("t", bytes).unwrap();
        assert_eq!((t.min_update_index(), t.max_update_index()), (1, 3));
        let mut it = t.ref_iter();
        it.seek(b"").unwrap();
        let r = it.next().unwrap().unwrap();
        assert_eq!((r.name.as_slice(), r.update_index), (b"HEAD".as_slice(), 1));
        let mut logs = t.log_iter();
        logs.seek(b"refs/heads/main", u64::MAX).unwrap();
        let newest = logs.next().unwrap().unwrap().clone();
        assert_eq!((newest.update_index, newest.new_id), (3, id(3)));
        assert_eq!(
            newest.message.len(),
            2048 + 1,
            "truncated to block_size/2, newline added"
        );
        let older = logs.next().unwrap().unwrap();
        assert_eq!(
            (older.update_index, older.message.as_slice()),
            (2, b"one\n".as_slice())
        );
        let mut logs = t.log_iter();
        logs.seek(b"HEAD", u64::MAX).unwrap();
        assert_eq!(logs.next().unwrap().unwrap().update_index, 1);
        let _ = HashKind::Sha1;
    }

    #[test]
    fn empty_repository_gives_no_table() {
        let (bytes, _) =
            build_table(&FilesRefs::default(), WriteOptions::default(), &mut |_| {}).unwrap();
        assert!(bytes.is_empty());
    }
}
