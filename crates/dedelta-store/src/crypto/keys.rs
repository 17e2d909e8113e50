//! Key files (`keys/<id>`): the master key sealed under a password-derived key.
//!
//! A key file is JSON (plain: it holds nothing secret without the password):
//! `{"version":1,"created":..,"host":..,"username":..,"kdf":{"algorithm":"argon2id",
//! "version":19,"memory_kib":..,"iterations":..,"parallelism":..,"salt":hex},
//! "cipher":"xchacha20-poly1305","nonce":hex,"data":hex}`. `data` is the 64-byte master key
//! encrypted with the Argon2id output as key, under the associated data [`KEY_AAD`]. Its id
//! (and name) is the BLAKE3 hash of the file's bytes, in hex.

use super::kdf_memory::KdfMemory;
use super::{random_bytes, MasterKey};
use crate::backend::{Backend, FileKind};
use crate::error::{Error, Result};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// Associated data of a key file's sealed master key.
pub const KEY_AAD: &[u8] = b"dedelta key file v1";

/// Argon2id parameters, as recorded in a key file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KdfParams {
    /// Memory in KiB.
    pub memory_kib: u32,
    /// Passes.
    pub iterations: u32,
    /// Lanes.
    pub parallelism: u32,
}

impl Default for KdfParams {
    /// 64 MiB, 3 passes, 4 lanes: RFC 9106's second recommended option. The lanes are
    /// computed on every core (rayon), so the same memory-hard work costs a command about half
    /// the wall time of one lane on two cores (0.11 s for one lane on the development
    /// machine). Key files record their parameters, so older one-lane files still open.
    fn default() -> Self {
        KdfParams {
            memory_kib: 64 * 1024,
            iterations: 3,
            parallelism: 4,
        }
    }
}

impl KdfParams {
    /// The smallest parameters Argon2 takes: for tests only (a key file made with them falls
    /// to a guessing attack quickly).
    pub fn insecure_for_tests() -> Self {
        KdfParams {
            memory_kib: 8,
            iterations: 1,
            parallelism: 1,
        }
    }

    fn derive(&self, password: &[u8], salt: &[u8]) -> Result<Zeroizing<[u8; 32]>> {
        let params =
            argon2::Params::new(self.memory_kib, self.iterations, self.parallelism, Some(32))
                .map_err(|e| Error::InvalidOption(format!("argon2 parameters: {e}")))?;
        let blocks = params.block_count();
        let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let mut out = Zeroizing::new([0u8; 32]);
        // Memory mapped in before the derivation (see kdf_memory), else argon2's allocation.
        let done = match KdfMemory::new(blocks) {
            Some(mut memory) => {
                a.hash_password_into_with_memory(password, salt, out.as_mut(), memory.blocks())
            }
            None => a.hash_password_into(password, salt, out.as_mut()),
        };
        done.map_err(|e| Error::InvalidOption(format!("argon2: {e}")))?;
        Ok(out)
    }
}

#[derive(Serialize, Deserialize)]
struct KdfRecord {
    algorithm: String,
    version: u32,
    #[serde(flatten)]
    params: KdfParams,
    salt: String,
}

#[derive(Serialize, Deserialize)]
struct KeyFileJson {
    version: u32,
    created: String,
    host: String,
    username: String,
    kdf: KdfRecord,
    cipher: String,
    nonce: String,
    data: String,
}

/// What `key list` shows of a key file.
#[derive(Clone, Debug, Serialize)]
pub struct KeyInfo {
    /// Its id (file name).
    pub id: String,
    /// When it was made (RFC 3339).
    pub created: String,
    /// Host that made it.
    pub host: String,
    /// User that made it.
    pub username: String,
    /// Its Argon2id parameters.
    pub kdf: KdfParams,
    /// Whether this command opened the repository with it.
    pub current: bool,
}

/// Who makes a key file (recorded in it).
#[derive(Clone, Debug, Default)]
pub struct KeyOrigin {
    /// RFC 3339 time.
    pub created: String,
    /// Host name.
    pub host: String,
    /// User name.
    pub username: String,
}

fn bad(name: &str, why: impl std::fmt::Display) -> Error {
    Error::corrupt(format!("key file {name}"), why.to_string())
}

