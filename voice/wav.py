"""WAV and raw PCM encoding for streamed audio (pure)."""

from __future__ import annotations

import struct

import numpy as np

# A streamed WAV cannot know its length up front; players accept the maximum as "unknown".
STREAMING_SIZE = 0xFFFFFFFF


def wav_header(sample_rate: int, data_bytes: int = STREAMING_SIZE, channels: int = 1) -> bytes:
    """The 44-byte header of a 16-bit PCM WAV file."""
    block = channels * 2
    riff_size = min(STREAMING_SIZE, data_bytes + 36)
    fmt = struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block, block, 16)
    return (
        b"RIFF" + struct.pack("<I", riff_size) + b"WAVE"
        + b"fmt " + fmt
        + b"data" + struct.pack("<I", data_bytes)
    )  # fmt: skip


def to_pcm16(audio: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as little-endian signed 16-bit PCM."""
    clipped = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()
