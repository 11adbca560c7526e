"""bench/bench_longmemeval.py on a tiny question of our own in the benchmark's format: the
sessions it adds (in date order, dated), which turns a passage holds, and its two metrics
end to end, with the question's date as ``now``."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_longmemeval as lme  # noqa: E402


def turns(*said: str, answer: int | None = None) -> list[dict]:
    out = [{"role": "user" if i % 2 == 0 else "assistant", "content": text}
           for i, text in enumerate(said)]  # fmt: skip
    if answer is not None:
        out[answer]["has_answer"] = True
    return out


QUESTION = {
    "question_id": "tiny-1",
    "question_type": "temporal-reasoning",
    "question": "What did I bake last week?",
    "question_date": "2023/05/30 (Tue) 23:40",
    "answer": "a lemon cake",
    "answer_session_ids": ["answer_s2"],
    "haystack_session_ids": ["answer_s2", "s1", "s3"],
    "haystack_dates": [
        "2023/05/24 (Wed) 10:00",
        "2023/04/02 (Sun) 09:00",
        "2023/05/29 (Mon) 18:00",
    ],  # fmt: skip
    "haystack_sessions": [
        turns("I baked a lemon cake for my sister.", "Lovely!", answer=0),
        turns("I baked bread in April.", "Nice bread."),
        turns("Any tips to bake faster?", "Preheat the oven."),
    ],
}


def test_episodes_are_sorted_by_date_and_dated():
    eps = lme.episodes(QUESTION)
    assert [sid for _, sid, _, _ in eps] == ["s1", "answer_s2", "s3"]
    first = eps[0][0]
    assert first["reference_time"] == "2023-04-02T09:00:00+00:00"
    assert first["episode_body"].splitlines()[0] == "user: I baked bread in April."
    assert eps[1][3] == {"answer_s2#0"}


def test_passage_turns_name_the_turns_a_passage_holds():
    body = "user: one\nassistant: two\nuser: three\nassistant: four"
    assert lme.passage_turns(body, ["a", "b", "c", "d"]) == [{"a", "b", "c"}, {"d"}]


def test_first_of_each_type():
    qs = [{"question_type": t} for t in "aabba"]
    assert [q["question_type"] for q in lme.first_of_each(qs, 1)] == ["a", "b"]


def test_the_runner_end_to_end(tmp_path):
    data = tmp_path / "tiny.json.gz"
    abstention = QUESTION | {"question_id": "tiny-2_abs"}
    with gzip.open(data, "wt", encoding="utf-8") as f:
        json.dump([QUESTION, abstention], f)
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_longmemeval.py"), str(data),
         "--no-vectors", "--json"],
        capture_output=True, text=True, check=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    report = json.loads(out.stdout)
    assert report["questions"] == 1  # the abstention question is not scored
    mine = report["methods"]["search_memory"]["temporal-reasoning"]
    assert mine == {"n": 1, "turn_any@10": 1.0, "session_any@5": 1.0}
    progress = json.loads(out.stderr.strip().splitlines()[-1])
    assert progress["window"]["text"] == "last week"