/// Writes a new key file holding `master` under `password`; returns its id.
pub fn add_key(
    backend: &dyn Backend,
    master: &MasterKey,
    password: &[u8],
    kdf: KdfParams,
    origin: &KeyOrigin,
) -> Result<String> {
    let salt = random_bytes::<32>()?;
    let nonce = random_bytes::<24>()?;
    let k = kdf.derive(password, &salt)?;
    let cipher = XChaCha20Poly1305::new(Key::from_slice(k.as_ref()));
    let plain = master.to_bytes();
    let data = cipher
        .encrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: plain.as_ref(),
                aad: KEY_AAD,
            },
        )
        .expect("64 bytes encrypt");
    let file = KeyFileJson {
        version: 1,
        created: origin.created.clone(),
        host: origin.host.clone(),
        username: origin.username.clone(),
        kdf: KdfRecord {
            algorithm: "argon2id".into(),
            version: 19,
            params: kdf,
            salt: hex::encode(salt),
        },
        cipher: "xchacha20-poly1305".into(),
        nonce: hex::encode(nonce),
        data: hex::encode(data),
    };
    let bytes = serde_json::to_vec_pretty(&file).expect("key file serializes");
    let id = blake3::hash(&bytes).to_hex().to_string();
    backend.put(FileKind::Key, &id, &bytes)?;
    Ok(id)
}

fn parse(name: &str, bytes: &[u8]) -> Result<KeyFileJson> {
    let f: KeyFileJson = serde_json::from_slice(bytes).map_err(|e| bad(name, e))?;
    if f.version != 1 {
        return Err(Error::UnsupportedVersion {
            what: format!("key file {name}"),
            found: f.version,
            supported: 1,
        });
    }
    if f.kdf.algorithm != "argon2id" || f.kdf.version != 19 || f.cipher != "xchacha20-poly1305" {
        return Err(bad(name, "unknown KDF or cipher"));
    }
    Ok(f)
}

/// Opens key file `name` with `password`: `Ok(None)` if the password is not this key's.
fn try_key(name: &str, f: &KeyFileJson, password: &[u8]) -> Result<Option<MasterKey>> {
    let salt = hex::decode(&f.kdf.salt).map_err(|e| bad(name, e))?;
    let nonce: [u8; 24] = hex::decode(&f.nonce)
        .ok()
        .and_then(|n| n.try_into().ok())
        .ok_or_else(|| bad(name, "nonce is not 24 bytes of hex"))?;
    let data = hex::decode(&f.data).map_err(|e| bad(name, e))?;
    // Refuse parameters that would exhaust memory before deriving (4 GiB, 64 passes).
    let p = f.kdf.params;
    if p.memory_kib > 4 << 20 || p.iterations > 64 || p.parallelism > 64 {
        return Err(bad(name, "implausible KDF parameters"));
    }
    let k = p.derive(password, &salt)?;
    let cipher = XChaCha20Poly1305::new(Key::from_slice(k.as_ref()));
    let Ok(plain) = cipher.decrypt(
        XNonce::from_slice(&nonce),
        Payload {
            msg: &data,
            aad: KEY_AAD,
        },
    ) else {
        return Ok(None);
    };
    let plain = Zeroizing::new(plain);
    let bytes: &[u8; 64] = plain
        .as_slice()
        .try_into()
        .map_err(|_| bad(name, "the master key is not 64 bytes"))?;
    Ok(Some(MasterKey::from_bytes(bytes)))
}

/// Finds the key file `password` opens: the master key and the key's id.
///
/// # Errors
/// [`Error::WrongPassword`] if it opens none; [`Error::Corrupt`] if there is no key file.
pub fn unlock(backend: &dyn Backend, password: &[u8]) -> Result<(MasterKey, String)> {
    let names = backend
        .list(FileKind::Key)?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    unlock_listed(backend, names, password)
}

/// Key files read at once by [`unlock_listed`] (each a round trip on an object store).
const KEYS_READ_AT_ONCE: usize = 8;

