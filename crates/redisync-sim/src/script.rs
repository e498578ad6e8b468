//! Lua scripting as Redis 7.0 does it: the `redis` library, the
//! conversions between Lua values and replies, the error replies (with
//! the `script: <sha>, on @user_script:<line>.` suffix) and the protected
//! globals.

use std::cell::RefCell;
use std::collections::HashMap;

use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use crate::db::Db;
use crate::format::{format_g17, lua_number_to_integer};
use crate::reply::Reply;

/// The `redis` library and the error handler, in Lua. `getinfo`
/// is `debug.getinfo` reduced to what the error handler needs (the debug
/// library itself is not loaded: it is unsafe for mlua).
const SETUP: &str = r#"
local hooks, getinfo = ...
local error, type, tostring, xpcall = error, type, tostring, xpcall

-- redis.call and redis.pcall are set for each run (they reach the
-- keyspace). A failing redis.call raises an error value of mlua's (it is
-- raised from Rust); hooks.unwrap turns it into Redis's error table.
redis = {}
redis.error_reply = function(...)
  return hooks.error_reply(...)
end
redis.status_reply = function(...)
  if select('#', ...) ~= 1 or type((...)) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {ok = (...)}
end
redis.sha1hex = function(...)
  return hooks.sha1hex(...)
end
redis.log = function() end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.set_repl = function() end
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
redis.setresp = function(v)
  if v ~= 2 then
    error('RESP3 is not supported by the simulator', 2)
  end
end
redis.REDIS_VERSION = '7.0.15'
redis.REDIS_VERSION_NUM = 0x07000f

-- Redis's error handler: a table {err = ..., source = ..., line = ...},
-- the place being the script's line that failed (frames of C functions
-- and of this file skipped).
local function handler(err)
  err = hooks.unwrap(err)
  local level = 2
  local i = getinfo(level)
  while i and (i.what == 'C' or i.source == '=redisync-sim') do
    level = level + 1
    i = getinfo(level)
  end
  if type(err) ~= 'table' then
    err = {err = 'ERR ' .. tostring(err)}
  end
  if i then
    err.source = i.source
    err.line = i.currentline
  end
  return err
end

local function run(f)
  local ok, result = xpcall(f, handler)
  return ok, result
end

-- A script's own pcall sees the error table of a failed redis.call, as
-- in Redis.
local pcall, select, unpack = pcall, select, unpack
local function unwrapped(ok, ...)
  if ok then
    return ok, ...
  end
  return ok, hooks.unwrap((...))
end
_G.pcall = function(...)
  return unwrapped(pcall(...))
end

dofile, loadfile = nil, nil
setmetatable(_G, {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
  __newindex = function()
    error('Attempt to modify a readonly table', 2)
  end,
})
return run
"#;

/// The failure of a command called by `redis.call`: raised as a Lua
/// error, which the error handler turns into `{err = ...}`.
#[derive(Debug)]
struct CallFailed(String);

impl std::fmt::Display for CallFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CallFailed {}

/// The message of a [`CallFailed`] inside an mlua error.
fn call_failed(e: &mlua::Error) -> Option<&str> {
    match e {
        mlua::Error::ExternalError(inner) => {
            inner.downcast_ref::<CallFailed>().map(|c| c.0.as_str())
        }
        mlua::Error::CallbackError { cause, .. } | mlua::Error::WithContext { cause, .. } => {
            call_failed(cause)
        }
        _ => None,
    }
}

/// An error value as the script sees it: a failed `redis.call` as its
/// error table, another Rust error as its text, anything else as it is.
fn unwrap_error(lua: &Lua, v: Value) -> mlua::Result<Value> {
    match v {
        Value::Error(e) => match call_failed(&e) {
            Some(msg) => error_table(lua, msg),
            None => Ok(Value::String(lua.create_string(e.to_string())?)),
        },
        other => Ok(other),
    }
}

/// The SHA-1 of a script, as EVALSHA names it.
pub(crate) fn sha1_hex(text: &[u8]) -> String {
    sha1_smol::Sha1::from(text).digest().to_string()
}

/// CR and LF become spaces in status and error replies, as Redis does.
fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

/// A reply handed to Lua (RESP2 conversion).
pub(crate) fn reply_to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", s.as_str())?;
            Value::Table(t)
        }
        Reply::Error(s) => {
            let t = lua.create_table()?;
            t.raw_set("err", s.as_str())?;
            Value::Table(t)
        }
        #[allow(clippy::cast_precision_loss)]
        Reply::Integer(n) => Value::Number(*n as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(b)?),
        Reply::Nil => Value::Boolean(false),
        Reply::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, reply_to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

