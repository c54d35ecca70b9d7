//! Golden round trip against git: `tests/fixtures/make-tables.sh` has git 2.47 write a set
//! of tables (SHA-1 and SHA-256, symrefs, peeled tags, multi-level indexes, obj sections,
//! multi-block log sections with a log index, a log-only table, tombstones, compacted
//! stacks, the t0613 layouts). For every table we decode every record, re-encode them
//! with the same options, and require the very same bytes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use reftablefs::table::{LogIter, RefIter, Table, TableWriter, WriteOptions};
use reftablefs::{LogRecord, RefRecord};

struct Case {
    name: String,
    restart_interval: u16,
    index_objects: bool,
    tables: Vec<PathBuf>,
}

/// The fixtures' directory and cases. The directory is removed when the test process
/// exits: a static is never dropped, so a `TempDir` held by one left a directory in /tmp
/// behind every run.
static FIXTURES: OnceLock<(PathBuf, Vec<Case>)> = OnceLock::new();

extern "C" fn remove_fixtures() {
    if let Some((dir, _)) = FIXTURES.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn fixtures() -> &'static (PathBuf, Vec<Case>) {
    FIXTURES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/make-tables.sh");
        let st = Command::new("sh")
            .arg(&script)
            .arg(dir.path())
            .status()
            .expect("run make-tables.sh");
        assert!(st.success(), "make-tables.sh failed");
        let manifest = std::fs::read_to_string(dir.path().join("manifest")).unwrap();
        let mut cases = Vec::new();
        for line in manifest.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let mut tables: Vec<PathBuf> = std::fs::read_dir(dir.path().join(f[0]))
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            tables.sort();
            cases.push(Case {
                name: f[0].to_string(),
                restart_interval: f[1].parse().unwrap(),
                index_objects: f[2] == "1",
                tables,
            });
        }
        // SAFETY: registers a plain function that only removes a directory.
        unsafe { libc::atexit(remove_fixtures) };
        (dir.keep(), cases)
    })
}

fn case(name: &str) -> &'static Case {
    fixtures()
        .1
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no fixture {name}"))
}

fn read_all(t: &Arc<Table>) -> (Vec<RefRecord>, Vec<LogRecord>) {
    let mut refs = Vec::new();
    let mut it = t.ref_iter();
    it.seek(b"").unwrap();
    while let Some(r) = it.next().unwrap() {
        refs.push(r.clone());
    }
    let mut logs = Vec::new();
    let mut it = t.log_iter();
    it.seek(b"", u64::MAX).unwrap();
    while let Some(l) = it.next().unwrap() {
        logs.push(l.clone());
    }
    (refs, logs)
}

fn reencode(t: &Arc<Table>, c: &Case, w: &mut TableWriter) -> Vec<u8> {
    let (refs, logs) = read_all(t);
    w.set_options(WriteOptions {
        block_size: t.block_size(),
        restart_interval: c.restart_interval,
        skip_index_objects: !c.index_objects,
        exact_log_message: true,
        hash: t.hash_kind(),
        ..WriteOptions::default()
    });
    w.begin(t.min_update_index(), t.max_update_index()).unwrap();
    for r in &refs {
        w.add_ref(r).unwrap();
    }
    for l in &logs {
        w.add_log(l).unwrap();
    }
    w.finish().unwrap().to_vec()
}

/// `[restart_off/restart_count]` per block of type `typ`, as t0613 prints them.
fn layout(t: &Table, typ: u8) -> Vec<(usize, usize)> {
    t.blocks()
        .unwrap()
        .iter()
        .filter(|b| b.typ == typ)
        .map(|b| (b.restart_off, b.restart_count))
        .collect()
}

#[test]
fn every_git_table_re_encodes_byte_for_byte() {
    let mut w = TableWriter::new(WriteOptions::default());
    let mut n = 0;
    for c in &fixtures().1 {
        for p in &c.tables {
            let t = Table::open(p).unwrap();
            t.verify()
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let ours = reencode(&t, c, &mut w);
            let git = std::fs::read(p).unwrap();
            if ours != git {
                let at = ours
                    .iter()
                    .zip(&git)
                    .position(|(a, b)| a != b)
                    .unwrap_or(ours.len().min(git.len()));
                panic!(
                    "{}: differs at byte {at} (ours {} bytes, git {} bytes)",
                    p.display(),
                    ours.len(),
                    git.len()
                );
            }
            n += 1;
        }
    }
    assert!(n >= 40, "only {n} tables checked");
}

