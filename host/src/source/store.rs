//! The content-addressed artifact cache under `--cache-dir`:
//!
//! ```text
//! DIR/manifests/sha256/<hex>   manifests, one per provider version (the version's last use
//!                              is its file's modification time); sha512/ for such digests
//! DIR/blobs/sha256/<hex>       the components (layers) those manifests name
//! DIR/compiled/                precompiled code, `<component hex>-<engine>.cwasm` (the
//!                              sandbox's compile cache)
//! DIR/signatures/sha256/<hex>  fingerprints of the keys whose signatures of that manifest
//!                              were verified, one a line (at most [`MAX_VERIFIED_KEYS`]),
//!                              then the verdict's seal
//! DIR/signatures/key          the key that seals verdicts ([`crate::seal`])
//! DIR/compiled/key             the key that seals compiled code
//! DIR/tmp/                     files being written
//! ```
//!
//! Every directory is this user's alone (0700) and a directory that is a link, another
//! user's or writable by others is refused at open, as the keys' directories are; the cache
//! itself is this user's or root's (a volume's mount point).
//!
//! Every file is written to `tmp/` and renamed into place, so a reader sees a whole file or
//! none; every read is checked against the digest in its name and a mismatch is removed and
//! treated as missing. Two processes may share the directory (a leader and a standby on one
//! node): the worst a race does is make one of them download again.
//!
//! The cache is bounded (`--cache-max-size`): after a write, and at every fetch of a
//! `file://` provider, versions not in use are evicted, least recently used first, with their
//! components, compiled code and signature verdicts (the compiled code of a `file://`
//! provider is a version of its own).
//!
//! A signature verdict is not content-addressed: it is the manager's own record that it
//! checked signatures of that digest with those keys, so it is sealed under the directory's
//! key ([`crate::seal`]) over the digest and the keys, and one that fails its seal counts as
//! no verdict (the signatures are checked again). No file is read past the largest it can be
//! (a manifest [`MAX_MANIFEST_BYTES`], a component [`MAX_COMPONENT_BYTES`]).

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::layout::{MAX_COMPONENT_BYTES, MAX_MANIFEST_BYTES, check_manifest, digest_like};
use crate::seal::Seal;

/// Most key fingerprints recorded as verified for one manifest.
pub const MAX_VERIFIED_KEYS: usize = 16;

/// The largest verdict file read: [`MAX_VERIFIED_KEYS`] fingerprints and a seal.
const MAX_VERDICT_BYTES: u64 = 4096;

/// A cache directory and its size bound.
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    dir: PathBuf,
    max_bytes: u64,
    seal: Seal,
}

/// One evictable unit: a manifest with its layer and compiled code, or compiled code alone
/// (of a `file://` provider).
struct Version {
    last_used: SystemTime,
    manifest: Option<PathBuf>,
    layer_digest: String,
}

impl ArtifactStore {
    /// The cache at `dir` (created if missing), holding at most about `max_bytes`. `dir` is
    /// this user's or root's (a volume's mount point); every directory in it is made this
    /// user's alone (0700) and refused if it is a link, another user's, or writable by
    /// others: a directory someone else prepared would have the cache read, write or evict
    /// their files.
    pub fn open(dir: &Path, max_bytes: u64) -> std::io::Result<ArtifactStore> {
        // The keys first: their directories are made this user's alone (0700), and a bad
        // key or directory is refused at start.
        let seal = Seal::open(&dir.join("signatures")).map_err(std::io::Error::other)?;
        Seal::open(&dir.join("compiled")).map_err(std::io::Error::other)?;
        let owner = std::fs::metadata(dir)?.uid();
        let user = rustix::process::geteuid().as_raw();
        if owner != user && owner != 0 {
            return Err(std::io::Error::other(format!(
                "{}: owned by uid {owner}, not this user (uid {user}) or root",
                dir.display()
            )));
        }
        for sub in [
            "manifests",
            "manifests/sha256",
            "manifests/sha512",
            "blobs",
            "blobs/sha256",
            "blobs/sha512",
            "signatures/sha256",
            "signatures/sha512",
            "tmp",
        ] {
            Seal::private_directory(&dir.join(sub))?;
        }
        Ok(ArtifactStore {
            dir: dir.to_path_buf(),
            max_bytes,
            seal,
        })
    }

