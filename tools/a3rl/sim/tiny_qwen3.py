"""STAND-IN model for the simulator: a tiny random Qwen3 that real verl can train on CPU.

The simulator's hub serves it in place of ``Qwen/Qwen3-32B`` (``a3rl.sim.hub``), so the
weights stage places it on the nodes as it would the real model, and the real verl
trainer on the simulator (``docs/simulator.md``, "Real verl on CPU") loads it with
transformers. It is a real ``Qwen3ForCausalLM`` checkpoint of the shape a feasibility run
on this machine kind used (``shared/reference/verl-cpu.md``, "Assets made offline"):
2 layers, hidden 64, 4 attention heads and 2 KV heads of head_dim 16, intermediate 128,
vocabulary 384, untied embeddings: about 123k parameters, float32.

Everything is made here, offline and deterministically, with the standard library and
numpy (no torch, no tokenizers library, no hub):

* the weights: every tensor the transformers Qwen3 model declares (names and shapes as
  its ``modeling_qwen3`` lays them out), matrices uniform with standard deviation
  ``initializer_range`` (0.02) drawn from SHAKE-256 of the tensor's name, norms 1.0,
  in safetensors shards with an index, as the real checkpoint is shipped;
* the tokenizer: a byte-level BPE (GPT-2's byte alphabet, as Qwen's) whose merges are
  TRAINED here on a small fixed corpus (the simulator's stand-in dataset texts and the
  chat template's words) by the plain BPE algorithm (most frequent adjacent pair first,
  ties broken by the pair's text), up to a vocabulary of 384 with Qwen's three special
  tokens ``<|endoftext|>`` (padding), ``<|im_start|>`` and ``<|im_end|>`` (end of
  sequence) at its top; Qwen's chat template shape and left padding.

The bytes depend only on this file's constants: ``files()`` is the whole model as a dict
of relative path -> bytes, and ``ensure_cached`` keeps one copy per machine under
``~/.cache/a3rl/sim-tiny-qwen3/<digest>/`` (the digest is of this source file and the
corpus'), so nothing binary is committed and a second ``sim up`` reads the cache.
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import json
import re
import shutil
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

NOTE = "STAND-IN made by a3rl's simulator: a tiny random Qwen3, not the published model"
VOCAB_SIZE = 384
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
SHARDS = 2
CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 64,
    "initializer_range": 0.02,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
    "max_window_layers": 2,
    "model_type": "qwen3",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "transformers_version": "4.57.6",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": VOCAB_SIZE,
}
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# GPT-2's pre-tokenizer pattern with ASCII classes (the standard library's re has no \p{L}):
# words, numbers and punctuation runs with their leading space, and whitespace.
_WORDS = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def corpus() -> list[str]:
    """The text the tokenizer is trained on: the stand-in datasets' prompts and answers
    (what the simulated runs feed the model) and the chat template's words."""
    from a3rl.sim import datasets_fixture as d

    texts = ["system", "user", "assistant", "Let's think step by step and output the final "
             "answer within \\boxed{}."]
    for row in [*d.DEEPSCALER_ITEMS, *d.DAPO_PROBLEMS, *d.AIME_PROBLEMS]:
        texts += [str(v) for v in row]
    return texts


def byte_symbols() -> list[str]:
    """GPT-2's byte-to-unicode table (the one Qwen's byte-level BPE uses), in byte order
    of the symbols' ids 0..255."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]
    cs = list(bs)
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return [chr(c) for c in cs]


def train_bpe(texts: list[str], merges_wanted: int) -> list[tuple[str, str]]:
    """Plain byte-level BPE training: repeatedly merge the most frequent adjacent pair
    (ties: the smaller pair text), within pre-tokenized words."""
    table = dict(zip(range(256), _byte_table(), strict=True))
    words: collections.Counter[tuple[str, ...]] = collections.Counter()
    for text in texts:
        for w in _WORDS.findall(text):
            words[tuple(table[b] for b in w.encode())] += 1
    merges: list[tuple[str, str]] = []
    while len(merges) < merges_wanted:
        pairs: collections.Counter[tuple[str, str]] = collections.Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:], strict=False):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        joined = best[0] + best[1]
        new: collections.Counter[tuple[str, ...]] = collections.Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] += n
        words = new
    return merges


def _byte_table() -> list[str]:
    """byte value -> its symbol (byte_symbols lists symbols in table order, not byte
    order: the printable bytes first)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]
    order = bs + [b for b in range(256) if b not in bs]
    syms = byte_symbols()
    out = [""] * 256
    for sym, b in zip(syms, order, strict=True):
        out[b] = sym
    return out


