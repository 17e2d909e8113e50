//! Synthetic backup series (DARE §4.1, after Tarasov et al., "Generating realistic datasets
//! for deduplication analysis", ATC 2012).
//!
//! A file tree of source-like text files is mutated from one version to the next: a given
//! percentage of the files is modified (each modification at the beginning, middle or end of
//! the file: bytes overwritten, inserted or deleted), a percentage deleted and a percentage of
//! new files created. Each version is written as one plain `.tar` (the papers' TAR workload),
//! so every tool in the comparison sees the same bytes. Everything is deterministic from the
//! seed. Choice: a tree model in memory serialised to tar, rather than a directory per
//! version, so versions are single files that peers, patch chains and `--stdin` backups all
//! treat alike.

use crate::error::{IoContext, Result};
use crate::rng::Rng;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The parameters of a synthetic series.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SyntheticParams {
    /// Seed of every random choice.
    pub seed: u64,
    /// Versions to write.
    pub versions: usize,
    /// Files in the first version.
    pub files: usize,
    /// Mean file size in bytes (sizes are uniform in 1 KiB ..= 2 x mean).
    pub mean_file_bytes: usize,
    /// Fraction of files modified per version (0.2 = 20 %).
    pub modify: f64,
    /// Fraction of files deleted per version.
    pub delete: f64,
    /// New files per version, as a fraction of the files.
    pub new: f64,
}

impl SyntheticParams {
    /// The default series: 10 versions of about 64 MiB (2048 files of 32 KiB mean),
    /// 20 % modified, 1 % deleted, 1 % new per version.
    pub fn standard(seed: u64) -> Self {
        SyntheticParams {
            seed,
            versions: 10,
            files: 2048,
            mean_file_bytes: 32 << 10,
            modify: 0.2,
            delete: 0.01,
            new: 0.01,
        }
    }

    /// A small series for tests: 4 versions of about 2 MiB (64 files of 32 KiB mean).
    pub fn small(seed: u64) -> Self {
        SyntheticParams {
            versions: 4,
            files: 64,
            ..SyntheticParams::standard(seed)
        }
    }

    /// A name that identifies the series (used as a directory name in the data cache).
    pub fn dir_name(&self) -> String {
        format!(
            "synthetic-s{}-v{}-f{}-m{}-{}-{}-{}",
            self.seed,
            self.versions,
            self.files,
            self.mean_file_bytes,
            self.modify,
            self.delete,
            self.new
        )
    }
}

/// Words that source-like lines are made of (so the text compresses like code).
const WORDS: &[&str] = &[
    "fn", "let", "mut", "self", "return", "if", "else", "for", "in", "while", "match", "struct",
    "impl", "pub", "use", "const", "static", "value", "index", "buffer", "count", "offset",
    "length", "result", "error", "config", "table", "query", "session", "engine", "column", "row",
    "select", "insert", "update", "delete", "where", "from", "join", "order", "group", "None",
    "Some", "Ok", "Err", "true", "false", "0", "1", "42", "255", "4096", "=", "==", "+", "-", "*",
    "(", ")", "{", "}", "[", "]", ";", ",", ".", "->", "&", "\"text\"",
];

struct File {
    name: String,
    data: Vec<u8>,
    mtime: u64,
}

fn text(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    while out.len() < len {
        let indent = rng.below(4) as usize * 4;
        out.resize(out.len() + indent, b' ');
        let words = rng.range(2, 12);
        for w in 0..words {
            if w > 0 {
                out.push(b' ');
            }
            // Identifiers with numbers make lines distinct, like real code.
            if rng.below(6) == 0 {
                out.extend_from_slice(format!("v{}", rng.below(5000)).as_bytes());
            } else {
                out.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes());
            }
        }
        out.push(b'\n');
    }
    out.truncate(len);
    out
}

fn new_file(rng: &mut Rng, p: &SyntheticParams, serial: usize, version: usize) -> File {
    let len = rng.range(1024, (2 * p.mean_file_bytes as u64).max(1024)) as usize;
    File {
        name: format!("tree/d{:02}/f{serial:06}.src", serial % 17),
        data: text(rng, len),
        mtime: version as u64,
    }
}

