"""The masked-capture benchmark's two datasets (masked_capture_examples_per_s): the protocol's texts as one-turn
conversations (the text as the user's message, a fixed 20-word reply) for capture_activations --mask assistant, and
the same conversations rendered by the model's chat template (transformers' apply_chat_template, the leading BOS
dropped: capture adds it) as plain texts.
  python3 masked_dataset.py DATASET.jsonl MODEL_DIR CHATS.jsonl PLAIN.jsonl"""
import json
import sys

from transformers import AutoTokenizer

REPLY = ("Thank you for sharing this with me; I will think it over carefully and answer you with care "
         "tomorrow morning.")


def main():
    dataset, model, chats_path, plain_path = sys.argv[1:5]
    tokenizer = AutoTokenizer.from_pretrained(model)
    with open(dataset, encoding="utf-8") as source, open(chats_path, "w", encoding="utf-8") as chats, \
            open(plain_path, "w", encoding="utf-8") as plain:
        for line in source:
            row = json.loads(line)
            messages = [{"role": "user", "content": row.pop("text").strip()}, {"role": "assistant", "content": REPLY}]
            chats.write(json.dumps({"messages": messages, **row}) + "\n")
            text = tokenizer.apply_chat_template(messages, tokenize=False)
            if tokenizer.bos_token and text.startswith(tokenizer.bos_token):
                text = text[len(tokenizer.bos_token):]
            plain.write(json.dumps({"text": text, **row}) + "\n")


if __name__ == "__main__":
    main()
