//! Sorted sets: scores ordered as Redis orders them, score ranges, and the
//! Z* commands.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use super::{
    eq_ic, err, int_arg, len_i64, rank_range, CmdResult, Db, Value, NOT_FLOAT, RANGE_NOT_FLOAT,
    SYNTAX,
};
use crate::format::{format_g17, parse_f64, parse_score_bound};
use crate::reply::Reply;

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
    pub(super) fn len(&self) -> usize {
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

    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], f64)> + '_ {
        self.order.iter().map(|(s, m)| (m.as_slice(), s.0))
    }
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

impl Db {
    pub(super) fn zadd(&mut self, argv: &[Vec<u8>]) -> CmdResult {
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

    pub(super) fn zrange(&mut self, argv: &[Vec<u8>], by_score_command: bool) -> CmdResult {
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

    pub(super) fn zrem(&mut self, key: &[u8], members: &[Vec<u8>]) -> CmdResult {
        let Some(z) = self.zset(key)? else {
            return Ok(Reply::Integer(0));
        };
        let n = members.iter().filter(|m| z.remove(m)).count();
        self.remove_if_empty(key);
        Ok(Reply::Integer(len_i64(n)))
    }

    pub(super) fn zremrangebyscore(&mut self, key: &[u8], min: &[u8], max: &[u8]) -> CmdResult {
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

    pub(super) fn zscore(&mut self, key: &[u8], member: &[u8]) -> CmdResult {
        let score = self.zset(key)?.and_then(|z| z.score(member));
        Ok(score.map_or(Reply::Nil, |s| Reply::Bulk(format_g17(s).into_bytes())))
    }
}
