//! `dedelta cat`: prints one repository object decoded, for debugging (restic's `cat`):
//! `config`, `snapshot ID`, `tree ID` (a snapshot's tree stream, one JSON object per node
//! with its recipe), `container ID` (its metadata), `index` (the client's chunk index, one
//! JSON object per chunk), `chunk ID` (the chunk's bytes, rebuilt and verified). IDs are
//! unique prefixes (`latest` for a snapshot). Objects that are JSON are printed as JSON.
//!
//! Exit codes: 0 printed; 1 no such object or it could not be decoded; 10 no repository.

use super::{open_reader, RepoArg};
use crate::render::outln;
use anyhow::Result;
use clap::{Args, ValueEnum};
use dedelta_core::ChunkId;
use dedelta_store::backend::FileKind;
use dedelta_store::format::container::EntryKind;
use dedelta_store::read::{walk_tree, ChunkReader};
use dedelta_store::repository::read_container_meta;
use dedelta_store::Error;
use serde_json::json;
use std::io::Write;

/// What `cat` prints.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CatObject {
    /// The repository config.
    Config,
    /// A snapshot file (ID: id prefix or `latest`).
    Snapshot,
    /// A snapshot's tree stream, one JSON object per node (ID: snapshot id or `latest`).
    Tree,
    /// A container's metadata: regions and chunk entries.
    Container,
    /// The client's chunk index: one JSON object per chunk.
    Index,
    /// A chunk's content, rebuilt from its delta if it is one, to standard output.
    Chunk,
}

/// Arguments of `dedelta cat`.
#[derive(Args)]
pub struct CatArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// The kind of object.
    object: CatObject,
    /// Its id (a unique prefix; `latest` for a snapshot or tree).
    id: Option<String>,
}

/// The one object name of `kind` that starts with `prefix`.
fn resolve(r: &dedelta_store::Repository, kind: FileKind, prefix: &str) -> Result<String> {
    let names: Vec<String> = r
        .backend()
        .list(kind)?
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.starts_with(prefix))
        .collect();
    match names.len() {
        1 => Ok(names.into_iter().next().unwrap_or_default()),
        0 => Err(Error::InvalidOption(format!("no {kind:?} object starts with {prefix:?}")).into()),
        n => Err(Error::InvalidOption(format!("{prefix:?} matches {n} {kind:?} objects")).into()),
    }
}

/// Prints the object.
pub fn run(args: CatArgs) -> Result<u8> {
    let need_id = || {
        args.id.clone().ok_or_else(|| {
            Error::InvalidOption(format!("cat {:?} needs an ID", args.object).to_lowercase())
        })
    };
    match args.object {
        CatObject::Config => {
            let r = args.repo.open_repository()?;
            print_pretty(&json!(r.config()))?;
        }
        CatObject::Snapshot => {
            let r = args.repo.open_repository()?;
            let (id, snap) = r.find_snapshot(&need_id()?)?;
            let mut v = json!(snap);
            v["id"] = json!(id.to_hex());
            print_pretty(&v)?;
        }
        CatObject::Tree => {
            let (r, _lock) = open_reader(&args.repo, "cat")?;
            let (_, snap) = r.find_snapshot(&need_id()?)?;
            walk_tree(&r, &snap, |n, chunks| {
                let line = json!({
                    "path": format!("/{}", n.path_lossy()),
                    "type": n.kind,
                    "mode": n.mode,
                    "size": n.size,
                    "mtime": n.mtime_secs,
                    "mtime_nanos": n.mtime_nanos,
                    "target": String::from_utf8_lossy(&n.target),
                    "uid": n.meta.uid,
                    "gid": n.meta.gid,
                    "flags": n.meta.flags,
                    "xattrs": n.meta.xattrs.iter().map(|(k, _)| String::from_utf8_lossy(k)).collect::<Vec<_>>(),
                    "chunks": chunks.iter().map(|c| json!({"id": c.id.to_hex(), "len": c.len})).collect::<Vec<_>>(),
                });
                writeln!(std::io::stdout().lock(), "{line}")
                    .map_err(|e| dedelta_store::Error::io("writing to standard output", e))
            })?;
        }
        CatObject::Container => {
            let r = args.repo.open_repository()?;
            let name = resolve(&r, FileKind::Container, &need_id()?)?;
            let meta = read_container_meta(r.backend().as_ref(), &name)?;
            let regions: Vec<_> = meta
                .regions
                .iter()
                .map(|g| {
                    json!({"offset": g.offset, "stored_len": g.stored_len, "raw_len": g.raw_len,
                           "codec": g.codec, "crc": g.crc})
                })
                .collect();
            let entries: Vec<_> = meta
                .entries
                .iter()
                .map(|e| {
                    let (kind, base, inversed) = match e.kind {
                        EntryKind::Full => ("full", None, false),
                        EntryKind::Delta { base, inversed } => {
                            ("delta", Some(base.to_hex()), inversed)
                        }
                    };
                    json!({"id": e.id.to_hex(), "kind": kind, "base": base, "inversed": inversed,
                           "region": e.region, "offset": e.offset, "stored_len": e.stored_len,
                           "original_len": e.original_len, "super_features": e.super_features})
                })
                .collect();
            print_pretty(&json!({"id": name, "regions": regions, "entries": entries}))?;
        }
        CatObject::Index => {
            let (r, _lock) = open_reader(&args.repo, "cat")?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let mut err = None;
            r.index().for_each(|id, loc| {
                if err.is_none() {
                    let line = json!({"id": id.to_hex(), "container": loc.container.to_hex(),
                                      "entry": loc.entry});
                    if let Err(e) = writeln!(out, "{line}") {
                        err = Some(e);
                    }
                }
            })?;
            if let Some(e) = err {
                return Err(dedelta_store::Error::io("writing to standard output", e).into());
            }
            out.flush()?;
        }
        CatObject::Chunk => {
            let (r, _lock) = open_reader(&args.repo, "cat")?;
            let spec = need_id()?;
            let id = ChunkId::from_lowercase_hex(&spec).ok_or_else(|| {
                Error::InvalidOption(format!("{spec:?} is not a chunk id (64 lowercase hex)"))
            })?;
            let data = ChunkReader::new(&r, 8 << 20)?.read_chunk(&id)?;
            std::io::stdout().lock().write_all(&data)?;
        }
    }
    Ok(0)
}

/// Writes `v` as indented JSON.
fn print_pretty(v: &serde_json::Value) -> Result<()> {
    outln!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}
