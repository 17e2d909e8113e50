//! docs/format.md and the code say the same thing.
//!
//! An independent restorer written from the document alone found the delta worked example's
//! total off by one (13 bytes printed for 12) and had to guess at region sizes, codecs, shard
//! names and the tree stream's records. These tests read the document itself where they can
//! (the worked example, the byte tables), so that editing either side alone fails here, and
//! check a real repository against the rules the document states.

use crate::support::{backup_options, backup_with, config, init_repo, locked, me, noise, text};
use dedelta_core::delta::{self, DeltaKind};
use dedelta_core::ChunkId;
use dedelta_store::commands::backup::{self, StdinSource};
use dedelta_store::format::config::{DeltaConfig, RepoConfig};
use dedelta_store::format::container::{self, ContainerId};
use dedelta_store::format::envelope;
use dedelta_store::format::tree::NodeKind;
use dedelta_store::read::walk_tree;
use dedelta_store::IndexedRepository;
use std::path::{Path, PathBuf};

const DOC: &str = include_str!("../../../../docs/format.md");

/// The rows of the first Markdown table after the first line that starts with `heading` (or of
/// the table whose header row it is), without its header and separator rows, split into
/// trimmed cells.
fn table_after(heading: &str) -> Vec<Vec<String>> {
    let mut lines = DOC
        .lines()
        .skip_while(|l| !l.starts_with(heading))
        .peekable();
    assert!(lines.peek().is_some(), "no {heading:?} in docs/format.md");
    if !heading.starts_with('|') {
        lines.next();
    }
    let rows: Vec<Vec<String>> = lines
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.replace("\\|", "\u{1}")
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().replace('\u{1}', "|"))
                .collect()
        })
        .collect();
    assert!(rows.len() > 2, "no table after {heading:?}");
    rows[2..].to_vec()
}

/// The (offset, size) columns of a byte table where both are plain numbers.
fn numeric_fields(heading: &str) -> Vec<(usize, usize)> {
    table_after(heading)
        .iter()
        .filter_map(|r| Some((r[0].parse().ok()?, r[1].parse().ok()?)))
        .collect()
}

/// The fields of a structure laid out back to back from offset 0, as (offset, size).
fn back_to_back(sizes: &[usize]) -> Vec<(usize, usize)> {
    let mut at = 0;
    sizes
        .iter()
        .map(|&s| {
            at += s;
            (at - s, s)
        })
        .collect()
}

