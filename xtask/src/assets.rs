//! `completions` and `man`: the `emm` tool's shell completions (clap_complete) and man pages
//! (clap_mangen), made from the definitions `emm` itself parses with.
//!
//! The definitions file is included by path: it needs clap alone, where emm-conformance would
//! build the simulator, the CUDA bindings and wasmtime into xtask.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap_complete::Shell;

use crate::{Failure, Outcome};

#[allow(
    dead_code,
    reason = "only the clap::Command is used here; emm reads the parsed fields"
)]
#[path = "../../cli/src/args.rs"]
mod args;

/// The name the completions complete and the man pages document.
const BIN: &str = "emm";

/// `cargo xtask completions <SHELL> [DIR]`: the completion script of `SHELL` into `DIR`
/// (`emm.bash`, `_emm`, `emm.fish`, …), or to stdout without `DIR`.
pub fn completions(rest: &[OsString]) -> Outcome {
    let (shell, dir) = match rest {
        [shell] => (shell, None),
        [shell, dir] => (shell, Some(PathBuf::from(dir))),
        _ => return Outcome::Usage("`completions` takes a shell and, optionally, a folder".into()),
    };
    let shell = match shell.to_str().and_then(|s| s.parse::<Shell>().ok()) {
        Some(s) => s,
        None => {
            return Outcome::Usage(format!(
                "no shell {}; give bash, elvish, fish, powershell or zsh",
                shell.to_string_lossy()
            ))
        }
    };
    let written = match &dir {
        Some(dir) => std::fs::create_dir_all(dir)
            .and_then(|()| clap_complete::generate_to(shell, &mut args::command(), BIN, dir))
            .map(|path| eprintln!("==> completions: wrote {}", path.display())),
        None => {
            clap_complete::generate(shell, &mut args::command(), BIN, &mut std::io::stdout());
            Ok(())
        }
    };
    done("completions", written)
}

/// `cargo xtask man [DIR]`: `emm.1` and a page per subcommand (`emm-check.1`, …) into `DIR`,
/// or `emm.1` to stdout without `DIR`.
pub fn man(rest: &[OsString]) -> Outcome {
    let written = match rest {
        [] => page(&mut std::io::stdout()),
        [dir] => pages(Path::new(dir)),
        _ => return Outcome::Usage("`man` takes at most a folder".into()),
    };
    done("man", written)
}

/// The page `emm.1` (`emm help` is left out: the pages are the help).
fn page(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    clap_mangen::Man::new(args::command().disable_help_subcommand(true)).render(out)
}

/// Every page into `dir`.
fn pages(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(args::command(), dir)?;
    eprintln!("==> man: wrote the pages in {}", dir.display());
    Ok(())
}

fn done(step: &str, r: std::io::Result<()>) -> Outcome {
    match r {
        Ok(()) => Outcome::Done,
        Err(e) => Outcome::Failed(Failure {
            step: step.into(),
            reason: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUBCOMMANDS: [&str; 6] = ["check", "list", "replay", "bench", "sweep", "soak"];

    #[test]
    fn the_man_page_and_the_bash_completions_name_every_subcommand() {
        let listed: Vec<String> = args::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        assert_eq!(listed, SUBCOMMANDS);
        let mut man = Vec::new();
        page(&mut man).unwrap();
        let man = String::from_utf8(man).unwrap();
        let mut bash = Vec::new();
        clap_complete::generate(Shell::Bash, &mut args::command(), BIN, &mut bash);
        let bash = String::from_utf8(bash).unwrap();
        for name in SUBCOMMANDS {
            assert!(man.contains(&format!("emm\\-{name}")), "{name}: {man}");
            assert!(bash.contains(&format!("emm,{name})")), "{name}: {bash}");
        }
        assert!(bash.contains("--quiet") && bash.contains("--no-regressions"));
        assert!(!man.contains("emm\\-help"), "{man}");
    }

    #[test]
    fn every_page_and_every_shell_is_written_to_a_folder() {
        let dir = std::env::temp_dir().join(format!("xtask-assets-{}", std::process::id()));
        pages(&dir).unwrap();
        for name in SUBCOMMANDS {
            assert!(dir.join(format!("emm-{name}.1")).is_file(), "emm-{name}.1");
        }
        assert!(dir.join("emm.1").is_file());
        for shell in ["bash", "zsh", "fish"] {
            let arg = [OsString::from(shell), dir.clone().into_os_string()];
            assert!(matches!(completions(&arg), Outcome::Done), "{shell}");
        }
        assert!(dir.join("emm.bash").is_file() && dir.join("_emm").is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
