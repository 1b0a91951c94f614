#!/bin/bash
# STAND-IN made by a3rl's simulator for the recipe's llm_rl/qwen3/build_project.sh:
# the same copies into the current directory, from the framework checkouts in
# ${FRAMEWORKS_DIR:-/workspace} (the recipe hard-codes /workspace).
SRC="${FRAMEWORKS_DIR:-/workspace}"
cp -r "$SRC/verl/verl" ./
cp -r "$SRC/verl/recipe/r1_ascend" ./
cp "$SRC/verl/scripts/converter_hf_to_mcore.py" ./
cp "$SRC"/verl/recipe/dapo/config/* ./verl/trainer/config/
cp "$SRC"/verl/recipe/dapo/*py ./verl/trainer/
mkdir "megatron"
cp -r "$SRC/Megatron-LM/megatron/core" ./megatron/core
cp -r "$SRC/MindSpeed/mindspeed" ./
cp -r "$SRC/vllm/vllm" ./
cp -r "$SRC/vllm-ascend/vllm_ascend" ./

ls -l
