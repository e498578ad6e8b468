//! Every call on a client after its shutdown: `Error::Shutdown` at once,
//! from the handles of every kind and the guards it held.

use std::time::Duration;

use redisync::__private;
use redisync::{Client, LockGuard};

use super::{Ctx, Guard, How};
use crate::coverage::{Ending, Recorded};

/// The calls of a read-write lock's side (`$ty`) after shutdown.
macro_rules! side_calls {
    ($ty:literal, $l:expr, $d:expr) => {
        [
            (
                concat!($ty, "::lock"),
                Box::pin(shut($l.lock())) as Pending<'_>,
            ),
            (
                concat!($ty, "::lock_with_lease"),
                Box::pin(shut($l.lock_with_lease($d))),
            ),
            (
                concat!($ty, "::try_lock"),
                Box::pin(shut($l.try_lock($d, None))),
            ),
            (concat!($ty, "::is_locked"), Box::pin(shut($l.is_locked()))),
            (
                concat!($ty, "::is_held_by_current_task"),
                Box::pin(shut($l.is_held_by_current_task())),
            ),
            (
                concat!($ty, "::hold_count"),
                Box::pin(shut($l.hold_count())),
            ),
            (
                concat!($ty, "::remaining_lease"),
                Box::pin(shut($l.remaining_lease())),
            ),
            (
                concat!($ty, "::force_unlock"),
                Box::pin(shut($l.force_unlock())),
            ),
        ]
    };
}

