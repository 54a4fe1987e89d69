//! `emm list`: the checks with the rules they enforce, and the plugins that can be checked.

use std::fmt::Write as _;

use emm_core::contract::selection::manager_names;
use serde_json::json;

use super::{Args, Command, BACKENDS, EXIT_CANNOT_RUN, EXIT_PASS};
use emm_conformance::checks::CHECKS;

/// `emm list`.
pub const COMMAND: Command = Command {
    name: "list",
    summary: "list the checks with their rules, and the built-in plugins",
    usage: "usage: emm list [--json]

Prints every check of `emm check` with the sentence of the source documents it enforces,
then the built-in plugins and the backends.
",
    run,
};

fn run(mut a: Args) -> i32 {
    let json = a.flag("--json");
    if let Err(e) = a.finish() {
        eprintln!("emm list: {e}\n\n{}", COMMAND.usage);
        return EXIT_CANNOT_RUN;
    }
    if json {
        let checks: Vec<_> = CHECKS
            .iter()
            .map(|c| json!({ "name": c.id.name(), "rule": c.rule, "source": c.source }))
            .collect();
        let v = json!({ "checks": checks, "plugins": manager_names(), "backends": BACKENDS });
        println!("{v:#}");
    } else {
        print!("{}", text());
    }
    EXIT_PASS
}

/// The text `emm list` prints.
pub fn text() -> String {
    let mut out = String::new();
    let _ = writeln!(out, "checks ({}):", CHECKS.len());
    for c in CHECKS {
        let _ = writeln!(
            out,
            "  {}\n      {} — \"{}\"",
            c.id.name(),
            c.source,
            c.rule
        );
    }
    let _ = writeln!(out, "\nplugins: {}", manager_names().join(", "));
    let _ = writeln!(out, "backends: {}", BACKENDS.join(", "));
    out
}
