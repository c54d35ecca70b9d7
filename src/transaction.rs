//! Ref transactions: a batch of edits validated as a whole under `tables.list.lock` and
//! written as one table, or not at all (git's `refs/reftable-backend.c` prepare/commit).
//!
//! What git 2.47 does, and so what this does:
//! * names checked with [`crate::refname::check_for_update`]; the same ref twice is
//!   "multiple updates for ref '…' not allowed";
//! * an update through a symref (unless `no_deref`) is split: the referent gets the
//!   update, the symref a log-only entry; an update of HEAD's referent also gets a
//!   log-only HEAD entry at the same update index;
//! * expected old values are checked against the stack under the lock;
//! * a ref that does not exist yet is checked for D/F conflicts against the stack and
//!   the batch, with the stack's one cached iterator reseeked for every name;
//! * a no-op update is skipped with its reflog entry; deleting a missing ref writes
//!   nothing; deleting a ref writes a tombstone plus log tombstones for its whole reflog,
//!   except a symref, whose reflog gets an entry `old → 0` instead;
//! * writing a symref logs (when the ref logs) the id it resolved to → the id its new
//!   target resolves to now, and nothing when the target does not resolve; the HEAD
//!   entry for a symref written on HEAD's referent logs `old → 0`;
//! * reflog messages are normalised (whitespace runs → one space, trimmed), truncated to
//!   `block_size / 2`, and end in one `\n`; callers may supply the complete log record
//!   instead (the mount does, for reflog lines written by a files-backend git);
//! * one fsync round (table, `tables.list`, directory) per transaction, then
//!   auto-compaction.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use crate::format::{LogRecord, ObjectId, RefRecord, RefValue};
use crate::refname::{check_for_update, check_refname_format, RefnameFlags, SYMREF_MAXDEPTH};
use crate::stack::{ref_value_id, Stack};
use crate::table::RefIter;
use crate::{Error, Result};

/// The value a ref edit gives the ref.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NewValue {
    /// One object id (the null id means delete).
    Oid(ObjectId),
    /// An annotated tag and the object it peels to.
    Peeled { value: ObjectId, peeled: ObjectId },
    /// A symbolic ref to the given target. As git: without `no_deref`, an edit of a ref
    /// that is a symref now makes its referent the new symref (see [`RefEdit::symref`]).
    Symref(Vec<u8>),
    /// Delete the ref.
    Delete,
}

/// What the ref must look like before the edit.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Expected {
    /// No check.
    #[default]
    Any,
    /// The ref must not exist.
    MustNotExist,
    /// The ref must exist (any value).
    MustExist,
    /// The ref (after dereferencing) must have this id.
    Oid(ObjectId),
    /// The ref itself must be a symref to this target.
    Symref(Vec<u8>),
}

/// One ref edit of a transaction.
#[derive(Clone, Debug, Default)]
pub struct RefEdit {
    /// The ref name as given (it may be a symref that gets dereferenced).
    pub name: Vec<u8>,
    /// The new value; `None` only verifies [`expected`](Self::expected).
    pub new: Option<NewValue>,
    /// The expected current value.
    pub expected: Expected,
    /// Update a symref itself instead of its referent.
    pub no_deref: bool,
    /// The reflog message (normalised as git does).
    pub message: Option<Vec<u8>>,
    /// A complete log record replacing the generated one (`refname` and `update_index`
    /// are ignored). Written whatever `core.logAllRefUpdates` says.
    pub log: Option<LogRecord>,
    /// Write a reflog entry even if the ref would not get one (`REF_FORCE_CREATE_REFLOG`).
    pub force_create_reflog: bool,
    /// Write no reflog entry for this ref, even if its reflog exists
    /// (`REF_SKIP_CREATE_REFLOG`).
    pub skip_create_reflog: bool,
    /// Skip ref-name checks (`REF_SKIP_REFNAME_VERIFICATION`).
    pub skip_refname_verification: bool,
    /// Files-backend reflog semantics (the mount replaying a files-backend client): the
    /// only log record written for this edit is [`log`](Self::log) — no generated entry,
    /// no HEAD entry for an update of HEAD's referent — and deleting the ref keeps its
    /// reflog (in the files backend a reflog goes only when `logs/…` is removed, which
    /// the mount sends as a [`LogEdit::Delete`]).
    pub files_reflog: bool,
}

