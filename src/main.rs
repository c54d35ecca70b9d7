//! The `reftablefs` binary: git-compatible subcommands over the library's public API
//! (see [`cli`]), and `mount`.

// `unsafe` only in the module allowed below, for FFI calls into libc; each block carries
// a `// SAFETY:` comment (enforced by clippy, see Cargo.toml).
#![deny(unsafe_code)]

#[allow(unsafe_code)] // isatty
mod cli;

fn main() -> std::process::ExitCode {
    cli::main_with_args(std::env::args_os().skip(1).collect())
}
