//! The history checker: exclusion by access, token order across every life
//! of a server, a fenced store, no work past a known loss, and probes that
//! answer.
//!
//! Each lock (the `lock` string of its sections) is checked on its own:
//! sections of different locks never interact.
//!
//! # Grants and valid intervals
//!
//! A section is a *grant* when its holder found its guard valid at its
//! first look (`valid_until` is set). Its *valid interval* is
//! `[start, valid_until]`: from the grant to the last look that still found
//! the guard valid (the holder reads the clock, then asks `is_lost()`, every
//! few milliseconds). A section whose guard was lost at its very first look
//! has no valid interval: the reply came back after the lease had run out.
//!
//! # What is checked, per lock
//!
//! * **(a) Exclusion by access.** At every instant the valid holders must be
//!   compatible. Holders are grouped by `client`: one holder's overlapping
//!   sections (a downgrade: the write side, then the read side) never
//!   conflict with each other, and a holder counts with its strongest
//!   access. An `Exclusive` holder excludes every other holder; `Shared`
//!   holders go only with `Shared` holders; `Permits` holders together hold
//!   at most `of` permits (the largest `of` seen for the lock). A conflict
//!   can only begin when a section starts, so the check runs at every start,
//!   over the valid intervals active then ([`Violation::Overlap`] for a
//!   pair, [`Violation::PermitExcess`] for too many permits).
//! * **(b) Token order, across lives.** For grants `x` and `y`: if `x` was
//!   granted before `y` was asked for, `x`'s token is strictly smaller
//!   ([`Violation::TokenInversion`]), for every access and with no excuse.
//!   Tokens are `max(counter + 1, server clock in microseconds)`, so a
//!   server restarted empty or from older data still hands out larger
//!   tokens than before its kill: a fenced resource depends on it, so the
//!   comparison runs across lives too. Grants whose requests overlapped
//!   (`y` asked before `x` was granted) may come in either order.
//! * **(c) Fenced store.** Every `Exclusive` and `Permits { of: 1 }`
//!   section writes to a store at its start and at its end, whether it still
//!   believes in its lease or not (code already running does not stop),
//!   stamped with the time of its first and last look (a look and its write
//!   count as one step, so a holder frozen right after looking is not taken
//!   for one that wrote knowing its lease was gone). A `Shared` section
//!   reads at its start: the store's largest token rises to its token, and a
//!   read is never rejected. Sections with more than one permit share the
//!   resource and are not fenced. The store keeps the largest token and
//!   rejects writes with a smaller one; writes are replayed in time order
//!   (one clock for every process; at equal times end writes first, as the
//!   next grant can only follow a release). A **stale write accepted** is a
//!   write accepted after a later grant of the lock (any access, any life)
//!   had started: no excuse. A **valid write rejected** is a write rejected
//!   while its writer believed in its lease. Rejected writes of writers that
//!   knew they had lost are fencing at work, and counted; so are accepted
//!   ones when nobody was granted the lock since (harmless), and a holder's
//!   write side fenced off by its own read side (a downgrade).
//!
//! Check (d), nothing left held or renewed after the workers stopped, needs
//! the servers; the runner does it.
//!
//! # Restarts that lose data, bounded by the lease
//!
//! A server killed and restarted empty, or from older data, forgets the
//! locks it granted last: their holders keep believing in their guards
//! until their watchdogs notice, while the server grants the locks again.
//! docs/guarantees.md documents this limit ("on one Redis primary",
//! "Leases are time"). A conflict in (a), or a valid write rejected in (c), is excused
//! (counted, not a violation) only when such a restart explains it: for a
//! kill `K` of the lock's server, the old holder `x` asked before `K`, the
//! other section `y` was granted after `K`, and `x` stopped believing (or
//! wrote) no later than `K + x.lease`. The server was dead at `K`, so `x`'s
//! lock was gone then, and a holder believes in a lock that is gone for at
//! most its lease: anything longer is a violation whatever the restart.
//! Lives are told apart by time (the kill), never by token. Redlock, whose
//! restart guard covers restarts, gets no excuse at all; token order (b)
//! and stale writes accepted (c) get none either.
//!
//! # Precision
//!
//! A look happens every few milliseconds, so a valid interval may end up to
//! one look period (plus scheduling delay) before the guard really turned
//! invalid, and an overlap shorter than that can go unseen; intervals that
//! only touch (zero length in common) do not conflict. A start is taken
//! after the acquisition returned, so it is never before the grant, and a
//! kill is recorded once the process is dead, so it is never before the
//! death: neither can make a correct history fail. Token order is only
//! checked between grants whose request came after the other's start, so
//! grants racing each other are not compared.

