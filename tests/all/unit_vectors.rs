//! The layout figures and behaviours of git's reftable unit tests
//! (`t/unit-tests/u-reftable-{table,readwrite}.c`), reproduced with our writer and reader.

use std::sync::Arc;

use reftablefs::table::{LogIter, RefIter, Table, TableWriter, WriteOptions};
use reftablefs::{Error, HashKind, LogRecord, ObjectId, RefRecord, RefValue};

fn id(first: u8, at: usize) -> ObjectId {
    let mut b = [0u8; 20];
    b[at] = first;
    ObjectId::from_bytes(&b).unwrap()
}

fn write(
    opts: WriteOptions,
    min: u64,
    max: u64,
    refs: &[RefRecord],
    logs: &[LogRecord],
) -> (Arc<Table>, TableWriter) {
    let mut w = TableWriter::new(opts);
    w.begin(min, max).unwrap();
    for r in refs {
        w.add_ref(r).unwrap();
    }
    for l in logs {
        w.add_log(l).unwrap();
    }
    let bytes = w.finish().unwrap().to_vec();
    (Table::from_bytes("t", bytes).unwrap(), w)
}

fn log(name: &str, ui: u64, msg: &str) -> LogRecord {
    LogRecord {
        refname: name.as_bytes().to_vec(),
        update_index: ui,
        old_id: id(0, 0),
        new_id: id(ui as u8, 0),
        name: b"user".to_vec(),
        email: b"user@example.com".to_vec(),
        time: 1_700_000_000 + ui,
        tz_offset: 100,
        message: msg.as_bytes().to_vec(),
        ..LogRecord::default()
    }
}

#[test]
fn block_iterator_500_refs() {
    let refs: Vec<RefRecord> = (0..500)
        .map(|i| RefRecord {
            name: format!("refs/heads/branch-{i:03}").into_bytes(),
            update_index: 0,
            value: RefValue::Val1(id(0, 0)),
        })
        .collect();
    let (t, _) = write(WriteOptions::default(), 0, 0, &refs, &[]);
    let got: Vec<(char, usize, usize, usize)> = t
        .blocks()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b.typ as char,
                b.header_off,
                t.block_records(b).unwrap().len(),
                b.restart_count,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ('r', 24, 158, 10),
            ('r', 0, 159, 10),
            ('r', 0, 159, 10),
            ('r', 0, 24, 2),
            ('i', 0, 4, 1),
            ('o', 0, 1, 1)
        ]
    );
}

#[test]
fn multi_level_index_and_reseek() {
    let refs: Vec<RefRecord> = (0..200u32)
        .map(|i| RefRecord {
            name: format!("refs/heads/{i:03}").into_bytes(),
            update_index: 1,
            value: RefValue::Val1(id(i as u8, 0)),
        })
        .collect();
    let (t, w) = write(
        WriteOptions {
            block_size: 100,
            ..WriteOptions::default()
        },
        1,
        1,
        &refs,
        &[],
    );
    assert_eq!(w.stats().refs.max_index_level, 2);
    let mut it = t.ref_iter();
    for _ in 0..5 {
        it.seek(b"refs/heads/199").unwrap();
        assert_eq!(it.next().unwrap().unwrap(), &refs[199]);
        assert!(it.next().unwrap().is_none());
        it.seek(b"").unwrap();
        assert_eq!(it.next().unwrap().unwrap(), &refs[0]);
    }
    // Seek every name and one past the end (table_read_write_seek_index).
    for r in &refs {
        it.seek(&r.name).unwrap();
        assert_eq!(it.next().unwrap().unwrap(), r);
    }
    it.seek(b"refs/heads/2").unwrap();
    assert!(it.next().unwrap().is_none());
}

#[test]
fn multiple_indices() {
    let refs: Vec<RefRecord> = (0..100u32)
        .map(|i| RefRecord {
            name: format!("refs/heads/{i:04}").into_bytes(),
            update_index: 1,
            value: RefValue::Val1(id(i as u8, 0)),
        })
        .collect();
    // As git's test: ids only, no identity, no message (normalised to "\n").
    let logs: Vec<LogRecord> = (0..100u32)
        .map(|i| LogRecord {
            refname: format!("refs/heads/{i:04}").into_bytes(),
            update_index: 1,
            old_id: id(i as u8, 0),
            new_id: id(i as u8, 0),
            ..LogRecord::default()
        })
        .collect();
    let (t, w) = write(
        WriteOptions {
            block_size: 100,
            ..WriteOptions::default()
        },
        1,
        1,
        &refs,
        &logs,
    );
    let f = t.footer();
    assert!(
        f.ref_index_position > 0 && f.obj_index_position > 0 && f.log_index_position > 0,
        "{f:?}"
    );
    assert!(w.stats().objs.index_blocks > 0);
    let mut it = t.log_iter();
    for l in &logs {
        it.seek(&l.refname, u64::MAX).unwrap();
        let mut want = l.clone();
        want.message = b"\n".to_vec();
        assert_eq!(it.next().unwrap().unwrap(), &want);
    }
    t.verify().unwrap();
}

