//! Generates the Rust of every `.proto` file under the repository's
//! `proto/sluice/v1/` (tonic services and prost messages). protoc comes
//! from `protoc-bin-vendored` unless `PROTOC` names another.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let dir = root.join("sluice/v1");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "proto"))
        .collect();
    files.sort();
    println!("cargo:rerun-if-changed={}", dir.display());
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let mut config = tonic_prost_build::Config::new();
    if std::env::var_os("PROTOC").is_none() {
        config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    }
    // `bytes` fields as `bytes::Bytes`: Arrow IPC bodies are handed on
    // without a copy.
    config.bytes(["."]);
    tonic_prost_build::configure().compile_with_config(config, &files, &[root])?;
    Ok(())
}