// One file per rule: (a) exclusion, (b) tokens, (c) fencing, (e) work,
// (f) probes, and the leader jobs' sections that (a) to (c) also check.
mod exclusion;
mod fencing;
mod leader;
mod probes;
mod tokens;
mod work;

pub use fencing::FencedStore;
pub use leader::leader_sections;
pub use probes::FAULT_GRACE_US;
pub use work::STEP_SLACK_US;

use std::collections::BTreeMap;
use std::fmt;

use crate::history::{client_of, is_guarded, is_synced, History, Probe, Section, Server, Work};
use exclusion::check_exclusion;
use fencing::check_fencing;
use probes::check_probe;
use tokens::check_tokens;
use work::check_work;

/// One broken guarantee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// (a) Two holders of one lock with incompatible access both believed
    /// their lease valid at once.
    Overlap {
        /// The lock.
        lock: String,
        /// The section that started first.
        first: Section,
        /// The section that started second.
        second: Section,
        /// How long both were valid, in microseconds.
        overlap_us: u64,
    },
    /// (a) Valid holders of a semaphore together held more than its permits.
    PermitExcess {
        /// The lock.
        lock: String,
        /// When it began: the start of the newest holder.
        at_us: u64,
        /// Permits held together (each holder counted once, with its most).
        held: u32,
        /// Permits of the semaphore (the largest `of` seen).
        of: u32,
        /// Every valid section at `at_us`, the newest last.
        holders: Vec<Section>,
    },
    /// (b) A grant got a token not larger than that of a grant made before
    /// it was asked for.
    TokenInversion {
        /// The lock.
        lock: String,
        /// The earlier grant (the largest token granted before `later` asked).
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
    /// in its lease: someone else wrote or read a larger token meanwhile.
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
    /// (e) A step of work under a lock ran although its holder's lease
    /// clock had said lost before it: the library polled the work after
    /// the loss was known.
    StepAfterLoss {
        /// The work (its steps included).
        work: Work,
        /// When the step ran.
        at_us: u64,
        /// The end of the validity known at the step before (that step's
        /// time plus its validity; the step's own time when lost).
        known_end_us: u64,
    },
    /// (f) A call bounded in time took longer: `try_lock(Duration::ZERO)`
    /// outside faults, `Client::shutdown` at any time (its process not
    /// frozen meanwhile), a shut-down client's waiter or grant left on a
    /// name (`queue-left`) outside faults.
    Slow {
        /// The call.
        probe: Probe,
    },
    /// (d) A lock stayed held or renewed after every guard was gone (found
    /// by the runner on the servers).
    Residue {
        /// What was found.
        what: String,
    },
    /// What the runner saw go wrong outside the history: a worker task that
    /// panicked or hung, a misuse the library accepted (a valid reader's
    /// upgrade not refused), a client set never granted some kind (nothing
    /// was checked there).
    Run {
        /// What happened.
        what: String,
    },
}

