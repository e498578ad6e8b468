//! `run_locked` sections: work under a guard (alone, or a lock and a
//! permit), each look a recorded step, with runtime stalls past the lease.

use std::future::Future;
use std::time::Duration;

use redisync::{run_locked, Lock, LockGuard, Outcome, Semaphore, SemaphorePermit};
use tokio::time::Instant;

use super::{failed, lock_id, micros, Count, Ctx, Failed, Rec, LOOK_EVERY, WAIT};
use crate::history::{now_us, Access, Kind, Pause, Record, Step, Work};

/// A stall of the runtime thread inside work (a GC pause, a blocking call):
/// at most one per process this often.
const STALL_EVERY: Duration = Duration::from_secs(6);

/// A `run_locked` section over a `Lock` (30 % of the time with a permit of
/// the name's semaphore too: `run_locked` over the pair, which is lost
/// when either is): the work looks at its guard every few milliseconds,
/// each look a step recorded with the guard's validity (rule (e): no step
/// once the lease clock said lost); now and then the work stalls its
/// runtime thread (`std::thread::sleep`) for longer than the lease, after
/// which the library must not poll it again unless the watchdog renewed
/// meanwhile. (The pair's permit is not a section: the semaphore family's
/// count is checked on its own sections.)
pub(super) async fn locked(ctx: &mut Ctx, name: &str, lock: &Lock, sem: &Semaphore) {
    let lease = ctx.lease();
    let belief = ctx.belief(lease);
    // Mostly short: these tasks share the `Lock` names, which `MultiLock`
    // needs several of at once.
    let hold = if ctx.chance(80) {
        Duration::from_millis(2 + ctx.rng.below(48))
    } else {
        ctx.hold_time()
    };
    let stall = ctx
        .stats
        .may_stall(STALL_EVERY)
        .then(|| ctx.settings.lease.mul_f64(1.2 + 0.4 * ctx.rng.unit()));
    let plan = WorkPlan {
        name,
        requested_us: now_us(),
        belief,
        hold,
        stall,
        stall_after: ctx.rng.below(4),
    };
    let with_permit = ctx.chance(30);
    let asked = ctx.recorded("Lock::try_lock", lock.try_lock(WAIT, lease));
    let acquire = async {
        match asked.await {
            Ok(Some(g)) => Ok(g),
            Ok(None) => Err(wait_ran_out()),
            Err(e) => Err(e),
        }
    };
    let mut done = WorkDone::default();
    let shared: &Ctx = ctx;
    let outcome = if with_permit {
        let permit: std::pin::Pin<Box<dyn Future<Output = _> + Send>> = match lease {
            Some(l) => Box::pin(shared.recorded(
                "Semaphore::try_acquire_with_lease",
                sem.try_acquire_with_lease(1, WAIT, l),
            )),
            None => Box::pin(shared.recorded("Semaphore::try_acquire", sem.try_acquire(1, WAIT))),
        };
        let both = async {
            let g = acquire.await?;
            match permit.await {
                Ok(Some(p)) => Ok((g, p)),
                Ok(None) => Err(wait_ran_out()),
                Err(e) => Err(e),
            }
        };
        run_locked(both, async |g: &(LockGuard, SemaphorePermit)| {
            locked_work(shared, g, &plan, &mut done).await;
        })
        .await
    } else {
        run_locked(acquire, async |g: &LockGuard| {
            locked_work(shared, g, &plan, &mut done).await;
        })
        .await
    };
    let busy = matches!(&outcome, Err(redisync::Error::InvalidArgument(m)) if m == BUSY);
    let stalled = stall.is_some();
    locked_end(
        ctx,
        name,
        (done.rec, done.steps, done.saw_lost, stalled),
        outcome,
        busy,
    )
    .await;
}

/// The error a [`locked`] section's acquisition stands in for a wait that
/// ran out with (`run_locked` takes a guard or an error): not the library's.
const BUSY: &str = "torture: the wait ran out";

