"""The artifact manifest as the roles read it: which entries a stage needs, whether
they are well formed, and where a role finds an artifact's file."""

from __future__ import annotations

import json
import os
from typing import Any

from a3rl.node import artifacts


def artifact_names(manifest: dict[str, dict[str, Any]], groups: list[str] | str) -> list[str]:
    """Names of the entries in ``groups`` (``all`` for every one), in fetch order.

    Git artifacts come first: a wheelhouse reads its requirements from one of them.
    """
    wanted = None if groups == "all" or groups == ["all"] else set(groups)
    names = [n for n, spec in manifest.items() if wanted is None or spec.get("group") in wanted]
    return sorted(names, key=lambda n: manifest[n].get("kind") == "wheelhouse")


def group_problems(manifest: dict[str, Any], groups: Any, variable: str) -> list[str]:
    """``groups`` as a play names them (``all``, or a list of the manifest's groups):
    a string is not split into letters, and a group no entry has is not taken for
    "nothing to fetch" (the bundle would then be made with an empty checksum list)."""
    if groups == "all" or groups == ["all"]:
        return []
    known = sorted({str(s["group"]) for s in manifest.values()
                    if isinstance(s, dict) and s.get("group")})
    if not isinstance(groups, list):
        items = ([g.strip() for g in groups.split(",") if g.strip()]
                 if isinstance(groups, str) else ["..."])
        return [f"{variable} is {groups!r}, not a list of artifact groups (or all). Fix: "
                "give a list, on the command line as JSON: -e '"
                + json.dumps({variable: items}) + "' (-e name=value always gives a string)."]
    unknown = [g for g in groups if g not in known]
    if unknown:
        return [f"{variable} names {', '.join(repr(g) for g in unknown)}, which no artifact of "
                f"the manifest has as its group (groups: {', '.join(known)}); nothing would be "
                f"fetched for it. Fix: name groups of the manifest in {variable}, or all."]
    return []


def artifact_problems(manifest: dict[str, dict[str, Any]], names: list[str]) -> list[str]:
    """Sentences naming each bad or missing entry among ``names`` and its fix."""
    problems = []
    for name in dict.fromkeys(names):
        spec = manifest.get(name)
        if spec is None:
            problems.append(
                f"artifact {name} is not in the manifest (a3rl_artifacts). Fix: add "
                "it, or remove it from the list that names it."
            )
            continue
        problems.extend(artifacts.validate(name, spec))
        req = spec.get("requirements")
        if (
            spec.get("kind") == "wheelhouse"
            and isinstance(req, dict)
            and req.get("artifact") not in names
        ):
            problems.append(
                f"artifact {name} reads its requirements from {req.get('artifact')!r}, "
                "which this run does not fetch. Fix: fetch both (same group list)."
            )
    wanted = set(names)
    problems.extend(
        p for p in artifacts.dest_overlap_problems(manifest)
        if any(p.startswith(f"artifact {n}: ") or f" of artifact {n};" in p for n in wanted))
    return problems


def node_files(record: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """The store's files (path, sha256, size) of ``names``, as the nodes receive them."""
    try:
        return artifacts.node_files(record, list(names))
    except artifacts.ArtifactError as e:
        raise ValueError(str(e)) from None


def artifact_file(record: dict[str, Any], name: str, store: str = "") -> str:
    """Path of an artifact's (first) file in the store."""
    entry = record.get("artifacts", {}).get(name)
    if not entry or not entry.get("files"):
        raise ValueError(f"artifact {name} is not in the store record")
    rel = entry["files"][0]["path"]
    return f"{store.rstrip('/')}/{rel}" if store else rel


def git_checkout_spec(record: dict[str, Any], name: str, node_dir: str) -> dict[str, Any]:
    """What a node needs to check out git artifact ``name`` from its copies in ``node_dir``."""
    entry = record.get("artifacts", {}).get(name)
    if not entry or entry.get("kind") != "git":
        raise ValueError(f"artifact {name} is not a git artifact in the store record")
    main = entry["files"][0]
    return {
        "bundle": f"{node_dir}/{main['path']}",
        "commit": entry["commit"],
        "submodules": [
            {"path": f["submodule"], "bundle": f"{node_dir}/{f['path']}", "commit": f["commit"]}
            for f in entry["files"][1:]
            if f.get("submodule")
        ],
    }


def patch_strip(recipe: dict[str, Any]) -> int:
    """git apply's ``-p`` for the recipe's patches: they name paths from the top of the
    recipe repository (``a/llm_rl/qwen3/verl/...``), one more than the subdir's depth."""
    return 1 + len([part for part in str(recipe.get("subdir") or "").split("/") if part])


def bundle_spec(spec: dict[str, Any], store: str, bundle: str) -> dict[str, Any]:
    """A manifest entry as the bundle play fetches it: a provided file without ``path``
    comes from the controller's store (where the site put it)."""
    if spec.get("kind") == "file" and not spec.get("path"):
        return {**spec, "path": f"{store.rstrip('/')}/{spec['dest']}"}
    return spec


def checksum_lines(record: dict[str, Any], names: list[str] | None = None) -> str:
    """``sha256sum -c`` input for the files of ``names`` in a store record."""
    return artifacts.checksum_lines(record, names)


def store_state(record: dict[str, Any], names: list[str], store: str) -> dict[str, Any]:
    """What the store's no-op check reads of ``names``, for a converged-role probe's inputs
    (plugins/action/a3rl_state.py): each entry as recorded, and each of its files' size and
    mtime on the controller now (artifacts.intact compares those, re-hashing only when they
    differ). A file removed, cut short or touched in the store changes this; a missing entry
    is ``None``."""
    state: dict[str, Any] = {}
    for name in dict.fromkeys(names):
        entry = record.get("artifacts", {}).get(name)
        if entry is None:
            state[name] = None
            continue
        seen = []
        for f in entry.get("files", []):
            try:
                st = os.stat(os.path.join(store, f["path"]))
            except OSError:
                seen.append([f["path"], None, None])
            else:
                seen.append([f["path"], st.st_size, st.st_mtime_ns])
        state[name] = {"entry": entry, "seen": seen}
    return state


def placed_paths(record: dict[str, Any], names: list[str], node_dir: str,
                 stamp_dir: str) -> list[str]:
    """Where a node holds the files of ``names`` (those in the store record) and the
    stamps that mark them verified (a3rl_artifact_files: ``<stamp_dir>/<path>.sha256``):
    what a converged-role probe watches of an artifact placement."""
    paths: list[str] = []
    for name in dict.fromkeys(names):
        for f in record.get("artifacts", {}).get(name, {}).get("files", []):
            paths.append(f"{node_dir.rstrip('/')}/{f['path']}")
            paths.append(f"{stamp_dir.rstrip('/')}/{f['path']}.sha256")
    return paths
