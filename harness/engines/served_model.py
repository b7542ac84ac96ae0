"""The model as a server serves it: a plain Hugging Face directory whose chat template renders the harness's text.

The embedded GGUF and the warm model (base plus LoRA adapter) are written once into the model cache
(:func:`served_dir`), with :func:`served_chat_template` as their chat template; a Hugging Face directory is
served as it is once :func:`chat_template_problem` finds nothing wrong with its template. What serves them:
:mod:`harness.engines.serve` (vLLM's server) and :mod:`harness.engines.vllm_offline` (its in-process engine).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.chat import supports_tools, tool_system_prompt
from harness.core.messages import tool_response_text
from harness.core.protocol import CALL_CLOSE, CALL_OPEN
from harness.core.toolenv import PROFILES, PROJECT, ToolEnv
from harness.engines.models import cache_dir, file_digest, load_model, resolve_spec, save_to_cache

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedTokenizerBase

#: bump when the served directory's contents change (chat template, generation config)
SERVED_FORMAT = "3"


def model_spec(name: str | None) -> str | None:
    """A model spec from what a user writes: ``embedded/smollm2-tools`` and ``smollm2-tools`` are the same."""
    if name is None:
        return None
    return name.removeprefix("embedded/")


def served_dir(name: str | None = None, *, dtype: str = "bfloat16") -> Path:
    """The Hugging Face directory to serve for a model spec (see :mod:`harness.engines.models`).

    A Hugging Face directory is served as it is. The embedded GGUF and the warm model
    (base plus LoRA adapter) are written once as a plain directory under
    ``<model cache>/served/``, keyed by their source files, the dtype and transformers' version,
    with :func:`served_chat_template` as their chat template and sampling on by default (a request's
    temperature 0 turns it off).
    """
    target, write = served_target(name, dtype=dtype)
    if write is not None:
        write()
    return target


def served_target(name: str | None = None, *, dtype: str = "bfloat16") -> tuple[Path, Callable[[], None] | None]:
    """:func:`served_dir`'s directory, and what writes it when it is not written yet (None when it is)."""
    spec = model_spec(name)
    kind, path = resolve_spec(spec)
    if kind == "hf":
        return path, None
    target = cache_dir() / "served" / _served_key(spec, kind, path, dtype)
    if (target / "config.json").is_file():
        return target, None

    def write() -> None:
        import torch

        model, tokenizer = load_model(spec, dtype=getattr(torch, dtype))
        tokenizer.chat_template = served_chat_template(tokenizer, env=PROJECT)  # the served models are the project's
        _sample_as_requested(model.generation_config)
        save_to_cache(model, tokenizer, target)

    return target, write


def _sample_as_requested(config: GenerationConfig) -> None:
    """Sampling defaults under which a request's ``temperature`` and ``top_p`` mean what they mean to the
    embedded provider: servers start from the model's generation config (vLLM takes its ``top_k``,
    50 in transformers' default, as the request's default), which the embedded provider does not."""
    config.do_sample = True
    config.top_k = 0


