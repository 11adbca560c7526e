"""Pure pieces: voices, sentences, pronunciation rules, payloads, rate limit, WAV, settings."""

from __future__ import annotations

import json
import os
import struct
import time

import numpy as np
import pytest

from voice.errors import PronunciationFileInvalid, RequestInvalid
from voice.payloads import parse_notify, parse_speech
from voice.pronunciation import RulesFile, apply_rules, compile_rules, parse_rules
from voice.ratelimit import RateLimiter
from voice.settings import Settings, settings_from_env
from voice.speech import shape_chunk
from voice.text import Chunk, plan_chunks, split_head, split_sentences
from voice.voices import KOKORO_VOICES, NUMBERED_VOICES, numbered_voices, resolve_voice
from voice.wav import to_pcm16, wav_header

# -- voices --------------------------------------------------------------------------------


def test_fixed_voice_ids_hold():
    fixed = {"1": "af_heart", "4": "af_sky", "12": "am_michael", "13": "am_adam", "21": "bf_emma"}
    assert {k: resolve_voice(k).name for k in fixed} == fixed


def test_41_numbered_voices_by_language_block():
    langs = [v.language for v in numbered_voices()]
    assert len(NUMBERED_VOICES) == len(set(NUMBERED_VOICES)) == 41
    assert langs == ["en-us"] * 20 + ["en-gb"] * 8 + ["ja"] * 5 + ["zh"] * 5 + ["pt-br"] * 3
    assert [v.id for v in numbered_voices()] == [str(i) for i in range(1, 42)]
    assert (resolve_voice("29").name, resolve_voice("34").name, resolve_voice("41").name) == (
        "jf_alpha", "zf_xiaoxiao", "pm_santa")  # fmt: skip


def test_all_54_kokoro_voices_can_be_named():
    assert len(KOKORO_VOICES) == 54
    assert resolve_voice("zm_yunxi").id is None
    assert resolve_voice("ff_siwis").language == "fr-fr"
    assert resolve_voice("am_adam").id == "13"
    assert resolve_voice(13).name == "am_adam"


@pytest.mark.parametrize("bad", ["0", "42", "-1", "abc", "", "1.5", None, True, 3.0, [], {}])
def test_invalid_voice_id_names_valid_range(bad):
    with pytest.raises(RequestInvalid, match="'1' to '41'"):
        resolve_voice(bad)


# -- sentences -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three?", ["One.", "Two!", "Three?"]),
        ("Version 3.5 is out. Dr. Smith approves.", ["Version 3.5 is out.", "Dr. Smith approves."]),
        ("こんにちは。今日の説明を始めます。", ["こんにちは。", "今日の説明を始めます。"]),
        ("你好！今天天气很好。", ["你好！", "今天天气很好。"]),
        ("No end mark", ["No end mark"]),
        ("  ", []),
        ('He said "stop." Then left.', ['He said "stop."', "Then left."]),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_keeps_the_first_sentence_whole():
    text = "The deployment to production finished, and all checks passed, after a short wait. Bye."
    assert split_sentences(text) == [text[:-5], "Bye."]


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        # a clause mark in the head range wins, even after an earlier linking word
        (
            "The deployment to production finished, and all checks passed.",
            ["The deployment to production finished,", "and all checks passed."],
        ),
        # else just before the first linking word with at least three words in front
        (
            "The nightly build finished without errors.",
            ["The nightly build finished", "without errors."],
        ),
        ("Build 1234 failed on the main branch.", ["Build 1234 failed", "on the main branch."]),
        ("Version 3.5 of the tool is out today.", ["Version 3.5 of the tool", "is out today."]),
        ("Your coffee is ready (with milk) now.", ["Your coffee is ready", "(with milk) now."]),
        ("Hello world, how are you today?", ["Hello world,", "how are you today?"]),
        # else after six words when at least six follow, never inside a word
        (
            "Deployment pipeline number seven completed successfully yesterday evening across "
            "every single region.",
            [
                "Deployment pipeline number seven completed successfully",
                "yesterday evening across every single region.",
            ],
        ),
        # a blind cut that would not halve the wait is not worth it
        (
            "Deployment pipeline completed successfully yesterday evening everywhere.",
            ["Deployment pipeline completed successfully yesterday evening everywhere."],
        ),
        ("A compilação terminou sem erros hoje.", ["A compilação terminou sem erros hoje."]),
        # too short to be worth a second engine call: whole
        ("Build done.", ["Build done."]),
        ("All five tests passed.", ["All five tests passed."]),
        ("Done, and gone.", ["Done, and gone."]),
        # no spaces (Chinese, Japanese): only at the first clause mark
        ("今天天气很好，我们去公园散步吧。", ["今天天气很好，", "我们去公园散步吧。"]),
        ("こんにちは。", ["こんにちは。"]),
        ("好，走。", ["好，走。"]),
        ("好，今天天气很好，走吧。", ["好，今天天气很好，", "走吧。"]),
    ],
)
def test_split_head(sentence, expected):
    parts = split_head(sentence)
    assert parts == expected
    assert " ".join(parts).split() == sentence.split() or "".join(parts) == sentence


