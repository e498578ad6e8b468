//! The history of a run: every critical section, when it began and ended,
//! until when its holder found its guard valid, and the node restarts that
//! lost data.
//!
//! Times are wall-clock microseconds since the UNIX epoch ([`now_us`]): every
//! process of a run is on this machine, so they share that clock.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    /// Set by [`use_virtual_clock`]: where the virtual clock began.
    static VIRTUAL_START: std::cell::Cell<Option<tokio::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// Makes [`now_us`] on this thread read tokio's clock, in microseconds
/// since this call: for a simulation on a paused current-thread runtime,
/// whose clock only moves when every task waits.
pub fn use_virtual_clock() {
    VIRTUAL_START.set(Some(tokio::time::Instant::now()));
}

/// Whether [`use_virtual_clock`] was called on this thread.
pub fn is_virtual_clock() -> bool {
    VIRTUAL_START.get().is_some()
}

/// Blocks the whole runtime for `d`, as a stalled thread (a long GC-like
/// pause) does: `std::thread::sleep`, or on the virtual clock a jump of
/// tokio's paused clock with nothing run in between.
pub async fn stall_runtime(d: std::time::Duration) {
    if is_virtual_clock() {
        tokio::time::advance(d).await;
    } else {
        std::thread::sleep(d);
    }
}

/// Wall-clock microseconds since the UNIX epoch: the one clock of a run,
/// shared by every process on the machine (or, after
/// [`use_virtual_clock`], the virtual clock).
pub fn now_us() -> u64 {
    if let Some(start) = VIRTUAL_START.get() {
        return u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The kinds of lock a run takes: the API a section was acquired with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `redisync::Lock` (re-entry, extend, guards moved to other tasks).
    Lock,
    /// `redisync::FairLock`.
    FairLock,
    /// The read side of `redisync::RwLock` (also after a downgrade).
    RwRead,
    /// The write side of `redisync::RwLock`.
    RwWrite,
    /// `redisync::Semaphore`, one or more permits of one or more.
    Semaphore,
    /// `redisync_redlock::MultiLock` over several `Lock` names: one section
    /// per member, on the member's lock.
    MultiLock,
    /// `redisync_redlock::Redlock` over three nodes.
    Redlock,
    /// `redisync::run_locked` over a `Lock`: the work records its steps
    /// ([`Work`]) and is cancelled when the lock is lost.
    RunLocked,
    /// A `redisync::Leader::run` leadership: one section per leadership
    /// (token), derived from its jobs' steps by the checker.
    Leader,
}

impl Kind {
    /// Every kind, in summary order.
    pub const ALL: [Kind; 9] = [
        Kind::Lock,
        Kind::FairLock,
        Kind::RwRead,
        Kind::RwWrite,
        Kind::Semaphore,
        Kind::MultiLock,
        Kind::Redlock,
        Kind::RunLocked,
        Kind::Leader,
    ];

    /// The name used in history lines and summaries.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::FairLock => "fair-lock",
            Kind::RwRead => "rw-read",
            Kind::RwWrite => "rw-write",
            Kind::Semaphore => "semaphore",
            Kind::MultiLock => "multi-lock",
            Kind::Redlock => "redlock-3",
            Kind::RunLocked => "run-locked",
            Kind::Leader => "leader",
        }
    }

    /// The kind named `name` (see [`Kind::name`]).
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The one server that holds every lock of this kind, or `None` when the
    /// kind spans several (Redlock).
    pub fn server(self) -> Option<Server> {
        match self {
            Kind::Redlock => None,
            _ => Some(Server::Main),
        }
    }

    /// Position in [`Kind::ALL`].
    pub fn index(self) -> usize {
        Kind::ALL.iter().position(|k| *k == self).unwrap_or(0)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a section holds of its lock: who else may hold it at the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Nobody else (a lock, a fair lock, the write side, a Redlock).
    Exclusive,
    /// Other `Shared` holders only (the read side).
    Shared,
    /// `held` of the lock's `of` permits: valid holders together hold at most
    /// `of` (a semaphore).
    Permits {
        /// Permits of this section.
        held: u32,
        /// Permits of the semaphore.
        of: u32,
    },
}

