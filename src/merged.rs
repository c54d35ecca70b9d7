//! Newest-wins merge of several tables' iterators (git's `merged.c` + `pq.c`).
//!
//! Each sub-iterator (one per table, oldest first) has a slot holding its current record.
//! A binary min-heap of slot indices orders them by key, and on equal keys the slot of the
//! **higher table index** (the newer table) comes first. `next()` pops the minimum, pops
//! and advances every other slot with an equal key (shadowing), and lends the winner
//! straight out of its slot; the winner's sub-iterator is advanced on the following call.
//!
//! Records are copied into slots with [`copy_ref`]/[`copy_log`], which reuse the slots'
//! allocations: after warm-up, `seek` + `next` allocate nothing.
//!
//! Tombstones are returned by default (callers skip them after their own bounds check,
//! as git does since `146a946321`); [`MergedRefIter::suppress_deletions`] hides them.

use std::cmp::Ordering;

use crate::format::{LogRecord, RefRecord, RefValue};
use crate::table::{LogIter, RefIter};
use crate::{Error, Result};

/// Copies `src` into `dst`, reusing `dst`'s buffers.
pub fn copy_ref(dst: &mut RefRecord, src: &RefRecord) {
    dst.name.clear();
    dst.name.extend_from_slice(&src.name);
    dst.update_index = src.update_index;
    match (&mut dst.value, &src.value) {
        (RefValue::Symref(d), RefValue::Symref(s)) => {
            d.clear();
            d.extend_from_slice(s);
        }
        (d, s) => d.clone_from(s),
    }
}

/// Copies `src` into `dst`, reusing `dst`'s buffers.
pub fn copy_log(dst: &mut LogRecord, src: &LogRecord) {
    dst.refname.clear();
    dst.refname.extend_from_slice(&src.refname);
    dst.update_index = src.update_index;
    dst.deleted = src.deleted;
    dst.old_id = src.old_id;
    dst.new_id = src.new_id;
    dst.name.clear();
    dst.name.extend_from_slice(&src.name);
    dst.email.clear();
    dst.email.extend_from_slice(&src.email);
    dst.time = src.time;
    dst.tz_offset = src.tz_offset;
    dst.message.clear();
    dst.message.extend_from_slice(&src.message);
}

/// Key order of log records: refname ascending, then update index descending.
pub fn log_key_cmp(a: &LogRecord, b: &LogRecord) -> Ordering {
    a.refname
        .cmp(&b.refname)
        .then(b.update_index.cmp(&a.update_index))
}

/// A binary min-heap of slot indices; `less(a, b)` decides the order. Keeps its
/// allocation across `clear`.
#[derive(Default, Debug)]
struct SlotHeap {
    items: Vec<usize>,
}

impl SlotHeap {
    fn clear(&mut self) {
        self.items.clear();
    }

    fn peek(&self) -> Option<usize> {
        self.items.first().copied()
    }

    fn push(&mut self, slot: usize, less: impl Fn(usize, usize) -> bool) {
        self.items.push(slot);
        let mut i = self.items.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 2;
            let (Some(&child), Some(&up)) = (self.items.get(i), self.items.get(parent)) else {
                break;
            };
            if less(child, up) {
                self.items.swap(i, parent);
                i = parent;
            } else {
                break;
            }
        }
    }

    fn pop(&mut self, less: impl Fn(usize, usize) -> bool) -> Option<usize> {
        let top = self.peek()?;
        let last = self.items.pop()?;
        if self.items.is_empty() {
            return Some(top);
        }
        if let Some(root) = self.items.first_mut() {
            *root = last;
        }
        let len = self.items.len();
        let mut i = 0;
        loop {
            let l = 2 * i + 1;
            let r = l + 1;
            let mut m = i;
            let lesser = |x: usize, y: usize| match (self.items.get(x), self.items.get(y)) {
                (Some(&a), Some(&b)) => less(a, b),
                _ => false,
            };
            if l < len && lesser(l, m) {
                m = l;
            }
            if r < len && lesser(r, m) {
                m = r;
            }
            if m == i {
                break;
            }
            self.items.swap(i, m);
            i = m;
        }
        Some(top)
    }
}

fn poisoned() -> Error {
    Error::Api("merged iterator used after an error; seek it again".into())
}