def test_plan_cuts_only_the_first_sentence_and_marks_each_boundary():
    text = "The nightly build finished without errors. Three new tests were added to the suite."
    assert plan_chunks(text) == [
        Chunk("The nightly build finished", "word"),
        Chunk("without errors.", "sentence"),
        Chunk("Three new tests were added to the suite.", "sentence"),
    ]
    assert [c.text for c in plan_chunks(text, head=False)] == split_sentences(text)
    assert plan_chunks("Hello world, how are you today?") == [
        Chunk("Hello world,", "clause"),
        Chunk("how are you today?", "sentence"),
    ]
    assert plan_chunks("Version 3.5 of the tool is out today.\n\nNo end mark here") == [
        Chunk("Version 3.5 of the tool", "word"),
        Chunk("is out today.", "sentence"),
        Chunk("No end mark here", "sentence"),
    ]
    assert plan_chunks("  ") == []


def test_plan_marks_clause_cuts_of_long_sentences():
    text = "Short one. " + ", ".join(["word " * 10] * 5) + "."
    plan = plan_chunks(text, max_chars=120)
    assert plan[0] == Chunk("Short one.", "sentence")
    assert [c.ends for c in plan[1:]] == ["clause"] * (len(plan) - 2) + ["sentence"]
    assert all(len(c.text) <= 120 for c in plan)
    assert " ".join(c.text for c in plan).split() == text.split()


def test_long_sentence_is_cut_at_clauses():
    text = ", ".join(["word " * 10] * 10) + "."
    parts = split_sentences(text, max_chars=120)
    assert len(parts) > 1 and all(len(p) <= 120 for p in parts)
    assert " ".join(parts).split() == text.split()


# -- pronunciation -------------------------------------------------------------------------


def test_rules_whole_word_case_insensitive_longest_first():
    rules = compile_rules(
        {"SQL": "sequel", "PostgreSQL": "post gres", "k8s": "kubernetes", "C++": "C plus plus"}
    )
    text = "PostgreSQL and sql, not MySQLx; k8s runs C++."
    assert (
        apply_rules(text, rules) == "post gres and sequel, not MySQLx; kubernetes runs C plus plus."
    )


def test_no_rules_is_identity():
    assert apply_rules("Anything.", compile_rules({})) == "Anything."


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be one JSON object"),
        ('{"a": 1}', "spoken form must be a string"),
        ('{" ": "x"}', "empty term"),
    ],
)
def test_bad_rules_are_reported(raw, message):
    with pytest.raises(PronunciationFileInvalid, match=message):
        parse_rules(raw, "rules.json")


def test_comment_keys_are_ignored():
    assert len(parse_rules('{"// note": "x", "API": "A P I"}')) == 1


def test_rules_file_reloads_and_keeps_last_good(tmp_path):
    path = tmp_path / "p.json"
    source = RulesFile(path)
    assert len(source.rules()) == 0 and source.error is None  # missing file: no rules
    path.write_text(json.dumps({"API": "A P I"}))
    assert apply_rules("the API", source.rules()) == "the A P I"
    path.write_text("{broken")
    os.utime(path, (time.time() + 5, time.time() + 5))
    assert apply_rules("the API", source.rules()) == "the A P I"  # last good rules stay
    assert "not valid JSON" in source.error and "keeping the previous 1 rules" in source.error
    path.write_text(json.dumps({"API": "application interface", "CLI": "command line"}))
    os.utime(path, (time.time() + 10, time.time() + 10))
    assert source.status() == {"path": str(path), "rules": 2, "error": None}


