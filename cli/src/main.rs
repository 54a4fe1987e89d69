//! `emm`: the command-line tool (`emm check`, `emm list`); the subcommands live in
//! `emm_conformance::cli`, one file each.

fn main() {
    let code = emm_conformance::cli::main_os(std::env::args_os().skip(1));
    std::process::exit(code);
}
