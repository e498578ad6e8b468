//! A restart-safe fleet: three worker processes (a client each) share jobs
//! while their Redis restarts with empty data in the middle of the run.
//!
//! - One leader (`Leader::run_with_term`) schedules jobs, writing through a
//!   schedule store that refuses a token older than the newest it saw.
//! - At most 2 exports at once across the fleet: a semaphore declared with
//!   `with_permits(2)`, which comes back after Redis forgot it.
//! - Each job runs under its own `Lock` and an export permit together, in
//!   one `run_locked` (stopped when either is lost), and writes its result
//!   to a store that refuses an older fencing token.
//! - Every client has a restart guard (`ClientBuilder::restart_guard`): a
//!   restarted Redis grants nothing until every lease of the old one could
//!   have ended. Without it (`FLEET_NO_RESTART_GUARD=1`) the checks below
//!   can see two leaders or two workers on one job after the restart.
//!
//! The example checks what the fleet must never do: two live holders of one
//! job, more than 2 live exports, a leader acting on a term it knows lost,
//! a new term while the last one is alive, a store write with an older
//! token; and that work resumes after the restart. It exits 1 otherwise.
//! ("Live": by the holder's own lease clock, which is what `run_locked`
//! stops work on.)
//!
//! Redis: a throwaway redis-server started (and restarted) through
//! redisync-testkit; with `REDIS_URL` set, that server, not restarted.
//!
//!     cargo run --example fleet_worker

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redisync::{run_locked, Client, Guard, LostSignal, Outcome};
use redisync_testkit::RedisServer;
use tokio::time::Instant;

const WORKERS: usize = 3;
/// Job loops per worker: 6 in all compete for the export permits.
const LOOPS_PER_WORKER: usize = 2;
const EXPORT_PERMITS: u32 = 2;
/// Every client's watchdog lease, and its restart guard's bound.
const LEASE: Duration = Duration::from_secs(2);
/// Job ids repeat: one job is exported many times, and its tokens must keep
/// rising across the restart.
const JOB_IDS: u64 = 5;
const BEFORE_RESTART: Duration = Duration::from_secs(4);
const AFTER_RESTART: Duration = Duration::from_secs(8);

/// What the fleet shares in memory: the job queue and the two stores, as a
/// real fleet would keep in a database (they survive the Redis restart).
#[derive(Default)]
struct Fleet {
    queue: Mutex<VecDeque<u64>>,
    /// The newest term the schedule store saw: token and loss signal.
    term: Mutex<Option<(u64, LostSignal)>>,
    /// Job -> the newest token the result store accepted.
    results: Mutex<HashMap<u64, u64>>,
    /// Who works on which job, and which exports run: loss signals.
    working: Mutex<HashMap<u64, Vec<(u64, LostSignal)>>>,
    exporting: Mutex<Vec<(u64, LostSignal)>>,
    next_entry: AtomicU64,
    terms: AtomicU64,
    done: AtomicU64,
    stopped: AtomicU64,
    violations: Mutex<Vec<String>>,
}

impl Fleet {
    fn violation(&self, what: String) {
        eprintln!("VIOLATION: {what}");
        self.violations.lock().unwrap().push(what);
    }

    /// The leader's run: a write to the schedule store, then two copies of
    /// a job (an at-least-once queue: the job lock keeps them apart).
    fn schedule(&self, token: u64, lost: &LostSignal) {
        if lost.is_lost() {
            self.violation(format!("a run of term {token} after its loss was known"));
            return;
        }
        let mut term = self.term.lock().unwrap();
        match &*term {
            Some((newest, _)) if token < *newest => return, // refused: stale
            Some((newest, _)) if token == *newest => {}
            previous => {
                if let Some((newest, previous_lost)) = previous {
                    if !previous_lost.is_lost() {
                        self.violation(format!("term {token} began while term {newest} was alive"));
                    }
                }
                self.terms.fetch_add(1, Ordering::Relaxed);
                *term = Some((token, lost.clone()));
            }
        }
        drop(term);
        let job = self.next_entry.fetch_add(1, Ordering::Relaxed) % JOB_IDS;
        self.queue.lock().unwrap().extend([job, job]);
    }

    /// Adds work to `live`; a violation if that makes more than `limit`
    /// entries live by their own lease clocks.
    fn enter(
        &self,
        what: &str,
        live: &mut Vec<(u64, LostSignal)>,
        limit: usize,
        signal: LostSignal,
    ) -> u64 {
        live.retain(|(_, s)| !s.is_lost());
        if live.len() >= limit {
            self.violation(format!(
                "{what}: {} live at once, at most {limit}",
                live.len() + 1
            ));
        }
        let entry = self.next_entry.fetch_add(1, Ordering::Relaxed);
        live.push((entry, signal));
        entry
    }

    /// The result store: refuses a token older than the newest it accepted.
    fn write_result(&self, job: u64, token: u64) {
        let mut results = self.results.lock().unwrap();
        let newest = results.entry(job).or_default();
        if token == *newest {
            self.violation(format!("job {job} written twice under token {token}"));
        }
        *newest = (*newest).max(token);
    }
}

