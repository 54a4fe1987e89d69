//! The hardware bundle's Python scripts (`xtask/hardware/python`): their own unittest checks
//! (the numba-cuda log summary against real unittest output and the committed baselines) and
//! a syntax check of every script; the run script's syntax and its report (`report.py`) over a
//! results folder; the benchmarks' scripts (`benchmarks/`): their syntax, and the trace
//! step comparison over made-up runs; so a broken script is caught here and not on the GPU
//! machine. Skips, saying so, when `python3` is absent.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `cmd` and fails the test, with its output, unless it succeeds.
fn succeeds(cmd: &mut Command) {
    let out = cmd.output().expect("the command starts");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the bundle's `report.py` over the results folder `dir`.
fn report(dir: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hardware/report.py");
    succeeds(Command::new("python3").arg(script).arg(dir));
}

/// Parses every `.py` file in `dirs` (a syntax check; nothing runs).
fn parse_all(dirs: &[&Path]) {
    let check = "import ast, pathlib, sys\n\
                 for d in sys.argv[1:]:\n    for p in sorted(pathlib.Path(d).glob('*.py')):\n        \
                 ast.parse(p.read_text(), str(p))\n";
    succeeds(Command::new("python3").args(["-c", check]).args(dirs));
}

/// Whether `python3` runs here; when it does not, says that the test is skipped.
fn python3() -> bool {
    let present = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        eprintln!("skipped: python3 is not installed");
    }
    present
}

/// A fresh, empty folder `emm-<name>-<pid>` in the temporary directory.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("emm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_hardware_python_scripts_compile_and_their_checks_pass() {
    if !python3() {
        return;
    }
    let hardware = Path::new(env!("CARGO_MANIFEST_DIR")).join("hardware");
    let dir = hardware.join("python");
    succeeds(
        Command::new("python3")
            .args(["-m", "unittest", "discover", "-s"])
            .arg(&dir)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    );
    parse_all(&[&dir]);
    for script in [dir.join("run_python.sh"), hardware.join("run.sh")] {
        succeeds(Command::new("bash").arg("-n").arg(script));
    }
}

#[test]
fn the_report_summarizes_the_rounds_three_ways() {
    if !python3() {
        return;
    }
    // Three rounds: emm's JSON lines, the peers' RESULT lines, a failed peer run and a line
    // of noise (both left out).
    let dir = fresh_dir("rounds");
    let mut rounds = String::new();
    for (i, emm) in [[40.0, 37.0, 41.0], [42.0, 35.0, 33.0], [53.0, 58.0, 66.0]]
        .iter()
        .enumerate()
    {
        for (w, ns) in ["W1", "W2", "W3"].iter().zip(emm) {
            rounds += &format!(
                "ROUND {i} {{\"resource\":\"pool-vmm\",\"workload\":\"{w}\",\"ns_per_op\":{ns}}}\n"
            );
        }
        for (w, ns) in ["W1", "W2", "W3"].iter().zip([270, 350, 274]) {
            let ns = ns + i;
            rounds +=
                &format!("ROUND {i} RESULT C_rmm_binning {w} ops=1 status=ok ns_per_op={ns}\n");
            rounds +=
                &format!("ROUND {i} RESULT D_torch_caching {w} ops=1 status=ok ns_per_op=900\n");
        }
        rounds += &format!("ROUND {i} RESULT C_rmm_pool W1 ops=1 status=FAILED error=\"x\"\n");
        rounds += &format!("ROUND {i} not a result\n");
    }
    std::fs::write(dir.join("rounds.txt"), rounds).unwrap();
    report(&dir);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let json = std::fs::read_to_string(dir.join("report.json")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        md.contains(
            "| emm pool-vmm | 42.0 (40.0–53.0, 3) | 37.0 (35.0–58.0, 3) | 41.0 (33.0–66.0, 3) |"
        ),
        "{md}"
    );
    assert!(
        md.contains("| C_rmm_binning | 271.0 (270.0–272.0, 3) |"),
        "{md}"
    );
    assert!(
        !md.contains("C_rmm_pool"),
        "a failed run is no figure: {md}"
    );
    // The best peer per list is the lowest median: RMM binning, not PyTorch. Fastest against
    // fastest: 270 / 40, 350 / 35, 274 / 33; within a round, W1's ratios are 270 / 40, 271 /
    // 42 and 272 / 53, of which the median is 6.45.
    assert!(
        md.contains(
            "emm pool-vmm against the best peer (the lowest median): median against median \
             W1 6.5× (C_rmm_binning), W2 9.5× (C_rmm_binning), W3 6.7× (C_rmm_binning); \
             fastest against fastest W1 6.8×, W2 10.0×, W3 8.3×; median of the ratios within \
             a round W1 6.5×, W2 9.5×, W3 6.7×."
        ),
        "{md}"
    );
    assert!(json.contains("\"rounds\""), "{json}");
    assert!(json.contains("\"fastest_against_fastest\": 10.0"), "{json}");
}

