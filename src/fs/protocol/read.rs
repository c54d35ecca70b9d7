//! Reads through the overlay: a ref's effective value (pending over loose over stack),
//! what a path is, a directory's listing with the overlay's names, a reflog's text.

use crate::format::RefValue;
use crate::fs::source::{RefSource, NEXT_NAME};
use crate::fs::view::{self, Entry, Kind, Scratch};

use super::*;

impl WriteState {
    /// The effective value of a ref as git would resolve it (pending over stack).
    pub fn effective(&mut self, src: &mut dyn RefSource, name: &[u8]) -> R<Option<RefValue>> {
        if let Some(p) = self.pending.get(name) {
            return Ok((!matches!(p.value, RefValue::Deletion)).then(|| p.value.clone()));
        }
        let found = crate::fs::source::read_ref(src, name, &mut self.rec).map_err(source_err)?;
        Ok(found.then(|| self.rec.value.clone()))
    }

    /// Whether some loose ref (stack or pending) lives below `prefix` (which ends in `/`).
    pub(super) fn any_ref_below(&mut self, src: &mut dyn RefSource, prefix: &[u8]) -> R<bool> {
        let pending_live = self
            .pending
            .range(prefix.to_vec()..)
            .take_while(|(n, _)| n.starts_with(prefix))
            .any(|(_, p)| !matches!(p.value, RefValue::Deletion));
        if pending_live {
            return Ok(true);
        }
        let mut key = prefix.to_vec();
        loop {
            if !src
                .first_ref_at_or_after(&key, &mut self.rec)
                .map_err(source_err)?
                || !self.rec.name.starts_with(prefix)
            {
                return Ok(false);
            }
            let n = &self.rec.name;
            if !self.pending.contains_key(n) {
                return Ok(true);
            }
            key.clone_from(n);
            key.push(NEXT_NAME);
        }
    }

    pub(super) fn any_path_below(&self, prefix: &[u8]) -> bool {
        self.files
            .paths_from(prefix)
            .next()
            .is_some_and(|p| p.starts_with(prefix))
            || self
                .vdirs
                .range(prefix.to_vec()..)
                .next()
                .is_some_and(|p| p.starts_with(prefix))
    }

    /// Whether the reflog of `name` exists (as a file) through the overlay.
    pub(super) fn log_exists(
        &self,
        src: &mut dyn RefSource,
        name: &[u8],
        buf: &mut Vec<u8>,
    ) -> R<bool> {
        if let Some(pl) = self.pending_logs.get(name) {
            return Ok(!pl.deleted || !pl.appended.is_empty());
        }
        Ok(src.first_log_at_or_after(name, buf).map_err(source_err)? && buf == name)
    }

    /// Classifies a path through the overlay.
    pub fn classify(
        &mut self,
        src: &mut dyn RefSource,
        s: &mut Scratch,
        path: &[u8],
    ) -> R<Option<Kind>> {
        if self.files.contains_key(path) {
            return Ok(Some(Kind::Scratch));
        }
        let mut sub = path.to_vec();
        sub.push(b'/');
        match view::area(path) {
            view::Area::Refs(name) if name != b"refs" => {
                if self.is_loose_ref(src, name)? {
                    return Ok(Some(Kind::Ref));
                }
                if self.vdirs.contains(path)
                    || self.any_path_below(&sub)
                    || (name.starts_with(b"refs/") && self.any_loose_below(src, &sub)?)
                {
                    return Ok(Some(Kind::Dir));
                }
                Ok(None)
            }
            view::Area::Logs(Some(name)) => {
                let mut buf = Vec::new();
                if self.log_exists(src, name, &mut buf)? {
                    return Ok(Some(Kind::Log));
                }
                if self.vdirs.contains(path) || self.any_path_below(&sub) {
                    return Ok(Some(Kind::Dir));
                }
                let name_sub = &sub[5..];
                let pending_below = self
                    .pending_logs
                    .range(name_sub.to_vec()..)
                    .take_while(|(n, _)| n.starts_with(name_sub))
                    .any(|(_, pl)| !pl.deleted || !pl.appended.is_empty());
                if pending_below {
                    return Ok(Some(Kind::Dir));
                }
                // Stack reflogs below, skipping those the overlay deleted.
                let mut key = name_sub.to_vec();
                loop {
                    if !src
                        .first_log_at_or_after(&key, &mut buf)
                        .map_err(source_err)?
                        || !buf.starts_with(name_sub)
                    {
                        return Ok(None);
                    }
                    if !self.pending_logs.contains_key(&buf) {
                        return Ok(Some(Kind::Dir));
                    }
                    key.clone_from(&buf);
                    key.push(NEXT_NAME);
                }
            }
            // Absent until written, as in a files repository (`packed_whole.rs`).
            view::Area::PackedRefs => Ok(self.packed_refs_exists(src)?.then_some(Kind::PackedRefs)),
            _ => view::classify(src, s, path).map_err(source_err),
        }
    }

