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

use reftablefs::files::{
    read_files_backend, read_loose_refs, read_reflogs, LooseOverPacked, PackedRefsParser,
    ParseError,
};
use reftablefs::format::{HashKind, LogRecord, RefRecord, RefValue};
use reftablefs::repo::Repo;
use reftablefs::table::{TableWriter, WriteOptions};
use reftablefs::{Error, Result};

use super::progress::Progress;
use super::table::Id;
use super::{common, objects, Args};

/// Runs the subcommand.
pub fn run(args: Args) -> Result<ExitCode> {
    let dry_run = args.flag(Id::DryRun);
    let reflogs = !args.flag(Id::NoReflogs);
    let progress = args.switch(Id::Progress);
    for f in args.values(Id::RefFormat) {
        if f != "reftable" {
            eprintln!(
                "error: unknown ref storage format '{}'",
                f.to_string_lossy()
            );
            return Ok(ExitCode::from(129));
        }
    }
    if !args.operands().is_empty() {
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

    let settings = &repo.settings;
    let wopts = WriteOptions {
        block_size: settings.block_size,
        restart_interval: settings.restart_interval,
        skip_index_objects: !settings.index_objects,
        hash,
        ..WriteOptions::default()
    };
    let new_dir = make_migration_dir(&git_dir)?;
    let result = build_store(&git_dir, &new_dir, repo, opts, wopts);
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
        reftablefs::repo::config_set(&config, "core", "repositoryformatversion", "1")?;
        reftablefs::repo::config_set(&config, "extensions", "refstorage", "reftable")?;
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

/// Reads the files backend of `git_dir` and writes the new store into `new_dir`: the
/// table is written to its file as it is built, with `packed-refs` read a chunk at a
/// time when it is sorted and fully peeled (as git writes it), so memory does not grow
/// with the number of packed refs; other `packed-refs` files are read whole and sorted.
fn build_store(
    git_dir: &Path,
    new_dir: &Path,
    repo: &Repo,
    opts: &MigrateOptions,
    wopts: WriteOptions,
) -> Result<()> {
    let hash = wopts.hash;
    let settings = &repo.settings;
    let progress_on = |p: &mut Progress| {
        if let Some(on) = opts.progress {
            p.set_enabled(on);
        }
    };
    let mut reading = Progress::new("Reading refs", None);
    progress_on(&mut reading);
    let mut loose = read_loose_refs(git_dir, hash, &mut |n| reading.update(n as u64), 0)?;
    let reflogs = if opts.reflogs {
        read_reflogs(git_dir, hash)?
    } else {
        Vec::new()
    };
    reading.finish();
    // Loose refs may point at annotated tags: peel them as git's reftable backend does.
    peel_loose_tags(git_dir, &mut loose, repo)?;

    let logs: usize = reflogs.iter().map(|(_, l)| l.len()).sum();
    let (min, max) = (1u64, 1 + (logs as u64).saturating_sub(1));
    let rt = new_dir.join("reftable");
    std::fs::create_dir(&rt).map_err(|e| Error::io(&rt, e))?;
    let name = format!(
        "0x{:012x}-0x{:012x}-{:08x}.ref",
        min,
        max,
        reftablefs::lockfile::rand_u32()
    );
    let path = rt.join(&name);
    let mut writing = Progress::new("Migrating refs", None);
    progress_on(&mut writing);
    let packed_path = git_dir.join("packed-refs");
    let written = {
        let mut file = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
        let mut report = |n: usize| writing.update(n as u64);
        let mut out = TableOut::new(wopts, min, max, &mut file, &path, &mut report)?;
        let streamed = stream_packed_refs(&packed_path, hash, &mut out, loose, PACKED_CHUNK)?;
        if !streamed {
            // Unsorted or not fully peeled: read whole, sorted, peeled, as before.
            out.restart()?;
            let files = read_files_backend(git_dir, hash, false, &mut |_| {})?;
            let mut refs = files.refs;
            peel_loose_tags(git_dir, &mut refs, repo)?;
            for r in &refs {
                out.add_ref(&r.name, &r.value)?;
            }
        }
        out.add_logs(&reflogs)?;
        let written = out.finish()?;
        if written && settings.fsync_refs {
            file.sync_all().map_err(|e| Error::io(&path, e))?;
        }
        written
    };
    writing.finish();
    if written {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            &path,
            std::fs::Permissions::from_mode(settings.default_permissions),
        )
        .map_err(|e| Error::io(&path, e))?;
    } else {
        // An empty repository: git writes no table either.
        std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
    }
    write_new_store(
        new_dir,
        written.then_some(name.as_str()),
        settings.default_permissions,
        settings.fsync_refs,
    )
}

/// How much of `packed-refs` is read at a time.
const PACKED_CHUNK: usize = 4 << 20;
/// How much table output is buffered before it is written out.
const OUTPUT_CHUNK: usize = 1 << 20;

/// Writes the refs of a sorted, fully-peeled `packed-refs` merged with the sorted `loose`
/// refs (loose wins) to `out`, reading `packed-refs` a chunk at a time. Returns false,
/// having written nothing, when the file does not say it is sorted and fully peeled, and
/// false as well when its records turn out not to be in order (the caller then restarts
/// the table from the whole file, sorted). A missing file is an empty one.
fn stream_packed_refs(
    path: &Path,
    hash: HashKind,
    out: &mut TableOut<'_>,
    loose: Vec<RefRecord>,
    chunk: usize,
) -> Result<bool> {
    use std::io::Read;
    let mut file = match std::fs::File::open(path) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut merge = LooseOverPacked::new(loose);
    let mut buf: Vec<u8> = Vec::new();
    let mut cap = chunk.max(1);
    let (mut line_base, mut off_base) = (0usize, 0usize);
    let mut first = true;
    let mut last = Vec::new();
    let file_name = || path.display().to_string();
    while let Some(f) = file.as_mut() {
        // Fill the buffer (after what is left of the previous chunk).
        let mut eof = false;
        while buf.len() < cap {
            let have = buf.len();
            buf.resize(cap, 0);
            let n = f.read(buf.get_mut(have..).unwrap_or_default());
            let n = match n {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
                Err(e) => return Err(Error::io(path, e)),
            };
            buf.truncate(have + n);
            if n == 0 && buf.len() < cap {
                eof = true;
                break;
            }
        }
        // Cut before the last record line that is complete (a `^` line belongs to the
        // record before it).
        let cut = if eof {
            buf.len()
        } else {
            let mut cut = 0;
            for (p, w) in buf.windows(2).enumerate().rev() {
                if let [b'\n', next] = w {
                    if *next != b'^' {
                        cut = p + 1;
                        break;
                    }
                }
            }
            cut
        };
        if cut == 0 && !eof {
            cap *= 2; // one record longer than a chunk
            continue;
        }
        let chunk = buf.get(..cut).unwrap_or_default();
        let at = |e: ParseError| {
            ParseError {
                line: e.line + line_base,
                offset: e.offset + off_base,
                what: e.what,
            }
            .in_file(file_name())
        };
        if !first && chunk.first() == Some(&b'#') {
            return Err(at(ParseError {
                line: 1,
                offset: 0,
                what: "unexpected line in packed-refs".into(),
            }));
        }
        let parser = PackedRefsParser::new(chunk, hash).map_err(at)?;
        if first {
            let t = parser.traits();
            if !(t.sorted && t.fully_peeled) {
                return Ok(false);
            }
            first = false;
        }
        for e in parser {
            let e = e.map_err(at)?;
            if !last.is_empty() && e.name <= last.as_slice() {
                return Ok(false);
            }
            last.clear();
            last.extend_from_slice(e.name);
            let mut res = Ok(());
            let overridden = merge.overrides(e.name, &mut |l| {
                if res.is_ok() {
                    res = out.add_ref(&l.name, &l.value);
                }
            });
            res?;
            if overridden {
                continue;
            }
            let value = match e.peeled {
                Some(peeled) => RefValue::Val2 {
                    value: e.id,
                    peeled,
                },
                None => RefValue::Val1(e.id),
            };
            out.add_ref(e.name, &value)?;
        }
        line_base += chunk.iter().filter(|&&b| b == b'\n').count();
        off_base += cut;
        buf.drain(..cut);
        if eof {
            break;
        }
    }
    let mut res = Ok(());
    merge.rest(&mut |l| {
        if res.is_ok() {
            res = out.add_ref(&l.name, &l.value);
        }
    });
    res?;
    Ok(true)
}

/// A migration table being written to `sink`: every ref at update index `min`, then
/// every reflog entry at its own index; the output is moved to the sink as it grows.
struct TableOut<'a> {
    w: TableWriter,
    rec: RefRecord,
    log: LogRecord,
    min: u64,
    max: u64,
    truncate_at: usize,
    done: usize,
    sink: &'a mut dyn std::io::Write,
    sink_path: &'a Path,
    /// Bytes moved to the sink so far.
    drained: u64,
    progress: &'a mut dyn FnMut(usize),
}

