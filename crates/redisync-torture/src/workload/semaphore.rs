//! Semaphore sections (1 or 2 of a name's permits) and the administered
//! semaphore: its total changed, its permits force-released or detached
//! and held by id.

use std::time::Duration;

use redisync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use super::{
    acquire, extend, failed, force_release, let_go, let_go_how, micros, query_held, wait_lost,
    Count, Ctx, Got, Guard, Handles, Rec, Target, SEMAPHORE_PERMITS,
};
use crate::history::{now_us, Access, Kind};

/// The permits a semaphore's administration may set: every total it
/// declares or sets is at most this (rule (a) then holds its holders to
/// it, whatever the order of the changes).
pub(super) const ADMIN_PERMITS: u32 = 3;

/// A semaphore section: 1 or 2 of its permits.
pub(super) async fn semaphore(ctx: &mut Ctx, i: usize, s: &Semaphore) {
    let of = SEMAPHORE_PERMITS[i];
    let held = u32::try_from(1 + ctx.rng.below(u64::from(of.min(2)))).unwrap_or(1);
    let kind = Kind::Semaphore;
    let requested_us = now_us();
    // A fixed lease only for the forms that take one; the section's belief
    // (the watchdog's lease) bounds it.
    let lease = ctx.lease();
    let g = match acquire(ctx, kind, &Target::Semaphore(s.clone(), held), lease).await {
        Got::Guard(g) => g,
        Got::Busy | Got::Cancelled => return,
        Got::Failed(f) => {
            if f.not_initialized {
                // First use, or the server restarted empty.
                let set = s.try_set_permits(of);
                let _ = ctx.recorded("Semaphore::try_set_permits", set).await;
            }
            return failed(ctx, kind, &f).await;
        }
    };
    let mut rec = ctx.open(
        kind,
        s.name(),
        Access::Permits { held, of },
        g.token(),
        requested_us,
        ctx.settings.lease,
    );
    let d = ctx.hold_time();
    ctx.hold(&mut [&mut rec], d / 2, &|_| !g.is_lost()).await;
    if ctx.chance(20) {
        extend_permit(ctx, &mut rec.section.lease_us, &g).await;
    }
    if ctx.chance(10) {
        query_held(ctx, &Target::Semaphore(s.clone(), held)).await;
    }
    if ctx.chance(10) {
        wait_lost(ctx, &g).await;
    }
    ctx.hold(&mut [&mut rec], d / 2, &|_| !g.is_lost()).await;
    ctx.close(rec, || !g.is_lost());
    let how = let_go_how(ctx);
    let_go(ctx, kind, vec![g], how).await;
}

/// `extend` of a semaphore permit while it is held (the section's lease
/// grows with it).
async fn extend_permit(ctx: &mut Ctx, rec_lease_us: &mut u64, g: &Guard) {
    let ext = ctx.extend_lease(Duration::MAX);
    *rec_lease_us = (*rec_lease_us).max(micros(ext));
    if extend(ctx, g, ext).await {
        ctx.stats.bump(Kind::Semaphore, Count::Extended);
    }
}

/// A step on the semaphore whose total the tasks change (25 % of the
/// semaphore family's steps): a section of one permit (taken through the
/// handle declaring the total, as after an empty restart), `set_permits`,
/// `try_set_permits`, `add_permits(-1)`, `force_release` by a task that
/// holds no permit, or a query. Totals stay at most [`ADMIN_PERMITS`]
/// (rule (a) holds every section to that); a total lowered below what is
/// in use leaves the holders their permits.
pub(super) async fn semaphore_admin(ctx: &mut Ctx, h: &Handles) {
    let m = &h.more;
    let how = ctx.how(30);
    let n = u32::try_from(1 + ctx.rng.below(u64::from(ADMIN_PERMITS))).unwrap_or(1);
    match ctx.rng.below(10) {
        0..=3 => admin_section(ctx, h).await,
        4 => drop(
            ctx.call("Semaphore::set_permits", how, m.admin.set_permits(n))
                .await,
        ),
        5 => {
            let set = m.admin.try_set_permits(n);
            drop(ctx.call("Semaphore::try_set_permits", how, set).await);
        }
        6 | 7 => drop(
            ctx.call("Semaphore::add_permits", how, m.admin.add_permits(-1))
                .await,
        ),
        8 => force_release(ctx, &m.admin, None).await,
        _ => drop(ctx.call("Semaphore::inspect", how, m.admin.inspect()).await),
    }
}

