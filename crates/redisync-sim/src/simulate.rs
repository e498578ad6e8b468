//! One simulated run: the torture workload (`redisync-torture`) on real
//! redisync clients whose links go to simulated servers ([`World`]), on a
//! paused current-thread runtime, with faults from the seed; then the
//! torture test's checker over its history, and a look at what is left in
//! the servers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use redisync::Client;
use redisync_torture::checker::{check, Report, Violation};
use redisync_torture::{
    ClientSet, Connect, Counts, Coverage, History, Kill, Kind, Pause, Record, Section, Server,
    Settings,
};

use crate::world::{Faults, Scheduled, World};
use crate::Reply;

/// The client sets of a run, one simulated process each: two plain ones
/// and two with the restart guard on (names of their own, which they
/// contend for; a restart that loses data needs no excuse between them).
pub const SETS: [&str; 4] = ["c0.direct", "c1.direct", "c2.guarded", "c3.guarded"];

/// Servers: the main one, then three Redlock nodes.
const SERVERS: usize = 4;

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Decides every choice of the run (workload and faults).
    pub seed: u64,
    /// Virtual time the workload runs (then a quiet period of two leases).
    pub run_for: Duration,
    /// The watchdog lease of every client.
    pub lease: Duration,
    /// Tasks per family of locks per client set.
    pub tasks_per_family: usize,
    /// The faults.
    pub faults: Faults,
}

impl SimConfig {
    /// The run of `seed` used by the tests and the explorer: 60 virtual
    /// seconds with every fault kind.
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            run_for: Duration::from_secs(60),
            lease: Duration::from_millis(900),
            tasks_per_family: 1,
            faults: Faults::all(),
        }
    }
}

/// What a run found.
#[derive(Debug)]
pub struct SimOutcome {
    /// The run's seed.
    pub seed: u64,
    /// The checker's report, with the run's own violations (tasks that
    /// panicked or hung, holds left in the servers, kinds never granted).
    pub report: Report,
    /// Commands the simulated servers ran.
    pub commands: u64,
    /// Per kind, what the workload did.
    pub counts: BTreeMap<Kind, Counts>,
    /// Calls per operation and ending.
    pub coverage: Coverage,
    /// The faults applied, with their virtual times (µs).
    pub schedule: Vec<(u64, Scheduled)>,
    /// A digest of the history (sections, works, probes): equal for a
    /// replay of the seed.
    pub digest: u64,
    /// The history's lines (sections, works, probes, faults), for a look
    /// into a violation.
    pub lines: Vec<String>,
}

impl SimOutcome {
    /// Whether the run broke no rule.
    pub fn ok(&self) -> bool {
        self.report.violations.is_empty()
    }
}

/// Runs `config` on a fresh paused current-thread runtime.
///
/// # Errors
/// When the runtime or the workload cannot be set up.
pub fn simulate(config: &SimConfig) -> Result<SimOutcome, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| format!("cannot build the runtime: {e}"))?;
    runtime.block_on(simulate_on(config))
}

/// A client of the simulated process `group` on server `server`.
fn sim_client(
    world: &World,
    server: usize,
    group: usize,
    settings: Settings,
    guarded: bool,
) -> redisync::Result<Client> {
    let mut builder = Client::builder("redis://simulated")
        .watchdog_timeout(settings.lease)
        .command_timeout(settings.command_timeout());
    if guarded {
        builder = builder.restart_guard(settings.max_lease());
    }
    let id = uuid::Uuid::from_u64_pair(world.next_u64(), world.next_u64());
    builder.connect_on(world.link(server, group), id)
}

