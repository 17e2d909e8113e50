//! The distributed tests on a real object store: `scripts/garage-cluster.sh` (a 3-node
//! Garage cluster on 127.0.0.1; concurrent backups from several processes into one
//! repository, a node killed mid-backup, prune beside a backup and a restore) with this
//! build's binary. Skipped with a message when the Garage binary is absent (it takes ~10 min
//! to build: `scripts/garage-cluster.sh --build`), unless `DEDELTA_REQUIRE_GARAGE=1`.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn garage_cluster_end_to_end() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let work = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(root.join("scripts/garage-cluster.sh"))
        .arg(work.path())
        .env("DEDELTA_BIN", env!("CARGO_BIN_EXE_dedelta"))
        .env(
            "REQUIRE_GARAGE",
            std::env::var("DEDELTA_REQUIRE_GARAGE").unwrap_or_default(),
        )
        // The debug binary is slower: less data for the node-stop step.
        .env("BIG_MB", "15")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    if stdout.starts_with("skipping") {
        eprintln!("{stdout}");
        return;
    }
    assert!(stdout.contains("garage tests passed"), "{stdout}{stderr}");
    eprintln!("{stdout}");
}
