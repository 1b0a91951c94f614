"""Ascend NPU facts: vendor version files, package versions, ``npu-smi info`` tables.

The npu_driver role decides what to do (install, upgrade, nothing) and whether the node
is healthy from these; the rules live here, with unit tests, not in Jinja.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

HEALTHY = "OK"


def parse_kv(text: str) -> dict[str, str]:
    """``key=value`` lines (``version.info``, ``ascend_install.info``); others ignored."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def version_key(version: str) -> tuple:
    """Order Ascend versions: ``25.2.1 < 25.3.rc1 < 25.3.rc2 < 25.3.0 < 25.3.1``.

    A release candidate ``rcN`` comes before the final release of the same line; case and
    separators do not matter (``25.3.RC1``, ``25.3rc1``). A build suffix (``.b020``,
    ``B020``: Huawei's build numbers) names a build of the same version and is ignored.
    """
    tokens = re.findall(r"\d+|[a-z]+", version.strip().lower())
    parts: list[tuple[float, int, str]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) and tokens[i + 1].isdigit() else None
        if tok.isdigit():
            parts.append((2, int(tok), ""))
        elif tok == "rc" and nxt is not None:
            parts.append((1, int(nxt), ""))
            i += 1
        elif tok == "b" and nxt is not None:
            break  # build number: the rest does not change the version
        else:
            parts.append((0, 0, tok))
        i += 1
    # ``25.3`` equals ``25.3.0``; its end sorts after any ``rcN`` and before ``.1``.
    while parts and parts[-1] == (2, 0, ""):
        parts.pop()
    parts.append((1.5, 0, ""))
    return tuple(parts)


def release_key(version: str) -> tuple:
    """The release a version belongs to, without its patch level.

    The A3 guides ship HDK ``25.3.RC1.2`` (``version.info``: ``25.3.rc1.2``): the numbers
    after ``rcN`` are a patch level of release ``25.3.rc1``. Only that form is known; any
    other version (no ``rcN``, e.g. ``25.3.1`` or firmware ``7.8.0.2.212``) is its own
    release, as no public source says which of its numbers is a patch level.
    """
    key = version_key(version)
    for i, (kind, _, _) in enumerate(key[:-1]):
        if kind == 1:  # rcN
            return key[:i + 1] + key[-1:]
    return key


def package_action(installed: str | None, wanted: str, allow_downgrade: bool = False) -> str:
    """What to run: ``install`` (clean node), ``upgrade``, ``none`` or ``downgrade``;
    ``compatible`` for the pinned release at a newer patch level (kept, and reported);
    ``refuse`` for a downgrade that is not allowed (the role fails with the reason).
    ``allow_downgrade`` installs exactly the pin, also over a newer patch level."""
    if not installed:
        return "install"
    have, want = version_key(installed), version_key(wanted)
    if have == want:
        return "none"
    if have < want:
        return "upgrade"
    if allow_downgrade:
        return "downgrade"
    return "compatible" if release_key(installed) == release_key(wanted) else "refuse"


# What a package action changes on the node (``none`` and ``compatible`` keep it).
_CHANGES = ("install", "upgrade", "downgrade")


def package_order(driver_installed: bool) -> list[str]:
    """The order the two HDK packages go in: on a new node the driver first (the firmware
    installer needs it); where a driver is installed (an upgrade) the firmware first, then
    the driver (ascend-deployer's ``install_npu.yml``; the A3 HDK upgrade guides)."""
    return ["firmware", "driver"] if driver_installed else ["driver", "firmware"]


def driver_plan(installed: dict[str, str], wanted: dict[str, str],
                allow_downgrade: bool = False, host: str = "node") -> dict[str, Any]:
    """What the npu_driver role does on one node, from the installed versions
    (``{"driver": "25.2.1", "firmware": ""}``, empty = not installed) and the pins.

    ``actions``: ``package_action`` per package; ``order``: ``package_order``;
    ``refused``: a message per package whose action is ``refuse`` (a newer installed
    release than the pin, naming ``host`` and the fix); ``changes``: whether any
    package is installed, upgraded or downgraded; ``disrupts``: a change on a node whose
    driver is installed, where the training container and Ray hold the devices (the
    driver's installer refuses while they do) and must be stopped first.
    """
    actions = {kind: package_action(installed.get(kind) or None, wanted[kind], allow_downgrade)
               for kind in ("driver", "firmware")}
    driver_installed = bool(installed.get("driver"))
    changes = any(a in _CHANGES for a in actions.values())
    return {
        "have": {kind: installed.get(kind) or "" for kind in actions},
        "actions": actions,
        "order": package_order(driver_installed),
        "refused": [f"{host}: the installed {kind} {installed[kind]} is newer than the pinned "
                    f"{wanted[kind]}. Fix: pin {installed[kind]}, or set "
                    "npu_driver_allow_downgrade: true to install the older one."
                    for kind in ("driver", "firmware") if actions[kind] == "refuse"],
        "changes": changes,
        "disrupts": changes and driver_installed,
    }


_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")


def parse_npu_smi_info(text: str) -> list[dict[str, Any]]:
    """The chips of an ``npu-smi info`` table: npu, chip, phy_id (None if absent),
    name, health, bus_id. Works for the A3 layout (Chip + Phy-ID) and the older one."""
    chips: list[dict[str, Any]] = []
    npu: dict[str, Any] | None = None
    for line in text.splitlines():
        if "Process id" in line:
            break  # the process table follows; nothing more about chips
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3:
            continue
        first = cells[0].split()
        if _BUS_ID.match(cells[1]) and npu is not None and first and first[0].isdigit():
            chips.append({
                "npu": npu["npu"], "chip": int(first[0]),
                "phy_id": int(first[1]) if len(first) > 1 and first[1].isdigit() else None,
                "name": npu["name"], "health": npu["health"], "bus_id": cells[1],
            })
        elif len(first) >= 2 and first[0].isdigit() and cells[1] and not cells[1][0].isdigit():
            npu = {"npu": int(first[0]), "name": first[1], "health": cells[1].split()[0]}
    return chips


def container_devices(npus: int | str, management: Sequence[str]) -> list[str]:
    """``--device`` entries for a container: ``/dev/davinci0..N-1`` and the management
    devices, each at the same path with read, write and mknod rights."""
    paths = [f"/dev/davinci{i}" for i in range(int(npus))] + list(management)
    return [f"{p}:{p}:rwm" for p in paths]


def npu_health_problems(host: str, chips: Sequence[dict[str, Any]], expected: int) -> list[str]:
    """All ``expected`` chips present and healthy; each problem names the chip."""
    problems = []
    if len(chips) != expected:
        problems.append(
            f"{host}: npu-smi lists {len(chips)} NPU chips, expected {expected}. Fix: check "
            "the driver installation (npu-smi info) and the hardware; reboot if the driver "
            "asked for it."
        )
    for c in chips:
        if c["health"] != HEALTHY:
            where = f"NPU {c['npu']} chip {c['chip']}"
            if c.get("phy_id") is not None:
                where += f" (/dev/davinci{c['phy_id']})"
            problems.append(
                f"{host}: {where} reports health {c['health']}. Fix: see "
                f"`npu-smi info -t health -i {c['npu']} -c {c['chip']}` for the alarm and "
                "replace or reset that NPU before training."
            )
    return problems