/// A boxed table ref iterator, as held by the merged iterator.
pub type BoxRefIter = Box<dyn RefIter + Send>;
/// A boxed table log iterator, as held by the merged iterator.
pub type BoxLogIter = Box<dyn LogIter + Send>;

/// What the merge needs to know about one kind of record and its sub-iterators.
trait MergeKind {
    type Rec: Default;
    type Sub: ?Sized;
    /// Key order (equal keys shadow one another).
    fn cmp(a: &Self::Rec, b: &Self::Rec) -> Ordering;
    fn is_deletion(rec: &Self::Rec) -> bool;
    /// Copies `sub`'s next record into `slot` (reusing its buffers); false at the end.
    fn fill(sub: &mut Self::Sub, slot: &mut Self::Rec) -> Result<bool>;
}

/// Ref records from [`RefIter`]s.
struct Refs;
/// Log records from [`LogIter`]s.
struct Logs;

impl MergeKind for Refs {
    type Rec = RefRecord;
    type Sub = dyn RefIter + Send;
    fn cmp(a: &RefRecord, b: &RefRecord) -> Ordering {
        a.name.cmp(&b.name)
    }
    fn is_deletion(rec: &RefRecord) -> bool {
        rec.is_deletion()
    }
    fn fill(sub: &mut Self::Sub, slot: &mut RefRecord) -> Result<bool> {
        Ok(sub.next()?.map(|rec| copy_ref(slot, rec)).is_some())
    }
}

impl MergeKind for Logs {
    type Rec = LogRecord;
    type Sub = dyn LogIter + Send;
    fn cmp(a: &LogRecord, b: &LogRecord) -> Ordering {
        log_key_cmp(a, b)
    }
    fn is_deletion(rec: &LogRecord) -> bool {
        rec.deleted
    }
    fn fill(sub: &mut Self::Sub, slot: &mut LogRecord) -> Result<bool> {
        Ok(sub.next()?.map(|rec| copy_log(slot, rec)).is_some())
    }
}

/// The merge itself, shared by [`MergedRefIter`] and [`MergedLogIter`].
struct Merger<K: MergeKind> {
    subs: Vec<Box<K::Sub>>,
    slots: Vec<K::Rec>,
    heap: SlotHeap,
    /// Slot lent out by the last `next`, to advance on the following call.
    advance: Option<usize>,
    suppress_deletions: bool,
    /// Set by an error; cleared by the next successful seek.
    failed: bool,
}

impl<K: MergeKind> Merger<K> {
    fn new(subs: Vec<Box<K::Sub>>) -> Self {
        let slots = subs.iter().map(|_| K::Rec::default()).collect();
        let heap = SlotHeap {
            items: Vec::with_capacity(subs.len()),
        };
        Merger {
            subs,
            slots,
            heap,
            advance: None,
            suppress_deletions: false,
            failed: false,
        }
    }

    /// Heap order: key, then the newer table (higher index) first.
    fn less(slots: &[K::Rec], a: usize, b: usize) -> bool {
        let (Some(x), Some(y)) = (slots.get(a), slots.get(b)) else {
            return a > b;
        };
        match K::cmp(x, y) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => a > b,
        }
    }

    fn refill(&mut self, i: usize) -> Result<()> {
        let (Some(sub), Some(slot)) = (self.subs.get_mut(i), self.slots.get_mut(i)) else {
            return Ok(());
        };
        if K::fill(sub, slot)? {
            let slots = &self.slots;
            self.heap.push(i, |a, b| Self::less(slots, a, b));
        }
        Ok(())
    }

    /// Seeks every sub-iterator with `seek_sub` and refills the heap. An error poisons
    /// the iterator until the next successful seek.
    fn seek(&mut self, mut seek_sub: impl FnMut(&mut K::Sub) -> Result<()>) -> Result<()> {
        self.failed = true;
        self.heap.clear();
        self.advance = None;
        for i in 0..self.subs.len() {
            if let Some(sub) = self.subs.get_mut(i) {
                seek_sub(sub)?;
            }
            self.refill(i)?;
        }
        self.failed = false;
        Ok(())
    }

    fn next(&mut self) -> Result<Option<&K::Rec>> {
        if self.failed {
            return Err(poisoned());
        }
        self.failed = true;
        let slot = self.next_slot()?;
        self.failed = false;
        Ok(slot.and_then(|i| self.slots.get(i)))
    }

    fn next_slot(&mut self) -> Result<Option<usize>> {
        if let Some(i) = self.advance.take() {
            self.refill(i)?;
        }
        loop {
            let slots = &self.slots;
            let Some(top) = self.heap.pop(|a, b| Self::less(slots, a, b)) else {
                return Ok(None);
            };
            while let Some(j) = self.heap.peek() {
                let same_key = match (self.slots.get(j), self.slots.get(top)) {
                    (Some(a), Some(b)) => K::cmp(a, b) == Ordering::Equal,
                    _ => false,
                };
                if !same_key {
                    break;
                }
                let slots = &self.slots;
                self.heap.pop(|a, b| Self::less(slots, a, b));
                self.refill(j)?;
            }
            if self.suppress_deletions && self.slots.get(top).is_some_and(|r| K::is_deletion(r)) {
                self.refill(top)?;
                continue;
            }
            self.advance = Some(top);
            return Ok(Some(top));
        }
    }
}