/// Every call on a client after its `shutdown` returns
/// `Error::Shutdown` at once (within a second; `Leadership::lost` answers,
/// `Client::shutdown` again does nothing): the handles of the fresh
/// client, and its guards of every kind.
#[allow(clippy::too_many_lines, reason = "one list of every call")]
pub(super) async fn after_shutdown(ctx: &mut Ctx, client: &Client, held: Held) {
    let Held {
        lock: lock_guard,
        others,
        lead,
        watch,
        connection,
    } = held;
    let name = format!("torture:shutdown:{}", ctx.client);
    let lock = client.lock(&name);
    let fair = client.fair_lock(&name);
    let rw = client.rw_lock(&name);
    let sem = client.semaphore(&name).with_permits(1);
    let latch = client.count_down_latch(&name);
    let leader = client.leader(&name);
    let fenced = client.fenced(&name);
    let (read, write) = (rw.read(), rw.write());
    let d = Duration::from_millis(100);
    // Any id: a closed client refuses before it looks.
    let permit_id: redisync::PermitId = format!("1/{}:shut:1#1", client.id())
        .parse()
        .unwrap_or_else(|e| unreachable!("a well-formed permit id: {e}"));
    let mut calls: Vec<(&'static str, Pending<'_>)> = vec![
        ("Lock::lock", Box::pin(shut(lock.lock()))),
        (
            "Lock::lock_with_lease",
            Box::pin(shut(lock.lock_with_lease(d))),
        ),
        ("Lock::try_lock", Box::pin(shut(lock.try_lock(d, None)))),
        (
            "Lock::try_lock_with_min_token",
            Box::pin(shut(__private::try_lock_with_min_token(&lock, d, None, 1))),
        ),
        ("Lock::is_locked", Box::pin(shut(lock.is_locked()))),
        (
            "Lock::is_held_by_current_task",
            Box::pin(shut(lock.is_held_by_current_task())),
        ),
        ("Lock::hold_count", Box::pin(shut(lock.hold_count()))),
        (
            "Lock::remaining_lease",
            Box::pin(shut(lock.remaining_lease())),
        ),
        ("Lock::inspect", Box::pin(shut(lock.inspect()))),
        (
            "Lock::advance_fencing_token",
            Box::pin(shut(__private::advance_fencing_token(&lock, 1))),
        ),
        ("Lock::force_unlock", Box::pin(shut(lock.force_unlock()))),
        ("FairLock::lock", Box::pin(shut(fair.lock()))),
        (
            "FairLock::lock_with_lease",
            Box::pin(shut(fair.lock_with_lease(d))),
        ),
        ("FairLock::try_lock", Box::pin(shut(fair.try_lock(d, None)))),
        ("FairLock::is_locked", Box::pin(shut(fair.is_locked()))),
        (
            "FairLock::is_held_by_current_task",
            Box::pin(shut(fair.is_held_by_current_task())),
        ),
        ("FairLock::hold_count", Box::pin(shut(fair.hold_count()))),
        (
            "FairLock::remaining_lease",
            Box::pin(shut(fair.remaining_lease())),
        ),
        ("FairLock::inspect", Box::pin(shut(fair.inspect()))),
        (
            "FairLock::force_unlock",
            Box::pin(shut(fair.force_unlock())),
        ),
        ("RwLock::inspect", Box::pin(shut(rw.inspect()))),
        (
            "Semaphore::try_set_permits",
            Box::pin(shut(sem.try_set_permits(1))),
        ),
        ("Semaphore::set_permits", Box::pin(shut(sem.set_permits(1)))),
        ("Semaphore::add_permits", Box::pin(shut(sem.add_permits(1)))),
        ("Semaphore::acquire", Box::pin(shut(sem.acquire(1)))),
        (
            "Semaphore::try_acquire",
            Box::pin(shut(sem.try_acquire(1, d))),
        ),
        (
            "Semaphore::acquire_with_lease",
            Box::pin(shut(sem.acquire_with_lease(1, d))),
        ),
        (
            "Semaphore::try_acquire_with_lease",
            Box::pin(shut(sem.try_acquire_with_lease(1, d, d))),
        ),
        (
            "Semaphore::available_permits",
            Box::pin(shut(sem.available_permits())),
        ),
        ("Semaphore::inspect", Box::pin(shut(sem.inspect()))),
        (
            "Semaphore::force_release",
            Box::pin(shut(sem.force_release())),
        ),
        (
            "Semaphore::release_permit",
            Box::pin(shut(sem.release_permit(&permit_id))),
        ),
        (
            "Semaphore::extend_permit",
            Box::pin(shut(sem.extend_permit(&permit_id, d))),
        ),
        (
            "CountDownLatch::try_set_count",
            Box::pin(shut(latch.try_set_count(1, d))),
        ),
        (
            "CountDownLatch::count_down",
            Box::pin(shut(latch.count_down())),
        ),
        (
            "CountDownLatch::count_down_as",
            Box::pin(shut(latch.count_down_as("m0"))),
        ),
        ("CountDownLatch::count", Box::pin(shut(latch.count()))),
        ("CountDownLatch::wait", Box::pin(shut(latch.wait()))),
        (
            "CountDownLatch::wait_timeout",
            Box::pin(shut(latch.wait_timeout(d))),
        ),
        ("CountDownLatch::inspect", Box::pin(shut(latch.inspect()))),
        ("Leader::campaign", Box::pin(shut(leader.campaign()))),
        (
            "Leader::try_campaign",
            Box::pin(shut(leader.try_campaign(d))),
        ),
        ("Leader::current", Box::pin(shut(leader.current()))),
        ("Leader::watch", Box::pin(shut(leader.watch()))),
        (
            "Leader::run",
            Box::pin(shut(leader.run(d, |_| std::future::ready(())))),
        ),
        (
            "Leader::run_with_term",
            Box::pin(shut(leader.run_with_term(d, |_| std::future::ready(())))),
        ),
        (
            "Fenced::write_with_token",
            Box::pin(shut(fenced.write_with_token(1, "x"))),
        ),
        (
            "Fenced::claim_with_token",
            Box::pin(shut(fenced.claim_with_token(1))),
        ),
        ("Fenced::read", Box::pin(shut(fenced.read()))),
        ("Client::inspect", Box::pin(shut(client.inspect(&name)))),
        ("Client::list", Box::pin(shut(client.list("torture:*")))),
        (
            "Client::server_uptime",
            Box::pin(shut(__private::server_uptime(client))),
        ),
    ];
    calls.extend(side_calls!("ReadLock", read, d));
    calls.extend(side_calls!("WriteLock", write, d));
    if let Some(g) = &lock_guard {
        calls.push(("Fenced::write", Box::pin(shut(fenced.write(g, "x")))));
        calls.push(("Fenced::claim", Box::pin(shut(fenced.claim(g)))));
    }
    // Each in turn: a second one would find the first's refusal.
    for (op, pending) in calls {
        check_shut(ctx, op, pending).await;
    }
    let d = Duration::from_millis(500);
    if let Some(mut g) = lock_guard {
        check_shut(ctx, "LockGuard::extend", Box::pin(shut(g.extend(d)))).await;
        check_shut(ctx, "LockGuard::hand_off", Box::pin(shut(g.hand_off()))).await;
        check_shut(ctx, "LockGuard::unlock", Box::pin(shut(g.unlock()))).await;
    }
    for g in others {
        match g {
            Guard::Fair(mut g) => {
                check_shut(ctx, "FairLockGuard::extend", Box::pin(shut(g.extend(d)))).await;
                let handed = Box::pin(shut(g.hand_off()));
                check_shut(ctx, "FairLockGuard::hand_off", handed).await;
                check_shut(ctx, "FairLockGuard::unlock", Box::pin(shut(g.unlock()))).await;
            }
            Guard::Rw(g) => {
                check_shut(ctx, "RwLockGuard::extend", Box::pin(shut(g.extend(d)))).await;
                check_shut(ctx, "RwLockGuard::unlock", Box::pin(shut(g.unlock()))).await;
            }
            Guard::Semaphore(p) => {
                let extended = Box::pin(shut(p.extend(d)));
                check_shut(ctx, "SemaphorePermit::extend", extended).await;
                let released = Box::pin(shut(p.release()));
                check_shut(ctx, "SemaphorePermit::release", released).await;
            }
            _ => {}
        }
    }
    if let Some(lead) = lead {
        let lost = ctx.recorded("Leadership::lost", lead.lost());
        if tokio::time::timeout(Duration::from_secs(1), lost)
            .await
            .is_err()
        {
            ctx.stats.violation(&format!(
                "{}: Leadership::lost did not answer within 1 s of its client's shutdown",
                ctx.client
            ));
        }
        let set = Box::pin(shut(lead.set_identity("after")));
        check_shut(ctx, "Leadership::set_identity", set).await;
        check_shut(ctx, "Leadership::resign", Box::pin(shut(lead.resign()))).await;
    }
    if let Some(mut w) = watch {
        // A change seen before the shutdown is still told (the watch keeps
        // what it did not return); then `Error::Shutdown`.
        let mut told = Vec::new();
        let end = loop {
            let changed = Recorded::new(
                &ctx.stats.coverage,
                "LeaderWatch::changed",
                w.changed(),
                Ending::Timeout,
            );
            match tokio::time::timeout(Duration::from_secs(1), changed).await {
                Ok(Ok(info)) if told.len() < 2 => told.push(info),
                other => break other,
            }
        };
        if !matches!(end, Ok(Err(redisync::Error::Shutdown))) {
            ctx.stats.violation(&format!(
                "{}: LeaderWatch::changed after its client's shutdown answered {end:?} (after {told:?})",
                ctx.client
            ));
        }
    }
    if let Some(mut connection) = connection {
        // `Shutdown` at once, and again.
        for _ in 0..2 {
            let changed = Recorded::new(
                &ctx.stats.coverage,
                "ConnectionWatch::changed",
                connection.changed(),
                Ending::Timeout,
            );
            let end = tokio::time::timeout(Duration::from_secs(1), changed).await;
            if end != Ok(redisync::ConnectionState::Shutdown) {
                ctx.stats.violation(&format!(
                    "{}: ConnectionWatch::changed after its client's shutdown answered {end:?}, not Shutdown at once",
                    ctx.client
                ));
                break;
            }
        }
    }
    let again = ctx.recorded("Client::shutdown", client.shutdown());
    if !matches!(again.await, Ok(())) {
        ctx.stats.violation(&format!(
            "{}: a second Client::shutdown did not answer Ok",
            ctx.client
        ));
    }
}

