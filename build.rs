//! With the `tch` feature: an rpath to libtorch for this package's binaries, tests, examples
//! and benches (so they run without LD_LIBRARY_PATH), and libtorch_cuda kept linked although
//! nothing references it by name, so that CUDA is seen on a GPU machine.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_TCH").is_none() {
        return;
    }
    // Set by torch-sys (links = "tch"): the directory holding libtorch.
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        if std::path::Path::new(&dir).join("libtorch_cuda.so").exists() {
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
    }
}
