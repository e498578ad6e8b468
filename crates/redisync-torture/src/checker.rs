//! The history checker: mutual exclusion, token order, and a fenced store.
//!
//! # What is checked, per lock
//!
//! A section's *valid interval* is `[start, valid_until]`: from the grant to
//! the last time its holder's guard said it was valid (the holder reads the
//! clock, then asks `is_lost()`, every few milliseconds). A section whose
//! guard was lost at its very first look has no valid interval: its start
//! was not a grant (the reply came back after the lease had run out).
//!
//! * **(a) Mutual exclusion**: no two valid intervals overlap. A holder
//!   whose lease ran out under a fault stops being valid when its guard says
//!   so, so expected expiry is not an overlap; two holders that both still
//!   believed in their lease at the same instant are.
//! * **(b) Token order**: ordered by start, the sections valid at their
//!   start (the grants) carry strictly increasing fencing tokens.
//! * **(c) Fenced store**: every section writes to a store at its start and
//!   at its end, whether it still believes in its lease or not (code already
//!   running does not stop), stamped with the time of its first and last
//!   look (a look and its write count as one step, so a holder frozen right
//!   after looking is not mistaken for one that wrote knowing its lease was
//!   gone). The store keeps the largest token per lock and
//!   rejects writes with an older one. The writes are applied in time order
//!   (one clock for every process), as a store would have seen them. A
//!   **stale write accepted** is a write accepted after a later grant of the
//!   same lock had started; a **valid write rejected** is a write by a
//!   holder that still believed in its lease, rejected because somebody else
//!   wrote a larger token meanwhile. Rejected writes of holders that knew
//!   they had lost the lock are fencing at work, and counted.
//!
//! Check (d), nothing left held or renewed after the workers stopped, needs
//! the servers; the runner does it.
//!
//! # Restarts without persistence
//!
//! A server killed and restarted empty forgets the locks it granted: the
//! holder keeps believing in its guard until its watchdog notices (at most a
//! lease) while the server grants the lock again. The README documents this
//! limit ("on one Redis primary", "Leases are time"); fencing must still
//! work. The checker tells the server's lives apart by token (see
//! [`Kill`]): an overlap or a rejected valid write between two sections
//! granted by *different lives* of their server is excused and counted, one
//! within a life is a violation. Tokens must increase across lives too
//! (check (b) has no excuse), and Redlock, whose restart guard covers
//! restarts, gets no excuse at all.
//!
//! # Precision
//!
//! A look happens every few milliseconds, so a valid interval may end up to
//! one look period (plus scheduling delay) before the guard really turned
//! invalid: an overlap shorter than that can go unseen. A start is taken
//! after the acquisition returned, so it is never before the grant. Neither
//! can make a correct history fail.

use std::collections::BTreeMap;
use std::fmt;

use crate::history::{History, Kill, Section, Server};

/// One broken guarantee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// (a) Two holders of one lock both believed their lease valid at once.
    Overlap {
        /// The lock.
        lock: String,
        /// The earlier section.
        first: Section,
        /// The later section.
        second: Section,
        /// How long both were valid, in microseconds.
        overlap_us: u64,
    },
    /// (b) A grant got a token not larger than an earlier grant's.
    TokenInversion {
        /// The lock.
        lock: String,
        /// The earlier grant.
        earlier: Section,
        /// The later grant, with a token not above the earlier one's.
        later: Section,
    },
    /// (c) The fenced store accepted a write after a later grant had started.
    StaleWriteAccepted {
        /// The lock.
        lock: String,
        /// The superseded writer.
        writer: Section,
        /// When it wrote.
        at_us: u64,
        /// The later grant it should have been fenced off by.
        superseded_by: Section,
    },
    /// (c) The fenced store rejected a write of a holder that still believed
    /// in its lease: someone else wrote a larger token meanwhile.
    ValidWriteRejected {
        /// The lock.
        lock: String,
        /// The writer.
        writer: Section,
        /// When it wrote.
        at_us: u64,
        /// The section whose token the store had.
        fenced_by: Section,
    },
    /// (d) A lock stayed held or renewed after every guard was gone (found
    /// by the runner on the servers).
    Residue {
        /// What was found.
        what: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap {
                lock,
                first,
                second,
                overlap_us,
            } => write!(
                f,
                "(a) overlap on {lock}: both valid for {overlap_us} us: {first} / {second}"
            ),
            Violation::TokenInversion {
                lock,
                earlier,
                later,
            } => write!(
                f,
                "(b) token inversion on {lock}: granted earlier {earlier} / later {later}"
            ),
            Violation::StaleWriteAccepted {
                lock,
                writer,
                at_us,
                superseded_by,
            } => write!(
                f,
                "(c) stale write accepted on {lock} at {at_us}: writer {writer}, superseded by {superseded_by}"
            ),
            Violation::ValidWriteRejected {
                lock,
                writer,
                at_us,
                fenced_by,
            } => write!(
                f,
                "(c) valid write rejected on {lock} at {at_us}: writer {writer}, store had {fenced_by}"
            ),
            Violation::Residue { what } => write!(f, "(d) {what}"),
        }
    }
}

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Every violation (must be empty).
    pub violations: Vec<Violation>,
    /// Sections checked.
    pub sections: usize,
    /// Sections whose guard was valid at their start (grants).
    pub grants: usize,
    /// Sections whose guard was lost before their end write.
    pub lost: usize,
    /// Writes of holders that knew their lease was gone, rejected by the
    /// fenced store: fencing at work.
    pub stale_writes_rejected: usize,
    /// Writes of such holders accepted because nobody had been granted the
    /// lock since (harmless).
    pub late_writes_accepted: usize,
    /// Overlaps between grants of different lives of a server (restart
    /// without persistence; documented, not a violation).
    pub excused_overlaps: usize,
    /// Valid writes rejected because of such a restart (likewise).
    pub excused_rejections: usize,
}

