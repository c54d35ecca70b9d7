//! Tests of the files backend's parsers and renderers.

use super::*;

const A: &str = "1111111111111111111111111111111111111111";
const B: &str = "2222222222222222222222222222222222222222";
const Z: &str = "0000000000000000000000000000000000000000";
const C: &str = "3333333333333333333333333333333333333333";

fn oid(h: &str) -> ObjectId {
    ObjectId::from_hex(h.as_bytes(), HashKind::Sha1).unwrap()
}

#[test]
fn loose_ref_oid_forms() {
    let want = LooseRef::Oid(oid(A));
    for content in [
        format!("{A}\n"),
        A.to_string(),
        format!("{A}  \r\n"),
        format!("{A}\0junk"),
    ] {
        assert_eq!(
            parse_loose_ref(content.as_bytes(), HashKind::Sha1),
            Ok(want.clone()),
            "{content:?}"
        );
    }
    // FETCH_HEAD style trailing data after whitespace is accepted.
    let fetch = format!("{A}\t\tbranch 'main' of ../sub\n");
    assert_eq!(parse_loose_ref(fetch.as_bytes(), HashKind::Sha1), Ok(want));
    // Upper-case hex is accepted, as git's hexval does.
    let lower = "abcdef0123456789abcdef0123456789abcdef01";
    let upper = lower.to_uppercase() + "\n";
    assert_eq!(
        parse_loose_ref(upper.as_bytes(), HashKind::Sha1),
        Ok(LooseRef::Oid(oid(lower)))
    );
}

#[test]
fn loose_ref_symref_forms() {
    for content in [
        "ref: refs/heads/main\n",
        "ref:refs/heads/main",
        "ref:\t  refs/heads/main \n",
    ] {
        assert_eq!(
            parse_loose_ref(content.as_bytes(), HashKind::Sha1),
            Ok(LooseRef::Symref(b"refs/heads/main".to_vec())),
            "{content:?}"
        );
    }
}

#[test]
fn loose_ref_rejects_garbage() {
    let bad = [
        "".to_string(),
        "\n".to_string(),
        "ref:".to_string(),
        "ref:   \n".to_string(),
        A[..39].to_string(),
        format!("{A}x\n"),
        format!("{A}1\n"),
        "zz".repeat(20),
    ];
    for content in bad {
        let e = parse_loose_ref(content.as_bytes(), HashKind::Sha1).unwrap_err();
        assert!(!e.what.is_empty(), "{content:?}");
    }
    // A SHA-1 id is too short for a SHA-256 repository.
    assert!(parse_loose_ref(format!("{A}\n").as_bytes(), HashKind::Sha256).is_err());
}

#[test]
fn loose_ref_round_trip() {
    for v in [
        LooseRef::Oid(oid(B)),
        LooseRef::Symref(b"refs/heads/x".to_vec()),
    ] {
        let mut out = Vec::new();
        render_loose_ref(&v, &mut out);
        assert_eq!(out.last(), Some(&b'\n'));
        assert_eq!(parse_loose_ref(&out, HashKind::Sha1), Ok(v));
    }
    let mut out = Vec::new();
    render_loose_ref(&LooseRef::Symref(b"refs/heads/main".to_vec()), &mut out);
    assert_eq!(out, b"ref: refs/heads/main\n");
}

#[test]
fn packed_refs_parse_sorted_with_peeled() {
    let text = format!(
        "# pack-refs with: peeled fully-peeled sorted \n{A} refs/heads/main\n{B} refs/tags/v1\n^{C}\n"
    );
    let mut p = PackedRefsParser::new(text.as_bytes(), HashKind::Sha1).unwrap();
    assert_eq!(
        p.traits(),
        PackedTraits {
            peeled: true,
            fully_peeled: true,
            sorted: true
        }
    );
    let first = p.next().unwrap().unwrap();
    assert_eq!((first.name, first.line), (b"refs/heads/main".as_slice(), 2));
    let refs = parse_packed_refs(text.as_bytes(), HashKind::Sha1).unwrap();
    assert_eq!(
        refs,
        vec![
            PackedRef {
                name: b"refs/heads/main".to_vec(),
                id: oid(A),
                peeled: None
            },
            PackedRef {
                name: b"refs/tags/v1".to_vec(),
                id: oid(B),
                peeled: Some(oid(C))
            },
        ]
    );
    let mut out = Vec::new();
    render_packed_refs(&refs, &mut out);
    assert_eq!(out, text.as_bytes());
}

