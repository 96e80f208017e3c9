#!/usr/bin/env python3
"""
s3proxy - a fault-injecting HTTP/1.1 proxy between spillway and a local S3
server, for the S3 tier's integration tests (python3 stdlib only).

    python3 s3proxy.py --upstream 127.0.0.1:PORT [--port 0] [--rate 0.08]
                       [--kinds 503,500,reset,stall,truncate] [--seed N]
                       [--stall 0.2:1.0] [--match REGEX] [--budget N]

Prints "ready PORT" on stdout once it accepts connections, then runs until
SIGTERM/SIGINT or, when stdin is a pipe, until that pipe closes (so it never
outlives the test that started it). Also importable: FaultProxy(...).start().

Forwarding is byte-exact: the request line, every header (Host and all
SigV4-signed ones) and the body go upstream unchanged, so signatures still
verify. Client connections are kept alive; each request gets a fresh upstream
connection. A faulted request is answered and its connection closed.

Faults, one per request with probability `rate`, the kind drawn evenly from
`kinds`:
  503       503 SlowDown with an S3 XML error body, not forwarded upstream
  500       500 InternalError (XML body), not forwarded upstream
  reset     forwarded; then half the response is sent and the socket reset (RST)
  stall     forwarded; the response is held back for a random --stall delay
  truncate  GETs only: forwarded; headers (with the real Content-Length) and
            half the body are sent, then the connection closes
A truncate drawn for a request whose response has no body becomes a reset.
Only requests whose "METHOD TARGET" matches --match (re.search) are faulted,
and at most --budget of them (-1: no limit).

Control (answered by the proxy, never forwarded):
  GET /__s3proxy__/stats              JSON counters: requests by method, faults
                                      by kind, ranged/whole GETs, bytes, statuses
  GET /__s3proxy__/log                JSON list of the last 20000 requests
  GET /__s3proxy__/config?rate=R&kinds=K&seed=S&match=RE&budget=N
                                      change the fault settings (URL-encoded)
Threading: one thread per client connection; counters under one lock.
"""

import argparse
import json
import os
import random
import re
import select
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse

KINDS = ("503", "500", "reset", "stall", "truncate")
CTL = "/__s3proxy__/"
LOG_MAX = 20000
IDLE_TIMEOUT = 300.0  # seconds a client connection may sit idle
IO_TIMEOUT = 120.0  # seconds for one upstream exchange

_ERR_BODY = {
    "503": (b"503 Slow Down", b"SlowDown", b"Please reduce your request rate."),
    "500": (b"500 Internal Server Error", b"InternalError",
            b"We encountered an internal error. Please try again."),
}


class _Closed(Exception):
    pass


def _read_head(f):
    """Bytes of one HTTP head (start line .. blank line), b"" on a clean EOF."""
    lines = []
    while True:
        ln = f.readline(65537)
        if not ln:
            if lines:
                raise _Closed("EOF inside a head")
            return b""
        if len(ln) > 65536:
            raise _Closed("header line too long")
        if not lines and ln in (b"\r\n", b"\n"):
            continue  # stray CRLF between messages
        lines.append(ln)
        if ln in (b"\r\n", b"\n"):
            return b"".join(lines)


def _parse_head(raw):
    """(start line fields, {lowercase name: value}) of a raw head."""
    lines = raw.split(b"\r\n") if b"\r\n" in raw else raw.split(b"\n")
    start = lines[0].decode("latin-1").split(" ", 2)
    hdrs = {}
    for ln in lines[1:]:
        if not ln:
            continue
        k, _, v = ln.decode("latin-1").partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return start, hdrs


def _copy_exact(src, dst, n):
    """Copy n bytes from file src to socket dst (None: discard)."""
    while n > 0:
        b = src.read(min(n, 1 << 16))
        if not b:
            raise _Closed("EOF inside a body")
        if dst is not None:
            dst.sendall(b)
        n -= len(b)


