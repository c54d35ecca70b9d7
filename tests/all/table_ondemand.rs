//! Tables are read block by block from the open file, through one block cache bounded in
//! bytes: a table several times larger than the cache reads back exactly while the heap
//! stays within the cache's budget, and a file truncated or replaced under an open table
//! gives errors naming the file and offset (or the old bytes), never a crash.
//!
//! The bounded-memory test runs alone in a process of its own: the heap figures of the
//! test binary's allocator are process-wide.

use std::path::Path;

use reftablefs::table::{BlockCache, LogIter, RefIter, Table, TableWriter, WriteOptions};
use reftablefs::{Error, LogRecord, ObjectId, RefRecord, RefValue};

use crate::alloc::{peak, reset_peak};
use crate::alone::alone;

fn id(i: u32) -> ObjectId {
    let mut b = [0u8; 20];
    b[..4].copy_from_slice(&i.to_be_bytes());
    b[19] = 1;
    ObjectId::from_bytes(&b).unwrap()
}

fn name(i: u32) -> Vec<u8> {
    format!("refs/heads/d{:03}/branch-{i:07}", i % 1000).into_bytes()
}

/// Writes a table of `n` refs (sorted names, distinct ids) and a few logs to `path`;
/// returns the sorted names.
fn write_table(path: &Path, n: u32) -> Vec<Vec<u8>> {
    let mut names: Vec<(Vec<u8>, u32)> = (0..n).map(|i| (name(i), i)).collect();
    names.sort();
    let mut w = TableWriter::new(WriteOptions::default());
    w.begin(1, 1).unwrap();
    for (nm, i) in &names {
        w.add_ref(&RefRecord {
            name: nm.clone(),
            update_index: 1,
            value: RefValue::Val1(id(*i)),
        })
        .unwrap();
    }
    for (nm, i) in names.iter().take(2000) {
        w.add_log(&LogRecord {
            refname: nm.clone(),
            update_index: 1,
            old_id: id(0),
            new_id: id(*i),
            name: b"A U Thor".to_vec(),
            email: b"author@example.com".to_vec(),
            time: 1_700_000_000,
            tz_offset: 100,
            message: format!("branch: created {i}\n").into_bytes(),
            ..LogRecord::default()
        })
        .unwrap();
    }
    std::fs::write(path, w.finish().unwrap()).unwrap();
    names.into_iter().map(|(n, _)| n).collect()
}

#[test]
fn table_larger_than_the_cache_reads_back_in_bounded_memory() {
    if !alone(
        module_path!(),
        "table_larger_than_the_cache_reads_back_in_bounded_memory",
    ) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("big.ref");
    let n = 200_000;
    let names = write_table(&path, n);
    let size = std::fs::metadata(&path).unwrap().len() as usize;
    let budget = 1 << 20;
    assert!(
        size > 4 * budget,
        "table of {size} bytes is not larger than the cache"
    );
    let cache = BlockCache::new(budget);

    let base = reset_peak();
    let t = Table::open_in(&path, &cache).unwrap();
    // A full scan in order, twice (the second pass cannot be served from the cache).
    for _ in 0..2 {
        let mut it = t.ref_iter();
        it.seek(b"").unwrap();
        let mut k = 0;
        while let Some(r) = it.next().unwrap() {
            assert_eq!(r.name, names[k]);
            k += 1;
        }
        assert_eq!(k, names.len());
        assert!(cache.bytes() <= budget, "{}", cache.bytes());
    }
    // Point lookups spread over the whole table, each one exact.
    let mut it = t.ref_iter();
    for k in (0..names.len()).step_by(997) {
        it.seek(&names[k]).unwrap();
        let r = it.next().unwrap().unwrap();
        assert_eq!(r.name, names[k]);
        let i: u32 = std::str::from_utf8(&r.name[r.name.len() - 7..])
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(r.value, RefValue::Val1(id(i)));
    }
    // Logs (compressed blocks, inflated through the cache too) and the obj index.
    let mut li = t.log_iter();
    li.seek(b"", u64::MAX).unwrap();
    let mut logs = 0;
    while li.next().unwrap().is_some() {
        logs += 1;
    }
    assert_eq!(logs, 2000);
    let found = t.refs_for(&id(123_456)).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].name, name(123_456));
    drop((it, li));

    let peak = peak() - base;
    assert!(
        peak < budget + (size / 4),
        "heap grew by {peak} bytes reading a {size}-byte table through a {budget}-byte cache"
    );
    // The full check (which keeps every id it saw) reads through the same small cache.
    t.verify().unwrap();
    drop(t);
    assert_eq!(cache.bytes(), 0, "a dropped table leaves no blocks behind");
}

#[test]
fn truncated_after_open_errors_with_file_and_offset() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("cut.ref");
    let names = write_table(&path, 20_000);
    let size = std::fs::metadata(&path).unwrap().len();
    let t = Table::open(&path).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(size / 2).unwrap();
    let mut it = t.ref_iter();
    let scan = (|| -> Result<usize, Error> {
        it.seek(b"")?;
        let mut k = 0;
        while it.next()?.is_some() {
            k += 1;
        }
        Ok(k)
    })();
    match scan {
        Err(Error::Format { file, offset, what }) => {
            assert_eq!(file, path.display().to_string());
            assert!(
                offset >= size / 2 - 4096 && offset <= size,
                "{offset}: {what}"
            );
        }
        other => panic!("scan of a truncated table: {other:?}"),
    }
    // Seeks go through the index at the end of the file, past the cut: they fail too.
    for n in [&names[0], names.last().unwrap()] {
        match it.seek(n) {
            Err(Error::Format { file, .. }) => assert_eq!(file, path.display().to_string()),
            other => panic!("seek in a truncated table: {other:?}"),
        }
    }
    // Cut to nothing: every uncached block read fails, nothing panics.
    f.set_len(0).unwrap();
    assert!(t.verify().is_err());
}

#[test]
fn replaced_file_keeps_reading_the_opened_bytes() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("t.ref");
    let names = write_table(&path, 20_000);
    let t = Table::open(&path).unwrap();
    // Replaced the way reftable files are: a new file renamed over the name.
    let other = d.path().join("other.ref");
    write_table(&other, 50);
    std::fs::rename(&other, &path).unwrap();
    let mut it = t.ref_iter();
    it.seek(b"").unwrap();
    let mut k = 0;
    while let Some(r) = it.next().unwrap() {
        assert_eq!(r.name, names[k]);
        k += 1;
    }
    assert_eq!(k, names.len());
    t.verify().unwrap();
}
