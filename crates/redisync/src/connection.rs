//! The client's connection state, for code that must know when its holds
//! may be lost (Curator's `ConnectionStateListener`, etcd's session
//! `Done()`): see [`Client::connection_state`](crate::Client::connection_state).

use tokio::sync::{watch, Notify};

/// The state of a [`Client`](crate::Client)'s command connection, as a
/// [`ConnectionWatch`] tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionState {
    /// Connected since the client connected; no loss seen yet.
    Connected,
    /// The connection was lost and the client is reconnecting, or Redis
    /// stopped answering the watchdog in time (its renewal timed out or
    /// failed on the connection: a partition that keeps the connection
    /// open): renewals fail meanwhile, so a hold whose lease runs out
    /// before Redis answers again is lost (another client may take the
    /// lock). Pause work that relies on a hold. It lasts until every hold
    /// has a verdict (see [`Reconnected`](ConnectionState::Reconnected)).
    Suspended,
    /// Redis answers again after a [`Suspended`](ConnectionState::Suspended)
    /// spell, and every hold the client had has a verdict: before this
    /// state is published, each hold was looked at in Redis at once (a
    /// watchdog-renewed hold renewed, a hold with a fixed lease checked
    /// without extending it), and those found gone, or whose lease ran out
    /// meanwhile, are reported lost by their guards and counted in
    /// [`ConnectionWatch::lost_holds`]. So a guard that is not
    /// [`lost`](crate::LockGuard::is_lost) when this state is read was
    /// still held in Redis after the spell (it can be lost later, as at any
    /// time). A look that fails (Redis gone again, or no answer within
    /// the command timeout) leaves the state `Suspended` and is tried
    /// again; the lease clock goes on meanwhile. A hold whose hand-off is
    /// in flight is left to the hand-off's own verdict.
    Reconnected,
    /// [`Client::shutdown`](crate::Client::shutdown) ran (or every handle
    /// of the client was dropped): nothing changes any more.
    Shutdown,
}

/// What a watch sees: the state and the holds known lost so far; and the
/// signal's epoch, which only the client reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    state: ConnectionState,
    lost_holds: u64,
    /// Bumped by every loss of the connection (or of Redis's answers) and
    /// by every `Reconnected`: a verdict or a failure is only taken for
    /// the epoch it was sent in (see [`ConnectionSignal::unreachable`] and
    /// [`ConnectionSignal::reconnected`]).
    epoch: u64,
}

/// The sending side, one per client.
#[derive(Debug)]
pub(crate) struct ConnectionSignal {
    seen: watch::Sender<Seen>,
    /// Wakes the task that follows the connection: a renewal found Redis
    /// unreachable (see [`ConnectionSignal::unreachable`]).
    unreachable: Notify,
}

impl ConnectionSignal {
    pub(crate) fn new() -> ConnectionSignal {
        ConnectionSignal {
            seen: watch::Sender::new(Seen {
                state: ConnectionState::Connected,
                lost_holds: 0,
                epoch: 0,
            }),
            unreachable: Notify::new(),
        }
    }

    /// The epoch now: read before a command whose failure may suspend (or
    /// whose success may end a suspension).
    pub(crate) fn epoch(&self) -> u64 {
        self.seen.borrow().epoch
    }

    /// Whether the state is `Suspended`.
    pub(crate) fn is_suspended(&self) -> bool {
        self.seen.borrow().state == ConnectionState::Suspended
    }