impl RefEdit {
    /// Sets `name` to `id` whatever its current value.
    pub fn update(name: impl Into<Vec<u8>>, id: ObjectId) -> RefEdit {
        RefEdit {
            name: name.into(),
            new: Some(NewValue::Oid(id)),
            ..RefEdit::default()
        }
    }
    /// Creates `name` with `id`; fails if it exists.
    pub fn create(name: impl Into<Vec<u8>>, id: ObjectId) -> RefEdit {
        RefEdit::update(name, id).expect(Expected::MustNotExist)
    }
    /// Deletes `name`.
    pub fn delete(name: impl Into<Vec<u8>>) -> RefEdit {
        RefEdit {
            name: name.into(),
            new: Some(NewValue::Delete),
            ..RefEdit::default()
        }
    }
    /// Only checks that `name` matches `expected`.
    pub fn verify(name: impl Into<Vec<u8>>, expected: Expected) -> RefEdit {
        RefEdit {
            name: name.into(),
            expected,
            ..RefEdit::default()
        }
    }
    /// Makes `name` a symref to `target` (the symref itself is written).
    pub fn symref(name: impl Into<Vec<u8>>, target: impl Into<Vec<u8>>) -> RefEdit {
        RefEdit {
            name: name.into(),
            new: Some(NewValue::Symref(target.into())),
            no_deref: true,
            ..RefEdit::default()
        }
    }
    /// Sets the expected old value.
    pub fn expect(mut self, expected: Expected) -> RefEdit {
        self.expected = expected;
        self
    }
    /// Sets the reflog message.
    pub fn message(mut self, msg: impl Into<Vec<u8>>) -> RefEdit {
        self.message = Some(msg.into());
        self
    }
    /// Updates a symref itself rather than its referent.
    pub fn no_deref(mut self) -> RefEdit {
        self.no_deref = true;
        self
    }
    /// Supplies the complete reflog record.
    pub fn log_record(mut self, log: LogRecord) -> RefEdit {
        self.log = Some(log);
        self
    }
}

/// A log-only edit.
#[derive(Clone, Debug)]
pub enum LogEdit {
    /// Append one entry (written at the transaction's update index).
    Append { refname: Vec<u8>, entry: LogRecord },
    /// Replace the whole reflog with `entries` (oldest first): tombstones for the old
    /// entries, then the new ones (a files-backend reflog rewrite, reflog expiry).
    Rewrite {
        refname: Vec<u8>,
        entries: Vec<LogRecord>,
    },
    /// Start an empty reflog (git's existence marker) unless one exists.
    Create { refname: Vec<u8> },
    /// Delete the reflog: tombstones for every entry.
    Delete { refname: Vec<u8> },
}

/// `core.logAllRefUpdates`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogAllRefUpdates {
    /// Only refs whose reflog exists.
    False,
    /// HEAD, `refs/heads/`, `refs/remotes/`, `refs/notes/`, and refs with a reflog
    /// (git's default for non-bare repositories).
    #[default]
    True,
    /// Every ref.
    Always,
}

impl LogAllRefUpdates {
    /// Whether an update of `refname` creates a reflog when none exists yet
    /// (git's `should_autocreate_reflog`).
    pub fn autocreates(self, refname: &[u8]) -> bool {
        match self {
            LogAllRefUpdates::Always => true,
            LogAllRefUpdates::False => false,
            LogAllRefUpdates::True => {
                refname == b"HEAD"
                    || refname.starts_with(b"refs/heads/")
                    || refname.starts_with(b"refs/remotes/")
                    || refname.starts_with(b"refs/notes/")
            }
        }
    }
}

/// The committer identity written into generated reflog entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub name: Vec<u8>,
    /// Without `<` `>`.
    pub email: Vec<u8>,
    /// Seconds since the epoch.
    pub time: u64,
    /// ±HHMM as a decimal integer (-0700 is -700).
    pub tz_offset: i16,
}

impl Identity {
    /// An identity at the current time in the local time zone.
    pub fn now(name: impl Into<Vec<u8>>, email: impl Into<Vec<u8>>) -> Identity {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Identity {
            name: name.into(),
            email: email.into(),
            time,
            tz_offset: local_tz_hhmm(time),
        }
    }
}

/// The local UTC offset at `time` as git's ±HHMM integer.
pub fn local_tz_hhmm(time: u64) -> i16 {
    let t = time as libc::time_t;
    // SAFETY: localtime_r only writes into the zeroed `tm` we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the duration of the call.
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if !ok {
        return 0;
    }
    let minutes = tm.tm_gmtoff / 60;
    let (sign, m) = if minutes < 0 {
        (-1, -minutes)
    } else {
        (1, minutes)
    };
    (sign * ((m / 60) * 100 + m % 60)) as i16
}

/// git's `copy_reflog_msg`: runs of whitespace become one space, leading and trailing
/// whitespace go away.
pub fn normalize_reflog_message(msg: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let mut was_space = true;
    for &c in msg {
        let space = matches!(c, b' ' | b'\t' | b'\n' | b'\r');
        if was_space && space {
            continue;
        }
        was_space = space;
        out.push(if space { b' ' } else { c });
    }
    while out.last() == Some(&b' ') {
        out.pop();
    }
}

/// What a committed transaction did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The update index of the new table (the stack's next index when nothing was
    /// written).
    pub update_index: u64,
    /// The new table's file name; `None` when every edit was a no-op.
    pub table: Option<String>,
}

/// A batch of edits on one stack. Build it with [`Stack::transaction`].
pub struct Transaction<'a> {
    stack: &'a mut Stack,
    edits: Vec<RefEdit>,
    log_edits: Vec<LogEdit>,
    identity: Identity,
    log_all: LogAllRefUpdates,
}

impl Stack {
    /// Starts a transaction (nothing is locked until [`Transaction::commit`]).
    pub fn transaction(&mut self) -> Transaction<'_> {
        Transaction {
            stack: self,
            edits: Vec::new(),
            log_edits: Vec::new(),
            identity: Identity::default(),
            log_all: LogAllRefUpdates::True,
        }
    }
}

/// What following a symref chain found.
enum Resolution {
    Id(ObjectId),
    /// A ref of the chain does not exist (a dangling symref).
    Missing,
    /// Still a symref after [`SYMREF_MAXDEPTH`] reads (a cycle, or too long a chain).
    TooDeep,
}

