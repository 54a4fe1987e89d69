//! Clippy inside the build. `cargo clippy` is `cargo check` with clippy-driver wrapping rustc
//! for the workspace's crates, so CI's clippy step checked every dependency (wasmtime and
//! cranelift among them) once more before the tests built them. clippy-driver compiles as rustc
//! does, so `cargo xtask test` builds with it as the wrapper instead: one pass over the
//! dependencies, the lints on the workspace's crates as they compile. Every later cargo command
//! of `test` that builds the workspace's crates carries the same environment, or cargo would
//! build them again.

use std::path::PathBuf;
use std::process::Command;

/// The wrapper's environment: clippy-driver for the workspace's crates, with `-D warnings`
/// given the way `cargo clippy -- -D warnings` gives it (`CLIPPY_ARGS`, separated by
/// clippy's own marker).
pub(crate) struct Lints {
    driver: PathBuf,
}

const CLIPPY_ARGS: &str = "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__";

impl Lints {
    /// The toolchain's clippy-driver, once it has failed a probe that breaks a lint: a driver
    /// that would pass it (a changed argument format) is not used, and `None` sends `test`
    /// back to `cargo clippy`.
    pub(crate) fn in_build() -> Option<Lints> {
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let out = Command::new(&rustc)
            .args(["--print", "sysroot"])
            .output()
            .ok()?;
        let sysroot = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
        let driver = sysroot.join("bin").join("clippy-driver");
        if !driver.is_file() {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("emm-lint-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let probe = dir.join("probe.rs");
        std::fs::write(&probe, "pub fn probe(v: &Vec<u8>) -> usize { v.len() }\n").ok()?;
        let caught = Command::new(&driver)
            .arg(&rustc)
            .args([
                "--edition",
                "2021",
                "--crate-type",
                "lib",
                "--emit=metadata",
                "-o",
            ])
            .arg(dir.join("probe.rmeta"))
            .arg(&probe)
            .env("CLIPPY_ARGS", CLIPPY_ARGS)
            .output()
            .is_ok_and(|o| !o.status.success());
        let _ = std::fs::remove_dir_all(&dir);
        caught.then_some(Lints { driver })
    }

    /// Makes `cmd` (a cargo command) lint the workspace's crates it compiles.
    pub(crate) fn apply(&self, cmd: &mut Command) {
        cmd.env("RUSTC_WORKSPACE_WRAPPER", &self.driver)
            .env("CLIPPY_ARGS", CLIPPY_ARGS);
    }

    /// [`Lints::apply`] when there are lints.
    pub(crate) fn on(lints: Option<&Lints>, mut cmd: Command) -> Command {
        if let Some(l) = lints {
            l.apply(&mut cmd);
        }
        cmd
    }
}