/// The life of `server` a `token` was granted in: how many kills of it came
/// before. `server: None` (Redlock) is always life 0.
fn life(kills: &[Kill], server: Option<Server>, token: u64) -> usize {
    server.map_or(0, |s| {
        kills
            .iter()
            .filter(|k| k.server == s && k.at_us < token)
            .count()
    })
}

/// A fenced resource: per lock, the largest token written so far; a write
/// with a smaller token is rejected.
#[derive(Debug, Default)]
pub struct FencedStore {
    max: BTreeMap<String, u64>,
}

impl FencedStore {
    /// Writes under `token`: accepted (true) unless a larger token was
    /// written to `lock` before. The same token may write again.
    pub fn write(&mut self, lock: &str, token: u64) -> bool {
        match self.max.get_mut(lock) {
            Some(max) if token < *max => false,
            Some(max) => {
                *max = token;
                true
            }
            None => {
                self.max.insert(lock.to_owned(), token);
                true
            }
        }
    }
}

/// Checks (a), (b) and (c) on `history`.
pub fn check(history: &History) -> Report {
    let mut report = Report {
        sections: history.sections.len(),
        ..Report::default()
    };
    let mut by_lock: BTreeMap<&str, Vec<&Section>> = BTreeMap::new();
    for s in &history.sections {
        by_lock.entry(&s.lock).or_default().push(s);
        report.grants += usize::from(s.valid_at_start());
        report.lost += usize::from(s.lost_at_us.is_some());
    }
    for (lock, mut sections) in by_lock {
        sections.sort_by_key(|s| (s.start_us, s.end_us));
        let life_of = |s: &Section| life(&history.kills, s.kind.server(), s.token);
        check_overlaps(lock, &sections, &life_of, &mut report);
        check_tokens(lock, &sections, &life_of, &mut report);
        check_fencing(lock, &sections, &life_of, &mut report);
    }
    report
}

/// (a): valid intervals of one lock must not overlap (within a server life).
fn check_overlaps(
    lock: &str,
    sections: &[&Section],
    life_of: &dyn Fn(&Section) -> usize,
    report: &mut Report,
) {
    let mut active: Vec<(&Section, u64)> = Vec::new();
    for &s in sections {
        let Some(until) = s.valid_until_us else {
            continue;
        };
        active.retain(|(_, end)| *end > s.start_us);
        for &(a, a_until) in &active {
            let overlap_us = a_until.min(until).saturating_sub(s.start_us);
            if overlap_us == 0 {
                continue;
            }
            if life_of(a) == life_of(s) {
                report.violations.push(Violation::Overlap {
                    lock: lock.to_owned(),
                    first: a.clone(),
                    second: s.clone(),
                    overlap_us,
                });
            } else {
                report.excused_overlaps += 1;
            }
        }
        if until > s.start_us {
            active.push((s, until));
        }
    }
}