/// One update being prepared (an edit, or one derived from it).
#[derive(Debug)]
struct Upd {
    name: Vec<u8>,
    edit: usize,
    log_only: bool,
    via_head: bool,
    /// The log-only HEAD entry added for an update of HEAD's referent (git gives it the
    /// edit's new id, which is null for a symref edit).
    head_copy: bool,
    /// The ref is a symref now (git's `REF_ISSYMREF` in `u->type`).
    cur_symref: bool,
    /// Expectation applies (cleared on a symref split).
    check_old: bool,
    /// The id the ref (resolved) has now; null when missing or unresolvable.
    cur_oid: ObjectId,
    queued: bool,
}

fn tx_err(msg: String) -> Error {
    Error::Transaction(msg)
}

/// An expected old value that does not hold: git's message, typed with the ref's name.
fn conflict(name: &[u8], message: String) -> Error {
    Error::Conflict {
        refname: name.to_vec(),
        message,
    }
}

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// Where a log record of the new table comes from.
enum LogSrc {
    /// Generated (or caller-supplied) entry of `updates[i]`.
    Update(usize),
    /// A tombstone for `(updates[i].name, ui)`.
    Tombstone(usize, u64),
    /// A record from a [`LogEdit`], complete with refname and update index.
    Extra(LogRecord),
    /// git's existence marker at this update index, written with a NULL message (empty,
    /// not normalised to `"\n"`) as git's `create_reflog` and reflog expiry do.
    Marker(Vec<u8>, u64),
}

impl<'a> Transaction<'a> {
    /// Adds a ref edit.
    pub fn edit(&mut self, e: RefEdit) -> &mut Self {
        self.edits.push(e);
        self
    }
    /// Adds a log-only edit.
    pub fn log_edit(&mut self, e: LogEdit) -> &mut Self {
        self.log_edits.push(e);
        self
    }
    /// Sets the identity of generated reflog entries.
    pub fn identity(&mut self, id: Identity) -> &mut Self {
        self.identity = id;
        self
    }
    /// Sets `core.logAllRefUpdates`.
    pub fn log_all_ref_updates(&mut self, v: LogAllRefUpdates) -> &mut Self {
        self.log_all = v;
        self
    }
    /// Number of ref edits so far.
    pub fn len(&self) -> usize {
        self.edits.len()
    }
    /// Whether no edit was added.
    pub fn is_empty(&self) -> bool {
        self.edits.is_empty() && self.log_edits.is_empty()
    }

    fn validate(&mut self) -> Result<()> {
        let hash = self.stack.options().hash;
        for e in &mut self.edits {
            if let Some(NewValue::Oid(id)) = &e.new {
                if id.is_null() {
                    e.new = Some(NewValue::Delete);
                }
            }
            let ids: Vec<ObjectId> = match (&e.new, &e.expected) {
                (Some(NewValue::Oid(a)), _) => vec![*a],
                (Some(NewValue::Peeled { value, peeled }), _) => vec![*value, *peeled],
                _ => vec![],
            };
            let exp: Option<ObjectId> = match &e.expected {
                Expected::Oid(x) => Some(*x),
                _ => None,
            };
            for id in ids.iter().chain(exp.iter()) {
                if id.kind() != hash {
                    return Err(Error::Api(format!(
                        "object id {id} is not {} for ref '{}'",
                        hash.name(),
                        lossy(&e.name)
                    )));
                }
            }
            if !e.skip_refname_verification {
                let sets_value = matches!(
                    e.new,
                    Some(NewValue::Oid(_) | NewValue::Peeled { .. } | NewValue::Symref(_))
                );
                check_for_update(&e.name, sets_value)?;
                if let Some(NewValue::Symref(t)) = &e.new {
                    check_refname_format(
                        t,
                        RefnameFlags {
                            allow_onelevel: true,
                            refspec_pattern: false,
                        },
                    )?;
                }
            }
        }
        let mut names: Vec<&[u8]> = self.edits.iter().map(|e| e.name.as_slice()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(tx_err(format!(
                "multiple updates for ref '{}' not allowed",
                lossy(w[0])
            )));
        }
        Ok(())
    }

    /// git's `refs_resolve_ref_unsafe`: follows symrefs from `name`, reading at most
    /// `reads` refs (git reads 5: `SYMREF_MAXDEPTH`).
    fn resolve_chain(stack: &mut Stack, name: &[u8], reads: usize) -> Result<Resolution> {
        let mut cur = name.to_vec();
        for _ in 0..reads {
            match stack.read_ref(&cur)?.map(|r| r.value) {
                Some(RefValue::Symref(t)) => cur = t,
                Some(v) => {
                    return Ok(match ref_value_id(&v) {
                        Some(id) => Resolution::Id(id),
                        None => Resolution::Missing,
                    })
                }
                None => return Ok(Resolution::Missing),
            }
        }
        Ok(Resolution::TooDeep)
    }

    /// Resolves a symref target as git's `refs_resolve_ref_unsafe(.., RESOLVE_REF_READING)`:
    /// `None` when it (or a ref it points to) does not exist, or the chain is too long.
    fn resolve_target(stack: &mut Stack, name: &[u8]) -> Result<Option<ObjectId>> {
        Ok(match Self::resolve_chain(stack, name, SYMREF_MAXDEPTH)? {
            Resolution::Id(id) => Some(id),
            Resolution::Missing | Resolution::TooDeep => None,
        })
    }