impl fmt::Display for Violation {
    // Over 60 lines: one arm per variant, every message in one place (tests
    // and tools match on them), so they are kept together.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap {
                lock,
                first,
                second,
                overlap_us,
            } => write!(
                f,
                "(a) overlap on {lock}: both valid for {overlap_us} us from {}: {first} ({}) / {second} ({})",
                second.start_us,
                first.access.code(),
                second.access.code(),
            ),
            Violation::PermitExcess {
                lock,
                at_us,
                held,
                of,
                holders,
            } => {
                write!(
                    f,
                    "(a) permits exceeded on {lock} at {at_us}: {held} of {of} held by"
                )?;
                for (i, h) in holders.iter().enumerate() {
                    let sep = if i == 0 { " " } else { " / " };
                    write!(f, "{sep}{h} ({})", h.access.code())?;
                }
                Ok(())
            }
            Violation::TokenInversion {
                lock,
                earlier,
                later,
            } => write!(
                f,
                "(b) token inversion on {lock}: {earlier} was granted before {} asked at {}, yet later {later}",
                later.client, later.requested_us,
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
            Violation::StepAfterLoss {
                work,
                at_us,
                known_end_us,
            } => write!(
                f,
                "(e) step after loss on {}: {} {} token {} ran a step at {at_us}, {} us after the validity end {known_end_us} it knew",
                work.lock,
                work.kind,
                work.client,
                work.token,
                at_us.saturating_sub(*known_end_us),
            ),
            Violation::Slow { probe } => write!(
                f,
                "(f) slow {} by {}: {} us from {} (bound {} us)",
                probe.what,
                probe.client,
                probe.done_us.saturating_sub(probe.asked_us),
                probe.asked_us,
                probe.bound_us,
            ),
            Violation::Run { what } => write!(f, "(run) {what}"),
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
    /// Writes of a holder's write side rejected after its own read side (a
    /// downgrade, with a newer token) read the store: one holder, no
    /// conflict.
    pub downgrade_writes_rejected: usize,
    /// Conflicts (pairs, or permit excesses) explained by a restart that
    /// lost data, within the old holder's lease after the kill (documented,
    /// not a violation).
    pub excused_overlaps: usize,
    /// Valid writes rejected because of such a restart, within the writer's
    /// lease after the kill (likewise).
    pub excused_rejections: usize,
    /// Conflicts explained by a force-unlock (the forced holder learning of
    /// it at once on the forcing client, within its lease elsewhere).
    pub forced_overlaps: usize,
    /// Valid writes rejected because of a force-unlock (likewise).
    pub forced_rejections: usize,
    /// Runs of work under a lock (`run_locked` sections, leader jobs).
    pub works: usize,
    /// Their steps.
    pub steps: usize,
    /// Bounded calls checked (f).
    pub probes: usize,
    /// Bounded calls that took longer, excused: a `try_lock(ZERO)` during
    /// a fault (or soon after), any call while its process was frozen.
    pub excused_slow: usize,
}

/// The kills of each server, as sorted times (and whether each was a
/// failover to the replica's data).
struct Kills(BTreeMap<Server, Vec<(u64, bool)>>);

impl Kills {
    fn new(history: &History) -> Kills {
        let mut by_server: BTreeMap<Server, Vec<(u64, bool)>> = BTreeMap::new();
        for k in &history.kills {
            by_server
                .entry(k.server)
                .or_default()
                .push((k.at_us, k.failover));
        }
        for times in by_server.values_mut() {
            times.sort_unstable();
        }
        Kills(by_server)
    }

    /// Whether a restart that lost data explains `old` (asked before a kill
    /// `K` of the lock's server) meeting `new` (granted after `K`) as long
    /// as `old` believed in its lease, or wrote, until `until` at the
    /// latest: `until <= K + old.lease_us`. The latest kill before `new`
    /// started is the best `K` for every condition, so it is the one tried.
    /// Never for Redlock (no single server).
    fn excuse(&self, old: &Section, new: &Section, until: u64) -> bool {
        let (Some(server), Some(other)) = (old.kind.server(), new.kind.server()) else {
            return false;
        };
        if server != other {
            return false;
        }
        // Restart-guarded clients take nothing from a server up for less
        // than their longest lease: a restart explains nothing between them.
        if is_guarded(&old.client) && is_guarded(&new.client) {
            return false;
        }
        let Some(times) = self.0.get(&server) else {
            return false;
        };
        let before = times.partition_point(|&(t, _)| t < new.start_us);
        let Some(&(kill, failover)) = before.checked_sub(1).and_then(|i| times.get(i)) else {
            return false;
        };
        // Replica-synced clients believe only in what a replica
        // acknowledged: a failover to the replica's data explains nothing
        // between them (a restart empty or from a snapshot does).
        if failover && is_synced(&old.client) && is_synced(&new.client) {
            return false;
        }
        old.requested_us < kill && until <= kill.saturating_add(old.lease_us)
    }
}

