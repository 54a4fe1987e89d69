//! The layers check: no circle of imports between the modules of a crate.
//!
//! A module's imports are the `crate::…` and `super::…` paths in its code (comments and the
//! test module at the end of a file left out), each resolved to the deepest module of the crate
//! it names. A path to the module itself or to one of its ancestors is no arrow: a child module
//! is part of its parent (an `impl` split by concern). Every other arrow must point one way
//! only; a set of modules that reach each other (a strongly connected component) is a circle,
//! and the check prints it with its arrows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::{workspace_root, Failure};

/// Every crate of the repository: a folder with a `Cargo.toml` and a `src/`, at most two
/// levels below the root (the workspace's members, the plugins' and the fuzz workspace's).
fn crates(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut level = vec![root.to_path_buf()];
    for _ in 0..2 {
        let mut next = Vec::new();
        for dir in level {
            for entry in std::fs::read_dir(&dir)? {
                let path = entry?.path();
                let hidden = path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.') || n == "target");
                if !path.is_dir() || hidden {
                    continue;
                }
                if path.join("Cargo.toml").is_file() && path.join("src").is_dir() {
                    out.push(path.clone());
                }
                next.push(path);
            }
        }
        level = next;
    }
    out.sort();
    Ok(out)
}

/// A module's path inside its crate (`["mr", "pool"]`; the root is empty).
type Module = Vec<String>;

/// Checks every crate of [`CRATES`]; the error lists each circle.
pub(crate) fn check() -> Result<(), Failure> {
    eprintln!("==> layers");
    let start = Instant::now();
    let root = workspace_root();
    let fail = |what: &Path, e: std::io::Error| Failure {
        step: "layers".to_owned(),
        reason: format!("cannot read {}: {e}", what.display()),
    };
    let crates = crates(&root).map_err(|e| fail(&root, e))?;
    let mut circles = Vec::new();
    let mut modules = 0;
    for dir in &crates {
        let krate = dir.strip_prefix(&root).unwrap_or(dir).display().to_string();
        let src = dir.join("src");
        let files = module_files(&src).map_err(|e| fail(&src, e))?;
        modules += files.len();
        let graph = imports(&files).map_err(|e| fail(&src, e))?;
        for circle in components(&graph) {
            let arrows: Vec<String> = circle
                .iter()
                .flat_map(|m| {
                    graph[m]
                        .iter()
                        .filter(|t| circle.contains(*t))
                        .map(move |t| format!("{} -> {}", name(m), name(t)))
                })
                .collect();
            circles.push(format!("{krate}: {}", arrows.join(", ")));
        }
    }
    if !circles.is_empty() {
        return Err(Failure {
            step: "layers".to_owned(),
            reason: format!(
                "{} import circle(s); make the arrows point one way (move the shared item \
                 down, or make one module the other's child):\n  {}",
                circles.len(),
                circles.join("\n  ")
            ),
        });
    }
    eprintln!(
        "<== layers: {modules} modules of {} crates, no circle: {:.1} s",
        crates.len(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".to_owned()
    } else {
        m.join("::")
    }
}

/// Every module file below `src` by module path (`src/bin/` and test files left out).
fn module_files(src: &Path) -> std::io::Result<BTreeMap<Module, PathBuf>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                if dir != src || path.file_name().is_some_and(|n| n != "bin") {
                    stack.push(path);
                }
                continue;
            }
            let Some(stem) = path
                .extension()
                .filter(|e| *e == "rs")
                .and(path.file_stem())
                .and_then(|s| s.to_str())
            else {
                continue;
            };
            if stem.ends_with("tests") {
                continue;
            }
            let rel = path
                .parent()
                .unwrap_or(src)
                .strip_prefix(src)
                .unwrap_or(src);
            let mut module: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if !matches!(stem, "mod" | "lib" | "main") {
                module.push(stem.to_owned());
            }
            out.insert(module, path);
        }
    }
    Ok(out)
}

