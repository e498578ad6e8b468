//! A fresh client shut down while it holds locks (and, now and then, while
//! a task of it waits in a queue): the shutdown is bounded and every
//! guard says lost.

use std::time::Duration;

use redisync::Client;

use super::{after_shutdown, by_clock, micros, Connect, Ctx, Guard, Held};
use crate::history::{now_us, Probe, Record};

/// What `Client::shutdown` may take beyond one command timeout: closing
/// connections and scheduling on a loaded machine; a round trip on the
/// virtual clock.
fn shutdown_slack() -> Duration {
    by_clock(Duration::from_millis(500), Duration::from_millis(100))
}

/// A fresh client takes 1 to 3 locks of its own (watchdog-renewed) and is
/// shut down holding them, whatever the fault of the moment: the call is
/// bounded by about one command timeout (not one per lock), and every
/// guard says lost once it returns.
///
/// Half of them also have a task waiting in Redis for a name `main` holds
/// (see [`AbortedWaiter`]), aborted right before the shutdown.
pub(super) async fn shutdown(ctx: &mut Ctx, connect: &Connect, main: &Client) {
    // Fresh clients are not cheap: one every second or so per task.
    let pause = 700 + ctx.rng.below(600);
    tokio::time::sleep(Duration::from_millis(pause)).await;
    let connected = connect().await;
    let Ok(client) = connected else {
        return;
    };
    let mut guards = Vec::new();
    for k in 0..=ctx.rng.below(3) {
        let lock = client.lock(&format!("torture:shutdown:{}:{k}", ctx.client));
        let asked = lock.try_lock(Duration::from_millis(300), None);
        if let Ok(Some(g)) = ctx.recorded("Lock::try_lock", asked).await {
            guards.push(g);
        }
    }
    // Half of them hold one of every other kind too, and check every call
    // after the shutdown.
    let mut held = if ctx.chance(50) {
        Some(Held::take(ctx, &client).await)
    } else {
        None
    };
    let aborted = if ctx.chance(50) {
        AbortedWaiter::start(ctx, main, &client).await
    } else {
        None
    };
    tokio::time::sleep(Duration::from_millis(ctx.rng.below(50))).await;
    let aborted = match aborted {
        Some(a) => Some(a.abort(ctx).await),
        None => None,
    };
    let asked_us = now_us();
    // Cut or dropped too: its first poll marks every guard lost.
    let how = ctx.how(20);
    let done = ctx.call("Client::shutdown", how, client.shutdown()).await;
    if done.is_some() {
        let _ = ctx.sink.send(Record::Probe(Probe {
            what: "shutdown".into(),
            client: ctx.client.clone(),
            asked_us,
            done_us: now_us(),
            bound_us: micros(ctx.settings.command_timeout + shutdown_slack()),
        }));
    }
    let others = held.as_ref().map_or(0, |h| {
        h.others.iter().filter(|g| !g.is_lost()).count()
            + usize::from(h.lead.as_ref().is_some_and(|l| !l.is_lost()))
    });
    let still = guards.iter().filter(|g| !g.is_lost()).count() + others;
    if still > 0 {
        ctx.stats.violation(&format!(
            "{}: {still} guards still said held after their client's shutdown {}",
            ctx.client,
            if done.is_some() {
                "returned"
            } else {
                "was polled"
            }
        ));
    }
    if let Some(a) = aborted {
        a.check(ctx, main, &client, asked_us).await;
    }
    if let Some(mut h) = held.take() {
        h.lock = guards.pop();
        after_shutdown(ctx, &client, h).await;
    }
}

/// A task of a client about to shut down that waits in Redis for a name
/// another client (`main`) holds, in one of the four kinds with a queue,
/// and is aborted right before the shutdown (`abort()`,
/// `JoinSet::abort_all()`). `main` lets go before or after the abort, so the
/// name may be handed to the departed waiter. Once the shutdown returned,
/// the name lists neither a waiter nor a holder of that client: else the
/// next waiter waits a full lease behind one that left.
struct AbortedWaiter {
    name: String,
    kind: QueueKind,
    /// `main`'s hold, until it lets go.
    holder: Option<Guard>,
    waiter: tokio::task::JoinHandle<()>,
}

