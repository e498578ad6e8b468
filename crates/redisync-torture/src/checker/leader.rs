//! The sections of leader jobs: one per leadership, derived from the
//! steps, so that (a), (b) and (c) hold leaders to them like other holders.

use std::collections::BTreeMap;

use super::paused;
use crate::history::{Access, History, Kind, Section, Work};

/// The leaderships of the leader jobs: one section per holder and token,
/// from its first job step to its last, valid until the last step the
/// library could have let run only while leading (a step after a pause of
/// its process may have been stamped after the lead ended: valid up to the
/// step before). Tokens change with every leadership, so a holder's steps
/// of one token are one leadership.
pub fn leader_sections(history: &History) -> Vec<Section> {
    let mut by_lead: BTreeMap<(&str, &str, u64), Vec<&Work>> = BTreeMap::new();
    for w in history.works.iter().filter(|w| w.kind == Kind::Leader) {
        by_lead
            .entry((&w.lock, &w.client, w.token))
            .or_default()
            .push(w);
    }
    let mut out = Vec::new();
    for ((lock, client, token), works) in by_lead {
        let mut steps: Vec<u64> = works
            .iter()
            .flat_map(|w| w.steps.iter().map(|s| s.at_us))
            .collect();
        steps.sort_unstable();
        let (Some(&start), Some(&end)) = (steps.first(), steps.last()) else {
            continue;
        };
        let requested = works.iter().map(|w| w.requested_us).min().unwrap_or(start);
        let mut prev = requested;
        let mut valid_until = None;
        for &at in &steps {
            if !paused(history, client, prev, at) {
                valid_until = Some(at);
            }
            prev = at;
        }
        let valid_at_end = valid_until == Some(end);
        out.push(Section {
            lock: lock.to_owned(),
            kind: Kind::Leader,
            access: Access::Exclusive,
            client: client.to_owned(),
            guards: 1,
            lease_us: works.iter().map(|w| w.lease_us).max().unwrap_or(0),
            token,
            requested_us: requested.min(start),
            start_us: start,
            end_us: end,
            valid_until_us: valid_until,
            valid_at_end,
            lost_at_us: (!valid_at_end).then_some(end),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::check;
    use crate::checker::tests::{assert_clean, kinds, with_works, work};
    use crate::history::Step;

    /// A job run of leader `client` (token `token`) with steps at `at`.
    fn job(client: &str, token: u64, requested: u64, at: &[u64]) -> Work {
        Work {
            kind: Kind::Leader,
            requested_us: requested,
            steps: at
                .iter()
                .map(|&at_us| Step {
                    at_us,
                    left_us: None,
                })
                .collect(),
            ..work(client, token, &[])
        }
    }

    #[test]
    fn leaders_taking_turns_pass() {
        // `a` leads (token 10) with two job runs, `b` leads after (11).
        let h = with_works(vec![
            job("a", 10, 50, &[100, 105]),
            job("a", 10, 50, &[200, 205]),
            job("b", 11, 60, &[300, 305]),
            job("a", 12, 205, &[400]),
        ]);
        let report = check(&h);
        assert_clean(&report);
        let leads = leader_sections(&h);
        assert_eq!(leads.len(), 3);
        assert_eq!(report.grants, 3);
        let a = &leads[0];
        assert_eq!(
            (a.token, a.start_us, a.end_us, a.valid_until_us),
            (10, 100, 205, Some(205))
        );
    }

    #[test]
    fn two_leaders_jobs_overlapping_are_a_violation() {
        let report = check(&with_works(vec![
            job("a", 10, 50, &[100, 105]),
            job("a", 10, 50, &[300, 305]),
            job("b", 11, 60, &[200, 205]),
        ]));
        assert!(kinds(&report).contains(&"overlap"), "{report:#?}");
        // The same token is one leadership (one holder): no conflict, nor
        // a token inversion between its runs.
        let report = check(&with_works(vec![
            job("a", 10, 50, &[100, 105]),
            job("a", 10, 50, &[300, 305]),
        ]));
        assert_clean(&report);
    }

    #[test]
    fn a_leader_job_step_right_after_a_pause_of_its_process_is_not_belief() {
        // `p1...` ran a step at 300 right after its process was paused from
        // 150 to 290: the lead may have ended before the pause. `b` led
        // from 200.
        let mut h = with_works(vec![
            job("p1.direct.d0", 10, 50, &[100, 105]),
            job("p1.direct.d0", 10, 50, &[300]),
            job("p0.direct.d0", 11, 60, &[200, 205]),
        ]);
        h.pauses.push(crate::history::Pause {
            process: "p1".into(),
            from_us: 150,
            to_us: 290,
        });
        let report = check(&h);
        // Its stamp at 300 is a write of a holder that may have lost: fenced.
        assert_clean(&report);
        assert_eq!(report.stale_writes_rejected, 1);
        h.pauses.clear();
        assert!(kinds(&check(&h)).contains(&"overlap"));
    }
}
