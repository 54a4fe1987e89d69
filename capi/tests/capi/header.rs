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
         `EMM_BLESS=1 cargo test -p emm-capi --test capi header::` and commit it."
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

/// A C program includes the header (C11, `-pedantic -Werror`), links against the cdylib built
/// beside this test, and runs on the simulated GPU. Skips, saying so, without a C compiler.
#[test]
fn a_c_program_builds_against_the_header_and_runs() {
    let Some(lib_dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(PathBuf::from))
        .filter(|deps| deps.join("libemm.so").is_file())
    else {
        panic!("libemm.so was not built beside the test executable");
    };
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("emm-capi-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let src = dir.join("use_emm.c");
    std::fs::write(
        &src,
        r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "emm.h"
int main(void) {
    void *p = NULL;
    int n = 0;
    if (emm_abi_version() != EMM_ABI_VERSION || emm_device_count(&n) != EMM_STATUS_OK || n < 1) return 1;
    if (emm_alloc(4096, 0, (cudaStream_t)0, &p) != EMM_STATUS_OK || p == NULL) return 2;
    if (emm_free(p, NULL) != EMM_STATUS_OK) return 3;
    if (emm_free(p, NULL) != EMM_STATUS_UNKNOWN_POINTER) return 4;
    printf("%s: %s\n", emm_status_name(emm_last_error_code()), emm_last_error_message());
    void *t = emm_torch_alloc(256, 0, (cudaStream_t)0);
    if (t == NULL) return 5;
    emm_torch_free(t, 256, 0, (cudaStream_t)0);
    /* Host memory is real memory, on the simulator as on a GPU; a pin pins the caller's. */
    unsigned char *h = NULL;
    if (emm_host_alloc(1 << 20, 0, 0, (void **)&h, NULL) != EMM_STATUS_OK) return 7;
    memset(h, 0x5a, 1 << 20);
    if (h[0] != 0x5a || h[(1 << 20) - 1] != 0x5a) return 8;
    if (emm_free(h, NULL) != EMM_STATUS_OK) return 9;
    unsigned char *mine = malloc(1 << 16);
    void *dev = NULL;
    if (mine == NULL) return 10;
    memset(mine, 1, 1 << 16);
    if (emm_host_pin(mine, 1 << 16, 0, 1, &dev) != EMM_STATUS_OK || dev == NULL) return 11;
    mine[100] = 2;
    if (emm_free(mine, NULL) != EMM_STATUS_OK) return 12;
    if (mine[99] != 1 || mine[100] != 2) return 13;
    free(mine);
    char *s = emm_stats_json();
    if (s == NULL) return 6;
    puts(s);
    emm_string_free(s);
    return 0;
}
"#,
    )
    .expect("write the C program");
    let exe = dir.join("use_emm");
    let cc = std::process::Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I"])
        .arg(crate_dir.join("include"))
        .arg(&src)
        .arg("-L")
        .arg(&lib_dir)
        .args(["-lemm", "-o"])
        .arg(&exe)
        .output();
    let Ok(cc) = cc else {
        eprintln!("skipped: no C compiler (cc)");
        return;
    };
    assert!(
        cc.status.success(),
        "the header does not compile as C11:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = std::process::Command::new(&exe)
        .env("LD_LIBRARY_PATH", &lib_dir)
        .env("EMM_BACKEND", "sim")
        .env_remove("EMM_MEMORY_MANAGER")
        .output()
        .expect("the C program runs");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "exit {:?}: {out}", run.status.code());
    assert!(
        out.contains("EMM_STATUS_UNKNOWN_POINTER: emm_free:"),
        "{out}"
    );
    assert!(out.contains("\"backend\":\"sim\""), "{out}");
    // The same under a 4 GiB address-space limit (`ulimit -v`): the pool's records no longer
    // take 4 GiB of address space, so the first allocation does not abort the program.
    let limited = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4194304 && exec \"$0\"")
        .arg(&exe)
        .env("LD_LIBRARY_PATH", &lib_dir)
        .env("EMM_BACKEND", "sim")
        .env_remove("EMM_MEMORY_MANAGER")
        .output()
        .expect("the C program runs under sh");
    assert!(
        limited.status.success(),
        "under ulimit -v 4194304: {:?}: {}{}",
        limited.status,
        String::from_utf8_lossy(&limited.stdout),
        String::from_utf8_lossy(&limited.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
