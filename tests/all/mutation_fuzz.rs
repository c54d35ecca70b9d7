//! Mutation fuzzing on stable Rust, run by every `cargo test`: valid inputs
//! (tables our writer makes with several options; loose refs, reflogs and `packed-refs`
//! as git writes them) are mutated at random (bit flips, byte sets, inserts, deletes,
//! truncation, chunk duplication, extreme field values) and fed to the table decoder and
//! to the parsers of `src/files.rs` that the mount uses. An error is a fine answer; a
//! panic, a hang (10 s watchdog per input) or a huge allocation (the test binary's 1 GiB
//! heap cap, [`crate::alloc::CAP`]) is a bug.
//!
//! Bounded and replayable: each target runs a fixed number of inputs from a fixed seed
//! ([`SEED`]), so `cargo test` tries the same inputs every time; `MUTATION_FUZZ_SEED`
//! sets the seed and `MUTATION_FUZZ_SECS` runs each target for that long instead (`make
//! fuzz` sets both, the seed from the clock). The seed is printed with a failure, and a
//! failing input is saved under `target/tmp/mutation-fuzz/`. The cargo-fuzz targets under
//! `fuzz/` are for longer runs.

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reftablefs::files::{
    parse_loose_ref, parse_packed_refs, parse_reflog, parse_reflog_line, render_loose_ref,
    PackedRefsParser,
};
use reftablefs::table::{LogIter, RefIter, Table, TableWriter, WriteOptions};
use reftablefs::{HashKind, LogRecord, ObjectId, RefRecord, RefValue};

use crate::rng::{self, Rng};

/// The seed of `cargo test`'s runs.
const SEED: u64 = 0x5eed_f022;

/// How long a target runs: `MUTATION_FUZZ_SECS` seconds when set (at most 600), else
/// `inputs` inputs.
fn budget(inputs: u64) -> (u64, Option<Duration>) {
    match std::env::var("MUTATION_FUZZ_SECS")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
    {
        Some(secs) => (
            u64::MAX,
            Some(Duration::from_secs_f64(secs.clamp(0.0, 600.0))),
        ),
        None => (inputs, None),
    }
}

