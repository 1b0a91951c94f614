// STAND-IN made by a3rl's simulator for catlass (a vllm-ascend submodule).
#pragma once
#define CATLASS_VERSION "stand-in"
