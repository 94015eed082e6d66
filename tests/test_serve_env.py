"""`vhd serve-env` under load and abuse (issue 27, item 6, "Serving that holds").

Every refusal is one line of JSON with its status (also what `BaseHTTPRequestHandler` refuses
itself: an unknown method, a garbage request line, an oversized header); a session unused for the
idle timeout expires and its id answers 410, so abandoned sessions never exhaust the session
limit; a connection that sends nothing, or sends a request too slowly, is closed after the read
timeout; 200 sessions started at once all finish π* with the reward of `vhd score`. Time is a
clock the test advances (the server takes one), except for the one real read timeout of 0.3 s.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import select
import socket
import subprocess
import sys
import threading
import time

import pytest

from family_kit import admitted_environments
from vhd.adapters import grade
from vhd.adapters.http import BACKLOG, HttpEnvClient, make_server
from vhd.mechanisms import registry


@pytest.fixture(scope="module")
def row():
    """An admitted knapsack environment (π* is a few calls), made by the pipeline's own stages."""
    return admitted_environments(registry.get("knapsack"))[0][1]


class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextlib.contextmanager
def serving(row, **options):
    server = make_server(row, **options)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield server, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def exchange(port: int, data: bytes, method: str = "POST") -> tuple[int, dict, bytes]:
    """Send raw bytes on a new connection; (status, headers, body) of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()


def error_of(status_headers_body) -> str:
    status, headers, body = status_headers_body
    assert headers["content-type"] == "application/json", headers
    answer = json.loads(body)
    assert set(answer) == {"error"} and isinstance(answer["error"], str), answer
    assert "\n" not in answer["error"] and len(answer["error"]) <= 500, answer
    return answer["error"]


def post(conn: http.client.HTTPConnection, path: str, body) -> tuple[int, dict]:
    conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def get(conn: http.client.HTTPConnection, path: str) -> tuple[int, dict]:
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, json.loads(response.read())


LONG_HEADER = b"X-Long: " + b"a" * 70_000 + b"\r\n"
MANY_HEADERS = b"".join(b"X-%d: 1\r\n" % k for k in range(101))

REFUSALS = {  # raw request → (status, a part of the error it must name)
    "PUT": (b"PUT /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 405, "method 'PUT' is not served"),
    "DELETE": (b"DELETE /state?session_id=a HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method 'DELETE' is not served"),
    "PATCH": (b"PATCH /step HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method 'PATCH'"),
    "an invented method": (b"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method 'BREW'"),
    "a garbage request line": (b"GARBAGE\r\n\r\n", 400, "Bad request syntax ('GARBAGE')"),
    "binary bytes": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, "malformed request"),
    "a bad version": (b"GET /state HTTP/one\r\n\r\n", 400, "Bad request version"),
    "HTTP/2": (b"GET /state HTTP/2.0\r\n\r\n", 505, "expected HTTP/1.1"),
    "a request line over 64 KiB": (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414, "longer than 65,536 bytes"),
    "a header line over 64 KiB": (b"GET /health HTTP/1.1\r\n" + LONG_HEADER + b"\r\n", 431, "request header too large"),
    "101 headers": (b"GET /health HTTP/1.1\r\n" + MANY_HEADERS + b"\r\n", 431, "Too many headers"),
    "a body that is not JSON": (b"POST /reset HTTP/1.1\r\nContent-Length: 9\r\n\r\n{not json", 400, "not JSON"),
    "a JSON body that is not an object": (b"POST /reset HTTP/1.1\r\nContent-Length: 2\r\n\r\n[]", 400,
                                          "must be a JSON object"),
    "a Content-Length that is not a number": (b"POST /reset HTTP/1.1\r\nContent-Length: ten\r\n\r\n", 400,
                                              "Content-Length is not a number"),
    "a body over 1 MiB": (b"POST /reset HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n", 413, "at most 1048576"),
    "a chunked body": (b"POST /reset HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 411,
                       "send Content-Length"),
    "an unknown route": (b"POST /nowhere HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 404, "no route POST /nowhere"),
    "an unknown session": (b"GET /state?session_id=nobody HTTP/1.1\r\n\r\n", 404, "no session 'nobody'"),
    "a step without an action": (b"POST /step HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 400, '"action"'),
}


def test_every_refusal_is_one_line_of_json_with_its_status(row):
    with serving(row) as (server, port):
        for label, (data, status, text) in REFUSALS.items():
            answer = exchange(port, data)
            assert answer[0] == status, (label, answer)
            assert text in error_of(answer), (label, answer)
            if status == 405:
                assert answer[1]["allow"] == "GET, POST", label
        status, headers, body = exchange(port, b"HEAD /state HTTP/1.1\r\n\r\n", method="HEAD")
        assert (status, headers["content-type"], body) == (405, "application/json", b"")  # HEAD: no body, by HTTP
        # the server still plays after all that
        client = HttpEnvClient(f"http://127.0.0.1:{port}")
        client.reset()
        assert client.finish()[0] == grade(row["grader"], [], row["module"])["reward"]
        client.close()


def test_a_body_refusal_keeps_the_connection_in_step(row):
    """A refused body that was read in full leaves the kept-alive connection usable for the next request."""
    with serving(row) as (server, port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/reset", body=b"{not json")
        response = conn.getresponse()
        assert response.status == 400 and "not JSON" in json.loads(response.read())["error"]
        status, opened = post(conn, "/reset", {})
        assert status == 200 and opened["session_id"]
        conn.close()


def test_an_idle_session_expires_and_its_id_answers_410(row):
    clock = Clock()
    # a read timeout the clock's jumps do not pass: the kept-alive connection below stays open
    with serving(row, idle_timeout=100, read_timeout=10_000, clock=clock) as (server, port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        first, second = (post(conn, "/reset", {})[1]["session_id"] for _ in range(2))
        clock.advance(60)
        call = row["grader"]["reference_trajectory"][0]
        assert post(conn, "/step", {"session_id": second, "action": call})[0] == 200  # used: its 100 s start again
        clock.advance(60)  # first: 120 s unused; second: 60 s
        status, answer = post(conn, "/step", {"session_id": first, "action": call})
        assert status == 410 and "expired" in answer["error"] and "100 s" in answer["error"], answer
        status, answer = get(conn, f"/state?session_id={first}")
        assert status == 410 and "POST /reset" in answer["error"]
        status, state = get(conn, f"/state?session_id={second}")
        assert status == 200 and state["steps"] == 1
        assert get(conn, "/health")[1]["sessions"] == 1
        # the serve loop expires sessions with no request coming in
        clock.advance(100)
        for _ in range(500):  # the loop runs every 10 ms; a backstop of 5 s, not a measurement
            if len(server.sessions) == 0:
                break
            time.sleep(0.01)
        assert len(server.sessions) == 0
        assert post(conn, "/finish", {"session_id": second})[0] == 410
        # an expired id may be opened again, as a new episode
        status, opened = post(conn, "/reset", {"session_id": first})
        assert status == 200 and opened["session_id"] == first
        assert get(conn, f"/state?session_id={first}")[1]["steps"] == 0
        conn.close()


def test_abandoned_sessions_never_exhaust_the_session_limit(row):
    """2,000 sessions opened and abandoned, a second apart, on a server of 64 sessions that expire
    after 50 s unused: every reset is served, and a new session still plays π* to its reward."""
    clock = Clock()
    with serving(row, idle_timeout=50, max_sessions=64, read_timeout=10_000, clock=clock) as (server, port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        opened = []
        for _ in range(2000):
            status, answer = post(conn, "/reset", {})
            assert status == 200, answer
            opened.append(answer["session_id"])
            clock.advance(1)
        assert len(set(opened)) == 2000
        assert get(conn, "/health")[1]["sessions"] == 49  # opened in the last 50 s (at t = 1951 … 1999 of 2000)
        assert post(conn, "/finish", {"session_id": opened[0]})[0] == 410
        conn.close()
        client = HttpEnvClient(f"http://127.0.0.1:{port}")
        client.reset()
        calls = row["grader"]["reference_trajectory"]
        for call in calls:
            _, r, terminated, _, info = client.step(call)
        assert terminated and info["reward"] == grade(row["grader"], calls, row["module"])["reward"] == 1.0
        client.close()


def test_a_full_server_answers_503_until_a_session_finishes_or_expires(row):
    clock = Clock()
    with serving(row, idle_timeout=50, max_sessions=8, read_timeout=10_000, clock=clock) as (server, port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        held = [post(conn, "/reset", {})[1]["session_id"] for _ in range(8)]
        clock.advance(20)
        conn.request("POST", "/reset", body=b"{}")
        response = conn.getresponse()
        answer = json.loads(response.read())
        assert response.status == 503 and "8 sessions are open" in answer["error"], answer
        assert response.getheader("Retry-After") == "30"
        assert post(conn, "/finish", {"session_id": held[3]})[0] == 200
        assert post(conn, "/reset", {})[0] == 200  # takes the finished one's place
        status, answer = get(conn, f"/state?session_id={held[3]}")
        assert status == 410 and "had finished and was closed to make room" in answer["error"], answer
        assert post(conn, "/reset", {})[0] == 503
        clock.advance(30)  # the first seven are 50 s unused
        status, answer = post(conn, "/reset", {})
        assert status == 200 and get(conn, "/health")[1]["sessions"] == 2
        assert post(conn, "/finish", {"session_id": held[0]})[0] == 410
        conn.close()


def test_a_silent_connection_is_closed_after_the_read_timeout(row):
    with serving(row, read_timeout=0.3) as (server, port):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            assert sock.recv(1024) == b""  # closed by the server, without an answer (a recv timeout raises)
        # a kept-alive connection idle after its request is closed the same way
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            response = http.client.HTTPResponse(sock)
            response.begin()
            assert response.status == 200 and json.loads(response.read())["read_timeout"] == 0.3
            assert sock.recv(1024) == b""
        assert server._reading == {}
        # HttpEnvClient's kept-alive connection is closed between two steps: its next call reconnects
        client = HttpEnvClient(f"http://127.0.0.1:{port}")
        client.reset()
        sock = client._conn.sock
        readable, _, _ = select.select([sock], [], [], 30)  # the server's end of the connection, within 30 s
        assert readable and sock.recv(1, socket.MSG_PEEK) == b""
        _, _, _, _, info = client.step(row["grader"]["reference_trajectory"][0])
        assert info["steps"] == 1
        client.close()


def awaited(server) -> None:
    """Wait until the server awaits a request on a connection (its read deadline set), so that
    advancing the clock passes that deadline; a backstop of 5 s, not a measurement."""
    for _ in range(500):
        if server._reading:
            return
        time.sleep(0.01)
    raise AssertionError("the server never started reading the connection")


def test_a_slow_request_gets_408_at_the_deadline_and_a_prompt_one_is_served(row):
    """Slow-loris: a request trickled in byte by byte is cut off when the read deadline passes
    (on the server's clock, not at each byte), answered 408, and its connection closed."""
    clock = Clock()
    with serving(row, read_timeout=30, clock=clock) as (server, port):
        request = b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            for byte in request[:30]:
                sock.sendall(bytes([byte]))
                time.sleep(0.002)
            awaited(server)
            clock.advance(31)
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            error = error_of((answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()))
            assert answer.status == 408 and "30 s" in error and "read timeout" in error
            assert sock.recv(1024) == b""
        # a request that stops in its body is cut off the same way
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(request[:-1])
            awaited(server)
            time.sleep(0.05)  # for the headers to be read (408 either way)
            clock.advance(31)
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            assert answer.status == 408
        # the same bytes trickled within the deadline are served
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            for byte in request:
                sock.sendall(bytes([byte]))
                time.sleep(0.002)
            clock.advance(29)
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            assert answer.status == 200 and json.loads(answer.read())["session_id"]


def test_two_hundred_sessions_started_at_once_all_complete_pi_star(row):
    calls = row["grader"]["reference_trajectory"]
    scored = grade(row["grader"], calls, row["module"])  # `vhd score`'s rewards for π*
    assert scored["reward"] == 1.0
    n = 200
    start = threading.Barrier(n)
    got: dict[int, tuple] = {}
    failed: dict[int, str] = {}

    def player(k: int) -> None:
        client = HttpEnvClient(url)
        try:
            start.wait()
            client.reset()
            paid = []
            for call in calls:
                _, r, terminated, _, info = client.step(call)
                paid.append(r)  # the step rewards: they sum to the episode's reward
            got[k] = (terminated, info["reward"], round(sum(paid), 12), info["outcome_reward"], info["utility"])
        except Exception as exc:  # reported below
            failed[k] = f"{type(exc).__name__}: {exc}"
        finally:
            client.close()

    with serving(row) as (server, port):
        assert server.request_queue_size >= BACKLOG == 1024
        url = f"http://127.0.0.1:{port}"
        threads = [threading.Thread(target=player, args=(k,)) for k in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failed, f"{len(failed)} of {n} sessions failed, e.g. {next(iter(failed.values()))}"
        expected = (True, scored["reward"], round(scored["reward"], 12), scored["outcome_reward"], scored["utility"])
        assert got == {k: expected for k in range(n)}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        assert get(conn, "/health")[1]["sessions"] == n
        conn.close()


@pytest.mark.parametrize("option, value, text", [("--idle-timeout", "0", "--idle-timeout 0: expected a positive"),
                                                 ("--read-timeout", "nan", "--read-timeout nan"),
                                                 ("--max-sessions", "0", "--max-sessions 0: expected at least 1")])
def test_serve_env_refuses_a_bad_limit_in_one_line(tmp_path, option, value, text):
    result = subprocess.run([sys.executable, "-m", "vhd.cli", "serve-env", "anything", option, value,
                             "--db", tmp_path / "vhd.duckdb"], capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1 and text in lines[0], result.stderr
    assert list(tmp_path.iterdir()) == []