/// One random mutation of `buf`.
fn mutate(rng: &mut Rng, buf: &mut Vec<u8>) {
    let len = buf.len();
    match rng.below(9) {
        0 if len > 0 => {
            let i = rng.below(len);
            buf[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            buf[i] = rng.next_u64() as u8;
        }
        2 => {
            let i = rng.below(len + 1);
            let n = 1 + rng.below(8);
            for _ in 0..n {
                buf.insert(i, rng.next_u64() as u8);
            }
        }
        3 if len > 0 => {
            let i = rng.below(len);
            let n = (1 + rng.below(16)).min(len - i);
            buf.drain(i..i + n);
        }
        4 => buf.truncate(rng.below(len + 1)),
        5 if len > 0 => {
            // Duplicate a chunk somewhere else.
            let a = rng.below(len);
            let n = (1 + rng.below(64)).min(len - a);
            let chunk = buf[a..a + n].to_vec();
            let at = rng.below(buf.len() + 1);
            buf.splice(at..at, chunk);
        }
        6 if len >= 4 => {
            // An extreme length/offset field: 0xff.. or 0x00.. over 1..4 bytes.
            let n = 1 + rng.below(4);
            let i = rng.below(len - n + 1);
            let v = if rng.next_u64() & 1 == 0 { 0xff } else { 0 };
            buf[i..i + n].fill(v);
        }
        7 if len > 0 => {
            // Interesting bytes for the text parsers.
            const SPECIAL: &[u8] = b"\n\t \0/:<>+-0fF\x7f\xff";
            let i = rng.below(len);
            buf[i] = SPECIAL[rng.below(SPECIAL.len())];
        }
        _ => {
            if len > 1 {
                let i = rng.below(len);
                let j = rng.below(len);
                buf.swap(i, j);
            }
        }
    }
}

/// Runs `check` on `inputs` mutants of `corpus` (or for [`budget`]'s time), under a
/// watchdog. A panic saves the input and fails the test.
fn fuzz(target: &str, inputs: u64, corpus: &[Vec<u8>], check: impl Fn(&[u8])) {
    assert!(!corpus.is_empty());
    let seed = rng::seed("MUTATION_FUZZ_SEED", SEED);
    let (inputs, time) = budget(inputs);
    let mut rng = Rng::new(
        seed ^ target
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31) ^ u64::from(b)),
    );
    // Every corpus entry unmutated first: they must pass.
    for c in corpus {
        check(c);
    }
    let progress = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let watchdog = {
        let (progress, done) = (Arc::clone(&progress), Arc::clone(&done));
        let target = target.to_owned();
        std::thread::spawn(move || {
            let mut last = (0, Instant::now());
            while done.load(Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(100));
                let p = progress.load(Ordering::SeqCst);
                if p != last.0 {
                    last = (p, Instant::now());
                } else if last.1.elapsed() > Duration::from_secs(10) {
                    let _ = writeln!(
                        std::io::stderr(),
                        "mutation_fuzz: {target}: input {p} runs for more than 10 s (hang); seed {seed}"
                    );
                    std::process::abort();
                }
            }
        })
    };
    let start = Instant::now();
    let mut n = 0u64;
    while n < inputs && time.is_none_or(|t| start.elapsed() < t) {
        let mut input = corpus[rng.below(corpus.len())].clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut input);
        }
        n += 1;
        progress.store(n, Ordering::SeqCst);
        if catch_unwind(AssertUnwindSafe(|| check(&input))).is_err() {
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("mutation-fuzz");
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("{target}-{seed}-{n}.bin"));
            let _ = std::fs::write(&file, &input);
            done.store(1, Ordering::SeqCst);
            panic!(
                "{target}: panic on input {n} (seed {seed}), saved to {}",
                file.display()
            );
        }
    }
    done.store(1, Ordering::SeqCst);
    let _ = watchdog.join();
    eprintln!(
        "mutation_fuzz: {target}: {n} inputs in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

fn oid(hash: HashKind, n: u64) -> ObjectId {
    let mut b = vec![0u8; hash.size()];
    for (i, x) in b.iter_mut().enumerate() {
        *x = (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (8 * (i % 8))) as u8 ^ i as u8;
    }
    ObjectId::from_bytes(&b).unwrap()
}

/// Tables with refs of every kind, an obj section, logs, and (small blocks) multi-level
/// indexes.
fn table_corpus() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (hash, block_size, refs, logs) in [
        (HashKind::Sha1, 4096, 20, 5),
        (HashKind::Sha1, 256, 300, 40),
        (HashKind::Sha256, 512, 120, 20),
        (HashKind::Sha1, 1024, 0, 30),
    ] {
        let mut w = TableWriter::new(WriteOptions {
            block_size,
            hash,
            ..WriteOptions::default()
        });
        w.begin(1, 5).unwrap();
        for i in 0..refs {
            let name = format!("refs/heads/topic/{i:05}").into_bytes();
            let value = match i % 4 {
                0 => RefValue::Deletion,
                1 => RefValue::Val1(oid(hash, i)),
                2 => RefValue::Val2 {
                    value: oid(hash, i),
                    peeled: oid(hash, i + 1),
                },
                _ => RefValue::Symref(b"refs/heads/main".to_vec()),
            };
            w.add_ref(&RefRecord {
                name,
                update_index: 1 + i % 5,
                value,
            })
            .unwrap();
        }
        for i in 0..logs {
            w.add_log(&LogRecord {
                refname: format!("refs/heads/l{i:04}").into_bytes(),
                update_index: 3,
                old_id: oid(hash, i),
                new_id: oid(hash, i + 7),
                name: b"A U Thor".to_vec(),
                email: b"author@example.com".to_vec(),
                time: 1_112_912_053 + i,
                tz_offset: -700,
                message: format!("commit: change {i}\n").into_bytes(),
                ..LogRecord::default()
            })
            .unwrap();
        }
        out.push(w.finish().unwrap().to_vec());
    }
    out
}

