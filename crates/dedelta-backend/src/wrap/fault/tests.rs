//! Tests of [`super`] (fault.rs).

use super::*;
use crate::memory::MemoryBackend;

fn injected(e: &Error) -> Option<InjectedFault> {
    match e {
        Error::Io { cause, .. } => FaultBackend::injected(cause),
        _ => None,
    }
}

fn wrapped() -> (Arc<MemoryBackend>, FaultBackend) {
    let mem = Arc::new(MemoryBackend::default());
    let fault = FaultBackend::new(mem.clone());
    (mem, fault)
}

/// Three writes: put, create_new, delete.
fn three_writes(b: &dyn Backend) -> [Result<()>; 3] {
    [
        b.put(FileKind::Container, "a", b"aaaa"),
        b.create_new(FileKind::Lock, "l", b"lock").map(|_| ()),
        b.delete(FileKind::Container, "a"),
    ]
}

#[test]
fn counts_writes_and_reads_per_kind() {
    let (_, f) = wrapped();
    f.put(FileKind::Container, "a", b"0123456789").unwrap();
    f.put(FileKind::Snapshot, "s", b"snap").unwrap();
    f.get(FileKind::Container, "a").unwrap();
    f.get_range(FileKind::Container, "a", 2, 3).unwrap();
    let mut buf = Vec::new();
    f.get_range_into(FileKind::Container, "a", -2, 2, &mut buf)
        .unwrap();
    assert_eq!(buf, b"89");
    f.delete(FileKind::Snapshot, "s").unwrap();
    let c = f.counts();
    assert_eq!(c.writes(FileKind::Container), 1);
    assert_eq!(c.writes(FileKind::Snapshot), 2);
    assert_eq!(c.total_writes(), 3);
    assert_eq!(c.reads(FileKind::Container), 3);
    assert_eq!(c.reads(FileKind::Snapshot), 0);
    let log: Vec<FileKind> = f.write_log().into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        log,
        [FileKind::Container, FileKind::Snapshot, FileKind::Snapshot]
    );
    f.disarm();
    assert!(f.write_log().is_empty());
    assert_eq!(f.counts(), FaultCounts::default());
    assert_eq!(f.faults_injected(), 0);
}

#[test]
fn crash_fails_that_write_and_everything_after() {
    for (at, effect) in [
        (0, CrashEffect::Lost),
        (1, CrashEffect::Lost),
        (0, CrashEffect::Durable),
        (1, CrashEffect::Durable),
        (1, CrashEffect::Torn),
        (2, CrashEffect::Durable),
    ] {
        let (mem, f) = wrapped();
        f.arm(FaultPlan::crash(at, effect));
        let results = three_writes(&f);
        for (i, r) in results.iter().enumerate() {
            let failed = r.as_ref().err().and_then(injected);
            if (i as u64) < at {
                assert!(r.is_ok(), "write {i} before the crash at {at} failed");
            } else {
                assert!(
                    matches!(failed, Some(InjectedFault::Crash { write }) if write == at),
                    "write {i} after the crash at {at}: {r:?}"
                );
            }
        }
        assert!(f.crashed());
        assert!(
            f.get(FileKind::Config, "config").is_err(),
            "reads after a crash"
        );
        assert!(f.list(FileKind::Container).is_err());
        // What the crashed write left behind.
        let container = mem.exists(FileKind::Container, "a").unwrap();
        let lock = mem.get(FileKind::Lock, "l").ok();
        match (at, effect) {
            (0, CrashEffect::Lost) => assert!(!container && lock.is_none()),
            (0, CrashEffect::Durable) => assert!(container && lock.is_none()),
            (1, CrashEffect::Lost) => assert!(container && lock.is_none()),
            (1, CrashEffect::Durable) => assert_eq!(lock.as_deref(), Some(&b"lock"[..])),
            (1, CrashEffect::Torn) => assert_eq!(lock.as_deref(), Some(&b""[..])),
            (2, CrashEffect::Durable) => assert!(!container && lock.is_some()),
            _ => unreachable!(),
        }
        assert_eq!(f.faults_injected(), 1);
        // The restart: everything works again.
        f.disarm();
        assert!(!f.crashed());
        f.put(FileKind::Container, "b", b"b").unwrap();
    }
}