#[test]
fn fixtures_cover_multilevel_indexes_sha256_and_log_only_tables() {
    let t = Table::open(&case("many-sha1").tables[0]).unwrap();
    let blocks = t.blocks().unwrap();
    let idx = blocks.iter().filter(|b| b.typ == b'i').count();
    assert!(
        idx >= 12,
        "multi-level ref index expected, got {idx} index blocks"
    );
    assert!(
        t.footer().obj_position > 0 && t.footer().obj_index_position > 0,
        "obj section with obj index"
    );
    let s = Table::open(&case("many-sha256").tables[0]).unwrap();
    assert_eq!(
        (s.version(), s.hash_kind()),
        (2, reftablefs::HashKind::Sha256)
    );
    let l = Table::open(&case("logs").tables[0]).unwrap();
    assert!(l.footer().log_index_position > 0, "log index");
    let lo = Table::open(&case("logonly").tables[1]).unwrap();
    assert!(
        !lo.has_refs() && lo.has_logs() && lo.footer().log_position == 0,
        "log-only table"
    );
    // Tombstones: the branch deletion in "mixed".
    let mut saw_ref_tomb = false;
    let mut saw_log_tomb = false;
    for p in &case("mixed").tables {
        let (refs, logs) = read_all(&Table::open(p).unwrap());
        saw_ref_tomb |= refs.iter().any(|r| r.is_deletion());
        saw_log_tomb |= logs.iter().any(|l| l.deleted);
    }
    assert!(saw_ref_tomb && saw_log_tomb);
    // The reflog message truncated to block_size / 2 plus "\n", and a detached HEAD.
    let (refs, logs) = read_all(&Table::open(&case("porcelain-sha256-packed").tables[0]).unwrap());
    assert!(
        logs.iter().any(|l| l.message.len() == 2049),
        "truncated long message"
    );
    assert!(matches!(refs[0].value, reftablefs::RefValue::Val1(_)) && refs[0].name == b"HEAD");
    let (refs, _) = read_all(&Table::open(&case("mixed-packed").tables[0]).unwrap());
    assert!(
        refs.iter()
            .any(|r| matches!(r.value, reftablefs::RefValue::Val2 { .. })),
        "peeled tag"
    );
    assert!(
        refs.iter()
            .any(|r| matches!(r.value, reftablefs::RefValue::Symref(_))),
        "symref"
    );
}

#[test]
fn t0613_layouts() {
    let t = Table::open(&case("basic-sha1").tables[0]).unwrap();
    assert_eq!(t.block_size(), 4096);
    assert_eq!(layout(&t, b'r'), [(129, 2)]);
    assert_eq!(layout(&t, b'g'), [(262, 2)]);

    let t = Table::open(&case("t0613-many").tables[0]).unwrap();
    assert_eq!(layout(&t, b'r'), [(4049, 11), (1136, 3)]);
    assert_eq!(
        layout(&t, b'g'),
        [(4041, 4), (4015, 3), (4014, 3), (4012, 3), (3289, 3)]
    );
    assert_eq!(layout(&t, b'i'), [(103, 1)]);
    assert_eq!(
        t.footer().ref_index_position,
        0,
        "2 ref blocks get no index"
    );

    let t = Table::open(&case("t0613-small").tables[0]).unwrap();
    assert_eq!(layout(&t, b'r'), [(53, 1), (74, 1), (38, 1)]);
    assert!(layout(&t, b'i').is_empty());

    let t = Table::open(&case("t0613-restart").tables[0]).unwrap();
    assert_eq!(layout(&t, b'r'), [(566, 13)]);
    assert_eq!(layout(&t, b'g'), [(1393, 12)]);

    for (name, obj) in [("t0613-obj-true", true), ("t0613-obj-false", false)] {
        let t = Table::open(&case(name).tables[0]).unwrap();
        assert_eq!(layout(&t, b'r'), [(53, 1), (95, 1), (71, 1), (80, 1)]);
        assert_eq!(layout(&t, b'i'), [(55, 2)]);
        assert_eq!(layout(&t, b'o'), if obj { vec![(11, 1)] } else { vec![] });
    }
}

#[test]
fn appendix_a_bytes() {
    let git = std::fs::read(&case("basic-sha1").tables[0]).unwrap();
    assert_eq!(git.len(), 334);
    assert_eq!(&git[..8], b"REFT\x01\x00\x10\x00");
    assert_eq!(&git[0x18..0x1c], &[0x72, 0x00, 0x00, 0x89]);
    assert_eq!(&git[0x1c..0x23], b"\x00\x23HEAD\x00");
    assert_eq!(&git[0x81..0x89], &[0, 0, 0x1c, 0, 0, 0x35, 0, 2]);
    assert_eq!(&git[0x89..0x8f], &[0x67, 0x00, 0x01, 0x0e, 0x78, 0xda]);
    let t = Table::from_bytes("appendix-a", git.clone()).unwrap();
    assert_eq!(t.footer().log_position, 137);
    let (refs, logs) = read_all(&t);
    assert_eq!(refs.len(), 3);
    assert_eq!(logs.len(), 2);
    assert_eq!(logs[0].tz_offset, -700);
    assert_eq!(logs[0].message, b"commit (initial): initial\n");
    assert_eq!(logs[0].name, b"C O Mitter");

    // The 584-byte index/obj example.
    let git = std::fs::read(&case("t0613-obj-true").tables[0]).unwrap();
    assert_eq!(git.len(), 584);
    assert_eq!(&git[400..404], &[0x69, 0x00, 0x00, 0x3f]);
    assert_eq!(&git[404..411], b"\x00\x20HEAD\x00");
    assert_eq!(&git[411..434], b"\x00\x80\x18refs/heads/branch-3\x64");
    assert_eq!(&git[434..438], b"\x12\x085\x80");
    assert_eq!(&git[500..504], &[0x6f, 0x00, 0x00, 0x10]);
    assert_eq!(&git[504..506], &[0x00, 0x13]);
    assert_eq!(
        &git[508..516],
        &[0x64, 0x64, 0x64, 0x00, 0x00, 0x04, 0x00, 0x01]
    );
    let t = Table::from_bytes("584", git).unwrap();
    assert_eq!(
        (
            t.footer().ref_index_position,
            t.footer().obj_position,
            t.footer().obj_id_len
        ),
        (400, 500, 2)
    );
}

