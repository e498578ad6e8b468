//! A run: the coordinating process (servers, proxies, faults, its own
//! workers, the checks) and the worker process it spawns.
//!
//! What a run reports is in `summary`; the worker process (spawned and
//! read by the coordinator, and its own side) in `child`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::checker::{check, Violation};
use crate::faults::{Cluster, FaultKind, FaultRecord, KeyTtl, Schedule};
use crate::history::{History, Kind, Pause, Record, Section, Server};
use crate::worker::Workers;
use crate::workload::{Settings, GUARDED_NAMES, NAMES, SEMAPHORE_PERMITS, SYNCED_NAMES};

mod child;
mod summary;

pub use child::worker_process;
use child::WorkerProcess;
pub use summary::Summary;

/// How long the workers get to finish their current section when stopped.
const STOP_WITHIN: Duration = Duration::from_secs(20);
/// How long the worker process gets to start, stop or exit.
const CHILD_TIMEOUT: Duration = Duration::from_secs(45);
/// Whether `key` (layout `redisync:v1:<kind>:<role>:<name>`) is bookkeeping
/// that legitimately outlives the locks: fencing counters (their TTL is
/// long), a semaphore's permits (checked through `available_permits`) and
/// its lease table, fair-lock queues, read-write reader and waiting-writer
/// tables.
/// Whether `key` is bookkeeping that outlives its holds (fencing counters,
/// queues, lease sets, a semaphore's permits), not a hold that leaked.
pub fn is_bookkeeping(key: &str) -> bool {
    let mut parts = key.splitn(5, ':');
    let (Some("redisync"), Some(_), Some(kind), Some(role)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    matches!(
        (kind, role),
        (_, "fence" | "leases" | "queue" | "readers" | "writers") | ("sem", "hold") | ("latch", _)
    )
}

/// The settings of a run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Faults are injected for at least this long...
    pub duration: Duration,
    /// ...and for at least this many rounds (every fault kind once a round).
    pub min_rounds: usize,
    /// Watchdog lease of every client (renewed every third of it); fixed
    /// leases are at most this long too, `extend` goes up to 2.5 times it.
    pub lease: Duration,
    /// Tasks per family per client set (each process has four client
    /// sets: direct, proxied, guarded, synced; the families and sets are
    /// in the crate's README.md).
    pub tasks_per_family: usize,
    /// Seed of every random choice (holds, leases, fault timing).
    pub seed: u64,
    /// Share of sections, in percent, that end by dropping the guard (its
    /// release then runs in the background, retried while the lease lasts)
    /// instead of awaiting `unlock`. Default 20 (the bug this once found, a
    /// retried release freeing the same task's next acquisition, is fixed and
    /// kept as a regression test in `tests/found.rs`).
    pub drop_percent: u64,
    /// The `redisync-torture` binary, spawned as the worker process.
    pub worker_exe: PathBuf,
    /// Print every fault as it happens.
    pub verbose: bool,
}

impl Config {
    /// The short run of `cargo test`: 30 s of faults, at least two rounds
    /// (every fault kind on the main server and on a Redlock node, and on
    /// both processes' proxies).
    pub fn short(worker_exe: PathBuf) -> Config {
        Config {
            duration: Duration::from_secs(30),
            min_rounds: 2,
            lease: Duration::from_millis(900),
            tasks_per_family: 2,
            seed: 0x5eed,
            drop_percent: 20,
            worker_exe,
            verbose: false,
        }
    }
}

