//! Ref-name rules: `git check-ref-format` (refs.c `check_refname_format`), git's
//! `refname_is_safe`, and the combination git 2.47 applies to transaction updates.
//!
//! Every rejection carries a reason, so callers can print messages such as
//! `invalid ref name 'refs/heads/a..b': contains '..'`.

use crate::{Error, Result};

/// git's `SYMREF_MAXDEPTH`: how many refs are read when resolving a name through
/// symbolic refs before it counts as a cycle (or too long a chain).
pub const SYMREF_MAXDEPTH: usize = 5;

/// Options of [`check_refname_format`], named after git's `REFNAME_*` flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefnameFlags {
    /// `REFNAME_ALLOW_ONELEVEL`: accept names with a single component (`HEAD`, `foo`).
    pub allow_onelevel: bool,
    /// `REFNAME_REFSPEC_PATTERN`: accept one `*` (a refspec pattern).
    pub refspec_pattern: bool,
}

fn reject(name: &[u8], reason: &str) -> Error {
    Error::Refname {
        name: String::from_utf8_lossy(name).into_owned(),
        reason: reason.to_owned(),
    }
}

/// What git's `refname_disposition` table says about one byte.
fn bad_byte_reason(b: u8) -> Option<&'static str> {
    match b {
        0 => Some("contains a NUL byte"),
        1..=0x1f | 0x7f => Some("contains a control character"),
        b' ' => Some("contains a space"),
        b':' => Some("contains ':'"),
        b'?' => Some("contains '?'"),
        b'[' => Some("contains '['"),
        b'\\' => Some("contains '\\'"),
        b'^' => Some("contains '^'"),
        b'~' => Some("contains '~'"),
        _ => None,
    }
}

/// Checks `name` against `git check-ref-format` with the given flags.
pub fn check_refname_format(name: &[u8], flags: RefnameFlags) -> Result<()> {
    if name == b"@" {
        return Err(reject(name, "'@' alone is not a valid ref name"));
    }
    if name.is_empty() {
        return Err(reject(name, "empty name"));
    }
    let mut star_allowed = flags.refspec_pattern;
    let mut components = 0usize;
    for component in name.split(|&b| b == b'/') {
        if component.is_empty() {
            return Err(reject(
                name,
                if components == 0 {
                    "begins with '/'"
                } else if name.ends_with(b"/") {
                    "ends with '/'"
                } else {
                    "contains an empty component ('//')"
                },
            ));
        }
        let mut last = 0u8;
        for &b in component {
            if let Some(reason) = bad_byte_reason(b) {
                return Err(reject(name, reason));
            }
            if b == b'.' && last == b'.' {
                return Err(reject(name, "contains '..'"));
            }
            if b == b'{' && last == b'@' {
                return Err(reject(name, "contains '@{'"));
            }
            if b == b'*' {
                if !star_allowed {
                    return Err(reject(name, "contains '*'"));
                }
                star_allowed = false;
            }
            last = b;
        }
        if component.starts_with(b".") {
            return Err(reject(name, "a component begins with '.'"));
        }
        if component.ends_with(b".lock") {
            return Err(reject(name, "a component ends with '.lock'"));
        }
        components += 1;
    }
    if name.ends_with(b".") {
        return Err(reject(name, "ends with '.'"));
    }
    if !flags.allow_onelevel && components < 2 {
        return Err(reject(name, "has only one component"));
    }
    Ok(())
}