# -- payloads ------------------------------------------------------------------------------


def notify(body, max_chars=100):
    return parse_notify(
        json.dumps(body).encode() if not isinstance(body, bytes) else body, max_chars
    )


def test_notify_payload_defaults_and_fields():
    req = notify(
        {"message": " Hi ", "voice_settings": {"speed": 1.2, "stability": 0.5}, "extra": 1}
    )
    assert (req.message, req.voice.name, req.speed, req.volume, req.title) == (
        "Hi",
        "af_heart",
        1.2,
        1.0,
        None,
    )
    req = notify({"message": "Hi", "voice_id": "21", "title": "CI", "volume": 0.5})
    assert (req.voice.name, req.title, req.volume) == ("bf_emma", "CI", 0.5)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty"),
        (b"{nope", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        ([1], "must be a JSON object"),
        ({}, "'message' is required"),
        ({"message": 5}, "must be a string"),
        ({"message": "   "}, "must not be empty"),
        ({"message": "x" * 101}, "limit is 100"),
        ({"message": "x", "voice_id": "99"}, "'1' to '41'"),
        ({"message": "x", "voice_settings": 1.2}, "'voice_settings' must be an object"),
        ({"message": "x", "voice_settings": {"speed": 3}}, "from 0.5 to 2.0"),
        ({"message": "x", "voice_settings": {"speed": "fast"}}, "must be a number"),
        ({"message": "x", "voice_settings": {"speed": True}}, "must be a number"),
        ({"message": "x", "volume": 2}, "'volume' must be from 0.0 to 1.0"),
        ({"message": "x", "title": 7}, "'title' must be a string"),
    ],
)
def test_notify_payload_rejections(body, message):
    with pytest.raises(RequestInvalid, match=message):
        notify(body)


def test_speech_payload():
    req = parse_speech(
        b'{"input": "Hi", "voice": "jf_alpha", "speed": 0.8, "response_format": "pcm"}', 50
    )
    assert (req.voice.name, req.speed, req.response_format) == ("jf_alpha", 0.8, "pcm")
    with pytest.raises(RequestInvalid, match="response_format"):
        parse_speech(b'{"input": "Hi", "response_format": "mp3"}', 50)


# -- rate limit ----------------------------------------------------------------------------


def test_token_bucket_per_client():
    now = [0.0]
    limiter = RateLimiter(per_minute=60, burst=2, clock=lambda: now[0])
    assert [limiter.allow("a") for _ in range(3)] == [True, True, False]
    assert limiter.allow("b")  # another client has its own bucket
    assert limiter.retry_after("a") == pytest.approx(1.0)
    now[0] = 1.0
    assert limiter.allow("a") and not limiter.allow("a")


def test_zero_rate_means_unlimited():
    limiter = RateLimiter(per_minute=0, burst=1)
    assert all(limiter.allow("a") for _ in range(100))


# -- audio helpers -------------------------------------------------------------------------


def test_wav_header_is_valid_riff():
    header = wav_header(24000, data_bytes=480)
    assert len(header) == 44 and header[:4] == b"RIFF" and header[8:16] == b"WAVEfmt "
    assert struct.unpack("<HHII", header[20:32]) == (1, 1, 24000, 48000)
    assert struct.unpack("<I", header[40:44]) == (480,)


def test_pcm16_and_volume_and_pause():
    assert to_pcm16(np.array([0.0, 1.0, -1.0, 2.0], dtype=np.float32)) == struct.pack(
        "<4h", 0, 32767, -32767, 32767
    )
    chunk = shape_chunk(np.ones(4, dtype=np.float32), volume=0.5, pause_samples=3)
    assert chunk.tolist() == [0.5] * 4 + [0.0] * 3


# -- settings ------------------------------------------------------------------------------


