"""How far one capture's activations are from another's, layer by layer: the FP8 benchmark's products in FP8
against the same checkpoint's weights decoded for each product (the dequantized weights' numbers).
Usage: python3 compare_captures.py DIR_A DIR_B  (layer_{L}_activations.h5 in each; prints one JSON line a layer)"""
import glob
import json
import os
import sys

import h5py
import numpy as np


def main(a_dir, b_dir):
    for a_path in sorted(glob.glob(os.path.join(a_dir, "layer_*_activations.h5"))):
        name = os.path.basename(a_path)
        with h5py.File(a_path, "r") as a_file, h5py.File(os.path.join(b_dir, name), "r") as b_file:
            # The reference's layout: train, val and test groups, each with its activations [examples, hidden].
            a = np.concatenate([a_file[s]["activations"][:] for s in ("train", "val", "test")]).astype(np.float64)
            b = np.concatenate([b_file[s]["activations"][:] for s in ("train", "val", "test")]).astype(np.float64)
        difference = np.linalg.norm(a - b, axis=1) / np.maximum(np.linalg.norm(b, axis=1), 1e-30)
        cosine = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
        print(json.dumps({"file": name, "rows": len(a), "median_relative_l2": float(np.median(difference)),
                          "max_relative_l2": float(difference.max()), "min_cosine": float(cosine.min())}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
