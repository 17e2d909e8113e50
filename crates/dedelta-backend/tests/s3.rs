//! The S3 backend against a real S3 server (moto, started by the test; skipped with a message
//! when `moto_server` is absent, unless `DEDELTA_REQUIRE_S3=1`).

use dedelta_backend::s3::test_server::{moto_or_skip, MotoServer};
use dedelta_backend::s3::S3Backend;
use dedelta_backend::{Backend, BackendError, FileKind};

fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn objects_round_trip_with_ranges_listing_and_multipart() {
    let Some(server) = moto_or_skip() else { return };
    server.create_bucket("roundtrip").unwrap();
    let mut cfg = server.config("roundtrip", "repo/one");
    // Small parts, so that a 11 MiB object goes in three parts (S3's minimum part is 5 MiB).
    cfg.multipart_threshold = 6 << 20;
    cfg.part_size = 5 << 20;
    cfg.connections = 2;
    let b = S3Backend::new(cfg, &MotoServer::credentials()).unwrap();

    let small = data(100_000, 1);
    let name = "ab".to_string() + &"0".repeat(62);
    b.put(FileKind::Container, &name, &small).unwrap();
    assert_eq!(b.get(FileKind::Container, &name).unwrap(), small);
    assert_eq!(b.size(FileKind::Container, &name).unwrap(), 100_000);
    assert_eq!(
        b.get_range(FileKind::Container, &name, 10, 20).unwrap(),
        &small[10..30]
    );
    assert_eq!(
        b.get_range(FileKind::Container, &name, -100, 40).unwrap(),
        &small[100_000 - 100..100_000 - 60]
    );
    assert_eq!(
        b.get_tail(FileKind::Container, &name, 64).unwrap(),
        &small[100_000 - 64..]
    );
    // A tail longer than the object is the whole object.
    assert_eq!(
        b.get_tail(FileKind::Container, &name, 1 << 20).unwrap(),
        small
    );
    // A range past the end is an error, not a short answer.
    assert!(b.get_range(FileKind::Container, &name, 99_990, 20).is_err());

    // Reads are widened to MIN_RANGED_READ and cut back: on an object larger than that, every
    // answer is still exactly the bytes asked for, at the start, middle and end.
    let mid = data(1 << 20, 3);
    let mid_name = "cd".to_string() + &"0".repeat(62);
    b.put(FileKind::Container, &mid_name, &mid).unwrap();
    let n = mid.len();
    for (offset, len) in [(0, 1), (5, 300), (500_000, 4096), (n as i64 - 10, 10)] {
        let at = offset as usize;
        assert_eq!(
            b.get_range(FileKind::Container, &mid_name, offset, len)
                .unwrap(),
            &mid[at..at + len],
            "{offset} {len}"
        );
    }
    for (back, len) in [(1usize, 1), (100, 40), (300_000, 70_000), (n, 16)] {
        assert_eq!(
            b.get_range(FileKind::Container, &mid_name, -(back as i64), len)
                .unwrap(),
            &mid[n - back..n - back + len],
            "-{back} {len}"
        );
    }
    assert_eq!(
        b.get_tail(FileKind::Container, &mid_name, 64).unwrap(),
        &mid[n - 64..]
    );
    assert!(b
        .get_range(FileKind::Container, &mid_name, n as i64 - 5, 10)
        .is_err());
    assert!(b
        .get_range(FileKind::Container, &mid_name, -(n as i64) - 1, 4)
        .is_err());

    let big = data(11 << 20, 2);
    b.put(FileKind::Snapshot, "big", &big).unwrap();
    assert_eq!(b.get(FileKind::Snapshot, "big").unwrap(), big);

    b.put(FileKind::Config, "config", b"cfg").unwrap();
    assert_eq!(
        b.list(FileKind::Container).unwrap(),
        vec![(name.clone(), 100_000), (mid_name.clone(), 1 << 20)]
    );
    assert_eq!(
        b.list(FileKind::Snapshot).unwrap(),
        vec![("big".to_string(), (11 << 20) as u64)]
    );
    assert_eq!(b.list(FileKind::Config).unwrap().len(), 1);
    assert!(b.list(FileKind::Lock).unwrap().is_empty());

    assert!(b.exists(FileKind::Snapshot, "big").unwrap());
    b.delete(FileKind::Snapshot, "big").unwrap();
    b.delete(FileKind::Snapshot, "big").unwrap();
    assert!(!b.exists(FileKind::Snapshot, "big").unwrap());
    assert!(matches!(
        b.get(FileKind::Snapshot, "big"),
        Err(BackendError::Missing { .. })
    ));
    assert!(matches!(
        b.get_range(FileKind::Snapshot, "big", 0, 4),
        Err(BackendError::Missing { .. })
    ));

    // Another prefix in the same bucket is another repository.
    let other = S3Backend::new(
        server.config("roundtrip", "repo/two"),
        &MotoServer::credentials(),
    )
    .unwrap();
    assert!(other.list(FileKind::Container).unwrap().is_empty());
}