/// Why a conflict is not a violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// A restart that lost data, within the old holder's lease.
    Restart,
    /// A force-unlock, within what its holder may take to learn of it.
    Forced,
}

/// The force-unlocks of each lock, by when they were asked.
struct Forces<'h>(BTreeMap<&'h str, Vec<&'h crate::history::Force>>);

impl<'h> Forces<'h> {
    fn new(history: &'h History) -> Forces<'h> {
        let mut by_lock: BTreeMap<&str, Vec<&crate::history::Force>> = BTreeMap::new();
        for f in &history.forces {
            by_lock.entry(&f.lock).or_default().push(f);
        }
        for fs in by_lock.values_mut() {
            fs.sort_by_key(|f| f.asked_us);
        }
        Forces(by_lock)
    }

    /// Whether a force-unlock `F` of the lock explains `old` (asked for
    /// before `F` returned: a `MultiLock` member may be granted long before
    /// the whole returns) meeting `new` (granted after `F` was asked) as
    /// long as `old` believed in its lease until `until` at the latest: a
    /// holder on the forcing client knows at once (`until < F.done`, when
    /// `F` returned `Ok`), any other within its lease (`until <= F.done +
    /// old.lease`: its next renewal finds the lock gone, or its lease ends).
    /// A force that got no reply (`ok` false) may have run as late as
    /// `new`'s grant: `until <= new.start + old.lease`, if asked less than
    /// [`FORCE_IN_FLIGHT_US`] before.
    fn excuse(&self, old: &Section, new: &Section, until: u64) -> bool {
        let Some(forces) = self.0.get(old.lock.as_str()) else {
            return false;
        };
        let asked_before = forces.partition_point(|f| f.asked_us < new.start_us);
        forces[..asked_before].iter().rev().any(|f| {
            if !f.ok {
                // No reply: it may have run any time while in flight (a
                // paused server runs it when resumed), up to `new`'s grant,
                // and told nobody.
                return new.start_us - f.asked_us <= FORCE_IN_FLIGHT_US
                    && old.requested_us < new.start_us
                    && until <= new.start_us.saturating_add(old.lease_us);
            }
            let same_client = client_of(&f.client) == client_of(&old.client);
            let bound = if same_client {
                f.done_us
            } else {
                f.done_us.saturating_add(old.lease_us)
            };
            old.requested_us < f.done_us && until <= bound
        })
    }
}

/// How long a force-unlock without a reply may still run: longer than any
/// server pause of the schedule (2.2 leases) plus latency.
pub const FORCE_IN_FLIGHT_US: u64 = 5_000_000;

/// Every excuse of a run.
struct Excuses<'h> {
    kills: Kills,
    forces: Forces<'h>,
}

impl Excuses<'_> {
    fn excuse(&self, old: &Section, new: &Section, until: u64) -> Option<Why> {
        if self.kills.excuse(old, new, until) {
            Some(Why::Restart)
        } else if self.forces.excuse(old, new, until) {
            Some(Why::Forced)
        } else {
            None
        }
    }
}

impl Report {
    fn excused(&mut self, why: Why) {
        match why {
            Why::Restart => self.excused_overlaps += 1,
            Why::Forced => self.forced_overlaps += 1,
        }
    }
}

/// Checks (a), (b) and (c) on `history` (its sections and the leaderships
/// derived from its leader jobs), (e) on its work and (f) on its probes.
pub fn check(history: &History) -> Report {
    let leaderships = leader_sections(history);
    let mut report = Report {
        sections: history.sections.len() + leaderships.len(),
        works: history.works.len(),
        ..Report::default()
    };
    let excuses = Excuses {
        kills: Kills::new(history),
        forces: Forces::new(history),
    };
    let sections = merge_sibling_reentries(history.sections.iter().chain(&leaderships));
    let mut by_lock: BTreeMap<&str, Vec<&Section>> = BTreeMap::new();
    for s in &sections {
        by_lock.entry(&s.lock).or_default().push(s);
        report.grants += usize::from(s.valid_at_start());
        report.lost += usize::from(s.lost_at_us.is_some());
    }
    for (lock, mut sections) in by_lock {
        sections.sort_by_key(|s| (s.start_us, s.end_us, s.token));
        let grants: Vec<&Section> = sections
            .iter()
            .copied()
            .filter(|s| s.valid_at_start())
            .collect();
        check_exclusion(lock, &grants, &excuses, &mut report);
        check_tokens(lock, &grants, &mut report);
        check_fencing(lock, &sections, &grants, &excuses, &mut report);
    }
    for w in &history.works {
        check_work(w, history, &mut report);
    }
    for p in &history.probes {
        check_probe(p, history, &mut report);
    }
    report
}

