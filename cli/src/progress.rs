//! Progress on stderr ([`Bar`], indicatif) and whether to colour output.
//!
//! A bar is drawn only when stderr is a terminal and `--quiet` was not given. Where stderr is
//! not a terminal (a CI log), a long run's notes are plain lines instead; with `--quiet` there
//! are none: only results (stdout) and errors (stderr).

use std::io::{IsTerminal, Write as _};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressStyle};

use emm_conformance::config::{Progress, ProgressFn};

/// How often a visible bar redraws its clock while no step ends.
const TICK: Duration = Duration::from_millis(250);

/// Whether output to a stream that `is_terminal` may be coloured: not when `NO_COLOR` is
/// set (no-color.org) or colour was turned off.
pub fn use_color(is_terminal: bool, off: bool) -> bool {
    is_terminal && !off && std::env::var_os("NO_COLOR").is_none()
}

/// The bar's look: `[#####.....]  12/104 cases  0 failed  3s`, `unit` naming the steps.
fn style(unit: &str) -> ProgressStyle {
    let template = format!("[{{bar:30}}] {{pos:>4}}/{{len}} {unit}  {{msg}}  {{elapsed}}");
    ProgressStyle::with_template(&template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("#.")
}

/// The progress of a long run on stderr: a bar of `total` steps where stderr is a terminal,
/// plain note lines where it is not, nothing with `--quiet`. Errors are always printed.
#[derive(Debug, Clone)]
pub struct Bar {
    bar: ProgressBar,
    quiet: bool,
}

impl Bar {
    /// A bar of `total` steps called `unit` (e.g. `cells`); `quiet` shows nothing.
    pub fn new(total: u64, unit: &str, quiet: bool) -> Self {
        let bar = if quiet || !std::io::stderr().is_terminal() {
            ProgressBar::hidden()
        } else {
            // Cleared when the last clone goes, even on an early return.
            let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
                .with_style(style(unit))
                .with_finish(ProgressFinish::AndClear);
            b.enable_steady_tick(TICK);
            b
        };
        Bar { bar, quiet }
    }

    /// One step done; `message` says which.
    pub fn step(&self, message: impl Into<String>) {
        self.bar.set_message(message.into());
        self.bar.inc(1);
    }

    /// Where the run is, between steps.
    pub fn message(&self, message: impl Into<String>) {
        self.bar.set_message(message.into());
    }

    /// Moves the bar to `position` of `total`.
    pub fn set(&self, position: u64, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(position);
    }

    /// A note of the run (a section begins, a step ended): above the bar, or a plain line
    /// where stderr is not a terminal; nothing with `--quiet`.
    pub fn note(&self, line: &str) {
        if self.quiet {
            return;
        }
        if self.bar.is_hidden() {
            plain(line);
        } else {
            self.bar.println(line);
        }
    }

    /// A line of a log (a long run's heartbeat) where no bar is drawn: stderr is not a
    /// terminal and `--quiet` was not given.
    pub fn log(&self, line: &str) {
        if !self.quiet && self.bar.is_hidden() {
            plain(line);
        }
    }

    /// An error or a warning: on stderr always, above the bar.
    pub fn error(&self, line: &str) {
        self.bar.suspend(|| plain(line));
    }

    /// Runs `print` (results on stdout) with the bar lifted, so that lines never mix.
    pub fn out<T>(&self, print: impl FnOnce() -> T) -> T {
        self.bar.suspend(print)
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Writes `line` to stderr; a stderr that cannot be written (a full disk) ends no run.
fn plain(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// A progress callback for `emm check`, drawing a bar of cases on stderr when stderr is a
/// terminal.
pub fn on_stderr() -> Option<ProgressFn> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    // Drawn from the first case on, when the number of cases is known.
    let bar = std::sync::OnceLock::new();
    Some(Arc::new(move |p: Progress| {
        let bar = bar.get_or_init(|| Bar::new(p.total as u64, "cases", false));
        bar.set(p.done as u64, p.total as u64);
        bar.message(format!("{} failed", p.failed));
        if p.done == p.total {
            bar.finish();
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_bar_is_hidden_and_colour_needs_a_terminal() {
        let b = Bar::new(3, "cells", true);
        b.step("one");
        b.note("not shown");
        assert!(b.bar.is_hidden());
        assert_eq!(b.out(|| 7), 7);
        b.finish();
        assert!(!use_color(false, false));
        assert!(!use_color(true, true));
    }
}
