//! (c) The fenced store: stale writes accepted, valid writes rejected.

use std::collections::BTreeMap;

use super::{valid_until, Excuses, Report, Violation, Why};
use crate::history::{Access, Section};

/// A fenced resource: per lock, the largest token seen so far; a write
/// with a smaller token is rejected.
#[derive(Debug, Default)]
pub struct FencedStore {
    max: BTreeMap<String, u64>,
}

impl FencedStore {
    /// Writes under `token`: accepted (true) unless a larger token was
    /// written to or read from `lock` before. The same token may write again.
    pub fn write(&mut self, lock: &str, token: u64) -> bool {
        let max = self.max.entry(lock.to_owned()).or_insert(token);
        if token < *max {
            return false;
        }
        *max = token;
        true
    }

    /// Reads under `token`: never rejected, but raises the largest token of
    /// `lock` to `token`, so that writes with older tokens are rejected from
    /// now on.
    pub fn read(&mut self, lock: &str, token: u64) {
        let max = self.max.entry(lock.to_owned()).or_insert(token);
        *max = (*max).max(token);
    }
}

/// What a section does to the fenced store at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    /// The last look and the write after it.
    EndWrite,
    /// The first look and the write after it.
    StartWrite,
    /// The first look and the read after it.
    Read,
}

/// (c): replays the store operations of one lock in time order. `sections`
/// and `grants` are sorted by start.
pub(super) fn check_fencing(
    lock: &str,
    sections: &[&Section],
    grants: &[&Section],
    excuses: &Excuses<'_>,
    report: &mut Report,
) {
    let mut ops: Vec<(u64, Op, &Section)> = Vec::with_capacity(sections.len() * 2);
    for &s in sections {
        match s.access {
            Access::Exclusive | Access::Permits { of: 1, .. } => {
                ops.push((s.start_us, Op::StartWrite, s));
                ops.push((s.end_us, Op::EndWrite, s));
            }
            Access::Shared => ops.push((s.start_us, Op::Read, s)),
            Access::Permits { .. } => {}
        }
    }
    // At equal times end writes go first (the next grant can only follow a
    // release); the sort is stable, so ties keep the start order.
    ops.sort_by_key(|(at, op, _)| (*at, *op));
    let mut store = FencedStore::default();
    // The section whose token the store holds.
    let mut holder: Option<&Section> = None;
    for (at_us, op, writer) in ops {
        if op == Op::Read {
            store.read(lock, writer.token);
            if holder.is_none_or(|h| writer.token > h.token) {
                holder = Some(writer);
            }
            continue;
        }
        let believed_valid = if op == Op::EndWrite {
            writer.valid_at_end
        } else {
            writer.valid_at_start()
        };
        if store.write(lock, writer.token) {
            if holder.is_none_or(|h| writer.token > h.token) {
                holder = Some(writer);
            }
            accepted(lock, writer, at_us, believed_valid, grants, excuses, report);
        } else if !believed_valid {
            report.stale_writes_rejected += 1;
        } else if let Some(h) = holder {
            rejected(lock, writer, at_us, h, excuses, report);
        }
    }
}

/// (c) for a write the store accepted: stale when a grant that started
/// after the writer's had started before the write, unless an excuse says
/// that grant superseded nothing; else counted when its writer knew it had
/// lost.
fn accepted(
    lock: &str,
    writer: &Section,
    at_us: u64,
    believed_valid: bool,
    grants: &[&Section],
    excuses: &Excuses<'_>,
    report: &mut Report,
) {
    // The first grant that started after the writer's: before this
    // write, it should have fenced it off.
    let first_after = grants.partition_point(|g| g.start_us <= writer.start_us);
    match grants.get(first_after).filter(|g| g.start_us < at_us) {
        // The later start was a forced holder whose reply came
        // late: its lock was gone before the writer's grant, so it
        // superseded nothing (it believes until it learns).
        Some(later) if excuses.forces.excuse(later, writer, valid_until(later)) => {
            report.forced_rejections += 1;
        }
        // Likewise a later start whose grant a restart wiped: asked
        // before the kill, granted by the old life (its section
        // began after the kill: a reply read after a stall, or a
        // `MultiLock` still taking its other members).
        Some(later) if excuses.kills.excuse(later, writer, valid_until(later)) => {
            report.excused_overlaps += 1;
        }
        Some(later) => report.violations.push(Violation::StaleWriteAccepted {
            lock: lock.to_owned(),
            writer: writer.clone(),
            at_us,
            superseded_by: (*later).clone(),
        }),
        None if !believed_valid => report.late_writes_accepted += 1,
        None => {}
    }
}

