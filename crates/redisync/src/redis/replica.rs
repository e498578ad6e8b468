//! Replica sync (`ClientBuilder::replica_sync`): `WAIT` for replicas after
//! acquisitions, renewals and releases of every primitive.
//!
//! `WAIT n timeout` counts the replicas that have every write sent before it
//! on the same connection. fred keeps one connection per primary, and the
//! `WAIT` is routed by the lock key's hash slot, so it follows the script
//! that wrote the lock (other commands of the client queued in between only
//! add writes to wait for).

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::redis::link::Link;

/// Where a client waits for its replicas, and for how many: its link and
/// its `replica_sync` setting (`None`: off).
#[derive(Clone, Copy)]
pub(crate) struct Replicas<'a> {
    pub(crate) link: &'a dyn Link,
    pub(crate) wanted: Option<(u32, Duration)>,
}

/// What `WAIT` said after a write to `key`'s slot.
enum Synced {
    /// Replica sync is off, or enough replicas acknowledged.
    Enough,
    /// Too few replicas acknowledged within the timeout.
    Short { acked: i64, required: u32 },
    /// `WAIT` itself failed.
    Failed(Error),
}

/// With replica sync on, `WAIT required timeout` on the connection of the
/// primary that owns `key` (the one that ran the script).
async fn wait_for_replicas(replicas: Replicas<'_>, key: &str) -> Synced {
    let Some((required, timeout)) = replicas.wanted else {
        return Synced::Enough;
    };
    // Rounded up: a timeout below 1 ms must not become `WAIT n 0`, which
    // blocks until the replicas answer.
    let ms = i64::try_from(timeout.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX);
    let wait = crate::redis::link::Command {
        name: "WAIT",
        route: Some(key),
        args: vec![i64::from(required).into(), ms.into()],
    };
    match replicas.link.call::<i64>(wait).await {
        Ok(acked) if acked >= i64::from(required) => Synced::Enough,
        Ok(acked) => Synced::Short { acked, required },
        Err(e) => Synced::Failed(Error::redis(e)),
    }
}

/// An acquisition (new or re-entrant) of `key` (returned `guard`) whose
/// replica sync ([`writes_synced`]) failed with `e` (returned): too few
/// acknowledgements undo this acquisition with `undo` (one hold: an outer
/// re-entrant hold stays); any other failure drops the guard (released in
/// the background).
pub(crate) async fn unsynced<G, U, F>(key: &str, guard: G, undo: U, e: Error) -> Error
where
    U: FnOnce(G) -> F,
    F: Future<Output = Result<()>>,
{
    if let Error::ReplicaSync { .. } = e {
        if let Err(undone) = undo(guard).await {
            tracing::warn!(target: "redisync.release.failed", lock_key = %key, error = %undone, "undoing an unsynced acquisition failed; it expires with its lease");
        }
    } else {
        drop(guard); // released in the background
    }
    e
}

/// After a write to `name` (Redis key `key`), e.g. an `extend` that raised
/// its lease: whether it counts. With replica sync on it counts only once
/// enough replicas acknowledged it (a failover to one without it would keep
/// the old state); otherwise [`Error::ReplicaSync`] (or the `WAIT`'s error),
/// and the caller keeps what it believed before.
pub(crate) async fn writes_synced(replicas: Replicas<'_>, name: &str, key: &str) -> Result<()> {
    match wait_for_replicas(replicas, key).await {
        Synced::Enough => Ok(()),
        Synced::Short { acked, required } => Err(Error::ReplicaSync {
            name: name.to_owned(),
            acked,
            required,
        }),
        Synced::Failed(e) => Err(e),
    }
}

/// After a release that wrote something: with replica sync on, `WAIT`s and
/// logs when too few replicas acknowledged (the release already happened on
/// the primary; a failover to a replica without it leaves the lock there
/// until its lease ends).
pub(crate) async fn after_release(replicas: Replicas<'_>, key: &str) {
    match wait_for_replicas(replicas, key).await {
        Synced::Enough => {}
        Synced::Short { acked, required } => {
            tracing::warn!(lock_key = %key, acked, required, "release not acknowledged by enough replicas");
        }
        Synced::Failed(e) => {
            tracing::warn!(lock_key = %key, error = %e, "WAIT after a release failed");
        }
    }
}

/// After a watchdog renewal of locks in `key`'s slot: whether the new leases
/// count. With replica sync on they count only when enough replicas
/// acknowledged them, so a guard's lease estimate never runs past what a
/// synced replica would keep after a failover.
pub(crate) async fn renewal_counts(replicas: Replicas<'_>, key: &str) -> bool {
    if let Synced::Enough = wait_for_replicas(replicas, key).await {
        return true;
    }
    tracing::debug!(target: "redisync.watchdog.renew", lock_key = %key, "renewal not acknowledged by enough replicas; it does not extend the lease estimate");
    false
}
