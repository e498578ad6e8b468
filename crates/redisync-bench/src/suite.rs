//! The suites `--all`, `--compare` and `--tls`: their runs, each on fresh
//! servers, then their tables.

use crate::compare;
use crate::opts::{Kind, Lease, Opts, Release, Scenario, TlsEndpoint, Transport};
use crate::report::{emit, header, suite_failed, utc_date};
use crate::run::run_one;
use serde_json::{json, Map, Value};
use std::process::ExitCode;
use std::time::Duration;

/// Which suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    /// `--all`: every scenario and variant.
    All,
    /// `--compare`: side by side with rslock.
    Compare,
    /// `--tls`: S1 and S2 with `Lock` over TLS and over plain TCP.
    Tls,
}

impl Which {
    pub(crate) fn flag(self) -> &'static str {
        match self {
            Which::All => "--all",
            Which::Compare => "--compare",
            Which::Tls => "--tls",
        }
    }
}

/// The runs of `--all` / `--compare` / `--tls`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Suite {
    pub(crate) which: Which,
    pub(crate) quick: bool,
    /// Runs of each S1/S2/S4 row (S3 runs once).
    pub(crate) repeats: usize,
}

/// The one-server runs of a suite, in order: every S1 row `repeats` times
/// (variants interleaved), then every S2 row likewise, then S3 once per
/// variant. `--compare`: `Lock` and the spin baseline; `--all`: also
/// `FairLock`, `Semaphore(1)` and (S2 only) `Lock` with the watchdog lease.
pub(crate) fn suite_runs(suite: Suite) -> Vec<Opts> {
    if suite.which == Which::Tls {
        return tls_runs(suite);
    }
    let (s1, s2) = s1_s2(suite);
    let mut s3 = Opts::defaults(Scenario::S3);
    if suite.quick {
        s3.requests = 20;
        s3.hold = Duration::from_millis(50);
    }
    let compare_only = suite.which == Which::Compare;
    let mut variants = vec![(Kind::Lock, Lease::Fixed), (Kind::Rslock, Lease::Fixed)];
    if !compare_only {
        variants.extend([
            (Kind::Fair, Lease::Fixed),
            (Kind::Semaphore, Lease::Watchdog),
            (Kind::Spin, Lease::Fixed),
        ]);
    }
    let floors = [
        (Kind::ScriptFloor, Lease::Fixed),
        (Kind::FredFloor, Lease::Fixed),
        (Kind::RawFloor, Lease::Fixed),
    ];
    let with = |base: &Opts, (kind, lease): (Kind, Lease)| Opts {
        lease,
        kind,
        ..base.clone()
    };
    let dropped = Opts {
        release: Release::Drop,
        ..s1.clone()
    };
    let mut runs = Vec::new();
    for _ in 0..suite.repeats {
        for &v in variants.iter().chain(&floors) {
            runs.push(with(&s1, v));
            // `--compare`: the dropped guard next to the awaited one.
            if v == (Kind::Lock, Lease::Fixed) && compare_only {
                runs.push(dropped.clone());
            }
        }
    }
    for _ in 0..suite.repeats {
        for &v in &variants {
            runs.push(with(&s2, v));
            if v == (Kind::Lock, Lease::Fixed) && !compare_only {
                runs.push(with(&s2, (Kind::Lock, Lease::Watchdog)));
            }
        }
    }
    if compare_only {
        runs.extend(s6_runs(suite));
    } else {
        runs.extend(variants.iter().map(|&v| with(&s3, v)));
    }
    runs
}

/// S1 and S2 with their defaults, or (`--quick`) small: 500 iterations,
/// a 2 s window.
pub(crate) fn s1_s2(suite: Suite) -> (Opts, Opts) {
    let mut s1 = Opts::defaults(Scenario::S1);
    let mut s2 = Opts::defaults(Scenario::S2);
    if suite.quick {
        s1.iterations = 500;
        s2.duration = Duration::from_secs(2);
    }
    (s1, s2)
}

