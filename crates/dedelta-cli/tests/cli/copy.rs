//! `copy --from-repo` (restic's): snapshots of an encrypted repository stored in another one
//! with its own key, restored the same from both, copied once, and never half-copied from a
//! damaged source.

use crate::support::*;
use serde_json::Value;
use std::fs;

/// `ls --json`'s nodes without the snapshot line (ids differ between the repositories).
fn nodes(f: &Fixture, id: &str, env: (&str, &str)) -> Vec<Value> {
    let out = f
        .cmd(&["ls", id, "--json"])
        .env(env.0, env.1)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["struct_type"] == "node")
        .collect()
}

fn snapshots(f: &Fixture, env: (&str, &str)) -> Vec<Value> {
    let out = f
        .cmd(&["snapshots", "--json"])
        .env(env.0, env.1)
        .output()
        .unwrap();
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn copy_stores_every_snapshot_once_and_each_restores_as_its_source() {
    let src = Fixture::encrypted("from-pw");
    let dst = Fixture::encrypted("to-pw");
    let (src_pw, dst_pw) = (
        ("DEDELTA_PASSWORD", "from-pw"),
        ("DEDELTA_PASSWORD", "to-pw"),
    );
    let tree = src.path("tree");
    make_tree(&tree, 5);
    let mut v1 = text(600_000, 1);
    fs::write(tree.join("log.txt"), &v1).unwrap();
    src.cmd(&["backup", "--tag", "first"])
        .arg(&tree)
        .env(src_pw.0, src_pw.1)
        .assert()
        .success();
    v1.splice(1000..1010, b"0123456789abcdef".iter().copied());
    fs::write(tree.join("log.txt"), &v1).unwrap();
    src.cmd(&["backup"])
        .arg(&tree)
        .env(src_pw.0, src_pw.1)
        .assert()
        .success();
    let src_snaps = snapshots(&src, src_pw);
    assert_eq!(src_snaps.len(), 2);

    let copy = |extra: &[&str]| {
        let from = src.repo();
        let mut c = dst.cmd(
            &[
                &["copy", "--json", "--from-repo", from.to_str().unwrap()],
                extra,
            ]
            .concat(),
        );
        c.env(dst_pw.0, dst_pw.1)
            .env("DEDELTA_FROM_PASSWORD", "from-pw");
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let done = copy(&[]);
    let copied = done["copied"].as_array().unwrap();
    assert_eq!(copied.len(), 2, "{done}");
    // The second copy is mostly duplicates and deltas of the first.
    let added = |i: usize| copied[i]["summary"]["bytes_added"].as_u64().unwrap();
    assert!(added(1) * 5 < added(0), "{done}");

    // Each copy: same time, host, paths, tags; `original` the source; the same nodes; the
    // same bytes restored.
    let dst_snaps = snapshots(&dst, dst_pw);
    assert_eq!(dst_snaps.len(), 2);
    for (s, d) in src_snaps.iter().zip(&dst_snaps) {
        for field in ["time", "host", "paths", "tags"] {
            assert_eq!(s[field], d[field], "{field}: {s} / {d}");
        }
        assert_eq!(d["original"], s["id"]);
        let (sid, did) = (s["id"].as_str().unwrap(), d["id"].as_str().unwrap());
        assert_eq!(nodes(&src, sid, src_pw), nodes(&dst, did, dst_pw));
        let (a, b) = (src.path(&format!("r-{sid}")), dst.path(&format!("r-{did}")));
        src.cmd(&["restore", sid, "--target", a.to_str().unwrap()])
            .env(src_pw.0, src_pw.1)
            .assert()
            .success();
        dst.cmd(&["restore", did, "--target", b.to_str().unwrap()])
            .env(dst_pw.0, dst_pw.1)
            .assert()
            .success();
        assert_same_tree(&restored(&a, &tree), &restored(&b, &tree));
    }
    assert_same_tree(
        &tree,
        &restored(
            &dst.path(&format!("r-{}", dst_snaps[1]["id"].as_str().unwrap())),
            &tree,
        ),
    );

    // Copied before: nothing to do; a filter narrows what is copied.
    let again = copy(&[]);
    assert_eq!(again["copied"].as_array().unwrap().len(), 0, "{again}");
    assert_eq!(
        again["already_copied"].as_array().unwrap().len(),
        2,
        "{again}"
    );
    assert_eq!(
        copy(&["--tag", "first", "--dry-run"])["already_copied"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    dst.cmd(&["check", "--read-data"])
        .env(dst_pw.0, dst_pw.1)
        .assert()
        .success();
}

#[test]
fn a_damaged_source_copies_nothing_and_says_why() {
    let src = Fixture::new();
    let dst = Fixture::new();
    let data = src.path("data.bin");
    fs::write(&data, bytes(2 << 20, 7)).unwrap();
    src.ok(&["backup", data.to_str().unwrap()]);
    // Damage the middle of every container: file data fails its checksum.
    for c in src.containers() {
        let mut b = fs::read(&c).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0x55;
        fs::write(&c, b).unwrap();
    }
    let from = |f: &Fixture| f.repo().to_str().unwrap().to_string();
    let out = dst
        .cmd(&["copy", "--from-repo", &from(&src)])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    assert_eq!(snapshots(&dst, ("DEDELTA_UNUSED", "")).len(), 0);
    assert_eq!(lock_count(&dst), 0);

    // Repaired, the source copies; once. (A repaired snapshot keeps its original's summary,
    // so a copy made before is recognised by what the tree holds, not by that summary.)
    // check --read-data records the damage that repair then works from.
    assert!(!src
        .cmd(&["check", "--read-data"])
        .output()
        .unwrap()
        .status
        .success());
    src.ok(&["repair", "snapshots", "--forget"]);
    let out = dst.ok(&["copy", "--from-repo", &from(&src)]);
    assert!(out.contains("1 snapshots copied"), "{out}");
    let out = dst.ok(&["copy", "--from-repo", &from(&src)]);
    assert!(out.contains("0 snapshots copied, 1 copied before"), "{out}");
    assert_eq!(snapshots(&dst, ("DEDELTA_UNUSED", "")).len(), 1);

    // The same repository on both sides, and an encrypted source without its password.
    let out = dst
        .cmd(&["copy", "--from-repo", &from(&dst)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let enc = Fixture::encrypted("x");
    let out = dst
        .cmd(&["copy", "--from-repo", &from(&enc)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DEDELTA_FROM_PASSWORD"));
}
