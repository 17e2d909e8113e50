//! The tools dedelta is compared with, run on the same dataset in the same run: restic
//! (`--compression auto`), rustic (its defaults), borg (`zstd,3`), `zstd -3 --long=31` over the concatenated
//! versions, and chains of `zstd --patch-from` and `xdelta3` deltas against the previous
//! version. A tool that is not installed (`scripts/install-peers.sh` installs them) is
//! skipped with a note in the report.
//!
//! What is measured: stored bytes (the repository directory for restic, rustic and borg, the output
//! files otherwise), the wall time of storing every version, and the wall time of restoring:
//! the last version for restic, rustic and borg, the whole chain (every version, in order) for the
//! patch chains, and the whole stream for `zstd --long`.

use crate::dataset::Dataset;
use crate::error::{EvalError, IoContext, Result};
use crate::runner::{du, ratio, ConfigResult, VersionRow};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Peers' names, in report order.
pub const PEERS: [&str; 6] = [
    "restic",
    "rustic",
    "borg",
    "zstd-long",
    "zstd-patch-chain",
    "xdelta3-chain",
];

/// What the peers produced.
#[derive(Debug, Default)]
pub struct PeerOutcome {
    /// One summary per peer that ran.
    pub results: Vec<ConfigResult>,
    /// Per-version rows (where a peer has them).
    pub rows: Vec<VersionRow>,
    /// Peers skipped and why.
    pub notes: Vec<String>,
}

/// Finds a program on `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

fn run(cmd: &mut Command, stdin_file: Option<&Path>, stdout_file: Option<&Path>) -> Result<()> {
    let tool = cmd.get_program().to_string_lossy().into_owned();
    if let Some(p) = stdin_file {
        cmd.stdin(std::fs::File::open(p).ctx(|| format!("opening {}", p.display()))?);
    } else {
        cmd.stdin(Stdio::null());
    }
    if let Some(p) = stdout_file {
        cmd.stdout(std::fs::File::create(p).ctx(|| format!("creating {}", p.display()))?);
    } else {
        cmd.stdout(Stdio::null());
    }
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .ctx(|| format!("running {tool}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err
            .chars()
            .rev()
            .take(400)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return Err(EvalError::Tool {
            tool,
            reason: format!("{}: {}", out.status, tail.trim()),
        });
    }
    Ok(())
}

fn base(name: &str, description: &str, dataset: &Dataset) -> ConfigResult {
    ConfigResult {
        name: name.into(),
        kind: "peer".into(),
        description: description.into(),
        versions: dataset.versions.len(),
        logical_bytes: dataset.total_bytes(),
        ..ConfigResult::default()
    }
}

fn finish(r: &mut ConfigResult, stored: u64, backup_s: f64, restored: u64, restore_s: f64) {
    r.stored_bytes = stored;
    r.repo_bytes = stored;
    r.total_factor = ratio(r.logical_bytes, stored);
    r.backup_seconds = backup_s;
    r.backup_mb_s = r.logical_bytes as f64 / 1e6 / backup_s.max(1e-9);
    r.restore_bytes = restored;
    r.restore_seconds = Some(restore_s);
    r.restore_mb_s = Some(restored as f64 / 1e6 / restore_s.max(1e-9));
}

fn row(name: &str, i: usize, dataset: &Dataset, cumulative: u64, secs: f64) -> VersionRow {
    VersionRow {
        config: name.into(),
        version: i,
        version_name: dataset.versions[i].name.clone(),
        logical_bytes: dataset.versions[i].len_bytes,
        cumulative_stored_bytes: cumulative,
        backup_seconds: secs,
        ..VersionRow::default()
    }
}

fn same(a: &Path, b: &Path) -> Result<bool> {
    let ma = std::fs::metadata(a).ctx(|| format!("reading {}", a.display()))?;
    let mb = std::fs::metadata(b).ctx(|| format!("reading {}", b.display()))?;
    if ma.len() != mb.len() {
        return Ok(false);
    }
    Ok(std::fs::read(a).ctx(|| format!("reading {}", a.display()))?
        == std::fs::read(b).ctx(|| format!("reading {}", b.display()))?)
}

fn check_restore(name: &str, original: &Path, restored: &Path) -> Result<()> {
    if same(original, restored)? {
        Ok(())
    } else {
        Err(EvalError::Tool {
            tool: name.into(),
            reason: format!("restored {} differs from the original", original.display()),
        })
    }
}

/// How to drive one tool of the restic family (restic itself, rustic): the same repository
/// model and the same steps, with different spellings.
struct ResticFamily {
    name: &'static str,
    program: PathBuf,
    description: &'static str,
    /// Sets the password, cache, threads and repository of a command.
    env: fn(&mut Command, &Path, usize),
    /// `backup` of a directory (the path follows).
    backup: &'static [&'static str],
    /// `backup` of standard input as a file named `data`.
    backup_stdin: &'static [&'static str],
    /// Writes file `data` of the latest snapshot to standard output.
    dump: &'static [&'static str],
    /// Restores the latest snapshot into the directory that follows.
    restore: &'static [&'static str],
}

