"""The tiny random Qwen3 the simulator's hub serves in place of Qwen/Qwen3-32B
(``a3rl.sim.tiny_qwen3``): a complete, consistent checkpoint made offline."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from a3rl.sim import hub, tiny_qwen3


def _header(data: bytes) -> dict:
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n])


def test_every_qwen3_parameter_is_there_with_its_shape_and_about_123k_of_them() -> None:
    files = tiny_qwen3.files()
    index = json.loads(files["model.safetensors.index.json"])
    seen: dict[str, list[int]] = {}
    for shard in sorted(set(index["weight_map"].values())):
        header = _header(files[shard])
        assert tiny_qwen3.NOTE in header.pop("__metadata__")["a3rl_standin"]
        seen |= {k: v["shape"] for k, v in header.items()}
        assert all(v["dtype"] == "F32" for v in header.values())
    assert seen == dict(tiny_qwen3.tensor_shapes())
    assert set(index["weight_map"]) == set(seen)
    assert 120_000 < sum(int(np.prod(s)) for s in seen.values()) < 126_000
    config = json.loads(files["config.json"])
    assert config["head_dim"] * config["num_attention_heads"] == seen[
        "model.layers.0.self_attn.q_proj.weight"][0]
    assert seen["lm_head.weight"] == [config["vocab_size"], config["hidden_size"]]


def test_weights_are_small_random_values_and_norms_are_one() -> None:
    q = np.frombuffer(tiny_qwen3.tensor_bytes("model.layers.0.self_attn.q_proj.weight",
                                              [64, 64]), dtype="<f4")
    assert abs(float(q.std()) - 0.02) < 0.002 and abs(float(q.mean())) < 0.002
    norm = np.frombuffer(tiny_qwen3.tensor_bytes("model.norm.weight", [64]), dtype="<f4")
    assert (norm == 1.0).all()


def test_the_tokenizer_is_trained_to_384_with_qwens_special_tokens_on_top() -> None:
    files = tiny_qwen3.files()
    tok = json.loads(files["tokenizer.json"])
    vocab = tok["model"]["vocab"]
    merges = tok["model"]["merges"]
    assert len(vocab) + len(tok["added_tokens"]) == tiny_qwen3.VOCAB_SIZE
    assert len(merges) == tiny_qwen3.VOCAB_SIZE - 256 - 3
    # every merge joins two known symbols into a known one, in training order
    for i, m in enumerate(merges):
        a, b = m.split(" ")
        assert vocab[a] < 256 + i and vocab[b] < 256 + i and vocab[a + b] == 256 + i
    assert {t["content"]: t["id"] for t in tok["added_tokens"]} == tiny_qwen3.special_ids()
    config = json.loads(files["config.json"])
    cfg = json.loads(files["tokenizer_config.json"])
    assert cfg["eos_token"] == "<|im_end|>" and cfg["padding_side"] == "left"
    assert config["eos_token_id"] == tiny_qwen3.special_ids()["<|im_end|>"]
    # the corpus' commonest pair is learnt first
    assert merges[0] == "Ġ $"


def test_same_bytes_every_time_and_cached_once_per_machine(tmp_path: Path) -> None:
    assert tiny_qwen3.files() == tiny_qwen3.files()
    folder = tiny_qwen3.ensure_cached(tmp_path)
    (folder / "config.json").write_text("{}")  # a later call reads, never rebuilds
    assert tiny_qwen3.ensure_cached(tmp_path) == folder
    assert (folder / "config.json").read_text() == "{}"


def test_the_hub_serves_it_as_qwen3_32b(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("A3RL_MACHINE_CACHE", str(tmp_path / "cache"))
    folder = hub.write_models(tmp_path / "hub")[hub.TINY_REPO]
    files = tiny_qwen3.files()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files
    assert (tmp_path / "cache" / "sim-tiny-qwen3" / tiny_qwen3.digest() / ".complete").is_file()