/// One permit of the administered semaphore, held a while; 20 % of the
/// time the holder force-releases it (through its own client: its permit
/// must say lost as soon as the call returns `Ok`).
async fn admin_section(ctx: &mut Ctx, h: &Handles) {
    let m = &h.more;
    let kind = Kind::Semaphore;
    let lease = ctx.lease();
    let requested_us = now_us();
    let target = Target::Semaphore(m.admin_declared.clone(), 1);
    let g = match acquire(ctx, kind, &target, lease).await {
        Got::Guard(g) => g,
        Got::Busy | Got::Cancelled => return,
        Got::Failed(f) => return failed(ctx, kind, &f).await,
    };
    let mut rec = ctx.open(
        kind,
        m.admin.name(),
        Access::Permits {
            held: 1,
            of: ADMIN_PERMITS,
        },
        g.token(),
        requested_us,
        // The watchdog's lease bounds a fixed one (`acquire` takes the
        // watchdog's whatever was planned).
        ctx.settings.lease,
    );
    let d = ctx.hold_time();
    let g = match (ctx.chance(25), g) {
        (true, Guard::Semaphore(permit)) => {
            return detached_section(ctx, &m.admin, rec, permit, d).await
        }
        (_, g) => g,
    };
    ctx.hold(&mut [&mut rec], d, &|_| !g.is_lost()).await;
    if ctx.chance(20) {
        force_release(ctx, &m.admin, Some(&g)).await;
        wait_lost(ctx, &g).await;
    }
    ctx.close(rec, || !g.is_lost());
    let how = let_go_how(ctx);
    let_go(ctx, kind, vec![g], how).await;
}

/// The rest of an admin section held by permit id: the permit leaves its
/// guard ([`SemaphorePermit::detach`]); the holder keeps it with
/// `extend_permit` and gives it back with `release_permit` (through
/// another handle: any handle of the name may). The section is valid
/// until the lease the guard had left at the detach, or the last
/// extension known to have run, ends by this client's clock (an extension
/// whose outcome is unknown counts as not run).
async fn detached_section(
    ctx: &mut Ctx,
    by: &Semaphore,
    mut rec: Rec,
    permit: SemaphorePermit,
    hold_for: Duration,
) {
    let mut valid_until = Instant::now() + redisync::Guard::validity(&permit);
    let id = permit.detach();
    let end = Instant::now() + hold_for;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let until = valid_until;
        let chunk = left.min(
            until
                .saturating_duration_since(Instant::now())
                .div_f64(3.0)
                .max(Duration::from_millis(2)),
        );
        ctx.hold(&mut [&mut rec], chunk, &|_| Instant::now() < until)
            .await;
        if left.is_zero() {
            break;
        }
        let lease = ctx.extend_lease(Duration::MAX);
        let how = ctx.how(15);
        let sent_at = Instant::now();
        let asked = by.extend_permit(&id, lease);
        match ctx.call("Semaphore::extend_permit", how, asked).await {
            Some(Ok(())) => {
                valid_until = valid_until.max(sent_at + lease);
                rec.section.lease_us = rec.section.lease_us.max(micros(lease));
                ctx.stats.bump(Kind::Semaphore, Count::Extended);
            }
            // Gone (its lease ended): the holder carries on to its
            // planned end, as a guard's does, and the looks say lost.
            Some(Err(redisync::Error::NotHeld { .. })) => valid_until = sent_at,
            _ => {}
        }
    }
    let until = valid_until;
    ctx.close(rec, || Instant::now() < until);
    let how = ctx.how(30);
    // Any ending: one whose outcome is unknown leaves the permit to its
    // lease, which no section counts.
    drop(
        ctx.call("Semaphore::release_permit", how, by.release_permit(&id))
            .await,
    );
}
