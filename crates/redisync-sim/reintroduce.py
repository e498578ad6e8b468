#!/usr/bin/env python3
"""Re-introduces fixed defects, one at a time, and lets the simulation find them.

Each entry of DEFECTS undoes one fix of the library (a few exact text
replacements) and names the class of defect it brings back. For each one
asked for, this script copies HEAD into a scratch worktree under
target/reintroduce, applies the replacements there (never to your checkout),
builds redisync-sim in release mode and explores seeds from --first-seed
until the first failing one or --minutes, then prints a table:

    python3 crates/redisync-sim/reintroduce.py --check         # every edit still applies
    python3 crates/redisync-sim/reintroduce.py --list
    python3 crates/redisync-sim/reintroduce.py [NAME ...] [--minutes 3] [--first-seed 1]

A defect the simulation does not find within the budget is reported as such;
CONTRIBUTING.md's "Simulation" section says which classes only real Redis covers.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# name, class (where it was found and fixed), edits [(file, old, new)].
DEFECTS = [
    {
        "name": "token-counter-only",
        "class": "tokens go back after a restart that lost the counter",
        "edits": [("lua/lib/tokens.lua", "return math.max(last + 1, now_us)", "return last + 1")],
    },
    {
        "name": "rw-renew-lowers-read-lease",
        "class": "RwLock read lease cut short by a renewal or extend",
        "edits": [("lua/rw_lock_renew.lua", "'zadd', readers, 'XX', 'GT',", "'zadd', readers, 'XX',")],
    },
    {
        "name": "lock-renew-lowers-lease",
        "class": "a renewal lowers a Lock's lease",
        "edits": [("lua/lock_renew.lua", "if redis.call('pttl', lock) <= lease then", "if true then")],
    },
    {
        "name": "reentry-on-any-token",
        "class": "re-entry after a loss on the old token",
        "edits": [("lua/lock_acquire.lua", "    if held[2] ~= ARGV[3] then\n", "    if false then\n")],
    },
    {
        "name": "release-by-owner-only",
        "class": "a guard that lost releases the new hold of its task",
        "edits": [("lua/lib/lock.lua", "  if not held[1] or held[2] ~= token then\n    return 0\n  end\n  if last ~= '1'",
                   "  if not held[1] then\n    return 0\n  end\n  if last ~= '1'")],
    },
    {
        "name": "undo-unordered",
        "class": "the undo of a cancelled re-entrant acquisition lands after the task's next one",
        "edits": [("crates/redisync/src/engine/undo.rs", "let ordered = spec.reentrant();", "let ordered = false;")],
    },
    {
        "name": "validity-from-reply",
        "class": "a guard's validity above what Redis holds: counted from the reply, not the request",
        "edits": [("crates/redisync/src/engine/hold.rs", "*v = (*v).max(sent_at + lease);",
                   "*v = (*v).max(Instant::now().max(sent_at) + lease);")],
    },
    {
        "name": "reentry-revives-released-hold",
        "class": "re-entry racing the last drop revives a released hold",
        "edits": [("crates/redisync/src/engine/hold.rs",
                   "(n > 0 && !self.released.load(Ordering::Acquire)).then_some(n + 1)",
                   "Some(n + 1)")],
    },
    {
        "name": "shutdown-without-telling-guards",
        "class": "shutdown releases holds under running code",
        "edits": [("crates/redisync/src/client.rs", 'hold.mark_lost("client shut down");', "let _ = hold;")],
    },
    {
        "name": "force-unlock-misses-grant-in-flight",
        "class": "force-unlock misses its own client's grant in flight",
        "edits": [("crates/redisync/src/engine/mod.rs",
                   "slot.holds.forced_through(u64::try_from(last).unwrap_or(0));",
                   "let _ = (slot, last);")],
    },
    {
        "name": "lost-signal-timer-only",
        "class": "the loss loses to the work after a stall: the signal reads only its timer",
        "edits": [("crates/redisync/src/guard.rs",
                   "        if self.is_lost() {\n            return Poll::Ready(());\n        }\n        Pin::new(&mut self.fired)",
                   "        Pin::new(&mut self.fired)")],
    },
    {
        "name": "redlock-validity-without-drift",
        "class": "Redlock's validity and signal a clock drift late",
        "edits": [("crates/redisync-redlock/src/redlock.rs",
                   ".map_or(Duration::ZERO, |edge| edge.saturating_sub(self.drift));",
                   ".map_or(Duration::ZERO, |edge| edge);")],
    },
    {
        "name": "redlock-loss-not-for-good",
        "class": "a late renewal makes a Redlock guard that ran out hold again",
        "edits": [("crates/redisync-redlock/src/redlock.rs",
                   "        if left.is_zero() {\n            // For good,",
                   "        if false {\n            // For good,")],
    },
    {
        "name": "shutdown-one-timeout-per-lock",
        "class": "shutdown with a hung Redis takes one command timeout per held lock",
        "edits": [("crates/redisync/src/client.rs",
                   "let releases = futures::future::join_all(holds.iter().map(|hold| async move {",
                   "let one_at_a_time = &tokio::sync::Mutex::new(());\n        "
                   "let releases = futures::future::join_all(holds.iter().map(|hold| async move {\n"
                   "            let _one = one_at_a_time.lock().await;"),
                  ("crates/redisync/src/client.rs",
                   "tokio::time::timeout_at(deadline, release)",
                   "tokio::time::timeout(self.inner.settings.command_timeout, release)")],
    },
    {
        "name": "redlock-reentrant-across-values",
        "class": "Redlock re-entrant across Redlock values in one task",
        "edits": [("crates/redisync-redlock/src/redlock.rs", "let mut lock = lock.non_reentrant();", "let mut lock = lock;")],
    },
    {
        "name": "try-zero-waits-for-queued-undo",
        "class": "try_lock(ZERO) waits a command timeout behind a queued undo",
        "edits": [("crates/redisync/src/engine/acquire.rs",
                   "let own_undo = || spec.reentrant() && slot.undos.has_turn(holder);",
                   "let own_undo = || spec.reentrant() && slot.undos.has(holder);"),
                  ("crates/redisync/src/engine/slot/undos.rs",
                   "            if !self.has_turn(owner) {",
                   "            if !self.has(owner) {")],
    },
    {
        "name": "zero-wait-outwaits-own-undo",
        "class": "try_lock(ZERO) waits a command timeout after its own undo passed the turn to another task (found by the simulation, seed 238)",
        "edits": [("crates/redisync/src/engine/acquire.rs",
                   "            () = slot.undos.try_ended(holder) => match deadline {",
                   "            () = std::future::pending::<()>() => match deadline {")],
    },
    {
        "name": "no-restart-guard",
        "class": "no restart guard: a young server grants",
        "edits": [("crates/redisync/src/redis/restart.rs",
                   "    let up = uptime.saturating_sub(UPTIME_SLACK);\n    max_lease.checked_sub(up).filter(|left| !left.is_zero())",
                   "    let _ = (max_lease, uptime, UPTIME_SLACK);\n    None")],
    },
    {
        "name": "stale-hand-off-message",
        "class": "a late hand-off message counts for a newer queue entry",
        "edits": [("crates/redisync/src/engine/slot/wakeups.rs", "number == current || number == next\n", "let _ = (number, current, next);\n        true\n")],
    },
    {
        "name": "rw-read-reentry-after-readers-expired",
        "class": "RwLock read re-entry after the readers key ran out (found by the simulation)",
        "edits": [("lua/rw_lock_acquire.lua", "the hash lived on): not re-entered, a fresh grant.\n    held[4], held[5] = false, false\n",
                   "the hash lived on): not re-entered, a fresh grant.\n")],
    },
    # Each class below names the real-Redis test that failed before its
    # fix. The simulation (every public call ended
    # every way, restarts behind a proxy, two guarded sets) finds most in
    # seconds; not (2 minutes, first seed 1): a force-unlock in doubt that
    # keeps the guards (the window is one command on the same connection),
    # an aborted waiter at shutdown (no workload step: its rule needs the
    # checker's fault windows), RwLock sides of one owner asked together
    # (the twin flows are FairLock's).
    {
        "name": "owner-flows-without-turns",
        "class": "two flows of one owner on a FairLock or RwLock side both hold (a fresh attempt takes the first one's field over as stale); tests/conformance.rs two_flows_of_one_owner_never_both_hold",
        "edits": [("crates/redisync/src/engine/acquire.rs", "if spec.reentrant() && !matches!(gate, Gate::WhileHeld | Gate::Bypass) {", "if false {")],
    },
    {
        "name": "hand-off-in-doubt-frees-owner",
        "class": "a hand-off whose script never ran lets its old owner take the field over while the guard says held; tests/lock/hand_off.rs a_hand_off_that_never_ran_leaves_one_holder",
        "edits": [("crates/redisync/src/engine/hold.rs", "            *owner = from;\n        }\n", "            *owner = from;\n        }\n        self.end_owner_turn();\n")],
    },
    {
        "name": "force-unlock-in-doubt-keeps-guards",
        "class": "a force-unlock whose outcome is unknown leaves this client's guards saying held; tests/conformance.rs a_force_unlock_whose_outcome_is_unknown_leaves_the_guards_lost",
        "edits": [("crates/redisync/src/engine/mod.rs", "            hold.mark_lost(\"force-unlocked\");\n", "            let _ = hold;\n"),
                  ("crates/redisync/src/engine/mod.rs", "            slot.holds.forced_in_doubt();", "            let _ = slot;")],
    },
    {
        "name": "shutdown-forgets-aborted-waiters",
        "class": "a waiter aborted as its client shuts down stays queued in Redis (handed the lock, it blocks a whole lease); tests/conformance.rs an_aborted_waiter_leaves_the_queue_at_shutdown",
        "edits": [("crates/redisync/src/engine/undo.rs", "shutdown_waits.or_else(|| client.start_background())", "client.start_background()")],
    },
    {
        "name": "restart-guard-per-connection-only",
        "class": "a restart behind a proxy that keeps the connection is not seen by the restart guard; tests/conformance.rs restart_guard_sees_a_restart_behind_a_proxy_that_keeps_the_connection",
        "edits": [("lua/lib/restart_guard.lua", "if #ARGV >= 3 and ARGV[#ARGV - 2] == '~restart-guard' then", "if false then")],
    },
    {
        "name": "redlock-node-guard-per-connection-only",
        "class": "a Redlock node restarted behind a proxy that keeps the connection is not seen by its node's restart guard; tests/redlock/redlock.rs a_node_restarted_behind_a_proxy_that_keeps_the_connection_is_judged_again",
        "edits": [("crates/redisync-redlock/src/redlock.rs", "            if !max_lease.is_zero() {\n                // The node's scripts", "            if false {\n                // The node's scripts")],
    },
    {
        "name": "reentry-undo-after-next-flow",
        "class": "a re-entry in flight when its hold is lost lets the owner's next flow in, and its undo deletes that flow's grant (found by the simulation with the two-flow step, seeds 30211 and 30033)",
        "edits": [("crates/redisync/src/engine/acquire.rs", "    let _turns = hold.turns();\n", "    let _turns = ();\n")],
    },
    {
        "name": "rw-sides-in-separate-owner-lines",
        "class": "two flows of one owner asking an RwLock's write and read sides together both hold; tests/lock/owner_turns.rs rw_write_and_read_flows_of_one_owner_asking_together_never_both_hold",
        "edits": [("crates/redisync/src/engine/acquire.rs", "let line = slot.queue.owner_lines.join(owner);", "let line = slot.queue.owner_lines.join(holder);")],
    },
    {
        "name": "force-in-doubt-without-a-slot",
        "class": "a force-unlock in doubt, called while no task used the name, misses a grant sent during the call; tests/lock/faults.rs force_unlock_in_doubt_loses_a_grant_sent_during_the_call_without_an_earlier_slot",
        "edits": [("crates/redisync/src/engine/mod.rs", "        let mut in_doubt = ForceInDoubt(Some(slot));\n", "        drop(slot);\n        let mut in_doubt = ForceInDoubt(client.hub.existing_slot(&self.key).map(|_| client.hub.slot(&self.key, &self.channel)));\n")],
    },
    {
        "name": "shutdown-skips-hand-off-in-doubt",
        "class": "a shutdown releases a hold whose hand-off is in doubt under its new owner id only: the name stays taken for the lease; tests/lock/hand_off/in_doubt.rs shutdown_after_a_hand_off_in_doubt_frees_the_name",
        "edits": [("crates/redisync/src/engine/guard_core.rs", "    finish_rebind(client, hold).await?;\n    (hold.ops.release)(", "    (hold.ops.release)(")],
    },
    {
        "name": "undo-gives-up-during-shutdown",
        "class": "the undo of a waiter aborted before a shutdown gives up at a connection reset while the shutdown runs: the departed waiter stays queued (found by the simulation); tests/connection/shutdown.rs an_undo_reset_during_the_shutdown_is_sent_again",
        "edits": [("crates/redisync/src/engine/undo.rs", "&& !client.connections_closed() =>", "&& client.check_connected().is_ok() =>")],
    },
    {
        "name": "release-gives-up-during-shutdown",
        "class": "the background release of a guard dropped before a shutdown gives up at a connection reset while the shutdown runs: the name stays taken for the lease (found by the simulation); tests/connection/shutdown.rs a_release_reset_during_the_shutdown_is_sent_again",
        "edits": [("crates/redisync/src/engine/guard_core.rs", "|| client.check_still_connected(),", "|| client.check_open(),")],
    },
    {
        "name": "semaphore-one-permit-too-many",
        "class": "(synthetic) a semaphore grants one permit too many",
        "edits": [("lua/semaphore_acquire.lua", "total - state.used >= wanted then", "total - state.used + 1 >= wanted then")],
    },
]


# An edit applies only next to its marker: a comment line
# `reintroduce: <name>` (`//` in Rust, `--` in Lua) at most MARKER_REACH
# lines above the first line of the text it replaces. The marker tells
# whoever changes that line that a defect class is tied to it (and --check,
# run in CI, fails until this table follows).
MARKER_REACH = 3
MARKER = re.compile(r"^\s*(?://|--) reintroduce: ([a-z0-9-]+)\s*$")
SCANNED = ("crates", "lua")


def markers(text):
    """(line number, name) of every marker in `text`."""
    return [(i, m.group(1)) for i, line in enumerate(text.split("\n")) if (m := MARKER.match(line))]


def problems(tree, defect):
    """Why the defect's edits would not apply to `tree` (empty: they do)."""
    out = []
    by_path = {}
    for path, old, _ in defect["edits"]:
        by_path.setdefault(path, []).append(old)
    for path, olds in by_path.items():
        with open(os.path.join(tree, path), encoding="utf-8") as f:
            text = f.read()
        mine = [i for i, name in markers(text) if name == defect["name"]]
        if len(mine) != len(olds):
            out.append(f"{path}: {len(mine)} markers 'reintroduce: {defect['name']}' for {len(olds)} edits")
        for old in olds:
            count = text.count(old)
            if count != 1:
                out.append(f"{path}: the text to replace occurs {count} times, not once")
                continue
            line = text[: text.index(old)].count("\n")
            if not any(0 < line - i <= MARKER_REACH for i in mine):
                out.append(f"{path}:{line + 1}: the text to replace is not right below its marker")
    return out


