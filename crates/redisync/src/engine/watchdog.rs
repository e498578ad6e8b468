//! The watchdog: renews every watchdog-leased hold of a client every
//! `lease / 3`, in batches per kind and per cluster node, and reports holds
//! found gone as lost. It starts with the client's first renewed hold.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use fred::types::{Key, Value};
use tokio::time::Instant;

use crate::client::ClientInner;
use crate::hold::{lock_unpoisoned, Hold, HoldOps};
use crate::metrics;
use crate::script::LuaScript;

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
/// every period until the lease would have run out.
async fn run(client: Weak<ClientInner>) {
    let (period, renew_now) = match client.upgrade() {
        Some(c) => (c.settings.watchdog_timeout / 3, c.renew_now.clone()),
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
        // Every period, and at once when the connection is back (holds
        // lost meanwhile are then known).
        tokio::select! {
            biased;
            _ = ticker.tick() => {}
            () = renew_now.notified() => ticker.reset(),
        }
        while let Some(ended) = renewals.try_join_next() {
            if ended.is_err_and(|e| e.is_panic()) {
                tracing::error!(target: "redisync.watchdog.renew", "a renewal panicked; its group is renewed again next period");
            }
        }
        let Some(client) = client.upgrade() else {
            return;
        };
        let holds: Vec<Arc<Hold>> = client
            .hub
            .all_slots()
            .iter()
            .flat_map(|s| s.holders())
            .filter(|h| h.renewed_by_watchdog())
            .collect();
        // One batch script call per kind of hold (and, on a cluster, per
        // hash slot: a script's keys must share one) and RENEW_BATCH holds.
        let clustered = client.link().is_clustered();
        let mut kinds: Vec<(&'static HoldOps, u16, Vec<Arc<Hold>>)> = Vec::new();
        for h in holds {
            let slot = if clustered {
                fred::util::redis_keyslot(h.key.as_bytes())
            } else {
                0
            };
            match kinds
                .iter_mut()
                .find(|(spec, s, _)| std::ptr::eq(*spec, h.ops) && *s == slot)
            {
                Some((_, _, list)) => list.push(h),
                None => kinds.push((h.ops, slot, vec![h])),
            }
        }
        for (spec, slot, list) in kinds {
            let group = (std::ptr::from_ref(spec) as usize, slot);
            let Some(entered) = InFlight::enter(&in_flight, group) else {
                continue;
            };
            let client = client.clone();
            renewals.spawn(async move {
                let _entered = entered;
                for batch in list.chunks(RENEW_BATCH) {
                    renew(&client, spec, batch).await;
                }
            });
        }
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
async fn renew(client: &ClientInner, spec: &HoldOps, batch: &[Arc<Hold>]) {
    let lease = client.settings.watchdog_timeout;
    let mut keys = Vec::with_capacity(batch.len());
    let mut args: Vec<Value> = vec![Value::Integer(
        i64::try_from(lease.as_millis()).unwrap_or(i64::MAX),
    )];
    let mut epochs = Vec::with_capacity(batch.len());
    for h in batch {
        // The epoch before the owner id: a hand-off after it changes it.
        epochs.push(h.owner_epoch());
        let (hold_keys, hold_args) = (spec.hold_args)(h);
        keys.extend(hold_keys);
        args.extend(hold_args);
    }
    renew_batch(client, batch, &epochs, spec.renew, keys, args).await;
}

/// Runs a batched renewal script whose reply has one flag per hold (1
/// renewed, 0 gone) and applies it: renewed holds get a new lease estimate,
/// gone ones are lost; on a connection error (or, with replica sync, too few
/// replica acknowledgements) every hold is lost once its lease estimate has
/// run out (retried next period until then). A hold handed off to another
/// owner id since its `epochs` entry was read (or while it was) is not
/// judged by a "gone": the renewal asked under an id it may no longer have.
#[tracing::instrument(level = "debug", name = "redisync.watchdog.renew", skip_all, fields(holds = batch.len(), script = script.name))]
async fn renew_batch(
    client: &ClientInner,
    batch: &[Arc<Hold>],
    epochs: &[u64],
    script: &LuaScript,
    keys: Vec<Key>,
    args: Vec<Value>,
) {
    let lease = client.settings.watchdog_timeout;
    let sent_at = Instant::now();
    let span_key = batch.first().map(|h| h.key.to_string()).unwrap_or_default();
    match script
        .run_idempotent::<Vec<i64>>(client.link(), &span_key, keys, args)
        .await
    {
        Ok(flags) => {
            let counts =
                !flags.contains(&1) || crate::replica::renewal_counts(client, &span_key).await;
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
        }
        Err(e) => {
            tracing::debug!(target: "redisync.watchdog.renew", error = %e, "renewal failed; retrying next period");
            for h in batch {
                h.meter.labels.count(metrics::RENEWAL_FAILURES);
                // Marks it lost once the lease would have run out.
                let _ = h.is_lost();
            }
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
