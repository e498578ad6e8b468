//! Hash commands (H*).

use super::{err, int_arg, CmdResult, Db};
use crate::format::parse_i64;
use crate::reply::Reply;

impl Db {
    pub(super) fn hdel(&mut self, key: &[u8], fields: &[Vec<u8>]) -> CmdResult {
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

    pub(super) fn hexists(&mut self, key: &[u8], field: &[u8]) -> CmdResult {
        let found = self
            .hash(key)?
            .is_some_and(|h| h.iter().any(|(k, _)| k == field));
        Ok(Reply::Integer(i64::from(found)))
    }

    pub(super) fn hget(&mut self, key: &[u8], field: &[u8]) -> CmdResult {
        let v = self
            .hash(key)?
            .and_then(|h| h.iter().find(|(k, _)| k == field).map(|(_, v)| v.clone()));
        Ok(v.map_or(Reply::Nil, Reply::Bulk))
    }

    pub(super) fn hgetall(&mut self, key: &[u8]) -> CmdResult {
        let out = self.hash(key)?.map_or_else(Vec::new, |h| {
            h.iter()
                .flat_map(|(k, v)| [Reply::Bulk(k.clone()), Reply::Bulk(v.clone())])
                .collect()
        });
        Ok(Reply::Array(out))
    }

    pub(super) fn hincrby(&mut self, key: &[u8], field: &[u8], incr: &[u8]) -> CmdResult {
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

    pub(super) fn hmget(&mut self, key: &[u8], fields: &[Vec<u8>]) -> CmdResult {
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

    pub(super) fn hset(&mut self, argv: &[Vec<u8>]) -> CmdResult {
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

    pub(super) fn hsetnx(&mut self, key: &[u8], field: &[u8], value: &[u8]) -> CmdResult {
        let h = self.hash_or_create(key)?;
        if h.iter().any(|(k, _)| k == field) {
            return Ok(Reply::Integer(0));
        }
        h.push((field.to_vec(), value.to_vec()));
        Ok(Reply::Integer(1))
    }
}
