//! Sealed cache entries: what the manager reads back from its cache directories and acts on
//! without checking it again (precompiled code it runs as native code, signature verdicts
//! it trusts) carries an HMAC-SHA256 tag under a key only this user can read. The key is the
//! directory's `key` file: 32 random bytes, made on first use, mode 0600, owned by this
//! user and never a link, or the directory is refused.
//!
//! The directory holding the key must be this user's and writable by no one else (the
//! manager makes it so), so no one can rename a file of their choosing into `key`; the key
//! is opened through a handle on that directory, so the directory cannot be swapped between
//! the check and the read; [`Seal::private_directory`] makes and checks the cache's other
//! directories the same way. Whoever can still write an entry but not read the key (a
//! process sharing the volume) can make an entry fail its tag, and so be removed and
//! rebuilt, but never pass one entry off as another: the tag covers what the entry is (a
//! component's digest and the engine, a manifest's digest) as well as its bytes.
//!
//! [`read_regular`] reads what the caches hold back: a regular file, never through a link,
//! a FIFO or a device, and never past the size asked for.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

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
    /// The key of `dir` (made if missing, `dir` too, mode 0700), checked: `dir` a directory
    /// of this user that no one else may write, not a link; the key a regular file, not a
    /// link, this user's, mode 0600, 32 bytes.
    pub fn open(dir: &Path) -> Result<Seal, SealError> {
        let failed = |path: &Path, problem: String| SealError {
            path: path.to_path_buf(),
            problem,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| failed(dir, format!("cannot create it: {e}")))?;
        let handle = directory(dir).map_err(|problem| failed(dir, problem))?;
        let path = dir.join("key");
        let key = match read_key(&handle) {
            Err(Unusable::Missing) => {
                make_key(dir, &path).map_err(|e| failed(&path, format!("cannot make it: {e}")))?;
                read_key(&handle)
            }
            read => read,
        };
        let key = key.map_err(|unusable| failed(&path, unusable.to_string()))?;
        Ok(Seal {
            key: Arc::new(hmac::Key::new(hmac::HMAC_SHA256, &key)),
        })
    }

    /// `dir` made if missing (mode 0700, its missing parents too) and checked as a key's
    /// directory is: a directory of this user that no one else may write, not a link. For
    /// the directories beside the keys, which a link or another user's hand would turn into
    /// someone else's files to read or delete.
    pub fn private_directory(dir: &Path) -> std::io::Result<()> {
        let failed = |problem: String| {
            std::io::Error::other(format!(
                "{}: {problem}; the cache's directories must be this user's alone",
                dir.display()
            ))
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| failed(format!("cannot create it: {e}")))?;
        directory(dir).map(drop).map_err(failed)
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

/// A handle on `dir`, if it is a directory (not a link) of this user that no one else may
/// write; why not otherwise.
fn directory(dir: &Path) -> Result<rustix::fd::OwnedFd, String> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let handle = rustix::fs::open(dir, flags, Mode::empty()).map_err(|errno| match errno {
        rustix::io::Errno::LOOP => "a symbolic link".to_string(),
        // A link opened with O_DIRECTORY | O_NOFOLLOW fails as not a directory.
        rustix::io::Errno::NOTDIR
            if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) =>
        {
            "a symbolic link".to_string()
        }
        rustix::io::Errno::NOTDIR => "not a directory".to_string(),
        errno => format!("cannot open it: {}", std::io::Error::from(errno)),
    })?;
    let stat = rustix::fs::fstat(&handle).map_err(|e| format!("cannot read it: {e}"))?;
    let user = rustix::process::geteuid().as_raw();
    if stat.st_uid != user {
        return Err(format!(
            "owned by uid {}, not this user (uid {user}); it must be this user's",
            stat.st_uid
        ));
    }
    let mode = stat.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "others may write it (mode {mode:04o}), and so put a key of their own in it; chmod go-w it"
        ));
    }
    Ok(handle)
}

fn read_key(dir: &rustix::fd::OwnedFd) -> Result<[u8; KEY_BYTES], Unusable> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let mut file = match rustix::fs::openat(dir, "key", flags, Mode::empty()) {
        Ok(handle) => std::fs::File::from(handle),
        Err(rustix::io::Errno::NOENT) => return Err(Unusable::Missing),
        Err(rustix::io::Errno::LOOP) => return Err(Unusable::Link),
        Err(errno) => return Err(Unusable::Io(errno.into())),
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

/// The bytes of the regular file at `path`, at most `max` of them: opened without
/// following a link or waiting on a FIFO, its kind and size read from the open file, and
/// never read past `max`. A file of another kind or larger is an `InvalidData` error.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let flags = (OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32;
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(flags)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    if metadata.len() > max {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("{} bytes, more than the {max} expected", metadata.len()),
        ));
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("more than the {max} bytes expected"),
        ));
    }
    Ok(bytes)
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

        // A directory others may write: anyone could rename a file of theirs into `key`.
        let shared = tempfile::tempdir().unwrap();
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = Seal::open(shared.path()).unwrap_err().to_string();
        assert!(error.contains("others may write it (mode 0777)"), "{error}");
        let made = shared.path().join("made/by/the/manager");
        Seal::open(&made).unwrap();
        let mode = std::fs::metadata(&made).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "made for this user alone");
    }

    #[test]
    fn a_cached_file_is_read_only_if_it_is_a_regular_file_within_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("entry");
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(read_regular(&file, 10).unwrap(), b"0123456789");
        assert!(read_regular(&file, 9).is_err(), "larger than asked");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(read_regular(&link, 10).is_err(), "never through a link");
        assert!(
            read_regular(Path::new("/dev/zero"), 10).is_err(),
            "never a device"
        );
    }
}
