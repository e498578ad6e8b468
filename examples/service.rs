//! A small multi-process service, as users build on redisync: 3 worker
//! processes handle the same 24 orders, each delivered twice (duplicate
//! messages), 4 at a time per worker with `for_each_concurrent`.
//!
//! - Per-order `Lock`, each message in an `Owner` scope of its own (the
//!   duplicates run in one task and must not share the critical section),
//!   the work run by `run_locked` (cancelled if the lock is lost);
//! - the effect is a fenced write to `SQLite`: applied only if the order is not
//!   done and the lock's fencing token is above the last one seen;
//! - a `Semaphore` caps a "payment API" call at 2 in flight across processes;
//! - a `FairLock` orders the settlement step: each worker appends its
//!   settlement, fenced by the fair lock's token;
//! - a fault: the example pauses worker 0 (SIGSTOP) inside a critical section
//!   for three times its lease, then resumes it (SIGCONT). Its lock expires
//!   and another worker takes the order over; the paused worker's late work
//!   is cancelled or its write rejected by the fence.
//!
//! At the end it checks the database: every order's effect applied exactly
//! once, the payment cap held, settlements in token order. Exit status 1 on
//! any violation. `cargo test` runs it too (a test of this file).
//!
//! Redis: `REDIS_URL` when set; else 127.0.0.1:6379 if a server answers;
//! else a throwaway redis-server started through redisync-testkit.
//!
//!     cargo run --example service

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use redisync::{run_locked, Outcome, Owner};
use rusqlite::{params, Connection, OptionalExtension};

mod support;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const WORKERS: u32 = 3;
const ORDERS: u32 = 24;
/// Messages a worker handles at once, in one task.
const CONCURRENCY: usize = 4;
/// Payment calls in flight at most, across every process.
const PAYMENT_PERMITS: u32 = 2;
/// The workers' watchdog lease: a paused worker loses its locks after it.
const LEASE: Duration = Duration::from_secs(1);
/// How long the example pauses worker 0 (three leases).
const PAUSE: Duration = Duration::from_secs(3);
/// How long a message's work takes before its payment call and write
/// (worker 0 is paused in it: long enough for the pause to land there).
const WORK_MS: u64 = 150;
/// Worker 0 is paused in its critical section of this many-th message.
const PAUSE_AT_SECTION: u32 = 3;

/// What the run found.
#[derive(Debug, Default)]
struct Report {
    orders_applied_once: u32,
    violations: Vec<String>,
    stale_writes_rejected: u32,
    cancelled_by_loss: u32,
    duplicates_skipped: u32,
    payment_peak: u32,
    settlements: Vec<(u32, i64)>,
    paused: bool,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    if let Some(worker) = std::env::var_os(WORKER_ENV) {
        return worker_main().await.inspect_err(|e| {
            eprintln!("worker {}: {e}", worker.to_string_lossy());
        });
    }
    let Some((url, _server)) = support::find_redis().await else {
        std::process::exit(1);
    };
    let report = run_service(&url).await?;
    print_report(&report);
    if !report.violations.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

fn print_report(r: &Report) {
    println!(
        "orders applied exactly once: {} of {ORDERS}",
        r.orders_applied_once
    );
    println!(
        "duplicates skipped: {}, work cancelled by a lost lock: {}, stale writes rejected by the fence: {}",
        r.duplicates_skipped, r.cancelled_by_loss, r.stale_writes_rejected
    );
    println!(
        "payment calls in flight at most: {} (cap {PAYMENT_PERMITS})",
        r.payment_peak
    );
    println!(
        "settlements (worker, fencing token) in order: {:?}",
        r.settlements
    );
    println!(
        "worker 0 paused {PAUSE:?} inside a critical section: {}",
        r.paused
    );
    if r.violations.is_empty() {
        println!("check: nothing ran twice, nothing was lost");
    } else {
        for v in &r.violations {
            println!("VIOLATION: {v}");
        }
    }
}

// ---------------------------------------------------------------------------
// The coordinator: database, workers, the fault, the check
// ---------------------------------------------------------------------------

const WORKER_ENV: &str = "SERVICE_WORKER";

async fn run_service(url: &str) -> Result<Report, BoxError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("orders.db");
    create_db(&db)?;
    // Names unique to this run: a shared Redis may hold an earlier run's.
    let run = uuid::Uuid::new_v4().simple().to_string();
    // The workers declare the payment semaphore's size themselves
    // (`with_permits`), so nothing is set up here, and a Redis that
    // restarted empty gets it back at the next acquisition.

