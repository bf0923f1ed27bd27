#!/usr/bin/env python3
"""Counts test cases (not test binaries) after `bazel test` and prints them.

Reads Bazel's build event stream (--build_event_json_file) for every test
target's overall status and each target's test.xml for its cases. A target
that failed while its XML shows no failing case (it crashed, timed out,
failed to build, or a non-reporting MPI rank failed) counts as one failed
case, so the totals can never hide a failure. Extra checks run outside
`bazel test` (such as the CUDA compile) are passed as --check NAME=STATUS.

Prints each failed case and each skipped test, then "N passed, N failed"
(", N skipped" when some could not run here); exits 1 if any failed.
"""

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ElementTree


def test_targets(bep_path):
    """Returns {label: overall status} for every configured test target."""
    labels, status = set(), {}
    with open(bep_path, encoding="utf-8") as stream:
        for line in stream:
            event = json.loads(line)
            event_id = event.get("id", {})
            if "targetConfigured" in event_id and "testSize" in event.get("configured", {}):
                labels.add(event_id["targetConfigured"]["label"])
            elif "testSummary" in event_id:
                label = event_id["testSummary"]["label"]
                status[label] = event.get("testSummary", {}).get("overallStatus", "NO_STATUS")
    return {label: status.get(label, "NO RESULT (it did not build, or did not run)") for label in sorted(labels)}


def xml_cases(xml_path):
    """Returns [(case name, failure text or None)] from one test.xml."""
    if not os.path.exists(xml_path):
        return []
    cases = []
    for case in ElementTree.parse(xml_path).getroot().iter("testcase"):
        problems = [p.get("message", p.tag) for p in case if p.tag in ("failure", "error")]
        cases.append((case.get("name", "?"), "; ".join(problems) if problems else None))
    return cases


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bep", required=True)
    parser.add_argument("--testlogs", required=True)
    parser.add_argument("--check", action="append", default=[], metavar="NAME=passed|failed")
    parser.add_argument("--skipped", action="append", default=[], metavar="NAME (WHY)",
                        help="a test that could not run here; listed, never counted as passed")
    args = parser.parse_args()

    passed, failed = 0, []
    not_run = {line.split()[0] for line in args.skipped}
    for label, status in test_targets(args.bep).items():
        if label in not_run:
            continue
        package, name = label.lstrip("/").split(":")
        cases = xml_cases(os.path.join(args.testlogs, package, name, "test.xml"))
        # Bazel writes its own one-case XML for binaries that write none.
        own_failures = [f"{label} {case}: {text}" for case, text in cases if text is not None]
        passed += sum(1 for _, text in cases if text is None)
        failed += own_failures
        if status not in ("PASSED", "FLAKY") and not own_failures:
            failed.append(f"{label}: {status}")

    for check in args.check:
        name, _, status = check.rpartition("=")
        if status == "passed":
            passed += 1
        else:
            failed.append(f"{name}: {status}")

    for line in failed:
        print(f"FAILED {line}")
    for line in args.skipped:
        print(f"SKIPPED {line}")
    skipped = f", {len(args.skipped)} skipped" if args.skipped else ""
    print(f"{passed} passed, {len(failed)} failed{skipped}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