#[test]
fn seeks_and_refs_for_on_git_tables() {
    let t = Table::open(&case("many-sha1").tables[0]).unwrap();
    let (refs, _) = read_all(&t);
    assert!(refs.len() > 3000);
    let mut it = t.ref_iter();
    for r in refs.iter().step_by(37) {
        it.seek(&r.name).unwrap();
        assert_eq!(it.next().unwrap().unwrap(), r);
    }
    it.seek(b"refs/heads/branch-999~").unwrap();
    assert!(it.next().unwrap().unwrap().name.as_slice() > b"refs/heads/branch-999~".as_slice());
    it.seek(b"\xff").unwrap();
    assert!(it.next().unwrap().is_none());
    // Through the obj index: every ref pointing at the first commit.
    let reftablefs::RefValue::Val1(id) = refs
        .iter()
        .find(|r| r.name == b"refs/heads/branch-0")
        .unwrap()
        .value
    else {
        panic!("branch-0 is not a plain ref")
    };
    let found = t.refs_for(&id).unwrap();
    let expected: Vec<_> = refs
        .iter()
        .filter(|r| r.value == reftablefs::RefValue::Val1(id))
        .cloned()
        .collect();
    assert_eq!(found, expected);
    assert!(found.len() >= 300);
    // A blob that exactly one ref points at, and an id no ref has.
    let b = refs
        .iter()
        .find(|r| r.name == b"refs/blobs/b1234")
        .unwrap()
        .clone();
    let reftablefs::RefValue::Val1(bid) = b.value else {
        panic!("not a plain ref")
    };
    assert_eq!(t.refs_for(&bid).unwrap(), vec![b]);
    let none = reftablefs::ObjectId::from_bytes(&[0xab; 20]).unwrap();
    assert!(t.refs_for(&none).unwrap().is_empty());

    // Logs: seek the newest entry of a ref and walk its history.
    let t = Table::open(&case("logs").tables[0]).unwrap();
    let mut it = t.log_iter();
    it.seek(b"refs/heads/master", u64::MAX).unwrap();
    let first = it.next().unwrap().unwrap().clone();
    assert_eq!(first.refname, b"refs/heads/master");
    assert_eq!(first.message, b"commit: commit number 299\n");
    it.seek(b"refs/heads/master", first.update_index - 100)
        .unwrap();
    assert_eq!(
        it.next().unwrap().unwrap().update_index,
        first.update_index - 100
    );
}

#[test]
fn compaction_normalises_the_existence_marker() {
    let marker = |t: &Arc<Table>| {
        read_all(t)
            .1
            .into_iter()
            .find(|l| !l.deleted && l.old_id.is_null() && l.new_id.is_null() && l.name.is_empty())
    };
    let before =
        marker(&Table::open(&case("logonly").tables[1]).unwrap()).expect("existence marker");
    assert_eq!(before.message, b"");
    let packed = Table::open(&case("logonly-packed").tables[0]).unwrap();
    let after = marker(&packed).expect("existence marker after pack-refs");
    assert_eq!(after.message, b"\n");
    // Our writer's normalisation (exact_log_message off) does what git's compaction did:
    // re-encoding the packed table's records from the uncompacted marker gives git's bytes.
    let (refs, mut logs) = read_all(&packed);
    for l in &mut logs {
        if l.refname == before.refname && l.update_index == before.update_index {
            *l = before.clone();
        }
    }
    let mut w = TableWriter::new(WriteOptions::default());
    w.begin(packed.min_update_index(), packed.max_update_index())
        .unwrap();
    for r in &refs {
        w.add_ref(r).unwrap();
    }
    for l in &logs {
        w.add_log(l).unwrap();
    }
    assert_eq!(w.finish().unwrap(), packed.read_all().unwrap());
}
