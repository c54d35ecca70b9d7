//! `reftablefs update-ref`: git's `update-ref`, in its two forms.
//!
//! * `update-ref [-m MSG] [--no-deref] [--create-reflog] --stdin [-z]`: the whole
//!   input (git's command language, see [`super::update_ref_parse`]) is one transaction,
//!   or several with `start`/`prepare`/`commit`/`abort`, each written as one table.
//!   Commands are read and answered one at a time, so a driver may wait for
//!   `start: ok` before sending more. `prepare` takes the stack's lock and checks the
//!   whole batch as git does (duplicates, names, expected values, D/F conflicts),
//!   answering `prepare: ok` only when the commit can succeed; the lock is held until
//!   `commit`/`abort`. Object names are full hex ids or ref names.
//! * `update-ref [-m MSG] [--no-deref] [--create-reflog] REF NEW [OLD]` and
//!   `update-ref [-m MSG] [--no-deref] -d REF [OLD]`.

use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use super::store::{is_per_worktree, RefStore};
use reftablefs::format::ObjectId;
use reftablefs::repo::Repo;
use reftablefs::stack::Stack;
use reftablefs::transaction::{Expected, NewValue, PreparedTransaction, RefEdit};
use reftablefs::{Error, Result};

use super::common::{self, rev_parse};
use super::objects::TypeLookup;
use super::table::Id;
use super::update_ref_parse::{
    self as parse, reject_duplicates, Ending, Event, ParseError, StreamParser,
};
use super::Args;

struct Flags {
    message: Option<Vec<u8>>,
    no_deref: bool,
    create_reflog: bool,
}

/// Applies the command line's options to a parsed edit.
pub fn to_ref_edit(
    e: RefEdit,
    message: Option<&[u8]>,
    force_no_deref: bool,
    create_reflog: bool,
) -> RefEdit {
    // As git: `symref-update` without `no-deref` on a ref that is a symref writes the
    // new symref on its referent.
    let deleting = matches!(e.new, Some(NewValue::Delete));
    RefEdit {
        no_deref: e.no_deref || force_no_deref,
        message: message.map(<[u8]>::to_vec),
        // As git: `--create-reflog` applies to update/create/symref-update/symref-create
        // (and the single form without -d), never to delete/symref-delete, so deleting a
        // symref under it logs only if the ref logs anyway. (`update REF <zero-id>` is a
        // delete here too; git forces its entry, which differs only for a no-deref
        // symref.)
        force_create_reflog: create_reflog && !deleting,
        ..e
    }
}

/// The stack a batch is written to (the main one unless its refs are per-worktree refs
/// of a linked worktree).
fn target_stack<'s>(
    store: &'s mut RefStore,
    edits: &[RefEdit],
    flags: &Flags,
) -> Result<&'s mut Stack> {
    // In a linked worktree, per-worktree refs live in its own stack; a transaction is
    // written to one stack, so it may not mix the two kinds (git writes both stacks).
    let stack = if store.worktree.is_some() {
        let per_wt = edits.iter().filter(|e| is_per_worktree(&e.name)).count();
        if per_wt > 0 {
            if per_wt < edits.len() {
                return Err(Error::Transaction(
                    "a transaction on both per-worktree and shared refs from a linked worktree is not supported"
                        .into(),
                ));
            }
            let mut symref_deref = false;
            if let Some(wt) = store.worktree.as_mut() {
                for e in edits.iter().filter(|e| !e.no_deref && !flags.no_deref) {
                    let is_symref = wt
                        .read_ref(&e.name)?
                        .is_some_and(|r| matches!(r.value, reftablefs::RefValue::Symref(_)));
                    symref_deref |= is_symref;
                }
            }
            if symref_deref {
                return Err(Error::Transaction(
                    "updating a per-worktree ref through its symref from a linked worktree is not supported (use --no-deref)"
                        .into(),
                ));
            }
        }
        match edits.first() {
            Some(e) => store.stack_for_mut(&e.name),
            None => &mut store.main,
        }
    } else {
        &mut store.main
    };
    Ok(stack)
}

/// git's `ref_transaction_prepare`: everything is checked under the target stack's lock,
/// which the returned transaction holds until it is committed or dropped.
fn prepare(
    repo: &Repo,
    store: &mut RefStore,
    edits: Vec<RefEdit>,
    flags: &Flags,
    objects: &mut TypeLookup,
) -> Result<PreparedTransaction> {
    reject_duplicates(&edits)?;
    check_objects(store, &edits, flags.no_deref, objects)?;
    let stack = target_stack(store, &edits, flags)?;
    let identity = repo.committer()?;
    let mut tx = stack.transaction();
    tx.identity(identity)
        .log_all_ref_updates(repo.log_all_ref_updates());
    for e in edits {
        tx.edit(to_ref_edit(
            e,
            flags.message.as_deref(),
            flags.no_deref,
            flags.create_reflog,
        ));
    }
    match tx.prepare() {
        Ok(p) => Ok(p),
        // git's words ("cannot lock references"), plus where the lock is.
        Err(Error::Lock(p)) => Err(Error::Transaction(format!(
            "cannot lock references\nhint: '{}' exists: another process is writing, or one that crashed left it behind",
            p.display()
        ))),
        Err(e) => Err(e),
    }
}

