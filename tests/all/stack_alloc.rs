//! The stack's cached lookups allocate nothing once warm: point lookups
//! (`Stack::lookup`, `read_ref_into`) and prefix scans (`for_each_ref`) through the one
//! cached, reseeked merged iterator. Run alone in a process of its own, so that the
//! allocation count is only this test's.

use reftablefs::stack::{Stack, StackOptions};
use reftablefs::transaction::RefEdit;
use reftablefs::{ObjectId, RefRecord};

use crate::alloc::allocs;
use crate::alone::alone;

#[test]
fn cached_lookups_and_scans_do_not_allocate() {
    if !alone(module_path!(), "cached_lookups_and_scans_do_not_allocate") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut st = Stack::open(
        tmp.path(),
        StackOptions {
            auto_compact: false,
            ..StackOptions::default()
        },
    )
    .unwrap();
    let id = ObjectId::from_bytes(&[7; 20]).unwrap();
    // Several tables, with a symref and a tombstone in the mix.
    for t in 0..4 {
        let mut tx = st.transaction();
        for i in 0..500 {
            tx.edit(RefEdit::update(format!("refs/heads/t{t}/b{i:04}"), id));
        }
        tx.commit().unwrap();
    }
    let mut tx = st.transaction();
    tx.edit(RefEdit::symref("refs/heads/sym", "refs/heads/t0/b0001"));
    tx.edit(RefEdit::delete("refs/heads/t1/b0007"));
    tx.commit().unwrap();
    let names: Vec<Vec<u8>> = (0..2000)
        .map(|i| format!("refs/heads/t{}/b{:04}", i % 4, (i * 7) % 600).into_bytes())
        .collect();
    let mut out = RefRecord::default();
    // Warm up the cached iterator and the output buffer.
    for n in &names {
        st.read_ref_into(n, &mut out).unwrap();
    }
    st.read_ref_into(b"refs/heads/sym", &mut out).unwrap();
    let before = allocs();
    let mut found = 0;
    for n in &names {
        if st.lookup(n, |r| r.is_some()).unwrap() {
            found += 1;
        }
        st.read_ref_into(n, &mut out).unwrap();
    }
    let mut scanned = 0;
    st.for_each_ref(b"refs/heads/t2/", |_| {
        scanned += 1;
        true
    })
    .unwrap();
    let allocs = allocs() - before;
    assert!(
        found > 1500 && found < 2000,
        "existing and missing names: {found}"
    );
    assert_eq!(scanned, 500);
    assert_eq!(
        allocs,
        0,
        "allocations during {} cached lookups and a scan",
        2 * names.len()
    );
    assert!(
        !st.lookup(b"refs/heads/t1/b0007", |r| r.is_some()).unwrap(),
        "tombstone hidden"
    );
}