def _read_exact(src, n):
    parts = []
    while n > 0:
        b = src.read(min(n, 1 << 20))
        if not b:
            raise _Closed("EOF inside a body")
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def _read_chunked(src):
    """The raw bytes of a chunked body (framing included), up to its end."""
    parts = []
    while True:
        ln = src.readline(4096)
        if not ln:
            raise _Closed("EOF inside a chunked body")
        parts.append(ln)
        size = int(ln.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while True:  # trailers, then the blank line
                t = src.readline(65537)
                if not t:
                    raise _Closed("EOF inside chunk trailers")
                parts.append(t)
                if t in (b"\r\n", b"\n"):
                    return b"".join(parts)
        parts.append(_read_exact(src, size + 2))


class FaultProxy:
    def __init__(self, upstream, port=0, rate=0.0, kinds=KINDS, seed=None, stall=(0.2, 1.0),
                 bind="127.0.0.1", match="", budget=-1):
        host, _, p = upstream.rpartition(":")
        self.upstream = (host or "127.0.0.1", int(p))
        self.rate = rate
        self.kinds = tuple(kinds)
        self.stall = stall
        self.match = re.compile(match)
        self.budget = budget
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((bind, port))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.stopping = False
        self.conns = set()
        self.thread = None
        self.st = {"requests": {}, "faults": {k: 0 for k in KINDS}, "gets_ranged": 0,
                   "gets_whole": 0, "status": {}, "bytes_up": 0, "bytes_down": 0,
                   "connections": 0, "errors": 0, "expect_100": 0}
        self.log = []

    # ---- settings and counters

    def configure(self, rate=None, kinds=None, seed=None, match=None, budget=None):
        with self.lock:
            if match is not None:
                self.match = re.compile(match)
            if budget is not None:
                self.budget = int(budget)
            if rate is not None:
                self.rate = float(rate)
            if kinds is not None:
                ks = tuple(k for k in kinds if k)
                bad = [k for k in ks if k not in KINDS]
                if bad:
                    raise ValueError("unknown fault kinds %s" % bad)
                self.kinds = ks
            if seed is not None:
                self.rng.seed(seed)

    def stats(self):
        with self.lock:
            s = json.loads(json.dumps(self.st))
            s["rate"] = self.rate
            s["kinds"] = list(self.kinds)
            s["match"] = self.match.pattern
            s["budget"] = self.budget
            s["injected"] = sum(s["faults"].values())
            return s

    def request_log(self):
        with self.lock:
            return list(self.log)

    def _pick(self, method, target):
        with self.lock:
            if not self.kinds or self.budget == 0:
                return None
            if not self.match.search("%s %s" % (method, target)):
                return None
            if self.rng.random() >= self.rate:
                return None
            if self.budget > 0:
                self.budget -= 1
            k = self.rng.choice(self.kinds)
            if k == "truncate" and method != "GET":
                k = "reset"
            return k

    def _count(self, **kw):
        with self.lock:
            for k, v in kw.items():
                self.st[k] += v

    def _note(self, method, target, hdrs, status, fault, t0=None):
        with self.lock:
            r = self.st["requests"]
            r[method] = r.get(method, 0) + 1
            if fault:
                self.st["faults"][fault] += 1
            s = self.st["status"]
            s[str(status)] = s.get(str(status), 0) + 1
            if method == "GET" and not target.startswith(CTL):
                if "range" in hdrs:
                    self.st["gets_ranged"] += 1
                else:
                    self.st["gets_whole"] += 1
            self.log.append({"method": method, "target": target, "range": hdrs.get("range"),
                             "status": status, "fault": fault, "t0": t0, "t": time.time()})
            if len(self.log) > LOG_MAX:
                del self.log[:len(self.log) - LOG_MAX]

    # ---- serving

    def start(self):
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()
        return self

    def serve(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.conns.add(c)
                self.st["connections"] += 1
            threading.Thread(target=self._conn, args=(c,), daemon=True).start()

    def stop(self):
        self.stopping = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _conn(self, c):
        c.settimeout(IDLE_TIMEOUT)
        f = c.makefile("rb", buffering=1 << 16)
        try:
            while not self.stopping and self._one(c, f):
                pass
        except (_Closed, OSError, ValueError):
            pass
        except Exception:  # a proxy bug: count it, drop the connection
            self._count(errors=1)
            import traceback
            traceback.print_exc()
        finally:
            with self.lock:
                self.conns.discard(c)
            try:
                f.close()
                c.close()
            except OSError:
                pass

    def _control(self, c, target):
        u = urllib.parse.urlsplit(target)
        what = u.path[len(CTL):]
        code, body = 200, None
        try:
            if what == "stats":
                body = self.stats()
            elif what == "log":
                body = self.request_log()
            elif what == "config":
                q = dict(urllib.parse.parse_qsl(u.query))
                self.configure(rate=q.get("rate"),
                               kinds=q["kinds"].split(",") if "kinds" in q else None,
                               seed=int(q["seed"]) if "seed" in q else None,
                               match=q.get("match"), budget=q.get("budget"))
                body = self.stats()
            else:
                code, body = 404, {"error": "unknown control path"}
        except (ValueError, KeyError, re.error) as e:
            code, body = 400, {"error": str(e)}
        data = json.dumps(body).encode()
        c.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                  b"\r\n" % (code, len(data)) + data)

    def _error_reply(self, c, f, kind, hdrs, expect):
        status, code, msg = _ERR_BODY[kind]
        body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>' + code
                + b"</Code><Message>" + msg + b"</Message><RequestId>s3proxy-%d</RequestId>"
                b"</Error>" % random.getrandbits(32))
        if not expect:  # the body is on its way: read it first, as a server does
            self._discard_body(f, hdrs)
        c.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/xml\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        # let the client see the reply before the socket goes: no RST on unread data
        try:
            c.shutdown(socket.SHUT_WR)
            c.settimeout(2.0)
            while c.recv(1 << 16):
                pass
        except OSError:
            pass

    @staticmethod
    def _discard_body(f, hdrs):
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            _read_chunked(f)
        else:
            _copy_exact(f, None, int(hdrs.get("content-length", "0") or 0))

    def _reset(self, c, data):
        try:
            c.sendall(data)
        except OSError:
            pass
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def _one(self, c, f):
        """Serve one request from client c; False: close the connection."""
        raw = _read_head(f)
        if not raw:
            return False
        t0 = time.time()
        (method, target, *_), hdrs = _parse_head(raw)
        if method == "GET" and target.startswith(CTL):
            self._control(c, target)
            return True
        expect = hdrs.get("expect", "").lower() == "100-continue"
        if expect:
            self._count(expect_100=1)
        fault = self._pick(method, target)
        if fault in ("503", "500"):
            self._error_reply(c, f, fault, hdrs, expect)
            self._note(method, target, hdrs, int(fault), fault)
            return False

        up = socket.create_connection(self.upstream, timeout=IO_TIMEOUT)
        up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        uf = up.makefile("rb", buffering=1 << 16)
        try:
            up.sendall(raw)
            if expect:
                # the server answers the head at once: 100 Continue or a final status
                interim = _read_head(uf)
                if not interim:
                    raise _Closed("upstream closed after the head")
                (_, st, *_), _ = _parse_head(interim)
                if st != "100":
                    # refused before the body (e.g. 403): relay it, then close,
                    # since the client may or may not send the body now
                    rh, rhd = interim, _parse_head(interim)[1]
                    body = self._response_body(uf, method, int(st), rhd)
                    c.sendall(rh + body)
                    self._note(method, target, hdrs, int(st), None)
                    return False
                c.sendall(interim)
            n = 0
            if "chunked" in hdrs.get("transfer-encoding", "").lower():
                b = _read_chunked(f)
                up.sendall(b)
                n = len(b)
            else:
                n = int(hdrs.get("content-length", "0") or 0)
                _copy_exact(f, up, n)
            self._count(bytes_up=n)
            while True:
                rh = _read_head(uf)
                if not rh:
                    raise _Closed("upstream closed without a response")
                (_, st, *_), rhd = _parse_head(rh)
                if not st.startswith("1"):
                    break
                c.sendall(rh)  # another interim response: relay it
            status = int(st)
            body = self._response_body(uf, method, status, rhd)
        finally:
            uf.close()
            up.close()
        self._count(bytes_down=len(body))

        if fault == "truncate" and not (len(body) > 1 and "content-length" in rhd):
            fault = "reset"
        self._note(method, target, hdrs, status, fault, t0)
        if fault == "stall":
            time.sleep(self.rng.uniform(*self.stall))
        elif fault == "reset":
            whole = rh + body
            self._reset(c, whole[:max(1, len(whole) // 2)])
            return False
        elif fault == "truncate":
            c.sendall(rh + body[:len(body) // 2])
            return False
        c.sendall(rh + body)
        if "close" in hdrs.get("connection", "").lower():
            return False
        if "close" in rhd.get("connection", "").lower():
            return False
        if ("content-length" not in rhd and "chunked" not in rhd.get("transfer-encoding", "")
                and self._has_body(method, status)):
            return False  # close-delimited body
        return True

    @staticmethod
    def _has_body(method, status):
        return not (method == "HEAD" or status in (204, 304) or 100 <= status < 200)

    def _response_body(self, uf, method, status, rhd):
        if not self._has_body(method, status):
            return b""
        if "chunked" in rhd.get("transfer-encoding", "").lower():
            return _read_chunked(uf)
        if "content-length" in rhd:
            return _read_exact(uf, int(rhd["content-length"]))
        return uf.read()  # until the server closes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the S3 server")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rate", type=float, default=0.0)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--stall", default="0.2:1.0", help="MIN:MAX seconds")
    ap.add_argument("--match", default="", help='fault only "METHOD TARGET" matching this')
    ap.add_argument("--budget", type=int, default=-1, help="at most this many faults")
    a = ap.parse_args()
    lo, _, hi = a.stall.partition(":")
    p = FaultProxy(a.upstream, a.port, a.rate, [k for k in a.kinds.split(",") if k], a.seed,
                   (float(lo), float(hi or lo)), match=a.match, budget=a.budget)
    done = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda *_: done.set())
    p.start()
    sys.stdout.write("ready %d\n" % p.port)
    sys.stdout.flush()
    if os.path.exists("/proc/self/fd/0") and os.stat("/proc/self/fd/0").st_mode & 0o170000 \
            == 0o010000:  # a FIFO: the parent's lifeline

        def watch():
            while not done.is_set():
                r, _, _ = select.select([0], [], [], 0.5)
                if r and not os.read(0, 4096):
                    done.set()

        threading.Thread(target=watch, daemon=True).start()
    while not done.wait(0.5):
        pass
    p.stop()


if __name__ == "__main__":
    main()
