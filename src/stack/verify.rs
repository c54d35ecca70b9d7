//! Checking a reftable stack as `git refs verify` does, with its message ids
//! (`reftablefs verify` prints the report as git does).
//!
//! Checks:
//! * `tables.list`: parses, every line ends in `\n`, names follow
//!   `0x<hex>-0x<hex>-<hex>.ref|.log` (`badReftableTableName`, a warning as in git);
//! * every listed table opens (header, footer, footer CRC) and passes a full block walk
//!   (block structure, restart points, key order inside and across blocks, indexes,
//!   update indexes within the table's limits) (`badReftable`);
//! * all tables have the stack's hash and update-index ranges that increase
//!   (`badReftableOrder`);
//! * the merged view (newest wins): every live ref name passes `check-ref-format`
//!   (`badRefName`); symref targets are valid names under `refs/` or root refs
//!   (`badReferentName`, as git's fsck); no ref is both a file and a directory
//!   (`refs/a` and `refs/a/b`: `badRefDFConflict`); symref chains
//!   resolve within git's depth (`badSymrefChain`, a warning; dangling is normal).

use crate::format::RefValue;
use crate::refname::{check_refname_format, RefnameFlags};
use crate::resolve::{resolve, Resolved};
use crate::stack::parse_tables_list;
use crate::table::{RefIter, Table};
use crate::Result;

/// Whether `name` is a table name git's fsck accepts.
pub fn valid_table_name(name: &str) -> bool {
    let Some(stem) = name
        .strip_suffix(".ref")
        .or_else(|| name.strip_suffix(".log"))
    else {
        return false;
    };
    let parts: Vec<&str> = stem.split('-').collect();
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    match parts.as_slice() {
        [a, b, c] => {
            a.strip_prefix("0x").is_some_and(hex) && b.strip_prefix("0x").is_some_and(hex) && hex(c)
        }
        _ => false,
    }
}

/// Problems found, as git prints them.
#[derive(Debug, Default)]
pub struct Report {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// Verifies the stack in `dir` against `hash`.
pub fn verify_stack(dir: &std::path::Path, hash: crate::HashKind) -> Result<Report> {
    let mut rep = Report::default();
    let list_path = dir.join("tables.list");
    let content = match std::fs::read(&list_path) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::stack::missing_list_error(&list_path)?;
            Vec::new()
        }
        Err(e) => return Err(crate::Error::io(list_path, e)),
    };
    if !content.is_empty() && content.last() != Some(&b'\n') {
        rep.errors
            .push("tables.list: badReftableList: last line does not end in a newline".into());
    }
    let names = match parse_tables_list(&content, &list_path.display().to_string()) {
        Ok(n) => n,
        Err(e) => {
            rep.errors
                .push(format!("tables.list: badReftableList: {e}"));
            return Ok(rep);
        }
    };
    let mut tables = Vec::new();
    // The tables stay open together: one cache for all of them.
    let cache = crate::table::BlockCache::new(crate::table::DEFAULT_BLOCK_CACHE_BYTES);
    let mut last_max: Option<u64> = None;
    for name in &names {
        if !valid_table_name(name) {
            rep.warnings.push(format!(
                "{name}: badReftableTableName: invalid reftable table name"
            ));
        }
        let t = match Table::open_in(dir.join(name), &cache) {
            Ok(t) => t,
            Err(e) => {
                rep.errors.push(format!("{name}: badReftable: {e}"));
                continue;
            }
        };
        if let Err(e) = t.verify() {
            rep.errors.push(format!("{name}: badReftable: {e}"));
        }
        if t.hash_kind() != hash {
            rep.errors.push(format!(
                "{name}: badReftable: hash {} in a {} repository",
                t.hash_kind().name(),
                hash.name()
            ));
        }
        if t.min_update_index() > t.max_update_index() {
            rep.errors.push(format!(
                "{name}: badReftableOrder: min update index {} above max {}",
                t.min_update_index(),
                t.max_update_index()
            ));
        }
        if let Some(prev) = last_max {
            if t.min_update_index() <= prev {
                rep.errors.push(format!(
                    "{name}: badReftableOrder: update indexes {}..{} overlap the previous table (max {prev})",
                    t.min_update_index(),
                    t.max_update_index()
                ));
            }
        }
        last_max = Some(t.max_update_index());
        tables.push(t);
    }
    if !rep.errors.is_empty() {
        return Ok(rep);
    }
    let subs = || -> Vec<crate::merged::BoxRefIter> {
        tables
            .iter()
            .map(|t| Box::new(t.ref_iter()) as crate::merged::BoxRefIter)
            .collect()
    };
    let mut list = crate::merged::MergedRefIter::new(subs());
    let mut res = crate::merged::MergedRefIter::new(subs());
    list.seek(b"")?;
    let flags = RefnameFlags {
        allow_onelevel: true,
        refspec_pattern: false,
    };
    // The most recent live names that are proper prefixes of later names (a stack of
    // "directory candidates") to detect D/F conflicts in one pass.
    let mut ancestors: Vec<Vec<u8>> = Vec::new();
    while let Some(rec) = list.next()? {
        if rec.is_deletion() {
            continue;
        }
        let name = String::from_utf8_lossy(&rec.name).into_owned();
        if check_refname_format(&rec.name, flags).is_err()
            || (!rec.name.starts_with(b"refs/") && !crate::refname::is_root_ref_syntax(&rec.name))
        {
            rep.errors
                .push(format!("{name}: badRefName: invalid refname format"));
        }
        while let Some(a) = ancestors.last() {
            if rec.name.starts_with(a) && rec.name.get(a.len()) == Some(&b'/') {
                rep.errors.push(format!(
                    "{name}: badRefDFConflict: '{}' exists; cannot have '{name}'",
                    String::from_utf8_lossy(a)
                ));
                break;
            }
            if rec.name.starts_with(a) {
                break;
            }
            ancestors.pop();
        }
        ancestors.push(rec.name.clone());
        if let RefValue::Symref(target) = &rec.value {
            // git's fsck: a referent is a valid name under `refs/`, or a root ref.
            let valid_referent = check_refname_format(target, flags).is_ok()
                && (target.starts_with(b"refs/") || crate::refname::is_root_ref(target));
            if !valid_referent {
                rep.errors.push(format!(
                    "{name}: badReferentName: points to invalid refname '{}'",
                    String::from_utf8_lossy(target)
                ));
            } else if let Resolved::Broken { .. } = resolve(&mut res, &rec.name)? {
                rep.warnings.push(format!(
                    "{name}: badSymrefChain: symref chain too deep or broken"
                ));
            }
        }
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_like_git_fsck() {
        assert!(valid_table_name(
            "0x000000000001-0x000000000003-1a9ba01a.ref"
        ));
        assert!(valid_table_name("0x1-0x2-3.log"));
        for bad in [
            "foo-bar-0001.ref",
            "0x1-0xzz-3.ref",
            "0x1-0x2-3.abc",
            "0x1-0x2-3.refabc",
            "0x1-0x2.ref",
        ] {
            assert!(!valid_table_name(bad), "{bad}");
        }
    }
}