fn restic_env(c: &mut Command, work: &Path, threads: usize) {
    c.env("RESTIC_PASSWORD", "dedelta-eval")
        .env("RESTIC_CACHE_DIR", work.join("cache"))
        .env("GOMAXPROCS", threads.to_string())
        .arg("-r")
        .arg(work.join("repo"))
        .arg("-q");
}

fn rustic_env(c: &mut Command, work: &Path, _threads: usize) {
    c.env("RUSTIC_PASSWORD", "dedelta-eval")
        .env("RUSTIC_CACHE_DIR", work.join("cache"))
        .args(["--no-progress", "--log-level", "warn", "-r"])
        .arg(work.join("repo"));
}

fn restic() -> ResticFamily {
    ResticFamily {
        name: "restic",
        program: PathBuf::from("restic"),
        description: "restic --compression auto (stdin per version)",
        env: restic_env,
        backup: &["backup", "--compression", "auto"],
        backup_stdin: &[
            "backup",
            "--compression",
            "auto",
            "--stdin",
            "--stdin-filename",
            "data",
        ],
        dump: &["dump", "latest", "data"],
        restore: &["restore", "latest", "--target"],
    }
}

fn rustic(program: PathBuf) -> ResticFamily {
    ResticFamily {
        name: "rustic",
        program,
        description: "rustic, its default compression (stdin per version)",
        env: rustic_env,
        backup: &["backup"],
        // Without --force, rustic 0.11.4 takes a later stdin backup for unchanged from its
        // parent and stores the parent's content again (found by this module's test).
        backup_stdin: &["backup", "--force", "-", "--stdin-filename", "data"],
        dump: &["dump", "latest:data"],
        restore: &["restore", "latest"],
    }
}

/// Where rustic is: on `PATH`, else where `scripts/install-peers.sh --rustic` caches it.
fn rustic_program() -> Option<PathBuf> {
    which("rustic").or_else(|| {
        let cached =
            PathBuf::from(std::env::var_os("HOME")?).join(".cache/dedelta-peers/rustic/bin/rustic");
        cached.is_file().then_some(cached)
    })
}

fn restic_family(
    tool: &ResticFamily,
    d: &Dataset,
    work: &Path,
    threads: usize,
) -> Result<(ConfigResult, Vec<VersionRow>)> {
    let name = tool.name;
    let repo = work.join("repo");
    let command = || {
        let mut c = Command::new(&tool.program);
        (tool.env)(&mut c, work, threads);
        c
    };
    run(command().arg("init"), None, None)?;
    let mut r = base(name, tool.description, d);
    let (mut rows, mut total) = (Vec::new(), 0.0);
    for (i, v) in d.versions.iter().enumerate() {
        let mut c = command();
        let t = Instant::now();
        if v.is_dir {
            run(c.args(tool.backup).arg(&v.path), None, None)?;
        } else {
            run(c.args(tool.backup_stdin), Some(&v.path), None)?;
        }
        let s = t.elapsed().as_secs_f64();
        total += s;
        rows.push(row(name, i, d, du(&repo), s));
    }
    let stored = du(&repo);
    let last = d
        .versions
        .last()
        .ok_or_else(|| EvalError::Dataset("empty".into()))?;
    let out = work.join("restored");
    let t = Instant::now();
    if last.is_dir {
        run(command().args(tool.restore).arg(&out), None, None)?;
    } else {
        run(command().args(tool.dump), None, Some(&out))?;
    }
    let rs = t.elapsed().as_secs_f64();
    if !last.is_dir {
        check_restore(name, &last.path, &out)?;
    }
    finish(&mut r, stored, total, last.len_bytes, rs);
    r.note = "restore: last version only".into();
    Ok((r, rows))
}

