//! The one pseudo-random generator of the tests and benchmarks: SplitMix64 (Steele,
//! Lea and Flood, "Fast splittable pseudorandom number generators", 2014), small, fast
//! and the same sequence for the same seed on every machine; every seed, 0 included,
//! gives a full-period sequence. Not for anything that needs unpredictability.
//!
//! Included by path, so that the test binary and the benchmarks share it without a
//! crate: `#[path = "../support/rng.rs"] mod rng;` (from `tests/all/`),
//! `#[path = "../tests/support/rng.rs"] mod rng;` (from `benches/`).
#![allow(dead_code)]

/// A SplitMix64 generator.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0). The modulo bias is below 2^-40 for the
    /// small `n` of the tests.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// The seed of a randomised test: the environment variable `var` when it is set to a
/// number (to replay a run; `make fuzz` sets it from the clock), else `default`, so that
/// `cargo test` runs the same cases every time. Written to stderr, which the test harness
/// shows when the test fails.
pub fn seed(var: &str, default: u64) -> u64 {
    let seed = std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default);
    eprintln!("seed {seed} (replay: {var}={seed})");
    seed
}

#[cfg(test)]
mod tests {
    #[test]
    fn splitmix64_reference_values() {
        // The first outputs for seed 1234567, as the reference implementation
        // (https://prng.di.unimi.it/splitmix64.c) prints them.
        let mut r = super::Rng::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(r.next_u64(), 9_817_491_932_198_370_423);
    }
}
