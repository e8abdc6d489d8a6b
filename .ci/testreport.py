#!/usr/bin/env python3
"""Reads the JSON lines libtest writes (`cargo test -- -Z unstable-options --format json
--report-time`, with RUSTC_BOOTSTRAP=1 on a stable toolchain) and prints them as cargo's own
output reads, each test with its time; a failed test's captured output follows it. Every test's
time is appended to TIMES (a TSV: tier, seconds, result, name) for `.ci/run`'s ten slowest.
Lines that are not libtest JSON (cargo's own, a test binary's stderr) pass through unchanged.
Exits 0; the test command's own status is what the caller reads (pipefail).

Usage: cargo test ... | python3 .ci/testreport.py TIER TIMES
"""
import json
import sys


def main() -> int:
    tier, times_path = sys.argv[1], sys.argv[2]
    with open(times_path, "a", encoding="utf-8") as times:
        for line in sys.stdin:
            try:
                event = json.loads(line)
            except ValueError:
                sys.stdout.write(line)
                sys.stdout.flush()
                continue
            if not isinstance(event, dict):
                sys.stdout.write(line)
                continue
            kind, what = event.get("type"), event.get("event")
            if kind == "suite" and what == "started":
                print(f"\nrunning {event.get('test_count', '?')} tests")
            elif kind == "suite" and what in ("ok", "failed"):
                print(
                    f"test result: {what}. {event.get('passed', 0)} passed; "
                    f"{event.get('failed', 0)} failed; {event.get('ignored', 0)} ignored; "
                    f"{event.get('filtered_out', 0)} filtered out; "
                    f"finished in {event.get('exec_time', 0):.2f}s"
                )
            elif kind == "test" and what in ("ok", "failed", "ignored", "timeout"):
                name = event.get("name", "?")
                seconds = event.get("exec_time")
                shown = f" <{seconds:.1f}s>" if seconds is not None else ""
                print(f"test {name} ... {what}{shown}")
                if what == "failed" and event.get("stdout"):
                    print(f"---- {name} stdout ----\n{event['stdout']}")
                if seconds is not None:
                    times.write(f"{tier}\t{seconds:.3f}\t{what}\t{name}\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