    /// D/F check of `name` (which does not exist) against the stack and the batch.
    /// `scratch` is reused for the `name/` seek key.
    fn check_available(
        stack: &mut Stack,
        name: &[u8],
        affected: &BTreeSet<Vec<u8>>,
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let lossy_name = lossy(name).into_owned();
        stack.with_cached_iter(|it| {
            // Ancestors: every proper prefix directory, read through the reseeked iterator.
            for (pos, _) in name.iter().enumerate().filter(|(_, &b)| b == b'/') {
                let dir = &name[..pos];
                it.seek(dir)?;
                if let Some(r) = it.next()? {
                    if r.name == dir && !r.is_deletion() {
                        return Err(tx_err(format!(
                            "'{}' exists; cannot create '{lossy_name}'",
                            lossy(dir)
                        )));
                    }
                }
                if affected.contains(dir) {
                    return Err(tx_err(format!(
                        "cannot process '{lossy_name}' and '{}' at the same time",
                        lossy(dir)
                    )));
                }
            }
            // Descendants: the same iterator reseeked to `name/`.
            scratch.clear();
            scratch.extend_from_slice(name);
            scratch.push(b'/');
            it.seek(scratch)?;
            while let Some(r) = it.next()? {
                if !r.name.starts_with(scratch) {
                    break;
                }
                if r.is_deletion() {
                    continue;
                }
                return Err(tx_err(format!(
                    "'{}' exists; cannot create '{lossy_name}'",
                    lossy(&r.name)
                )));
            }
            let from: &[u8] = scratch;
            let mut later = affected
                .range::<[u8], _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded));
            if let Some(d) = later.next() {
                if d.starts_with(scratch) {
                    return Err(tx_err(format!(
                        "cannot process '{lossy_name}' and '{}' at the same time",
                        lossy(d)
                    )));
                }
            }
            Ok(())
        })
    }

    /// Whether an update of `name` gets a reflog entry: always with a caller-supplied
    /// record; never with `skip_create_reflog` (as git, even if the reflog exists);
    /// else `force_create_reflog`, `core.logAllRefUpdates` or an existing reflog.
    fn should_log(&self, name: &[u8], edit: &RefEdit) -> Result<bool> {
        if edit.log.is_some() {
            return Ok(true);
        }
        if edit.files_reflog {
            return Ok(false);
        }
        if edit.skip_create_reflog {
            return Ok(false);
        }
        if edit.force_create_reflog {
            return Ok(true);
        }
        Ok(self.log_all.autocreates(name) || self.stack.reflog_exists(name)?)
    }

    /// Validates every edit under the stack lock and writes one table (or nothing when
    /// every edit is a no-op). On error nothing is written.
    pub fn commit(mut self) -> Result<Committed> {
        let prepared = self.plan()?;
        prepared.commit(self.stack)
    }

    /// git's `ref_transaction_prepare`: takes the stack's lock and checks everything a
    /// commit checks (names, duplicates, expected values, D/F conflicts) against the
    /// stack as it is under the lock. The returned [`PreparedTransaction`] holds the lock
    /// until it is committed or dropped (= aborted); its commit can then only fail on
    /// I/O. The stack is not borrowed meanwhile (it is only read until the commit).
    pub fn prepare(mut self) -> Result<PreparedTransaction> {
        self.plan()
    }

    fn plan(&mut self) -> Result<PreparedTransaction> {
        self.validate()?;
        let lock = self.stack.lock_list()?;
        if !self.stack.is_up_to_date()? {
            self.stack.reload_now()?;
        }
        let ui = self.stack.next_update_index();
        let null = self.stack.options().hash.null_id();

        let mut updates: Vec<Upd> = self
            .edits
            .iter()
            .enumerate()
            .map(|(i, e)| Upd {
                name: e.name.clone(),
                edit: i,
                log_only: false,
                via_head: false,
                head_copy: false,
                cur_symref: false,
                check_old: true,
                cur_oid: null,
                queued: false,
            })
            .collect();
        let mut affected: BTreeSet<Vec<u8>> = updates.iter().map(|u| u.name.clone()).collect();
        let head_referent = match self.stack.read_ref(b"HEAD")?.map(|r| r.value) {
            Some(RefValue::Symref(t)) => Some(t),
            _ => None,
        };
        let mut scratch = Vec::new();
        let mut i = 0;
        while i < updates.len() {
            let edit = &self.edits[updates[i].edit];
            let name = updates[i].name.clone();
            if let Some(h) = &head_referent {
                if !updates[i].log_only && !updates[i].via_head && !edit.files_reflog && name == *h
                {
                    if affected.contains(b"HEAD".as_slice()) {
                        return Err(tx_err(format!(
                            "multiple updates for 'HEAD' (including one via its referent '{}') are not allowed",
                            lossy(&name)
                        )));
                    }
                    affected.insert(b"HEAD".to_vec());
                    updates.push(Upd {
                        name: b"HEAD".to_vec(),
                        edit: updates[i].edit,
                        log_only: true,
                        via_head: false,
                        head_copy: true,
                        cur_symref: false,
                        // As git: the copy carries the update's old-id check (HAVE_OLD
                        // and old_oid; an old symref target counts as the null id),
                        // made against the id HEAD resolves to.
                        check_old: updates[i].check_old,
                        cur_oid: null,
                        queued: false,
                    });
                }
            }
            let cur = self.stack.read_ref(&name)?.map(|r| r.value);
            let expects_existing = updates[i].check_old
                && matches!(
                    edit.expected,
                    Expected::MustExist | Expected::Oid(_) | Expected::Symref(_)
                );
            let Some(cur) = cur else {
                if expects_existing {
                    return Err(conflict(
                        &edit.name,
                        format!(
                            "cannot lock ref '{}': unable to resolve reference '{}'",
                            lossy(&edit.name),
                            lossy(&name)
                        ),
                    ));
                }
                if !updates[i].log_only {
                    Self::check_available(self.stack, &name, &affected, &mut scratch)?;
                }
                let writes = matches!(
                    edit.new,
                    Some(NewValue::Oid(_) | NewValue::Peeled { .. } | NewValue::Symref(_))
                );
                updates[i].queued = writes || updates[i].log_only;
                i += 1;
                continue;
            };
            let is_symref = matches!(cur, RefValue::Symref(_));
            updates[i].cur_symref = is_symref;
            let mut cur_oid = ref_value_id(&cur).unwrap_or(null);
            if let RefValue::Symref(target) = &cur {
                // The symref itself was the first of git's reads.
                let resolved = Self::resolve_chain(self.stack, target, SYMREF_MAXDEPTH - 1)?;
                cur_oid = match resolved {
                    Resolution::Id(id) => id,
                    Resolution::Missing | Resolution::TooDeep => null,
                };
                let no_deref = edit.no_deref || updates[i].log_only;
                let have_old = updates[i].check_old
                    && matches!(
                        edit.expected,
                        Expected::Oid(_) | Expected::MustNotExist | Expected::Symref(_)
                    );
                if no_deref && have_old && matches!(resolved, Resolution::TooDeep) {
                    return Err(tx_err(format!(
                        "cannot lock ref '{}': error reading reference",
                        lossy(&name)
                    )));
                }
                if !edit.no_deref && !updates[i].log_only {
                    if affected.contains(target) {
                        return Err(tx_err(format!(
                            "multiple updates for '{}' (including one via symref '{}') are not allowed",
                            lossy(target),
                            lossy(&name)
                        )));
                    }
                    affected.insert(target.clone());
                    let via_head = name == b"HEAD";
                    let check_old = updates[i].check_old;
                    updates.push(Upd {
                        name: target.clone(),
                        edit: updates[i].edit,
                        log_only: false,
                        via_head,
                        head_copy: false,
                        cur_symref: false,
                        check_old,
                        cur_oid: null,
                        queued: false,
                    });
                    updates[i].log_only = true;
                    // As git: an expected old id moves to the referent (HAVE_OLD is
                    // cleared), but an expected symref target (`old_target`) is checked
                    // on both the symref and its referent.
                    if !matches!(edit.expected, Expected::Symref(_)) {
                        updates[i].check_old = false;
                    }
                }
            }
            updates[i].cur_oid = cur_oid;
            if updates[i].check_old && updates[i].head_copy {
                let expected = match &edit.expected {
                    Expected::Oid(x) => Some(*x),
                    Expected::MustNotExist | Expected::Symref(_) => Some(null),
                    Expected::Any | Expected::MustExist => None,
                };
                match expected {
                    Some(x) if x != cur_oid && x.is_null() => {
                        return Err(conflict(
                            &edit.name,
                            "cannot lock ref 'HEAD': reference already exists".into(),
                        ));
                    }
                    Some(x) if x != cur_oid && cur_oid.is_null() => {
                        return Err(conflict(
                            &edit.name,
                            format!(
                                "cannot lock ref 'HEAD': reference is missing but expected {x}"
                            ),
                        ));
                    }
                    Some(x) if x != cur_oid => {
                        return Err(conflict(
                            &edit.name,
                            format!("cannot lock ref 'HEAD': is at {cur_oid} but expected {x}"),
                        ));
                    }
                    _ => {}
                }
            } else if updates[i].check_old {
                match &edit.expected {
                    Expected::Any | Expected::MustExist => {}
                    // As git: a symref (no_deref) is compared by the id it resolves to,
                    // so a dangling symref passes "must not exist".
                    Expected::MustNotExist if cur_oid.is_null() => {}
                    Expected::MustNotExist => {
                        return Err(conflict(
                            &edit.name,
                            format!(
                                "cannot lock ref '{}': reference already exists",
                                lossy(&edit.name)
                            ),
                        ));
                    }
                    Expected::Oid(x) if cur_oid.is_null() && *x != cur_oid => {
                        return Err(conflict(
                            &edit.name,
                            format!(
                                "cannot lock ref '{}': reference is missing but expected {x}",
                                lossy(&edit.name),
                            ),
                        ));
                    }
                    Expected::Oid(x) => {
                        if cur_oid != *x {
                            return Err(conflict(
                                &edit.name,
                                format!(
                                    "cannot lock ref '{}': is at {} but expected {}",
                                    lossy(&edit.name),
                                    cur_oid,
                                    x
                                ),
                            ));
                        }
                    }
                    Expected::Symref(t) => match &cur {
                        RefValue::Symref(actual) if actual == t => {}
                        RefValue::Symref(actual) => {
                            return Err(conflict(
                                &edit.name,
                                format!(
                                    "verifying symref target: '{}': is at {} but expected {}",
                                    lossy(&edit.name),
                                    lossy(actual),
                                    lossy(t)
                                ),
                            ));
                        }
                        _ => {
                            return Err(conflict(&edit.name, format!(
                                "cannot lock ref '{}': expected symref with target '{}': but is a regular ref",
                                lossy(&edit.name),
                                lossy(t)
                            )));
                        }
                    },
                }
            }
            let changed = match &edit.new {
                None => false,
                // As git: only the id is compared, so a no-op update of an annotated
                // tag keeps its peeled value.
                Some(NewValue::Oid(id)) => is_symref || ref_value_id(&cur) != Some(*id),
                Some(NewValue::Peeled { value, .. }) => {
                    is_symref || ref_value_id(&cur) != Some(*value)
                }
                Some(NewValue::Symref(_)) => true,
                Some(NewValue::Delete) => true,
            };
            updates[i].queued = edit.new.is_some()
                && (updates[i].log_only
                    || matches!(edit.new, Some(NewValue::Symref(_)))
                    || changed);
            i += 1;
        }

        // Log-only edits. A reflog deleted by one gets no generated entry either (the
        // mount deletes a ref and its reflog file in one batch, as a files-backend git
        // does; git's reftable backend alone would log a deleted symref).
        let mut logs: Vec<LogSrc> = Vec::new();
        let reflog_deleted: BTreeSet<Vec<u8>> = self
            .log_edits
            .iter()
            .filter_map(|le| match le {
                LogEdit::Delete { refname } => Some(refname.clone()),
                _ => None,
            })
            .collect();
        for le in std::mem::take(&mut self.log_edits) {
            self.add_log_edit(le, ui, &mut logs)?;
        }

        // Generated logs and tombstones (git's `write_transaction_table`): deleting a
        // ref that is not a symref deletes its reflog; any other update gets an entry when
        // the ref logs, with the old id it resolved to and the new id (a symref's target
        // resolved before this transaction; no entry when the target does not resolve).
        let mut new_ids: Vec<ObjectId> = vec![null; updates.len()];
        for (idx, u) in updates.iter().enumerate() {
            if !u.queued {
                continue;
            }
            let edit = &self.edits[u.edit];
            let deleting = matches!(edit.new, Some(NewValue::Delete));
            if deleting && !u.cur_symref && !edit.files_reflog {
                let mut it = self.stack.log_iter();
                crate::table::LogIter::seek(&mut it, &u.name, u64::MAX)?;
                while let Some(l) = crate::table::LogIter::next(&mut it)? {
                    if l.refname != u.name {
                        break;
                    }
                    // git's merged iterator suppresses deletions: entries that are
                    // already tombstones get no second one.
                    if !l.deleted {
                        logs.push(LogSrc::Tombstone(idx, l.update_index));
                    }
                }
            } else if edit.new.is_some()
                && !reflog_deleted.contains(&u.name)
                && self.should_log(&u.name, edit)?
            {
                let new_id = match &edit.new {
                    Some(NewValue::Oid(id)) => Some(*id),
                    Some(NewValue::Peeled { value, .. }) => Some(*value),
                    Some(NewValue::Symref(_)) if u.head_copy => Some(null),
                    Some(NewValue::Symref(t)) => Self::resolve_target(self.stack, t)?,
                    _ => Some(null),
                };
                if let Some(id) = new_id {
                    new_ids[idx] = id;
                    logs.push(LogSrc::Update(idx));
                } else if edit.log.is_some() {
                    // A supplied record is the entry, whatever the target resolves to.
                    logs.push(LogSrc::Update(idx));
                }
            }
        }

        // Write: refs sorted by name, then logs by (name, update index desc).
        let mut order: Vec<usize> = (0..updates.len())
            .filter(|&i| updates[i].queued && !updates[i].log_only)
            .collect();
        order.sort_by(|&a, &b| updates[a].name.cmp(&updates[b].name));
        fn key_of<'x>(updates: &'x [Upd], ui: u64, s: &'x LogSrc) -> (&'x [u8], u64) {
            match s {
                LogSrc::Update(i) => (updates.get(*i).map_or(&[][..], |u| &u.name), ui),
                LogSrc::Tombstone(i, u) => (updates.get(*i).map_or(&[][..], |u| &u.name), *u),
                LogSrc::Extra(l) => (l.refname.as_slice(), l.update_index),
                LogSrc::Marker(name, u) => (name.as_slice(), *u),
            }
        }
        logs.sort_by(|a, b| {
            let (an, au) = key_of(&updates, ui, a);
            let (bn, bu) = key_of(&updates, ui, b);
            an.cmp(bn).then(bu.cmp(&au))
        });
        // Equal keys: the later source wins (stable sort keeps insertion order).
        let mut keep = vec![true; logs.len()];
        for j in 1..logs.len() {
            if key_of(&updates, ui, &logs[j - 1]) == key_of(&updates, ui, &logs[j]) {
                keep[j - 1] = false;
            }
        }
        let max_ui = logs
            .iter()
            .map(|s| key_of(&updates, ui, s).1)
            .fold(ui, |m, u| if u > m { u } else { m });

        Ok(PreparedTransaction {
            dir: self.stack.dir().to_path_buf(),
            lock,
            edits: std::mem::take(&mut self.edits),
            identity: std::mem::take(&mut self.identity),
            updates,
            logs,
            keep,
            order,
            new_ids,
            ui,
            max_ui,
            null,
        })
    }
}

