//! Who re-enters: the three re-entry modes (per task, per `Owner` scope, a
//! non-reentrant handle), each with sibling flows of one task (`join!`,
//! `for_each_concurrent`) and a spawned child task, for every re-entrant
//! primitive, against a real redis-server.

use crate::common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::Env;
use futures::StreamExt;
use redisync::{Client, FairLockGuard, LockGuard, Owner, RwLockGuard};
use tokio::sync::Notify;

/// Bound on every wait for an event; only reached when the code is wrong.
const EVENT_LIMIT: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Lock,
    Fair,
    Write,
}

const KINDS: [Kind; 3] = [Kind::Lock, Kind::Fair, Kind::Write];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Ordinary handles, no scope: the task is the owner.
    PerTask,
    /// Ordinary handles, each flow in an `Owner::new()` scope.
    Scoped,
    /// `non_reentrant()` handles: every acquisition is its own owner.
    NonReentrant,
}

#[derive(Debug)]
enum AnyGuard {
    Lock(LockGuard),
    Fair(FairLockGuard),
    Rw(RwLockGuard),
}

impl AnyGuard {
    fn token(&self) -> u64 {
        match self {
            AnyGuard::Lock(g) => g.fencing_token(),
            AnyGuard::Fair(g) => g.fencing_token(),
            AnyGuard::Rw(g) => g.fencing_token(),
        }
    }

    /// Boxed, as [`acquire`].
    async fn unlock(self) {
        let unlock: futures::future::BoxFuture<'_, redisync::Result<()>> = match self {
            AnyGuard::Lock(g) => Box::pin(g.unlock()),
            AnyGuard::Fair(g) => Box::pin(g.unlock()),
            AnyGuard::Rw(g) => Box::pin(g.unlock()),
        };
        unlock.await.expect("unlock");
    }
}

/// `try_lock(wait, None)` (`wait: None`: `lock()`) on the handle `mode` uses
/// (boxed: three kinds of acquisition futures in one are large).
async fn acquire(
    client: &Client,
    kind: Kind,
    mode: Mode,
    name: &str,
    wait: Option<Duration>,
) -> Option<AnyGuard> {
    Box::pin(acquire_unboxed(client, kind, mode, name, wait)).await
}

async fn acquire_unboxed(
    client: &Client,
    kind: Kind,
    mode: Mode,
    name: &str,
    wait: Option<Duration>,
) -> Option<AnyGuard> {
    let nr = mode == Mode::NonReentrant;
    macro_rules! take {
        ($h:expr, $wrap:path) => {{
            let h = $h;
            assert_eq!(h.is_reentrant(), !nr);
            match wait {
                None => Some(h.lock().await.map($wrap)),
                Some(w) => h.try_lock(w, None).await.map(|g| g.map($wrap)).transpose(),
            }
        }};
    }
    let got = match kind {
        Kind::Lock => {
            let l = client.lock(name);
            take!(if nr { l.non_reentrant() } else { l }, AnyGuard::Lock)
        }
        Kind::Fair => {
            let l = client.fair_lock(name);
            take!(if nr { l.non_reentrant() } else { l }, AnyGuard::Fair)
        }
        Kind::Write => {
            let l = client.rw_lock(name);
            let l = if nr { l.non_reentrant() } else { l };
            assert_eq!(l.is_reentrant(), !nr);
            let w = l.write();
            match wait {
                None => Some(w.lock().await.map(AnyGuard::Rw)),
                Some(d) => w
                    .try_lock(d, None)
                    .await
                    .map(|g| g.map(AnyGuard::Rw))
                    .transpose(),
            }
        }
    };
    got.transpose().expect("acquire")
}

/// Runs one flow the way `mode` wants it: in a scope of its own for
/// [`Mode::Scoped`].
async fn flow<F: std::future::Future>(mode: Mode, f: F) -> F::Output {
    if mode == Mode::Scoped {
        Owner::new().scope(f).await
    } else {
        f.await
    }
}

async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(EVENT_LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no progress within {EVENT_LIMIT:?}"))
}

