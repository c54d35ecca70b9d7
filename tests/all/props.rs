//! Property tests: random record sets round-trip through writer and reader, whatever the
//! options; seek finds every key and the right successor of every absent key.
//!
//! Bounded and replayable: the test binary's allocator caps its live heap
//! ([`crate::alloc::CAP`]; a case needs a few MiB, and a runaway writer aborts with a
//! message instead of exhausting the machine); the seed is fixed ([`SEED`]: `cargo test` runs the same cases every time)
//! unless `PROPTEST_RNG_SEED` sets it (`make fuzz` does, from the clock, with more cases
//! through `PROPTEST_CASES`), and is printed with a failure; shrunk failures are
//! persisted in `tests/all/props.proptest-regressions`.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, RngSeed};
use reftablefs::table::{LogIter, RefIter, Table, TableWriter, WriteOptions};
use reftablefs::{Error, HashKind, LogRecord, ObjectId, RefRecord, RefValue};

use crate::rng;

/// The seed of `cargo test`'s runs.
const SEED: u64 = 0x5eed_9e05;

/// [`SEED`] or `PROPTEST_RNG_SEED`, and 96 cases or `PROPTEST_CASES`.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(96),
        rng_seed: RngSeed::Fixed(rng::seed("PROPTEST_RNG_SEED", SEED)),
        // Beside this file (proptest's default looks for lib.rs or main.rs above it, and
        // here finds main.rs: tests/proptest-regressions/props.txt).
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Realistic names sharing prefixes.
        (0u8..4, 0u16..400).prop_map(|(d, n)| format!(
            "refs/{}/n{n}",
            ["heads", "tags", "remotes/o", "x"][d as usize]
        )
        .into_bytes()),
        // Arbitrary bytes, NUL and 0xFF included.
        proptest::collection::vec(prop_oneof![Just(0u8), Just(0xffu8), any::<u8>()], 1..12),
        // Long names.
        (1usize..300).prop_map(|n| vec![b'z'; n]),
    ]
}

fn oid(hash: HashKind) -> impl Strategy<Value = ObjectId> {
    proptest::collection::vec(any::<u8>(), hash.size())
        .prop_map(|b| ObjectId::from_bytes(&b).unwrap())
}

fn value(hash: HashKind) -> impl Strategy<Value = RefValue> {
    prop_oneof![
        Just(RefValue::Deletion),
        oid(hash).prop_map(RefValue::Val1),
        (oid(hash), oid(hash)).prop_map(|(value, peeled)| RefValue::Val2 { value, peeled }),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(RefValue::Symref),
    ]
}

fn log(hash: HashKind) -> impl Strategy<Value = LogRecord> {
    (
        name(),
        0u64..50,
        any::<bool>(),
        oid(hash),
        oid(hash),
        proptest::collection::vec(any::<u8>(), 0..20),
        proptest::collection::vec(any::<u8>(), 0..20),
        any::<u64>(),
        any::<i16>(),
        proptest::collection::vec(any::<u8>(), 0..80),
    )
        .prop_map(
            move |(
                refname,
                update_index,
                deleted,
                old_id,
                new_id,
                name,
                email,
                time,
                tz_offset,
                message,
            )| {
                if deleted {
                    LogRecord {
                        refname,
                        update_index,
                        deleted,
                        old_id: hash.null_id(),
                        new_id: hash.null_id(),
                        ..LogRecord::default()
                    }
                } else {
                    LogRecord {
                        refname,
                        update_index,
                        deleted,
                        old_id,
                        new_id,
                        name,
                        email,
                        time,
                        tz_offset,
                        message,
                    }
                }
            },
        )
}

#[derive(Debug, Clone)]
struct Case {
    opts: WriteOptions,
    refs: Vec<RefRecord>,
    logs: Vec<LogRecord>,
    probes: Vec<Vec<u8>>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(HashKind::Sha1), Just(HashKind::Sha256)],
        prop_oneof![Just(256u32), Just(512), Just(1024), Just(4096)],
        1u16..20,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_flat_map(
            |(hash, block_size, restart_interval, unpadded, skip_index_objects)| {
                let opts = WriteOptions {
                    block_size,
                    restart_interval,
                    unpadded,
                    skip_index_objects,
                    exact_log_message: true,
                    hash,
                };
                (
                    Just(opts),
                    proptest::collection::vec((name(), 0u64..50, value(hash)), 0..300),
                    proptest::collection::vec(log(hash), 0..150),
                    proptest::collection::vec(name(), 0..30),
                )
            },
        )
        .prop_map(|(opts, refs, logs, probes)| {
            let mut m = BTreeMap::new();
            for (name, ui, value) in refs {
                m.insert(
                    name.clone(),
                    RefRecord {
                        name,
                        update_index: ui,
                        value,
                    },
                );
            }
            let mut l = BTreeMap::new();
            for r in logs {
                // Key order (refname NUL be64(!ui)): with NUL inside names it differs
                // from (name, newest first).
                l.insert(log_key(&r.refname, r.update_index), r);
            }
            Case {
                opts,
                refs: m.into_values().collect(),
                logs: l.into_values().collect(),
                probes,
            }
        })
}

