//! What a module may cost before it is compiled: a walk over its sections with the wasmparser
//! wasmtime itself uses (re-exported by wasmtime, so never a second copy), refusing, with the
//! limit to raise, a module whose functions, code or locals are over the budgets of
//! [`PluginLimits`], a 64-bit memory (ABI v1 is wasm32) or a memory that starts larger than
//! the cap. Compile time grows with code size and locals; these budgets bound it.

use wasmtime::wasmparser::{Parser, Payload};

use crate::limits::PluginLimits;

/// Why a module is refused before compiling: the limit it breaks and what to do.
pub(crate) enum OverBudget {
    /// It is not a wasm binary at all, or its sections do not parse.
    Invalid(String),
    /// It breaks a budget or the ABI's memory model.
    Refused(String),
}

/// Checks `bytes` (a wasm binary) against the budgets of `limits`.
pub(crate) fn check(bytes: &[u8], limits: &PluginLimits) -> Result<(), OverBudget> {
    let invalid = |e: wasmtime::wasmparser::BinaryReaderError| OverBudget::Invalid(e.to_string());
    let mut functions: u64 = 0;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(invalid)? {
            Payload::Version { encoding, .. }
                if encoding != wasmtime::wasmparser::Encoding::Module =>
            {
                return Err(OverBudget::Refused(
                    "it is a component, not a core module; ABI v1 plugins are core modules \
                     (build for wasm32-unknown-unknown)"
                        .to_string(),
                ));
            }
            Payload::FunctionSection(r) => {
                functions = functions.saturating_add(u64::from(r.count()));
                let max = limits.get_max_functions();
                if functions > u64::from(max) {
                    return Err(OverBudget::Refused(format!(
                        "it defines {functions} functions, over PluginLimits::max_functions \
                         ({max})"
                    )));
                }
            }
            Payload::CodeSectionStart { count, size, .. } => {
                let max = limits.get_max_functions();
                if count > max {
                    return Err(OverBudget::Refused(format!(
                        "it defines {count} functions, over PluginLimits::max_functions ({max})"
                    )));
                }
                let max = limits.get_max_code_bytes();
                if usize::try_from(size).unwrap_or(usize::MAX) > max {
                    return Err(OverBudget::Refused(format!(
                        "its code section is {size} bytes, over PluginLimits::max_code_bytes \
                         ({max})"
                    )));
                }
            }
            Payload::CodeSectionEntry(body) => {
                let len = body.range().len();
                let max = limits.get_max_function_bytes();
                if len > max {
                    return Err(OverBudget::Refused(format!(
                        "a function body is {len} bytes, over PluginLimits::max_function_bytes \
                         ({max})"
                    )));
                }
                let mut reader = body.get_locals_reader().map_err(invalid)?;
                let mut locals: u64 = 0;
                let max = limits.get_max_locals();
                for _ in 0..reader.get_count() {
                    let (n, _) = reader.read().map_err(invalid)?;
                    locals = locals.saturating_add(u64::from(n));
                    if locals > u64::from(max) {
                        return Err(OverBudget::Refused(format!(
                            "a function declares {locals} or more locals, over \
                             PluginLimits::max_locals ({max})"
                        )));
                    }
                }
            }
            Payload::MemorySection(r) => {
                for m in r {
                    let m = m.map_err(invalid)?;
                    memory(&m, limits)?;
                }
            }
            Payload::ImportSection(r) => {
                for import in r.into_imports() {
                    if let wasmtime::wasmparser::TypeRef::Memory(m) = import.map_err(invalid)?.ty {
                        memory(&m, limits)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A memory of ABI v1: 32-bit, not shared, starting within the cap.
fn memory(m: &wasmtime::wasmparser::MemoryType, limits: &PluginLimits) -> Result<(), OverBudget> {
    if m.memory64 {
        return Err(OverBudget::Refused(
            "it declares a 64-bit memory (memory64); ABI v1 is wasm32: build for \
             wasm32-unknown-unknown"
                .to_string(),
        ));
    }
    if m.shared {
        return Err(OverBudget::Refused(
            "it declares a shared memory; ABI v1 plugins are single-threaded".to_string(),
        ));
    }
    let page = 1u64 << m.page_size_log2.unwrap_or(16);
    let initial = m.initial.saturating_mul(page);
    let cap = limits.get_memory_cap();
    if initial > cap as u64 {
        return Err(OverBudget::Refused(format!(
            "its memory starts at {} bytes ({} pages), over PluginLimits::memory_cap ({cap} \
             bytes); raise the cap if the plugin is trusted to need this much",
            initial, m.initial
        )));
    }
    Ok(())
}
