//! The short torture run of `cargo test`: the whole-API workload (every
//! kind of lock, re-entry, extend, cancelled acquisitions, downgrades,
//! multi-permit semaphores, `MultiLock`), two processes, every kind of fault
//! at least once; no violation allowed.

use std::path::PathBuf;

use redisync_torture::{run, Config, FaultKind, Kind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_torture_run_has_no_violations() {
    let config = Config::short(PathBuf::from(env!("CARGO_BIN_EXE_redisync-torture")));
    let summary = run(&config)
        .await
        .expect("the torture run could not be set up");
    println!("{summary}");
    for kind in FaultKind::ALL {
        assert!(
            summary.faults_of(kind) > 0,
            "fault {kind} never injected\n{summary}"
        );
    }
    for kind in Kind::ALL {
        assert!(
            summary.grants_of(kind) > 0,
            "{kind} never granted\n{summary}"
        );
    }
    // The workload used the API it claims to.
    let count =
        |kind, f: fn(&redisync_torture::Counts) -> u64| summary.counts.get(&kind).map_or(0, f);
    assert!(count(Kind::Lock, |c| c.reentered) > 0, "{summary}");
    assert!(count(Kind::Lock, |c| c.extended) > 0, "{summary}");
    assert!(count(Kind::Lock, |c| c.cancelled) > 0, "{summary}");
    assert!(count(Kind::Lock, |c| c.moved) > 0, "{summary}");
    assert!(
        count(Kind::RwRead, |c| c.special) > 0,
        "no downgrade\n{summary}"
    );
    assert!(
        count(Kind::RwWrite, |c| c.special) > 0,
        "no upgrade refused\n{summary}"
    );
    for process in ["p0", "p1"] {
        assert!(
            summary
                .sections_by_process
                .get(process)
                .copied()
                .unwrap_or(0)
                > 0,
            "no section from {process}\n{summary}"
        );
    }
    assert!(
        summary.violations().is_empty(),
        "{} violations\n{summary}",
        summary.violations().len()
    );
}
