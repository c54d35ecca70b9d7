//! Every record of a block, decoded for dumps, and the whole-table check (`verify`).

use std::sync::Arc;

use crate::error::Result;
use crate::format::codec::{
    self, be24, decode_log_value, decode_obj_value, decode_ref_value, BLOCK_INDEX, BLOCK_LOG,
    BLOCK_OBJ, BLOCK_REF,
};
use crate::format::{varint, LogRecord, ObjectId, RefRecord, RefValue};

use super::{BlockInfo, Cursor, Table};

/// A decoded record of any block type, for dumps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnyRecord {
    Ref(RefRecord),
    Log(LogRecord),
    Obj {
        prefix: Vec<u8>,
        positions: Vec<u64>,
    },
    Index {
        last_key: Vec<u8>,
        offset: u64,
    },
}

impl Table {
    /// Decodes every record of the block at `off` (the dump's view): `(record offset in
    /// the uncompressed block, prefix length, record)`.
    pub fn block_records(self: &Arc<Self>, info: &BlockInfo) -> Result<Vec<(usize, AnyRecord)>> {
        let mut cur = Cursor::new(self.clone());
        cur.set_block(self.load(info.offset)?);
        cur.single_block = true;
        let hash = self.header.hash;
        let mut out = Vec::new();
        loop {
            let start = cur.pos;
            let Some((extra, at)) = cur.next_key()? else {
                break;
            };
            let rec = match info.typ {
                BLOCK_REF => {
                    let mut v = RefValue::Deletion;
                    let mut spare = Vec::new();
                    let (d, n) = cur.decode_with(at, |b| {
                        decode_ref_value(b, extra, hash, &mut v, &mut spare)
                    })?;
                    cur.pos = at + n;
                    AnyRecord::Ref(RefRecord {
                        name: cur.key.clone(),
                        update_index: self.header.min_update_index.wrapping_add(d),
                        value: v,
                    })
                }
                BLOCK_LOG => {
                    let mut l = LogRecord::default();
                    let n = cur.decode_with(at, |b| decode_log_value(b, extra, hash, &mut l))?;
                    cur.pos = at + n;
                    let (name, ui) =
                        codec::split_log_key(&cur.key).map_err(|e| self.derr(info, e, start))?;
                    l.refname = name.to_vec();
                    l.update_index = ui;
                    AnyRecord::Log(l)
                }
                BLOCK_OBJ => {
                    let mut p = Vec::new();
                    let n = cur.decode_with(at, |b| decode_obj_value(b, extra, &mut p))?;
                    cur.pos = at + n;
                    AnyRecord::Obj {
                        prefix: cur.key.clone(),
                        positions: p,
                    }
                }
                _ => {
                    let (v, n) = cur.decode_with(at, |b| {
                        let mut r = codec::Reader::new(b);
                        let v = r.varint("bad index block position")?;
                        Ok((v, r.pos()))
                    })?;
                    cur.pos = at + n;
                    AnyRecord::Index {
                        last_key: cur.key.clone(),
                        offset: v,
                    }
                }
            };
            out.push((start, rec));
        }
        Ok(out)
    }

    /// Reads the restart offsets of a block (for dumps and checks).
    pub fn restarts(&self, info: &BlockInfo) -> Result<Vec<usize>> {
        let b = self.load(info.offset)?;
        Ok((0..b.info.restart_count)
            .map(|i| be24(b.bytes(), b.info.restart_off + 3 * i).unwrap_or(0) as usize)
            .collect())
    }

