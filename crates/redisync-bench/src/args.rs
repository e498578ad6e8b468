//! The command line.

use crate::opts::{Kind, Lease, Opts, Release, Scenario};
use crate::suite::{Suite, Which};
use std::time::Duration;

pub(crate) const USAGE: &str = "\
usage: redisync-bench --scenario S1|S2|S3 --ports P1[,P2,P3] [parameters]
       redisync-bench --scenario S5 --ports P1[,P2,...] [--cluster] [parameters]
       redisync-bench --scenario S6 --ports P1 --clients N [parameters]
       redisync-bench --all [--quick] [--repeats N]
       redisync-bench --compare [--quick] [--repeats N]
       redisync-bench --tls [--quick] [--repeats N]
  --all        every scenario and variant (Lock, FairLock, Semaphore(1), spin baseline,
               rslock, the floors, Redlock S4, S5 on one server and on a 3-primary
               cluster) on fresh servers, then the ratios to the spin baseline and to
               rslock and the S5 cluster / one-node ratio
  --compare    side by side with the peer rslock, interleaved: S1 (Lock, Lock released
               by drop, rslock, Lock's scripts, fred floor, raw floor), S2 (Lock, rslock),
               S6 (layouts 16x1 and 4x4: Lock, FairLock, Semaphore(1), RwLock (write),
               rslock, spin; plus
               the reference Lock 1x16), S4.1/S4.2 (Redlock, rslock over 3 servers);
               markdown tables of medians (min-max) and ratios to rslock on stderr
  --tls        the cost of TLS: S1 and S2 (Lock, fixed lease) over plain TCP and over
               TLS (rustls + ring, test CA) on fresh servers of the same binary,
               interleaved; markdown tables of medians (min-max) and TLS / plain ratios
  --repeats N  run S1, S2, S4, S5 and S6 N times (interleaved) and compare medians
               (default 5 with --compare and --tls, 1 with --all)
  --quick      small workloads (smoke run; numbers not comparable)
parameters (defaults per scenario as in BENCHMARKS.md):
  S1: --iterations 3000 --duration-s 5 [--ttl-ms 10000]
  S2: --workers 16 --hold-ms 2 --duration-s 5 --ttl-ms 10000
  S3: --requests 100 --hold-ms 300 --wait-s 35 --ttl-ms 60000
  S5: --workers 64 --keys 1000 --duration-s 5 --ttl-ms 10000 [--hold-ms 0]
      many keys: each worker loops on a uniformly random key bench:lock:<i>, i < keys
  S6: as S2 (--workers 16 --hold-ms 2 --duration-s 5 --ttl-ms 10000), spread over
      --clients N clients (each its own redisync Client / rslock LockManager / fred
      client for spin); one port; the line's label is the layout, e.g. \"S6 4x4\"
      (clients x workers per client)
  --cluster                S5 only: the ports are Redis Cluster nodes; connect with
                           redis-cluster://127.0.0.1:P1 (plain Lock); without it, one port
  --lease fixed|watchdog   fixed: try_lock(wait, Some(ttl)) (default); watchdog: try_lock(wait, None)
  --clients N              S2/S3/S6: spread the workers over N clients (default 1): redisync
                           Clients, rslock LockManagers or (spin) plain fred clients
  --release await|drop     S1 with --kind lock, one port: await unlock() (default) or drop
                           the guard (released in the background) and acquire again at once;
                           an acquisition that is not a new one (fencing token not above
                           the previous) or a lock still held 5 s after the window: not ok
  --kind lock|fair|semaphore|write|spin|rslock|fred-floor|raw-floor|script-floor
                           lock: redisync::Lock (default); fair: redisync::FairLock;
                           semaphore: redisync::Semaphore with 1 permit (watchdog-leased);
                           spin: the naive baseline (SET NX PX, sleep 50 ms, Lua release;
                           fixed lease, one port); rslock: the peer (fixed lease; three
                           ports: its Redlock); fred-floor / raw-floor: S1 floors, two
                           empty EVALSHA through fred / two hand-written PINGs;
                           script-floor: S1 with Lock's own scripts through fred, no engine";

/// What the command line asks for.
pub(crate) enum Command {
    One(Opts),
    /// `--all`, `--compare` or `--tls`.
    Suite(Suite),
    Help,
}

/// A suite, with only `--repeats N` among the options.
pub(crate) fn parse_suite(
    which: Which,
    quick: bool,
    pairs: &[(String, String)],
) -> Result<Command, String> {
    // Ratios between peers need repeats (the machine is noisy).
    let mut repeats = if which == Which::All { 1 } else { 5 };
    for (k, v) in pairs {
        if k == "repeats" {
            repeats = v
                .parse::<usize>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or(format!("--repeats {v}: a whole number >= 1"))?;
        } else {
            return Err(format!("--{k} cannot be combined with {}", which.flag()));
        }
    }
    Ok(Command::Suite(Suite {
        which,
        quick,
        repeats,
    }))
}

/// The suite the flags `--all`, `--compare` and `--tls` (`flags`, in the
/// order given) ask for, if any.
pub(crate) fn which_suite(flags: &[Which], cluster: bool) -> Result<Option<Which>, String> {
    let has = |w: Which| flags.contains(&w);
    if has(Which::All) && has(Which::Compare) {
        return Err("--all already includes --compare".into());
    }
    if has(Which::Tls) && flags.iter().any(|&w| w != Which::Tls) {
        return Err("--tls is a suite of its own: not with --all or --compare".into());
    }
    let which = flags.first().copied();
    if which.is_some() && cluster {
        return Err("--cluster only goes with --scenario S5".into());
    }
    Ok(which)
}

pub(crate) fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut suites = Vec::new();
    let mut quick = false;
    let mut cluster = false;
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let Some(name) = arg.strip_prefix("--") else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        match name {
            "all" => suites.push(Which::All),
            "compare" => suites.push(Which::Compare),
            "tls" => suites.push(Which::Tls),
            "quick" => quick = true,
            "cluster" => cluster = true,
            "help" => return Ok(Command::Help),
            _ => {
                let (key, value) = match name.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (
                        name.to_string(),
                        args.next().ok_or(format!("missing value for --{name}"))?,
                    ),
                };
                pairs.push((key, value));
            }
        }
    }
    if let Some(which) = which_suite(&suites, cluster)? {
        return parse_suite(which, quick, &pairs);
    }
    if quick {
        return Err("--quick only goes with --all, --compare or --tls".into());
    }
    let scenario = match pairs
        .iter()
        .find(|(k, _)| k == "scenario")
        .map(|(_, v)| v.as_str())
    {
        Some("S1") => Scenario::S1,
        Some("S2") => Scenario::S2,
        Some("S3") => Scenario::S3,
        Some("S5") => Scenario::S5,
        Some("S6") => Scenario::S6,
        _ => return Err("--scenario S1|S2|S3|S5|S6 is required".into()),
    };
    let mut o = Opts::defaults(scenario);
    o.cluster = cluster;
    let mut have_ports = false;
    for (key, value) in &pairs {
        let secs = |v: &str| -> Result<Duration, String> {
            let x: f64 = v.parse().map_err(|e| format!("--{key} {v}: {e}"))?;
            Duration::try_from_secs_f64(x).map_err(|e| format!("--{key} {v}: {e}"))
        };
        let count = |v: &str| -> Result<usize, String> {
            v.parse().map_err(|e| format!("--{key} {v}: {e}"))
        };
        match key.as_str() {
            "scenario" => {}
            "ports" => {
                o.ports = value
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        s.parse::<u16>()
                            .map_err(|e| format!("--ports {value}: {e}"))
                    })
                    .collect::<Result<_, _>>()?;
                have_ports = true;
            }
            "iterations" => o.iterations = count(value)?,
            "workers" => o.workers = count(value)?,
            "requests" => o.requests = count(value)?,
            "keys" => o.keys = count(value)?,
            "clients" => o.clients = count(value)?.max(1),
            "duration-s" => o.duration = secs(value)?,
            "wait-s" => o.wait = secs(value)?,
            "hold-ms" => o.hold = secs(value)? / 1000,
            "ttl-ms" => o.ttl = secs(value)? / 1000,
            "kind" => o.kind = Kind::parse(value)?,
            "lease" => o.lease = Lease::parse(value)?,
            "release" => o.release = Release::parse(value)?,
            _ => return Err(format!("unknown option --{key}")),
        }
    }
    if !have_ports {
        return Err("--ports is required".into());
    }
    check(&o)?;
    Ok(Command::One(o))
}