#[test]
fn the_cost_model_is_compared_only_where_it_times_every_operation() {
    if !python3() {
        return;
    }
    let dir = fresh_dir("costs");
    let line = |r: &str, w: &str, ns: f64, key: &str| {
        format!(
            "{{\"resource\":\"{r}\",\"workload\":\"{w}\",\"ops\":1,\"{key}\":{ns},\
             \"peak_held_bytes\":1,\"peak_live_bytes\":1}}\n"
        )
    };
    // Managed memory is placed on first touch, which the benchmark never does: nothing held.
    let untouched = |key: &str, ns: f64| {
        format!(
            "{{\"resource\":\"managed\",\"workload\":\"W1\",\"ops\":1,\"{key}\":{ns},\
             \"peak_held_bytes\":0,\"peak_live_bytes\":4096}}\n"
        )
    };
    let measured = line("cuda", "W1", 7000.0, "ns_per_op")
        + &line("pool", "W1", 40.0, "ns_per_op")
        + &untouched("ns_per_op", 10000.0);
    let predicted = line("cuda", "W1", 4200.0, "virtual_ns_per_op")
        + &line("pool", "W1", 0.2, "virtual_ns_per_op")
        + &untouched("virtual_ns_per_op", 4500.0);
    std::fs::write(dir.join("bench-emm.jsonl"), measured).unwrap();
    std::fs::write(dir.join("bench-sim.jsonl"), predicted).unwrap();
    report(&dir);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    // A pool-only run: nothing to compare, said so.
    std::fs::write(
        dir.join("bench-emm.jsonl"),
        line("pool", "W1", 40.0, "ns_per_op"),
    )
    .unwrap();
    report(&dir);
    let pool_only = std::fs::read_to_string(dir.join("report.md")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(md.contains("| cuda | W1 | 4200 | 7000 | 0.60 |"), "{md}");
    assert!(
        md.contains("| managed | W1 | 4500 | 10000 | 0.45 |"),
        "{md}"
    );
    assert!(
        md.contains("| managed | 10000 | - | - | none · - · - |"),
        "no device memory held is no ratio of 0: {md}"
    );
    assert!(
        md.contains("| cuda | 7000 | - | - | 1.000 · - · - |"),
        "{md}"
    );
    assert!(
        md.contains("none: the device's free memory never moved"),
        "{md}"
    );
    assert!(
        !pool_only.contains("none: the device"),
        "the note only where a cell needs it: {pool_only}"
    );
    assert!(
        !md.contains("| pool | W1 | 0 |"),
        "a pool's host time is not modelled: {md}"
    );
    assert!(md.contains("driver time alone): pool."), "{md}");
    assert!(pool_only.contains("None of them ran here"), "{pool_only}");
}

/// `benchmarks/scripts/trace_steps.py` compares runs step by step: per step the median over
/// each allocator's runs, the first two steps left out; the sum of those medians, the median
/// over steps of the ratio to the caching allocator's, and the median peak held; a run that
/// recorded its trace (slower) counts for nothing.
#[test]
fn the_trace_step_comparison_takes_medians_step_by_step() {
    if !python3() {
        return;
    }
    let dir = fresh_dir("trace-steps");
    let run = |allocator: &str, rep: u32, steps: &str, peak: u32| {
        format!(
            r#"{{"workload": "w", "allocator": "{allocator}", "rep": {rep}, "step_seconds": {steps},
                "smi_used_mib_first": 100, "smi_used_mib_peak": {peak},
                "peak_live_bytes": 1073741824, "device": "GPU"}}"#
        )
    };
    let runs = [
        run("caching", 0, "[9, 9, 1.0, 2.0, 3.0]", 1100),
        run("caching", 1, "[9, 9, 1.0, 2.0, 5.0]", 1300),
        run("caching", 2, "[9, 9, 1.0, 2.0, 3.0]", 1100),
        run("pool-vmm-tight", 0, "[9, 9, 1.1, 2.2, 3.3]", 900),
        run("caching (recording its trace)", 0, "[9, 9, 9, 9, 9]", 5000),
    ];
    let benchmarks = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks");
    parse_all(&[&benchmarks.join("scripts"), &benchmarks.join("traces")]);
    succeeds(
        Command::new("bash")
            .arg("-n")
            .arg(benchmarks.join("traces/run.sh")),
    );
    let results = dir.join("results.json");
    std::fs::write(&results, format!("[{}]", runs.join(","))).unwrap();
    let script = benchmarks.join("scripts/trace_steps.py");
    succeeds(
        Command::new("python3")
            .arg(script)
            .arg("--into")
            .arg(&dir)
            .args(["test-run", results.to_str().unwrap()]),
    );
    let table = std::fs::read_to_string(dir.join("data/trace-steps.csv")).unwrap();
    assert_eq!(
        table.replace("\r\n", "\n"),
        "run,trace,allocator,runs,timed_steps,step_sum_s,step_ratio,held_mib,peak_live_gib\n\
         test-run,w,caching,3,3,6.000,1.000,1000,1.00\n\
         test-run,w,pool-vmm-tight,1,3,6.600,1.100,800,1.00\n"
    );
    let raw = std::fs::read_to_string(dir.join("traces/gpu-steps.json")).unwrap();
    assert!(
        raw.contains("\"run\":\"test-run\"") && !raw.contains("recording"),
        "{raw}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
