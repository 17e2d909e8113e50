//! Where a client keeps its caches: one directory per repository, named by the repository id,
//! under a cache root (`$DEDELTA_CACHE_DIR`, else `$XDG_CACHE_HOME/dedelta`, else
//! `~/.cache/dedelta`). It holds the chunk index ([`INDEX_FILE`] and its run files), the
//! local base cache, the snapshot cache ([`super::snapshot_cache`]) and, on an object store,
//! the container metadata cache ([`super::meta_cache`]).
//! Everything in it can be rebuilt from the repository, so deleting it loses nothing.
//!
//! Each command that opens the index rewrites [`LOCATION_FILE`] there (the repository's
//! location, empty when it is not a local directory): its time says when the cache was last
//! used, and its content lets `cache --cleanup` see that the repository is gone.

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

/// The file in a repository's cache directory that names the repository's location (see
/// the module doc).
pub const LOCATION_FILE: &str = "repository";

/// Marks the cache directory `dir` as used now by the repository at `location` (`None`: not
/// a local directory): [`LOCATION_FILE`] is touched when it already says so (every command
/// but the first), else rewritten (a new file, renamed into place). Best effort, as the
/// cache itself: a failure only costs `cache --cleanup` its knowledge of this cache.
pub fn mark_used(dir: &Path, location: Option<&Path>) {
    let text = location
        .and_then(|l| std::path::absolute(l).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .unwrap_or_default();
    let path = dir.join(LOCATION_FILE);
    if std::fs::read(&path).is_ok_and(|old| old == text.as_bytes()) {
        let touched = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        if touched.is_ok() {
            return;
        }
    }
    let tmp = dir.join(format!("{LOCATION_FILE}.tmp-{}", std::process::id()));
    if std::fs::write(&tmp, text.as_bytes()).is_err()
        || std::fs::rename(&tmp, dir.join(LOCATION_FILE)).is_err()
    {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Whether a repository cache is still wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheState {
    /// Used within the maximum age, and its repository (if known) is there.
    Current,
    /// Not used for longer than the maximum age (restic's "old" caches).
    Old,
    /// Its repository was a local directory that no longer holds it (no config there, or
    /// the config of another repository).
    Gone,
}

/// One repository's cache directory.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CacheDir {
    /// The repository id (the directory's name).
    pub id: String,
    /// The directory.
    pub path: PathBuf,
    /// Bytes of its files.
    pub bytes: u64,
    /// Seconds since it was last used (its newest file).
    pub age_secs: u64,
    /// The repository's location, when it was recorded and is a local directory.
    pub location: Option<PathBuf>,
    /// Whether it is still wanted.
    pub state: CacheState,
}

/// Whether the local repository at `location` is gone or is no longer repository `id`:
/// only a config that is missing, or that parses with another id, says so (one that cannot
/// be read or parsed leaves the cache alone).
fn repository_gone(location: &Path, id: &str) -> bool {
    match std::fs::read(location.join("config")) {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        Ok(bytes) => crate::format::config::RepoConfig::from_bytes(&bytes)
            .map(|c| c.id != id)
            .unwrap_or(false),
    }
}

/// The repository caches under `root` (directories named like a repository id that hold a
/// chunk index, a base cache or a [`LOCATION_FILE`]), by id; those unused for more than
/// `max_age_secs` are [`CacheState::Old`], those whose local repository is gone
/// [`CacheState::Gone`].
///
/// # Errors
/// [`Error::Io`] if `root` exists but cannot be listed.
pub fn list_caches(root: &Path, max_age_secs: u64) -> Result<Vec<CacheDir>> {
    let rd = match std::fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("listing {}", root.display()), e)),
    };
    let now = std::time::SystemTime::now();
    let mut out = Vec::new();
    for entry in rd.flatten() {
        let path = entry.path();
        let Some(id) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let is_cache = repo_dir(root, &id).is_ok()
            && path.is_dir()
            && [INDEX_FILE, LOCATION_FILE, "bases.idx"]
                .iter()
                .any(|f| path.join(f).exists());
        if !is_cache {
            continue;
        }
        let newest = std::fs::read_dir(&path)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.metadata().ok()?.modified().ok())
                    .max()
            })
            .ok()
            .flatten();
        let age_secs = newest
            .and_then(|t| now.duration_since(t).ok())
            .map_or(0, |d| d.as_secs());
        let location = std::fs::read_to_string(path.join(LOCATION_FILE))
            .ok()
            .filter(|l| !l.is_empty())
            .map(PathBuf::from);
        let state = if location.as_deref().is_some_and(|l| repository_gone(l, &id)) {
            CacheState::Gone
        } else if age_secs > max_age_secs {
            CacheState::Old
        } else {
            CacheState::Current
        };
        out.push(CacheDir {
            bytes: dir_bytes(&path),
            id,
            path,
            age_secs,
            location,
            state,
        });
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Removes a repository's cache directory (see [`list_caches`]).
///
/// # Errors
/// [`Error::Io`] if it cannot be removed.
pub fn remove_cache(dir: &CacheDir) -> Result<()> {
    std::fs::remove_dir_all(&dir.path)
        .map_err(|e| Error::io(format!("removing {}", dir.path.display()), e))
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

    /// A cache whose recorded local repository is gone, or holds another repository, is
    /// `Gone`; one without a location is judged by age only; other directories are no caches.
    #[test]
    fn caches_of_gone_repositories_are_found() {
        let root = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let cfg = crate::format::config::RepoConfig::new("abc".into());
        std::fs::write(repo.path().join("config"), cfg.to_bytes()).unwrap();
        for (id, loc) in [
            ("abc", Some(repo.path().to_path_buf())),
            ("other", Some(repo.path().to_path_buf())),
            ("gone", Some(root.path().join("nowhere"))),
            ("remote", None),
        ] {
            let dir = root.path().join(id);
            std::fs::create_dir(&dir).unwrap();
            mark_used(&dir, loc.as_deref());
        }
        std::fs::create_dir(root.path().join("not-a-cache")).unwrap();
        let states: Vec<(String, CacheState)> = list_caches(root.path(), 3600)
            .unwrap()
            .into_iter()
            .map(|c| (c.id, c.state))
            .collect();
        let want = [
            ("abc", CacheState::Current),
            ("gone", CacheState::Gone),
            ("other", CacheState::Gone),
            ("remote", CacheState::Current),
        ];
        assert_eq!(
            states,
            want.map(|(i, s)| (i.to_string(), s)).to_vec(),
            "{states:?}"
        );
        let c = &list_caches(root.path(), 0).unwrap()[0];
        assert!(c.age_secs < 60);
        remove_cache(c).unwrap();
        assert_eq!(list_caches(root.path(), 3600).unwrap().len(), 3);
    }

    /// Marking a cache used again keeps its location and makes it young again (the file is
    /// touched, not rewritten); a new location replaces the old one.
    #[test]
    fn marking_a_cache_used_again_touches_its_location_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(LOCATION_FILE);
        mark_used(dir.path(), Some(Path::new("/repo/a")));
        let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.set_modified(day_ago).unwrap();
        drop(f);
        mark_used(dir.path(), Some(Path::new("/repo/a")));
        assert_eq!(std::fs::read(&file).unwrap(), b"/repo/a");
        let age = std::fs::metadata(&file)
            .unwrap()
            .modified()
            .unwrap()
            .elapsed();
        assert!(age.as_ref().is_ok_and(|a| a.as_secs() < 3600), "{age:?}");
        mark_used(dir.path(), Some(Path::new("/repo/b")));
        assert_eq!(std::fs::read(&file).unwrap(), b"/repo/b");
        mark_used(dir.path(), None);
        assert_eq!(std::fs::read(&file).unwrap(), b"");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
    }

    #[test]
    fn only_plain_ids_name_a_directory() {
        let root = Path::new("/c");
        assert_eq!(repo_dir(root, "ab-1_2").unwrap(), root.join("ab-1_2"));
        for bad in ["", "..", "a/b", "a b", &"x".repeat(65)] {
            assert!(repo_dir(root, bad).is_err(), "{bad:?}");
        }
    }
}
