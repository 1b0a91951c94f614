"""Small file helpers shared by the simulator and the reports."""

from __future__ import annotations

from a3rl.node.common import sha256_file  # noqa: F401 - one implementation, node-side


def human_bytes(n: int | str) -> str:
    """``1234567`` -> ``1.2 MB`` (decimal units, as df -H and the disk checks print)."""
    n = int(n)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