/// (b): tokens of the grants of one lock strictly increase in start order.
/// A server's new life starts counting above every token of the old one, so
/// only grants of one life are compared; a grant of an older life that
/// started late (its reply was slow) is no inversion.
fn check_tokens(
    lock: &str,
    sections: &[&Section],
    life_of: &dyn Fn(&Section) -> usize,
    report: &mut Report,
) {
    let mut max_by_life: BTreeMap<usize, &Section> = BTreeMap::new();
    for &s in sections.iter().filter(|s| s.valid_at_start()) {
        let life = life_of(s);
        match max_by_life.get(&life) {
            Some(prev) if s.token <= prev.token => {
                report.violations.push(Violation::TokenInversion {
                    lock: lock.to_owned(),
                    earlier: (*prev).clone(),
                    later: s.clone(),
                });
            }
            _ => {
                max_by_life.insert(life, s);
            }
        }
    }
}

/// (c): replays the fenced writes of one lock in time order.
fn check_fencing(
    lock: &str,
    sections: &[&Section],
    life_of: &dyn Fn(&Section) -> usize,
    report: &mut Report,
) {
    // (time, end write?, section): at equal times an end write goes first
    // (the next grant can only follow a release).
    let mut writes: Vec<(u64, bool, &Section)> = Vec::with_capacity(sections.len() * 2);
    for &s in sections {
        writes.push((s.start_us, false, s));
        writes.push((s.end_us, true, s));
    }
    writes.sort_by_key(|(at, is_end, s)| (*at, !*is_end, s.start_us));
    // Grant start times, per server life, sorted (sections are by start).
    let mut grants: BTreeMap<usize, Vec<&Section>> = BTreeMap::new();
    for &s in sections.iter().filter(|s| s.valid_at_start()) {
        grants.entry(life_of(s)).or_default().push(s);
    }
    let mut store = FencedStore::default();
    // The section whose token the store holds.
    let mut holder: Option<&Section> = None;
    for (at_us, is_end, writer) in writes {
        let believed_valid = if is_end {
            writer.valid_at_end
        } else {
            writer.valid_at_start()
        };
        if store.write(lock, writer.token) {
            if holder.is_none_or(|h| writer.token > h.token) {
                holder = Some(writer);
            }
            // A later grant of the same life started before this write?
            let later = grants.get(&life_of(writer)).and_then(|g| {
                let first_after = g.partition_point(|s| s.start_us <= writer.start_us);
                g.get(first_after).filter(|s| s.start_us < at_us)
            });
            match later {
                Some(later) => report.violations.push(Violation::StaleWriteAccepted {
                    lock: lock.to_owned(),
                    writer: writer.clone(),
                    at_us,
                    superseded_by: (*later).clone(),
                }),
                None if !believed_valid => report.late_writes_accepted += 1,
                None => {}
            }
        } else if !believed_valid {
            report.stale_writes_rejected += 1;
        } else if let Some(h) = holder {
            if life_of(h) == life_of(writer) {
                report.violations.push(Violation::ValidWriteRejected {
                    lock: lock.to_owned(),
                    writer: writer.clone(),
                    at_us,
                    fenced_by: h.clone(),
                });
            } else {
                report.excused_rejections += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Kind;

    /// A section of lock "l" that was valid from `start` to `valid_until`
    /// (`None`: lost at its start) and ended at `end`.
    fn section(
        client: &str,
        token: u64,
        start: u64,
        end: u64,
        valid_until: Option<u64>,
    ) -> Section {
        Section {
            lock: "l".into(),
            kind: Kind::Lock,
            client: client.into(),
            token,
            requested_us: start.saturating_sub(5),
            start_us: start,
            end_us: end,
            valid_until_us: valid_until,
            valid_at_end: valid_until.is_some_and(|v| v + 1 >= end),
            lost_at_us: match valid_until {
                Some(v) if v + 1 >= end => None,
                Some(v) => Some(v + 1),
                None => Some(start),
            },
        }
    }

    fn history(sections: Vec<Section>) -> History {
        History {
            sections,
            kills: Vec::new(),
        }
    }

    fn kinds(report: &Report) -> Vec<&'static str> {
        report
            .violations
            .iter()
            .map(|v| match v {
                Violation::Overlap { .. } => "overlap",
                Violation::TokenInversion { .. } => "inversion",
                Violation::StaleWriteAccepted { .. } => "stale-accepted",
                Violation::ValidWriteRejected { .. } => "valid-rejected",
                Violation::Residue { .. } => "residue",
            })
            .collect()
    }

    #[test]
    fn a_clean_history_passes() {
        let report = check(&history(vec![
            section("a", 10, 100, 200, Some(199)),
            section("b", 11, 210, 300, Some(299)),
            section("a", 12, 310, 400, Some(399)),
        ]));
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!((report.sections, report.grants, report.lost), (3, 3, 0));
    }

    #[test]
    fn expected_expiry_under_a_fault_passes_and_fencing_rejects_the_stale_writer() {
        // `a` is partitioned: its lease runs out at 150 while its code goes
        // on until 400. `b` is granted at 200 with a larger token. `a`'s end
        // write at 400 is stale and must be rejected: no violation.
        let report = check(&history(vec![
            section("a", 10, 100, 400, Some(150)),
            section("b", 11, 200, 300, Some(299)),
        ]));
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.lost, 1);
        assert_eq!(report.stale_writes_rejected, 1);
    }

    #[test]
    fn a_late_reply_is_not_a_grant() {
        // `b`'s reply came after its lease ended: lost at its first look.
        // Its writes are stale (rejected or harmless), nothing overlaps.
        let report = check(&history(vec![
            section("b", 10, 150, 160, None),
            section("a", 11, 100, 300, Some(299)),
        ]));
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.grants, 1);
        assert_eq!(report.stale_writes_rejected, 2);
    }

    #[test]
    fn an_overlap_is_a_violation() {
        let report = check(&history(vec![
            section("a", 10, 100, 300, Some(299)),
            section("b", 11, 200, 400, Some(399)),
        ]));
        assert!(kinds(&report).contains(&"overlap"), "{report:?}");
        // `a`'s end write (token 10 after 11) is rejected while `a` believed
        // in its lease: the store saw it too.
        assert!(kinds(&report).contains(&"valid-rejected"), "{report:?}");
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
    fn an_overlap_across_a_restart_is_excused_but_fencing_still_holds() {
        // The main server dies at 150 with `a`'s lock; `b` is granted by its
        // new life (token from its clock) while `a` still believes.
        let mut h = history(vec![
            section("a", 10, 100, 300, Some(299)),
            section("b", 1_000, 200, 400, Some(399)),
        ]);
        h.kills.push(Kill {
            server: Server::Main,
            at_us: 150,
        });
        let report = check(&h);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.excused_overlaps, 1);
        assert_eq!(report.excused_rejections, 1);

        // The same on Redlock, which has a restart guard: no excuse.
        for s in &mut h.sections {
            s.kind = Kind::Redlock;
        }
        assert!(kinds(&check(&h)).contains(&"overlap"));
    }

    #[test]
    fn a_token_inversion_is_a_violation() {
        let report = check(&history(vec![
            section("a", 10, 100, 200, Some(199)),
            section("b", 10, 210, 300, Some(299)),
            section("c", 9, 310, 400, Some(399)),
        ]));
        assert_eq!(
            kinds(&report),
            ["inversion", "inversion", "valid-rejected", "valid-rejected"],
            "{report:?}"
        );
    }

    #[test]
    fn tokens_must_increase_across_a_restart_too() {
        // After the kill at 150 the new life counts from 1 again (a lost
        // counter not resumed from the clock): same life by token, caught.
        let mut h = history(vec![
            section("a", 10, 100, 140, Some(139)),
            section("b", 1, 300, 400, Some(399)),
        ]);
        h.kills.push(Kill {
            server: Server::Main,
            at_us: 150,
        });
        assert!(kinds(&check(&h)).contains(&"inversion"));
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
        assert!(found.contains(&"stale-accepted"), "{report:?}");
        assert!(found.contains(&"inversion"), "{report:?}");
        let stale = report
            .violations
            .iter()
            .find(|v| matches!(v, Violation::StaleWriteAccepted { .. }))
            .unwrap();
        let Violation::StaleWriteAccepted {
            writer,
            at_us,
            superseded_by,
            ..
        } = stale
        else {
            unreachable!()
        };
        assert_eq!((writer.client.as_str(), *at_us), ("a", 400));
        assert_eq!(superseded_by.client.as_str(), "b");
    }

    #[test]
    fn locks_are_checked_separately() {
        let mut other = section("b", 5, 150, 250, Some(249));
        other.lock = "m".into();
        let report = check(&history(vec![section("a", 10, 100, 300, Some(299)), other]));
        assert!(report.violations.is_empty(), "{:?}", report.violations);
    }

    #[test]
    fn the_store_rejects_older_tokens_only() {
        let mut store = FencedStore::default();
        assert!(store.write("l", 5));
        assert!(store.write("l", 5));
        assert!(store.write("l", 7));
        assert!(!store.write("l", 6));
        assert!(store.write("m", 1));
    }

    #[test]
    fn violations_explain_themselves() {
        let report = check(&history(vec![
            section("a", 10, 100, 300, Some(299)),
            section("b", 11, 200, 400, Some(399)),
        ]));
        let text = report.violations[0].to_string();
        assert!(text.starts_with("(a) overlap on l"), "{text}");
        assert!(
            text.contains("a token 10") && text.contains("b token 11"),
            "{text}"
        );
    }
}
