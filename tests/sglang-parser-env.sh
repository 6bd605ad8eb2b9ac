#!/usr/bin/env bash
# Build a CPU-only virtualenv in which SGLang's own argument parser imports (no GPU needed), so the
# tests can check rendered commands and exported scripts against the real `sglang serve` parser:
#   bash tests/sglang-parser-env.sh [DIR]   (default DIR: .venv-sglang)
#   TUNER_TEST_SGLANG_PYTHON=DIR/bin/python bash tests/check.sh
# Only parse-level SGLang is needed (reference: sglang.md §7): the wheel without its dependencies,
# a CPU torch, triton and the small packages `sglang.srt.server_args` imports.
set -euo pipefail
dir=${1:-.venv-sglang}
version=${SGLANG_VERSION:-0.5.23}
python3 -m venv "$dir"
"$dir/bin/python" -m pip install -q --upgrade pip
"$dir/bin/python" -m pip install -q torch==2.13.0
"$dir/bin/python" -m pip install -q --no-deps "sglang==$version"
"$dir/bin/python" -m pip install -q triton numpy orjson psutil pybase64 requests packaging pillow starlette \
  typing_extensions msgspec pydantic pyzmq tqdm ipython aiohttp pyyaml
"$dir/bin/python" -c "import sglang.srt.server_args, sglang.srt.utils.server_args_config_parser, sglang; print('SGLang', sglang.__version__, 'parser ready')"
