//! One scenario run against servers that are already listening: connect,
//! warm up, run, and the run's JSON object.

use crate::opts::{Kind, Opts, Release, Scenario, Transport};
use crate::redis_stats::{self, RedisStats};
use crate::report::header;
use crate::scenarios::{run_s1, run_s2, run_s3, run_s5, warm_up, Handle, Target};
use crate::spin::SpinLock;
use crate::{peers, KEY};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// S5: connects one client (cluster or not), makes one `Lock` per key, runs
/// the scenario (which warms every key up) and merges its fields into `out`.
pub(crate) async fn run_many_keys(o: &Opts, out: &mut Map<String, Value>) -> Result<(), String> {
    let port = o.ports[0];
    let (url, stat_urls) = if o.cluster {
        (
            format!("redis-cluster://127.0.0.1:{port}"),
            redis_stats::cluster_primaries(port).await?,
        )
    } else {
        let url = format!("redis://127.0.0.1:{port}");
        (url.clone(), vec![url])
    };
    out.insert("instances".into(), json!(stat_urls.len()));
    out.insert("instance_urls".into(), json!(stat_urls));
    let stats = RedisStats::connect(&stat_urls).await?;
    let client = match redisync::Client::connect(&url).await {
        Ok(c) => c,
        Err(e) => {
            stats.quit().await;
            return Err(format!("connect {url}: {e}"));
        }
    };
    let targets: Vec<Target> = (0..o.keys)
        .map(|i| Target {
            lock: Handle::Lock(client.lock(&format!("{KEY}:{i}"))),
            lease: o.lease(),
        })
        .collect();
    let result = run_s5(&targets, &stats, o.workers, o.hold, o.duration).await;
    drop(targets);
    let shutdown = client.shutdown().await;
    stats.quit().await;
    out.extend(result?);
    shutdown.map_err(|e| format!("shutdown: {e}"))
}

/// The handle of a run that is not redisync's (the spin baseline, rslock, a
/// floor), connected; `None` for redisync's kinds.
pub(crate) async fn other_handle(o: &Opts, urls: &[String]) -> Result<Option<Handle>, String> {
    Ok(Some(match o.kind {
        Kind::Spin => Handle::Spin(SpinLock::connect(&urls[0], KEY).await?),
        Kind::Rslock => Handle::Rslock(peers::Rslock::new(urls, KEY)),
        Kind::FredFloor => Handle::Floor(peers::Floor::fred(&urls[0]).await?),
        Kind::RawFloor => Handle::Floor(peers::Floor::raw(o.ports[0]).await?),
        Kind::ScriptFloor => Handle::Floor(peers::Floor::scripts(&urls[0], KEY).await?),
        Kind::Lock | Kind::Fair | Kind::Semaphore | Kind::Write => return Ok(None),
    }))
}

/// What redisync's clients under test connect to: the servers' plain
/// `urls`, or (TLS) the TLS port of the one server.
pub(crate) fn client_urls(o: &Opts, urls: &[String]) -> Result<Vec<String>, String> {
    match (o.transport, &o.tls) {
        (Transport::Plain, _) => Ok(urls.to_vec()),
        (Transport::Tls, Some(tls)) if urls.len() == 1 && o.kind.is_redisync() => {
            Ok(vec![format!("rediss://127.0.0.1:{}", tls.port)])
        }
        (Transport::Tls, Some(_)) => Err("TLS runs measure redisync's kinds on one server".into()),
        (Transport::Tls, None) => Err("a TLS run without its TLS endpoint".into()),
    }
}

/// One redisync client under test on `url` (trusting the test CA for TLS).
pub(crate) async fn connect(o: &Opts, url: &str) -> Result<redisync::Client, String> {
    let mut builder = redisync::Client::builder(url);
    if let Some(tls) = &o.tls {
        builder = builder.tls_ca_pem(tls.ca_pem.clone());
    }
    builder
        .connect()
        .await
        .map_err(|e| format!("connect {url}: {e}"))
}

