//! The command line (clap): the flags, then the rules clap does not state,
//! checked after parsing in the order the hand-written parser had them, with
//! its messages.

use crate::opts::{Kind, Lease, Opts, Release, Scenario};
use crate::suite::{Suite, Which};
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};
use std::ffi::OsString;
use std::time::Duration;

const USAGE: &str = "\
redisync-bench --scenario S1|S2|S3 --ports P1[,P2,P3] [parameters]
       redisync-bench --scenario S5 --ports P1[,P2,...] [--cluster] [parameters]
       redisync-bench --scenario S6 --ports P1 --clients N [parameters]
       redisync-bench --all [--quick] [--repeats N]
       redisync-bench --compare [--quick] [--repeats N]
       redisync-bench --tls [--quick] [--repeats N]";

const AFTER_HELP: &str = "\
Defaults per scenario (as in BENCHMARKS.md):
  S1: --iterations 3000 --duration-s 5 [--ttl-ms 10000]
  S2: --workers 16 --hold-ms 2 --duration-s 5 --ttl-ms 10000
  S3: --requests 100 --hold-ms 300 --wait-s 35 --ttl-ms 60000
  S5: --workers 64 --keys 1000 --duration-s 5 --ttl-ms 10000 [--hold-ms 0]
  S6: as S2, spread over --clients N clients; one port; the line's label is the
      layout, e.g. \"S6 4x4\" (clients x workers per client)
With --ports: one JSON line on stdout, exit 0 even when it says \"ok\": false.
Three ports (not S5): the scenario through a Redlock over the three servers (S4).
A bad command line: one JSON line with the error, exit 2.";

/// Benchmark scenarios S1-S6 for redisync (see BENCHMARKS.md).
// `args_override_self`: a repeated option keeps its last value, as before.
// `allow_negative_numbers`: "-1" is a (rejected) value, not a flag.
#[derive(Parser, Debug)]
#[command(
    name = "redisync-bench",
    override_usage = USAGE,
    after_help = AFTER_HELP,
    args_override_self = true,
    allow_negative_numbers = true
)]
#[allow(clippy::struct_excessive_bools)] // one per flag of the command line
struct Cli {
    /// Suite: every scenario and variant on fresh servers, then the ratios to spin and rslock
    #[arg(long)]
    all: bool,
    /// Suite: side by side with rslock, interleaved, on fresh servers; tables on stderr
    #[arg(long)]
    compare: bool,
    /// Suite: S1 and S2 (Lock) over plain TCP and over TLS, interleaved, on fresh servers
    #[arg(long)]
    tls: bool,
    /// Suites: run S1, S2, S4, S5 and S6 N times, interleaved [default: 5; --all: 1]
    #[arg(long, value_name = "N", value_parser = parse_repeats)]
    repeats: Option<usize>,
    /// Suites: small workloads (smoke run; numbers not comparable)
    #[arg(long)]
    quick: bool,
    /// One run of this scenario against the servers of --ports
    // Appended: the first one counts, as before.
    #[arg(long, value_name = "S", action = clap::ArgAction::Append)]
    scenario: Vec<Scenario>,
    /// Servers on 127.0.0.1: one, three (S4: through a Redlock) or (S5 --cluster) cluster nodes
    #[arg(long, value_name = "P1[,P2,...]", value_parser = parse_ports)]
    ports: Option<Ports>,
    /// S1: acquire+release pairs [default: 3000]
    #[arg(long, value_name = "N")]
    iterations: Option<usize>,
    /// S1/S2/S5/S6: the window in seconds [default: 5]
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    duration_s: Option<Duration>,
    /// S2/S5/S6: tasks looping on the lock [default: 16; S5: 64]
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// S2/S3/S5/S6: how long each hold lasts, in ms [default: 2; S3: 300; S5: 0]
    #[arg(long, value_name = "MS", value_parser = parse_secs)]
    hold_ms: Option<Duration>,
    /// S3: tasks that want the lock at once [default: 100]
    #[arg(long, value_name = "N")]
    requests: Option<usize>,
    /// S3: how long each request may wait, in seconds [default: 35]
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    wait_s: Option<Duration>,
    /// The lease (--lease fixed), in ms [default: 10000; S3: 60000]
    #[arg(long, value_name = "MS", value_parser = parse_secs)]
    ttl_ms: Option<Duration>,
    /// S5: how many keys the workers pick from [default: 1000]
    #[arg(long, value_name = "N")]
    keys: Option<usize>,
    /// S5 only: the ports are Redis Cluster nodes (redis-cluster://127.0.0.1:P1)
    #[arg(long)]
    cluster: bool,
    /// fixed: each acquisition asks for --ttl-ms; watchdog: the library keeps it [default: fixed]
    #[arg(long, value_name = "LEASE")]
    lease: Option<Lease>,
    /// S2/S3/S6: spread the workers over N clients, each its own connection [default: 1]
    #[arg(long, value_name = "N")]
    clients: Option<usize>,
    /// The lock (or baseline, peer, floor) every acquisition uses [default: lock]
    #[arg(long, value_name = "KIND")]
    kind: Option<Kind>,
    /// S1, --kind lock, one port: await the unlock, or drop the guard [default: await]
    #[arg(long, value_name = "HOW")]
    release: Option<Release>,
}

