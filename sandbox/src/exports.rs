//! The checks a module passes before it is instantiated: it imports only what the host
//! provides, and exports everything ABI v1 requires, with the right types.

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

pub(crate) fn check_imports(plugin: &str, module: &Module) -> Result<(), SandboxError> {
    for import in module.imports() {
        let known = import.module() == abi::IMPORT_MODULE
            && [
                abi::IMPORT_UPSTREAM_ALLOC,
                abi::IMPORT_UPSTREAM_FREE,
                abi::IMPORT_LOG,
                abi::IMPORT_STREAM_ORDER,
            ]
            .contains(&import.name());
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