/// git's `is_branch`: the names that must point at a commit.
pub fn is_branch(name: &[u8]) -> bool {
    name == b"HEAD" || name.starts_with(b"refs/heads/")
}

/// git's check of new values (`prepare_single_update` in refs/reftable-backend.c): every
/// new object id must name an existing object, and one written to a branch must name a
/// commit. The names are checked in git's order: the edits as given, then, for an edit
/// through a symref, the ref it points to (git queues that update after the others), so
/// `refs/tags/s -> refs/heads/x` is refused as a write to branch `refs/heads/x`. All
/// ids are looked up in one batch. Unlike git, this runs before the stack is locked:
/// when a batch has both a bad object and a stale expected value or a held lock, the
/// object error is the one reported.
pub fn check_objects(
    store: &RefStore,
    edits: &[RefEdit],
    force_no_deref: bool,
    objects: &mut TypeLookup,
) -> Result<()> {
    // (name, index into `ids`, no-deref, symref hops so far)
    let mut ids: Vec<ObjectId> = Vec::new();
    let mut queue = std::collections::VecDeque::new();
    for e in edits {
        if let Some(NewValue::Oid(id)) = &e.new {
            if !id.is_null() {
                queue.push_back((e.name.clone(), ids.len(), e.no_deref || force_no_deref, 0));
                ids.push(*id);
            }
        }
    }
    if ids.is_empty() {
        return Ok(());
    }
    let types = objects.types(&ids)?;
    let mut it = store.iter();
    while let Some((name, i, no_deref, depth)) = queue.pop_front() {
        let (Some(id), Some(t)) = (ids.get(i), types.get(i)) else {
            continue;
        };
        if t == "missing" || t.is_empty() {
            return Err(Error::Transaction(format!(
                "trying to write ref '{}' with nonexistent object {}",
                String::from_utf8_lossy(&name),
                id.to_hex()
            )));
        }
        if t != "commit" && is_branch(&name) {
            return Err(Error::Transaction(format!(
                "trying to write non-commit object {} to branch '{}'",
                id.to_hex(),
                String::from_utf8_lossy(&name)
            )));
        }
        if !no_deref && depth < reftablefs::refname::SYMREF_MAXDEPTH {
            if let reftablefs::resolve::Raw::Symref(target) =
                reftablefs::resolve::read_raw(&mut it, &name)?
            {
                queue.push_back((target, i, false, depth + 1));
            }
        }
    }
    Ok(())
}

/// Writes a prepared transaction on the stack it was prepared on.
fn commit_prepared(store: &mut RefStore, prepared: PreparedTransaction) -> Result<()> {
    let stack = match store.worktree.as_mut() {
        Some(wt) if wt.dir() == prepared.dir() => wt,
        _ => &mut store.main,
    };
    prepared.commit(stack).map(|_| ())
}

fn commit(
    repo: &Repo,
    store: &mut RefStore,
    edits: Vec<RefEdit>,
    flags: &Flags,
    objects: &mut TypeLookup,
) -> Result<()> {
    let prepared = prepare(repo, store, edits, flags, objects)?;
    commit_prepared(store, prepared)
}

fn resolver(
    store: &RefStore,
    repo: &Repo,
) -> impl FnMut(&[u8]) -> Result<Option<ObjectId>> + use<> {
    let hash = repo.hash();
    // The iterator owns its tables: it does not borrow the stacks.
    let mut it = store.iter();
    move |arg: &[u8]| rev_parse(&mut it, arg, hash, &mut |w| eprintln!("warning: {w}"))
}

