//! Read-write lock sections: readers (re-entered, refused an upgrade),
//! writers, and a write downgraded to a read.

use std::time::Duration;

use redisync::{ReadLock, WriteLock};

use super::{
    acquire, extend, failed, let_go, let_go_how, lock_id, micros, reentrant, release, Again, Count,
    Ctx, Failed, Got, Guard, Target, WAIT,
};
use crate::history::{now_us, Access, Kind};

/// A read-write lock section: read (45 %), write (40 %), or write then
/// downgrade (15 %); readers sometimes ask for the write side, which must
/// be refused at once.
pub(super) async fn rw(ctx: &mut Ctx, name: &str, (read, write): &(ReadLock, WriteLock)) {
    let roll = ctx.rng.below(100);
    if roll < 45 {
        return reader(ctx, name, read, write).await;
    }
    if roll < 85 {
        let t = Target::Write(write.clone());
        return reentrant(ctx, Kind::RwWrite, name, &t, Again::Reenter).await;
    }
    // Downgrade: write, take the read side, release the write side, read on.
    let lease = ctx.lease();
    let requested_us = now_us();
    let w = match acquire(ctx, Kind::RwWrite, &Target::Write(write.clone()), lease).await {
        Got::Guard(g) => g,
        Got::Busy | Got::Cancelled => return,
        Got::Failed(f) => return failed(ctx, Kind::RwWrite, &f).await,
    };
    let mut wrec = ctx.open(
        Kind::RwWrite,
        name,
        Access::Exclusive,
        w.token(),
        requested_us,
        ctx.belief(lease),
    );
    let d = ctx.hold_time();
    ctx.hold(&mut [&mut wrec], d, &|_| !w.is_lost()).await;
    let read_lease = ctx.lease();
    let requested = now_us();
    let r = ctx
        .recorded("ReadLock::try_lock", read.try_lock(WAIT, read_lease))
        .await;
    ctx.close(wrec, || !w.is_lost());
    let was_lost = w.is_lost();
    let how = let_go_how(ctx);
    let_go(ctx, Kind::RwWrite, vec![w], how).await;
    let r = match r {
        Ok(Some(g)) => g,
        // The write hold was gone from the server (as for a busy re-entry).
        Ok(None) => {
            return ctx.stats.error(
                Kind::RwRead,
                &format!("downgrade busy: the write hold was gone (lost: {was_lost})"),
            )
        }
        Err(e) => return ctx.stats.error(Kind::RwRead, &e.to_string()),
    };
    ctx.stats.bump(Kind::RwRead, Count::Acquired);
    ctx.stats.bump(Kind::RwRead, Count::Special);
    let g = Guard::Rw(r);
    let mut rrec = ctx.open(
        Kind::RwRead,
        name,
        Access::Shared,
        g.token(),
        requested,
        ctx.belief(read_lease),
    );
    let d = ctx.hold_time();
    ctx.hold(&mut [&mut rrec], d, &|_| !g.is_lost()).await;
    ctx.close(rrec, || !g.is_lost());
    let how = let_go_how(ctx);
    let_go(ctx, Kind::RwRead, vec![g], how).await;
}

/// A read section, re-entered sometimes; sometimes asks for the write side
/// meanwhile (an upgrade: refused at once, or a violation).
pub(super) async fn reader(ctx: &mut Ctx, name: &str, read: &ReadLock, write: &WriteLock) {
    let lease = ctx.lease();
    let requested_us = now_us();
    let kind = Kind::RwRead;
    let first = match acquire(ctx, kind, &Target::Read(read.clone()), lease).await {
        Got::Guard(g) => g,
        Got::Busy | Got::Cancelled => return,
        Got::Failed(f) => return failed(ctx, kind, &f).await,
    };
    let token = first.token();
    let mut rec = ctx.open(
        kind,
        name,
        Access::Shared,
        token,
        requested_us,
        ctx.belief(lease),
    );
    let mut guards = vec![first];
    let d = ctx.hold_time();
    ctx.hold(&mut [&mut rec], d / 2, &|_| {
        guards.iter().all(|g| !g.is_lost())
    })
    .await;
    if ctx.chance(25) {
        match ctx
            .recorded("ReadLock::try_lock", read.try_lock(WAIT, lease))
            .await
        {
            Ok(Some(g)) if g.fencing_token() == token => {
                ctx.stats.bump(kind, Count::Reentered);
                guards.push(Guard::Rw(g));
            }
            // The read hold was gone from the server: a fresh one, taken
            // by the same holder; its own section would overlap this one
            // harmlessly. Keep it simple: let it go at once.
            Ok(Some(g)) => {
                let _ = release(ctx, Guard::Rw(g)).await;
            }
            Ok(None) => {}
            Err(e) => ctx.stats.error(kind, &e.to_string()),
        }
    }
    if ctx.chance(15) {
        let upgrade = write.try_lock(Duration::from_millis(50), None);
        match ctx.recorded("WriteLock::try_lock", upgrade).await {
            Err(e) if Failed::of(&e).upgrade_refused => {
                ctx.stats.bump(Kind::RwWrite, Count::Special);
            }
            Err(e) => ctx.stats.error(Kind::RwWrite, &e.to_string()),
            // A lost read hold holds nothing: asking for the write side is
            // then an ordinary acquisition; so is one forced by another
            // client of this process (the reader learns it at its next
            // renewal).
            Ok(granted)
                if guards.iter().any(Guard::is_lost)
                    || ctx.stats.forced_at(&lock_id(Kind::RwRead, name))
                        + micros(ctx.settings.max_lease())
                        >= requested_us =>
            {
                if let Some(g) = granted {
                    let _ = release(ctx, Guard::Rw(g)).await;
                }
            }
            Ok(granted) => {
                ctx.stats.violation(&format!(
                    "{}: an upgrade of {name:?} (read held, token {token}) was not refused: {}",
                    ctx.client,
                    if granted.is_some() { "granted" } else { "busy" }
                ));
                if let Some(g) = granted {
                    let _ = release(ctx, Guard::Rw(g)).await;
                }
            }
        }
    }
    if ctx.chance(20) {
        let ext = ctx.extend_lease(Duration::MAX);
        rec.section.lease_us = rec.section.lease_us.max(micros(ext));
        if extend(ctx, &guards[0], ext).await {
            ctx.stats.bump(kind, Count::Extended);
        }
    }
    ctx.hold(&mut [&mut rec], d / 2, &|_| {
        guards.iter().all(|g| !g.is_lost())
    })
    .await;
    while guards.len() > 1 {
        if let Some(g) = guards.pop() {
            let _ = release(ctx, g).await;
        }
    }
    ctx.close(rec, || guards.iter().all(|g| !g.is_lost()));
    let how = let_go_how(ctx);
    let_go(ctx, kind, guards, how).await;
}
