"""Small file helpers shared by the simulator and the reports."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """sha256 of a file, read in 1 MiB chunks (images are hundreds of MB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def human_bytes(n: int | str) -> str:
    """``1234567`` -> ``1.2 MB`` (decimal units, as df -H and the disk checks print)."""
    n = int(n)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
