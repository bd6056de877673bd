/**
 * vLLM-shaped hidden-state folders written by an independent writer: NumPy, with the safetensors layout built by
 * hand (struct + json), bfloat16 rounded to nearest even on the float32 bits. Each row of an hsm store becomes
 * one request file whose last prompt token carries the row's states; the writer also saves, as plain
 * `L###.npy` files, the float16 values NumPy's own conversion gives, which an adoption must reproduce.
 */
import { python } from "./numpy.js";

const WRITER = String.raw`
import json, os, struct, sys
import numpy as np

store, out, expected, requests, dtype, special = sys.argv[1:7]
idx = json.load(open(os.path.join(store, "index.json")))
layers, qids, d = idx["layers"], idx["query_ids"], idx["d_model"]
data = {l: np.load(os.path.join(store, "L%03d.npy" % l)) for l in layers}
ids = [0] + [l + 1 for l in layers]  # vLLM's ids: the embeddings, then the stream after l + 1 blocks
rng = np.random.default_rng(7)
os.makedirs(out)
os.makedirs(expected)

def bf16_bits(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

def save(path, tensors):
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, dt, shape, b in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

want = {l: np.zeros((len(qids), d), np.float16) for l in layers}
lines = []
for i, q in enumerate(qids):
    prompt = int(rng.integers(1, 6))
    generated = int(rng.integers(1, 4)) if i % 3 == 0 else 0
    x = rng.normal(0, 3, size=(prompt + generated, len(ids), d)).astype(np.float32)
    for j, l in enumerate(layers):
        row = data[l][i].astype(np.float32)
        if dtype != "F16":
            row = row * np.float32(1 + 1e-3 * (j + 1)) + np.float32(1e-4)
        if special == "1" and i < 4:
            row[:4] = np.array([1e6, -7e4, 3e-9, np.nan], np.float32)[[(i + k) % 4 for k in range(4)]]
        x[prompt - 1, j + 1] = row
    if dtype == "BF16":
        bits = bf16_bits(x)
        value, blob = (bits.astype(np.uint32) << 16).view(np.float32), bits.tobytes()
    elif dtype == "F16":
        value = x.astype(np.float16)
        blob = value.tobytes()
    else:
        value, blob = x, x.tobytes()
    for j, l in enumerate(layers):
        want[l][i] = value[prompt - 1, j + 1].astype(np.float32).astype(np.float16)
    tokens = rng.integers(0, 50000, size=prompt + generated).astype(np.int64)
    name = "req-%d-%s" % (i, "abc"[i % 3])
    save(os.path.join(out, name + ".safetensors"),
         [("hidden_states", dtype, x.shape, blob), ("token_ids", "I64", tokens.shape, tokens.tobytes())])
    line = {"query_id": q}
    if i % 3 == 0: line["request_id"] = name
    elif i % 3 == 1: line["hidden_states_path"] = "/dev/shm/hs/" + name + ".safetensors"
    else: line["file"] = name + ".safetensors"
    if generated:
        if i % 2: line["prompt_tokens"] = prompt
        else: line["prompt_token_ids"] = [int(t) for t in tokens[:prompt]]
    lines.append(line)
rng.shuffle(lines)
with open(requests, "w") as f:
    for line in lines: f.write(json.dumps(line) + "\n")
for l in layers:
    np.save(os.path.join(expected, "L%03d.npy" % l), want[l])
`;

/**
 * Writes, from the hsm store `store`, a vLLM folder `out` (hidden_states in `dtype`, layer ids 0 and l + 1 for every
 * stored l; every third request with generated tokens after its prompt), its requests map `requests` (shuffled,
 * naming files by request_id, hidden_states_path or file), and in `expected` the L###.npy files NumPy's float16 of
 * the same states makes. `special` puts ±inf-bound, subnormal-bound and NaN values into the first rows.
 */
export function writeVllmFolder(
  o: { store: string; out: string; expected: string; requests: string },
  dtype: "BF16" | "F16" | "F32",
  special = false,
): void {
  python(WRITER, o.store, o.out, o.expected, o.requests, dtype, special ? "1" : "0");
}
