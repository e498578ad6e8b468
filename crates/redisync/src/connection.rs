//! The client's connection state, for code that must know when its holds
//! may be lost (Curator's `ConnectionStateListener`, etcd's session
//! `Done()`): see [`Client::connection_state`](crate::Client::connection_state).

use tokio::sync::watch;

use crate::link::LinkChange;

/// The state of a [`Client`](crate::Client)'s command connection, as a
/// [`ConnectionWatch`] tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionState {
    /// Connected since the client connected; no loss seen yet.
    Connected,
    /// The connection was lost and the client is reconnecting: renewals
    /// fail meanwhile, so a hold whose lease runs out before the connection
    /// is back is lost (another client may take the lock). Pause work that
    /// relies on a hold.
    Suspended,
    /// The connection is back after a [`Suspended`](ConnectionState::Suspended)
    /// spell. The watchdog renews every hold at once: those it finds gone
    /// (or whose lease ran out meanwhile) are reported lost by their guards
    /// and counted in [`ConnectionWatch::lost_holds`].
    Reconnected,
    /// [`Client::shutdown`](crate::Client::shutdown) ran (or every handle
    /// of the client was dropped): nothing changes any more.
    Shutdown,
}

/// What a watch sees: the state and the holds known lost so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    state: ConnectionState,
    lost_holds: u64,
}

/// The sending side, one per client.
#[derive(Debug)]
pub(crate) struct ConnectionSignal(watch::Sender<Seen>);

impl ConnectionSignal {
    pub(crate) fn new() -> ConnectionSignal {
        ConnectionSignal(watch::Sender::new(Seen {
            state: ConnectionState::Connected,
            lost_holds: 0,
        }))
    }

    /// The command connection was lost or is back.
    pub(crate) fn change(&self, change: LinkChange) {
        let to = match change {
            LinkChange::Lost => ConnectionState::Suspended,
            LinkChange::Back => ConnectionState::Reconnected,
        };
        self.0.send_if_modified(|seen| {
            let changed = seen.state != ConnectionState::Shutdown && seen.state != to;
            if changed {
                seen.state = to;
            }
            changed
        });
    }

    /// A hold was found lost while a guard of it was alive (not counted
    /// after the shutdown began: it gives every hold up).
    pub(crate) fn hold_lost(&self) {
        self.0.send_if_modified(|seen| {
            let counted = seen.state != ConnectionState::Shutdown;
            if counted {
                seen.lost_holds += 1;
            }
            counted
        });
    }

    /// The client shuts down.
    pub(crate) fn shut_down(&self) {
        self.0.send_if_modified(|seen| {
            let changed = seen.state != ConnectionState::Shutdown;
            seen.state = ConnectionState::Shutdown;
            changed
        });
    }

    pub(crate) fn watch(&self) -> ConnectionWatch {
        ConnectionWatch {
            rx: self.0.subscribe(),
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

    /// How many holds of the client were found lost while a guard of them
    /// was alive, since it connected: by the watchdog (gone from Redis, or
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
