//! Reading one ref by name through a reseekable [`RefIter`] and following symrefs as
//! `git rev-parse` reads them (git's `refs_resolve_ref_unsafe`, at most
//! [`SYMREF_MAXDEPTH`] reads, every name checked with `check-ref-format`).

use crate::format::{ObjectId, RefValue};
use crate::refname::{check_refname_format, RefnameFlags, SYMREF_MAXDEPTH};
use crate::table::RefIter;
use crate::Result;

/// One raw read: the value of exactly `name`, if it exists (tombstones = absent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Raw {
    Missing,
    Oid {
        id: ObjectId,
        peeled: Option<ObjectId>,
    },
    Symref(Vec<u8>),
}

/// Reads exactly `name` through a reseekable iterator (one seek, one next).
pub fn read_raw(it: &mut dyn RefIter, name: &[u8]) -> Result<Raw> {
    it.seek(name)?;
    let Some(rec) = it.next()? else {
        return Ok(Raw::Missing);
    };
    if rec.name != name {
        return Ok(Raw::Missing);
    }
    Ok(match &rec.value {
        RefValue::Deletion => Raw::Missing,
        RefValue::Val1(id) => Raw::Oid {
            id: *id,
            peeled: None,
        },
        RefValue::Val2 { value, peeled } => Raw::Oid {
            id: *value,
            peeled: Some(*peeled),
        },
        RefValue::Symref(t) => Raw::Symref(t.clone()),
    })
}

/// The outcome of resolving one ref name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// The name (after following symrefs) holds an object id.
    Oid {
        /// The final, non-symbolic ref name.
        refname: Vec<u8>,
        id: ObjectId,
        peeled: Option<ObjectId>,
        /// Whether the starting name was a symref.
        via_symref: bool,
    },
    /// A symref chain ends at a missing ref (`refname` is the last name tried).
    Dangling { refname: Vec<u8> },
    /// The name does not exist (or is not a valid ref name).
    Missing,
    /// More than [`SYMREF_MAXDEPTH`] symref hops, or a symref to an invalid name.
    Broken { refname: Vec<u8> },
}

fn valid_for_reading(name: &[u8]) -> bool {
    check_refname_format(
        name,
        RefnameFlags {
            allow_onelevel: true,
            refspec_pattern: false,
        },
    )
    .is_ok()
}

/// Follows `name` through symrefs as `git rev-parse` reads it.
pub fn resolve(it: &mut dyn RefIter, name: &[u8]) -> Result<Resolved> {
    if !valid_for_reading(name) {
        return Ok(Resolved::Missing);
    }
    let mut current = name.to_vec();
    let mut via_symref = false;
    for _ in 0..SYMREF_MAXDEPTH {
        match read_raw(it, &current)? {
            Raw::Missing => {
                return Ok(if via_symref {
                    Resolved::Dangling { refname: current }
                } else {
                    Resolved::Missing
                })
            }
            Raw::Oid { id, peeled } => {
                return Ok(Resolved::Oid {
                    refname: current,
                    id,
                    peeled,
                    via_symref,
                })
            }
            Raw::Symref(target) => {
                if !valid_for_reading(&target) {
                    return Ok(Resolved::Broken { refname: target });
                }
                via_symref = true;
                current = target;
            }
        }
    }
    Ok(Resolved::Broken { refname: current })
}
