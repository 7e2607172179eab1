"""What the benchmark checkpoint makers share: a model of random bf16 weights built from a transformers config on the
GPU (in bf16 directly: an fp32 copy of a large model would not fit beside it), and the Qwen 3 tokenizer files."""
import json, os, shutil
import torch
from transformers import AutoModelForCausalLM


def random_bf16_model(cfg, cls=AutoModelForCausalLM.from_config):
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        return cls(cfg).eval()


QWEN3_TOKENIZER_CONFIG = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                          "add_bos_token": False}
LLAMA3_TOKENIZER_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                           "eos_token": "<|eot_id|>"}


def write_tokenizer(out, tok, config):
    """TOK (a real tokenizer.json) into OUT, with the tokenizer_config.json beside TOK or else CONFIG."""
    shutil.copy(tok, os.path.join(out, "tokenizer.json"))
    beside = os.path.join(os.path.dirname(os.path.abspath(tok)), "tokenizer_config.json")
    if os.path.exists(beside):
        shutil.copy(beside, os.path.join(out, "tokenizer_config.json"))
        return
    json.dump(config, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)


def write_qwen3_tokenizer(out, tok):
    """TOK (the real Qwen 3 tokenizer.json) into OUT, with the tokenizer_config.json beside TOK or Qwen 3's own."""
    write_tokenizer(out, tok, QWEN3_TOKENIZER_CONFIG)
