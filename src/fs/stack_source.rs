//! The real [`RefSource`]: a reftable stack opened from a git directory. Point reads and
//! range reads go through the stack's one cached reseekable merged iterator; reflog
//! existence through one cached log iterator (rebuilt when the table set changes); a
//! batch is one transaction (one table, one fsync round) through the stack's one writer.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::format::{HashKind, LogRecord, RefRecord, RefValue};
use crate::fs::source::{BatchEdit, CommitOutcome, RefSource, Step};
use crate::fs::write::LogSettings;
use crate::fs::MountOptions;
use crate::merged::MergedLogIter;
use crate::repo::Repo;
use crate::stack::{Stack, StackOptions};
use crate::table::{LogIter, RefIter, WriteOptions};
use crate::transaction::{Expected, Identity, LogAllRefUpdates, LogEdit, NewValue, RefEdit};
use crate::{Error, Result};

/// What the mount needs from a repository: a reader and a writer over its stack, and how
/// generated reflog entries are written.
pub struct Opened {
    pub reader: Box<dyn RefSource>,
    pub writer: Option<Box<dyn RefSource>>,
    pub log: LogSettings,
}

/// Names of the tables the mount itself wrote (batches and compactions), shared by the
/// writer (which records them) and the reader (which tells its own changes from another
/// writer's: only the latter need a kernel invalidation pass).
pub type OwnTables = Arc<Mutex<HashSet<String>>>;

