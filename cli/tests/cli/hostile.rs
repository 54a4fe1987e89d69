//! Hostile and broken plugins through `emm check`: each exits 1 (a check fails) or 2 (it
//! cannot be loaded or run) within 60 s with its reason, and the host keeps running. A
//! plugin that cannot start (another ABI version, `emm_init` refusing, a trap in its start
//! function, a bad `emm_buffer`) exits 2.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use emm_cli::{self as cli, EXIT_CANNOT_RUN, EXIT_FAIL};

const TEMPLATE: &str = include_str!("../../../sandbox/tests/fixtures/hostile.wat");

fn fixture(hostile: &str, nth: u32, version: i32, init: i32) -> String {
    TEMPLATE
        .replace("HOSTILE", hostile)
        .replace("NTH", &nth.to_string())
        .replace("VERSION", &version.to_string())
        .replace("INIT_STATUS", &init.to_string())
        .replace("FREE_STATUS", "0")
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("emm-hostile-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir().join(format!("{name}.wasm"));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn wasm(name: &str, wat: &str) -> PathBuf {
    file(name, &emm_sandbox::module::wat_to_wasm(wat).unwrap())
}

/// `emm check path` at a small depth: its exit status, within 60 s.
fn check(path: &Path) -> i32 {
    let t = Instant::now();
    let args = format!(
        "check {} --cases 16 --ops 16 --seed 1 --no-regressions --no-verdict --json",
        path.display()
    );
    let rc = cli::main(args.split_whitespace().map(String::from).collect());
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "{}: {:?}",
        path.display(),
        t.elapsed()
    );
    rc
}

#[test]
fn plugins_that_cannot_start_exit_2() {
    let cases = [
        ("abi2", fixture("(nop)", 0, 2, 0)),
        ("init_refuses", fixture("(nop)", 0, 1, -3)),
        (
            "start_traps",
            fixture("(nop)", 0, 1, 0).replace(
                "(memory (export \"memory\") 1)",
                "(memory (export \"memory\") 1)\n  (func $boom unreachable)\n  (start $boom)",
            ),
        ),
        (
            "bad_buffer",
            fixture("(nop)", 0, 1, 0).replace(
                "(func (export \"emm_buffer\") (param i32) (result i32) (i32.const 1024))",
                "(func (export \"emm_buffer\") (param i32) (result i32) (i32.const -5))",
            ),
        ),
    ];
    for (name, wat) in cases {
        assert_eq!(check(&wasm(name, &wat)), EXIT_CANNOT_RUN, "{name}");
    }
}

#[test]
fn hostile_plugins_exit_1_or_2_within_60_s() {
    let cases = [
        ("loop", fixture("(loop $l (br $l))", 3, 1, 0)),
        ("trap", fixture("(unreachable)", 3, 1, 0)),
        (
            "memory_bomb",
            fixture(
                "(loop $l (drop (memory.grow (i32.const 16))) (br $l))",
                3,
                1,
                0,
            ),
        ),
        (
            "chunk_bomb",
            fixture(
                "(loop $l (br_if $l (i32.ge_s (call $up_alloc (i64.const 1) (i64.const 256)) \
                 (i32.const 0)))) (return (i64.const -1))",
                3,
                1,
                0,
            ),
        ),
        (
            "log_flood",
            fixture(
                "(loop $l (call $log (i32.const 2) (i32.const 0) (i32.const 15)) (br $l))",
                3,
                1,
                0,
            ),
        ),
        (
            "log_range",
            fixture(
                "(call $log (i32.const 2) (i32.const 0) (i32.const 1000000))",
                3,
                1,
                0,
            ),
        ),
    ];
    for (name, wat) in cases {
        let rc = check(&wasm(name, &wat));
        assert!(rc == EXIT_FAIL || rc == EXIT_CANNOT_RUN, "{name}: {rc}");
    }
    // Refused at load: text, a 64-bit memory, a compile bomb.
    let text = file("text", fixture("(nop)", 0, 1, 0).as_bytes());
    assert_eq!(check(&text), EXIT_CANNOT_RUN);
    let wide = fixture("(nop)", 0, 1, 0).replace(
        "(memory (export \"memory\") 1)",
        "(memory (export \"memory\") i64 1)",
    );
    assert_eq!(check(&wasm("wide", &wide)), EXIT_CANNOT_RUN);
    let mut bomb = String::from("(module");
    for _ in 0..40 {
        bomb.push_str(" (func");
        bomb.push_str(&" nop".repeat(40_000));
        bomb.push(')');
    }
    bomb.push(')');
    assert_eq!(check(&wasm("compile_bomb", &bomb)), EXIT_CANNOT_RUN);
}