/// A transaction checked under the stack's lock ([`Transaction::prepare`]); dropping it
/// aborts (the lock is released, nothing is written).
pub struct PreparedTransaction {
    dir: std::path::PathBuf,
    lock: crate::lockfile::LockFile,
    edits: Vec<RefEdit>,
    identity: Identity,
    updates: Vec<Upd>,
    logs: Vec<LogSrc>,
    keep: Vec<bool>,
    order: Vec<usize>,
    new_ids: Vec<ObjectId>,
    ui: u64,
    max_ui: u64,
    null: ObjectId,
}

impl std::fmt::Debug for PreparedTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedTransaction")
            .field("dir", &self.dir)
            .field("update_index", &self.ui)
            .field("edits", &self.edits.len())
            .finish()
    }
}

impl PreparedTransaction {
    /// The update index the table will get.
    pub fn update_index(&self) -> u64 {
        self.ui
    }

    /// The directory of the stack it was prepared on.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Writes the table on `stack`, which must be the stack it was prepared on (the
    /// same directory, not written to since: its lock was held).
    pub fn commit(self, stack: &mut Stack) -> Result<Committed> {
        if stack.dir() != self.dir {
            return Err(Error::Api(format!(
                "transaction prepared on {} committed on {}",
                self.dir.display(),
                stack.dir().display()
            )));
        }
        let PreparedTransaction {
            lock,
            edits,
            identity,
            updates,
            logs,
            keep,
            order,
            new_ids,
            ui,
            max_ui,
            null,
            ..
        } = self;
        let block_size = stack.options().write.block_size;
        let max_msg = (if block_size == 0 { 4096 } else { block_size } / 2) as usize;
        let mut w = stack.take_writer();
        let result = (|| -> Result<()> {
            w.begin(ui, max_ui)?;
            let mut rec = RefRecord::default();
            for &i in &order {
                let u = &updates[i];
                rec.name.clear();
                rec.name.extend_from_slice(&u.name);
                rec.update_index = ui;
                rec.value = match &edits[u.edit].new {
                    Some(NewValue::Oid(id)) => RefValue::Val1(*id),
                    Some(NewValue::Peeled { value, peeled }) => RefValue::Val2 {
                        value: *value,
                        peeled: *peeled,
                    },
                    Some(NewValue::Symref(t)) => RefValue::Symref(t.clone()),
                    Some(NewValue::Delete) | None => RefValue::Deletion,
                };
                w.add_ref(&rec)?;
            }
            let mut log = LogRecord::default();
            let mut norm = Vec::new();
            for (j, src) in logs.iter().enumerate() {
                if !keep[j] {
                    continue;
                }
                match src {
                    LogSrc::Extra(l) => w.add_log(l)?,
                    LogSrc::Marker(name, u) => {
                        log.refname.clear();
                        log.refname.extend_from_slice(name);
                        log.update_index = *u;
                        log.deleted = false;
                        log.old_id = null;
                        log.new_id = null;
                        log.name.clear();
                        log.email.clear();
                        log.time = 0;
                        log.tz_offset = 0;
                        log.message.clear();
                        w.add_log_verbatim(&log)?;
                    }
                    LogSrc::Tombstone(i, t) => {
                        log.refname.clear();
                        log.refname.extend_from_slice(&updates[*i].name);
                        log.update_index = *t;
                        log.deleted = true;
                        w.add_log(&log)?;
                    }
                    LogSrc::Update(i) => {
                        let u = &updates[*i];
                        let edit = &edits[u.edit];
                        log.refname.clear();
                        log.refname.extend_from_slice(&u.name);
                        log.update_index = ui;
                        log.deleted = false;
                        if let Some(given) = &edit.log {
                            crate::merged::copy_log(&mut log, given);
                            log.refname.clear();
                            log.refname.extend_from_slice(&u.name);
                            log.update_index = ui;
                            log.deleted = false;
                        } else {
                            log.old_id = u.cur_oid;
                            log.new_id = new_ids.get(*i).copied().unwrap_or(null);
                            log.name.clear();
                            log.name.extend_from_slice(&identity.name);
                            log.email.clear();
                            log.email.extend_from_slice(&identity.email);
                            log.time = identity.time;
                            log.tz_offset = identity.tz_offset;
                            normalize_reflog_message(
                                edit.message.as_deref().unwrap_or(b""),
                                &mut norm,
                            );
                            norm.truncate(max_msg);
                            log.message.clear();
                            log.message.extend_from_slice(&norm);
                            log.message.push(b'\n');
                        }
                        w.add_log(&log)?;
                    }
                }
            }
            Ok(())
        })();
        let result = result.and_then(|()| stack.add_finished_table(lock, &mut w, ui, max_ui));
        stack.put_writer(w);
        let table = result?;
        Ok(Committed {
            update_index: ui,
            table,
        })
    }
}

