//! The checks a module passes before it is instantiated: it imports only what the host
//! provides, and exports everything ABI v1 requires, with the right types. Its tests hold the
//! tables of `plugins/ABI.md` and `plugins/plugin.wit`, which plugin authors read, to these
//! lists.

use wasmtime::{ExternType, FuncType, Module, ValType};

use crate::abi;
use crate::error::SandboxError;

/// An export of ABI v1: name, parameters, results, and whether a plugin must have it.
struct ExportSpec {
    name: &'static str,
    params: &'static [ValType],
    results: &'static [ValType],
    signature: &'static str,
    required: bool,
}

const I32: ValType = ValType::I32;
const I64: ValType = ValType::I64;

const EXPORTS: [ExportSpec; 10] = [
    spec(abi::EXPORT_ABI_VERSION, &[], &[I32], "() -> i32", true),
    spec(abi::EXPORT_BUFFER, &[I32], &[I32], "(i32) -> i32", true),
    spec(
        abi::EXPORT_INIT,
        &[I32, I32],
        &[I32],
        "(i32, i32) -> i32",
        true,
    ),
    spec(
        abi::EXPORT_ALLOC,
        &[I64, I64, I64],
        &[I64],
        "(i64, i64, i64) -> i64",
        true,
    ),
    spec(
        abi::EXPORT_FREE,
        &[I32, I64, I64, I64],
        &[I32],
        "(i32, i64, i64, i64) -> i32",
        true,
    ),
    spec(abi::EXPORT_RESET, &[], &[I32], "() -> i32", false),
    spec(abi::EXPORT_TRIM, &[I64], &[I32], "(i64) -> i32", false),
    spec(abi::EXPORT_STATS, &[], &[I32], "() -> i32", false),
    spec(abi::EXPORT_DEFER_ENTER, &[], &[], "() -> ()", false),
    spec(abi::EXPORT_DEFER_EXIT, &[], &[I32], "() -> i32", false),
];

const fn spec(
    name: &'static str,
    params: &'static [ValType],
    results: &'static [ValType],
    signature: &'static str,
    required: bool,
) -> ExportSpec {
    ExportSpec {
        name,
        params,
        results,
        signature,
        required,
    }
}

/// The host functions a plugin may import, all from [`abi::IMPORT_MODULE`].
const IMPORTS: [&str; 4] = [
    abi::IMPORT_UPSTREAM_ALLOC,
    abi::IMPORT_UPSTREAM_FREE,
    abi::IMPORT_LOG,
    abi::IMPORT_STREAM_ORDER,
];

pub(crate) fn check_imports(plugin: &str, module: &Module) -> Result<(), SandboxError> {
    for import in module.imports() {
        let known = import.module() == abi::IMPORT_MODULE && IMPORTS.contains(&import.name());
        if !known {
            return Err(SandboxError::UnknownImport {
                plugin: plugin.to_string(),
                module: import.module().to_string(),
                name: import.name().to_string(),
            });
        }
    }
    Ok(())
}

pub(crate) fn check_exports(plugin: &str, module: &Module) -> Result<(), SandboxError> {
    if !matches!(
        module.get_export(abi::EXPORT_MEMORY),
        Some(ExternType::Memory(_))
    ) {
        return Err(SandboxError::MissingExport {
            plugin: plugin.to_string(),
            name: abi::EXPORT_MEMORY,
            signature: "memory",
        });
    }
    for spec in &EXPORTS {
        match module.get_export(spec.name) {
            None if !spec.required => {}
            None => {
                return Err(SandboxError::MissingExport {
                    plugin: plugin.to_string(),
                    name: spec.name,
                    signature: spec.signature,
                })
            }
            Some(ExternType::Func(f)) if matches_spec(&f, spec) => {}
            Some(other) => {
                return Err(SandboxError::WrongSignature {
                    plugin: plugin.to_string(),
                    name: spec.name,
                    expected: spec.signature,
                    found: describe(&other),
                })
            }
        }
    }
    Ok(())
}

