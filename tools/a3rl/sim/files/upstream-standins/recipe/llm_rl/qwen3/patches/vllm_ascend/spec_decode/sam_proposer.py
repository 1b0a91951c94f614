# STAND-IN made by a3rl's simulator for the recipe's
# patches/vllm_ascend/spec_decode/sam_proposer.py: a plain file beside the patches
# (the recipe's vllm_ascend patch imports it as patches.vllm_ascend...).
"""The SAM (suffix automaton) speculative-decoding proposer."""


class SAMDecodingProposer:
    def __init__(self, vllm_config, device, runner):
        self.vllm_config = vllm_config
        self.device = device
        self.runner = runner

    def propose(self, sampled_token_ids):
        return [[] for _ in sampled_token_ids]