def tokenizer_files() -> dict[str, bytes]:
    merges = train_bpe(corpus(), VOCAB_SIZE - 256 - len(SPECIAL))
    return qwen_tokenizer_files([f"{a} {b}" for a, b in merges], SPECIAL, CHAT_TEMPLATE,
                                CONFIG["max_position_embeddings"], padding_side="left")


def qwen_tokenizer_files(merges: list[str], special: Mapping[str, int] | Sequence[str],
                         chat_template: str, model_max_length: int,
                         padding_side: str | None = None) -> dict[str, bytes]:
    """A Qwen-style byte-level BPE tokenizer's files (``tokenizer.json``,
    ``tokenizer_config.json``, ``vocab.json``, ``merges.txt``) from its merges ("a b").
    ``special`` maps each special token to its id, or lists them to be numbered after the
    vocabulary. Shared by this tiny model and the stand-in hub's published-config repos."""
    vocab = {s: i for i, s in enumerate(byte_symbols())}
    for merge in merges:
        vocab.setdefault(merge.replace(" ", ""), len(vocab))
    if not isinstance(special, Mapping):
        special = {t: len(vocab) + i for i, t in enumerate(special)}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t, i in special.items()]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {**byte_level, "use_regex": True},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    config = {
        "add_bos_token": False, "add_prefix_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"}
                                 for a in added},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None, "chat_template": chat_template,
        "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": model_max_length, "pad_token": "<|endoftext|>",
        **({"padding_side": padding_side} if padding_side else {}),
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None, "_a3rl_standin": True,
    }
    return {
        "tokenizer.json": _json(tokenizer),
        "tokenizer_config.json": _json(config),
        "vocab.json": json.dumps(vocab, ensure_ascii=False, separators=(",", ":")).encode(),
        "merges.txt": ("#version: 0.2\n" + "\n".join(merges) + "\n").encode(),
    }


def special_ids() -> dict[str, int]:
    """The special tokens' ids: right after the byte alphabet and the merges."""
    base = VOCAB_SIZE - len(SPECIAL)
    return {t: base + i for i, t in enumerate(SPECIAL)}


def tensor_shapes() -> list[tuple[str, list[int]]]:
    """Every parameter of transformers' Qwen3ForCausalLM for CONFIG, in layer order."""
    h, inter, hd = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["head_dim"]
    q, kv = CONFIG["num_attention_heads"] * hd, CONFIG["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", [VOCAB_SIZE, h])]
    for i in range(CONFIG["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", [h]),
            (p + "self_attn.q_proj.weight", [q, h]),
            (p + "self_attn.k_proj.weight", [kv, h]),
            (p + "self_attn.v_proj.weight", [kv, h]),
            (p + "self_attn.o_proj.weight", [h, q]),
            (p + "self_attn.q_norm.weight", [hd]),
            (p + "self_attn.k_norm.weight", [hd]),
            (p + "post_attention_layernorm.weight", [h]),
            (p + "mlp.gate_proj.weight", [inter, h]),
            (p + "mlp.up_proj.weight", [inter, h]),
            (p + "mlp.down_proj.weight", [h, inter]),
        ]
    out += [("model.norm.weight", [h]), ("lm_head.weight", [VOCAB_SIZE, h])]
    return out


