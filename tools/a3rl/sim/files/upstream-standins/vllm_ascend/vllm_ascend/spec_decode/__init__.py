# STAND-IN made by a3rl's simulator for vllm-ascend v0.14.0rc1: proposers
def get_spec_decode_method(method, vllm_config, device, runner):
    if method == "ngram":
        from vllm_ascend.spec_decode.ngram_proposer import NgramProposer

        return NgramProposer(vllm_config, device, runner)
    raise ValueError(f"Unknown speculative decoding method: {method}")
