//! The integration tests, in one binary (linked once; `cargo test --test all`): one module
//! per subject, driving real git as the oracle where git has an answer. Run a part by its
//! module, e.g. `cargo test --test all stack_model::`.
//!
//! Shared: `util` (tests/support/git.rs: the git oracle, throw-away repositories), `rng`
//! (tests/support/rng.rs: the one pseudo-random generator, and seeds), [`alloc`] (this
//! binary's global allocator: a heap cap and the counts the memory tests read) and
//! [`alone`] (running a test that measures the process in a process of its own). The CLI's
//! tests are binaries of their own (tests/cli_*).

#[path = "../support/rng.rs"]
mod rng;
#[path = "../support/git.rs"]
mod util;

mod alloc;
mod alone;

mod compaction_memory;
mod corruption;
mod fault_injection;
mod fs_mount_mem;
mod fs_stack_source;
mod golden;
mod mutation_fuzz;
mod props;
mod stack_alloc;
mod stack_basic;
mod stack_compaction;
mod stack_concurrency;
mod stack_direct;
mod stack_model;
mod stack_survival;
mod table_ondemand;
mod unit_vectors;
