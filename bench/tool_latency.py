"""Tool-call latency: in-process TextToolEnv.step vs the same environment over HTTP (loopback).

    python bench/tool_latency.py --export DIR [--runs 5] [--calls 200]   # DIR: what `vhd export --out` wrote

Each run plays the first I/A environment's reference trajectory repeatedly (reset between
episodes) until `--calls` steps, timing every step; prints the median step latency of each run
and the median over runs, side by side.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from vhd.adapters.gym import TextToolEnv
from vhd.adapters.http import HttpEnvClient, make_server
from vhd.tasks.corpus.export import read_export


def timed_steps(env, calls: list[dict], n: int) -> list[float]:
    times: list[float] = []
    while len(times) < n:
        env.reset()
        for call in calls:
            start = time.perf_counter()
            env.step(call)
            times.append(time.perf_counter() - start)
            if len(times) >= n:
                break
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True, help="the directory `vhd export --out` wrote (or one of its files)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    rows = read_export(args.export)
    row = next(r for r in rows if r["presentation"] in ("I", "A"))
    calls = row["grader"]["reference_trajectory"]
    server = make_server(TextToolEnv(row))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = HttpEnvClient(f"http://127.0.0.1:{server.server_address[1]}")
    local = TextToolEnv(row)
    inproc, http = [], []
    for _ in range(args.runs):
        inproc.append(statistics.median(timed_steps(local, calls, args.calls)))
        http.append(statistics.median(timed_steps(client, calls, args.calls)))
    client.close()
    server.shutdown()
    print(f"env {row['env_id'][:16]} ({row['family']}, {row['presentation']}), {args.runs} runs × {args.calls} steps")
    print(f"{'run':>4} {'in-process µs':>14} {'HTTP µs':>10}")
    for k, (a, b) in enumerate(zip(inproc, http), start=1):
        print(f"{k:>4} {a * 1e6:>14.1f} {b * 1e6:>10.1f}")
    a, b = statistics.median(inproc), statistics.median(http)
    print(f"{'med':>4} {a * 1e6:>14.1f} {b * 1e6:>10.1f}   (HTTP/in-process {b / a:.1f}×)")


if __name__ == "__main__":
    main()