/// Connects, warms up, runs the scenario and merges its fields into `out`.
pub(crate) async fn run(o: &Opts, out: &mut Map<String, Value>) -> Result<(), String> {
    if o.scenario == Scenario::S5 {
        return run_many_keys(o, out).await;
    }
    let urls: Vec<String> = o
        .ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let stats = RedisStats::connect(&urls).await?;
    out.insert(
        "server_version".into(),
        json!(stats.server_version().await?),
    );
    let n_clients = if o.scenario == Scenario::S1 {
        1
    } else {
        o.clients
    };
    let client_urls = client_urls(o, &urls)?;
    let mut clients = Vec::with_capacity(n_clients * urls.len());
    let mut others = Vec::new();
    let mut targets = Vec::with_capacity(n_clients);
    for _ in 0..n_clients {
        if let Some(lock) = other_handle(o, &urls).await? {
            others.push(lock.clone());
            targets.push(Target {
                lock,
                lease: o.lease(),
            });
            continue;
        }
        let mut locks = Vec::with_capacity(urls.len());
        for url in &client_urls {
            let client = connect(o, url).await?;
            locks.push(client.lock(KEY));
            clients.push(client);
        }
        let last = &clients[clients.len() - 1];
        let lock = match (o.kind, o.redlock()) {
            (Kind::Lock, false) => Handle::Lock(locks.remove(0)),
            (Kind::Fair, false) => Handle::Fair(last.fair_lock(KEY)),
            (Kind::Semaphore, false) => Handle::Semaphore(last.semaphore(KEY)),
            (Kind::Write, false) => Handle::Write(last.rw_lock(KEY).write()),
            (Kind::Lock, true) => Handle::Redlock(
                redisync_redlock::Redlock::builder(locks)
                    .max_lease(o.max_lease())
                    .build()
                    .map_err(|e| format!("Redlock: {e}"))?,
            ),
            (
                Kind::Spin | Kind::Rslock | Kind::FredFloor | Kind::RawFloor | Kind::ScriptFloor,
                _,
            ) => {
                unreachable!("the baseline and the peers are set up above")
            }
            (kind, true) => return Err(format!("--kind {kind:?} has no Redlock (S4) variant")),
        };
        targets.push(Target {
            lock,
            lease: o.lease(),
        });
    }
    if o.kind == Kind::Semaphore {
        // One permit: the semaphore is a mutex (kept if a previous run set it).
        let set = clients[0].semaphore(KEY).try_set_permits(1).await;
        set.map_err(|e| format!("try_set_permits: {e}"))?;
    }
    if o.redlock() && o.kind == Kind::Lock {
        let waited = wait_for_restart_guard(&clients[..urls.len()], o.max_lease()).await?;
        out.insert("restart_guard_wait_s".into(), json!(secs_f(waited)));
    }
    let result = warm_up_and_run(o, &targets, &stats).await;
    let mut shutdown = Ok(());
    for client in &clients {
        if let Err(e) = client.shutdown().await {
            shutdown = Err(format!("shutdown: {e}"));
        }
    }
    for other in &others {
        match other {
            Handle::Spin(spin) => spin.quit().await,
            Handle::Floor(floor) => floor.quit().await,
            _ => {}
        }
    }
    stats.quit().await;
    out.extend(result?);
    shutdown
}

/// Warms every target up, then runs the (one-key) scenario.
pub(crate) async fn warm_up_and_run(
    o: &Opts,
    targets: &[Target],
    stats: &RedisStats,
) -> Result<Map<String, Value>, String> {
    for target in targets {
        warm_up(target).await?;
    }
    match o.scenario {
        Scenario::S1 => {
            let drop_guard = o.release == Release::Drop;
            run_s1(&targets[0], stats, o.iterations, o.duration, drop_guard).await
        }
        Scenario::S2 | Scenario::S6 => run_s2(targets, stats, o.workers, o.hold, o.duration).await,
        Scenario::S3 => run_s3(targets, stats, o.requests, o.hold, o.wait).await,
        Scenario::S5 => Err("S5 runs in run_many_keys".into()),
    }
}

/// Waits until every server has been up for `max_lease` as the Redlock's
/// restart guard reads it (whole seconds, so one more); returns how long.
pub(crate) async fn wait_for_restart_guard(
    clients: &[redisync::Client],
    max_lease: Duration,
) -> Result<Duration, String> {
    let started = std::time::Instant::now();
    let needed = max_lease + Duration::from_secs(1);
    loop {
        let mut youngest = Duration::MAX;
        for c in clients {
            // The reading Redlock's restart guard makes (support for
            // redisync-redlock, not a user API).
            let up = redisync::__private::server_uptime(c)
                .await
                .map_err(|e| format!("uptime: {e}"))?;
            youngest = youngest.min(up);
        }
        if youngest >= needed {
            return Ok(started.elapsed());
        }
        let left = needed.saturating_sub(youngest);
        eprintln!(
            "restart guard: the youngest server is up {youngest:?}; waiting {left:?} so it counts"
        );
        tokio::time::sleep(left.min(Duration::from_secs(1))).await;
    }
}

pub(crate) fn secs_f(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// One scenario run as one JSON object.
pub(crate) async fn run_one(o: &Opts) -> Map<String, Value> {
    let mut out = header(o);
    // The machine is shared: note its load next to every run.
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        eprintln!("{:?} start, loadavg {}", o.scenario, load.trim());
        let avg: Vec<&str> = load.split_whitespace().take(3).collect();
        out.insert("loadavg_start".into(), json!(avg));
    }
    match run(o, &mut out).await {
        Ok(()) => {
            let mut problems = Vec::new();
            let count = |k: &str| out.get(k).and_then(Value::as_u64).unwrap_or(0);
            let (violations, overlaps) = (count("violations"), count("overlaps"));
            if violations + overlaps > 0 {
                problems.push(format!(
                    "mutual exclusion violated (violations={violations}, overlaps={overlaps})"
                ));
            }
            if let Some(Value::Array(errors)) = out.get("errors") {
                problems.extend(errors.iter().filter_map(Value::as_str).map(String::from));
            }
            if count("fencing_token_regressions") > 0 {
                eprintln!("warning: fencing tokens did not grow with every new holder");
            }
            if problems.is_empty() {
                out.insert("ok".into(), json!(true));
            } else {
                out.insert("error".into(), json!(problems.join("; ")));
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            out.insert("error".into(), json!(e));
        }
    }
    out
}
