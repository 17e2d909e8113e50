//! The repository config: every parameter that decides what is stored.
//!
//! Written once by `init` (an envelope with magic `DDCF` around JSON). The chunker, hash,
//! compression, region and container sizes and the delta settings are fixed here, so every
//! client that opens the repository stores data the same way.
//!
//! The envelope version and the payload's `version` key are equal, 1 or 2, and this build
//! refuses any other: the config version is the repository's version, the one number that
//! covers every container and the tree stream. Version 2 repositories hold containers of
//! version 2 (lean metadata), which a build that knows only version 1 must not meet: it would
//! leave them out of its index and store their chunks again, or report them missing, so the
//! config version, which such a build refuses at open, is what keeps it out. `init` writes
//! version 2; a version-1 repository keeps writing version-1 containers, so that older builds
//! still read it. Unknown JSON keys are ignored (a newer client may add a writing parameter
//! that old clients need not know); an addition that changes how stored data *reads* must
//! raise the version instead. Key table in docs/format.md.

use crate::error::{Error, Result};
use crate::format::envelope;
use dedelta_core::chunker::{ChunkerKind, ChunkerParams};
use dedelta_core::compress::Compression;
use serde::{Deserialize, Serialize};

mod delta;
pub use delta::{
    default_reanchor, DeltaConfig, SketchIndexKind, DEFAULT_CANDIDATES, DEFAULT_CANDIDATES_ENOUGH,
    DEFAULT_DENSE_THRESHOLD, DEFAULT_PREFETCH_LOOKAHEAD_BYTES, DEFAULT_REANCHOR, MAX_CANDIDATES,
    MAX_PREFETCH_LOOKAHEAD_BYTES, ONE_LEVEL_REANCHOR, PREFETCH_CACHE_CONTAINERS,
    PREFETCH_CACHE_CONTAINERS_CAPPING,
};

/// Magic of the config file.
pub const CONFIG_MAGIC: &[u8; 4] = b"DDCF";
/// The newest repository format version: this build reads 1 ..= this. `init` writes it for an
/// encrypted repository, and [`PLAIN_FORMAT_VERSION`] for one made with
/// `--insecure-no-password` (whose format did not change).
pub const FORMAT_VERSION: u16 = ENCRYPTED_VERSION;
/// The first repository format version that may be encrypted ([`RepoConfig::encryption`]):
/// every object but locks sealed (docs/format.md, "Encryption"), keyed chunk ids.
pub const ENCRYPTED_VERSION: u16 = 5;
/// The version of a new repository without encryption.
pub const PLAIN_FORMAT_VERSION: u16 = INVERSED_VERSION;
/// The first repository format version whose containers may hold inversed deltas (LoopDelta
/// §4.5, kind code 2 in version-2 metadata): a second copy of a chunk, encoded against a newer
/// chunk, that an older build would read as damage. The one constant to renumber if another
/// format change lands first.
pub const INVERSED_VERSION: u16 = 4;
/// The first repository format version whose deltas may name a delta as their base
/// ([`DeltaConfig::max_depth`] above 1); older builds would refuse such a delta as damage.
pub const CHAINS_VERSION: u32 = 3;
/// The longest delta chain a reader follows: a delta at depth `d` needs `d` decodes, and a
/// chain longer than this (or a cycle, which index rebuilds cannot make but damage could) is
/// refused as damage rather than followed.
pub const MAX_DELTA_DEPTH: u8 = 16;
/// The delta depth bound of new repositories ([`DeltaConfig::max_depth`]); see
/// docs/benchmarks.md, "Bounded delta chains", for the measurement.
pub const DEFAULT_MAX_DEPTH: u8 = 8;
/// The oldest repository format version this build reads (and writes into).
pub const MIN_FORMAT_VERSION: u16 = 1;
/// The fingerprint hash of a repository without encryption.
pub const HASH_BLAKE3: &str = "blake3-256";
/// The fingerprint hash of an encrypted repository: BLAKE3's keyed mode under the master
/// key's id key.
pub const HASH_BLAKE3_KEYED: &str = "blake3-256-keyed";
/// Default compression region size (raw bytes): see docs/format.md for the measurement (with
/// delta chains 512 KiB stores 3 % less than 256 KiB on 20 SQLAlchemy sdists and 1 MiB 6 %
/// less, but 1 MiB restores prettier's versions about 10 % slower).
pub const DEFAULT_REGION_SIZE: usize = 512 * 1024;
/// Default container size (stored bytes).
pub const DEFAULT_CONTAINER_SIZE: usize = 4 * 1024 * 1024;