def tensor_bytes(name: str, shape: list[int]) -> bytes:
    """float32 little-endian: norms 1.0; matrices uniform in +-(0.02 * sqrt 3), i.e.
    standard deviation 0.02, from SHAKE-256 of the name (the same on every machine)."""
    count = int(np.prod(shape))
    if name.endswith("norm.weight"):
        return np.ones(count, dtype="<f4").tobytes()
    raw = np.frombuffer(hashlib.shake_256(name.encode()).digest(4 * count), dtype="<u4")
    unit = raw.astype(np.float64) / 2**32 - 0.5  # [-0.5, 0.5)
    scale = 2 * CONFIG["initializer_range"] * 3**0.5
    return (unit * scale).astype("<f4").tobytes()


def files(shard_bytes: int | None = None) -> dict[str, bytes]:
    """The whole model repository: relative path -> bytes. ``shard_bytes`` pads the first
    shard to about that size (a tensor named ``a3rl_standin.padding``), for tests that
    need a transfer long enough to interrupt."""
    ids = special_ids()
    out: dict[str, bytes] = {
        "README.md": (f"# Qwen/Qwen3-32B (stand-in)\n\n{NOTE}. Shape: "
                      f"{CONFIG['num_hidden_layers']} layers, hidden {CONFIG['hidden_size']}, "
                      f"vocabulary {VOCAB_SIZE}.\n").encode(),
        "configuration.json": _json({"framework": "pytorch", "task": "text-generation",
                                     "allow_remote": True, "_a3rl_standin": True}),
        "config.json": _json({**CONFIG, "bos_token_id": ids["<|endoftext|>"],
                              "eos_token_id": ids["<|im_end|>"], "_a3rl_standin": True}),
        "generation_config.json": _json({
            "bos_token_id": ids["<|endoftext|>"], "do_sample": True,
            "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
            "pad_token_id": ids["<|endoftext|>"], "temperature": 0.6, "top_k": 20,
            "top_p": 0.95, "transformers_version": CONFIG["transformers_version"],
            "_a3rl_standin": True}),
        **tokenizer_files(),
    }
    tensors = tensor_shapes()
    weight_map: dict[str, str] = {}
    total = 0
    per_shard = -(-len(tensors) // SHARDS)
    for n in range(SHARDS):
        fname = f"model-{n + 1:05d}-of-{SHARDS:05d}.safetensors"
        blobs = [(name, "F32", shape, tensor_bytes(name, shape))
                 for name, shape in tensors[n * per_shard:(n + 1) * per_shard]]
        if n == 0 and shard_bytes:
            pad = max(0, shard_bytes - sum(len(b[3]) for b in blobs))
            blobs.append(("a3rl_standin.padding", "U8", [pad],
                          hashlib.shake_256(b"padding").digest(pad)))
        out[fname] = safetensors(blobs, {"format": "pt", "a3rl_standin": NOTE})
        for name, _dtype, _shape, data in blobs:
            weight_map[name] = fname
            total += len(data)
    out["model.safetensors.index.json"] = _json({
        "metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    return out


def safetensors(tensors: list[tuple[str, str, list[int], bytes]],
                metadata: dict[str, str]) -> bytes:
    """The safetensors format: u64 header length, JSON header, then the tensor bytes."""
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    return struct.pack("<Q", len(raw)) + raw + b"".join(t[3] for t in tensors)


def digest() -> str:
    """What decides the bytes: this file and the corpus' source."""
    from a3rl.sim import datasets_fixture

    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(datasets_fixture.__file__).read_bytes())
    return h.hexdigest()[:16]


def ensure_cached(cache: Path) -> Path:
    """The unpadded model in ``cache/<digest>/`` (made once per machine and content)."""
    folder = cache / digest()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent `sim up` waits, then reads it
        if (folder / ".complete").is_file():
            return folder
        tmp = cache / f".{digest()}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        for rel, data in files().items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        (tmp / ".complete").write_text("")
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    return folder


def _json(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()