def served_chat_template(tokenizer: PreTrainedTokenizerBase, *, env: ToolEnv) -> str:
    """A chat template that renders an OpenAI request the way :func:`harness.core.chat.render` renders a trajectory.

    For a model whose own template knows no tools (SmolLM2's), an OpenAI-compatible server would
    drop the tool description and render tool calls and results its own way, so a served model
    would see other text than the embedded provider shows it (and than it was trained on). This
    template wraps the model's own: when the request has tools, the description of the tool it
    names (its tool environment's; ``env``'s for a name no environment has) joins the system
    message (or becomes it); an assistant turn's call is written after its content in the
    Hermes form (``harness.core.protocol.serialize_call``); a tool result becomes a user turn in
    ``<tool_response>`` tags. A template that already renders tools is kept as it is.
    """
    from harness.core.chat import chat_template_source

    original = chat_template_source(tokenizer)
    if supports_tools(tokenizer):
        return original
    before, after = tool_response_text("\x00").split("\x00")
    # the description of the tool the request names (its tool environment's), ``env``'s for any other name
    choose = "".join(
        "{%- if tool_name == "
        + json.dumps(other.tool_name)
        + " -%}{%- set tool_prompt -%}{% raw %}"
        + tool_system_prompt(other)
        + "{% endraw %}{%- endset -%}{%- endif -%}\n"
        for other in PROFILES.values()
        if other.tool_name != env.tool_name
    )
    return (
        "{%- set tool_prompt -%}{% raw %}" + tool_system_prompt(env) + "{% endraw %}{%- endset -%}\n"
        "{%- if tools -%}\n"
        "{%- set tool_name = (tools[0]['function'] if 'function' in tools[0] else tools[0])['name'] -%}\n"
        + choose
        + "{%- endif -%}\n"
        "{%- set ns = namespace(out=[]) -%}\n"
        "{%- if tools -%}\n"
        "  {%- if messages and messages[0]['role'] == 'system' -%}\n"
        "    {%- set content = messages[0]['content'] or '' -%}\n"
        "    {%- if tool_prompt in content -%}{%- set merged = content -%}\n"
        "    {%- elif content | trim -%}{%- set merged = content | trim('right') + '\\n\\n' + tool_prompt -%}\n"
        "    {%- else -%}{%- set merged = tool_prompt -%}{%- endif -%}\n"
        "    {%- set ns.out = [{'role': 'system', 'content': merged}] -%}\n"
        "    {%- set rest = messages[1:] -%}\n"
        "  {%- else -%}{%- set ns.out = [{'role': 'system', 'content': tool_prompt}] -%}"
        "{%- set rest = messages -%}{%- endif -%}\n"
        "{%- else -%}{%- set rest = messages -%}{%- endif -%}\n"
        "{%- for m in rest -%}\n"
        "  {%- if m['role'] == 'assistant' and m.get('tool_calls') -%}\n"
        "    {%- set text = namespace(value=m['content'] or '') -%}\n"
        "    {%- for call in m['tool_calls'] -%}{%- set f = call.get('function', call) -%}\n"
        "      {%- set text.value = text.value + ('\\n' if text.value else '') + '" + CALL_OPEN + "\\n' + "
        "'{\"name\": ' + (f['name'] | tojson) + ', \"arguments\": ' + (f['arguments'] | tojson) + '}' + "
        "'\\n" + CALL_CLOSE + "' -%}\n"
        "    {%- endfor -%}\n"
        "    {%- set ns.out = ns.out + [{'role': 'assistant', 'content': text.value}] -%}\n"
        "  {%- elif m['role'] == 'tool' -%}\n"
        "    {%- set ns.out = ns.out + [{'role': 'user', 'content': "
        + repr(before)
        + " + (m['content'] or '') + "
        + repr(after)
        + "}] -%}\n"
        "  {%- else -%}{%- set ns.out = ns.out + [{'role': m['role'], 'content': m['content'] or ''}] -%}\n"
        "  {%- endif -%}\n"
        "{%- endfor -%}\n"
        "{%- set messages = ns.out -%}\n" + original
    )


def _served_key(spec: str | None, kind: str, path: Path, dtype: str) -> str:
    """A directory name that changes when the content of the model's source files, the dtype or transformers'
    version change (the same files in another clone share it)."""
    import transformers

    files = sorted(p for p in ([path] if path.is_file() else path.iterdir()) if p.is_file())
    ident = [SERVED_FORMAT, kind, dtype, transformers.__version__]
    ident += [f"{p.name}:{file_digest(p)}" for p in files]
    if kind == "adapter":  # the warm model sits on the embedded GGUF: a new base is a new model
        ident.append(file_digest(resolve_spec(None)[1]))
    digest = hashlib.sha256("|".join(ident).encode()).hexdigest()[:16]
    return f"{Path(spec or 'smollm2').name.removesuffix('.gguf')}-{dtype}-{digest}"


def chat_template_problem(model_dir: Path) -> str | None:
    """Why ``model_dir`` cannot be served with the tool protocol, or None when it can.

    A server renders every request with the directory's chat template: without one, vLLM refuses
    chat requests; with one that ignores ``tools``, the model never sees the tool protocol.
    """
    config = model_dir / "tokenizer_config.json"
    template: Any = None
    if (model_dir / "chat_template.jinja").is_file():
        template = (model_dir / "chat_template.jinja").read_text(encoding="utf-8")
    elif config.is_file():
        try:
            template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        except ValueError as exc:
            return f"{config} is not valid JSON ({exc})"
    if not template:
        return (
            f"{model_dir} has no chat template (neither chat_template.jinja nor tokenizer_config.json's "
            "chat_template): a server could not render a conversation. Serve it by spec instead "
            "(python -m harness serve smollm2-tools) or add the template its model card gives"
        )
    if "tools" not in str(template):
        return (
            f"{model_dir}'s chat template ignores `tools`: a served model would never see the tool protocol. "
            "Serve the model by spec (python -m harness serve <spec> writes a directory whose template renders "
            "harness.core.chat.render's text) or use a template that renders tools"
        )
    return None


def served_name(name: str | None) -> str:
    """The name a server of the project's serves a model spec under (``smollm2-tools``, or a path's last part):
    what requests and logs name, instead of a directory of this machine."""
    return Path(model_spec(name) or "smollm2").name.removesuffix(".gguf")