async fn simulate_on(config: &SimConfig) -> Result<SimOutcome, String> {
    redisync_torture::use_virtual_clock();
    let world = World::new(config.seed, SERVERS, config.faults.clone());
    // 20 % of sections end by dropping their guards, as in the torture test.
    let settings = Settings::new(config.lease, 20);
    redisync_redlock::use_virtual_clock(
        u64::try_from(crate::DEFAULT_START_US).unwrap_or(0),
        config.seed,
    );
    let mut sets = Vec::new();
    for (group, label) in SETS.iter().enumerate() {
        let guarded = label.ends_with(".guarded");
        let client = |server| {
            sim_client(&world, server, group, settings, guarded).map_err(|e| e.to_string())
        };
        let main = client(0)?;
        let nodes = (1..SERVERS).map(client).collect::<Result<Vec<_>, _>>()?;
        let fresh_world = world.clone();
        let connect: Connect = Arc::new(move || {
            let made = sim_client(&fresh_world, 0, group, settings, guarded);
            Box::pin(async move { made })
        });
        sets.push(ClientSet {
            label: (*label).to_owned(),
            connect,
            main,
            nodes,
        });
    }
    let faults = tokio::spawn(world.clone().run_schedule(SETS.len()));
    let stop_faults = async {
        tokio::time::sleep(config.run_for).await;
        faults.abort();
    };
    let workload = redisync_torture::run_workload(
        sets,
        settings,
        config.tasks_per_family,
        config.seed,
        config.run_for,
    );
    let (ran, ()) = futures::future::join(workload, stop_faults).await;
    let (run, sets) = ran?;
    let schedule = world.schedule();
    let history = history_of(run.records, &schedule, config.lease);
    let mut report = check(&history);
    let leaderships = redisync_torture::checker::leader_sections(&history);
    let labels: Vec<String> = SETS.iter().map(|s| (*s).to_owned()).collect();
    let mut own: Vec<String> = run.violations;
    own.extend(redisync_torture::missing_grants_of(
        &history,
        &leaderships,
        &labels,
    ));
    // What is left once every client is gone and the longest lease ran out.
    for set in &sets {
        set.shutdown().await;
    }
    tokio::time::sleep(settings.max_lease() + Duration::from_secs(1)).await;
    for server in 0..SERVERS {
        if let Reply::Array(keys) = world.command(server, &["keys", "redisync:*"]) {
            for key in keys.iter().filter_map(Reply::as_bytes) {
                let key = String::from_utf8_lossy(key);
                if !redisync_torture::is_bookkeeping(&key) {
                    own.push(format!("server {server}: {key} is still held after every client left and every lease ended"));
                }
            }
        }
    }
    report
        .violations
        .extend(own.into_iter().map(|what| Violation::Run { what }));
    let lines = lines_of(&history, &schedule);
    Ok(SimOutcome {
        seed: config.seed,
        report,
        commands: world.commands(),
        counts: run.counts,
        coverage: run.coverage,
        schedule,
        digest: digest(&lines),
        lines,
    })
}

/// The history the checker reads: the workload's records, the restarts
/// that lost data (kills), the stalls of simulated processes (pauses), and
/// when faults were active.
fn history_of(records: Vec<Record>, schedule: &[(u64, Scheduled)], lease: Duration) -> History {
    let mut history = History::default();
    for r in records {
        history.push(r);
    }
    // A task that stalls its runtime stalls every simulated process: they
    // share the one thread.
    let stalls = std::mem::take(&mut history.stalls);
    for stall in stalls {
        for set in SETS {
            history.stalls.push(Pause {
                process: set.to_owned(),
                ..stall.clone()
            });
        }
    }
    let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    for (at, fault) in schedule {
        let end = match fault {
            Scheduled::Restart(server, ..) => {
                history.kills.push(Kill {
                    server: if *server == 0 {
                        Server::Main
                    } else {
                        Server::Node(server - 1)
                    },
                    at_us: *at,
                    failover: false,
                });
                *at + us(lease)
            }
            Scheduled::Stall(group, d) => {
                let process = SETS[*group].split('.').next().unwrap_or("").to_owned();
                history.pauses.push(Pause {
                    process,
                    from_us: *at,
                    to_us: *at + us(*d),
                });
                *at + us(*d)
            }
            Scheduled::Pause(_, d) => *at + us(*d),
            Scheduled::ClockStep(..) => *at + us(lease),
            Scheduled::Save(_) => continue,
        };
        history.faults.push((*at, end));
    }
    history
}

/// The history as lines, in a stable order.
fn lines_of(history: &History, schedule: &[(u64, Scheduled)]) -> Vec<String> {
    let mut lines: Vec<String> = history.sections.iter().map(Section::to_line).collect();
    lines.extend(history.works.iter().map(redisync_torture::Work::to_line));
    lines.extend(history.probes.iter().map(redisync_torture::Probe::to_line));
    lines.extend(history.forces.iter().map(redisync_torture::Force::to_line));
    lines.extend(
        history
            .stalls
            .iter()
            .map(|p| format!("T\t{}\t{}\t{}", p.process, p.from_us, p.to_us)),
    );
    lines.sort();
    lines.extend(schedule.iter().map(|(at, f)| format!("F\t{at}\t{f:?}")));
    lines
}

/// FNV-1a over the lines.
fn digest(lines: &[String]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for line in lines {
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