/// The workload's second flow of a task is recorded as `<client>~`: when it
/// asks while the first flow holds, it re-enters that hold (one owner, one
/// acquisition, one token). Sections of the two flows with one token are
/// merged into one (the first flow's label, the union of their times and
/// leases); flows that took turns keep sections of their own, held to
/// exclusion like two clients.
fn merge_sibling_reentries<'a>(sections: impl Iterator<Item = &'a Section>) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    let mut seen: BTreeMap<(&str, &str, u64), usize> = BTreeMap::new();
    for s in sections {
        let owner = s.client.trim_end_matches('~');
        match seen.get(&(s.lock.as_str(), owner, s.token)) {
            Some(&i) if out[i].client != s.client => {
                let m = &mut out[i];
                owner.clone_into(&mut m.client);
                m.guards += s.guards;
                m.lease_us = m.lease_us.max(s.lease_us);
                m.requested_us = m.requested_us.min(s.requested_us);
                m.start_us = m.start_us.min(s.start_us);
                m.valid_at_end = if s.end_us > m.end_us {
                    s.valid_at_end
                } else {
                    m.valid_at_end
                };
                m.end_us = m.end_us.max(s.end_us);
                m.valid_until_us = m.valid_until_us.max(s.valid_until_us);
                m.lost_at_us = m.lost_at_us.max(s.lost_at_us);
            }
            _ => {
                seen.insert((s.lock.as_str(), owner, s.token), out.len());
                out.push(s.clone());
            }
        }
    }
    out
}

/// Whether a pause of `holder`'s process overlaps `(from, to)`.
fn paused(history: &History, holder: &str, from: u64, to: u64) -> bool {
    let process = holder.split('.').next().unwrap_or(holder);
    history
        .pauses
        .iter()
        .any(|p| p.process == process && p.from_us < to && p.to_us > from)
}

/// The end of `s`'s valid interval (its start when it has none).
fn valid_until(s: &Section) -> u64 {
    s.valid_until_us.unwrap_or(s.start_us)
}

#[cfg(test)]
mod tests {
    //! Tests of `check` as a whole, and the helpers (`pub(super)`) the rule
    //! files' tests share.

    use super::*;
    use crate::history::{Access, Kill, Kind, Step};

