//! `emm`: the command-line tool (`emm check`, `emm list`, `emm bench`, ...); the subcommands
//! live in the `emm_cli` library, one file each.

fn main() {
    let code = emm_cli::main_os(std::env::args_os().skip(1));
    std::process::exit(code);
}