fn borg(d: &Dataset, work: &Path) -> Result<(ConfigResult, Vec<VersionRow>)> {
    let name = "borg";
    let repo = work.join("repo");
    let env = |c: &mut Command| {
        c.env("BORG_PASSPHRASE", "")
            .env("BORG_BASE_DIR", work.join("base"))
            .env("BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK", "yes")
            .env("BORG_RELOCATED_REPO_ACCESS_IS_OK", "yes");
    };
    let mut c = Command::new("borg");
    env(&mut c);
    run(c.args(["init", "-e", "none"]).arg(&repo), None, None)?;
    let mut r = base(
        name,
        "borg create --compression zstd,3 (stdin per version)",
        d,
    );
    let (mut rows, mut total) = (Vec::new(), 0.0);
    for (i, v) in d.versions.iter().enumerate() {
        let mut c = Command::new("borg");
        env(&mut c);
        c.args(["create", "--compression", "zstd,3"]);
        let archive = format!("{}::v{i:04}", repo.display());
        let t = Instant::now();
        if v.is_dir {
            run(c.arg(&archive).arg(&v.path), None, None)?;
        } else {
            run(
                c.args(["--stdin-name", "data"]).arg(&archive).arg("-"),
                Some(&v.path),
                None,
            )?;
        }
        let s = t.elapsed().as_secs_f64();
        total += s;
        rows.push(row(name, i, d, du(&repo), s));
    }
    let stored = du(&repo);
    let last_i = d.versions.len() - 1;
    let last = &d.versions[last_i];
    let out = work.join("restored");
    let archive = format!("{}::v{last_i:04}", repo.display());
    let t = Instant::now();
    let mut c = Command::new("borg");
    env(&mut c);
    if last.is_dir {
        std::fs::create_dir_all(&out).ctx(|| format!("creating {}", out.display()))?;
        run(c.current_dir(&out).arg("extract").arg(&archive), None, None)?;
    } else {
        run(
            c.args(["extract", "--stdout"]).arg(&archive),
            None,
            Some(&out),
        )?;
    }
    let rs = t.elapsed().as_secs_f64();
    if !last.is_dir {
        check_restore(name, &last.path, &out)?;
    }
    finish(&mut r, stored, total, last.len_bytes, rs);
    r.note = "restore: last version only".into();
    Ok((r, rows))
}

/// `zstd -3 --long=31` over the concatenation of the versions.
fn zstd_long(d: &Dataset, work: &Path, threads: usize) -> Result<(ConfigResult, Vec<VersionRow>)> {
    let name = "zstd-long";
    let out = work.join("all.zst");
    let t = Instant::now();
    let mut child = Command::new("zstd")
        .args(["-3", "--long=31", "-q", "-c", &format!("-T{threads}")])
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&out).ctx(|| format!("creating {}", out.display()))?)
        .stderr(Stdio::piped())
        .spawn()
        .ctx(|| "running zstd".into())?;
    if let Some(mut stdin) = child.stdin.take() {
        for v in &d.versions {
            let mut f =
                std::fs::File::open(&v.path).ctx(|| format!("opening {}", v.path.display()))?;
            std::io::copy(&mut f, &mut stdin).ctx(|| "feeding zstd".into())?;
        }
        stdin.flush().ctx(|| "feeding zstd".into())?;
    }
    let o = child.wait_with_output().ctx(|| "waiting for zstd".into())?;
    if !o.status.success() {
        return Err(EvalError::Tool {
            tool: "zstd".into(),
            reason: String::from_utf8_lossy(&o.stderr).into_owned(),
        });
    }
    let backup_s = t.elapsed().as_secs_f64();
    let stored = du(&out);
    // Restore: decompress the whole stream, counting (and not keeping) the bytes.
    let t = Instant::now();
    let mut child = Command::new("zstd")
        .args(["-d", "--long=31", "-q", "-c"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ctx(|| "running zstd -d".into())?;
    let mut restored = 0u64;
    if let Some(mut so) = child.stdout.take() {
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = so.read(&mut buf).ctx(|| "reading zstd -d".into())?;
            if n == 0 {
                break;
            }
            restored += n as u64;
        }
    }
    child.wait().ctx(|| "waiting for zstd -d".into())?;
    let rs = t.elapsed().as_secs_f64();
    if restored != d.total_bytes() {
        return Err(EvalError::Tool {
            tool: "zstd -d".into(),
            reason: format!("restored {restored} bytes, expected {}", d.total_bytes()),
        });
    }
    let mut r = base(name, "zstd -3 --long=31 over the concatenated versions", d);
    finish(&mut r, stored, backup_s, restored, rs);
    r.note = "one stream: no per-version size; restore = the whole stream".into();
    Ok((r, Vec::new()))
}