    /// Checks the whole table: every block and record decodes, keys strictly increase
    /// within each section, restart tables point at prefix-0 records, index records name
    /// the last key of the block they point to, update indexes respect the limits, and
    /// the footer's section offsets match the blocks found.
    pub fn verify(self: &Arc<Self>) -> Result<()> {
        let blocks = self.blocks()?;
        let mut last_key: Vec<u8> = Vec::new();
        let mut last_typ = 0u8;
        let mut last_keys = std::collections::HashMap::new();
        let mut section_start = std::collections::HashMap::new();
        let mut ref_ids: std::collections::HashMap<u64, Vec<ObjectId>> = Default::default();
        let mut objs: Vec<(u64, Vec<u8>, Vec<u64>)> = Vec::new();
        for info in &blocks {
            let recs = self.block_records(info)?;
            if recs.is_empty() {
                return Err(self.ferr(info.offset, "block without records"));
            }
            let restarts = self.restarts(info)?;
            let starts: Vec<usize> = recs.iter().map(|(s, _)| *s).collect();
            let b = self.load(info.offset)?;
            for r in &restarts {
                if starts.binary_search(r).is_err() {
                    return Err(
                        self.ferr(info.offset, format!("restart {r} is not a record start"))
                    );
                }
                let pfx = varint::get(b.bytes().get(*r..).unwrap_or_default()).map(|v| v.0);
                if pfx != Some(0) {
                    return Err(self.ferr(
                        info.offset + *r as u64,
                        "restart record with nonzero prefix",
                    ));
                }
            }
            if info.typ != last_typ {
                last_key.clear();
                section_start.entry(info.typ).or_insert(info.offset);
                last_typ = info.typ;
            }
            for (at, rec) in &recs {
                let mut key = Vec::new();
                match rec {
                    AnyRecord::Ref(r) => {
                        key.extend_from_slice(&r.name);
                        let ids = ref_ids.entry(info.offset).or_default();
                        match &r.value {
                            RefValue::Val1(v) => ids.push(*v),
                            RefValue::Val2 { value, peeled } => ids.extend([*value, *peeled]),
                            _ => {}
                        }
                        if r.update_index > self.header.max_update_index {
                            return Err(self.ferr(
                                info.offset + *at as u64,
                                "ref update index above table maximum",
                            ));
                        }
                    }
                    AnyRecord::Log(l) => {
                        codec::log_key(&mut key, &l.refname, l.update_index);
                        if !l.deleted && l.update_index > self.header.max_update_index {
                            return Err(
                                self.ferr(info.offset, "log update index above table maximum")
                            );
                        }
                    }
                    AnyRecord::Obj { prefix, positions } => {
                        key.extend_from_slice(prefix);
                        objs.push((info.offset, prefix.clone(), positions.clone()));
                    }
                    AnyRecord::Index {
                        last_key: k,
                        offset,
                    } => {
                        key.extend_from_slice(k);
                        match last_keys.get(offset) {
                            Some(lk) if lk == k => {}
                            _ => return Err(self.ferr(info.offset, format!("index record for {offset} does not match that block's last key"))),
                        }
                    }
                }
                if info.typ != BLOCK_INDEX && !last_key.is_empty() && key <= last_key {
                    return Err(self.ferr(info.offset + *at as u64, "keys out of order"));
                }
                last_key = key;
            }
            last_keys.insert(info.offset, last_key.clone());
        }
        // Obj records: each listed block is a ref block holding an id with that prefix,
        // and every id of every ref block is listed.
        let id_len = usize::from(self.footer.obj_id_len);
        if self.footer.obj_position > 0 {
            let mut listed = std::collections::HashSet::new();
            for (off, prefix, positions) in &objs {
                if prefix.len() != id_len {
                    return Err(
                        self.ferr(*off, "obj record prefix length differs from the footer's")
                    );
                }
                for p in positions {
                    let ids = ref_ids.get(p).ok_or_else(|| {
                        self.ferr(
                            *off,
                            format!("obj record lists {p}, which is not a ref block"),
                        )
                    })?;
                    if !ids.iter().any(|id| id.as_bytes().starts_with(prefix)) {
                        return Err(
                            self.ferr(*off, format!("obj record lists block {p} without that id"))
                        );
                    }
                    listed.insert((prefix.clone(), *p));
                }
                if positions.is_empty() {
                    for p in ref_ids.keys() {
                        listed.insert((prefix.clone(), *p));
                    }
                }
            }
            for (off, ids) in &ref_ids {
                for id in ids {
                    let prefix = id.as_bytes().get(..id_len).unwrap_or_default().to_vec();
                    if !listed.contains(&(prefix, *off)) {
                        return Err(self.ferr(
                            *off,
                            format!("object {id} of this block is missing from the obj index"),
                        ));
                    }
                }
            }
        }
        let f = &self.footer;
        let check = |typ: u8, pos: u64| -> Result<()> {
            let found = section_start.get(&typ).copied();
            let ok = match found {
                Some(o) => pos == o || (o == 0 && pos == 0),
                None => pos == 0,
            };
            if !ok {
                return Err(self.ferr(
                    self.end,
                    format!(
                        "footer position {pos} of section '{}' does not match",
                        typ as char
                    ),
                ));
            }
            Ok(())
        };
        check(BLOCK_OBJ, f.obj_position)?;
        if f.log_position > 0 || section_start.contains_key(&BLOCK_LOG) {
            check(BLOCK_LOG, f.log_position)?;
        }
        for pos in [
            f.ref_index_position,
            f.obj_index_position,
            f.log_index_position,
        ] {
            if pos > 0
                && !blocks
                    .iter()
                    .any(|b| b.offset == pos && b.typ == BLOCK_INDEX)
            {
                return Err(self.ferr(pos, "footer index position is not an index block"));
            }
        }
        Ok(())
    }
}
