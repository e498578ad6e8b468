//! Scripting semantics of the simulator, as a real Redis 7.0.15 answered
//! the same scripts (see the differential test for the scripts of `lua/`).

use redisync_sim::{Reply, SimRedis};

fn err(text: &str) -> Reply {
    Reply::Error(text.to_owned())
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(text.as_bytes().to_vec())
}

fn eval(redis: &mut SimRedis, script: &str) -> Reply {
    redis.eval::<&str, &str>(script, &[], &[])
}

/// The `script: <sha>, on @user_script:<line>.` suffix of a failed script.
fn failed(script: &str, msg: &str, line: u32) -> Reply {
    let sha = sha1_smol::Sha1::from(script).digest().to_string();
    err(&format!("{msg} script: {sha}, on @user_script:{line}."))
}

#[test]
fn conversions_follow_redis() {
    let mut r = SimRedis::new();
    assert_eq!(
        eval(&mut r, "return {1,2,nil,3}"),
        Reply::Array(vec![Reply::Integer(1), Reply::Integer(2)])
    );
    assert_eq!(
        eval(&mut r, "return {1.9, -1.9, true, false, 'x', {ok='st'}}"),
        Reply::Array(vec![
            Reply::Integer(1),
            Reply::Integer(-1),
            Reply::Integer(1),
            Reply::Nil,
            bulk("x"),
            Reply::status("st"),
        ])
    );
    assert_eq!(
        eval(&mut r, "return {1e22, 2^63, -2^63, 0/0}"),
        Reply::Array(vec![Reply::Integer(i64::MIN); 4])
    );
    assert_eq!(
        eval(&mut r, "return redis.status_reply('FOO')"),
        Reply::status("FOO")
    );
    assert_eq!(eval(&mut r, "return {ok='x', err='y'}"), err("y"));
    assert_eq!(eval(&mut r, "return {err = 5}"), Reply::Array(vec![]));
    assert_eq!(
        eval(&mut r, "return redis.call('type', 'nope')"),
        Reply::status("none")
    );
    assert_eq!(eval(&mut r, "return redis.call('get', 'nope')"), Reply::Nil);
}

#[test]
fn error_replies_follow_redis() {
    let mut r = SimRedis::new();
    assert_eq!(
        eval(&mut r, "return redis.error_reply('boom')"),
        err("ERR boom")
    );
    assert_eq!(
        eval(&mut r, "return redis.error_reply('-boom x')"),
        err("boom x")
    );
    assert_eq!(
        eval(&mut r, "return redis.error_reply('WRONGTYPE foo')"),
        err("WRONGTYPE foo")
    );
    assert_eq!(
        eval(&mut r, "return redis.error_reply('ERR')"),
        err("ERR ERR")
    );
    assert_eq!(eval(&mut r, "return {err='boom'}"), err("boom"));
    assert_eq!(
        eval(
            &mut r,
            "local t = redis.error_reply('WRONGTYPE foo'); return {type(t), t.err}"
        ),
        Reply::Array(vec![bulk("table"), bulk("WRONGTYPE foo")])
    );
    assert_eq!(
        eval(&mut r, "return ("),
        err("ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'")
    );
    for (script, msg) in [
        (
            "return x",
            "ERR user_script:1: Script attempted to access nonexistent global variable 'x'",
        ),
        (
            "y = 1 return y",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "return nil + 1",
            "ERR user_script:1: attempt to perform arithmetic on a nil value",
        ),
        (
            "return redis.call()",
            "ERR Please specify at least one argument for this redis lib call",
        ),
        (
            "return redis.call('nosuch', 's')",
            "ERR Unknown Redis command called from script",
        ),
        (
            "return redis.call('pexpire', 's')",
            "ERR Wrong number of args calling Redis command from script",
        ),
        (
            "return redis.call('pexpire', 's', nil)",
            "ERR Lua redis lib command arguments must be strings or integers",
        ),
        (
            "return redis.call('pexpire', 's', 'abc')",
            "ERR value is not an integer or out of range",
        ),
        ("return error('boom')", "ERR user_script:1: boom"),
    ] {
        assert_eq!(eval(&mut r, script), failed(script, msg, 1), "{script}");
    }
    assert_eq!(
        eval(&mut r, "return redis.pcall('nosuch')"),
        err("ERR Unknown Redis command called from script")
    );
    assert_eq!(
        eval(&mut r, "return redis.pcall('get')"),
        err("ERR Wrong number of args calling Redis command from script")
    );
}

