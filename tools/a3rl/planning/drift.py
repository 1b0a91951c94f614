"""Recipe drift: where the project's plans, env and requirements differ from a recipe tree.

When the recipe pin moves (a new release, a site's fork), the values the project carries
as data (``group_vars/all/runs.yml``, ``models.yml``, the ``recipe_env`` role, the
wheelhouse entry) may no longer be the recipe's. This module reads the recipe tree *as it
is*, never a copy of its values:

* each ``internal/train_*.sh`` is run by ``bash`` with nothing on ``PATH`` but recorders
  (a stand-in ``python3`` that records its arguments and environment, and the same for
  every other command the script may call) and a few harmless tools (``grep``, ``awk``,
  ...), so the script's own arithmetic gives the Hydra overrides it would pass;
* each env script (``ray_start_npu.sh``, ``internal/*_env.sh``) is sourced the same way
  in ``env -i bash``; the variables it exports, the files it sources from outside the
  tree (skipped, recorded) and its ``ulimit`` calls are recorded;
* ``requirements.txt``, the Dockerfile's ``pip install`` specs and the patch series'
  file names are read as text.

Each is compared with what the project would use, and the project's deliberate
deviations (``a3rl_recipe_deviations`` in ``group_vars/all/drift.yml``, each with its
reason) are subtracted. What is left is the drift: where in the recipe, the key, the
recipe's value and the project's. ``a3rl drift`` prints it; the frameworks play reports
it before anything is staged.

Nothing here touches a node. The scripts run on the controller in a temporary copy of
the tree, with an empty environment and a ``PATH`` of recorders only: a recipe script's
``pkill``, ``ray stop`` or ``sleep`` runs nothing.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a3rl.planning import plan as plans
from a3rl.planning import rolevars

# Commands replaced by recorders: anything a recipe script runs that is not a harmless
# text tool. An unknown command is recorded too (bash's command_not_found_handle).
RECORDED = ("python3", "python", "torchrun", "ray", "pkill", "pgrep", "killall", "ifconfig",
            "ip", "sleep", "nohup", "bash", "sh", "pip", "pip3", "docker", "npu-smi", "git",
            "curl", "wget", "ssh", "hostname", "nproc", "rm", "cp", "mv", "ln", "chmod",
            "tee", "env", "xargs", "find", "__unknown__")
# Harmless tools linked in from the controller (text only; mkdir in the temporary copy).
SAFE = ("cat", "grep", "awk", "sed", "head", "tail", "cut", "tr", "sort", "uniq", "wc",
        "dirname", "basename", "realpath", "readlink", "mkdir", "date", "seq", "expr",
        "ls", "printf", "echo", "true", "false", "test")
# Names the reader itself puts into the scripts' environment (never the recipe's).
_OWN = {"PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "LC_ALL"}
ENTRY_MODULE = re.compile(r"^verl\.")


class DriftError(ValueError):
    """The recipe tree cannot be read (missing files, a script that runs no trainer)."""


# --- running the recipe's scripts with recorders ------------------------------------------

@dataclass
class Call:
    """One command a script ran (recorded, not run): its argv and exported environment."""

    argv: list[str]
    env: dict[str, str]


@dataclass
class Sourced:
    """What sourcing or running a script did: commands, exported variables, files sourced
    from outside the tree (skipped), ulimit calls, and bash's complaints."""

    calls: list[Call]
    exports: dict[str, str]
    outside: list[str]
    ulimits: list[list[str]]
    stderr: str


_STUB = """#!{bash}
# a3rl drift recorder: records the command and its environment, runs nothing.
i=0
while ! {mkdir} "$A3RL_DRIFT_OUT/call.$i" 2>/dev/null; do i=$((i+1)); done
printf '%s\\0' "${{0##*/}}" "$@" > "$A3RL_DRIFT_OUT/call.$i/argv"
{env} -0 > "$A3RL_DRIFT_OUT/call.$i/env"
exit 0
"""