impl Access {
    /// `"x"`, `"r"` or `"p<held>/<of>"`.
    pub fn code(self) -> String {
        match self {
            Access::Exclusive => "x".into(),
            Access::Shared => "r".into(),
            Access::Permits { held, of } => format!("p{held}/{of}"),
        }
    }

    /// Parses [`Access::code`].
    pub fn parse(code: &str) -> Option<Access> {
        match code {
            "x" => Some(Access::Exclusive),
            "r" => Some(Access::Shared),
            _ => {
                let (held, of) = code.strip_prefix('p')?.split_once('/')?;
                Some(Access::Permits {
                    held: held.parse().ok()?,
                    of: of.parse().ok()?,
                })
            }
        }
    }
}

/// A Redis server of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Server {
    /// The server of the single-server kinds (lock, fair lock, read-write
    /// lock, semaphore).
    Main,
    /// Redlock node `i` (0, 1, 2).
    Node(usize),
}

impl Server {
    /// Every server of a run, in order: the main one, then the Redlock nodes.
    pub const ALL: [Server; 4] = [
        Server::Main,
        Server::Node(0),
        Server::Node(1),
        Server::Node(2),
    ];

    /// Position in [`Server::ALL`].
    pub fn index(self) -> usize {
        match self {
            Server::Main => 0,
            Server::Node(i) => i + 1,
        }
    }
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Server::Main => f.write_str("main"),
            Server::Node(i) => write!(f, "node{i}"),
        }
    }
}

/// One critical section: a holder got a guard, wrote to the fenced store at
/// its start and at its end, and let go.
///
/// The holder looks at its guard (`is_lost()`) when the section starts, every
/// few milliseconds during it, and when it ends. The time is read *before*
/// each look, so `valid_until_us` is never later than the moment the guard
/// last said it was valid. The fenced writes are stamped with the first and
/// the last look's time: a write and the look before it count as one step,
/// so a holder that stalls between the two (a paused process) is not taken
/// for one that wrote while it knew its lease was gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The lock: `"<family>/<name>"` with family `lock` (also the members of
    /// a `MultiLock`), `fair`, `rw` (both sides), `sem` or `redlock`. Kinds
    /// of one family share one lock per name; other families do not.
    pub lock: String,
    /// The API it was acquired with.
    pub kind: Kind,
    /// What it holds: who else may hold the lock meanwhile.
    pub access: Access,
    /// Who held it: `"<process>.<client set>.<task>"`. Overlapping sections
    /// of one holder (a downgrade: the write side, then the read side) do
    /// not exclude each other.
    pub client: String,
    /// Guards the section had: 1, plus re-entries (nested guards of the same
    /// acquisition: one section, one token).
    pub guards: u32,
    /// The longest lease the holder was granted during the section (the
    /// watchdog lease, a fixed lease, an `extend`), in microseconds: after
    /// its lock is gone from the server it believes in it at most this long.
    pub lease_us: u64,
    /// The fencing token of the acquisition.
    pub token: u64,
    /// When the holder started to ask for the lock.
    pub requested_us: u64,
    /// When the holder had its guard: its first look and its start write.
    pub start_us: u64,
    /// When the holder was done: its last look and its end write.
    pub end_us: u64,
    /// The last look that found the guard valid; `None` when the first look
    /// (at the start) found it lost already.
    pub valid_until_us: Option<u64>,
    /// Whether the last look (at `end_us`) found it valid.
    pub valid_at_end: bool,
    /// The first look that found it lost, if any.
    pub lost_at_us: Option<u64>,
}

impl Section {
    /// Whether the holder had a valid guard when the section started: its
    /// start is then a grant of the lock.
    pub fn valid_at_start(&self) -> bool {
        self.valid_until_us.is_some()
    }

    /// One tab-separated line (no newline), read back by [`Section::from_line`].
    pub fn to_line(&self) -> String {
        let opt = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        format!(
            "S\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.lock,
            self.kind.name(),
            self.access.code(),
            self.client,
            self.guards,
            self.lease_us,
            self.token,
            self.requested_us,
            self.start_us,
            self.end_us,
            opt(self.valid_until_us),
            u8::from(self.valid_at_end),
            opt(self.lost_at_us),
        )
    }

