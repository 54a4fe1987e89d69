//! `emm list`: the checks with the rules they enforce, and the plugins that can be checked.

use std::fmt::Write as _;

use emm_core::contract::selection::manager_names;
use serde_json::json;

use super::args::ListArgs;
use super::{BACKENDS, EXIT_PASS};
use emm_conformance::checks::CHECKS;

/// Runs `emm list`.
pub fn run(a: ListArgs) -> i32 {
    let json = a.json;
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
