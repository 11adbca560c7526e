"""``workbench import`` beside a running service sends the file in chunks sized by bytes: a
file whose lines carry 384-dimension vectors goes through the service's 1 MiB body limit
(1,000 such lines are ~4 MB: one chunk of them was a 413)."""

from __future__ import annotations

import json
import random

import pytest

from service.api.app import MIN_BODY_BYTES, create_app
from service.client.live import LiveService
from service.control.cli import IMPORT_CHUNK_BYTES, import_through
from tests.service.svc_helpers import make_settings
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics


@pytest.fixture
def live(server_thread):
    workbench = Workbench.open(
        make_settings(), embedder=HashEmbedder(), chat=None, metrics=Metrics()
    )
    service = LiveService(server_thread(create_app(workbench, workbench.settings)).url)
    yield service
    service.close()
    workbench.close()


def vector(rng: random.Random) -> list[float]:
    return [rng.uniform(-1, 1) for _ in range(384)]


def test_lines_with_vectors_go_through_the_body_limit(live, tmp_path):
    rng = random.Random(7)
    lines = [
        {"type": "entity", "name": f"Entity {i}", "embedding": vector(rng)} for i in range(1200)
    ]
    lines.insert(700, {"type": "entity", "name": "Huge", "summary": "x" * (IMPORT_CHUNK_BYTES)})
    lines.insert(900, {"type": "nonsense"})  # refused by the service: its line number holds
    path = tmp_path / "vectors.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert path.stat().st_size > 4 * MIN_BODY_BYTES
    report = import_through(live, str(path), None, progress=False)
    assert report["entities_created"] == 1200
    assert report["error_count"] == 2
    assert report["errors"][0].startswith("line 701: ") and "running service" in report["errors"][0]
    assert report["errors"][1].startswith("line 901: ")
    assert live.call("get_status")["graph"]["entities"] == 1200


def test_a_chunk_always_fits_the_smallest_body_limit():
    assert 2 * IMPORT_CHUNK_BYTES <= MIN_BODY_BYTES


def test_the_entities_file_beside_goes_first_through_a_running_service(live, tmp_path):
    """Its entities (their type and vectors) are sent before the facts that name them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(3)
    rows = [{"name": f"Person {i}", "entity_type": "Person", "embedding": vector(rng)}
            for i in range(3)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "entities.parquet")
    facts = [{"type": "fact", "source": "Person 0", "target": f"Person {i}",
              "fact": f"Person 0 knows Person {i}"} for i in (1, 2)]  # fmt: skip
    path = tmp_path / "facts.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in facts))
    report = import_through(live, str(path), None, progress=False)
    assert report["entities_created"] == 3 and report["facts_created"] == 2
    assert report["entities_existing"] == 3 and report["error_count"] == 0


def test_facts_imported_through_a_running_service_name_their_file(live, tmp_path):
    path = tmp_path / "team.jsonl"
    fact = {"type": "fact", "source": "Ana", "target": "Initech", "fact": "Ana works at Initech"}
    path.write_text(json.dumps(fact) + "\n")
    assert import_through(live, str(path), None, progress=False)["facts_created"] == 1
    [found] = live.call("search_memory_facts", {"query": "Ana works at Initech"})["facts"]
    assert found["sources"]["imported"]["file"] == "team.jsonl"
    assert found["sources"]["episodes"] == []
