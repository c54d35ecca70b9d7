//! `compact` and `verify` beside `git pack-refs` and `git refs verify`.

use super::*;

#[test]
fn compact_and_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    assert!(tables(d).len() > 3, "auto-compaction is off in these tests");
    let listing = git(d, &["for-each-ref"]);
    assert!(ours(d, &["compact", "--auto"]).status.success());
    let o = ours(d, &["compact"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(tables(d).len(), 1);
    assert_eq!(git(d, &["for-each-ref"]), listing);
    verify_integrity(d);
    let o = ours(d, &["verify"]);
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // A held lock: git's message, exit 1.
    std::fs::write(d.join(".git/reftable/tables.list.lock"), "").unwrap();
    let o = ours(d, &["compact"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr)
        .starts_with("error: unable to compact stack: data is locked"));
    std::fs::remove_file(d.join(".git/reftable/tables.list.lock")).unwrap();

    // Reftable has no block checksums: corrupt structure, not payload. The first
    // block's type byte (after the 24-byte header), then a footer byte (CRC).
    let t = tables(d)[0].clone();
    let good = std::fs::read(&t).unwrap();
    for at in [24, good.len() - 10] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x55;
        std::fs::write(&t, &bytes).unwrap();
        let o = ours(d, &["verify"]);
        assert_eq!(o.status.code(), Some(1), "byte {at}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.starts_with("error: ") && err.contains("badReftable"),
            "byte {at}: {err}"
        );
    }
    std::fs::write(&t, &good).unwrap();
    assert!(ours(d, &["verify"]).status.success());
}

#[test]
fn verify_reports_names_like_git_refs_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    let rt = d.join(".git/reftable");
    let first = tables(d)[0].clone();
    std::fs::rename(&first, rt.join("foo-bar-0001.ref")).unwrap();
    let list = std::fs::read_to_string(rt.join("tables.list")).unwrap();
    let name = first.file_name().unwrap().to_str().unwrap();
    std::fs::write(
        rt.join("tables.list"),
        list.replace(name, "foo-bar-0001.ref"),
    )
    .unwrap();
    let o = ours(d, &["verify"]);
    assert_eq!(o.status.code(), Some(0), "a warning only");
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "warning: foo-bar-0001.ref: badReftableTableName: invalid reftable table name\n"
    );
}

/// A stack that git's transactions would never write (written here table by table with
/// the library's writer): `verify` names every problem as `git refs verify` would.
#[test]
fn verify_finds_bad_names_referents_and_df_conflicts() {
    use reftablefs::table::{TableWriter, WriteOptions};
    use reftablefs::{ObjectId, RefRecord, RefValue};
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    let id = ObjectId::from_hex(
        git(d, &["rev-parse", "refs/heads/main"]).trim().as_bytes(),
        reftablefs::HashKind::Sha1,
    )
    .unwrap();
    let rt = d.join(".git/reftable");
    let list = std::fs::read_to_string(rt.join("tables.list")).unwrap();
    let last = list.lines().last().unwrap();
    let max: u64 =
        u64::from_str_radix(last.split('-').nth(1).unwrap().trim_start_matches("0x"), 16).unwrap();
    let ui = max + 1;
    let mut refs = vec![
        RefRecord {
            name: b"refs/heads/bad..name".to_vec(),
            update_index: ui,
            value: RefValue::Val1(id),
        },
        RefRecord {
            name: b"refs/heads/main/sub".to_vec(),
            update_index: ui,
            value: RefValue::Val1(id),
        },
        RefRecord {
            name: b"refs/heads/garbage-sym".to_vec(),
            update_index: ui,
            value: RefValue::Symref(b"garbage".to_vec()),
        },
    ];
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut w = TableWriter::new(WriteOptions::default());
    w.begin(ui, ui).unwrap();
    for r in &refs {
        w.add_ref(r).unwrap();
    }
    let bytes = w.finish().unwrap().to_vec();
    let name = format!("0x{ui:012x}-0x{ui:012x}-12345678.ref");
    std::fs::write(rt.join(&name), bytes).unwrap();
    std::fs::write(rt.join("tables.list"), format!("{list}{name}\n")).unwrap();

    let o = ours(d, &["verify"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    for want in [
        "error: refs/heads/bad..name: badRefName: invalid refname format",
        "error: refs/heads/garbage-sym: badReferentName: points to invalid refname 'garbage'",
        "error: refs/heads/main/sub: badRefDFConflict: 'refs/heads/main' exists; cannot have 'refs/heads/main/sub'",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    assert_eq!(err.lines().count(), 3, "{err}");
}
