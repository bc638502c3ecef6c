#!/usr/bin/env python3
"""Counts the cases of a `go test -json` run, per package.

    go-test-summary.py RUN.json [--failures]
    go-test-summary.py --total RUN.json...

A test with subtests counts through its subtests only, so a case is one
leaf test. With --failures, every failing case follows its package's line
with the output it printed (the request, the expected and the received
answer, for RonDB's REST suite).
"""
import collections
import json
import sys


def read_events(path):
    results, output, packages = {}, collections.defaultdict(list), {}
    with open(path, encoding="utf-8", errors="replace") as run:
        for line in run:
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a build message, not an event
            key = (event.get("Package"), event.get("Test"))
            action = event.get("Action")
            if action == "output":
                output[key].append(event.get("Output", ""))
            elif action in ("pass", "fail", "skip"):
                if key[1] is None:
                    packages[key[0]] = action
                else:
                    results[key] = action
    return results, output, packages


def leaves(results):
    """The tests that have no subtests of their own, and a test that failed
    by itself although its subtests passed (a t.Fatal after t.Run)."""
    cases = {}
    for key, action in results.items():
        subtests = [a for o, a in results.items() if o[0] == key[0] and o[1].startswith(key[1] + "/")]
        if not subtests or (action == "fail" and "fail" not in subtests):
            cases[key] = action
    return cases


def total(paths):
    """One line: the cases of every run together."""
    counts = collections.Counter()
    for path in paths:
        counts.update(leaves(read_events(path)[0]).values())
    run = counts["pass"] + counts["fail"]
    share = 100 * counts["pass"] / run if run else 0
    print(f"{'total':20s} pass={counts['pass']:3d} fail={counts['fail']:3d} skip={counts['skip']:3d}"
          f"  ({share:.1f}% of the cases run pass)")


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: go-test-summary.py RUN.json [--failures] | --total RUN.json...")
    if sys.argv[1] == "--total":
        total(sys.argv[2:])
        return
    results, output, packages = read_events(sys.argv[1])
    cases = leaves(results)
    for package in sorted(set(packages) | {key[0] for key in results}):
        counts = collections.Counter(a for k, a in cases.items() if k[0] == package)
        outcome = packages.get(package, "?")
        print(f"{package.rsplit('/', 1)[-1]:20s} pass={counts['pass']:3d} "
              f"fail={counts['fail']:3d} skip={counts['skip']:3d}  package={outcome}")
        if outcome == "fail" and not counts["fail"]:
            print("   failed outside any test:", "".join(output[(package, None)])[-1500:])
        if "--failures" in sys.argv[2:]:
            for (p, test), action in sorted(cases.items()):
                if p == package and action == "fail":
                    text = "".join(l for l in output[(p, test)] if not l.startswith(("=== ", "--- ")))
                    print(f"   FAIL {test}")
                    print("".join("        " + l for l in text.strip().splitlines(True)))


if __name__ == "__main__":
    main()
