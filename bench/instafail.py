"""A pytest plugin for the device machine's calls (``-p bench.instafail``): a failing test's report
is printed the moment it fails, so a call cut off at its limit still brings back why each test failed
(pytest's own summary comes only at the end of the session)."""

from __future__ import annotations


def pytest_runtest_logreport(report):
    if report.failed:
        print(f"\n===== FAILED {report.nodeid} ({report.when}) =====\n{report.longreprtext[-6000:]}\n"
              f"===== end {report.nodeid} =====", flush=True)
