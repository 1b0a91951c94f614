# STAND-IN made by a3rl's simulator for the recipe's
# patches/verl/utils/hybrid_data_parallel/hdp.py: a plain file beside the patches,
# imported as patches.verl.utils.hybrid_data_parallel.hdp (megatron/0002) and
# edited by verl/0015, as the recipe's verl 0015 edits the real one.
"""Hybrid data parallel: pack sequences into buckets of at most max_tokens."""

BINPACK = False


def pack_sequences_into_buckets(lengths, max_tokens):
    buckets, current, used = [], [], 0
    for i, n in enumerate(lengths):
        if current and used + n > max_tokens:
            buckets.append(current)
            current, used = [], 0
        current.append(i)
        used += n
    return buckets + ([current] if current else [])
