"""bench/bench_locomo.py on a tiny conversation in the benchmark's format (both published
layouts): what it imports, which turns a fact counts for, and its scores end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_locomo as bl  # noqa: E402

SAMPLE = {
    "speaker_a": "Caroline",
    "speaker_b": "Melanie",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_2_date_time": "7:55 pm on 9 June, 2023",
    "session_1": [
        {"speaker": "Caroline", "dia_id": "D1:3", "text": "I went to a LGBTQ support group."},
        {"speaker": "Melanie", "dia_id": "D1:12", "text": "I painted that lake sunrise last year!",
         "blip_caption": "a painting of a sunrise over a lake"},
        {"dia_id": "D1:13", "text": "a turn with no speaker is left out"},
    ],
    "session_1_observation": {
        "Caroline": [
            ["Caroline attended an LGBTQ support group and found it inspiring.", "D1:3"],
            ["Caroline is thinking about a career in counseling.", "D1:9"],
        ],
        "Melanie": [["Melanie painted a sunrise by the lake last year.", "D1:12"]],
    },
    "session_2_observation": {
        "Melanie": [
            ["Melanie signed up for a pottery class.", ["D2:4", "D2:5"]],
            ["Melanie painted a sunrise by the lake last year.", "D2:7"],
        ],
    },
    "qa": [
        {"question": "What did Melanie paint?", "answer": "a sunrise",
         "evidence": ["D1:12"], "category": 4},
        {"question": "Which class did Melanie sign up for?", "answer": "pottery",
         "evidence": ["D2:5; D9:1"], "category": 1},
        {"question": "What did Caroline say about Mars?", "answer": "nothing",
         "evidence": [], "category": 5},
        {"question": "When did Caroline go to the support group?", "answer": "7 May 2023",
         "evidence": ["D1:3"], "category": 2},
    ],
}  # fmt: skip


def test_observations_become_facts_from_their_speaker_with_their_session_date():
    lines, turns = bl.import_lines(SAMPLE, "conv-0")
    assert len(lines) == 4  # the repeated observation once, citing both turns
    first = lines[0]
    assert (first["source"], first["target"], first["group_id"]) == (
        "Caroline",
        "Melanie",
        "conv-0",
    )
    assert first["valid_at"] == "2023-05-08T13:56:00+00:00"
    assert turns["Melanie painted a sunrise by the lake last year."] == {"D1:12", "D2:7"}
    assert turns["Melanie signed up for a pottery class."] == {"D2:4", "D2:5"}
    assert bl.turn_ids(["D8:6; D9:17", "D1:3"]) == {"D8:6", "D9:17", "D1:3"}
    assert [q["category"] for q in bl.questions(SAMPLE)] == [4, 1, 2]  # no adversarial, no empty


def test_turns_become_facts_of_their_speaker_with_a_photo_caption():
    lines, turns = bl.turn_lines(SAMPLE, "conv-0")
    assert [line["fact"] for line in lines] == [
        "Caroline: I went to a LGBTQ support group.",
        "Melanie: I painted that lake sunrise last year! "
        "[shares a photo: a painting of a sunrise over a lake]",
    ]
    assert (lines[1]["source"], lines[1]["target"]) == ("Melanie", "Caroline")
    assert lines[0]["valid_at"] == "2023-05-08T13:56:00+00:00"
    assert turns["Caroline: I went to a LGBTQ support group."] == {"D1:3"}


def test_scores_count_a_question_found_by_any_of_its_turns():
    assert bl.scores([{"D1:1"}, {"D2:2", "D3:3"}], {"D3:3", "D9:9"}) == (0.5, 1.0)
    assert bl.scores([], {"D1:1"}) == (0.0, 0.0)


def test_the_bound_is_the_best_any_ranking_of_the_facts_can_do():
    cited = [{"D1:1"}, {"D1:2", "D1:3"}, {"D1:3"}, {"D5:5"}, {"D1:2"}]
    # the fact citing two evidence turns first; D9:9 is cited by no fact, so never covered
    assert bl.best_ranking(cited, {"D1:2", "D1:3", "D1:1", "D9:9"}) == [
        {"D1:2", "D1:3"},
        {"D1:1"},
    ]
    assert bl.scores(bl.best_ranking(cited, {"D1:2", "D9:9"}), {"D1:2", "D9:9"}) == (0.5, 1.0)
    assert bl.best_ranking(cited, {"D9:9"}) == []
    many = [{f"D1:{i}"} for i in range(20)]
    assert len(bl.best_ranking(many, {f"D1:{i}" for i in range(20)})) == bl.K


def test_the_bench_imports_turns_when_asked(tmp_path):
    (tmp_path / "26.json").write_text(json.dumps(SAMPLE))
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_locomo.py"), str(tmp_path), "--json",
         "--unit", "turn"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert (result["facts"], result["unit"]) == (2, "turn")
    # the two turns are the evidence of the single-hop and the temporal question
    bound = result["methods"]["bound"]
    assert bound["single-hop"]["recall@10"] == 1.0 and bound["multi-hop"]["hit@10"] == 0.0
    assert result["methods"]["fused"]["temporal"]["hit@10"] == 1.0


@pytest.mark.parametrize("layout", ["folder", "list"])
def test_the_bench_runs_on_either_layout(tmp_path, layout):
    if layout == "folder":
        (tmp_path / "26.json").write_text(json.dumps(SAMPLE))
        path = tmp_path
    else:
        flat = {k: v for k, v in SAMPLE.items() if not k.endswith("_observation") and k != "qa"}
        observations = {k: v for k, v in SAMPLE.items() if k.endswith("_observation")}
        nested = {"sample_id": "conv-26", "conversation": flat, "qa": SAMPLE["qa"],
                  "observation": observations}  # fmt: skip
        path = tmp_path / "locomo10.json"
        path.write_text(json.dumps([nested]))
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_locomo.py"), str(path), "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["facts"] == 4 and result["questions"] == 3
    fused = result["methods"]["fused"]
    assert fused["all"]["n"] == 3 and set(fused) == {"all", "multi-hop", "temporal", "single-hop"}
    # four facts, top 10: every question with a cited observation is found; the multi-hop one
    # cites a turn no observation has (D9:1), so half its evidence
    assert fused["single-hop"]["recall@10"] == 1.0 and fused["temporal"]["hit@10"] == 1.0
    assert fused["multi-hop"] == {"n": 1, "recall@10": 0.5, "hit@10": 1.0}
    assert result["methods"]["bound"]["multi-hop"] == {"n": 1, "recall@10": 0.5, "hit@10": 1.0}
    assert result["methods"]["bound"]["all"]["recall@10"] == round(2.5 / 3, 3)


def test_a_path_that_is_not_the_benchmark_is_a_clear_error(tmp_path):
    (tmp_path / "other.json").write_text(json.dumps({"hello": "world"}))
    for path in (tmp_path / "missing.json", tmp_path / "other.json"):
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "bench_locomo.py"), str(path)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert "does not exist" in done.stderr or "LoCoMo format" in done.stderr


def test_sessions_become_message_episodes_and_passages_know_their_turns():
    [(first, ids), *_] = bl.session_episodes(SAMPLE, "conv-0")
    assert first["source"] == "message" and first["group_id"] == "conv-0"
    assert first["reference_time"] == "2023-05-08T13:56:00+00:00"
    assert first["episode_body"].splitlines() == [
        "Caroline: I went to a LGBTQ support group.",
        "Melanie: I painted that lake sunrise last year! "
        "[shares a photo: a painting of a sunrise over a lake]",
    ]
    assert ids == ["D1:3", "D1:12"]
    assert bl.passage_turns(first["episode_body"], ids) == [{"D1:3", "D1:12"}]
    # a long turn cut into pieces: each piece counts for its turn, in order
    long = " ".join(f"Sentence number {i} is here." for i in range(60))
    body = f"Ana: hi\nBo: {long}\nAna: bye"
    held = bl.passage_turns(body, ["D1:1", "D1:2", "D1:3"])
    assert held[0] == {"D1:1", "D1:2"} and held[-1] >= {"D1:3"}
    assert set().union(*held) == {"D1:1", "D1:2", "D1:3"}


def test_the_bench_adds_sessions_and_asks_search_memory(tmp_path):
    (tmp_path / "26.json").write_text(
        json.dumps(
            {
                **SAMPLE,
                "session_2": [
                    {
                        "speaker": "Melanie",
                        "dia_id": "D2:5",
                        "text": "I signed up for a pottery class.",
                    }
                ],
            }
        )
    )
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_locomo.py"), str(tmp_path),
         "--with-sessions"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert (result["facts"], result["episodes"], result["questions"]) == (4, 2, 3)
    recall = result["methods"]["search_memory"]
    # the multi-hop question cites D2:5, said in session 2 but in no observation: found now
    assert recall["multi-hop"]["hit@10"] == 1.0 and recall["all"]["hit@10"] == 1.0
    assert {"near None within a kind", "facts only", "passages only"} <= set(result["methods"])
    assert result["add_memory_p95_ms"] > 0
