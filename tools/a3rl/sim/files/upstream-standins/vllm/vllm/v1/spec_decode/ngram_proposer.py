# STAND-IN made by a3rl's simulator for vllm v0.14.1: n-gram proposer
class NgramProposer:
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config

    def propose(self, sampled_token_ids):
        return [[] for _ in sampled_token_ids]