/// (c) for a write the store rejected although its writer believed in its
/// lease: `h` holds the store's token.
fn rejected(
    lock: &str,
    writer: &Section,
    at_us: u64,
    h: &Section,
    excuses: &Excuses<'_>,
    report: &mut Report,
) {
    if h.client == writer.client && h.start_us > writer.start_us {
        report.downgrade_writes_rejected += 1;
    } else if let Some(why) = excuses.excuse(writer, h, at_us) {
        match why {
            Why::Restart => report.excused_rejections += 1,
            Why::Forced => report.forced_rejections += 1,
        }
    } else {
        report.violations.push(Violation::ValidWriteRejected {
            lock: lock.to_owned(),
            writer: writer.clone(),
            at_us,
            fenced_by: h.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::check;
    use crate::checker::tests::{assert_clean, held, history, kinds, permits, section, with_kills};
    use crate::history::History;

    #[test]
    fn expected_expiry_under_a_fault_passes_and_fencing_rejects_the_stale_writer() {
        // `a` is partitioned: its lease runs out at 150 while its code goes
        // on until 400. `b` is granted at 200 with a larger token. `a`'s end
        // write at 400 is stale and must be rejected: no violation.
        let report = check(&history(vec![
            section("a", 10, 100, 400, Some(150)),
            section("b", 11, 200, 300, Some(299)),
        ]));
        assert_clean(&report);
        assert_eq!(report.lost, 1);
        assert_eq!(report.stale_writes_rejected, 1);
    }

    #[test]
    fn a_write_of_a_lost_holder_nobody_superseded_is_accepted_and_counted() {
        let report = check(&history(vec![
            section("a", 10, 100, 400, Some(150)),
            section("b", 11, 500, 600, Some(599)),
        ]));
        assert_clean(&report);
        assert_eq!(report.late_writes_accepted, 1);
    }

    #[test]
    fn semaphores_of_more_permits_are_not_fenced() {
        // Overlapping holders of 1 of 2 write with any tokens: the resource
        // is shared, the store does not apply.
        let report = check(&history(vec![
            held("a", 11, 100, 300, permits(1, 2)),
            held("b", 12, 200, 400, permits(1, 2)),
        ]));
        assert_clean(&report);
        assert_eq!(report.stale_writes_rejected, 0);
    }

    #[test]
    fn a_forced_holder_whose_reply_came_late_supersedes_nobody() {
        // `k0` was granted (token 10) at about 90, its lock force-unlocked
        // at 140-150 by another client, `k1` granted at 160 (token 11);
        // `k0`'s reply arrived at 170. `k1`'s end write at 300 is accepted:
        // not a stale write, `k0` held nothing by then.
        let mut k0 = section("p1.proxied.k0", 10, 170, 250, Some(250));
        k0.requested_us = 80;
        let k1 = section("p0.direct.k1", 11, 160, 300, Some(300));
        let force = crate::history::Force {
            lock: "l".into(),
            client: "p1.direct.l0".into(),
            asked_us: 140,
            done_us: 150,
            ok: true,
        };
        let h = History {
            sections: vec![k0, k1],
            forces: vec![force],
            ..History::default()
        };
        let report = check(&h);
        assert_clean(&report);
        // Without the force, `k1`'s write after `k0`'s start is stale.
        let mut bare = h.clone();
        bare.forces.clear();
        assert!(kinds(&check(&bare)).contains(&"stale-accepted"));
    }

    #[test]
    fn a_stale_write_accepted_is_a_violation() {
        // `a` (token 12) lost its lease at 150; `b` was granted at 200 but
        // got an older token (11): `a`'s end write at 400 is accepted
        // although `b` had superseded it.
        let report = check(&history(vec![
            section("a", 12, 100, 400, Some(150)),
            section("b", 11, 200, 300, Some(299)),
        ]));
        let found = kinds(&report);
        assert!(found.contains(&"stale-accepted"), "{report:#?}");
        assert!(found.contains(&"inversion"), "{report:#?}");
        let Some(Violation::StaleWriteAccepted {
            writer,
            at_us,
            superseded_by,
            ..
        }) = report
            .violations
            .iter()
            .find(|v| matches!(v, Violation::StaleWriteAccepted { .. }))
        else {
            unreachable!()
        };
        assert_eq!((writer.client.as_str(), *at_us), ("a", 400));
        assert_eq!(superseded_by.client.as_str(), "b");
    }

    #[test]
    fn a_stale_write_accepted_across_a_kill_is_a_violation() {
        // `b` asked at 90 and waited; `a` was granted at 100 (token 20) and
        // lost its lease at 140; the server died at 150 and its next life
        // granted `b` at 200 with token 15. No token order binds the two
        // (their requests raced), but `a`'s end write at 400 is accepted
        // after `b`'s grant: no restart excuses that.
        let mut b = section("b", 15, 200, 300, Some(299));
        b.requested_us = 90;
        let report = check(&with_kills(
            vec![section("a", 20, 100, 400, Some(140)), b],
            &[150],
        ));
        let found = kinds(&report);
        assert!(found.contains(&"stale-accepted"), "{report:#?}");
        assert!(!found.contains(&"inversion"), "{report:#?}");
    }

    #[test]
    fn a_write_accepted_after_a_later_start_whose_grant_a_kill_wiped_is_excused() {
        // Found by the simulation (a `MultiLock` member): `b` asked at 100
        // and was granted by the old life (token 15), the server died at 150
        // and its new life granted `a` at 200 (token 20); `b`'s section only
        // began at 300 (its other members), its hold long gone. `a`'s end
        // write at 400 is accepted: `b` superseded nothing.
        let mut b = section("b", 15, 300, 350, Some(349));
        b.requested_us = 100;
        let h = with_kills(vec![section("a", 20, 200, 400, Some(399)), b], &[150]);
        let report = check(&h);
        assert!(!kinds(&report).contains(&"stale-accepted"), "{report:#?}");
        assert!(report.excused_overlaps >= 1, "{report:#?}");
        // Not between restart-guarded clients, and not when `b` asked after
        // the kill.
        let mut guarded = h.clone();
        for s in &mut guarded.sections {
            s.client = format!("p0.guarded.{}", s.client);
        }
        assert!(kinds(&check(&guarded)).contains(&"stale-accepted"));
        let mut late = h;
        late.sections[1].requested_us = 160;
        assert!(kinds(&check(&late)).contains(&"stale-accepted"));
    }

    #[test]
    fn a_reader_fences_off_older_writers() {
        // `a` lost its lease at 150; reader `r` (token 11) starts at 200;
        // `a`'s end write at 400 is rejected: fencing at work.
        let report = check(&history(vec![
            section("a", 10, 100, 400, Some(150)),
            held("r", 11, 200, 300, Access::Shared),
        ]));
        assert_clean(&report);
        assert_eq!(report.stale_writes_rejected, 1);

        // With an older token the reader would not have fenced it off.
        let report = check(&history(vec![
            section("a", 10, 100, 400, Some(150)),
            held("r", 9, 200, 300, Access::Shared),
        ]));
        assert_eq!(
            kinds(&report),
            ["inversion", "stale-accepted"],
            "{report:#?}"
        );
    }

    #[test]
    fn a_valid_write_rejected_across_a_kill_is_excused_within_the_lease_only() {
        // `b` (new life, granted at 200) is gone by 250; `a` still writes
        // believing in its lease, rejected.
        let rejected = |a_end: u64| {
            check(&with_kills(
                vec![
                    section("a", 10, 100, a_end, Some(a_end)),
                    section("b", 1_000, 200, 250, Some(249)),
                ],
                &[150],
            ))
        };
        let report = rejected(1_150);
        assert_clean(&report);
        assert_eq!(report.excused_rejections, 1);

        let report = rejected(1_151);
        assert!(kinds(&report).contains(&"valid-rejected"), "{report:#?}");
        assert_eq!(report.excused_rejections, 0);
    }

    #[test]
    fn the_store_rejects_older_tokens_only() {
        let mut store = FencedStore::default();
        assert!(store.write("l", 5));
        assert!(store.write("l", 5));
        assert!(store.write("l", 7));
        assert!(!store.write("l", 6));
        assert!(store.write("m", 1));
        store.read("l", 9);
        store.read("l", 8);
        assert!(!store.write("l", 8));
        assert!(store.write("l", 9));
    }
}
