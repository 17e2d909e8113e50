//! Snapshot selection (`--host`, `--tag`, `--path`, `snapshots --latest`, `--group-by`) and
//! `tag` (issue 21): one filter, the same answer in every command.

use super::support::*;
use serde_json::Value;
use std::fs;
use std::path::Path;

/// Backs up `path` as host `host` with `tags`; returns the snapshot id.
fn backup_as(f: &Fixture, host: &str, tags: &[&str], path: &Path) -> String {
    let mut c = f.cmd(&["backup", "--json"]);
    for t in tags {
        c.arg("--tag").arg(t);
    }
    let out = c.arg(path).env("DEDELTA_HOST", host).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["snapshot_id"].as_str().unwrap().to_string()
}

/// The ids `snapshots --json <args>` lists.
fn listed(f: &Fixture, args: &[&str]) -> Vec<String> {
    let mut all = vec!["snapshots", "--json"];
    all.extend_from_slice(args);
    let v: Value = serde_json::from_str(&f.ok(&all)).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

/// Three hosts, paths and tag sets: each filter selects what restic's would.
struct Three {
    f: Fixture,
    a1: String,
    a2: String,
    b: String,
}

fn three() -> Three {
    let f = Fixture::new();
    let (x, y) = (f.path("x"), f.path("y"));
    fs::create_dir_all(&x).unwrap();
    fs::create_dir_all(&y).unwrap();
    fs::write(x.join("one.txt"), b"one").unwrap();
    fs::write(y.join("two.txt"), b"two").unwrap();
    let a1 = backup_as(&f, "alpha", &["daily"], &x);
    fs::write(x.join("one.txt"), b"one again").unwrap();
    let a2 = backup_as(&f, "alpha", &["daily", "db"], &x);
    let b = backup_as(&f, "beta", &[], &y);
    Three { f, a1, a2, b }
}

#[test]
fn snapshots_filter_by_host_tag_and_path() {
    let t = three();
    let f = &t.f;
    assert_eq!(listed(f, &[]), [t.a1.as_str(), t.a2.as_str(), t.b.as_str()]);
    assert_eq!(listed(f, &["--host", "beta"]), [t.b.as_str()]);
    assert_eq!(listed(f, &["--host", "beta", "--host", "alpha"]).len(), 3);
    assert_eq!(listed(f, &["--tag", "daily,db"]), [t.a2.as_str()]);
    assert_eq!(
        listed(f, &["--tag", "db", "--tag", ""]),
        [t.a2.as_str(), t.b.as_str()]
    );
    let y = f.path("y");
    assert_eq!(listed(f, &["--path", y.to_str().unwrap()]), [t.b.as_str()]);
    assert_eq!(listed(f, &["--latest", "1"]), [t.a2.as_str(), t.b.as_str()]);
    assert_eq!(listed(f, &[&t.a1[..8]]), [t.a1.as_str()]);
    // Grouped by host: one group per host, with its key.
    let v: Value =
        serde_json::from_str(&f.ok(&["snapshots", "--json", "--group-by", "host"])).unwrap();
    let groups = v.as_array().unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["group_key"]["host"], "alpha");
    assert_eq!(groups[0]["snapshots"].as_array().unwrap().len(), 2);
    assert!(groups[0]["group_key"].get("paths").is_none());
    let text = f.ok(&["snapshots", "--group-by", "host,tags"]);
    assert!(
        text.contains("snapshots for (host [alpha], tags [daily, db])"),
        "{text}"
    );
    let out = f
        .cmd(&["snapshots", "--group-by", "colour"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("host, paths, tags"));
}

/// `latest` means the newest snapshot the filter selects, in `ls`, `dump` and `restore`.
#[test]
fn latest_follows_the_filter() {
    let t = three();
    let f = &t.f;
    let ls = f.ok(&["ls", "latest", "--host", "alpha"]);
    assert!(ls.contains("one.txt") && !ls.contains("two.txt"), "{ls}");
    let one = f.path("x/one.txt");
    let dumped = f.ok(&["dump", "latest", one.to_str().unwrap(), "--tag", "daily"]);
    assert_eq!(dumped, "one again");
    let target = f.path("target");
    f.ok(&[
        "restore",
        "latest",
        "--host",
        "beta",
        "--target",
        target.to_str().unwrap(),
    ]);
    assert!(restored(&target, &f.path("y")).join("two.txt").exists());
    let out = f
        .cmd(&["ls", "latest", "--host", "gamma"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--host/--tag/--path"));
}

/// `forget --host` applies the policy only to that host's snapshots; `--group-by host`
/// judges all of a host's snapshots together whatever their paths.
#[test]
fn forget_policies_apply_to_the_selection() {
    let t = three();
    let f = &t.f;
    let out = f.ok(&[
        "forget",
        "--keep-last",
        "1",
        "--host",
        "alpha",
        "--dry-run",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let removed: Vec<&str> = v["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["keep"] == false)
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(removed, [t.a1.as_str()]);
    let decided = v["snapshots"].as_array().unwrap().len();
    assert_eq!(decided, 2, "beta is not judged: {out}");
    // Grouped by tags: the two alpha snapshots have different tags, so each is its group's
    // newest.
    let out = f.ok(&[
        "forget",
        "--keep-last",
        "1",
        "--group-by",
        "tags",
        "--dry-run",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["keep"] == true),
        "{out}"
    );
}

/// `tag` rewrites the snapshot: the new one lists the tags and names the original, the old
/// one is gone, the tree is the same.
#[test]
fn tag_add_remove_set() {
    let t = three();
    let f = &t.f;
    let out = f.ok(&[
        "tag",
        "--add",
        "keep,weekly",
        "--remove",
        "daily",
        &t.a1[..8],
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let changed = v["changed"].as_array().unwrap();
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0]["old_id"], t.a1.as_str());
    assert_eq!(changed[0]["tags"], serde_json::json!(["keep", "weekly"]));
    let new = changed[0]["new_id"].as_str().unwrap().to_string();
    let ids = listed(f, &[]);
    assert!(!ids.contains(&t.a1) && ids.contains(&new), "{ids:?}");
    let snap: Value = serde_json::from_str(&f.ok(&["cat", "snapshot", &new])).unwrap();
    assert_eq!(snap["original"], t.a1.as_str());
    assert_eq!(listed(f, &["--tag", "keep"]), [new.as_str()]);
    // A filter with no ids: every alpha snapshot gets exactly `x`.
    f.ok(&["tag", "--set", "x", "--host", "alpha"]);
    assert_eq!(listed(f, &["--tag", "x"]).len(), 2);
    assert_eq!(listed(f, &["--tag", ""]), [t.b.as_str()]);
    // Tagging again changes nothing.
    let out = f.ok(&["tag", "--add", "x", "--host", "alpha"]);
    assert!(out.contains("0 snapshots changed"), "{out}");
    // `latest` is the newest snapshot the filter selects (it failed as "no snapshot matches").
    f.ok(&["tag", "--add", "newest", "--host", "alpha", "latest"]);
    assert_eq!(listed(f, &["--tag", "newest"]).len(), 1);
    // The rewritten snapshots still restore and check.
    f.ok(&["check"]);
    for bad in [
        &["tag", "--set", "a", "--add", "b"][..],
        &["tag"],
        &["tag", "--add", ""],
    ] {
        let out = f.cmd(bad).output().unwrap();
        assert!(!out.status.success(), "{bad:?}");
    }
}

/// The selection options are grouped under their own `--help` heading, and only they: the
/// command's own options after them stay under "Options".
#[test]
fn selection_options_have_their_own_help_heading() {
    for cmd in ["find", "snapshots", "restore"] {
        let out = dedelta().args([cmd, "--help"]).output().unwrap();
        let help = String::from_utf8(out.stdout).unwrap();
        let (before, after) = help.split_once("Snapshot selection:").unwrap();
        assert!(after.contains("--host") && after.contains("--tag") && after.contains("--path"));
        assert!(
            !after.contains("--help") && before.contains("--help"),
            "{cmd}: {help}"
        );
    }
}

/// `backup --host` records the host given (over `$DEDELTA_HOST`), and takes the parent
/// among that host's snapshots.
#[test]
fn backup_host_names_the_snapshot_host_and_its_parent() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a.txt"), b"a").unwrap();
    let run = |host: &str| -> Value {
        let out = f
            .cmd(&["backup", "--json", "--host", host])
            .arg(&src)
            .env("DEDELTA_HOST", "from-env")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        summary(&out.stdout)
    };
    let first = run("box-a");
    assert_eq!(first["files_new"], 1, "{first}");
    assert_eq!(listed(&f, &["--host", "box-a"]).len(), 1);
    assert!(listed(&f, &["--host", "from-env"]).is_empty());
    // The second backup as box-a compares with box-a's snapshot: nothing new.
    assert_eq!(run("box-a")["files_unmodified"], 1);
    // As another host there is no parent of its own.
    assert_eq!(run("box-b")["files_new"], 1);
}

/// `backup --time` records the time given (restic's), so older data imported later sorts
/// before newer snapshots; a time that does not parse is refused.
#[test]
fn backup_time_is_the_time_given() {
    let f = Fixture::new();
    let src = f.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a.txt"), b"a").unwrap();
    f.backup(&[&src]);
    let out = f
        .cmd(&["backup", "--json", "--time", "2020-01-02T03:04:05Z"])
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let old = summary(&out.stdout)["snapshot_id"]
        .as_str()
        .unwrap()
        .to_string();
    let v: Value = serde_json::from_str(&f.ok(&["snapshots", "--json"])).unwrap();
    let first = &v.as_array().unwrap()[0];
    assert_eq!(first["id"], old.as_str());
    assert_eq!(first["time"], "2020-01-02T03:04:05.000000Z");
    let bad = f
        .cmd(&["backup", "--time", "yesterday"])
        .arg(&src)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
}