/// Each byte table in the document matches the constants the encoders and decoders use.
#[test]
fn byte_tables_match_the_code() {
    use container::*;
    // Envelope: magic, version, flags, length; payload at 12; CRC32C trailer of 4.
    assert_eq!(
        numeric_fields("## Envelope"),
        vec![
            (envelope::MAGIC_OFFSET, 4),
            (envelope::VERSION_OFFSET, 2),
            (envelope::FLAGS_OFFSET, 2),
            (envelope::LEN_OFFSET, 4),
        ]
    );
    let env = table_after("## Envelope");
    assert_eq!(env[4][0], envelope::HEADER_LEN.to_string());
    assert_eq!(env[5][0], format!("{}+N", envelope::HEADER_LEN));
    assert_eq!(env[5][1], envelope::TRAILER_LEN.to_string());

    assert!(DOC.contains(&format!("### Header ({HEADER_LEN} bytes)")));
    assert_eq!(
        numeric_fields("### Header ("),
        vec![
            (HEADER_MAGIC_OFFSET, 4),
            (HEADER_VERSION_OFFSET, 2),
            (HEADER_FLAGS_OFFSET, 2),
            (HEADER_RESERVED_OFFSET, HEADER_LEN - HEADER_RESERVED_OFFSET),
        ]
    );
    assert!(DOC.contains(&format!("### Footer ({FOOTER_LEN} bytes")));
    assert_eq!(
        numeric_fields("### Footer ("),
        vec![
            (FOOTER_META_OFFSET_OFFSET, 8),
            (FOOTER_META_LEN_OFFSET, 4),
            (FOOTER_META_CRC_OFFSET, 4),
            (FOOTER_MAGIC_OFFSET, 4),
            (FOOTER_VERSION_OFFSET, 2),
            (FOOTER_RESERVED_OFFSET, FOOTER_LEN - FOOTER_RESERVED_OFFSET),
        ]
    );
    assert_eq!(
        numeric_fields("### Footer (").last().map(|(o, s)| o + s),
        Some(FOOTER_LEN)
    );

    let meta = table_after("### Metadata section");
    assert_eq!(meta[0][0], META_COUNT_LEN.to_string());
    assert_eq!(meta[1][0], format!("{REGION_RECORD_LEN} × R"));
    assert_eq!(meta[2][0], META_COUNT_LEN.to_string());

    assert!(DOC.contains(&format!("Region record ({REGION_RECORD_LEN} bytes)")));
    assert_eq!(
        numeric_fields("Region record ("),
        vec![
            (REGION_OFFSET_OFFSET, 4),
            (REGION_STORED_LEN_OFFSET, 4),
            (REGION_RAW_LEN_OFFSET, 4),
            (REGION_CODEC_OFFSET, 1),
            (REGION_CRC_OFFSET, REGION_RECORD_LEN - REGION_CRC_OFFSET),
        ]
    );
    assert_eq!(
        back_to_back(&[4, 4, 4, 1, 4]),
        numeric_fields("Region record (")
    );

    assert!(DOC.contains(&format!(
        "Entry record ({ENTRY_FIXED_LEN} bytes + {ENTRY_BASE_LEN} for a delta + {ENTRY_SF_LEN} per super-feature)"
    )));
    assert_eq!(
        numeric_fields("Entry record ("),
        vec![
            (ENTRY_ID_OFFSET, 32),
            (ENTRY_KIND_OFFSET, 1),
            (ENTRY_REGION_OFFSET, 4),
            (ENTRY_OFFSET_OFFSET, 4),
            (ENTRY_STORED_LEN_OFFSET, 4),
            (ENTRY_ORIGINAL_LEN_OFFSET, 4),
            (ENTRY_SF_COUNT_OFFSET, 1),
            (ENTRY_FIXED_LEN, ENTRY_BASE_LEN),
        ]
    );
    let entry = table_after("Entry record (");
    let last = entry.last().unwrap();
    assert_eq!(
        last[0],
        format!("{ENTRY_FIXED_LEN} or {}", ENTRY_FIXED_LEN + ENTRY_BASE_LEN)
    );
    assert_eq!(last[1], format!("{ENTRY_SF_LEN} × S"));
    assert!(entry[6][3].contains(&format!("0 ..= {MAX_SUPER_FEATURES}")));

    // Codec codes: exactly 0 and 1.
    let codecs = table_after("| codec | stored bytes |");
    let codes: Vec<&str> = codecs.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        codes,
        vec![
            dedelta_core::compress::CODEC_NONE.to_string(),
            dedelta_core::compress::CODEC_ZSTD.to_string()
        ]
    );
}

