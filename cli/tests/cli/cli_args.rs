//! The `emm` command line as users meet it, through the built binary: help per command,
//! suggestions, usage errors that exit 2 before any other output, paths of any bytes, and
//! `--quiet`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output};

use emm_cli::{self as cli, EXIT_CANNOT_RUN, EXIT_PASS};

/// The built `emm` with `args`, its stdout and stderr captured.
fn emm(args: &[&OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_emm"))
        .args(args)
        .output()
        .expect("run the emm binary")
}

fn os(args: &str) -> Vec<&OsStr> {
    args.split_whitespace().map(OsStr::new).collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A fresh folder for test `name`.
fn folder(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("emm-cli-args-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const LOG: &str = "Thread,Time,Action,Pointer,Size,Stream\n\
                   1,00:00:00.000001,allocate,0x7f0000000000,4096,0x0\n\
                   1,00:00:00.000002,free,0x7f0000000000,4096,0x0\n";

#[test]
fn help_of_a_command_is_the_same_by_help_and_by_the_flag() {
    for name in ["check", "list", "replay", "bench", "sweep", "soak"] {
        let by_help = emm(&os(&format!("help {name}")));
        let by_flag = emm(&os(&format!("{name} --help")));
        assert_eq!(by_help.status.code(), Some(EXIT_PASS), "{by_help:?}");
        assert_eq!(by_flag.status.code(), Some(EXIT_PASS), "{by_flag:?}");
        let help = text(&by_help.stdout);
        assert_eq!(help, text(&by_flag.stdout));
        assert!(help.contains(&format!("Usage: emm {name}")), "{help}");
        assert!(help.contains("--quiet"), "{help}");
    }
    let check = text(&emm(&os("check --help")).stdout);
    for flag in [
        "--backend <NAME>",
        "--seed <N>",
        "--cases <N>",
        "--ops <N>",
        "--threads <N>",
        "--regressions <DIR>",
        "--no-regressions",
        "--verdicts <DIR>",
        "--no-verdict",
        "--replay <FILE>",
        "--json",
        "--no-color",
    ] {
        assert!(check.contains(flag), "{flag} missing from: {check}");
    }
    let top = cli::help();
    for name in ["check", "list", "replay", "bench", "sweep", "soak"] {
        assert!(top.contains(&format!("  {name} ")), "{name}: {top}");
    }
}

#[test]
fn a_typo_gets_a_suggestion_and_exit_2_before_any_output() {
    for (args, tip) in [
        ("chek default", "'check'"),
        ("check default --bakend sim", "'--backend'"),
        ("bench --workloads W1", "'--workload'"),
    ] {
        let out = emm(&os(args));
        assert_eq!(out.status.code(), Some(EXIT_CANNOT_RUN), "{args}: {out:?}");
        assert!(out.stdout.is_empty(), "{args}: {out:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("similar") && err.contains(tip),
            "{args}: {err}"
        );
    }
}

#[test]
fn values_are_checked_by_the_parser_with_exit_2_and_the_accepted_values() {
    for (args, words) in [
        ("check default --cases 0", "1..=1000000"),
        ("check default --ops 10001", "1..=10000"),
        ("check default --backend gpu", "sim, cuda"),
        ("replay x.csv --threads many", "single, per-log-thread"),
        ("replay x.csv --resource nope", "pool, pool-vmm"),
        ("bench --workload W9", "W1, W2, W3"),
        ("bench --streams both", "own, shared"),
        ("bench --devices 17", "1..=16"),
        ("bench --threads 1,x", "invalid digit"),
        ("soak --minutes=-1", "positive"),
        ("sweep --kinds NOPE", "no CUDA code \"NOPE\""),
    ] {
        let out = emm(&os(args));
        assert_eq!(out.status.code(), Some(EXIT_CANNOT_RUN), "{args}: {out:?}");
        assert!(out.stdout.is_empty(), "{args}: {out:?}");
        let err = text(&out.stderr);
        assert!(err.starts_with("error: "), "{args}: {err}");
        assert!(err.contains(words), "{args}: {err:?} should say {words:?}");
    }
}

/// A path of any bytes is opened as given; a value that is not a path must be UTF-8.
#[test]
fn a_log_whose_path_is_not_utf8_replays() {
    let dir = folder("utf8");
    let log = dir.join(OsStr::from_bytes(b"log\xff.csv"));
    std::fs::write(&log, LOG).unwrap();
    let out = emm(&[OsStr::new("replay"), log.as_os_str(), OsStr::new("--json")]);
    assert_eq!(out.status.code(), Some(EXIT_PASS), "{out:?}");
    assert!(text(&out.stdout).contains("log\u{fffd}.csv"), "{out:?}");
    let bad = OsStr::from_bytes(b"po\xffol");
    let out = emm(&[
        OsStr::new("replay"),
        log.as_os_str(),
        OsStr::new("--resource"),
        bad,
    ]);
    assert_eq!(out.status.code(), Some(EXIT_CANNOT_RUN), "{out:?}");
    assert!(text(&out.stderr).contains("UTF-8"), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--quiet`, before or after the command: results on stdout, nothing on stderr.
#[test]
fn quiet_leaves_only_the_results() {
    let sweep = "sweep --only pool --ops 1 --no-workloads --kinds OUT_OF_MEMORY";
    let loud = emm(&os(sweep));
    assert_eq!(loud.status.code(), Some(EXIT_PASS), "{loud:?}");
    assert!(text(&loud.stderr).contains("faulted runs"), "{loud:?}");
    for quiet in [format!("{sweep} --quiet"), format!("-q {sweep}")] {
        let out = emm(&os(&quiet));
        assert_eq!(out.status.code(), Some(EXIT_PASS), "{quiet}: {out:?}");
        assert!(out.stderr.is_empty(), "{quiet}: {}", text(&out.stderr));
        assert_eq!(out.stdout.is_empty(), loud.stdout.is_empty());
    }
    let out = emm(&os("bench -q --resource pool --workload W1 --passes 1"));
    assert_eq!(out.status.code(), Some(EXIT_PASS), "{out:?}");
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("pool"), "{out:?}");
}

#[test]
fn a_real_pytorch_snapshot_replays_with_every_allocation_matched() {
    // ResNet-50 on variable image sizes, recorded on a GPU (benchmarks/traces/record.py).
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../benchmarks/traces/cnn-varsize.pickle.gz"
    );
    let out = emm(&os(&format!("replay {trace} --resource pool --json")));
    assert_eq!(out.status.code(), Some(EXIT_PASS), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The trace's peak of live bytes; emm counted the same peak (emm.stats) serving this
    // workload on the GPU.
    assert_eq!(report["peak_live_bytes"], 6_151_827_424u64);
    assert_eq!(
        (report["ops"].as_u64(), report["unknown_frees"].as_u64()),
        (Some(61_685), Some(0))
    );
    let held = report["peak_held_bytes"].as_f64().unwrap();
    assert!(
        held >= 6_151_827_424.0 && held / 6_151_827_424.0 < 1.05,
        "held {held}"
    );
}

/// A fresh folder and in it `log.csv`, an RMM log of one thread on the default stream whose
/// rows are `time,action,pointer,size`.
fn rmm_log(name: &str, rows: &[&str]) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = folder(name);
    let log = dir.join("log.csv");
    let mut text = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    for row in rows {
        text.push_str(&format!("1,{row},0x0\n"));
    }
    std::fs::write(&log, text).unwrap();
    (dir, log)
}

/// `emm replay` replays against the pool that holds the least (`pool-vmm-tight`) unless told
/// otherwise, at the log's pace unless told otherwise.
#[test]
fn replay_defaults_to_the_tight_pool_at_the_logs_pace() {
    // A second between the two events: paced on the simulated GPU, free in wall time.
    let (dir, log) = rmm_log(
        "replay-default",
        &[
            "00:00:00.000001,allocate,0x7f0000000000,4096",
            "00:00:01.000001,free,0x7f0000000000,4096",
        ],
    );
    let run = |extra: &str| {
        let mut args = vec![OsStr::new("replay"), log.as_os_str(), OsStr::new("--json")];
        args.extend(os(extra));
        let out = emm(&args);
        assert_eq!(out.status.code(), Some(EXIT_PASS), "{}", text(&out.stderr));
        serde_json::from_str::<serde_json::Value>(&text(&out.stdout)).unwrap()
    };
    let default = run("");
    assert_eq!(default["resource"], "pool-vmm-tight");
    assert!(
        default["wall_ns"].as_u64().unwrap() < 1_000_000_000,
        "{default}"
    );
    assert_eq!(run("--resource pool --pace flat")["resource"], "pool");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `EMM_MOVE_SHARE` reaches `pool-vmm-tight`: at `0` it never moves memory and maps beside a
/// free block too small for the next request; `unbounded` moves that block's memory there. A
/// value it cannot read is refused with the variable named, exit status 2.
#[test]
fn replay_s_tight_pool_moves_as_emm_move_share_says() {
    // 64 MiB freed below a live 64 MiB, then a request of 96 MiB: live peaks at 160 MiB.
    let (dir, log) = rmm_log(
        "replay-move-share",
        &[
            "00:00:00.000001,allocate,0x7f0000000000,67108864",
            "00:00:00.000002,allocate,0x7f1000000000,67108864",
            "00:00:00.000003,free,0x7f0000000000,67108864",
            "00:00:00.000004,allocate,0x7f2000000000,100663296",
            "00:00:00.000005,free,0x7f1000000000,67108864",
            "00:00:00.000006,free,0x7f2000000000,100663296",
        ],
    );
    let run = |share: &str| {
        Command::new(env!("CARGO_BIN_EXE_emm"))
            .args([OsStr::new("replay"), log.as_os_str(), OsStr::new("--json")])
            .env("EMM_MOVE_SHARE", share)
            .output()
            .expect("run the emm binary")
    };
    let held = |share: &str| {
        let out = run(share);
        assert_eq!(out.status.code(), Some(EXIT_PASS), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
        assert_eq!(v["peak_live_bytes"], 160 << 20);
        v["peak_held_bytes"].as_u64().unwrap()
    };
    assert_eq!(
        held("0"),
        224 << 20,
        "no move: the free 64 MiB stays mapped"
    );
    assert_eq!(
        held("unbounded"),
        160 << 20,
        "its memory moved to the request"
    );
    let bad = run("lots");
    assert_eq!(bad.status.code(), Some(EXIT_CANNOT_RUN));
    let err = text(&bad.stderr);
    assert!(err.contains("EMM_MOVE_SHARE=\"lots\""), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
