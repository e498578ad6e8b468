//! The query methods of the primitives and the client, asked between
//! sections and while a section holds.

use redisync::__private;
use redisync::{ReadLock, WriteLock};

use super::{term_existed, Ctx, Handles, How, Target};

/// The query methods of the primitives and the client (10 % of sections
/// ask one while they hold, and some steps between sections): whatever
/// they answer, they must answer.
pub(super) async fn query(ctx: &mut Ctx, h: &Handles, i: usize) {
    let how = ctx.how(40);
    let m = &h.more;
    let name = h.names[i];
    match ctx.rng.below(32) {
        0 => drop(
            ctx.call("Lock::is_locked", how, h.locks[i].is_locked())
                .await,
        ),
        1 => {
            let asked = h.locks[i].is_held_by_current_task();
            drop(ctx.call("Lock::is_held_by_current_task", how, asked).await);
        }
        2 => drop(
            ctx.call("Lock::hold_count", how, h.locks[i].hold_count())
                .await,
        ),
        3 => {
            let asked = h.locks[i].remaining_lease();
            drop(ctx.call("Lock::remaining_lease", how, asked).await);
        }
        4 => drop(ctx.call("Lock::inspect", how, h.locks[i].inspect()).await),
        5 => drop(
            ctx.call("FairLock::is_locked", how, h.fair[i].is_locked())
                .await,
        ),
        6 => {
            let asked = h.fair[i].is_held_by_current_task();
            drop(
                ctx.call("FairLock::is_held_by_current_task", how, asked)
                    .await,
            );
        }
        7 => drop(
            ctx.call("FairLock::hold_count", how, h.fair[i].hold_count())
                .await,
        ),
        8 => {
            let asked = h.fair[i].remaining_lease();
            drop(ctx.call("FairLock::remaining_lease", how, asked).await);
        }
        9 => drop(
            ctx.call("FairLock::inspect", how, h.fair[i].inspect())
                .await,
        ),
        10 | 24..=26 => rw_query(ctx, how, &h.rw[i].0).await,
        11 | 27..=29 => rw_query_write(ctx, how, &h.rw[i].1).await,
        13 => {
            let asked = h.semaphores[i].available_permits();
            drop(ctx.call("Semaphore::available_permits", how, asked).await);
        }
        14 => drop(
            ctx.call("Semaphore::inspect", how, h.semaphores[i].inspect())
                .await,
        ),
        15 => drop(
            ctx.call("Client::inspect", how, m.client.inspect(name))
                .await,
        ),
        16 => drop(
            ctx.call("Client::list", how, m.client.list("torture:*"))
                .await,
        ),
        17 | 30 | 31 => {
            let asked = __private::server_uptime(&m.client);
            drop(ctx.call("Client::server_uptime", how, asked).await);
        }
        18 => drop(
            ctx.call("CountDownLatch::count", how, m.latch.count())
                .await,
        ),
        19 => drop(
            ctx.call("CountDownLatch::inspect", how, m.latch.inspect())
                .await,
        ),
        20 => {
            let l = &h.leaders[i % h.leaders.len()];
            if let Some(Ok(info)) = ctx.call("Leader::current", how, l.current()).await {
                term_existed(ctx, l.name(), info.as_ref());
            }
        }
        21 => {
            let asked = m.admin.available_permits();
            drop(ctx.call("Semaphore::available_permits", how, asked).await);
        }
        22 => drop(ctx.call("Fenced::read", how, m.fenced[i].read()).await),
        _ => drop(
            ctx.call("RwLock::inspect", how, m.rw_locks[i].inspect())
                .await,
        ),
    }
}

/// A query of the lock a section holds, through the handle it took it
/// with.
pub(super) async fn query_held(ctx: &mut Ctx, target: &Target) {
    let how = ctx.how(30);
    let m = ctx.rng.below(5);
    match target {
        Target::Lock(l) => match m {
            0 => drop(ctx.call("Lock::is_locked", how, l.is_locked()).await),
            1 => {
                let asked = l.is_held_by_current_task();
                drop(ctx.call("Lock::is_held_by_current_task", how, asked).await);
            }
            2 => drop(ctx.call("Lock::hold_count", how, l.hold_count()).await),
            3 => drop(
                ctx.call("Lock::remaining_lease", how, l.remaining_lease())
                    .await,
            ),
            _ => drop(ctx.call("Lock::inspect", how, l.inspect()).await),
        },
        Target::Fair(l) => match m {
            0 => drop(ctx.call("FairLock::is_locked", how, l.is_locked()).await),
            1 => {
                let asked = l.is_held_by_current_task();
                drop(
                    ctx.call("FairLock::is_held_by_current_task", how, asked)
                        .await,
                );
            }
            2 => drop(ctx.call("FairLock::hold_count", how, l.hold_count()).await),
            3 => {
                let asked = l.remaining_lease();
                drop(ctx.call("FairLock::remaining_lease", how, asked).await);
            }
            _ => drop(ctx.call("FairLock::inspect", how, l.inspect()).await),
        },
        Target::Read(l) => rw_query(ctx, how, l).await,
        Target::Write(l) => rw_query_write(ctx, how, l).await,
        Target::Semaphore(s, _) => {
            let asked = s.available_permits();
            drop(ctx.call("Semaphore::available_permits", how, asked).await);
        }
        Target::Multi(_) | Target::Redlock(_) => {}
    }
}

async fn rw_query(ctx: &mut Ctx, how: How, l: &ReadLock) {
    match ctx.rng.below(4) {
        0 => drop(ctx.call("ReadLock::is_locked", how, l.is_locked()).await),
        1 => {
            let asked = l.is_held_by_current_task();
            drop(
                ctx.call("ReadLock::is_held_by_current_task", how, asked)
                    .await,
            );
        }
        2 => drop(ctx.call("ReadLock::hold_count", how, l.hold_count()).await),
        _ => drop(
            ctx.call("ReadLock::remaining_lease", how, l.remaining_lease())
                .await,
        ),
    }
}

async fn rw_query_write(ctx: &mut Ctx, how: How, l: &WriteLock) {
    match ctx.rng.below(4) {
        0 => drop(ctx.call("WriteLock::is_locked", how, l.is_locked()).await),
        1 => {
            let asked = l.is_held_by_current_task();
            drop(
                ctx.call("WriteLock::is_held_by_current_task", how, asked)
                    .await,
            );
        }
        2 => drop(ctx.call("WriteLock::hold_count", how, l.hold_count()).await),
        _ => drop(
            ctx.call("WriteLock::remaining_lease", how, l.remaining_lease())
                .await,
        ),
    }
}
