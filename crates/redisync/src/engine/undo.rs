//! Undo of an acquisition whose outcome is unknown: its future was
//! cancelled, its reply was lost, or it waits in a queue. Written once for
//! every primitive; the primitive only says what its undo script is.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::Spec;
use crate::engine::hub::SlotRef;
use crate::error::Error;

/// What an attempt in flight (or a queued waiter) may have left in Redis for
/// `holder`. Dropped armed, it undoes that in the background (see
/// [`spawn_undo`]); it also carries the local turn while the attempt runs,
/// so a cancelled attempt hands the turn to its undo.
pub(crate) struct Undo<S: Spec> {
    spec: S,
    slot: SlotRef,
    holder: Arc<str>,
    /// The acquisition a re-entry keeps: its undo only removes a fresh
    /// grant the re-entry may have made.
    keep: Option<u64>,
    pub(crate) turn: Option<OwnedSemaphorePermit>,
    armed: bool,
    /// When whatever it may have left expires anyway.
    expires_at: Instant,
    /// Taken once armed: a shutdown waits for this undo, even one dropped
    /// while the shutdown runs (a task aborted just before it), so neither
    /// a grant nor a queue entry of an attempt that is gone outlives the
    /// shutdown (a release would hand the name to a departed waiter; a
    /// grant would keep it for its lease).
    shutdown_waits: Option<crate::engine::client_inner::BackgroundTask>,
}

impl<S: Spec> Undo<S> {
    pub(crate) fn new(
        spec: &S,
        slot: &SlotRef,
        holder: &Arc<str>,
        keep: Option<u64>,
        turn: Option<OwnedSemaphorePermit>,
    ) -> Undo<S> {
        Undo {
            spec: spec.clone(),
            slot: slot.clone(),
            holder: holder.clone(),
            keep,
            turn,
            armed: false,
            expires_at: Instant::now(),
            shutdown_waits: None,
        }
    }

