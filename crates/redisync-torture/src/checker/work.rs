//! (e) Work under a lock: no step runs once its holder's lease clock
//! said lost.

use super::{paused, Report, Violation};
use crate::history::{History, Work};

/// How late a step may run past the validity end its holder knew, for the
/// race between the library's last look at the lease clock and the step's
/// own clock read (a preempted thread). The bug it catches costs far more:
/// work polled after a stall longer than the lease.
pub const STEP_SLACK_US: u64 = 100_000;

/// (e): no step of work runs once its holder's lease clock said lost: a
/// step that finds the validity zero is a violation when the step before
/// had found it zero already (lost is for good, the library looked again
/// before this step), or when it runs later than the validity end the step
/// before knew, by more than [`STEP_SLACK_US`] (unless its process was
/// paused in between: the step's clock read is then late, not the step).
pub(super) fn check_work(w: &Work, history: &History, report: &mut Report) {
    report.steps += w.steps.len();
    for pair in w.steps.windows(2) {
        let [before, step] = pair else { continue };
        let (Some(known), Some(left)) = (before.left_us, step.left_us) else {
            continue;
        };
        if left > 0 {
            continue;
        }
        let known_end = before.at_us.saturating_add(known);
        let late = if known == 0 {
            true
        } else {
            step.at_us > known_end.saturating_add(STEP_SLACK_US)
                && !paused(history, &w.client, before.at_us, step.at_us)
        };
        if late {
            report.violations.push(Violation::StepAfterLoss {
                work: w.clone(),
                at_us: step.at_us,
                known_end_us: known_end,
            });
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::check;
    use crate::checker::tests::{assert_clean, kinds, with_works, work};

    #[test]
    fn work_whose_steps_stop_at_the_loss_passes() {
        // Steps every 5 ms while valid, the last one finds it lost at the
        // end it knew (a lease that ran out): cancelled there.
        let report = check(&with_works(vec![work(
            "a",
            1,
            &[(1_000, 20_000), (6_000, 15_000), (21_000, 0)],
        )]));
        assert_clean(&report);
        assert_eq!((report.works, report.steps), (1, 3));
        // A step that finds it lost within the slack of the end it knew
        // (the library looked just before the lease ended).
        let report = check(&with_works(vec![work(
            "a",
            1,
            &[(1_000, 20_000), (21_000 + STEP_SLACK_US, 0)],
        )]));
        assert_clean(&report);
        // A long gap is fine when the watchdog renewed meanwhile.
        let report = check(&with_works(vec![work(
            "a",
            1,
            &[(1_000, 20_000), (2_000_000, 500_000)],
        )]));
        assert_clean(&report);
    }

    #[test]
    fn a_step_after_the_loss_was_known_is_a_violation() {
        // The step before found it lost already: the library looked again
        // before this step and must have cancelled the work.
        let report = check(&with_works(vec![work("a", 1, &[(1_000, 0), (1_001, 0)])]));
        assert_eq!(kinds(&report), ["step-after-loss"], "{report:#?}");
        // A stall: the step before knew the lease ended at 21 000; the work
        // was polled again at 1.5 s, found lost by the clock.
        let report = check(&with_works(vec![work(
            "a",
            1,
            &[(1_000, 20_000), (1_500_000, 0)],
        )]));
        assert_eq!(kinds(&report), ["step-after-loss"], "{report:#?}");
        let text = report.violations[0].to_string();
        assert!(
            text.starts_with("(e) step after loss on l: run-locked a token 1"),
            "{text}"
        );
        // Unless the process was paused in between: its clock read is late.
        let mut h = with_works(vec![work(
            "p1.direct.k0",
            1,
            &[(1_000, 20_000), (1_500_000, 0)],
        )]);
        h.pauses.push(crate::history::Pause {
            process: "p1".into(),
            from_us: 10_000,
            to_us: 1_400_000,
        });
        assert_clean(&check(&h));
        h.pauses[0].process = "p0".into();
        assert_eq!(kinds(&check(&h)), ["step-after-loss"]);
    }
}
