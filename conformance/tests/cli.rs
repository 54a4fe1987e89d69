//! The `emm` tool's exit statuses and output, run in process through `cli::main`.

mod zoo;

use std::sync::Arc;

use emm_conformance::cli::{self, help, list, EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS};
use emm_core::contract::register_manager;
use zoo::{Bug, ZooFactory};

fn emm(args: &str) -> i32 {
    cli::main(args.split_whitespace().map(String::from).collect())
}

#[test]
fn exit_status_is_0_on_pass_1_on_a_failed_check_2_when_the_plugin_cannot_run() {
    register_manager(
        "zoo-misaligned",
        Arc::new(ZooFactory(Bug::MisalignedPointers)),
    )
    .unwrap();
    assert_eq!(
        emm("check default --seed 4 --cases 8 --no-regressions --no-verdict --json"),
        EXIT_PASS
    );
    assert_eq!(
        emm("check zoo-misaligned --seed 4 --cases 8 --no-regressions --no-verdict"),
        EXIT_FAIL
    );
    assert_eq!(
        emm("check no-such-plugin --no-regressions"),
        EXIT_CANNOT_RUN
    );
    assert_eq!(
        emm("check /tmp/missing.wasm --no-regressions --json"),
        EXIT_CANNOT_RUN
    );
    assert_eq!(emm("check default --backend cuda"), EXIT_CANNOT_RUN);
    assert_eq!(emm("check"), EXIT_CANNOT_RUN);
    assert_eq!(emm("check default --cases"), EXIT_CANNOT_RUN);
    assert_eq!(emm("check default --bogus"), EXIT_CANNOT_RUN);
    assert_eq!(emm("check --help"), EXIT_PASS);
    assert_eq!(emm("list"), EXIT_PASS);
    assert_eq!(emm("list --json"), EXIT_PASS);
    assert_eq!(emm("frobnicate"), EXIT_CANNOT_RUN);
    assert_eq!(emm(""), EXIT_CANNOT_RUN);
    assert_eq!(emm("help"), EXIT_PASS);
}

#[test]
fn a_replay_from_the_command_line_gives_the_recorded_verdict() {
    register_manager("zoo-leak", Arc::new(ZooFactory(Bug::LeakAtReset))).unwrap();
    let dir = std::env::temp_dir().join(format!("emm-cli-replay-{}", std::process::id()));
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
    assert!(l.contains("checks (24):"), "{l}");
    assert!(l.contains("ipc_handle_addresses_same_bytes"), "{l}");
    for name in [
        "default", "pool", "pool-vmm", "arena", "binning", "async", "managed",
    ] {
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
    let e = emm_conformance::cli::backend("cuda").err().unwrap();
    assert!(e.contains("no NVIDIA driver") && !e.contains('\n'), "{e}");
}

/// `emm replay` replays a log and refuses a corrupt one (exit 2, the line number in the
/// message); `emm bench` runs a workload against a named resource.
#[test]
fn replay_and_bench_run_and_refuse_bad_input() {
    let dir = std::env::temp_dir().join(format!("emm-cli-replay-{}", std::process::id()));
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
    assert_eq!(
        emm("bench --threads 1,2 --workload W1 --resource sharded --round-ops 1 --passes 1 --json"),
        EXIT_PASS
    );
    assert_eq!(
        emm("bench --devices 1,3 --workload W1 --resource pool --json"),
        EXIT_PASS
    );
    assert_eq!(emm("bench --threads 1,x"), EXIT_CANNOT_RUN);
    assert_eq!(emm("bench --devices 17"), EXIT_CANNOT_RUN);
    assert_eq!(emm("bench --threads 2 --streams both"), EXIT_CANNOT_RUN);
}