/// Runs the torture test: starts four `redis-server`s (the main one and
/// three Redlock nodes) and a fault proxy per process and server, spawns
/// the worker process, runs this process's workers while the fault schedule
/// runs, stops everything, checks that nothing stays held (d), and checks
/// the history (a, b, c).
///
/// # Errors
/// A message when the setup fails (no `redis-server`, the worker process
/// cannot be spawned or dies early). Violations are not errors: they are in
/// the [`Summary`].
pub async fn run(config: &Config) -> Result<Summary, String> {
    let started = Instant::now();
    let settings = Settings::new(config.lease, config.drop_percent);
    let mut cluster = Cluster::start(2).await?;

    let mut child = WorkerProcess::spawn(config, &cluster.direct(), &cluster.proxied(1)).await?;
    let (sink, mut sections) = mpsc::unbounded_channel();
    let mut workers = Workers::start(
        "p0",
        &cluster.direct(),
        &cluster.proxied(0),
        settings,
        config.tasks_per_family,
        config.seed,
        &sink,
    )
    .await?;
    drop(sink);

    let mut schedule = Schedule::new(
        config.seed ^ 0xfa17,
        config.lease,
        child.pid(),
        config.verbose,
    );
    let own_records = inject_faults(
        config,
        &mut schedule,
        &mut cluster,
        &mut child,
        &mut sections,
    )
    .await?;
    cluster.heal_all();
    // A quiet period: stalled commands drain, lost holders let go.
    tokio::time::sleep(config.lease * 2).await;

    let (child_stopped, ()) = tokio::join!(child.stop(), workers.stop(STOP_WITHIN));
    child_stopped?;
    let mut history = history_of(&schedule, own_records);
    while let Ok(r) = sections.try_recv() {
        history.push(r);
    }
    let child_output = child.output();
    for r in child_output.records {
        history.push(r);
    }
    dump(&history);

    // (d), while every client (both processes) is still connected: a leaked
    // hold would still be renewed by its client's watchdog.
    let residue = residue(&cluster, settings.max_lease()).await;
    child.exit().await;
    let mut counts = BTreeMap::new();
    let mut errors: BTreeMap<Kind, Vec<String>> = BTreeMap::new();
    for kind in Kind::ALL {
        let mut n = workers.stats.counts(kind);
        n.add(child_output.counts.get(&kind).copied().unwrap_or_default());
        counts.insert(kind, n);
        let mut samples = workers.stats.samples(kind);
        for e in child_output.errors.get(&kind).into_iter().flatten() {
            if !samples.contains(e) {
                samples.push(e.clone());
            }
        }
        errors.insert(kind, samples);
    }
    let worker_violations = workers.stats.violations();
    let coverage = merged(workers.stats.coverage.snapshot(), &child_output.coverage);
    workers.shutdown().await;

    let leaderships = crate::checker::leader_sections(&history);
    let mut sections_by_process = BTreeMap::new();
    for s in history.sections.iter().chain(&leaderships) {
        let process = s.client.split('.').next().unwrap_or("?").to_owned();
        *sections_by_process.entry(process).or_insert(0) += 1;
    }
    let mut report = check(&history);
    report.violations.extend(residue);
    let mut run_violations = worker_violations;
    run_violations.extend(child_output.violations);
    run_violations.extend(missing_grants(&history, &leaderships));
    report.violations.extend(
        run_violations
            .into_iter()
            .map(|what| Violation::Run { what }),
    );
    let mut grants = BTreeMap::new();
    for s in history
        .sections
        .iter()
        .chain(&leaderships)
        .filter(|s| s.valid_at_start())
    {
        *grants.entry(s.kind).or_insert(0) += 1;
    }
    Ok(Summary {
        elapsed: started.elapsed(),
        config: config.clone(),
        counts,
        errors,
        sections_by_process,
        grants,
        faults: schedule.log,
        report,
        coverage,
    })
}

/// `own` with `other` added.
fn merged(mut own: crate::Coverage, other: &crate::Coverage) -> crate::Coverage {
    own.merge(other);
    own
}

/// Writes the history's records to the file named by
/// `REDISYNC_TORTURE_HISTORY`, if set (to look into a violation).
fn dump(history: &History) {
    let Ok(path) = std::env::var("REDISYNC_TORTURE_HISTORY") else {
        return;
    };
    let mut lines: Vec<String> = Vec::new();
    lines.extend(history.sections.iter().map(Section::to_line));
    lines.extend(history.works.iter().map(crate::history::Work::to_line));
    lines.extend(history.forces.iter().map(crate::history::Force::to_line));
    lines.extend(history.probes.iter().map(crate::history::Probe::to_line));
    lines.extend(
        history
            .kills
            .iter()
            .map(|k| format!("K\t{}\t{}", k.server, k.at_us)),
    );
    lines.extend(
        history
            .pauses
            .iter()
            .chain(&history.stalls)
            .map(|p| format!("T\t{}\t{}\t{}", p.process, p.from_us, p.to_us)),
    );
    if let Err(e) = std::fs::write(&path, lines.join("\n") + "\n") {
        eprintln!("cannot write the history to {path}: {e}");
    }
}