    /// Applies the overlay to a stack listing of directory `path`.
    pub fn overlay_listing(
        &mut self,
        src: &mut dyn RefSource,
        s: &mut Scratch,
        path: &[u8],
        stack: &[Entry],
        out: &mut Vec<Entry>,
    ) -> R<()> {
        out.clear();
        let mut prefix = path.to_vec();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        let touched = !self.pending.is_empty()
            || !self.pending_logs.is_empty()
            || (path.starts_with(b"refs") && self.packed.hides_below(&prefix));
        for e in stack {
            if touched && matches!(e.kind, Kind::Ref | Kind::Log | Kind::Dir) {
                let child = view::join(path, &e.name);
                match self.classify(src, s, &child)? {
                    Some(k) if k == e.kind => out.push(e.clone()),
                    _ => {}
                }
            } else {
                out.push(e.clone());
            }
        }
        fn add(out: &mut Vec<Entry>, rest: &[u8], leaf: Kind) {
            if rest.is_empty() {
                return;
            }
            match rest.iter().position(|&b| b == b'/') {
                Some(i) => out.push(Entry {
                    name: rest[..i].into(),
                    kind: Kind::Dir,
                }),
                None => out.push(Entry {
                    name: rest.into(),
                    kind: leaf,
                }),
            }
        }
        for p in self
            .files
            .paths_from(&prefix)
            .take_while(|p| p.starts_with(&prefix))
        {
            add(out, &p[prefix.len()..], Kind::Scratch);
        }
        for p in self
            .vdirs
            .range(prefix.clone()..)
            .take_while(|p| p.starts_with(&prefix))
        {
            let rest = &p[prefix.len()..];
            match rest.iter().position(|&b| b == b'/') {
                Some(_) => add(out, rest, Kind::Dir),
                None if !rest.is_empty() => out.push(Entry {
                    name: rest.into(),
                    kind: Kind::Dir,
                }),
                None => {}
            }
        }
        match view::area(path) {
            view::Area::Logs(_) => {
                let lp: &[u8] = prefix.strip_prefix(b"logs/").unwrap_or_default();
                let logs: Vec<Vec<u8>> = self
                    .pending_logs
                    .iter()
                    .filter(|(n, pl)| n.starts_with(lp) && (!pl.deleted || !pl.appended.is_empty()))
                    .map(|(n, _)| n.clone())
                    .collect();
                if path.starts_with(b"logs") {
                    for n in logs {
                        add(out, &n[lp.len()..], Kind::Log);
                    }
                }
            }
            view::Area::Refs(_) | view::Area::Root => {
                let live: Vec<Vec<u8>> = self
                    .pending
                    .range(prefix.clone()..)
                    .take_while(|(n, _)| n.starts_with(&prefix))
                    .filter(|(n, p)| {
                        !matches!(p.value, RefValue::Deletion) && self.shows_loose(n, &p.value)
                    })
                    .map(|(n, _)| n.clone())
                    .collect();
                for n in live {
                    let rest = &n[prefix.len()..];
                    if path.is_empty()
                        && (rest.contains(&b'/') || !crate::refname::is_root_ref(rest))
                    {
                        continue;
                    }
                    add(out, rest, Kind::Ref);
                }
            }
            view::Area::PackedRefs => {}
        }
        view::finish_listing(out);
        Ok(())
    }

    /// Renders a reflog through the overlay (oldest first).
    pub fn render_log(&self, src: &mut dyn RefSource, name: &[u8], out: &mut Vec<u8>) -> R<()> {
        let mut recs = Vec::new();
        let pl = self.pending_logs.get(name);
        match pl.and_then(|p| p.base.as_ref()) {
            Some(base) => recs.extend(base.iter().cloned()),
            None => src.read_log(name, &mut recs).map_err(source_err)?,
        }
        // `recs` is newest first; pending appends are newer still.
        if let Some(pl) = pl {
            for (_, a) in &pl.appended {
                recs.insert(0, a.clone());
            }
        }
        view::render_log(&recs, self.hash, out);
        Ok(())
    }
}
