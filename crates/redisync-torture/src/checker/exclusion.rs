//! (a) Exclusion by access: at every instant the valid holders of a lock
//! are compatible (exclusive, shared, at most n permits).

use std::collections::BTreeMap;

use super::{valid_until, Excuses, Report, Violation};
use crate::history::{Access, Section};

/// Whether two sections of different holders may not be valid at once
/// (permits are counted apart, see [`permit_excess`]).
fn incompatible(a: Access, b: Access) -> bool {
    !matches!(
        (a, b),
        (Access::Shared, Access::Shared) | (Access::Permits { .. }, Access::Permits { .. })
    )
}

/// Permits held together by `holders`: each client counted once, with the
/// most it holds in one section.
fn permits_held<'a>(holders: impl Iterator<Item = &'a Section>) -> u32 {
    let mut by_client: BTreeMap<&str, u32> = BTreeMap::new();
    for h in holders {
        if let Access::Permits { held, .. } = h.access {
            let most = by_client.entry(&h.client).or_default();
            *most = (*most).max(held);
        }
    }
    by_client.values().fold(0, |sum, n| sum.saturating_add(*n))
}

/// (a): at each grant's start, its valid interval against those active
/// then. `grants` are sorted by start.
pub(super) fn check_exclusion(
    lock: &str,
    grants: &[&Section],
    excuses: &Excuses<'_>,
    report: &mut Report,
) {
    let of = grants
        .iter()
        .filter_map(|s| match s.access {
            Access::Permits { of, .. } => Some(of),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut active: Vec<&Section> = Vec::new();
    for &s in grants {
        let until = valid_until(s);
        if until <= s.start_us {
            // Valid for no time at all: conflicts with nothing.
            continue;
        }
        active.retain(|a| valid_until(a) > s.start_us);
        for &a in &active {
            if a.client == s.client || !incompatible(a.access, s.access) {
                continue;
            }
            let why = excuses
                .excuse(a, s, valid_until(a))
                .or_else(|| excuses.excuse(s, a, until));
            if let Some(why) = why {
                report.excused(why);
            } else {
                report.violations.push(Violation::Overlap {
                    lock: lock.to_owned(),
                    first: a.clone(),
                    second: s.clone(),
                    overlap_us: valid_until(a).min(until) - s.start_us,
                });
            }
        }
        active.push(s);
        if matches!(s.access, Access::Permits { .. }) {
            permit_excess(lock, &active, of, excuses, report);
        }
    }
}

/// (a) for permits: `active` are the valid sections at the start of the
/// newest, its last. Checked when the newest adds to what its client holds.
fn permit_excess(
    lock: &str,
    active: &[&Section],
    of: u32,
    excuses: &Excuses<'_>,
    report: &mut Report,
) {
    let Some((&newest, others)) = active.split_last() else {
        return;
    };
    let permits = |s: &&Section| matches!(s.access, Access::Permits { .. });
    let held = permits_held(active.iter().copied().filter(permits));
    let before = permits_held(others.iter().copied().filter(permits));
    if held <= of || held == before {
        return;
    }
    // Without the holders a restart explains (asked before a kill, still
    // within their lease after it), does the rest fit?
    let rest = active.iter().copied().filter(permits).filter(|x| {
        std::ptr::eq(*x, newest) || excuses.excuse(x, newest, valid_until(x)).is_none()
    });
    if permits_held(rest) <= of {
        report.excused_overlaps += 1;
    } else {
        report.violations.push(Violation::PermitExcess {
            lock: lock.to_owned(),
            at_us: newest.start_us,
            held,
            of,
            holders: active.iter().map(|s| (*s).clone()).collect(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::tests::{assert_clean, held, history, kinds, permits, section, with_kills};
    use crate::checker::{check, FORCE_IN_FLIGHT_US};
    use crate::history::{History, Kind, Server};

    #[test]
    fn an_exclusive_overlap_is_a_violation() {
        let report = check(&history(vec![
            section("a", 10, 100, 300, Some(299)),
            section("b", 11, 200, 400, Some(399)),
        ]));
        // `a`'s end write (token 10 after 11) is rejected while `a` believed
        // in its lease: the store saw it too.
        assert_eq!(kinds(&report), ["overlap", "valid-rejected"], "{report:#?}");
        let Violation::Overlap {
            first,
            second,
            overlap_us,
            ..
        } = &report.violations[0]
        else {
            panic!("{report:?}")
        };
        assert_eq!((first.client.as_str(), second.client.as_str()), ("a", "b"));
        assert_eq!(*overlap_us, 99);
    }

    #[test]
    fn intervals_that_only_touch_do_not_overlap() {
        let report = check(&history(vec![
            section("a", 10, 100, 200, Some(200)),
            section("b", 11, 200, 300, Some(299)),
        ]));
        assert_clean(&report);
    }

    #[test]
    fn readers_overlapping_each_other_pass() {
        let report = check(&history(vec![
            held("a", 10, 100, 300, Access::Shared),
            held("b", 11, 150, 350, Access::Shared),
            held("c", 12, 200, 250, Access::Shared),
            held("d", 13, 400, 500, Access::Exclusive),
        ]));
        assert_clean(&report);
    }

    #[test]
    fn a_reader_overlapping_a_writer_of_another_client_is_a_violation() {
        let report = check(&history(vec![
            held("a", 10, 100, 300, Access::Shared),
            held("w", 11, 200, 400, Access::Exclusive),
        ]));
        assert_eq!(kinds(&report), ["overlap"], "{report:#?}");

        // And a writer first, a reader of another client during it.
        let report = check(&history(vec![
            held("w", 10, 100, 300, Access::Exclusive),
            held("b", 11, 200, 400, Access::Shared),
        ]));
        // The reader raised the store above the writer's token: its end
        // write, still believed valid, is rejected too.
        assert_eq!(kinds(&report), ["overlap", "valid-rejected"], "{report:#?}");
    }

    #[test]
    fn a_downgrade_overlapping_its_own_write_section_passes() {
        // `a` holds the write side, takes the read side (new, larger token)
        // and lets the write side go: its end write is fenced off by its own
        // read, which is no conflict. `b` reads after the write side is gone.
        let mut read = held("a", 11, 200, 500, Access::Shared);
        read.requested_us = 150;
        let report = check(&history(vec![
            held("a", 10, 100, 300, Access::Exclusive),
            read,
            held("b", 12, 350, 450, Access::Shared),
        ]));
        assert_clean(&report);
        assert_eq!(report.downgrade_writes_rejected, 1);

        // Another client reading while the write side is valid is not.
        let report = check(&history(vec![
            held("a", 10, 100, 300, Access::Exclusive),
            held("a", 11, 200, 500, Access::Shared),
            held("b", 12, 250, 450, Access::Shared),
        ]));
        assert!(kinds(&report).contains(&"overlap"), "{report:#?}");
    }

    #[test]
    fn three_holders_of_one_permit_of_three_pass() {
        let report = check(&history(vec![
            held("a", 10, 100, 400, permits(1, 3)),
            held("b", 11, 150, 450, permits(1, 3)),
            held("c", 12, 200, 500, permits(1, 3)),
            held("d", 13, 401, 600, permits(1, 3)),
        ]));
        assert_clean(&report);
    }

    #[test]
    fn holders_of_two_and_two_permits_of_three_overlapping_are_a_violation() {
        let report = check(&history(vec![
            held("a", 10, 100, 400, permits(2, 3)),
            held("b", 11, 200, 500, permits(2, 3)),
        ]));
        assert_eq!(kinds(&report), ["permits"], "{report:#?}");
        let Violation::PermitExcess {
            at_us,
            held: n,
            of,
            holders,
            ..
        } = &report.violations[0]
        else {
            unreachable!()
        };
        assert_eq!((*at_us, *n, *of, holders.len()), (200, 4, 3, 2));
    }

    #[test]
    fn a_holder_counts_its_permits_once() {
        // One client with two overlapping sections of 2 counts 2, not 4.
        let report = check(&history(vec![
            held("a", 10, 100, 400, permits(2, 3)),
            held("a", 11, 200, 500, permits(2, 3)),
            held("b", 12, 250, 300, permits(1, 3)),
        ]));
        assert_clean(&report);
    }

    #[test]
    fn a_semaphore_of_one_permit_is_exclusive_and_fenced() {
        let report = check(&history(vec![
            held("a", 10, 100, 300, permits(1, 1)),
            held("b", 11, 200, 400, permits(1, 1)),
        ]));
        assert_eq!(kinds(&report), ["permits", "valid-rejected"], "{report:#?}");
    }

    /// `a` holds the lock from 100, the main server dies at 150 and its new
    /// life grants `b` at 200 while `a` still believes until `a_until`.
    fn across_a_kill(a_until: u64) -> History {
        with_kills(
            vec![
                section("a", 10, 100, a_until, Some(a_until)),
                section("b", 1_000, 200, 400, Some(399)),
            ],
            &[150],
        )
    }

    #[test]
    fn an_overlap_across_a_kill_within_the_lease_is_excused() {
        let report = check(&across_a_kill(299));
        assert_clean(&report);
        assert_eq!(report.excused_overlaps, 1);
        // `a`'s end write at 300 is fenced off by `b`: excused likewise.
        assert_eq!(report.excused_rejections, 1);
        // Up to the lease after the kill exactly.
        let report = check(&across_a_kill(1_150));
        assert_clean(&report);
    }

    #[test]
    fn an_overlap_longer_than_a_lease_after_the_kill_is_not_excused() {
        // `a` believes until 1151, one microsecond beyond its lease after the
        // kill at 150, and `b` (valid until 1999 here) overlaps it all along.
        let mut h = across_a_kill(1_151);
        h.sections[1].end_us = 2_000;
        h.sections[1].valid_until_us = Some(1_999);
        let report = check(&h);
        assert!(kinds(&report).contains(&"overlap"), "{report:#?}");
        assert_eq!(report.excused_overlaps, 0);
    }

    #[test]
    fn an_overlap_across_a_kill_needs_the_request_before_it() {
        // `a` asked at 160, after the kill at 150: the restart explains
        // nothing.
        let mut h = across_a_kill(299);
        h.sections[0].requested_us = 160;
        h.sections[0].start_us = 170;
        assert!(kinds(&check(&h)).contains(&"overlap"));
    }

    #[test]
    fn an_overlap_across_a_kill_is_excused_the_other_way_round_too() {
        // `a` asked before the kill and got its reply only at 300, from the
        // old life; `b` was granted by the new one at 200.
        let mut h = across_a_kill(399);
        h.sections[0].requested_us = 100;
        h.sections[0].start_us = 300;
        h.sections[0].token = 2_000;
        let report = check(&h);
        assert!(!kinds(&report).contains(&"overlap"), "{report:#?}");
        assert_eq!(report.excused_overlaps, 1);
    }

    #[test]
    fn an_overlap_across_a_kill_on_redlock_is_never_excused() {
        let mut h = across_a_kill(299);
        for s in &mut h.sections {
            s.kind = Kind::Redlock;
        }
        assert_eq!(kinds(&check(&h)), ["overlap", "valid-rejected"]);
        // Nor by a kill of another server.
        let mut h = across_a_kill(299);
        h.kills[0].server = Server::Node(0);
        assert_eq!(kinds(&check(&h)), ["overlap", "valid-rejected"]);
    }

    #[test]
    fn an_overlap_across_a_kill_between_restart_guarded_clients_is_never_excused() {
        // Guarded clients take nothing from a server up for less than their
        // longest lease: an empty restart (or one from older data: the
        // uptime restarts too) explains no overlap between them.
        let mut h = across_a_kill(299);
        for s in &mut h.sections {
            s.client = format!("p0.guarded.{}", s.client);
        }
        let report = check(&h);
        assert_eq!(kinds(&report), ["overlap", "valid-rejected"], "{report:#?}");
        assert_eq!(report.excused_overlaps, 0);
        // An unguarded old holder (never on a guarded name in a run) keeps
        // the excuse: the guard only holds between guarded clients.
        h.sections[0].client = "p0.direct.a".into();
        assert_clean(&check(&h));
    }

    /// `a` (of client `p0.direct`) holds from 100; `forcer` force-unlocks
    /// the lock (asked 140, returned 150), `b` is granted at 200 while `a`
    /// believes until `a_until`.
    fn forced(forcer: &str, a_until: u64) -> History {
        History {
            sections: vec![
                section("p0.direct.a", 10, 100, a_until, Some(a_until)),
                section("p1.direct.b", 11, 200, 400, Some(399)),
            ],
            forces: vec![crate::history::Force {
                lock: "l".into(),
                client: forcer.into(),
                asked_us: 140,
                done_us: 150,
                ok: true,
            }],
            ..History::default()
        }
    }

    #[test]
    fn a_holder_forced_by_another_client_may_believe_for_its_lease() {
        let report = check(&forced("p1.proxied.x", 1_150));
        assert_clean(&report);
        assert_eq!(report.forced_overlaps, 1);
        assert_eq!(report.forced_rejections, 1);
        let report = check(&forced("p1.proxied.x", 1_151));
        assert_eq!(kinds(&report), ["overlap", "valid-rejected"], "{report:#?}");
    }

    #[test]
    fn a_holder_forced_by_its_own_client_knows_at_once() {
        // Another task of the same client forced it: its looks after the
        // call returned must find it lost.
        let report = check(&forced("p0.direct.other", 299));
        assert_eq!(kinds(&report), ["overlap", "valid-rejected"], "{report:#?}");
        // Lost by 150: nothing overlaps (its end write is fenced off).
        let mut h = forced("p0.direct.other", 150);
        h.sections[0].end_us = 300;
        h.sections[0].valid_at_end = false;
        assert_clean(&check(&h));
        // A force that failed (its reply lost) may have deleted the lock
        // without telling the client: the lease bound applies.
        let mut h = forced("p0.direct.other", 299);
        h.forces[0].ok = false;
        let report = check(&h);
        assert_clean(&report);
        assert_eq!(report.forced_overlaps, 1);
        // No force of this lock, no excuse.
        let mut h = forced("p1.proxied.x", 299);
        h.forces[0].lock = "m".into();
        assert_eq!(kinds(&check(&h)), ["overlap", "valid-rejected"]);
    }

    #[test]
    fn an_overlap_across_a_failover_between_replica_synced_clients_is_never_excused() {
        let synced = |failover: bool| {
            let mut h = across_a_kill(299);
            h.kills[0].failover = failover;
            for s in &mut h.sections {
                s.client = format!("p0.synced.{}", s.client);
            }
            check(&h)
        };
        // Their belief never outlives what the promoted replica keeps.
        let report = synced(true);
        assert_eq!(kinds(&report), ["overlap", "valid-rejected"], "{report:#?}");
        // An empty restart loses what the replica acknowledged too.
        let report = synced(false);
        assert_clean(&report);
        assert_eq!(report.excused_overlaps, 1);
    }

    #[test]
    fn a_force_without_a_reply_may_run_when_a_paused_server_resumes() {
        // The force was asked at 140 and gave up at 150 (server paused);
        // the server ran it at about 195, after `a`'s grant (asked at 160),
        // and `b` got the lock at 200.
        let mut h = forced("p1.proxied.x", 299);
        h.forces[0].ok = false;
        h.sections[0].requested_us = 160;
        h.sections[0].start_us = 170;
        let report = check(&h);
        assert_clean(&report);
        assert_eq!(report.forced_overlaps, 1);
        // Within `a`'s lease after `b`'s grant only.
        let mut late = h.clone();
        late.sections[0].end_us = 1_201;
        late.sections[0].valid_until_us = Some(1_201);
        assert!(kinds(&check(&late)).contains(&"overlap"));
        // Asked too long before to still be in flight.
        let mut old = h.clone();
        let mut sections = old.sections.clone();
        for s in &mut sections {
            s.start_us += FORCE_IN_FLIGHT_US;
            s.requested_us += FORCE_IN_FLIGHT_US;
            s.end_us += FORCE_IN_FLIGHT_US;
            s.valid_until_us = s.valid_until_us.map(|v| v + FORCE_IN_FLIGHT_US);
        }
        old.sections = sections;
        assert!(kinds(&check(&old)).contains(&"overlap"));
    }

    #[test]
    fn a_permit_excess_across_a_kill_is_excused_when_the_rest_fits() {
        let mut old = held("a", 10, 100, 300, permits(2, 3));
        old.requested_us = 90;
        let report = check(&with_kills(
            vec![old.clone(), held("b", 1_000, 200, 400, permits(2, 3))],
            &[150],
        ));
        assert_clean(&report);
        assert_eq!(report.excused_overlaps, 1);

        // Of 4: `a` 2 and `c` 2 before the kill, `b` 3 after it. `c` believes
        // far beyond its lease: not explained by the restart, and with it the
        // rest does not fit; within its lease it would.
        let of4 = |c_end: u64| {
            let mut a = held("a", 10, 100, 300, permits(2, 4));
            a.requested_us = 90;
            let mut c = held("c", 11, 120, c_end, permits(2, 4));
            c.requested_us = 110;
            check(&with_kills(
                vec![a, c, held("b", 1_000, 200, 400, permits(3, 4))],
                &[150],
            ))
        };
        assert_clean(&of4(500));
        let report = of4(3_000);
        assert_eq!(kinds(&report), ["permits"], "{report:#?}");
    }
}
