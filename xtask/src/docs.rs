//! `cargo xtask docs [--write]`: the book (`docs/book/`) and the README stay true.
//!
//! 1. Every generated table of the book's pages is what `benchmarks/data/` gives
//!    ([`crate::tables`]); `--write` rewrites the pages instead of failing.
//! 2. Every link of `README.md`, `benchmarks/README.md` and of the book resolves: a relative link names a file that
//!    exists (and, inside the book, stays inside `docs/book/src/`, since the rendered book holds
//!    nothing else), a `#anchor` names a heading of its page, a link to this repository's GitHub
//!    tree names a file of the checkout, and an `{{#include}}` names a file.
//! 3. mdBook builds the book into `target/book/`. The `mdbook` on `PATH` serves when it is
//!    [`MDBOOK_VERSION`]; otherwise it is installed once with `cargo install --locked
//!    --no-default-features` (no live-reload server, no search index: what a build needs),
//!    unoptimized, into `target/tools/`.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{cargo, run, tables, workspace_root, Failure};

/// The mdBook release the book is built with.
const MDBOOK_VERSION: &str = "0.5.4";

/// Links to this repository's files on GitHub, checked against the checkout.
const REPO_URLS: [&str; 2] = [
    "https://github.com/emm-rs/emm/blob/main/",
    "https://github.com/emm-rs/emm/tree/main/",
];

fn fail(reason: String) -> Failure {
    Failure {
        step: "docs".to_owned(),
        reason,
    }
}

/// `cargo xtask docs [--write]`.
pub(crate) fn docs(write: bool) -> Result<(), Failure> {
    let root = workspace_root();
    let src = root.join("docs/book/src");
    let mut pages = Vec::new();
    collect_markdown(&src, &mut pages).map_err(fail)?;
    eprintln!("==> docs: tables");
    let mut stale = Vec::new();
    for page in &pages {
        let name = rel(&root, page);
        let text = read(page)?;
        let fresh = tables::regenerate(&root, &name, &text).map_err(fail)?;
        if fresh != text {
            if write {
                std::fs::write(page, &fresh)
                    .map_err(|e| fail(format!("cannot write {name}: {e}")))?;
                eprintln!("    rewrote the tables of {name}");
            } else {
                stale.push(name);
            }
        }
    }
    if !stale.is_empty() {
        return Err(fail(format!(
            "the tables of {} differ from benchmarks/data/: run `cargo xtask docs --write`",
            stale.join(", ")
        )));
    }
    eprintln!("==> docs: links");
    let mut broken = Vec::new();
    let outside = ["README.md", "benchmarks/README.md"].map(|f| root.join(f));
    for page in pages.iter().chain(&outside) {
        let text = read(page)?;
        let inside = page.starts_with(&src).then_some(src.as_path());
        broken.extend(check_links(&root, page, &text, inside));
    }
    if !broken.is_empty() {
        return Err(fail(format!(
            "{} broken link(s):\n  {}",
            broken.len(),
            broken.join("\n  ")
        )));
    }
    let mdbook = mdbook(&root)?;
    let mut build = Command::new(mdbook);
    build
        .arg("build")
        .arg(root.join("docs/book"))
        .arg("--dest-dir")
        .arg(root.join("target/book"));
    run("docs: mdbook build", build)?;
    eprintln!(
        "==> docs: the book is in {}",
        root.join("target/book").display()
    );
    Ok(())
}

/// An `mdbook` of [`MDBOOK_VERSION`]: the one on `PATH`, else one installed into
/// `target/tools/`.
fn mdbook(root: &Path) -> Result<PathBuf, Failure> {
    let local = root.join("target/tools/bin/mdbook");
    for candidate in [PathBuf::from("mdbook"), local.clone()] {
        if version_of(&candidate).is_some_and(|v| v.trim_start_matches('v') == MDBOOK_VERSION) {
            return Ok(candidate);
        }
    }
    // Quiet: it may compile beside the workspace's build, whose progress is the one to read.
    let mut install = cargo([
        "install",
        "mdbook",
        "--locked",
        "--no-default-features",
        "--quiet",
    ]);
    install
        .args(["--version", MDBOOK_VERSION, "--root"])
        .arg(root.join("target/tools"))
        // Unoptimized, in many codegen units: it renders this book in a fraction of a second
        // either way, and compiles in less than half the CPU time of a release build.
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "256");
    run("docs: install mdbook", install)?;
    Ok(local)
}