/// The delta worked example: the bytes printed in the table are what the `xdelta` encoder
/// writes and what the decoder reads back to the target, the total printed under the table
/// is their count, and each row is the instruction the layout rules give.
#[test]
fn delta_worked_example_matches_the_doc() {
    let section = DOC
        .split("### Worked example")
        .nth(1)
        .expect("worked example section");
    let backticked = |prefix: &str| -> Vec<u8> {
        let line = section
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line"));
        line.split('`').nth(1).unwrap().as_bytes().to_vec()
    };
    let base = backticked("Base (");
    let target = backticked("Target (");
    assert!(section.contains(&format!("Base ({} bytes)", base.len())));
    assert!(section.contains(&format!("Target ({} bytes)", target.len())));

    let rows = table_after("### Worked example");
    let mut doc_bytes = Vec::new();
    for row in &rows {
        for hex in row[0].trim_matches('`').split_whitespace() {
            doc_bytes.push(u8::from_str_radix(hex, 16).unwrap());
        }
    }
    let total = section
        .split("Total ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse::<usize>().ok())
        .expect("a \"Total N bytes\" line");
    assert_eq!(doc_bytes.len(), total, "the printed total is wrong");
    assert!(section.contains(&format!(
        "Total {total} bytes for a {}-byte target",
        target.len()
    )));

    // The instructions, encoded by hand from the layout rules: version, target length,
    // then head = len << 1 | kind and, for a Copy, zigzag(offset - previous copy end).
    let mut by_rule = vec![1u8, target.len() as u8];
    let mut prev_end = 0i64;
    let mut copy = |out: &mut Vec<u8>, offset: i64, len: u8| {
        out.push(len << 1 | 1);
        let d = offset - prev_end;
        out.push(((d << 1) ^ (d >> 63)) as u8);
        prev_end = offset + i64::from(len);
    };
    copy(&mut by_rule, 0, 10);
    by_rule.extend_from_slice(&[3 << 1, b'r', b'e', b'd']);
    copy(&mut by_rule, 15, 28);
    by_rule.extend_from_slice(&[1 << 1, b'!']);
    assert_eq!(doc_bytes, by_rule);

    let mut encoded = Vec::new();
    delta::new_codec(DeltaKind::Xdelta).encode(&base, &target, &mut encoded);
    assert_eq!(encoded, doc_bytes, "xdelta no longer writes the example");
    let mut rebuilt = Vec::new();
    delta::format::decode(&base, &doc_bytes, &mut rebuilt).unwrap();
    assert_eq!(rebuilt, target);
    assert_eq!(
        delta::format::instructions(base.len(), &doc_bytes).unwrap(),
        vec![
            delta::format::Instruction::Copy { offset: 0, len: 10 },
            delta::format::Instruction::Insert(b"red"),
            delta::format::Instruction::Copy {
                offset: 15,
                len: 28
            },
            delta::format::Instruction::Insert(b"!"),
        ]
    );
    // What the document says of the other two codecs on this pair.
    for kind in [DeltaKind::Ddelta, DeltaKind::Edelta] {
        let mut out = Vec::new();
        delta::new_codec(kind).encode(&base, &target, &mut out);
        assert_eq!(out.len(), 37, "{kind:?}");
        assert_eq!(
            delta::format::instructions(base.len(), &out).unwrap(),
            vec![
                delta::format::Instruction::Copy { offset: 0, len: 10 },
                delta::format::Instruction::Insert(&target[10..]),
            ]
        );
    }
}

/// The CRC-32C parameters the document states, by their check value.
#[test]
fn crc32c_is_the_documented_one() {
    assert!(DOC.contains("`123456789` is `0xE3069283`"));
    assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
}

fn small_config() -> RepoConfig {
    RepoConfig {
        id: "0123456789abcdef0123456789abcdef".into(),
        container_size: 64 * 1024,
        ..config(1, DeltaConfig::recommended())
    }
}

fn backup_opts(
    paths: Vec<PathBuf>,
    stdin: Option<StdinSource>,
    time: &str,
) -> backup::BackupOptions {
    backup::BackupOptions {
        stdin,
        copy: None,
        skip_if_unchanged: false,
        ..backup_options(paths, time.into())
    }
}

fn run(repo: &IndexedRepository, opts: backup::BackupOptions) -> String {
    let res = locked(repo, &me(), |lock| backup_with(repo, lock, opts)).unwrap();
    res.snapshot_id.to_hex()
}

fn is_lower_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Every container file: (shard folder name, file name, bytes).
fn container_files(repo_dir: &Path) -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    for shard in std::fs::read_dir(repo_dir.join("containers")).unwrap() {
        let shard = shard.unwrap();
        assert!(
            shard.file_type().unwrap().is_dir(),
            "a file outside a shard"
        );
        for f in std::fs::read_dir(shard.path()).unwrap() {
            let f = f.unwrap();
            out.push((
                shard.file_name().into_string().unwrap(),
                f.file_name().into_string().unwrap(),
                std::fs::read(f.path()).unwrap(),
            ));
        }
    }
    out
}