#[test]
fn no_space_fails_only_that_write() {
    let (mem, f) = wrapped();
    f.arm(FaultPlan::no_space(0));
    let [put, create, delete] = three_writes(&f);
    let err = put.unwrap_err();
    assert_eq!(injected(&err), Some(InjectedFault::NoSpace { write: 0 }));
    assert!(
        matches!(&err, Error::Io { cause, .. } if cause.kind() == std::io::ErrorKind::StorageFull)
    );
    assert!(err.to_string().contains("no space left"), "{err}");
    assert!(!mem.exists(FileKind::Container, "a").unwrap());
    create.unwrap();
    delete.unwrap();
    assert!(!f.crashed());
}

#[test]
fn short_reads_return_fewer_bytes() {
    let (_, f) = wrapped();
    f.put(FileKind::Container, "a", b"0123456789").unwrap();
    f.arm(FaultPlan::none().with_read_fault(ReadFault {
        kind: FileKind::Container,
        nth: None,
        damage: ReadDamage::Short { missing_bytes: 3 },
    }));
    assert_eq!(f.get(FileKind::Container, "a").unwrap(), b"0123456");
    assert_eq!(f.get_range(FileKind::Container, "a", 1, 4).unwrap(), b"1");
    let mut buf = Vec::new();
    f.get_range_into(FileKind::Container, "a", 0, 2, &mut buf)
        .unwrap();
    assert_eq!(buf, b"", "never below zero");
    // Other kinds are not touched, and a zero cut still cuts one byte.
    f.put(FileKind::Snapshot, "s", b"snap").unwrap();
    assert_eq!(f.get(FileKind::Snapshot, "s").unwrap(), b"snap");
    f.arm(FaultPlan::none().with_read_fault(ReadFault {
        kind: FileKind::Snapshot,
        nth: None,
        damage: ReadDamage::Short { missing_bytes: 0 },
    }));
    assert_eq!(f.get(FileKind::Snapshot, "s").unwrap(), b"sna");
}

#[test]
fn flips_hit_only_the_chosen_read_and_are_deterministic() {
    let (_, f) = wrapped();
    let data: Vec<u8> = (0..=255).collect();
    f.put(FileKind::Container, "a", &data).unwrap();
    f.arm(FaultPlan::none().with_read_fault(ReadFault {
        kind: FileKind::Container,
        nth: Some(1),
        damage: ReadDamage::Flip {
            position: BytePosition::At(300),
            mask: 0,
        },
    }));
    assert_eq!(f.get(FileKind::Container, "a").unwrap(), data);
    let second = f.get(FileKind::Container, "a").unwrap();
    assert_eq!(f.get(FileKind::Container, "a").unwrap(), data);
    let diff: Vec<usize> = (0..data.len()).filter(|&i| second[i] != data[i]).collect();
    assert_eq!(diff, vec![300 % 256]);
    assert_eq!(
        f.injection_log(),
        [Injection {
            kind: FileKind::Container,
            name: "a".into(),
            index: 1,
            detail: InjectionDetail::Flip {
                len_bytes: 256,
                offset: 44
            }
        }]
    );
    assert_eq!(second[44], data[44] ^ 1);

    let seeded = |seed| {
        f.arm(FaultPlan::none().with_read_fault(ReadFault {
            kind: FileKind::Container,
            nth: None,
            damage: ReadDamage::Flip {
                position: BytePosition::Seeded(seed),
                mask: 0xff,
            },
        }));
        (0..4)
            .map(|_| f.get(FileKind::Container, "a").unwrap())
            .collect::<Vec<_>>()
    };
    let a = seeded(7);
    assert_eq!(a, seeded(7), "same seed, same damage");
    assert_ne!(a, seeded(8));
    for read in &a {
        assert_eq!((0..256).filter(|&i| read[i] != data[i]).count(), 1);
    }
}

#[test]
fn damage_at_rest_is_persistent_and_returns_the_original() {
    let (mem, f) = wrapped();
    f.put(FileKind::Container, "a", b"abc").unwrap();
    let before = f.damage(FileKind::Container, "a", 4, 0x20).unwrap();
    assert_eq!(before, b"abc");
    assert_eq!(mem.get(FileKind::Container, "a").unwrap(), b"aBc");
    assert_eq!(f.counts().total_writes(), 1, "damage is not counted");
    f.put(FileKind::Lock, "empty", b"").unwrap();
    assert!(f.damage(FileKind::Lock, "empty", 0, 1).is_err());
}
