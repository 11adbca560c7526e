"""Voice benchmark: real-time factor, first-audio latency and server start-up.

    .venv/bin/python bench/bench_voice.py                 # 2-sentence English message, 2 threads
    .venv/bin/python bench/bench_voice.py --threads 1 --repeat 5 --voice 21
    .venv/bin/python bench/bench_voice.py --skip-server   # engine only
    .venv/bin/python bench/bench_voice.py --plan both --repeat 5   # A/B: chunk plan vs sentences
    .venv/bin/python bench/bench_voice.py --idle 2 --skip-server   # each request after 2 s idle
    .venv/bin/python bench/bench_voice.py --heads --skip-server     # cost of a head of 1..6 words
    nice -n 10 .venv/bin/python bench/bench_voice.py --load 8 --notifier --skip-server
        # 8 busy processes beside it (for at most --load-seconds), notifications played
        # through the real notifier (pacing, cache) into a real-time sink: stalls, first audio

Targets (issue 8): RTF <= 0.5 with 2 threads, first audio <= 1.0 s.
RTF = synthesis seconds / audio seconds over the whole message (chunks in order); the load
average is printed because other work on the machine inflates every number, and so is the CPU
time per audio second (all threads), which other load inflates less.
First audio = time from the request to the first chunk, streaming as the server does
(``chunks_for``: pronunciation rules, sentence split with a short head cut off the first
sentence, then G2P and synthesis of that head). ``--plan sentences`` measures the older plan
(one chunk per whole sentence); ``--plan both`` alternates the two in the same run.
Stall = the silence a real-time player would insert after the first sound, waiting for later
chunks (a head too short for the rest to be ready in time shows here); the engine-only figures
stream without pacing. ``--notifier`` plays distinct notifications through the server's
``Notifier`` (pacing holds the first sound until the rest keeps up; the audio cache) into a sink
that takes as long as the audio lasts, and reports its stall count, the time the first sound
was held, first audio, and a repeat of the first message (from the cache). ``--load N`` starts N
busy processes (pure Python loops, ended after ``--load-seconds`` at most) before measuring.
``--idle S`` sleeps S seconds before each request, as a notification server mostly sees them
(back-to-back by default). ``--heads`` also times G2P and synthesis alone for the first 1..6
words of the message (wall and CPU seconds, median), with the audio the engine returned and what
is left of it once its quiet edges are trimmed. Besides, every call synthesizes ~0.35 s of
silence before the speech (the model's duration for the start token), which kokoro-onnx trims
off: a fixed cost of each call that a shorter head cannot avoid.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

MESSAGE = "The nightly build finished without errors. Three new tests were added to the suite."


def bench_engine(args: argparse.Namespace) -> dict[str, object]:
    from voice.engine import KokoroEngine
    from voice.settings import settings_from_env
    from voice.speech import Speech, chunks_for, sentences_for
    from voice.voices import resolve_voice

    assets = args.assets_dir or settings_from_env().resolved_assets_dir()
    engine = KokoroEngine(assets, threads=args.threads, warm_languages=())
    voice = resolve_voice(args.voice)
    started = time.perf_counter()
    engine.load()
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    engine.phonemizers.get(voice.language)
    g2p_s = time.perf_counter() - started
    engine.synthesize("Warm up.", voice)  # the first inference pays one-off allocation costs
    plans = {"chunks": chunks_for(args.message), "sentences": sentences_for(args.message)}
    names = list(plans) if args.plan == "both" else [args.plan]
    runs: dict[str, dict[str, list[float]]] = {
        n: {"first": [], "stall": [], "rtf": [], "cpu": [], "audio": []} for n in names
    }
    for _ in range(args.repeat):
        for name in names:
            time.sleep(args.idle)
            _stream_once(engine, Speech(args.message, voice), plans[name], runs[name])
    result: dict[str, object] = {
        "voice": voice.name,
        "threads": engine.threads,
        "idle_before_each_s": args.idle,
        "model_load_s": round(load_s, 2),
        "g2p_load_s": round(g2p_s, 2),
    }
    for name in names:
        prefix = "" if len(names) == 1 else f"{name}_"
        result |= _summary(prefix, plans[name], runs[name])
    if args.heads:
        result["heads"] = _heads(engine, voice, args)
    return result


def _heads(engine, voice, args: argparse.Namespace) -> list[dict[str, object]]:
    """G2P and synthesis of the first 1..6 words alone, after ``--idle`` seconds each."""
    from voice.speech import trim_quiet_edges

    words = args.message.split()
    times: dict[int, list[tuple[float, ...]]] = {n: [] for n in range(1, 7)}
    sizes: dict[int, tuple[float, float]] = {}
    for _ in range(args.repeat):
        for n in times:
            time.sleep(args.idle)
            text = " ".join(words[:n])
            g2p = _timed(lambda text=text: engine.phonemes(text, voice))
            audio = _timed(lambda text=text: engine.synthesize(text, voice))
            times[n].append((*g2p[1:], *audio[1:]))
            kept = trim_quiet_edges(audio[0], engine.sample_rate, True, True)
            sizes[n] = (len(audio[0]) / engine.sample_rate, len(kept) / engine.sample_rate)
    return [
        {
            "head": " ".join(words[:n]),
            "g2p_ms": round(statistics.median(t[0] for t in runs) * 1000, 1),
            "synth_s": round(statistics.median(t[2] for t in runs), 3),
            "synth_cpu_s": round(statistics.median(t[3] for t in runs), 3),
            "audio_s": round(sizes[n][0], 2),
            "speech_s": round(sizes[n][1], 2),
        }
        for n, runs in times.items()
    ]


def _timed(call) -> tuple[object, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _stream_once(engine, speech, plan, runs: dict[str, list[float]]) -> None:
    from voice.speech import stream_speech

    started, cpu_started = time.perf_counter(), time.process_time()
    samples, stall, playing_until = 0, 0.0, 0.0
    for chunk in stream_speech(engine, speech, plan):
        ready = time.perf_counter() - started
        if samples == 0:
            runs["first"].append(ready)
        else:  # a player would have run dry this long waiting for the chunk
            stall += max(0.0, ready - playing_until)
        playing_until = max(playing_until, ready) + len(chunk) / engine.sample_rate
        samples += len(chunk)
    runs["stall"].append(stall)
    audio_s = samples / engine.sample_rate
    runs["rtf"].append((time.perf_counter() - started) / audio_s)
    runs["cpu"].append((time.process_time() - cpu_started) / audio_s)
    runs["audio"].append(audio_s)


def _summary(prefix: str, plan: list, runs: dict[str, list[float]]) -> dict[str, object]:
    return {
        f"{prefix}chunks": [getattr(c, "text", c) for c in plan],
        f"{prefix}audio_seconds": round(statistics.median(runs["audio"]), 2),
        f"{prefix}first_audio_s_median": round(statistics.median(runs["first"]), 3),
        f"{prefix}first_audio_s_all": [round(x, 3) for x in runs["first"]],
        # silence a real-time player would insert, waiting for chunks after the first
        f"{prefix}stall_s_median": round(statistics.median(runs["stall"]), 3),
        f"{prefix}rtf_median": round(statistics.median(runs["rtf"]), 3),
        f"{prefix}rtf_all": [round(x, 3) for x in runs["rtf"]],
        # CPU seconds (all threads) per second of audio: less sensitive to other load than RTF
        f"{prefix}cpu_s_per_audio_s_median": round(statistics.median(runs["cpu"]), 3),
    }


def bench_notifier(args: argparse.Namespace) -> dict[str, object]:
    """Distinct notifications through the real notifier into a real-time sink, then a repeat."""
    import tempfile

    from voice.audio import RecordingSink
    from voice.cache import AudioCache
    from voice.engine import KokoroEngine
    from voice.notifier import Notification, Notifier
    from voice.settings import settings_from_env
    from voice.speech import Speech
    from voice.voices import resolve_voice

    assets = args.assets_dir or settings_from_env().resolved_assets_dir()
    voice = resolve_voice(args.voice)
    engine = KokoroEngine(assets, threads=args.threads, warm_languages=(voice.language,))
    with tempfile.TemporaryDirectory() as folder:
        cache = AudioCache(Path(folder), 64 * 2**20)
        notifier = Notifier(engine, RecordingSink(realtime=True), cache=cache)
        notifier.warm_up(voice)
        notifier.start()
        try:
            texts = [f"{args.message} Run {i + 1}." for i in range(args.repeat)]
            for index, text in enumerate([*texts, texts[0]]):
                time.sleep(args.idle)
                notifier.submit(Notification(str(index), Speech(text, voice)))
                notifier.wait_idle(300)
        finally:
            notifier.stop()
    fresh, repeat = notifier.outcomes[:-1], notifier.outcomes[-1]
    speed = notifier.speed.snapshot()
    return {
        "notifier_voice": voice.name,
        "notifier_results": [o.result for o in notifier.outcomes],
        "notifier_stalls": sum(o.stalls for o in fresh),
        "notifier_stall_s": round(sum(o.stall_seconds for o in fresh), 3),
        "notifier_first_audio_s": [round(o.first_audio_seconds or -1, 3) for o in fresh],
        "notifier_held_s": [round(o.held_seconds, 3) for o in fresh],
        "notifier_audio_s": [round(o.audio_seconds, 2) for o in fresh],
        "notifier_recent_rtf": None if speed.rtf is None else round(speed.rtf, 3),
        "repeat_source": repeat.source,
        "repeat_request_to_first_audio_ms": round(
            (repeat.request_to_first_audio_seconds or -1) * 1000, 1
        ),
    }


def start_load(processes: int, seconds: float) -> list[subprocess.Popen]:
    """``processes`` busy Python loops, each ending by itself after ``seconds``."""
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(processes)]


def stop_load(busy: list[subprocess.Popen]) -> None:
    for proc in busy:
        proc.terminate()
    for proc in busy:
        proc.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_server_startup(args: argparse.Namespace) -> dict[str, object]:
    import httpx

    port = _free_port()
    exe = Path(sys.executable).with_name("voice-server")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "voice.server"]
    env = {**os.environ, "VOICE_PORT": str(port), "VOICE_THREADS": str(args.threads)}
    if args.assets_dir:
        env["VOICE_ASSETS_DIR"] = str(args.assets_dir)
    started = time.perf_counter()
    proc = subprocess.Popen([*cmd, "--no-audio", "--log-level", "warning"], env=env)
    up = loaded = None
    try:
        while time.perf_counter() - started < 120 and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).json()
            except httpx.TransportError:
                time.sleep(0.02)
                continue
            up = up or time.perf_counter() - started
            if health["model_loaded"] or not health["backend_available"]:
                loaded = time.perf_counter() - started
                break
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(10)
    return {"server_up_s": round(up or -1, 2), "server_model_ready_s": round(loaded or -1, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--message", default=MESSAGE)
    parser.add_argument(
        "--voice", default="1", help="voice id or Kokoro name (default 1, af_heart)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--plan",
        choices=["chunks", "sentences", "both"],
        default="chunks",
        help="chunks: as the server streams (default); sentences: one chunk per sentence",
    )
    parser.add_argument(
        "--idle", type=float, default=0.0, help="seconds to sleep before each request"
    )
    parser.add_argument(
        "--heads", action="store_true", help="also time G2P and synthesis of 1..6-word heads"
    )
    parser.add_argument("--assets-dir", type=Path)
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--skip-engine", action="store_true", help="no engine-only runs")
    parser.add_argument(
        "--notifier", action="store_true", help="also play notifications through the notifier"
    )
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the bench")
    parser.add_argument(
        "--load-seconds", type=float, default=60.0, help="the busy processes end after this"
    )
    args = parser.parse_args(argv)
    result: dict[str, object] = {"cpus": os.cpu_count(), "busy_processes": args.load}
    busy = start_load(args.load, args.load_seconds)
    try:
        time.sleep(1.0 if busy else 0.0)
        result["load_average"] = [round(x, 2) for x in os.getloadavg()]
        if not args.skip_engine:
            result |= bench_engine(args)
        if args.notifier:
            result |= bench_notifier(args)
        result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        stop_load(busy)
    if not args.skip_server:
        result.update(bench_server_startup(args))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
