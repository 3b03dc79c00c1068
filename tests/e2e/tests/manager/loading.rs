//! Loading providers: the on-disk compile cache is used, one compile serves loads that miss
//! at once, and a corrupted entry is detected and rebuilt rather than loaded; bytes that are not a component, and a
//! component that is not a provider, are refused with a clear error.

use std::path::PathBuf;
use std::sync::Arc;

use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::sandbox::{LoadError, Origin, Sandbox, SandboxConfig};

fn cached_sandbox(dir: &std::path::Path) -> Sandbox {
    let config = SandboxConfig {
        cache_dir: Some(dir.to_path_buf()),
        ..SandboxConfig::default()
    };
    Sandbox::new(config, Arc::new(Metrics::default())).unwrap()
}

fn cache_files(dir: &std::path::Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "cwasm"))
        .collect()
}

#[tokio::test]
async fn precompiled_code_is_reused_and_a_corrupted_entry_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let wasm: Arc<[u8]> = guest_builds::read(guest_builds::SIMCLOUD).into();

    let first = cached_sandbox(dir.path())
        .load(wasm.clone(), "simcloud")
        .await
        .unwrap();
    assert_eq!(first.origin(), Origin::Compiled);
    let files = cache_files(dir.path());
    assert_eq!(files.len(), 1);
    let digest = first.digest().trim_start_matches("sha256:");
    assert!(
        files[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(digest)
    );

    // A new process (new sandbox, same engine settings) loads the precompiled code.
    let second = cached_sandbox(dir.path())
        .load(wasm.clone(), "simcloud")
        .await
        .unwrap();
    assert_eq!(second.origin(), Origin::Cache);

    // Flip one byte of the machine code: detected, never loaded, rebuilt.
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&files[0], &bytes).unwrap();
    let rebuilt = cached_sandbox(dir.path())
        .load(wasm.clone(), "simcloud")
        .await
        .unwrap();
    assert_eq!(rebuilt.origin(), Origin::Compiled);
    let again = cached_sandbox(dir.path())
        .load(wasm.clone(), "simcloud")
        .await
        .unwrap();
    assert_eq!(again.origin(), Origin::Cache, "the rebuilt entry is sound");

    // Truncated to nothing: the same.
    std::fs::write(&files[0], b"").unwrap();
    let rebuilt = cached_sandbox(dir.path())
        .load(wasm, "simcloud")
        .await
        .unwrap();
    assert_eq!(rebuilt.origin(), Origin::Compiled);
}

/// Processes sharing a cache directory (here two sandboxes, each its own engine, loading
/// at the same moment) compile a component once: the second waits for the first's entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_that_miss_at_once_compile_the_component_once() {
    let dir = tempfile::tempdir().unwrap();
    let wasm: Arc<[u8]> = guest_builds::read(guest_builds::SIMCLOUD).into();
    let (a, b) = (cached_sandbox(dir.path()), cached_sandbox(dir.path()));
    let (a, b) = tokio::join!(a.load(wasm.clone(), "simcloud"), b.load(wasm, "simcloud"));
    let mut origins = [a.unwrap().origin(), b.unwrap().origin()];
    origins.sort_by_key(|origin| origin.label());
    assert_eq!(origins, [Origin::Cache, Origin::Compiled]);
    assert_eq!(cache_files(dir.path()).len(), 1);
}

#[tokio::test]
async fn bytes_that_are_not_a_component_are_refused_naming_the_origin() {
    let sandbox = Sandbox::new(SandboxConfig::default(), Arc::new(Metrics::default())).unwrap();
    for (origin, bytes) in [
        ("notes.txt", b"not wasm at all".to_vec()),
        (
            "truncated.wasm",
            guest_builds::read(guest_builds::SIMCLOUD)[..1000].to_vec(),
        ),
        ("core-module.wasm", b"\0asm\x01\0\0\0".to_vec()),
    ] {
        let error = sandbox
            .load(bytes.into(), origin)
            .await
            .err()
            .expect("refused");
        assert!(
            matches!(error, LoadError::Invalid { .. }),
            "{origin}: {error}"
        );
        assert!(error.to_string().starts_with(origin), "{error}");
        assert!(
            error
                .to_string()
                .contains("not a valid WebAssembly component"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_component_without_the_contract_exports_is_refused_naming_what_is_missing() {
    let sandbox = Sandbox::new(SandboxConfig::default(), Arc::new(Metrics::default())).unwrap();
    // The smallest valid component: the preamble of the component binary format, nothing in it.
    let empty = b"\0asm\x0d\0\x01\0".to_vec();
    let error = sandbox
        .load(empty.into(), "empty.wasm")
        .await
        .err()
        .expect("refused");
    assert!(matches!(error, LoadError::NotAProvider { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.starts_with("empty.wasm does not implement the wasm-ccm:provider@0.1.0 contract"),
        "{message}"
    );
    assert!(
        message.contains("wasm-ccm:provider/"),
        "names the missing export: {message}"
    );
}
