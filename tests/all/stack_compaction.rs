//! Compaction and stack-maintenance behaviours from git's reftable unit tests ("stack")
//! and t0610 (pack-refs), on stacks written by us and read back by git where it matters.

use std::fs;
use std::sync::{Arc, Mutex};

use reftablefs::stack::{CompactionProgress, Stack, StackOptions};
use reftablefs::transaction::RefEdit;
use reftablefs::{Error, HashKind, ObjectId, RefRecord, RefValue};

use crate::rng;
use crate::util::Repo;

fn empty_stack(opts: StackOptions) -> (tempfile::TempDir, Stack) {
    let tmp = tempfile::tempdir().unwrap();
    let st = Stack::open(tmp.path(), opts).unwrap();
    (tmp, st)
}

fn id(n: u8) -> ObjectId {
    ObjectId::from_bytes(&[n; 20]).unwrap()
}

fn add_one(st: &mut Stack, name: &str, n: u8) {
    let mut tx = st.transaction();
    tx.edit(RefEdit::update(name, id(n)));
    tx.commit().unwrap();
}

fn floor_log(mut sz: u64, base: u64) -> u64 {
    let mut l = 0;
    while sz >= base {
        sz /= base;
        l += 1;
    }
    l
}

#[test]
fn twenty_tables_then_one_commit_compacts_to_one() {
    let (_t, mut st) = empty_stack(StackOptions {
        auto_compact: false,
        ..StackOptions::default()
    });
    for i in 0..20 {
        add_one(&mut st, &format!("refs/heads/branch-{i:04}"), 1);
    }
    assert_eq!(st.tables().len(), 20);
    assert!(st.compaction_required());
    st.set_options(StackOptions {
        auto_compact: true,
        ..st.options().clone()
    });
    add_one(&mut st, "refs/heads/branch-0020", 1);
    assert_eq!(st.tables().len(), 1, "{:?}", st.table_names());
    assert!(!st.compaction_required());
    let mut n = 0;
    st.for_each_ref(b"", |_| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 21);
}

#[test]
fn auto_compaction_keeps_the_stack_logarithmic() {
    for factor in [2u8, 5] {
        let (_t, mut st) = empty_stack(StackOptions {
            auto_compact: false,
            compaction_factor: factor,
            ..StackOptions::default()
        });
        let n = 100u64;
        for i in 0..n {
            // As git's unit test: one symref `branch%04d -> master` per table.
            let ui = st.next_update_index();
            st.add_table(ui, ui, |w| {
                w.add_ref(&RefRecord {
                    name: format!("branch{i:04}").into_bytes(),
                    update_index: ui,
                    value: RefValue::Symref(b"master".to_vec()),
                })
            })
            .unwrap();
            st.auto_compact().unwrap();
            let f = u64::from(factor);
            assert!(
                i < f || (st.tables().len() as u64) < f * floor_log(i, f),
                "factor {factor}, after {i} adds: {} tables",
                st.tables().len()
            );
        }
        if factor == 2 {
            let written = st.stats().entries_written;
            assert!(written < n * floor_log(n, 2), "entries written {written}");
        }
    }
}

#[test]
fn update_index_must_grow_and_empty_adds_add_nothing() {
    let (tmp, mut st) = empty_stack(StackOptions::default());
    add_one(&mut st, "refs/heads/a", 1);
    let err = st
        .add_table(1, 1, |w| {
            w.add_ref(&RefRecord {
                name: b"refs/heads/b".to_vec(),
                update_index: 1,
                value: RefValue::Val1(id(2)),
            })
        })
        .unwrap_err();
    assert!(matches!(err, Error::Api(_)), "{err}");
    let before = st.table_names().to_vec();
    assert_eq!(
        st.add_table(2, 2, |_| Ok(())).unwrap(),
        None,
        "empty table not added"
    );
    assert_eq!(st.table_names(), &before[..]);
    let files = fs::read_dir(tmp.path()).unwrap().count();
    assert_eq!(files, 2, "tables.list + one table, no leftovers");
    assert!(st.read_ref(b"refs/heads/a").unwrap().is_some());
}