#[test]
fn failures_name_the_line_that_failed() {
    let script = "local function f(x)
  return x + 1
end
local function g()
  return redis.call('hget', 's', 'a')
end
if ARGV[1] == 'a' then
  return f(nil)
elseif ARGV[1] == 'b' then
  return g()
elseif ARGV[1] == 'c' then
  error('boom')
elseif ARGV[1] == 'd' then
  error({err='tbl'})
elseif ARGV[1] == 'h' then
  return redis.pcall('pexpire', 's', 'x')
elseif ARGV[1] == 'i' then
  error(redis.pcall('pexpire', 's', 'x'))
end";
    let mut r = SimRedis::new();
    r.command(&["set", "s", "1"]);
    let mut run = |arg: &str| r.eval(script, &[] as &[&str], &[arg]);
    assert_eq!(
        run("a"),
        failed(
            script,
            "ERR user_script:2: attempt to perform arithmetic on local 'x' (a nil value)",
            2
        )
    );
    assert_eq!(
        run("b"),
        failed(
            script,
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            5
        )
    );
    assert_eq!(run("c"), failed(script, "ERR user_script:12: boom", 12));
    assert_eq!(run("d"), failed(script, "tbl", 14));
    assert_eq!(run("h"), err("ERR value is not an integer or out of range"));
    assert_eq!(
        run("i"),
        failed(script, "ERR value is not an integer or out of range", 18)
    );
}

#[test]
fn scores_and_numbers_are_formatted_as_redis() {
    let mut r = SimRedis::new();
    assert_eq!(
        eval(&mut r, "return redis.call('zadd', 'z', 0.1, 'm')"),
        Reply::Integer(1)
    );
    assert_eq!(
        eval(&mut r, "return redis.call('zadd', 'z', 0.5, 'w', 1e-5, 'u', 1e22, 't', 123456789012345678, 'y')"),
        Reply::Integer(4)
    );
    assert_eq!(
        r.command(&["zrange", "z", "0", "-1", "withscores"]),
        Reply::Array(
            [
                "u",
                "1.0000000000000001e-05",
                "m",
                "0.10000000000000001",
                "w",
                "0.5",
                "y",
                "1.2345678901234568e+17",
                "t",
                "1e+22"
            ]
            .into_iter()
            .map(bulk)
            .collect()
        )
    );
    assert_eq!(
        eval(&mut r, "return redis.call('zscore', 'z', 'm')"),
        bulk("0.10000000000000001")
    );
}

#[test]
fn time_and_expiry_follow_the_virtual_clock() {
    let mut r = SimRedis::with_time_us(1_700_000_000_123_456);
    assert_eq!(
        r.command(&["time"]),
        Reply::Array(vec![bulk("1700000000"), bulk("123456")])
    );
    assert_eq!(r.command(&["set", "k", "v", "PX", "100"]), Reply::ok());
    assert_eq!(r.command(&["pttl", "k"]), Reply::Integer(100));
    r.advance(std::time::Duration::from_millis(100));
    assert_eq!(r.command(&["pttl", "k"]), Reply::Integer(0));
    r.advance(std::time::Duration::from_millis(1));
    assert_eq!(r.command(&["pttl", "k"]), Reply::Integer(-2));
    assert_eq!(r.command(&["hset", "h", "a", "1"]), Reply::Integer(1));
    assert_eq!(r.command(&["pexpire", "h", "10", "GT"]), Reply::Integer(0));
    assert_eq!(r.command(&["pexpire", "h", "0"]), Reply::Integer(1));
    assert_eq!(r.command(&["exists", "h"]), Reply::Integer(0));
}

#[test]
fn publishes_are_logged() {
    let mut r = SimRedis::new();
    assert_eq!(
        eval(&mut r, "return redis.call('spublish', 'ch', 'msg')"),
        Reply::Integer(0)
    );
    let log = r.take_published();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].channel, b"ch");
    assert_eq!(log[0].payload, b"msg");
    assert!(log[0].sharded);
    assert!(r.take_published().is_empty());
}
