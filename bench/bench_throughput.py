"""Search throughput under concurrent clients: ``workbench serve`` on the embedded default
(multilingual-e5-small on ONNX Runtime) over ~2,541 conversation facts, asked distinct
questions by 1, 8 and 32 clients at once, over REST and over MCP (streamable HTTP).

The facts are the conversation facts of ``bench/bench_import.py`` (10 conversations of two
people, one group each), imported with ``workbench import``. Every question is asked once in
the whole run (no query-cache hits), with its conversation's group. Each client keeps one
connection alive and sends its requests back to back; the load generator is a minimal asyncio
HTTP/1.1 client, so that its own CPU stays small beside the service's on a 2-core machine.

Reported per transport and client count: requests/s, p50 and p95 latency, errors, the
service's CPU time per request (user + system of its process: load-independent, unlike the
rest), the load generator's, ``/health``'s p95 asked every 100 ms meanwhile, and the load
average. ``--sweep`` first times the embedder in process: CPU ms per query when 1-16 queries
are embedded in one call (what sets the batching window).

    .venv/bin/python bench/bench_throughput.py [--facts 2541] [--requests 1200]
        [--concurrency 1 8 32] [--no-mcp] [--sweep] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_http import start_service  # noqa: E402
from bench_import import PEOPLE, THINGS, rows, write_file  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
ASKS = ["What did {p} say about {t}?", "When did {p} go to {t}?", "How did {p} feel about {t}?",
        "Did {p} ever mention {t}?", "What happened with {p} and {t}?", "Tell me about {p}'s {t}.",
        "Was {t} fun for {p}?", "Who recommended {t} to {p}?", "Why did {p} start {t}?",
        "Has {p} finished {t} yet?"]  # fmt: skip
WHEN = ["", " last weekend", " yesterday", " in May 2023", " two weeks ago", " on Sunday",
        " after work", " during the summer", " last year", " recently"]  # fmt: skip


def questions(count: int, seed: int = 7) -> list[tuple[str, str]]:
    """``count`` distinct (question, group) pairs about the imported conversations."""
    combos = [(a, p, t, w) for a in ASKS for p in PEOPLE for t in THINGS for w in WHEN]
    if count > len(combos):
        raise SystemExit(f"at most {len(combos)} distinct questions")
    random.Random(seed).shuffle(combos)
    out = []
    for ask, person, thing, when in combos[:count]:
        group = f"conv-{(PEOPLE.index(person) // 2) % 10}"
        out.append((ask.format(p=person, t=thing).rstrip("?.") + when + "?", group))
    return out


class Connection:
    """One kept-alive HTTP/1.1 connection (Content-Length or chunked responses)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"", headers: str = ""):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{headers}"
                f"Content-Length: {len(body)}\r\n\r\n")  # fmt: skip
        self.writer.write(head.encode() + body)
        assert self.reader is not None
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        if "content-length" in fields:
            data = await self.reader.readexactly(int(fields["content-length"]))
        else:
            data = await self._chunked()
        if fields.get("connection", "").lower() == "close":
            await self.close()
        return status, fields, data

    async def _chunked(self) -> bytes:
        assert self.reader is not None
        parts = []
        while True:
            size = int((await self.reader.readline()).strip().split(b";")[0], 16)
            parts.append(await self.reader.readexactly(size + 2))
            if size == 0:
                return b"".join(p[:-2] for p in parts)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


def rest_call(conn: Connection):
    async def call(question: str, group: str) -> bool:
        body = json.dumps({"query": question, "group_ids": [group], "max_facts": 10}).encode()
        status, _, data = await conn.request(
            "POST", "/tools/search_memory_facts", body, "Content-Type: application/json\r\n"
        )
        return status == 200 and "facts" in json.loads(data)

    return call


MCP_HEADERS = "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"


def mcp_call(conn: Connection):
    ids = iter(range(1, 1 << 30))

    async def call(question: str, group: str) -> bool:
        message = {"jsonrpc": "2.0", "id": next(ids), "method": "tools/call",
                   "params": {"name": "search_memory_facts",
                              "arguments": {"query": question, "group_ids": [group],
                                            "max_facts": 10}}}  # fmt: skip
        status, _, data = await conn.request("POST", "/mcp/", json.dumps(message).encode(),
                                             MCP_HEADERS)  # fmt: skip
        if status != 200:
            return False
        result = json.loads(data).get("result") or {}
        return not result.get("isError", True) and "facts" in (result.get("structuredContent")
                                                              or {})  # fmt: skip

    return call