/// git's `refname_is_safe`: names under `refs/` that are already normalised paths
/// (no empty, `.` or `..` component, no trailing `/`), or a one-level name of only
/// upper-case ASCII letters and `_` (stricter than [`is_root_ref_syntax`]: no `-`).
pub fn refname_is_safe(name: &[u8]) -> bool {
    if let Some(rest) = name.strip_prefix(b"refs/") {
        if rest.is_empty() || rest.ends_with(b"/") {
            return false;
        }
        return rest
            .split(|&b| b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..");
    }
    !name.is_empty() && name.iter().all(|&b| b.is_ascii_uppercase() || b == b'_')
}

/// git's `is_root_ref_syntax`: non-empty, only `A-Z`, `-` and `_`.
pub fn is_root_ref_syntax(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
}

/// git's `is_pseudo_ref`: `FETCH_HEAD` and `MERGE_HEAD` are plain files in the git
/// directory under every backend; transactions refuse to write them.
pub fn is_pseudo_ref(name: &[u8]) -> bool {
    name == b"FETCH_HEAD" || name == b"MERGE_HEAD"
}

/// git's `is_root_ref`: a name outside `refs/` that lives in the ref store — root-ref
/// syntax and either a `*_HEAD` or one of git's irregular root refs (`HEAD`,
/// `AUTO_MERGE`, …); pseudorefs excluded. Everything else at the top of a git directory
/// (`COMMIT_EDITMSG`, `FETCH_HEAD`, `config`, …) is a plain file. The one rule for the
/// whole crate.
pub fn is_root_ref(name: &[u8]) -> bool {
    const IRREGULAR: [&[u8]; 6] = [
        b"HEAD",
        b"AUTO_MERGE",
        b"BISECT_EXPECTED_REV",
        b"NOTES_MERGE_PARTIAL",
        b"NOTES_MERGE_REF",
        b"MERGE_AUTOSTASH",
    ];
    if !is_root_ref_syntax(name) || is_pseudo_ref(name) {
        return false;
    }
    name.ends_with(b"_HEAD") || IRREGULAR.contains(&name)
}

/// The check git 2.47 applies to every update in a ref transaction
/// (`ref_transaction_update`): a name that receives a value must pass
/// `check_refname_format` with one-level names allowed; a name that is deleted or only
/// verified must be "safe". Pseudorefs are refused.
pub fn check_for_update(name: &[u8], sets_value: bool) -> Result<()> {
    if is_pseudo_ref(name) {
        return Err(reject(name, "refusing to update pseudoref"));
    }
    if sets_value {
        check_refname_format(
            name,
            RefnameFlags {
                allow_onelevel: true,
                refspec_pattern: false,
            },
        )
    } else if refname_is_safe(name) {
        Ok(())
    } else {
        Err(reject(name, "refusing to update ref with bad name"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_refs() {
        for n in [
            "HEAD",
            "ORIG_HEAD",
            "CHERRY_PICK_HEAD",
            "AUTO_MERGE",
            "MERGE_AUTOSTASH",
            "FOO_HEAD",
        ] {
            assert!(is_root_ref(n.as_bytes()), "{n}");
        }
        for n in [
            "FETCH_HEAD",
            "MERGE_HEAD",
            "config",
            "HEAD.lock",
            "head",
            "refs/heads/x",
            "",
            "FOO",
            "COMMIT_EDITMSG",
            "ORIG-HEAD",
        ] {
            assert!(!is_root_ref(n.as_bytes()), "{n}");
        }
    }

    fn ok(name: &str, onelevel: bool) -> bool {
        check_refname_format(
            name.as_bytes(),
            RefnameFlags {
                allow_onelevel: onelevel,
                refspec_pattern: false,
            },
        )
        .is_ok()
    }

    #[test]
    fn check_ref_format_vectors() {
        // From git's t1402-check-ref-format.sh.
        for good in [
            "heads/foo",
            "foo/bar/baz",
            "heads/foo@bar",
            "foo/bar.baz",
            "refs/heads/a.b",
            "refs/heads/\u{e9}",
            "refs/heads/foo@",
            "refs/heads/{x}",
        ] {
            assert!(ok(good, false), "{good} should be valid");
        }
        for bad in [
            "foo",
            "heads/foo/",
            "/heads/foo",
            "./foo",
            "heads/foo/.bar",
            "heads/foo..bar",
            "heads/foo.lock",
            "heads///foo",
            "foo.",
            "heads/foo.",
            "heads/foo bar",
            "heads/foo\tbar",
            "heads/foo\x7fbar",
            "heads/foo~1",
            "heads/foo^1",
            "heads/foo:bar",
            "heads/foo?",
            "heads/foo[",
            "heads/foo\\bar",
            "heads/foo@{1}",
            "@",
            "heads/*",
            "",
        ] {
            assert!(!ok(bad, false), "{bad:?} should be invalid");
        }
        assert!(ok("HEAD", true));
        assert!(ok("foo", true));
        assert!(!ok("foo.lock", true));
        assert!(check_refname_format(
            b"refs/heads/*",
            RefnameFlags {
                allow_onelevel: false,
                refspec_pattern: true
            }
        )
        .is_ok());
        assert!(check_refname_format(
            b"refs/*/*",
            RefnameFlags {
                allow_onelevel: false,
                refspec_pattern: true
            }
        )
        .is_err());
    }

    #[test]
    fn reasons_are_specific() {
        let err = check_refname_format(b"refs/heads/a..b", RefnameFlags::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid ref name 'refs/heads/a..b': contains '..'"
        );
        let err = check_refname_format(b"refs/x.lock/y", RefnameFlags::default()).unwrap_err();
        assert!(err.to_string().contains("'.lock'"), "{err}");
    }

    #[test]
    fn safe_names_and_transactions() {
        assert!(refname_is_safe(b"refs/heads/main"));
        assert!(
            refname_is_safe(b"refs/heads/a..b"),
            "'..' inside a component is still safe"
        );
        assert!(!refname_is_safe(b"refs/heads/../../x"));
        assert!(!refname_is_safe(b"refs/"));
        assert!(!refname_is_safe(b"refs/heads//x"));
        assert!(refname_is_safe(b"ORIG_HEAD"));
        assert!(!refname_is_safe(b"foo"));
        assert!(!refname_is_safe(b"../../my-private-file"));
        // git 2.47: `update-ref foo HEAD` succeeds, `update-ref -d foo` is refused.
        assert!(check_for_update(b"foo", true).is_ok());
        assert!(check_for_update(b"foo", false).is_err());
        assert!(check_for_update(b"FETCH_HEAD", true).is_err());
        assert!(check_for_update(b"refs/heads/x.lock", true).is_err());
        assert!(check_for_update(b"refs/heads/@{x}", true).is_err());
        assert!(check_for_update(b"ORIG_HEAD", false).is_ok());
    }
}
