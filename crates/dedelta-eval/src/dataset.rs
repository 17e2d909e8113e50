//! Datasets: an ordered series of versions, each one backup.
//!
//! A dataset is a directory whose entries (files or directories) are the versions, in
//! natural order of their names (`SQLAlchemy-2.0.9.tar` before `SQLAlchemy-2.0.10.tar`).
//! Names resolve to generated series (`synthetic`, `synthetic-small`, `sqlite`,
//! `sqlite-small`, `redis`, `redis-nolzf`, `redis-long`, `redis-small`), created on first use
//! in the data directory and reused after, or to a directory of the data directory (`sqla`,
//! `prettier`, `typescript`, as `scripts/datasets.sh` builds them).

use crate::error::{EvalError, IoContext, Result};
use crate::redis::{self, RedisParams};
use crate::sqlite::{self, SqliteParams};
use crate::synthetic::{self, SyntheticParams};
use std::cmp::Ordering;
use std::path::{Path, PathBuf};

/// One version of a dataset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// Its name (the entry's file name).
    pub name: String,
    /// The file or directory.
    pub path: PathBuf,
    /// Bytes of file content.
    pub len_bytes: u64,
    /// Whether it is a directory (backed up by path) rather than one file (by stream).
    pub is_dir: bool,
}

/// An ordered series of versions.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// Name shown in reports.
    pub name: String,
    /// Where the versions are.
    pub dir: PathBuf,
    /// The versions, oldest first.
    pub versions: Vec<Version>,
}

impl Dataset {
    /// Bytes of all versions.
    pub fn total_bytes(&self) -> u64 {
        self.versions.iter().map(|v| v.len_bytes).sum()
    }

    /// Reads every file of every version once and returns the bytes read, so that the first
    /// configuration measured does not pay for a cold page cache that the later ones do not
    /// (the first of eleven configurations used to run from disk, the others from memory).
    ///
    /// # Errors
    /// A file cannot be read.
    pub fn warm_page_cache(&self) -> Result<u64> {
        fn read_all(path: &Path) -> Result<u64> {
            let what = || format!("reading {}", path.display());
            let meta = std::fs::symlink_metadata(path).ctx(what)?;
            if meta.is_dir() {
                let mut n = 0;
                for e in std::fs::read_dir(path).ctx(what)? {
                    n += read_all(&e.ctx(what)?.path())?;
                }
                Ok(n)
            } else if meta.is_file() {
                let mut f = std::fs::File::open(path).ctx(what)?;
                std::io::copy(&mut f, &mut std::io::sink()).ctx(what)
            } else {
                Ok(0)
            }
        }
        self.versions.iter().map(|v| read_all(&v.path)).sum()
    }

    /// Whether every version is a single file (peers that work on files can run).
    pub fn all_files(&self) -> bool {
        self.versions.iter().all(|v| !v.is_dir)
    }