/// A repository written by backup follows the rules the document states for names, regions,
/// containers and the tree stream.
#[test]
fn a_backup_is_laid_out_as_documented() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_config();
    let (region_size, max_size) = (cfg.region_size, cfg.chunker.params.max_size);
    let repo_dir = tmp.path().join("repo");
    let repo = init_repo(&repo_dir, cfg.clone());

    // A source two levels below the temp dir, so that its parents exist but are not sources.
    let src = tmp.path().join("data").join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("noise.bin"), noise(200_000, 7)).unwrap();
    std::fs::write(src.join("sub").join("text.txt"), text(150_000, 1)).unwrap();
    std::fs::write(src.join("empty"), b"").unwrap();
    std::fs::write(src.join("sub.c"), b"sorts before sub/ by name").unwrap();
    std::os::unix::fs::symlink("sub/text.txt", src.join("link")).unwrap();
    let dir_id = run(
        &repo,
        backup_opts(vec![src.clone()], None, "2026-11-23T10:00:00.000000Z"),
    );

    // Containers: containers/<first two digits>/<64 lowercase hex> = BLAKE3 of the bytes.
    let files = container_files(&repo_dir);
    assert!(files.len() > 1);
    let mut short_regions = 0;
    let (mut raw_regions, mut zstd_regions) = (0, 0);
    for (shard, name, bytes) in &files {
        assert!(is_lower_hex64(name), "{name}");
        assert_eq!(shard, &name[..2]);
        assert_eq!(ChunkId::of(bytes).to_hex(), *name);
        assert!(ContainerId::from_hex(name).is_some());
        let meta = container::decode_container_meta(bytes, name).unwrap();
        let mut end = container::HEADER_LEN as u64;
        for r in &meta.regions {
            assert_eq!(u64::from(r.offset), end);
            end += u64::from(r.stored_len);
            let raw = r.raw_len as usize;
            assert!(
                raw >= 1 && raw < region_size + max_size,
                "region of {raw} bytes"
            );
            if raw < region_size {
                short_regions += 1;
            }
            assert!(r.stored_len <= r.raw_len);
            match r.codec {
                0 => {
                    raw_regions += 1;
                    assert_eq!(r.stored_len, r.raw_len);
                }
                1 => {
                    zstd_regions += 1;
                    assert!(r.stored_len < r.raw_len);
                }
                c => panic!("codec {c}"),
            }
        }
        // The metadata starts where the last region ends.
        let f = &bytes[bytes.len() - container::FOOTER_LEN..];
        assert_eq!(u64::from_le_bytes(f[..8].try_into().unwrap()), end);
        // Header + regions stay within container_size unless there is a single region.
        assert!(end as usize <= cfg.container_size || meta.regions.len() == 1);
        // Entries are back to back in each region, covering its raw bytes exactly.
        for (i, r) in meta.regions.iter().enumerate() {
            let mut at = 0;
            for e in meta.entries.iter().filter(|e| e.region as usize == i) {
                assert_eq!(e.offset, at);
                assert!(e.stored_len <= e.original_len);
                assert!(e.original_len as usize <= max_size);
                at += e.stored_len;
            }
            assert_eq!(at, r.raw_len);
        }
    }
    assert_eq!(short_regions, 1, "only the backup's last region is short");
    assert!(
        raw_regions > 0 && zstd_regions > 0,
        "{raw_regions} raw, {zstd_regions} zstd"
    );

    // The snapshot file: named by its hash, JSON keys as documented.
    let snap_bytes = std::fs::read(repo_dir.join("snapshots").join(&dir_id)).unwrap();
    assert_eq!(ChunkId::of(&snap_bytes).to_hex(), dir_id);
    let payload = envelope::open(&snap_bytes, b"DDSN", u16::MAX, "snapshot").unwrap();
    let json: serde_json::Value = serde_json::from_slice(payload).unwrap();
    let tree_chunks = json["tree"]["chunks"].as_array().unwrap();
    assert!(tree_chunks
        .iter()
        .all(|c| is_lower_hex64(c.as_str().unwrap())));
    let (_, snap) = repo.find_snapshot(&dir_id).unwrap();
    let mut reader = dedelta_store::read::ChunkReader::new(&repo, 1 << 20).unwrap();
    let tree_len: u64 = snap
        .tree
        .chunks
        .iter()
        .map(|id| reader.read_chunk(id).unwrap().len() as u64)
        .sum();
    assert_eq!(json["tree"]["len"].as_u64(), Some(tree_len));
    assert_eq!(json["summary"]["tree_bytes"].as_u64(), Some(tree_len));
    let src_str = src.to_str().unwrap();
    assert_eq!(json["paths"], serde_json::json!([src_str]));

    // The tree: the source first (absolute path without the leading `/`), no record for its
    // parents, depth-first with siblings by name, sizes = the sums of the recipes.
    let mut records = Vec::new();
    walk_tree(&repo, &snap, |node, recipe| {
        if node.kind == NodeKind::File {
            let sum: u64 = recipe.iter().map(|c| u64::from(c.len)).sum();
            assert_eq!(node.size, sum, "{}", node.path_lossy());
        }
        records.push((node.path_lossy(), node.kind, node.mode));
        Ok(())
    })
    .unwrap();
    let root = src_str.trim_start_matches('/').to_string();
    let paths: Vec<String> = records.iter().map(|r| r.0.clone()).collect();
    let rel = |p: &str| format!("{root}/{p}");
    assert_eq!(
        paths,
        vec![
            root.clone(),
            rel("empty"),
            rel("link"),
            rel("noise.bin"),
            rel("sub"),
            rel("sub/text.txt"),
            rel("sub.c"),
        ]
    );
    for (path, kind, mode) in &records {
        let type_bits = match kind {
            NodeKind::Dir => 0o040000,
            NodeKind::File => 0o100000,
            NodeKind::Symlink => 0o120000,
            other => panic!("{path}: no {other:?} in this tree"),
        };
        assert_eq!(mode & 0o170000, type_bits, "{path}");
    }
    assert_eq!(
        json["summary"]["files"].as_u64(),
        Some(records.iter().filter(|r| r.1 == NodeKind::File).count() as u64)
    );
}