    /// Armed until what may be left expires at `expires_at` (the latest of
    /// every arming); a shutdown waits for this undo (see the field).
    pub(crate) fn arm(&mut self, expires_at: Instant) {
        self.armed = true;
        self.expires_at = self.expires_at.max(expires_at);
        if self.shutdown_waits.is_none() {
            self.shutdown_waits = self.spec.named().client.start_background();
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Whether what an attempt may have left is still to be undone.
    pub(crate) fn is_armed(&self) -> bool {
        self.armed
    }
}

impl<S: Spec> Drop for Undo<S> {
    fn drop(&mut self) {
        if self.armed {
            spawn_undo(
                self.spec.clone(),
                self.slot.clone(),
                self.holder.clone(),
                self.keep,
                self.turn.take(),
                self.expires_at,
                self.shutdown_waits.take(),
            );
        }
    }
}

/// Undoes what `holder` may have left, in a background task, retried while
/// Redis is unreachable until it would have expired anyway.
///
/// A holder id that the owner uses again (re-entrant kinds) is recorded as a
/// pending undo, and each try holds the local gate: the owner's next
/// acquisition settles a pending undo itself first (see
/// `acquire::settle_pending`), so an undo never lands after it. A holder id
/// used once (a semaphore's permit id) needs no order.
fn spawn_undo<S: Spec>(
    spec: S,
    slot: SlotRef,
    holder: Arc<str>,
    keep: Option<u64>,
    turn: Option<OwnedSemaphorePermit>,
    expires_at: Instant,
    shutdown_waits: Option<crate::engine::client_inner::BackgroundTask>,
) {
    let client = spec.named().client.clone();
    // reintroduce: shutdown-forgets-aborted-waiters
    let Some(task) = shutdown_waits.or_else(|| client.start_background()) else {
        return; // shut down: like a crash, the leases clean up
    };
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(lock_key = %slot.key, "acquisition cancelled outside a tokio runtime; what it won expires with its lease");
        return;
    };
    // reintroduce: undo-unordered
    let ordered = spec.reentrant();
    if ordered {
        slot.undos.add(&holder, turn.is_some());
    }
    let undo = BackgroundUndo {
        spec,
        slot,
        holder,
        keep,
        expires_at,
        ordered,
    };
    rt.spawn(async move {
        let _task = task;
        undo.until_done(turn).await;
    });
}

/// An undo running in the background (see [`spawn_undo`]).
struct BackgroundUndo<S: Spec> {
    spec: S,
    slot: SlotRef,
    holder: Arc<str>,
    keep: Option<u64>,
    /// When what it undoes expires anyway: no try after that.
    expires_at: Instant,
    /// Recorded as pending, each try under the local gate.
    ordered: bool,
}

impl<S: Spec> BackgroundUndo<S> {
    /// Tries until the undo is done, the owner settled it, or what it undoes
    /// would have expired anyway; `turn`: the local turn of the attempt it
    /// undoes, if it had one.
    async fn until_done(self, mut turn: Option<OwnedSemaphorePermit>) {
        let client = self.spec.named().client.clone();
        let slot = &self.slot;
        let mut pause = Duration::from_millis(50);
        loop {
            let Some(mine) = self.take_turn(turn.take()).await else {
                return;
            };
            // Not sent while fred reconnects: it would wait in fred's queue
            // holding the turn; failed at once, it is retried after a pause,
            // and the owner's next acquisition settles it first meanwhile.
            let tried = match client.check_reachable() {
                Ok(()) => self.spec.undo(slot, &self.holder, self.keep).await,
                Err(e) => Err(e),
            };
            // Retried during a shutdown too, until it closes the
            // connections: the shutdown waits for this task, and a waiter's
            // entry left in a queue would be handed the name.
            match tried {
                Err(e)
                    if e.is_retryable()
                        && Instant::now() + pause < self.expires_at
                        // reintroduce: undo-gives-up-during-shutdown
                        && !client.connections_closed() =>
                {
                    tracing::debug!(lock_key = %slot.key, error = %e, "undo of a cancelled acquisition failed; retrying");
                    // The turn goes on before the try counts as ended: a
                    // zero wait told of the end finds it with its next owner.
                    drop(mine);
                    if self.ordered {
                        slot.undos.set_turn(&self.holder, false);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                    if client.connections_closed() {
                        // Shut down while we paused: a command now would
                        // follow the connection's quit (fred warns of each).
                        tracing::debug!(lock_key = %slot.key, "undo cut short by the shutdown; it expires with its lease");
                        self.settled();
                        return;
                    }
                }
                result => {
                    if let Err(e) = result {
                        self.report_failure(&e);
                    }
                    drop(mine);
                    self.settled();
                    return;
                }
            }
        }
    }

    /// The local turn the next try runs under (`Some(None)`: an unordered
    /// undo runs without one); `None`: nothing left to do (the client's
    /// gate closed, or the owner settled the undo before acquiring again).
    async fn take_turn(
        &self,
        turn: Option<OwnedSemaphorePermit>,
    ) -> Option<Option<OwnedSemaphorePermit>> {
        let mine = match (self.ordered, turn) {
            (_, Some(t)) => Some(t),
            (true, None) => Some(self.slot.queue.gate.clone().acquire_owned().await.ok()?),
            (false, None) => None,
        };
        if self.ordered {
            if !self.slot.undos.has(&self.holder) {
                return None; // the owner did it before acquiring again
            }
            self.slot.undos.set_turn(&self.holder, true);
        }
        Some(mine)
    }

    /// The undo failed for good with `e`.
    fn report_failure(&self, e: &Error) {
        let key = &self.slot.key;
        if self.spec.named().client.check_open().is_err() {
            // Shut down meanwhile: the shutdown's own report covers it (a
            // crash-like end; leases clean up).
            tracing::debug!(lock_key = %key, error = %e, "undo cut short by the shutdown; it expires with its lease");
        } else {
            tracing::warn!(target: "redisync.release.failed", lock_key = %key, error = %e, "could not undo a cancelled acquisition; it expires with its lease");
        }
    }

    /// Done trying: no longer pending.
    fn settled(&self) {
        if self.ordered {
            self.slot.undos.remove(&self.holder);
        }
    }
}