/// A stack as a [`RefSource`].
pub struct StackSource {
    stack: Stack,
    log_it: Option<(u64, MergedLogIter)>,
    log: LogSettings,
    own: OwnTables,
    external: bool,
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
        }
    }

    fn record_own(&self, before: &[String]) {
        let mut own = self.own.lock().unwrap_or_else(|p| p.into_inner());
        for n in self.stack.table_names() {
            if !before.contains(n) {
                own.insert(n.clone());
            }
        }
        // Forget names that are gone (compacted away) to stay small.
        own.retain(|n| self.stack.table_names().contains(n));
    }

    /// The underlying stack.
    pub fn stack(&mut self) -> &mut Stack {
        &mut self.stack
    }

    fn log_all(&self) -> LogAllRefUpdates {
        match self.log.log_all {
            crate::repo::LogAllRefUpdates::False => LogAllRefUpdates::False,
            crate::repo::LogAllRefUpdates::True => LogAllRefUpdates::True,
            crate::repo::LogAllRefUpdates::Always => LogAllRefUpdates::Always,
        }
    }

    fn try_commit(&mut self, edits: &[&BatchEdit]) -> Result<()> {
        let identity = Identity::now(self.log.name.clone(), self.log.email.clone());
        let log_all = self.log_all();
        let mut tx = self.stack.transaction();
        tx.identity(identity).log_all_ref_updates(log_all);
        for e in edits {
            match &e.new {
                Some(new) => {
                    let mut re = RefEdit {
                        name: e.name.clone(),
                        new: Some(new_value(new)),
                        expected: expected(e.expected_old.as_ref()),
                        no_deref: true,
                        message: Some(b"reftablefs: updated through the mount".to_vec()),
                        ..RefEdit::default()
                    };
                    if !e.replace_logs {
                        re.log = e.logs.first().cloned();
                    }
                    tx.edit(re);
                    if e.replace_logs {
                        tx.log_edit(rewrite(e));
                    }
                }
                None if e.replace_logs => {
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
        }
        // The set of own tables stays locked from before the new `tables.list` appears
        // until the new table's name is in it: a reader that reloads in between waits
        // for it instead of taking the mount's own table for another writer's (which
        // costs a kernel invalidation pass over every known inode — per batch, an
        // O(known inodes) cost that grew with every ref written through the mount).
        let own = self.own.clone();
        let mut own = own.lock().unwrap_or_else(|p| p.into_inner());
        let committed = tx.commit()?;
        if let Some(t) = committed.table {
            own.insert(t);
        }
        Ok(())
    }
}

fn rewrite(e: &BatchEdit) -> LogEdit {
    if e.logs.is_empty() {
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

fn expected(v: Option<&RefValue>) -> Expected {
    match v {
        None | Some(RefValue::Deletion) => Expected::MustNotExist,
        Some(RefValue::Val1(id)) | Some(RefValue::Val2 { value: id, .. }) => Expected::Oid(*id),
        Some(RefValue::Symref(t)) => Expected::Symref(t.clone()),
    }
}

impl RefSource for StackSource {
    fn hash_kind(&self) -> HashKind {
        self.stack.options().hash
    }

    fn reload(&mut self) -> Result<bool> {
        let before = self.stack.table_names().to_vec();
        let changed = self.stack.reload()?;
        if changed {
            let own = self.own.lock().unwrap_or_else(|p| p.into_inner());
            self.external = self
                .stack
                .table_names()
                .iter()
                .any(|n| !before.contains(n) && !own.contains(n));
        }
        Ok(changed)
    }

    fn last_change_external(&self) -> bool {
        self.external
    }

    fn generation(&self) -> u64 {
        self.stack.generation()
    }

    fn first_ref_at_or_after(&mut self, key: &[u8], out: &mut RefRecord) -> Result<bool> {
        self.stack.with_cached_iter(|it| {
            it.seek(key)?;
            while let Some(r) = it.next()? {
                if r.is_deletion() {
                    continue;
                }
                crate::merged::copy_ref(out, r);
                return Ok(true);
            }
            Ok(false)
        })
    }

    fn scan_refs(
        &mut self,
        start: &[u8],
        visit: &mut dyn FnMut(&RefRecord, &mut Vec<u8>) -> Step,
    ) -> Result<()> {
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

    fn commit(&mut self, edits: &[BatchEdit]) -> Result<CommitOutcome> {
        self.stack.reload()?;
        let mut outcome = CommitOutcome::default();
        let mut skip: HashSet<&[u8]> = HashSet::new();
        loop {
            let todo: Vec<&BatchEdit> = edits
                .iter()
                .filter(|e| !skip.contains(e.name.as_slice()))
                .collect();
            if todo.is_empty() {
                return Ok(outcome);
            }
            match self.try_commit(&todo) {
                Ok(()) => {
                    outcome.applied = todo.len();
                    return Ok(outcome);
                }
                Err(Error::Transaction(msg)) => {
                    // Find the edits whose expected old value no longer holds (a
                    // concurrent writer won): report them, write the others.
                    self.stack.reload()?;
                    let mut found = false;
                    for e in &todo {
                        if e.new.is_none() {
                            continue;
                        }
                        let cur = self.stack.read_ref(&e.name)?.map(|r| r.value);
                        if cur != e.expected_old {
                            outcome.conflicts.push((e.name.clone(), cur));
                            skip.insert(e.name.as_slice());
                            found = true;
                        }
                    }
                    if !found {
                        return Err(Error::Transaction(msg));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn fsync_count(&self) -> u64 {
        let s = self.stack.stats();
        s.file_fsyncs + s.dir_fsyncs
    }

    fn logs_head_with_referent(&self) -> bool {
        true
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
fn stack_options(repo: &Repo, fsync: bool) -> StackOptions {
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
        fsync,
        // The mount compacts from its batcher when idle (or when tables pile up), so that a
        // batch costs one fsync round and nothing more.
        auto_compact: false,
        compaction_factor: s.geometric_factor,
        default_permissions: Some(s.default_permissions),
    }
}

/// Opens the stack of `gitdir` twice (a reader for requests, a writer for the batcher).
pub fn open(gitdir: &Path, opts: &MountOptions) -> Result<Opened> {
    let repo = Repo::open(gitdir)?;
    repo.require_reftable()?;
    let dir = repo.reftable_dir();
    let id = repo.committer()?;
    let log = LogSettings {
        log_all: repo.settings.log_all_ref_updates,
        name: id.name,
        email: id.email,
    };
    let sopts = stack_options(&repo, opts.fsync);
    let own: OwnTables = Arc::default();
    let reader = StackSource::new(Stack::open(&dir, sopts.clone())?, log.clone(), own.clone());
    // (`auto_compact` only matters for the writer; the reader never commits.)
    let writer: Option<Box<dyn RefSource>> = if opts.read_only {
        None
    } else {
        Some(Box::new(StackSource::new(
            Stack::open(&dir, sopts)?,
            log.clone(),
            own,
        )))
    };
    Ok(Opened {
        reader: Box::new(reader),
        writer,
        log,
    })
}