/// Newest-wins merge of ref iterators (index 0 = oldest table). Implements [`RefIter`].
pub struct MergedRefIter(Merger<Refs>);

impl MergedRefIter {
    /// Merges `subs`, oldest table first. Call [`RefIter::seek`] before iterating.
    pub fn new(subs: Vec<BoxRefIter>) -> MergedRefIter {
        MergedRefIter(Merger::new(subs))
    }

    /// Whether tombstones are skipped inside `next()` (default: returned).
    pub fn suppress_deletions(&mut self, on: bool) {
        self.0.suppress_deletions = on;
    }
}

impl RefIter for MergedRefIter {
    fn seek(&mut self, name: &[u8]) -> Result<()> {
        self.0.seek(|sub| sub.seek(name))
    }

    fn next(&mut self) -> Result<Option<&RefRecord>> {
        self.0.next()
    }
}

/// Newest-wins merge of log iterators (index 0 = oldest table). Implements [`LogIter`].
/// Records with the same `(refname, update_index)` shadow one another.
pub struct MergedLogIter(Merger<Logs>);

impl MergedLogIter {
    /// Merges `subs`, oldest table first. Call [`LogIter::seek`] before iterating.
    pub fn new(subs: Vec<BoxLogIter>) -> MergedLogIter {
        MergedLogIter(Merger::new(subs))
    }

    /// Whether log tombstones are skipped inside `next()` (default: returned).
    pub fn suppress_deletions(&mut self, on: bool) {
        self.0.suppress_deletions = on;
    }
}

impl LogIter for MergedLogIter {
    fn seek(&mut self, refname: &[u8], update_index: u64) -> Result<()> {
        self.0.seek(|sub| sub.seek(refname, update_index))
    }

    fn next(&mut self) -> Result<Option<&LogRecord>> {
        self.0.next()
    }
}

/// In-memory iterators over sorted record vectors: for tests, and for callers that
/// merge pending (not yet written) records with tables.
pub mod mem {
    use super::*;

    /// A reseekable ref iterator over a sorted `Vec<RefRecord>`.
    #[derive(Clone, Debug, Default)]
    pub struct VecRefIter {
        recs: Vec<RefRecord>,
        pos: usize,
    }

    impl VecRefIter {
        /// `recs` must be sorted by name without duplicates.
        pub fn new(recs: Vec<RefRecord>) -> VecRefIter {
            VecRefIter { recs, pos: 0 }
        }
    }

    impl RefIter for VecRefIter {
        fn seek(&mut self, name: &[u8]) -> Result<()> {
            self.pos = self.recs.partition_point(|r| r.name.as_slice() < name);
            Ok(())
        }
        fn next(&mut self) -> Result<Option<&RefRecord>> {
            let r = self.recs.get(self.pos);
            if r.is_some() {
                self.pos += 1;
            }
            Ok(r)
        }
    }

    /// A reseekable log iterator over a `Vec<LogRecord>` sorted by [`log_key_cmp`].
    #[derive(Clone, Debug, Default)]
    pub struct VecLogIter {
        recs: Vec<LogRecord>,
        pos: usize,
    }

