//! Every file-system call of a commit and of a compaction, failed in turn through the
//! `fsio` seam (ENOSPC and EIO): afterwards the stack that git 2.47 and we read is the old
//! state or the new one, never broken (`verify_stack`, the code behind
//! `reftablefs verify`, and every ref's value — not `git refs verify`, which passes
//! corrupt tables); no listed table is missing; the error reaches the caller unless the
//! failed call was cleanup after the commit point.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use reftablefs::lockfile;
use reftablefs::stack::verify::verify_stack;
use reftablefs::stack::{Stack, StackOptions};
use reftablefs::testing::fsio::{self, Op, Step};
use reftablefs::transaction::RefEdit;
use reftablefs::{HashKind, ObjectId, RefValue};

use crate::util::{self, Repo};

type Refs = BTreeMap<String, String>;

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            fs::copy(e.path(), &t).unwrap();
        }
    }
}

fn options() -> StackOptions {
    StackOptions {
        fsync: true,
        auto_compact: false,
        lock_timeout: None,
        ..StackOptions::default()
    }
}

/// The refs of the stack in `dir`, read by a fresh stack.
fn our_refs(dir: &Path) -> Refs {
    let mut st = Stack::open(dir, options()).expect("stack opens");
    let mut out = Refs::new();
    st.for_each_ref(b"", |r| {
        if let RefValue::Val1(id) = &r.value {
            out.insert(String::from_utf8_lossy(&r.name).into_owned(), id.to_hex());
        }
        true
    })
    .unwrap();
    out
}

fn git_refs(repo: &Path) -> Refs {
    util::git(repo, &["for-each-ref", "--format=%(refname) %(objectname)"])
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

/// A template repository: three tables of our making, and the commits to point at.
fn template() -> (Repo, Vec<ObjectId>) {
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(3);
    let mut st = Stack::open(repo.reftable_dir(), options()).unwrap();
    for (i, id) in ids.iter().enumerate() {
        let mut tx = st.transaction();
        tx.edit(RefEdit::update(format!("refs/heads/b{i}"), *id));
        tx.commit().unwrap();
    }
    (repo, ids)
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Commit,
    CommitAutoCompact,
    Compact,
}

fn act(action: Action, dir: &Path, ids: &[ObjectId]) -> reftablefs::Result<()> {
    let mut opts = options();
    opts.auto_compact = matches!(action, Action::CommitAutoCompact);
    let mut st = Stack::open(dir, opts)?;
    match action {
        Action::Commit | Action::CommitAutoCompact => {
            let mut tx = st.transaction();
            tx.edit(RefEdit::update("refs/heads/b0", ids[2]));
            tx.edit(RefEdit::update("refs/heads/new", ids[1]));
            tx.edit(RefEdit::delete("refs/heads/b1"));
            tx.commit().map(|_| ())
        }
        Action::Compact => st.compact_all().map(|_| ()),
    }
}

fn check_every_step(action: Action) {
    let (template, ids) = template();
    let old_refs = our_refs(&template.reftable_dir());
    assert_eq!(git_refs(template.path()), old_refs);
    let old_list = fs::read_to_string(template.reftable_dir().join("tables.list")).unwrap();

    // The clean run: its steps, and the new state.
    let work = tempfile::tempdir().unwrap();
    copy_dir(template.path(), work.path());
    let dir = work.path().join(".git/reftable");
    let (r, steps) = fsio::record(|| act(action, &dir, &ids));
    r.unwrap();
    let new_refs = our_refs(&dir);
    let new_list = fs::read_to_string(dir.join("tables.list")).unwrap();
    assert_ne!(new_list, old_list, "{action:?} changes the table set");
    let list = dir.join("tables.list");
    let commit_at = steps
        .iter()
        .position(|s| s.op == Op::Rename && s.path == list)
        .expect("a commit renames tables.list");
    eprintln!(
        "{action:?}: {} steps, tables.list renamed at {commit_at}",
        steps.len()
    );

    for (i, step) in steps.iter().enumerate() {
        for errno in [libc::EIO, libc::ENOSPC] {
            let work = tempfile::tempdir().unwrap();
            copy_dir(template.path(), work.path());
            let dir = work.path().join(".git/reftable");
            let (r, seen) = fsio::inject(i, errno, || act(action, &dir, &ids));
            let what = format!("{action:?} step {i} {step:?} errno {errno}");
            let failed: &Step = seen.get(i).unwrap_or_else(|| panic!("{what}: not reached"));
            assert_eq!(failed.op, step.op, "{what}: the run is deterministic");
            let states = States {
                old_refs: &old_refs,
                new_refs: &new_refs,
                old_list: &old_list,
            };
            check_after_fault(&what, failed, i > commit_at, &r, work.path(), &states);
        }
    }
}

/// The state before and after the action: refs (a compaction keeps them) and the list.
struct States<'a> {
    old_refs: &'a Refs,
    new_refs: &'a Refs,
    old_list: &'a str,
}

