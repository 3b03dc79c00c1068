//! Sealed cache entries: what the manager reads back from its cache directories and acts on
//! without checking it again (precompiled code it runs as native code, signature verdicts
//! it trusts) carries an HMAC-SHA256 tag under a key only this user can read. The key is the
//! directory's `key` file: 32 random bytes, made on first use, mode 0600, owned by this
//! user and never a link, or the directory is refused.
//!
//! Whoever can write the directory but not read the key (another user, a process sharing the
//! volume) can make an entry fail its tag, and so be removed and rebuilt, but never pass one
//! entry off as another: the tag covers what the entry is (a component's digest and the
//! engine, a manifest's digest) as well as its bytes.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// The bytes of a key.
const KEY_BYTES: usize = 32;
/// The bytes of a tag.
pub const TAG_BYTES: usize = 32;

/// The key of one cache directory.
#[derive(Clone)]
pub struct Seal {
    key: Arc<hmac::Key>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seal")
    }
}

/// Why a cache directory's key cannot be used.
#[derive(Debug, thiserror::Error)]
#[error(
    "{}: {problem}; the manager runs native code from its cache, so the key that seals it must be this user's alone",
    path.display()
)]
pub struct SealError {
    /// The key file (or the directory).
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: String,
}

impl Seal {
    /// The key of `dir` (made if missing), checked: a regular file, not a link, this user's,
    /// mode 0600, 32 bytes.
    pub fn open(dir: &Path) -> Result<Seal, SealError> {
        let failed = |path: &Path, problem: String| SealError {
            path: path.to_path_buf(),
            problem,
        };
        std::fs::create_dir_all(dir).map_err(|e| failed(dir, format!("cannot create it: {e}")))?;
        let path = dir.join("key");
        let key = match read_key(&path) {
            Err(Unusable::Missing) => {
                make_key(dir, &path).map_err(|e| failed(&path, format!("cannot make it: {e}")))?;
                read_key(&path)
            }
            read => read,
        };
        let key = key.map_err(|unusable| failed(&path, unusable.to_string()))?;
        Ok(Seal {
            key: Arc::new(hmac::Key::new(hmac::HMAC_SHA256, &key)),
        })
    }

    /// The tag of an entry made of `parts` (each length-prefixed, so no two lists of parts
    /// share a tag).
    pub fn tag(&self, parts: &[&[u8]]) -> [u8; TAG_BYTES] {
        let mut context = hmac::Context::with_key(&self.key);
        for part in parts {
            context.update(&(part.len() as u64).to_le_bytes());
            context.update(part);
        }
        let mut tag = [0; TAG_BYTES];
        tag.copy_from_slice(context.sign().as_ref());
        tag
    }

    /// Whether `tag` is the tag of `parts` (compared in constant time).
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        let mut message = Vec::new();
        for part in parts {
            message.extend_from_slice(&(part.len() as u64).to_le_bytes());
            message.extend_from_slice(part);
        }
        hmac::verify(&self.key, &message, tag).is_ok()
    }
}

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error("missing")]
    Missing,
    #[error("a symbolic link")]
    Link,
    #[error("not a regular file")]
    NotAFile,
    #[error("owned by uid {owner}, not this user (uid {user})")]
    NotOurs { owner: u32, user: u32 },
    #[error("others may read or write it (mode {0:04o}); it must be 0600")]
    Open(u32),
    #[error("{0} bytes, not {KEY_BYTES}")]
    Length(u64),
    #[error("cannot read it: {0}")]
    Io(std::io::Error),
}

fn read_key(path: &Path) -> Result<[u8; KEY_BYTES], Unusable> {
    let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    let mut file = match std::fs::File::options()
        .read(true)
        .custom_flags(nofollow)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(Unusable::Missing),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(Unusable::Link);
        }
        Err(e) => return Err(Unusable::Io(e)),
    };
    let metadata = file.metadata().map_err(Unusable::Io)?;
    let user = rustix::process::geteuid().as_raw();
    if !metadata.is_file() {
        return Err(Unusable::NotAFile);
    }
    if metadata.uid() != user {
        return Err(Unusable::NotOurs {
            owner: metadata.uid(),
            user,
        });
    }
    if metadata.mode() & 0o077 != 0 {
        return Err(Unusable::Open(metadata.mode() & 0o7777));
    }
    if metadata.len() != KEY_BYTES as u64 {
        return Err(Unusable::Length(metadata.len()));
    }
    let mut key = [0; KEY_BYTES];
    file.read_exact(&mut key).map_err(Unusable::Io)?;
    Ok(key)
}

/// Write a new random key to `path`, unless another process just did.
fn make_key(dir: &Path, path: &Path) -> std::io::Result<()> {
    let mut key = [0; KEY_BYTES];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| std::io::Error::other("no randomness"))?;
    // A temporary file is made 0600; linked into place only if no key is there yet.
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(&key)?;
    file.as_file().sync_all()?;
    match file.persist_noclobber(path) {
        Ok(_) => Ok(()),
        Err(e) if e.error.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e.error),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_key_is_made_once_and_tags_verify_only_their_own_parts() {
        let dir = tempfile::tempdir().unwrap();
        let seal = Seal::open(dir.path()).unwrap();
        let key = dir.path().join("key");
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Seal::open(dir.path()).unwrap();
        let tag = seal.tag(&[b"compiled", b"sha256:1", b"code"]);
        assert!(
            again.verify(&[b"compiled", b"sha256:1", b"code"], &tag),
            "the same key"
        );
        assert!(!again.verify(&[b"compiled", b"sha256:2", b"code"], &tag));
        assert!(
            !again.verify(&[b"compiled", b"sha256:1c", b"ode"], &tag),
            "parts are delimited"
        );
        let other = tempfile::tempdir().unwrap();
        assert!(
            !Seal::open(other.path())
                .unwrap()
                .verify(&[b"compiled", b"sha256:1", b"code"], &tag)
        );
    }

    #[test]
    fn a_key_others_may_read_a_link_or_a_short_key_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        Seal::open(dir.path()).unwrap();
        let key = dir.path().join("key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = Seal::open(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("key: others may read or write it (mode 0644)"),
            "{error}"
        );

        let linked = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(&key, linked.path().join("key")).unwrap();
        let error = Seal::open(linked.path()).unwrap_err().to_string();
        assert!(error.contains("a symbolic link"), "{error}");

        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&key, b"short").unwrap();
        let error = Seal::open(dir.path()).unwrap_err().to_string();
        assert!(error.contains("5 bytes, not 32"), "{error}");
    }
}
