//! The keyspace: values, expiry on the virtual clock, and the commands.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::format::{format_g17, parse_f64, parse_i64, parse_score_bound};
use crate::reply::Reply;

pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const RANGE_NOT_FLOAT: &str = "ERR min or max is not a float";

/// A message published by a script or a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The channel.
    pub channel: Vec<u8>,
    /// The payload.
    pub payload: Vec<u8>,
    /// `SPUBLISH` (sharded pub/sub) rather than `PUBLISH`.
    pub sharded: bool,
}

/// A zset score ordered as Redis orders them (`<` on doubles; NaN is never
/// stored).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Score(f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

/// A sorted set: by score, then by member (bytewise), as Redis sorts it.
#[derive(Clone, Debug, Default)]
pub(crate) struct ZSet {
    scores: HashMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

impl ZSet {
    fn len(&self) -> usize {
        self.scores.len()
    }

    fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    fn insert(&mut self, member: &[u8], score: f64) {
        if let Some(old) = self.scores.insert(member.to_vec(), score) {
            self.order.remove(&(Score(old), member.to_vec()));
        }
        self.order.insert((Score(score), member.to_vec()));
    }

    fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(old) => {
                self.order.remove(&(Score(old), member.to_vec()));
                true
            }
            None => false,
        }
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], f64)> + '_ {
        self.order.iter().map(|(s, m)| (m.as_slice(), s.0))
    }
}

/// A value of the keyspace.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    String(Vec<u8>),
    /// Field-value pairs in insertion order: HGETALL of a small hash
    /// (listpack encoded) answers in that order.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    List(VecDeque<Vec<u8>>),
    ZSet(ZSet),
}

impl Value {
    fn type_name(&self) -> &'static str {
        match self {
            Value::String(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::ZSet(_) => "zset",
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Value::String(_) => false,
            Value::Hash(h) => h.is_empty(),
            Value::List(l) => l.is_empty(),
            Value::ZSet(z) => z.len() == 0,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) value: Value,
    /// Absolute deadline, virtual milliseconds.
    pub(crate) expire_at: Option<i64>,
}

/// What a key holds, for inspection.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// A string.
    String(Vec<u8>),
    /// A hash: field-value pairs in the order HGETALL answers.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A list, head first.
    List(Vec<Vec<u8>>),
    /// A zset: member-score pairs, lowest score first.
    ZSet(Vec<(Vec<u8>, f64)>),
}

impl Data {
    /// The type name TYPE answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Data::String(_) => "string",
            Data::Hash(_) => "hash",
            Data::List(_) => "list",
            Data::ZSet(_) => "zset",
        }
    }
}

/// One key of a keyspace dump.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyDump {
    /// The key.
    pub key: Vec<u8>,
    /// Its value.
    pub data: Data,
    /// Its time to live in milliseconds (PTTL), or `None` without one.
    pub pttl: Option<i64>,
}

/// The keyspace, the clock and the published messages.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    entries: BTreeMap<Vec<u8>, Entry>,
    pub(crate) now_us: i64,
    pub(crate) published: Vec<Message>,
    /// `LASTSAVE`: the server's start or its last save, in seconds.
    pub(crate) lastsave: i64,
}

type CmdResult = Result<Reply, Reply>;

/// A hash's field-value pairs.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fn err(text: &str) -> Reply {
    Reply::Error(text.to_owned())
}

fn int_arg(arg: &[u8]) -> Result<i64, Reply> {
    parse_i64(arg).ok_or_else(|| err(NOT_INTEGER))
}

fn len_i64(n: usize) -> i64 {
    i64::try_from(n).expect("a length fits in i64")
}

fn eq_ic(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// `start`/`end` of LRANGE, ZRANGE and the like, sanitised: `None` for an
/// empty range.
fn rank_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len_i64(len);
    let mut start = if start < 0 { len + start } else { start };
    let mut end = if end < 0 { len + end } else { end };
    if start < 0 {
        start = 0;
    }
    if start > end || start >= len {
        return None;
    }
    if end >= len {
        end = len - 1;
    }
    Some((
        usize::try_from(start).expect("start >= 0"),
        usize::try_from(end).expect("end >= start >= 0"),
    ))
}

/// A score range of ZRANGEBYSCORE and the like.
#[derive(Clone, Copy)]
struct ScoreRange {
    min: f64,
    min_ex: bool,
    max: f64,
    max_ex: bool,
}

impl ScoreRange {
    fn parse(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
        let (min, min_ex) = parse_score_bound(min).ok_or_else(|| err(RANGE_NOT_FLOAT))?;
        let (max, max_ex) = parse_score_bound(max).ok_or_else(|| err(RANGE_NOT_FLOAT))?;
        Ok(ScoreRange {
            min,
            min_ex,
            max,
            max_ex,
        })
    }