    /// An exclusive section of lock "l" (kind `Lock`, lease 1000, asked 5
    /// before its start) that was valid from `start` to `valid_until`
    /// (`None`: lost at its start) and ended at `end`.
    pub(super) fn section(
        client: &str,
        token: u64,
        start: u64,
        end: u64,
        valid_until: Option<u64>,
    ) -> Section {
        Section {
            lock: "l".into(),
            kind: Kind::Lock,
            access: Access::Exclusive,
            client: client.into(),
            guards: 1,
            lease_us: 1_000,
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

    /// A section valid until just before its end, with `access`.
    pub(super) fn held(client: &str, token: u64, start: u64, end: u64, access: Access) -> Section {
        let kind = match access {
            Access::Exclusive => Kind::RwWrite,
            Access::Shared => Kind::RwRead,
            Access::Permits { .. } => Kind::Semaphore,
        };
        Section {
            kind,
            access,
            ..section(client, token, start, end, Some(end - 1))
        }
    }

    pub(super) fn permits(n: u32, of: u32) -> Access {
        Access::Permits { held: n, of }
    }

    pub(super) fn history(sections: Vec<Section>) -> History {
        History {
            sections,
            ..History::default()
        }
    }

    pub(super) fn with_kills(sections: Vec<Section>, kills_at: &[u64]) -> History {
        History {
            sections,
            kills: kills_at
                .iter()
                .map(|&at_us| Kill {
                    server: Server::Main,
                    at_us,
                    failover: false,
                })
                .collect(),
            ..History::default()
        }
    }

    pub(super) fn kinds(report: &Report) -> Vec<&'static str> {
        report
            .violations
            .iter()
            .map(|v| match v {
                Violation::Overlap { .. } => "overlap",
                Violation::PermitExcess { .. } => "permits",
                Violation::TokenInversion { .. } => "inversion",
                Violation::StaleWriteAccepted { .. } => "stale-accepted",
                Violation::ValidWriteRejected { .. } => "valid-rejected",
                Violation::Residue { .. } => "residue",
                Violation::StepAfterLoss { .. } => "step-after-loss",
                Violation::Slow { .. } => "slow",
                Violation::Run { .. } => "run",
            })
            .collect()
    }

    pub(super) fn assert_clean(report: &Report) {
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
    }

    #[test]
    fn a_clean_exclusive_history_passes() {
        let report = check(&history(vec![
            section("a", 10, 100, 200, Some(199)),
            section("b", 11, 210, 300, Some(299)),
            section("a", 12, 310, 400, Some(399)),
        ]));
        assert_clean(&report);
        assert_eq!((report.sections, report.grants, report.lost), (3, 3, 0));
    }

    #[test]
    fn a_late_reply_is_not_a_grant() {
        // `b`'s reply came after its lease ended: lost at its first look.
        // Its writes are stale (rejected), nothing overlaps, and its token
        // below `a`'s is no inversion: it was never granted.
        let report = check(&history(vec![
            section("b", 10, 150, 160, None),
            section("a", 11, 100, 300, Some(299)),
        ]));
        assert_clean(&report);
        assert_eq!(report.grants, 1);
        assert_eq!(report.stale_writes_rejected, 2);
    }

    #[test]
    fn locks_are_checked_separately() {
        let mut other = section("b", 5, 150, 250, Some(249));
        other.lock = "m".into();
        let report = check(&history(vec![section("a", 10, 100, 300, Some(299)), other]));
        assert_clean(&report);
    }

    #[test]
    fn a_long_history_is_checked_quickly() {
        // 20 000 sequential grants, each asked during the previous one.
        let sections: Vec<Section> = (0..20_000u64)
            .map(|i| {
                let mut s = section(
                    if i % 2 == 0 { "a" } else { "b" },
                    10 + i,
                    100 + i * 10,
                    109 + i * 10,
                    Some(108 + i * 10),
                );
                s.requested_us = s.start_us - 8;
                s
            })
            .collect();
        let report = check(&history(sections));
        assert_clean(&report);
        assert_eq!(report.grants, 20_000);
    }

    /// A `run_locked` work of "l" by `client` with steps `(at, left)`.
    pub(super) fn work(client: &str, token: u64, steps: &[(u64, u64)]) -> Work {
        Work {
            lock: "l".into(),
            kind: Kind::RunLocked,
            client: client.into(),
            token,
            lease_us: 1_000_000,
            requested_us: 0,
            steps: steps
                .iter()
                .map(|&(at_us, left)| Step {
                    at_us,
                    left_us: Some(left),
                })
                .collect(),
        }
    }

    pub(super) fn with_works(works: Vec<Work>) -> History {
        History {
            works,
            ..History::default()
        }
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

        let report = check(&history(vec![
            held("a", 10, 100, 400, permits(2, 3)),
            held("b", 11, 200, 500, permits(2, 3)),
        ]));
        let text = report.violations[0].to_string();
        assert!(
            text.starts_with("(a) permits exceeded on l at 200: 4 of 3"),
            "{text}"
        );
        assert!(
            text.contains("a token 10") && text.contains("b token 11 [200"),
            "{text}"
        );

        let report = check(&history(vec![
            section("a", 10, 100, 200, Some(199)),
            section("b", 9, 300, 400, Some(399)),
        ]));
        let text = report.violations[0].to_string();
        assert!(text.starts_with("(b) token inversion on l"), "{text}");
        assert!(
            text.contains("a token 10 [100") && text.contains("asked at 295"),
            "{text}"
        );
    }
}
