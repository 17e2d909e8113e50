//! Opening an encrypted repository (its config is sealed: the password opens a key file,
//! whose master key opens the config), creating one, and its keys (`key list|add|remove|
//! passwd`).

use super::{PasswordPrompt, Repository};
use crate::backend::local::LocalBackend;
use crate::backend::{Backend, FileKind};
use crate::crypto::keys::{self, KeyOrigin};
use crate::crypto::{KdfParams, KeyInfo, MasterKey, SealedBackend};
use crate::error::{Error, Result};
use crate::format::config::{RepoConfig, CONFIG_MAGIC};
use crate::format::sealed;
use dedelta_core::ChunkHasher;
use std::path::Path;
use std::sync::Arc;

/// What opened an encrypted repository.
#[derive(Debug)]
pub(crate) struct Unlocked {
    /// The seal around the raw backend (its keys and trailer cache serve every handle).
    pub seal: Arc<SealedBackend>,
    /// The master key.
    pub key: Arc<MasterKey>,
    /// The key file it came from.
    pub key_id: String,
}

impl std::fmt::Debug for SealedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealedBackend({})", self.location())
    }
}

/// Reads the config of the repository on `raw`: a plain one as it is, a sealed one after
/// unlocking a key file with the password `password` gives.
///
/// A plain config in a repository that has key files is refused: someone who can write to
/// the storage could otherwise replace an encrypted repository's config by a plain one and
/// have the next backup written in clear.
pub(crate) fn read_config(
    raw: Arc<dyn Backend>,
    password: PasswordPrompt<'_>,
) -> Result<(RepoConfig, Option<Unlocked>)> {
    let (bytes, key_names, ()) = read_config_and_key_names(raw.as_ref(), || ());
    let bytes = bytes?;
    if !is_sealed(&bytes) {
        return plain_config(&bytes, key_names).map(|c| (c, None));
    }
    let pw = password()?;
    unlock_config(raw, key_names, pw.as_bytes(), bytes).map(|(c, u)| (c, Some(u)))
}

/// The config's bytes and the key files' names, requested at once, and `beside` run on this
/// thread meanwhile (an open writes its lock's record there): on an object store each
/// request is a round trip (40-60 ms on a 3-node Garage cluster), and every open needs both,
/// whatever the config turns out to be (a plain one is refused in a repository with key
/// files, see [`read_config`]).
pub(crate) fn read_config_and_key_names<T>(
    raw: &dyn Backend,
    beside: impl FnOnce() -> T,
) -> (Result<Vec<u8>>, Result<Vec<String>>, T) {
    let round_trips = raw.requests_are_round_trips();
    let ((other, config), names) = crate::request_threads::beside(
        round_trips,
        || raw.list_names(FileKind::Key),
        || {
            crate::request_threads::beside(
                round_trips,
                || raw.get(FileKind::Config, "config"),
                beside,
            )
        },
    );
    (config.map_err(Into::into), names.map_err(Into::into), other)
}

/// Whether the config `bytes` are sealed (an encrypted repository's).
pub(crate) fn is_sealed(bytes: &[u8]) -> bool {
    !bytes.starts_with(CONFIG_MAGIC) && sealed::looks_sealed(bytes)
}

/// A plain config (`bytes`), refused if it names a cipher or the repository has key files
/// (`key_names`, as listed).
pub(crate) fn plain_config(bytes: &[u8], key_names: Result<Vec<String>>) -> Result<RepoConfig> {
    let cfg = RepoConfig::from_bytes(bytes)?;
    if cfg.is_encrypted() {
        return Err(Error::corrupt(
            "config",
            "it names a cipher but is not sealed (tampered with?)",
        ));
    }
    if !key_names?.is_empty() {
        return Err(Error::corrupt(
            "config",
            "it is not encrypted but the repository has key files: refusing to write \
             in clear into a repository whose config may have been replaced",
        ));
    }
    Ok(cfg)
}