fn run_stdin(repo: &Repo, z: bool, flags: &Flags) -> Result<ExitCode> {
    let mut stack = RefStore::open(repo)?;
    let mut parser = StreamParser::new(z, repo.hash()).with_no_deref(flags.no_deref);
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut unit = Vec::new();
    let mut edits: Vec<RefEdit> = Vec::new();
    let mut resolve = resolver(&stack, repo);
    let mut held: Option<PreparedTransaction> = None;
    let mut objects = TypeLookup::new(&repo.common_dir);
    loop {
        let parsed = if parse::read_unit(&mut input, z, &mut unit)? {
            parser.feed(&unit, &mut resolve)
        } else {
            match parser.finish() {
                Ok(None) => break,
                other => other,
            }
        };
        let event = match parsed {
            Ok(Some(e)) => e,
            Ok(None) => continue,
            // As git's `die`: the input is refused, nothing more is read or written.
            Err(ParseError::Input(msg)) => return Ok(common::fatal(&msg)),
            Err(ParseError::Error(e)) => return Err(e),
        };
        match event {
            Event::Edit(e) => edits.push(*e),
            Event::Start => report("start"),
            Event::Prepare => {
                // As git: take the stack's lock and check every expectation, name and
                // D/F conflict now; `prepare: ok` means the commit can only fail on I/O.
                // The lock is held until `commit`/`abort`.
                held = Some(
                    prepare(
                        repo,
                        &mut stack,
                        std::mem::take(&mut edits),
                        flags,
                        &mut objects,
                    )
                    .map_err(|e| Error::Transaction(format!("prepare: {e}")))?,
                );
                report("prepare");
            }
            Event::End(Ending::Abort) => {
                drop(held.take()); // releases the lock taken at prepare
                edits.clear();
                report("abort");
            }
            Event::End(Ending::Commit) => {
                let result = match held.take() {
                    Some(prepared) => commit_prepared(&mut stack, prepared),
                    None => commit(
                        repo,
                        &mut stack,
                        std::mem::take(&mut edits),
                        flags,
                        &mut objects,
                    ),
                };
                result.map_err(|e| Error::Transaction(format!("commit: {e}")))?;
                resolve = resolver(&stack, repo);
                report("commit");
            }
            Event::End(Ending::EofAbort) => {
                drop(held.take()); // releases the lock taken at prepare
                break;
            }
            Event::End(Ending::Eof) => {
                commit(
                    repo,
                    &mut stack,
                    std::mem::take(&mut edits),
                    flags,
                    &mut objects,
                )?;
                break;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn report(what: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{what}: ok");
    let _ = out.flush();
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<ExitCode> {
    let flags = Flags {
        message: args.value(Id::Message).map(|m| m.as_bytes().to_vec()),
        no_deref: args.flag(Id::NoDeref),
        create_reflog: args.flag(Id::CreateReflog),
    };
    let (stdin, z, delete) = (
        args.flag(Id::Stdin),
        args.flag(Id::NulTerminated),
        args.flag(Id::Delete),
    );
    let rest: Vec<Vec<u8>> = args
        .operands()
        .iter()
        .map(|w| w.as_bytes().to_vec())
        .collect();
    let repo = common::open_repo()?;
    if stdin {
        if delete || !rest.is_empty() {
            return Ok(common::usage_error(
                "--stdin takes no other arguments",
                "update-ref",
            ));
        }
        return run_stdin(&repo, z, &flags);
    }
    if z {
        return Ok(common::usage_error(
            "-z only makes sense with --stdin",
            "update-ref",
        ));
    }
    let mut stack = RefStore::open(&repo)?;
    let edit = match single_edit(&stack, &repo, delete, &rest) {
        Ok(Some(e)) => e,
        Ok(None) => {
            return Ok(common::usage_error(
                "wrong number of arguments",
                "update-ref",
            ))
        }
        // As git's `die`: an argument that names no object.
        Err(ParseError::Input(msg)) => return Ok(common::fatal(&msg)),
        Err(ParseError::Error(e)) => return Err(e),
    };
    reftablefs::refname::check_for_update(&edit.name, !matches!(edit.new, Some(NewValue::Delete)))?;
    let name = String::from_utf8_lossy(&edit.name).into_owned();
    let mut objects = TypeLookup::new(&repo.common_dir);
    commit(&repo, &mut stack, vec![edit], &flags, &mut objects)
        .map_err(|e| Error::Transaction(format!("update_ref failed for ref '{name}': {e}")))?;
    Ok(ExitCode::SUCCESS)
}

/// The edit of the single form, `REF NEW [OLD]` or `-d REF [OLD]` (`None`: wrong number
/// of arguments). An empty id is the null id.
fn single_edit(
    store: &RefStore,
    repo: &Repo,
    delete: bool,
    rest: &[Vec<u8>],
) -> parse::ParseResult<Option<RefEdit>> {
    let mut resolve = resolver(store, repo);
    let mut value = |s: &[u8], what: &str| -> parse::ParseResult<ObjectId> {
        if s.is_empty() {
            return Ok(repo.hash().null_id());
        }
        resolve(s)?.ok_or_else(|| {
            ParseError::Input(format!(
                "{}: not a valid {what}",
                String::from_utf8_lossy(s)
            ))
        })
    };
    let edit = |name: &[u8], new: NewValue, expected: Expected| RefEdit {
        name: name.to_vec(),
        new: Some(new),
        expected,
        ..RefEdit::default()
    };
    Ok(Some(match (delete, rest) {
        (true, [name]) => edit(name, NewValue::Delete, Expected::Any),
        (true, [name, old]) => {
            let old = value(old, "old SHA1")?;
            edit(name, NewValue::Delete, Expected::Oid(old))
        }
        (false, [name, new]) | (false, [name, new, _]) => {
            let new_id = value(new, "SHA1")?;
            let old = match rest.get(2) {
                None => Expected::Any,
                Some(o) => {
                    let id = value(o, "old SHA1")?;
                    if id.is_null() {
                        Expected::MustNotExist
                    } else {
                        Expected::Oid(id)
                    }
                }
            };
            let new = if new_id.is_null() {
                NewValue::Delete
            } else {
                NewValue::Oid(new_id)
            };
            edit(name, new, old)
        }
        _ => return Ok(None),
    }))
}