fn check_after_fault(
    what: &str,
    step: &Step,
    after_commit: bool,
    r: &reftablefs::Result<()>,
    repo: &Path,
    states: &States<'_>,
) {
    let (old_refs, new_refs) = (states.old_refs, states.new_refs);
    let dir = repo.join(".git/reftable");
    // Never broken: every listed table exists and verifies.
    let rep = verify_stack(&dir, HashKind::Sha1).expect("verify runs");
    assert!(rep.errors.is_empty(), "{what}: verify: {:?}", rep.errors);
    let list = fs::read_to_string(dir.join("tables.list")).unwrap();
    let unchanged = list == states.old_list;
    for name in list.lines() {
        assert!(dir.join(name).exists(), "{what}: listed {name} deleted");
    }
    // Old or new, the same for us and for git.
    let ours = our_refs(&dir);
    assert!(
        &ours == old_refs || &ours == new_refs,
        "{what}: neither old nor new: {ours:?}"
    );
    assert_eq!(git_refs(repo), ours, "{what}: git reads the same");
    match r {
        Ok(()) => {
            assert_eq!(&ours, new_refs, "{what}: success means the new state");
            assert!(!unchanged, "{what}: success means a new table set");
            assert!(
                after_commit || step.op == Op::Unlink,
                "{what}: a fault before the commit point must be reported"
            );
        }
        Err(e) => {
            if !after_commit {
                assert!(
                    unchanged,
                    "{what}: error {e} before the commit point, list changed"
                );
            }
            if &ours == new_refs && old_refs != new_refs {
                assert!(
                    after_commit,
                    "{what}: new state but error {e} before the commit point"
                );
            }
        }
    }
    // A lock left behind only when its own unlink failed; then it is diagnosed stale.
    let lock = dir.join("tables.list.lock");
    if let Some(d) = lockfile::diagnose(&lock).unwrap() {
        assert!(
            step.op == Op::Unlink && step.path.file_name() == lock.file_name(),
            "{what}: lock left: {d}"
        );
        assert!(d.is_stale(std::time::Duration::ZERO), "{what}: {d}");
        fs::remove_file(&lock).unwrap();
    }
    // The stack keeps working.
    let mut st = Stack::open(&dir, options()).unwrap();
    let mut tx = st.transaction();
    tx.edit(RefEdit::delete("refs/heads/b2"));
    tx.commit()
        .unwrap_or_else(|e| panic!("{what}: next commit: {e}"));
}

#[test]
fn fault_at_every_step_of_a_commit() {
    check_every_step(Action::Commit);
}

#[test]
fn fault_at_every_step_of_a_commit_with_auto_compaction() {
    check_every_step(Action::CommitAutoCompact);
}

#[test]
fn fault_at_every_step_of_a_compaction() {
    check_every_step(Action::Compact);
}