/// What the fault schedule tells the checker (kills, pauses of the worker
/// process, and when faults were active), with `records`.
fn history_of(schedule: &Schedule, records: Vec<Record>) -> History {
    let mut history = History {
        kills: schedule.kills.clone(),
        pauses: client_pauses(&schedule.log),
        faults: schedule
            .log
            .iter()
            .map(|f| (f.start_us, f.end_us))
            .collect(),
        ..History::default()
    };
    for r in records {
        history.push(r);
    }
    history
}

/// The pauses of the worker process (`p1`), for the checker.
fn client_pauses(log: &[FaultRecord]) -> Vec<Pause> {
    log.iter()
        .filter(|f| f.kind == FaultKind::ClientPause && f.error.is_none())
        .map(|f| Pause {
            process: "p1".into(),
            from_us: f.start_us,
            to_us: f.end_us,
        })
        .collect()
}

/// A run that checked nothing proves nothing: every client set of every
/// process must have been granted every kind of lock at least once.
fn missing_grants(history: &History, leaderships: &[Section]) -> Vec<String> {
    let mut sets = Vec::new();
    for process in ["p0", "p1"] {
        for set in ["direct", "proxied", "guarded", "synced"] {
            sets.push(format!("{process}.{set}"));
        }
    }
    missing_grants_of(history, leaderships, &sets)
}

/// `missing_grants` (the checks of a run) for the client sets `sets` (labels
/// `"<process>.<set>"`): a run that checked nothing proves nothing.
pub fn missing_grants_of(
    history: &History,
    leaderships: &[Section],
    sets: &[String],
) -> Vec<String> {
    let mut missing = Vec::new();
    {
        for label in sets {
            let set = label.split('.').nth(1).unwrap_or("");
            let prefix = format!("{label}.");
            let kinds: &[Kind] = if set == "guarded" || set == "synced" {
                &[
                    Kind::Lock,
                    Kind::FairLock,
                    Kind::RwRead,
                    Kind::RwWrite,
                    Kind::Semaphore,
                    Kind::RunLocked,
                ]
            } else {
                &Kind::ALL
            };
            for &kind in kinds {
                let granted =
                    history.sections.iter().chain(leaderships).any(|s| {
                        s.kind == kind && s.valid_at_start() && s.client.starts_with(&prefix)
                    });
                if !granted {
                    missing.push(format!(
                        "client set {label} was never granted a {kind}: nothing was checked there"
                    ));
                }
            }
        }
    }
    missing
}

/// Runs the fault schedule for the run's duration and at least its rounds.
/// A run that checked nothing proves nothing (see `missing_grants`): a
/// kind that is rarely granted (a `MultiLock` against the single locks of
/// its names) may still be missing for a client set by then, so the run
/// goes on, up to as long again, until every set has had each. Returns the
/// records of this process's workers taken meanwhile.
async fn inject_faults(
    config: &Config,
    schedule: &mut Schedule,
    cluster: &mut Cluster,
    child: &mut WorkerProcess,
    sections: &mut mpsc::UnboundedReceiver<Record>,
) -> Result<Vec<Record>, String> {
    let until = Instant::now() + config.duration;
    let give_up = until + config.duration;
    let mut own_records = Vec::new();
    loop {
        let now = Instant::now();
        if now >= until && schedule.rounds() >= config.min_rounds {
            while let Ok(r) = sections.try_recv() {
                own_records.push(r);
            }
            if now >= give_up || covered(&own_records, child) {
                return Ok(own_records);
            }
        }
        schedule.step(cluster).await;
        child.check_alive()?;
    }
}

/// Whether every client set of both processes has been granted every
/// kind so far: this process's records and what the worker process has
/// reported.
fn covered(own: &[Record], child: &WorkerProcess) -> bool {
    let mut history = History::default();
    for r in own.iter().cloned().chain(child.records_so_far()) {
        history.push(r);
    }
    let leaderships = crate::checker::leader_sections(&history);
    missing_grants(&history, &leaderships).is_empty()
}