/// Chunking parameters as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkerConfig {
    /// The method.
    pub kind: ChunkerKind,
    /// Size bounds.
    #[serde(flatten)]
    pub params: ChunkerParams,
}

/// The repository config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RepoConfig {
    /// Format version (also in the envelope): 1 or 2. It decides the container version
    /// writers use ([`Self::container_version`]).
    pub version: u32,
    /// Random repository id (32 hex chars), chosen by the caller of `init`.
    pub id: String,
    /// Chunking.
    pub chunker: ChunkerConfig,
    /// Fingerprint hash: `blake3-256`, or `blake3-256-keyed` in an encrypted repository.
    pub hash: String,
    /// Local compression of regions.
    pub compression: Compression,
    /// Target raw size of a compression region in bytes.
    pub region_size: usize,
    /// Target stored size of a container in bytes.
    pub container_size: usize,
    /// Resemblance detection and delta compression (defaults for every backup).
    #[serde(default)]
    pub delta: DeltaConfig,
    /// The cipher suite of an encrypted repository ([`crate::crypto::SUITE`]), absent (and
    /// not written) in one without encryption. An encrypted config is itself sealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<String>,
}

impl RepoConfig {
    /// A config with the defaults and the given id.
    pub fn new(id: String) -> Self {
        RepoConfig {
            version: PLAIN_FORMAT_VERSION.into(),
            id,
            chunker: ChunkerConfig {
                kind: ChunkerKind::FastCdc,
                params: ChunkerParams::default(),
            },
            hash: HASH_BLAKE3.into(),
            compression: Compression::default(),
            region_size: DEFAULT_REGION_SIZE,
            container_size: DEFAULT_CONTAINER_SIZE,
            delta: DeltaConfig::recommended(),
            encryption: None,
        }
    }

    /// This config for an encrypted repository: version [`ENCRYPTED_VERSION`], keyed ids.
    pub fn encrypted(mut self) -> Self {
        self.version = ENCRYPTED_VERSION.into();
        self.hash = HASH_BLAKE3_KEYED.into();
        self.encryption = Some(crate::crypto::SUITE.into());
        self
    }

    /// Whether the repository is encrypted.
    pub fn is_encrypted(&self) -> bool {
        self.encryption.is_some()
    }

    /// The container version writers use in this repository: 1 in a version-1 repository
    /// (which builds that know only version 1 read), else the lean version 2.
    pub fn container_version(&self) -> u16 {
        if self.version == u32::from(MIN_FORMAT_VERSION) {
            crate::format::container::CONTAINER_V1
        } else {
            crate::format::container::CONTAINER_V2
        }
    }

    /// Refuses delta settings whose chains this repository's version does not allow (a
    /// backup's overrides are checked too).
    pub fn check_depth(&self, delta: &DeltaConfig) -> Result<()> {
        if delta.max_depth > 1 && self.version < CHAINS_VERSION {
            return Err(Error::InvalidOption(format!(
                "delta chains (a depth of {}) need a repository of format version \
                 {CHAINS_VERSION}; this one is version {}, whose readers take one-level deltas \
                 only",
                delta.max_depth, self.version
            )));
        }
        Ok(())
    }

