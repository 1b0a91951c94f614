# STAND-IN made by a3rl's simulator for vllm-ascend v0.14.0rc1: NPU model runner
class NPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.device = device
        self.speculative_config = vllm_config.speculative_config
        self.use_spec_decode = self.speculative_config is not None
        self.drafter = None

    def propose_draft_token_ids(self, valid_sampled_token_ids):
        if not self.use_spec_decode:
            return None
        return self.drafter.propose(valid_sampled_token_ids)
