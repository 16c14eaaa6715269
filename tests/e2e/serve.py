"""Starting a real ``kg serve`` process on a free loopback port, for the end-to-end tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest


def free_port() -> int:
    """A TCP port free on 127.0.0.1 just now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(env: dict[str, str], *, timeout_s: float = 60) -> tuple[subprocess.Popen[str], str]:
    """``kg serve`` with ``env`` on a free port: its process and base URL once ``/health``
    answers (the test fails with the server's output if it exits or does not answer in time)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kg.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"kg serve exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail(f"kg serve did not start in {timeout_s:g} s")
