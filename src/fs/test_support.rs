//! Helpers shared by the layer's unit tests (compiled for tests only).

/// Checks a predicate on names against its table of cases: it holds for every name in
/// `yes` and for none in `no`. A failure names the case.
pub(crate) fn assert_splits(f: impl Fn(&[u8]) -> bool, yes: &[&str], no: &[&str]) {
    for n in yes {
        assert!(f(n.as_bytes()), "should hold: {n:?}");
    }
    for n in no {
        assert!(!f(n.as_bytes()), "should not hold: {n:?}");
    }
}

/// A writable view of the refs `refs` (in memory), whose batches wait a minute (nothing
/// is written unless a test asks).
pub(crate) fn writable_view(
    refs: &[(&str, crate::format::RefValue)],
) -> std::sync::Arc<crate::fs::state::Shared> {
    use crate::fs::source::{LogSettings, MemSource};
    use crate::fs::state::{BatchSettings, Shared};
    let mut mem = MemSource::new();
    for (name, value) in refs {
        mem.set(name, value.clone());
    }
    Shared::new(
        Box::new(mem),
        false,
        LogSettings::default(),
        BatchSettings {
            window: std::time::Duration::from_secs(60),
            max: 1000,
        },
    )
}
