//! With feature `etcd`: checks that the vendored protoc (crate `protoc-bin-vendored`), which
//! etcd-client's build runs through the workspace's `.cargo/protoc`, is there for this platform.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "etcd")]
    if let Err(e) = protoc_bin_vendored::protoc_bin_path() {
        println!("cargo:warning=no vendored protoc for this platform ({e}): etcd-client's build needs PROTOC or a protoc on PATH");
    }
}