/// The kinds whose waiters queue in Redis.
#[derive(Debug, Clone, Copy)]
enum QueueKind {
    Lock,
    Fair,
    Write,
    Semaphore,
}

impl QueueKind {
    /// `client`'s attempt on `name` for at most `wait`, under `lease` (the
    /// watchdog's when `None`).
    async fn take(
        self,
        client: &Client,
        name: &str,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Option<Guard> {
        let got = match self {
            QueueKind::Lock => client
                .lock(name)
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Lock)),
            QueueKind::Fair => client
                .fair_lock(name)
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Fair)),
            QueueKind::Write => client
                .rw_lock(name)
                .write()
                .try_lock(wait, lease)
                .await
                .map(|g| g.map(Guard::Rw)),
            QueueKind::Semaphore => {
                let semaphore = client.semaphore(name).with_permits(1);
                match lease {
                    Some(lease) => semaphore.try_acquire_with_lease(1, wait, lease).await,
                    None => semaphore.try_acquire(1, wait).await,
                }
                .map(|g| g.map(Guard::Semaphore))
            }
        };
        got.ok().flatten()
    }
}

impl AbortedWaiter {
    /// `main` takes a name of this task's own; a task of `client` waits for
    /// it. `None` when `main` could not take it (a fault).
    async fn start(ctx: &mut Ctx, main: &Client, client: &Client) -> Option<AbortedWaiter> {
        let kinds = [
            QueueKind::Lock,
            QueueKind::Fair,
            QueueKind::Write,
            QueueKind::Semaphore,
        ];
        let kind = kinds[usize::try_from(ctx.rng.below(4)).unwrap_or(0)];
        let name = format!("torture:abort:{}", ctx.client);
        let holder = Some(kind.take(main, &name, Duration::ZERO, ctx.lease()).await?);
        let (waiting, name2, lease) = (client.clone(), name.clone(), ctx.lease());
        let waiter = tokio::spawn(async move {
            // Held until the task is aborted.
            let _held = kind.take(&waiting, &name2, Duration::MAX, lease).await;
            std::future::pending::<()>().await;
        });
        Some(AbortedWaiter {
            name,
            kind,
            holder,
            waiter,
        })
    }

    /// Aborts the waiter once it had time to queue (or not), `main`
    /// letting go before, or right after.
    async fn abort(mut self, ctx: &mut Ctx) -> AbortedWaiter {
        tokio::time::sleep(Duration::from_millis(ctx.rng.below(100))).await;
        let before = ctx.chance(50);
        if before {
            drop(self.holder.take());
        }
        self.waiter.abort();
        if !before {
            drop(self.holder.take());
        }
        self
    }

    /// After the shutdown asked at `asked_us` returned: records how long
    /// until the name listed nothing of `client` but a permit whose lease
    /// ended (it blocks nobody: the next acquisition reclaims it; a probe bounded like the
    /// shutdown; the checker excuses one under a fault: nothing can leave a
    /// queue on a server out of reach).
    async fn check(self, ctx: &mut Ctx, main: &Client, client: &Client, asked_us: u64) {
        let bound = ctx.settings.command_timeout + shutdown_slack();
        let give_up = tokio::time::Instant::now() + bound + Duration::from_secs(1);
        let gone = client.id();
        loop {
            let listed = main.inspect(&self.name).await.map(|all| {
                all.iter().any(|i| {
                    i.waiters.iter().any(|w| w.client_id == Some(gone))
                        || i.holders
                            .iter()
                            .any(|h| h.client_id == Some(gone) && h.is_live())
                })
            });
            if matches!(listed, Ok(false)) || tokio::time::Instant::now() >= give_up {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = ctx.sink.send(Record::Probe(Probe {
            what: format!("queue-left:{:?}", self.kind),
            client: ctx.client.clone(),
            asked_us,
            done_us: now_us(),
            bound_us: micros(bound),
        }));
        // The held name's leftovers (a grant to `main`'s next attempt) go
        // with its lease; nothing else uses the name.
        let _ = self.waiter.await;
    }
}
