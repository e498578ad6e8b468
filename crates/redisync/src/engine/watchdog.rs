//! The watchdog: renews every watchdog-leased hold of a client every
//! `lease / 3`, in batches per kind and per cluster node, and reports holds
//! found gone as lost. It starts with the client's first renewed hold.
//!
//! And the look at every hold after the connection was lost
//! ([`verify_holds`]): each watchdog-leased hold renewed, each hold with a
//! fixed lease checked without extending it, before the connection state
//! says `Reconnected`.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use fred::types::{Key, Value};
use tokio::time::Instant;

use crate::engine::client_inner::ClientInner;
use crate::engine::hold::{Hold, HoldOps};
use crate::error::Result;
use crate::metrics;
use crate::mutex::lock_unpoisoned;
use crate::redis::script::LuaScript;

/// Holds renewed by one script call.
const RENEW_BATCH: usize = 100;

/// Starts the client's watchdog unless it runs already.
pub(crate) fn ensure_running(client: &Arc<ClientInner>) {
    if client.watchdog_started.swap(true, Ordering::AcqRel) {
        return;
    }
    client.add_task(tokio::spawn(run(Arc::downgrade(client))));
}

/// Renews every watchdog-leased hold of the client every `lease / 3`, in
/// batches; reports holds found gone as lost; a failing renewal is retried
/// every period until the lease would have run out. (On a reconnection the
/// holds are renewed at once by [`verify_holds`], not here.)
async fn run(client: Weak<ClientInner>) {
    let period = match client.upgrade() {
        Some(c) => c.settings.watchdog_timeout / 3,
        None => return,
    };
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    // (kind, hash slot) groups whose renewal is still on its way: each group
    // renews in its own task, so a slow node (a paused primary, for up to
    // the command timeout) only delays its own groups, never the others;
    // a group still in flight skips a round.
    let in_flight: Arc<Mutex<HashSet<Group>>> = Arc::default();
    // The group tasks live in this task: aborting it (shutdown, the client
    // dropped) aborts them, so no renewal outlives the client.
    let mut renewals = tokio::task::JoinSet::new();
    loop {
        ticker.tick().await;
        while let Some(ended) = renewals.try_join_next() {
            if ended.is_err_and(|e| e.is_panic()) {
                tracing::error!(target: "redisync.watchdog.renew", "a renewal panicked; its group is renewed again next period");
            }
        }
        let Some(client) = client.upgrade() else {
            return;
        };
        let holds: Vec<(Arc<Hold>, bool)> = client
            .hub
            .all_slots()
            .iter()
            .flat_map(|s| s.holds.all())
            .filter(|h| h.renewed_by_watchdog())
            .map(|h| (h, true))
            .collect();
        for (spec, slot, _, list) in groups(&client, holds.into_iter()) {
            let group = (std::ptr::from_ref(spec) as usize, slot);
            let Some(entered) = InFlight::enter(&in_flight, group) else {
                continue;
            };
            let client = client.clone();
            renewals.spawn(async move {
                let _entered = entered;
                for batch in list.chunks(RENEW_BATCH) {
                    // Its failure is handled (and logged) in it.
                    let _ = renew(&client, spec, batch).await;
                }
            });
        }
    }
}