fn decode_table(bytes: &[u8]) {
    let Ok(t) = Table::from_bytes("fuzz", bytes.to_vec()) else {
        return;
    };
    let mut it = t.ref_iter();
    let mut names = Vec::new();
    if it.seek(b"").is_ok() {
        let mut n = 0;
        while let Ok(Some(r)) = it.next() {
            if names.len() < 32 {
                names.push(r.name.clone());
            }
            n += 1;
            assert!(n <= bytes.len(), "more records than bytes");
        }
    }
    for n in &names {
        let _ = it.seek(n).and_then(|()| it.next().map(|_| ()));
    }
    let _ = it.seek(b"refs/heads/topic/00077");
    let mut li = t.log_iter();
    if li.seek(b"", u64::MAX).is_ok() {
        let mut n = 0;
        while let Ok(Some(_)) = li.next() {
            n += 1;
            assert!(n <= bytes.len(), "more log records than bytes");
        }
    }
    let _ = li.seek(b"refs/heads/l0003", 3);
    let _ = t.refs_for(&oid(t.hash_kind(), 9));
    let _ = t.verify();
}

#[test]
fn table_decoder_survives_mutations() {
    fuzz("table", 5_000, &table_corpus(), decode_table);
}

#[test]
fn loose_ref_parser_survives_mutations() {
    let corpus: Vec<Vec<u8>> = vec![
        format!("{}\n", oid(HashKind::Sha1, 1).to_hex()).into_bytes(),
        b"ref: refs/heads/main\n".to_vec(),
        format!(
            "{}\t\tbranch 'main' of https://example.com/r\n",
            oid(HashKind::Sha1, 2).to_hex()
        )
        .into_bytes(),
        b"ref:   refs/remotes/origin/HEAD  \n".to_vec(),
    ];
    fuzz("loose_ref", 150_000, &corpus, |input| {
        for hash in [HashKind::Sha1, HashKind::Sha256] {
            if let Ok(v) = parse_loose_ref(input, hash) {
                // What parses, re-rendered as git writes it, parses to the same value.
                let mut out = Vec::new();
                render_loose_ref(&v, &mut out);
                assert_eq!(parse_loose_ref(&out, hash).ok(), Some(v), "{input:?}");
            }
        }
    });
}

#[test]
fn reflog_parser_survives_mutations() {
    let (a, b) = (
        oid(HashKind::Sha1, 1).to_hex(),
        oid(HashKind::Sha1, 2).to_hex(),
    );
    let z = "0".repeat(40);
    let corpus: Vec<Vec<u8>> = vec![
        format!(
            "{z} {a} A U Thor <author@example.com> 1112912053 -0700\tcommit (initial): one\n\
             {a} {b} A U Thor <author@example.com> 1112912113 +0130\tcommit: two\n"
        )
        .into_bytes(),
        format!("{a} {b} C O Mitter <c@example.com> 1112912053 +0000\n").into_bytes(),
        format!("{a} {b} <> 0 +0000\t\n").into_bytes(),
    ];
    fuzz("reflog", 80_000, &corpus, |input| {
        let _ = parse_reflog(input, b"refs/heads/main", HashKind::Sha1);
        let _ = parse_reflog_line(input, HashKind::Sha1);
        let _ = parse_reflog_line(input, HashKind::Sha256);
    });
}

#[test]
fn packed_refs_parser_survives_mutations() {
    let (a, b) = (
        oid(HashKind::Sha1, 1).to_hex(),
        oid(HashKind::Sha1, 2).to_hex(),
    );
    let corpus: Vec<Vec<u8>> = vec![
        format!(
            "# pack-refs with: peeled fully-peeled sorted \n\
             {a} refs/heads/main\n{b} refs/tags/v1\n^{a}\n{b} refs/tags/v2\n"
        )
        .into_bytes(),
        format!("{b} refs/heads/b\n{a} refs/heads/a\n").into_bytes(),
        format!("# pack-refs with: peeled \n{a} refs/tags/t\n^{b}\n").into_bytes(),
    ];
    fuzz("packed_refs", 60_000, &corpus, |input| {
        for hash in [HashKind::Sha1, HashKind::Sha256] {
            let _ = parse_packed_refs(input, hash);
            if let Ok(p) = PackedRefsParser::new(input, hash) {
                let _ = p.traits();
                for (i, e) in p.enumerate() {
                    assert!(i <= input.len(), "more records than bytes");
                    if e.is_err() {
                        break;
                    }
                }
            }
        }
    });
}