    /// Parses a line made by [`Section::to_line`].
    ///
    /// # Errors
    /// A message naming what is wrong with the line.
    pub fn from_line(line: &str) -> Result<Section, String> {
        let fields: Vec<&str> = line.split('\t').collect();
        let ["S", lock, kind, access, client, guards, lease, token, requested, start, end, valid_until, valid_at_end, lost_at] =
            fields[..]
        else {
            return Err(format!("not a section line: {line:?}"));
        };
        let num = |what: &str, v: &str| {
            v.parse::<u64>()
                .map_err(|e| format!("bad {what} {v:?} in {line:?}: {e}"))
        };
        let opt = |what: &str, v: &str| {
            if v == "-" {
                Ok(None)
            } else {
                num(what, v).map(Some)
            }
        };
        Ok(Section {
            lock: lock.to_owned(),
            kind: Kind::parse(kind).ok_or_else(|| format!("bad kind {kind:?} in {line:?}"))?,
            access: Access::parse(access)
                .ok_or_else(|| format!("bad access {access:?} in {line:?}"))?,
            client: client.to_owned(),
            guards: u32::try_from(num("guards", guards)?)
                .map_err(|e| format!("bad guards in {line:?}: {e}"))?,
            lease_us: num("lease", lease)?,
            token: num("token", token)?,
            requested_us: num("requested", requested)?,
            start_us: num("start", start)?,
            end_us: num("end", end)?,
            valid_until_us: opt("valid_until", valid_until)?,
            valid_at_end: match valid_at_end {
                "1" => true,
                "0" => false,
                other => return Err(format!("bad valid_at_end {other:?} in {line:?}")),
            },
            lost_at_us: opt("lost_at", lost_at)?,
        })
    }
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} token {} [{} .. {}] valid until {}",
            self.client,
            self.token,
            self.start_us,
            self.end_us,
            self.valid_until_us
                .map_or_else(|| "never (lost at start)".to_owned(), |v| v.to_string()),
        )
    }
}

/// A server killed (`SIGKILL`) and restarted: empty, or from older data (a
/// snapshot, a replica that missed the last writes). Either way the locks it
/// granted since are gone while their holders still believe in them, and
/// its fencing counter may be missing or behind (tokens go on from the
/// server clock). `at_us` is taken once the process is dead: every grant of
/// a later life was asked for after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kill {
    /// The server.
    pub server: Server,
    /// When it was dead.
    pub at_us: u64,
    /// Whether it came back with its replica's data (a failover to a
    /// replica that missed the last writes, not those acknowledged).
    pub failover: bool,
}

/// One step of work under a lock: the time read first, then what was left
/// of the guard's lease by the holder's lease clock (`validity()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// When the step ran (read before the validity).
    pub at_us: u64,
    /// The guard's validity then, in microseconds (0: known lost); `None`
    /// when the work cannot see its guard (a `Leader::run` job gets only
    /// its token).
    pub left_us: Option<u64>,
}

/// Work run under a lock and cancelled by the library when the lock is
/// known lost: a `run_locked` section's work, or one `Leader::run` job run.
/// The library must never poll the work once the holder's lease clock says
/// lost (the checker's rule (e)), and two leaders' job runs must never
/// overlap (leaderships are derived from the job runs and checked like any
/// section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    /// The lock (see [`Section::lock`]); for a leader, its lock's name.
    pub lock: String,
    /// [`Kind::RunLocked`] or [`Kind::Leader`].
    pub kind: Kind,
    /// Who ran it (see [`Section::client`]).
    pub client: String,
    /// The fencing token (the leadership's, for a job).
    pub token: u64,
    /// The longest lease the holder was granted, in microseconds.
    pub lease_us: u64,
    /// When the holder started to ask for the lock (a leader: when it
    /// started campaigning, at the latest).
    pub requested_us: u64,
    /// Its steps, in order.
    pub steps: Vec<Step>,
}