#[test]
fn stale_handle_commits_after_reloading_under_the_lock() {
    let (tmp, mut st1) = empty_stack(StackOptions {
        auto_compact: false,
        ..StackOptions::default()
    });
    let mut st2 = Stack::open(tmp.path(), st1.options().clone()).unwrap();
    add_one(&mut st1, "refs/heads/a", 1);
    assert!(!st2.is_up_to_date().unwrap());
    add_one(&mut st2, "refs/heads/b", 2);
    assert_eq!(
        st2.tables().len(),
        2,
        "st2 saw st1's table before adding its own"
    );
    assert!(st1.reload().unwrap());
    assert!(st1.read_ref(b"refs/heads/b").unwrap().is_some());
    assert_eq!(st1.next_update_index(), 3);
}

#[test]
fn concurrent_compaction_and_clean() {
    let (tmp, mut st1) = empty_stack(StackOptions {
        auto_compact: false,
        ..StackOptions::default()
    });
    for i in 0..3 {
        add_one(&mut st1, &format!("refs/heads/b{i}"), 1);
    }
    let mut st2 = Stack::open(tmp.path(), st1.options().clone()).unwrap();
    st2.compact_all().unwrap();
    let entries: Vec<_> = fs::read_dir(tmp.path()).unwrap().flatten().collect();
    assert_eq!(entries.len(), 2, "tables.list + 1 table");
    assert!(st1.reload().unwrap());
    assert_eq!(st1.tables().len(), 1);
    // An unclean close left stale tables behind (copies of an old table), plus files
    // that are not tables or do not parse: clean removes only the stale tables.
    let live = tmp.path().join(&st1.table_names()[0]);
    fs::copy(
        &live,
        tmp.path()
            .join("0x000000000001-0x000000000001-00000001.ref"),
    )
    .unwrap();
    fs::write(tmp.path().join("garbage"), "x").unwrap();
    fs::write(
        tmp.path()
            .join("0x000000000009-0x000000000009-00000002.ref"),
        "not a table",
    )
    .unwrap();
    st1.clean().unwrap();
    assert!(!tmp
        .path()
        .join("0x000000000001-0x000000000001-00000001.ref")
        .exists());
    assert!(
        tmp.path().join("garbage").exists(),
        "non-table files survive"
    );
    assert!(tmp
        .path()
        .join("0x000000000009-0x000000000009-00000002.ref")
        .exists());
}

#[test]
fn pack_refs_auto_with_locked_tables_like_t0610() {
    let repo = Repo::new(HashKind::Sha1);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "A"]);
    let head = ObjectId::from_hex(
        repo.git(&["rev-parse", "HEAD"]).trim().as_bytes(),
        HashKind::Sha1,
    )
    .unwrap();
    let mut st = repo.open_with(|o| o.auto_compact = false);
    let mut tx = st.transaction();
    tx.edit(RefEdit::update("refs/heads/A", head));
    tx.commit().unwrap();
    assert_eq!(repo.tables().len(), 2);
    assert!(!st.pack(true).unwrap() || repo.tables().len() == 1);
    // Lock both tables; B and C get compacted only among themselves.
    let repo = Repo::new(HashKind::Sha1);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "A"]);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    let mut tx = st.transaction();
    tx.edit(RefEdit::update("refs/heads/A", head));
    tx.commit().unwrap();
    let locked = repo.tables();
    assert_eq!(locked.len(), 2);
    for t in &locked {
        fs::write(repo.reftable_dir().join(format!("{t}.lock")), "").unwrap();
    }
    st.set_options(StackOptions {
        auto_compact: true,
        ..st.options().clone()
    });
    for b in ["B", "C"] {
        let mut tx = st.transaction();
        tx.edit(RefEdit::update(format!("refs/heads/{b}"), head));
        tx.commit().unwrap();
    }
    let now = repo.tables();
    assert_eq!(now.len(), 3, "{now:?}");
    assert_eq!(&now[..2], &locked[..]);
    for t in &locked {
        fs::remove_file(repo.reftable_dir().join(format!("{t}.lock"))).unwrap();
    }
    st.pack(true).unwrap();
    assert_eq!(repo.tables().len(), 1);
    assert_eq!(repo.git_refs().len(), 4);
    repo.verify_integrity();
}

