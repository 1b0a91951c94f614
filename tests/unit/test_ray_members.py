"""ray-members (roles/ray_cluster, the probe's live check on the head): rendered and run
against a stand-in of the state API, its output is the same only while the same Ray
processes hold the same NPUs, and it fails when the API does not answer."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from . import role_templates

TEMPLATE = "usr/local/lib/a3rl/ray-members.j2"


def node(ip, start, npus=16, state="ALIVE", head=False, used=0.0):
    return {"node_ip": ip, "state": state, "is_head_node": head, "start_time_ms": start,
            "resources_total": {"NPU": float(npus), "CPU": 8.0},
            # Changes from one read to the next: never in the output.
            "resources_available": {"NPU": float(npus) - used}, "mem": used * 1e9}


class Api:
    """The state API's GET /api/v0/nodes, with an optional bearer token."""

    def __init__(self, nodes, token=None):
        self.nodes, self.token = nodes, token
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                if api.token and self.headers.get("Authorization") != f"Bearer {api.token}":
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"data": {"result": {"result": api.nodes}}}).encode()
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api():
    made = []

    def make(nodes, token=None):
        made.append(Api(nodes, token))
        return made[-1]

    yield make
    for a in made:
        a.close()


def render(tmp_path: Path, url: str) -> Path:
    out = tmp_path / "ray-members"
    out.write_text(role_templates.render("ray_cluster", TEMPLATE, ansible_managed="managed",
                                         ray_cluster_dashboard_url=url))
    return out


def run(script: Path, env_file: Path) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, str(script), str(env_file)], capture_output=True,
                          text=True, check=False)
    return proc.returncode, proc.stdout


def test_lists_the_alive_members_and_nothing_that_changes_between_reads(tmp_path, api):
    env_file = tmp_path / "ray.env"
    env_file.write_text("RAY_AUTH_MODE=disabled\n")
    a = api([node("10.0.0.2", 200), node("10.0.0.1", 100, head=True),
             node("10.0.0.2", 50, state="DEAD")])
    script = render(tmp_path, a.url)
    rc, out = run(script, env_file)
    assert rc == 0
    assert out.splitlines() == ["10.0.0.1 head NPU 16.0 started 100",
                                "10.0.0.2 worker NPU 16.0 started 200"]
    a.nodes = [node("10.0.0.1", 100, head=True, used=8), node("10.0.0.2", 200, used=3)]
    assert run(script, env_file) == (0, out)
    # A worker whose Ray started again, or that came back with fewer NPUs: another output.
    a.nodes = [node("10.0.0.1", 100, head=True), node("10.0.0.2", 300)]
    assert run(script, env_file)[1] != out
    a.nodes = [node("10.0.0.1", 100, head=True), node("10.0.0.2", 200, npus=8)]
    assert run(script, env_file)[1] != out


def test_sends_the_token_from_the_env_file_and_fails_without_an_answer(tmp_path, api):
    a = api([node("10.0.0.1", 100, head=True)], token="s3cret")
    script = render(tmp_path, a.url)
    env_file = tmp_path / "ray.env"
    env_file.write_text("RAY_AUTH_MODE=token\nRAY_AUTH_TOKEN=s3cret\n")
    assert run(script, env_file) == (0, "10.0.0.1 head NPU 16.0 started 100\n")
    env_file.write_text("RAY_AUTH_MODE=token\nRAY_AUTH_TOKEN=wrong\n")
    assert run(script, env_file)[0] == 1
    a.close()
    env_file.write_text("RAY_AUTH_MODE=disabled\n")
    assert run(script, env_file)[0] == 1
