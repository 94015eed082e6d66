"""A loopback HTTP server speaking the Messages API (POST /v1/messages), for the LLM setter tests.

Each request takes the next scripted step: ("text", reply, stop_reason) or ("status", code).
When the script runs out, the last step repeats. Requests are recorded for assertions.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class MessagesServer:
    def __init__(self, script):
        self.script, self.requests, self._lock = list(script), [], threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with outer._lock:
                    outer.requests.append(body)
                    step = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                if self.path.rstrip("/") != "/v1/messages":
                    return self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
                if callable(step):
                    step = step(body)
                if step[0] == "status":
                    kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(step[1], "api_error")
                    return self._send(step[1], {"type": "error", "error": {"type": kind, "message": "scripted"}},
                                      {"retry-after": "0"})
                _, text, stop = step
                prompt = sum(len(json.dumps(m["content"])) for m in body["messages"]) // 4
                self._send(200, {"id": f"msg_{len(outer.requests)}", "type": "message", "role": "assistant",
                                 "model": body["model"], "content": [{"type": "text", "text": text}],
                                 "stop_reason": stop, "stop_sequence": None,
                                 "usage": {"input_tokens": prompt, "output_tokens": len(text) // 4}})

            def _send(self, code, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def reply_for(output, rename: dict | None = None, module: str | None = None) -> str:
    """A Messages reply carrying `output`'s module and interface (tools renamed by `rename`)."""
    from vhd.tasks.setters.skin import skin_of, with_skin

    rename = rename or {}
    text = module if module is not None else output.module
    if rename:
        skin = skin_of(text)
        text = with_skin(text, dict(skin, tools=[dict(t, name=rename.get(t["name"], t["name"])) for t in skin["tools"]]))
    interface = [{"canonical": b.canonical, "name": rename.get(b.name, b.name)} for b in output.interface]
    return f"Here is the module.\n\n```python\n{text}\n```\n\n```json\n{json.dumps(interface)}\n```\n"


LEAK = '''

_create_inner = create


def create(config):
    env = _create_inner(config)
    if config["presentation"] == "A":
        env.instruction += " (data: %s)" % json.dumps(config["params"], sort_keys=True)
    return env
'''


def demo_responder(family_name: str):
    """For measuring `vhd refresh --setter anthropic` locally: answers each new conversation with the
    template rendering for the passage in the prompt; every third first reply has broken code (so
    the repair turn runs), every fourth renames two tools (a rewrite). Not a model: a pipeline check."""
    from vhd.mechanisms import registry
    from vhd.tasks.setters.passages import builtin_passages
    from vhd.tasks.setters.template import render_module

    family, passages, count = registry.get(family_name), builtin_passages(), [0]

    def respond(body):
        prompt = body["messages"][0]["content"]
        passage = next(p for p in passages if p.text in prompt)
        good = render_module(family, passage)
        if len(body["messages"]) > 1:
            return ("text", reply_for(good), "end_turn")
        count[0] += 1
        if count[0] % 3 == 1:
            return ("text", reply_for(good, module=good.module.replace("def create(config):", "def create(config:")),
                    "end_turn")
        rename = {good.interface[0].name: "examine_item", good.interface[-1].name: "finish"} if count[0] % 4 == 0 else {}
        return ("text", reply_for(good, rename), "end_turn")
    return respond


class ChatCompletionsServer:
    """A loopback OpenAI-compatible server (POST /v1/chat/completions, GET /v1/models) for the
    trainer adapter tests: `reply(body)` gives each response's assistant message (a dict with
    `content` and/or `tool_calls`). Requests are recorded for assertions."""

    def __init__(self, reply):
        self.reply, self.requests, self._lock = reply, [], threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    return self._send(200, {"object": "list", "data": [{"id": "replay", "object": "model",
                                                                          "created": 0, "owned_by": "vhd"}]})
                return self._send(404, {"error": {"message": self.path, "type": "not_found"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": self.path, "type": "not_found"}})
                with outer._lock:
                    outer.requests.append(body)
                    number = len(outer.requests)
                message = {"role": "assistant", "content": None, **outer.reply(body)}
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                self._send(200, {"id": f"chatcmpl-{number}", "object": "chat.completion", "created": 0,
                                 "model": body.get("model", "replay"),
                                 "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def replay_tool_calls(calls):
    """A `ChatCompletionsServer` reply that plays `calls` ({"tool", "arguments"}) one per
    response, as native `tool_calls`, the next one chosen by how many tool results the request
    carries; then a plain text answer."""
    def reply(body):
        done = sum(1 for m in body["messages"] if m.get("role") == "tool")
        if done >= len(calls):
            return {"content": "Done."}
        call = calls[done]
        return {"tool_calls": [{"id": f"call_{done}", "type": "function",
                                "function": {"name": call["tool"], "arguments": json.dumps(call["arguments"])}}]}
    return reply


if __name__ == "__main__":  # python tests/llm_server.py knapsack  → prints its URL
    import sys
    import time

    server = MessagesServer([demo_responder(sys.argv[1])])
    print(server.url, flush=True)
    while True:
        time.sleep(3600)