_WRAPPER = r"""
__a3rl_out=$A3RL_DRIFT_OUT
command_not_found_handle() { "$__a3rl_stub_dir/__unknown__" "$@"; }
__a3rl_source() {
  case "$("$__a3rl_realpath" -m -- "$1")" in
    "$A3RL_DRIFT_TREE"/*) builtin source "$@" ;;
    *) printf '%s\n' "$1" >> "$__a3rl_out/outside" ;;
  esac
}
source() { __a3rl_source "$@"; }
.() { __a3rl_source "$@"; }
ulimit() { printf '%s\0' "$@" >> "$__a3rl_out/ulimit"; printf '\n' >> "$__a3rl_out/ulimit"; }
trap '"$__a3rl_env" -0 > "$__a3rl_out/final.env"' EXIT
cd "$A3RL_DRIFT_TREE" || exit 97
builtin source "$A3RL_DRIFT_SCRIPT"
"""


def _which(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise DriftError(f"the drift reader needs {name} on the controller's PATH")
    return path


def _read_env0(path: Path) -> dict[str, str]:
    out = {}
    if path.is_file():
        for item in path.read_bytes().split(b"\0"):
            if b"=" in item:
                k, _, v = item.decode(errors="replace").partition("=")
                out[k] = v
    return out


def run_script(tree: Path, script: str, nodes: int | None = None, workdir: str = "<workdir>",
               timeout: int = 60) -> Sourced:
    """Source ``script`` (relative to ``tree``) in ``env -i bash`` with recorders on PATH,
    in a temporary copy of the tree, whose path is written ``workdir`` in what is
    recorded (the scripts run from the working directory: ``HOME=$(pwd)``). ``nodes``:
    replace the script's one ``NODES=<n>`` line with the given count (its arithmetic
    then follows it)."""
    tree = Path(tree)
    if not (tree / script).is_file():
        raise DriftError(f"{script} is not in the recipe tree {tree}")
    with tempfile.TemporaryDirectory(prefix="a3rl-drift-") as tmp:
        work = Path(tmp) / "tree"
        shutil.copytree(tree, work, symlinks=True,
                        ignore=shutil.ignore_patterns("*.patch", ".git"))
        if nodes is not None:
            _set_nodes(work / script, int(nodes))
        out, stubs = Path(tmp) / "out", Path(tmp) / "bin"
        out.mkdir()
        stubs.mkdir()
        bash = _which("bash")
        stub = _STUB.format(bash=bash, mkdir=_which("mkdir"), env=_which("env"))
        for name in RECORDED:
            (stubs / name).write_text(stub)
            (stubs / name).chmod(0o755)
        for name in SAFE:
            found = shutil.which(name)
            if found and not (stubs / name).exists():
                (stubs / name).symlink_to(found)
        env = {"PATH": str(stubs), "HOME": str(work), "LC_ALL": "C",
               "A3RL_DRIFT_OUT": str(out), "A3RL_DRIFT_TREE": str(work.resolve()),
               "A3RL_DRIFT_SCRIPT": str(work / script)}
        start = "; ".join([f"__a3rl_stub_dir={shlex.quote(str(stubs))}",
                           f"__a3rl_env={shlex.quote(_which('env'))}",
                           f"__a3rl_realpath={shlex.quote(_which('realpath'))}"])
        try:
            proc = subprocess.run([bash, "--noprofile", "--norc", "-c", start + _WRAPPER],
                                  env=env, cwd=work, capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise DriftError(f"{script} did not finish in {timeout}s under the drift "
                             f"reader (a loop waiting for a real cluster?)") from None
        def here(text: str) -> str:
            return text.replace(str(work.resolve()), workdir).replace(str(work), workdir)

        calls = []
        for folder in sorted(out.glob("call.*"), key=lambda p: int(p.name.split(".")[1])):
            argv = [here(a.decode(errors="replace")) for a in
                    (folder / "argv").read_bytes().split(b"\0")[:-1]]
            if argv[:1] == ["__unknown__"]:
                argv = argv[1:]
            calls.append(Call(argv, _read_env0(folder / "env")))
        ulimits = []
        if (out / "ulimit").is_file():
            for line in (out / "ulimit").read_bytes().split(b"\n"):
                if line:
                    ulimits.append([a.decode() for a in line.split(b"\0")[:-1]])
        final = _read_env0(out / "final.env")
        exports = {k: here(v) for k, v in final.items()
                   if k not in _OWN and not k.startswith("A3RL_DRIFT_")}
        outside = ((out / "outside").read_text().splitlines()
                   if (out / "outside").is_file() else [])
        stderr = proc.stderr.replace(str(work), "<tree>")
        for call in calls:
            call.env = {k: here(v) for k, v in call.env.items()
                        if k not in _OWN and not k.startswith("A3RL_DRIFT_")}
        return Sourced(calls, exports, outside, ulimits, stderr)


def _set_nodes(path: Path, nodes: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    hits = [i for i, ln in enumerate(lines) if re.match(r"NODES=\d+\s*(#.*)?$", ln.strip())]
    if len(hits) != 1:
        raise DriftError(f"{path.name}: expected one NODES=<n> line to set the node count, "
                         f"found {len(hits)}; read it at the recipe's own count instead")
    lines[hits[0]] = f"NODES={nodes}\n"
    path.write_text("".join(lines))


# --- a train script as a job --------------------------------------------------------------

@dataclass
class ScriptJob:
    """What a train script would run: the module, the Hydra config and its overrides
    (key -> (prefix, typed value), the last of a repeated key wins), and the env."""

    script: str
    module: str
    config_path: str
    config_name: str
    overrides: dict[str, tuple[str, Any]]
    env: dict[str, str]
    repeated: list[str] = field(default_factory=list)


def read_train_script(tree: Path, script: str, nodes: int | None = None,
                      workdir: str = "<workdir>") -> ScriptJob:
    """Run ``script`` with recorders and read its ``python3 -m verl...`` call."""
    ran = run_script(tree, script, nodes, workdir)
    trainers = [c for c in ran.calls if c.argv[0] in ("python3", "python")
                and "-m" in c.argv and ENTRY_MODULE.match(
                    c.argv[c.argv.index("-m") + 1] if c.argv.index("-m") + 1 < len(c.argv)
                    else "")]
    if len(trainers) != 1:
        raise DriftError(f"{script}: expected one `python3 -m verl...` call, the script made "
                         f"{len(trainers)} (calls: "
                         f"{', '.join(c.argv[0] for c in ran.calls) or 'none'}; "
                         f"stderr: {ran.stderr.strip()[-300:]})")
    argv = trainers[0].argv
    i = argv.index("-m")
    module, rest = argv[i + 1], argv[i + 2:]
    found: dict[str, str] = {}
    overrides: dict[str, tuple[str, Any]] = {}
    repeated = []
    it = iter(rest)
    for arg in it:
        if arg.startswith("--"):
            name, sep, value = arg.partition("=")
            found[name] = value if sep else next(it, "")
            continue
        try:
            prefix, key, text = plans.split_override(arg)
            value = plans.parse_value(text)
        except ValueError as e:
            raise DriftError(f"{script}: cannot read the override {arg!r}: {e}") from None
        if key in overrides:
            repeated.append(key)
            del overrides[key]  # Hydra keeps the last one
        overrides[key] = (prefix, value)
    name = found.get("--config-name", "")
    return ScriptJob(script, module, found.get("--config-path", ""),
                     name[:-5] if name.endswith(".yaml") else name, overrides,
                     trainers[0].env, repeated)


# --- findings -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """One difference: the area (plan, env, requirements, patches, scripts), where in the
    recipe, the key, the recipe's value and the project's (None: not set there)."""

    area: str
    where: str
    key: str
    recipe: Any
    project: Any
    run: str = ""
    note: str = ""
    reason: str = ""  # set when a deliberate deviation covers it

    def line(self) -> str:
        def show(v: Any) -> str:
            return "(not set)" if v is None else plans.render_value(v)
        run = f" [{self.run}]" if self.run else ""
        if self.area in ("patches", "scripts"):
            return f"{self.area} {self.where}: {self.key}: {self.note}"
        text = (f"{self.area}{run} {self.where}: {self.key}: recipe {show(self.recipe)}, "
                f"project {show(self.project)}")
        return text + (f" ({self.note})" if self.note else "")

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("area", "where", "key", "recipe", "project",
                                              "run", "note", "reason")}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _compare_maps(area: str, where: str, recipe: Mapping[str, Any],
                  project: Mapping[str, Any], run: str = "") -> list[Finding]:
    out = []
    for key in [*recipe, *(k for k in project if k not in recipe)]:
        r, p = recipe.get(key), project.get(key)
        if key not in project or key not in recipe or not _same(r, p):
            out.append(Finding(area, where, key, r, p, run))
    return out


def compare_job(job: ScriptJob, made: plans.Plan, run: str) -> list[Finding]:
    """A train script's job against the project's plan for the same run and cluster."""
    out = []
    if job.module != made.entrypoint_module:
        out.append(Finding("plan", job.script, "entrypoint", job.module,
                           made.entrypoint_module, run))
    if job.config_name != made.config_name:
        out.append(Finding("plan", job.script, "--config-name", job.config_name,
                           made.config_name, run))
    if job.config_path != made.config_path:
        out.append(Finding("plan", job.script, "--config-path", job.config_path,
                           made.config_path, run))
    recipe = {k: v for k, (_, v) in job.overrides.items()}
    note = "the script passes it more than once; Hydra keeps the last"
    out += [Finding(**{**f.as_dict(), "note": note}) if f.key in job.repeated else f
            for f in _compare_maps("plan", job.script, recipe, made.overrides_map(), run)]
    # "+key" adds a key Hydra's config lacks, "key" overrides one it has: not the same.
    ours = {key: prefix for prefix, key, _ in map(plans.split_override, made.overrides)}
    for key, (prefix, _) in job.overrides.items():
        if key in ours and ours[key] != prefix:
            out.append(Finding("plan", job.script, key, f"{prefix}{key}", f"{ours[key]}{key}",
                               run, note="passed with a different Hydra prefix"))
    # The env the script exports for its trainer; the model env script's are compared there.
    env = {k: v for k, v in job.env.items()}
    out += [f for f in _compare_maps("env", job.script, env, dict(made.env), run)
            if f.key in env]
    return out


# --- env scripts --------------------------------------------------------------------------

def project_cluster_env(v: Mapping[str, Any]) -> dict[str, str]:
    """The cluster env script's variables as the recipe_env role renders them
    (``cluster_env.sh.j2``), from the role's variables; per-node values (addresses,
    NIC) are left out: the inventory sets them."""
    env: dict[str, str] = {"HCCL_IF_BASE_PORT": str(v.get("a3rl_hccl_base_port", ""))}
    for group in ("recipe_env_hccl", "recipe_env_torch", "recipe_env_runtime",
                  "recipe_env_logging", "recipe_env_extra"):
        env.update({str(k): str(val) for k, val in (v.get(group) or {}).items()})
    home = str(v.get("recipe_env_ascend_toolkit_home", ""))
    env["ASCEND_TOOLKIT_HOME"] = home
    env["ASCEND_HOME_PATH"] = os.path.dirname(home)
    env["MASTER_PORT"] = str(v.get("recipe_env_master_port", v.get("a3rl_ray_gcs_port", "")))
    env["NPUS_PER_NODE"] = str(v.get("npus_per_node") or rolevars.npus_per_node())
    return env


def compare_cluster_env(ran: Sourced, script: str, v: Mapping[str, Any]) -> list[Finding]:
    out = [f for f in _compare_maps("env", script, ran.exports, project_cluster_env(v))
           if f.key in ran.exports]
    sourced = [str(s) for s in v.get("recipe_env_cann_set_env") or []]
    for path in ran.outside:
        if path not in sourced:
            out.append(Finding("env", script, f"source {path}", "sourced", None))
    for path in sourced:
        if path not in ran.outside:
            out.append(Finding("env", script, f"source {path}", None, "sourced"))
    limits = {"-n": str(v.get("recipe_env_open_files", ""))}
    for args in ran.ulimits:
        if len(args) == 2 and args[0] in limits and args[1] != limits[args[0]]:
            out.append(Finding("env", script, f"ulimit {args[0]}", args[1], limits[args[0]]))
    return out


def ray_head_flags(tree: Path, script: str) -> dict[str, str]:
    """The literal flags of the script's ``ray start --head`` line (read as text: the
    head's branch needs a real cluster to be taken)."""
    flags: dict[str, str] = {}
    for line in (Path(tree) / script).read_text().splitlines():
        if re.search(r"\bray\s+start\b.*--head", line):
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            for word in words:
                if word.startswith("--dashboard") and "=" in word:
                    k, _, val = word.partition("=")
                    flags[k] = val
    return flags


def compare_ray_head(tree: Path, script: str, v: Mapping[str, Any]) -> list[Finding]:
    flags = ray_head_flags(tree, script)
    bind = str(v.get("a3rl_ray_dashboard_bind", ""))
    project = {"--dashboard-port": str(v.get("a3rl_ray_dashboard_port", "")),
               "--dashboard-host": "127.0.0.1" if bind == "loopback" else bind}
    return [f for f in _compare_maps("env", script, flags, project) if f.key in flags]


# --- requirements -------------------------------------------------------------------------

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;#]*)")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_requirements(text: str) -> dict[str, str]:
    """name (normalised) -> version spec ('' when unpinned)."""
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = _REQ.match(line)
        if m:
            out[_norm(m.group(1))] = m.group(3).strip().replace(" ", "")
    return out


def dockerfile_pins(text: str, names: Sequence[str]) -> dict[str, str]:
    """Specs of ``names`` in the Dockerfile's ``pip install`` words (e.g. the image's Ray)."""
    out = {}
    wanted = {_norm(n) for n in names}
    for word in re.findall(r"""['"]?([A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?[<>=!~][^'"\s]*)""",
                           text.replace("\\\n", " ")):
        m = _REQ.match(word)
        if m and _norm(m.group(1)) in wanted:
            out[_norm(m.group(1))] = m.group(3).strip()
    return out


def compare_requirements(tree: Path, v: Mapping[str, Any], req_file: str = "requirements.txt",
                         dockerfile: str | None = None) -> list[Finding]:
    wheels = _manifest(v).get(v.get("frameworks_wheelhouse", "recipe_wheels")) or {}
    path = Path(tree) / req_file
    if not path.is_file():
        return [Finding("requirements", req_file, "file", None, "read", note="missing")]
    reqs = read_requirements(path.read_text())
    constraints = read_requirements("\n".join(wheels.get("constraints") or []))
    out = []
    for name, spec in reqs.items():
        if not spec and name not in constraints:
            out.append(Finding("requirements", req_file, name, "(unpinned)", None,
                               note="the wheelhouse would take the newest version: add a "
                                    "constraint (the image's version)"))
    for name in wheels.get("build_from_sdist") or []:
        spec = reqs.get(_norm(name))
        if spec is None or not spec.startswith("=="):
            out.append(Finding("requirements", req_file, _norm(name), spec or None,
                               "build_from_sdist",
                               note="built from its source archive at the recipe's == pin"))
    if dockerfile and (Path(tree) / dockerfile).is_file() and constraints:
        pins = dockerfile_pins((Path(tree) / dockerfile).read_text(), list(constraints))
        for name, spec in pins.items():
            if set(spec.split(",")) != set(constraints[name].split(",")):
                out.append(Finding("requirements", dockerfile, name, spec, constraints[name],
                                   note="the wheelhouse's constraint should be the image's"))
    return out


# --- patches and scripts ------------------------------------------------------------------

def compare_patches(tree: Path, reviewed: Sequence[str], patch_dir: str = "patches"
                    ) -> list[Finding]:
    have = sorted(str(p.relative_to(Path(tree) / patch_dir))
                  for p in (Path(tree) / patch_dir).rglob("*.patch"))
    out = [Finding("patches", patch_dir, p, "in the series", None,
                   note="new in the recipe's series, not reviewed by the project (config "
                        "keys, env switches, code its features need; then list it in "
                        "a3rl_recipe_reviewed_patches)") for p in have if p not in reviewed]
    out += [Finding("patches", patch_dir, p, None, "reviewed",
                    note="reviewed by the project, no longer in the recipe's series")
            for p in reviewed if p not in have]
    return out


# --- deviations ---------------------------------------------------------------------------

def _covers(dev: Mapping[str, Any], f: Finding) -> bool:
    if dev.get("area") != f.area or not fnmatch.fnmatchcase(f.key, str(dev.get("key", ""))):
        return False
    if dev.get("runs") and f.run not in dev["runs"]:
        return False
    if dev.get("where") and not fnmatch.fnmatchcase(f.where, str(dev["where"])):
        return False
    return not ("recipe" in dev and not _same(dev["recipe"], f.recipe))


def subtract(findings: Sequence[Finding], deviations: Sequence[Mapping[str, Any]]
             ) -> tuple[list[Finding], list[Finding]]:
    """(drift, deviated): the findings no deviation covers, and the covered ones with
    the deviation's reason."""
    drift, deviated = [], []
    for f in findings:
        dev = next((d for d in deviations or [] if _covers(d, f)), None)
        if dev is None:
            drift.append(f)
        else:
            deviated.append(Finding(**{**f.as_dict(), "reason": str(dev.get("reason", ""))}))
    return drift, deviated


# --- the whole report ---------------------------------------------------------------------

@dataclass
class Report:
    recipe: str
    drift: list[Finding]
    deviated: list[Finding]
    errors: list[str]

    @property
    def ok(self) -> bool:
        return not self.drift and not self.errors

    def lines(self, deviations: bool = False) -> list[str]:
        head = (f"recipe {self.recipe}: no drift ({len(self.deviated)} deliberate deviations)"
                if self.ok else
                f"recipe {self.recipe}: {len(self.drift)} difference(s) from the project's "
                f"plans, env and requirements, {len(self.errors)} unreadable, "
                f"{len(self.deviated)} deliberate deviations")
        out = [head] + [f"  {f.line()}" for f in self.drift]
        out += [f"  cannot read: {e}" for e in self.errors]
        if deviations:
            out += [f"  deviation: {f.line()}: {f.reason}" for f in self.deviated]
        if not self.ok:
            out.append("Fix: follow the recipe in group_vars/all/runs.yml, models.yml, the "
                       "recipe_env_* variables or the wheelhouse entry, or add a deliberate "
                       "deviation with its reason to a3rl_recipe_deviations "
                       "(group_vars/all/drift.yml); then `a3rl drift` again.")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "ok": self.ok,
                "drift": [f.as_dict() for f in self.drift],
                "deviated": [f.as_dict() for f in self.deviated], "errors": self.errors,
                "lines": self.lines()}


def _manifest(v: Mapping[str, Any]) -> Mapping[str, Any]:
    """The artifact manifest: the play's resolved ``a3rl_manifest``, or (read from the
    group_vars files, where it is a template) ``a3rl_artifacts``."""
    got = v.get("a3rl_manifest")
    return got if isinstance(got, Mapping) else (v.get("a3rl_artifacts") or {})


def _profiles(v: Mapping[str, Any]) -> dict[str, Any]:
    profiles = {k: v.get(k) for k in plans.PROFILE_VARS}
    profiles["paths"] = plans.node_paths(v.get("a3rl_assets_dir", ""), v.get("a3rl_workdir", ""),
                                         v.get("a3rl_datasets") or {}, _manifest(v))
    return profiles


def drift_report(tree: Path, v: Mapping[str, Any], label: str = "",
                 nodes: int | None = None) -> Report:
    """Read the recipe folder ``tree`` (its ``llm_rl/qwen3``) and compare it with the
    project's variables ``v`` (the group_vars, or a play's variables). ``nodes``: read the
    train scripts at this node count instead of their own."""
    tree = Path(tree)
    cfg = v.get("a3rl_recipe_drift") or {}
    findings: list[Finding] = []
    errors: list[str] = []
    scripts: Mapping[str, str] = cfg.get("train_scripts") or {}
    present = sorted(str(p.relative_to(tree)) for p in tree.glob(
        cfg.get("train_glob", "internal/train_*.sh")))
    for script in present:
        if script not in scripts:
            findings.append(Finding("scripts", script, script, "present", None,
                                    note="new: a train script no project run follows (map it to a "
                                         "run in a3rl_recipe_drift.train_scripts)"))
    profiles = _profiles(v)
    workdir = profiles["paths"]["workdir"]
    for script, run in scripts.items():
        if script not in present:
            findings.append(Finding("scripts", script, script, None, run,
                                    note=f"gone: the project's run {run} follows a "
                                         "script the recipe no longer has"))
            continue
        try:
            job = read_train_script(tree, script, nodes, workdir)
            algo, model, weights = run.split("-")
            count = job.overrides.get("trainer.nnodes", ("", None))[1]
            npus = job.overrides.get("trainer.n_gpus_per_node", ("", None))[1]
            made = plans.make_plan(algo, model, weights, None, count, npus, profiles)
        except (DriftError, plans.PlanError, ValueError) as e:
            errors.append(f"{script} ({run}): {e}")
            continue
        findings += compare_job(job, made, run)
    env_scripts: Mapping[str, str] = cfg.get("env_scripts") or {}
    for script, model in env_scripts.items():
        if not (tree / script).is_file():
            findings.append(Finding("scripts", script, script, None, model,
                                    note="gone: an env script the recipe no longer has"))
            continue
        try:
            ran = run_script(tree, script, workdir=workdir)
        except DriftError as e:
            errors.append(str(e))
            continue
        if model == "cluster":
            findings += compare_cluster_env(ran, script, v)
            findings += compare_ray_head(tree, script, v)
        else:
            findings += _compare_model_env(ran, script, model, v, profiles)
    for script in sorted(str(p.relative_to(tree)) for p in tree.glob(
            cfg.get("env_glob", "internal/*_env.sh"))):
        if script not in env_scripts:
            findings.append(Finding("scripts", script, script, "present", None,
                                    note="new: an env script the project does not follow "
                                         "(a3rl_recipe_drift.env_scripts)"))
    findings += compare_requirements(tree, v, cfg.get("requirements", "requirements.txt"),
                                     cfg.get("dockerfile"))
    findings += compare_patches(tree, v.get("a3rl_recipe_reviewed_patches") or [],
                                cfg.get("patch_dir", "patches"))
    drift, deviated = subtract(findings, [*(v.get("a3rl_recipe_deviations") or []),
                                          *(v.get("a3rl_recipe_site_deviations") or [])])
    return Report(label or str(tree), drift, deviated, errors)


def _compare_model_env(ran: Sourced, script: str, model: str, v: Mapping[str, Any],
                       profiles: Mapping[str, Any]) -> list[Finding]:
    """A model env script against the env of the model's first run in the mapping (the
    model's switches with the run's default features)."""
    runs = [r for r in ((v.get("a3rl_recipe_drift") or {}).get("train_scripts") or {}).values()
            if r.split("-")[1:2] == [model]]
    if not runs:
        return [Finding("env", script, model, "sourced", None,
                        note="no mapped train script runs this model")]
    algo, _, weights = runs[0].split("-")
    made = plans.make_plan(algo, model, weights, None, None, None, profiles)
    return [f for f in _compare_maps("env", script, ran.exports, dict(made.env), runs[0])
            if f.key in ran.exports]


# --- where the recipe comes from ----------------------------------------------------------

@contextmanager
def recipe_tree(source: str | Path, ref: str | None = None, subdir: str = "llm_rl/qwen3"
                ) -> Iterator[Path]:
    """The recipe folder: ``source`` itself when it is one (it has ``internal/`` or
    ``requirements.txt``), else ``subdir`` of the git repository, URL or bundle
    ``source`` at ``ref`` (default: the store's ``refs/a3rl/pinned``, else ``main`` or
    ``master``), checked out into a temporary folder."""
    src = Path(source)
    if src.is_dir() and ref is None and ((src / "internal").is_dir()
                                         or (src / "requirements.txt").is_file()):
        yield src
        return
    with tempfile.TemporaryDirectory(prefix="a3rl-recipe-") as tmp:
        repo = Path(tmp) / "repo"
        git = ["git", "-c", "protocol.file.allow=always", "-C", str(repo)]
        repo.mkdir()
        subprocess.run([*git, "init", "-q"], check=True, capture_output=True)
        # Every branch and tag, and the artifact store's refs/a3rl/pinned (its bundles
        # hold that ref only, which a clone would not fetch); a ref that is none of
        # them (a commit of a pull request) is fetched by name.
        proc = subprocess.run([*git, "fetch", "-q", "--update-head-ok", str(src),
                               "+refs/heads/*:refs/heads/*",
                               "+refs/tags/*:refs/tags/*", "+refs/a3rl/*:refs/a3rl/*"],
                              capture_output=True, text=True)
        if proc.returncode:
            raise DriftError(f"cannot read the recipe from {source}: {proc.stderr.strip()}")
        want = ref or "HEAD"
        if ref is None:
            heads = subprocess.run([*git, "for-each-ref", "--format=%(refname)",
                                    "refs/a3rl/pinned", "refs/heads/main",
                                    "refs/heads/master"], capture_output=True, text=True)
            want = (heads.stdout.split() or ["HEAD"])[0]
        elif subprocess.run([*git, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}"],
                            capture_output=True).returncode:
            proc = subprocess.run([*git, "fetch", "-q", str(src), ref], capture_output=True,
                                  text=True)
            if proc.returncode:
                raise DriftError(f"{source} has no ref {ref}: {proc.stderr.strip()}")
            want = "FETCH_HEAD"
        proc = subprocess.run([*git, "checkout", "-q", want, "--", subdir or "."],
                              capture_output=True, text=True)
        if proc.returncode:
            raise DriftError(f"{source} has no {subdir} at {ref or want}: "
                             f"{proc.stderr.strip()}")
        yield repo / (subdir or ".")


# --- the project's variables, without a play (``a3rl drift``, tests) ----------------------

_REF = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def project_vars(root: Path, **given: Any) -> dict[str, Any]:
    """The variables a play would see for drift, read from the project at ``root``:
    ``group_vars/all/*.yml``, then the defaults of the roles whose variables drift
    compares (recipe_env, ray_cluster, frameworks), then ``given``. A value that is only
    a reference to another variable (``{{ a3rl_ray_gcs_port }}``, also as a mapping's
    value) is resolved; other
    templates stay as text, so pass such values (paths) in ``given``."""
    import yaml

    v: dict[str, Any] = {}
    for path in sorted((Path(root) / "group_vars" / "all").glob("*.yml")):
        v.update(yaml.safe_load(path.read_text()) or {})
    for role in ("recipe_env", "ray_cluster", "frameworks"):
        defaults = Path(root) / "roles" / role / "defaults" / "main.yml"
        for key, val in (yaml.safe_load(defaults.read_text()) or {}).items():
            v.setdefault(key, val)
    v.update(given)

    def resolved(key: str, val: Any) -> Any:
        m = _REF.fullmatch(val.strip()) if isinstance(val, str) else None
        return v[m.group(1)] if m and m.group(1) in v and m.group(1) != key else val

    for _ in range(3):
        for key, val in v.items():
            if isinstance(val, dict):  # a mapping's values, one level down
                v[key] = {k: resolved(key, x) for k, x in val.items()}
            else:
                v[key] = resolved(key, val)
    return v


# Keys drift reads, besides those of project_vars' files: a play's value wins.
PLAY_KEYS = (*plans.PROFILE_VARS, "a3rl_assets_dir", "a3rl_workdir", "a3rl_datasets",
             "a3rl_manifest", "npus_per_node", "frameworks_wheelhouse",
             "a3rl_recipe_drift", "a3rl_recipe_reviewed_patches", "a3rl_recipe_deviations",
             "a3rl_recipe_site_deviations", "a3rl_ray_dashboard_bind", "a3rl_ray_dashboard_port",
             "a3rl_ray_gcs_port")


def play_vars(hostvars_like: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """What drift compares in a play: the project's files (:func:`project_vars`, for the
    role defaults the play does not load), overlaid with every value the play has."""
    v = project_vars(root)
    for key in sorted({*v, *PLAY_KEYS}):
        try:
            if key in hostvars_like:
                v[key] = hostvars_like[key]
        except Exception:  # noqa: BLE001 - a value this play cannot template: the file's
            continue
    return v


def store_report(hostvars_like: Mapping[str, Any], record: Mapping[str, Any], store: str,
                 root: Path) -> dict[str, Any]:
    """The drift report of the recipe the artifact store holds (its git bundle at the
    recorded commit), as plain data for a play."""
    v = play_vars(hostvars_like, root)
    entry = (record.get("artifacts") or {}).get("recipe") or {}
    files = entry.get("files") or []
    bundle = Path(store) / files[0]["path"] if files else None
    subdir = str((_manifest(v).get("recipe") or {}).get("subdir") or ".")
    if bundle is None or not bundle.is_file():
        return Report(str(bundle), [], [], [f"the recipe's bundle is not in the store "
                                            f"{store}: run the artifact store stage first"]
                      ).as_dict()
    try:
        with recipe_tree(bundle, entry.get("commit"), subdir) as tree:
            report = drift_report(tree, v, label=f"{entry.get('commit', '')[:12]} ({subdir})")
    except DriftError as e:
        report = Report(str(bundle), [], [], [str(e)])
    return report.as_dict()
