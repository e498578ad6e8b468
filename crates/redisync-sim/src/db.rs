//! The keyspace: values, expiry on the virtual clock, and the commands.
//!
//! This file holds the keyspace and the commands on keys as a whole; the
//! commands of each type are in `string`, `hash`, `list` and `zset`,
//! expiry and the clock's commands in `expiry`.

use std::collections::{BTreeMap, VecDeque};

use crate::format::parse_i64;
use crate::reply::Reply;

mod expiry;
mod hash;
mod list;
mod string;
mod zset;

use zset::ZSet;

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