    /// The directory of precompiled code (handed to the sandbox).
    pub fn compiled_dir(&self) -> PathBuf {
        self.dir.join("compiled")
    }

    /// The manifest with `digest`, if cached and sound; marks the version as just used.
    pub fn manifest(&self, digest: &str) -> Option<Vec<u8>> {
        let path = self.path("manifests", digest)?;
        let bytes = self.read_checked(&path, digest, MAX_MANIFEST_BYTES)?;
        let _ = std::fs::File::options()
            .append(true)
            .open(&path)
            .and_then(|file| file.set_modified(SystemTime::now()));
        Some(bytes)
    }

    /// The blob with `digest`, if cached and sound.
    pub fn blob(&self, digest: &str) -> Option<Vec<u8>> {
        let path = self.path("blobs", digest)?;
        self.read_checked(&path, digest, MAX_COMPONENT_BYTES)
    }

    /// Store a manifest; `bytes` must hash to `digest`.
    pub fn put_manifest(&self, digest: &str, bytes: &[u8]) -> std::io::Result<()> {
        self.put("manifests", digest, bytes)
    }

    /// Store a blob; `bytes` must hash to `digest`.
    pub fn put_blob(&self, digest: &str, bytes: &[u8]) -> std::io::Result<()> {
        self.put("blobs", digest, bytes)
    }

    /// The fingerprints of the keys whose signatures of the manifest `digest` were verified;
    /// none if the record fails its seal.
    pub fn verified_keys(&self, digest: &str) -> Vec<String> {
        let Some(path) = self.path("signatures", digest) else {
            return Vec::new();
        };
        let Some(bytes) = read_at_most(&path, MAX_VERDICT_BYTES) else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(&bytes);
        let mut lines: Vec<&str> = text.lines().collect();
        let sealed = lines
            .pop()
            .and_then(|last| last.strip_prefix("seal:"))
            .and_then(|tag| hex::decode(tag).ok())
            .is_some_and(|tag| {
                let keys = lines.join("\n");
                self.seal.verify(&verdict_parts(digest, &keys), &tag)
            });
        if !sealed {
            tracing::warn!(path = %path.display(), "signature verdict fails its seal; the signatures will be checked again");
            return Vec::new();
        }
        lines
            .into_iter()
            .filter(|line| line.starts_with("sha256:"))
            .take(MAX_VERIFIED_KEYS)
            .map(str::to_string)
            .collect()
    }

    /// Record that signatures of `digest` by the keys `fingerprints` were verified (added
    /// to those recorded, [`MAX_VERIFIED_KEYS`] at most).
    pub fn put_verified_keys(&self, digest: &str, fingerprints: &[String]) -> std::io::Result<()> {
        let Some(path) = self.path("signatures", digest) else {
            return Err(std::io::Error::other(format!(
                "{digest} is not a sha256 digest"
            )));
        };
        let mut keys = self.verified_keys(digest);
        for fingerprint in fingerprints {
            if !keys.contains(fingerprint) && keys.len() < MAX_VERIFIED_KEYS {
                keys.push(fingerprint.clone());
            }
        }
        let mut file = tempfile::NamedTempFile::new_in(self.dir.join("tmp"))?;
        for key in &keys {
            writeln!(file, "{key}")?;
        }
        let tag = self.seal.tag(&verdict_parts(digest, &keys.join("\n")));
        writeln!(file, "seal:{}", hex::encode(tag))?;
        file.as_file().sync_all()?;
        file.persist(&path)?;
        Ok(())
    }

    fn path(&self, kind: &str, digest: &str) -> Option<PathBuf> {
        let (algorithm, hex) = digest.split_once(':')?;
        let length = match algorithm {
            "sha256" => 64,
            "sha512" => 128,
            _ => return None,
        };
        let valid = hex.len() == length && hex.bytes().all(|b| b.is_ascii_hexdigit());
        valid.then(|| self.dir.join(kind).join(algorithm).join(hex))
    }