/// The ports of `--ports` (a newtype: a plain `Vec` would be read by clap as
/// a list of occurrences).
#[derive(Clone, Debug)]
struct Ports(Vec<u16>);

/// `P1[,P2,...]`; empty items are skipped (an empty list is caught later).
fn parse_ports(v: &str) -> Result<Ports, std::num::ParseIntError> {
    let ports = v.split(',').filter(|s| !s.is_empty()).map(str::parse);
    Ok(Ports(ports.collect::<Result<_, _>>()?))
}

/// Seconds as a decimal number (`--hold-ms` and `--ttl-ms` divide by 1000
/// afterwards, as the hand-written parser did: same range, same rounding).
fn parse_secs(v: &str) -> Result<Duration, String> {
    let x: f64 = v.parse().map_err(|e| format!("{e}"))?;
    Duration::try_from_secs_f64(x).map_err(|e| format!("{e}"))
}

fn parse_repeats(v: &str) -> Result<usize, String> {
    v.parse::<usize>()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| "a whole number >= 1".to_string())
}

/// What the command line asks for.
pub(crate) enum Command {
    One(Opts),
    /// `--all`, `--compare` or `--tls`.
    Suite(Suite),
}

/// Parses the command line (`args` starts with the program's name). `--help`
/// comes back as an error of kind `DisplayHelp`, as clap has it.
pub(crate) fn parse_args<I, T>(args: I) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut cmd = Cli::command();
    let matches = cmd.try_get_matches_from_mut(args)?;
    let cli = Cli::from_arg_matches(&matches)?;
    cli.into_command(&matches)
        .map_err(|msg| cmd.error(ErrorKind::ArgumentConflict, msg))
}

/// The one-line message of a command-line error (the JSON line's `error`).
pub(crate) fn message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    text.lines().next().unwrap_or_default().to_string()
}

/// The value options given on the command line, in the order given (the
/// flags and `--repeats` aside).
fn given_options(matches: &ArgMatches) -> Vec<String> {
    let cmd = Cli::command();
    let mut given: Vec<(usize, String)> = cmd
        .get_arguments()
        .filter(|a| a.get_action().takes_values() && a.get_id() != "repeats")
        .filter(|a| matches.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|a| {
            let index = matches.index_of(a.get_id().as_str())?;
            Some((index, a.get_long()?.to_string()))
        })
        .collect();
    given.sort();
    given.into_iter().map(|(_, long)| long).collect()
}

impl Cli {
    fn into_command(self, matches: &ArgMatches) -> Result<Command, String> {
        let flags: Vec<Which> = [
            (self.all, Which::All),
            (self.compare, Which::Compare),
            (self.tls, Which::Tls),
        ]
        .into_iter()
        .filter_map(|(on, which)| on.then_some(which))
        .collect();
        if let Some(which) = which_suite(&flags, self.cluster)? {
            if let Some(option) = given_options(matches).first() {
                return Err(format!(
                    "--{option} cannot be combined with {}",
                    which.flag()
                ));
            }
            // Ratios between peers need repeats (the machine is noisy).
            let default = if which == Which::All { 1 } else { 5 };
            return Ok(Command::Suite(Suite {
                which,
                quick: self.quick,
                repeats: self.repeats.unwrap_or(default),
            }));
        }
        if self.quick {
            return Err("--quick only goes with --all, --compare or --tls".into());
        }
        let Some(&scenario) = self.scenario.first() else {
            return Err("--scenario S1|S2|S3|S5|S6 is required".into());
        };
        if self.repeats.is_some() {
            return Err("--repeats only goes with --all, --compare or --tls".into());
        }
        let mut o = Opts::defaults(scenario);
        o.cluster = self.cluster;
        o.iterations = self.iterations.unwrap_or(o.iterations);
        o.workers = self.workers.unwrap_or(o.workers);
        o.requests = self.requests.unwrap_or(o.requests);
        o.keys = self.keys.unwrap_or(o.keys);
        o.clients = self.clients.map_or(o.clients, |n| n.max(1));
        o.duration = self.duration_s.unwrap_or(o.duration);
        o.wait = self.wait_s.unwrap_or(o.wait);
        o.hold = self.hold_ms.map_or(o.hold, |d| d / 1000);
        o.ttl = self.ttl_ms.map_or(o.ttl, |d| d / 1000);
        o.kind = self.kind.unwrap_or(o.kind);
        o.lease = self.lease.unwrap_or(o.lease);
        o.release = self.release.unwrap_or(o.release);
        let Some(Ports(ports)) = self.ports else {
            return Err("--ports is required".into());
        };
        o.ports = ports;
        check(&o)?;
        Ok(Command::One(o))
    }
}