/// The combinations a single run does not support.
pub(crate) fn check(o: &Opts) -> Result<(), String> {
    if o.scenario == Scenario::S5 {
        if o.cluster && o.ports.is_empty() {
            return Err("S5 --cluster: --ports P1[,P2,...] (cluster nodes) is required".into());
        }
        if !o.cluster && o.ports.len() != 1 {
            return Err("S5 without --cluster runs on one server: --ports P1".into());
        }
        if o.kind != Kind::Lock {
            return Err("S5 measures redisync::Lock only (--kind lock)".into());
        }
        if o.clients != 1 {
            return Err("S5 uses one redisync Client (no --clients)".into());
        }
        if o.keys == 0 || o.workers == 0 {
            return Err("S5 needs --keys >= 1 and --workers >= 1".into());
        }
        return Ok(());
    }
    if o.cluster {
        return Err("--cluster only goes with --scenario S5".into());
    }
    if o.release == Release::Drop
        && (o.scenario != Scenario::S1 || o.kind != Kind::Lock || o.ports.len() != 1)
    {
        return Err("--release drop measures S1 with --kind lock on one server".into());
    }
    if o.scenario == Scenario::S6 && o.ports.len() != 1 {
        return Err("S6 runs on one server: --ports P1".into());
    }
    if o.scenario == Scenario::S6 && o.workers == 0 {
        return Err("S6 needs --workers >= 1".into());
    }
    if !matches!(o.ports.len(), 1 | 3) {
        return Err("--ports P1 or --ports P1,P2,P3 is required".into());
    }
    if matches!(o.kind, Kind::FredFloor | Kind::RawFloor | Kind::ScriptFloor)
        && (o.scenario != Scenario::S1 || o.ports.len() != 1)
    {
        return Err("the floors measure S1 on one server".into());
    }
    if o.kind == Kind::Rslock && o.lease == Lease::Watchdog {
        return Err("--kind rslock has no watchdog: use --lease fixed".into());
    }
    if o.kind == Kind::Spin {
        if o.redlock() {
            return Err("--kind spin runs on one server (one port)".into());
        }
        if o.lease == Lease::Watchdog {
            return Err("--kind spin has no watchdog: use --lease fixed".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opts::Transport;

    fn parse(s: &str) -> Result<Command, String> {
        parse_args(s.split_whitespace().map(String::from))
    }

    #[test]
    fn defaults_and_overrides() {
        let Ok(Command::One(o)) = parse("--scenario S3 --ports 7400") else {
            panic!("S3 did not parse");
        };
        assert_eq!(o.requests, 100);
        assert_eq!(o.hold, Duration::from_millis(300));
        assert_eq!(o.ttl, Duration::from_secs(60));
        let Ok(Command::One(o)) =
            parse("--scenario S2 --ports 1,2,3 --workers 4 --hold-ms 2.5 --lease watchdog")
        else {
            panic!("S2 did not parse");
        };
        assert_eq!(o.ports, vec![1, 2, 3]);
        assert_eq!(o.workers, 4);
        assert_eq!(o.hold, Duration::from_micros(2500));
        assert_eq!(o.lease, Lease::Watchdog);
        assert_eq!(o.clients, 1);
        let Ok(Command::One(o)) = parse("--scenario S2 --ports 1 --clients=4") else {
            panic!("--clients did not parse");
        };
        assert_eq!(o.clients, 4);
        assert_eq!(o.kind, Kind::Lock);
        let Ok(Command::One(o)) = parse("--scenario S2 --ports 1 --kind fair") else {
            panic!("--kind did not parse");
        };
        assert_eq!(o.kind, Kind::Fair);
        assert!(parse("--scenario S2 --ports 1 --kind bogus").is_err());
        let Ok(Command::One(o)) = parse("--scenario S3 --ports 1 --kind spin") else {
            panic!("--kind spin did not parse");
        };
        assert_eq!(o.kind, Kind::Spin);
        assert_eq!(o.variant(), "spin");
        assert_eq!(o.lease(), Some(Duration::from_secs(60)));
        assert!(matches!(
            parse("--all --quick"),
            Ok(Command::Suite(Suite {
                which: Which::All,
                quick: true,
                repeats: 1
            }))
        ));
        assert!(matches!(
            parse("--compare --repeats 3"),
            Ok(Command::Suite(Suite {
                which: Which::Compare,
                quick: false,
                repeats: 3
            }))
        ));
    }

    #[test]
    fn s6_and_release_by_drop_parse() {
        let Ok(Command::One(o)) = parse("--scenario S6 --ports 1 --clients 16 --kind rslock")
        else {
            panic!("S6 did not parse");
        };
        assert_eq!(o.scenario, Scenario::S6);
        assert_eq!((o.workers, o.clients), (16, 16));
        assert_eq!(o.hold, Duration::from_millis(2));
        assert_eq!(o.label_text().as_deref(), Some("S6 16x1"));
        let Ok(Command::One(o)) = parse("--scenario S6 --ports 1 --clients 3 --workers 16") else {
            panic!("S6 with uneven layout did not parse");
        };
        assert_eq!(
            o.label_text().as_deref(),
            Some("S6 16 workers over 3 clients")
        );
        assert!(parse("--scenario S6 --ports 1,2,3 --clients 4").is_err());
        assert!(parse("--scenario S6 --ports 1 --workers 0").is_err());
        let Ok(Command::One(o)) = parse("--scenario S1 --ports 1 --release drop") else {
            panic!("--release drop did not parse");
        };
        assert_eq!(o.release, Release::Drop);
        assert_eq!(o.variant(), "Lock (released by drop)");
        assert!(parse("--scenario S1 --ports 1 --release later").is_err());
        assert!(parse("--scenario S2 --ports 1 --release drop").is_err());
        assert!(parse("--scenario S1 --ports 1 --release drop --kind fair").is_err());
        assert!(parse("--scenario S1 --ports 1,2,3 --release drop").is_err());
        assert!(parse("--scenario S1 --ports 1 --release await --kind fair").is_ok());
    }

    #[test]
    fn floors_measure_s1_on_one_server() {
        assert!(parse("--scenario S1 --ports 1 --kind script-floor").is_ok());
        assert!(parse("--scenario S2 --ports 1 --kind script-floor").is_err());
        assert!(parse("--scenario S1 --ports 1,2,3 --kind script-floor").is_err());
    }

    #[test]
    fn spin_needs_one_port_and_a_fixed_lease() {
        assert!(parse("--scenario S1 --ports 1,2,3 --kind spin").is_err());
        assert!(parse("--scenario S2 --ports 1 --kind spin --lease watchdog").is_err());
        assert!(parse("--scenario S2 --ports 1 --kind spin --lease fixed").is_ok());
    }

    #[test]
    fn s5_defaults_and_cluster() {
        let Ok(Command::One(o)) = parse("--scenario S5 --ports 7000") else {
            panic!("S5 did not parse");
        };
        assert_eq!(o.scenario, Scenario::S5);
        assert_eq!((o.workers, o.keys), (64, 1000));
        assert_eq!(o.hold, Duration::ZERO);
        assert_eq!(o.duration, Duration::from_secs(5));
        assert_eq!(o.lease(), Some(Duration::from_secs(10)));
        assert!(!o.cluster);
        assert_eq!(o.variant(), "Lock");
        assert_eq!(o.params()["keys"], 1000);
        let Ok(Command::One(o)) = parse(
            "--scenario S5 --ports 7000,7001,7002 --cluster --workers 8 --keys=10 \
             --duration-s 1 --ttl-ms 5000 --hold-ms 1",
        ) else {
            panic!("S5 --cluster did not parse");
        };
        assert!(o.cluster);
        // Three cluster nodes are not a Redlock.
        assert!(!o.redlock());
        assert_eq!(o.ports, vec![7000, 7001, 7002]);
        assert_eq!((o.workers, o.keys), (8, 10));
        assert_eq!(o.hold, Duration::from_millis(1));
        assert_eq!(o.ttl, Duration::from_secs(5));
        assert_eq!(o.variant(), "Lock (cluster)");
        assert_eq!(o.params()["cluster"], true);
        // --cluster goes before or after the rest.
        assert!(parse("--cluster --scenario S5 --ports 7000").is_ok());
    }

    #[test]
    fn s5_rejects_bad_input() {
        // Needs ports: exactly one without --cluster, at least one with it.
        assert!(parse("--scenario S5").is_err());
        assert!(parse("--scenario S5 --cluster").is_err());
        assert!(parse("--scenario S5 --ports 1,2,3").is_err());
        assert!(parse("--scenario S5 --ports 1,2").is_err());
        // --cluster only with S5.
        assert!(parse("--scenario S1 --ports 1 --cluster").is_err());
        assert!(parse("--scenario S2 --ports 1,2,3 --cluster").is_err());
        assert!(parse("--all --cluster").is_err());
        assert!(parse("--compare --cluster").is_err());
        // Lock only, one client, something to lock.
        assert!(parse("--scenario S5 --ports 1 --kind spin").is_err());
        assert!(parse("--scenario S5 --ports 1 --kind fair").is_err());
        assert!(parse("--scenario S5 --ports 1 --clients 2").is_err());
        assert!(parse("--scenario S5 --ports 1 --keys 0").is_err());
        assert!(parse("--scenario S5 --ports 1 --workers 0").is_err());
        assert!(parse("--scenario S5 --ports 1 --keys many").is_err());
        assert!(parse("--scenario S5 --ports 1 --cluster --lease watchdog").is_ok());
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse("--scenario S9 --ports 1").is_err());
        assert!(parse("--scenario S1").is_err());
        assert!(parse("--scenario S1 --ports 1,2").is_err());
        assert!(parse("--scenario S1 --ports 1 --bogus 3").is_err());
        assert!(parse("--all --ports 1").is_err());
        assert!(parse("--all --compare").is_err());
        assert!(parse("--compare --repeats 0").is_err());
        assert!(parse("--compare --kind spin").is_err());
        assert!(parse("--scenario S1 --ports 1 --quick").is_err());
    }

    #[test]
    fn tls_parses_as_a_suite() {
        assert!(matches!(
            parse("--tls"),
            Ok(Command::Suite(Suite {
                which: Which::Tls,
                quick: false,
                repeats: 5
            }))
        ));
        assert!(matches!(
            parse("--tls --quick --repeats=7"),
            Ok(Command::Suite(Suite {
                which: Which::Tls,
                quick: true,
                repeats: 7
            }))
        ));
        assert!(matches!(
            parse("--repeats 6 --tls"),
            Ok(Command::Suite(Suite {
                which: Which::Tls,
                repeats: 6,
                ..
            }))
        ));
        // A suite of its own, with only --repeats and --quick.
        assert!(parse("--tls --all").is_err());
        assert!(parse("--compare --tls").is_err());
        assert!(parse("--tls --cluster").is_err());
        assert!(parse("--tls --repeats 0").is_err());
        assert!(parse("--tls --repeats many").is_err());
        assert!(parse("--tls --ports 1").is_err());
        assert!(parse("--tls --scenario S1").is_err());
        assert!(parse("--tls --kind spin").is_err());
        assert_eq!(
            parse("--tls --kind spin").err().as_deref(),
            Some("--kind cannot be combined with --tls")
        );
        // Not an option of a single run.
        assert!(parse("--scenario S1 --ports 1 --tls=yes").is_err());
        // Single runs stay plain.
        let Ok(Command::One(o)) = parse("--scenario S1 --ports 1") else {
            panic!("S1 did not parse");
        };
        assert_eq!(o.transport, Transport::Plain);
        assert!(o.tls.is_none());
    }
}