    fn contains(&self, s: f64) -> bool {
        let above = if self.min_ex {
            s > self.min
        } else {
            s >= self.min
        };
        let below = if self.max_ex {
            s < self.max
        } else {
            s <= self.max
        };
        above && below
    }
}

/// The arity of a command (Redis's convention: `n` exactly, `-n` at least
/// n, the name included), or `None` for a command the simulator lacks.
pub(crate) fn arity(name: &str) -> Option<i32> {
    Some(match name {
        "time" | "flushall" | "dbsize" | "lastsave" => 1,
        "get" | "hgetall" | "llen" | "pttl" | "type" | "zcard" | "keys" | "hlen" => 2,
        "hexists" | "hget" | "lindex" | "zscore" | "publish" | "spublish" => 3,
        "hincrby" | "hsetnx" | "lrange" | "lrem" | "lset" | "ltrim" | "zremrangebyscore" => 4,
        "del" | "exists" | "lpop" | "rpop" => -2,
        "set" | "hdel" | "hmget" | "lpos" | "lpush" | "rpush" | "pexpire" | "zrem" => -3,
        "hset" | "zadd" | "zrange" | "zrangebyscore" => -4,
        _ => return None,
    })
}

impl Db {
    pub(crate) fn new(now_us: i64) -> Db {
        Db {
            entries: BTreeMap::new(),
            now_us,
            published: Vec::new(),
            lastsave: now_us.div_euclid(1_000_000),
        }
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.now_us.div_euclid(1000)
    }

    fn is_expired(&self, entry: &Entry) -> bool {
        entry.expire_at.is_some_and(|at| self.now_ms() > at)
    }

    /// Removes `key` when it is past its deadline (lazy expiry).
    fn expire_if_needed(&mut self, key: &[u8]) {
        if self.entries.get(key).is_some_and(|e| self.is_expired(e)) {
            self.entries.remove(key);
        }
    }

    fn lookup(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.expire_if_needed(key);
        self.entries.get_mut(key)
    }

    fn value(&mut self, key: &[u8]) -> Option<&mut Value> {
        self.lookup(key).map(|e| &mut e.value)
    }

    fn remove_if_empty(&mut self, key: &[u8]) {
        if self.entries.get(key).is_some_and(|e| e.value.is_empty()) {
            self.entries.remove(key);
        }
    }

