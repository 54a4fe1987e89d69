//! emm-cli's integration tests (the `emm` tool, in process and as the built binary), one module
//! per topic, in one test binary.

mod cli;
mod cli_args;
mod gate;
mod hostile;
// The conformance suite's broken managers, which `emm check` must catch as the suite does.
#[path = "../../../conformance/tests/conformance/zoo/mod.rs"]
mod zoo;
