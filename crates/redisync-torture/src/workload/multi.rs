//! `MultiLock` sections over several of the `Lock` names at once.

use redisync_redlock::MultiLock;

use super::{
    acquire_within, failed, let_go, let_go_how, Ctx, Got, Guard, Handles, Rec, Target, WAIT,
};
use crate::history::{now_us, Access, Kind};

/// A `MultiLock` over 2 or 3 of the `Lock` names, in random order: one
/// section per member, on that member's lock.
pub(super) async fn multi(ctx: &mut Ctx, h: &Handles) {
    let mut order: Vec<usize> = (0..h.names.len()).collect();
    for k in (1..order.len()).rev() {
        let j = usize::try_from(ctx.rng.below(k as u64 + 1)).unwrap_or(0);
        order.swap(k, j);
    }
    order.truncate(2 + usize::from(ctx.chance(15)));
    let kind = Kind::MultiLock;
    let m = match MultiLock::new(order.iter().map(|&i| h.locks[i].clone()).collect()) {
        Ok(m) => m,
        Err(e) => return ctx.stats.error(kind, &e.to_string()),
    };
    let lease = ctx.lease();
    let requested_us = now_us();
    // All members at once are harder to get than one lock: a longer wait.
    let g = match acquire_within(ctx, kind, &Target::Multi(m), lease, WAIT * 2, 10).await {
        Got::Guard(Guard::Multi(g)) => g,
        Got::Guard(_) | Got::Busy | Got::Cancelled => return,
        Got::Failed(f) => return failed(ctx, kind, &f).await,
    };
    let tokens = g.fencing_tokens();
    let mut recs: Vec<Rec> = order
        .iter()
        .zip(&tokens)
        .map(|(&i, &t)| {
            ctx.open(
                kind,
                h.names[i],
                Access::Exclusive,
                t,
                requested_us,
                ctx.belief(lease),
            )
        })
        .collect();
    let d = ctx.hold_time();
    {
        let mut members: Vec<&mut Rec> = recs.iter_mut().collect();
        ctx.hold(&mut members, d, &|k| !g.guards()[k].is_lost())
            .await;
    }
    for (k, r) in recs.into_iter().enumerate() {
        ctx.close(r, || !g.guards()[k].is_lost());
    }
    let how = let_go_how(ctx);
    let_go(ctx, kind, vec![Guard::Multi(g)], how).await;
}
