//! The `emm` tool's exit statuses and output, run in process through `cli::main`.

use crate::zoo;

use std::sync::Arc;

use emm_cli::{self as cli, help, list, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};
use emm_core::contract::register_manager;
use emm_core::managers::{ResourceManagerFactory, DEFAULT_MANAGER_NAME};
use zoo::{Bug, ZooFactory};

fn emm(args: &str) -> i32 {
    cli::main(args.split_whitespace().map(String::from).collect())
}

/// Runs `emm` with each command line and asserts its exit status.
fn exits(cases: &[(&str, i32)]) {
    for &(args, status) in cases {
        assert_eq!(emm(args), status, "emm {args}");
    }
}

#[test]
fn exit_status_is_0_on_pass_1_on_a_failed_check_2_when_the_plugin_cannot_run() {
    register_manager(
        "zoo-misaligned",
        Arc::new(ZooFactory(Bug::MisalignedPointers)),
    )
    .unwrap();
    exits(&[
        (
            "check default --seed 4 --cases 8 --no-regressions --no-verdict --json",
            EXIT_PASS,
        ),
        (
            "check zoo-misaligned --seed 4 --cases 8 --no-regressions --no-verdict",
            EXIT_FAIL,
        ),
        ("check no-such-plugin --no-regressions", EXIT_CANNOT_RUN),
        (
            "check /tmp/missing.wasm --no-regressions --json",
            EXIT_CANNOT_RUN,
        ),
        ("check default --backend cuda", EXIT_CANNOT_RUN),
        ("check", EXIT_CANNOT_RUN),
        ("check default --cases", EXIT_CANNOT_RUN),
        ("check default --bogus", EXIT_CANNOT_RUN),
        ("check --help", EXIT_PASS),
        ("list", EXIT_PASS),
        ("list --json", EXIT_PASS),
        ("frobnicate", EXIT_CANNOT_RUN),
        ("", EXIT_CANNOT_RUN),
        ("help", EXIT_PASS),
    ]);
}

