//! git as oracle, both directions: random transaction sequences (creates, updates,
//! deletes, symrefs, reflogs; thousands of refs; several tables; auto-compaction on)
//! applied to a model and
//! 1. written by us, then read by `git for-each-ref`, `git reflog`, `git fsck`,
//!    `reftablefs verify` (not `git refs verify`, which passes corrupt tables);
//! 2. written by `git update-ref --stdin`, then read by us.
//!
//! `STACK_SEED` replays a run.

use std::collections::BTreeMap;

use reftablefs::stack::Stack;
use reftablefs::transaction::{Expected, RefEdit};
use reftablefs::{HashKind, ObjectId, RefValue};

use crate::rng::{self, Rng};
use crate::util::{git_stdin, ident, Repo};

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Set(String, ObjectId, Option<ObjectId>),
    Delete(String, ObjectId),
    Symref(String, String),
}

#[derive(Default)]
struct Model {
    refs: BTreeMap<String, ObjectId>,
    syms: BTreeMap<String, String>,
    /// Reflog messages (newest last) of refs/heads/*, and HEAD.
    logs: BTreeMap<String, Vec<(ObjectId, String)>>,
}

fn name_of(i: usize) -> String {
    match i % 4 {
        0 => format!("refs/heads/b{i:05}"),
        1 => format!("refs/tags/t{i:05}"),
        2 => format!("refs/remotes/origin/r{i:05}"),
        _ => format!("refs/heads/topic/x{i:05}"),
    }
}

fn logged(name: &str) -> bool {
    name.starts_with("refs/heads/") || name.starts_with("refs/remotes/") || name == "HEAD"
}

/// Builds a random sequence of batches and the model after it.
fn generate(rng: &mut Rng, ids: &[ObjectId], batches: usize) -> (Vec<(String, Vec<Op>)>, Model) {
    let mut m = Model::default();
    let mut out = Vec::new();
    let pool = 4000;
    // main exists throughout; HEAD -> main.
    let mut first = vec![Op::Set("refs/heads/main".into(), ids[0], None)];
    for _ in 0..2000 {
        let n = name_of(rng.below(pool));
        if !first.iter().any(|o| matches!(o, Op::Set(x, ..) if *x == n)) {
            first.push(Op::Set(n, ids[rng.below(ids.len())], None));
        }
    }
    for op in &first {
        apply(&mut m, op, "");
    }
    let mut batches_v = vec![first];
    for _ in 1..batches {
        let k = 1 + rng.below(40);
        let mut ops: Vec<Op> = Vec::new();
        let mut used = std::collections::BTreeSet::new();
        for _ in 0..k {
            let r = rng.below(12);
            let n = match r {
                0 => "refs/heads/main".to_string(),
                // An update addressed to HEAD goes to main (and logs HEAD once).
                1 => "HEAD".to_string(),
                _ => name_of(rng.below(pool)),
            };
            let canonical = if n == "HEAD" {
                "refs/heads/main".to_string()
            } else {
                n.clone()
            };
            if !used.insert(canonical) || m.syms.contains_key(&n) {
                continue;
            }
            let id = ids[rng.below(ids.len())];
            if n == "HEAD" {
                ops.push(Op::Set(n, id, m.refs.get("refs/heads/main").copied()));
                continue;
            }
            match rng.below(6) {
                0 if n != "refs/heads/main" => {
                    if let Some(old) = m.refs.get(&n) {
                        ops.push(Op::Delete(n, *old));
                    }
                }
                1 if !m.refs.contains_key(&n) && n.starts_with("refs/heads/b") => {
                    ops.push(Op::Symref(n, "refs/heads/main".into()));
                }
                _ => ops.push(Op::Set(n.clone(), id, m.refs.get(&n).copied())),
            }
        }
        for op in &ops {
            apply(&mut m, op, "");
        }
        batches_v.push(ops);
    }
    // Re-apply for real with messages.
    let mut real = Model::default();
    for (i, ops) in batches_v.into_iter().enumerate() {
        let msg = format!("batch {i}");
        for op in &ops {
            apply(&mut real, op, &msg);
        }
        out.push((msg, ops));
    }
    (out, real)
}

fn apply(m: &mut Model, op: &Op, msg: &str) {
    match op {
        Op::Set(n, id, _) => {
            let n = &if n == "HEAD" {
                "refs/heads/main".to_string()
            } else {
                n.clone()
            };
            let old = m.refs.insert(n.clone(), *id);
            if old != Some(*id) {
                if logged(n) {
                    m.logs
                        .entry(n.clone())
                        .or_default()
                        .push((*id, msg.to_owned()));
                }
                if n == "refs/heads/main" {
                    m.logs
                        .entry("HEAD".into())
                        .or_default()
                        .push((*id, msg.to_owned()));
                }
            } else if n == "refs/heads/main" {
                // git 2.47 writes HEAD's log-only entry even for a no-op update of HEAD's
                // referent.
                m.logs
                    .entry("HEAD".into())
                    .or_default()
                    .push((*id, msg.to_owned()));
            }
        }
        Op::Delete(n, _) => {
            m.refs.remove(n);
            m.logs.remove(n);
        }
        Op::Symref(n, t) => {
            m.syms.insert(n.clone(), t.clone());
        }
    }
}