#[test]
fn git_pack_refs_and_our_compaction_interoperate() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(2);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    for i in 0..5 {
        let mut tx = st.transaction();
        tx.edit(RefEdit::update(format!("refs/heads/b{i}"), c[i % 2]));
        tx.commit().unwrap();
    }
    repo.git(&["pack-refs"]);
    assert_eq!(repo.tables().len(), 1, "git compacted our tables");
    assert!(st.reload().unwrap());
    let mut n = 0;
    st.for_each_ref(b"refs/heads/", |_| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 5);
    for i in 0..3 {
        repo.git(&["update-ref", &format!("refs/heads/g{i}"), &c[0].to_hex()]);
    }
    st.reload().unwrap();
    st.compact_all().unwrap();
    assert_eq!(repo.tables().len(), 1);
    assert_eq!(repo.git_refs().len(), 8);
}

#[test]
fn compaction_reports_progress() {
    let (_t, mut st) = empty_stack(StackOptions {
        auto_compact: false,
        ..StackOptions::default()
    });
    let ui = st.next_update_index();
    st.add_table(ui, ui, |w| {
        for i in 0..70_000u32 {
            w.add_ref(&RefRecord {
                name: format!("refs/heads/b{i:06}").into_bytes(),
                update_index: ui,
                value: RefValue::Val1(id(1)),
            })?;
        }
        Ok(())
    })
    .unwrap();
    add_one(&mut st, "refs/heads/z", 2);
    let seen: Arc<Mutex<Vec<CompactionProgress>>> = Arc::default();
    let s2 = Arc::clone(&seen);
    st.set_progress(Some(Box::new(move |p| s2.lock().unwrap().push(p))));
    st.compact_all().unwrap();
    let seen = seen.lock().unwrap();
    assert!(
        seen.len() >= 2,
        "at least one intermediate and the final report"
    );
    let last = seen.last().unwrap();
    // 70 000 refs + refs/heads/z and its reflog entry.
    assert!(last.done && last.records == 70_002, "{last:?}");
    assert!(seen.iter().any(|p| !p.done && p.records == 65_536));
}

