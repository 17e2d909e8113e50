//! Tests of [`super`] (report.rs).

use super::*;

/// Every column is a field the row serialises (the I/O columns come through
/// `#[serde(flatten)]`), so that no column is silently empty; and the I/O columns carry
/// what [`crate::runner::IoColumns`] was given.
#[test]
fn every_column_is_a_field() {
    let mut row = VersionRow::default();
    let mut res = ConfigResult::default();
    let io = crate::runner::IoSummary {
        requests: 7,
        base_requests: 2,
        prefetch_requests: 3,
        prefetch_bytes: 4_000,
        disk_seconds: 0.5,
        ..Default::default()
    };
    row.io.set_backup(io);
    res.io.set_restore(io);
    let (row, res) = (
        serde_json::to_value(&row).unwrap(),
        serde_json::to_value(&res).unwrap(),
    );
    for (columns, v) in [(VERSION_COLUMNS, &row), (RESULT_COLUMNS, &res)] {
        for c in columns {
            assert!(v.get(*c).is_some(), "column {c} is no field");
        }
    }
    assert_eq!(row["backup_io_requests"], 7);
    assert_eq!(row["backup_io_base_requests"], 2);
    assert_eq!(row["backup_io_prefetch_requests"], 3);
    assert_eq!(row["backup_io_prefetch_bytes"], 4_000);
    assert_eq!(row["backup_modelled_disk_seconds"], 0.5);
    assert!(row["restore_io_requests"].is_null());
    assert_eq!(res["restore_io_requests"], 7);
}

fn result(name: &str, kind: &str, repo_bytes: u64) -> ConfigResult {
    ConfigResult {
        name: name.into(),
        kind: kind.into(),
        repo_bytes,
        ..ConfigResult::default()
    }
}

#[test]
fn smallest_names_the_peer_and_our_ratio_to_it() {
    let rs = [
        result("recommended", "dedelta", 15_000_000),
        result("dedup", "dedelta", 60_000_000),
        result("zstd-long", "peer", 10_000_000),
        result("restic", "peer", 190_000_000),
    ];
    assert_eq!(
        smallest_line(&rs).unwrap(),
        "Stores least: peer zstd-long (10.00 MB on disk); dedelta's smallest, \
         `recommended`, is 15.00 MB, 1.50x that."
    );
}

#[test]
fn bytes_table_lists_each_kind_of_dedelta_configurations_only() {
    let mut ours = result("recommended", "dedelta", 15_000_000);
    ours.full_chunk_bytes = Some(9_000_000);
    ours.delta_bytes = Some(2_000_000);
    ours.tree_bytes = Some(1_000_000);
    ours.container_metadata_bytes = Some(2_500_000);
    ours.snapshot_other_bytes = Some(500_000);
    ours.index_bytes = Some(1_250_000);
    let table = bytes_table(&[ours, result("restic", "peer", 190_000_000)]);
    assert!(table.contains("| recommended | 9.00 | 2.00 | 1.00 | 2.50 | 0.50 | 1.25 |"));
    assert!(!table.contains("restic"));
}

#[test]
fn detection_table_by_hand() {
    let mut ours = result("recommended", "dedelta", 15_000_000);
    ours.min_saving_percent = Some(0.0);
    ours.delta_detected = Some(100);
    ours.delta_rejected_min_saving = Some(5);
    ours.delta_rejected_reanchor = Some(20);
    ours.delta_rejected_tree_bound = Some(1);
    ours.dce = Some(0.9);
    ours.detected_dce = Some(0.75);
    let table = detection_table(&[ours.clone(), result("restic", "peer", 1)]);
    assert!(
        table.contains("| recommended | 0 | 100 | 74 | 5 | 20 | 1 | 0.900 | 0.750 |"),
        "{table}"
    );
    assert!(!table.contains("restic"));
    assert_eq!(detected_cell(&ours), "–");
    ours.delta_chunks = Some(74);
    assert_eq!(detected_cell(&ours), "100 (74)");
}

#[test]
fn smallest_when_dedelta_wins() {
    let rs = [
        result("recommended", "dedelta", 9_000_000),
        result("zstd-long", "peer", 10_000_000),
    ];
    assert_eq!(
        smallest_line(&rs).unwrap(),
        "Stores least: dedelta `recommended` (9.00 MB on disk)."
    );
}
