"""Ray's job REST API on the head (``/api/jobs/``), for the plays that manage jobs.

``ray job status`` exits 0 whatever the job's state, so the plays read the state from the
REST API instead. With token authentication the token is read from the head's Ray env
file, so it never appears in a task's arguments or in logs. Runs on the head as Ansible
module_utils: standard library only.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

ACTIVE = ("PENDING", "RUNNING")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
# A training job's secret values (a secret-looking Hydra override, a3rl.masking) reach the
# job as environment variables so named, never on its command line; Ray lists a job's
# runtime_env, so every job record read here has their values masked.
SECRET_ENV_PREFIX = "A3RL_SECRET_"
MASK = "********"


class RayApiError(Exception):
    """The job API could not be read or refused a request."""


def read_env_file(path: str | None) -> dict[str, str]:
    values: dict[str, str] = {}
    if not path or not os.path.exists(path):
        return values
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                values[key.strip()] = value.strip().strip('"').strip("'")
    return values


def auth_headers(token_env_file: str | None) -> dict[str, str]:
    env = read_env_file(token_env_file)
    if env.get("RAY_AUTH_MODE") == "token" and env.get("RAY_AUTH_TOKEN"):
        return {"Authorization": "Bearer " + env["RAY_AUTH_TOKEN"]}
    return {}


def request(url: str, method: str = "GET", body: Any = None, headers: dict | None = None,
            timeout: float = 10) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")[:500]
        raise RayApiError(f"{method} {url}: HTTP {e.code} {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        raise RayApiError(f"{method} {url}: {e}") from None
    try:
        return json.loads(text)
    except ValueError:
        return text


def masked_job(record: Any) -> Any:
    """A job record with the values of its secret environment variables masked, there and
    in every text of the record: a FAILED job's ``message`` holds the tail of its log,
    where verl prints its resolved config, secrets included."""
    env = ((record or {}).get("runtime_env") or {}).get("env_vars") \
        if isinstance(record, dict) else None
    if not isinstance(env, dict) or not any(str(k).startswith(SECRET_ENV_PREFIX) for k in env):
        return record
    secrets = [v for k, v in env.items() if str(k).startswith(SECRET_ENV_PREFIX)]
    env = {k: MASK if str(k).startswith(SECRET_ENV_PREFIX) else v for k, v in env.items()}
    return _masked_texts({**record, "runtime_env": {**record["runtime_env"], "env_vars": env}},
                         secrets)


def _masked_texts(value: Any, secrets: list[Any]) -> Any:
    if isinstance(value, str):
        return masked_text(value, secrets)
    if isinstance(value, dict):
        return {k: _masked_texts(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked_texts(v, secrets) for v in value]
    return value


def masked_text(text: str, values: Any) -> str:
    """``text`` with each of ``values`` (a run's secrets, the empty ones aside) masked."""
    for value in sorted((str(v) for v in values or () if v), key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def list_jobs(base: str, headers: dict) -> list[dict[str, Any]]:
    jobs = request(base.rstrip("/") + "/api/jobs/", headers=headers)
    return [masked_job(j) for j in jobs] if isinstance(jobs, list) else []


def follow_state(record: dict[str, Any] | None, supervisor: dict[str, Any] | None) -> dict:
    """Where a follow of a run stands: ``over`` once the attempt succeeded or was stopped by
    its user (the supervisor resumes neither), or failed or is unknown to Ray with no
    supervisor at work on it; ``lost`` when Ray does not know the attempt (the head
    restarted); ``resuming`` while a supervisor is at work (its state has no result)."""
    status = (record or {}).get("status")
    resuming = bool(supervisor) and not (supervisor or {}).get("result")
    over = status in ("SUCCEEDED", "STOPPED") or (
        (status == "FAILED" or not record) and not resuming)
    return {"over": over, "lost": not record, "resuming": resuming}


def active(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [j for j in jobs if j.get("status") in ACTIVE]


def describe(job: dict[str, Any]) -> str:
    """One line naming a job: its submission id (or job id), state and entrypoint."""
    ident = job.get("submission_id") or job.get("job_id") or "?"
    entry = str(job.get("entrypoint") or "")
    return f"{ident} ({job.get('status')}: {entry[:80]})"


def stop(base: str, headers: dict, submission_id: str) -> bool:
    """Ask Ray to stop a job; True when it was asked (False: already finished)."""
    got = request(f"{base.rstrip('/')}/api/jobs/{submission_id}/stop", method="POST",
                  headers=headers)
    return bool(isinstance(got, dict) and got.get("stopped"))


def job(base: str, headers: dict, submission_id: str) -> dict[str, Any] | None:
    """The job's record (status, message, start/end times), or None when there is none."""
    try:
        got = request(f"{base.rstrip('/')}/api/jobs/{submission_id}", headers=headers)
    except RayApiError as e:
        if "HTTP 404" in str(e):
            return None
        raise
    return masked_job(got) if isinstance(got, dict) else None


def submit(base: str, headers: dict, submission_id: str, entrypoint: str,
           runtime_env: dict | None = None, metadata: dict | None = None) -> dict[str, Any]:
    """Submit once: an existing job with this id is returned as it is, never submitted
    again (Ray refuses a repeated submission id anyway; this says so plainly)."""
    existing = job(base, headers, submission_id)
    if existing is not None:
        return {"submitted": False, "job": existing}
    body = {"entrypoint": entrypoint, "submission_id": submission_id,
            "runtime_env": runtime_env or {}, "metadata": metadata or {}}
    request(base.rstrip("/") + "/api/jobs/", method="POST", body=body, headers=headers)
    return {"submitted": True, "job": job(base, headers, submission_id) or {}}


def delete(base: str, headers: dict, submission_id: str) -> bool:
    """Remove an ended job's record and log from Ray (Ray refuses an active job), so that
    its submission id can be used again; True when Ray says it was deleted."""
    got = request(f"{base.rstrip('/')}/api/jobs/{submission_id}", method="DELETE",
                  headers=headers)
    return bool(isinstance(got, dict) and got.get("deleted"))


def logs(base: str, headers: dict, submission_id: str) -> str:
    got = request(f"{base.rstrip('/')}/api/jobs/{submission_id}/logs", headers=headers,
                  timeout=60)
    return got.get("logs", "") if isinstance(got, dict) else str(got)
