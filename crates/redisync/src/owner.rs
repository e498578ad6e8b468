//! Who an acquisition belongs to, and so who may re-enter it: the owner.
//!
//! An owner id is `"<client uuid>:<owner tag>"`. The tag is the innermost
//! [`Owner::scope`] around the running code, else the tokio task id, else
//! (outside a task) the OS thread. A task-local scope is how several flows
//! of one task (`join!`, `for_each_concurrent`) become owners of their own.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

tokio::task_local! {
    /// The owner set by the innermost [`Owner::scope`] around this code.
    static SCOPE: Owner;
}

/// Owner scopes, unique within the process.
static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// Acquisitions of non-reentrant handles, unique within the process.
static NEXT_ACQUISITION: AtomicU64 = AtomicU64::new(1);

/// OS threads that acquire outside a tokio task.
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_TAG: Arc<str> =
        Arc::from(format!("thread-{}", NEXT_THREAD.fetch_add(1, Ordering::Relaxed)));
}

/// The owner of re-entrant acquisitions: a lock held by an owner is taken
/// again by the same owner at once (one more hold, the same fencing token),
/// and by every other owner only after it is released.
///
/// By default the owner is the tokio task (Redisson's owner is the thread).
/// One task often runs several flows at once (`join!`, `select!`,
/// `FuturesUnordered`, `for_each_concurrent`): they are one owner, so they
/// would share each other's critical sections. Run each flow in a scope of
/// its own ([`Owner::new`] + [`Owner::scope`]) and they exclude each other,
/// while nested calls inside one flow still re-enter. The other way round, a
/// spawned child task is a new owner; hand it the parent's
/// ([`Owner::current`] + [`Owner::scope`]) for it to re-enter the parent's
/// holds. For no re-entry at all, use a primitive's `non_reentrant()` handle.
///
/// A guard stays its owner's wherever it goes: moved into another task, it
/// is still re-entered, at once and with the same token, by the task that
/// took it, whose next acquisition of the same name then shares the
/// critical section with the moved guard. Before moving a guard away, call
/// [`LockGuard::hand_off`](crate::LockGuard::hand_off) (or
/// [`FairLockGuard::hand_off`](crate::FairLockGuard::hand_off)): it rebinds
/// the hold to an owner id of its own, and the task then waits for it like
/// any other owner.
///
/// ```no_run
/// use futures::StreamExt;
/// use redisync::Owner;
///
/// # async fn handle(_: u64) {}
/// # async fn demo(client: redisync::Client, orders: Vec<u64>) {
/// futures::stream::iter(orders)
///     .for_each_concurrent(8, |order| {
///         let lock = client.lock(&format!("orders:{order}"));
///         // Each message its own owner: two messages of one order never
///         // run at once, although they run in one task.
///         Owner::new().scope(async move {
///             if let Ok(guard) = lock.lock().await {
///                 handle(guard.fencing_token()).await;
///                 let _ = guard.unlock().await;
///             }
///         })
///     })
///     .await;
/// # }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    tag: Arc<str>,
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Owner").field(&self.tag).finish()
    }
}

impl Default for Owner {
    fn default() -> Owner {
        Owner::new()
    }
}

impl Owner {
    /// A new owner, distinct from every other in the process (run code as
    /// this owner with [`Owner::scope`]).
    pub fn new() -> Owner {
        Owner {
            tag: Arc::from(format!(
                "scope-{}",
                NEXT_SCOPE.fetch_add(1, Ordering::Relaxed)
            )),
        }
    }

    /// The owner of the code running now: the innermost [`Owner::scope`],
    /// else the tokio task, else (outside a task, e.g. in `block_on`) the OS
    /// thread.
    ///
    /// Task ids are unique among running tasks and come from a counter tokio
    /// never reuses, so a task's owner id is unique for the life of the
    /// process; two `block_on` calls on one thread are one owner.
    pub fn current() -> Owner {
        SCOPE.try_with(Clone::clone).unwrap_or_else(|_| Owner {
            tag: match tokio::task::try_id() {
                Some(id) => Arc::from(id.to_string()),
                None => THREAD_TAG.with(Clone::clone),
            },
        })
    }

    /// Runs `future` as this owner: its acquisitions, and those of every
    /// future it awaits, belong to this owner (not to the task), until a
    /// nested scope says otherwise. Tasks it spawns are not in the scope.
    pub fn scope<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        SCOPE.scope(self, future)
    }

    /// The part of this owner's ids after the client uuid: a task id,
    /// `scope-<n>` or `thread-<n>`.
    pub fn tag(&self) -> &str {
        &self.tag
    }
}

/// An owner id for one acquisition of a non-reentrant handle of the client
/// `client_id`: `"<client_id>:<current owner's tag>/<n>"`, `n` unique within
/// the process, so it re-enters nothing. Written into one string: every
/// Redlock attempt asks for one per node.
pub(crate) fn acquisition_owner_id(client_id: &str) -> Arc<str> {
    use std::fmt::Write;
    let mut id = String::with_capacity(client_id.len() + 32);
    id.push_str(client_id);
    id.push(':');
    // Owner::current()'s tag, without building an Owner.
    if SCOPE.try_with(|o| id.push_str(&o.tag)).is_err() {
        match tokio::task::try_id() {
            Some(task) => {
                let _ = write!(id, "{task}");
            }
            None => THREAD_TAG.with(|t| id.push_str(t)),
        }
    }
    let _ = write!(id, "/{}", NEXT_ACQUISITION.fetch_add(1, Ordering::Relaxed));
    Arc::from(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_fallback_is_stable_per_thread() {
        let a = Owner::current();
        assert_eq!(a, Owner::current());
        let b = std::thread::spawn(Owner::current).join().unwrap();
        assert_ne!(a, b);
        assert!(a.tag().starts_with("thread-"));
    }

    #[tokio::test]
    async fn scopes_nest_and_end() {
        let task = Owner::current();
        let outer = Owner::new();
        let inner = Owner::new();
        assert_ne!(outer, inner);
        let (o, i) = (outer.clone(), inner.clone());
        let o_tag = outer.tag().to_owned();
        outer
            .clone()
            .scope(async move {
                assert_eq!(Owner::current(), o);
                inner.scope(async { assert_eq!(Owner::current(), i) }).await;
                assert_eq!(Owner::current(), o);
            })
            .await;
        assert_eq!(Owner::current(), task);
        let ids = outer
            .scope(async { [acquisition_owner_id("c"), acquisition_owner_id("c")] })
            .await;
        assert_ne!(ids[0], ids[1]);
        for id in ids {
            let tag = id.strip_prefix("c:").and_then(|r| r.rsplit_once('/'));
            assert_eq!(tag.map(|(t, _)| t), Some(o_tag.as_str()), "{id}");
        }
    }

    /// One acquisition's owner id is the current owner's id plus a number,
    /// in a task, in a scope and outside any task.
    #[test]
    fn acquisition_ids_extend_the_owner_id() {
        let outside = acquisition_owner_id("c");
        assert!(
            outside.starts_with(&format!("c:{}/", Owner::current().tag())),
            "{outside}"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (task, id) = rt
            .block_on(async {
                tokio::spawn(async { (Owner::current(), acquisition_owner_id("c")) }).await
            })
            .unwrap();
        assert!(id.starts_with(&format!("c:{}/", task.tag())), "{id}");
        assert!(!task.tag().starts_with("thread-"));
    }
}