impl<'a> TableOut<'a> {
    fn new(
        opts: WriteOptions,
        min: u64,
        max: u64,
        sink: &'a mut dyn std::io::Write,
        sink_path: &'a Path,
        progress: &'a mut dyn FnMut(usize),
    ) -> Result<Self> {
        let truncate_at = (opts.block_size / 2) as usize;
        let mut w = TableWriter::new(opts);
        w.begin(min, max)?;
        Ok(TableOut {
            w,
            rec: RefRecord::default(),
            log: LogRecord::default(),
            min,
            max,
            truncate_at,
            done: 0,
            sink,
            sink_path,
            drained: 0,
            progress,
        })
    }

    /// Starts the table over; only possible while nothing was moved to the sink.
    fn restart(&mut self) -> Result<()> {
        if self.drained > 0 {
            return Err(fail(
                "packed-refs is not sorted after all: cannot restart a table already written out",
            ));
        }
        self.done = 0;
        self.w.begin(self.min, self.max)
    }

    fn count(&mut self) {
        self.done += 1;
        if self.done % 65536 == 0 {
            (self.progress)(self.done);
        }
    }

    fn drain_if_full(&mut self) -> Result<()> {
        if self.w.output().len() >= OUTPUT_CHUNK {
            self.drained += self.w.output().len() as u64;
            self.w
                .drain_output(self.sink)
                .map_err(|e| Error::io(self.sink_path, e))?;
        }
        Ok(())
    }