    /// Refuses inversed delta compression in a repository older than [`INVERSED_VERSION`],
    /// whose readers do not know inversed delta entries.
    pub fn check_inversed(&self) -> Result<()> {
        if self.version < u32::from(INVERSED_VERSION) {
            return Err(Error::InvalidOption(format!(
                "inversed delta compression needs a repository of format version \
                 {INVERSED_VERSION}; this one is version {}, whose readers do not know \
                 inversed delta entries (make a new repository with `dedelta init`)",
                self.version
            )));
        }
        Ok(())
    }

    /// The delta settings a backup uses when it gives none: the repository's, with the depth
    /// held to 1 in a repository older than [`CHAINS_VERSION`].
    pub fn default_delta(&self) -> DeltaConfig {
        let mut d = self.delta.clone();
        if self.version < CHAINS_VERSION {
            d.max_depth = 1;
        }
        d
    }

    /// Checks the parameters before anything is written with them.
    pub fn validate(&self) -> Result<()> {
        if !(u32::from(MIN_FORMAT_VERSION)..=u32::from(FORMAT_VERSION)).contains(&self.version) {
            return Err(Error::UnsupportedVersion {
                what: "config".into(),
                found: self.version,
                supported: FORMAT_VERSION.into(),
            });
        }
        self.chunker
            .params
            .validate(self.chunker.kind)
            .map_err(|e| Error::InvalidOption(e.to_string()))?;
        match self.encryption.as_deref() {
            None if self.hash == HASH_BLAKE3 => {}
            Some(crate::crypto::SUITE)
                if self.hash == HASH_BLAKE3_KEYED
                    && self.version >= u32::from(ENCRYPTED_VERSION) => {}
            Some(s) if s != crate::crypto::SUITE => {
                return Err(Error::InvalidOption(format!("unsupported encryption {s}")))
            }
            _ => {
                return Err(Error::InvalidOption(format!(
                    "unsupported hash {} (encryption {:?}, version {})",
                    self.hash, self.encryption, self.version
                )))
            }
        }
        if !(4096..=64 * 1024 * 1024).contains(&self.region_size) {
            return Err(Error::InvalidOption(
                "region size must be 4 KiB ..= 64 MiB".into(),
            ));
        }
        if let Compression::Zstd { level, text_level } = self.compression {
            for level in std::iter::once(level).chain(text_level) {
                if !(1..=22).contains(&level) {
                    return Err(Error::InvalidOption(format!(
                        "zstd level {level} is outside 1 ..= 22"
                    )));
                }
            }
        }
        self.delta.validate()?;
        self.check_depth(&self.delta)?;
        if self.container_size < self.region_size || self.container_size > 1 << 30 {
            return Err(Error::InvalidOption(
                "container size must be >= region size and <= 1 GiB".into(),
            ));
        }
        Ok(())
    }

    /// Serializes into the enveloped form, under the config's own version.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing a plain struct of strings and numbers cannot fail.
        let json = serde_json::to_vec_pretty(self).expect("config serializes");
        let version = u16::try_from(self.version).unwrap_or(u16::MAX);
        envelope::seal(CONFIG_MAGIC, version, &json)
    }

    /// Parses and checks the enveloped form: envelope version 1 ..= [`FORMAT_VERSION`], equal
    /// to the payload's `version`.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let payload = envelope::open(bytes, CONFIG_MAGIC, FORMAT_VERSION, "config")?;
        let envelope_version = u16::from_le_bytes([
            bytes[envelope::VERSION_OFFSET],
            bytes[envelope::VERSION_OFFSET + 1],
        ]);
        let cfg: RepoConfig =
            serde_json::from_slice(payload).map_err(|e| Error::corrupt("config", e.to_string()))?;
        cfg.validate()?;
        if cfg.version != u32::from(envelope_version) {
            return Err(Error::corrupt(
                "config",
                format!(
                    "version {} differs from the envelope's version {envelope_version}",
                    cfg.version
                ),
            ));
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests;
