"""N refreshes on N warehouses at once, each with its own temporary Prefect server, under CPU burners.

    PYTHONPATH=. python bench/concurrent_refreshes.py --refreshes 3 --burners 2
    PYTHONPATH=. python bench/concurrent_refreshes.py --startup-timeout 20   # Prefect's own default

Prints one JSON object: per refresh its exit code, wall seconds and error line (if any), the
total wall time and the load average before and after. The figures are in docs/RELIABILITY.md
("Files, inputs, locks and load"); `tests/test_faults.py` runs the 3 × 2 case as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refreshes", type=int, default=3)
    parser.add_argument("--burners", type=int, default=2, help="`yes > /dev/null` processes running throughout")
    parser.add_argument("--startup-timeout", type=int, default=None,
                        help="PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS (default: vhd's, 180 s)")
    parser.add_argument("--families", default="inventory_dp")
    parser.add_argument("--per-family", type=int, default=1)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="vhd-concurrent-"))
    env = {**os.environ, "PREFECT_HOME": str(out / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    if args.startup_timeout is not None:
        env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = str(args.startup_timeout)
    load_before = os.getloadavg()
    burners = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.burners)]
    runs, rows = [], []
    try:
        started = time.perf_counter()
        for k in range(args.refreshes):
            command = [sys.executable, "-m", "vhd.cli", "refresh", "--families", args.families, "--per-family",
                       str(args.per_family), "--presentations", "I", "--batch", "load", "--db",
                       str(out / f"w{k}.duckdb"), "--json"]
            runs.append((time.perf_counter(), subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                                               stderr=subprocess.PIPE, text=True,
                                                               start_new_session=True)))
        rows = [{} for _ in runs]

        def wait(k: int, began: float, process: subprocess.Popen) -> None:
            _, err = process.communicate(timeout=1800)
            errors = [line for line in err.splitlines() if line.startswith("error: ")]
            rows[k] = {"rc": process.returncode, "seconds": round(time.perf_counter() - began, 1),
                       "error": errors[-1] if errors else None, "traceback": "Traceback" in err}

        waiters = [threading.Thread(target=wait, args=(k, *run)) for k, run in enumerate(runs)]
        for waiter in waiters:
            waiter.start()
        for waiter in waiters:
            waiter.join()
        wall = time.perf_counter() - started
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        for _, process in runs:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    print(json.dumps({"refreshes": rows, "succeeded": sum(r["rc"] == 0 for r in rows), "wall_seconds": round(wall, 1),
                      "startup_timeout": args.startup_timeout or 180, "burners": args.burners,
                      "load_before": [round(x, 2) for x in load_before],
                      "load_after": [round(x, 2) for x in os.getloadavg()]}, indent=2))


if __name__ == "__main__":
    main()