/// The runs of `--tls`: S1, then S2, with `Lock` and a fixed lease, over
/// plain TCP and over TLS alternately (plain, TLS, plain, TLS, ...),
/// `repeats` times each.
pub(crate) fn tls_runs(suite: Suite) -> Vec<Opts> {
    let (s1, s2) = s1_s2(suite);
    let mut runs = Vec::new();
    for plain in [s1, s2] {
        let tls = Opts {
            transport: Transport::Tls,
            ..plain.clone()
        };
        for _ in 0..suite.repeats {
            runs.extend([plain.clone(), tls.clone()]);
        }
    }
    runs
}

/// S6's window (S2's is 5 s; see `s6_runs`).
pub(crate) const S6_DURATION: Duration = Duration::from_secs(5);

/// The S6 layouts of `--compare`: (clients, workers per client).
pub(crate) const S6_LAYOUTS: [(usize, usize); 2] = [(16, 1), (4, 4)];

/// The S6 runs of `--compare`, `repeats` times, every variant of every
/// layout interleaved: first the reference `Lock` in one client (1x16, S2's
/// `Lock`), then per layout `Lock`, `FairLock`, `Semaphore(1)`, rslock and
/// the spin baseline.
pub(crate) fn s6_runs(suite: Suite) -> Vec<Opts> {
    let mut s6 = Opts::defaults(Scenario::S6);
    s6.duration = if suite.quick {
        Duration::from_secs(2)
    } else {
        S6_DURATION
    };
    let variants = [
        (Kind::Lock, Lease::Fixed),
        (Kind::Fair, Lease::Fixed),
        (Kind::Semaphore, Lease::Watchdog),
        (Kind::Write, Lease::Fixed),
        (Kind::Rslock, Lease::Fixed),
        (Kind::Spin, Lease::Fixed),
    ];
    let layout = |clients: usize, per_client: usize, (kind, lease): (Kind, Lease)| Opts {
        clients,
        workers: clients * per_client,
        kind,
        lease,
        ..s6.clone()
    };
    let mut runs = Vec::new();
    for _ in 0..suite.repeats {
        runs.push(layout(1, 16, (Kind::Lock, Lease::Fixed)));
        for (clients, per_client) in S6_LAYOUTS {
            runs.extend(variants.iter().map(|&v| layout(clients, per_client, v)));
        }
    }
    runs
}

/// The S4 runs: S1 and S2 (fixed lease) through a Redlock and through
/// rslock over three servers, `repeats` times each, interleaved; none for
/// `--tls`.
pub(crate) fn s4_runs(suite: Suite) -> Vec<Opts> {
    if suite.which == Which::Tls {
        return Vec::new();
    }
    let (mut s41, mut s42) = s1_s2(suite);
    s41.label = Some("S4.1");
    s42.label = Some("S4.2");
    let peer = |o: &Opts| Opts {
        kind: Kind::Rslock,
        ..o.clone()
    };
    let mut runs = Vec::new();
    for o in [s41, s42] {
        for _ in 0..suite.repeats {
            runs.extend([o.clone(), peer(&o)]);
        }
    }
    runs
}

/// The S5 runs of `--all`: one server, then a 3-primary cluster, `repeats`
/// times (interleaved); none for `--compare` and `--tls`.
pub(crate) fn s5_runs(suite: Suite) -> Vec<Opts> {
    if suite.which != Which::All {
        return Vec::new();
    }
    let mut one = Opts::defaults(Scenario::S5);
    if suite.quick {
        one.duration = Duration::from_secs(1);
    }
    let cluster = Opts {
        cluster: true,
        ..one.clone()
    };
    (0..suite.repeats)
        .flat_map(|_| [one.clone(), cluster.clone()])
        .collect()
}