/// Two flows of one task under `join!`: the first holds; the second asks
/// while it does. Per task they share the hold (same token); otherwise the
/// second is refused at once, waits, and gets it after the first releases.
async fn join_flows(mode: Mode) {
    let env = Env::start().await;
    let client = env.client().await;
    for kind in KINDS {
        let name = format!("join-{kind:?}");
        let held = Notify::new();
        let asked = Notify::new();
        let first_token = std::sync::atomic::AtomicU64::new(0);
        let a = flow(mode, async {
            let g = acquire(&client, kind, mode, &name, None).await.unwrap();
            first_token.store(g.token(), Ordering::SeqCst);
            held.notify_one();
            within("second flow asks", asked.notified()).await;
            g.unlock().await;
        });
        let b = flow(mode, async {
            within("first flow holds", held.notified()).await;
            let now = acquire(&client, kind, mode, &name, Some(Duration::ZERO)).await;
            let first = first_token.load(Ordering::SeqCst);
            if mode == Mode::PerTask {
                let g = now.expect("per task, a sibling flow re-enters");
                assert_eq!(g.token(), first, "{kind:?}: a re-entry shares the token");
                asked.notify_one();
                g.unlock().await;
            } else {
                assert!(
                    now.is_none(),
                    "{kind:?} {mode:?}: a sibling flow got a held lock"
                );
                asked.notify_one();
                let g = within("second flow", acquire(&client, kind, mode, &name, None))
                    .await
                    .unwrap();
                assert!(
                    g.token() > first,
                    "{kind:?}: a new acquisition, a new token"
                );
                g.unlock().await;
            }
        });
        within("both flows", async { tokio::join!(a, b) }).await;
    }
    client.shutdown().await.unwrap();
}

/// Four duplicate messages of one entity handled by `for_each_concurrent`
/// in one task, each holding the entity's lock while it waits for the
/// others to come in. Per task all four are inside at once with one token
/// (the hazard docs/api.md warns about); scoped or non-reentrant, never two.
async fn concurrent_messages(mode: Mode) {
    let env = Env::start().await;
    let client = env.client().await;
    for kind in KINDS {
        let name = format!("messages-{kind:?}");
        let inside = AtomicU32::new(0);
        let peak = AtomicU32::new(0);
        let entered = AtomicU32::new(0);
        let all_in = Notify::new();
        let first_in = Notify::new();
        let tokens = std::sync::Mutex::new(Vec::new());
        let (client, name, inside, peak) = (&client, &name, &inside, &peak);
        let (entered, all_in, first_in, tokens_ref) = (&entered, &all_in, &first_in, &tokens);
        futures::stream::iter(0..4)
            .for_each_concurrent(4, |i| {
                flow(mode, async move {
                    let tokens = tokens_ref;
                    if i > 0 {
                        // Messages come in while the first is handled (two
                        // asking at the same instant would queue locally).
                        let wait = first_in.notified();
                        if tokens.lock().unwrap().is_empty() {
                            within("first message inside", wait).await;
                        }
                    }
                    let g = acquire(client, kind, mode, name, None).await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokens.lock().unwrap().push(g.token());
                    first_in.notify_waiters();
                    if mode == Mode::PerTask {
                        // Stay inside until every message is: they all get in.
                        if entered.fetch_add(1, Ordering::SeqCst) + 1 == 4 {
                            all_in.notify_waiters();
                        } else {
                            let wait = all_in.notified();
                            if entered.load(Ordering::SeqCst) < 4 {
                                within("all four inside", wait).await;
                            }
                        }
                    } else {
                        // Give a sibling every chance to get in meanwhile.
                        for _ in 0..20 {
                            tokio::task::yield_now().await;
                        }
                    }
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await;
                })
            })
            .await;
        let tokens = tokens.into_inner().unwrap();
        assert_eq!(tokens.len(), 4);
        if mode == Mode::PerTask {
            assert_eq!(peak.load(Ordering::SeqCst), 4, "{kind:?}");
            assert!(
                tokens.iter().all(|t| *t == tokens[0]),
                "{kind:?}: {tokens:?}"
            );
        } else {
            assert_eq!(
                peak.load(Ordering::SeqCst),
                1,
                "{kind:?} {mode:?}: two messages inside"
            );
            assert!(
                tokens.windows(2).all(|w| w[0] < w[1]),
                "{kind:?}: {tokens:?}"
            );
        }
    }
    client.shutdown().await.unwrap();
}