    /// Whether the client shut down.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.seen.borrow().state == ConnectionState::Shutdown
    }

    /// The command connection was lost, or was made again (fred's events):
    /// `Suspended` until the holds have a verdict
    /// ([`ConnectionSignal::reconnected`]); a verdict or a failure of an
    /// earlier epoch no longer counts.
    pub(crate) fn lost(&self) {
        self.seen.send_if_modified(|seen| {
            if seen.state == ConnectionState::Shutdown {
                return false;
            }
            seen.epoch += 1;
            let changed = seen.state != ConnectionState::Suspended;
            seen.state = ConnectionState::Suspended;
            changed
        });
    }

    /// A renewal (or a check) sent in `epoch` failed because Redis could not
    /// be reached or did not answer in time, with no connection error from
    /// the client (a partition that keeps TCP open): `Suspended`, unless
    /// the state changed since it was sent (a failure of a command sent
    /// before a verdict does not undo it). Returns whether it suspended.
    pub(crate) fn unreachable(&self, epoch: u64) -> bool {
        let suspended = self.seen.send_if_modified(|seen| {
            let live = matches!(
                seen.state,
                ConnectionState::Connected | ConnectionState::Reconnected
            );
            if !live || seen.epoch != epoch {
                return false;
            }
            seen.epoch += 1;
            seen.state = ConnectionState::Suspended;
            true
        });
        if suspended {
            self.unreachable.notify_one();
        }
        suspended
    }

    /// Resolves after [`ConnectionSignal::unreachable`] suspended (at once
    /// if it did since the last call).
    pub(crate) async fn suspended_unreachable(&self) {
        self.unreachable.notified().await;
    }

    /// Every hold of the client had a verdict from a look that began in
    /// `epoch` (renewed, checked, or found lost): `Reconnected`, unless the
    /// connection was lost again since (or the client shut down).
    pub(crate) fn reconnected(&self, epoch: u64) {
        self.seen.send_if_modified(|seen| {
            if seen.state != ConnectionState::Suspended || seen.epoch != epoch {
                return false;
            }
            seen.epoch += 1;
            seen.state = ConnectionState::Reconnected;
            true
        });
    }

    /// A hold was found lost while a guard of it was alive (not counted
    /// after the shutdown began: it gives every hold up).
    pub(crate) fn hold_lost(&self) {
        self.seen.send_if_modified(|seen| {
            let counted = seen.state != ConnectionState::Shutdown;
            if counted {
                seen.lost_holds += 1;
            }
            counted
        });
    }

    /// The client shuts down.
    pub(crate) fn shut_down(&self) {
        self.seen.send_if_modified(|seen| {
            let changed = seen.state != ConnectionState::Shutdown;
            seen.state = ConnectionState::Shutdown;
            changed
        });
    }

    pub(crate) fn watch(&self) -> ConnectionWatch {
        ConnectionWatch {
            rx: self.seen.subscribe(),
        }
    }
}

/// A live view of a client's connection state (see
/// [`Client::connection_state`](crate::Client::connection_state)). Cheap;
/// each clone waits for changes on its own.
#[derive(Debug, Clone)]
pub struct ConnectionWatch {
    rx: watch::Receiver<Seen>,
}

impl ConnectionWatch {
    /// The state now.
    pub fn state(&self) -> ConnectionState {
        self.rx.borrow().state
    }

    /// How many holds of the client (of every kind, leaderships included)
    /// were found lost while a guard of them was alive, since it connected: by the watchdog (gone from Redis, or
    /// its lease ran out while renewals failed), by an `extend` or a
    /// release that found it gone, by a force-unlock. Holds given up by the
    /// shutdown are not counted. It only grows: compare it with a value
    /// read before to learn whether a suspension cost holds.
    pub fn lost_holds(&self) -> u64 {
        self.rx.borrow().lost_holds
    }

    /// Waits until the state or [`lost_holds`](ConnectionWatch::lost_holds)
    /// changes and returns the state then. A change that came before the
    /// call and was not returned yet is returned at once; changes in
    /// between are skipped (a late reader sees `Reconnected` without the
    /// `Suspended` before it, and the count jumps). Once the state is
    /// [`Shutdown`](ConnectionState::Shutdown) it answers `Shutdown` at
    /// once.
    ///
    /// # Cancel safety
    /// Cancel safe: a change it did not return is returned by the next
    /// call.
    pub async fn changed(&mut self) -> ConnectionState {
        if self.rx.borrow().state == ConnectionState::Shutdown {
            return ConnectionState::Shutdown;
        }
        match self.rx.changed().await {
            Ok(()) => self.rx.borrow_and_update().state,
            // The client is gone.
            Err(_) => ConnectionState::Shutdown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure or a verdict counts only for the epoch it was sent in: a
    /// renewal sent before a verdict cannot undo it, a look that began
    /// before a loss cannot end it, and nothing moves after the shutdown.
    #[test]
    fn a_failure_or_a_verdict_of_an_earlier_epoch_changes_nothing() {
        let signal = ConnectionSignal::new();
        let watch = signal.watch();
        let before = signal.epoch();
        signal.lost();
        assert_eq!(watch.state(), ConnectionState::Suspended);
        let look = signal.epoch();
        signal.reconnected(before);
        assert_eq!(watch.state(), ConnectionState::Suspended, "a stale look");
        signal.reconnected(look);
        assert_eq!(watch.state(), ConnectionState::Reconnected);
        assert!(
            !signal.unreachable(before),
            "a renewal sent before the verdict"
        );
        assert_eq!(watch.state(), ConnectionState::Reconnected);

        assert!(signal.unreachable(signal.epoch()));
        assert_eq!(watch.state(), ConnectionState::Suspended);
        assert!(!signal.unreachable(signal.epoch()), "suspended already");
        let look = signal.epoch();
        signal.lost();
        signal.reconnected(look);
        assert_eq!(
            watch.state(),
            ConnectionState::Suspended,
            "a look that began before the loss"
        );

        signal.shut_down();
        signal.lost();
        signal.reconnected(signal.epoch());
        assert!(!signal.unreachable(signal.epoch()));
        signal.hold_lost();
        assert_eq!(watch.state(), ConnectionState::Shutdown);
        assert_eq!(watch.lost_holds(), 0);
    }
}