impl Work {
    /// One tab-separated line (no newline), read back by [`Work::from_line`].
    pub fn to_line(&self) -> String {
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|s| match s.left_us {
                Some(l) => format!("{}:{l}", s.at_us),
                None => format!("{}:-", s.at_us),
            })
            .collect();
        format!(
            "W\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.lock,
            self.kind.name(),
            self.client,
            self.token,
            self.lease_us,
            self.requested_us,
            steps.join(","),
        )
    }

    /// Parses a line made by [`Work::to_line`].
    ///
    /// # Errors
    /// A message naming what is wrong with the line.
    pub fn from_line(line: &str) -> Result<Work, String> {
        let fields: Vec<&str> = line.split('\t').collect();
        let ["W", lock, kind, client, token, lease, requested, steps] = fields[..] else {
            return Err(format!("not a work line: {line:?}"));
        };
        let num = |what: &str, v: &str| {
            v.parse::<u64>()
                .map_err(|e| format!("bad {what} {v:?} in {line:?}: {e}"))
        };
        let mut parsed = Vec::new();
        for step in steps.split(',').filter(|s| !s.is_empty()) {
            let (at, left) = step
                .split_once(':')
                .ok_or_else(|| format!("bad step {step:?} in {line:?}"))?;
            parsed.push(Step {
                at_us: num("step time", at)?,
                left_us: if left == "-" {
                    None
                } else {
                    Some(num("step validity", left)?)
                },
            });
        }
        Ok(Work {
            lock: lock.to_owned(),
            kind: Kind::parse(kind).ok_or_else(|| format!("bad kind {kind:?} in {line:?}"))?,
            client: client.to_owned(),
            token: num("token", token)?,
            lease_us: num("lease", lease)?,
            requested_us: num("requested", requested)?,
            steps: parsed,
        })
    }
}

/// A `force_unlock` of a lock by a worker: every holder of the lock loses
/// it. Holders on the forcing client must know at once (the call marks
/// them lost before it returns); others learn at their next renewal, or
/// when their lease ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Force {
    /// The lock (see [`Section::lock`]).
    pub lock: String,
    /// Who forced it (see [`Section::client`]); its client is the part
    /// before the last dot.
    pub client: String,
    /// When the call was made.
    pub asked_us: u64,
    /// When it returned.
    pub done_us: u64,
    /// Whether it returned `Ok` (then the forcing client's holders were
    /// marked lost); an error may still have deleted the lock.
    pub ok: bool,
}

impl Force {
    /// One tab-separated line (no newline), read back by [`Force::from_line`].
    pub fn to_line(&self) -> String {
        format!(
            "F\t{}\t{}\t{}\t{}\t{}",
            self.lock,
            self.client,
            self.asked_us,
            self.done_us,
            u8::from(self.ok)
        )
    }

    /// Parses a line made by [`Force::to_line`].
    ///
    /// # Errors
    /// A message naming what is wrong with the line.
    pub fn from_line(line: &str) -> Result<Force, String> {
        let fields: Vec<&str> = line.split('\t').collect();
        let ["F", lock, client, asked, done, ok] = fields[..] else {
            return Err(format!("not a force line: {line:?}"));
        };
        let num = |what: &str, v: &str| {
            v.parse::<u64>()
                .map_err(|e| format!("bad {what} {v:?} in {line:?}: {e}"))
        };
        Ok(Force {
            lock: lock.to_owned(),
            client: client.to_owned(),
            asked_us: num("asked", asked)?,
            done_us: num("done", done)?,
            ok: ok == "1",
        })
    }
}

/// The client (`"<process>.<client set>"`) of a holder
/// (`"<process>.<client set>.<task>"`).
pub fn client_of(holder: &str) -> &str {
    holder.rsplit_once('.').map_or(holder, |(c, _)| c)
}

/// Whether a holder's client set has replica sync on (its label is
/// `"<process>.synced"`): such sets take names of their own.
pub fn is_synced(holder: &str) -> bool {
    holder.split('.').nth(1) == Some("synced")
}

/// Whether a holder's client set has the restart guard on (its label is
/// `"<process>.guarded"`): such sets take names of their own.
pub fn is_guarded(holder: &str) -> bool {
    holder.split('.').nth(1) == Some("guarded")
}

