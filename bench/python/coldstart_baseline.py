"""The Python side of the cold-start benchmark (PROTOCOL section 3): the reference's inference start-up as a
whole process, beside multi_probe_inference in the same run.
  python3 coldstart_baseline.py MODEL_DIR TEXT [--layer 33] [--probes 45]
Imports torch and transformers, loads the checkpoint as the reference does (from_pretrained, dtype "auto", on
the GPU) and its tokenizer, then runs the text with the prompt suffix and scores the layer's last token with
linear probes (random: their reading is a few microseconds either way). Prints one JSON line of seconds since
the interpreter started running this file."""
import time

start = time.time()
import argparse, json
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from baselines import SUFFIX

ap = argparse.ArgumentParser()
ap.add_argument("model"); ap.add_argument("text")
ap.add_argument("--layer", type=int, default=33)
ap.add_argument("--probes", type=int, default=45)
a = ap.parse_args()
imported = time.time()
model = AutoModelForCausalLM.from_pretrained(a.model, dtype="auto", device_map="cuda").eval()
torch.cuda.synchronize()
loaded = time.time()
tok = AutoTokenizer.from_pretrained(a.model)
probes = torch.nn.Linear(model.config.hidden_size, a.probes).cuda()
ready = time.time()
with torch.no_grad():
    ids = tok(a.text + SUFFIX, return_tensors="pt").to("cuda")
    hidden = model(**ids, output_hidden_states=True).hidden_states[a.layer][0, -1].float()
    top = torch.sigmoid(probes(hidden)).topk(5).values.tolist()
done = time.time()
print(json.dumps({"imports": round(imported - start, 3), "model": round(loaded - imported, 3),
                  "tokenizer_and_probes": round(ready - loaded, 3), "text": round(done - ready, 3),
                  "total_in_python": round(done - start, 3), "top5": [round(v, 4) for v in top]}))
