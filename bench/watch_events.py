"""What the profiler reports on this machine for a watched forward (``child/watch.py``), event by
event: names, activity types, both ids and the start times the attribution reads, beside what the
attribution made of them. For checking the watch against a real device's records, and for turning
them into attribution tests.

    python bench/watch_events.py --device cuda --out watch_events.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _value(event, name: str):
    getter = getattr(event, name, None)
    try:
        return getter() if getter is not None else None
    except Exception:  # noqa: BLE001 - a field this torch does not fill
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    import torch

    from gpu_workers.child.watch import ForwardWatch, attribute

    device = torch.device(args.device)
    x = torch.randn(1 << 20, device=device)
    w = torch.randn(256, 256, device=device)
    watch = ForwardWatch(device, "", enabled=True)
    watch.start()
    for _ in range(args.calls):
        with watch.call():  # the forward: an elementwise op pair and a matmul (cuBLAS on a GPU)
            y = torch.relu(x * 2.0)
            z = w @ w
        float(y.sum() + z.sum())  # the judge's read, after the call
    if device.type == "cuda":
        torch.cuda.synchronize()
    report = watch.stop()
    events = list(watch._profiler.profiler.kineto_results.events())
    rows = [{field: (str(v) if field == "device_type" else v) for field, v in
             ((f, _value(e, f)) for f in ("name", "activity_type", "device_type", "correlation_id",
                                          "linked_correlation_id", "start_ns", "duration_ns",
                                          "device_resource_id", "start_thread_id", "external_id",
                                          "is_user_annotation"))} for e in events]
    for row in rows:
        row["name"] = str(row["name"])[:120]
    ops, kernels, elsewhere, _ = attribute(events, watch.label)
    summary = {"torch": torch.__version__, "label": watch.label, "events": len(rows),
               "ops": ops, "kernels": kernels, "elsewhere": elsewhere,
               "report_kernels": report["kernels"], "library_kernels": report["library_kernels"]}
    Path(args.out).write_text(json.dumps({"summary": summary, "events": rows}, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