#[test]
fn a_replay_from_the_command_line_gives_the_recorded_verdict() {
    register_manager("zoo-leak", Arc::new(ZooFactory(Bug::LeakAtReset))).unwrap();
    let dir = std::env::temp_dir().join(format!("emm-cli-regressions-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let args = format!(
        "check zoo-leak --seed 8 --cases 4 --json --no-verdict --regressions {}",
        dir.display()
    );
    assert_eq!(emm(&args), EXIT_FAIL);
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(
        emm(&format!("check zoo-leak --replay {}", file.display())),
        EXIT_FAIL
    );
    assert_eq!(
        emm(&format!("check default --replay {} --json", file.display())),
        EXIT_PASS
    );
    assert_eq!(
        emm("check default --replay /nonexistent/regression.json"),
        EXIT_CANNOT_RUN
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_and_list_name_every_command_check_and_plugin() {
    let h = help();
    assert!(h.contains("check") && h.contains("list"), "{h}");
    let l = list::text();
    assert!(l.contains("checks (25):"), "{l}");
    assert!(l.contains("ipc_handle_addresses_same_bytes"), "{l}");
    let builtins = ResourceManagerFactory::builtins();
    let names = builtins.iter().map(|f| f.name());
    for name in std::iter::once(DEFAULT_MANAGER_NAME).chain(names) {
        assert!(l.contains(&format!(" {name}")), "{name} missing from: {l}");
    }
}

/// Without a GPU, `--backend cuda` is a one-line refusal with exit status 2, never a panic.
#[test]
fn the_cuda_backend_without_a_gpu_cannot_run() {
    if emm_cuda::driver_present() {
        return; // A GPU machine: the hardware run covers this backend.
    }
    assert_eq!(
        emm("check pool --backend cuda --seed 1 --no-regressions"),
        EXIT_CANNOT_RUN
    );
    let e = emm_cli::backend("cuda").err().unwrap();
    assert!(e.contains("no NVIDIA driver") && !e.contains('\n'), "{e}");
}

/// `emm replay` replays a log and refuses a corrupt one (exit 2, the line number in the
/// message); `emm bench` runs a workload against a named resource.
#[test]
fn replay_and_bench_run_and_refuse_bad_input() {
    let (dir, good) = small_log("replay");
    let path = good.to_string_lossy().to_string();
    assert_eq!(emm(&format!("replay {path} --resource pool")), EXIT_PASS);
    assert_eq!(
        emm(&format!("replay {path} --resource arena --json")),
        EXIT_PASS
    );
    let bad = dir.join("bad.csv");
    std::fs::write(
        &bad,
        "Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.000001,allocate,zz,4096,0x0\n",
    )
    .unwrap();
    assert_eq!(
        emm(&format!("replay {}", bad.to_string_lossy())),
        EXIT_CANNOT_RUN
    );
    assert_eq!(
        emm(&format!("replay {path} --resource nope")),
        EXIT_CANNOT_RUN
    );
    assert_eq!(emm("replay /no/such/log.csv"), EXIT_CANNOT_RUN);
    assert_eq!(
        emm("bench --resource pool --workload W1 --passes 1 --json"),
        EXIT_PASS
    );
    assert_eq!(emm("bench --workload W9"), EXIT_CANNOT_RUN);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `emm bench --threads` and `--devices` run and refuse bad lists.
#[test]
fn bench_threads_and_devices_run_and_refuse_bad_input() {
    exits(&[
        (
            "bench --threads 1,2 --workload W1 --resource sharded --round-ops 1 --passes 1 --json",
            EXIT_PASS,
        ),
        (
            "bench --devices 1,3 --workload W1 --resource pool --json",
            EXIT_PASS,
        ),
        ("bench --threads 1,x", EXIT_CANNOT_RUN),
        ("bench --devices 17", EXIT_CANNOT_RUN),
        ("bench --threads 2 --streams both", EXIT_CANNOT_RUN),
    ]);
}

/// The built `emm` binary, with `args`, its stdout to `stdout` (piped when `None`); waits at
/// most a minute. Returns the status and stderr.
/// A fresh folder `emm-cli-<name>-<pid>` and in it `good.csv`: a log of two allocations, both
/// freed.
fn small_log(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("emm-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.csv");
    std::fs::write(
        &good,
        "Thread,Time,Action,Pointer,Size,Stream\n\
         1,00:00:00.000001,allocate,0x7f0000000000,4096,0x0\n\
         1,00:00:00.000002,allocate,0x7f0000100000,1048576,0x0\n\
         1,00:00:00.000003,free,0x7f0000000000,4096,0x0\n\
         1,00:00:00.000004,free,0x7f0000100000,1048576,0x0\n",
    )
    .unwrap();
    (dir, good)
}

fn emm_binary(
    args: &[&std::ffi::OsStr],
    stdout: Option<std::process::Stdio>,
) -> (std::process::ExitStatus, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_emm"))
        .args(args)
        .stdout(stdout.unwrap_or_else(std::process::Stdio::piped))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the emm binary");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).ok();
        text
    });
    let stdout = child.stdout.take();
    let drain = std::thread::spawn(move || {
        if let Some(mut out) = stdout {
            std::io::copy(&mut out, &mut std::io::sink()).ok();
        }
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for emm") {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().ok();
            child.wait().ok();
            panic!("emm {args:?} ran over a minute");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drain.join().ok();
    (status, reader.join().unwrap_or_default())
}

fn os(args: &str) -> Vec<&std::ffi::OsStr> {
    args.split_whitespace().map(std::ffi::OsStr::new).collect()
}

/// Asserts the run ended with exit status 2 and a message holding `words`, not a panic.
#[track_caller]
fn refused(run: (std::process::ExitStatus, String), words: &str) {
    let (status, stderr) = run;
    assert_eq!(status.code(), Some(EXIT_CANNOT_RUN), "{status:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains(words), "{stderr:?} should say {words:?}");
}

/// `emm … | head -1`: a reader that goes away ends emm quietly (as `SIGPIPE` ends any
/// filter), never with a panic and its exit status 101.
#[test]
fn a_closed_stdout_ends_emm_quietly() {
    use std::os::unix::process::ExitStatusExt;
    for args in ["list", "bench --resource pool --workload W1 --passes 1"] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let (status, stderr) = emm_binary(&os(args), Some(writer.into()));
        assert_eq!(
            status.signal(),
            Some(libc::SIGPIPE),
            "emm {args}: {status:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "emm {args}: {stderr}");
    }
}

/// A path that is not UTF-8 is a path like any other: a log that is not there is named and
/// refused, not a panic.
#[test]
fn a_non_utf8_argument_is_refused() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"log\xff.csv");
    refused(
        emm_binary(&[std::ffi::OsStr::new("replay"), bad], None),
        "cannot open the memory event log log\u{fffd}.csv",
    );
}

/// `emm sweep --only` names built-in managers: an unknown one is refused with the valid
/// names, where it used to sweep nothing and pass.
#[test]
fn sweep_only_refuses_an_unknown_manager() {
    refused(
        emm_binary(&os("sweep --only nosuch --ops 1"), None),
        "--only \"nosuch\" is not a built-in manager; give some of: ",
    );
    let (_, stderr) = emm_binary(&os("sweep --only pool,nosuch --ops 1"), None);
    assert!(
        stderr.contains("pool") && stderr.contains("arena"),
        "{stderr}"
    );
    refused(
        emm_binary(&os("sweep --only , --ops 1"), None),
        "--only names no manager",
    );
}

/// A "log" with no line end (`/dev/zero`) is refused at its first line's limit, not read
/// until memory runs out.
#[test]
fn replay_refuses_a_line_longer_than_any_event() {
    refused(
        emm_binary(&os("replay /dev/zero"), None),
        "line 1 is longer than 4096 bytes",
    );
}

/// Under a 4 GiB address-space limit (`ulimit -v`), `emm replay` and `emm bench` run: the
/// pool's block records no longer take 4 GiB of address space each.
#[test]
fn replay_and_bench_run_under_a_4_gib_address_space_limit() {
    let (dir, log) = small_log("limit");
    for args in [
        format!("replay {} --resource pool", log.display()),
        format!("replay {} --resource binning", log.display()),
        "bench --resource pool --workload W1 --passes 1".to_string(),
    ] {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v 4194304 && exec \"$0\" {args}"))
            .arg(env!("CARGO_BIN_EXE_emm"))
            .output()
            .expect("run sh");
        assert!(
            out.status.success(),
            "emm {args} under ulimit -v 4194304: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `emm --version` and `-V` print the package's version and exit 0.
#[test]
fn version_prints_the_package_version() {
    for flag in ["--version", "-V"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_emm"))
            .arg(flag)
            .output()
            .expect("run the emm binary");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("emm {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}
