//! Where a client keeps its caches: one directory per repository, named by the repository id,
//! under a cache root (`$DEDELTA_CACHE_DIR`, else `$XDG_CACHE_HOME/dedelta`, else
//! `~/.cache/dedelta`). It holds the chunk index ([`INDEX_FILE`] and its run files) and the
//! local base cache.
//! Everything in it can be rebuilt from the repository, so deleting it loses nothing.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The chunk index's manifest file name in a repository's cache directory (its run files are
/// named after it; see [`crate::client::index`]).
pub const INDEX_FILE: &str = "chunks.idx";

/// The cache root from the environment: `$DEDELTA_CACHE_DIR`, else `$XDG_CACHE_HOME/dedelta`,
/// else `~/.cache/dedelta` (an empty variable counts as unset); `None` without a home.
pub fn default_root() -> Option<PathBuf> {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("DEDELTA_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("dedelta")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("dedelta")))
}

/// The cache root to use when none is given: [`default_root`], else a directory in the
/// system's temporary directory (a machine without a home still works, at the cost of
/// rebuilding the index more often).
pub fn root_or_temp() -> PathBuf {
    default_root().unwrap_or_else(|| std::env::temp_dir().join("dedelta-cache"))
}

/// The cache directory of the repository with id `repo_id` under `root`. The id names a
/// directory, so anything but a plain name (a crafted config) is refused rather than joined.
///
/// # Errors
/// [`Error::InvalidOption`] if the id is empty, longer than 64 bytes, or not made of ASCII
/// letters, digits, `-` and `_`.
pub fn repo_dir(root: &Path, repo_id: &str) -> Result<PathBuf> {
    let plain = !repo_id.is_empty()
        && repo_id.len() <= 64
        && repo_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        Ok(root.join(repo_id))
    } else {
        Err(Error::InvalidOption(format!(
            "repository id {repo_id:?} is not a plain name; it cannot name a cache directory"
        )))
    }
}

/// Total bytes of the regular files in `dir` (not recursive): what a cache costs on disk.
pub fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_ids_name_a_directory() {
        let root = Path::new("/c");
        assert_eq!(repo_dir(root, "ab-1_2").unwrap(), root.join("ab-1_2"));
        for bad in ["", "..", "a/b", "a b", &"x".repeat(65)] {
            assert!(repo_dir(root, bad).is_err(), "{bad:?}");
        }
    }
}