/// One modification at the beginning, middle or end: overwrite, insert or delete.
fn modify(rng: &mut Rng, data: &mut Vec<u8>) {
    let edit = rng.range(16, 256) as usize;
    let len = data.len();
    let at = match rng.below(3) {
        0 => rng.below((len / 10) as u64 + 1) as usize,
        1 => len / 2 - len / 20 + rng.below((len / 10) as u64 + 1) as usize,
        _ => len - rng.below((len / 10) as u64 + 1) as usize,
    }
    .min(len);
    match rng.below(3) {
        0 => {
            let new = text(rng, edit);
            let end = (at + edit).min(len);
            data.splice(at..end, new);
        }
        1 => {
            let new = text(rng, edit);
            data.splice(at..at, new);
        }
        _ => {
            let end = (at + edit).min(len);
            data.drain(at..end);
        }
    }
}

/// How many of `n` items a fraction selects: the integer part always, the rest by chance.
fn how_many(rng: &mut Rng, n: usize, fraction: f64) -> usize {
    let x = n as f64 * fraction;
    x.floor() as usize + usize::from(rng.chance(x.fract()))
}

/// Writes the versions as `DIR/v000.tar`, `DIR/v001.tar`, ...; returns their paths.
///
/// # Errors
/// A file cannot be written.
pub fn generate(dir: &Path, p: &SyntheticParams) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
    let mut rng = Rng::new(p.seed);
    let mut serial = 0;
    let mut files: Vec<File> = (0..p.files)
        .map(|_| {
            serial += 1;
            new_file(&mut rng, p, serial, 0)
        })
        .collect();
    let mut paths = Vec::new();
    for v in 0..p.versions {
        if v > 0 {
            for _ in 0..how_many(&mut rng, files.len(), p.delete) {
                if files.len() > 1 {
                    let i = rng.below(files.len() as u64) as usize;
                    files.remove(i);
                }
            }
            let n = files.len();
            for f in files.iter_mut() {
                if rng.chance(p.modify) {
                    for _ in 0..rng.range(1, 3) {
                        modify(&mut rng, &mut f.data);
                    }
                    f.mtime = v as u64;
                }
            }
            for _ in 0..how_many(&mut rng, n, p.new) {
                serial += 1;
                let f = new_file(&mut rng, p, serial, v);
                let at = rng.below(files.len() as u64 + 1) as usize;
                files.insert(at, f);
            }
        }
        let path = dir.join(format!("v{v:03}.tar"));
        let part = path.with_extension("tar.part");
        let file = std::fs::File::create(&part).ctx(|| format!("creating {}", part.display()))?;
        let mut w = std::io::BufWriter::new(file);
        let mut sorted: Vec<&File> = files.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        for f in sorted {
            write_tar_entry(&mut w, &f.name, &f.data, 1_700_000_000 + f.mtime * 86_400)
                .ctx(|| format!("writing {}", part.display()))?;
        }
        w.write_all(&[0u8; 1024])
            .and_then(|_| w.flush())
            .ctx(|| format!("writing {}", part.display()))?;
        drop(w);
        std::fs::rename(&part, &path).ctx(|| format!("renaming {}", part.display()))?;
        paths.push(path);
    }
    Ok(paths)
}

/// Writes one regular file as a ustar entry (header, data, padding to 512 bytes).
pub fn write_tar_entry(
    w: &mut dyn Write,
    name: &str,
    data: &[u8],
    mtime: u64,
) -> std::io::Result<()> {
    let mut h = [0u8; 512];
    let name = name.as_bytes();
    if name.len() > 100 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "tar name longer than 100 bytes",
        ));
    }
    h[..name.len()].copy_from_slice(name);
    let mut field = |off: usize, width: usize, value: u64| {
        let s = format!("{value:0w$o}\0", w = width - 1);
        h[off..off + width].copy_from_slice(s.as_bytes());
    };
    field(100, 8, 0o644);
    field(108, 8, 1000);
    field(116, 8, 1000);
    field(124, 12, data.len() as u64);
    field(136, 12, mtime);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    w.write_all(&h)?;
    w.write_all(data)?;
    let pad = (512 - data.len() % 512) % 512;
    w.write_all(&vec![0u8; pad])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_changes_a_little() {
        let p = SyntheticParams {
            versions: 3,
            files: 20,
            mean_file_bytes: 4096,
            ..SyntheticParams::standard(5)
        };
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let pa = generate(a.path(), &p).unwrap();
        let pb = generate(b.path(), &p).unwrap();
        assert_eq!(pa.len(), 3);
        for (x, y) in pa.iter().zip(&pb) {
            assert_eq!(std::fs::read(x).unwrap(), std::fs::read(y).unwrap());
        }
        let v0 = std::fs::read(&pa[0]).unwrap();
        let v1 = std::fs::read(&pa[1]).unwrap();
        assert_ne!(v0, v1);
        assert_eq!(v0.len() % 512, 0);
        assert_eq!(&v0[257..262], b"ustar");
    }
}
