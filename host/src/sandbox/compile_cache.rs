//! The on-disk cache of precompiled provider code, keyed by the component's sha256 and the
//! engine's compatibility hash (wasmtime version and every setting that changes codegen).
//!
//! Loading precompiled code is `unsafe` in wasmtime: the bytes become machine code. So every
//! file carries the sha256 of its artifact and is loaded only when that matches; a truncated
//! or corrupted file is removed and rebuilt, never loaded. The directory must be writable by
//! the manager alone (the digest guards against corruption, not against a hostile writer).
//!
//! Processes sharing the directory compile a component once: a miss takes an exclusive lock
//! on the entry's `.lock` file, looks again, and only then compiles. Big components (a
//! JavaScript or Python runtime) take 10-25 s and 400 MB to compile; without the lock every
//! process that missed at once compiled its own copy.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

const MAGIC: &[u8; 8] = b"WCCMPC01";

/// Where a component's machine code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Read back from the cache.
    Cache,
    /// Compiled now (and stored, when a cache is configured).
    Compiled,
}

impl Origin {
    /// Its `source` label on the compile counter: `cache` or `compile`.
    pub fn label(self) -> &'static str {
        match self {
            Origin::Cache => "cache",
            Origin::Compiled => "compile",
        }
    }
}

/// A directory of precompiled components for one engine configuration.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
    engine_key: String,
}

impl CompileCache {
    pub fn new(dir: PathBuf, engine: &Engine) -> Self {
        CompileCache {
            dir,
            engine_key: engine_key(engine),
        }
    }

    /// The cache file of the component whose sha256 is `digest`.
    pub fn path_for(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// The component from the cache if a sound entry exists, else compiled and stored.
    /// Blocking: call it off the async threads.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        wasm: &[u8],
        digest: &str,
    ) -> wasmtime::Result<(Component, Origin)> {
        let path = self.path_for(digest);
        if let Some(component) = self.load(engine, &path) {
            return Ok((component, Origin::Cache));
        }
        // Held until the entry is stored; released when dropped (the file stays, empty).
        let _compiling = self.lock(&path);
        if let Some(component) = self.load(engine, &path) {
            return Ok((component, Origin::Cache));
        }
        let component = Component::new(engine, wasm)?;
        if let Err(err) = self.store(&component, &path) {
            tracing::warn!(path = %path.display(), "cannot write compile cache: {err:#}");
        }
        Ok((component, Origin::Compiled))
    }

    /// An exclusive lock on the entry at `path`, waiting for another process's compile; none
    /// if the lock file cannot be made (then this process compiles regardless).
    fn lock(&self, path: &Path) -> Option<std::fs::File> {
        let lock_path = path.with_extension("lock");
        let locked = std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::File::create(&lock_path))
            .and_then(|file| file.lock().map(|()| file));
        match locked {
            Ok(file) => Some(file),
            Err(err) => {
                tracing::debug!(path = %lock_path.display(), "cannot lock compile cache entry: {err}");
                None
            }
        }
    }

    // The one audited `unsafe` of the workspace (`unsafe_code` is denied everywhere else).
    #[allow(unsafe_code)]
    fn load(&self, engine: &Engine, path: &Path) -> Option<Component> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
            Err(err) => {
                tracing::warn!(path = %path.display(), "cannot read compile cache: {err}");
                return None;
            }
        };
        let Some(artifact) = verified_artifact(&bytes) else {
            tracing::warn!(path = %path.display(), "compile cache entry is corrupted; rebuilding it");
            let _ = std::fs::remove_file(path);
            return None;
        };
        // SAFETY: the artifact was produced by `Component::serialize` of this engine
        // configuration (the file name carries the engine key) and its sha256 matches the
        // one written beside it, so these are the bytes this process family wrote.
        match unsafe { Component::deserialize(engine, artifact) } {
            Ok(component) => Some(component),
            Err(err) => {
                tracing::warn!(path = %path.display(), "compile cache entry unusable ({err}); rebuilding it");
                let _ = std::fs::remove_file(path);
                None
            }
        }
    }

    fn store(&self, component: &Component, path: &Path) -> wasmtime::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let artifact = component.serialize()?;
        let mut file = tempfile::NamedTempFile::new_in(&self.dir)?;
        file.write_all(MAGIC)?;
        file.write_all(&Sha256::digest(&artifact))?;
        file.write_all(&artifact)?;
        file.as_file().sync_all()?;
        file.persist(path)?;
        Ok(())
    }
}

/// The artifact inside a cache file, if the file is whole and its checksum matches.
fn verified_artifact(bytes: &[u8]) -> Option<&[u8]> {
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    if rest.len() < 32 {
        return None;
    }
    let (checksum, artifact) = rest.split_at(32);
    (Sha256::digest(artifact).as_slice() == checksum).then_some(artifact)
}

/// A stable hex key of the engine's compatibility hash.
fn engine_key(engine: &Engine) -> String {
    struct Sha256Hasher(Sha256);
    impl Hasher for Sha256Hasher {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex::encode(&hasher.0.finalize()[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_files_with_matching_checksum_verify() {
        let artifact = b"machine code".to_vec();
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&Sha256::digest(&artifact));
        file.extend_from_slice(&artifact);
        assert_eq!(verified_artifact(&file), Some(artifact.as_slice()));

        let truncated = &file[..file.len() - 1];
        assert_eq!(verified_artifact(truncated), None);
        let mut flipped = file.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(verified_artifact(&flipped), None);
        assert_eq!(verified_artifact(b"WCCMPC01short"), None);
        assert_eq!(verified_artifact(&artifact), None);
    }
}
