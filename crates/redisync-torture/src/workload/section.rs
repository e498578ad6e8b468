//! The steps every section is made of: acquire (awaited, cut, or with a
//! zero wait), hold, extend, wait for a loss, and let go (unlock, drop, or
//! move the guards to another task).

use std::time::Duration;

use super::{by_clock, Count, Ctx, Failed, Got, Guard, How, Rec, Target, LOOK_EVERY, WAIT};
use crate::coverage::{Ending, Recorded};
use crate::history::{now_us, Kind, Probe, Record};

/// Acquires `target`: awaited (70 %), under a tiny `timeout` (15 %), or
/// polled a few times and dropped (15 %).
///
/// ```text
/// roll:  0 .. cancel/2: timeout | .. cancel: polls, then dropped | .. 100: awaited
/// ```
pub(super) async fn acquire(
    ctx: &mut Ctx,
    kind: Kind,
    target: &Target,
    lease: Option<Duration>,
) -> Got {
    acquire_within(ctx, kind, target, lease, WAIT, 30).await
}

/// [`acquire`] with another wait.
pub(super) async fn acquire_within(
    ctx: &mut Ctx,
    kind: Kind,
    target: &Target,
    lease: Option<Duration>,
    wait: Duration,
    cancel_percent: u64,
) -> Got {
    let roll = ctx.rng.below(100);
    let outcome = if roll >= cancel_percent && ctx.chance(10) {
        // Zero wait: one attempt, answered within about a round trip.
        let asked_us = now_us();
        let got = target.call(ctx, How::Await, Duration::ZERO, lease).await;
        let _ = ctx.sink.send(Record::Probe(Probe {
            what: "try-zero".into(),
            client: ctx.client.clone(),
            asked_us,
            done_us: now_us(),
            bound_us: try_zero_bound_us(),
        }));
        got
    } else {
        let how = ctx.how_of(roll, cancel_percent);
        target.call(ctx, how, wait, lease).await
    };
    match outcome {
        None => {
            ctx.stats.bump(kind, Count::Cancelled);
            Got::Cancelled
        }
        Some(Ok(Some(g))) => {
            ctx.stats.bump(kind, Count::Acquired);
            Got::Guard(g)
        }
        Some(Ok(None)) => {
            ctx.stats.bump(kind, Count::Busy);
            Got::Busy
        }
        Some(Err(f)) => Got::Failed(f),
    }
}

/// How long `try_lock(Duration::ZERO)` may take outside faults: about a
/// round trip, with room for a loaded machine; a few round trips, below one
/// command timeout, on the virtual clock.
fn try_zero_bound_us() -> u64 {
    by_clock(1_000_000, 300_000)
}

/// After a failed acquisition: counts it and pauses a little.
pub(super) async fn failed(ctx: &mut Ctx, kind: Kind, f: &Failed) {
    ctx.stats.error(kind, &f.text);
    let pause = 20 + ctx.rng.below(100);
    tokio::time::sleep(Duration::from_millis(pause)).await;
}

/// Releases `guards` in order: awaited, dropped, or moved to another task.
/// Returns whether every awaited release succeeded.
pub(super) async fn let_go(ctx: &mut Ctx, kind: Kind, guards: Vec<Guard>, how: LetGo) {
    match how {
        LetGo::Drop => drop(guards),
        LetGo::Unlock => {
            for g in guards {
                if release(ctx, g).await.is_err() {
                    ctx.stats.bump(kind, Count::ReleaseFailed);
                }
            }
        }
        LetGo::Move => {
            ctx.stats.bump(kind, Count::Moved);
            let coverage = ctx.stats.coverage.clone();
            let other = tokio::spawn(async move {
                let mut failed = 0;
                for g in guards {
                    let op = g.release_op();
                    let released = Recorded::new(&coverage, op, g.release(), Ending::Dropped);
                    failed += u64::from(released.await.is_err());
                }
                failed
            });
            match other.await {
                Ok(n) => {
                    for _ in 0..n {
                        ctx.stats.bump(kind, Count::ReleaseFailed);
                    }
                }
                Err(e) => ctx.stats.violation(&format!(
                    "{}: a task releasing moved guards failed: {e}",
                    ctx.client
                )),
            }
        }
    }
}

/// Releases `g`: awaited, or (15 %) cut by a timeout or dropped after a
/// few polls (the guard is gone either way: a release not done is done in
/// the background). A cut release is no failed one.
pub(super) async fn release(ctx: &mut Ctx, g: Guard) -> Result<(), String> {
    let how = ctx.how(15);
    let op = g.release_op();
    ctx.call(op, how, g.release()).await.unwrap_or(Ok(()))
}

#[derive(Debug, Clone, Copy)]
pub(super) enum LetGo {
    Unlock,
    Drop,
    Move,
}

pub(super) fn let_go_how(ctx: &mut Ctx) -> LetGo {
    if ctx.chance(ctx.settings.drop_percent) {
        LetGo::Drop
    } else if ctx.chance(15) {
        LetGo::Move
    } else {
        LetGo::Unlock
    }
}

/// Extends `g` to `lease`, awaited: whether it answered `Ok` (`false` for
/// a kind without `extend`).
pub(super) async fn extend(ctx: &mut Ctx, g: &Guard, lease: Duration) -> bool {
    let how = ctx.how(15);
    match g.extend_op() {
        Some(op) => matches!(ctx.call(op, how, g.extend(lease)).await, Some(Ok(()))),
        None => false,
    }
}

/// Holds every section for `d`; section `k` is valid while all of
/// `guards[k]` are.
pub(super) async fn hold_all(ctx: &Ctx, recs: &mut [Rec], guards: &[Vec<Guard>], d: Duration) {
    let mut all: Vec<&mut Rec> = recs.iter_mut().collect();
    ctx.hold(&mut all, d, &|k| guards[k].iter().all(|g| !g.is_lost()))
        .await;
}

/// Waits a moment for `g` to say lost (mostly it does not: a timeout; at
/// once after a force or a lost lease), or drops the wait after a few
/// polls.
pub(super) async fn wait_lost(ctx: &mut Ctx, g: &Guard) {
    let Some(op) = g.lost_op() else {
        return;
    };
    let how = if ctx.chance(20) {
        How::Drop(1 + ctx.rng.below(6))
    } else {
        How::Timeout(LOOK_EVERY)
    };
    let _ = ctx.call(op, how, g.lost()).await;
}