    impl VecLogIter {
        /// `recs` must be sorted by [`log_key_cmp`] without duplicates.
        pub fn new(recs: Vec<LogRecord>) -> VecLogIter {
            VecLogIter { recs, pos: 0 }
        }
    }

    impl LogIter for VecLogIter {
        fn seek(&mut self, refname: &[u8], update_index: u64) -> Result<()> {
            self.pos = self.recs.partition_point(|r| {
                (r.refname.as_slice(), std::cmp::Reverse(r.update_index))
                    < (refname, std::cmp::Reverse(update_index))
            });
            Ok(())
        }
        fn next(&mut self) -> Result<Option<&LogRecord>> {
            let r = self.recs.get(self.pos);
            if r.is_some() {
                self.pos += 1;
            }
            Ok(r)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mem::{VecLogIter, VecRefIter};
    use super::*;
    use crate::format::{HashKind, ObjectId};

    fn oid(n: u8) -> ObjectId {
        ObjectId::from_bytes(&[n; 20]).unwrap()
    }
    fn r(name: &str, ui: u64, v: Option<u8>) -> RefRecord {
        RefRecord {
            name: name.as_bytes().to_vec(),
            update_index: ui,
            value: v.map_or(RefValue::Deletion, |n| RefValue::Val1(oid(n))),
        }
    }
    fn l(name: &str, ui: u64, deleted: bool) -> LogRecord {
        LogRecord {
            refname: name.as_bytes().to_vec(),
            update_index: ui,
            deleted,
            old_id: HashKind::Sha1.null_id(),
            new_id: oid(ui as u8),
            message: b"m\n".to_vec(),
            ..LogRecord::default()
        }
    }
    fn refs(tables: Vec<Vec<RefRecord>>) -> MergedRefIter {
        MergedRefIter::new(
            tables
                .into_iter()
                .map(|t| Box::new(VecRefIter::new(t)) as BoxRefIter)
                .collect(),
        )
    }
    fn collect(it: &mut MergedRefIter) -> Vec<RefRecord> {
        let mut out = Vec::new();
        while let Some(rec) = it.next().unwrap() {
            out.push(rec.clone());
        }
        out
    }

    #[test]
    fn single_record_tombstone_is_returned() {
        let mut it = refs(vec![vec![r("a", 1, None)]]);
        it.seek(b"").unwrap();
        assert_eq!(collect(&mut it), vec![r("a", 1, None)]);
    }

    #[test]
    fn newest_wins_across_three_tables() {
        // merged "refs" unit test: a/b/c in table 1, a deleted + c updated in 2, d in 3.
        let t1 = vec![r("a", 1, Some(1)), r("b", 1, Some(1)), r("c", 1, Some(1))];
        let t2 = vec![r("a", 2, None)];
        let t3 = vec![r("c", 3, Some(3)), r("d", 3, Some(3))];
        let mut it = refs(vec![t1, t2, t3]);
        it.seek(b"").unwrap();
        let got = collect(&mut it);
        assert_eq!(
            got,
            vec![
                r("a", 2, None),
                r("b", 1, Some(1)),
                r("c", 3, Some(3)),
                r("d", 3, Some(3))
            ]
        );
        it.suppress_deletions(true);
        it.seek(b"").unwrap();
        let names: Vec<_> = collect(&mut it).into_iter().map(|r| r.name).collect();
        assert_eq!(names, vec![b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]);
    }

    #[test]
    fn seek_multiple_times_and_without_drain() {
        let t1 = vec![r("a", 1, Some(1)), r("c", 1, Some(1))];
        let t2 = vec![r("b", 2, Some(2)), r("d", 2, Some(2))];
        let mut it = refs(vec![t1, t2]);
        for _ in 0..5 {
            it.seek(b"c").unwrap();
            assert_eq!(
                collect(&mut it),
                vec![r("c", 1, Some(1)), r("d", 2, Some(2))]
            );
        }
        it.seek(b"b").unwrap();
        assert_eq!(it.next().unwrap().unwrap().name, b"b");
        it.seek(b"a").unwrap();
        let names: Vec<_> = collect(&mut it).into_iter().map(|r| r.name).collect();
        assert_eq!(
            names,
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
        );
    }

    #[test]
    fn equal_keys_pop_highest_table_first() {
        // pq "index" test: the same key in 5 tables; the newest must win.
        let tables: Vec<Vec<RefRecord>> =
            (0..5).map(|i| vec![r("x", i + 1, Some(i as u8))]).collect();
        let mut it = refs(tables);
        it.seek(b"").unwrap();
        assert_eq!(collect(&mut it), vec![r("x", 5, Some(4))]);
    }

    #[test]
    fn logs_shadow_by_name_and_update_index() {
        // merged "logs": r1 has a@3,a@2,a@1? -> t1: a@2 a@1 ; t2: a@3 ; t3: tombstone a@2.
        let t1 = vec![l("a", 2, false), l("a", 1, false)];
        let t2 = vec![l("a", 3, false)];
        let t3 = vec![l("a", 2, true)];
        let mut it = MergedLogIter::new(vec![
            Box::new(VecLogIter::new(t1)) as BoxLogIter,
            Box::new(VecLogIter::new(t2)),
            Box::new(VecLogIter::new(t3)),
        ]);
        it.seek(b"a", u64::MAX).unwrap();
        let mut got = Vec::new();
        while let Some(rec) = it.next().unwrap() {
            got.push((rec.update_index, rec.deleted));
        }
        assert_eq!(got, vec![(3, false), (2, true), (1, false)]);
        it.seek(b"a", 2).unwrap();
        let first = it.next().unwrap().unwrap();
        assert_eq!((first.update_index, first.deleted), (2, true));
        it.suppress_deletions(true);
        it.seek(b"a", u64::MAX).unwrap();
        let mut got = Vec::new();
        while let Some(rec) = it.next().unwrap() {
            got.push(rec.update_index);
        }
        assert_eq!(got, vec![3, 1]);
    }

    /// A sub-iterator that fails on its second record.
    struct Failing(u32, RefRecord);
    impl RefIter for Failing {
        fn seek(&mut self, _: &[u8]) -> Result<()> {
            self.0 = 0;
            Ok(())
        }
        fn next(&mut self) -> Result<Option<&RefRecord>> {
            self.0 += 1;
            if self.0 == 2 {
                return Err(Error::format("t.ref", 42, "broken"));
            }
            Ok(Some(&self.1))
        }
    }

    #[test]
    fn an_error_poisons_until_the_next_seek() {
        let mut it =
            MergedRefIter::new(vec![Box::new(Failing(0, r("a", 1, Some(1)))) as BoxRefIter]);
        it.seek(b"").unwrap();
        assert_eq!(it.next().unwrap().unwrap().name, b"a");
        let err = it.next().unwrap_err();
        assert!(err.to_string().contains("t.ref at offset 42"), "{err}");
        assert!(it.next().is_err(), "stays failed");
        it.seek(b"").unwrap();
        assert!(it.next().unwrap().is_some(), "a seek recovers");
    }

    #[test]
    fn random_merges_match_a_model() {
        use std::collections::BTreeMap;
        let mut seed = 0x1234_5678_u64;
        let mut rnd = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..200 {
            let ntables = 1 + rnd(6) as usize;
            let mut model: BTreeMap<Vec<u8>, RefRecord> = BTreeMap::new();
            let mut tables = Vec::new();
            for t in 0..ntables {
                let mut m: BTreeMap<Vec<u8>, RefRecord> = BTreeMap::new();
                for _ in 0..rnd(20) {
                    let name = format!("refs/{}", rnd(30));
                    let v = if rnd(4) == 0 {
                        None
                    } else {
                        Some(rnd(200) as u8)
                    };
                    m.insert(name.clone().into_bytes(), r(&name, t as u64 + 1, v));
                }
                for (k, v) in &m {
                    model.insert(k.clone(), v.clone());
                }
                tables.push(m.into_values().collect());
            }
            let mut it = refs(tables);
            let start = format!("refs/{}", rnd(30));
            it.seek(start.as_bytes()).unwrap();
            let want: Vec<RefRecord> = model
                .range(start.into_bytes()..)
                .map(|(_, v)| v.clone())
                .collect();
            assert_eq!(collect(&mut it), want);
        }
    }
}