/// A stdin backup records one file under the name given, mode 0o100644, size = bytes read;
/// `latest` is the greatest time string, ties broken by the greater id.
#[test]
fn stdin_records_and_latest() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), small_config());
    let stdin = |data: Vec<u8>, name: &str| StdinSource {
        reader: Box::new(std::io::Cursor::new(data)),
        name: name.into(),
        mtime_secs: 1_700_000_000,
        whole_or_nothing: false,
    };
    let t = "2026-11-23T10:00:00.000000Z";
    let a = run(
        &repo,
        backup_opts(vec![], Some(stdin(text(30_000, 3), "db.dump")), t),
    );
    let b = run(
        &repo,
        backup_opts(vec![], Some(stdin(text(30_000, 4), "db.dump")), t),
    );
    let early = "2026-11-23T09:59:59.999999Z";
    run(
        &repo,
        backup_opts(vec![], Some(stdin(text(5, 5), "x")), early),
    );

    let (latest, snap) = repo.find_snapshot("latest").unwrap();
    assert_eq!(latest.to_hex(), a.clone().max(b.clone()));
    assert_eq!(snap.paths, vec!["db.dump".to_string()]);
    let mut records = Vec::new();
    walk_tree(&repo, &snap, |node, recipe| {
        records.push((node, recipe));
        Ok(())
    })
    .unwrap();
    assert_eq!(records.len(), 1);
    let (node, recipe) = &records[0];
    assert_eq!(node.path, b"db.dump");
    assert_eq!(node.kind, NodeKind::File);
    assert_eq!(node.mode, 0o100644);
    assert_eq!((node.mtime_secs, node.mtime_nanos), (1_700_000_000, 0));
    assert_eq!(node.size, 30_000);
    assert_eq!(recipe.iter().map(|c| u64::from(c.len)).sum::<u64>(), 30_000);

    // The listing order: by time string, then by id.
    let list = repo.snapshots().unwrap();
    let order: Vec<(String, String)> = list
        .snapshots
        .iter()
        .map(|(id, s)| (s.time.clone(), id.to_hex()))
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    assert_eq!(order[0].0, early);
}

/// The container version in the header of every container of the repository at `repo_dir`,
/// counted: (version 1, version 2). Header and footer agree (the decoder checks it).
fn container_versions(repo_dir: &Path) -> (usize, usize) {
    let mut count = (0, 0);
    for (_, name, bytes) in container_files(repo_dir) {
        container::decode_container_meta(&bytes, &name).unwrap();
        match &bytes[container::HEADER_VERSION_OFFSET..][..2] {
            [1, 0] => count.0 += 1,
            [2, 0] => count.1 += 1,
            v => panic!("container version {v:?}"),
        }
    }
    count
}

