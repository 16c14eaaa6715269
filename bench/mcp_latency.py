"""Tool-call latency over MCP vs the same call over plain HTTP, and the size of the tool list.

One real ``kg serve`` process (auth on, an admin key; the deterministic ``fake:hash-384``
embedder so that the figures are the transport's and kg's, not the model's), the 150 PEPs of
``fixtures/peps`` as nodes (title and the first 4,000 characters). The same call is timed
``--calls`` times each way, in turn (MCP, HTTP, MCP, ...: both see the same load), after
``--warmup`` calls, in one asyncio loop on one ``httpx2.AsyncClient`` per side:

- MCP: ``tools/call`` of ``search`` (hybrid, k = 5) and of ``get_node`` through one open
  ``mcp.Client`` session over streamable HTTP (``/mcp/peps/main``);
- HTTP: ``POST /api/repos/peps/search`` with the same body, and ``GET .../nodes/{path}``. The
  MCP ``get_node`` reads more than that GET: the node, its parent and its children (three
  reads), so its ratio is an upper bound of the transport's cost.

The ratio MCP / HTTP of the medians is what the MCP layer costs per call (JSON-RPC framing, the
SDK's argument validation, the thread hop, the structured and text copies of the answer).

The tool list: the ``tools`` array of ``tools/list`` as JSON (the wire form), counted in tokens of
the packaged WordPiece tokenizer (``kg/data/tokenizer.json``, the same
file as ``kg/data/tokenizer.json``; tiktoken is not installed here, so an LLM's BPE count will
differ somewhat), for an admin key (every tool) and a read-only key (the read tools), and in
bytes.

Run: ``python bench/mcp_latency.py [--calls 200]``; JSON in ``bench/results/mcp_latency.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    RESULTS,
    kg_cli,
    machine,
    pep_upserts,
    serve_env,
    start_serve,
    summary_ms,
    table,
    write_results,
)

PEPPER = "bench-pepper-not-a-secret"
MODEL = "fake:hash-384"
TOKENIZER = Path(__file__).resolve().parent.parent / "kg" / "data" / "tokenizer.json"
QUERY = {"query": "how are packages installed and uninstalled", "k": 5, "mode": "hybrid"}


def _seed(base: str, admin: str) -> None:
    http = httpx2.Client(base_url=base, headers={"Authorization": f"Bearer {admin}"}, timeout=120)
    http.post("/api/repos", json={"name": "peps"}).raise_for_status()
    http.post("/api/repos/peps/workspaces", json={"name": "peps"}).raise_for_status()
    http.post("/api/repos/peps/nodes:batch", json={"upserts": pep_upserts("peps")}).raise_for_status()


async def _time_pair(calls: int, warmup: int, first, second) -> tuple[list[float], list[float]]:
    """Durations of ``first`` and ``second``, called in turn (so that both see the same load)."""
    for _ in range(warmup):
        await first()
        await second()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(calls):
        for once, into in ((first, samples[0]), (second, samples[1])):
            start = time.perf_counter()
            await once()
            into.append(time.perf_counter() - start)
    return samples


async def _measure(base: str, admin: str, reader: str, calls: int, warmup: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {admin}"}
    out: dict[str, Any] = {}
    async with httpx2.AsyncClient(base_url=base, headers=headers, timeout=60) as http, \
            httpx2.AsyncClient(headers=headers, timeout=60) as mcp_http, \
            Client(streamable_http_client(f"{base}/mcp/peps/main", http_client=mcp_http)) as mcp:

        async def mcp_search() -> None:
            result = await mcp.call_tool("search", QUERY)
            assert not result.is_error and result.structured_content["results"], result.content

        async def http_search() -> None:
            r = await http.post("/api/repos/peps/search", json={**QUERY, "granularity": "chunk"})
            r.raise_for_status()
            assert r.json()["results"]

        async def mcp_get() -> None:
            result = await mcp.call_tool("get_node", {"workspace": "peps", "path": "/pep-0376"})
            assert not result.is_error, result.content

        async def http_get() -> None:
            (await http.get("/api/repos/peps/workspaces/peps/nodes/pep-0376")).raise_for_status()

        for op, over_mcp, over_http in (("search", mcp_search, http_search), ("get_node", mcp_get, http_get)):
            mcp_s, http_s = await _time_pair(calls, warmup, over_mcp, over_http)
            out[f"{op}_mcp"], out[f"{op}_http"] = summary_ms(mcp_s), summary_ms(http_s)
        admin_tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                       for t in (await mcp.list_tools()).tools]
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {reader}"}, timeout=60) as reader_http, \
            Client(streamable_http_client(f"{base}/mcp/peps/main", http_client=reader_http)) as mcp:
        reader_tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                        for t in (await mcp.list_tools()).tools]
    return {"latency": out, "tools": {"admin": admin_tools, "reader": reader_tools}}


def _tokens(tools: list[dict[str, Any]]) -> dict[str, Any]:
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    tokenizer.no_truncation()
    wire = json.dumps({"tools": tools}, separators=(",", ":"), ensure_ascii=False)
    return {"tools": len(tools), "names": [t["name"] for t in tools], "bytes": len(wire.encode()),
            "wordpiece_tokens": len(tokenizer.encode(wire, add_special_tokens=False).ids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS / "mcp_latency.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = serve_env(Path(tmp) / "data", MODEL, PEPPER)
        admin = json.loads(kg_cli(env, "keys", "create", "--name", "bench-admin", "--admin"))["key"]
        reader = json.loads(kg_cli(env, "keys", "create", "--name", "bench-reader", "--grant",
                                "repo=peps,actions=read"))["key"]
        proc, base = start_serve(env)
        try:
            _seed(base, admin)
            measured = asyncio.run(_measure(base, admin, reader, args.calls, args.warmup))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    lat = measured["latency"]
    ratios = {op: round(lat[f"{op}_mcp"]["median_ms"] / lat[f"{op}_http"]["median_ms"], 3)
              for op in ("search", "get_node")}
    tools = {who: _tokens(listed) for who, listed in measured["tools"].items()}
    results = {"benchmark": "mcp_latency", "machine": machine(), "calls": args.calls, "warmup": args.warmup,
               "embedder": MODEL, "query": QUERY, "latency_ms": lat, "ratio_mcp_over_http_p50": ratios,
               "tool_list": tools, "tokenizer": f"WordPiece (uncased BERT, 30,522) from {TOKENIZER}"}
    print(table([(op, lat[f"{op}_mcp"]["median_ms"], lat[f"{op}_http"]["median_ms"], ratios[op])
                 for op in ("search", "get_node")], ["call", "MCP p50 ms", "HTTP p50 ms", "MCP / HTTP"]))
    print(table([(who, t["tools"], t["bytes"], t["wordpiece_tokens"]) for who, t in tools.items()],
                ["tool list", "tools", "bytes", "tokens"]))
    write_results(results, args.out)


if __name__ == "__main__":
    main()