/// Check (d): once the workers are stopped (clients still connected), every
/// lock is free within one lease (plus a little slack for releases in
/// flight), and no lease grows meanwhile (nothing renews it).
async fn residue(cluster: &Cluster, lease: Duration) -> Vec<Violation> {
    let within = lease + Duration::from_millis(500);
    let deadline = Instant::now() + within;
    let mut first_seen: HashMap<String, KeyTtl> = HashMap::new();
    let mut violations = Vec::new();
    let inspector = match redisync::Client::connect(&cluster.direct().main).await {
        Ok(c) => c,
        Err(e) => {
            return vec![Violation::Residue {
                what: format!("cannot connect to inspect the main server: {e}"),
            }]
        }
    };
    let semaphores: Vec<_> = NAMES
        .iter()
        .chain(&GUARDED_NAMES)
        .chain(&SYNCED_NAMES)
        .map(|n| inspector.semaphore(n))
        .collect();
    loop {
        let mut held = Vec::new();
        for server in Server::ALL {
            let keys = match cluster.leased_keys(server).await {
                Ok(keys) => keys,
                Err(e) => {
                    held.push(e);
                    continue;
                }
            };
            for now in keys {
                if is_bookkeeping(&now.key) {
                    continue;
                }
                let name = format!("{server} {}", now.key);
                held.push(format!("{name} (PTTL {} ms)", now.pttl));
                let first = first_seen
                    .entry(name.clone())
                    .or_insert_with(|| now.clone());
                if grew(first, &now) {
                    violations.push(Violation::Residue {
                        what: format!(
                            "{name} renewed after every guard was gone: PTTL {} ms, then {} ms {} ms later",
                            first.pttl,
                            now.pttl,
                            now.asked.duration_since(first.answered).as_millis()
                        ),
                    });
                }
            }
        }
        for (semaphore, of) in semaphores.iter().zip(SEMAPHORE_PERMITS.iter().cycle()) {
            let of = *of;
            match semaphore.available_permits().await {
                Ok(n) if n < of => held.push(format!(
                    "semaphore {:?} has {n} of {of} permits free",
                    semaphore.name()
                )),
                Ok(_) | Err(redisync::Error::NotInitialized { .. }) => {}
                Err(e) => held.push(format!("{}: {e}", semaphore.name())),
            }
        }
        if held.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            violations.extend(held.into_iter().map(|h| Violation::Residue {
                what: format!(
                    "still held {} ms after the workers stopped: {h}",
                    within.as_millis()
                ),
            }));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = inspector.shutdown().await;
    violations.dedup();
    violations
}

/// Whether a key's lease end moved later between two readings (by more
/// than PTTL's millisecond rounding): the server time between them is at
/// least `later.asked - earlier.answered`.
fn grew(earlier: &KeyTtl, later: &KeyTtl) -> bool {
    if earlier.pttl < 0 || later.pttl < 0 {
        return false;
    }
    let between = i64::try_from(
        later
            .asked
            .saturating_duration_since(earlier.answered)
            .as_millis(),
    )
    .unwrap_or(i64::MAX);
    later.pttl.saturating_add(between) > earlier.pttl + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(pttl: i64, asked_ms: u64, answered_ms: u64, t0: Instant) -> KeyTtl {
        KeyTtl {
            key: "k".into(),
            pttl,
            asked: t0 + Duration::from_millis(asked_ms),
            answered: t0 + Duration::from_millis(answered_ms),
        }
    }

    #[test]
    fn a_lease_that_runs_down_did_not_grow_one_renewed_did() {
        let t0 = Instant::now();
        let first = reading(800, 0, 1, t0);
        assert!(!grew(&first, &reading(700, 101, 102, t0)));
        // A slow answer: read anywhere in [50, 90].
        assert!(!grew(&first, &reading(711, 50, 90, t0)));
        assert!(!grew(&first, &reading(760, 10, 60, t0)));
        // Renewed to a full 900 ms lease.
        assert!(grew(&first, &reading(900, 300, 301, t0)));
        assert!(grew(&first, &reading(790, 50, 51, t0)));
        // No TTL is not a lease.
        assert!(!grew(&first, &reading(-1, 50, 51, t0)));
    }
}