/// The suite the flags `--all`, `--compare` and `--tls` (`flags`) ask for,
/// if any.
fn which_suite(flags: &[Which], cluster: bool) -> Result<Option<Which>, String> {
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

/// The combinations a single run does not support.
fn check(o: &Opts) -> Result<(), String> {
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
        let args = std::iter::once("redisync-bench").chain(s.split_whitespace());
        parse_args(args).map_err(|e| message(&e))
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

    #[test]
    fn every_flag_has_a_help_line() {
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        for arg in cmd.get_arguments() {
            assert!(
                arg.get_help().is_some(),
                "--{:?} has no help",
                arg.get_long()
            );
        }
        let help = parse_args(["redisync-bench", "--tls", "--help"]).err();
        assert_eq!(help.map(|e| e.kind()), Some(ErrorKind::DisplayHelp));
    }

    #[test]
    fn repeats_and_repeated_options() {
        // The last value of an option counts; the first --scenario.
        let Ok(Command::One(o)) =
            parse("--scenario S2 --scenario S1 --ports 1 --ports 2 --workers 3 --workers 4")
        else {
            panic!("repeated options did not parse");
        };
        assert_eq!((o.scenario, o.ports, o.workers), (Scenario::S2, vec![2], 4));
        assert!(parse("--all --all --quick --quick").is_ok());
        // --repeats: suites only; --clients 0 means one client.
        assert!(parse("--scenario S1 --ports 1 --repeats 3").is_err());
        let Ok(Command::One(o)) = parse("--scenario S2 --ports 1 --clients 0") else {
            panic!("--clients 0 did not parse");
        };
        assert_eq!(o.clients, 1);
    }

    /// The bench command lines of `BENCHMARKS.md`'s and `CONTRIBUTING.md`'s
    /// code blocks and prose (`cargo run ... -p redisync-bench -- ARGS`,
    /// continued lines joined, comments cut).
    fn quoted_command_lines(doc: &str) -> Vec<String> {
        let mut lines = Vec::new();
        let mut pending = String::new();
        for line in doc.lines() {
            let line = line.split(" #").next().unwrap_or_default().trim();
            if pending.is_empty() && !line.contains("-p redisync-bench -- ") {
                continue;
            }
            pending.push_str(line.trim_end_matches('\\'));
            pending.push(' ');
            if !line.ends_with('\\') {
                // In the prose, the command ends at its closing backquote.
                let args = pending.split("-p redisync-bench -- ").nth(1);
                let args = args
                    .unwrap_or_default()
                    .split('`')
                    .next()
                    .unwrap_or_default();
                lines.push(args.trim().to_string());
                pending.clear();
            }
        }
        lines
    }

    #[test]
    fn the_documented_command_lines_parse() {
        let benchmarks = include_str!("../../../BENCHMARKS.md");
        let contributing = include_str!("../../../CONTRIBUTING.md");
        let mut lines = quoted_command_lines(benchmarks);
        lines.extend(quoted_command_lines(contributing));
        assert!(lines.len() >= 8, "the how-to-run block moved: {lines:?}");
        // Quoted in the prose, with P for a port.
        lines.extend(
            [
                "--scenario S1 --ports P --kind lock --iterations 10000 --duration-s 30",
                "--scenario S1 --ports P --kind fred-floor",
                "--scenario S1 --ports P --kind rslock",
                "--scenario S1 --ports P --iterations 20000 --kind lock --release drop",
                "--scenario S1 --ports P --release drop",
                "--scenario S2 --ports P",
                "--scenario S2 --ports P --kind semaphore",
                "--scenario S2 --ports P --clients 16",
                "--scenario S6 --ports P --clients 16 --workers 16 --kind fair",
                "--scenario S3 --ports P --kind spin",
                "--scenario S1 --ports P1,P2,P3",
                "--tls --repeats 15",
            ]
            .map(String::from),
        );
        for line in &lines {
            let line = line
                .replace("P1,P2,P3", "7001,7002,7003")
                .replace('P', "6379");
            assert!(parse(&line).is_ok(), "{line}: {:?}", parse(&line).err());
        }
    }
}
