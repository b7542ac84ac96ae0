#!/usr/bin/env bash
# The GPU environments' locks: one per role whose pins conflict, resolved by uv from PyPI's metadata for Linux
# x86_64, Python 3.11, with PyPI's CUDA wheels of torch (no GPU needed to resolve). docs/training.md says why four.
#
#   bash packaging/gpu/lock.sh           re-resolve every lock, keeping each pin that still resolves
#   bash packaging/gpu/lock.sh --check   re-resolve into a scratch copy; fail, naming the lock and the lines, when
#                                        one no longer resolves, no longer matches its inputs (pyproject.toml, *.in)
#                                        or pins a package with no wheel for the platform (pure-Python sdists aside)
#
# uv is taken from PATH, else installed into a scratch virtualenv that is removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode="${1:-write}"
[[ "$mode" == write || "$mode" == --check ]] || { echo "usage: $0 [--check]" >&2; exit 2; }

scratch="$(mktemp -d -t cleaner-gpu-lock.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
uv="$(command -v uv || true)"
if [[ -z "$uv" ]]; then
  python3 -m venv "$scratch/uv" && "$scratch/uv/bin/pip" install --quiet uv && uv="$scratch/uv/bin/uv"
fi

# Every lock is for manylinux_2_34 (glibc 2.34 or newer): SGLang's and llguidance's wheels need it.
platform=x86_64-manylinux_2_34
# Pure-Python source distributions that a lock may hold (pip builds them without a compiler); any other package
# must have a wheel for the platform
sdists=(deepspeed transformers-stream-generator)
# role | inputs | extra uv options
roles=(
  "harness|pyproject.toml --extra serve|"
  "engine-sglang|packaging/gpu/engine-sglang.in|"
  "engine-vllm|packaging/gpu/engine-vllm.in|"
  # flash-attn is a source distribution that compiles against the installed torch: installed after the lock,
  # with --no-build-isolation (docs/training.md)
  "trainer|pyproject.toml --extra serve packaging/gpu/trainer.in|--no-emit-package flash-attn"
)
failed=0
for entry in "${roles[@]}"; do
  IFS='|' read -r role inputs extra <<<"$entry"
  lock="packaging/gpu/$role.txt"
  out="$scratch/$role.txt"
  [[ -f "$lock" ]] && cp "$lock" "$out"
  # shellcheck disable=SC2086  # inputs and extra are word lists
  if ! "$uv" pip compile --quiet --python-version 3.11 --python-platform "$platform" --index-url https://pypi.org/simple \
      --custom-compile-command "bash packaging/gpu/lock.sh" $extra $inputs -o "$out" 2>"$scratch/$role.err"; then
    echo "FAIL $lock: its inputs ($inputs) no longer resolve for $platform, Python 3.11:" >&2
    cat "$scratch/$role.err" >&2
    failed=1
    continue
  fi
  # what pip would install from the lock: a wheel for the platform of every package but the pure-Python sdists
  if ! "$uv" pip install --quiet --dry-run --no-deps --only-binary :all: "${sdists[@]/#/--no-binary=}" \
      --python "$(command -v python3)" --python-version 3.11 --python-platform "$platform" \
      --index-url https://pypi.org/simple --target "$scratch/target" -r "$out" 2>"$scratch/$role.err"; then
    echo "FAIL $lock: a pinned package has no wheel for $platform, Python 3.11:" >&2
    cat "$scratch/$role.err" >&2
    failed=1
    continue
  fi
  if [[ "$mode" == --check ]]; then
    if ! diff -u "$lock" "$out" >"$scratch/$role.diff"; then
      echo "FAIL $lock is out of date with its inputs ($inputs); bash packaging/gpu/lock.sh rewrites it:" >&2
      cat "$scratch/$role.diff" >&2
      failed=1
    else
      echo "ok   $lock resolves, matches $inputs and has a wheel for every package"
    fi
  else
    cp "$out" "$lock"
    echo "wrote $lock"
  fi
done
exit "$failed"