pub(crate) async fn run_suite(suite: Suite) -> ExitCode {
    let mut all_ok = true;
    let mut rows = Vec::new();
    // S4's fresh servers start now, so they are older than the restart
    // guard's max_lease by the time their runs come.
    let mut s4 = Vec::new();
    for o in s4_runs(suite) {
        s4.push((o, redisync_testkit::RedisNodes::start(3).await));
    }
    // `--tls`: one set of test certificates for every TLS server.
    let certs = match suite.which {
        Which::Tls => match redisync_testkit::TestCerts::generate() {
            Ok(certs) => Some(certs),
            Err(e) => return suite_failed(&format!("test certificates: {e}")),
        },
        Which::All | Which::Compare => None,
    };
    for mut o in suite_runs(suite) {
        let server = match start_server(&mut o, certs.as_ref()).await {
            Ok(server) => server,
            Err(e) => return suite_failed(&e),
        };
        eprintln!(
            "running {} ({}) against {}",
            o.label_text()
                .unwrap_or_else(|| format!("{:?}", o.scenario)),
            o.variant(),
            server.tls_url().unwrap_or_else(|| server.url())
        );
        let out = run_one(&o).await;
        drop(server);
        all_ok &= emit(&out);
        rows.push(out);
    }
    for (mut o, nodes) in s4 {
        o.ports = nodes.ports();
        eprintln!(
            "running {} ({:?} through a Redlock, lease {:?}) against ports {:?}",
            o.label.unwrap_or("S4"),
            o.scenario,
            o.lease,
            o.ports
        );
        let out = run_one(&o).await;
        drop(nodes);
        all_ok &= emit(&out);
        rows.push(out);
    }
    for mut o in s5_runs(suite) {
        all_ok &= run_s5_fresh(&mut o, &mut rows).await;
    }
    match suite.which {
        Which::All => eprintln!("{}", compare::peer_table(&rows)),
        Which::Compare => {
            eprintln!("{}", peer_table_header(&rows, suite));
            eprintln!("{}", compare::peer_table(&rows));
        }
        Which::Tls => {
            eprintln!("{}", peer_table_header(&rows, suite));
            eprintln!("{}", compare::TLS_TABLE.render(&rows));
        }
    }
    let s6 = compare::s6_table(&rows);
    if !s6.is_empty() {
        eprintln!("{s6}");
    }
    let comparisons = compare::comparisons(&rows);
    for c in &comparisons {
        println!("{c}");
    }
    if !comparisons.is_empty() {
        eprint!("{}", compare::summary(&comparisons));
    }
    if let Some(scaling) = compare::scaling(&rows) {
        println!("{scaling}");
        eprint!("{}", compare::scaling_summary(&scaling));
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A fresh server for one run of a suite: plain, or (`Transport::Tls`) with
/// a TLS port too, whose endpoint goes into `o.tls`; `o.ports` is the plain
/// port either way.
pub(crate) async fn start_server(
    o: &mut Opts,
    certs: Option<&redisync_testkit::TestCerts>,
) -> Result<redisync_testkit::RedisServer, String> {
    let server = match (o.transport, certs) {
        (Transport::Plain, _) => redisync_testkit::RedisServer::start().await,
        (Transport::Tls, Some(certs)) => {
            let server = redisync_testkit::RedisServer::try_start_tls(certs, false, &[]).await;
            let server = server.map_err(|e| format!("TLS server: {e}"))?;
            o.tls = Some(TlsEndpoint {
                port: server.tls_port().ok_or("TLS server without a TLS port")?,
                ca_pem: certs.ca_pem.clone(),
            });
            server
        }
        (Transport::Tls, None) => return Err("a TLS run without certificates".into()),
    };
    o.ports = vec![server.port()];
    Ok(server)
}

/// One S5 run of a suite on a fresh server or a fresh 3-primary cluster;
/// emits its line, keeps it in `rows` and says whether it was ok.
pub(crate) async fn run_s5_fresh(o: &mut Opts, rows: &mut Vec<Map<String, Value>>) -> bool {
    let out = if o.cluster {
        match redisync_testkit::RedisCluster::try_start(3, 0).await {
            Ok(cluster) => {
                o.ports = cluster
                    .nodes()
                    .iter()
                    .map(redisync_testkit::RedisServer::port)
                    .collect();
                eprintln!(
                    "running S5 (many keys) against the cluster {}",
                    cluster.url()
                );
                let out = run_one(o).await;
                drop(cluster);
                out
            }
            Err(e) => {
                let mut out = header(o);
                out.insert("error".into(), json!(format!("cluster start: {e}")));
                out
            }
        }
    } else {
        let server = redisync_testkit::RedisServer::start().await;
        o.ports = vec![server.port()];
        eprintln!("running S5 (many keys) against {}", server.url());
        let out = run_one(o).await;
        drop(server);
        out
    };
    let ok = emit(&out);
    rows.push(out);
    ok
}

/// What the peer table was measured on: the date, the machine's cores, the
/// server's version and the load at the start of the runs (min-max).
fn peer_table_header(rows: &[Map<String, Value>], suite: Suite) -> String {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let loads: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.get("loadavg_start")?.get(0)?.as_str()?.parse().ok())
        .collect();
    let lo = loads.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = loads.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let server = rows
        .iter()
        .find_map(|r| r.get("server_version")?.as_str().map(String::from))
        .unwrap_or_else(|| "?".into());
    let what = match suite.which {
        Which::Tls => {
            "min-max in parentheses; TLS: rustls (ring) client, server certificate from \
             a test CA, no client certificate; x plain = TLS / plain of the medians \
             (min-max of the per-repeat pairs in parentheses)"
        }
        Which::All | Which::Compare => "headline min-max in parentheses",
    };
    format!(
        "redisync-bench {}, {} (UTC): {cores} cores, server {server}, 1-min load \
         {lo:.2}-{hi:.2} at the starts of the runs; medians of {} interleaved repeats, \
         {what}",
        suite.which.flag(),
        utc_date(),
        suite.repeats
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // `header` reads the runtime's worker count.
    #[tokio::test]
    async fn compare_adds_s6_and_the_dropped_guard() {
        let compare = Suite {
            which: Which::Compare,
            quick: false,
            repeats: 2,
        };
        let runs = suite_runs(compare);
        // Then S6, every layout and variant interleaved per repeat.
        let s6: Vec<String> = runs[16..]
            .iter()
            .map(|o| format!("{} {}", o.label_text().unwrap_or_default(), o.variant()))
            .collect();
        let one_repeat = [
            "S6 1x16 Lock",
            "S6 16x1 Lock",
            "S6 16x1 FairLock",
            "S6 16x1 Semaphore(1)",
            "S6 16x1 RwLock (write)",
            "S6 16x1 rslock",
            "S6 16x1 spin",
            "S6 4x4 Lock",
            "S6 4x4 FairLock",
            "S6 4x4 Semaphore(1)",
            "S6 4x4 RwLock (write)",
            "S6 4x4 rslock",
            "S6 4x4 spin",
        ];
        assert_eq!(s6, [one_repeat, one_repeat].concat());
        assert_eq!(
            runs[16].label_text().as_deref(),
            Some(compare::S6_REFERENCE)
        );
        assert!(runs[16..].iter().all(|o| o.scenario == Scenario::S6
            && o.workers == 16
            && o.hold == Duration::from_millis(2)
            && o.ttl == Duration::from_secs(10)
            && o.duration == S6_DURATION));
        // S6 rows say their layout, clients and workers.
        let h = header(&runs[23]);
        assert_eq!(h["scenario"], "S6");
        assert_eq!(h["label"], "S6 4x4");
        assert_eq!(
            (h["clients"].as_u64(), h["workers"].as_u64()),
            (Some(4), Some(4 * 4))
        );
        assert_eq!(h["params"]["clients"], 4);
        // The dropped guard: S1, Lock, fixed lease; the awaited row unchanged.
        let dropped = &runs[1];
        assert_eq!(dropped.release, Release::Drop);
        assert_eq!(header(dropped)["params"]["release"], "drop");
        assert!(header(&runs[0])["params"].get("release").is_none());
    }

    #[test]
    fn suites() {
        let compare = Suite {
            which: Which::Compare,
            quick: false,
            repeats: 2,
        };
        let runs = suite_runs(compare);
        let names: Vec<String> = runs
            .iter()
            .map(|o| format!("{:?} {}", o.scenario, o.variant()))
            .collect();
        assert_eq!(
            names[..16],
            [
                "S1 Lock",
                "S1 Lock (released by drop)",
                "S1 rslock",
                "S1 Lock's scripts",
                "S1 fred floor",
                "S1 raw floor",
                "S1 Lock",
                "S1 Lock (released by drop)",
                "S1 rslock",
                "S1 Lock's scripts",
                "S1 fred floor",
                "S1 raw floor",
                "S2 Lock",
                "S2 rslock",
                "S2 Lock",
                "S2 rslock"
            ]
        );
        let s4: Vec<String> = s4_runs(compare)
            .iter()
            .map(|o| format!("{} {:?}", o.label.unwrap_or("?"), o.kind))
            .collect();
        assert_eq!(
            s4,
            [
                "S4.1 Lock",
                "S4.1 Rslock",
                "S4.1 Lock",
                "S4.1 Rslock",
                "S4.2 Lock",
                "S4.2 Rslock",
                "S4.2 Lock",
                "S4.2 Rslock"
            ]
        );
        let all = Suite {
            which: Which::All,
            quick: true,
            repeats: 1,
        };
        let names: Vec<String> = suite_runs(all)
            .iter()
            .map(|o| format!("{:?} {}", o.scenario, o.variant()))
            .collect();
        assert_eq!(
            names,
            [
                "S1 Lock",
                "S1 rslock",
                "S1 FairLock",
                "S1 Semaphore(1)",
                "S1 spin",
                "S1 Lock's scripts",
                "S1 fred floor",
                "S1 raw floor",
                "S2 Lock",
                "S2 Lock (watchdog)",
                "S2 rslock",
                "S2 FairLock",
                "S2 Semaphore(1)",
                "S2 spin",
                "S3 Lock",
                "S3 rslock",
                "S3 FairLock",
                "S3 Semaphore(1)",
                "S3 spin"
            ]
        );
        assert!(s5_runs(compare).is_empty());
        let s5: Vec<String> = s5_runs(all).iter().map(Opts::variant).collect();
        assert_eq!(s5, ["Lock", "Lock (cluster)"]);
        assert!(s5_runs(all)
            .iter()
            .all(|o| o.scenario == Scenario::S5 && o.duration == Duration::from_secs(1)));
        let three = Suite { repeats: 3, ..all };
        let s5: Vec<bool> = s5_runs(three).iter().map(|o| o.cluster).collect();
        assert_eq!(s5, [false, true, false, true, false, true]);
        let s4: Vec<_> = s4_runs(all).iter().map(|o| o.label).collect();
        assert_eq!(s4, [Some("S4.1"), Some("S4.1"), Some("S4.2"), Some("S4.2")]);
        let mut s41 = s4_runs(all).remove(0);
        s41.ports = vec![1, 2, 3]; // set by run_suite
        assert_eq!(s41.variant(), "Redlock(3)");
    }

    // `header` reads the runtime's worker count.
    #[tokio::test]
    async fn tls_interleaves_plain_and_tls_of_s1_then_s2() {
        let suite = Suite {
            which: Which::Tls,
            quick: false,
            repeats: 3,
        };
        let runs = suite_runs(suite);
        let names: Vec<String> = runs
            .iter()
            .map(|o| format!("{:?} {}", o.scenario, o.variant()))
            .collect();
        let s1 = ["S1 Lock", "S1 Lock (TLS)"];
        let s2 = ["S2 Lock", "S2 Lock (TLS)"];
        assert_eq!(names, [s1, s1, s1, s2, s2, s2].concat());
        // The same workload either way: S1's and S2's defaults, fixed lease.
        for pair in runs.chunks(2) {
            let (plain, tls) = (&pair[0], &pair[1]);
            assert_eq!(plain.transport, Transport::Plain);
            assert_eq!(tls.transport, Transport::Tls);
            assert_eq!(header(plain)["params"], header(tls)["params"]);
            assert_eq!(header(plain)["settings"], header(tls)["settings"]);
            assert_eq!((plain.kind, plain.lease), (Kind::Lock, Lease::Fixed));
            assert_eq!((tls.kind, tls.lease), (Kind::Lock, Lease::Fixed));
            assert!(plain.tls.is_none() && tls.tls.is_none(), "set at start");
        }
        assert_eq!(runs[0].iterations, 3000);
        assert_eq!(runs[6].duration, Duration::from_secs(5));
        assert_eq!(header(&runs[0])["transport"], "plain");
        assert_eq!(header(&runs[1])["transport"], "tls");
        assert_eq!(header(&runs[1])["variant"], "Lock (TLS)");
        // --quick: the suites' small workloads; no S3, S4, S5 or S6.
        let quick = suite_runs(Suite {
            quick: true,
            repeats: 1,
            ..suite
        });
        assert_eq!(quick.len(), 4);
        assert_eq!(quick[1].iterations, 500);
        assert_eq!(quick[3].duration, Duration::from_secs(2));
        assert!(s4_runs(suite).is_empty());
        assert!(s5_runs(suite).is_empty());
    }
}
