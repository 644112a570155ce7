#!/usr/bin/env python3
"""The open-loop HTTP driver's highest sustained rate vs. a plain sequential http.client loop.

    PYTHONPATH=plugins .venv/bin/python bench/http_driver.py [--requests 2000] [--rounds 4] [--workers 32]

Starts a trivial keep-alive HTTP endpoint (ThreadingHTTPServer answering 200 "ok") in a subprocess
on 127.0.0.1, then alternates, `--rounds` times with the order swapped each round:
  - driver: `run.http_driver.drive` at a rate no endpoint reaches (so it sends as fast as its
    `--workers` threads can), `--requests` requests;
  - plain: one http.client keep-alive connection sending the same rendered requests one after another.
Prints per round the requests/s of each (accepted requests over wall seconds) and the median
latency; then the medians and the ratio driver/plain. Exit code 1 when a request was not accepted.
Bounded: 2 * rounds runs of --requests requests each.
"""
from __future__ import annotations

import argparse
import http.client
import statistics
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from rounds import alternate, not_accepted_exit  # noqa: E402  (bench/, the script's own directory)

from kafkaproof.run.http_driver import drive  # noqa: E402
from kafkaproof.spec.application import classify, parse_request  # noqa: E402

RUN = {"bootstrap": "127.0.0.1:9092", "topic": "bench", "group": "bench", "run_id": "bench"}
SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
ThreadingHTTPServer.request_queue_size = 128  # 32 workers connect at once; the default 5 drops SYNs
s = ThreadingHTTPServer(("127.0.0.1", 0), H); s.daemon_threads = True
print(s.server_address[1], flush=True); s.serve_forever()
"""


def plain(template, n: int) -> tuple[float, float, int]:
    """(requests/s, median latency ms, not accepted) of a sequential keep-alive loop."""
    url = urllib.parse.urlsplit(template.url)
    conn = http.client.HTTPConnection(url.netloc, timeout=5)
    latencies, bad = [], 0
    began = time.perf_counter()
    for seq in range(n):
        req = template.render(RUN, f"bench-{seq}", seq)
        t = time.perf_counter()
        conn.request(req.method, urllib.parse.urlsplit(req.url).path, body=req.body_bytes, headers=req.headers)
        response = conn.getresponse()
        response.read()
        latencies.append(time.perf_counter() - t)
        bad += classify(response.status) != "accepted"
    seconds = time.perf_counter() - began
    conn.close()
    return (n - bad) / seconds, statistics.median(latencies) * 1000, bad


def driven(template, n: int, workers: int) -> tuple[float, float, int]:
    """(requests/s, median latency from send ms, not accepted) of `drive` flat out."""
    began = time.perf_counter()
    table = drive(template, RUN, rate=1e9, messages=n, workers=workers, progress_s=60)
    seconds = time.perf_counter() - began
    rows = table.to_pylist()
    accepted = sum(r["outcome"] == "accepted" for r in rows)
    latency = statistics.median(r["complete_ns"] - r["send_ns"] for r in rows) / 1e6
    return accepted / seconds, latency, n - accepted


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print the figures."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=2000, help="requests per run (default 2000)")
    p.add_argument("--rounds", type=int, default=4, help="rounds of (driver, plain) (default 4)")
    p.add_argument("--workers", type=int, default=32, help="the driver's worker threads (default 32)")
    args = p.parse_args(argv)
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        template = parse_request({"url": f"http://127.0.0.1:{port}/events/{{id}}",
                                  "headers": {"Content-Type": "application/json"},
                                  "body": '{"id": "{id}", "seq": {seq}}'}, "bench.request")
        bad = 0

        def measure(name: str, r: int) -> tuple[float, float]:
            nonlocal bad
            rate, latency, not_ok = (driven(template, args.requests, args.workers) if name == "driver"
                                     else plain(template, args.requests))
            bad += not_ok
            return rate, latency

        med = alternate(("driver", "plain"), args.rounds, measure,
                        lambda r, name, f: f"round {r} {name:6s} {f[0]:8.0f} req/s  median latency {f[1]:.2f} ms")
    finally:
        server.terminate()
        server.wait(5)
    for name, (rate, latency) in med.items():
        print(f"median {name:6s} {rate:8.0f} req/s  median latency {latency:.2f} ms")
    print(f"ratio driver/plain {med['driver'][0] / med['plain'][0]:.2f} ({args.workers} workers, "
          f"{args.requests} requests per run, {args.rounds} rounds)")
    return not_accepted_exit(bad)


if __name__ == "__main__":
    sys.exit(main())
