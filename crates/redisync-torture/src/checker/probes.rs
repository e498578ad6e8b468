//! (f) Bounded calls: a `try_lock(ZERO)`, a `Client::shutdown`, a queue
//! left at shutdown each answered within their bound, or were excused.

use super::{paused, Report, Violation};
use crate::history::{History, Probe};

/// How long after a fault a `try_lock(ZERO)` may still be slow: clients
/// reconnect (a restarted server, reset connections) and drain what the
/// fault held up.
pub const FAULT_GRACE_US: u64 = 2_000_000;

/// Whether a stall of a runtime thread of `holder`'s process overlaps
/// `(from, to)`.
fn stalled(history: &History, holder: &str, from: u64, to: u64) -> bool {
    let process = holder.split('.').next().unwrap_or(holder);
    history
        .stalls
        .iter()
        .any(|p| p.process.split('.').next() == Some(process) && p.from_us < to && p.to_us > from)
}

/// (f): a bounded call returned within its bound, unless its process was
/// frozen (paused, or a runtime thread stalled) meanwhile, or, for a
/// `try_lock(ZERO)` or a queue left at shutdown, a fault was active or had
/// ended less than [`FAULT_GRACE_US`] before (for a queue left, a freeze
/// too).
pub(super) fn check_probe(p: &Probe, history: &History, report: &mut Report) {
    report.probes += 1;
    if p.done_us.saturating_sub(p.asked_us) <= p.bound_us {
        return;
    }
    // A queue left at shutdown also waits out what a freeze just before
    // left behind (late renewals, grants to the departed waiter).
    let queue_left = p.what.starts_with("queue-left");
    let from = if queue_left {
        p.asked_us.saturating_sub(FAULT_GRACE_US)
    } else {
        p.asked_us
    };
    let frozen =
        paused(history, &p.client, from, p.done_us) || stalled(history, &p.client, from, p.done_us);
    let faulted = (p.what == "try-zero" || queue_left)
        && history
            .faults
            .iter()
            .any(|&(from, to)| from < p.done_us && to.saturating_add(FAULT_GRACE_US) > p.asked_us);
    if frozen || faulted {
        report.excused_slow += 1;
    } else {
        report.violations.push(Violation::Slow { probe: p.clone() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::check;
    use crate::checker::tests::{assert_clean, kinds};

    fn probe(what: &str, asked: u64, done: u64, bound: u64) -> Probe {
        Probe {
            what: what.into(),
            client: "p1.direct.l0".into(),
            asked_us: asked,
            done_us: done,
            bound_us: bound,
        }
    }

    #[test]
    fn bounded_calls_within_their_bound_pass() {
        let h = History {
            probes: vec![
                probe("try-zero", 100, 1_100, 1_000),
                probe("shutdown", 100, 600, 500),
            ],
            ..History::default()
        };
        let report = check(&h);
        assert_clean(&report);
        assert_eq!((report.probes, report.excused_slow), (2, 0));
    }

    #[test]
    fn a_slow_bounded_call_is_a_violation_unless_excused() {
        let slow = |what: &str| History {
            probes: vec![probe(what, 10_000_000, 12_000_000, 1_000_000)],
            ..History::default()
        };
        let report = check(&slow("try-zero"));
        assert_eq!(kinds(&report), ["slow"], "{report:#?}");
        assert!(report.violations[0]
            .to_string()
            .starts_with("(f) slow try-zero by p1.direct.l0: 2000000 us"));
        // During a fault, or within the grace after it: excused.
        let mut h = slow("try-zero");
        h.faults.push((1_000_000, 10_000_000 - FAULT_GRACE_US + 1));
        assert_clean(&check(&h));
        h.faults[0].1 = 10_000_000 - FAULT_GRACE_US;
        assert_eq!(kinds(&check(&h)), ["slow"]);
        // A shutdown is bounded whatever the servers do.
        let mut h = slow("shutdown");
        h.faults.push((9_000_000, 13_000_000));
        assert_eq!(kinds(&check(&h)), ["slow"]);
        // Its process frozen meanwhile: excused.
        h.stalls.push(crate::history::Pause {
            process: "p1.direct.k0".into(),
            from_us: 10_500_000,
            to_us: 11_800_000,
        });
        let report = check(&h);
        assert_clean(&report);
        assert_eq!(report.excused_slow, 1);
    }
}