#[test]
fn packed_refs_unsorted_input_is_sorted_and_headerless_ok() {
    let text = format!("{A} refs/tags/z\n{B} refs/heads/a\n^{C}\n{C} refs/heads/b\n");
    let refs = parse_packed_refs(text.as_bytes(), HashKind::Sha1).unwrap();
    let names: Vec<&[u8]> = refs.iter().map(|r| r.name.as_slice()).collect();
    assert_eq!(
        names,
        [b"refs/heads/a".as_slice(), b"refs/heads/b", b"refs/tags/z"]
    );
    assert_eq!(refs[0].peeled, Some(oid(C)));
    assert_eq!(refs[2].id, oid(A));
    assert!(parse_packed_refs(b"", HashKind::Sha1).unwrap().is_empty());
    assert!(parse_packed_refs(PACKED_REFS_HEADER, HashKind::Sha1)
        .unwrap()
        .is_empty());
}

#[test]
fn packed_refs_errors_name_the_line() {
    let cases = [
        (
            format!("{A} refs/heads/a\n{B} refs/heads/b"),
            2,
            "unterminated",
        ),
        (
            format!("{A} refs/heads/a\nbogus line\n"),
            2,
            "unexpected line",
        ),
        (format!("^{A}\n"), 1, "peeled line without"),
        (format!("{A} refs/heads/a\n^zz\n"), 2, "malformed peeled"),
        (format!("{A}refs/heads/a\n"), 1, "unexpected line"),
        (format!("{A} \n"), 1, "without a refname"),
        (
            format!("{A} refs/b\n{B} refs/a\n{C} refs/b\n"),
            3,
            "duplicate ref 'refs/b'",
        ),
    ];
    for (text, line, what) in cases {
        let e = parse_packed_refs(text.as_bytes(), HashKind::Sha1).unwrap_err();
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.to_string().contains(what), "{text:?}: {e}");
    }
    let e = parse_packed_refs(format!("{A} x\n{A} \n").as_bytes(), HashKind::Sha1)
        .unwrap_err()
        .in_file("/repo/.git/packed-refs");
    let msg = e.to_string();
    assert!(
        msg.contains("/repo/.git/packed-refs") && msg.contains("line 2"),
        "{msg}"
    );
}

#[test]
fn reflog_line_parses_like_git() {
    let line = format!("{A} {B} A U Thor <author@example.com> 1112911993 -0700\tcommit: second\n");
    let rec = parse_reflog_line(line.as_bytes(), HashKind::Sha1).unwrap();
    assert_eq!(rec.old_id, oid(A));
    assert_eq!(rec.new_id, oid(B));
    assert_eq!(rec.name, b"A U Thor");
    assert_eq!(rec.email, b"author@example.com");
    assert_eq!(rec.time, 1112911993);
    assert_eq!(rec.tz_offset, -700);
    assert_eq!(rec.message, b"commit: second\n");
    let mut out = Vec::new();
    render_reflog_line(&rec, HashKind::Sha1, &mut out);
    assert_eq!(out, line.as_bytes());
}

#[test]
fn reflog_line_without_message() {
    let line = format!("{A} {B} C O Mitter <c@o.m> 1700000000 +0130\n");
    let rec = parse_reflog_line(line.as_bytes(), HashKind::Sha1).unwrap();
    assert_eq!(rec.tz_offset, 130);
    assert_eq!(rec.message, b"\n");
    let mut out = Vec::new();
    render_reflog_line(&rec, HashKind::Sha1, &mut out);
    assert_eq!(out, line.as_bytes());
    // An empty message with tab survives as the empty message.
    let tabbed = format!("{A} {B} N <e> 5 +0000\t\n");
    assert_eq!(
        parse_reflog_line(tabbed.as_bytes(), HashKind::Sha1)
            .unwrap()
            .message,
        b"\n"
    );
}

#[test]
fn reflog_render_normalises_missing_newline_and_tz() {
    let rec = LogRecord {
        old_id: oid(A),
        new_id: oid(B),
        name: b"N".to_vec(),
        email: b"e@x".to_vec(),
        time: 42,
        tz_offset: -30,
        message: b"no newline".to_vec(),
        ..LogRecord::default()
    };
    let mut out = Vec::new();
    render_reflog_line(&rec, HashKind::Sha1, &mut out);
    assert_eq!(
        out,
        format!("{A} {B} N <e@x> 42 -0030\tno newline\n").as_bytes()
    );
}

