"""Overhead of the LLM client's accounting + metrics per call, against a bare ``openai`` call.

Run:  .venv/bin/python bench/bench_llm_overhead.py [--calls 100] [--big]

Both paths talk to the fake chat-completions server on loopback (tests/fakes), so the network
part is identical and tiny. Printed:

* end-to-end µs per call: bare ``client.chat.completions.create`` vs ``CompatChatModel.complete``
  (request building, reply validation, cost, metrics, one ``llm_calls`` row), with and without
  the DuckDB row;
* the same work measured directly on an already-received completion (no HTTP), split into
  parse/validate, usage+cost, metrics, row insert;
* the ratio overhead / bare call.
"""

from __future__ import annotations

import argparse
import statistics
import time

import openai
from pydantic import BaseModel, Field

from workbench.fakes.chat_server import FakeLLMServer, FakeReply
from workbench.llm import CompatChatModel
from workbench.llm.client import _Call
from workbench.llm.structured import parse_reply, request_options
from workbench.metrics import Metrics
from workbench.store import Store


class Entity(BaseModel):
    name: str
    entity_type: str = "Entity"
    summary: str = ""
    importance: int = Field(default=3, ge=1, le=5)


class ExtractedEntities(BaseModel):
    entities: list[Entity]


DATA = {
    "entities": [
        {
            "name": f"Entity {i}",
            "entity_type": "Person",
            "summary": "A person mentioned in the episode.",
            "importance": 3,
        }
        for i in range(8)
    ]
}
MESSAGES = [
    {"role": "system", "content": "You extract entities. " * 40},
    {"role": "user", "content": "Maria Keller works at Acme in Berlin. " * 10},
]


def per_call_us(fn, calls: int, repeats: int = 3) -> float:
    """Best-of-``repeats`` mean µs per call."""
    best = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best.append((time.perf_counter() - start) / calls * 1e6)
    return min(best)


def end_to_end(server: FakeLLMServer, calls: int) -> dict[str, float]:
    reply = FakeReply.ok(DATA, prompt_tokens=900, completion_tokens=250)
    server.set_responder(lambda _req: reply)
    bare = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    msgs, extra = request_options("json_schema", MESSAGES, ExtractedEntities)

    def bare_call():
        bare.chat.completions.create(model="gpt-4o-mini", messages=msgs, max_tokens=4096, **extra)

    def model(store):
        return CompatChatModel(
            base_url=server.base_url,
            api_key="k",
            model="gpt-4o-mini",
            metrics=Metrics(),
            store=store,
            requests_per_minute=0,
        )

    no_row, with_row = model(None), model(Store.open())
    paths = {
        "bare openai call": bare_call,
        "complete(), no row": lambda: no_row.complete("p", MESSAGES, ExtractedEntities),
        "complete(), with row": lambda: with_row.complete("p", MESSAGES, ExtractedEntities),
    }
    for fn in paths.values():
        fn()  # warm up connections and caches
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(calls):  # interleaved, so load changes hit every path alike
        for name, fn in paths.items():
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def components(server: FakeLLMServer, calls: int) -> dict[str, float]:
    server.script(FakeReply.ok(DATA, prompt_tokens=900, completion_tokens=250))
    chat = CompatChatModel(
        base_url=server.base_url,
        api_key="k",
        model="gpt-4o-mini",
        metrics=Metrics(),
        store=Store.open(),
        requests_per_minute=0,
    )
    msgs, extra = request_options("json_schema", MESSAGES, ExtractedEntities)
    completion = chat._client.chat.completions.create(model="gpt-4o-mini", messages=msgs, **extra)
    call = _Call("p", None, "ExtractedEntities")
    reply = chat._reply(call, completion, 0.5)
    text = completion.choices[0].message.content
    metrics_only = CompatChatModel(
        base_url=server.base_url,
        api_key="k",
        model="gpt-4o-mini",
        metrics=Metrics(),
        store=None,
        requests_per_minute=0,
    )
    return {
        "build request (schema)": per_call_us(
            lambda: request_options("json_schema", MESSAGES, ExtractedEntities), calls
        ),
        "parse + validate reply": per_call_us(lambda: parse_reply(text, ExtractedEntities), calls),
        "usage + cost": per_call_us(lambda: chat._reply(call, completion, 0.5), calls),
        "metrics (record_llm_call)": per_call_us(
            lambda: metrics_only._account(call, reply, None), calls
        ),
        "metrics + llm_calls row": per_call_us(lambda: chat._account(call, reply, None), calls),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--big", action="store_true", help="10x more calls")
    args = parser.parse_args(argv)
    calls = args.calls * (10 if args.big else 1)
    with FakeLLMServer(model="gpt-4o-mini") as server:
        e2e = end_to_end(server, calls)
        parts = components(server, calls)
    print(
        f"calls per measurement: {calls} "
        "(end to end: median, interleaved; components: best of 3 means)\n"
    )
    print("end to end against the fake server (median µs per call)")
    for name, us in e2e.items():
        print(f"  {name:<28} {us:10.1f}")
    bare = e2e["bare openai call"]
    print("\nclient work measured without HTTP (µs per call)")
    for name, us in parts.items():
        print(f"  {name:<28} {us:10.1f}")
    direct = (
        parts["build request (schema)"]
        + parts["parse + validate reply"]
        + parts["usage + cost"]
        + parts["metrics + llm_calls row"]
    )
    metrics_part = parts["usage + cost"] + parts["metrics (record_llm_call)"]
    print(
        f"\naccounting + metrics (usage, cost, metrics): {metrics_part:8.1f} µs "
        f"= {metrics_part / bare:.3f} x a bare call"
    )
    print(
        f"all client work incl. schema, validation, row: {direct:8.1f} µs "
        f"= {direct / bare:.3f} x a bare call"
    )
    print(
        f"end-to-end difference (with row):            "
        f"{e2e['complete(), with row'] - bare:8.1f} µs "
        f"= {(e2e['complete(), with row'] - bare) / bare:.3f} x a bare call"
    )


if __name__ == "__main__":
    main()
