#!/usr/bin/env python3
"""A scripted OpenAI-compatible test server (stdlib only).

Usage: python tests/helpers/oai_server.py [--scenario FILE] [--fault-rate R] [--fault-seed S]
                                  [--fault-sleep T] [--retry-after A]

Listens on 127.0.0.1 on a free port and prints the port as the first line of stdout.
The scenario file (or the JSON in $OAI_SERVER_SCENARIO) looks like

    {"scripts": {"MARKER": SPEC, ...}, "faults": {...}, "token_logprobs": {"tok": lp}}

A request is handled by the first script whose MARKER occurs in its prompt text
(user messages for chat, the prompt for completions). SPEC keys, all optional:

    faults         list consumed one per request to this marker, then normal answers:
                   {"status": 429, "headers": {"Retry-After": "0.2"}, "message": "..."},
                   {"sleep": 2.0} (sleep, then answer normally: a client timeout),
                   {"malformed": true} (200 with a truncated JSON body),
                   {"json": {...}} (200 with this JSON body, e.g. without "choices"),
                   {"reset": true} (200 headers, half the body, then a TCP reset),
                   {"spec": {...}} (answer normally with these SPEC keys overridden,
                   e.g. {"no_logprobs": true} for one transient `logprobs: null`)
    error          {"status": 400, "message": "...", "param": "...", "code": "..."}
                   ("echo_request": true appends the request's headers and body to the
                   message, as some proxies do: a secret-leak test)
    reject         [{"param": "top_logprobs", "gt": 10, "message": "..."},
                    {"param": "reasoning_effort", "equals": "minimal", "message": "..."},
                    {"param": "logprobs", "present": true, "message": "..."},
                    {"param": "prompt", "is_list": true, "status": 500, "message": "..."}]
                   -> 400 unless "status" says otherwise ("hide_param": true leaves the
                   error's "param" null, as vLLM does; "is_list" is llama.cpp refusing a
                   list of prompts with HTTP 500)
    echo_shift     true: echo log-probs shifted by one token (llama-cpp-python's bug);
                   also a scenario-level key for every prompt
    vllm           true: honour vLLM's `prompt_logprobs` on completions (choices[i] get
                   "prompt_logprobs": [null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...]
                   and, with "return_token_ids", "prompt_token_ids"; token ids come from a
                   per-server vocabulary; the table's log-probs, like echo)
    top            [[token, logprob], ...] the candidates at the first generated position
                   (the first min(k, len) are returned as top_logprobs)
    content        the generated text (default: the first `top` token)
    delay          seconds to wait before every normal answer (for concurrency tests)
    hold_after     N: the first N requests to this marker are answered, later ones wait until
                   the test releases the marker (POST /_control/release; reset releases all):
                   a run that cannot finish before a signal, however fast the machine
    no_logprobs    true: answer without logprobs (like reasoning models)
    samples        list of texts handed out in turn to each sampled choice
    ignore_n       true: answer one choice whatever `n` asks (servers that ignore `n`)
    token_logprobs {token: logprob} for echo scoring (merged over the global table)
    model, system_fingerprint   override the response fields
    model_after    [N, "name"] or [N, "name", {SPEC}]: from this marker's Nth request on
                   (counting from 0, probes included when the marker is ""), answer as model
                   "name", with these SPEC keys overridden (a replica whose model is swapped
                   mid-run)
    error_body     true: answer every request with HTTP 200 and {"error": {...}} (a proxy that
                   wraps upstream errors in a 200)

Control endpoints (for tests): POST /_control/script {"marker": M, "spec": SPEC},
POST /_control/faults {"rate": R, "seed": S, "kinds": [...], "sleep": T, "retry_after": A},
POST /_control/reset, POST /_control/release {"marker": M} (let held requests go on),
GET /_control/log (requests seen), GET /_control/stats (faults injected, requests, most
requests handled at once per marker, requests waiting in a hold per marker).

Echo tokenisation is "optional whitespace + non-space run" (`\\s*\\S+`), so hand sums in
tests are easy: "The cat sat" -> "The", " cat", " sat". The first prompt token has a
null logprob (nothing precedes it), unknown tokens score -1.0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN_RE = re.compile(r"\s*\S+|\s+$")
DEFAULT_TOP = [["Yes", -0.2], ["No", -1.9], ["yes", -4.0], ["The", -5.0]]
DEFAULT_FINGERPRINT = "fp_test_0001"


def tokenize(text: str) -> list[str]:
    """Whitespace tokeniser whose token texts concatenate back to `text`."""
    return TOKEN_RE.findall(text)


class State:
    """Everything the scripted server remembers, guarded by one lock."""

    def __init__(self, scenario: dict[str, Any], args: argparse.Namespace) -> None:
        self.lock = threading.Lock()
        self.scripts: dict[str, dict[str, Any]] = dict(scenario.get("scripts", {}))
        self.token_logprobs: dict[str, float] = dict(scenario.get("token_logprobs", {}))
        self.echo_shift = bool(scenario.get("echo_shift", False))
        self.vllm = bool(scenario.get("vllm", False))
        self.vocab: dict[str, int] = {}
        self.counters: dict[str, int] = {}
        self.sample_counters: dict[str, int] = {}
        self.log: list[dict[str, Any]] = []
        faults = dict(scenario.get("faults", {}))
        faults.setdefault("rate", args.fault_rate)
        faults.setdefault("seed", args.fault_seed)
        faults.setdefault("sleep", args.fault_sleep)
        faults.setdefault("retry_after", args.retry_after)
        faults.setdefault("kinds", ["429", "500", "timeout", "malformed"])
        self.set_faults(faults)
        self.injected = {"429": 0, "500": 0, "timeout": 0, "malformed": 0}
        self.active: dict[str, int] = {}  # marker -> requests being handled now
        self.max_active: dict[str, int] = {}
        self.gates: dict[str, threading.Event] = {}  # marker -> set once released (hold_after)
        self.held: dict[str, int] = {}  # marker -> requests waiting at its gate now

    def set_faults(self, faults: dict[str, Any]) -> None:
        self.faults = faults
        self.rng = random.Random(faults.get("seed", 0))

    def reset(self) -> None:
        for gate in self.gates.values():
            gate.set()  # no request stays held past the test that held it
        self.gates.clear()
        self.scripts.clear()
        self.counters.clear()
        self.sample_counters.clear()
        self.log.clear()
        self.injected = {k: 0 for k in self.injected}
        self.max_active.clear()
        self.set_faults({**self.faults, "rate": 0.0})


STATE: State


def _prompt_text(path: str, body: dict[str, Any]) -> str:
    if path.endswith("/chat/completions"):
        parts = []
        for m in body.get("messages", []):
            c = m.get("content", "")
            if isinstance(c, list):
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            parts.append(str(c))
        return "\n".join(parts)
    p = body.get("prompt", "")
    return "\n".join(p) if isinstance(p, list) else str(p)


def _find_script(text: str) -> tuple[str | None, dict[str, Any]]:
    for marker, spec in STATE.scripts.items():
        if marker in text:
            return marker, spec
    return None, {}


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _next_samples(marker: str | None, spec: dict[str, Any], n: int) -> list[str]:
    samples = spec.get("samples")
    if not samples:
        return [_content(spec)] * n
    out = []
    with STATE.lock:
        for _ in range(n):
            i = STATE.sample_counters.get(marker or "", 0)
            STATE.sample_counters[marker or ""] = i + 1
            out.append(samples[i % len(samples)])
    return out


def _content(spec: dict[str, Any]) -> str:
    if "content" in spec:
        return spec["content"]
    return (spec.get("top") or DEFAULT_TOP)[0][0]


def _envelope(
    rid: str, obj: str, body: dict[str, Any], spec: dict[str, Any], choices: list, usage: dict
) -> dict:
    """The response object around `choices`, as an OpenAI-compatible server writes it."""
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": spec.get("model", body.get("model", "test-model")),
        "system_fingerprint": spec.get("system_fingerprint", DEFAULT_FINGERPRINT),
        "choices": choices,
        "usage": usage,
    }


def chat_response(body: dict[str, Any], marker: str | None, spec: dict[str, Any]) -> dict:
    n = 1 if spec.get("ignore_n") else int(body.get("n") or 1)
    prompt_tokens = len(tokenize(_prompt_text("/chat/completions", body)))
    want_lp = bool(body.get("logprobs")) and not spec.get("no_logprobs")
    k = int(body.get("top_logprobs") or 0)
    sampled = (body.get("temperature") if body.get("temperature") is not None else 1.0) > 0
    texts = _next_samples(marker, spec, n) if sampled else [_content(spec)] * n
    choices = []
    completion_tokens = 0
    for i, text in enumerate(texts):
        logprobs = None
        if want_lp:
            top = (spec.get("top") or DEFAULT_TOP)[:k]
            first = {"token": text, "logprob": top[0][1] if top else -0.1, "bytes": None}
            first["top_logprobs"] = [{"token": t, "logprob": lp, "bytes": None} for t, lp in top]
            logprobs = {"content": [first], "refusal": None}
        completion_tokens += max(1, len(tokenize(text)))
        choices.append(
            {
                "index": i,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": logprobs,
                "finish_reason": "length",
            }
        )
    return _envelope(
        "chatcmpl-test",
        "chat.completion",
        body,
        spec,
        choices,
        _usage(prompt_tokens, completion_tokens),
    )


def completion_response(body: dict[str, Any], marker: str | None, spec: dict[str, Any]) -> dict:
    prompts = body.get("prompt", "")
    prompts = prompts if isinstance(prompts, list) else [prompts]
    echo = bool(body.get("echo"))
    k = body.get("logprobs")
    max_tokens = int(body.get("max_tokens") if body.get("max_tokens") is not None else 16)
    table = {**STATE.token_logprobs, **spec.get("token_logprobs", {})}
    choices = []
    prompt_tokens = completion_tokens = 0
    for i, prompt in enumerate(prompts):
        toks: list[str] = []
        lps: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        offsets: list[int] = []
        text = ""
        ptoks = tokenize(prompt)
        prompt_tokens += len(ptoks)
        gen = _content(spec) if "content" in spec else " yes"
        gtoks = tokenize(gen)[:max_tokens] if max_tokens > 0 else []
        if echo:
            pos = 0
            for j, t in enumerate(ptoks):
                lp = None if j == 0 else float(table.get(t, -1.0))
                toks.append(t)
                lps.append(lp)
                tops.append(None if lp is None else {t: lp})
                offsets.append(pos)
                pos += len(t)
            if spec.get("echo_shift", STATE.echo_shift):
                # llama-cpp-python's bug: each prompt token carries the next token's log-prob
                after = [float(table.get(t, -1.0)) for t in gtoks[:1]] or [-7.5]
                lps = [*lps[1:], after[0]]
                tops = [None if lp is None else {t: lp} for t, lp in zip(toks, lps, strict=True)]
            text = prompt
        if gtoks:
            top = (spec.get("top") or DEFAULT_TOP)[: int(k or 0)]
            pos = len(text) if echo else 0
            for j, t in enumerate(gtoks):
                # a generated token's own log-prob is what echo would give it (a consistent
                # model), so echo and next-token log-probs agree unless a script says otherwise
                toks.append(t)
                lps.append(float(table.get(t, -1.0)))
                tops.append(
                    {tt: lp for tt, lp in top} if j == 0 else {t: float(table.get(t, -1.0))}
                )
                offsets.append(pos)
                pos += len(t)
            text += "".join(gtoks)
            completion_tokens += len(gtoks)
        logprobs = None
        if k is not None and not spec.get("no_logprobs"):
            logprobs = {
                "tokens": toks,
                "token_logprobs": lps,
                "top_logprobs": tops,
                "text_offset": offsets,
            }
        choice: dict[str, Any] = {
            "index": i,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": "length",
        }
        if body.get("prompt_logprobs") is not None and spec.get("vllm", STATE.vllm):
            choice.update(_vllm_prompt_logprobs(ptoks, table, int(body["prompt_logprobs"]), body))
        choices.append(choice)
    return _envelope(
        "cmpl-test",
        "text_completion",
        body,
        spec,
        choices,
        _usage(prompt_tokens, completion_tokens),
    )


def _token_id(tok: str) -> int:
    with STATE.lock:
        return STATE.vocab.setdefault(tok, 1000 + len(STATE.vocab))


def _vllm_prompt_logprobs(
    ptoks: list[str], table: dict[str, float], k: int, body: dict[str, Any]
) -> dict[str, Any]:
    """vLLM's shape: None for the first prompt token, then {id: Logprob} per token holding the
    prompt token and, for k > 0, the k best alternatives (here: fixed decoys)."""
    out: list[dict[str, dict[str, Any]] | None] = [None]
    for t in ptoks[1:]:
        lp = float(table.get(t, -1.0))
        entry = {str(_token_id(t)): {"logprob": lp, "rank": 2, "decoded_token": t}}
        for j in range(k):
            decoy = f" decoy{j}"
            entry[str(_token_id(decoy))] = {
                "logprob": -0.05 * (j + 1),
                "rank": j + 1,
                "decoded_token": decoy,
            }
        out.append(entry)
    res: dict[str, Any] = {"prompt_logprobs": out}
    if body.get("return_token_ids"):
        res["prompt_token_ids"] = [_token_id(t) for t in ptoks]
    return res


def _rejection(body: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any] | None:
    for r in spec.get("reject", []):
        p = r["param"]
        if p not in body or body[p] is None:
            continue
        v = body[p]
        hit = (
            ("gt" in r and isinstance(v, (int, float)) and v > r["gt"])
            or ("equals" in r and v == r["equals"])
            or (r.get("present") and v not in (False, 0))
            or (r.get("is_list") and isinstance(v, list) and len(v) > 1)
        )
        if hit:
            param = None if r.get("hide_param") else p  # vLLM often names no param
            status = int(r.get("status", 400))
            return {
                "status": status,
                "message": r["message"],
                "param": param,
                "code": r.get("code"),
            }
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # keep test output quiet

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, str(v))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _reset_mid_body(self) -> None:
        """Promise a body, send half of it, then reset the connection (SO_LINGER 0 -> RST)."""
        data = json.dumps({"id": "x", "choices": [{"index": 0, "text": "y" * 200}]}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
        self.close_connection = True

    def _error(self, status: int, message: str, param: Any = None, code: Any = None, headers=None):
        err = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
        self._send(status, {"error": err}, headers)

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b"{}"
        try:
            return json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return {}

    def do_GET(self) -> None:
        if self.path == "/_control/log":
            with STATE.lock:
                self._send(200, list(STATE.log))
        elif self.path == "/_control/stats":
            with STATE.lock:
                self._send(
                    200,
                    {
                        "injected": dict(STATE.injected),
                        "requests": len(STATE.log),
                        "max_active": dict(STATE.max_active),
                        "held": dict(STATE.held),
                    },
                )
        elif self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        body = self._body()
        if self.path.startswith("/_control/"):
            self._control(body)
            return
        if not (self.path.endswith("/chat/completions") or self.path.endswith("/completions")):
            self._error(404, f"no route {self.path}")
            return
        marker, spec = _find_script(_prompt_text(self.path, body))
        key = marker or ""
        with STATE.lock:
            STATE.active[key] = STATE.active.get(key, 0) + 1
            STATE.max_active[key] = max(STATE.max_active.get(key, 0), STATE.active[key])
        try:
            self._api(body, marker, spec)
        finally:
            with STATE.lock:
                STATE.active[key] -= 1

    def _api(self, body: dict[str, Any], marker: str | None, spec: dict[str, Any]) -> None:
        with STATE.lock:
            attempt = STATE.counters.get(marker or "", 0)
            STATE.counters[marker or ""] = attempt + 1
            entry = {
                "path": self.path,
                "body": body,
                "marker": marker,
                "attempt": attempt,
                "t": time.monotonic(),
                "auth": self.headers.get("Authorization", ""),
                "outcome": "ok",
            }
            STATE.log.append(entry)
            gate = None
            if spec.get("hold_after") is not None and attempt >= int(spec["hold_after"]):
                gate = STATE.gates.setdefault(marker or "", threading.Event())
                if gate.is_set():
                    gate = None
                else:
                    STATE.held[marker or ""] = STATE.held.get(marker or "", 0) + 1
            fault = None
            scripted = spec.get("faults", [])
            if attempt < len(scripted):
                fault = dict(scripted[attempt])
            elif STATE.faults.get("rate", 0) > 0 and STATE.rng.random() < STATE.faults["rate"]:
                kind = STATE.rng.choice(STATE.faults["kinds"])
                STATE.injected[kind] += 1
                fault = {
                    "429": {"status": 429, "headers": {"Retry-After": STATE.faults["retry_after"]}},
                    "500": {"status": 500},
                    "timeout": {"sleep": STATE.faults["sleep"]},
                    "malformed": {"malformed": True},
                }[kind]
            if fault is not None:
                entry["outcome"] = "fault:" + (
                    str(fault["status"]) if "status" in fault else next(iter(fault))
                )
        if gate is not None:
            gate.wait(timeout=600)  # the test releases it (or resets the server)
            with STATE.lock:
                STATE.held[marker or ""] -= 1
        if fault is not None:
            if "status" in fault:
                self._error(
                    fault["status"],
                    fault.get("message", f"scripted {fault['status']}"),
                    headers=fault.get("headers"),
                )
                return
            if "json" in fault:  # well-formed JSON that is not a completion
                self._send(200, fault["json"])
                return
            if fault.get("malformed"):
                self._send(200, b'{"id": "chatcmpl-test", "choices": [{"index": 0, "mess')
                return
            if fault.get("reset"):
                self._reset_mid_body()
                return
            if "spec" in fault:
                spec = {**spec, **fault["spec"]}
            time.sleep(float(fault.get("sleep", 0)))  # the client should have given up by now
        if spec.get("delay"):
            time.sleep(float(spec["delay"]))
        if spec.get("model_after") and attempt >= int(spec["model_after"][0]):
            spec = {**spec, "model": spec["model_after"][1], **(spec["model_after"][2:] or [{}])[0]}
        if spec.get("error_body"):
            with STATE.lock:
                entry["outcome"] = "error_body"
            self._send(200, {"error": {"message": "upstream failure", "type": "server_error"}})
            return
        err = spec.get("error") or _rejection(body, spec)
        if err:
            with STATE.lock:
                entry["outcome"] = f"error:{err['status']}"
            message = err["message"]
            if err.get("echo_request"):
                message += f" -- request headers: {dict(self.headers)!r} body: {json.dumps(body)}"
            self._error(err["status"], message, err.get("param"), err.get("code"))
            return
        if self.path.endswith("/chat/completions"):
            self._send(200, chat_response(body, marker, spec))
        else:
            self._send(200, completion_response(body, marker, spec))

    def _control(self, body: dict[str, Any]) -> None:
        with STATE.lock:
            if self.path == "/_control/script":
                STATE.scripts[body["marker"]] = body["spec"]
                STATE.counters.pop(body["marker"], None)
                old = STATE.gates.pop(body["marker"], None)
                if old is not None:
                    old.set()  # a new script starts with a closed gate; nothing stays held
            elif self.path == "/_control/faults":
                STATE.set_faults({**STATE.faults, **body})
                STATE.injected = {k: 0 for k in STATE.injected}
            elif self.path == "/_control/reset":
                STATE.reset()
            elif self.path == "/_control/release":
                STATE.gates.setdefault(body["marker"], threading.Event()).set()
            else:
                self._error(404, f"no route {self.path}")
                return
        self._send(200, {"ok": True})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default 5 drops concurrent connects (1 s SYN retry)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", help="JSON scenario file (default: $OAI_SERVER_SCENARIO)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--fault-rate", type=float, default=0.0)
    ap.add_argument("--fault-seed", type=int, default=0)
    ap.add_argument("--fault-sleep", type=float, default=2.0)
    ap.add_argument("--retry-after", default="0.05")
    args = ap.parse_args(argv)
    scenario: dict[str, Any] = {}
    if args.scenario:
        with open(args.scenario, encoding="utf-8") as f:
            scenario = json.load(f)
    elif os.environ.get("OAI_SERVER_SCENARIO"):
        scenario = json.loads(os.environ["OAI_SERVER_SCENARIO"])
    global STATE
    STATE = State(scenario, args)
    server = Server(("127.0.0.1", args.port), Handler)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main(sys.argv[1:])