impl Transaction<'_> {
    fn add_log_edit(&mut self, le: LogEdit, ui: u64, logs: &mut Vec<LogSrc>) -> Result<()> {
        let existing = |stack: &Stack, name: &[u8]| -> Result<Vec<u64>> {
            let mut it = stack.log_iter();
            crate::table::LogIter::seek(&mut it, name, u64::MAX)?;
            let mut out = Vec::new();
            while let Some(l) = crate::table::LogIter::next(&mut it)? {
                if l.refname != name {
                    break;
                }
                if !l.deleted {
                    out.push(l.update_index);
                }
            }
            Ok(out)
        };
        let tombstone = |name: &[u8], u: u64| LogRecord {
            refname: name.to_vec(),
            update_index: u,
            deleted: true,
            ..LogRecord::default()
        };
        match le {
            LogEdit::Append { refname, mut entry } => {
                entry.refname = refname;
                entry.update_index = ui;
                entry.deleted = false;
                logs.push(LogSrc::Extra(entry));
            }
            LogEdit::Create { refname } => {
                if !self.stack.reflog_exists(&refname)? {
                    logs.push(LogSrc::Marker(refname, ui));
                }
            }
            LogEdit::Delete { refname } => {
                for u in existing(self.stack, &refname)? {
                    logs.push(LogSrc::Extra(tombstone(&refname, u)));
                }
            }
            LogEdit::Rewrite { refname, entries } => {
                let entries_empty = entries.is_empty();
                // Existing live entries, oldest first.
                let mut old: Vec<LogRecord> = Vec::new();
                {
                    let mut it = self.stack.log_iter();
                    crate::table::LogIter::seek(&mut it, &refname, u64::MAX)?;
                    while let Some(l) = crate::table::LogIter::next(&mut it)? {
                        if l.refname != refname {
                            break;
                        }
                        if !l.deleted {
                            old.push(l.clone());
                        }
                    }
                }
                old.reverse();
                let only_marker =
                    old.len() == 1 && old.iter().all(crate::stack::is_existence_marker);
                if entries.is_empty() && only_marker {
                    // Already an existing, empty reflog.
                } else if let Some(keep) = subsequence(&old, &entries) {
                    // The usual rewrite (reflog expire/delete, stash drop): the kept
                    // entries stay where they are; only the dropped ones get tombstones.
                    for (k, o) in old.iter().enumerate() {
                        if !keep.contains(&k) {
                            logs.push(LogSrc::Extra(tombstone(&refname, o.update_index)));
                        }
                    }
                } else {
                    let m = entries.len() as u64;
                    // New entries take update indexes ending at this transaction's (newest
                    // last); an old entry at one of those indexes is shadowed, the others
                    // get tombstones.
                    let first = if m <= ui { ui + 1 - m } else { 1 };
                    let assigned: Vec<u64> = (0..m).map(|k| first + k).collect();
                    for o in &old {
                        if assigned.binary_search(&o.update_index).is_err() {
                            logs.push(LogSrc::Extra(tombstone(&refname, o.update_index)));
                        }
                    }
                    for (k, mut e) in entries.into_iter().enumerate() {
                        e.refname = refname.clone();
                        e.update_index = assigned.get(k).copied().unwrap_or(ui);
                        e.deleted = false;
                        logs.push(LogSrc::Extra(e));
                    }
                }
                // As git's expiry: a reflog emptied by a rewrite still exists.
                if entries_empty && !only_marker {
                    logs.push(LogSrc::Marker(refname.clone(), ui));
                }
            }
        }
        Ok(())
    }
}