/// Random edits, reflog appends/deletes, partial and full compactions and a second
/// handle reloading, checked after every step against a model (no git: many seeds).
#[test]
fn random_edits_and_compactions_match_a_model() {
    use reftablefs::transaction::{LogAllRefUpdates, LogEdit};
    use reftablefs::LogRecord;
    use std::collections::BTreeMap;
    let base = rng::seed("STACK_SEED", 0xc0_ffee);
    for s in 0..12u64 {
        let mut rng = rng::Rng::new(base ^ (s * 0x9e37_79b9));
        let (tmp, mut st) = empty_stack(StackOptions {
            auto_compact: s % 2 == 0,
            ..StackOptions::default()
        });
        let mut other = Stack::open(tmp.path(), st.options().clone()).unwrap();
        let mut refs: BTreeMap<String, u8> = BTreeMap::new();
        let mut logs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for step in 0..60 {
            match rng.below(8) {
                0..=3 => {
                    let mut tx = st.transaction();
                    tx.log_all_ref_updates(LogAllRefUpdates::Always);
                    let mut seen = std::collections::BTreeSet::new();
                    let mut effects = Vec::new();
                    for _ in 0..1 + rng.below(5) {
                        let n = format!("refs/heads/n{:02}", rng.below(30));
                        if !seen.insert(n.clone()) {
                            continue;
                        }
                        let msg = format!("s{step}");
                        if rng.below(4) == 0 {
                            tx.edit(RefEdit::delete(n.as_str()).message(msg.as_str()));
                            effects.push((n, None, msg));
                        } else {
                            let v = 1 + rng.below(3) as u8;
                            tx.edit(RefEdit::update(n.as_str(), id(v)).message(msg.as_str()));
                            effects.push((n, Some(v), msg));
                        }
                    }
                    tx.commit().unwrap();
                    for (n, v, msg) in effects {
                        match v {
                            None => {
                                if refs.remove(&n).is_some() {
                                    logs.remove(&n);
                                }
                            }
                            Some(v) => {
                                if refs.insert(n.clone(), v) != Some(v) {
                                    logs.entry(n).or_default().push(msg);
                                }
                            }
                        }
                    }
                }
                4 => {
                    let n = format!("refs/heads/n{:02}", rng.below(30));
                    let msg = format!("append{step}");
                    let entry = LogRecord {
                        old_id: id(0),
                        new_id: id(9),
                        name: b"x".to_vec(),
                        email: b"x@y".to_vec(),
                        time: 5,
                        message: msg.clone().into_bytes(),
                        ..LogRecord::default()
                    };
                    let mut tx = st.transaction();
                    tx.log_edit(LogEdit::Append {
                        refname: n.clone().into_bytes(),
                        entry,
                    });
                    tx.commit().unwrap();
                    logs.entry(n).or_default().push(msg);
                }
                5 => {
                    let n = format!("refs/heads/n{:02}", rng.below(30));
                    let mut tx = st.transaction();
                    tx.log_edit(LogEdit::Delete {
                        refname: n.clone().into_bytes(),
                    });
                    tx.commit().unwrap();
                    logs.remove(&n);
                }
                6 => {
                    let len = st.tables().len();
                    if len >= 2 {
                        let a = rng.below(len - 1);
                        let b = a + 1 + rng.below(len - a - 1);
                        st.compact_range(a, b, false).unwrap();
                    }
                }
                _ => {
                    st.compact_all().unwrap();
                }
            }
            // Both handles agree with the model.
            other.reload().unwrap();
            for h in [&mut st, &mut other] {
                let mut got = BTreeMap::new();
                h.for_each_ref(b"", |r| {
                    let v = match r.value {
                        RefValue::Val1(i) => i.as_bytes()[0],
                        _ => 0,
                    };
                    got.insert(String::from_utf8(r.name.clone()).unwrap(), v);
                    true
                })
                .unwrap();
                assert_eq!(got, refs, "seed {s} step {step}");
                for i in 0..30 {
                    let n = format!("refs/heads/n{i:02}");
                    let got: Vec<String> = h
                        .read_log(n.as_bytes())
                        .unwrap()
                        .iter()
                        .rev()
                        .map(|l| String::from_utf8_lossy(&l.message).trim_end().to_owned())
                        .collect();
                    let want = logs.get(&n).cloned().unwrap_or_default();
                    assert_eq!(got, want, "log of {n}, seed {s} step {step}");
                }
            }
        }
    }
}

#[test]
fn reflog_expiry_while_compacting() {
    // git's unit test reflog_expire: 19 log entries with time = update index = i.
    use reftablefs::stack::LogExpiry;
    use reftablefs::LogRecord;
    let (_t, mut st) = empty_stack(StackOptions {
        auto_compact: false,
        ..StackOptions::default()
    });
    for i in 1..=19u64 {
        st.add_table(i, i, |w| {
            w.add_log(&LogRecord {
                refname: format!("branch{i:02}").into_bytes(),
                update_index: i,
                old_id: id(0),
                new_id: id(i as u8),
                name: b"identity".to_vec(),
                email: b"identity@invalid".to_vec(),
                time: i,
                message: b"x\n".to_vec(),
                ..LogRecord::default()
            })
        })
        .unwrap();
    }
    let has = |st: &Stack, i: u64| {
        !st.read_log(format!("branch{i:02}").as_bytes())
            .unwrap()
            .is_empty()
    };
    st.compact_all_with_expiry(LogExpiry {
        time: 10,
        min_update_index: 0,
    })
    .unwrap();
    assert!(!has(&st, 9), "time 9 expired");
    assert!(has(&st, 11), "time 11 kept");
    st.compact_all_with_expiry(LogExpiry {
        time: 0,
        min_update_index: 15,
    })
    .unwrap();
    assert!(!has(&st, 14), "update index 14 expired");
    assert!(has(&st, 16), "update index 16 kept");
    assert_eq!(
        st.tables().len(),
        1,
        "a single table is rewritten when expiring"
    );
}