def test_settings_from_env(tmp_path):
    env = {
        "VOICE_PORT": "9000",
        "VOICE_ASSETS_DIR": str(tmp_path),
        "VOICE_AUDIO": "0",
        "VOICE_QUEUE_SIZE": "3",
        "VOICE_ALLOWED_HOSTS": "voice.lan, box.local/",
        "VOICE_DEFAULT_ID": "7",
    }
    s = settings_from_env(env)
    assert (s.port, s.assets_dir, s.audio_enabled, s.queue_size, s.host) == (
        9000,
        tmp_path,
        False,
        3,
        "127.0.0.1",
    )
    assert (s.allowed_hosts, s.default_voice_id) == (("voice.lan", "box.local"), "7")
    assert settings_from_env({}) == Settings.model_validate({})
    with pytest.raises(SystemExit, match="VOICE_PORT='eighty'"):
        settings_from_env({"VOICE_PORT": "eighty"})
    with pytest.raises(SystemExit, match="VOICE_ENGINE='espeak'.*kokoro-onnx"):
        settings_from_env({"VOICE_ENGINE": "espeak"})
    with pytest.raises(SystemExit, match="VOICE_MAX_CHARS"):
        settings_from_env({"VOICE_MAX_CHARS": "0"})


def test_the_generic_port_still_works_but_is_deprecated(caplog):
    with caplog.at_level("WARNING", logger="voice.settings"):
        assert settings_from_env({"PORT": "9000"}).port == 9000
    assert "PORT is deprecated; set VOICE_PORT" in caplog.text
    caplog.clear()
    assert settings_from_env({"PORT": "9000", "VOICE_PORT": "9001"}).port == 9001
    assert "deprecated" not in caplog.text
    with pytest.raises(SystemExit, match="PORT='x'"):
        settings_from_env({"PORT": "x"})


def test_a_misspelled_voice_variable_is_named_with_the_closest_setting(caplog):
    with caplog.at_level("WARNING", logger="voice.settings"):
        settings_from_env({"VOICE_PROT": "1", "VOICE_TOTALLY_ELSE": "1", "VOICE_PORT": "1"})
    assert "unknown setting VOICE_PROT is ignored; did you mean VOICE_PORT?" in caplog.text
    assert "unknown setting VOICE_TOTALLY_ELSE is ignored" in caplog.text
    assert "VOICE_PORT is" not in caplog.text


def test_settings_come_from_the_environment_and_a_dotenv_file(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.upper().startswith("VOICE_") or name.upper() == "PORT":
            monkeypatch.delenv(name)
    env_file = tmp_path / ".env"
    env_file.write_text("VOICE_PORT=9100\nVOICE_TOKEN=from-the-file-0123456789\nVOICE_AUDIO=off\n")
    monkeypatch.setenv("VOICE_PORT", "9200")  # the environment wins over the file
    monkeypatch.setenv("VOICE_ALLOWED_ORIGINS", "http://a.example:3000,https://b.example")
    s = settings_from_env(env_file=env_file)
    assert (s.port, s.token, s.audio_enabled) == (9200, "from-the-file-0123456789", False)
    assert s.allowed_origins == ("http://a.example:3000", "https://b.example")
    assert settings_from_env(env_file=tmp_path / "missing.env").token is None
    assert s.with_overrides(port=1, host=None) == s.model_copy(update={"port": 1})


LONG_FIRST = [
    "The deployment of the new billing service to the production cluster in the European "
    "region finished after the database migration completed without any errors or warnings "
    "from the monitoring system.",
    "Please remember that the quarterly report, which includes the revenue figures for all "
    "regions and the projected costs for next year, must be submitted by Friday.",
    " ".join(f"word{i}" for i in range(40)) + ".",  # no natural cut at all
]


@pytest.mark.parametrize("sentence", LONG_FIRST)
def test_a_long_first_sentence_is_cut_into_pieces_that_grow_slowly(sentence):
    from voice.text import split_first

    pieces = split_first(sentence, growth=1.5)
    assert " ".join(pieces) == sentence  # nothing lost, nothing cut inside a word
    assert len(pieces) >= 3
    sizes = [len(p.split()) for p in pieces]
    assert sizes[0] <= 6
    # each piece is ready before the previous one has played out (at real-time factor < 2/3)
    assert all(b <= int(a * 1.5) for a, b in zip(sizes, sizes[1:])), sizes


def test_short_first_sentences_keep_one_cut_at_most():
    from voice.text import split_first

    assert split_first("Short one.") == ["Short one."]
    assert split_first("The nightly build finished without errors.") == [
        "The nightly build finished",
        "without errors.",
    ]