    fn add_ref(&mut self, name: &[u8], value: &RefValue) -> Result<()> {
        self.rec.name.clear();
        self.rec.name.extend_from_slice(name);
        self.rec.update_index = self.min;
        self.rec.value.clone_from(value);
        self.w.add_ref(&self.rec).map_err(|e| name_error(e, name))?;
        self.count();
        self.drain_if_full()
    }

    /// Assigns indexes in (refname, oldest first) order and writes newest first per ref.
    fn add_logs(&mut self, reflogs: &[(Vec<u8>, Vec<LogRecord>)]) -> Result<()> {
        let mut next = self.min;
        for (name, entries) in reflogs {
            let first = next;
            next += entries.len() as u64;
            for (k, e) in entries.iter().enumerate().rev() {
                let log = &mut self.log;
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
                    .get(..self.truncate_at.min(e.message.len()))
                    .unwrap_or_default();
                log.message.extend_from_slice(msg);
                self.w
                    .add_log(&self.log)
                    .map_err(|err| name_error(err, name))?;
                self.count();
                self.drain_if_full()?;
            }
        }
        Ok(())
    }

    /// Finishes the table and writes the rest out; false for an empty table (nothing
    /// written to the sink then).
    fn finish(mut self) -> Result<bool> {
        (self.progress)(self.done);
        match self.w.finish() {
            Ok(_) => {}
            Err(Error::EmptyTable) => return Ok(false),
            Err(e) => return Err(e),
        }
        self.w
            .drain_output(self.sink)
            .map_err(|e| Error::io(self.sink_path, e))?;
        Ok(true)
    }
}

fn has_linked_worktrees(git_dir: &Path) -> bool {
    std::fs::read_dir(git_dir.join("worktrees"))
        .map(|mut d| d.any(|e| e.is_ok_and(|e| e.path().is_dir())))
        .unwrap_or(false)
}