    fn read_checked(&self, path: &Path, digest: &str, max: u64) -> Option<Vec<u8>> {
        let bytes = read_at_most(path, max)?;
        if digest_like(digest, &bytes) == digest {
            return Some(bytes);
        }
        tracing::warn!(path = %path.display(), "cached artifact does not match its digest; removing it");
        let _ = std::fs::remove_file(path);
        None
    }

    fn put(&self, kind: &str, digest: &str, bytes: &[u8]) -> std::io::Result<()> {
        let Some(path) = self.path(kind, digest) else {
            return Err(std::io::Error::other(format!(
                "{digest} is not a sha256 digest"
            )));
        };
        if digest_like(digest, bytes) != digest {
            return Err(std::io::Error::other(format!(
                "the bytes do not match {digest}"
            )));
        }
        let mut file = tempfile::NamedTempFile::new_in(self.dir.join("tmp"))?;
        file.write_all(bytes)?;
        file.as_file().sync_all()?;
        file.persist(&path)?;
        Ok(())
    }

    /// Evict versions, least recently used first, until the cache holds at most its bound;
    /// the versions whose manifest or component digests are in `in_use` stay. Returns how
    /// many went.
    pub fn evict(&self, in_use: &[&str]) -> usize {
        let mut total = dir_size(&self.dir);
        if total <= self.max_bytes {
            return 0;
        }
        let mut versions = self.versions();
        versions.sort_by_key(|version| version.last_used);
        let mut evicted = 0;
        for version in versions {
            if total <= self.max_bytes {
                break;
            }
            let protected = in_use.iter().any(|digest| {
                *digest == version.layer_digest
                    || version.manifest.as_ref().is_some_and(|manifest| {
                        self.path("manifests", digest).as_ref() == Some(manifest)
                    })
            });
            if protected {
                continue;
            }
            let verdict = version.manifest.as_ref().and_then(|manifest| {
                let hex = manifest.file_name()?;
                let algorithm = manifest.parent()?.file_name()?;
                Some(self.dir.join("signatures").join(algorithm).join(hex))
            });
            let mut files: Vec<PathBuf> = version.manifest.into_iter().collect();
            files.extend(verdict.filter(|path| path.exists()));
            files.extend(self.path("blobs", &version.layer_digest));
            files.extend(self.compiled_files(&version.layer_digest));
            for file in files {
                let size = file.metadata().map_or(0, |m| m.len());
                if std::fs::remove_file(&file).is_ok() {
                    total = total.saturating_sub(size);
                }
            }
            evicted += 1;
        }
        evicted
    }

    /// Every cached version, with the compiled code of `file://` providers as versions of
    /// their own.
    fn versions(&self) -> Vec<Version> {
        let mut versions = Vec::new();
        let mut layers_of_manifests = Vec::new();
        let manifests = ["sha256", "sha512"].into_iter().flat_map(|algorithm| {
            let dir = self.dir.join("manifests").join(algorithm);
            files_in(&dir)
                .into_iter()
                .map(move |(path, modified)| (algorithm, path, modified))
        });
        for (algorithm, path, modified) in manifests {
            let hex = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let digest = format!("{algorithm}:{}", hex.unwrap_or_default());
            let layer_digest = std::fs::read(&path)
                .ok()
                .and_then(|bytes| check_manifest(&bytes, &digest).ok())
                .map(|(_, layer)| layer.digest)
                .unwrap_or_default();
            layers_of_manifests.push(layer_digest.clone());
            versions.push(Version {
                last_used: modified,
                manifest: Some(path),
                layer_digest,
            });
        }
        let compiled = files_in(&self.compiled_dir())
            .into_iter()
            .filter(|(path, _)| path.extension().is_some_and(|e| e == "cwasm"));
        for (path, modified) in compiled {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let layer_digest = name
                .and_then(|n| n.split('-').next().map(|hex| format!("sha256:{hex}")))
                .unwrap_or_default();
            if !layers_of_manifests.contains(&layer_digest) {
                versions.push(Version {
                    last_used: modified,
                    manifest: None,
                    layer_digest,
                });
            }
        }
        versions
    }

