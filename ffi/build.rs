//! The shared library's SONAME, so that the installed libkary_replay.so.0.x.y is found by
//! programs linked against libkary_replay.so (scripts/install-c.sh installs it under that name).
fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libkary_replay.so.{major}");
    }
}
