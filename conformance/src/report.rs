//! [`Report`]: the verdict of a run — per check, passed, failed (with the shrunk case and the
//! command that replays it) or skipped — as a table for people and JSON for CI.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::checks::{CheckId, CHECKS};
use crate::config::{Config, DEFAULT_CASES, DEFAULT_MAX_OPS, SEED_VAR};
use crate::coverage::Coverage;
use crate::replay::Regression;

/// The verdict of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The plugin checked.
    pub plugin: String,
    /// The backend it ran on.
    pub backend: String,
    /// Whether every check passed (and the plugin could be run at all).
    pub passed: bool,
    /// The run's seed.
    pub seed: u64,
    /// Cases run: fixed scenarios plus random cases.
    pub cases: usize,
    /// Most operations in a random case.
    pub max_ops: usize,
    /// Wall time of the run in milliseconds.
    pub elapsed_ms: u64,
    /// Why the plugin could not be loaded or run, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every check, in catalogue order.
    pub checks: Vec<CheckResult>,
    /// What the run exercised.
    #[serde(default)]
    pub coverage: Coverage,
}

/// The verdict of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    /// The check's name.
    pub name: String,
    /// The sentence it enforces.
    pub rule: String,
    /// Where the sentence is.
    pub source: String,
    /// Whether it passed (false when it failed or was skipped).
    pub passed: bool,
    /// Whether it did not run (the backend cannot observe what it needs), or never met the
    /// situation its rule is about.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
    /// Why it was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<String>,
    /// The shrunk failure, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// A failure, shrunk, with what reproduces it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// What went wrong.
    pub message: String,
    /// The run's seed.
    pub seed: u64,
    /// The case's index in the run (fixed scenarios first).
    pub case: usize,
    /// The step that failed; equal to the number of operations when teardown failed.
    pub step: usize,
    /// The shrunk operation sequence.
    pub ops: Vec<String>,
    /// The regression file it was written to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regression: Option<String>,
    /// The one-line command that replays it (from the regression file, when one was written).
    pub replay: String,
    /// The command that reruns the whole run with the same seed.
    pub rerun: String,
}

impl Failure {
    /// The entry for `r`, written to `file` (or why it was not), run with `config`.
    pub fn new(r: &Regression, file: Option<Result<PathBuf, String>>, config: &Config) -> Self {
        let depth = if (config.cases, config.max_ops) == (DEFAULT_CASES, DEFAULT_MAX_OPS) {
            String::new()
        } else {
            format!(" --cases {} --ops {}", config.cases, config.max_ops)
        };
        let rerun = format!(
            "{SEED_VAR}={} emm check {} --backend {}{depth}",
            r.seed, r.plugin, r.backend
        );
        let (regression, replay) = match file {
            Some(Ok(path)) => {
                let p = path.display().to_string();
                let replay = format!(
                    "emm check {} --backend {} --replay {p}",
                    r.plugin, r.backend
                );
                (Some(p), replay)
            }
            Some(Err(e)) => (
                None,
                format!("{rerun}  (the regression file was not written: {e})"),
            ),
            None => (None, rerun.clone()),
        };
        Failure {
            message: r.message.clone(),
            seed: r.seed,
            case: r.case,
            step: r.step,
            ops: r.ops.iter().map(ToString::to_string).collect(),
            regression,
            replay,
            rerun,
        }
    }
}

impl Report {
    /// The report of a run of `config` on `backend` in which `failures` were found.
    pub fn new(
        plugin: &str,
        backend: &dyn Backend,
        config: &Config,
        failures: Vec<(CheckId, Failure)>,
    ) -> Self {
        let observes = backend.observes();
        let mut failures = failures;
        let checks: Vec<CheckResult> = CHECKS
            .iter()
            .map(|c| {
                let at = failures.iter().position(|(id, _)| *id == c.id);
                let failure = at.map(|i| failures.swap_remove(i).1);
                let skipped = !observes.covers(c.needs);
                let skip_reason =
                    skipped.then(|| format!("not observable on the {} backend", backend.name()));
                CheckResult {
                    name: c.id.name().to_string(),
                    rule: c.rule.to_string(),
                    source: c.source.to_string(),
                    passed: failure.is_none() && !skipped,
                    skipped,
                    skip_reason,
                    failure,
                }
            })
            .collect();
        Report {
            plugin: plugin.to_string(),
            backend: backend.name().to_string(),
            passed: checks.iter().all(|c| c.failure.is_none()),
            seed: config.seed,
            cases: crate::strategy::scenarios().len() + config.cases,
            max_ops: config.max_ops,
            elapsed_ms: 0,
            error: None,
            checks,
            coverage: Coverage::default(),
        }
    }

