//! The progress bar on stderr and whether to colour output, by hand (no UI crate).

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Instant;

use emm_conformance::config::{Progress, ProgressFn};

/// Width of the bar in characters.
const WIDTH: usize = 30;

/// Whether output to a stream that `is_terminal` may be coloured: not when `NO_COLOR` is
/// set (no-color.org) or colour was turned off.
pub fn use_color(is_terminal: bool, off: bool) -> bool {
    is_terminal && !off && std::env::var_os("NO_COLOR").is_none()
}

/// One line of the bar: `[#####.....]  12/104 cases  0 failed  1.2 s`.
pub fn bar(p: Progress, seconds: f64) -> String {
    let filled = (p.done * WIDTH)
        .checked_div(p.total)
        .unwrap_or(WIDTH)
        .min(WIDTH);
    format!(
        "[{}{}] {:>4}/{} cases  {} failed  {seconds:.1} s",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled),
        p.done,
        p.total,
        p.failed
    )
}

/// A progress callback drawing the bar on stderr, when stderr is a terminal.
pub fn on_stderr() -> Option<ProgressFn> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let start = Instant::now();
    Some(Arc::new(move |p: Progress| {
        let line = bar(p, start.elapsed().as_secs_f64());
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line}");
        if p.done == p.total {
            let _ = write!(err, "\r{}\r", " ".repeat(line.len()));
        }
        let _ = err.flush();
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_fills_with_the_cases_done() {
        let p = Progress {
            done: 15,
            total: 30,
            failed: 1,
        };
        assert_eq!(
            bar(p, 2.25),
            "[###############...............]   15/30 cases  1 failed  2.2 s"
        );
        assert!(!use_color(false, false));
        assert!(!use_color(true, true));
    }
}
