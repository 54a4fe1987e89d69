//! Gives `libemm.so` its SONAME, so a program linked against it records `libemm.so` (not the
//! path it was linked from) and the dynamic loader finds it by that name.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "android" || os.ends_with("bsd") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libemm.so");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
