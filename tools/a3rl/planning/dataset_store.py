"""Prepared datasets in the artifact store: raw artifact in, verl parquet files out.

The data stage runs this on the controller. A prepared dataset is recorded in the
store's ``manifest.json`` like any artifact (name ``dataset:<name>``, every file with
its sha256 and size), so the nodes get it through the same verified distribution. Its
record is keyed on what defines the output: the raw files' sha256, the converter
(``a3rl.planning.converter_version.output_fingerprint``), the format and its parameters.
A re-run with all of those unchanged and the outputs intact converts nothing; a
converted file reaches the store only after it passed the schema check. Flawed raw
items a converter dropped are in the record (``dropped``: count, of, positions,
reasons).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from a3rl.node import artifacts
from a3rl.planning import converter_version


class DatasetError(Exception):
    """A dataset cannot be prepared; the message names it and the fix."""


def entry_name(name: str) -> str:
    return f"dataset:{name}"


def _raw_dir(store: str, source: dict[str, Any]) -> str:
    """The folder holding the raw artifact: its snapshot folder, or a single file's folder."""
    files = source.get("files") or []
    if not files:
        raise DatasetError("the raw artifact has no files")
    paths = [f["path"] for f in files]
    if len(paths) == 1 and not os.path.isdir(os.path.join(store, paths[0])):
        common = os.path.dirname(paths[0])
    else:
        common = os.path.commonpath(paths)
        if os.path.isfile(os.path.join(store, common)):
            common = os.path.dirname(common)
    return os.path.join(store, common)


def digest(spec: dict[str, Any], source: dict[str, Any]) -> str:
    key = {
        # The converter's version and pyarrow's (the parquet bytes carry it).
        "converter": converter_version.output_fingerprint(),
        "format": spec["format"],
        "dest": spec["dest"],
        "params": spec.get("params") or {},
        "raw": sorted((f["path"], f["sha256"]) for f in source.get("files", [])),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def ensure(store: str, name: str, spec: dict[str, Any], check: bool = False) -> dict[str, Any]:
    """Make the store hold dataset ``name`` converted as ``spec`` says.

    ``spec``: ``source`` (the raw artifact's name), ``format`` (a3rl.planning.datasets), ``dest``
    (folder in the store and on the nodes), ``params``. Returns ``{"changed", "action":
    present|prepared|would_prepare, "entry"}``.
    """
    # Here, not at the top: it imports pyarrow, which ``digests`` (rendered in Ansible's
    # workers) must not pay for (a3rl.planning.converter_version).
    from a3rl.planning import datasets

    fmt = spec.get("format")
    if fmt not in datasets.RAW_FORMATS:
        raise DatasetError(
            f"dataset {name}: format {fmt!r} is not one of "
            f"{', '.join(sorted(datasets.RAW_FORMATS))}. Fix: correct a3rl_datasets."
        )
    dest = str(spec.get("dest") or "")
    if not dest or dest.startswith("/") or ".." in dest.split("/"):
        raise DatasetError(f"dataset {name}: dest {dest!r} must be a relative folder.")
    with artifacts.locked(store, create=not check):
        manifest = artifacts.read_manifest(store)
        source = manifest["artifacts"].get(spec.get("source", ""))
        if source is None and check:
            return {"changed": True, "action": "would_prepare",
                    "reason": f"its raw artifact {spec.get('source')!r} is not fetched yet",
                    "entry": {}}
        if source is None:
            raise DatasetError(
                f"dataset {name}: its raw artifact {spec.get('source')!r} is not in the store "
                f"{store}. Fix: fetch it first (the data play's artifact stage does)."
            )
        want = digest(spec, source)
        key = entry_name(name)
        entry = manifest["artifacts"].get(key)
        why = None
        if entry is None:
            why = "not prepared yet"
        elif entry.get("spec_digest") != want:
            why = "its raw files, converter or parameters changed"
        else:
            why = artifacts.intact(store, entry)
        if why is None:
            if not check:
                artifacts.write_manifest(store, manifest)
            return {"changed": False, "action": "present", "entry": entry}
        if check:
            return {"changed": True, "action": "would_prepare", "reason": why,
                    "entry": entry or {}}
        out = os.path.join(store, dest)
        os.makedirs(out, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out, prefix=".prepare-") as tmp:
            try:
                made, dropped = datasets.prepare_report(
                    fmt, Path(_raw_dir(store, source)), Path(tmp), **(spec.get("params") or {}))
            except (datasets.DatasetError, OSError, ValueError) as e:
                raise DatasetError(f"dataset {name}: {e}") from None
            problems = [p for path in made for p in datasets.validate(Path(path))]
            if problems:
                raise DatasetError(
                    f"dataset {name}: the converted files do not have verl's schema, nothing "
                    "was placed: " + "; ".join(problems[:20])
                )
            taken = {f["path"]: other for other, e in manifest["artifacts"].items()
                     if other != key for f in e.get("files", [])}
            clash = [os.path.join(dest, os.path.basename(p)) for p in made
                     if os.path.join(dest, os.path.basename(p)) in taken]
            if clash:
                raise DatasetError(
                    f"dataset {name}: {', '.join(clash)} is already the output of "
                    f"{taken[clash[0]]}. Fix: give the datasets different dest folders "
                    "in a3rl_datasets."
                )
            files = []
            for path in sorted(made):
                rel = os.path.join(dest, os.path.basename(path))
                os.replace(path, os.path.join(store, rel))
                files.append(artifacts.file_record(store, rel))
        entry = {
            "kind": "dataset",
            "spec_digest": want,
            "group": "data",
            "source": spec["source"],
            "format": fmt,
            "converter": converter_version.CONVERTER_VERSION,
            "files": files,
        }
        if dropped["count"]:
            # The raw file's flawed items left out: how many, of how many, and where.
            entry["dropped"] = {k: dropped[k] for k in ("count", "of", "positions", "reasons")}
        manifest["artifacts"][key] = entry
        artifacts.write_manifest(store, manifest)
        return {"changed": True, "action": "prepared", "reason": why, "entry": entry}


def digests(specs: dict[str, dict[str, Any]], names: list[str],
            record: dict[str, Any]) -> dict[str, str | None]:
    """The key ``ensure`` compares each named dataset's record with (``digest``: raw files,
    converter, format, parameters), from a store record already read; ``None`` while the
    raw artifact is not in the store. A converged-role probe's input: a new converter or
    pyarrow changes it even where the project's roles did not change."""
    artifacts_ = record.get("artifacts", {})
    out: dict[str, str | None] = {}
    for name in names:
        spec = specs[name]
        source = artifacts_.get(spec.get("source", ""))
        out[name] = digest(spec, source) if source is not None else None
    return out
