# STAND-IN made by a3rl's simulator for vllm-ascend v0.14.0rc1: package root
def register():
    return "vllm_ascend.platform.NPUPlatform"