/// A child task spawned while the parent (task or scope) holds the lock:
/// on its own it is another owner and is refused; handed the parent's owner
/// (`Owner::current()`) it re-enters, unless the handle is non-reentrant.
async fn spawned_child(mode: Mode) {
    let env = Env::start().await;
    let client = env.client().await;
    for kind in KINDS {
        let name = format!("child-{kind:?}");
        flow(mode, async {
            let g = acquire(&client, kind, mode, &name, None).await.unwrap();
            let token = g.token();
            let (c, n) = (client.clone(), name.clone());
            let alone = tokio::spawn(async move {
                acquire(&c, kind, mode, &n, Some(Duration::ZERO))
                    .await
                    .map(|g| g.token())
            });
            assert_eq!(
                within("child", alone).await.unwrap(),
                None,
                "{kind:?} {mode:?}: a child task is another owner"
            );
            let (c, n) = (client.clone(), name.clone());
            let handed = tokio::spawn(Owner::current().scope(async move {
                let got = acquire(&c, kind, mode, &n, Some(Duration::ZERO)).await;
                let token = got.as_ref().map(AnyGuard::token);
                if let Some(g) = got {
                    g.unlock().await;
                }
                token
            }));
            let handed = within("child with the parent's owner", handed)
                .await
                .unwrap();
            if mode == Mode::NonReentrant {
                assert_eq!(handed, None, "{kind:?}: a non-reentrant handle re-entered");
            } else {
                assert_eq!(
                    handed,
                    Some(token),
                    "{kind:?} {mode:?}: the handed owner re-enters"
                );
            }
            // The parent still holds after the child's release.
            let (c, n) = (client.clone(), name.clone());
            let probe = tokio::spawn(async move {
                acquire(&c, kind, Mode::PerTask, &n, Some(Duration::ZERO))
                    .await
                    .is_some()
            });
            assert!(
                !within("probe", probe).await.unwrap(),
                "{kind:?}: still held"
            );
            // A child waiting on its own gets it once the parent lets go.
            let (c, n) = (client.clone(), name.clone());
            let waiter = tokio::spawn(async move {
                let g = acquire(&c, kind, mode, &n, None).await.unwrap();
                let t = g.token();
                g.unlock().await;
                t
            });
            g.unlock().await;
            assert!(within("waiting child", waiter).await.unwrap() > token);
        })
        .await;
    }
    client.shutdown().await.unwrap();
}

/// Nested calls inside one scope re-enter (the scope is their owner), and a
/// scope's hold is not the task's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_in_a_scope_reenter() {
    let env = Env::start().await;
    let client = env.client().await;
    let lock = client.lock("nested");
    let l = lock.clone();
    Owner::new()
        .scope(async move {
            let outer = l.lock().await.unwrap();
            let inner = l.try_lock(Duration::ZERO, None).await.unwrap().unwrap();
            assert_eq!(inner.fencing_token(), outer.fencing_token());
            assert_eq!(l.hold_count().await.unwrap(), 2);
            assert!(l.is_held_by_current_task().await.unwrap());
            inner.unlock().await.unwrap();
            outer.unlock().await.unwrap();
        })
        .await;
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    assert!(!lock.is_locked().await.unwrap());
    client.shutdown().await.unwrap();
}

macro_rules! matrix {
    ($($test:ident: $scenario:ident($mode:ident),)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                $scenario(Mode::$mode).await;
            }
        )*
    };
}

matrix! {
    per_task_join_shares_the_hold: join_flows(PerTask),
    scoped_join_excludes: join_flows(Scoped),
    non_reentrant_join_excludes: join_flows(NonReentrant),
    per_task_for_each_concurrent_shares_the_hold: concurrent_messages(PerTask),
    scoped_for_each_concurrent_excludes: concurrent_messages(Scoped),
    non_reentrant_for_each_concurrent_excludes: concurrent_messages(NonReentrant),
    per_task_spawned_child_is_another_owner: spawned_child(PerTask),
    scoped_spawned_child_is_another_owner: spawned_child(Scoped),
    non_reentrant_spawned_child_never_reenters: spawned_child(NonReentrant),
}

/// Under a non-reentrant handle a writer does not downgrade: its own read
/// waits like any other (and gets it once the write side is released).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_reentrant_writer_does_not_downgrade() {
    let env = Env::start().await;
    let client = env.client().await;
    let rw = client.rw_lock("no-downgrade").non_reentrant();
    let w = rw.write().lock().await.unwrap();
    assert!(rw
        .read()
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .is_none());
    let r = rw.read();
    let reader = tokio::spawn(async move { r.lock().await.unwrap().unlock().await.unwrap() });
    w.unlock().await.unwrap();
    within("reader after the writer", reader).await.unwrap();
    // The ordinary handle still downgrades.
    let rw = client.rw_lock("no-downgrade");
    let w = rw.write().lock().await.unwrap();
    let r = rw
        .read()
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .unwrap();
    r.unlock().await.unwrap();
    w.unlock().await.unwrap();
    client.shutdown().await.unwrap();
}