/// Holds of one kind and one hash slot, renewed (`true`) or checked
/// together.
type HoldGroup = (&'static HoldOps, u16, bool, Vec<Arc<Hold>>);

/// `holds` (each with whether the watchdog renews it) grouped for batch
/// script calls: one per kind of hold and way (renewed or checked) and, on
/// a cluster, per hash slot (a script's keys must share one).
fn groups(client: &ClientInner, holds: impl Iterator<Item = (Arc<Hold>, bool)>) -> Vec<HoldGroup> {
    let clustered = client.link().is_clustered();
    let mut groups: Vec<HoldGroup> = Vec::new();
    for (h, renewed) in holds {
        let slot = if clustered {
            fred::util::redis_keyslot(h.key.as_bytes())
        } else {
            0
        };
        match groups
            .iter_mut()
            .find(|(spec, s, r, _)| std::ptr::eq(*spec, h.ops) && *s == slot && *r == renewed)
        {
            Some((_, _, _, list)) => list.push(h),
            None => groups.push((h.ops, slot, renewed, vec![h])),
        }
    }
    groups
}

/// Looks at every live hold of the client at once, after the connection
/// was lost (or Redis stopped answering): each watchdog-leased hold is
/// renewed, each hold with a fixed lease is checked without extending it
/// ([`HoldOps::check`]), and those found gone are lost, exactly as the
/// watchdog reports its own. O(holds / batch) script calls, all at once;
/// nothing on the normal path. `probe`: with no hold to look at, a
/// round trip (`TIME`) must still come back (nothing else shows that Redis
/// answers again after a partition).
///
/// `true` once every batch had its verdict; `false` when one failed, or
/// when the whole look did not end within the bound (a verdict that came
/// stays applied). A hold whose hand-off is in flight is left out: the
/// hand-off judges it.
pub(crate) async fn verify_holds(client: &ClientInner, probe: bool) -> bool {
    let holds: Vec<(Arc<Hold>, bool)> = client
        .hub
        .all_slots()
        .iter()
        .flat_map(|s| s.holds.all())
        // `is_lost` marks (and counts) the holds whose lease ran out.
        .filter(|h| !h.is_released() && !h.is_lost() && h.owner_epoch() % 2 == 0)
        .map(|h| {
            let renewed = h.renewed_by_watchdog();
            (h, renewed)
        })
        .collect();
    // Each call is bounded by the command timeout (fred's); a script's
    // NOSCRIPT fallback or a replica WAIT after it is a second round trip.
    let bound = client.settings.command_timeout.saturating_mul(2);
    if holds.is_empty() {
        if !probe {
            return true;
        }
        let time = client.link().command(crate::redis::link::Command {
            name: "TIME",
            route: None,
            args: Vec::new(),
        });
        return matches!(tokio::time::timeout(bound, time).await, Ok(Ok(_)));
    }
    let groups = groups(client, holds.into_iter());
    let batches = groups.iter().flat_map(|(spec, _, renewed, list)| {
        list.chunks(RENEW_BATCH).map(move |batch| async move {
            if *renewed {
                renew(client, spec, batch).await
            } else {
                check(client, spec, batch).await
            }
        })
    });
    match tokio::time::timeout(bound, futures::future::join_all(batches)).await {
        Ok(verdicts) => verdicts.iter().all(Result::is_ok),
        Err(_) => false,
    }
}

/// A group of holds renewed together: its kind (the address of its
/// [`HoldOps`]) and its hash slot.
type Group = (usize, u16);

/// A group's entry in the in-flight set, removed when its renewal task ends
/// however it ends (done, panicked or aborted): a group left in the set
/// would never be renewed again.
struct InFlight {
    set: Arc<Mutex<HashSet<Group>>>,
    group: Group,
}

impl InFlight {
    /// Enters `group`, unless its renewal is still in flight.
    fn enter(set: &Arc<Mutex<HashSet<Group>>>, group: Group) -> Option<InFlight> {
        lock_unpoisoned(set).insert(group).then(|| InFlight {
            set: set.clone(),
            group,
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        lock_unpoisoned(&self.set).remove(&self.group);
    }
}

/// Renews one batch of holds of one kind in one script call.
async fn renew(client: &ClientInner, spec: &HoldOps, batch: &[Arc<Hold>]) -> Result<()> {
    let lease = client.settings.watchdog_timeout;
    let lease = Value::Integer(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
    let (keys, args, epochs) = batch_keys_and_args(spec, batch, vec![lease]);
    renew_batch(client, batch, &epochs, spec.renew, keys, args).await
}

/// The KEYS and ARGV of a batch script over `batch` (after `args`), and each
/// hold's owner epoch, read before its owner id: a hand-off after it
/// changes it.
fn batch_keys_and_args(
    spec: &HoldOps,
    batch: &[Arc<Hold>],
    mut args: Vec<Value>,
) -> (Vec<Key>, Vec<Value>, Vec<u64>) {
    let mut keys = Vec::with_capacity(batch.len());
    let mut epochs = Vec::with_capacity(batch.len());
    for h in batch {
        epochs.push(h.owner_epoch());
        let (hold_keys, hold_args) = (spec.hold_args)(h);
        keys.extend(hold_keys);
        args.extend(hold_args);
    }
    (keys, args, epochs)
}

/// Checks one batch of holds of one kind with a fixed lease in one script
/// call ([`HoldOps::check`]: writes nothing, extends nothing): holds found
/// gone are lost (a hold handed off meanwhile is not judged, as in
/// [`renew_batch`]); the others keep their lease estimate.
#[tracing::instrument(level = "debug", name = "redisync.watchdog.check", skip_all, fields(holds = batch.len(), script = spec.check.name))]
async fn check(client: &ClientInner, spec: &HoldOps, batch: &[Arc<Hold>]) -> Result<()> {
    let (keys, args, epochs) =
        batch_keys_and_args(spec, batch, Vec::with_capacity(batch.len() * 2));
    let connection = client.connection.epoch();
    let span_key = batch.first().map(|h| h.key.to_string()).unwrap_or_default();
    match spec
        .check
        .run_idempotent::<Vec<i64>>(client.link(), &span_key, keys, args)
        .await
    {
        Ok(flags) => {
            for ((h, ok), epoch) in batch.iter().zip(flags).zip(&epochs) {
                if ok != 1 && epoch % 2 == 0 && h.owner_epoch() == *epoch {
                    h.mark_lost(
                        "the reconnection's check found it gone (expired, forced or lost by Redis)",
                    );
                }
            }
            Ok(())
        }
        Err(e) => {
            tracing::debug!(target: "redisync.watchdog.check", error = %e, "check failed; looked at again");
            if e.is_unreachable() {
                client.connection.unreachable(connection);
            }
            Err(e)
        }
    }
}

/// Runs a batched renewal script whose reply has one flag per hold (1
/// renewed, 0 gone) and applies it: renewed holds get a new lease estimate,
/// gone ones are lost; on a connection error (or, with replica sync, too few
/// replica acknowledgements) every hold is lost once its lease estimate has
/// run out (retried next period until then). A hold handed off to another
/// owner id since its `epochs` entry was read (or while it was) is not
/// judged by a "gone": the renewal asked under an id it may no longer have.
/// A failure because Redis could not be reached or did not answer in time
/// suspends the connection state (see
/// [`ConnectionSignal::unreachable`](crate::connection::ConnectionSignal::unreachable)).
#[tracing::instrument(level = "debug", name = "redisync.watchdog.renew", skip_all, fields(holds = batch.len(), script = script.name))]
async fn renew_batch(
    client: &ClientInner,
    batch: &[Arc<Hold>],
    epochs: &[u64],
    script: &LuaScript,
    keys: Vec<Key>,
    args: Vec<Value>,
) -> Result<()> {
    let lease = client.settings.watchdog_timeout;
    let connection = client.connection.epoch();
    let sent_at = Instant::now();
    let span_key = batch.first().map(|h| h.key.to_string()).unwrap_or_default();
    match script
        .run_idempotent::<Vec<i64>>(client.link(), &span_key, keys, args)
        .await
    {
        Ok(flags) => {
            let counts = !flags.contains(&1)
                || crate::redis::replica::renewal_counts(client.replicas(), &span_key).await;
            for ((h, ok), epoch) in batch.iter().zip(flags).zip(epochs) {
                if ok == 1 {
                    if counts {
                        h.extend_validity(sent_at, lease);
                        h.meter.labels.count(metrics::RENEWALS);
                    } else {
                        h.meter.labels.count(metrics::RENEWAL_FAILURES);
                        // Marks it lost once the synced lease would have run out.
                        let _ = h.is_lost();
                    }
                } else if epoch % 2 == 0 && h.owner_epoch() == *epoch {
                    h.mark_lost("the watchdog found it gone (expired, forced or lost by Redis)");
                }
            }
            Ok(())
        }
        Err(e) => {
            tracing::debug!(target: "redisync.watchdog.renew", error = %e, "renewal failed; retrying next period");
            for h in batch {
                h.meter.labels.count(metrics::RENEWAL_FAILURES);
                // Marks it lost once the lease would have run out.
                let _ = h.is_lost();
            }
            if e.is_unreachable() {
                client.connection.unreachable(connection);
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A renewal that panics gives its group back: the next round renews it.
    #[test]
    fn a_panicking_renewal_leaves_its_group_renewable() {
        let set: Arc<Mutex<HashSet<Group>>> = Arc::default();
        let entered = InFlight::enter(&set, (1, 0)).expect("enters");
        assert!(InFlight::enter(&set, (1, 0)).is_none(), "in flight");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _entered = entered;
            panic!("a renewal failed");
        }));
        assert!(panicked.is_err());
        assert!(InFlight::enter(&set, (1, 0)).is_some(), "left in flight");
    }
}