fn wait_ran_out() -> redisync::Error {
    redisync::Error::InvalidArgument(BUSY.into())
}

/// What a [`locked`] section's work does.
struct WorkPlan<'a> {
    name: &'a str,
    requested_us: u64,
    belief: Duration,
    hold: Duration,
    /// A stall of the runtime thread this long, after `stall_after` looks.
    stall: Option<Duration>,
    stall_after: u64,
}

/// What a [`locked`] section's work recorded.
#[derive(Default)]
struct WorkDone {
    rec: Option<Rec>,
    steps: Vec<Step>,
    saw_lost: bool,
}

/// The work of a [`locked`] section under guard `g` (see there).
async fn locked_work<G: redisync::Guard>(
    shared: &Ctx,
    g: &G,
    plan: &WorkPlan<'_>,
    done: &mut WorkDone,
) {
    let r = done.rec.insert(shared.open(
        Kind::RunLocked,
        plan.name,
        Access::Exclusive,
        g.fencing_token(),
        plan.requested_us,
        plan.belief,
    ));
    let until = Instant::now() + plan.hold;
    let mut n = 0;
    loop {
        let mut left = Duration::ZERO;
        shared.look(r, || {
            left = g.validity();
            !left.is_zero()
        });
        done.saw_lost |= left.is_zero();
        done.steps.push(Step {
            at_us: r.section.end_us,
            left_us: Some(micros(left)),
        });
        if let Some(d) = plan.stall.filter(|_| n == plan.stall_after) {
            // Blocks this runtime thread on purpose.
            let from_us = now_us();
            let stall = |to_us| {
                Record::Stall(Pause {
                    process: shared.client.clone(),
                    from_us,
                    to_us,
                })
            };
            if crate::history::is_virtual_clock() {
                // Recorded first: the virtual clock jumps at once, and
                // the work may be cancelled right after (the loss the
                // stall caused).
                let _ = shared.sink.send(stall(from_us + micros(d)));
                crate::history::stall_runtime(d).await;
            } else {
                crate::history::stall_runtime(d).await;
                let _ = shared.sink.send(stall(now_us()));
            }
        }
        n += 1;
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// The end of a [`locked`] section: its section and work recorded, its
/// outcome counted (and checked: `Completed` only if held throughout).
async fn locked_end(
    ctx: &mut Ctx,
    name: &str,
    (rec, steps, saw_lost, stalled): (Option<Rec>, Vec<Step>, bool, bool),
    outcome: Result<Outcome<()>, redisync::Error>,
    busy: bool,
) {
    let kind = Kind::RunLocked;
    let belief = rec.as_ref().map_or(0, |r| r.section.lease_us);
    let requested_us = rec.as_ref().map_or(0, |r| r.section.requested_us);
    let token = rec.as_ref().map_or(0, |r| r.section.token);
    if let Some(r) = rec {
        ctx.finish(r);
    }
    let _ = ctx.sink.send(Record::Work(Work {
        lock: lock_id(kind, name),
        kind,
        client: ctx.client.clone(),
        token,
        lease_us: belief,
        requested_us,
        steps,
    }));
    match outcome {
        Ok(o) => {
            ctx.stats.bump(kind, Count::Acquired);
            if stalled {
                ctx.stats.bump(kind, Count::Moved);
            }
            match o {
                Outcome::Completed(()) if saw_lost => ctx.stats.violation(&format!(
                    "{}: run_locked on {name:?} (token {token}) said Completed though its work saw the guard lost",
                    ctx.client
                )),
                Outcome::Completed(()) => {}
                Outcome::Cancelled | Outcome::LostAtEnd(()) => {
                    ctx.stats.bump(kind, Count::Special);
                }
            }
        }
        Err(_) if busy => ctx.stats.bump(kind, Count::Busy),
        Err(e) => failed(ctx, kind, &Failed::of(&e)).await,
    }
}