#[test]
fn object_id_lengths() {
    // 256 refs pointing at one object: obj_id_len 2.
    let refs: Vec<RefRecord> = (0..256)
        .map(|i| RefRecord {
            name: format!("refs/heads/{i:04}").into_bytes(),
            update_index: 1,
            value: RefValue::Val1(id(42, 0)),
        })
        .collect();
    let (t, w) = write(
        WriteOptions {
            block_size: 256,
            ..WriteOptions::default()
        },
        1,
        1,
        &refs,
        &[],
    );
    assert_eq!(w.stats().object_id_len, 2);
    assert_eq!(t.footer().obj_id_len, 2);
    assert_eq!(t.refs_for(&id(42, 0)).unwrap().len(), 256);
    // Ids that differ only in byte 15: obj_id_len 16.
    let refs: Vec<RefRecord> = (0..256)
        .map(|i| RefRecord {
            name: format!("refs/heads/{i:04}").into_bytes(),
            update_index: 1,
            value: RefValue::Val1(id(i as u8, 15)),
        })
        .collect();
    let (t, w) = write(
        WriteOptions {
            block_size: 256,
            ..WriteOptions::default()
        },
        1,
        1,
        &refs,
        &[],
    );
    assert_eq!(w.stats().object_id_len, 16);
    for (i, r) in refs.iter().enumerate().step_by(17) {
        assert_eq!(t.refs_for(&id(i as u8, 15)).unwrap(), vec![r.clone()]);
    }
}

#[test]
fn refs_for_without_obj_index_and_peeled() {
    let a = id(1, 0);
    let b = id(2, 0);
    let refs = vec![
        RefRecord {
            name: b"refs/heads/a".to_vec(),
            update_index: 1,
            value: RefValue::Val1(a),
        },
        RefRecord {
            name: b"refs/heads/b".to_vec(),
            update_index: 1,
            value: RefValue::Val1(b),
        },
        RefRecord {
            name: b"refs/tags/t".to_vec(),
            update_index: 1,
            value: RefValue::Val2 {
                value: b,
                peeled: a,
            },
        },
    ];
    let (t, _) = write(WriteOptions::default(), 1, 1, &refs, &[]);
    assert_eq!(t.footer().obj_position, 0);
    let names = |v: Vec<RefRecord>| v.into_iter().map(|r| r.name).collect::<Vec<_>>();
    assert_eq!(
        names(t.refs_for(&a).unwrap()),
        [b"refs/heads/a".to_vec(), b"refs/tags/t".to_vec()]
    );
    assert_eq!(
        names(t.refs_for(&b).unwrap()),
        [b"refs/heads/b".to_vec(), b"refs/tags/t".to_vec()]
    );
}

#[test]
fn log_limits_and_small_table() {
    // A log update index below the table's min is accepted; above max is an API error.
    let mut w = TableWriter::new(WriteOptions::default());
    w.begin(5, 6).unwrap();
    w.add_log(&log("refs/heads/a", 2, "old")).unwrap();
    assert!(matches!(
        w.add_log(&log("refs/heads/b", 7, "new")),
        Err(Error::Api(_))
    ));
    w.finish().unwrap();
    // One ref: smaller than 200 bytes.
    let r = RefRecord {
        name: b"refs/heads/main".to_vec(),
        update_index: 1,
        value: RefValue::Val1(id(42, 0)),
    };
    let (t, _) = write(WriteOptions::default(), 1, 1, &[r], &[]);
    assert!(t.file_size() < 200);
}

#[test]
fn seek_invalid_log_offset_is_a_format_error() {
    let r = RefRecord {
        name: b"refs/heads/main".to_vec(),
        update_index: 1,
        value: RefValue::Val1(id(42, 0)),
    };
    let (t, _) = write(
        WriteOptions::default(),
        1,
        1,
        &[r],
        &[log("refs/heads/main", 1, "message")],
    );
    let mut bytes = t.read_all().unwrap();
    let n = bytes.len();
    let foot = n - 68;
    bytes[foot + 24 + 24..foot + 24 + 32].copy_from_slice(&u64::MAX.to_be_bytes());
    let crc = crc32fast::hash(&bytes[foot..n - 4]);
    bytes[n - 4..].copy_from_slice(&crc.to_be_bytes());
    let t = Table::from_bytes("bad-log-offset", bytes).unwrap();
    let mut it = t.log_iter();
    assert!(matches!(
        it.seek(b"refs/heads/main", u64::MAX),
        Err(Error::Format { .. })
    ));
}