/// What a fresh client held when it was shut down.
#[derive(Default)]
pub(super) struct Held {
    pub(super) lock: Option<LockGuard>,
    /// A fair-lock guard, read and write guards, a permit.
    pub(super) others: Vec<Guard>,
    pub(super) lead: Option<redisync::Leadership>,
    pub(super) watch: Option<redisync::leader::LeaderWatch>,
    /// The client's connection state, watched before its shutdown.
    pub(super) connection: Option<redisync::ConnectionWatch>,
}

impl Held {
    /// Takes, on `client`'s own names, one guard of each other kind, the
    /// lead of an election and a watch of it (each with a short wait:
    /// what a fault denies is left out).
    pub(super) async fn take(ctx: &mut Ctx, client: &Client) -> Held {
        let name = format!("torture:shutdown:{}", ctx.client);
        let wait = Duration::from_millis(300);
        let mut held = Held::default();
        let fair = client.fair_lock(&format!("{name}:f"));
        if let Ok(Some(g)) = ctx
            .recorded("FairLock::try_lock", fair.try_lock(wait, None))
            .await
        {
            held.others.push(Guard::Fair(g));
        }
        let rw = client.rw_lock(&format!("{name}:r"));
        let read = rw.read();
        if let Ok(Some(g)) = ctx
            .recorded("ReadLock::try_lock", read.try_lock(wait, None))
            .await
        {
            held.others.push(Guard::Rw(g));
        }
        let write = client.rw_lock(&format!("{name}:w")).write();
        if let Ok(Some(g)) = ctx
            .recorded("WriteLock::try_lock", write.try_lock(wait, None))
            .await
        {
            held.others.push(Guard::Rw(g));
        }
        let sem = client.semaphore(&format!("{name}:s")).with_permits(2);
        if let Ok(Some(p)) = ctx
            .recorded("Semaphore::try_acquire", sem.try_acquire(1, wait))
            .await
        {
            held.others.push(Guard::Semaphore(p));
        }
        let leader = client.leader(&format!("{name}:l"));
        if let Ok(Some(l)) = ctx
            .recorded("Leader::try_campaign", leader.try_campaign(wait))
            .await
        {
            held.lead = Some(l);
        }
        if let Ok(w) = ctx.recorded("Leader::watch", leader.watch()).await {
            held.watch = Some(w);
        }
        // The connection state, waited on while nothing changes: cut by a
        // timeout and by a drop (a fault meanwhile makes it a reply).
        let mut connection = client.connection_state();
        let cut = How::Timeout(Duration::from_millis(1));
        let _ = ctx
            .call("ConnectionWatch::changed", cut, connection.changed())
            .await;
        let dropped = How::Drop(1);
        let _ = ctx
            .call("ConnectionWatch::changed", dropped, connection.changed())
            .await;
        held.connection = Some(connection);
        held
    }
}

