//! List commands (L*, R*).

use super::{eq_ic, err, int_arg, len_i64, rank_range, CmdResult, Db, SYNTAX};
use crate::reply::Reply;

impl Db {
    pub(super) fn lindex(&mut self, key: &[u8], index: &[u8]) -> CmdResult {
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

    pub(super) fn pop(&mut self, argv: &[Vec<u8>], left: bool) -> CmdResult {
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

    pub(super) fn lpos(&mut self, argv: &[Vec<u8>]) -> CmdResult {
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

    pub(super) fn push(&mut self, key: &[u8], values: &[Vec<u8>], left: bool) -> CmdResult {
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

    pub(super) fn lrange(&mut self, key: &[u8], start: &[u8], end: &[u8]) -> CmdResult {
        let (start, end) = (int_arg(start)?, int_arg(end)?);
        let Some(l) = self.list(key)? else {
            return Ok(Reply::Array(Vec::new()));
        };
        let out = rank_range(start, end, l.len()).map_or_else(Vec::new, |(s, e)| {
            l.range(s..=e).map(|v| Reply::Bulk(v.clone())).collect()
        });
        Ok(Reply::Array(out))
    }

    pub(super) fn lrem(&mut self, key: &[u8], count: &[u8], element: &[u8]) -> CmdResult {
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

    pub(super) fn lset(&mut self, key: &[u8], index: &[u8], element: &[u8]) -> CmdResult {
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

    pub(super) fn ltrim(&mut self, key: &[u8], start: &[u8], end: &[u8]) -> CmdResult {
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
}