#[test]
fn corrupt_files_are_format_errors() {
    for bytes in [vec![], vec![0u8; 1024], b"REFT\x01\x00\x10\x00".to_vec()] {
        assert!(matches!(
            Table::from_bytes("c", bytes),
            Err(Error::Format { .. })
        ));
    }
    let r = RefRecord {
        name: b"refs/heads/main".to_vec(),
        update_index: 1,
        value: RefValue::Val1(id(42, 0)),
    };
    let (t, _) = write(WriteOptions::default(), 1, 1, &[r], &[]);
    let mut short = t.read_all().unwrap();
    short.truncate(short.len() - 10);
    assert!(matches!(
        Table::from_bytes("truncated", short),
        Err(Error::Format { .. })
    ));
}

#[test]
fn zlib_corruption_is_reported() {
    let logs: Vec<LogRecord> = (1..=20)
        .rev()
        .map(|i| log("refs/heads/main", i, "a message"))
        .collect();
    let (t, _) = write(WriteOptions::default(), 1, 20, &[], &logs);
    let mut bytes = t.read_all().unwrap();
    bytes[24 + 4 + 10] ^= 0x55; // inside the deflate stream
    let t = Table::from_bytes("z", bytes).unwrap();
    let mut it = t.log_iter();
    let r = it
        .seek(b"refs/heads/main", u64::MAX)
        .and_then(|()| it.next().map(|_| ()));
    assert!(
        matches!(r, Err(Error::Zlib { .. } | Error::Format { .. })),
        "{r:?}"
    );
}

#[test]
fn sha256_tables_seek_linearly() {
    let refs: Vec<RefRecord> = (0..50u32)
        .map(|i| RefRecord {
            name: format!("refs/heads/{i:02}").into_bytes(),
            update_index: 1,
            value: RefValue::Val1(ObjectId::from_bytes(&[i as u8; 32]).unwrap()),
        })
        .collect();
    let (t, _) = write(
        WriteOptions {
            hash: HashKind::Sha256,
            ..WriteOptions::default()
        },
        1,
        1,
        &refs,
        &[],
    );
    assert_eq!((t.version(), t.hash_kind()), (2, HashKind::Sha256));
    let mut it = t.ref_iter();
    for r in &refs {
        it.seek(&r.name).unwrap();
        assert_eq!(it.next().unwrap().unwrap(), r);
    }
}

#[test]
fn empty_table_reads_back_empty() {
    for hash in [HashKind::Sha1, HashKind::Sha256] {
        let mut w = TableWriter::new(WriteOptions {
            hash,
            ..WriteOptions::default()
        });
        w.begin(1, 1).unwrap();
        assert!(matches!(w.finish(), Err(Error::EmptyTable)));
        let t = Table::from_bytes("empty", w.output().to_vec()).unwrap();
        assert_eq!(
            t.file_size() as usize,
            hash.footer_size() + hash.header_size()
        );
        assert!(t.blocks().unwrap().is_empty());
        t.verify().unwrap();
        let mut it = t.ref_iter();
        it.seek(b"").unwrap();
        assert!(it.next().unwrap().is_none());
        let mut li = t.log_iter();
        li.seek(b"", u64::MAX).unwrap();
        assert!(li.next().unwrap().is_none());
    }
}

#[test]
fn tables_and_iterators_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Table>();
    send::<reftablefs::table::TableRefIter>();
    send::<reftablefs::table::TableLogIter>();
    send::<TableWriter>();
}

#[test]
fn verify_catches_a_wrong_obj_position() {
    let refs: Vec<RefRecord> = (1..=12u32)
        .map(|i| RefRecord {
            name: format!("refs/heads/branch-{i:02}").into_bytes(),
            update_index: 1,
            value: RefValue::Val1(id(7, 0)),
        })
        .collect();
    let (t, _) = write(
        WriteOptions {
            block_size: 100,
            ..WriteOptions::default()
        },
        1,
        1,
        &refs,
        &[],
    );
    t.verify().unwrap();
    let obj = t.footer().obj_position as usize;
    assert!(obj > 0);
    let mut bytes = t.read_all().unwrap();
    // o, len(3), prefix 0, (2 << 3 | 0) with a count varint, key 07 00, count, first position.
    assert_eq!(&bytes[obj..obj + 1], b"o");
    let first_pos = obj + 4 + 2 + 2 + 1;
    bytes[first_pos] ^= 1;
    let bad = Table::from_bytes("bad-obj", bytes).unwrap();
    let e = bad.verify().unwrap_err().to_string();
    assert!(e.contains("bad-obj") && e.contains("obj record"), "{e}");
}
