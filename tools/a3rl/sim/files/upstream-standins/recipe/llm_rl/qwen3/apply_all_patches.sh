#!/bin/bash
# STAND-IN made by a3rl's simulator for the recipe's llm_rl/qwen3/apply_all_patches.sh:
# every patches/**/*.patch in `sort -V` order with `git apply --ignore-whitespace`,
# stopping at the first failure. Like the recipe's, it copies nothing else: the plain
# .py files beside the patches stay there, and the patched trees import them as
# `patches.verl...` from this folder. Run it in llm_rl/qwen3 of a recipe checkout:
# the patches' paths are relative to the top of the recipe repository.
set -o pipefail

echo "Applying patches in numerical order..."

find ./patches -type f -name "*.patch" | \
sort -V | \
while IFS= read -r PATCH_FILE; do
    [[ -z "$PATCH_FILE" ]] && continue
    PATCH_REL_PATH=$(realpath --relative-to=. "$PATCH_FILE")

    echo -n "Applying $PATCH_REL_PATH ... "

    git apply -v --ignore-whitespace "$@" "$PATCH_REL_PATH"

    if [ $? -ne 0 ]; then
        echo "[FAIL]: $PATCH_REL_PATH" >&2
        exit 1
    fi
    echo "[SUCCESS]: $PATCH_REL_PATH"
done || exit 1
