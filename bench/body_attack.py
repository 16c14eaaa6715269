"""The unauthenticated body attack on a real ``kg serve``: RSS before and after.

``--connections`` clients (100) each open a connection, send the head of a ``POST /api/repos``
without a key declaring ``--declared-mb`` (10 MB, the default ``KG_MAX_BODY_BYTES``), then
``--send-mb`` (9 MB) of its body as fast as the server takes it, and pause, holding the
connection open. The server's resident memory (``VmRSS`` of its process, one uvicorn process) is
read before the attack, sampled while it runs (the peak), and read again after the pause.

Run it against any checkout with ``--root`` (the folder whose ``kg`` package the server imports;
default: this one). A checkout of an older commit made with ``git archive <commit> | tar -x -C
DIR`` needs no git metadata. ``--auth on`` (default) serves with ``KG_AUTH=true``; ``--auth off``
with the default loopback-only mode, where anyone on the machine may send a body::

    .venv/bin/python bench/body_attack.py [--root DIR] [--auth on|off] [--connections 100]

Prints the RSS before, the peak, the RSS after the pause (MiB), the ratio after / before and how
each connection ended (its status code, or what the socket said).
"""

from __future__ import annotations

import argparse
import collections
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PEPPER = "a-pepper-for-the-body-attack-bench"
MB = 1024 * 1024


def rss_mib(pid: int) -> float:
    """The resident set size of process ``pid``, in MiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(root: Path, auth: bool, data: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``kg serve`` of ``root`` on a free port, once ``/health`` answers."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({"KG_DATA_DIR": str(data), "KG_ALLOW_FAKE_EMBEDDER": "true", "KG_EMBEDDING_MODEL": "fake:hash-64",
                "OPENBLAS_NUM_THREADS": "1", "KG_KEEPALIVE_TIMEOUT_S": "120"})
    if auth:
        env.update({"KG_AUTH": "true", "KG_KEY_PEPPER": PEPPER})
    proc = subprocess.Popen([sys.executable, "-m", "kg.cli", "serve", "--port", str(port)], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("kg serve did not start")


def attack(port: int, declared: int, payload: memoryview, hold: threading.Event, outcome: list[str]) -> None:
    """One connection: the head, then the body until it is sent or refused; then hold it open."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    head = (f"POST /api/repos HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {declared}\r\n\r\n").encode()
    try:
        sock.sendall(head)
        sock.sendall(payload)
        ended = "sent"
    except (BrokenPipeError, ConnectionResetError):
        ended = "cut by the server"
    except TimeoutError:
        ended = "stalled (the server stopped reading)"
    try:
        sock.settimeout(0.5)
        answer = sock.recv(200)
        if answer.startswith(b"HTTP/1.1 "):
            ended += f", answered {answer.split()[1].decode()}"
    except (TimeoutError, OSError):
        pass
    outcome.append(ended)  # one append per connection (list.append is atomic)
    hold.wait()
    sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose kg serve runs")
    parser.add_argument("--auth", choices=("on", "off"), default="on")
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--declared-mb", type=float, default=10.0)
    parser.add_argument("--send-mb", type=float, default=9.0)
    parser.add_argument("--pause-s", type=float, default=5.0, help="how long the connections are held after sending")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start(args.root.resolve(), args.auth == "on", Path(tmp))
        try:
            time.sleep(1.0)
            before = rss_mib(proc.pid)
            payload = memoryview(b" " * int(args.send_mb * MB))
            hold, outcomes = threading.Event(), []
            threads = [threading.Thread(target=attack, daemon=True,
                                        args=(port, int(args.declared_mb * MB), payload, hold, outcomes))
                       for _ in range(args.connections)]
            peak = before
            started = time.monotonic()
            for t in threads:
                t.start()
            while len(outcomes) < len(threads) and time.monotonic() - started < 120:
                peak = max(peak, rss_mib(proc.pid))
                time.sleep(0.2)
            pause_end = time.monotonic() + args.pause_s
            while time.monotonic() < pause_end:
                peak = max(peak, rss_mib(proc.pid))
                time.sleep(0.2)
            after = rss_mib(proc.pid)
            health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code
            hold.set()
            for t in threads:
                t.join(timeout=10)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"root={args.root} auth={args.auth} connections={args.connections} "
          f"declared={args.declared_mb:g} MB sent={args.send_mb:g} MB each")
    print(f"rss_before_mib={before:.0f} rss_peak_mib={peak:.0f} rss_after_mib={after:.0f} "
          f"ratio_after_before={after / before:.2f} health_during={health}")
    for outcome, count in collections.Counter(outcomes).most_common():
        print(f"  {count:4d} x {outcome}")


if __name__ == "__main__":
    main()