/// A value a script returned, as the reply Redis makes of it.
pub(crate) fn lua_to_reply(value: &Value) -> mlua::Result<Reply> {
    Ok(match value {
        Value::Boolean(true) => Reply::Integer(1),
        Value::Integer(n) => Reply::Integer(*n),
        Value::Number(n) => Reply::Integer(lua_number_to_integer(*n)),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(t) => {
            if let Value::String(e) = t.raw_get::<Value>("err")? {
                return Ok(Reply::Error(one_line(&e.to_string_lossy())));
            }
            if let Value::String(ok) = t.raw_get::<Value>("ok")? {
                return Ok(Reply::Status(one_line(&ok.to_string_lossy())));
            }
            let mut items = Vec::new();
            for i in 1.. {
                let item: Value = t.raw_get(i)?;
                if item.is_nil() {
                    break;
                }
                items.push(lua_to_reply(&item)?);
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    })
}

/// An error table for Lua, `{err = text}`.
fn error_table(lua: &Lua, text: &str) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.raw_set("err", text)?;
    Ok(Value::Table(t))
}

/// `redis.error_reply`: "-CODE msg" keeps its code, "msg" gets "ERR", as
/// Redis 7.0 makes the error table.
fn error_reply(lua: &Lua, args: MultiValue) -> mlua::Result<Value> {
    let args: Vec<Value> = args.into_iter().collect();
    let text = match args.as_slice() {
        [Value::String(s)] => s.to_string_lossy(),
        _ => return error_table(lua, "ERR wrong number or type of arguments"),
    };
    // Redis 7.0 adds the '-' when missing, then splits the code off at the
    // first space ("ERR" when there is none).
    let buffer = text.strip_prefix('-').unwrap_or(&text);
    let (code, msg) = buffer.split_once(' ').unwrap_or(("ERR", buffer));
    let text = format!("{code} {}", msg.trim_matches(['\r', '\n']));
    error_table(lua, &text)
}

/// Lua arguments of `redis.call` as command arguments: strings as they
/// are, numbers as `%.17g`; `None` for anything else.
fn command_args(args: &MultiValue) -> Option<Vec<Vec<u8>>> {
    args.iter()
        .map(|a| match a {
            Value::String(s) => Some(s.as_bytes().to_vec()),
            #[allow(clippy::cast_precision_loss)]
            Value::Integer(n) => Some(format_g17(*n as f64).into_bytes()),
            Value::Number(n) => Some(format_g17(*n).into_bytes()),
            _ => None,
        })
        .collect()
}

/// A command called by a script: the script's own messages for an
/// unknown command or a wrong number of arguments.
pub(crate) fn call_from_script(db: &mut Db, argv: &[Vec<u8>]) -> Reply {
    let name = String::from_utf8_lossy(&argv[0]).to_ascii_lowercase();
    let Some(arity) = crate::db::arity(&name) else {
        return Reply::error("ERR Unknown Redis command called from script");
    };
    let count = i32::try_from(argv.len()).unwrap_or(i32::MAX);
    if (arity > 0 && count != arity) || count < -arity {
        return Reply::error("ERR Wrong number of args calling Redis command from script");
    }
    db.execute(&name, argv)
}

/// The Lua state and the compiled scripts.
pub(crate) struct Engine {
    lua: Lua,
    run: Function,
    scripts: HashMap<String, Function>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("scripts", &self.scripts.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    pub(crate) fn new() -> Engine {
        Engine::try_new().expect("the simulator's Lua set-up runs")
    }

    fn try_new() -> mlua::Result<Engine> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        let hooks = lua.create_table()?;
        hooks.raw_set(
            "error_reply",
            lua.create_function(|lua, args: MultiValue| error_reply(lua, args))?,
        )?;
        hooks.raw_set(
            "sha1hex",
            lua.create_function(|lua, args: MultiValue| {
                match args.into_iter().collect::<Vec<_>>().as_slice() {
                    [Value::String(s)] => {
                        Ok(Value::String(lua.create_string(sha1_hex(&s.as_bytes()))?))
                    }
                    _ => Err(mlua::Error::runtime(
                        "wrong number of arguments or wrong argument type",
                    )),
                }
            })?,
        )?;
        hooks.raw_set(
            "unwrap",
            lua.create_function(|lua, v: Value| unwrap_error(lua, v))?,
        )?;
        let getinfo = lua.create_function(|lua, level: usize| {
            let Some(info) = lua.inspect_stack(level) else {
                return Ok(Value::Nil);
            };
            let t = lua.create_table()?;
            let source = info.source();
            t.raw_set("what", source.what)?;
            t.raw_set("source", source.source.as_deref().unwrap_or("?"))?;
            t.raw_set("currentline", info.curr_line())?;
            Ok(Value::Table(t))
        })?;
        let run: Function = lua
            .load(SETUP)
            .set_name("=redisync-sim")
            .call((hooks.clone(), getinfo))?;
        Ok(Engine {
            lua,
            run,
            scripts: HashMap::new(),
        })
    }

    /// Compiles `body` (cached by its SHA-1), or the compile error reply.
    pub(crate) fn load(&mut self, body: &[u8]) -> Result<String, Reply> {
        let sha = sha1_hex(body);
        if !self.scripts.contains_key(&sha) {
            let f = self
                .lua
                .load(body)
                .set_name("@user_script")
                .into_function()
                .map_err(|e| {
                    let msg = match e {
                        mlua::Error::SyntaxError { message, .. } => message,
                        other => other.to_string(),
                    };
                    Reply::Error(one_line(&format!(
                        "ERR Error compiling script (new function): {msg}"
                    )))
                })?;
            self.scripts.insert(sha.clone(), f);
        }
        Ok(sha)
    }

    /// Whether a script of this SHA-1 is cached.
    pub(crate) fn exists(&self, sha: &str) -> bool {
        self.scripts.contains_key(&sha.to_ascii_lowercase())
    }

    /// Forgets every script (SCRIPT FLUSH).
    pub(crate) fn flush(&mut self) {
        self.scripts.clear();
    }

    /// Runs the cached script `sha` with KEYS and ARGV on `db`.
    pub(crate) fn run(&self, db: &mut Db, sha: &str, keys: &[&[u8]], args: &[&[u8]]) -> Reply {
        let sha = sha.to_ascii_lowercase();
        let Some(f) = self.scripts.get(&sha) else {
            return Reply::error("NOSCRIPT No matching script. Please use EVAL.");
        };
        self.try_run(db, f, &sha, keys, args)
            .unwrap_or_else(|e| Reply::Error(one_line(&format!("ERR simulator failure: {e}"))))
    }

    fn try_run(
        &self,
        db: &mut Db,
        f: &Function,
        sha: &str,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> mlua::Result<Reply> {
        let lua = &self.lua;
        let globals = lua.globals();
        let to_table = |items: &[&[u8]]| -> mlua::Result<Table> {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, lua.create_string(item)?)?;
            }
            Ok(t)
        };
        globals.raw_set("KEYS", to_table(keys)?)?;
        globals.raw_set("ARGV", to_table(args)?)?;
        let db = RefCell::new(db);
        // The command of redis.call or redis.pcall: its reply, or the
        // error reply of a command that failed or could not be called.
        let command = |args: &MultiValue| -> Reply {
            if args.is_empty() {
                return Reply::error(
                    "ERR Please specify at least one argument for this redis lib call",
                );
            }
            match command_args(args) {
                Some(words) => call_from_script(&mut db.borrow_mut(), &words),
                None => {
                    Reply::error("ERR Lua redis lib command arguments must be strings or integers")
                }
            }
        };
        let (ok, result) = lua.scope(|scope| {
            let call = scope.create_function(|lua, args: MultiValue| match command(&args) {
                Reply::Error(e) => Err(mlua::Error::external(CallFailed(e))),
                reply => reply_to_lua(lua, &reply),
            })?;
            let pcall = scope
                .create_function(|lua, args: MultiValue| reply_to_lua(lua, &command(&args)))?;
            let redis: Table = globals.raw_get("redis")?;
            redis.raw_set("call", call)?;
            redis.raw_set("pcall", pcall)?;
            let out = self.run.call::<(bool, Value)>(f)?;
            redis.raw_set("call", Value::Nil)?;
            redis.raw_set("pcall", Value::Nil)?;
            Ok(out)
        })?;
        if ok {
            return lua_to_reply(&result);
        }
        let Value::Table(err) = result else {
            return Ok(Reply::error("ERR script failed"));
        };
        let msg = match err.raw_get::<Value>("err")? {
            Value::String(s) => s.to_string_lossy(),
            _ => "(null)".to_owned(),
        };
        let source: Option<String> = match err.raw_get::<Value>("source")? {
            Value::String(s) => Some(s.to_string_lossy()),
            _ => None,
        };
        let line: Option<String> = match err.raw_get::<Value>("line")? {
            Value::String(s) => Some(s.to_string_lossy()),
            Value::Integer(n) => Some(n.to_string()),
            Value::Number(n) => Some(format_g17(n)),
            _ => None,
        };
        let text = match (source, line) {
            (Some(source), Some(line)) => format!("{msg} script: {sha}, on {source}:{line}."),
            _ => format!("{msg} script: {sha}"),
        };
        Ok(Reply::Error(one_line(&text)))
    }
}
