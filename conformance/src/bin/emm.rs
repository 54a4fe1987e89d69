//! `emm`: the command-line tool (`emm check`, `emm list`); the subcommands live in
//! `emm_conformance::cli`, one file each.

fn main() {
    let code = emm_conformance::cli::main(std::env::args().skip(1).collect());
    std::process::exit(code);
}