/// Every snapshot of `repo` restores to the files `model` holds for it, and `check
/// --read-data` finds nothing.
fn verify_snapshots(
    repo: &IndexedRepository,
    dir: &Path,
    src: &Path,
    model: &std::collections::BTreeMap<String, crate::support::Files>,
) {
    use crate::support::{read_files, restore_to, restored_root, run_check};
    let snaps = repo.snapshots().unwrap().snapshots;
    assert_eq!(snaps.len(), model.len());
    for (id, snap) in snaps {
        let target = dir.join("verify");
        let _ = std::fs::remove_dir_all(&target);
        restore_to(repo, &snap, &target).unwrap();
        assert!(read_files(&restored_root(&target, src)) == model[&id.to_hex()]);
    }
    let report = run_check(repo, true).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// A repository of format version 1 (what every build before version 2 wrote) takes backups
/// and prunes with version-1 containers only, so that older builds still read it. Its config
/// made version 2 by hand (what a migration would do), it gets version-2 containers beside
/// the old ones; backup, restore, prune (copying version-1 entries into version-2
/// containers) and check read both; raised to version 3, its new deltas chain onto them.
#[test]
fn version_1_repositories_keep_version_1_containers() {
    use crate::support::{backup_files, forget_ids, open_repo, prune_with, versioned_text, Files};
    use std::collections::BTreeMap;
    let tmp = tempfile::tempdir().unwrap();
    let repo_dir = tmp.path().join("repo");
    let src = tmp.path().join("src");
    let mut cfg = RepoConfig {
        version: 1,
        ..small_config()
    };
    cfg.delta.max_depth = 1;
    let mut repo = init_repo(&repo_dir, cfg);
    let config_bytes = std::fs::read(repo_dir.join("config")).unwrap();
    assert_eq!(&config_bytes[envelope::VERSION_OFFSET..][..2], &[1, 0]);
    let mut model = std::collections::BTreeMap::new();
    // Backs up version `v` of three files; returns the snapshot id.
    let backup = |repo: &IndexedRepository, model: &mut BTreeMap<String, Files>, v: u64| {
        let files: Files = (0..3u64)
            .map(|f| (format!("f{f}.txt"), versioned_text(f, 50_000, v)))
            .collect();
        let id = backup_files(repo, &src, &files, v, &me())
            .unwrap()
            .snapshot_id;
        model.insert(id.to_hex(), files);
        id.to_hex()
    };
    let first = backup(&repo, &mut model, 0);
    backup(&repo, &mut model, 1);
    let (v1, v2) = container_versions(&repo_dir);
    assert!(v1 > 0 && v2 == 0, "{v1} version 1, {v2} version 2");
    locked(&repo, &me(), |lock| {
        forget_ids(&repo, lock, std::slice::from_ref(&first))?;
        prune_with(&repo, lock, 0.0, false)
    })
    .unwrap();
    model.remove(&first);
    assert_eq!(container_versions(&repo_dir).1, 0);
    verify_snapshots(&repo, tmp.path(), &src, &model);

    // Made version 2: new containers are version 2, the old ones stay and read.
    drop(repo);
    let mut cfg = RepoConfig::from_bytes(&config_bytes).unwrap();
    cfg.version = 2;
    std::fs::write(repo_dir.join("config"), cfg.to_bytes()).unwrap();
    repo = open_repo(&repo_dir).unwrap().open_index().unwrap();
    assert_eq!(repo.config().container_version(), 2);
    let second = backup(&repo, &mut model, 2);
    backup(&repo, &mut model, 3);
    let (v1, v2) = container_versions(&repo_dir);
    assert!(v1 > 0 && v2 > 0, "{v1} version 1, {v2} version 2");
    verify_snapshots(&repo, tmp.path(), &src, &model);
    // A prune that rewrites everything copies version-1 entries into version-2 containers.
    locked(&repo, &me(), |lock| {
        forget_ids(&repo, lock, std::slice::from_ref(&second))?;
        prune_with(&repo, lock, 0.0, false)
    })
    .unwrap();
    model.remove(&second);
    verify_snapshots(&repo, tmp.path(), &src, &model);
    // Made version 3 with delta chains: new deltas may rest on deltas; all still read.
    drop(repo);
    let mut cfg = RepoConfig::from_bytes(&std::fs::read(repo_dir.join("config")).unwrap()).unwrap();
    cfg.version = 3;
    cfg.delta.max_depth = 4;
    std::fs::write(repo_dir.join("config"), cfg.to_bytes()).unwrap();
    repo = open_repo(&repo_dir).unwrap().open_index().unwrap();
    for v in 4..8 {
        backup(&repo, &mut model, v);
    }
    verify_snapshots(&repo, tmp.path(), &src, &model);
    // An index rebuilt from every version still finds every chunk.
    drop(repo);
    let cache = crate::support::cache_root_for(&repo_dir);
    std::fs::remove_dir_all(&cache).unwrap();
    repo = open_repo(&repo_dir).unwrap().open_index().unwrap();
    verify_snapshots(&repo, tmp.path(), &src, &model);
}

/// The version-2 metadata tables and worked example: the head bits the entry table names are
/// the decoder's constants, and the example's bytes, read out of the document (its `CRC`,
/// `L`, `id` and `base` filled in from the container, `xx 00 .. 00` as a u64), are exactly
/// the metadata section the builder writes for the example's entries.
#[test]
fn lean_metadata_example_matches_the_doc() {
    use container::v2::{HEAD_BASE_BACKREF, HEAD_KIND_MASK, HEAD_SF_SHIFT};
    use container::{ContainerBuilder, EntryKind, RegionBuilder, CONTAINER_V2};
    use dedelta_core::compress::Compression;
    assert_eq!(
        (HEAD_KIND_MASK, HEAD_BASE_BACKREF, HEAD_SF_SHIFT),
        (3, 4, 3)
    );
    let entry = table_after("Version-2 entry record:");
    assert!(entry[0][2].starts_with(
        "head: bits 0-1 kind (0 = full, 1 = delta, 2 = inversed delta, laid out as a delta, \
         written only in repositories of version 4; 3 is invalid); bit 2 base back-reference \
         (deltas only: kinds 1 and 2, a back-reference may name an entry of either); bits 3-7 \
         super-feature count S (0 ..= 16)"
    ));
    let region = table_after("Nothing follows the last entry record. Version-2 region record:");
    let sizes: Vec<&str> = region.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(sizes, ["1", "4", "1..10", "1..10"]);

    let full = b"full chunk bytes".to_vec();
    let base = ChunkId::of(b"the base");
    let (t1, t2) = (ChunkId::of(b"target 1"), ChunkId::of(b"target 2"));
    let mut b = ContainerBuilder::with_version(CONTAINER_V2);
    let mut r0 = RegionBuilder::default();
    r0.push(ChunkId::of(&full), EntryKind::Full, &full, 16, vec![11, 12]);
    b.add_region(r0.compress(Compression::None));
    let mut r1 = RegionBuilder::default();
    r1.push(t1, EntryKind::delta(base), &[7u8; 4000], 9000, vec![]);
    r1.push(t2, EntryKind::delta(base), &[7u8; 3000], 8000, vec![]);
    b.add_region(r1.compress(Compression::zstd(3)));
    let (_, file, meta) = b.seal();
    let f = &file[file.len() - container::FOOTER_LEN..];
    let start = u64::from_le_bytes(f[..8].try_into().unwrap()) as usize;
    let written = &file[start..file.len() - container::FOOTER_LEN];

    let ids = [ChunkId::of(&full), t1, t2];
    let mut from_doc = Vec::new();
    let rows = table_after(
        "Worked example (the test `layout_matches_the_doc` in `format/container/v2.rs`",
    );
    assert_eq!(rows.len(), 6);
    for (n, row) in rows.iter().enumerate() {
        for word in row[0].split('`').enumerate() {
            match word {
                (i, hex) if i % 2 == 1 && hex.contains("..") => {
                    let first = u8::from_str_radix(&hex[..2], 16).unwrap();
                    from_doc.extend_from_slice(&u64::from(first).to_le_bytes());
                }
                (i, hex) if i % 2 == 1 => from_doc.extend(
                    hex.split(' ')
                        .map(|h| u8::from_str_radix(h, 16).unwrap_or_else(|_| panic!("{h}"))),
                ),
                (_, text) => {
                    for w in text.split_whitespace() {
                        match w {
                            "CRC" => {
                                from_doc.extend_from_slice(&meta.regions[n - 1].crc.to_le_bytes())
                            }
                            "L" => from_doc.push(meta.regions[1].stored_len as u8),
                            "id" => from_doc.extend_from_slice(ids[n - 3].as_bytes()),
                            "base" => from_doc.extend_from_slice(base.as_bytes()),
                            w => panic!("unknown word {w:?} in the example"),
                        }
                    }
                }
            }
        }
    }
    assert_eq!(from_doc, written);
    assert_eq!(container::decode_container_meta(&file, "c").unwrap(), meta);
}