fn matches_spec(f: &FuncType, spec: &ExportSpec) -> bool {
    let same = |a: &mut dyn ExactSizeIterator<Item = ValType>, b: &[ValType]| {
        a.len() == b.len() && a.zip(b).all(|(x, y)| ValType::eq(&x, y))
    };
    same(&mut f.params(), spec.params) && same(&mut f.results(), spec.results)
}

fn describe(e: &ExternType) -> String {
    match e {
        ExternType::Func(f) => {
            let list = |it: &mut dyn Iterator<Item = ValType>| {
                it.map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
            };
            format!("({}) -> {}", list(&mut f.params()), list(&mut f.results()))
        }
        ExternType::Global(_) => "a global".to_string(),
        ExternType::Table(_) => "a table".to_string(),
        ExternType::Memory(_) => "a memory".to_string(),
        _ => "another kind of export".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{ExportSpec, EXPORTS, IMPORTS};

    /// The contract in prose, which plugin authors in any language read.
    const ABI_MD: &str = include_str!("../../plugins/ABI.md");
    /// The same exports described in WIT.
    const WIT: &str = include_str!("../../plugins/plugin.wit");

    /// `(size: i64, align: i64) -> i32` as the host writes it: `(i64, i64) -> i32`.
    fn types_only(typed: &str) -> String {
        let (params, result) = typed.split_once(" -> ").unwrap_or((typed, "()"));
        let params = params.trim_matches(|c| c == '(' || c == ')');
        let types: Vec<&str> = params
            .split(',')
            .filter_map(|p| p.rsplit(':').next())
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect();
        format!("({}) -> {}", types.join(", "), result.trim())
    }

    fn spec(name: &str) -> &'static ExportSpec {
        EXPORTS
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{name} is described but the host does not check it"))
    }

    #[test]
    fn abi_md_lists_every_export_with_the_hosts_type_and_need() {
        let rows: Vec<Vec<&str>> = ABI_MD
            .lines()
            .filter(|l| l.starts_with("| `emm_"))
            .map(|l| l.split('|').map(str::trim).collect())
            .collect();
        assert_eq!(rows.len(), EXPORTS.len(), "{rows:?}");
        for row in rows {
            let (name, typed, need) = (row[1].trim_matches('`'), row[2].trim_matches('`'), row[3]);
            let spec = spec(name);
            assert_eq!(types_only(typed), spec.signature, "{name}");
            assert_eq!(need == "yes", spec.required, "{name}: required is {need}");
        }
    }

    #[test]
    fn the_wit_declares_every_export_with_the_hosts_types_and_need() {
        let policy = WIT
            .split("interface policy {")
            .nth(1)
            .and_then(|s| s.split('}').next())
            .expect("the WIT has an interface policy");
        // The doc comment above each function, all its lines.
        let mut doc = String::new();
        let mut seen = 0;
        for line in policy.lines().map(str::trim) {
            if let Some(text) = line.strip_prefix("///") {
                doc.push_str(text);
                continue;
            }
            let Some((name, typed)) = line.split_once(": func") else {
                continue;
            };
            let doc = std::mem::take(&mut doc);
            let spec = spec(&name.replace('-', "_"));
            let typed = typed
                .trim_end_matches(';')
                .replace("s32", "i32")
                .replace("s64", "i64");
            assert_eq!(types_only(&typed), spec.signature, "{name}");
            assert_eq!(!doc.contains("Optional:"), spec.required, "{name}");
            seen += 1;
        }
        assert_eq!(seen, EXPORTS.len());
    }

    #[test]
    fn abi_md_and_the_wit_name_every_import_the_host_allows() {
        let mut documented: Vec<&str> = ABI_MD
            .split("## Imports")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("ABI.md has an Imports section")
            .lines()
            .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
            .collect();
        let host = WIT
            .split("interface host {")
            .nth(1)
            .and_then(|s| s.split('}').next())
            .expect("the WIT has an interface host");
        let mut described: Vec<String> = host
            .lines()
            .filter_map(|l| Some(l.trim().split_once(": func")?.0.replace('-', "_")))
            .collect();
        let mut allowed = IMPORTS.to_vec();
        allowed.sort_unstable();
        documented.sort_unstable();
        described.sort_unstable();
        assert_eq!(documented, allowed);
        assert_eq!(described, allowed);
    }
}