    fn string(&mut self, key: &[u8]) -> Result<Option<&mut Vec<u8>>, Reply> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(err(WRONGTYPE)),
        }
    }

    fn hash(&mut self, key: &[u8]) -> Result<Option<&mut Fields>, Reply> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::Hash(h)) => Ok(Some(h)),
            Some(_) => Err(err(WRONGTYPE)),
        }
    }

    fn list(&mut self, key: &[u8]) -> Result<Option<&mut VecDeque<Vec<u8>>>, Reply> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::List(l)) => Ok(Some(l)),
            Some(_) => Err(err(WRONGTYPE)),
        }
    }

    fn zset(&mut self, key: &[u8]) -> Result<Option<&mut ZSet>, Reply> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::ZSet(z)) => Ok(Some(z)),
            Some(_) => Err(err(WRONGTYPE)),
        }
    }

    fn create(&mut self, key: &[u8], value: Value) -> &mut Value {
        &mut self
            .entries
            .entry(key.to_vec())
            .or_insert(Entry {
                value,
                expire_at: None,
            })
            .value
    }

    fn hash_or_create(&mut self, key: &[u8]) -> Result<&mut Fields, Reply> {
        self.hash(key)?;
        match self.create(key, Value::Hash(Vec::new())) {
            Value::Hash(h) => Ok(h),
            _ => unreachable!("checked as a hash or created"),
        }
    }

    fn list_or_create(&mut self, key: &[u8]) -> Result<&mut VecDeque<Vec<u8>>, Reply> {
        self.list(key)?;
        match self.create(key, Value::List(VecDeque::new())) {
            Value::List(l) => Ok(l),
            _ => unreachable!("checked as a list or created"),
        }
    }

    /// Runs one command (the name lower-cased, arity checked by the caller).
    pub(crate) fn execute(&mut self, name: &str, argv: &[Vec<u8>]) -> Reply {
        let result = match name {
            "del" => Ok(self.del(&argv[1..])),
            "exists" => Ok(self.exists(&argv[1..])),
            "get" => self.get(&argv[1]),
            "set" => self.set(argv),
            "hdel" => self.hdel(&argv[1], &argv[2..]),
            "hexists" => self.hexists(&argv[1], &argv[2]),
            "hget" => self.hget(&argv[1], &argv[2]),
            "hgetall" => self.hgetall(&argv[1]),
            "hincrby" => self.hincrby(&argv[1], &argv[2], &argv[3]),
            "hlen" => self
                .hash(&argv[1])
                .map(|h| Reply::Integer(h.map_or(0, |h| len_i64(h.len())))),
            "hmget" => self.hmget(&argv[1], &argv[2..]),
            "hset" => self.hset(argv),
            "hsetnx" => self.hsetnx(&argv[1], &argv[2], &argv[3]),
            "lindex" => self.lindex(&argv[1], &argv[2]),
            "llen" => self
                .list(&argv[1])
                .map(|l| Reply::Integer(l.map_or(0, |l| len_i64(l.len())))),
            "lpop" => self.pop(argv, true),
            "rpop" => self.pop(argv, false),
            "lpos" => self.lpos(argv),
            "lpush" => self.push(&argv[1], &argv[2..], true),
            "rpush" => self.push(&argv[1], &argv[2..], false),
            "lrange" => self.lrange(&argv[1], &argv[2], &argv[3]),
            "lrem" => self.lrem(&argv[1], &argv[2], &argv[3]),
            "lset" => self.lset(&argv[1], &argv[2], &argv[3]),
            "ltrim" => self.ltrim(&argv[1], &argv[2], &argv[3]),
            "pexpire" => self.pexpire(argv),
            "pttl" => Ok(Reply::Integer(self.pttl(&argv[1]))),
            "time" => Ok(self.time()),
            "lastsave" => Ok(Reply::Integer(self.lastsave)),
            "type" => Ok(Reply::Status(
                self.value(&argv[1])
                    .map_or("none", |v| v.type_name())
                    .to_owned(),
            )),
            "zadd" => self.zadd(argv),
            "zcard" => self
                .zset(&argv[1])
                .map(|z| Reply::Integer(z.map_or(0, |z| len_i64(z.len())))),
            "zrange" => self.zrange(argv, false),
            "zrangebyscore" => self.zrange(argv, true),
            "zrem" => self.zrem(&argv[1], &argv[2..]),
            "zremrangebyscore" => self.zremrangebyscore(&argv[1], &argv[2], &argv[3]),
            "zscore" => self.zscore(&argv[1], &argv[2]),
            "publish" | "spublish" => {
                self.published.push(Message {
                    channel: argv[1].clone(),
                    payload: argv[2].clone(),
                    sharded: name == "spublish",
                });
                Ok(Reply::Integer(0))
            }
            "keys" => Ok(self.keys(&argv[1])),
            "dbsize" => Ok(Reply::Integer(len_i64(self.dump().len()))),
            "flushall" => {
                self.entries.clear();
                Ok(Reply::ok())
            }
            _ => Err(Reply::Error(format!("ERR unknown command '{name}'"))),
        };
        result.unwrap_or_else(|e| e)
    }

    fn del(&mut self, keys: &[Vec<u8>]) -> Reply {
        let mut n = 0;
        for k in keys {
            self.expire_if_needed(k);
            if self.entries.remove(k).is_some() {
                n += 1;
            }
        }
        Reply::Integer(n)
    }

    fn exists(&mut self, keys: &[Vec<u8>]) -> Reply {
        let mut n = 0;
        for k in keys {
            if self.lookup(k).is_some() {
                n += 1;
            }
        }
        Reply::Integer(n)
    }

    fn get(&mut self, key: &[u8]) -> CmdResult {
        Ok(self
            .string(key)?
            .map_or(Reply::Nil, |s| Reply::Bulk(s.clone())))
    }

    fn set(&mut self, argv: &[Vec<u8>]) -> CmdResult {
        #[derive(PartialEq, Clone, Copy)]
        enum Unit {
            Ex,
            Px,
            ExAt,
            PxAt,
        }
        let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
        let mut expire: Option<(Unit, &[u8])> = None;
        let mut j = 3;
        while j < argv.len() {
            let opt = argv[j].as_slice();
            let next = argv.get(j + 1);
            let unit = expire.map(|(u, _)| u);
            if eq_ic(opt, "nx") && !xx {
                nx = true;
            } else if eq_ic(opt, "xx") && !nx {
                xx = true;
            } else if eq_ic(opt, "get") {
                get = true;
            } else if eq_ic(opt, "keepttl") && expire.is_none() {
                keepttl = true;
            } else if let (Some(next), false) = (next, keepttl) {
                let wanted = if eq_ic(opt, "ex") {
                    Unit::Ex
                } else if eq_ic(opt, "px") {
                    Unit::Px
                } else if eq_ic(opt, "exat") {
                    Unit::ExAt
                } else if eq_ic(opt, "pxat") {
                    Unit::PxAt
                } else {
                    return Err(err(SYNTAX));
                };
                if unit.is_some_and(|u| u != wanted) {
                    return Err(err(SYNTAX));
                }
                expire = Some((wanted, next));
                j += 1;
            } else {
                return Err(err(SYNTAX));
            }
            j += 1;
        }
        let deadline = match expire {
            None => None,
            Some((unit, text)) => {
                let invalid = || Reply::Error("ERR invalid expire time in 'set' command".into());
                let n = int_arg(text)?;
                if n <= 0 || (matches!(unit, Unit::Ex | Unit::ExAt) && n > i64::MAX / 1000) {
                    return Err(invalid());
                }
                let ms = if matches!(unit, Unit::Ex | Unit::ExAt) {
                    n * 1000
                } else {
                    n
                };
                Some(if matches!(unit, Unit::Ex | Unit::Px) {
                    ms.checked_add(self.now_ms()).ok_or_else(invalid)?
                } else {
                    ms
                })
            }
        };
        let key = &argv[1];
        let old = if get { Some(self.get(key)?) } else { None };
        let found = self.lookup(key).is_some();
        if (nx && found) || (xx && !found) {
            return Ok(old.unwrap_or(Reply::Nil));
        }
        let kept = if keepttl {
            self.lookup(key).and_then(|e| e.expire_at)
        } else {
            None
        };
        let expire_at = deadline.or(kept);
        self.entries.insert(
            key.clone(),
            Entry {
                value: Value::String(argv[2].clone()),
                expire_at,
            },
        );
        if deadline.is_some_and(|at| at <= self.now_ms()) {
            // PXAT/EXAT in the past: set, then expired at once.
            self.entries.remove(key);
        }
        Ok(old.unwrap_or_else(Reply::ok))
    }

    fn hdel(&mut self, key: &[u8], fields: &[Vec<u8>]) -> CmdResult {
        let Some(h) = self.hash(key)? else {
            return Ok(Reply::Integer(0));
        };
        let mut n = 0;
        for f in fields {
            if let Some(at) = h.iter().position(|(k, _)| k == f) {
                h.remove(at);
                n += 1;
            }
        }
        self.remove_if_empty(key);
        Ok(Reply::Integer(n))
    }

    fn hexists(&mut self, key: &[u8], field: &[u8]) -> CmdResult {
        let found = self
            .hash(key)?
            .is_some_and(|h| h.iter().any(|(k, _)| k == field));
        Ok(Reply::Integer(i64::from(found)))
    }

    fn hget(&mut self, key: &[u8], field: &[u8]) -> CmdResult {
        let v = self
            .hash(key)?
            .and_then(|h| h.iter().find(|(k, _)| k == field).map(|(_, v)| v.clone()));
        Ok(v.map_or(Reply::Nil, Reply::Bulk))
    }

    fn hgetall(&mut self, key: &[u8]) -> CmdResult {
        let out = self.hash(key)?.map_or_else(Vec::new, |h| {
            h.iter()
                .flat_map(|(k, v)| [Reply::Bulk(k.clone()), Reply::Bulk(v.clone())])
                .collect()
        });
        Ok(Reply::Array(out))
    }

    fn hincrby(&mut self, key: &[u8], field: &[u8], incr: &[u8]) -> CmdResult {
        let incr = int_arg(incr)?;
        let h = self.hash_or_create(key)?;
        let at = h.iter().position(|(k, _)| k == field);
        let old = match at {
            Some(i) => parse_i64(&h[i].1).ok_or_else(|| err("ERR hash value is not an integer"))?,
            None => 0,
        };
        let new = old
            .checked_add(incr)
            .ok_or_else(|| err("ERR increment or decrement would overflow"))?;
        let text = new.to_string().into_bytes();
        match at {
            Some(i) => h[i].1 = text,
            None => h.push((field.to_vec(), text)),
        }
        Ok(Reply::Integer(new))
    }

    fn hmget(&mut self, key: &[u8], fields: &[Vec<u8>]) -> CmdResult {
        let h = self.hash(key)?;
        let out = fields
            .iter()
            .map(|f| {
                h.as_ref()
                    .and_then(|h| h.iter().find(|(k, _)| k == f))
                    .map_or(Reply::Nil, |(_, v)| Reply::Bulk(v.clone()))
            })
            .collect();
        Ok(Reply::Array(out))
    }

    fn hset(&mut self, argv: &[Vec<u8>]) -> CmdResult {
        if argv.len() % 2 == 1 {
            return Err(err("ERR wrong number of arguments for 'hset' command"));
        }
        let h = self.hash_or_create(&argv[1])?;
        let mut added = 0;
        for pair in argv[2..].chunks(2) {
            if let Some(slot) = h.iter_mut().find(|(k, _)| *k == pair[0]) {
                slot.1.clone_from(&pair[1]);
            } else {
                h.push((pair[0].clone(), pair[1].clone()));
                added += 1;
            }
        }
        Ok(Reply::Integer(added))
    }

    fn hsetnx(&mut self, key: &[u8], field: &[u8], value: &[u8]) -> CmdResult {
        let h = self.hash_or_create(key)?;
        if h.iter().any(|(k, _)| k == field) {
            return Ok(Reply::Integer(0));
        }
        h.push((field.to_vec(), value.to_vec()));
        Ok(Reply::Integer(1))
    }

    fn lindex(&mut self, key: &[u8], index: &[u8]) -> CmdResult {
        let Some(l) = self.list(key)? else {
            return Ok(Reply::Nil);
        };
        let index = int_arg(index)?;
        let at = if index < 0 {
            len_i64(l.len()) + index
        } else {
            index
        };
        Ok(usize::try_from(at)
            .ok()
            .and_then(|i| l.get(i))
            .map_or(Reply::Nil, |v| Reply::Bulk(v.clone())))
    }

    fn pop(&mut self, argv: &[Vec<u8>], left: bool) -> CmdResult {
        if argv.len() > 3 {
            let name = if left { "lpop" } else { "rpop" };
            return Err(Reply::Error(format!(
                "ERR wrong number of arguments for '{name}' command"
            )));
        }
        let count = match argv.get(2) {
            None => None,
            Some(c) => {
                let n = int_arg(c)?;
                if n < 0 {
                    return Err(err("ERR value is out of range, must be positive"));
                }
                Some(usize::try_from(n).expect("n >= 0"))
            }
        };
        let key = &argv[1];
        let Some(l) = self.list(key)? else {
            return Ok(Reply::Nil);
        };
        let reply = match count {
            None => {
                let v = if left { l.pop_front() } else { l.pop_back() };
                v.map_or(Reply::Nil, Reply::Bulk)
            }
            Some(n) => {
                let mut out = Vec::new();
                for _ in 0..n {
                    let v = if left { l.pop_front() } else { l.pop_back() };
                    match v {
                        Some(v) => out.push(Reply::Bulk(v)),
                        None => break,
                    }
                }
                Reply::Array(out)
            }
        };
        self.remove_if_empty(key);
        Ok(reply)
    }

    fn lpos(&mut self, argv: &[Vec<u8>]) -> CmdResult {
        let mut rank: i64 = 1;
        let mut count: Option<i64> = None;
        let mut maxlen: i64 = 0;
        let mut j = 3;
        while j < argv.len() {
            let opt = &argv[j];
            let more = j + 1 < argv.len();
            if eq_ic(opt, "rank") && more {
                j += 1;
                rank = int_arg(&argv[j])?;
                if rank == 0 {
                    return Err(err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list"));
                }
            } else if eq_ic(opt, "count") && more {
                j += 1;
                let n = int_arg(&argv[j])?;
                if n < 0 {
                    return Err(err("ERR COUNT can't be negative"));
                }
                count = Some(n);
            } else if eq_ic(opt, "maxlen") && more {
                j += 1;
                maxlen = int_arg(&argv[j])?;
                if maxlen < 0 {
                    return Err(err("ERR MAXLEN can't be negative"));
                }
            } else {
                return Err(err(SYNTAX));
            }
            j += 1;
        }
        let Some(l) = self.list(&argv[1])? else {
            return Ok(if count.is_some() {
                Reply::Array(Vec::new())
            } else {
                Reply::Nil
            });
        };
        let element = &argv[2];
        let len = l.len();
        let from_tail = rank < 0;
        let rank = rank.unsigned_abs();
        let order: Box<dyn Iterator<Item = usize>> = if from_tail {
            Box::new((0..len).rev())
        } else {
            Box::new(0..len)
        };
        let mut found = Vec::new();
        let mut matches = 0u64;
        for (seen, i) in order.enumerate() {
            if maxlen != 0 && len_i64(seen) >= maxlen {
                break;
            }
            if l[i] == *element {
                matches += 1;
                if matches >= rank {
                    found.push(Reply::Integer(len_i64(i)));
                    match count {
                        None => break,
                        Some(c) if c != 0 && len_i64(found.len()) >= c => break,
                        Some(_) => {}
                    }
                }
            }
        }
        Ok(match count {
            None => found.pop().unwrap_or(Reply::Nil),
            Some(_) => Reply::Array(found),
        })
    }

    fn push(&mut self, key: &[u8], values: &[Vec<u8>], left: bool) -> CmdResult {
        let l = self.list_or_create(key)?;
        for v in values {
            if left {
                l.push_front(v.clone());
            } else {
                l.push_back(v.clone());
            }
        }
        Ok(Reply::Integer(len_i64(l.len())))
    }

    fn lrange(&mut self, key: &[u8], start: &[u8], end: &[u8]) -> CmdResult {
        let (start, end) = (int_arg(start)?, int_arg(end)?);
        let Some(l) = self.list(key)? else {
            return Ok(Reply::Array(Vec::new()));
        };
        let out = rank_range(start, end, l.len()).map_or_else(Vec::new, |(s, e)| {
            l.range(s..=e).map(|v| Reply::Bulk(v.clone())).collect()
        });
        Ok(Reply::Array(out))
    }

    fn lrem(&mut self, key: &[u8], count: &[u8], element: &[u8]) -> CmdResult {
        let count = int_arg(count)?;
        let Some(l) = self.list(key)? else {
            return Ok(Reply::Integer(0));
        };
        let limit = if count == 0 {
            usize::MAX
        } else {
            usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX)
        };
        let mut removed = 0usize;
        if count >= 0 {
            let mut i = 0;
            while i < l.len() && removed < limit {
                if l[i] == element {
                    l.remove(i);
                    removed += 1;
                } else {
                    i += 1;
                }
            }
        } else {
            let mut i = l.len();
            while i > 0 && removed < limit {
                i -= 1;
                if l[i] == element {
                    l.remove(i);
                    removed += 1;
                }
            }
        }
        self.remove_if_empty(key);
        Ok(Reply::Integer(len_i64(removed)))
    }

    fn lset(&mut self, key: &[u8], index: &[u8], element: &[u8]) -> CmdResult {
        let Some(l) = self.list(key)? else {
            return Err(err("ERR no such key"));
        };
        let index = int_arg(index)?;
        let at = if index < 0 {
            len_i64(l.len()) + index
        } else {
            index
        };
        match usize::try_from(at).ok().and_then(|i| l.get_mut(i)) {
            Some(slot) => {
                *slot = element.to_vec();
                Ok(Reply::ok())
            }
            None => Err(err("ERR index out of range")),
        }
    }

    fn ltrim(&mut self, key: &[u8], start: &[u8], end: &[u8]) -> CmdResult {
        let (start, end) = (int_arg(start)?, int_arg(end)?);
        let Some(l) = self.list(key)? else {
            return Ok(Reply::ok());
        };
        match rank_range(start, end, l.len()) {
            None => l.clear(),
            Some((s, e)) => {
                l.truncate(e + 1);
                l.drain(..s);
            }
        }
        self.remove_if_empty(key);
        Ok(Reply::ok())
    }

    fn pexpire(&mut self, argv: &[Vec<u8>]) -> CmdResult {
        let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
        for opt in &argv[3..] {
            if eq_ic(opt, "nx") {
                nx = true;
            } else if eq_ic(opt, "xx") {
                xx = true;
            } else if eq_ic(opt, "gt") {
                gt = true;
            } else if eq_ic(opt, "lt") {
                lt = true;
            } else {
                return Err(Reply::Error(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(opt)
                )));
            }
        }
        if nx && (xx || gt || lt) {
            return Err(err(
                "ERR NX and XX, GT or LT options at the same time are not compatible",
            ));
        }
        if gt && lt {
            return Err(err(
                "ERR GT and LT options at the same time are not compatible",
            ));
        }
        let ms = int_arg(&argv[2])?;
        let now = self.now_ms();
        let when = ms
            .checked_add(now)
            .ok_or_else(|| err("ERR invalid expire time in 'pexpire' command"))?;
        let key = &argv[1];
        let Some(entry) = self.lookup(key) else {
            return Ok(Reply::Integer(0));
        };
        let current = entry.expire_at;
        let refused = (nx && current.is_some())
            || (xx && current.is_none())
            || (gt && current.is_none_or(|c| when <= c))
            || (lt && current.is_some_and(|c| when >= c));
        if refused {
            return Ok(Reply::Integer(0));
        }
        if when <= now {
            self.entries.remove(key);
        } else {
            entry.expire_at = Some(when);
        }
        Ok(Reply::Integer(1))
    }

    pub(crate) fn pttl(&mut self, key: &[u8]) -> i64 {
        let now = self.now_ms();
        match self.lookup(key) {
            None => -2,
            Some(Entry {
                expire_at: None, ..
            }) => -1,
            Some(Entry {
                expire_at: Some(at),
                ..
            }) => (*at - now).max(0),
        }
    }

    fn time(&self) -> Reply {
        let secs = self.now_us.div_euclid(1_000_000);
        let micros = self.now_us.rem_euclid(1_000_000);
        Reply::Array(vec![
            Reply::Bulk(secs.to_string().into_bytes()),
            Reply::Bulk(micros.to_string().into_bytes()),
        ])
    }

    fn zadd(&mut self, argv: &[Vec<u8>]) -> CmdResult {
        let (mut nx, mut xx, mut ch, mut incr, mut gt, mut lt) =
            (false, false, false, false, false, false);
        let mut at = 2;
        while at < argv.len() {
            let opt = &argv[at];
            if eq_ic(opt, "nx") {
                nx = true;
            } else if eq_ic(opt, "xx") {
                xx = true;
            } else if eq_ic(opt, "ch") {
                ch = true;
            } else if eq_ic(opt, "incr") {
                incr = true;
            } else if eq_ic(opt, "gt") {
                gt = true;
            } else if eq_ic(opt, "lt") {
                lt = true;
            } else {
                break;
            }
            at += 1;
        }
        let rest = &argv[at..];
        if rest.is_empty() || rest.len() % 2 == 1 {
            return Err(err(SYNTAX));
        }
        if nx && xx {
            return Err(err(
                "ERR XX and NX options at the same time are not compatible",
            ));
        }
        if ((gt || lt) && nx) || (gt && lt) {
            return Err(err(
                "ERR GT, LT, and/or NX options at the same time are not compatible",
            ));
        }
        if incr && rest.len() > 2 {
            return Err(err(
                "ERR INCR option supports a single increment-element pair",
            ));
        }
        let mut pairs = Vec::with_capacity(rest.len() / 2);
        for pair in rest.chunks(2) {
            let score = parse_f64(&pair[0]).ok_or_else(|| err(NOT_FLOAT))?;
            pairs.push((score, pair[1].as_slice()));
        }
        let key = &argv[1];
        if self.zset(key)?.is_none() {
            if xx {
                return Ok(if incr { Reply::Nil } else { Reply::Integer(0) });
            }
            self.create(key, Value::ZSet(ZSet::default()));
        }
        let Some(Value::ZSet(z)) = self.value(key) else {
            unreachable!("checked as a zset or created")
        };
        let (mut added, mut updated, mut processed) = (0, 0, 0);
        let mut last = 0.0;
        for (score, member) in pairs {
            let mut score = score;
            match z.score(member) {
                Some(current) => {
                    if nx {
                        continue;
                    }
                    if incr {
                        score += current;
                        if score.is_nan() {
                            return Err(err("ERR resulting score is not a number (NaN)"));
                        }
                    }
                    if (lt && score >= current) || (gt && score <= current) {
                        continue;
                    }
                    #[allow(clippy::float_cmp)]
                    if score != current {
                        z.insert(member, score);
                        updated += 1;
                    }
                }
                None if !xx => {
                    z.insert(member, score);
                    added += 1;
                }
                None => continue,
            }
            processed += 1;
            last = score;
        }
        if incr {
            return Ok(if processed > 0 {
                Reply::Bulk(format_g17(last).into_bytes())
            } else {
                Reply::Nil
            });
        }
        Ok(Reply::Integer(if ch { added + updated } else { added }))
    }

    fn zrange(&mut self, argv: &[Vec<u8>], by_score_command: bool) -> CmdResult {
        let (mut withscores, mut rev, mut by_score) = (false, false, by_score_command);
        let mut limit: Option<(i64, i64)> = None;
        let mut j = 4;
        while j < argv.len() {
            let opt = &argv[j];
            let left = argv.len() - j - 1;
            if eq_ic(opt, "withscores") {
                withscores = true;
            } else if eq_ic(opt, "limit") && left >= 2 {
                limit = Some((int_arg(&argv[j + 1])?, int_arg(&argv[j + 2])?));
                j += 2;
            } else if !by_score_command && !rev && eq_ic(opt, "rev") {
                rev = true;
            } else if !by_score_command && !by_score && eq_ic(opt, "byscore") {
                by_score = true;
            } else {
                return Err(err(SYNTAX));
            }
            j += 1;
        }
        if limit.is_some() && !by_score {
            return Err(err(
                "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
            ));
        }
        let (min, max) = if rev && by_score {
            (&argv[3], &argv[2])
        } else {
            (&argv[2], &argv[3])
        };
        let picked: Vec<(Vec<u8>, f64)> = if by_score {
            let range = ScoreRange::parse(min, max)?;
            let Some(z) = self.zset(&argv[1])? else {
                return Ok(Reply::Array(Vec::new()));
            };
            let (offset, count) = limit.unwrap_or((0, -1));
            if offset < 0 {
                Vec::new()
            } else {
                let items: Box<dyn Iterator<Item = (&[u8], f64)>> = if rev {
                    Box::new(z.iter().rev())
                } else {
                    Box::new(z.iter())
                };
                let skip = usize::try_from(offset).expect("offset >= 0");
                let take = usize::try_from(count).unwrap_or(usize::MAX);
                items
                    .filter(|(_, s)| range.contains(*s))
                    .skip(skip)
                    .take(take)
                    .map(|(m, s)| (m.to_vec(), s))
                    .collect()
            }
        } else {
            let (start, end) = (int_arg(min)?, int_arg(max)?);
            let Some(z) = self.zset(&argv[1])? else {
                return Ok(Reply::Array(Vec::new()));
            };
            match rank_range(start, end, z.len()) {
                None => Vec::new(),
                Some((s, e)) => {
                    let items: Box<dyn Iterator<Item = (&[u8], f64)>> = if rev {
                        Box::new(z.iter().rev())
                    } else {
                        Box::new(z.iter())
                    };
                    items
                        .skip(s)
                        .take(e - s + 1)
                        .map(|(m, s)| (m.to_vec(), s))
                        .collect()
                }
            }
        };
        let mut out = Vec::new();
        for (m, s) in picked {
            out.push(Reply::Bulk(m));
            if withscores {
                out.push(Reply::Bulk(format_g17(s).into_bytes()));
            }
        }
        Ok(Reply::Array(out))
    }

    fn zrem(&mut self, key: &[u8], members: &[Vec<u8>]) -> CmdResult {
        let Some(z) = self.zset(key)? else {
            return Ok(Reply::Integer(0));
        };
        let n = members.iter().filter(|m| z.remove(m)).count();
        self.remove_if_empty(key);
        Ok(Reply::Integer(len_i64(n)))
    }

    fn zremrangebyscore(&mut self, key: &[u8], min: &[u8], max: &[u8]) -> CmdResult {
        let range = ScoreRange::parse(min, max)?;
        let Some(z) = self.zset(key)? else {
            return Ok(Reply::Integer(0));
        };
        let gone: Vec<Vec<u8>> = z
            .iter()
            .filter(|(_, s)| range.contains(*s))
            .map(|(m, _)| m.to_vec())
            .collect();
        for m in &gone {
            z.remove(m);
        }
        self.remove_if_empty(key);
        Ok(Reply::Integer(len_i64(gone.len())))
    }

    fn zscore(&mut self, key: &[u8], member: &[u8]) -> CmdResult {
        let score = self.zset(key)?.and_then(|z| z.score(member));
        Ok(score.map_or(Reply::Nil, |s| Reply::Bulk(format_g17(s).into_bytes())))
    }

    fn keys(&mut self, pattern: &[u8]) -> Reply {
        Reply::Array(
            self.dump()
                .into_iter()
                .filter(|k| glob_match(pattern, &k.key))
                .map(|k| Reply::Bulk(k.key))
                .collect(),
        )
    }

    /// Every live key (sorted), without expiring anything.
    pub(crate) fn dump(&self) -> Vec<KeyDump> {
        let now = self.now_ms();
        self.entries
            .iter()
            .filter(|(_, e)| !self.is_expired(e))
            .map(|(k, e)| KeyDump {
                key: k.clone(),
                data: match &e.value {
                    Value::String(s) => Data::String(s.clone()),
                    Value::Hash(h) => Data::Hash(h.clone()),
                    Value::List(l) => Data::List(l.iter().cloned().collect()),
                    Value::ZSet(z) => Data::ZSet(z.iter().map(|(m, s)| (m.to_vec(), s)).collect()),
                },
                pttl: e.expire_at.map(|at| (at - now).max(0)),
            })
            .collect()
    }

    /// Drops every key past its deadline (what Redis's active expiry does
    /// eventually; nothing observable changes).
    pub(crate) fn purge_expired(&mut self) {
        let now = self.now_ms();
        self.entries
            .retain(|_, e| e.expire_at.is_none_or(|at| now <= at));
    }
}