/// What `program --version` prints after its name (`mdbook v0.5.4` gives `v0.5.4`).
fn version_of(program: &Path) -> Option<String> {
    let out = Command::new(program)
        .arg("--version")
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace().nth(1).map(str::to_owned)
}

fn read(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read {}: {e}", path.display())))
}

/// `path` from the repository root, for messages.
fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Every `.md` file under `dir`, sorted.
fn collect_markdown(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            collect_markdown(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
    Ok(())
}

/// The text outside fenced code blocks and inline code spans (replaced by spaces, so nothing in
/// code reads as a link), line by line.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return String::new();
            }
            if fenced {
                return String::new();
            }
            let mut out = String::with_capacity(line.len());
            let mut in_code = false;
            for c in line.chars() {
                if c == '`' {
                    in_code = !in_code;
                }
                out.push(if in_code || c == '`' { ' ' } else { c });
            }
            out
        })
        .collect()
}

/// The targets of inline links and images (`](target)`), reference definitions
/// (`[name]: target`) and `{{#include path}}` directives, with their line numbers.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(rest) = line.trim().strip_prefix("{{#include ") {
            let path = rest.trim_end_matches("}}").trim();
            // `file:anchor` or `file:1:20` selects part of a file.
            let path = path.split(':').next().unwrap_or(path);
            out.push((i + 1, format!("include:{path}")));
        }
    }
    for (i, line) in prose(text).iter().enumerate() {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push((i + 1, target.to_owned()));
            rest = &after[end..];
        }
        let t = line.trim_start();
        if let (true, Some(close)) = (t.starts_with('['), t.find("]: ")) {
            out.push((i + 1, t[close + 3..].trim().to_owned()));
        }
    }
    out
}

/// The anchor mdBook and GitHub give a heading: lowercase, spaces to `-`, punctuation dropped.
fn slug(heading: &str) -> String {
    let text: String = {
        // The visible text of links inside the heading: `[text](url)` reads `text`.
        let mut t = String::new();
        let mut skip = false;
        let mut prev = ' ';
        for c in heading.chars() {
            if prev == ']' && c == '(' {
                skip = true;
            }
            if !skip {
                t.push(c);
            }
            if skip && c == ')' {
                skip = false;
            }
            prev = c;
        }
        t
    };
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a page's headings (`#`-style, outside code), repeats numbered `-1`, `-2`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(h) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let base = slug(h.trim_start_matches('#'));
        let mut id = base.clone();
        let mut n = 0;
        while seen.contains(&id) {
            n += 1;
            id = format!("{base}-{n}");
        }
        seen.insert(id);
    }
    seen
}