/// One export of `job`, under its lock and a permit.
async fn export(fleet: &Fleet, job: u64, lock: &impl Guard, permit: &impl Guard) {
    let on_job = {
        let mut working = fleet.working.lock().unwrap();
        let live = working.entry(job).or_default();
        fleet.enter(&format!("job {job}"), live, 1, lock.lost_signal())
    };
    let export = {
        let mut exporting = fleet.exporting.lock().unwrap();
        fleet.enter(
            "exports",
            &mut exporting,
            EXPORT_PERMITS as usize,
            permit.lost_signal(),
        )
    };
    tokio::time::sleep(Duration::from_millis(100 + 30 * job)).await;
    fleet.write_result(job, lock.fencing_token());
    // (Work that `run_locked` stops leaves its entries: they are no longer
    // live once its guards are lost.)
    fleet
        .working
        .lock()
        .unwrap()
        .entry(job)
        .or_default()
        .retain(|(e, _)| *e != on_job);
    fleet
        .exporting
        .lock()
        .unwrap()
        .retain(|(e, _)| *e != export);
}

async fn job_loop(client: Client, fleet: Arc<Fleet>) {
    let exports = client
        .semaphore("fleet:exports")
        .with_permits(EXPORT_PERMITS);
    loop {
        let job = fleet.queue.lock().unwrap().pop_front();
        let Some(job) = job else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let lock = client.lock(&format!("fleet:job:{job}"));
        let acquire = async { Ok((lock.lock().await?, exports.acquire(1).await?)) };
        let outcome = run_locked(acquire, async |(lock, permit)| {
            export(&fleet, job, lock, permit).await;
        })
        .await;
        match outcome {
            Ok(Outcome::Completed(())) => {
                fleet.done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {
                fleet.stopped.fetch_add(1, Ordering::Relaxed);
                fleet.queue.lock().unwrap().push_back(job);
            }
            Err(redisync::Error::Shutdown) => return,
            Err(e) => {
                // A waiting call rides out the restart; what is left (a
                // reset while a release or the restart guard's look was
                // sent) is retried.
                println!("job {job} not taken: {e}");
                fleet.queue.lock().unwrap().push_back(job);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn worker(url: &str, guard: bool, fleet: &Arc<Fleet>) -> redisync::Result<Client> {
    let mut builder = Client::builder(url).watchdog_timeout(LEASE);
    if guard {
        builder = builder.restart_guard(LEASE);
    }
    let client = builder.connect().await?;
    let leader = client.leader("fleet:scheduler");
    let f = fleet.clone();
    tokio::spawn(async move {
        let every = Duration::from_millis(200);
        let _ = leader
            .run_with_term(every, |term| {
                let f = f.clone();
                async move { f.schedule(term.token(), &term.lost_signal()) }
            })
            .await;
    });
    for _ in 0..LOOPS_PER_WORKER {
        tokio::spawn(job_loop(client.clone(), fleet.clone()));
    }
    Ok(client)
}

#[tokio::main]
async fn main() -> redisync::Result<()> {
    let guard = std::env::var_os("FLEET_NO_RESTART_GUARD").is_none();
    let (url, mut server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => match RedisServer::try_start().await {
            Ok(server) => (server.url(), Some(server)),
            Err(e) => {
                eprintln!("no redis-server could be started: {e}");
                std::process::exit(1);
            }
        },
    };
    println!(
        "{WORKERS} workers on {url}, restart guard {}",
        if guard { "on" } else { "OFF" }
    );
    let fleet = Arc::new(Fleet::default());
    let mut clients = Vec::new();
    for _ in 0..WORKERS {
        clients.push(worker(&url, guard, &fleet).await?);
    }
    tokio::time::sleep(BEFORE_RESTART).await;
    let before = fleet.done.load(Ordering::Relaxed);
    match &mut server {
        Some(server) => {
            println!("{before} exports done; restarting Redis with empty data");
            server.restart().await;
        }
        None => println!("{before} exports done; REDIS_URL given: not restarting it"),
    }
    let restarted = Instant::now();
    tokio::time::sleep(AFTER_RESTART).await;
    let after = fleet.done.load(Ordering::Relaxed) - before;
    for client in &clients {
        let _ = client.shutdown().await;
    }
    let free = Client::connect(&url).await?;
    let permits = free.semaphore("fleet:exports").available_permits().await;
    println!(
        "{after} exports done in the {:.0} s after the restart; terms {}, stopped by a loss {}; free permits {permits:?}",
        restarted.elapsed().as_secs_f64(),
        fleet.terms.load(Ordering::Relaxed),
        fleet.stopped.load(Ordering::Relaxed),
    );
    if before == 0 || after == 0 {
        fleet.violation(format!(
            "no progress: {before} exports before the restart, {after} after"
        ));
    }
    if permits.as_ref().ok() != Some(&EXPORT_PERMITS) {
        fleet.violation(format!("the permits did not all come back: {permits:?}"));
    }
    if !fleet.violations.lock().unwrap().is_empty() {
        std::process::exit(1);
    }
    println!("OK: one holder per job, at most {EXPORT_PERMITS} exports, tokens only rose, through the restart");
    Ok(())
}