#[test]
fn reflog_errors() {
    let good = format!("{A} {B} N <e> 5 +0000\tm\n");
    assert!(parse_reflog_line(good.as_bytes(), HashKind::Sha1).is_ok());
    // Time 0 is a time (SOURCE_DATE_EPOCH=0); null ids with an identity are a line.
    let epoch = parse_reflog_line(
        format!("{A} {B} N <e> 0 +0000\n").as_bytes(),
        HashKind::Sha1,
    );
    assert_eq!(epoch.ok().map(|r| r.time), Some(0));
    assert!(parse_reflog_line(
        format!("{Z} {Z} N <e> 0 +0000\n").as_bytes(),
        HashKind::Sha1
    )
    .is_ok());
    // A bare object id says what it is.
    let e = parse_reflog_line(format!("{Z}\n").as_bytes(), HashKind::Sha1).unwrap_err();
    assert!(e.to_string().contains("ends after an object id"), "{e}");
    let e = parse_reflog_line(format!("{A} {B}\n").as_bytes(), HashKind::Sha1).unwrap_err();
    assert!(
        e.to_string().contains("ends after the new object id"),
        "{e}"
    );
    let bad = [
        format!("{A} {B} N <e> 5 +0000\tm"),
        format!("{A}{B} N <e> 5 +0000\n"),
        format!("{A} {B} N e 5 +0000\n"),
        format!("{A} {B} N e> 5 +0000\n"),
        format!("{A} {B} N <e>5 +0000\n"),
        format!("{A} {B} N <e>  +0000\n"),
        format!("{A} {B} N <e> x +0000\n"),
        format!("{Z} {Z} <> 0 +0000\n"),
        format!("{A}\n"),
        format!("{A} {B} N <e> 5 0000\n"),
        format!("{A} {B} N <e> 5 +00\n"),
        format!("{A} {B} N <e> 5 +00a0\n"),
        format!("{A} {B} N <e> 5 +0000 x\n"),
        format!("{A} {B} N <e> 99999999999999999999999 +0000\n"),
        "\n".to_string(),
        String::new(),
    ];
    for line in bad {
        assert!(
            parse_reflog_line(line.as_bytes(), HashKind::Sha1).is_err(),
            "{line:?}"
        );
    }
    let file = format!("{good}{good}{A} broken\n");
    let e = parse_reflog(file.as_bytes(), b"refs/heads/x", HashKind::Sha1).unwrap_err();
    assert_eq!(e.line, 3);
    assert_eq!(e.offset, 2 * good.len());
    let ok = parse_reflog(
        format!("{good}{good}").as_bytes(),
        b"refs/heads/x",
        HashKind::Sha1,
    )
    .unwrap();
    assert_eq!(ok.len(), 2);
    assert_eq!(ok[1].refname, b"refs/heads/x");
}

#[test]
fn sha256_reflog_and_packed() {
    let a = "a".repeat(64);
    let b = "b".repeat(64);
    let line = format!("{a} {b} N <e> 5 +0000\tm\n");
    let rec = parse_reflog_line(line.as_bytes(), HashKind::Sha256).unwrap();
    assert_eq!(rec.new_id.kind(), HashKind::Sha256);
    assert!(parse_reflog_line(line.as_bytes(), HashKind::Sha1).is_err());
    let packed = format!("{a} refs/heads/x\n^{b}\n");
    let refs = parse_packed_refs(packed.as_bytes(), HashKind::Sha256).unwrap();
    assert_eq!(refs[0].peeled.unwrap().to_hex(), b);
}

proptest::proptest! {
    #[test]
    fn parsers_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
        let _ = parse_loose_ref(&bytes, HashKind::Sha1);
        let _ = parse_packed_refs(&bytes, HashKind::Sha1);
        let _ = parse_reflog(&bytes, b"x", HashKind::Sha256);
    }

    #[test]
    fn reflog_round_trips(name in "[A-Za-z][A-Za-z .]{0,20}[A-Za-z]", email in "[a-z@.]{0,20}",
                          time in 1u64..u64::MAX, tz in -1259i16..1259, msg in "[ -~]{0,40}") {
        let rec = LogRecord {
            old_id: oid(A), new_id: oid(C), name: name.into_bytes(), email: email.into_bytes(),
            time, tz_offset: tz, message: format!("{msg}\n").into_bytes(), ..LogRecord::default()
        };
        let mut out = Vec::new();
        render_reflog_line(&rec, HashKind::Sha1, &mut out);
        let back = parse_reflog_line(&out, HashKind::Sha1).unwrap();
        proptest::prop_assert_eq!(back, rec);
    }
}