fn peel_loose_tags(git_dir: &Path, refs: &mut [RefRecord], repo: &Repo) -> Result<()> {
    // Packed refs come with their peeled values; only Val1 refs can still be tags. With
    // a fully-peeled packed-refs those are loose refs (few); ask git about all of them.
    let idx: Vec<usize> = refs
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
        .filter_map(|&i| match refs.get(i).map(|r| &r.value) {
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
        if let (Some(r), Some(peeled)) = (refs.get_mut(i), p) {
            if let RefValue::Val1(value) = r.value {
                r.value = RefValue::Val2 { value, peeled };
            }
        }
    }
    Ok(())
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
            let mut r = reftablefs::lockfile::rand_u32();
            (0..6)
                .map(|_| {
                    let c = CHARS
                        .get((r % CHARS.len() as u32) as usize)
                        .copied()
                        .unwrap_or(b'X');
                    r = reftablefs::lockfile::rand_u32();
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

/// Lays out a reftable store in `dir` (whose `reftable/` holds the table file `table`, if
/// any) as `reftable_be_create_on_disk` + one commit do.
fn write_new_store(dir: &Path, table: Option<&str>, perm: u32, fsync: bool) -> Result<()> {
    let rt = dir.join("reftable");
    let mut list = String::new();
    if let Some(name) = table {
        list.push_str(name);
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
        reftablefs::lockfile::sync_dir(&rt)?;
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
        if reftablefs::refname::is_root_ref(name.as_encoded_bytes()) && entry.path().is_file() {
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
    use reftablefs::files::FilesRefs;

    fn log_count(files: &FilesRefs) -> usize {
        files.reflogs.iter().map(|(_, l)| l.len()).sum()
    }

    /// Writes the single table of a migration in memory: every ref at update index 1, then
    /// every reflog entry at `1 + n` (n counting entries over all logs, oldest first).
    /// Returns the table bytes (empty for no refs and no logs) and its max update index.
    /// `progress` gets the number of records written. (The reference for the streamed
    /// migration.)
    fn build_table(
        files: &FilesRefs,
        opts: WriteOptions,
        progress: &mut dyn FnMut(usize),
    ) -> Result<(Vec<u8>, u64)> {
        let logs = log_count(files) as u64;
        let max = 1 + logs.saturating_sub(1);
        let mut bytes = Vec::new();
        let mem = Path::new("(memory)");
        let mut out = TableOut::new(opts, 1, max, &mut bytes, mem, progress)?;
        for r in &files.refs {
            out.add_ref(&r.name, &r.value)?;
        }
        out.add_logs(&files.reflogs)?;
        let written = out.finish()?;
        if !written {
            bytes.clear();
        }
        Ok((bytes, max))
    }
    use reftablefs::format::{HashKind, ObjectId, RefRecord};
    use reftablefs::table::{LogIter, RefIter, Table};

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

    /// The streamed table (packed-refs read in small chunks, so records, `^` lines and
    /// loose overrides fall across chunk boundaries) is the in-memory one, byte for byte.
    #[test]
    fn streamed_table_is_the_in_memory_table() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path();
        let hex = |n: u32| format!("{n:08x}{}", "ab".repeat(16));
        let mut packed = String::from("# pack-refs with: peeled fully-peeled sorted \n");
        let mut names: Vec<String> = (0..300)
            .map(|i| format!("refs/{}/x{i:04}", if i % 3 == 0 { "tags" } else { "heads" }))
            .collect();
        names.sort();
        for (i, n) in names.iter().enumerate() {
            packed.push_str(&format!("{} {n}\n", hex(i as u32)));
            if n.starts_with("refs/tags/") {
                packed.push_str(&format!("^{}\n", hex(9000 + i as u32)));
            }
        }
        std::fs::write(g.join("packed-refs"), &packed).unwrap();
        // Loose refs: one overriding a packed ref, one between, one after, a root ref.
        for (name, v) in [
            ("refs/heads/x0004", hex(7001)),
            ("refs/heads/x0100a", hex(7002)),
            ("refs/zzz", "ref: refs/heads/x0001".to_string()),
            ("HEAD", "ref: refs/heads/x0002".to_string()),
        ] {
            let p = g.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("{v}\n")).unwrap();
        }
        let files = read_files_backend(g, HashKind::Sha1, false, &mut |_| {}).unwrap();
        assert_eq!(files.refs.len(), 303);
        let (want, _) = build_table(&files, WriteOptions::default(), &mut |_| {}).unwrap();
        let mut quiet = |_: usize| {};
        for chunk in [1, 50, 97, 4096, 1 << 20] {
            let mut got = Vec::new();
            let mem = Path::new("mem");
            let mut out =
                TableOut::new(WriteOptions::default(), 1, 1, &mut got, mem, &mut quiet).unwrap();
            let loose = read_loose_refs(g, HashKind::Sha1, &mut |_| {}, 0).unwrap();
            let streamed = stream_packed_refs(
                &g.join("packed-refs"),
                HashKind::Sha1,
                &mut out,
                loose,
                chunk,
            )
            .unwrap();
            assert!(streamed);
            assert!(out.finish().unwrap());
            assert!(got == want, "chunk {chunk}: streamed table differs");
        }
        // Not sorted: nothing streamed, the caller falls back to the sorted whole file.
        let unsorted = packed.replace(" sorted", "");
        std::fs::write(g.join("packed-refs"), unsorted).unwrap();
        let mut got = Vec::new();
        let mem = Path::new("mem");
        let mut out =
            TableOut::new(WriteOptions::default(), 1, 1, &mut got, mem, &mut quiet).unwrap();
        let p = g.join("packed-refs");
        assert!(!stream_packed_refs(&p, HashKind::Sha1, &mut out, Vec::new(), 64).unwrap());
        // A malformed line is reported with its line number in the whole file.
        let bad = packed.replacen("refs/heads/x0200", "", 1);
        std::fs::write(g.join("packed-refs"), bad).unwrap();
        let mut got = Vec::new();
        let mut out =
            TableOut::new(WriteOptions::default(), 1, 1, &mut got, mem, &mut quiet).unwrap();
        let e = stream_packed_refs(&p, HashKind::Sha1, &mut out, Vec::new(), 97).unwrap_err();
        let line = packed
            .lines()
            .position(|l| l.ends_with("refs/heads/x0200"))
            .unwrap()
            + 1;
        assert!(e.to_string().contains(&format!("line {line}:")), "{e}");
    }

    #[test]
    fn empty_repository_gives_no_table() {
        let (bytes, _) =
            build_table(&FilesRefs::default(), WriteOptions::default(), &mut |_| {}).unwrap();
        assert!(bytes.is_empty());
    }
}
