//! The history of a run: every critical section, when it began and ended,
//! until when its holder found its guard valid, and the node restarts that
//! lost data.
//!
//! Times are wall-clock microseconds since the UNIX epoch ([`now_us`]): every
//! process of a run is on this machine, so they share that clock.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock microseconds since the UNIX epoch: the one clock of a run,
/// shared by every process on the machine.
pub fn now_us() -> u64 {
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
}

impl Kind {
    /// Every kind, in summary order.
    pub const ALL: [Kind; 7] = [
        Kind::Lock,
        Kind::FairLock,
        Kind::RwRead,
        Kind::RwWrite,
        Kind::Semaphore,
        Kind::MultiLock,
        Kind::Redlock,
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
}

/// What the checker reads: the sections of every process and the kills.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Every critical section, in any order.
    pub sections: Vec<Section>,
    /// Every server kill.
    pub kills: Vec<Kill>,
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
