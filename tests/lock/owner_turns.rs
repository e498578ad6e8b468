//! Flows of one owner on a `FairLock` or an `RwLock` side (turns of one
//! owner, see the engine's `OwnerLines`): never two holders under stress
//! (re-entries, cancellations, hand-offs, a rival client), and a flow waiting
//! for its turn behind a hold whose lease ran out gets in within about a
//! lease. Found by an adversarial review against real Redis.
#![allow(clippy::pedantic)] // a stress harness, kept as the review wrote it

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::Duration;

use common::Env;
use fred::interfaces::ClientLike;

use tokio::time::{sleep, timeout, Instant};

const LEASE: Duration = Duration::from_millis(500);

/// Two flows of one owner (`join!`): the first wins a hold with a fixed
/// short lease (no watchdog) and keeps its guard (the work overran the
/// lease); the second waits for the owner's turn. Once the first hold's
/// lease ran out it is lost (Redis frees the name: another client takes it
/// at once), so the second flow's wait must end within about a lease, not
/// last as long as the first flow keeps its (lost) guard.
async fn owner_turn_wait_ends_with_the_lease(kind: &str) {
    let env = Env::start().await;
    let a = env.client().await;
    let other = env.client().await;
    let name = "turn-lease";
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let first = async {
        let g: Box<dyn Fn() -> bool + Send + Sync> = match kind {
            "fair" => {
                let g = a.fair_lock(name).lock_with_lease(LEASE).await.unwrap();
                Box::new(move || g.is_lost())
            }
            "read" => {
                let g = a.rw_lock(name).read().lock_with_lease(LEASE).await.unwrap();
                Box::new(move || g.is_lost())
            }
            "write" => {
                let g = a
                    .rw_lock(name)
                    .write()
                    .lock_with_lease(LEASE)
                    .await
                    .unwrap();
                Box::new(move || g.is_lost())
            }
            _ => unreachable!(),
        };
        // Keep the (soon lost) guard until the second flow got in, 8 s at most.
        let until = Instant::now() + Duration::from_secs(8);
        while !done.load(SeqCst) && Instant::now() < until {
            sleep(Duration::from_millis(20)).await;
        }
        g()
    };
    let second = async {
        // Both flows asked (the first's attempt waits in the paused server):
        // the first is granted now, and this one waits for its turn.
        env.server.resume();
        let got = match kind {
            "fair" => a.fair_lock(name).lock_with_lease(LEASE).await.map(|_| ()),
            "read" => a
                .rw_lock(name)
                .read()
                .lock_with_lease(LEASE)
                .await
                .map(|_| ()),
            "write" => a
                .rw_lock(name)
                .write()
                .lock_with_lease(LEASE)
                .await
                .map(|_| ()),
            _ => unreachable!(),
        };
        got.unwrap();
        done.store(true, SeqCst);
        start.elapsed()
    };
    let probe = async {
        // Redis frees the name once the lease ran out: another client gets it.
        sleep(LEASE * 2).await;
        let free = match kind {
            "fair" => other
                .fair_lock(name)
                .try_lock(Duration::from_secs(5), Some(Duration::from_millis(50)))
                .await
                .unwrap()
                .is_some(),
            _ => other
                .rw_lock(name)
                .write()
                .try_lock(Duration::from_secs(5), Some(Duration::from_millis(50)))
                .await
                .unwrap()
                .is_some(),
        };
        free
    };
    // Paused until the second flow asked: a grant that came back before
    // would make its ask a re-entry (the owner holds already).
    env.server.pause();
    let (first_lost, waited, free) = tokio::join!(first, second, probe);
    assert!(
        free,
        "{kind}: another client could not take the name after the lease"
    );
    assert!(first_lost, "{kind}: the first guard still says held");
    assert!(
        waited < Duration::from_secs(4),
        "{kind}: the second flow of the owner waited {waited:?} for the turn of a hold whose {LEASE:?} lease ran out long before (Redis gave the name to another client meanwhile)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_turn_wait_ends_with_the_lease_fair() {
    owner_turn_wait_ends_with_the_lease("fair").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_turn_wait_ends_with_the_lease_read() {
    owner_turn_wait_ends_with_the_lease("read").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_turn_wait_ends_with_the_lease_write() {
    owner_turn_wait_ends_with_the_lease("write").await;
}

/// Registry of live guards: (id, token, lost signal, owner-scoped).
type Registry = std::sync::Arc<std::sync::Mutex<Vec<(u64, u64, redisync::LostSignal, String)>>>;

fn enter(
    reg: &Registry,
    id: u64,
    token: u64,
    sig: redisync::LostSignal,
    what: &str,
) -> Option<String> {
    let mut r = reg.lock().unwrap();
    for (oid, ot, os, ow) in r.iter() {
        if *ot != token && !os.is_lost() && !sig.is_lost() {
            return Some(format!("two guards say held with different tokens: {ot} (guard {oid}, {ow}, registered first) and {token} (guard {id}, {what})"));
        }
    }
    r.push((id, token, sig, what.to_owned()));
    None
}

fn leave(reg: &Registry, id: u64) {
    reg.lock().unwrap().retain(|(i, _, _, _)| *i != id);
}

/// Many flows of one owner (spawned tasks in one `Owner` scope, on two
/// worker threads) lock, cancel mid-flight, re-enter, hand off; another
/// client competes. Never two guards that say held with different tokens
/// (fair, write: any owner; read: one owner's reads).
async fn flows_of_one_owner_stress(
    kind: &'static str,
    default_ops: &'static [u64],
    default_rival: bool,
    default_iters: u32,
) {
    let env = Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let owner = redisync::Owner::new();
    let reg: Registry = Default::default();
    let ids = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1));
    let name = "stress";
    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let (a, reg, ids, owner) = (a.clone(), reg.clone(), ids.clone(), owner.clone());
        tasks.push(tokio::spawn(owner.scope(async move {
            let seed: u64 = std::env::var("SEED")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            let mut rng = common::xorshift(0x9e37_79b9 + t * 7919 + seed * 104_729);
            for _ in 0..std::env::var("ITERS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default_iters)
            {
                let ops: Vec<u64> = std::env::var("OPS")
                    .ok()
                    .map(|v| v.split(',').map(|x| x.parse().unwrap()).collect())
                    .unwrap_or_else(|| default_ops.to_vec());
                let op = ops[(rng() % ops.len() as u64) as usize];
                let id = ids.fetch_add(1, SeqCst);
                match kind {
                    "fair" => {
                        let lock = a.fair_lock(name);
                        let got = match op {
                            0 | 1 => Some(lock.lock().await.unwrap()),
                            2 => {
                                let ms = rng() % 4;
                                timeout(Duration::from_millis(ms), lock.lock())
                                    .await
                                    .ok()
                                    .map(Result::unwrap)
                            }
                            3 => lock.try_lock(Duration::ZERO, None).await.unwrap(),
                            _ => lock
                                .try_lock(Duration::from_millis(rng() % 20), None)
                                .await
                                .unwrap(),
                        };
                        let Some(mut g) = got else { continue };
                        if let Some(v) = enter(
                            &reg,
                            id,
                            g.fencing_token(),
                            g.lost_signal(),
                            &format!("{kind} op {op} task {t}"),
                        ) {
                            let seen = a.fair_lock(name).inspect().await.unwrap();
                            panic!("{v}; both still say held; Redis has: {:?}", seen.holders);
                        }
                        if op == 1 && g.hand_off().await.is_ok() {
                            // Handed off: it lives on a while, as another owner's.
                            let reg = reg.clone();
                            tokio::spawn(async move {
                                sleep(Duration::from_millis(3)).await;
                                leave(&reg, id);
                                let _ = g.unlock().await;
                            });
                            continue;
                        }
                        tokio::task::yield_now().await;
                        leave(&reg, id);
                        let _ = g.unlock().await;
                    }
                    _ => {
                        let rw = a.rw_lock(name);
                        macro_rules! get {
                            ($side:expr) => {{
                                let side = $side;
                                match op {
                                    0 | 1 => Some(side.lock().await.unwrap()),
                                    2 => {
                                        let ms = rng() % 4;
                                        timeout(Duration::from_millis(ms), side.lock())
                                            .await
                                            .ok()
                                            .map(Result::unwrap)
                                    }
                                    3 => side.try_lock(Duration::ZERO, None).await.unwrap(),
                                    _ => side
                                        .try_lock(Duration::from_millis(rng() % 20), None)
                                        .await
                                        .unwrap(),
                                }
                            }};
                        }
                        let got = if kind == "read" {
                            get!(rw.read())
                        } else {
                            get!(rw.write())
                        };
                        let Some(g) = got else { continue };
                        if let Some(v) = enter(
                            &reg,
                            id,
                            g.fencing_token(),
                            g.lost_signal(),
                            &format!("{kind} op {op} task {t}"),
                        ) {
                            let seen = a.rw_lock(name).inspect().await.unwrap();
                            panic!("{v}; both still say held; Redis has: {:?}", seen.holders);
                        }
                        tokio::task::yield_now().await;
                        leave(&reg, id);
                        let _ = g.unlock().await;
                    }
                }
            }
        })));
    }
    // Another client competes (writer for rw, so the owner's flows queue).
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let rival = {
        let (b, stop, reg, ids) = (b.clone(), stop.clone(), reg.clone(), ids.clone());
        tokio::spawn(async move {
            while !stop.load(SeqCst) && std::env::var("RIVAL").map_or(default_rival, |v| v != "0") {
                let id = ids.fetch_add(1, SeqCst);
                if kind == "fair" {
                    if let Some(g) = b
                        .fair_lock(name)
                        .try_lock(Duration::from_millis(30), None)
                        .await
                        .unwrap()
                    {
                        assert!(
                            enter(&reg, id, g.fencing_token(), g.lost_signal(), "fair rival")
                                .is_none(),
                            "two holders (rival)"
                        );
                        sleep(Duration::from_millis(2)).await;
                        leave(&reg, id);
                        let _ = g.unlock().await;
                    }
                } else if let Some(g) = b
                    .rw_lock(name)
                    .write()
                    .try_lock(Duration::from_millis(30), None)
                    .await
                    .unwrap()
                {
                    sleep(Duration::from_millis(2)).await;
                    drop(g);
                }
                sleep(Duration::from_millis(5)).await;
            }
        })
    };
    for t in tasks {
        timeout(Duration::from_secs(120), t)
            .await
            .expect("a flow hung")
            .unwrap();
    }
    stop.store(true, SeqCst);
    rival.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_of_one_owner_stress_fair() {
    flows_of_one_owner_stress("fair", &[0, 1, 2, 3, 4, 5], true, 500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_of_one_owner_stress_read() {
    flows_of_one_owner_stress("read", &[0, 1, 2, 3, 4, 5], true, 500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_of_one_owner_stress_write() {
    flows_of_one_owner_stress("write", &[0, 1, 2, 3, 4, 5], true, 500).await;
}

/// The smallest form: flows of one owner only `lock()` then `unlock()`
/// (no cancellation, no hand-off, no other client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_lock_unlock_flows_of_one_owner_never_two_holders_write() {
    flows_of_one_owner_stress("write", &[0], false, 2000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_lock_unlock_flows_of_one_owner_never_two_holders_read() {
    flows_of_one_owner_stress("read", &[0], false, 2000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_lock_unlock_flows_of_one_owner_never_two_holders_fair() {
    flows_of_one_owner_stress("fair", &[0], false, 2000).await;
}

/// How long the two-sided flows below wait, and their leases.
const SIDES_WAIT: Duration = Duration::from_secs(10);
const SIDES_LEASE: Duration = Duration::from_secs(30);

/// Two flows of one owner (`tokio::join!` in one task) ask for the write
/// side and the read side of one `RwLock` at the same instant (optionally
/// both queued behind another client's write). docs/api.md, "Who re-enters":
/// "Two flows of one owner that ask at the same instant, or wait together,
/// do not re-enter: the second waits in this client until the first's
/// hold ends (for every kind)". A write hold of one flow and a read hold
/// of its sibling at once are two flows inside the lock together.
async fn rw_sides_of_two_flows(queued: bool, write_first: bool) -> (u32, Vec<String>) {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let name = "rw-two-sides";
    let blocker = if queued {
        Some(b.rw_lock(name).write().lock().await.expect("blocker"))
    } else {
        None
    };
    let (inside, peak, asked) = (AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0));
    // Flows whose acquisition has ended (granted, refused or failed).
    let resolved = AtomicU32::new(0);
    let errors = Mutex::new(Vec::new());
    let flow = |write: bool| {
        let (inside, peak, asked, errors, a, admin, resolved) =
            (&inside, &peak, &asked, &errors, &a, &env.admin, &resolved);
        async move {
            asked.fetch_add(1, SeqCst);
            let rw = a.rw_lock(name);
            let got = if write {
                rw.write().try_lock(SIDES_WAIT, Some(SIDES_LEASE)).await
            } else {
                rw.read().try_lock(SIDES_WAIT, Some(SIDES_LEASE)).await
            };
            resolved.fetch_add(1, SeqCst);
            let g = match got {
                Ok(Some(g)) => g,
                Ok(None) => {
                    errors
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(format!("write={write}: timed out"));
                    return;
                }
                Err(e) => {
                    errors
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(format!("write={write}: {e}"));
                    return;
                }
            };
            peak.fetch_max(inside.fetch_add(1, SeqCst) + 1, SeqCst);
            // Inside until the sibling's acquisition ended too, or 2 s (it
            // should wait for this hold to end, docs/api.md "Who re-enters").
            common::eventually(Duration::from_secs(2), || async {
                resolved.load(SeqCst) == 2
            })
            .await;
            admin.ping::<()>(None).await.expect("PING");
            peak.fetch_max(inside.load(SeqCst), SeqCst);
            inside.fetch_sub(1, SeqCst);
            let _ = g.unlock().await;
        }
    };
    // Not queued: the server is paused until both flows asked, so neither
    // is granted before the other asked (a grant that comes first makes
    // the second ask a re-entry: a downgrade, or a refused upgrade).
    if !queued {
        env.server.pause();
    }
    let release = async {
        assert!(common::eventually(SIDES_WAIT, || async { asked.load(SeqCst) == 2 }).await);
        if let Some(g) = blocker {
            for _ in 0..2 {
                env.admin.ping::<()>(None).await.expect("PING");
            }
            g.unlock().await.expect("blocker unlock");
        } else {
            env.server.resume();
        }
    };
    if write_first {
        tokio::join!(flow(true), flow(false), release);
    } else {
        tokio::join!(flow(false), flow(true), release);
    }
    let errs = errors
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    (peak.load(SeqCst), errs)
}

async fn check_rw_sides(queued: bool, write_first: bool) {
    let (peak, errs) = rw_sides_of_two_flows(queued, write_first).await;
    assert_eq!(
        peak, 1,
        "two flows of one owner (join!, asked together; queued behind another client: {queued}; write asked first: {write_first}) held the write and the read side at once (errors: {errs:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_write_and_read_flows_of_one_owner_asking_together_never_both_hold() {
    check_rw_sides(false, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_write_and_read_flows_of_one_owner_waiting_together_never_both_hold() {
    check_rw_sides(true, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_read_and_write_flows_of_one_owner_waiting_together_never_both_hold() {
    check_rw_sides(true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_read_then_write_flows_of_one_owner_asking_together_neither_errs_nor_both_hold() {
    let (peak, errs) = rw_sides_of_two_flows(false, false).await;
    assert!(
        peak == 1 && errs.is_empty(),
        "read flow then write flow of one owner asked together: peak {peak}, errors {errs:?} (README: the second waits until the first's hold ends)"
    );
}

/// A flow that holds the write side downgrades (takes the read side), then
/// releases the write side and reads on; a sibling flow of the same owner
/// that asked for the write side together with it waits until the first
/// flow's holds have all ended, rather than getting `UpgradeNotSupported`
/// for a read it never took (docs/api.md "Who re-enters": the second waits
/// until the first's hold ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sibling_waits_while_a_downgraded_flow_reads_on() {
    let env = Env::start().await;
    let a = env.client().await;
    let rw = a.rw_lock("downgrade-sibling");
    let reading = AtomicBool::new(true);
    // Paused until both flows asked (see `rw_sides_of_two_flows`).
    env.server.pause();
    let first = async {
        let w = rw.write().try_lock(SIDES_WAIT, Some(SIDES_LEASE)).await;
        let w = w.expect("write").expect("granted");
        let r = rw.read().try_lock(SIDES_WAIT, Some(SIDES_LEASE)).await;
        let r = r.expect("downgrade").expect("granted");
        w.unlock().await.expect("unlock the write side");
        // Reading on, then done.
        env.admin.ping::<()>(None).await.expect("PING");
        sleep(Duration::from_millis(300)).await;
        reading.store(false, SeqCst);
        r.unlock().await.expect("unlock the read side");
    };
    let second = async {
        env.server.resume();
        let got = rw.write().try_lock(SIDES_WAIT, Some(SIDES_LEASE)).await;
        let g = got
            .expect("the sibling waits for the first flow, not an error")
            .expect("granted");
        assert!(
            !reading.load(SeqCst),
            "granted the write side while the sibling flow still read"
        );
        g.unlock().await.expect("unlock");
    };
    tokio::join!(first, second);
}