/// `base.join(rel)` with `.` and `..` folded, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The broken links of `page` (text `text`), each as `file:line: target: why`. `book` is the
/// book's source folder when `page` lies in it.
fn check_links(root: &Path, page: &Path, text: &str, book: Option<&Path>) -> Vec<String> {
    let dir = page.parent().unwrap_or(root);
    let name = rel(root, page);
    let mut broken = Vec::new();
    for (line, target) in link_targets(text) {
        let mut bad = |why: String| broken.push(format!("{name}:{line}: {target}: {why}"));
        if let Some(path) = target.strip_prefix("include:") {
            if !dir.join(path).is_file() {
                bad("the included file does not exist".to_owned());
            }
            continue;
        }
        if let Some(path) = REPO_URLS.iter().find_map(|u| target.strip_prefix(u)) {
            let path = path.split('#').next().unwrap_or(path);
            if !root.join(path).exists() {
                bad("no such file in this repository".to_owned());
            }
            continue;
        }
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (target.as_str(), None),
        };
        if file.is_empty() {
            if let Some(anchor) = anchor.filter(|a| !anchors(text).contains(*a)) {
                bad(format!("no heading with anchor #{anchor} on this page"));
            }
            continue;
        }
        let resolved = normalize(&dir.join(file));
        if let Some(src) = book {
            if !resolved.starts_with(normalize(src)) {
                bad(format!(
                    "leaves the book, so it breaks in the rendered HTML; link to {}{}",
                    REPO_URLS[0],
                    rel(root, &resolved)
                ));
                continue;
            }
        }
        // The book's pages link to each other's rendered `.html`; the source is the `.md`.
        let on_disk = if book.is_some() && resolved.extension().is_some_and(|x| x == "html") {
            resolved.with_extension("md")
        } else {
            resolved
        };
        if !on_disk.exists() {
            bad("no such file".to_owned());
            continue;
        }
        if let Some(anchor) = anchor {
            if on_disk.extension().is_some_and(|x| x == "md") {
                let target_text = std::fs::read_to_string(&on_disk).unwrap_or_default();
                if !anchors(&target_text).contains(anchor) {
                    bad(format!("no heading with anchor #{anchor}"));
                }
            }
        }
    }
    broken
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_mdbook_and_github() {
        assert_eq!(
            slug(" The gate: a plugin reaches a GPU"),
            "the-gate-a-plugin-reaches-a-gpu"
        );
        assert_eq!(slug(" W1–W3 `pool-vmm` (H100)"), "w1w3-pool-vmm-h100");
        assert_eq!(slug(" See [the ABI](abi.md) now"), "see-the-abi-now");
        let a = anchors("# A\n## A\n```\n# not\n```\n### B c\n");
        assert_eq!(
            a.into_iter().collect::<Vec<_>>(),
            ["a", "a-1", "b-c"].map(String::from)
        );
    }

    #[test]
    fn links_in_code_are_not_links() {
        let t = link_targets(
            "[a](x.md) `[b](y.md)`\n```\n[c](z.md)\n```\n[r]: w.md#q\n{{#include ../../f.md:3}}\n",
        );
        let got: Vec<_> = t.iter().map(|(l, s)| (*l, s.as_str())).collect();
        assert_eq!(got, [(6, "include:../../f.md"), (1, "x.md"), (5, "w.md#q")]);
    }

    #[test]
    fn broken_links_and_anchors_are_found_and_good_ones_pass() {
        let root = std::env::temp_dir().join(format!("emm-xtask-docs-{}", std::process::id()));
        let src = root.join("docs/book/src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(root.join("README.md"), "").unwrap();
        std::fs::write(src.join("b.md"), "# Title\n## Two words\n").unwrap();
        let page = src.join("a.md");
        let text = "[ok](b.md#two-words) [ok](b.html#title) [ok](#self)\n# Self\n\
                    [no](c.md) [no](b.md#three) [out](../../../README.md)\n\
                    [gh](https://github.com/emm-rs/emm/blob/main/README.md) \
                    [gh](https://github.com/emm-rs/emm/blob/main/NOPE.md) [web](https://example.com/x)\n";
        let broken = check_links(&root, &page, text, Some(&src));
        assert_eq!(broken.len(), 4, "{broken:#?}");
        assert!(broken[0].contains("c.md: no such file"));
        assert!(broken[1].contains("no heading with anchor #three"));
        assert!(broken[2].contains("leaves the book"));
        assert!(broken[3].contains("NOPE.md: no such file in this repository"));
        // Outside the book, a relative link to any file of the checkout is fine.
        let readme = root.join("README.md");
        assert!(check_links(&root, &readme, "[b](docs/book/src/b.md#title)", None).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
