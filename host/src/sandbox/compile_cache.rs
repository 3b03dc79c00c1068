//! The on-disk cache of precompiled provider code, keyed by the component's sha256 and the
//! engine's compatibility hash (wasmtime version and every setting that changes codegen).
//!
//! Loading precompiled code is `unsafe` in wasmtime: the bytes become machine code. So every
//! file carries a tag under the directory's key ([`crate::seal`]) over the component's
//! digest, the engine key and the code, and is loaded only when the tag matches: a truncated,
//! corrupted or swapped file (another component's code under this one's name, whoever wrote
//! it) is removed and rebuilt, never loaded. Files over [`MAX_ENTRY_BYTES`] are not read.
//!
//! Processes sharing the directory compile a component once: a miss takes an exclusive lock
//! on the entry's `.lock` file, looks again, and only then compiles. Big components (a
//! JavaScript or Python runtime) take 10-25 s and 400 MB to compile; without the lock every
//! process that missed at once compiled its own copy.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::seal::{Seal, SealError, TAG_BYTES};

/// The file format: the magic, the tag, the artifact (`01` had an unkeyed sha256).
const MAGIC: &[u8; 8] = b"WCCMPC02";

/// The largest entry read: compiled code is a few times its component (at most 128 MiB).
const MAX_ENTRY_BYTES: u64 = 1 << 30;

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
    seal: Seal,
}

impl CompileCache {
    /// The cache in `dir`, its key opened (made on first use).
    pub fn new(dir: PathBuf, engine: &Engine) -> Result<Self, SealError> {
        let seal = Seal::open(&dir)?;
        Ok(CompileCache {
            dir,
            engine_key: engine_key(engine),
            seal,
        })
    }

    /// The cache file of the component whose sha256 is `digest`.
    pub fn path_for(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// The component from the cache, if a sound entry exists. Blocking: call it off the
    /// async threads.
    pub fn cached(&self, engine: &Engine, digest: &str) -> Option<Component> {
        self.load(engine, &self.path_for(digest), digest)
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
        if let Some(component) = self.load(engine, &path, digest) {
            return Ok((component, Origin::Cache));
        }
        // Held until the entry is stored; released when dropped (the file stays, empty).
        let _compiling = self.lock(&path);
        if let Some(component) = self.load(engine, &path, digest) {
            return Ok((component, Origin::Cache));
        }
        let component = Component::new(engine, wasm)?;
        if let Err(err) = self.store(&component, &path, digest) {
            tracing::warn!(path = %path.display(), "cannot write compile cache: {err:#}");
        }
        Ok((component, Origin::Compiled))
    }

    /// An exclusive lock on the entry at `path`, waiting for another process's compile; none
    /// if the lock file cannot be made (then this process compiles regardless).
    fn lock(&self, path: &Path) -> Option<std::fs::File> {
        let lock_path = path.with_extension("lock");
        // Neither truncated nor followed through a link: a link planted there could
        // otherwise empty any file this user may write.
        let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
        let locked = std::fs::create_dir_all(&self.dir)
            .and_then(|()| {
                std::fs::File::options()
                    .create(true)
                    .write(true)
                    .truncate(false)
                    .custom_flags(nofollow)
                    .open(&lock_path)
            })
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
    fn load(&self, engine: &Engine, path: &Path, digest: &str) -> Option<Component> {
        let bytes = match read_bounded(path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
            Err(err) => {
                tracing::warn!(path = %path.display(), "cannot read compile cache: {err}");
                let _ = std::fs::remove_file(path);
                return None;
            }
        };
        let Some(artifact) = self.verified_artifact(&bytes, digest) else {
            tracing::warn!(path = %path.display(), "compile cache entry fails its seal (corrupted, or not this component's code); rebuilding it");
            let _ = std::fs::remove_file(path);
            return None;
        };
        // SAFETY: the artifact carries a tag, under a key only this user can read, over this
        // component's digest, this engine configuration's key and the artifact: it is what
        // `Component::serialize` of this engine made of this component in this user's
        // process.
        match unsafe { Component::deserialize(engine, artifact) } {
            Ok(component) => Some(component),
            Err(err) => {
                tracing::warn!(path = %path.display(), "compile cache entry unusable ({err}); rebuilding it");
                let _ = std::fs::remove_file(path);
                None
            }
        }
    }

    fn store(&self, component: &Component, path: &Path, digest: &str) -> wasmtime::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let artifact = component.serialize()?;
        let mut file = tempfile::NamedTempFile::new_in(&self.dir)?;
        file.write_all(MAGIC)?;
        file.write_all(&self.seal.tag(&self.sealed_parts(digest, &artifact)))?;
        file.write_all(&artifact)?;
        file.as_file().sync_all()?;
        file.persist(path)?;
        Ok(())
    }
}

impl CompileCache {
    /// What the tag of the compiled code of the component `digest` covers.
    fn sealed_parts<'a>(&'a self, digest: &'a str, artifact: &'a [u8]) -> [&'a [u8]; 4] {
        [
            b"compiled code",
            digest.as_bytes(),
            self.engine_key.as_bytes(),
            artifact,
        ]
    }

    /// The artifact inside a cache file, if the file is whole and its tag is that of the
    /// component `digest`'s code for this engine.
    fn verified_artifact<'a>(&self, bytes: &'a [u8], digest: &str) -> Option<&'a [u8]> {
        let rest = bytes.strip_prefix(MAGIC.as_slice())?;
        if rest.len() < TAG_BYTES {
            return None;
        }
        let (tag, artifact) = rest.split_at(TAG_BYTES);
        self.seal
            .verify(&self.sealed_parts(digest, artifact), tag)
            .then_some(artifact)
    }
}

/// A cache file's bytes, if it is a regular file no larger than any entry is.
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    crate::seal::read_regular(path, MAX_ENTRY_BYTES)
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
    fn only_whole_files_sealed_for_their_component_and_engine_verify() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = CompileCache::new(dir.path().to_path_buf(), &engine).unwrap();
        let artifact = b"machine code".to_vec();
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&cache.seal.tag(&cache.sealed_parts("sha256:a", &artifact)));
        file.extend_from_slice(&artifact);
        assert_eq!(
            cache.verified_artifact(&file, "sha256:a"),
            Some(artifact.as_slice())
        );
        assert_eq!(
            cache.verified_artifact(&file, "sha256:b"),
            None,
            "another component's code under this one's name"
        );

        let truncated = &file[..file.len() - 1];
        assert_eq!(cache.verified_artifact(truncated, "sha256:a"), None);
        let mut flipped = file.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(cache.verified_artifact(&flipped, "sha256:a"), None);
        assert_eq!(cache.verified_artifact(b"WCCMPC02short", "sha256:a"), None);
        let mut unkeyed = b"WCCMPC01".to_vec();
        unkeyed.extend_from_slice(&Sha256::digest(&artifact));
        unkeyed.extend_from_slice(&artifact);
        assert_eq!(
            cache.verified_artifact(&unkeyed, "sha256:a"),
            None,
            "a checksum anyone can compute is no seal"
        );
        let other = tempfile::tempdir().unwrap();
        let elsewhere = CompileCache::new(other.path().to_path_buf(), &engine).unwrap();
        assert_eq!(
            elsewhere.verified_artifact(&file, "sha256:a"),
            None,
            "sealed under another key"
        );
    }
}
