"""The change feed's stream against a real ``kg serve``: a write made by another process (the
CLI, on the same database) is followed, and the stream ends when the server shuts down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import httpx

from tests.serve import ROOT, start_server, stop_server


def test_the_stream_follows_another_process_and_ends_on_shutdown(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({"KG_DATA_DIR": str(tmp_path), "KG_ALLOW_FAKE_EMBEDDER": "true", "KG_EMBEDDING_MODEL": "fake:hash-64",
                "KG_CHANGES_POLL_S": "0.1", "KG_CHANGES_HEARTBEAT_S": "0.5"})
    proc, base = start_server(env)
    lines: list[str] = []
    ended = threading.Event()
    opened = threading.Event()
    try:
        assert httpx.post(f"{base}/api/repos", json={"name": "acme"}).status_code == 201
        assert httpx.post(f"{base}/api/repos/acme/workspaces", json={"name": "kb"}).status_code == 201

        def follow() -> None:
            with httpx.stream("GET", f"{base}/api/repos/acme/changes", headers={"Accept": "text/event-stream"},
                              timeout=httpx.Timeout(60, read=60)) as response:
                opened.set()
                for line in response.iter_lines():
                    lines.append(line)
            ended.set()

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        assert opened.wait(30)
        # Another process writes: the CLI on the same SQLite file.
        done = subprocess.run([sys.executable, "-m", "kg.cli", "branch", "create", "later", "--repo", "acme"],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        for _ in range(600):
            if any(line.startswith("data:") for line in lines) and any(line.startswith(":") for line in lines):
                break
            ended.wait(0.05)
        data = [json.loads(line[5:]) for line in lines if line.startswith("data:")]
        assert [(e["type"], e["branch"]) for e in data] == [("branch.created", "later")]
        assert any(line.startswith(":") for line in lines), "no heartbeat comment"
    finally:
        stop_server(proc)
    assert ended.wait(30), "the stream did not end with the server"
    # uvicorn re-raises SIGTERM after a graceful shutdown (-15, as with no stream open); a stream that
    # held the server would have had it killed after 20 s (-9).
    assert proc.returncode == -15, proc.returncode
