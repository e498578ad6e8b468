//! (b) Token order, across lives: a grant made before another was asked
//! for has a smaller token.

use super::{Report, Violation};
use crate::history::Section;

/// (b): a grant made before another was asked for has a smaller token,
/// whatever lives lie between. `grants` are sorted by start.
pub(super) fn check_tokens(lock: &str, grants: &[&Section], report: &mut Report) {
    // best[i]: the grant with the largest token among grants[..=i].
    let mut best: Vec<&Section> = Vec::with_capacity(grants.len());
    for &g in grants {
        let top = match best.last() {
            Some(&b) if b.token >= g.token => b,
            _ => g,
        };
        best.push(top);
    }
    for &y in grants {
        let before = grants.partition_point(|x| x.start_us < y.requested_us);
        let Some(&x) = before.checked_sub(1).and_then(|i| best.get(i)) else {
            continue;
        };
        if x.token >= y.token && !std::ptr::eq(x, y) {
            report.violations.push(Violation::TokenInversion {
                lock: lock.to_owned(),
                earlier: x.clone(),
                later: y.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::check;
    use crate::checker::tests::{assert_clean, held, history, kinds, section, with_kills};
    use crate::history::Access;

    #[test]
    fn tokens_must_increase_across_lives() {
        // Tokens 10, then 1050 (the first restart's life, from its clock),
        // then 11 (the second life counting from an older snapshot without
        // the clock): each asked after the previous one was granted.
        let report = check(&with_kills(
            vec![
                section("a", 10, 100, 140, Some(139)),
                section("b", 1_050, 200, 240, Some(239)),
                section("c", 11, 300, 340, Some(339)),
            ],
            &[150, 250],
        ));
        let inversions: Vec<(&str, &str)> = report
            .violations
            .iter()
            .filter_map(|v| match v {
                Violation::TokenInversion { earlier, later, .. } => {
                    Some((earlier.client.as_str(), later.client.as_str()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(inversions, [("b", "c")], "{report:#?}");
    }

    #[test]
    fn a_token_inversion_within_a_life_is_a_violation() {
        let report = check(&history(vec![
            section("a", 10, 100, 200, Some(199)),
            section("b", 10, 210, 300, Some(299)),
            section("c", 9, 310, 400, Some(399)),
        ]));
        assert_eq!(
            kinds(&report),
            ["inversion", "inversion", "valid-rejected", "valid-rejected"],
            "{report:#?}"
        );
    }

    #[test]
    fn tokens_of_readers_must_increase_too() {
        let report = check(&history(vec![
            held("a", 10, 100, 200, Access::Shared),
            held("b", 9, 300, 400, Access::Shared),
        ]));
        assert_eq!(kinds(&report), ["inversion"], "{report:#?}");
    }

    #[test]
    fn concurrent_grants_whose_requests_overlap_may_come_in_any_token_order() {
        // `b` asked at 110, before `a` was granted at 130: their tokens are
        // not ordered. Neither are `a`'s and `c`'s.
        let mut a = held("a", 20, 130, 300, Access::Shared);
        a.requested_us = 100;
        let mut b = held("b", 15, 140, 300, Access::Shared);
        b.requested_us = 110;
        let mut c = held("c", 18, 150, 300, Access::Shared);
        c.requested_us = 120;
        let report = check(&history(vec![a, b, c]));
        assert_clean(&report);

        // One asked after `a` was granted must beat it.
        let mut a = held("a", 20, 130, 300, Access::Shared);
        a.requested_us = 100;
        let mut d = held("d", 19, 160, 300, Access::Shared);
        d.requested_us = 131;
        assert_eq!(kinds(&check(&history(vec![a, d]))), ["inversion"]);
    }
}
