# STAND-IN made by a3rl's simulator for vllm v0.14.1: EAGLE proposer
class EagleProposer:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.device = device

    def propose(self, target_token_ids):
        raise NotImplementedError("stand-in")