/// Redis's `stringmatchlen` for KEYS: `*`, `?`, `[...]` (with `^` and
/// ranges) and `\` escapes.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|at| glob_match(rest, &text[at..])),
        Some((b'?', rest)) => !text.is_empty() && glob_match(rest, &text[1..]),
        Some((b'[', rest)) => {
            let Some((&ch, tail)) = text.split_first() else {
                return false;
            };
            let (negate, mut class) = match rest.split_first() {
                Some((b'^', r)) => (true, r),
                _ => (false, rest),
            };
            let mut hit = false;
            loop {
                match class {
                    [] => break,
                    [b']', after @ ..] => {
                        class = after;
                        break;
                    }
                    [b'\\', escaped, after @ ..] => {
                        hit |= *escaped == ch;
                        class = after;
                    }
                    [from, b'-', to, after @ ..] if *to != b']' => {
                        let (lo, hi) = if from <= to {
                            (*from, *to)
                        } else {
                            (*to, *from)
                        };
                        hit |= (lo..=hi).contains(&ch);
                        class = after;
                    }
                    [one, after @ ..] => {
                        hit |= *one == ch;
                        class = after;
                    }
                }
            }
            hit != negate && glob_match(class, tail)
        }
        Some((b'\\', rest)) if !rest.is_empty() => {
            text.first() == rest.first() && glob_match(&rest[1..], &text[1..])
        }
        Some((one, rest)) => text.first() == Some(one) && glob_match(rest, &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_keys_does() {
        assert!(glob_match(b"*", b"abc"));
        assert!(glob_match(b"a?c", b"abc"));
        assert!(glob_match(b"a[b-c]c", b"acc"));
        assert!(!glob_match(b"a[^b]c", b"abc"));
        assert!(glob_match(b"a\\*", b"a*"));
        assert!(!glob_match(b"a\\*", b"ab"));
    }
}