    /// Reads a dataset directory.
    ///
    /// # Errors
    /// The directory cannot be read or holds no version.
    pub fn open(dir: &Path) -> Result<Self> {
        let rd = std::fs::read_dir(dir).ctx(|| format!("reading dataset {}", dir.display()))?;
        let mut versions = Vec::new();
        for e in rd {
            let e = e.ctx(|| format!("reading dataset {}", dir.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name.ends_with(".part") || name == COMPLETE {
                continue;
            }
            let path = e.path();
            let meta = std::fs::metadata(&path).ctx(|| format!("reading {}", path.display()))?;
            let (len_bytes, is_dir) = if meta.is_dir() {
                (dir_bytes(&path)?, true)
            } else {
                (meta.len(), false)
            };
            versions.push(Version {
                name,
                path,
                len_bytes,
                is_dir,
            });
        }
        if versions.is_empty() {
            return Err(EvalError::Dataset(format!(
                "{} holds no version",
                dir.display()
            )));
        }
        versions.sort_by(|a, b| natural_cmp(&a.name, &b.name));
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        Ok(Dataset {
            name,
            dir: dir.to_path_buf(),
            versions,
        })
    }

    /// Resolves `spec`: an existing directory, a generated series' name, or a directory
    /// under `data_dir`. Generated series are written to `data_dir` on first use.
    ///
    /// # Errors
    /// Unknown name, generation failure, or an empty directory.
    pub fn resolve(spec: &str, data_dir: &Path) -> Result<Self> {
        let as_path = Path::new(spec);
        if as_path.is_dir() {
            return Self::open(as_path);
        }
        let generated = |dir_name: String, gen: &dyn Fn(&Path) -> Result<()>| -> Result<Self> {
            let dir = data_dir.join(dir_name);
            if !dir.join(COMPLETE).exists() {
                if dir.exists() {
                    std::fs::remove_dir_all(&dir).ctx(|| format!("clearing {}", dir.display()))?;
                }
                gen(&dir)?;
                std::fs::write(dir.join(COMPLETE), b"")
                    .ctx(|| format!("writing {}", dir.display()))?;
            }
            let mut d = Self::open(&dir)?;
            d.name = spec.to_string();
            Ok(d)
        };
        let synth = |p: SyntheticParams| {
            generated(p.dir_name(), &|dir| {
                synthetic::generate(dir, &p).map(|_| ())
            })
        };
        let db =
            |p: SqliteParams| generated(p.dir_name(), &|dir| sqlite::generate(dir, &p).map(|_| ()));
        let rdb =
            |p: RedisParams| generated(p.dir_name(), &|dir| redis::generate(dir, &p).map(|_| ()));
        match spec {
            "synthetic" => synth(SyntheticParams::standard(1)),
            "synthetic-small" => synth(SyntheticParams::small(1)),
            "sqlite" => db(SqliteParams::standard(1)),
            "sqlite-small" => db(SqliteParams {
                versions: 4,
                rows: 5_000,
                ..SqliteParams::standard(1)
            }),
            "redis" => rdb(RedisParams::standard(1)),
            "redis-nolzf" => rdb(RedisParams {
                rdb_compression: false,
                ..RedisParams::standard(1)
            }),
            "redis-long" => rdb(RedisParams {
                versions: 30,
                ..RedisParams::standard(1)
            }),
            "redis-small" => rdb(RedisParams::small(1)),
            _ => {
                let dir = data_dir.join(spec);
                if dir.is_dir() && !spec.contains("..") {
                    let mut d = Self::open(&dir)?;
                    d.name = spec.to_string();
                    Ok(d)
                } else {
                    Err(EvalError::Dataset(format!(
                        "{spec:?} is neither a directory nor a known name (synthetic, \
                         synthetic-small, sqlite, sqlite-small, redis, redis-nolzf, redis-long, \
                         redis-small, or a \
                         directory of {}; \
                         scripts/datasets.sh builds sqla, prettier and typescript there)",
                        data_dir.display()
                    )))
                }
            }
        }
    }

    /// Keeps the first `n` versions.
    pub fn truncate(&mut self, n: usize) {
        self.versions.truncate(n.max(1));
    }
}

/// Marks a generated series as complete.
const COMPLETE: &str = ".complete";

fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ctx(|| format!("reading {}", d.display()))? {
            let e = e.ctx(|| format!("reading {}", d.display()))?;
            let meta = e
                .metadata()
                .ctx(|| format!("reading {}", e.path().display()))?;
            if meta.is_dir() {
                stack.push(e.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

/// Compares names with runs of digits compared as numbers.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    fn parts(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (pa, pb) = (parts(a), parts(b));
    for (x, y) in pa.iter().zip(&pb) {
        let o = match (x.0, y.0) {
            (true, true) => {
                let (tx, ty) = (x.1.trim_start_matches('0'), y.1.trim_start_matches('0'));
                tx.len().cmp(&ty.len()).then(tx.cmp(ty))
            }
            _ => x.1.cmp(y.1),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    pa.len().cmp(&pb.len()).then(a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["S-2.0.10.tar", "S-2.0.9.tar", "S-2.0.0.tar", "S-2.0.1.tar"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            ["S-2.0.0.tar", "S-2.0.1.tar", "S-2.0.9.tar", "S-2.0.10.tar"]
        );
    }

    #[test]
    fn warm_page_cache_reads_every_file_of_every_version() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("v1.tar"), vec![1u8; 3000]).unwrap();
        std::fs::create_dir_all(d.path().join("v2/sub")).unwrap();
        std::fs::write(d.path().join("v2/a"), vec![2u8; 100]).unwrap();
        std::fs::write(d.path().join("v2/sub/b"), vec![3u8; 2_000_000]).unwrap();
        let ds = Dataset::open(d.path()).unwrap();
        assert_eq!(ds.warm_page_cache().unwrap(), 3000 + 100 + 2_000_000);
    }

    #[test]
    fn unknown_name_is_a_clear_error() {
        let d = tempfile::tempdir().unwrap();
        let e = Dataset::resolve("no-such-set", d.path()).unwrap_err();
        assert!(e.to_string().contains("neither a directory"), "{e}");
    }
}