/// A worker process frozen (`SIGSTOP`) for a while: whatever its tasks
/// did then is stamped with the time after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    /// The process (`"p1"`).
    pub process: String,
    /// When it was stopped.
    pub from_us: u64,
    /// When it was resumed.
    pub to_us: u64,
}

/// A call that must answer in bounded time: `try_lock(Duration::ZERO)`
/// ("about a round trip"; a fault may delay it) or `Client::shutdown`
/// ("about one command timeout", whatever the servers do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// `"try-zero"` or `"shutdown"`.
    pub what: String,
    /// Who called it (see [`Section::client`]).
    pub client: String,
    /// When it was called.
    pub asked_us: u64,
    /// When it returned.
    pub done_us: u64,
    /// How long it may take (slack for a loaded machine included).
    pub bound_us: u64,
}

impl Probe {
    /// One tab-separated line (no newline), read back by [`Probe::from_line`].
    pub fn to_line(&self) -> String {
        format!(
            "P\t{}\t{}\t{}\t{}\t{}",
            self.what, self.client, self.asked_us, self.done_us, self.bound_us
        )
    }

    /// Parses a line made by [`Probe::to_line`].
    ///
    /// # Errors
    /// A message naming what is wrong with the line.
    pub fn from_line(line: &str) -> Result<Probe, String> {
        let fields: Vec<&str> = line.split('\t').collect();
        let ["P", what, client, asked, done, bound] = fields[..] else {
            return Err(format!("not a probe line: {line:?}"));
        };
        let num = |what: &str, v: &str| {
            v.parse::<u64>()
                .map_err(|e| format!("bad {what} {v:?} in {line:?}: {e}"))
        };
        Ok(Probe {
            what: what.to_owned(),
            client: client.to_owned(),
            asked_us: num("asked", asked)?,
            done_us: num("done", done)?,
            bound_us: num("bound", bound)?,
        })
    }
}

/// What a worker sends while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A critical section.
    Section(Section),
    /// Work under a lock.
    Work(Work),
    /// A force-unlock.
    Force(Force),
    /// A bounded call.
    Probe(Probe),
    /// A stall of one runtime thread of a worker process (`process` is the
    /// holder label of the task that stalled it).
    Stall(Pause),
}

impl Record {
    /// Its line (see each type's `to_line`).
    pub fn to_line(&self) -> String {
        match self {
            Record::Section(s) => s.to_line(),
            Record::Work(w) => w.to_line(),
            Record::Force(f) => f.to_line(),
            Record::Probe(p) => p.to_line(),
            Record::Stall(p) => format!("T\t{}\t{}\t{}", p.process, p.from_us, p.to_us),
        }
    }

    /// Parses a line of any record; `None` when it is none.
    pub fn from_line(line: &str) -> Option<Result<Record, String>> {
        match line.split('\t').next() {
            Some("S") => Some(Section::from_line(line).map(Record::Section)),
            Some("W") => Some(Work::from_line(line).map(Record::Work)),
            Some("F") => Some(Force::from_line(line).map(Record::Force)),
            Some("P") => Some(Probe::from_line(line).map(Record::Probe)),
            Some("T") => Some(match line.split('\t').collect::<Vec<_>>()[..] {
                ["T", process, from, to] => match (from.parse(), to.parse()) {
                    (Ok(from_us), Ok(to_us)) => Ok(Record::Stall(Pause {
                        process: process.to_owned(),
                        from_us,
                        to_us,
                    })),
                    _ => Err(format!("bad stall line {line:?}")),
                },
                _ => Err(format!("bad stall line {line:?}")),
            }),
            _ => None,
        }
    }
}

/// What the checker reads: the sections of every process and the kills.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Every critical section, in any order.
    pub sections: Vec<Section>,
    /// Every server kill.
    pub kills: Vec<Kill>,
    /// Every run of work under a lock (`run_locked`, leader jobs).
    pub works: Vec<Work>,
    /// Every force-unlock.
    pub forces: Vec<Force>,
    /// Every worker process pause.
    pub pauses: Vec<Pause>,
    /// Every bounded call.
    pub probes: Vec<Probe>,
    /// Every stall of a worker's runtime thread.
    pub stalls: Vec<Pause>,
    /// When each fault was active (`[start, end]`, µs).
    pub faults: Vec<(u64, u64)>,
}