/// Whether two reflog entries say the same (messages compared without trailing `\n`).
fn same_entry(a: &LogRecord, b: &LogRecord) -> bool {
    let trim =
        |m: &[u8]| -> usize { m.len() - m.iter().rev().take_while(|&&c| c == b'\n').count() };
    a.old_id == b.old_id
        && a.new_id == b.new_id
        && a.name == b.name
        && a.email == b.email
        && a.time == b.time
        && a.tz_offset == b.tz_offset
        && a.message.get(..trim(&a.message)) == b.message.get(..trim(&b.message))
}

/// If `new` (oldest first) is `old` with some entries removed, the indexes of `old` that
/// are kept.
fn subsequence(old: &[LogRecord], new: &[LogRecord]) -> Option<Vec<usize>> {
    let mut keep = Vec::with_capacity(new.len());
    let mut i = 0;
    for n in new {
        while i < old.len() && !same_entry(&old[i], n) {
            i += 1;
        }
        if i == old.len() {
            return None;
        }
        keep.push(i);
        i += 1;
    }
    Some(keep)
}

/// Compares log keys as the table stores them (refname asc, update index desc).
pub fn log_order(a: (&[u8], u64), b: (&[u8], u64)) -> Ordering {
    a.0.cmp(b.0).then(b.1.cmp(&a.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflog_messages_are_normalised_like_git() {
        let mut out = Vec::new();
        normalize_reflog_message(b"  commit:\tone\n\ntwo  \n", &mut out);
        assert_eq!(out, b"commit: one two");
        normalize_reflog_message(b"", &mut out);
        assert_eq!(out, b"");
        normalize_reflog_message(b"\n\n", &mut out);
        assert_eq!(out, b"");
    }

    #[test]
    fn timezone_is_hhmm() {
        // Whatever the local zone, the value must be a valid ±HHMM.
        let tz = local_tz_hhmm(1_112_912_053);
        assert!(tz.abs() % 100 < 60 && tz.abs() / 100 <= 14, "{tz}");
    }
}
