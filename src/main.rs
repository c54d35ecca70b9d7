//! The `reftablefs` binary: everything is in the library's `cli` module.

fn main() -> std::process::ExitCode {
    reftablefs::cli::main_with_args(std::env::args_os().skip(1).collect())
}
