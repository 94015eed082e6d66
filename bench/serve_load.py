"""Load on `vhd serve-env`: a burst of sessions started at once, and abandoned sessions.

    python bench/serve_load.py --db PATH [--env ID] [--runs 5] [--sessions 200] [--abandon 10000]
                               [--idle-timeout 2] [--held 2000] [--old]

Each server is the real `vhd serve-env` in its own process (`--port 0`), its RSS read from
/proc. Burst: `--sessions` client threads (one `HttpEnvClient` each) wait at a barrier, then all
reset and play π* at once; every episode must complete with the reward and outcome reward that
`vhd score` gives π* (`vhd.adapters.grade`); steps/s is all the sessions' steps over the wall
time from the barrier to the last episode's end, one figure per run and their median. Abandoned:
a second server with `--idle-timeout` seconds; 8 threads open `--abandon` sessions (`POST /reset`,
nothing after), the server's RSS and open sessions (`GET /health`) printed every tenth; then,
after the idle timeout, once more. Held: a third server that expires nothing (`--idle-timeout
86400`) holds `--held` sessions, for the memory one open session costs. `--old`: the `vhd` on
the path predates `--idle-timeout` (run from an older checkout, for a comparison; its servers
then keep every session, and `GET /health` is not there).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

from vhd.adapters import grade, load_row
from vhd.adapters.http import HttpEnvClient


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return kb / 1024


class Served:
    """`vhd serve-env ENV --port 0` in its own process, until closed."""

    def __init__(self, env_id: str, db: str, *options: str):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "300"}
        self.process = subprocess.Popen([sys.executable, "-m", "vhd.cli", "serve-env", env_id, "--port", "0",
                                         "--db", db, *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env)
        line = self.process.stdout.readline()
        found = re.search(r"http://([\d.]+):(\d+)", line)
        if not found:
            self.process.kill()
            raise SystemExit(f"serve-env did not start: {line!r} {self.process.stderr.read()[-2000:]}")
        self.port = int(found.group(2))
        self.url = f"http://127.0.0.1:{self.port}"

    def health(self) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("GET", "/health")
        answer = json.loads(conn.getresponse().read())
        conn.close()
        return answer

    def rss(self) -> float:
        return rss_mb(self.process.pid)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def burst(url: str, calls: list[dict], n: int) -> tuple[float, list, list]:
    """(wall seconds from the barrier to the last end, each session's (reward, outcome reward), failures)."""
    started: list[float] = []
    start = threading.Barrier(n, action=lambda: started.append(time.perf_counter()))
    results: list = [None] * n
    failures: list[str] = []

    def player(k: int) -> None:
        client = HttpEnvClient(url)
        try:
            start.wait()
            client.reset()
            info: dict = {}
            for call in calls:
                _, _, terminated, _, info = client.step(call)
            results[k] = (info.get("reward"), info.get("outcome_reward")) if terminated else ("not ended", None)
        except Exception as exc:  # counted, not raised
            failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            client.close()

    threads = [threading.Thread(target=player, args=(k,)) for k in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started[0], results, failures


def open_sessions(port: int, count: int, workers: int = 8) -> int:
    """`count` POST /reset on `workers` kept-alive connections, never used again; the number refused."""
    refused = [0] * workers

    def worker(w: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(count // workers + (w < count % workers)):
            conn.request("POST", "/reset", body=b"{}", headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            refused[w] += response.status != 200
        conn.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(refused)


def first_tool_env(db: str) -> str:
    listed = subprocess.run([sys.executable, "-m", "vhd.cli", "envs", "--json", "--db", db], capture_output=True,
                            text=True, check=True).stdout
    return next(e["env_id"] for e in json.loads(listed) if e["presentation"] in ("I", "A"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a warehouse with admitted environments")
    parser.add_argument("--env", help="environment id (default: the first I/A one of `vhd envs`)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--abandon", type=int, default=10_000)
    parser.add_argument("--idle-timeout", type=float, default=2.0, help="of the abandoned-sessions server")
    parser.add_argument("--held", type=int, default=2000)
    parser.add_argument("--old", action="store_true", help="the server has no --idle-timeout (an older vhd)")
    args = parser.parse_args()
    from vhd.warehouse import Warehouse

    with Warehouse.open(args.db, read_only=True) as wh:
        env_id = wh.resolve_env_id(args.env or first_tool_env(args.db))
    row = load_row(env_id, args.db)
    calls = row["grader"]["reference_trajectory"]
    scored = grade(row["grader"], calls, row["module"])
    expected = (scored["reward"], scored["outcome_reward"])
    print(f"env {env_id[:16]} ({row['family']}, {row['presentation']}), π* {len(calls)} calls, "
          f"`vhd score` reward {scored['reward']}, outcome reward {scored['outcome_reward']}")

    server = Served(env_id, args.db)
    print(f"\nburst: {args.sessions} sessions started at once, π* each ({args.sessions * len(calls)} steps a run)")
    print(f"{'run':>4} {'completed':>10} {'reward = score':>15} {'wall s':>8} {'steps/s':>9}")
    rates = []
    for k in range(1, args.runs + 1):
        seconds, results, failures = burst(server.url, calls, args.sessions)
        done = sum(r is not None and r[0] != "not ended" for r in results)
        equal = sum(r == expected for r in results)
        rate = args.sessions * len(calls) / seconds
        rates.append(rate)
        print(f"{k:>4} {done:>6}/{args.sessions} {equal:>11}/{args.sessions} {seconds:>8.2f} {rate:>9.0f}"
              + (f"   failures: {len(failures)}, e.g. {failures[0]}" if failures else ""))
    print(f"{'med':>4} {'':>10} {'':>15} {'':>8} {statistics.median(rates):>9.0f}")
    print(f"server RSS after the bursts: {server.rss():.1f} MB")
    server.close()

    if args.abandon:
        server = Served(env_id, args.db, *([] if args.old else ["--idle-timeout", f"{args.idle_timeout:g}"]))
        expiry = "no idle timeout (an older vhd)" if args.old else f"idle timeout {args.idle_timeout:g} s"
        print(f"\nabandoned: {args.abandon} sessions opened and never used again, {expiry}")
        print(f"{'opened':>7} {'refused':>8} {'open now':>9} {'RSS MB':>8} {'s':>7}")
        print(f"{0:>7} {0:>8} {server.health().get('sessions', '–'):>9} {server.rss():>8.1f} {0:>7.1f}")
        step, opened, refused, began = max(1, args.abandon // 10), 0, 0, time.perf_counter()
        while opened < args.abandon:
            count = min(step, args.abandon - opened)
            refused += open_sessions(server.port, count)
            opened += count
            print(f"{opened:>7} {refused:>8} {server.health().get('sessions', '–'):>9} {server.rss():>8.1f} "
                  f"{time.perf_counter() - began:>7.1f}")
        time.sleep(args.idle_timeout + 1.5)  # the serve loop expires idle sessions every 0.5 s
        print(f"{'+idle':>7} {refused:>8} {server.health().get('sessions', '–'):>9} {server.rss():>8.1f} "
              f"{time.perf_counter() - began:>7.1f}")
        server.close()

    if args.held:
        server = Served(env_id, args.db, *([] if args.old else ["--idle-timeout", "86400"]))
        before = server.rss()
        refused = open_sessions(server.port, args.held)
        after, sessions = server.rss(), args.held - refused
        print(f"\nheld: {sessions} sessions open (none expire; {refused} refused): "
              f"RSS {before:.1f} → {after:.1f} MB, {(after - before) * 1024 / max(1, sessions):.0f} KB a session")
        server.close()


if __name__ == "__main__":
    main()