fn log_key(name: &[u8], ui: u64) -> Vec<u8> {
    let mut k = name.to_vec();
    k.push(0);
    k.extend_from_slice(&(!ui).to_be_bytes());
    k
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn round_trip_and_seek(c in case()) {
        let mut w = TableWriter::new(c.opts);
        w.begin(0, 49).unwrap();
        for r in &c.refs {
            match w.add_ref(r) {
                Err(Error::EntryTooBig) => return Ok(()),
                other => other.unwrap(),
            }
        }
        for l in &c.logs {
            match w.add_log(l) {
                Err(Error::EntryTooBig) => return Ok(()),
                other => other.unwrap(),
            }
        }
        let bytes = match w.finish() {
            // An index that cannot shrink (long keys, small blocks) is refused at the end.
            Err(Error::EntryTooBig) => return Ok(()),
            Err(Error::EmptyTable) => {
                prop_assert!(c.refs.is_empty() && c.logs.is_empty());
                w.output().to_vec()
            }
            other => other.unwrap().to_vec(),
        };
        let t = Table::from_bytes("prop", bytes.clone()).unwrap();
        if !c.refs.is_empty() || !c.logs.is_empty() {
            t.verify().unwrap();
        }

        // Full scans give back exactly what went in.
        let mut it = t.ref_iter();
        it.seek(b"").unwrap();
        let mut got = Vec::new();
        while let Some(r) = it.next().unwrap() { got.push(r.clone()); }
        prop_assert_eq!(&got, &c.refs);
        let mut li = t.log_iter();
        li.seek(b"", u64::MAX).unwrap();
        let mut gotl = Vec::new();
        while let Some(l) = li.next().unwrap() { gotl.push(l.clone()); }
        prop_assert_eq!(&gotl, &c.logs);

        // Seek: every key exactly, every probe to its successor.
        for (i, r) in c.refs.iter().enumerate() {
            it.seek(&r.name).unwrap();
            prop_assert_eq!(it.next().unwrap(), Some(r));
            prop_assert_eq!(it.next().unwrap(), c.refs.get(i + 1));
        }
        for p in &c.probes {
            it.seek(p).unwrap();
            let want = c.refs.iter().find(|r| r.name.as_slice() >= p.as_slice());
            prop_assert_eq!(it.next().unwrap(), want);
        }
        for l in &c.logs {
            li.seek(&l.refname, l.update_index).unwrap();
            prop_assert_eq!(li.next().unwrap(), Some(l));
        }
        for p in &c.probes {
            li.seek(p, u64::MAX).unwrap();
            let k = log_key(p, u64::MAX);
            let want = c.logs.iter().find(|l| log_key(&l.refname, l.update_index) >= k);
            prop_assert_eq!(li.next().unwrap(), want);
        }

        // Re-encoding what we read gives the same bytes.
        if !c.refs.is_empty() || !c.logs.is_empty() {
            w.begin(0, 49).unwrap();
            for r in &got { w.add_ref(r).unwrap(); }
            for l in &gotl { w.add_log(l).unwrap(); }
            prop_assert_eq!(w.finish().unwrap(), bytes.as_slice());
        }
    }
}

/// Long keys in small blocks: every index record fills an index block on its own, so no
/// index level is smaller than the one below it. The writer reports `EntryTooBig` instead
/// of writing levels forever (the case that took `props` to 24 GiB).
#[test]
fn index_that_cannot_shrink_is_entry_too_big() {
    let id = ObjectId::from_bytes(&[3; 20]).unwrap();
    let mut w = TableWriter::new(WriteOptions {
        block_size: 256,
        ..WriteOptions::default()
    });
    w.begin(1, 1).unwrap();
    let mut result = Ok(());
    for i in 0..6u8 {
        // Distinct first bytes: no prefix compression between neighbours.
        let mut name = vec![b'a' + i];
        name.extend_from_slice(&[b'z'; 180]);
        result = w.add_ref(&RefRecord {
            name,
            update_index: 1,
            value: RefValue::Val1(id),
        });
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = w.finish().map(|_| ());
    }
    assert!(matches!(result, Err(Error::EntryTooBig)), "{result:?}");

    // The same for the log section, reached from add_log (finish_public_section).
    w.begin(1, 1).unwrap();
    let mut result = Ok(());
    for i in 0..6u8 {
        // Distinct first bytes: no prefix compression between neighbours.
        let mut name = vec![b'a' + i];
        name.extend_from_slice(&[b'y'; 180]);
        result = w.add_ref(&RefRecord {
            name,
            update_index: 1,
            value: RefValue::Val1(id),
        });
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = w.add_log(&LogRecord {
            refname: b"refs/heads/a".to_vec(),
            update_index: 1,
            old_id: id,
            new_id: id,
            message: b"m".to_vec(),
            ..LogRecord::default()
        });
    }
    assert!(matches!(result, Err(Error::EntryTooBig)), "{result:?}");

    // Keys that still let two index records share a block give a valid table.
    w.begin(1, 1).unwrap();
    for i in 0..20u8 {
        let mut name = vec![b'x'; 60];
        name.push(b'a' + i);
        w.add_ref(&RefRecord {
            name,
            update_index: 1,
            value: RefValue::Val1(id),
        })
        .unwrap();
    }
    let bytes = w.finish().unwrap().to_vec();
    Table::from_bytes("t", bytes).unwrap().verify().unwrap();
}