    fn compiled_files(&self, layer_digest: &str) -> Vec<PathBuf> {
        let Some(hex) = layer_digest
            .strip_prefix("sha256:")
            .filter(|h| !h.is_empty())
        else {
            return Vec::new();
        };
        let prefix = format!("{hex}-");
        files_in(&self.compiled_dir())
            .into_iter()
            .map(|(path, _)| path)
            .filter(|path| {
                path.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
            })
            .collect()
    }
}

/// What a verdict's seal covers: the manifest's digest and the keys, one a line.
fn verdict_parts<'a>(digest: &'a str, keys: &'a str) -> [&'a [u8]; 3] {
    [b"signature verdict", digest.as_bytes(), keys.as_bytes()]
}

/// The bytes of `path`, unless it is missing, unreadable, not a regular file or larger
/// than `max` (then it is removed: nothing the manager writes there is so).
fn read_at_most(path: &Path, max: u64) -> Option<Vec<u8>> {
    match crate::seal::read_regular(path, max) {
        Ok(bytes) => Some(bytes),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cached file is none the manager writes; removing it");
            let _ = std::fs::remove_file(path);
            None
        }
    }
}

fn files_in(dir: &Path) -> Vec<(PathBuf, SystemTime)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let metadata = entry.metadata().ok()?;
            metadata.is_file().then(|| {
                (
                    entry.path(),
                    metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                )
            })
        })
        .collect()
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(metadata) if metadata.is_dir() => dir_size(&entry.path()),
            Ok(metadata) => metadata.len(),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::source::layout::{ComponentWorld, pack, sha256_digest};

    /// Store one packed version of `size` bytes; returns its manifest digest.
    fn store_version(store: &ArtifactStore, seed: u8, size: usize) -> String {
        let packed = pack(
            vec![seed; size],
            &ComponentWorld::default(),
            "2026-11-24T00:00:00Z",
            BTreeMap::new(),
        );
        store.put_blob(&packed.layer.1, &packed.layer.0).unwrap();
        store
            .put_manifest(&packed.manifest.1, &packed.manifest.0)
            .unwrap();
        // Compiled code beside it, named as the sandbox's compile cache names it.
        let hex = packed.layer.1.trim_start_matches("sha256:");
        let compiled = store.compiled_dir().join(format!("{hex}-0123.cwasm"));
        std::fs::write(compiled, vec![0; size]).unwrap();
        packed.manifest.1
    }

    /// A directory of the cache someone else prepared is refused, naming it: a link to
    /// elsewhere (whose files eviction would delete) or one others may write.
    #[test]
    fn a_cache_directory_that_is_a_link_or_writable_by_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;

        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join("precious"), b"not the cache's").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("manifests/sha256")).unwrap();
        let error = ArtifactStore::open(dir.path(), 1).unwrap_err().to_string();
        assert!(
            error.contains("manifests/sha256") && error.contains("a symbolic link"),
            "{error}"
        );
        assert!(elsewhere.path().join("precious").exists());

        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tmp")).unwrap();
        std::fs::set_permissions(dir.path().join("tmp"), PermissionsExt::from_mode(0o777)).unwrap();
        let error = ArtifactStore::open(dir.path(), 1).unwrap_err().to_string();
        assert!(
            error.contains("tmp") && error.contains("others may write it"),
            "{error}"
        );

        // Made afresh, every directory is this user's alone.
        let dir = tempfile::tempdir().unwrap();
        ArtifactStore::open(&dir.path().join("cache"), 1).unwrap();
        for sub in ["manifests/sha256", "blobs", "tmp", "compiled"] {
            let mode = std::fs::metadata(dir.path().join("cache").join(sub))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{sub}");
        }
    }

    #[test]
    fn reads_are_checked_against_the_digest_and_a_bad_file_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(dir.path(), 1 << 30).unwrap();
        let digest = sha256_digest(b"component");
        store.put_blob(&digest, b"component").unwrap();
        assert_eq!(store.blob(&digest).as_deref(), Some(&b"component"[..]));
        assert!(store.put_blob(&digest, b"other").is_err());
        assert!(store.put_blob("sha256:../../etc", b"x").is_err());
        let sha512 = digest_like("sha512:", b"component");
        store.put_blob(&sha512, b"component").unwrap();
        assert_eq!(store.blob(&sha512).as_deref(), Some(&b"component"[..]));

        let path = store.path("blobs", &digest).unwrap();
        std::fs::write(&path, b"tampered").unwrap();
        assert_eq!(store.blob(&digest), None);
        assert!(!path.exists(), "a file that fails its digest is removed");
        assert!(
            std::fs::read_dir(dir.path().join("tmp"))
                .unwrap()
                .next()
                .is_none()
        );
    }

    #[test]
    fn a_signature_verdict_counts_only_under_its_seal() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(dir.path(), 1 << 30).unwrap();
        let digest = sha256_digest(b"manifest");
        let other = sha256_digest(b"another manifest");
        let key = sha256_digest(b"a key");
        store
            .put_verified_keys(&digest, std::slice::from_ref(&key))
            .unwrap();
        assert_eq!(store.verified_keys(&digest), vec![key.clone()]);

        // A verdict written by hand, or moved from another digest, is no verdict.
        let path = store.path("signatures", &digest).unwrap();
        let sealed = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{key}\n")).unwrap();
        assert!(store.verified_keys(&digest).is_empty(), "unsealed");
        let forged = sha256_digest(b"the attacker's key");
        std::fs::write(&path, sealed.replace(&key, &forged)).unwrap();
        assert!(store.verified_keys(&digest).is_empty(), "another key");
        let moved = store.path("signatures", &other).unwrap();
        std::fs::write(&moved, &sealed).unwrap();
        assert!(store.verified_keys(&other).is_empty(), "another digest");
        std::fs::write(&path, vec![b'a'; 1 << 20]).unwrap();
        assert!(store.verified_keys(&digest).is_empty(), "too large");
        assert!(!path.exists(), "and removed");
    }

    #[test]
    fn eviction_takes_the_least_recently_used_versions_not_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(dir.path(), 220_000).unwrap();
        let pause = || std::thread::sleep(Duration::from_millis(20));
        let old = store_version(&store, 1, 50_000);
        pause();
        let active = store_version(&store, 2, 50_000);
        pause();
        assert_eq!(store.evict(&[&active]), 0, "under the bound nothing goes");
        let recent = store_version(&store, 3, 50_000);
        let fingerprint = sha256_digest(b"a key");
        store
            .put_verified_keys(&recent, std::slice::from_ref(&fingerprint))
            .unwrap();
        store
            .put_verified_keys(&recent, std::slice::from_ref(&fingerprint))
            .unwrap();
        assert_eq!(
            store.verified_keys(&recent),
            vec![fingerprint],
            "recorded once"
        );
        pause();
        let newest = store_version(&store, 4, 50_000);
        pause();
        // Reading a version marks it used; the one in use stays whatever its age.
        assert!(store.manifest(&old).is_some());
        assert_eq!(store.evict(&[&active]), 2);
        assert!(store.manifest(&active).is_some(), "in use");
        assert!(store.manifest(&recent).is_none(), "least recently used");
        assert!(
            store.verified_keys(&recent).is_empty(),
            "its signature verdict goes with it"
        );
        assert!(
            store.manifest(&newest).is_none(),
            "used before `old` was read"
        );
        assert!(store.manifest(&old).is_some());
        assert!(dir_size(dir.path()) <= 220_000);
        let compiled: Vec<_> = files_in(&store.compiled_dir())
            .into_iter()
            .filter(|(path, _)| path.extension().is_some_and(|e| e == "cwasm"))
            .collect();
        assert_eq!(compiled.len(), 2, "compiled code goes with its version");
        assert!(
            store.compiled_dir().join("key").exists(),
            "the key is no version"
        );

        // Compiled code of `file://` providers is evicted too, but for the one in use.
        let small = ArtifactStore::open(dir.path(), 0).unwrap();
        let compiled = |hex: &str| small.compiled_dir().join(format!("{hex}-0123.cwasm"));
        std::fs::write(compiled("aa"), vec![0; 1000]).unwrap();
        std::fs::write(compiled("bb"), vec![0; 1000]).unwrap();
        small.evict(&["sha256:bb"]);
        assert!(!compiled("aa").exists());
        assert!(compiled("bb").exists(), "in use");
    }
}