/// [`unlock`] given the key files' names, listed already (an open lists them beside the
/// config's read). The files are read at once, then tried in the order of their names (a
/// key derivation each, until one opens): a repository rarely has more than a few, and one
/// after another each read was a round trip before its derivation.
///
/// # Errors
/// As [`unlock`].
pub fn unlock_listed(
    backend: &dyn Backend,
    mut names: Vec<String>,
    password: &[u8],
) -> Result<(MasterKey, String)> {
    if names.is_empty() {
        return Err(Error::corrupt(
            "repository",
            "its config is encrypted but it has no key file (keys/ is empty)",
        ));
    }
    names.sort();
    let mut damaged = None;
    for group in names.chunks(KEYS_READ_AT_ONCE) {
        let read: Vec<_> = std::thread::scope(|s| {
            let others: Vec<_> = group[1..]
                .iter()
                .map(|n| s.spawn(move || backend.get(FileKind::Key, n)))
                .collect();
            let mut read = vec![backend.get(FileKind::Key, &group[0])];
            read.extend(others.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            }));
            read
        });
        for (name, bytes) in group.iter().zip(read) {
            let f = match parse(name, &bytes?) {
                Ok(f) => f,
                Err(e) => {
                    damaged = Some(e);
                    continue;
                }
            };
            if let Some(k) = try_key(name, &f, password)? {
                return Ok((k, name.clone()));
            }
        }
    }
    Err(damaged.unwrap_or(Error::WrongPassword))
}

/// Every key file, `current` marking the one this command opened the repository with.
pub fn list_keys(backend: &dyn Backend, current: Option<&str>) -> Result<Vec<KeyInfo>> {
    let mut out = Vec::new();
    for (name, _) in backend.list(FileKind::Key)? {
        let f = parse(&name, &backend.get(FileKind::Key, &name)?)?;
        out.push(KeyInfo {
            current: current == Some(name.as_str()),
            id: name,
            created: f.created,
            host: f.host,
            username: f.username,
            kdf: f.kdf.params,
        });
    }
    out.sort_by(|a, b| a.created.cmp(&b.created).then(a.id.cmp(&b.id)));
    Ok(out)
}

/// Resolves a key id prefix to one key file's id.
pub fn find_key(backend: &dyn Backend, prefix: &str) -> Result<String> {
    let found: Vec<String> = backend
        .list(FileKind::Key)?
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.starts_with(prefix))
        .collect();
    match found.len() {
        1 => Ok(found.into_iter().next().expect("one")),
        0 => Err(Error::InvalidOption(format!(
            "no key file matches {prefix:?}"
        ))),
        n => Err(Error::InvalidOption(format!(
            "key id prefix {prefix:?} is ambiguous: matches {n} key files"
        ))),
    }
}

/// Removes key file `id`, refusing the one in use (`current`) and the last one.
pub fn remove_key(backend: &dyn Backend, id: &str, current: &str) -> Result<()> {
    if id == current {
        return Err(Error::InvalidOption(format!(
            "key {id} is the one this command opened the repository with: open it with \
             another key's password to remove this one (or use `key passwd`)"
        )));
    }
    let n = backend.list(FileKind::Key)?.len();
    if n <= 1 {
        return Err(Error::InvalidOption(
            "refusing to remove the repository's last key: its data could never be read again"
                .into(),
        ));
    }
    backend.delete(FileKind::Key, id)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::KdfParams;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Key files record their Argon2id parameters, so a file made with one lane must derive the
    /// same key after a crate upgrade, and four lanes computed in parallel must be the RFC 9106
    /// function. The values come from the reference C implementation (argon2-cffi 25.1,
    /// `hash_secret_raw(..., type=ID, version=19)`) and from argon2 0.5, which agree.
    #[test]
    fn derivation_matches_the_reference_implementation() {
        let salt = b"dedelta-test-salt-16";
        for (lanes, want) in [
            (
                1,
                "cf7a7b873e348a4c590c7ad1799035adcd7fd4a850ba35eeea21c6711d4973ad",
            ),
            (
                4,
                "c196e2ca59cdb5d9bcc36ff02f6f03f9d4a8eddd54600d2f9d432e7ad1af280a",
            ),
        ] {
            let p = KdfParams {
                memory_kib: 256,
                iterations: 2,
                parallelism: lanes,
            };
            let k = p.derive(b"correct horse", salt).unwrap();
            assert_eq!(hex(k.as_ref()), want, "{lanes} lanes");
        }
    }
}
