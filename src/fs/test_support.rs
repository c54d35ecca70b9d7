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