async def mcp_initialize(conn: Connection) -> None:
    """What a client sends first (stateless: no session to keep)."""
    message = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "bench", "version": "1"}}}  # fmt: skip
    status, _, data = await conn.request("POST", "/mcp/", json.dumps(message).encode(),
                                         MCP_HEADERS)  # fmt: skip
    if status != 200:
        raise SystemExit(f"MCP initialize answered {status}: {data[:300]!r}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


async def health_probe(host: str, port: int, stop: asyncio.Event, out: list[float]) -> None:
    conn = Connection(host, port)
    while not stop.is_set():
        started = time.perf_counter()
        status, _, _ = await conn.request("GET", "/health")
        out.append(time.perf_counter() - started if status == 200 else float("inf"))
        try:
            await asyncio.wait_for(stop.wait(), 0.1)
        except TimeoutError:
            pass
    await conn.close()


async def run_level(url: str, pid: int, transport: str, clients: int, asked) -> dict:
    host, port = url.removeprefix("http://").split(":")
    conns = [Connection(host, int(port)) for _ in range(clients)]
    if transport == "mcp":
        await asyncio.gather(*(mcp_initialize(c) for c in conns))
    else:
        await asyncio.gather(*(c.request("GET", "/tools") for c in conns))  # open them
    make = mcp_call if transport == "mcp" else rest_call
    latencies: list[float] = []
    errors = 0

    async def client(conn: Connection, mine) -> None:
        nonlocal errors
        call = make(conn)
        for question, group in mine:
            started = time.perf_counter()
            try:
                ok = await call(question, group)
            except (OSError, ValueError, asyncio.IncompleteReadError):
                ok = False
                await conn.close()
            latencies.append(time.perf_counter() - started)
            errors += not ok

    stop, health = asyncio.Event(), []
    probe = asyncio.create_task(health_probe(host, int(port), stop, health))
    cpu0, own0, started = cpu_seconds(pid), time.process_time(), time.perf_counter()
    await asyncio.gather(*(client(c, asked[i::clients]) for i, c in enumerate(conns)))
    wall = time.perf_counter() - started
    cpu, own = cpu_seconds(pid) - cpu0, time.process_time() - own0
    stop.set()
    await probe
    for conn in conns:
        await conn.close()
    ms = np.array(latencies) * 1000
    return {"transport": transport, "clients": clients, "requests": len(ms), "errors": errors,
            "rps": round(len(ms) / wall, 1), "p50_ms": round(float(np.percentile(ms, 50)), 1),
            "p95_ms": round(float(np.percentile(ms, 95)), 1),
            "service_cpu_ms": round(1000 * cpu / len(ms), 2),
            "client_cpu_ms": round(1000 * own / len(ms), 2),
            "health_p95_ms": round(float(np.percentile(np.array(health) * 1000, 95)), 1)
            if health else None,
            "load": round(os.getloadavg()[0], 2)}  # fmt: skip


def sweep(sizes=(1, 2, 4, 8, 12, 16), texts: int = 192) -> list[dict]:
    """CPU ms per query when ``size`` queries are embedded in one call (one thread)."""
    from workbench.embedding.e5 import E5Embedder

    embedder = E5Embedder()
    embedder.warm_up()
    asked = [q for q, _ in questions(texts * len(sizes), seed=3)]
    rows = []
    for n, size in enumerate(sizes):
        mine = asked[n * texts : (n + 1) * texts]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(0, texts, size):
            embedder.embed_queries(mine[i : i + size])
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        rows.append({"batch": size, "cpu_ms_per_query": round(1000 * cpu / texts, 2),
                     "wall_ms_per_call": round(1000 * wall / texts * size, 1)})  # fmt: skip
        print(f"batch {size:>2}: {rows[-1]['cpu_ms_per_query']:.2f} ms CPU a query, "
              f"{rows[-1]['wall_ms_per_call']:.1f} ms wall a call")  # fmt: skip
    return rows


def import_facts(db: Path, facts: int) -> float:
    source = db.with_suffix(".jsonl")
    write_file(source, rows(facts))
    started = time.perf_counter()
    command = [sys.executable, "-m", "service.control.cli", "import", str(source), "--db", str(db)]
    subprocess.run([*command, "--quiet"], check=True, capture_output=True, cwd=db.parent)
    return time.perf_counter() - started


HEADER = (f"{'transport':<9} {'clients':>7} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} "
          f"{'errors':>6} {'svc CPU ms/req':>14} {'client CPU':>10} {'health p95':>10} "
          f"{'load':>5}")  # fmt: skip


def line(row: dict) -> str:
    health = str(row["health_p95_ms"])
    return (f"{row['transport']:<9} {row['clients']:>7} {row['rps']:>7} {row['p50_ms']:>7} "
            f"{row['p95_ms']:>7} {row['errors']:>6} {row['service_cpu_ms']:>14} "
            f"{row['client_cpu_ms']:>10} {health:>10} {row['load']:>5}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=2541)
    parser.add_argument("--requests", type=int, default=1200, help="per level and transport")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--no-mcp", action="store_true", help="REST only")
    parser.add_argument("--sweep", action="store_true", help="first time the embedder's batches")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every level")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--db", type=Path, help="a database this script imported before")
    args = parser.parse_args()
    results: dict = {"facts": args.facts, "cpus": os.cpu_count(), "runs": []}
    if args.sweep:
        results["sweep"] = sweep()
    transports = ["rest"] + ([] if args.no_mcp else ["mcp"])
    levels = [(t, c) for _ in range(args.repeat) for t in transports for c in args.concurrency]
    asked = questions(args.requests * len(levels) + 100)
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "convo.duckdb"
        if not db.exists():
            took = import_facts(db, args.facts)
            print(f"imported {args.facts} facts in {took:.1f} s; load {os.getloadavg()[0]:.2f}")
        proc, url = start_service(db, Path(tmp) / "serve.log")
        try:
            warm = asked[-100:]
            asyncio.run(run_level(url, proc.pid, "rest", 4, warm))  # model, indexes, pools
            print(HEADER)
            for n, (transport, clients) in enumerate(levels):
                mine = asked[n * args.requests : (n + 1) * args.requests]
                row = asyncio.run(run_level(url, proc.pid, transport, clients, mine))
                results["runs"].append(row)
                print(line(row), flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
