"""Local voice notification server: Kokoro-82M speech, 41 numbered voices, 4 languages, offline.

Heavy pieces (onnxruntime, kokoro-onnx, phonemizers, sounddevice, Litestar) are imported only
when used, so ``import voice`` stays cheap.
"""

from voice.audio import AudioSink, AudioStatus, DropSink, RecordingSink, SoundDeviceSink
from voice.cache import AudioCache, cache_key
from voice.engine import Engine, KokoroEngine
from voice.errors import (
    AudioUnavailable,
    BackendMissing,
    PronunciationFileInvalid,
    QueueFull,
    RateLimited,
    RequestInvalid,
    SynthesisFailed,
    VoiceError,
)
from voice.fakes import ToneEngine
from voice.pacing import HostSpeed, start_delay
from voice.playback import PacedChunks
from voice.pronunciation import apply_rules, compile_rules, parse_rules
from voice.settings import Settings, settings_from_env
from voice.speech import Speech, chunks_for, sentences_for, stream_speech
from voice.text import Chunk, plan_chunks, split_sentences
from voice.voices import NUMBERED_VOICES, Voice, numbered_voices, resolve_voice

__all__ = [
    "AudioCache",
    "AudioSink",
    "AudioStatus",
    "AudioUnavailable",
    "BackendMissing",
    "Chunk",
    "DropSink",
    "Engine",
    "HostSpeed",
    "KokoroEngine",
    "NUMBERED_VOICES",
    "PacedChunks",
    "PronunciationFileInvalid",
    "QueueFull",
    "RateLimited",
    "RecordingSink",
    "RequestInvalid",
    "Settings",
    "SoundDeviceSink",
    "Speech",
    "SynthesisFailed",
    "ToneEngine",
    "Voice",
    "VoiceError",
    "apply_rules",
    "cache_key",
    "chunks_for",
    "compile_rules",
    "numbered_voices",
    "parse_rules",
    "plan_chunks",
    "resolve_voice",
    "sentences_for",
    "settings_from_env",
    "split_sentences",
    "start_delay",
    "stream_speech",
]