/// A call after shutdown, its result reduced to what the check needs:
/// `Ok` (a violation), `Err(None)` for `Error::Shutdown`, `Err(Some(_))`
/// for another error (a violation).
pub(super) type Pending<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Option<String>>> + Send + 'a>>;

async fn shut<T>(
    call: impl std::future::Future<Output = redisync::Result<T>>,
) -> Result<(), Option<String>> {
    match call.await {
        Ok(_) => Ok(()),
        Err(redisync::Error::Shutdown) => Err(None),
        Err(e) => Err(Some(e.to_string())),
    }
}

/// Checks one call after shutdown: `Error::Shutdown` within a second.
async fn check_shut(ctx: &mut Ctx, op: &'static str, pending: Pending<'_>) {
    let call = Recorded::new(&ctx.stats.coverage, op, pending, Ending::Timeout);
    let wrong = match tokio::time::timeout(Duration::from_secs(1), call).await {
        Ok(Err(None)) => return,
        Ok(Ok(())) => "Ok".to_owned(),
        Ok(Err(Some(e))) => e,
        Err(_) => "nothing within 1 s".to_owned(),
    };
    ctx.stats.violation(&format!(
        "{}: {op} after its client's shutdown answered {wrong}, not Error::Shutdown at once",
        ctx.client
    ));
}