/// A chain of deltas, each version against the previous one (the first one alone).
fn chain(d: &Dataset, work: &Path, xdelta: bool) -> Result<(ConfigResult, Vec<VersionRow>)> {
    let name = if xdelta {
        "xdelta3-chain"
    } else {
        "zstd-patch-chain"
    };
    let (mut rows, mut total, mut cumulative) = (Vec::new(), 0.0, 0u64);
    let mut outs = Vec::new();
    for (i, v) in d.versions.iter().enumerate() {
        let out = work.join(format!("p{i:04}"));
        let mut c = if xdelta {
            let mut c = Command::new("xdelta3");
            c.args(["-e", "-f", "-q"]);
            if i > 0 {
                let prev = &d.versions[i - 1];
                let window = prev
                    .len_bytes
                    .max(v.len_bytes)
                    .next_power_of_two()
                    .max(1 << 24);
                c.arg("-B")
                    .arg(window.to_string())
                    .arg("-s")
                    .arg(&prev.path);
            }
            c
        } else {
            let mut c = Command::new("zstd");
            c.args(["-3", "-q", "-f"]);
            if i > 0 {
                c.arg("--long=31")
                    .arg(format!("--patch-from={}", d.versions[i - 1].path.display()));
            }
            c
        };
        if xdelta {
            c.arg(&v.path).arg(&out);
        } else {
            c.arg(&v.path).arg("-o").arg(&out);
        }
        let t = Instant::now();
        run(&mut c, None, None)?;
        let s = t.elapsed().as_secs_f64();
        total += s;
        cumulative += du(&out);
        rows.push(row(name, i, d, cumulative, s));
        outs.push(out);
    }
    // Restore: decode the chain in order, every version from its predecessor's original.
    let t = Instant::now();
    let restored_path = work.join("restored");
    for (i, out) in outs.iter().enumerate() {
        let mut c = if xdelta {
            let mut c = Command::new("xdelta3");
            c.args(["-d", "-f", "-q"]);
            if i > 0 {
                let prev = &d.versions[i - 1];
                let window = prev
                    .len_bytes
                    .max(d.versions[i].len_bytes)
                    .next_power_of_two()
                    .max(1 << 24);
                c.arg("-B")
                    .arg(window.to_string())
                    .arg("-s")
                    .arg(&prev.path);
            }
            c.arg(out).arg(&restored_path);
            c
        } else {
            let mut c = Command::new("zstd");
            c.args(["-d", "-q", "-f", "--long=31"]);
            if i > 0 {
                c.arg(format!("--patch-from={}", d.versions[i - 1].path.display()));
            }
            c.arg(out).arg("-o").arg(&restored_path);
            c
        };
        run(&mut c, None, None)?;
    }
    let rs = t.elapsed().as_secs_f64();
    if let Some(last) = d.versions.last() {
        check_restore(name, &last.path, &restored_path)?;
    }
    let description = if xdelta {
        "xdelta3 -e -s previous version (first version alone)"
    } else {
        "zstd -3 --patch-from=previous version --long=31 (first version alone)"
    };
    let mut r = base(name, description, d);
    finish(&mut r, cumulative, total, d.total_bytes(), rs);
    r.note = "restore = decoding every version of the chain in order".into();
    Ok((r, rows))
}