impl History {
    /// Adds a record.
    pub fn push(&mut self, record: Record) {
        match record {
            Record::Section(s) => self.sections.push(s),
            Record::Work(w) => self.works.push(w),
            Record::Force(f) => self.forces.push(f),
            Record::Probe(p) => self.probes.push(p),
            Record::Stall(p) => self.stalls.push(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let mut s = Section {
            lock: "rw/torture:{x}:a".into(),
            kind: Kind::RwWrite,
            access: Access::Exclusive,
            client: "p1.proxied.t0".into(),
            guards: 2,
            lease_us: 900_000,
            token: 1_700_000_000_000_123,
            requested_us: 10,
            start_us: 20,
            end_us: 30,
            valid_until_us: Some(29),
            valid_at_end: true,
            lost_at_us: None,
        };
        assert_eq!(Section::from_line(&s.to_line()), Ok(s.clone()));
        s.valid_until_us = None;
        s.valid_at_end = false;
        s.lost_at_us = Some(20);
        assert_eq!(Section::from_line(&s.to_line()), Ok(s.clone()));
        s.access = Access::Permits { held: 2, of: 3 };
        s.kind = Kind::Semaphore;
        assert_eq!(Section::from_line(&s.to_line()), Ok(s.clone()));
        s.access = Access::Shared;
        assert_eq!(Section::from_line(&s.to_line()), Ok(s));
        assert!(Section::from_line("S\tx").is_err());
        assert!(Section::from_line("C\tlock\t1").is_err());
    }

    #[test]
    fn work_and_force_lines_round_trip() {
        let mut w = Work {
            lock: "lock/torture:a".into(),
            kind: Kind::RunLocked,
            client: "p0.direct.k1".into(),
            token: 42,
            lease_us: 900_000,
            requested_us: 5,
            steps: vec![
                Step {
                    at_us: 10,
                    left_us: Some(800_000),
                },
                Step {
                    at_us: 20,
                    left_us: Some(0),
                },
            ],
        };
        let line = w.to_line();
        assert_eq!(Record::from_line(&line), Some(Ok(Record::Work(w.clone()))));
        w.kind = Kind::Leader;
        w.steps = vec![Step {
            at_us: 7,
            left_us: None,
        }];
        assert_eq!(Work::from_line(&w.to_line()), Ok(w.clone()));
        w.steps.clear();
        assert_eq!(Work::from_line(&w.to_line()), Ok(w));
        let f = Force {
            lock: "lock/torture:a".into(),
            client: "p1.proxied.l0".into(),
            asked_us: 1,
            done_us: 2,
            ok: true,
        };
        assert_eq!(Record::from_line(&f.to_line()), Some(Ok(Record::Force(f))));
        let p = Probe {
            what: "try-zero".into(),
            client: "p0.direct.l0".into(),
            asked_us: 1,
            done_us: 3,
            bound_us: 1_000_000,
        };
        assert_eq!(Record::from_line(&p.to_line()), Some(Ok(Record::Probe(p))));
        let t = Record::Stall(Pause {
            process: "p0.direct.k1".into(),
            from_us: 5,
            to_us: 9,
        });
        assert_eq!(Record::from_line(&t.to_line()), Some(Ok(t)));
        assert_eq!(Record::from_line("C\tlock"), None);
        assert_eq!(client_of("p1.proxied.l0"), "p1.proxied");
        assert!(is_guarded("p0.guarded.l1") && !is_guarded("p0.direct.l1"));
    }

    #[test]
    fn kinds_have_unique_names() {
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.name()), Some(k));
            assert_eq!(Kind::ALL[k.index()], k);
        }
        assert_eq!(Kind::parse("nope"), None);
        for s in Server::ALL {
            assert_eq!(Server::ALL[s.index()], s);
        }
    }
}