/// The arrows out of each module.
fn imports(
    files: &BTreeMap<Module, PathBuf>,
) -> std::io::Result<BTreeMap<Module, BTreeSet<Module>>> {
    let mut graph = BTreeMap::new();
    for (module, path) in files {
        let text = std::fs::read_to_string(path)?;
        let code = without_tests_and_comments(&text);
        graph.insert(
            module.clone(),
            arrows(module, &code, |p| files.contains_key(p)),
        );
    }
    Ok(graph)
}

/// The modules `code` of `module` imports: for each path, the deepest module `known` has,
/// unless it is `module` or one of its ancestors.
fn arrows(module: &Module, code: &str, known: impl Fn(&Module) -> bool) -> BTreeSet<Module> {
    paths(code, module)
        .into_iter()
        .filter_map(|path| {
            (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| known(p))
        })
        .filter(|t| !module.starts_with(t))
        .collect()
}

/// `text` up to its test module, without line comments.
fn without_tests_and_comments(text: &str) -> String {
    let code = text.find("#[cfg(test)]").map_or(text, |i| &text[..i]);
    code.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths `code` names from the crate root: `crate::a::b` as `[a, b]`, and
/// `super::x` from `module` as its parent's `x`.
fn paths(code: &str, module: &Module) -> Vec<Module> {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !ident(bytes[i - 1]);
        let (base, mut j) = if starts_word && bytes[i..].starts_with(b"crate::") {
            (Vec::new(), i + "crate::".len())
        } else if starts_word && bytes[i..].starts_with(b"super::") {
            let mut j = i;
            let mut up = 0;
            while bytes[j..].starts_with(b"super::") {
                up += 1;
                j += "super::".len();
            }
            (module[..module.len().saturating_sub(up)].to_vec(), j)
        } else {
            i += 1;
            continue;
        };
        let mut path = base;
        loop {
            let start = j;
            while j < bytes.len() && ident(bytes[j]) {
                j += 1;
            }
            if j == start {
                break;
            }
            path.push(code[start..j].to_owned());
            if bytes[j..].starts_with(b"::") {
                j += 2;
            } else {
                break;
            }
        }
        out.push(path);
        i = j.max(i + 1);
    }
    out
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn components(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        found: Vec<BTreeSet<Module>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.graph[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.insert(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> Module {
        s.split("::")
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect()
    }

    #[test]
    fn paths_resolve_from_the_crate_root_and_from_the_parent() {
        let code = "use crate::mr::pool::PoolResource;\nuse super::super::heap::Heap;\nlet x = my_crate::a;";
        let got = paths(code, &m("mr::detail::segment"));
        assert_eq!(got, vec![m("mr::pool::PoolResource"), m("mr::heap::Heap")]);
    }

    #[test]
    fn a_child_importing_its_parent_or_itself_is_no_arrow() {
        let known = [
            m(""),
            m("mr"),
            m("mr::pool"),
            m("mr::pool::grow"),
            m("sync"),
        ];
        let code = "use super::PoolResource; use crate::mr::pool::grow::x; use crate::sync::Spin; use crate::mr::Error;";
        let got = arrows(&m("mr::pool::grow"), code, |p| known.contains(p));
        assert_eq!(got, BTreeSet::from([m("sync")]));
    }

    #[test]
    fn two_modules_importing_each_other_are_a_circle_and_one_way_is_not() {
        let mut g = BTreeMap::new();
        g.insert(m("a"), BTreeSet::from([m("b")]));
        g.insert(m("b"), BTreeSet::from([m("a")]));
        g.insert(m("c"), BTreeSet::from([m("a")]));
        let circles = components(&g);
        assert_eq!(circles, vec![BTreeSet::from([m("a"), m("b")])]);
        g.insert(m("b"), BTreeSet::new());
        assert!(components(&g).is_empty());
    }

    #[test]
    fn comments_and_the_test_module_are_not_imports() {
        let code = "use crate::a; // crate::b\n/// [`crate::c`]\n#[cfg(test)]\nmod tests { use crate::d; }";
        let kept = without_tests_and_comments(code);
        assert_eq!(paths(&kept, &m("x")), vec![m("a")]);
    }
}
