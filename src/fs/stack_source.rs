//! The real [`RefSource`] and [`RefWriter`]: a reftable stack opened from a git directory,
//! twice (a reader, and unless read-only a writer). Point reads and range reads go through
//! the stack's one cached reseekable merged iterator; reflog existence through one cached
//! log iterator (rebuilt when the table set changes); a batch is one transaction (one
//! table, one fsync round) through the stack's one writer.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::format::{HashKind, LogRecord, RefRecord, RefValue};
use crate::fs::ref_times::RefTimes;
use crate::fs::source::LogSettings;
use crate::fs::source::{BatchEdit, CommitOutcome, Conflict, RefSource, RefWriter, Step, Visit};
use crate::fs::MountOptions;
use crate::merged::MergedLogIter;
use crate::repo::Repo;
use crate::stack::{Stack, StackOptions};
use crate::table::{LogIter, RefIter, WriteOptions};
use crate::transaction::{Committed, Expected, Identity, LogEdit, NewValue, RefEdit};
use crate::{Error, Result};

/// What the mount needs from a repository: a reader and a writer over its stack, and how
/// generated reflog entries are written.
pub struct Opened {
    pub reader: Box<dyn RefSource>,
    pub writer: Option<Box<dyn RefWriter>>,
    pub log: LogSettings,
}

/// The tables the mount itself wrote (batches and compactions), shared by the writer
/// (which records them) and the reader (which tells its own changes from another
/// writer's: only the latter need a kernel invalidation pass).
#[derive(Debug, Default)]
pub struct Own {
    /// Names of the mount's own tables.
    pub names: HashSet<String>,
    /// The update index of the table being committed right now: a table whose name
    /// starts with it is the mount's own even before its name is recorded (the writer
    /// holds `tables.list.lock`, so no other writer can add a table at that index).
    pub inflight: Option<u64>,
    /// A batch commit by the mount is under way or done but not yet acknowledged by the
    /// batcher (which, holding the state lock, reloads the reader and drops the batch's
    /// pending entries in one step). Meanwhile the reader does not reload: it would show
    /// the batch twice — once from the stack, once from the pending layer.
    pub hold: bool,
}

impl Own {
    /// Whether `table` is one of the mount's own tables.
    pub fn contains(&self, table: &str) -> bool {
        self.names.contains(table)
            || self.inflight.is_some_and(|ui| {
                table
                    .strip_prefix("0x")
                    .and_then(|t| t.get(..12))
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    == Some(ui)
            })
    }
}

/// The shared [`Own`] record (locked only for moments, never across a commit).
pub type OwnTables = Arc<Mutex<Own>>;

/// How long a batch waits for a `tables.list.lock` held by another writer (git holds it
/// for milliseconds) before its edits fail.
const LOCK_WAIT: Duration = Duration::from_secs(3);
/// A `tables.list.lock` older than this is not a live commit (a killed git or mount
/// left it): the batch fails at once.
const LOCK_STALE_AFTER: Duration = Duration::from_secs(2);

