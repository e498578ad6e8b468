//! String commands: GET and SET with its options.

use super::{eq_ic, err, int_arg, CmdResult, Db, Entry, Value, SYNTAX};
use crate::reply::Reply;

impl Db {
    pub(super) fn get(&mut self, key: &[u8]) -> CmdResult {
        Ok(self
            .string(key)?
            .map_or(Reply::Nil, |s| Reply::Bulk(s.clone())))
    }

    pub(super) fn set(&mut self, argv: &[Vec<u8>]) -> CmdResult {
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
}