fn expected_listing(m: &Model) -> Vec<String> {
    let mut all: BTreeMap<String, ObjectId> = m.refs.clone();
    for (s, t) in &m.syms {
        if let Some(id) = m.refs.get(t) {
            all.insert(s.clone(), *id);
        }
    }
    all.into_iter().map(|(n, id)| format!("{n} {id}")).collect()
}

fn check_git_reads(repo: &Repo, m: &Model) {
    let got: Vec<String> = repo
        .git(&["for-each-ref", "--format=%(refname) %(objectname)"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        got,
        expected_listing(m),
        "git for-each-ref equals the model"
    );
    for (s, t) in &m.syms {
        assert_eq!(&repo.git(&["symbolic-ref", s]).trim(), t);
    }
    for (name, entries) in &m.logs {
        let want: String = entries
            .iter()
            .rev()
            .map(|(id, msg)| format!("{id} {msg}\n"))
            .collect();
        let got = repo.git(&["reflog", "show", "--format=%H %gs", name]);
        assert_eq!(got, want, "reflog of {name}");
    }
    repo.git(&["fsck", "--no-progress", "--no-dangling"]);
    repo.verify_integrity();
}

fn check_we_read(st: &mut Stack, m: &Model) {
    st.reload().unwrap();
    let mut got = Vec::new();
    let mut syms = BTreeMap::new();
    let mut recs = Vec::new();
    st.for_each_ref(b"refs/", |r| {
        recs.push(r.clone());
        true
    })
    .unwrap();
    for r in recs {
        let name = String::from_utf8(r.name.clone()).unwrap();
        match &r.value {
            RefValue::Val1(id) => got.push(format!("{name} {id}")),
            RefValue::Symref(t) => {
                let t = String::from_utf8(t.clone()).unwrap();
                if let Some(RefValue::Val1(id)) =
                    st.read_ref(t.as_bytes()).unwrap().map(|r| r.value)
                {
                    got.push(format!("{name} {id}"));
                }
                syms.insert(name, t);
            }
            v => panic!("unexpected value {v:?} for {name}"),
        }
    }
    assert_eq!(got, expected_listing(m), "our listing equals the model");
    assert_eq!(syms, m.syms);
    for (name, entries) in &m.logs {
        let log = st.read_log(name.as_bytes()).unwrap();
        let got: Vec<(ObjectId, String)> = log
            .iter()
            .rev()
            .map(|l| {
                (
                    l.new_id,
                    String::from_utf8_lossy(&l.message).trim_end().to_owned(),
                )
            })
            .collect();
        assert_eq!(&got, entries, "our reflog of {name}");
    }
}

#[test]
fn random_sequences_by_us_read_by_git() {
    let mut rng = Rng::new(rng::seed("STACK_SEED", 0x5eed_0001));
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(12);
    let (batches, model) = generate(&mut rng, &ids, 60);
    assert!(!model.syms.is_empty() && model.logs.len() > 100 && model.refs.len() > 1000);
    let ops = || batches.iter().flat_map(|(_, o)| o);
    assert!(
        ops().any(|o| matches!(o, Op::Set(n, ..) if n == "HEAD")),
        "updates via HEAD"
    );
    assert!(ops().any(|o| matches!(o, Op::Delete(..))), "deletions");
    let mut st = repo.open();
    let mut max_tables = 0;
    for (msg, ops) in &batches {
        let mut tx = st.transaction();
        tx.identity(ident());
        for op in ops {
            tx.edit(match op {
                Op::Set(n, id, old) => RefEdit::update(n.as_str(), *id)
                    .expect(old.map_or(Expected::MustNotExist, Expected::Oid))
                    .message(msg.as_str()),
                Op::Delete(n, old) => RefEdit::delete(n.as_str())
                    .expect(Expected::Oid(*old))
                    .message(msg.as_str()),
                Op::Symref(n, t) => RefEdit::symref(n.as_str(), t.as_str()),
            });
        }
        tx.commit().unwrap();
        max_tables = max_tables.max(repo.tables().len());
    }
    assert!(max_tables >= 2, "several tables existed at some point");
    check_git_reads(&repo, &model);
    check_we_read(&mut st, &model);
}

#[test]
fn random_sequences_by_git_read_by_us() {
    let mut rng = Rng::new(rng::seed("STACK_SEED", 0x5eed_0002));
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(12);
    let (batches, model) = generate(&mut rng, &ids, 40);
    for (msg, ops) in &batches {
        let mut input = String::new();
        for op in ops {
            match op {
                Op::Set(n, id, Some(old)) => input.push_str(&format!("update {n} {id} {old}\n")),
                Op::Set(n, id, None) => input.push_str(&format!("create {n} {id}\n")),
                Op::Delete(n, old) => input.push_str(&format!("delete {n} {old}\n")),
                Op::Symref(n, t) => input.push_str(&format!("symref-create {n} {t}\n")),
            }
        }
        let out = git_stdin(
            repo.path(),
            &["update-ref", "-m", msg, "--stdin"],
            input.as_bytes(),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut st = repo.open();
    check_we_read(&mut st, &model);
    check_git_reads(&repo, &model);
}