/// Test-only: `RTFS_TEST_COMMIT_DELAY_MS` (read once when the mount opens the stack)
/// makes every batch commit sleep that long while holding `tables.list.lock`, to
/// measure that requests never wait for a commit. Read only in a build with the
/// `test-hooks` feature (never a release build): elsewhere the variable is ignored.
fn commit_delay_from_env() -> Option<Duration> {
    if !cfg!(feature = "test-hooks") {
        return None;
    }
    std::env::var("RTFS_TEST_COMMIT_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
}

/// Age of the lock file at `path` (by its mtime), if it can be told.
pub fn lock_age(path: &Path) -> Option<Duration> {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
}

/// A stack as a [`RefSource`] (the reader) or a [`RefWriter`] (the writer).
pub struct StackSource {
    stack: Stack,
    log_it: Option<(u64, MergedLogIter)>,
    log: LogSettings,
    own: OwnTables,
    external: bool,
    commit_delay: Option<Duration>,
    times: RefTimes,
    /// Reflog seeks made for [`RefSource::newest_log`] (tests: a ref's time costs none).
    log_seeks: u64,
}

impl StackSource {
    /// Wraps an open stack.
    pub fn new(stack: Stack, log: LogSettings, own: OwnTables) -> StackSource {
        StackSource {
            stack,
            log_it: None,
            log,
            own,
            external: true,
            commit_delay: None,
            times: RefTimes::default(),
            log_seeks: 0,
        }
    }

    fn record_own(&self, before: &[String]) {
        let mut own = self.own.lock().unwrap_or_else(|p| p.into_inner());
        for n in self.stack.table_names() {
            if !before.contains(n) {
                own.names.insert(n.clone());
            }
        }
        // Forget names that are gone (compacted away) to stay small.
        own.names.retain(|n| self.stack.table_names().contains(n));
    }

    /// Reflog seeks made so far, and log sections read to learn change times.
    pub fn time_costs(&self) -> (u64, u64) {
        (self.log_seeks, self.times.scans)
    }

    /// The underlying stack.
    pub fn stack(&mut self) -> &mut Stack {
        &mut self.stack
    }

    fn try_commit(&mut self, edits: &[&BatchEdit]) -> Result<()> {
        let identity = Identity::now(self.log.name.clone(), self.log.email.clone());
        let log_all = self.log.log_all;
        // Deletions of symrefs that never resolve, found before the transaction borrows
        // the stack (see below).
        let mut looping = Vec::new();
        for e in edits {
            if matches!(e.new, Some(RefValue::Deletion))
                && matches!(e.expected(), Expected::Symref(_))
                && symref_loops(&mut self.stack, &e.name)?
            {
                looping.push(e.name.as_slice());
            }
        }
        let mut tx = self.stack.transaction();
        tx.identity(identity).log_all_ref_updates(log_all);
        for e in edits {
            match &e.new {
                Some(new) => {
                    let mut expected = e.expected();
                    if looping.contains(&e.name.as_slice()) {
                        // A symref that never resolves (t3200's `git branch -d self`: it
                        // points to itself): a transaction checks an expected target by
                        // resolving the chain, and git 2.47 refuses the deletion ("error
                        // reading reference") that the files backend git 2.39 speaks makes
                        // by removing the file. It must only still exist.
                        expected = Expected::MustExist;
                    }
                    let mut re = RefEdit {
                        name: e.name.clone(),
                        new: Some(new_value(new)),
                        expected,
                        no_deref: true,
                        files_reflog: true,
                        ..RefEdit::default()
                    };
                    if !e.replace_logs {
                        re.log = e.logs.first().cloned();
                    }
                    tx.edit(re);
                    if e.replace_logs || e.delete_log {
                        tx.log_edit(rewrite(e));
                    }
                }
                None if e.replace_logs || e.delete_log => {
                    tx.log_edit(rewrite(e));
                }
                None => {
                    for l in &e.logs {
                        tx.log_edit(LogEdit::Append {
                            refname: e.name.clone(),
                            entry: l.clone(),
                        });
                    }
                }
            }
            if e.creates_empty_log() {
                tx.log_edit(LogEdit::Create {
                    refname: e.name.clone(),
                });
            }
        }
        let prepared = tx.prepare()?;
        let ui = prepared.update_index();
        {
            let mut own = self.own.lock().unwrap_or_else(|p| p.into_inner());
            own.inflight = Some(ui);
            own.hold = true;
        }
        if let Some(d) = self.commit_delay {
            std::thread::sleep(d);
        }
        let committed = prepared.commit(&mut self.stack);
        let mut own = self.own.lock().unwrap_or_else(|p| p.into_inner());
        own.inflight = None;
        if let Ok(Committed { table: Some(t), .. }) = &committed {
            own.names.insert(t.clone());
        }
        committed.map(|_| ())
    }

    /// [`Self::try_commit`], waiting while another writer holds `tables.list.lock` for a
    /// live commit (a short wait); a lock older than [`LOCK_STALE_AFTER`], or still held
    /// after [`LOCK_WAIT`], is given up on: `Error::Lock` (the batcher logs its age).
    fn try_commit_waiting(&mut self, edits: &[&BatchEdit]) -> Result<()> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match self.try_commit(edits) {
                Err(Error::Lock(path)) => {
                    let stale = lock_age(&path).is_some_and(|a| a >= LOCK_STALE_AFTER);
                    if stale || start.elapsed() >= LOCK_WAIT {
                        return Err(Error::Lock(path));
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }
}

/// Whether the symref `name` is still a symref after git's `SYMREF_MAXDEPTH` reads (a
/// cycle, or too long a chain).
fn symref_loops(stack: &mut Stack, name: &[u8]) -> Result<bool> {
    let mut cur = name.to_vec();
    for _ in 0..crate::refname::SYMREF_MAXDEPTH {
        match stack.read_ref(&cur)?.map(|r| r.value) {
            Some(RefValue::Symref(t)) => cur = t,
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// The log edit of a reflog rewrite or deletion.
fn rewrite(e: &BatchEdit) -> LogEdit {
    if e.delete_log {
        LogEdit::Delete {
            refname: e.name.clone(),
        }
    } else {
        LogEdit::Rewrite {
            refname: e.name.clone(),
            entries: e.logs.clone(),
        }
    }
}

fn new_value(v: &RefValue) -> NewValue {
    match v {
        RefValue::Deletion => NewValue::Delete,
        RefValue::Val1(id) => NewValue::Oid(*id),
        RefValue::Val2 { value, peeled } => NewValue::Peeled {
            value: *value,
            peeled: *peeled,
        },
        RefValue::Symref(t) => NewValue::Symref(t.clone()),
    }
}

impl RefSource for StackSource {
    fn hash_kind(&self) -> HashKind {
        self.stack.options().hash
    }

    fn reload(&mut self) -> Result<bool> {
        if self.own.lock().unwrap_or_else(|p| p.into_inner()).hold {
            // The mount's own batch is landing: its pending entries still show it.
            return Ok(false);
        }
        let before = self.stack.table_names().to_vec();
        let seen = self.stack.next_update_index();
        let changed = self.stack.reload()?;
        if changed {
            // Another writer's change is a table of an update index not seen before
            // that the mount did not write. A compaction (the mount's own, seen before
            // its batcher records it; or git's of older tables) writes no new index and
            // changes nothing shown.
            let own = self.own.lock().unwrap_or_else(|p| p.into_inner());
            let names = self.stack.table_names().iter();
            self.external = names.zip(self.stack.tables()).any(|(n, t)| {
                !before.contains(n) && !own.contains(n) && t.max_update_index() >= seen
            });
        }
        Ok(changed)
    }

    fn last_change_external(&self) -> bool {
        self.external
    }

    fn acknowledge_own_commit(&mut self) {
        self.own.lock().unwrap_or_else(|p| p.into_inner()).hold = false;
    }

    fn generation(&self) -> u64 {
        self.stack.generation()
    }

    fn first_ref_at_or_after(&mut self, key: &[u8], out: &mut RefRecord) -> Result<bool> {
        let found = self.stack.with_cached_iter(|it| {
            it.seek(key)?;
            while let Some(r) = it.next()? {
                if r.is_deletion() {
                    continue;
                }
                crate::merged::copy_ref(out, r);
                return Ok(true);
            }
            Ok(false)
        })?;
        if found && out.name == key && !matches!(out.value, RefValue::Symref(_)) {
            let gen = self.stack.generation();
            self.times.note_lookup(gen, key, out.update_index);
        } else {
            self.times.clear_lookup();
        }
        Ok(found)
    }

    fn scan_refs(&mut self, start: &[u8], visit: Visit<'_>) -> Result<()> {
        let mut key = start.to_vec();
        self.stack.with_cached_iter(|it| {
            it.seek(&key)?;
            loop {
                let Some(r) = it.next()? else { return Ok(()) };
                if r.is_deletion() {
                    continue;
                }
                match visit(r, &mut key) {
                    Step::Next => {}
                    Step::Stop => return Ok(()),
                    Step::Seek => it.seek(&key)?,
                }
            }
        })
    }

    fn first_log_at_or_after(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let gen = self.stack.generation();
        let it = match &mut self.log_it {
            Some((g, it)) if *g == gen => it,
            slot => &mut slot.insert((gen, self.stack.log_iter())).1,
        };
        it.seek(key, u64::MAX)?;
        while let Some(l) = it.next()? {
            if l.deleted {
                continue;
            }
            out.clear();
            out.extend_from_slice(&l.refname);
            return Ok(true);
        }
        Ok(false)
    }

    fn read_log(&mut self, name: &[u8], out: &mut Vec<LogRecord>) -> Result<()> {
        *out = self.stack.read_log(name)?;
        Ok(())
    }

    fn ref_time(&mut self, name: &[u8]) -> Result<Option<u64>> {
        if let Some(u) = self.times.looked_up(self.stack.generation(), name) {
            if let Some(t) = self.times.index_time(self.stack.tables(), u)? {
                return Ok(Some(t));
            }
        }
        Ok(self.newest_log(name)?.map(|(_, t)| t))
    }

    fn newest_log(&mut self, name: &[u8]) -> Result<Option<(u64, u64)>> {
        self.log_seeks += 1;
        let gen = self.stack.generation();
        let it = match &mut self.log_it {
            Some((g, it)) if *g == gen => it,
            slot => &mut slot.insert((gen, self.stack.log_iter())).1,
        };
        it.seek(name, u64::MAX)?;
        while let Some(l) = it.next()? {
            if l.refname != name {
                break;
            }
            if !l.deleted && !crate::stack::is_existence_marker(l) {
                return Ok(Some((l.update_index, l.time)));
            }
        }
        Ok(None)
    }

    fn max_update_index(&self) -> u64 {
        self.stack.next_update_index().saturating_sub(1)
    }
}

impl RefWriter for StackSource {
    fn commit(&mut self, edits: &[BatchEdit]) -> Result<CommitOutcome> {
        self.stack.reload()?;
        let mut outcome = CommitOutcome::default();
        let mut todo: Vec<&BatchEdit> = edits.iter().collect();
        // The whole batch as one transaction; an edit whose expected old value no longer
        // holds (a concurrent writer won) is reported and left out, the rest retried.
        loop {
            if todo.is_empty() {
                return Ok(outcome);
            }
            match self.try_commit_waiting(&todo) {
                Ok(()) => {
                    outcome.applied += todo.len();
                    return Ok(outcome);
                }
                Err(Error::Conflict {
                    refname,
                    expected,
                    found,
                    ..
                }) if todo.iter().any(|e| e.name == refname) => {
                    todo.retain(|e| e.name != refname);
                    outcome.conflicts.push(Conflict {
                        name: refname,
                        expected: *expected,
                        found: found.map(|v| *v),
                    });
                }
                // A restriction of reftable transactions that a files backend does not
                // have (HEAD and its referent, or `a` and `a/b`, in one transaction):
                // split the batch, one transaction per edit, in order.
                Err(Error::Transaction(_)) if todo.len() > 1 => break,
                Err(Error::Transaction(msg)) => {
                    outcome
                        .failed
                        .extend(todo.iter().map(|e| (e.name.clone(), msg.clone())));
                    return Ok(outcome);
                }
                Err(e) => return Err(e),
            }
        }
        for (k, e) in todo.iter().enumerate() {
            match self.try_commit_waiting(&[e]) {
                Ok(()) => outcome.applied += 1,
                Err(Error::Conflict {
                    expected, found, ..
                }) => {
                    outcome.conflicts.push(Conflict {
                        name: e.name.clone(),
                        expected: *expected,
                        found: found.map(|v| *v),
                    });
                }
                Err(Error::Transaction(msg)) => outcome.failed.push((e.name.clone(), msg)),
                Err(err) => {
                    // Nothing more can be written now: this edit and the later ones fail.
                    let msg = err.to_string();
                    outcome
                        .failed
                        .extend(todo.iter().skip(k).map(|e| (e.name.clone(), msg.clone())));
                    return Ok(outcome);
                }
            }
        }
        Ok(outcome)
    }

    fn last_table(&self) -> Option<(u64, String)> {
        let name = self.stack.table_names().last()?.clone();
        let ui = self.stack.tables().last()?.max_update_index();
        Some((ui, name))
    }

    fn fsync_count(&self) -> u64 {
        let s = self.stack.stats();
        s.file_fsyncs + s.dir_fsyncs
    }

    fn maintenance_due(&self) -> Option<bool> {
        if !self.stack.compaction_required() {
            return None;
        }
        Some(self.stack.table_names().len() >= URGENT_COMPACTION_TABLES)
    }

    fn maintain(&mut self) -> Result<()> {
        self.stack.reload()?;
        let before = self.stack.table_names().to_vec();
        let r = self.stack.auto_compact().map(|_| ());
        self.record_own(&before);
        r
    }
}

/// With this many tables the batcher compacts right after a batch instead of waiting for
/// an idle moment.
const URGENT_COMPACTION_TABLES: usize = 16;

/// Stack options from the repository's settings.
fn stack_options(repo: &Repo, opts: &MountOptions) -> StackOptions {
    let s = &repo.settings;
    StackOptions {
        hash: s.hash,
        write: WriteOptions {
            block_size: s.block_size,
            restart_interval: s.restart_interval,
            skip_index_objects: !s.index_objects,
            hash: s.hash,
            ..WriteOptions::default()
        },
        lock_timeout: s.lock_timeout,
        fsync: opts.fsync,
        // The mount compacts from its batcher when idle (or when tables pile up), so that a
        // batch costs one fsync round and nothing more.
        auto_compact: false,
        compaction_factor: s.geometric_factor,
        default_permissions: Some(s.default_permissions),
        // The mount's one cache, shared by all the stacks it opens.
        block_cache: opts.block_cache.clone(),
    }
}

/// Opens the stack of `gitdir` twice (a reader for requests, a writer for the batcher).
pub fn open(gitdir: &Path, opts: &MountOptions) -> Result<Opened> {
    let repo = Repo::open(gitdir)?;
    repo.require_reftable()?;
    // The caller's spelling of the directory, not the canonical one: `mount --over` passes
    // `/proc/self/fd/N` (the real `.git` under the mount), whose canonical path leads
    // through the mount itself.
    let dir = if repo.worktree_reftable_dir().is_none() {
        gitdir.join("reftable")
    } else {
        repo.reftable_dir()
    };
    open_dir(&repo, &dir, opts)
}

/// Opens the stack in `dir` (also a linked worktree's own stack,
/// `GITDIR/worktrees/<id>/reftable`) with the settings of `repo` (read before mounting:
/// over `.git`, the config read through the mount has no `extensions.refStorage`).
pub fn open_dir(repo: &Repo, dir: &Path, opts: &MountOptions) -> Result<Opened> {
    repo.require_reftable()?;
    let id = repo.committer()?;
    let log = LogSettings {
        log_all: repo.settings.log_all_ref_updates,
        name: id.name,
        email: id.email,
    };
    let sopts = stack_options(repo, opts);
    let own: OwnTables = Arc::default();
    let reader = StackSource::new(Stack::open(dir, sopts.clone())?, log.clone(), own.clone());
    // (`auto_compact` only matters for the writer; the reader never commits.)
    let writer: Option<Box<dyn RefWriter>> = if opts.read_only {
        None
    } else {
        let mut stack = Stack::open(dir, sopts)?;
        // Leftovers of killed writers that are proven garbage go; the rest is reported.
        match stack.clean_orphans(None) {
            Ok(report) => {
                for (path, why) in &report.removed {
                    log::info!("reftablefs: removed {}: {why}", path.display());
                }
                for (path, why) in &report.kept {
                    log::info!("reftablefs: kept {}: {why}", path.display());
                }
            }
            Err(e) => log::warn!("reftablefs: leftovers of killed writers not checked: {e}"),
        }
        let mut w = StackSource::new(stack, log.clone(), own);
        w.commit_delay = commit_delay_from_env();
        Some(Box::new(w))
    };
    Ok(Opened {
        reader: Box::new(reader),
        writer,
        log,
    })
}
