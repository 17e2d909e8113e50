//! Tests of the runner's helpers.

use super::*;

#[test]
fn version_times_count_up_across_days_months_and_years() {
    for (t, secs, want) in [
        (
            "2026-11-24T05:51:47.123456Z",
            0,
            "2026-11-24T05:51:47.123456Z",
        ),
        (
            "2026-11-24T05:51:47.123456Z",
            9,
            "2026-11-24T05:51:56.123456Z",
        ),
        ("2026-11-24T23:59:59.5Z", 1, "2026-11-25T00:00:00.5Z"),
        ("2024-02-28T23:59:59Z", 1, "2024-02-29T00:00:00Z"),
        ("2023-02-28T23:59:59+01:00", 1, "2023-03-01T00:00:00+01:00"),
        ("2026-12-31T23:59:30Z", 3600, "2027-01-01T00:59:30Z"),
        ("not a time", 5, "not a time"),
        ("2026-1x-24T05:51:47Z", 5, "2026-1x-24T05:51:47Z"),
        ("2026-11-24T05:51", 5, "2026-11-24T05:51"),
    ] {
        assert_eq!(version_time(t, secs), want, "{t} + {secs}");
    }
    // Later versions sort after earlier ones, as the store orders snapshots.
    let times: Vec<String> = (0..100)
        .map(|i| version_time("2026-11-24T23:58:30.000001Z", i))
        .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
}

#[test]
fn speed_factor_is_averaged_over_the_last_versions() {
    // 10 versions, a sample of 3 (0, 4, 9), and the last 4 for the speed factor.
    assert_eq!(
        restore_picks_with_last(10, Some(3), 4),
        vec![0, 4, 6, 7, 8, 9]
    );
    assert_eq!(restore_picks_with_last(3, Some(1), 20), vec![0, 1, 2]);
    // By hand: versions restoring 12 MB from 3 containers (4.0) and 10 MB from 4 (2.5).
    assert_eq!(mean([Some(4.0), None, Some(2.5)].into_iter()), Some(3.25));
    assert_eq!(mean([None].into_iter()), None);
    // 12 MB restored from 6 MiB of containers of 4 MiB: 1.5 containers' worth, 8 MB each.
    assert_eq!(
        speed_factor_by_size(12_000_000, 6 << 20, 4 << 20),
        Some(8.0)
    );
    assert_eq!(speed_factor_by_size(12_000_000, 0, 4 << 20), None);
}

#[test]
fn picks_spread_and_include_last() {
    assert_eq!(restore_picks(10, None), (0..10).collect::<Vec<_>>());
    assert_eq!(restore_picks(10, Some(3)), vec![0, 4, 9]);
    assert_eq!(restore_picks(10, Some(1)), vec![9]);
    assert_eq!(restore_picks(2, Some(5)), vec![0, 1]);
}
