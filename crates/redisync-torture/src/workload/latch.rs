//! Count-down latch steps: set, counted down (plain or as a member),
//! waited for and the wait checked, and latches that expire.

use std::time::Duration;

use redisync::CountDownLatch;

use super::{restarted, uptime, Ctx, Handles, How, WAIT};

/// A count-down latch's TTL for the latch whose waiters are checked: far
/// beyond a run, so only a restart loses it.
const LATCH_TTL: Duration = Duration::from_secs(600);

/// A step of a latch task: set the count (15 %), count down (40 %), wait
/// and check the wait (30 %), read the count (8 %), or a latch with a
/// short TTL that its waiter sees expire (7 %).
pub(super) async fn latch(ctx: &mut Ctx, h: &Handles) {
    let m = &h.more;
    let roll = ctx.rng.below(100);
    if roll < 15 {
        let n = 1 + ctx.rng.below(3);
        let how = ctx.how(30);
        let set = m.latch.try_set_count(n, LATCH_TTL);
        drop(ctx.call("CountDownLatch::try_set_count", how, set).await);
    } else if roll < 55 {
        count_down(ctx, &m.latch).await;
    } else if roll < 85 {
        latch_waiter(ctx, h).await;
    } else if roll < 93 {
        let how = ctx.how(40);
        if ctx.chance(50) {
            drop(
                ctx.call("CountDownLatch::count", how, m.latch.count())
                    .await,
            );
        } else {
            drop(
                ctx.call("CountDownLatch::inspect", how, m.latch.inspect())
                    .await,
            );
        }
    } else {
        short_latch(ctx, &m.short_latch).await;
    }
    let pause = 5 + ctx.rng.below(40);
    tokio::time::sleep(Duration::from_millis(pause)).await;
}

/// The members that count down [`latch_waiter`]'s latch, and `plain`
/// for its count-downs without a member: the keys of their count-downs
/// (`<latch>#<member>`) in the stats.
const COUNTERS: [&str; 4] = ["plain", "m0", "m1", "m2"];

/// Counts `latch` down (half the time as one of three members, which
/// count once per phase), counted as started before it is sent and as
/// answered once it replied, for the latch and for its member (or
/// `plain`): what [`latch_waiter`] checks against.
async fn count_down(ctx: &mut Ctx, latch: &CountDownLatch) {
    let member = if ctx.chance(50) {
        match ctx.rng.below(3) {
            0 => COUNTERS[1],
            1 => COUNTERS[2],
            _ => COUNTERS[3],
        }
    } else {
        COUNTERS[0]
    };
    let by = format!("{}#{member}", latch.name());
    ctx.stats.count_down_started(latch.name());
    ctx.stats.count_down_started(&by);
    let how = ctx.how(30);
    let answered = if member == COUNTERS[0] {
        let counted = latch.count_down();
        let counted = ctx.call("CountDownLatch::count_down", how, counted);
        matches!(counted.await, Some(Ok(_)))
    } else {
        let counted = latch.count_down_as(member);
        let counted = ctx.call("CountDownLatch::count_down_as", how, counted);
        matches!(counted.await, Some(Ok(_)))
    };
    if answered {
        ctx.stats.count_down_answered(latch.name());
        ctx.stats.count_down_answered(&by);
    }
}

/// Reads the count `c` of the latch, waits for it (`wait` under the
/// workload's deadline, or `wait_timeout`), and, when it says open, checks
/// that at least `c` count-downs could have reached the latch since the
/// read: the plain ones started by now minus those answered before the
/// read (a count-down answered before the read counted before it), and
/// one per member with a count-down started by now and not answered
/// before the read (a member counts once per phase, however often it
/// counts down: the latch never opens with a member missing). A restart of
/// the server in between (its uptime went back) may lose the latch, which
/// then reads as open: no check.
async fn latch_waiter(ctx: &mut Ctx, h: &Handles) {
    let m = &h.more;
    let latch = &m.latch;
    let Some((up0, t0)) = uptime(ctx, &m.client).await else {
        return;
    };
    let by = COUNTERS.map(|k| format!("{}#{k}", latch.name()));
    let answered0 = by.clone().map(|k| ctx.stats.count_downs(&k).1);
    let counted = ctx.call("CountDownLatch::count", How::Await, latch.count());
    let Some(Ok(c)) = counted.await else {
        return;
    };
    let how = ctx.how(30);
    let opened = if ctx.chance(50) {
        let d = Duration::from_millis(50 + ctx.rng.below(1500));
        let waited = latch.wait_timeout(d);
        matches!(
            ctx.call("CountDownLatch::wait_timeout", how, waited).await,
            Some(Ok(true))
        )
    } else {
        let how = Ctx::bounded(how, WAIT);
        let waited = latch.wait();
        matches!(
            ctx.call("CountDownLatch::wait", how, waited).await,
            Some(Ok(()))
        )
    };
    if !opened || c == 0 {
        return;
    }
    let started = by.clone().map(|k| ctx.stats.count_downs(&k).0);
    let members = (1..COUNTERS.len())
        .filter(|&i| started[i] > answered0[i])
        .count() as u64;
    let could = started[0].saturating_sub(answered0[0]) + members;
    if could >= c {
        return;
    }
    if restarted(ctx, &m.client, up0, t0).await != Some(false) {
        return;
    }
    ctx.stats.violation(&format!(
        "{}: a waiter saw latch {:?} open after at most {could} count-downs (plain, or of distinct members) since it read a count of {c}",
        ctx.client,
        latch.name(),
    ));
}

/// A latch set with a short TTL (0.3-0.9 s), waited for: mostly it
/// expires before anyone counts it down, and the waiter is told.
async fn short_latch(ctx: &mut Ctx, latch: &CountDownLatch) {
    let ttl = Duration::from_millis(300 + ctx.rng.below(600));
    let n = 1 + ctx.rng.below(2);
    let set = latch.try_set_count(n, ttl);
    drop(
        ctx.call("CountDownLatch::try_set_count", How::Await, set)
            .await,
    );
    if ctx.chance(30) {
        count_down(ctx, latch).await;
    }
    let how = Ctx::bounded(ctx.how(30), WAIT);
    drop(ctx.call("CountDownLatch::wait", how, latch.wait()).await);
}