    let mut children = Vec::new();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    for worker in 0..WORKERS {
        let mut cmd = worker_command()?;
        cmd.env(WORKER_ENV, worker.to_string())
            .env("SERVICE_URL", url)
            .env("SERVICE_DB", &db)
            .env("SERVICE_RUN", &run);
        let child = support::spawn_with_lines(cmd, worker as usize, lines_tx.clone(), false)?;
        children.push(child);
    }
    drop(lines_tx);

    let mut report = Report::default();
    let mut sections_of_0 = 0;
    while let Some((worker, line)) = lines.recv().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["section", ..] if worker == 0 && !report.paused => {
                sections_of_0 += 1;
                if sections_of_0 == PAUSE_AT_SECTION {
                    // The fault: the process stops inside its critical
                    // section, its watchdog with it, for three leases.
                    let pid = children[0].id().ok_or("worker 0 gone")?;
                    support::signal(pid, "STOP").await?;
                    tokio::time::sleep(PAUSE).await;
                    support::signal(pid, "CONT").await?;
                    report.paused = true;
                }
            }
            ["result", _applied, stale, cancelled, skipped] => {
                report.stale_writes_rejected += stale.parse::<u32>()?;
                report.cancelled_by_loss += cancelled.parse::<u32>()?;
                report.duplicates_skipped += skipped.parse::<u32>()?;
            }
            _ => {}
        }
    }
    for (i, mut child) in children.into_iter().enumerate() {
        let status = child.wait().await?;
        if !status.success() {
            report
                .violations
                .push(format!("worker {i} exited with {status}"));
        }
    }
    check_db(&db, &mut report)?;
    if report.payment_peak > PAYMENT_PERMITS {
        report.violations.push(format!(
            "{} payment calls in flight, cap {PAYMENT_PERMITS}",
            report.payment_peak
        ));
    }
    if !report.paused {
        report.violations.push("worker 0 was never paused".into());
    }
    Ok(report)
}

/// This program again, as a worker (`SERVICE_WORKER` in its environment).
/// Under `cargo test` this file is a test binary: run just its worker test.
fn worker_command() -> Result<tokio::process::Command, BoxError> {
    let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
    if cfg!(test) {
        cmd.args([
            "--exact",
            "tests::worker_process",
            "--nocapture",
            "--test-threads=1",
        ]);
    }
    Ok(cmd)
}

fn open(db: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(db)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    Ok(conn)
}

fn create_db(db: &Path) -> rusqlite::Result<()> {
    let conn = open(db)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.execute_batch(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, done INTEGER NOT NULL DEFAULT 0,
                              fence INTEGER NOT NULL DEFAULT 0, worker INTEGER);
         CREATE TABLE effects (order_id INTEGER NOT NULL, worker INTEGER NOT NULL,
                               token INTEGER NOT NULL);
         CREATE TABLE settlements (seq INTEGER PRIMARY KEY AUTOINCREMENT,
                                   worker INTEGER NOT NULL, token INTEGER NOT NULL);
         CREATE TABLE calls (start_us INTEGER NOT NULL, end_us INTEGER NOT NULL,
                             held INTEGER NOT NULL);",
    )?;
    for id in 1..=ORDERS {
        conn.execute("INSERT INTO orders (id) VALUES (?1)", params![id])?;
    }
    Ok(())
}

fn check_db(db: &Path, report: &mut Report) -> rusqlite::Result<()> {
    let conn = open(db)?;
    for id in 1..=ORDERS {
        let effects: u32 = conn.query_row(
            "SELECT COUNT(*) FROM effects WHERE order_id = ?1",
            params![id],
            |r| r.get(0),
        )?;
        match effects {
            1 => report.orders_applied_once += 1,
            n => report
                .violations
                .push(format!("order {id}: its effect applied {n} times")),
        }
    }
    let mut rows = conn.prepare("SELECT worker, token FROM settlements ORDER BY seq")?;
    report.settlements = rows
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    if report.settlements.len() != WORKERS as usize {
        report.violations.push(format!(
            "{} settlements, one per worker expected",
            report.settlements.len()
        ));
    }
    // Payment calls in flight at once, over calls whose permit was held to
    // their end: a sweep over start (+1) and end (-1) events.
    let mut rows = conn.prepare("SELECT start_us, end_us FROM calls WHERE held = 1")?;
    let mut events: Vec<(i64, i32)> = Vec::new();
    for call in rows.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))? {
        let (start, end) = call?;
        events.extend([(start, 1), (end, -1)]);
    }
    events.sort_unstable();
    let mut now = 0;
    for (_, step) in events {
        now += step;
        report.payment_peak = report.payment_peak.max(u32::try_from(now).unwrap_or(0));
    }
    if !report.settlements.windows(2).all(|w| w[0].1 < w[1].1) {
        report
            .violations
            .push("settlements out of fencing-token order".into());
    }
    Ok(())
}

