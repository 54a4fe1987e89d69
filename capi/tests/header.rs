//! `capi/include/emm.h` is generated from the crate by cbindgen; this test fails when the
//! committed header differs from what the sources generate. `EMM_BLESS=1` rewrites it.

use std::path::PathBuf;

#[test]
fn the_committed_header_matches_the_sources() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .unwrap_or_else(|e| panic!("capi/cbindgen.toml: {e}"));
    let generated = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen could not generate the header: {e}"));
    let mut text = Vec::new();
    generated.write(&mut text);
    let text = String::from_utf8(text).expect("cbindgen writes UTF-8");
    let path = crate_dir.join("include/emm.h");
    if std::env::var_os("EMM_BLESS").is_some() {
        std::fs::write(&path, &text).expect("write capi/include/emm.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "capi/include/emm.h is stale: the C ABI changed. Regenerate it with \
         `EMM_BLESS=1 cargo test -p emm-capi --test header` and commit it."
    );
    for f in [
        "emm_torch_alloc",
        "emm_torch_free",
        "emm_alloc",
        "emm_last_error_message",
    ] {
        assert!(text.contains(f), "{f} is missing from the header");
    }
    assert!(text.contains("void *emm_torch_alloc(ssize_t size, int device, cudaStream_t stream);"));
}