/// Runs every installed peer; a missing one, or one that cannot run on this dataset, is noted.
///
/// # Errors
/// The work directory cannot be created. A peer that fails is noted, not an error.
pub fn run_peers(dataset: &Dataset, work_dir: &Path, threads: usize) -> Result<PeerOutcome> {
    let mut outcome = PeerOutcome::default();
    for name in PEERS {
        let (program, found) = match name {
            "rustic" => ("rustic", rustic_program()),
            "borg" => ("borg", which("borg")),
            "xdelta3-chain" => ("xdelta3", which("xdelta3")),
            "restic" => ("restic", which("restic")),
            _ => ("zstd", which("zstd")),
        };
        let Some(found) = found else {
            outcome.notes.push(format!(
                "{name}: skipped, `{program}` is not installed (scripts/install-peers.sh)"
            ));
            continue;
        };
        if !dataset.all_files() && !["restic", "rustic", "borg"].contains(&name) {
            outcome.notes.push(format!(
                "{name}: skipped, the versions are directories, not files"
            ));
            continue;
        }
        let work = work_dir.join(name);
        if work.exists() {
            std::fs::remove_dir_all(&work).ctx(|| format!("clearing {}", work.display()))?;
        }
        std::fs::create_dir_all(&work).ctx(|| format!("creating {}", work.display()))?;
        let result = match name {
            "restic" => restic_family(&restic(), dataset, &work, threads),
            "rustic" => restic_family(&rustic(found), dataset, &work, threads),
            "borg" => borg(dataset, &work),
            "zstd-long" => zstd_long(dataset, &work, threads),
            "zstd-patch-chain" => chain(dataset, &work, false),
            _ => chain(dataset, &work, true),
        };
        match result {
            Ok((r, rows)) => {
                outcome.results.push(r);
                outcome.rows.extend(rows);
            }
            Err(e) => outcome.notes.push(format!("{name}: failed: {e}")),
        }
        // The peer's copies are not needed after measuring; keep only the numbers.
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two versions of a file and two of a directory, each a few hundred KB.
    fn datasets(root: &Path) -> (Dataset, Dataset) {
        let files = root.join("files");
        let dirs = root.join("dirs");
        let mut data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for v in 0..2 {
            data[1000 + v] ^= 0xff;
            std::fs::create_dir_all(dirs.join(format!("v{v}"))).unwrap();
            std::fs::create_dir_all(&files).unwrap();
            std::fs::write(files.join(format!("v{v}")), &data).unwrap();
            std::fs::write(dirs.join(format!("v{v}/f")), &data).unwrap();
        }
        (
            Dataset::open(&files).unwrap(),
            Dataset::open(&dirs).unwrap(),
        )
    }

    /// Each installed tool of the restic family stores every version and restores the last
    /// one bit-exact (files) or without error (directories); one not installed is skipped.
    #[test]
    fn restic_family_peers_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let (files, dirs) = datasets(tmp.path());
        let mut tools = Vec::new();
        if which("restic").is_some() {
            tools.push(restic());
        }
        if let Some(p) = rustic_program() {
            tools.push(rustic(p));
        }
        if tools.is_empty() {
            eprintln!("skipped: neither restic nor rustic is installed (scripts/install-peers.sh)");
        }
        for tool in &tools {
            for d in [&files, &dirs] {
                let work = tmp.path().join(format!("{}-{}", tool.name, d.name));
                std::fs::create_dir_all(&work).unwrap();
                let (r, rows) = restic_family(tool, d, &work, 2)
                    .unwrap_or_else(|e| panic!("{} on {}: {e}", tool.name, d.name));
                assert_eq!(rows.len(), 2, "{}", tool.name);
                assert!(r.stored_bytes > 0, "{}", tool.name);
            }
        }
    }
}