/// Runs `op` again (up to 5 tries) while it fails with a redisync error
/// that may pass (`is_retryable`: timeouts, connection trouble).
async fn retry<T, F, Fut>(mut op: F) -> Result<T, BoxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, BoxError>>,
{
    let mut tries = 1;
    loop {
        match op().await {
            Err(e)
                if tries < 5
                    && e.downcast_ref::<redisync::Error>()
                        .is_some_and(redisync::Error::is_retryable) =>
            {
                eprintln!("retrying after: {e}");
                tries += 1;
            }
            result => return result,
        }
    }
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

// ---------------------------------------------------------------------------
// A worker process
// ---------------------------------------------------------------------------

/// What one message's work ended with.
enum Handled {
    Applied,
    /// The order was done already (a duplicate, or another worker's).
    Skipped,
    /// The fence rejected the write: a newer holder had written.
    Stale,
}

struct Worker {
    index: u32,
    db: PathBuf,
    run: String,
    client: redisync::Client,
    payments: redisync::Semaphore,
}

async fn worker_main() -> Result<(), BoxError> {
    let var = |k: &str| std::env::var(k).map_err(|_| format!("{k} not set"));
    let index: u32 = var(WORKER_ENV)?.parse()?;
    let url = var("SERVICE_URL")?;
    let run = var("SERVICE_RUN")?;
    let client = redisync::Client::builder(&url)
        .watchdog_timeout(LEASE)
        .connect()
        .await?;
    let worker = Worker {
        index,
        db: PathBuf::from(var("SERVICE_DB")?),
        payments: client
            .semaphore(&format!("service:{run}:payments"))
            .with_permits(PAYMENT_PERMITS),
        run,
        client,
    };
    // Every order twice, starting at a different place per worker.
    let start = index * ORDERS / WORKERS;
    let messages = (0..2 * ORDERS).map(|i| (start + i / 2) % ORDERS + 1);
    let (mut applied, mut stale, mut cancelled, mut skipped) = (0, 0, 0, 0);
    let outcomes: Vec<Result<Outcome<Handled>, BoxError>> = futures::stream::iter(messages)
        // Each message its own owner: the duplicates of one order run in
        // this one task and would otherwise re-enter each other's lock.
        .map(|order| Owner::new().scope(worker.handle(order)))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    for outcome in outcomes {
        match outcome? {
            // Applied with the lock found gone at the end (`LostAtEnd`): the
            // fence accepted it, so no newer holder had written.
            Outcome::Completed(Handled::Applied) | Outcome::LostAtEnd(Handled::Applied) => {
                applied += 1;
            }
            Outcome::Completed(Handled::Skipped) | Outcome::LostAtEnd(Handled::Skipped) => {
                skipped += 1;
            }
            Outcome::Completed(Handled::Stale) | Outcome::LostAtEnd(Handled::Stale) => stale += 1,
            Outcome::Cancelled => cancelled += 1,
        }
    }
    worker.settle().await?;
    println!("result {applied} {stale} {cancelled} {skipped}");
    worker.client.shutdown().await?;
    Ok(())
}

impl Worker {
    /// One message, tried again after errors that may pass (a command
    /// that timed out while this process was paused, Redis restarting):
    /// what was done is fenced, so a second try cannot apply it twice.
    async fn handle(&self, order: u32) -> Result<Outcome<Handled>, BoxError> {
        retry(|| self.handle_once(order)).await
    }

    /// One message: under the order's lock, skip it if done, else call the
    /// payment API (capped) and write the effect, fenced.
    async fn handle_once(&self, order: u32) -> Result<Outcome<Handled>, BoxError> {
        let lock = self
            .client
            .lock(&format!("service:{}:order:{order}", self.run));
        let outcome = run_locked(lock.lock(), async |guard: &redisync::LockGuard| {
            let token = guard.fencing_token_i64();
            if self.done(order).await? {
                return Ok::<_, BoxError>(Handled::Skipped);
            }
            println!("section {} {order} {token}", self.index);
            // The work; the example pauses worker 0 in here once.
            tokio::time::sleep(Duration::from_millis(WORK_MS)).await;
            self.pay().await?;
            self.write_fenced(order, token).await
        })
        .await?;
        Ok(match outcome {
            Outcome::Completed(r) => Outcome::Completed(r?),
            Outcome::LostAtEnd(r) => Outcome::LostAtEnd(r?),
            Outcome::Cancelled => Outcome::Cancelled,
        })
    }

    async fn done(&self, order: u32) -> Result<bool, BoxError> {
        let db = self.db.clone();
        let done = tokio::task::spawn_blocking(move || {
            open(&db)?.query_row(
                "SELECT done FROM orders WHERE id = ?1",
                params![order],
                |r| r.get::<_, bool>(0),
            )
        })
        .await??;
        Ok(done)
    }

    /// The capped external call: at most `PAYMENT_PERMITS` in flight. Each
    /// call is recorded (start, end, whether its permit was still held) for
    /// the check.
    async fn pay(&self) -> Result<(), BoxError> {
        let permit = self.payments.acquire(1).await?;
        let start = now_us();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let end = now_us();
        // A permit lost meanwhile (its process was paused past the lease)
        // no longer counts against the cap: that is what leases are for.
        let held = !permit.is_lost();
        permit
            .release()
            .await
            .or_else(|e| if e.is_not_held() { Ok(()) } else { Err(e) })?;
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            open(&db)?.execute(
                "INSERT INTO calls (start_us, end_us, held) VALUES (?1, ?2, ?3)",
                params![start, end, held],
            )
        })
        .await??;
        Ok(())
    }

    /// The fenced write: the effect lands only if the order is not done and
    /// no newer token has written to it. `fence <= token`, as the recipe of
    /// docs/writing-a-service.md: a token is one acquisition, so an equal token is the same
    /// holder writing again (a section may write several times); only an
    /// older one is stale.
    async fn write_fenced(&self, order: u32, token: i64) -> Result<Handled, BoxError> {
        let (db, worker) = (self.db.clone(), self.index);
        let handled = tokio::task::spawn_blocking(move || -> rusqlite::Result<Handled> {
            let mut conn = open(&db)?;
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let updated = tx.execute(
                "UPDATE orders SET done = 1, fence = ?2, worker = ?3
                 WHERE id = ?1 AND done = 0 AND fence <= ?2",
                params![order, token, worker],
            )?;
            if updated == 0 {
                let fence: Option<i64> = tx
                    .query_row(
                        "SELECT fence FROM orders WHERE id = ?1 AND fence > ?2",
                        params![order, token],
                        |r| r.get(0),
                    )
                    .optional()?;
                return Ok(if fence.is_some() {
                    Handled::Stale
                } else {
                    Handled::Skipped
                });
            }
            tx.execute(
                "INSERT INTO effects (order_id, worker, token) VALUES (?1, ?2, ?3)",
                params![order, worker, token],
            )?;
            tx.commit()?;
            Ok(Handled::Applied)
        })
        .await??;
        Ok(handled)
    }

    /// The settlement step, tried again after errors that may pass.
    async fn settle(&self) -> Result<(), BoxError> {
        retry(|| self.settle_once()).await
    }

    /// The settlement step, in the order the workers asked (a fair lock),
    /// fenced by its token.
    async fn settle_once(&self) -> Result<(), BoxError> {
        let fair = self
            .client
            .fair_lock(&format!("service:{}:settlement", self.run));
        let guard = fair.lock().await?;
        let (db, worker, token) = (self.db.clone(), self.index, guard.fencing_token_i64());
        tokio::task::spawn_blocking(move || -> rusqlite::Result<()> {
            let mut conn = open(&db)?;
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let last: i64 =
                tx.query_row("SELECT COALESCE(MAX(token), 0) FROM settlements", [], |r| {
                    r.get(0)
                })?;
            if token > last {
                tx.execute(
                    "INSERT INTO settlements (worker, token) VALUES (?1, ?2)",
                    params![worker, token],
                )?;
            }
            tx.commit()
        })
        .await??;
        println!("settled {worker} {token}");
        guard.unlock().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole service, as `cargo run --example service` runs it, on a
    /// throwaway redis-server: nothing ran twice, nothing was lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn service_runs_every_order_once_under_a_paused_worker() {
        let server = redisync_testkit::RedisServer::start().await;
        let report = run_service(&server.url()).await.unwrap();
        print_report(&report);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.orders_applied_once, ORDERS);
    }

    /// Not a test: the entry of a worker process under `cargo test` (see
    /// [`worker_command`]); does nothing unless started as a worker.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn worker_process() {
        if std::env::var_os(WORKER_ENV).is_some() {
            worker_main().await.unwrap();
        }
    }
}
