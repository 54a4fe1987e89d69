//! The hardware bundle's Python scripts (`xtask/hardware/python`): their own unittest checks
//! (the numba-cuda log summary against real unittest output and the committed baselines) and
//! a syntax check of every script, so a broken script is caught here and not on the GPU
//! machine. Skips, saying so, when `python3` is absent.

use std::path::Path;
use std::process::Command;

fn python3() -> bool {
    Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_hardware_python_scripts_compile_and_their_checks_pass() {
    if !python3() {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("hardware/python");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s"])
        .arg(&dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "the scripts' checks failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let check = "import ast, pathlib, sys\n\
                 for p in sorted(pathlib.Path(sys.argv[1]).glob('*.py')):\n    ast.parse(p.read_text(), str(p))\n";
    let out = Command::new("python3")
        .args(["-c", check])
        .arg(&dir)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("bash")
        .arg("-n")
        .arg(dir.join("run_python.sh"))
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