def apply(tree, defect):
    found = problems(tree, defect)
    if found:
        return "; ".join(found)
    for path, old, new in defect["edits"]:
        full = os.path.join(tree, path)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        with open(full, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new))
    return None


def check():
    bad = 0
    for d in DEFECTS:
        for problem in problems(ROOT, d):
            bad += 1
            print(f"{d['name']}: {problem}")
    names = {d["name"] for d in DEFECTS}
    for top in SCANNED:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for file in files:
                if not file.endswith((".rs", ".lua")):
                    continue
                path = os.path.join(dirpath, file)
                with open(path, encoding="utf-8") as f:
                    for i, name in markers(f.read()):
                        if name not in names:
                            bad += 1
                            print(f"{os.path.relpath(path, ROOT)}:{i + 1}: marker of no defect: {name}")
    print(f"{len(DEFECTS)} defects, {bad} problems")
    return bad == 0


def run(names, minutes, first_seed, out):
    work = os.path.join(ROOT, "target", "reintroduce")
    tree = os.path.join(work, "tree")
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(work, "target"))
    os.makedirs(work, exist_ok=True)
    if not os.path.isdir(tree):
        subprocess.run(["git", "-C", ROOT, "worktree", "prune"], check=True)
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, "HEAD"], check=True,
                       stdout=subprocess.DEVNULL)
    # Every defect against the same commit: the one checked out now.
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    for d in (d for d in DEFECTS if not names or d["name"] in names):
        subprocess.run(["git", "-C", tree, "checkout", "-q", "--detach", "--force", head], check=True)
        subprocess.run(["git", "-C", tree, "clean", "-q", "-fd"], check=True)
        row = {"name": d["name"], "class": d["class"]}
        problem = apply(tree, d)
        if problem:
            row["result"] = "edit does not apply: " + problem
        else:
            build = subprocess.run(["cargo", "build", "-q", "--release", "-p", "redisync-sim"], cwd=tree,
                                   env={**os.environ, "CARGO_TARGET_DIR": target},
                                   capture_output=True, text=True)
            if build.returncode != 0:
                lines = build.stderr.strip().splitlines() or ["(no output)"]
                # The first error, not cargo's closing "could not compile".
                row["result"] = "build failed: " + next((l for l in lines if l.startswith("error")), lines[-1])[:200]
            else:
                started = time.monotonic()
                sim = subprocess.run([os.path.join(target, "release", "redisync-sim"), "--minutes", str(minutes),
                                      "--first-seed", str(first_seed), "--stop-at-first"],
                                     capture_output=True, text=True)
                secs = time.monotonic() - started
                summary = re.search(r"(\d+) schedules .*?(\d+) failing seeds", sim.stdout)
                # The explorer prints "seed N: ..." only for a failing seed.
                first = next((l for l in sim.stdout.splitlines() if l.startswith("seed ")), "")
                schedules = int(summary.group(1)) if summary else 0
                if summary and int(summary.group(2)) > 0:
                    row["result"] = f"found in {schedules} seeds / {secs:.1f} s"
                    row["first"] = first[:240]
                else:
                    row["result"] = f"not found in {schedules} seeds / {secs:.0f} s"
        print(f"| {row['name']} | {row['class']} | {row['result']} | {row.get('first', '')} |", flush=True)
        if out:
            with open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
    subprocess.run(["git", "-C", tree, "checkout", "-q", "--force", "--detach"], check=False)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="defects to run (default: all)")
    p.add_argument("--check", action="store_true", help="only check that every edit applies to this checkout")
    p.add_argument("--list", action="store_true", help="list the defects")
    p.add_argument("--minutes", type=float, default=3.0, help="budget per defect")
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--out", help="append each result as a JSON line to this file")
    args = p.parse_args()
    if args.list:
        for d in DEFECTS:
            print(f"{d['name']}: {d['class']}")
        return 0
    if args.check:
        return 0 if check() else 1
    unknown = set(args.names) - {d["name"] for d in DEFECTS}
    if unknown:
        print(f"unknown defects: {sorted(unknown)} (see --list)")
        return 2
    print("| defect | class | result | first violation |\n|---|---|---|---|", flush=True)
    run(args.names, args.minutes, args.first_seed, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
