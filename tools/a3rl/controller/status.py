"""The cluster's health in one table (playbooks/status.yml), and what is unhealthy.

Each node contributes a row gathered on it (driver and firmware versions, NPU health from
npu-smi, the training image's ID, the container's state, free disk); the head adds Ray's
membership and the jobs. ``report`` lays them out and lists every problem, so the play
can print one table and exit non-zero when anything is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from a3rl.files import human_bytes

COLUMNS = ("node", "driver", "firmware", "NPU health", "image", "container", "Ray", "free disk")


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(nodes: Mapping[str, Mapping[str, Any]], membership: Mapping[str, Any],
           jobs: Sequence[Mapping[str, Any]], min_free_bytes: int = 0) -> dict[str, Any]:
    """``{"table": str, "jobs": [str], "problems": [str], "healthy": bool}``.

    ``nodes``: host -> {driver, firmware, npu_problems, npus, image_id, container,
    free_bytes}; ``membership``: ``a3rl.planning.ray.membership`` of the head's node list (or
    {} when Ray does not answer).
    """
    problems: list[str] = []
    ids = {str(r.get("image_id") or "") for r in nodes.values()} - {""}
    per_host = membership.get("nodes", {}) if membership else {}
    rows = [list(COLUMNS)]
    for host in sorted(nodes):
        r = nodes[host]
        npu_problems = list(r.get("npu_problems") or [])
        problems += npu_problems
        image = str(r.get("image_id") or "")
        if not image:
            problems.append(f"{host}: the training image is missing. Fix: run site.yml "
                            "(playbooks/cann_image.yml).")
        elif len(ids) > 1:
            problems.append(f"{host}: image {image[:19]} differs from the other nodes'. Fix: "
                            "run playbooks/cann_image.yml.")
        container = str(r.get("container") or "absent")
        if container != "running":
            problems.append(f"{host}: the training container is {container}. Fix: run "
                            "playbooks/training_container.yml.")
        ray = per_host.get(host, {})
        if not membership:
            ray_cell = "no answer"
        elif ray.get("joined"):
            ray_cell = f"joined, {ray.get('npus', 0)} NPU"
        else:
            ray_cell = "NOT joined"
            problems.append(f"{host}: not in the Ray cluster. Fix: run playbooks/ray.yml.")
        free = int(r.get("free_bytes") or 0)
        if min_free_bytes and free < min_free_bytes:
            problems.append(f"{host}: {human_bytes(free)} free under the data root, below "
                            f"{human_bytes(min_free_bytes)}. Fix: free space.")
        health = "OK" if not npu_problems else f"{len(npu_problems)} problem(s)"
        rows.append([host, str(r.get("driver") or "-"), str(r.get("firmware") or "-"),
                     f"{health} ({r.get('npus', 0)} NPU)", image[7:19] if image else "-",
                     container, ray_cell, human_bytes(free)])
    if not membership:
        problems.append("the Ray job API on the head does not answer. Fix: run "
                        "playbooks/ray.yml.")
    else:
        problems += [f"Ray: a node that is not in the inventory joined: {ip}"
                     for ip in membership.get("strangers", [])]
    job_lines = [f"{j.get('submission_id') or j.get('job_id')}: {j.get('status')}"
                 for j in jobs if j.get("status") in ("PENDING", "RUNNING")]
    return {"table": _table(rows), "jobs": job_lines, "problems": problems,
            "healthy": not problems}
