//! Any bytes as a table: open, scan refs and logs, seek, look up by object id, verify.
//! Errors are fine; panics, hangs and huge allocations are bugs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reftablefs::table::{LogIter, RefIter, Table};

fuzz_target!(|data: &[u8]| {
    let Ok(t) = Table::from_bytes("fuzz", data.to_vec()) else { return };
    let mut it = t.ref_iter();
    let mut names = Vec::new();
    if it.seek(b"").is_ok() {
        while let Ok(Some(r)) = it.next() {
            if names.len() < 64 {
                names.push(r.name.clone());
            }
        }
    }
    for n in &names {
        let _ = it.seek(n).and_then(|()| it.next().map(|_| ()));
    }
    let mut li = t.log_iter();
    if li.seek(b"", u64::MAX).is_ok() {
        while let Ok(Some(_)) = li.next() {}
    }
    if let Some(id) = reftablefs::ObjectId::from_bytes(&[0x5e; 20]) {
        let _ = t.refs_for(&id);
    }
    let _ = t.verify();
});
