"""The stand-in CANN image's ``/workspace``: the framework trees the recipe's image builds.

The recipe's Dockerfile clones verl (with the cherry-pick, ``-n -X theirs``: not
committed), Megatron-LM, MindSpeed, vLLM and vLLM-Ascend into ``/workspace`` and builds
vLLM-Ascend editable there, so the image's ``vllm-ascend/vllm_ascend`` folder also holds
the compiled extension (``vllm_ascend_C*.so``) and ``_cann_ops_custom``
(shared/reference/real-upstreams.md). The recipe's ``build_project.sh`` copies the
working directory from these trees, and a job run from the working directory imports
``vllm_ascend`` from that copy.

This folder is made from the simulator's stand-in upstream repositories at the pins the
simulator's inventory uses, and ``cann.ensure_archive`` copies it into the stand-in
image. The build products are STAND-INS: files with those names that say what they stand
for, not a compiled library. What a real build puts under ``_cann_ops_custom`` beyond
``vendors/vllm-ascend/op_api/lib`` (the folders the recipe's env script names) was not
measured, and the file name of the extension beyond the ``vllm_ascend_C*.so`` pattern
neither: the one here is Python 3.11's name for aarch64, the nodes' platform.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from a3rl.sim import upstreams

# Bump when the steps below change in a way the upstreams' commits do not show.
VERSION = "1"
# The stand-in build products, relative to /workspace/vllm-ascend.
EXTENSION = "vllm_ascend/vllm_ascend_C.cpython-311-aarch64-linux-gnu.so"
CUSTOM_OPS = "vllm_ascend/_cann_ops_custom/vendors/vllm-ascend"
_PRODUCTS = {
    EXTENSION: "vLLM-Ascend's compiled extension (vllm_ascend_C), built by\n"
               "`pip install -e .` in the image's /workspace/vllm-ascend",
    f"{CUSTOM_OPS}/op_api/lib/STAND-IN": "the custom operator library folder of vLLM-Ascend's\n"
               "build (_cann_ops_custom); the real file names here were not measured",
}


def digest(up: upstreams.Upstreams) -> str:
    """What the folder depends on: the pinned commits and this builder's version."""
    record = {"refs": up.refs, "commits": up.commits, "pick": up.verl_pick, "v": VERSION}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def build(dest: Path, up: upstreams.Upstreams) -> None:
    """Write the image's ``/workspace`` trees into ``dest`` (which must not exist)."""
    upstreams.frameworks_workspace(up, dest)
    for rel, what in _PRODUCTS.items():
        path = dest / "vllm-ascend" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"STAND-IN made by a3rl's simulator for {what}.\n"
                        "Not a shared object: the simulator's trainer only checks it is "
                        "there.\n")
