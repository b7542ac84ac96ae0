"""A real, tiny Llama model with LoRA for the training tests (randomly initialised: nothing is downloaded)."""

from __future__ import annotations


def tiny_lora_model():
    """A real (tiny, randomly initialised) Llama model with LoRA on every linear layer."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True,
    )  # fmt: skip
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    for name, p in model.named_parameters():  # LoRA B starts at zero; make the adapter matter
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    return model
