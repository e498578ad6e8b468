//! Expiry on the virtual clock: PEXPIRE, PTTL, TIME, and the purge of
//! keys past their deadline.

use super::{eq_ic, err, int_arg, CmdResult, Db, Entry};
use crate::reply::Reply;

impl Db {
    pub(super) fn pexpire(&mut self, argv: &[Vec<u8>]) -> CmdResult {
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

    pub(super) fn time(&self) -> Reply {
        let secs = self.now_us.div_euclid(1_000_000);
        let micros = self.now_us.rem_euclid(1_000_000);
        Reply::Array(vec![
            Reply::Bulk(secs.to_string().into_bytes()),
            Reply::Bulk(micros.to_string().into_bytes()),
        ])
    }

    /// Drops every key past its deadline (what Redis's active expiry does
    /// eventually; nothing observable changes).
    pub(crate) fn purge_expired(&mut self) {
        let now = self.now_ms();
        self.entries
            .retain(|_, e| e.expire_at.is_none_or(|at| now <= at));
    }
}