/// Unlocks one of the key files `key_names` (as listed) with `password` and opens the sealed
/// config `bytes` (as read, not read again) with its master key.
pub(crate) fn unlock_config(
    raw: Arc<dyn Backend>,
    key_names: Result<Vec<String>>,
    password: &[u8],
    bytes: Vec<u8>,
) -> Result<(RepoConfig, Unlocked)> {
    let (key, key_id) = keys::unlock_listed(raw.as_ref(), key_names?, password)?;
    let seal = Arc::new(SealedBackend::new(raw, &key));
    let cfg = RepoConfig::from_bytes(&seal.open_object(FileKind::Config, "config", bytes)?)?;
    if !cfg.is_encrypted() {
        return Err(Error::corrupt(
            "config",
            "it is sealed but says the repository is not encrypted",
        ));
    }
    Ok((
        cfg,
        Unlocked {
            seal,
            key: Arc::new(key),
            key_id,
        },
    ))
}

/// Refuses an empty password for a new encrypted repository.
fn password_given(password: &str) -> Result<()> {
    if password.is_empty() {
        return Err(Error::InvalidOption(
            "an empty password (use --insecure-no-password for a repository without \
             encryption)"
                .into(),
        ));
    }
    Ok(())
}

impl Repository {
    /// Creates an encrypted repository in a local directory (absent or empty): a new random
    /// master key, one key file holding it under `password` (Argon2id with `kdf`), and the
    /// config (made [`RepoConfig::encrypted`]) sealed.
    pub fn init_local_encrypted(
        path: &Path,
        config: RepoConfig,
        cache_root: &Path,
        password: &str,
        kdf: KdfParams,
        origin: &KeyOrigin,
    ) -> Result<Self> {
        let config = config.encrypted();
        config.validate()?;
        Self::check_new_local(path)?;
        password_given(password)?;
        let local = LocalBackend::new(path);
        local.create_layout()?;
        let mut repo =
            Self::init_encrypted_on(Arc::new(local), config, cache_root, password, kdf, origin)?;
        repo.local_root = Some(path.to_path_buf());
        Ok(repo)
    }

    /// Creates an encrypted repository at `location` (an S3 URL, or a local directory that
    /// must be absent or empty; see [`Self::init_location`]).
    pub fn init_location_encrypted(
        location: &str,
        config: RepoConfig,
        cache_root: &Path,
        connections: Option<usize>,
        password: &str,
        kdf: KdfParams,
        origin: &KeyOrigin,
    ) -> Result<Self> {
        let Some(raw) = crate::backend::open_url(location, connections) else {
            return Self::init_local_encrypted(
                Path::new(location),
                config,
                cache_root,
                password,
                kdf,
                origin,
            );
        };
        Self::init_encrypted(raw?, config, cache_root, password, kdf, origin)
    }

    /// Creates an encrypted repository on `raw`, any backend holding no config yet (an
    /// object store; tests put fault injectors and memory backends under one); see
    /// [`Self::init_local_encrypted`].
    pub fn init_encrypted(
        raw: Arc<dyn Backend>,
        config: RepoConfig,
        cache_root: &Path,
        password: &str,
        kdf: KdfParams,
        origin: &KeyOrigin,
    ) -> Result<Self> {
        let config = config.encrypted();
        config.validate()?;
        if raw.exists(FileKind::Config, "config")? {
            return Err(Error::RepoExists(raw.location().into()));
        }
        password_given(password)?;
        Self::init_encrypted_on(raw, config, cache_root, password, kdf, origin)
    }

    /// Writes a new master key (in one key file under `password`) and the sealed config
    /// `config` (already [`RepoConfig::encrypted`] and validated) to `raw`.
    fn init_encrypted_on(
        raw: Arc<dyn Backend>,
        config: RepoConfig,
        cache_root: &Path,
        password: &str,
        kdf: KdfParams,
        origin: &KeyOrigin,
    ) -> Result<Self> {
        let key = MasterKey::random()?;
        let key_id = keys::add_key(raw.as_ref(), &key, password.as_bytes(), kdf, origin)?;
        let seal = Arc::new(SealedBackend::new(raw.clone(), &key));
        // The key file is durable before the config that needs it.
        seal.put(FileKind::Config, "config", &config.to_bytes())?;
        let dir = crate::client::cache::repo_dir(cache_root, &config.id)?;
        let mut repo = Self::assemble(
            raw,
            config,
            Some(Unlocked {
                seal,
                key: Arc::new(key),
                key_id,
            }),
            dir.join(crate::client::cache::INDEX_FILE),
        );
        repo.cache_dir = Some(dir);
        Ok(repo)
    }

