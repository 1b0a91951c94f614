# STAND-IN made by a3rl's simulator for vllm-ascend v0.14.0rc1: n-gram proposer
class NgramProposer:
    def __init__(self, vllm_config, device, runner):
        self.vllm_config = vllm_config
        self.device = device
        self.runner = runner
