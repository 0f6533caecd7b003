"""Seeds derived from other seeds and names, in one place.

`derive_seed(*parts)` is the one way to derive a seed: a non-negative 31-bit integer from ints and
strings, the same in every process, on every machine and Python version (zlib's CRC-32 of the parts
joined by "/"; never `hash()`, which Python salts per process). The driver's per-action sampling
seeds are `derive_seed(episode_seed, action_index)`.

Seeds that published figures and tests already depend on keep their values, so the older schemes
stay, each written once here as a compat form and named by what uses it; new code uses
`derive_seed`:

- `stride_seed(seed, index)`: `seed * 1_000_003 + index`, a stream per index that two base seeds
  one apart never share (the random policy's per-action streams; the trainer's task order, step
  seeds and LoRA dropout seeds).
- `name_key(name)`: the full 32-bit CRC-32 of a name, mixed into a numeric seed (DSBench's built-in
  task data, LoRA dropout seeds).
- `sequence_seed(*parts)`: numpy's SeedSequence over the parts, strings as `name_key` (the seed of
  each evaluation episode).
- `digest_seed(*parts)`: 64 bits of SHA-256 over the parts as JSON, for parts that are whole texts
  (the noisy coach's draw for each request).
"""
from __future__ import annotations

import hashlib
import json
import zlib

STRIDE = 1_000_003  # a prime larger than any index a run uses


def derive_seed(*parts: int | str) -> int:
    """A seed in [0, 2**31) from `parts`, e.g. derive_seed(episode_seed, action_index)."""
    if not parts or not all(isinstance(p, (int, str)) and not isinstance(p, bool) for p in parts):
        raise TypeError(f"derive_seed takes one or more ints and strings, got {parts!r}")
    return zlib.crc32("/".join(map(str, parts)).encode()) & 0x7FFFFFFF


def stride_seed(seed: int, index: int) -> int:
    """Compat form: `seed * 1_000_003 + index` (unbounded; callers that need 31 bits reduce it)."""
    return seed * STRIDE + index


def name_key(name: str) -> int:
    """Compat form: the 32-bit CRC-32 of `name` (not masked to 31 bits, unlike derive_seed)."""
    return zlib.crc32(name.encode())


def sequence_seed(*parts: int | str) -> int:
    """Compat form: the first 32-bit word of numpy's SeedSequence over `parts` (strings as name_key)."""
    import numpy as np

    entropy = [name_key(p) if isinstance(p, str) else p for p in parts]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def digest_seed(*parts) -> int:
    """Compat form: the first 8 bytes of SHA-256 of json.dumps(list(parts), ensure_ascii=False), big-endian."""
    return int.from_bytes(hashlib.sha256(json.dumps(list(parts), ensure_ascii=False).encode()).digest()[:8], "big")