    /// With what the run exercised: a check that neither failed nor met the situation its rule
    /// is about is skipped, with the reason, rather than passed.
    pub fn with_coverage(mut self, coverage: Coverage) -> Self {
        for c in &mut self.checks {
            let Some(id) = CheckId::from_name(&c.name) else {
                continue;
            };
            if let (None, false, Some(why)) = (&c.failure, c.skipped, coverage.unexercised(id)) {
                c.skipped = true;
                c.passed = false;
                c.skip_reason = Some(format!("not exercised: {why}"));
            }
        }
        self.coverage = coverage;
        self
    }

    /// The result of check `id`, when the report has it.
    pub fn result(&self, id: CheckId) -> Option<&CheckResult> {
        self.checks.iter().find(|c| c.name == id.name())
    }

    /// Checks that failed.
    pub fn failed(&self) -> impl Iterator<Item = &CheckResult> {
        self.checks.iter().filter(|c| c.failure.is_some())
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The report as a table for people; `color` adds ANSI colours.
    pub fn to_table(&self, color: bool) -> String {
        let paint = |code: &str, text: &str| {
            if color {
                format!("\x1b[{code}m{text}\x1b[0m")
            } else {
                text.to_string()
            }
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "emm check {} on {}: seed {}, {} cases of up to {} operations, {:.1} s",
            self.plugin,
            self.backend,
            self.seed,
            self.cases,
            self.max_ops,
            self.elapsed_ms as f64 / 1000.0
        );
        if let Some(e) = &self.error {
            let _ = writeln!(
                out,
                "\n  {} the plugin could not be run: {e}",
                paint("1;31", "ERROR")
            );
        }
        out.push('\n');
        for c in &self.checks {
            let tag = match (&c.failure, c.skipped) {
                (Some(_), _) => paint("1;31", "FAIL"),
                (None, true) => paint("33", "SKIP"),
                (None, false) => paint("32", "PASS"),
            };
            let _ = writeln!(out, "  {tag}  {}", c.name);
            if let (true, Some(why)) = (c.skipped, &c.skip_reason) {
                let _ = writeln!(out, "        {why}");
            }
            let Some(f) = &c.failure else { continue };
            let _ = writeln!(out, "        rule ({}): \"{}\"", c.source, c.rule);
            let _ = writeln!(out, "        {}", f.message);
            let _ = writeln!(
                out,
                "        shrunk to {} operation(s) (case {}):",
                f.ops.len(),
                f.case
            );
            for (i, op) in f.ops.iter().enumerate() {
                let here = if i == f.step { "   <- fails here" } else { "" };
                let _ = writeln!(out, "          {i:>3}. {op}{here}");
            }
            if f.step >= f.ops.len() {
                let _ = writeln!(
                    out,
                    "          ... and fails at teardown (reset, then the manager is dropped)"
                );
            }
            let _ = writeln!(out, "        replay: {}", f.replay);
            if f.rerun != f.replay {
                let _ = writeln!(out, "        rerun with: {}", f.rerun);
            }
        }
        let _ = write!(out, "\ncoverage:\n{}", self.coverage.to_text());
        let failed = self.failed().count();
        let skipped = self.checks.iter().filter(|c| c.skipped).count();
        let passed = self.checks.len() - failed - skipped;
        let verdict = if self.passed {
            paint("1;32", "passed")
        } else {
            paint("1;31", "FAILED")
        };
        let _ = writeln!(
            out,
            "\n{verdict}: {passed} passed, {failed} failed, {skipped} skipped of {} checks",
            self.checks.len()
        );
        out
    }
}
