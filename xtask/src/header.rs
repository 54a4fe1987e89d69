//! The C header check: `capi/include/emm.h` is what cbindgen generates from emm-capi's sources
//! with `capi/cbindgen.toml`. `cargo xtask header` fails when the committed header differs;
//! `--write` rewrites it.
//!
//! The check lives here, not in emm-capi's tests, so that cbindgen (and the features it turns on
//! in crates wasmtime shares) stays out of the workspace's build: emm-capi then builds its
//! dependencies with the same features alone (the Python wheel's build) as in the workspace,
//! and the wheel reuses the tests' wasmtime.

use std::time::Instant;

use crate::{workspace_root, Failure};

/// Declarations PyTorch's `CUDAPluggableAllocator` loads by name, with the signature it calls.
const REQUIRED: [&str; 2] = [
    "void *emm_torch_alloc(ssize_t size, int device, cudaStream_t stream);",
    "void emm_torch_free(void *ptr, ssize_t size, int device, cudaStream_t stream);",
];

/// Generates the header; with `write`, rewrites the committed one, else fails when it differs.
pub(crate) fn check(write: bool) -> Result<(), Failure> {
    let start = Instant::now();
    let fail = |reason: String| Failure {
        step: "header".to_owned(),
        reason,
    };
    let crate_dir = workspace_root().join("capi");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .map_err(|e| fail(format!("capi/cbindgen.toml: {e}")))?;
    let generated = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .map_err(|e| fail(format!("cbindgen could not generate the header: {e}")))?;
    let mut text = Vec::new();
    generated.write(&mut text);
    let text = String::from_utf8(text).map_err(|e| fail(format!("not UTF-8: {e}")))?;
    if let Some(missing) = REQUIRED.iter().find(|d| !text.contains(*d)) {
        return Err(fail(format!(
            "the generated header lacks `{missing}`, which PyTorch's pluggable allocator calls"
        )));
    }
    let path = crate_dir.join("include").join("emm.h");
    if write {
        std::fs::write(&path, &text)
            .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        return Err(fail(
            "capi/include/emm.h is stale: the C ABI changed. Regenerate it with \
             `cargo xtask header --write` and commit it"
                .to_owned(),
        ));
    }
    eprintln!("==> header: {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}
