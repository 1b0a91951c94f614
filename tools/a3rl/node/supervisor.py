"""The run supervisor: follows one training run on the head after it was submitted, so a
controller that goes away loses nothing, and brings the run back after a failure.

It runs as ``a3rl-supervise@<run id>.service`` on the head (systemd, like Ray), reading
``<state dir>/config.json`` written by the training play, and keeps the run's story in
``<state dir>/events.jsonl`` (one JSON object a line) and ``state.json``; the forensic
bundles go to ``<state dir>/bundles/<submission id>/``. The play copies them into the run
record on the controller whenever it follows or reports the run.

What it tells apart, for the run's current attempt (Ray's job API on the head):

* SUCCEEDED: the run is done.
* STOPPED by someone else (``ray job stop``, the play's stop action): the user's wish;
  never resumed.
* FAILED, or the job gone from Ray's list (the head restarted): a failure.
* RUNNING with no new step for longer than the hang bound: a hang. The bound before the
  attempt's first step is ``hang_first_step_s`` (model load and the first rollout; from
  the plan's expected step time); after it, ``hang_factor`` times the median step time
  the attempt measured, at least ``hang_floor_s``. Or, sooner, RUNNING with no progress
  finer than a step for longer than ``stall_bound_s`` (``stall.py``: the job's log, the
  trainer processes' CPU time and stacks, NPU AICore, read every sixth of the bound; 0
  turns it off). The hang's event says which bound (``bound``: step or stall) and the
  seconds since the last progress seen (``detection_s``); a failure's, the seconds since
  Ray ended the job.

On a failure or a hang it collects the forensic bundle (every live node's report through
``cluster_ops.py``, the job's driver log; for a hang before anything is stopped, so the
stacks show where it waits), stops what is left (the job through Ray, then any trainer
process on every node), waits until the cluster is whole again (every expected node's
raylet ALIVE exactly once, NPUs healthy, every NPU port's network health Success), and
submits the next attempt (``<run id>-r<k>``) resuming from the newest complete
checkpoint. After ``max_tries`` such tries, waiting ``backoff_s`` doubled after each
(at most ``backoff_max_s``), it gives up, says why, and leaves no trainer process.

Standard library only; on the head its node-side neighbours are files beside it.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

try:  # the project's tree (tests, the controller)
    from a3rl.node import checkpoints, first_failure, metrics, npu_network, rayjobs, stall
    from a3rl.node import npu as npu_facts
except ImportError:  # shipped to the head: the files beside this one
    import checkpoints  # type: ignore[no-redef]
    import first_failure  # type: ignore[no-redef]
    import metrics  # type: ignore[no-redef]
    import npu as npu_facts  # type: ignore[no-redef]
    import npu_network  # type: ignore[no-redef]
    import rayjobs  # type: ignore[no-redef]
    import stall  # type: ignore[no-redef]

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = os.path.join(HERE, "cluster_ops.py")
# Final results, written to state.json as ``result``.
SUCCEEDED, USER_STOPPED, GAVE_UP = "succeeded", "stopped-by-user", "gave-up"
DEFAULTS = {"poll_s": 30, "max_tries": 3, "backoff_s": 60, "backoff_max_s": 900,
            "hang_first_step_s": 7200, "hang_factor": 3.0, "hang_floor_s": 600,
            "whole_timeout_s": 1800, "log_lines": 300, "ops_timeout_s": 180,
            "stall_bound_s": 600}
# The settings a run's config carries: config key -> (the play's variable, kind, least
# value, whether the least is allowed). Checked by the training play before it submits
# (the a3rl_supervisor_settings filter) and again by the supervisor as it starts.
SETTINGS = {
    "poll_s": ("run_supervisor_poll", "seconds", 0, False),
    "max_tries": ("run_supervisor_max_tries", "count", 0, True),
    "backoff_s": ("run_supervisor_backoff", "seconds", 0, True),
    "backoff_max_s": ("run_supervisor_backoff_max", "seconds", 0, True),
    "hang_factor": ("run_supervisor_hang_factor", "number", 0, False),
    "hang_floor_s": ("run_supervisor_hang_floor", "seconds", 0, False),
    "hang_first_step_s": ("run_supervisor_hang_first_step", "seconds", 0, True),
    "whole_timeout_s": ("run_supervisor_whole_timeout", "seconds", 0, False),
    "net_check": ("run_supervisor_net_check", "switch", None, True),
    "clock_bound_s": ("run_supervisor_clock_bound", "seconds", 0, False),
    "log_lines": ("run_supervisor_log_lines", "count", 0, False),
    "stall_bound_s": ("run_supervisor_stall_bound", "seconds", 0, True),
}
# The exit code of a supervisor that cannot go on by itself (its state folder missing or
# full, its state or config unreadable): the unit does not restart it
# (RestartPreventExitStatus=), so it says why once instead of crash-looping.
CANNOT_GO_ON = 3
_ON, _OFF = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


class StateError(Exception):
    """The supervisor cannot read or write its state folder (missing, full, cut)."""


def typed_setting(key: str, value: Any, problems: list[str], name: str | None = None) -> Any:
    """``value`` of the setting ``key`` (SETTINGS) as its type, or None with one message in
    ``problems`` naming the variable (``name``, by default the play's) and the fix. Strings
    are read as -e gives them ("30", "true"); "30s", "nan", "-1" or "2h" are refused."""
    var, kind, least, least_ok = SETTINGS[key]
    var = name or var
    if kind == "switch":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _ON + _OFF:
            return value.strip().lower() in _ON
        problems.append(f"{var} {value!r} is not true or false. Fix: -e {var}=true or false")
        return None
    got: Any = value
    if isinstance(got, str):
        try:
            got = float(got.strip()) if kind != "count" else int(got.strip())
        except ValueError:
            pass
    if isinstance(got, float) and kind == "count" and got.is_integer():
        got = int(got)
    ok = (not isinstance(got, bool) and isinstance(got, int if kind == "count" else int | float)
          and math.isfinite(got) and (got >= least if least_ok else got > least))
    if not ok:
        what = {"seconds": "a number of seconds", "number": "a number",
                "count": "a whole number"}[kind]
        bound = f"at least {least}" if least_ok else f"above {least}"
        problems.append(f"{var} {value!r} is not {what} {bound}. Fix: give it as a plain "
                        f"number (-e {var}=<{kind}>), without a unit")
        return None
    return got if kind == "count" else float(got)


def config_problems(config: Mapping[str, Any]) -> list[str]:
    """What is wrong with a run's config.json: its settings (SETTINGS) and its keys."""
    problems: list[str] = []
    for key in ("run_id", "submission_id", "state_dir", "url", "nodes", "job"):
        if not config.get(key):
            problems.append(f"config.json has no {key}")
    for key in SETTINGS:
        if key in config:
            typed_setting(key, config[key], problems, name=f"config.json's {key}")
    return problems


class Supervisor:
    """One run's supervisor. ``api``, ``ops``, ``clock`` and ``sleep`` are seams for the
    unit tests; by default Ray's job API, ``cluster_ops.py`` and the wall clock."""

    def __init__(self, config: Mapping[str, Any], api: Any = None,
                 ops: Callable[[str, dict], dict] | None = None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep):
        self.cfg = {**DEFAULTS, **config}
        self.dir = self.cfg["state_dir"]
        self.api = api or RayApi(self.cfg["url"], self.cfg.get("token_env_file"))
        self.ops = ops or self._ops
        self.clock = clock
        self.sleep = sleep
        self.unclean: list[str] = []  # what the last kill left or could not reach
        self.state = self._load_state()

    # --- state and events ---

    def _load_state(self) -> dict[str, Any]:
        """state.json; its copy state.json.prev when it is cut (written by the same save
        just after it, so it holds the same tries and attempt); a fresh state only when
        neither exists (the play writes both as it starts a run). Never a silent reset:
        both there and unreadable is a StateError."""
        path = os.path.join(self.dir, "state.json")
        cut = []
        for name in (path, path + ".prev"):
            try:
                with open(name, encoding="utf-8") as f:
                    state = json.load(f)
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as e:
                cut.append(f"{name}: {e}")
                continue
            if isinstance(state, dict) and isinstance(state.get("tries"), int) \
                    and state.get("submission_id"):
                return state
            cut.append(f"{name}: not a supervisor state")
        if cut:
            raise StateError("the run's state cannot be read (" + "; ".join(cut) + "), so "
                             "its attempt and tries are not known. Fix: read events.jsonl in "
                             f"{self.dir} and resume the run (-e train_job_resume=true)")
        return {"run_id": self.cfg["run_id"], "submission_id": self.cfg["submission_id"],
                "tries": 0, "result": None}

    def _save(self) -> None:
        path = os.path.join(self.dir, "state.json")
        _write_json(path, self.state)
        _write_json(path + ".prev", self.state)

    def event(self, kind: str, **fields: Any) -> None:
        record = {"time": self.clock(), "event": kind,
                  "submission_id": self.state["submission_id"], **fields}
        # The run's secrets masked (a FAILED job's message holds the tail of its log).
        line = rayjobs.masked_text(json.dumps(record, sort_keys=True), [
            json.dumps(v)[1:-1] for k, v in ((self.cfg.get("job") or {}).get("env") or {})
            .items() if str(k).startswith(rayjobs.SECRET_ENV_PREFIX)])
        path = os.path.join(self.dir, "events.jsonl")
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as e:
            raise StateError(f"cannot write {path}: {e}") from None
        print(line, flush=True)

    # --- the loop ---

    def run(self) -> int:
        """Follow the run until it succeeds, the user stops it, or it gives up."""
        if self.state.get("result"):
            return 0
        self.event("follow", tries=self.state["tries"])
        pending = self.state.get("recovering") or {}
        if pending.get("submission_id") == self.state["submission_id"]:
            # Restarted while it was bringing the run back (its backoff, its wait for a
            # whole cluster): the attempt it stopped itself is not the user's stop.
            self.event("recovering", of=pending.get("kind"), why=pending.get("why"),
                       tries=self.state["tries"])
            if not self._recover(pending.get("kind") or "failed", pending.get("why") or "",
                                 self.api.job(self.state["submission_id"])):
                return 0
        seen = _Progress(self.clock(), self.cfg)
        while True:
            record = self.api.job(self.state["submission_id"])
            status = (record or {}).get("status")
            if status == "SUCCEEDED":
                return self._finish(SUCCEEDED, "the run's last attempt succeeded")
            if status == "STOPPED":
                return self._finish(USER_STOPPED, "the job was stopped by someone else "
                                    "(ray job stop, the play's stop action): not resumed")
            if record is None or status == "FAILED":
                why = (f"Ray no longer lists {self.state['submission_id']} (the head "
                       "restarted)") if record is None else \
                    f"the job failed: {(record.get('message') or '').strip()[:500]}"
                # Time to detection: since Ray's end of the job, or since the poll that
                # last saw it.
                ended = float((record or {}).get("end_time") or 0) / 1000 or seen.polled
                if not self._recover("failed", why, record,
                                     detection_s=round(max(0.0, self.clock() - ended), 1)):
                    return 0
                seen = _Progress(self.clock(), self.cfg)
            elif status in ("RUNNING", "PENDING"):
                log = self.api.logs(self.state["submission_id"])
                seen.update(metrics.progress(log).get("step"), self.clock())
                seen.stall.log(log, self.clock())
                if status == "RUNNING" and seen.sample_due(self.clock(), self.cfg):
                    seen.stall.nodes(self.ops("progress", {"timeout": 60}).get("nodes", {}),
                                     self.clock())
                hung = seen.hung(self.clock(), self.cfg)
                if hung:
                    if not self._recover("hang", hung.pop("why"), record, **hung):
                        return 0
                    seen = _Progress(self.clock(), self.cfg)
            self.sleep(float(self.cfg["poll_s"]))

    def _finish(self, result: str, why: str) -> int:
        self.state["result"] = result
        self._save()
        self.event(result, why=why)
        return 0

    def _recover(self, kind: str, why: str, record: Mapping[str, Any] | None,
                 **detected: Any) -> bool:
        """A failure or hang: bundle, clean, wait, resubmit. False when it gave up.
        ``detected``: how it was found (the bound, the time to detection), for the event."""
        sid = self.state["submission_id"]
        # Persisted before the job is stopped, cleared with the next attempt's submission:
        # a restart in between carries on here, and counts the try once.
        pending = self.state.get("recovering") or {}
        counted = pending.get("submission_id") == sid and pending.get("counted")
        if not counted:
            self.state["recovering"] = {"submission_id": sid, "kind": kind, "why": why}
            self._save()
            self.event(kind, why=why, **detected)
            self._bundle(sid, record)
        if record is not None and record.get("status") in ("RUNNING", "PENDING"):
            self.api.stop(sid)
            self._wait_ended(sid)
        left = self._clean()
        if not counted:
            self.state["tries"] += 1
            self.state["recovering"]["counted"] = True
            self._save()
        if self.state["tries"] > int(self.cfg["max_tries"]):
            self.state["result"] = GAVE_UP
            self.state.pop("recovering", None)
            self._save()
            self.event(GAVE_UP, why=f"{self.state['tries'] - 1} resumed attempt(s) failed "
                       f"(max_tries={self.cfg['max_tries']}); the last: {why}. {left} Fix: "
                       f"read the bundles in {self.dir}/bundles, fix the cause, then resume "
                       f"the run (-e train_job_resume=true)")
            return False
        wait = min(float(self.cfg["backoff_s"]) * 2 ** (self.state["tries"] - 1),
                   float(self.cfg["backoff_max_s"]))
        self.event("backoff", seconds=wait, tries=self.state["tries"])
        self.sleep(wait)
        problems = self._wait_whole()
        if problems:
            left = self._clean()
            self.state["result"] = GAVE_UP
            self.state.pop("recovering", None)
            self._save()
            self.event(GAVE_UP, why="the cluster did not become whole within "
                       f"{self.cfg['whole_timeout_s']} s: " + "; ".join(problems) + f". {left}")
            return False
        self._resubmit()
        return True

    def _clean(self) -> str:
        """Kill what is left of the job on every node (trainers, processes holding an
        NPU's device file); the sentence that says what the cluster was left with."""
        answer = self.ops("kill", {})
        got = {str(ip): r for ip, r in (answer.get("nodes") or {}).items()}
        # Every expected node that did not answer (the ops call failed, the node is gone)
        # is not known to be clean.
        for ip in self._unanswered(got):
            got[ip] = {"error": answer.get("error") or "no answer to the kill"}
        self.event("cleaned", killed={ip: [p["title"] for p in r.get("killed", [])]
                                      for ip, r in got.items()},
                   left={ip: r["left"] for ip, r in got.items() if r.get("left")},
                   errors={ip: r["error"] for ip, r in got.items() if r.get("error")})
        left = [f"{ip}: pid {p['pid']} {p['title'][:60]}"
                + (f" holding {', '.join(p['devices'])}" if p.get("devices") else "")
                for ip, r in got.items() for p in r.get("left", [])]
        unread = [ip for ip, r in got.items() if r.get("error")]
        names = self._names()
        self.unclean = [f"{names.get(ip, ip)}: not cleaned ({got[ip]['error']})"
                        for ip in unread] + [f"{p} still running after the kill" for p in left]
        if left:
            return "Still running after the kill: " + "; ".join(left) + "."
        if unread or not got:
            return ("The cluster could not be cleaned everywhere: no answer from "
                    + (", ".join(unread) if unread else "any node") + ".")
        return "The cluster was left without trainer processes or held NPU devices."

    def _names(self) -> dict[str, str]:
        return {str(ip): host for host, ip in dict(self.cfg["nodes"]).items()}

    def _unanswered(self, got: Mapping[str, Any]) -> list[str]:
        return [str(ip) for ip in dict(self.cfg["nodes"]).values() if str(ip) not in got]

    def _wait_ended(self, sid: str) -> None:
        deadline = self.clock() + 120
        while self.clock() < deadline:
            if (self.api.job(sid) or {}).get("status") not in ("RUNNING", "PENDING"):
                return
            self.sleep(2)

    def _wait_whole(self) -> list[str]:
        deadline = self.clock() + float(self.cfg["whole_timeout_s"])
        problems = ["not checked yet"]
        while True:
            if self.unclean:  # the last kill did not reach every node: again
                self._clean()
            problems = self.unclean + self.whole_problems()
            if not problems:
                self.event("whole")
                return []
            if self.clock() >= deadline:
                return problems
            self.event("waiting", problems=problems)
            self.sleep(min(10.0, float(self.cfg["poll_s"])))

    def whole_problems(self) -> list[str]:
        """Why the cluster is not whole yet: an expected node's raylet missing or listed
        twice as ALIVE, NPUs short of the inventory's, a chip not OK, an NPU port's net
        health not Success."""
        nodes = self.api.nodes()
        want = dict(self.cfg["nodes"])  # host -> cluster IP
        npus = int(self.cfg.get("npus_per_node", 0))
        alive = [n for n in nodes if n.get("state") == "ALIVE"]
        problems = []
        for host, ip in sorted(want.items()):
            mine = [n for n in alive if str(n.get("node_ip")) == str(ip)]
            if len(mine) != 1:
                problems.append(f"{host}: {len(mine)} live raylets listed (want 1)")
        total = sum(float((n.get("resources_total") or {}).get("NPU", 0)) for n in alive)
        if npus and total != npus * len(want):
            problems.append(f"Ray counts {total:g} NPUs, the inventory {npus * len(want)}")
        if problems:
            return problems
        checked = self.ops("health", {"npus": npus, "net": bool(self.cfg.get("net_check", True))})
        by_ip = self._names()
        answers = {str(ip): r for ip, r in (checked.get("nodes") or {}).items()}
        for ip in self._unanswered(answers):  # an NPU whose health was not read is not OK
            answers[ip] = {"error": "no answer to the health check"
                           + (f" ({checked['error']})" if checked.get("error") else "")}
        for ip, got in sorted(answers.items()):
            host = by_ip.get(str(ip), str(ip))
            if got.get("error"):
                problems.append(f"{host}: {got['error']}")
                continue
            smi = got.get("npu_smi")
            if smi is not None:
                if smi.get("rc") != 0:
                    problems.append(f"{host}: npu-smi info failed ({smi.get('err', '')[:200]})")
                else:
                    problems += npu_facts.npu_health_problems(
                        host, npu_facts.parse_npu_smi_info(smi.get("out", "")), npus)
            for dev, text in sorted((got.get("net_health") or {}).items()):
                state = npu_network.parse_net_health(text)
                if state != "Success":
                    problems.append(f"{host}: NPU port {dev} net health {state or 'unknown'}")
        return problems

    def _bundle(self, sid: str, record: Mapping[str, Any] | None) -> None:
        """The forensic bundle of the attempt that failed or hung."""
        folder = os.path.join(self.dir, "bundles", sid)
        os.makedirs(folder, exist_ok=True)
        since = float((record or {}).get("start_time") or 0) / 1000 or self.clock() - 3600
        got = self.ops("report", {"since": since, "lines": int(self.cfg["log_lines"]),
                                  "npus": int(self.cfg.get("npus_per_node", 0)),
                                  "net": bool(self.cfg.get("net_check", True)),
                                  "timeout": int(self.cfg["ops_timeout_s"])})
        try:
            driver = self.api.logs(sid)
        except rayjobs.RayApiError as e:
            driver = f"(the job's driver log could not be read: {e})"
        # The run's secrets (its job's A3RL_SECRET_* env) masked: verl prints its resolved
        # config, secrets included, to the job's log and its workers' Ray logs.
        secrets = [v for k, v in ((self.cfg.get("job") or {}).get("env") or {}).items()
                   if str(k).startswith(rayjobs.SECRET_ENV_PREFIX)]
        with open(os.path.join(folder, "driver.log"), "w", encoding="utf-8") as f:
            # Masked first, then cut: a cut never leaves part of a secret unmasked.
            f.write(first_failure.tail(rayjobs.masked_text(driver, secrets)))
        got = json.loads(rayjobs.masked_text(json.dumps(got), [
            json.dumps(v)[1:-1] for v in secrets]))
        names = {str(ip): host for host, ip in dict(self.cfg["nodes"]).items()}
        nodes = {names.get(str(ip), str(ip)): r for ip, r in got.get("nodes", {}).items()}
        for host, data in nodes.items():
            _write_json(os.path.join(folder, f"{first_failure.file_name(host)}.json"), data)
        dead = [n for n in self.api.nodes() if n.get("state") == "DEAD"
                and float(n.get("end_time_ms") or 0) / 1000 >= since]
        summary = first_failure.summarize(
            nodes, dead=[{"host": names.get(str(n.get("node_ip")), str(n.get("node_ip"))),
                          "time": float(n.get("end_time_ms") or 0) / 1000,
                          "why": n.get("state_message") or "Ray marked the node DEAD"}
                         for n in dead],
            expected=sorted(dict(self.cfg["nodes"])), since=since,
            bound=float(self.cfg.get("clock_bound_s", 1.0)))
        _write_json(os.path.join(folder, "summary.json"), summary)
        self.event("bundle", folder=folder, first=summary.get("first"),
                   warnings=summary.get("warnings"))

    def _resubmit(self) -> None:
        run_id = self.cfg["run_id"]
        attempt = checkpoints.attempt_of(self.state["submission_id"]) + 1
        folder = (self.cfg.get("checkpoint") or {}).get("dir")
        newest, skipped = checkpoints.newest_complete(folder) if folder else (None, [])
        # save_freq from the failed attempt's measured saves (Young/Daly, capped by the plan's)
        cards = len(dict(self.cfg["nodes"])) * max(1, int(self.cfg.get("npus_per_node") or 1))
        try:
            chosen = checkpoints.measured_save_freq(
                self.cfg["job"], metrics.parse_log(self.api.logs(self.state["submission_id"])),
                cards)
        except rayjobs.RayApiError:
            chosen = None
        while True:
            job = checkpoints.resume_job(
                checkpoints.with_save_freq(self.cfg["job"], chosen["save_freq"]) if chosen
                else self.cfg["job"], run_id, attempt, newest["path"] if newest else None)
            known = self.api.job(job["submission_id"])
            if known is None:
                self.api.submit(job["submission_id"], job["entrypoint"],
                                {"env_vars": dict(self.cfg["job"].get("env") or {})},
                                {**(self.cfg.get("metadata") or {}), "attempt": str(attempt)})
                break
            if known.get("entrypoint") == job["entrypoint"]:
                break  # submitted already, when a restart came before the state's save
            attempt += 1  # an attempt of an earlier run under this id (a rerun): the next
        self.state["submission_id"] = job["submission_id"]
        self.state.pop("recovering", None)
        self._save()
        self.event("resubmitted", attempt=attempt,
                   resume_from=newest["path"] if newest else None, skipped=skipped,
                   save_freq=chosen and chosen["why"])

    def _ops(self, action: str, args: dict) -> dict:
        """``cluster_ops.py`` as a Ray driver where Ray runs on the head."""
        argv = [*self.cfg["ops_command"], action, json.dumps(args)]
        timeout = float(self.cfg["ops_timeout_s"]) + 60
        # A call that hangs or cannot start is an answer from no node (so nothing counts
        # as cleaned or healthy), never an exception that restarts the unit uncounted.
        try:
            with open(OPS, encoding="utf-8") as f:
                code = f.read()
            env = dict(os.environ)
            env.update(rayjobs.read_env_file(self.cfg.get("token_env_file")))
            done = subprocess.run(argv, input=code, capture_output=True, text=True, env=env,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            error = f"cluster_ops {action} did not end within {timeout:.0f} s"
        except (OSError, ValueError) as e:
            error = f"cluster_ops {action} could not be run ({argv[0]}): {e}"
        else:
            try:
                got = json.loads(done.stdout.strip().splitlines()[-1])
                if isinstance(got, dict):
                    return got
            except (ValueError, IndexError):
                pass
            error = f"cluster_ops {action} exited {done.returncode}: {done.stderr.strip()[-500:]}"
        self.event("ops-failed", action=action, why=error)
        return {"nodes": {}, "error": error}


class _Progress:
    """The attempt's last step and when it was first seen; the step times measured; the
    progress finer than a step (``stall.Tracker``); which bound a hang exceeded."""

    def __init__(self, now: float, cfg: Mapping[str, Any]):
        self.since = self.polled = now
        self.step: int | None = None
        self.durations: list[float] = []
        self.stall = stall.Tracker(float(cfg["stall_bound_s"]))
        self.sampled: float | None = None

    def update(self, step: int | None, now: float) -> None:
        self.polled = now
        if step is not None and step != self.step:
            if self.step is not None and step > self.step:
                self.durations.append((now - self.since) / (step - self.step))
            self.step, self.since = step, now
            self.stall.step(now)

    def sample_due(self, now: float, cfg: Mapping[str, Any]) -> bool:
        """Whether the nodes are read for the stall bound at this poll (0: never)."""
        if float(cfg["stall_bound_s"]) <= 0:
            return False
        if self.sampled is None or now - self.sampled >= self.stall.every(cfg["poll_s"]):
            self.sampled = now
            return True
        return False

    def hung(self, now: float, cfg: Mapping[str, Any]) -> dict[str, Any] | None:
        """The hang's event fields (``why``, ``bound``: step or stall, ``detection_s``:
        seconds since the last progress seen), or None."""
        quiet = self.stall.quiet(now)
        if float(cfg["stall_bound_s"]) > 0 and self.stall.stalled(now):
            return {"why": self.stall.why(now), "bound": "stall",
                    "detection_s": round(quiet or 0.0, 1)}
        bound = self.bound(cfg)
        if now - self.since <= bound:
            return None
        return {"why": f"no new step for {now - self.since:.0f} s, more than the bound of "
                       f"{bound:.0f} s ({self.bound_reason(cfg)}); last step "
                       f"{self.step if self.step is not None else 'none'}",
                "bound": "step",
                "detection_s": round(now - self.since if quiet is None else quiet, 1)}

    def bound(self, cfg: Mapping[str, Any]) -> float:
        if self.step is None or not self.durations:
            return float(cfg["hang_first_step_s"])
        return max(float(cfg["hang_floor_s"]),
                   float(cfg["hang_factor"]) * statistics.median(self.durations))

    def bound_reason(self, cfg: Mapping[str, Any]) -> str:
        if self.step is None or not self.durations:
            return "before the attempt's second step: hang_first_step_s"
        median = statistics.median(self.durations)
        return (f"{cfg['hang_factor']} x the median step of {median:.0f} s, at least "
                f"hang_floor_s {cfg['hang_floor_s']}")


class RayApi:
    """Ray's job and state API on the head (``rayjobs``)."""

    def __init__(self, url: str, token_env_file: str | None):
        self.url = url
        self.headers = rayjobs.auth_headers(token_env_file)

    def job(self, sid: str) -> dict | None:
        return rayjobs.job(self.url, self.headers, sid)

    def logs(self, sid: str) -> str:
        return rayjobs.logs(self.url, self.headers, sid)

    def stop(self, sid: str) -> bool:
        return rayjobs.stop(self.url, self.headers, sid)

    def submit(self, sid: str, entrypoint: str, runtime_env: dict, metadata: dict) -> dict:
        return rayjobs.submit(self.url, self.headers, sid, entrypoint, runtime_env, metadata)

    def nodes(self) -> list[dict]:
        body = rayjobs.request(self.url.rstrip("/") + "/api/v0/nodes?detail=true&limit=10000",
                               headers=self.headers)
        return ((body or {}).get("data") or {}).get("result", {}).get("result", [])


def _write_json(path: str, data: Any) -> None:
    """``data`` to ``path`` whole or not at all (temp name, flushed to disk, renamed); a
    folder that is gone or full is a StateError."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StateError(f"cannot write {path}: {e}") from None


def mark_stopped(config: Mapping[str, Any]) -> bool:
    """The run stopped by its user (the play's stop action, its unit stopped first): the
    state says so, so that a follow does not wait for a supervisor that is gone. False
    when the state already had a result."""
    sup = Supervisor(config, api=object())
    if sup.state.get("result"):
        return False
    sup._finish(USER_STOPPED, "the run was stopped with the play's stop action "
                "(train_job_action=stop): not resumed")
    return True


def main(argv: list[str]) -> int:
    stopped = argv[1:2] == ["--stopped"]
    if len(argv) != 2 + stopped:
        print("usage: supervisor.py [--stopped] <state dir>/config.json", file=sys.stderr)
        return 2
    try:
        with open(argv[-1], encoding="utf-8") as f:
            config = json.load(f)
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        return _cannot_go_on(f"its config {argv[-1]} cannot be read ({e}). Fix: start the "
                             "run's supervisor with the training play")
    config.setdefault("state_dir", os.path.dirname(os.path.abspath(argv[-1])))
    problems = config_problems(config)
    if problems:
        return _cannot_go_on("; ".join(problems) + ". Fix: start the run's supervisor with "
                             "the training play, which checks its settings")
    # A failing API call is retried by the next poll; systemd restarts the unit when the
    # process itself dies (Restart=on-failure), and state.json carries it on. What the
    # supervisor cannot mend itself (its state folder gone or full, its state cut) ends
    # it with CANNOT_GO_ON, which the unit does not restart.
    try:
        if stopped:
            print("marked stopped" if mark_stopped(config) else "already ended")
            return 0
        while True:
            try:
                return Supervisor(config).run()
            except rayjobs.RayApiError as e:
                print(f"Ray's API did not answer ({e}); trying again in 10 s", flush=True)
                time.sleep(10)
    except StateError as e:
        why = str(e)
        if "Fix:" not in why:
            why += (f". Fix: free space in (or make) {config['state_dir']}, then "
                    f"systemctl restart a3rl-supervise@{config.get('run_id')}.service: "
                    "state.json carries the run on")
        return _cannot_go_on(why)


def _cannot_go_on(why: str) -> int:
    print(f"a3rl supervisor: cannot go on: {why}", file=sys.stderr, flush=True)
    return CANNOT_GO_ON


if __name__ == "__main__":
    sys.exit(main(sys.argv))