    /// How this repository computes chunk ids: keyed in an encrypted repository.
    pub fn chunk_hasher(&self) -> ChunkHasher {
        match &self.unlocked {
            Some(u) => u.key.chunk_hasher(),
            None => ChunkHasher::Plain,
        }
    }

    /// The key file this repository was opened with (`None` if it is not encrypted).
    pub fn key_id(&self) -> Option<&str> {
        self.unlocked.as_ref().map(|u| u.key_id.as_str())
    }

    fn unlocked(&self) -> Result<&Unlocked> {
        self.unlocked.as_ref().ok_or_else(|| {
            Error::InvalidOption(
                "the repository is not encrypted (made with --insecure-no-password): it has \
                 no keys"
                    .into(),
            )
        })
    }

    /// Every key file (`current`: the one this repository was opened with).
    pub fn list_keys(&self) -> Result<Vec<KeyInfo>> {
        let u = self.unlocked()?;
        keys::list_keys(self.backend.as_ref(), Some(&u.key_id))
    }

    /// Adds a key file holding the master key under `password`; returns its id.
    pub fn add_key(&self, password: &str, kdf: KdfParams, origin: &KeyOrigin) -> Result<String> {
        let u = self.unlocked()?;
        if password.is_empty() {
            return Err(Error::InvalidOption("an empty password".into()));
        }
        keys::add_key(
            self.backend.as_ref(),
            &u.key,
            password.as_bytes(),
            kdf,
            origin,
        )
    }

    /// Removes the key file whose id starts with `prefix` (never the one in use, nor the
    /// last); returns its id.
    pub fn remove_key(&self, prefix: &str) -> Result<String> {
        let u = self.unlocked()?;
        let id = keys::find_key(self.backend.as_ref(), prefix)?;
        keys::remove_key(self.backend.as_ref(), &id, &u.key_id)?;
        Ok(id)
    }

    /// Changes the password of the key in use: adds a key file under `password`, then
    /// removes the old one (in that order, so that a crash leaves both). Returns the new id.
    pub fn change_password(
        &mut self,
        password: &str,
        kdf: KdfParams,
        origin: &KeyOrigin,
    ) -> Result<String> {
        let new = self.add_key(password, kdf, origin)?;
        let u = self.unlocked.as_mut().expect("add_key checked");
        let old = std::mem::replace(&mut u.key_id, new.clone());
        self.backend.delete(FileKind::Key, &old)?;
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::wrap::metered::Purpose;
    use crate::repository::lock::{LockHealth, LockTiming};
    use std::time::Duration;

    /// In an encrypted repository the write guard is under the seal (and the meter): once the
    /// lock is lost, sealed writes are refused through every handle, and reads still work.
    #[test]
    fn sealed_writes_pass_the_write_guard() {
        let dir = tempfile::tempdir().unwrap();
        let origin = KeyOrigin {
            created: "2026-11-24T00:00:00Z".into(),
            host: "h".into(),
            username: "u".into(),
        };
        let r = Repository::init_local_encrypted(
            &dir.path().join("repo"),
            RepoConfig::new("0123456789abcdef0123456789abcdef".into()),
            &dir.path().join("cache"),
            "pw",
            KdfParams::insecure_for_tests(),
            &origin,
        )
        .unwrap()
        .metered();
        r.backend().put(FileKind::Snapshot, "s", b"one").unwrap();
        let timing = LockTiming {
            refresh: Duration::from_millis(2),
            stale_after: Duration::from_millis(2),
        };
        r.guard.watch(Arc::new(LockHealth::new(timing)));
        std::thread::sleep(Duration::from_millis(20));
        let e = r
            .backend()
            .put(FileKind::Snapshot, "t", b"two")
            .unwrap_err();
        assert!(e.to_string().contains("lock was lost"), "{e}");
        let tagged = r.backend_for(Purpose::ChunkData);
        assert!(tagged.put(FileKind::Container, "c", b"x").is_err());
        assert_eq!(r.backend().get(FileKind::Snapshot, "s").unwrap(), b"one");
        // What was stored is sealed: the plaintext is not in the file.
        let stored = std::fs::read(dir.path().join("repo/snapshots/s")).unwrap();
        assert_ne!(stored, b"one");
    }
}
